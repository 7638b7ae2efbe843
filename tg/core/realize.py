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
from typing import Any

import numpy as np

from tg import config
from tg.core import capture
from tg.core.device import Buffer, Device, GlobalCounters
from tg.core.dtype import DType, bf16_to_f32, dtypes
from tg.core.lazy import PENDING_ASSIGNS, LazyBuffer
from tg.core.ops import BufferOps
from tg.core.schedule import ScheduleItem, create_schedule
from tg.core.shape import prod


def from_numpy(bits: np.ndarray, dtype: DType, device: str) -> LazyBuffer:
    """A realized base on `device` holding `bits` (already in dtype's storage format), shaped like it."""
    flat = np.ascontiguousarray(bits).reshape(-1)
    return LazyBuffer.realized_as(Buffer(device, flat.size, dtype).copyin(flat), bits.shape)


def to_numpy(lb: LazyBuffer) -> np.ndarray:
    """lb's values as a numpy array of its shape (bfloat16 shown as float32); runs what it needs."""
    if prod(lb.shape) == 0:
        return np.zeros(lb.shape, dtype=lb.dtype.np_value)
    src = lb if lb.is_base and lb.op is not BufferOps.CONST else lb.contiguous()
    realize([src])
    assert src.realized is not None
    bits = src.realized.numpy()
    if lb.dtype == dtypes.bfloat16:
        bits = bf16_to_f32(bits)
    return bits.reshape(lb.shape)


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
    items = create_schedule(todo)
    capture.schedule_made(items)
    run_schedule(items)


def run_schedule(items: list[ScheduleItem]) -> None:
    """Run the items in order. Consumes `items` (the list is empty afterwards): each item is
    dropped once it has run, so a buffer the schedule made is freed right after its last reader,
    unless something outside the schedule (a Tensor, a TinyJit capture) still holds it."""
    debug = config.DEBUG
    start = time.perf_counter()
    n_items = len(items)
    by_device: dict[str, list[int]] = {}
    for i in range(n_items):
        if items[i].kind == "kernel" and prod(items[i].out.shape) > 0:
            by_device.setdefault(items[i].out.device, []).append(i)
    programs: list[Any] = [None] * n_items
    for dev, idx in by_device.items():
        for i, prog in zip(idx, Device[dev].compile_many([items[i].kernel for i in idx])):
            programs[i] = prog
    if debug >= 3:
        for i in range(n_items):
            print(f"[schedule] {i:3d} {items[i].kind:6s} {items[i].name} -> {items[i].out}")
    # pop() from the end hands out the items in order and drops the list's reference. Kernels run in
    # launch order on a device, so memory freed here is only reused by kernels launched after it.
    items.reverse()
    n_kernels = 0
    for i in range(n_items):
        n_kernels += _run_item(items.pop(), programs[i], debug)
        programs[i] = None   # a program may hold its kernel, and so its buffers (the NUMPY interpreter does)
    if debug >= 1:
        print(f"[realize] {n_kernels} kernels, {n_items} schedule items in "
              f"{(time.perf_counter() - start) * 1e3:.2f} ms")


def _run_item(it: ScheduleItem, prog: Any, debug: int) -> int:
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
        kernel = it.kernel
        assert kernel is not None
        if out.op is BufferOps.ASSIGN:
            buf = out.srcs[0].base.realized
            assert buf is not None, "assign target must be realized first"
        else:
            buf = Buffer(out.device, prod(out.shape), out.dtype)
        inputs = [b.realized for b in it.inputs]
        assert all(b is not None for b in inputs), "kernel input not realized"
        if prod(out.shape) > 0:
            elapsed = prog([buf, *inputs], wait=debug >= 2)
            capture.record(prog, [buf, *inputs])
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
