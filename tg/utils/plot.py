"""`line_plot`: training curves (loss against step, one line per series) written to a .svg or .png file.

matplotlib draws them when it is installed (the `plot` extra: `pip install -e ".[plot]"`); without it a
built-in SVG writer draws the parts a reader looks for: ticks at 1/2/5 x 10^k (decades on a log axis)
labelled compactly on both axes (0.25, 2.5k, 1e-05), axis labels, a light grid, a title, one colour per
series and a legend beside the plot naming each. NaN and inf points are skipped (the line breaks there);
a run of one point, or one that spans under 2 px, is drawn as a marker. The file is written beside its
final path and renamed into place, so a reader never sees half a plot. Every finite value plots, up to
float64's ends: ticks are worked out exactly (a span of -1e308..1e308, a tick at 2e308, a step of 1e-325
between denormals), and matplotlib, whose linear axes overflow past ~1e307, is given such data scaled by
a power of ten that its axis label names ("loss (x1e308)")."""
from __future__ import annotations

import importlib.util
import io
import math
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import NamedTuple
from xml.sax.saxutils import escape, quoteattr

Points = Sequence[tuple[float, float]]
Runs = list[list[tuple[float, float]]]          # a series' finite stretches, split where a point is NaN/inf

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")          # matplotlib's tab10
FONT, GRID = "DejaVu Sans, Helvetica, Arial, sans-serif", "#d8d8d8"
PLOT_W, PLOT_H = 560, 340            # the data area; the figure grows around it to fit labels and legend
TICK_FONT, LABEL_FONT, TITLE_FONT = 12, 13, 15
CHAR_W = TICK_FONT * 0.62            # DejaVu Sans' average advance at TICK_FONT, a little generous
BACKENDS = ("auto", "svg", "matplotlib")


def line_plot(path: str | os.PathLike[str], series: Mapping[str, Points], *, title: str = "",
              xlabel: str = "step", ylabel: str = "loss", log_y: bool = False, backend: str = "auto") -> None:
    """Write a line plot of `series` (name -> (x, y) pairs) to `path` (.svg or .png, from its suffix).

    backend "auto" uses matplotlib when it is importable, else the built-in SVG writer; "svg" forces
    the built-in writer, "matplotlib" requires matplotlib.

    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "loss.svg")
    >>> line_plot(out, {"train": [(0, 2.3), (10, 1.1), (20, 0.7)], "eval": [(20, 0.9)]}, backend="svg")
    >>> open(out).read().startswith("<svg")
    True
    """
    target = pathlib.Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise ValueError(f"[plot] line_plot: expected a path ending in .svg or .png, got {str(target)!r}")
    if backend not in BACKENDS:
        raise ValueError(f"[plot] line_plot: backend must be one of {BACKENDS}, got {backend!r}")
    runs = {name: _finite_runs(points) for name, points in series.items()}
    if log_y:
        _check_positive(runs)
    has_mpl = importlib.util.find_spec("matplotlib") is not None
    if backend == "matplotlib" and not has_mpl:
        raise ImportError('[plot] line_plot: backend="matplotlib" needs matplotlib; install it with '
                          'pip install -e ".[plot]", or pass backend="svg" for the built-in writer')
    texts = (title, xlabel, ylabel)
    from tg.nn.state import write_atomic
    if backend == "matplotlib" or (backend == "auto" and has_mpl):
        write_atomic(target, _draw_matplotlib(suffix[1:], runs, texts, log_y))
        return
    if suffix == ".png":
        raise ValueError(f"[plot] line_plot: the built-in writer draws .svg only, got {str(target)!r}; "
                         'install matplotlib (pip install -e ".[plot]") for .png, or use a .svg path')
    write_atomic(target, _svg(runs, texts, log_y).encode())


def _finite_runs(points: Points) -> Runs:
    runs: Runs = [[]]
    for x, y in points:
        if math.isfinite(x) and math.isfinite(y):
            runs[-1].append((float(x), float(y)))
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _check_positive(runs: Mapping[str, Runs]) -> None:
    for name, series_runs in runs.items():
        for x, y in (p for run in series_runs for p in run):
            if y <= 0:
                raise ValueError(f"[plot] line_plot: log_y needs y > 0, got y={y:g} at x={x:g} in series "
                                 f"{name!r}; plot it without log_y, or drop the points at or below 0")


