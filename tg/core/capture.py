"""Watching what realize runs: the one place the JIT (and tests) hook into execution.

While a TinyJit captures, every launch, cross-device copy and host step is recorded into the active
`Capture`; `watch_schedules(fn)` calls fn with every schedule before it runs (tests use it to count
schedules or compile every kernel for another target). While a TinyJit runs its function (the eager
first call and the capture), `tracing()` is true and a read of tensor values to the host raises
(`host_read`): a replay runs only kernels, so a value Python saw would be frozen at the capture. The
other state a process keeps (pending assigns, reused schedules, RNG counters, caches) is listed in
docs/ARCHITECTURE.md's "Process state".

    >>> from tg import Tensor
    >>> with capturing(Capture()) as c:
    ...     _ = (Tensor([1.0, 2.0]) * 2).realize()
    >>> [call.kind for call in c.calls]
    ['kernel']
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Iterator

from tg.core import trace


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
_traced: list[str] = []     # the TinyJit functions running now, innermost last
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


@contextmanager
def tracing_call(name: str) -> Iterator[None]:
    """Mark the block as a TinyJit running function `name` (an eager first call or a capture)."""
    _traced.append(name)
    try:
        yield
    finally:
        _traced.pop()


def tracing() -> bool:
    """Whether a TinyJit is running its function: tensor values seen now may differ at every replay."""
    return bool(_traced)


def host_read() -> None:
    """Called before tensor values are copied to the host; raises while a TinyJit runs its function,
    naming the tg call that read and the line of user code that made it.

    This is what jax.jit does with a traced value; torch.compile instead breaks the graph and runs the
    rest eagerly, which a replay of launches cannot do (and a jit that silently stops replaying is a
    slow step nobody asked for)."""
    if not _traced:
        return
    op, where = _caller()
    raise ValueError(
        f"[jit] {_traced[-1]} reads tensor values on the host ({op}, at {where}) while TinyJit runs it; "
        f"a replay runs only the captured kernels, so what Python decided from those values (a bool "
        f"mask's positions, a value-dependent shape, an `if` on a tensor, a number) would stay the "
        f"first call's. Fix: move the read out of the jitted function (pass its result in as an "
        f"argument), or keep it on the device (`m.where(x, 0)` or `x * m` for `x[m]`, a mask or "
        f"`Tensor.where` for an `if`), or call the function without TinyJit")


_TG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_JIT_FILE = os.path.join(_TG_DIR, "core", "jit.py")


def _caller() -> tuple[str, str]:
    """(the outermost tg function on the stack called by the code TinyJit runs, "file:line" of that call)."""
    inside: list = []     # tg's frames, innermost first, up to the first outside tg or TinyJit's own
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path == _JIT_FILE or not path.startswith(_TG_DIR + os.sep):
            break
        if frame.f_code.co_qualname != "_view_op.<locals>.method":     # a view method's wrapper: the method
            inside.append(frame)
        frame = frame.f_back
    if frame is not None and os.path.abspath(frame.f_code.co_filename) == _JIT_FILE and len(inside) > 1:
        frame = inside.pop()      # the jitted function is tg's own (an optimizer's update)
    if not inside or frame is None:
        return "a host read", "?"
    name = inside[-1].f_code.co_qualname
    owner, _, method = name.partition(".")
    if owner.endswith("Mixin"):          # a part of Tensor (tg/core/mixin/): the user knows it as Tensor's
        name = f"Tensor.{method}"
    return name, f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


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
    if trace.ON:
        t0 = trace.now()
        fn()
        trace.span(getattr(fn, "__qualname__", "host step"), "host step", t0)
    else:
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
