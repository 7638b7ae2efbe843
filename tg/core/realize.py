"""Running a schedule: allocate, compile (all new kernels at once, in parallel), launch."""
from __future__ import annotations

import time
from typing import Any

from tg import config
from tg.core.device import Buffer, Device, GlobalCounters
from tg.core.lazy import LazyBuffer
from tg.core.ops import BufferOps
from tg.core.schedule import ScheduleItem, create_schedule
from tg.core.shape import prod

# When a TinyJit is capturing, every launch is also recorded here (see jit.py).
CAPTURE: Any = None


def realize(outs: list[LazyBuffer]) -> None:
    todo = [o for o in outs if o.base.realized is None and o.base.op is not BufferOps.CONST]
    if not todo:
        return
    run_schedule(create_schedule(todo))


def run_schedule(items: list[ScheduleItem]) -> None:
    debug = config.DEBUG
    start = time.perf_counter()
    by_device: dict[str, list[ScheduleItem]] = {}
    for it in items:
        if it.kind == "kernel" and prod(it.out.shape) > 0:
            by_device.setdefault(it.out.device, []).append(it)
    programs = {}
    for dev, its in by_device.items():
        for it, prog in zip(its, Device[dev].compile_many([it.kernel for it in its])):
            programs[id(it)] = prog
    if debug >= 3:
        for i, it in enumerate(items):
            print(f"[schedule] {i:3d} {it.kind:6s} {it.name} -> {it.out}")
    n_kernels = 0
    for it in items:
        out = it.out
        if it.kind == "alloc":
            out.realized = Buffer(out.device, prod(out.shape), out.dtype)
        elif it.kind == "copy":
            assert it.src is not None and it.src.realized is not None
            out.realized = Buffer(out.device, prod(out.shape), out.dtype).copyin(it.src.realized.numpy())
            if CAPTURE is not None:
                CAPTURE.add(None, [out.realized, it.src.realized], "copy")
        else:
            kernel = it.kernel
            assert kernel is not None
            if out.op is BufferOps.ASSIGN:
                buf = out.srcs[0].base.realized
                assert buf is not None, "assign target must be realized first"
            else:
                buf = Buffer(out.device, prod(out.shape), out.dtype)
            inputs = [b.realized for b in kernel.inputs]
            assert all(b is not None for b in inputs), "kernel input not realized"
            if prod(out.shape) > 0:
                prog = programs[id(it)]
                elapsed = prog([buf, *inputs], wait=debug >= 2)  # type: ignore[list-item]
                if CAPTURE is not None:
                    CAPTURE.add(prog, [buf, *inputs])
                n_kernels += 1
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
    if debug >= 1:
        print(f"[realize] {n_kernels} kernels, {len(items)} schedule items in "
              f"{(time.perf_counter() - start) * 1e3:.2f} ms")
