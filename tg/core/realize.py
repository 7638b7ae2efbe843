"""Running a schedule: allocate, compile (all new kernels at once, in parallel), launch. Also where
host data enters and leaves the lazy graph (from_numpy, to_numpy): the only core module above both
the graph and the devices.

    >>> import numpy as np
    >>> from tg.core.dtype import dtypes
    >>> from tg.core.ops import BinaryOps
    >>> x = from_numpy(np.arange(3, dtype=np.float32), dtypes.float32, "NUMPY")
    >>> to_numpy(x.e(BinaryOps.MUL, x)).tolist()
    [0.0, 1.0, 4.0]
"""
from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from tg import config
from tg.core import capture
from tg.core.device import Buffer, Device, GlobalCounters
from tg.core.dtype import DType, bf16_to_f32, dtypes
from tg.core.lazy import PENDING_ASSIGNS, LazyBuffer
from tg.core.ops import BufferOps
from tg.core.schedule import GraphKey, ScheduleItem, Structure, create_schedule, same_memory, structure
from tg.core.shape import prod


def from_numpy(bits: np.ndarray, dtype: DType, device: str) -> LazyBuffer:
    """A realized base on `device` holding `bits` (already in dtype's storage format), shaped like it."""
    flat = np.ascontiguousarray(bits).reshape(-1)
    return LazyBuffer.realized_as(Buffer(device, flat.size, dtype).copyin(flat), bits.shape)


def to_numpy(lb: LazyBuffer) -> np.ndarray:
    """lb's values as a numpy array of its shape (bfloat16 shown as float32); runs what it needs."""
    if prod(lb.shape) == 0:
        return np.zeros(lb.shape, dtype=lb.dtype.np_value)
    strided = _strided_read(lb)
    if strided is not None:
        return strided
    src = lb if lb.is_base and lb.op is not BufferOps.CONST else lb.contiguous()
    realize([src])
    assert src.realized is not None
    bits = src.realized.numpy()
    if lb.dtype == dtypes.bfloat16:
        bits = bf16_to_f32(bits)
    return bits.reshape(lb.shape)


def _strided_read(lb: LazyBuffer) -> np.ndarray | None:
    """A plain strided view (no mask, no negative stride) of realized memory, read on the host as a
    numpy view of the base's bits, when reading the whole base costs little (it is small, or the view
    covers most of it): no copy kernel, no schedule. None when it does not apply."""
    base, st = lb.base, lb.st
    if lb.is_base or base.realized is None or len(st.views) != 1 or lb.dtype != base.dtype:
        return None
    view = st.views[0]
    if view.mask is not None or any(s < 0 for s in view.strides):
        return None
    size = base.realized.size
    if size > STRIDED_READ_ALL and 2 * prod(lb.shape) < size:
        return None
    flat = base.realized.numpy()
    if lb.dtype == dtypes.bfloat16:
        flat = bf16_to_f32(flat)
    return np.lib.stride_tricks.as_strided(flat[view.offset:], lb.shape,
                                           tuple(s * flat.itemsize for s in view.strides), writeable=False)


# elements of a base read whole for any strided view of it (to_numpy)
STRIDED_READ_ALL = 1 << 16


def realize_readers(lbs: list[LazyBuffer]) -> None:
    """Compute now every pending computation that reads the memory of these lazy buffers (through
    any alias), so that writing that memory in place cannot change what they compute."""
    pending = {id(r): r for lb in lbs for h in same_memory(lb.base) for r in h.readers
               if r.srcs and r.realized is None}     # a computed reader has no sources left
    if pending:
        realize(list(pending.values()))


def flush_assigns() -> None:
    """Run every pending in-place assign now (one schedule)."""
    pending = [lb for lb in list(PENDING_ASSIGNS) if lb.realized is None]
    PENDING_ASSIGNS.clear()
    if pending:
        realize(pending)


def realize(outs: list[LazyBuffer]) -> None:
    todo = [o for o in outs if o.base.realized is None and o.base.op is not BufferOps.CONST]
    if not todo:
        return
    items = _schedule(todo)
    capture.schedule_made(items)
    run_schedule(items)


class _Reuse:
    """A schedule kept for graphs of one structure: each item with its buffers as positions in
    the graph (see schedule.Structure) and its compiled program."""

    def __init__(self, steps: list[tuple]):
        self.steps = steps

    @staticmethod
    def make(items: list[ScheduleItem], s: Structure) -> _Reuse | None:
        """None when an item names a buffer that is not in the graph (the scheduler added a copy)."""
        pos = s.position
        try:
            return _Reuse([(it.kind, pos[id(it.out)], it.kernel, None if it.src is None else pos[id(it.src)],
                            [pos[id(b)] for b in it.inputs], it.program) for it in items])
        except KeyError:
            return None

    def bind(self, s: Structure) -> list[ScheduleItem]:
        at = s.at
        return [ScheduleItem(kind, at(out), kernel, None if src is None else at(src), [at(i) for i in inputs],
                             program) for kind, out, kernel, src, inputs, program in self.steps]


