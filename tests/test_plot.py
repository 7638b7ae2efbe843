"""tg.utils.plot's line plots, checked as a reader sees them. The built-in SVG is parsed (tick labels are
1/2/5 x 10^k numbers covering the data, in order, at positions that map each drawn point back to its
value within a pixel; the legend names every series) and rasterised with resvg (the picture is not blank,
each series' colour is inside the frame, every tick label and legend name has glyph pixels, no label
touches another or runs off the canvas), over generated cases: random series of random lengths and
magnitudes, and the edge cases (empty, one point, constant, NaN/inf, 1e-12..1e12, x not from 0); and
again at float64's ends: seeded series near its largest value (+-1.8e308), of denormals (5e-324), near
its smallest normal, and of huge and tiny values mixed, on linear and log axes. Labels and points are
compared exactly (as Fractions), since float() would round 4.5e-324 to a denormal and 2e+308 to inf.
The matplotlib backend is checked for files that resvg and PIL accept."""
from __future__ import annotations

import importlib.util
import io
import math
import pathlib
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from fractions import Fraction

import pytest
import resvg_py
from PIL import Image, ImageFont

from tg.utils import plot
from tg.utils.plot import line_plot

NS = "{http://www.w3.org/2000/svg}"
SUFFIX = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
TICK_FONT = 12
MAX, NORMAL_MIN, TINY = sys.float_info.max, sys.float_info.min, math.ulp(0.0)   # 1.8e308, 2.2e-308, 5e-324


def find_font() -> str:
    """DejaVuSans.ttf, which the SVG names first: the system's, else the copy matplotlib ships."""
    roots = [pathlib.Path(p) for p in ("/usr/share/fonts", "/usr/local/share/fonts", "~/.fonts",
                                       "~/.local/share/fonts", "/Library/Fonts", "C:/Windows/Fonts")]
    spec = importlib.util.find_spec("matplotlib")
    if spec and spec.submodule_search_locations:             # found without importing matplotlib
        roots += [pathlib.Path(p) / "mpl-data" / "fonts" for p in spec.submodule_search_locations]
    for root in roots:
        found = sorted(root.expanduser().rglob("DejaVuSans.ttf")) if root.expanduser().is_dir() else []
        if found:
            return str(found[0])
    pytest.fail("no DejaVuSans.ttf found under " + ", ".join(map(str, roots)) + ": resvg draws no text "
                "without it; install fonts-dejavu-core (apt) or matplotlib (pip install -e '.[dev]')")


FONT = find_font()
MEASURE = ImageFont.truetype(FONT, TICK_FONT)


def render(svg: str) -> Image.Image:
    # resvg maps the generic sans-serif to Arial and draws nothing without it: name the font outright
    # and dpi: at resvg_py's default of 0 a size in pt (matplotlib's) is 0 px, "an invalid size"
    png = resvg_py.svg_to_bytes(svg_string=svg, font_files=[FONT], sans_serif_family="DejaVu Sans", dpi=96)
    return Image.open(io.BytesIO(bytes(png))).convert("RGBA")


def number(label: str) -> Fraction:
    """A tick label's value, exactly: 0.25, 2.5k, 1e-05, 2e+308, 4.5e-324."""
    return Fraction(label[:-1]) * SUFFIX[label[-1]] if label[-1] in SUFFIX else Fraction(label)


def log10(v: float | Fraction) -> float:
    """log10 of a positive number, also past float64's range (2e+308, 1e-330)."""
    f = Fraction(v)
    return math.log10(f.numerator) - math.log10(f.denominator)


def mantissa(v: Fraction) -> Fraction:
    """v / 10^k in [1, 10), for v > 0."""
    k = math.floor(log10(v))
    while v / Fraction(10) ** k >= 10:
        k += 1
    while v / Fraction(10) ** k < 1:
        k -= 1
    return v / Fraction(10) ** k


def points_of(element: ET.Element) -> list[tuple[float, float]]:
    if element.tag == NS + "circle":
        return [(float(element.get("cx", "")), float(element.get("cy", "")))]
    return [(float(a), float(b)) for a, b in (p.split(",") for p in element.get("points", "").split())]


