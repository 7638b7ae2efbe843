"""Watching what realize runs: the one place the JIT (and tests) hook into execution.

While a TinyJit captures, every launch, cross-device copy and host step is recorded into the active
`Capture`; `watch_schedules(fn)` calls fn with every schedule before it runs (tests use it to count
schedules or compile every kernel for another target). Nothing else in tg keeps execution state.

    >>> from tg import Tensor
    >>> with capturing(Capture()) as c:
    ...     _ = (Tensor([1.0, 2.0]) * 2).realize()
    >>> [call.kind for call in c.calls]
    ['kernel']
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass
class CapturedCall:
    """One step seen during capture: a program and its buffers ("kernel"), a copy between devices
    ("copy": buffers dst, src) or a host function ("host")."""
    prog: Any
    bufs: list
    kind: str = "kernel"


class Capture:
    """The calls recorded while active, in launch order."""

    def __init__(self) -> None:
        self.calls: list[CapturedCall] = []

    def add(self, prog: Any, bufs: list, kind: str = "kernel") -> None:
        self.calls.append(CapturedCall(prog, list(bufs), kind))


_active: Capture | None = None
_schedule_watchers: list[Callable[[list], None]] = []


def active() -> Capture | None:
    """The capture in progress, if any."""
    return _active


@contextmanager
def capturing(capture: Capture) -> Iterator[Capture]:
    """Record into `capture` for the duration of the block; captures do not nest."""
    global _active
    if _active is not None:
        raise RuntimeError("[jit] TinyJit functions cannot be nested")
    _active = capture
    try:
        yield capture
    finally:
        _active = None


def record(prog: Any, bufs: list, kind: str = "kernel") -> None:
    """Called by realize for every launch and copy, and by host_step."""
    if _active is not None:
        _active.add(prog, bufs, kind)


def host_step(fn: Callable[[], None]) -> None:
    """Run fn() now and, while a TinyJit captures, at this point of every replay too.

        >>> calls = []
        >>> host_step(lambda: calls.append(1)); calls
        [1]
    """
    fn()
    record(fn, [], "host")


@contextmanager
def watch_schedules(fn: Callable[[list], None]) -> Iterator[None]:
    """Call fn(items) with every schedule realize is about to run, inside the block."""
    _schedule_watchers.append(fn)
    try:
        yield
    finally:
        _schedule_watchers.remove(fn)


def add_schedule_watcher(fn: Callable[[list], None]) -> None:
    """watch_schedules for the rest of the process (a test session's hook)."""
    _schedule_watchers.append(fn)


def watching() -> bool:
    """Whether anyone watches schedules (realize makes ScheduleItems only for them or for DEBUG)."""
    return bool(_schedule_watchers)


def schedule_made(items: list) -> None:
    for fn in list(_schedule_watchers):
        fn(items)