# Schedules by graph structure, least recently used first (config.TG_SCHEDULE_CACHE of them).
_REUSE: OrderedDict[GraphKey, _Reuse] = OrderedDict()


def _schedule(todo: list[LazyBuffer]) -> list[ScheduleItem]:
    """The schedule for todo, compiled: reused when a graph of the same structure was scheduled
    before (a training step's second and later realizes), else made, compiled and kept."""
    limit = config.TG_SCHEDULE_CACHE
    s = structure(todo) if limit > 0 else None
    if s is not None:
        reuse = _REUSE.get(s.key)
        if reuse is not None:
            _REUSE.move_to_end(s.key)
            GlobalCounters.schedules_reused += 1
            return reuse.bind(s)
    items = create_schedule(todo, None if s is None else s.bases)
    GlobalCounters.schedules_built += 1
    _compile(items)
    if s is not None:
        made = _Reuse.make(items, s)
        if made is not None:
            _REUSE[s.key] = made
            while len(_REUSE) > limit:
                _REUSE.popitem(last=False)
    return items


def _compile(items: list[ScheduleItem]) -> None:
    """Set each kernel item's program (new kernels are lowered and built, all of a device's at once)."""
    by_device: dict[str, list[ScheduleItem]] = {}
    for it in items:
        if it.kind == "kernel" and it.program is None and prod(it.out.shape) > 0:
            by_device.setdefault(it.out.device, []).append(it)
    for dev, todo in by_device.items():
        for it, prog in zip(todo, Device[dev].compile_many([it.kernel for it in todo])):
            it.program = prog


def run_schedule(items: list[ScheduleItem]) -> None:
    """Run the items in order. Consumes `items` (the list is empty afterwards): each item is
    dropped once it has run, so a buffer the schedule made is freed right after its last reader,
    unless something outside the schedule (a Tensor, a TinyJit capture) still holds it."""
    debug = config.DEBUG
    start = time.perf_counter()
    n_items = len(items)
    _compile(items)
    if debug >= 3:
        for i in range(n_items):
            print(f"[schedule] {i:3d} {items[i].kind:6s} {items[i].name} -> {items[i].out}")
    # pop() from the end hands out the items in order and drops the list's reference. Kernels run in
    # launch order on a device, so memory freed here is only reused by kernels launched after it.
    items.reverse()
    n_kernels = 0
    for _ in range(n_items):
        n_kernels += _run_item(items.pop(), debug)
    if debug >= 1:
        print(f"[realize] {n_kernels} kernels, {n_items} schedule items in "
              f"{(time.perf_counter() - start) * 1e3:.2f} ms")


def _run_item(it: ScheduleItem, debug: int) -> int:
    """Run one schedule item; returns the number of kernels launched. Its own function so that
    nothing of the item outlives the call (run_schedule's buffers die after their last reader)."""
    out = it.out
    launched = 0
    if it.kind == "alloc":
        out.realized = Buffer(out.device, prod(out.shape), out.dtype)
    elif it.kind == "copy":
        assert it.src is not None and it.src.realized is not None
        out.realized = Buffer(out.device, prod(out.shape), out.dtype).copyin(it.src.realized.numpy())
        capture.record(None, [out.realized, it.src.realized], "copy")
    else:
        prog = it.program
        size = prod(out.shape)
        if out.op is BufferOps.ASSIGN:
            buf = out.srcs[0].base.realized
            assert buf is not None, "assign target must be realized first"
        else:
            buf = Buffer(out.device, size, out.dtype)
        # schedule inputs are bases: their memory is in __dict__ (the property costs a call each)
        bufs = [buf, *[b.__dict__["realized"] for b in it.inputs]]
        assert None not in bufs, "kernel input not realized"
        if size > 0:
            elapsed = prog(bufs, wait=debug >= 2)
            if capture.active() is not None:
                capture.record(prog, bufs)
            launched = 1
            GlobalCounters.kernel_count += 1
            info = getattr(prog, "info", None)
            if info is not None:
                GlobalCounters.global_ops += info.flops
                GlobalCounters.global_mem += info.mem_bytes
            if debug >= 2:
                t = elapsed or 1e-9
                flops = info.flops if info is not None else 0
                mem = info.mem_bytes if info is not None else 0
                print(f"[kernel] {prog.name:30s} {out.device:5s} {t * 1e6:9.1f} us "
                      f"{flops / t / 1e9:8.2f} GFLOPS {mem / t / 1e9:8.2f} GB/s")
                GlobalCounters.time_sum_s += t
            if debug >= 4:
                print(getattr(prog, "src", ""))
        out.realized = buf
    out.srcs = ()
    return launched