def _draw_matplotlib(fmt: str, runs: Mapping[str, Runs], texts: tuple[str, str, str], log_y: bool) -> bytes:
    # a Figure made without pyplot draws headless (Agg for .png) and leaves the caller's pyplot backend and
    # figure list alone: matplotlib.use("Agg") would switch a notebook's backend under it
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.6, 4.5), dpi=100)
    ax = fig.add_subplot()
    points = [p for r in runs.values() for run in r for p in run]
    xpower = _mpl_power([x for x, _ in points])
    ypower = 0 if log_y else _mpl_power([y for _, y in points])
    for i, (name, series_runs) in enumerate(runs.items()):
        gapped = [p for run in series_runs for p in run + [(math.nan, math.nan)]]   # matplotlib breaks at NaN
        xs, ys = [_shifted(p[0], xpower) for p in gapped], [_shifted(p[1], ypower) for p in gapped]
        lone = len(series_runs) > 0 and all(len(run) == 1 for run in series_runs)
        ax.plot(xs, ys, color=COLORS[i % len(COLORS)], label=name, marker="o" if lone else None, markersize=4)
    if log_y:
        ax.set_yscale("log")
    texts = (texts[0], _scaled_label(texts[1], xpower), _scaled_label(texts[2], ypower))
    ax.set(title=texts[0], xlabel=texts[1], ylabel=texts[2])
    ax.grid(True, alpha=0.3)
    if runs:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format=fmt)
    return out.getvalue()


MPL_LIMIT = 1e300       # matplotlib's linear axes overflow (arange: cannot compute length) from ~1.8e307


def _mpl_power(values: list[float]) -> int:
    """The power of ten to divide an axis' data by for matplotlib: 0 unless it reaches MPL_LIMIT."""
    biggest = max((abs(v) for v in values), default=0.0)
    return math.floor(math.log10(biggest)) if biggest >= MPL_LIMIT else 0


def _shifted(value: float, power: int) -> float:
    return value if power == 0 or math.isnan(value) else float(Fraction(value) / 10 ** power)


def _scaled_label(label: str, power: int) -> str:
    return label if power == 0 else f"{label} (\u00d71e{power})".strip()


class _Axis(NamedTuple):
    lo: float                             # the axis' ends, in axis units (see `unit`)
    hi: float
    ticks: list[tuple[float, str]]        # (position in axis units, label)
    minor: list[float]                    # unlabelled grid lines
    unit: Callable[[float], float]        # data -> axis units: log10 on a log axis, else from (about) the
    #                                       first tick in a power of two near the span, so both stay near 1


def _linear_axis(values: list[float], max_ticks: int) -> _Axis:
    """Ticks q x 10^exponent at the smallest 1/2/5 x 10^k step that needs <= max_ticks. The arithmetic is
    exact (Fractions: no overflow past 1.8e308, no step that rounds to 0 between denormals, no ticks that
    round together at 1e17 + 50), and axis units count from (about) the first tick in a power of two near
    the span, so ticks and points are each rounded to a float once, near 1, wherever the data sits."""
    lo, hi = (Fraction(min(values)), Fraction(max(values))) if values else (Fraction(0), Fraction(1))
    if lo == hi:
        pad = abs(lo) / 10 or Fraction(1)
        lo, hi = lo - pad, hi + pad
    span = (hi - lo) / max_ticks              # its log10 from its parts: no float overflow
    exponent = math.floor(math.log10(span.numerator) - math.log10(span.denominator)) - 1
    slack = Fraction(1, 10 ** 9)              # a bound a hair past a tick (0.30000000000000004) is on it
    while True:
        for m in (1, 2, 5):
            step = m * Fraction(10) ** exponent
            first, last = math.floor(lo / step + slack), math.ceil(hi / step - slack)
            if last - first <= max_ticks:
                qs = [i * m for i in range(first, last + 1)]
                origin, width = qs[0] * Fraction(10) ** exponent, (qs[-1] - qs[0]) * Fraction(10) ** exponent
                if abs(origin) < 2 ** 1000:       # the float nearest the first tick: data - origin in floats
                    origin = Fraction(float(origin))
                scale = Fraction(2) ** (width.denominator.bit_length() - width.numerator.bit_length())
                at = [float((q * Fraction(10) ** exponent - origin) * scale) for q in qs]
                unit = _unit(origin, scale, max(abs(lo), abs(hi)))
                return _Axis(at[0], at[-1], list(zip(at, _labels(qs, exponent))), [], unit)
        exponent += 1


def _unit(origin: Fraction, scale: Fraction, reach: Fraction) -> Callable[[float], float]:
    # data (|v| <= reach) -> axis units: (v - origin) x scale, rounded once. In floats where that is the
    # same (origin a float, scale a power of two, nothing past 2^1000: v - origin rounds once and the
    # scaling is exact); else in Fractions, ~10x slower
    if reach < 2 ** 1000 and abs(origin) < 2 ** 1000 and Fraction(float(origin)) == origin \
            and Fraction(1, 2 ** 1000) < scale < 2 ** 1000:
        o, s = float(origin), float(scale)
        return lambda v: (v - o) * s
    return lambda v: float((Fraction(v) - origin) * scale)


