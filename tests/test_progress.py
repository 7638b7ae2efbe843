"""tg.utils.progress against a fake terminal (a StringIO whose isatty() is True, its output replayed
through a small screen model that honours "\\r" and "\\n"), a plain log stream and a fake clock: the
rate, ETA, percent and bar of generated update sequences, one redrawn line on a terminal and no "\\r" in
a log, messages that never mix into the bar, iteration that yields every element once, a bar that is
closed by an exception in the loop, and totals as tqdm takes them (inf or NaN: unknown; negative: an
error)."""
from __future__ import annotations

import io
import math
import os
import random
import re
import struct

import numpy as np
import pytest

from tg.utils.progress import BAR_WIDTH, progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def screen(text: str) -> list[str]:
    """The terminal's lines after `text`: "\\r" returns to column 0 and later text overwrites."""
    lines, column = [""], 0
    for part in re.split(r"(\r|\n)", text):
        if part == "\r":
            column = 0
        elif part == "\n":
            lines.append("")
            column = 0
        elif part:
            line = lines[-1].ljust(column)
            lines[-1] = line[:column] + part + line[column + len(part):]
            column += len(part)
    return [line.rstrip() for line in lines]


STATUS = re.compile(r"^(?:(?P<pct>[ \d]{3})%(?:\|(?P<bar>.{WIDTH})\|)? (?P<n>[\d.]+)/(?P<total>[\d.]+)"
                    r"|(?P<count>[\d.]+)(?P<cunit>[a-z]+)) \[(?P<elapsed>[\d:]+)(?:<(?P<eta>[\d:?]+))?, "
                    r"(?P<rate>\?|[\d.]+[kM]?)(?P<per>[a-z]+/s|s/[a-z]+)(?:, (?P<postfix>.*))?\]$"
                    .replace("WIDTH", str(BAR_WIDTH)))


def parse(line: str) -> re.Match:
    match = STATUS.match(line)
    assert match, f"not a status line: {line!r}"
    return match


