"""The profiler's event log (tg.profiler reads it). Every recording site in tg is written
`if trace.ON: trace.<record>(...)`, so while no profile records a site costs one module attribute read and
records nothing (`recorded` stays put: tests pin that, not a timer).

One log for the process, a bounded deque (the newest kept); each profile that records is a reader of it
from the count it started at (`start` returns it, `since` reads from it), so profiles may nest (a
script's own inside TG_PROFILE's whole-run one). Events are tuples:
    ("X", name, category, start ns, duration ns, thread id, args)   a span (Chrome's complete event)
    ("C", name, category, time ns, 0, thread id, (series, value))   a counter sample
    ("i", name, category, time ns, 0, thread id, args)              an instant
args is a dict, None, or for a kernel launch the tuple KERNEL_ARGS names (smaller: a kernel's is the
commonest event). Times are time.perf_counter_ns() (CLOCK_MONOTONIC on Linux: one clock for every
process of a host); tg.profiler maps them onto the wall clock to merge the traces of a job's ranks.

    >>> mark = start(); span("work", "user", now()); stop(); [e[1] for e in since(mark)]
    ['work']
    >>> _ = phase("data"); phase("other"), phase_ns["data"] > 0
    ('data', True)
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

ON = False          # read at every recording site: some profile records
recorded = 0        # events recorded since the process started (profiled or not)
_events: deque[tuple] = deque(maxlen=1 << 20)
_threads: dict[int, str] = {}    # thread id -> name, of every thread that recorded
_readers = 0                     # profiles recording now
KERNEL_ARGS = ("device", "flops", "bytes", "device_us")

now = time.perf_counter_ns

# Step phases, always on (a few marks a step): the main thread's time since the process started, by
# the phase it was in. A training script marks its own phases; Optimizer.step marks "optimizer" as a
# host step (so a TinyJit replay marks it at the same point among the kernels); a collective the main
# thread waits in counts as "communication".
phase_ns: dict[str, int] = {}
_phase: tuple[str, int] = ("other", now())
MAIN = threading.main_thread().ident


def phase(name: str) -> str:
    """From now on the main thread's time counts to phase `name` (called from another thread: nothing).
    Returns the phase before, to go back to."""
    global _phase
    before, since = _phase
    if threading.get_ident() != MAIN:
        return before
    t = now()
    phase_ns[before] = phase_ns.get(before, 0) + t - since
    _phase = (name, t)
    return before


# called before a phase mark when set (tg.profiler.synchronize_phases): waits for the devices, so that a
# step's split is the devices' time and not only the host's launching on an asynchronous device
phase_sync: list[Callable[[], None]] = []


def optimizer_phase() -> None:
    """The optimizer's part of a step starts (an optimizer's host step, in replays too)."""
    for wait in phase_sync:
        wait()
    phase("optimizer")


def start(max_events: int = 1 << 20) -> int:
    """A profile starts recording; returns the count to read its events from (`since`). The log keeps
    the newest max_events (the largest any recording profile asked for)."""
    global ON, _events, _readers
    if _readers == 0:
        _events.clear()
    if max_events != _events.maxlen and (_readers == 0 or max_events > (_events.maxlen or 0)):
        _events = deque(_events, maxlen=max_events)
    _readers += 1
    ON = True
    return recorded


def stop() -> None:
    """A profile stops recording (the log records while any other still does)."""
    global ON, _readers
    _readers = max(0, _readers - 1)
    ON = _readers > 0


def since(mark: int) -> list[tuple]:
    """The events recorded from count `mark` on that the log still holds."""
    n = min(recorded - mark, len(_events))
    return list(_events)[len(_events) - n:] if n > 0 else []


def threads() -> dict[int, str]:
    return dict(_threads)


def _tid() -> int:
    tid = threading.get_ident()
    if tid not in _threads:
        _threads[tid] = threading.current_thread().name
    return tid


def span(name: str, cat: str, start_ns: int, end_ns: int | None = None,
         args: dict | tuple | None = None) -> None:
    """A span from start_ns to end_ns (now when None) on this thread."""
    global recorded
    recorded += 1
    _events.append(("X", name, cat, start_ns, (now() if end_ns is None else end_ns) - start_ns, _tid(), args))


def kernels(runs: list[tuple[str, int, int, str, int, int]]) -> None:
    """Kernel launches timed by the caller, added at once: (name, start ns, duration ns, device, flops,
    bytes) each (a TinyJit replay's, which keeps the per-launch cost to two clock reads)."""
    global recorded
    recorded += len(runs)
    tid = _tid()
    _events.extend(("X", name, "kernel", t, d, tid, (dev, flops, nbytes, round(d / 1000, 3)))
                   for name, t, d, dev, flops, nbytes in runs)


def counter(name: str, series: str, value: float) -> None:
    """A sample of a counter track (name; one series, value)."""
    global recorded
    recorded += 1
    _events.append(("C", name, "memory", now(), 0, _tid(), (series, value)))


def instant(name: str, cat: str, args: dict | None = None) -> None:
    global recorded
    recorded += 1
    _events.append(("i", name, cat, now(), 0, _tid(), args))


def launch(prog: Any, bufs: list, device: str, flops: int, nbytes: int) -> float | None:
    """Run a kernel launch waiting for it, as a span named as DEBUG=2 prints it, with the kernel's own
    FLOP and byte counts and the device's time for it (returned, as the program returns it)."""
    t0 = now()
    took = prog(bufs, wait=True)
    span(prog.name, "kernel", t0, None, (device, flops, nbytes, round((took or 0.0) * 1e6, 3)))
    return took


class region:
    """A span around a block while recording (cheap when not: one attribute read on enter and exit).

        >>> with region("phase"): pass
    """
    __slots__ = ("name", "cat", "args", "t0")

    def __init__(self, name: str, cat: str = "user", args: dict | None = None):
        self.name, self.cat, self.args, self.t0 = name, cat, args, 0

    def __enter__(self) -> region:
        self.t0 = now() if ON else 0
        return self

    def __exit__(self, *exc: Any) -> None:
        if ON and self.t0:
            span(self.name, self.cat, self.t0, None, self.args)