def parse(svg: str) -> dict:
    root = ET.fromstring(svg)
    ticks = {}
    for axis in ("xtick", "ytick"):
        ticks[axis] = [(g.find(NS + "line"), g.find(NS + "text")) for g in root.iter(NS + "g")
                       if g.get("class") == axis]
    legend = next(g for g in root.iter(NS + "g") if g.get("class") == "legend") if root.find(
        f".//{NS}g[@class='legend']") is not None else None
    return {
        "size": (float(root.get("width", "")), float(root.get("height", ""))),
        "x": [(float(line.get("x1", "")), text.text or "") for line, text in ticks["xtick"]],
        "y": [(float(line.get("y1", "")), text.text or "") for line, text in ticks["ytick"]],
        "series": {g.get("data-name"): (g.get("stroke"), [points_of(e) for e in g])
                   for g in root.iter(NS + "g") if g.get("class") == "series"},
        "legend": [(t.text, float(t.get("x", "")), float(t.get("y", ""))) for t in legend.iter(NS + "text")]
        if legend is not None else [],
        "legend_colors": [ln.get("stroke") for ln in legend.iter(NS + "line")] if legend is not None else [],
        "texts": {t.get("class"): t.text for t in root.iter(NS + "text") if t.get("class")},
        "frame": next(tuple(float(r.get(k, "")) for k in ("x", "y", "width", "height"))
                      for r in root.iter(NS + "rect") if r.get("stroke") == "#444"),
    }


def runs_of(points) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if math.isfinite(x) and math.isfinite(y):
            runs[-1].append((x, y))
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def noisy_curve(rng: random.Random, n: int, x0: float, dx: float, scale: float, shift: float):
    return [(x0 + i * dx, shift + scale * (math.exp(-i / max(n / 3, 1)) + 0.1 * rng.random()))
            for i in range(n)]


def generated_cases():
    rng = random.Random(2024)
    cases = []
    for k in range(30):
        log_y = k % 3 == 0
        series = {}
        for name in ("train", "eval", "lr", "grad norm")[:rng.randint(1, 4)]:
            n = rng.choice([0, 1, 2, 3, rng.randint(4, 40), rng.randint(40, 600)])
            scale = 10 ** rng.uniform(-12, 12)
            shift = 0.0 if log_y else scale * rng.choice([0, -2, 5])
            x0, dx = rng.choice([0, 1, 1000, 123456, -50, 0.001]), rng.choice([1, 10, 0.01, 250])
            points = noisy_curve(rng, n, x0, dx, scale, shift)
            for _ in range(rng.randint(0, 3) if n > 3 else 0):       # a gap from a diverged or missing step
                i = rng.randrange(n)
                points[i] = (points[i][0], rng.choice([math.nan, math.inf, -math.inf]))
            series[name] = points
        cases.append(pytest.param((series, log_y), id=f"random{k}{'-log' if log_y else ''}"))
    return cases


EDGE = {
    "no-series": ({}, False),
    "empty": ({"train": []}, False),
    "single-point": ({"train": [(7, 0.25)]}, False),
    "single-point-log": ({"train": [(7, 0.25)]}, True),
    "constant": ({"train": [(i, 3.0) for i in range(50)], "eval": [(0, 3.0), (49, 3.0)]}, False),
    "constant-zero": ({"train": [(i, 0.0) for i in range(20)]}, False),
    "constant-log": ({"train": [(i, 10.0) for i in range(20)]}, True),
    "nan-inf": ({"train": [(0, 1.0), (1, math.nan), (2, 0.5), (3, math.inf), (4, 0.4), (5, 0.3)],
                 "eval": [(math.nan, 1.0), (2, -math.inf)]}, False),
    "tiny": ({"grad": [(i, 1e-7 * (1 + math.sin(i))) for i in range(100)]}, False),
    "huge": ({"tokens": [(i, 3.2e11 * i) for i in range(100)]}, False),
    "x-from-5000": ({"train": [(5000 + 10 * i, 2.0 / (1 + i)) for i in range(80)]}, False),
    "x-fractional-epochs": ({"train": [(0.37 + 0.01 * i, i % 7) for i in range(60)]}, False),
    "negative": ({"reward": [(i, -100 + 3 * i) for i in range(60)]}, False),
    "log-24-decades": ({"train": [(i, 10.0 ** (-12 + i)) for i in range(25)]}, True),
    "log-narrow": ({"train": [(i, 0.4 + 0.01 * i) for i in range(30)]}, True),
    "long-name": ({"a rather long series name: eval/perplexity": [(0, 9.0), (1, 8.0)]}, False),
}


