"""`progress`: tqdm's progress bar for loops, without the dependency. On a terminal it redraws one line
in place every `mininterval` seconds, `train:  45%|███████▎     | 450/1000 [00:12<00:15, 36.21it/s, loss=0.1]`
(a slow loop's rate reads 2.50s/it; with no known total, None or, as in tqdm, inf or NaN, there is no
percent, bar or ETA; a negative total is a ValueError). To a file or pipe (a job's log) it writes no
"\\r": a plain status line every `log_every` seconds and a summary at close, `train: 1000/1000 it in
00:27 (36.90it/s)`. It is silent with `disable=True` and, by default, on the ranks other than 0 of a
distributed job (the `RANK` knob), so a multi-process run draws one bar."""
from __future__ import annotations

import math
import numbers
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TextIO, TypeVar

from tg import config

T = TypeVar("T")
BAR_WIDTH = 25
EIGHTHS = " ▏▎▍▌▋▊▉"


class Progress(Generic[T]):
    """A progress bar over `iterable` (each element one `unit`; total from its len()), or driven by
    `update(n)`. The rate and ETA use the average rate since the start. Closing it (the loop's end or an
    exception in it, leaving a `with` block, `close()`) draws the final state: the bar and a newline on a
    terminal, the summary line elsewhere.

    >>> import io
    >>> log, clock = io.StringIO(), iter([0.0, 1.0, 2.0, 3.0, 4.0]).__next__
    >>> for step in progress(range(3), desc="epoch", file=log, clock=clock):
    ...     pass
    >>> print(log.getvalue(), end="")
    epoch: 3/3 it in 00:04 (1.33s/it)
    """

    def __init__(self, iterable: Iterable[T] | None = None, *, total: float | None = None, desc: str = "",
                 unit: str = "it", file: TextIO | None = None, disable: bool | None = None,
                 mininterval: float = 0.1, log_every: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if total is None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        if total is not None and (math.isnan(total) or total == math.inf):
            total = None                  # as tqdm: an endless or unknown total shows no percent, bar or ETA
        elif total is not None and total < 0:
            raise ValueError(f"[progress] total must be >= 0 (the number of {unit} expected), got {total}; "
                             "pass total=None (or float('inf')) when it is not known")
        self.iterable, self.total, self.unit = iterable, total, unit
        self.file = sys.stderr if file is None else file
        self.disable = config.RANK > 0 if disable is None else disable
        self.tty = not self.disable and not self.file.closed and self.file.isatty()
        self._head = f"{desc}: " if desc else ""
        self.n: float = 0
        self.postfix = ""
        self._clock, self._mininterval, self._log_every = clock, mininterval, log_every
        self._start = self._last_draw = self._last_log = clock()
        self._drawn = 0                   # length of the line on screen, to blank what a shorter one leaves
        self._closed = self.disable
        if self.tty:
            self._draw(self._start)

    def __iter__(self) -> Iterator[T]:
        if self.iterable is None:
            raise TypeError("[progress] this bar wraps no iterable: pass one (progress(loader)) or drive it "
                            "with update()")
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:                          # the loop ended, broke or raised: the bar is finished either way
            self.close()

    def __enter__(self) -> Progress[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: float = 1) -> None:
        """Count `n` more units done; redraw if `mininterval` has passed or the total is reached."""
        self.n += n
        self._refresh(force=self.n == self.total)

    def set_postfix(self, **values: Any) -> None:
        """Show `key=value` pairs after the rate, floats to 4 significant digits: set_postfix(loss=0.25)."""
        self.set_postfix_str(", ".join(f"{key}={_shown(value)}" for key, value in values.items()))

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text
        self._refresh(force=False)

    def write(self, message: str) -> None:
        """Print `message` on its own line; on a terminal the bar is blanked first and redrawn below it.
        It prints even when the bar is disabled: disable silences the bar, not the caller's messages."""
        live = self.tty and not self._closed
        self._emit(("\r" + " " * self._drawn + "\r" if live else "") + message + "\n")
        if live:
            self._drawn = 0
            self._draw(self._clock())

    def close(self) -> None:
        """Draw the final state, once: the bar and a newline on a terminal, else the summary line."""
        if not self._closed:
            self._closed = True
            now = self._clock()
            if self.tty:
                self._draw(now)
                self._emit("\n")
            else:
                total = "" if self.total is None else f"/{_count(self.total)}"
                self._emit(f"{self._head}{_count(self.n)}{total} {self.unit} in {_hms(now - self._start)} "
                           f"({_rate(self.n, now - self._start, self.unit)}){self._postfix()}\n")

    def _refresh(self, force: bool) -> None:
        if self._closed:
            return
        now = self._clock()
        if self.tty and (force or now - self._last_draw >= self._mininterval):
            self._draw(now)
        elif not self.tty and now - self._last_log >= self._log_every:
            self._last_log = now
            self._emit(self._status(now, bar=False) + "\n")

    def _draw(self, now: float) -> None:
        line = self._status(now, bar=True)
        try:                                    # a wrapped line cannot be redrawn by "\r": cut it to fit
            line = line[:os.get_terminal_size(self.file.fileno()).columns - 1]
        except (AttributeError, OSError, ValueError):         # not a real terminal (a StringIO, a pipe)
            pass
        self._emit("\r" + line + " " * max(0, self._drawn - len(line)))
        self._drawn, self._last_draw = len(line), now

    def _emit(self, text: str) -> None:
        self.file.write(text)
        self.file.flush()

    def _postfix(self) -> str:
        return f", {self.postfix}" if self.postfix else ""

    def _status(self, now: float, bar: bool) -> str:
        elapsed = now - self._start
        tail = f"{_rate(self.n, elapsed, self.unit)}{self._postfix()}]"
        if self.total is None:
            return f"{self._head}{_count(self.n)}{self.unit} [{_hms(elapsed)}, {tail}"
        fraction = min(1.0, self.n / self.total) if self.total > 0 else 1.0
        left = max(0.0, self.total - self.n)
        eta = _hms(left * elapsed / self.n) if self.n > 0 and elapsed > 0 else "?"
        drawn = f"|{_bar(fraction, self.file)}|" if bar else ""
        return (f"{self._head}{int(fraction * 100):3d}%{drawn} {_count(self.n)}/{_count(self.total)} "
                f"[{_hms(elapsed)}<{eta}, {tail}")


progress = Progress        # tqdm's spelling: `for batch in progress(loader, desc="train")`


def _bar(fraction: float, file: TextIO) -> str:
    cells = fraction * BAR_WIDTH
    full = int(cells)
    if not (getattr(file, "encoding", None) or "utf-8").lower().replace("-", "").startswith("utf"):
        return ("#" * full).ljust(BAR_WIDTH)           # a stream that cannot encode the block characters
    return ("█" * full + (EIGHTHS[int((cells - full) * 8)] if full < BAR_WIDTH else "")).ljust(BAR_WIDTH)


def _shown(value: Any) -> str:
    # numpy's floats are numbers.Real too; its ints, and bools, are Integral and print whole
    real = isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
    return f"{value:.4g}" if real else str(value)


def _count(n: float) -> str:
    return str(int(n)) if n == int(n) else f"{n:.2f}"


def _hms(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _rate(n: float, elapsed: float, unit: str) -> str:
    if n <= 0 or elapsed <= 0:
        return f"?{unit}/s"
    per_second = n / elapsed
    if per_second < 1:
        return f"{1 / per_second:.2f}s/{unit}"
    x, scale = next((per_second / s, p) for s, p in ((1e6, "M"), (1e3, "k"), (1, "")) if per_second >= s)
    digits = 2 if x < 10 or not scale else 1 if x < 100 else 0         # scaled to 3 digits: 1.25k, 61.3k
    return f"{x:.{digits}f}{scale}{unit}/s"
