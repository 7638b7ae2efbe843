"""The profiler's event log (tg.profiler reads it). Every recording site in tg is written
`if trace.ON: trace.<record>(...)`, so while no profiler runs a site costs one module attribute read and
records nothing (`recorded` stays put: tests pin that, not a timer).

Events are tuples kept in a bounded deque, oldest dropped first:
    ("X", name, category, start ns, duration ns, thread id, args)   a span (Chrome's complete event)
    ("C", name, category, time ns, 0, thread id, {series: value})   a counter sample
    ("i", name, category, time ns, 0, thread id, args)              an instant
Times are time.perf_counter_ns() (CLOCK_MONOTONIC on Linux: one clock for every process of a host);
tg.profiler maps them onto the wall clock to merge the traces of a job's ranks.

    >>> start(); span("work", "user", now()); stop(); [e[1] for e in events()]
    ['work']
    >>> _ = phase("data"); phase("other"), phase_ns["data"] > 0
    ('data', True)
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

ON = False          # read at every recording site
recorded = 0        # events recorded since the process started (profiled or not)
_events: deque[tuple] = deque(maxlen=1 << 20)
_threads: dict[int, str] = {}    # thread id -> name, of every thread that recorded

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


def optimizer_phase() -> None:
    """The optimizer's part of a step starts (an optimizer's host step, in replays too)."""
    phase("optimizer")


def start(max_events: int = 1 << 20) -> None:
    """Record from now on (into an empty log of at most max_events, the newest kept)."""
    global ON, _events
    _events = deque(maxlen=max_events)
    _threads.clear()
    ON = True


def stop() -> None:
    global ON
    ON = False


def clear() -> None:
    _events.clear()


def events() -> list[tuple]:
    return list(_events)


def threads() -> dict[int, str]:
    return dict(_threads)


def _tid() -> int:
    tid = threading.get_ident()
    if tid not in _threads:
        _threads[tid] = threading.current_thread().name
    return tid


def span(name: str, cat: str, start_ns: int, end_ns: int | None = None, args: dict | None = None) -> None:
    """A span from start_ns to end_ns (now when None) on this thread."""
    global recorded
    recorded += 1
    _events.append(("X", name, cat, start_ns, (now() if end_ns is None else end_ns) - start_ns, _tid(), args))


def counter(name: str, values: dict[str, float]) -> None:
    global recorded
    recorded += 1
    _events.append(("C", name, "memory", now(), 0, _tid(), values))


def instant(name: str, cat: str, args: dict | None = None) -> None:
    global recorded
    recorded += 1
    _events.append(("i", name, cat, now(), 0, _tid(), args))


def launch(prog: Any, bufs: list, device: str, flops: int, nbytes: int) -> None:
    """Run a kernel launch waiting for it, as a span named as DEBUG=2 prints it, with the kernel's own
    FLOP and byte counts and the device's time for it."""
    t0 = now()
    took = prog(bufs, wait=True)
    span(prog.name, "kernel", t0, None, {"device": device, "flops": flops, "bytes": nbytes,
                                         "device_us": round((took or 0.0) * 1e6, 3)})


class region:
    """A span around a block while recording (cheap when not: one attribute read on enter and exit).

        >>> with region("phase"): pass
    """
    __slots__ = ("name", "cat", "args", "t0")

    def __init__(self, name: str, cat: str = "user", args: dict | None = None):
        self.name, self.cat, self.args, self.t0 = name, cat, args, 0

    def __enter__(self) -> region:
        if ON:
            self.t0 = now()
        return self

    def __exit__(self, *exc: Any) -> None:
        if ON and self.t0:
            span(self.name, self.cat, self.t0, None, self.args)