def _labels(qs: list[int], exponent: int) -> list[str]:
    """Labels for ticks at q x 10^exponent (q whole), one style for the whole axis: 0.25, 2.5k, 1e-05.
    Written from the integers, so each is exact however big or small (2e+308, 4.5e-324)."""
    biggest = max(abs(q) for q in qs)
    magnitude = len(str(biggest)) - 1 + exponent          # floor(log10) of the biggest |tick|
    if magnitude < -3 or magnitude >= 15:
        return [_scientific(q, exponent) for q in qs]
    if magnitude >= 4:
        power = min(4, magnitude // 3)
        return [_fixed(q, exponent - 3 * power, strip=True) + "kMGT"[power - 1] if q else "0" for q in qs]
    return [_fixed(q, exponent) for q in qs]


def _fixed(q: int, exponent: int, strip: bool = False) -> str:
    # q x 10^exponent with max(0, -exponent) decimals (no trailing zeros with strip): 0.25, -3.0, 2500
    if exponent >= 0:
        return str(q * 10 ** exponent)
    digits = str(abs(q)).rjust(1 - exponent, "0")
    text = f"{'-' if q < 0 else ''}{digits[:exponent]}.{digits[exponent:]}"
    return text.rstrip("0").rstrip(".") if strip else text


def _scientific(q: int, exponent: int) -> str:
    # q x 10^exponent as Python prints a float in e notation, no trailing zeros: 2.5e-05, 1e+20, -4e-324
    if q == 0:
        return "0"
    digits = str(abs(q))
    power = exponent + len(digits) - 1
    mantissa = digits[0] + ("." + digits[1:].rstrip("0") if digits[1:].rstrip("0") else "")
    return f"{'-' if q < 0 else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def _log_axis(values: list[float]) -> _Axis:
    # positions are log10(m) + d, never 10^d itself: the decades run past float64's (1e-330, 1e+310)
    lo_d = math.floor(math.log10(min(values))) if values else 0
    hi_d = max(math.ceil(math.log10(max(values))), lo_d + 1) if values else 1
    stride = math.ceil((hi_d - lo_d) / 8)    # at most ~8 labelled decades; the others get grid lines
    lo_d, hi_d = lo_d // stride * stride, -(-hi_d // stride) * stride       # both ends labelled
    labelled: Sequence[int] = (1,)           # which m x 10^k are labelled; the axis ends snap to those
    if values and max(values) < 4 * min(values):         # under 0.6 decades: 0.4, 0.5, 0.6, 0.7
        labelled = range(1, 10)
    elif values and hi_d - lo_d <= 2:
        labelled = (1, 2, 5)
    lo, hi = float(lo_d), float(hi_d)
    if len(labelled) > 1:
        marks = [math.log10(m) + d for d in range(lo_d - 1, hi_d + 2) for m in labelled]
        below = max(i for i, t in enumerate(marks) if t <= math.log10(min(values)) + 1e-12)
        above = min(i for i, t in enumerate(marks) if t >= math.log10(max(values)) - 1e-12)
        below, above = (below - 1, above + 1) if below == above else (below, above)
        lo, hi = marks[below], marks[above]
    ticks: list[tuple[float, str]] = []
    minor: list[float] = []
    for d in range(lo_d - 1, hi_d + 1):
        for m in range(1, 10) if stride == 1 else (1,):     # 2..9 lines too, unless they would pile up
            t = math.log10(m) + d
            if lo - 1e-9 <= t <= hi + 1e-9:
                if m in labelled and d % stride == 0:
                    ticks.append((t, _labels([m], d)[0]))
                else:
                    minor.append(t)
    return _Axis(lo, hi, ticks, minor, math.log10)


def _el(tag: str, text: str = "", **attrs: object) -> str:
    # keywords spell SVG's attribute names with _ for - (text_anchor, class_); floats go to 0.01 px
    pairs = " ".join(f"{k.rstrip('_').replace('_', '-')}="
                     + quoteattr(f"{v:.2f}" if isinstance(v, float) else str(v)) for k, v in attrs.items())
    return f"<{tag} {pairs}>{escape(text)}</{tag}>" if text else f"<{tag} {pairs}/>"


def _svg(runs: Mapping[str, Runs], texts: tuple[str, str, str], log_y: bool) -> str:
    xs = [p[0] for r in runs.values() for run in r for p in run]
    ys = [p[1] for r in runs.values() for run in r for p in run]
    yaxis = _log_axis(ys) if log_y else _linear_axis(ys, 8)
    for max_ticks in range(8, 1, -1):             # the most x ticks whose labels keep a gap between them
        xaxis = _linear_axis(xs, max_ticks)
        if max(len(s) for _, s in xaxis.ticks) * CHAR_W * 1.6 * len(xaxis.ticks) <= PLOT_W:
            break
    # from here on x and y are in axis units
    runs = {name: [[(xaxis.unit(x), yaxis.unit(y)) for x, y in run] for run in r] for name, r in runs.items()}
    left = 14 + LABEL_FONT + 10 + max(len(s) for _, s in yaxis.ticks) * CHAR_W + 10
    top = 24 + TITLE_FONT if texts[0] else 20
    right, bottom = left + PLOT_W, top + PLOT_H
    legend_w = 48 + max((len(name) for name in runs), default=0) * CHAR_W
    width, height = round(right + 30 + legend_w), bottom + 60

    def px(x: float) -> float:
        return left + (x - xaxis.lo) / (xaxis.hi - xaxis.lo) * PLOT_W

    def py(y: float) -> float:
        return bottom - (y - yaxis.lo) / (yaxis.hi - yaxis.lo) * PLOT_H

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="{FONT}" font-size="{TICK_FONT}">',
           _el("rect", width=width, height=height, fill="white")]
    out += [_el("line", x1=left, x2=right, y1=py(t), y2=py(t), stroke="#eeeeee") for t in yaxis.minor]
    for t, label in xaxis.ticks:                  # a tick's grid line runs 5 px past the frame as its mark
        out.append('<g class="xtick">' + _el("line", x1=px(t), x2=px(t), y1=top, y2=bottom + 5, stroke=GRID)
                   + _el("text", label, x=px(t), y=bottom + 19, text_anchor="middle", fill="#333") + "</g>")
    for t, label in yaxis.ticks:
        out.append('<g class="ytick">' + _el("line", x1=left - 5, x2=right, y1=py(t), y2=py(t), stroke=GRID)
                   + _el("text", label, x=left - 8, y=py(t) + 4, text_anchor="end", fill="#333") + "</g>")
    out.append(_el("rect", x=left, y=top, width=PLOT_W, height=PLOT_H, fill="none", stroke="#444"))
    for i, (name, series_runs) in enumerate(runs.items()):
        color = COLORS[i % len(COLORS)]
        out.append(f'<g class="series" data-name={quoteattr(name)} stroke="{color}" fill="{color}">')
        out += [_trace([(px(x), py(y)) for x, y in run]) for run in series_runs]
        out.append("</g>")
    return "\n".join(out + _svg_texts(texts, left, top, list(runs), legend_w) + ["</svg>"]) + "\n"