def extreme(rng: random.Random, kind: str) -> float:
    """A positive value of one kind: near float64's largest, a denormal, near its smallest normal, or
    anywhere from 1e-323 to 1e308 on a log scale."""
    if kind == "huge":
        return rng.choice([MAX, rng.uniform(0.5, 1.0) * MAX, 10 ** rng.uniform(300, 308)])
    if kind == "denormal":
        return rng.choice([TINY, rng.randint(1, 2 ** rng.randint(1, 52) - 1) * TINY])
    if kind == "tiny":
        return NORMAL_MIN * rng.uniform(1, 1e3)
    return 10 ** rng.uniform(-323, 308)


def extreme_cases():
    """Seeded series at float64's ends: huge, denormal, tiny, mixed; y (and sometimes x) signed on a linear
    axis, with zeros and NaN/inf gaps now and then."""
    rng = random.Random(308)
    mixes = [["huge"], ["denormal"], ["tiny"], ["huge", "denormal"], ["huge", "tiny", "denormal", "any"],
             ["any"]]
    cases = []
    for k in range(36):
        log_y, kinds = k % 2 == 1, mixes[k // 2 % len(mixes)]
        series = {}
        for name in ("train", "eval", "grad norm")[:rng.randint(1, 3)]:
            n = rng.choice([1, 2, 3, rng.randint(4, 60)])
            ys = [extreme(rng, rng.choice(kinds)) for _ in range(n)]
            if not log_y and rng.random() < 0.6:                  # both signs, and 0
                ys = [rng.choice([-1.0, 1.0, 1.0, 0.0]) * y for y in ys]
            xs: list[float] = list(range(n))
            if rng.random() < 0.4:                                # x at the ends too
                xs = sorted(rng.choice([-1.0, 1.0]) * extreme(rng, rng.choice(kinds)) for _ in range(n))
            points = list(zip(xs, ys))
            if n > 3 and rng.random() < 0.3:
                i = rng.randrange(n)
                points[i] = (points[i][0], rng.choice([math.nan, math.inf, -math.inf]))
            series[name] = points
        name = f"extreme{k}-{'+'.join(kinds)}{'-log' if log_y else ''}"
        cases.append(pytest.param((series, log_y), id=name))
    return cases


EXTREME = {
    "max-both-signs": ({"train": [(0, MAX), (1, -MAX)]}, False),
    "1e308-both-signs": ({"train": [(0, 1e308), (1, -1e308)]}, False),
    "1.7e308-to-1e308": ({"train": [(0, 1.7e308), (1, 1e308)]}, False),
    "constant-max": ({"train": [(i, MAX) for i in range(5)], "eval": [(2, -MAX)]}, False),
    "constant-neg-max": ({"train": [(i, -MAX) for i in range(5)]}, False),
    "x-max-both-signs": ({"train": [(-MAX, 1.0), (0.0, 3.0), (MAX, 2.0)]}, False),
    "one-ulp-at-1e308": ({"train": [(0, 1e308), (1, math.nextafter(1e308, math.inf))]}, False),
    "x-64-past-1e17": ({"train": [(1e17, 1.0), (1e17 + 64, 2.0)]}, False),
    "denormals": ({"train": [(i, i * TINY) for i in range(10)]}, False),
    "constant-denormal": ({"train": [(0, TINY), (1, TINY)]}, False),
    "mixed-huge-tiny": ({"train": [(0, 1e308), (1, 1e-308), (2, TINY), (3, -1e-300), (4, 0.0)]}, False),
    "log-denormal": ({"train": [(1, 5e-324), (2, 1.0)]}, True),
    "log-denormals": ({"train": [(i, i * TINY) for i in range(1, 4)]}, True),
    "log-one-denormal": ({"train": [(1, TINY)]}, True),
    "log-full-range": ({"train": [(0, TINY), (1, MAX)], "eval": [(0, 1.0)]}, True),
    "log-max": ({"train": [(0, MAX)]}, True),
    "log-near-max": ({"train": [(0, 1e308), (1, MAX)]}, True),
    "log-mixed-huge-tiny": ({"train": [(0, 1e308), (1, 1e-308), (2, TINY), (3, 1.0)]}, True),
}


@pytest.fixture(params=generated_cases() + [pytest.param(c, id=n) for n, c in EDGE.items()] + extreme_cases()
                + [pytest.param(c, id=n) for n, c in EXTREME.items()])
def drawn(request, tmp_path):
    series, log_y = request.param
    path = tmp_path / "plot.svg"
    line_plot(path, series, title="loss", log_y=log_y, backend="svg")
    svg = path.read_text()
    return series, log_y, svg, parse(svg)


def check_axis(ticks: list[tuple[float, str]], data: list[float], log: bool, increasing_px: bool) -> None:
    values = [number(label) for _, label in ticks]
    assert len(values) >= 2, f"expected at least 2 labelled ticks, got {ticks}"
    assert values == sorted(values) and len(set(values)) == len(values), f"tick labels out of order: {ticks}"
    pixels = [p for p, _ in ticks]
    assert pixels == sorted(pixels, reverse=not increasing_px), f"tick positions not monotonic: {ticks}"
    assert len(set(pixels)) == len(pixels), f"ticks drawn on one another: {ticks}"
    if data:
        lo, hi = Fraction(min(data)), Fraction(max(data))
        tol = (values[-1] - values[0]) / 10 ** 9
        assert values[0] <= lo + tol and values[-1] >= hi - tol, (ticks, min(data), max(data))
    if log:                               # decades; 2s and 5s too under ~2 decades, every 1..9 under one
        within_decade = bool(data) and hi < 10 * lo
        for v in values:
            allowed = range(1, 10) if within_decade else (1, 2, 5)
            assert mantissa(v) in allowed, f"log tick {v} is not {allowed} x 10^k"
        if data and log10(hi / lo) > 2:
            assert all(mantissa(v) == 1 for v in values), f"not all decades: {ticks}"
        return
    steps = [b - a for a, b in zip(values, values[1:])]
    step = steps[0]
    assert all(s == step for s in steps), f"uneven ticks {ticks}"
    assert mantissa(step) in (1, 2, 5), f"tick step {step} is not 1, 2 or 5 x 10^k: {ticks}"
    assert all((v / step).denominator == 1 for v in values), f"ticks off the step grid: {ticks}"


def pixel_map(ticks: list[tuple[float, str]], log: bool):
    """The data -> pixel map the ticks define (first and last), checked against every tick in between.
    Worked in Fractions (log10s of them on a log axis), so it holds at float64's ends too."""
    units = [log10(number(s)) if log else number(s) for _, s in ticks]
    (p0, u0), (p1, u1) = (ticks[0][0], units[0]), (ticks[-1][0], units[-1])

    def to_px(v: float) -> float:
        return p0 + float(((log10(v) if log else Fraction(v)) - u0) / (u1 - u0)) * (p1 - p0)
    for (p, label), u in zip(ticks, units):
        assert abs(p0 + float((u - u0) / (u1 - u0)) * (p1 - p0) - p) < 0.5, f"tick {label} at {p}: off"
    return to_px


def test_ticks_cover_the_data_in_nice_steps(drawn):
    series, log_y, _, svg = drawn
    finite = [p for pts in series.values() for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
    check_axis(svg["x"], [x for x, _ in finite], False, increasing_px=True)
    check_axis(svg["y"], [y for _, y in finite], log_y, increasing_px=False)


def test_points_drawn_where_the_ticks_say(drawn):
    series, log_y, _, svg = drawn
    to_x, to_y = pixel_map(svg["x"], False), pixel_map(svg["y"], log_y)
    assert list(svg["series"]) == list(series)
    for name, points in series.items():
        expected = runs_of(points)
        drawn_runs = svg["series"][name][1]
        assert len(drawn_runs) == len(expected), f"{name}: {len(expected)} runs, drawn as {len(drawn_runs)}"
        for run, want in zip(drawn_runs, expected):
            if len(run) == 1 and len(want) > 1:           # a marker for a run that spans under 2 px
                assert all(math.dist((to_x(x), to_y(y)), run[0]) < 3 for x, y in want), f"{name}: {run}"
                continue
            assert len(run) == len(want), f"{name}: {len(want)} points, drawn as {len(run)}"
            for (px, py), (x, y) in zip(run, want):
                assert abs(px - to_x(x)) <= 1 and abs(py - to_y(y)) <= 1, f"{name}: ({x}, {y}) at {px, py}"


def test_legend_names_every_series_in_its_colour(drawn):
    series, _, _, svg = drawn
    assert [name for name, _, _ in svg["legend"]] == list(series)
    colors = [stroke for stroke, _ in svg["series"].values()]
    assert svg["legend_colors"] == colors and len(set(colors)) == len(colors)
    assert svg["texts"] == {"title": "loss", "xlabel": "step", "ylabel": "loss"}


def text_box(label: str, x: float, baseline: float, anchor: str) -> tuple[float, float, float, float]:
    width = MEASURE.getlength(label)
    left = {"middle": x - width / 2, "end": x - width, "start": x}[anchor]
    return left, baseline - 10, left + width, baseline + 3


def near_polyline(p: tuple[float, float], run: list[tuple[float, float]], within: float) -> bool:
    if len(run) == 1:                         # a marker: radius 3.5 and its stroke
        return math.dist(p, run[0]) < within + 3
    for a, b in zip(run, run[1:]):
        length2 = (b[0] - a[0]) ** 2 + (b[1] - a[1]) ** 2
        t = 0.0 if length2 == 0 else ((p[0] - a[0]) * (b[0] - a[0]) + (p[1] - a[1]) * (b[1] - a[1])) / length2
        t = min(1.0, max(0.0, t))
        if math.dist(p, (a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1]))) < within:
            return True
    return False


