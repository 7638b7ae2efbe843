"""Running a collective on tensors: a tensor's memory as a host array to work on in place and what makes
the result visible in it (`_as_host`), device memory moved in parts through a pinned staging block
(`_pipelined`), and a call run now or as a `Work` on the group's worker thread (`_run`)."""
from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any, Callable

import numpy as np

from tg.core import trace
from tg.core.host import HOST_DEVICES, HostView
from tg.distributed.errors import DistributedError
from tg.distributed.process_group import ProcessGroup
from tg.distributed.startup import _group
from tg.distributed.transport.wire import carried


class Work:
    """Handle of a call made with `async_op=True` (or isend/irecv), as torch.distributed's Work:
    `wait(timeout)` blocks until the call is done (and raises its error), `is_completed()` and
    `exception()` ask without blocking. The tensor holds the result only after wait().

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> x = np.ones(3)
    >>> work = dist.all_reduce(x, async_op=True)     # returns at once; compute can overlap here
    >>> work.wait()
    True
    >>> work.is_completed(), x.tolist()
    (True, [1.0, 1.0, 1.0])
    >>> dist.destroy_process_group()
    """

    def __init__(self, future: Future, after: Callable[[], None] | None = None):
        self._future, self._after, self._done = future, after, False

    def wait(self, timeout: float | timedelta | None = None) -> bool:
        t = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        blocked = not self._future.done()
        t0, before = (trace.now(), trace.phase("communication")) if blocked else (0, "")
        try:
            self._future.result(timeout=t)
        except FutureTimeout:
            raise DistributedError(f"[distributed] Work.wait timed out after {t}s") from None
        finally:
            if blocked:
                trace.phase(before)
                if trace.ON:
                    trace.span("wait", "collective wait", t0)
        if not self._done and self._after is not None:
            self._after()
        self._done = True
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def exception(self) -> BaseException | None:
        return self._future.exception() if self._future.done() else None


def _as_host(t: Any, what: str) -> tuple[np.ndarray, Callable[[], None] | None]:
    """A host array to work on in place, and what to do afterwards to make the result visible in t.
    Anything a collective cannot carry raises here, at the call, before any byte moves."""
    if isinstance(t, np.ndarray):
        carried(t.dtype, what)
        if not t.flags.c_contiguous or not t.flags.writeable or not t.flags.aligned:
            raise ValueError(f"[distributed] {what}: numpy arrays must be C-contiguous, aligned and "
                             f"writeable; pass a copy (np.array(x)) instead")
        return t, None
    from tg.core.tensor import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(
            f"[distributed] {what}: expected a tg Tensor or a numpy array, got {type(t).__name__}"
        )
    if _shares_memory(t):
        # a view's result goes where torch's goes, into its root's memory (assign writes the root and
        # re-derives the root's other views); reading a copy leaves t a view of its root
        values = t.numpy()

        def write_back() -> None:
            from tg.core.tensor import NoGrad
            with NoGrad():
                t.assign(Tensor(values, device=t.device, dtype=t.dtype)).realize()
        return values, write_back
    # the collective overwrites this memory in place: HostView computes what still reads it first
    view = HostView(t)
    arr = view.read().reshape(t.shape)
    if view.zero_copy:
        return arr, None
    return arr, lambda: view.write(arr)


def _shares_memory(t: Any) -> bool:
    """Whether tensor t is a view of another tensor's memory (a slice, chunk, reshape, transpose,
    detach) or the root of such tensors: written in place, its memory would not be where those tensors
    look, so a collective's result reaches it through Tensor.assign."""
    return getattr(t, "_alias", None) is not None or bool(getattr(t, "_views", None))


STAGE_PART = 4 << 20    # bytes of device memory a pipelined collective moves per step


def _device_view(t: Any) -> HostView | None:
    """A HostView of t when t is a tensor in device memory large enough to move in parts, else None."""
    if isinstance(t, np.ndarray):
        return None
    from tg.core.tensor import Tensor
    if not isinstance(t, Tensor) or t.device in HOST_DEVICES or t.nbytes <= STAGE_PART or _shares_memory(t):
        return None
    view = HostView(t)
    return view if view.pipelined else None


def _pipelined(group: Any, call: Callable[[np.ndarray], tuple], view: HostView, read: bool, write: bool,
               async_op: bool) -> Any:
    """An elementwise collective on device memory, in parts of STAGE_PART bytes through the view's
    (pinned) staging block: part k+1 is copied to the host while part k crosses the transport on the
    group's worker thread, and part k is copied back while later parts cross. Every rank passes a
    device tensor of the same size, so every rank cuts the same parts."""
    g = _group(group)
    flat = view.staged()
    step = max(STAGE_PART // flat.itemsize, 1)
    parts = [(lo, min(lo + step, flat.size)) for lo in range(0, flat.size, step)]
    futures = []
    for lo, hi in parts:
        if read:
            view.read_part(lo, hi)
        fn, args = call(flat[lo:hi])
        futures.append(g.submit(fn, *args))

    def finish() -> None:
        for (lo, hi), future in zip(parts, futures):
            future.result()
            if write:
                view.write_part(lo, hi)
    if async_op:
        return Work(futures[-1], finish)
    finish()
    return None


def _run(group: Any, fn: Callable, args: tuple, after: Callable[[], None] | None, async_op: bool) -> Any:
    g = _group(group)
    if not async_op:
        g.run_now(fn, *args)
        if after is not None:
            after()
        return None
    return Work(g.submit(fn, *args), after)


def _chain(*fns: Callable[[], None] | None) -> Callable[[], None] | None:
    live = [f for f in fns if f is not None]
    if not live:
        return None

    def run() -> None:
        for f in live:
            f()
    return run


def _check_root(g: ProcessGroup, root: int, what: str) -> int:
    if not 0 <= root < g.size:
        raise ValueError(f"[distributed] {what}: rank {root} is out of range for a group of {g.size}")
    return root


def _group_rank(group: Any, global_rank: int) -> int:
    g = _group(group)
    if group is None:
        return global_rank
    if global_rank not in g.ranks:
        raise ValueError(f"[distributed] rank {global_rank} is not in the group {g.ranks}")
    return g.ranks.index(global_rank)