def _trace(points: list[tuple[float, float]]) -> str:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if max(xs) - min(xs) < 2 and max(ys) - min(ys) < 2:      # one point, or a run that fits in one: a marker
        return _el("circle", cx=points[0][0], cy=points[0][1], r=3.5)
    return _el("polyline", points=" ".join(f"{x:.2f},{y:.2f}" for x, y in points), fill="none",
               stroke_width=1.8, stroke_linejoin="round")


def _svg_texts(texts: tuple[str, str, str], left: float, top: float, names: list[str],
               legend_w: float) -> list[str]:
    title, xlabel, ylabel = texts
    right, mid_x = left + PLOT_W, left + PLOT_W / 2
    out = [_el("text", xlabel, class_="xlabel", x=mid_x, y=top + PLOT_H + 44, text_anchor="middle",
               font_size=LABEL_FONT),
           _el("text", ylabel, class_="ylabel", transform=f"translate({12 + LABEL_FONT} {top + PLOT_H / 2})"
               " rotate(-90)", text_anchor="middle", font_size=LABEL_FONT)]
    if title:
        out.append(_el("text", title, class_="title", x=mid_x, y=top - 14, text_anchor="middle",
                       font_size=TITLE_FONT, font_weight="bold"))
    if names:                                     # beside the plot, so it never hides a line
        out += ['<g class="legend">', _el("rect", x=right + 16, y=top, width=legend_w,
                                           height=10 + 20 * len(names), fill="white", stroke="#cccccc", rx=3)]
        for i, name in enumerate(names):
            out.append(_el("line", x1=right + 24, x2=right + 46, y1=top + 15 + 20 * i, y2=top + 15 + 20 * i,
                           stroke=COLORS[i % len(COLORS)], stroke_width=2.5))
            out.append(_el("text", name, x=right + 52, y=top + 19 + 20 * i))
        out.append("</g>")
    return out