def test_raster_shows_lines_and_every_label(drawn):
    series, _, text, svg = drawn
    image = render(text)
    assert image.size == tuple(round(v) for v in svg["size"])
    pixels = image.load()
    width, height = image.size
    inked = sum(pixels[x, y][:3] != (255, 255, 255) for x in range(0, width, 3) for y in range(0, height, 3))
    assert inked > 500, f"blank image: {inked} non-white pixels in a 1/9 sample"

    frame_x, frame_y, frame_w, frame_h = svg["frame"]
    drawn_series = list(svg["series"].values())
    for i, (name, (stroke, runs)) in enumerate(svg["series"].items()):
        later = [run for _, later_runs in drawn_series[i + 1:] for run in later_runs]
        mine = [p for run in runs for p in run]
        if not mine or all(any(near_polyline(p, run, 3) for run in later) for p in mine):
            continue                          # nothing to draw, or every point under a later series' line
        target = tuple(int(stroke[i:i + 2], 16) for i in (1, 3, 5))
        inside = [pixels[x, y] for x in range(int(frame_x) - 4, int(frame_x + frame_w) + 5)
                  for y in range(int(frame_y) - 4, int(frame_y + frame_h) + 5)]      # markers on the edge too
        colored = sum(max(abs(a - b) for a, b in zip(p, target)) < 40 for p in inside)
        assert colored >= 3, f"{name}'s line not drawn: {colored} pixels of {stroke} in the frame"

    # a grid line across the frame at every inner tick: ink in (nearly) every pixel along it, grey or a
    # series' line drawn over it
    x0, y0, x1, y1 = int(frame_x) + 1, int(frame_y) + 1, int(frame_x + frame_w), int(frame_y + frame_h)
    for y in (round(y) for y, _ in svg["y"] if y0 + 2 < y < y1 - 2):
        inked = sum(any(pixels[x, y + d][:3] != (255, 255, 255) for d in (-1, 0, 1)) for x in range(x0, x1))
        assert inked > 0.95 * (x1 - x0), f"no grid line at y={y}: ink in {inked} of {x1 - x0} px"
    for x in (round(x) for x, _ in svg["x"] if x0 + 2 < x < x1 - 2):
        inked = sum(any(pixels[x + d, y][:3] != (255, 255, 255) for d in (-1, 0, 1)) for y in range(y0, y1))
        assert inked > 0.95 * (y1 - y0), f"no grid line at x={x}: ink in {inked} of {y1 - y0} px"

    boxes = [text_box(s, x, frame_y + frame_h + 19, "middle") for x, s in svg["x"]]
    boxes += [text_box(s, frame_x - 8, y + 4, "end") for y, s in svg["y"]]
    boxes += [text_box(name, x, y, "start") for name, x, y in svg["legend"]]
    for box in boxes:
        left, top, right, bottom = (round(v) for v in box)
        assert left >= 0 and right <= width and top >= 0 and bottom <= height, f"label at {box} clipped"
        dark = sum(sum(pixels[x, y][:3]) < 360 for x in range(left, right) for y in range(top, bottom))
        assert dark >= 3, f"no glyph pixels in the label box {box}"
    x_boxes = boxes[:len(svg["x"])]
    for a, b in zip(x_boxes, x_boxes[1:]):
        assert b[0] - a[2] >= 4, f"x tick labels touch: {a} {b}"