def seconds(hms: str) -> int:
    parts = [int(p) for p in hms.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def number(shown: str) -> float:
    return float(shown[:-1]) * {"k": 1e3, "M": 1e6}[shown[-1]] if shown[-1] in "kM" else float(shown)


def check_status(line: str, n: float, total: float | None, elapsed: float, unit: str) -> None:
    m = parse(line)
    assert seconds(m["elapsed"]) == int(elapsed) or abs(seconds(m["elapsed"]) - elapsed) < 1, (line, elapsed)
    if total is None:
        assert m["count"] == str(int(n)) and m["cunit"] == unit and m["eta"] is None and m["pct"] is None
    else:
        assert (int(m["n"]), int(m["total"])) == (n, total), line
        fraction = min(1.0, n / total)
        assert int(m["pct"]) == int(fraction * 100), line
        if m["bar"] is not None:
            assert m["bar"].count("█") == int(fraction * BAR_WIDTH), line
        if n > 0 and elapsed > 0:
            eta = (total - n) / (n / elapsed)
            assert abs(seconds(m["eta"]) - eta) <= 1, f"ETA {m['eta']} for {eta:.2f} s left: {line}"
        else:
            assert m["eta"] == "?", line
    if n == 0 or elapsed == 0:
        assert m["rate"] == "?", line
        return
    rate, shown = n / elapsed, number(m["rate"])
    if rate >= 1:                    # fast: units per second, 2 decimals, or 3 digits once scaled (12.3k)
        assert m["per"] == f"{unit}/s", line
        assert abs(shown - rate) <= (0.005 if rate < 1000 else rate * 0.005) + 1e-9, (line, rate)
    else:                            # slow: seconds per unit, 2 decimals
        assert m["per"] == f"s/{unit}" and abs(shown - 1 / rate) <= 0.005 + 1e-9, (line, rate)


def update_sequences():
    rng = random.Random(7)
    for case in range(40):
        total = rng.choice([None, rng.randint(1, 50), rng.randint(100, 10**7)])
        budget = total if total is not None else 10**6
        steps = []
        for _ in range(rng.randint(1, 60)):
            left = budget - sum(n for _, n in steps)
            n = min(left, rng.choice([1, 1, rng.randint(1, max(1, budget // 20))]))
            steps.append((10 ** rng.uniform(-3, 3), n))           # 1 ms .. 17 min between updates
        yield pytest.param(total, steps, rng.choice(["it", "tok", "batch"]), id=f"seq{case}")


@pytest.mark.parametrize("total,steps,unit", list(update_sequences()))
def test_tty_status_has_right_rate_eta_percent_and_bar(total, steps, unit):
    clock, out = Clock(), FakeTTY()
    bar = progress(total=total, desc="train", unit=unit, file=out, clock=clock, mininterval=0)
    start, done = clock.now, 0
    check_status(screen(out.getvalue())[-1].removeprefix("train: "), 0, total, 0, unit)
    for dt, n in steps:
        clock.now += dt
        bar.update(n)
        done += n
        lines = screen(out.getvalue())
        assert len(lines) == 1, "a terminal bar stays on one line"
        assert lines[0].startswith("train: ")
        check_status(lines[0].removeprefix("train: "), done, total, clock.now - start, unit)
    bar.close()
    assert out.getvalue().endswith("\n") and screen(out.getvalue())[-1] == ""


@pytest.mark.parametrize("total,steps,unit", list(update_sequences())[:12])
def test_log_stream_is_quiet_and_plain(total, steps, unit):
    clock, log = Clock(), io.StringIO()
    bar = progress(total=total, desc="train", unit=unit, file=log, clock=clock, log_every=30)
    start, done, expected_lines, last_log = clock.now, 0, 0, clock.now
    for dt, n in steps:
        clock.now += dt
        bar.update(n)
        done += n
        if clock.now - last_log >= 30:
            expected_lines, last_log = expected_lines + 1, clock.now
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "█" not in text
    lines = text.splitlines()
    assert len(lines) == expected_lines + 1, f"expected {expected_lines} periodic lines, a summary: {lines}"
    for line in lines[:-1]:
        parse(line.removeprefix("train: "))
    count = f"{done}/{total}" if total is not None else f"{done}"
    elapsed = clock.now - start
    summary = re.fullmatch(rf"train: {count} {unit} in ([\d:]+) \((\S+)\)", lines[-1])
    assert summary and abs(seconds(summary[1]) - elapsed) <= 1, lines[-1]


def test_log_lines_come_every_log_every_seconds():
    clock, log = Clock(), io.StringIO()
    with progress(range(1000), file=log, clock=clock, log_every=30) as bar:
        for _ in bar:
            clock.now += 0.1                                   # 100 s in all: lines at 30, 60 and 90 s
    lines = log.getvalue().splitlines()
    assert [seconds(parse(line)["elapsed"]) for line in lines[:-1]] == [30, 60, 90]
    assert lines[-1] == "1000/1000 it in 01:40 (10.00it/s)"


def test_redraws_at_most_every_mininterval():
    clock, out = Clock(), FakeTTY()
    with progress(total=1000, file=out, clock=clock, mininterval=0.1) as bar:
        for _ in range(1000):
            clock.now += 0.01
            bar.update()
    draws = out.getvalue().count("\r")
    assert 90 <= draws <= 1 + 100 + 2, f"{draws} redraws for 10 s at mininterval 0.1 s"
    full = "100%|" + "█" * BAR_WIDTH + "| 1000/1000 [00:10<00:00, 100.00it/s]"
    assert screen(out.getvalue()) == [full, ""]


def test_shorter_line_blanks_the_longer_ones_leftovers():
    clock, out = Clock(), FakeTTY()
    bar = progress(total=10, file=out, clock=clock, mininterval=0)
    bar.set_postfix_str("a very long postfix that will be replaced")
    bar.set_postfix(loss=0.123456, step=3, lr=np.float32(3e-4), ok=True)
    empty = "  0%|" + " " * BAR_WIDTH + "| 0/10 [00:00<?, ?it/s, "
    assert screen(out.getvalue()) == [empty + "loss=0.1235, step=3, lr=0.0003, ok=True]"]


def test_write_puts_messages_above_the_bar():
    clock, out = Clock(), FakeTTY()
    with progress(range(50), desc="epoch 1", file=out, clock=clock, mininterval=0) as bar:
        for i in bar:
            clock.now += 0.5
            if i % 10 == 9:
                bar.write(f"step {i}: eval loss {1 / (i + 1):.3f}")
    lines = screen(out.getvalue())
    assert lines[:5] == [f"step {i}: eval loss {1 / (i + 1):.3f}" for i in (9, 19, 29, 39, 49)]
    assert lines[5].startswith("epoch 1: 100%|") and lines[6:] == [""]
    log = io.StringIO()
    with progress(range(3), file=log, clock=Clock()) as bar:
        for _ in bar:
            bar.write("hello")
    assert log.getvalue().splitlines() == ["hello"] * 3 + ["3/3 it in 00:00 (?it/s)"]


@pytest.mark.parametrize("seed", range(8))
def test_wrapping_yields_every_element_once(seed):
    rng = random.Random(seed)
    items = [rng.random() for _ in range(rng.randint(0, 300))]
    for source in (items, iter(items), (x for x in items)):       # a list (len known) and two without len
        out = FakeTTY()
        bar = progress(source, file=out, clock=Clock(), mininterval=0)
        assert list(bar) == items and bar.n == len(items)
        assert bar.total == (len(items) if source is items else None)
        assert out.getvalue().endswith("\n")


def test_exception_in_the_loop_still_closes_the_bar():
    clock, out = Clock(), FakeTTY()
    with pytest.raises(RuntimeError, match="diverged"):
        with progress(range(100), file=out, clock=clock) as bar:
            for i in bar:
                clock.now += 1
                if i == 41:
                    raise RuntimeError("diverged")
    assert out.getvalue().endswith("\n") and screen(out.getvalue())[0].startswith(" 41%|")

    out = FakeTTY()                                                # no `with`: the generator's finally closes
    with pytest.raises(RuntimeError):
        for i in progress(range(100), file=out, clock=Clock()):
            if i == 7:
                raise RuntimeError("diverged")
    assert out.getvalue().endswith("\n")

    log, clock = io.StringIO(), Clock()
    with pytest.raises(KeyboardInterrupt):
        for i in progress(range(100), desc="train", file=log, clock=clock, log_every=3600):
            if i == 41:
                raise KeyboardInterrupt
            clock.now += 1
    assert log.getvalue() == "train: 41/100 it in 00:41 (1.00it/s)\n"


def test_disabled_prints_nothing_but_the_callers_messages(monkeypatch):
    for stream in (FakeTTY(), io.StringIO()):
        with progress(range(5), file=stream, disable=True, clock=Clock(), mininterval=0, log_every=0) as bar:
            for _ in bar:
                bar.set_postfix(loss=1.0)
        assert stream.getvalue() == ""
        bar.write("kept")
        assert stream.getvalue() == "kept\n"
    monkeypatch.setenv("RANK", "3")                               # a distributed job: rank 0 draws the bar
    out = FakeTTY()
    progress(range(5), file=out).close()
    assert out.getvalue() == ""
    monkeypatch.setenv("RANK", "0")
    progress(range(5), file=out).close()
    assert out.getvalue().endswith("\n")


def test_rates_scale_and_slow_loops_read_seconds_per_unit():
    clock, out = Clock(), FakeTTY()
    bar = progress(total=10**9, unit="tok", file=out, clock=clock, mininterval=0)
    clock.now += 2
    bar.update(2_500_000)
    assert "[00:02<13:18, 1.25Mtok/s]" in screen(out.getvalue())[0]
    clock.now += 7200
    bar.update(1)
    assert "[2:00:02<" in screen(out.getvalue())[0]
    slow = FakeTTY()
    bar = progress(total=4, file=slow, clock=clock, mininterval=0)
    clock.now += 5
    bar.update()
    assert screen(slow.getvalue())[0].endswith("| 1/4 [00:05<00:15, 5.00s/it]")


def test_ascii_stream_gets_an_ascii_bar():
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    out.isatty = lambda: True                                      # type: ignore[method-assign]
    bar = progress(total=8, file=out, clock=Clock(), mininterval=0)
    bar.update(3)
    bar.close()
    assert b"|#########                | 3/8" in raw.getvalue()


def test_a_real_terminal_line_is_cut_to_its_width():
    fcntl, termios = pytest.importorskip("fcntl"), pytest.importorskip("termios")      # POSIX terminals
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    with open(terminal, "w", encoding="utf-8", closefd=True) as out:
        bar = progress(total=10, desc="a long description", file=out, clock=Clock(), mininterval=0)
        bar.set_postfix(loss=0.5, accuracy=0.25)
        bar.close()
    shown = os.read(controller, 65536).decode()
    os.close(controller)
    assert all(len(line) <= 59 for line in screen(shown.replace("\r\n", "\n"))), screen(shown)


def test_no_iterable_says_what_to_do():
    with pytest.raises(TypeError, match=r"wraps no iterable: pass one .* or drive it with update\(\)"):
        list(progress(total=3, file=io.StringIO()))


@pytest.mark.parametrize("total", [math.inf, math.nan, np.float64("inf"), np.float32("nan")],
                         ids=["inf", "nan", "np.inf", "np.nan32"])
def test_inf_or_nan_total_is_unknown_as_in_tqdm(total):
    clock, out = Clock(), FakeTTY()
    bar = progress(total=total, desc="train", file=out, clock=clock, mininterval=0)
    assert bar.total is None
    for _ in range(3):
        clock.now += 2
        bar.update(5)
        check_status(screen(out.getvalue())[0].removeprefix("train: "), bar.n, None, clock.now - 1000, "it")
    bar.close()
    assert screen(out.getvalue()) == ["train: 15it [00:06, 2.50it/s]", ""]      # no percent, bar or ETA

    log, clock = io.StringIO(), Clock()                   # a total given beats the iterable's len(), as tqdm
    for _ in progress(range(4), total=total, desc="train", file=log, clock=clock, log_every=3):
        clock.now += 2
    assert log.getvalue().splitlines()[-1] == "train: 4 it in 00:08 (2.00s/it)"
    for line in log.getvalue().splitlines()[:-1]:
        assert parse(line.removeprefix("train: "))["pct"] is None, line


@pytest.mark.parametrize("total", [-1, -0.5, -math.inf, np.int64(-3)])
def test_negative_total_says_what_to_do(total):
    with pytest.raises(ValueError, match=r"total must be >= 0 \(the number of tok expected\), got -.*; "
                                         r"pass total=None \(or float\('inf'\)\) when it is not known"):
        progress(total=total, unit="tok", file=io.StringIO())
    out = io.StringIO()
    progress(total=0, file=out, clock=Clock()).close()       # 0 is a total: nothing to do
    assert out.getvalue() == "0/0 it in 00:00 (?it/s)\n"