def test_log_y_refuses_values_at_or_below_zero(tmp_path):
    with pytest.raises(ValueError, match=r"log_y needs y > 0, got y=-0.5 at x=3 in series 'train'"):
        line_plot(tmp_path / "p.svg", {"train": [(1, 1.0), (3, -0.5)]}, log_y=True, backend="svg")
    with pytest.raises(ValueError, match="log_y needs y > 0, got y=0"):
        line_plot(tmp_path / "p.svg", {"eval": [(1, 0.0)]}, log_y=True, backend="svg")
    assert list(tmp_path.iterdir()) == []


def test_argument_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match=r"built-in writer draws \.svg only.*pip install -e \"\.\[plot\]\""):
        line_plot(tmp_path / "p.png", {"train": [(0, 1.0)]}, backend="svg")
    with pytest.raises(ValueError, match=r"ending in \.svg or \.png, got .*p\.jpg"):
        line_plot(tmp_path / "p.jpg", {}, backend="svg")
    with pytest.raises(ValueError, match="backend must be one of"):
        line_plot(tmp_path / "p.svg", {}, backend="gnuplot")


def hide_matplotlib(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(plot.importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib"
                        else real(name, *a))


def test_without_matplotlib(tmp_path, monkeypatch):
    hide_matplotlib(monkeypatch)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[plot\]"'):
        line_plot(tmp_path / "p.svg", {"train": [(0, 1.0)]}, backend="matplotlib")
    with pytest.raises(ValueError, match=r"draws \.svg only"):
        line_plot(tmp_path / "p.png", {"train": [(0, 1.0)]})
    line_plot(tmp_path / "p.svg", {"train": [(0, 1.0), (1, 0.5)]})          # auto falls back to the built-in
    assert 'class="xtick"' in (tmp_path / "p.svg").read_text()


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "p.svg"
    line_plot(path, {"train": [(0, 1.0), (1, 0.5)]}, backend="svg")
    before = path.read_text()

    def broken(*args):
        raise RuntimeError("disk full")
    monkeypatch.setattr(plot, "_svg", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        line_plot(path, {"train": [(0, 2.0)]}, backend="svg")
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["p.svg"]


def test_import_loads_no_plotting_library():
    code = "import sys, tg.utils.plot; sys.exit('matplotlib' in sys.modules)"
    root = pathlib.Path(__file__).parent.parent
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0, "plot imported matplotlib"


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")    # matplotlib's, at 1e308
@pytest.mark.parametrize("suffix", [".svg", ".png"])
@pytest.mark.parametrize("case", ["nan-inf", "single-point", "log-narrow", "huge", "empty", "max-both-signs",
                                  "1.7e308-to-1e308", "x-max-both-signs", "denormals", "log-full-range"])
def test_matplotlib_backend_writes_a_valid_file(tmp_path, suffix, case):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    series, log_y = {**EDGE, **EXTREME}[case]
    path = tmp_path / f"p{suffix}"
    line_plot(path, series, title="loss", log_y=log_y)                       # auto picks matplotlib
    if suffix == ".svg":
        text = path.read_text()
        assert re.search(r"Matplotlib v[\d.]+", text), "auto did not pick matplotlib"
        image = render(text)
    else:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = Image.open(path)
        image.load()
    assert image.size[0] > 300 and image.size[1] > 200
    colors = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    assert len(colors) > 10, "blank image"
