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
from typing import Callable

import numpy as np

from tg import config
from tg.core import capture, trace
from tg.core.device import Buffer, Device, GlobalCounters
from tg.core.dtype import DType, bf16_to_f32, dtypes, value_key
from tg.core.kernel import Kernel
from tg.core.lazy import PENDING_ASSIGNS, LazyBuffer
from tg.core.ops import BufferOps
from tg.core.schedule import (
    GraphKey,
    Overwritten,
    ScheduleItem,
    Structure,
    create_schedule,
    held_elsewhere,
    same_memory,
    structure,
)
from tg.core.shape import prod


def from_numpy(bits: np.ndarray, dtype: DType, device: str) -> LazyBuffer:
    """A realized base on `device` holding `bits` (already in dtype's storage format), shaped like it."""
    flat = np.ascontiguousarray(bits).reshape(-1)
    return LazyBuffer.realized_as(Buffer(device, flat.size, dtype).copyin(flat), bits.shape)


def to_numpy(lb: LazyBuffer) -> np.ndarray:
    """lb's values as a numpy array of its shape (bfloat16 shown as float32); runs what it needs.
    Every read of tensor values to the host comes here (and raises while a TinyJit runs its function)."""
    capture.host_read()
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


def known_values(lb: LazyBuffer) -> np.ndarray | None:
    """lb's values when they are already computed (its memory is realized), for checks that are free
    then (index bounds, class targets); None while lb is lazy, and while a TinyJit runs its function,
    where every replay brings new values and a read would be frozen into the capture."""
    if lb.base.realized is None or capture.tracing():
        return None
    return to_numpy(lb)


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


def realize(outs: list[LazyBuffer], slices: bool = True) -> None:
    """Compute outs now (`slices`: see schedule.structure; never while a TinyJit captures, whose replays
    bind the memory of its inputs, not views of it)."""
    todo = [o for o in outs if o.base.realized is None and o.base.op is not BufferOps.CONST]
    if not todo:
        return
    slices = slices and capture.active() is None
    limit = config.TG_SCHEDULE_CACHE
    s = structure(todo, slices) if limit > 0 else None
    reuse = None if s is None else _REUSE.get(s.key)
    if s is not None and reuse is not None and reuse.stale:
        kept = held_elsewhere([s.at(p) for p in reuse.stale], s.bases, [s.bases])
        if kept:
            # the schedule would leave values that an in-place write overwrites uncomputed, and something
            # still holds them: realize them too (a graph of another structure, with a schedule of its own)
            del s, reuse
            realize(todo + kept, slices)
            return
    if s is not None and reuse is not None:
        _REUSE.move_to_end(s.key)
        GlobalCounters.schedules_reused += 1
        if trace.ON:
            trace.instant("schedule reused", "lower", {"outputs": len(todo)})
        if config.DEBUG == 0 and reuse.fast is not None and not capture.watching():
            # the common case, a training step's: no ScheduleItems. The list is the only holder of
            # the graph (s goes), so each buffer is let go after its last use.
            graph = s.leaves[::-1] + s.bases
            del s
            reuse.run(graph)
            return
        items = reuse.bind(s)
    else:
        items = _make_schedule(todo, s, limit, slices)
    del s     # the items hold what they need, and let go of each buffer once it has run
    capture.schedule_made(items)
    run_schedule(items)


class _Reuse:
    """A schedule kept for graphs of one structure: each item with its buffers as positions in
    the graph (see schedule.Structure) and its compiled program. `run` runs it straight from those
    positions (the hot path of a repeated step); `bind` makes the ScheduleItems (for DEBUG output and
    schedule watchers)."""

    def __init__(self, steps: list[tuple], fast: list[tuple] | None, unused: tuple[int, ...] = (),
                 stale: tuple[int, ...] = ()):
        self.steps, self.fast, self.unused = steps, fast, unused
        # the positions of the bases the schedule leaves unstored that read memory it overwrites
        # (schedule.stale_readers): each time it is reused, those something still holds are realized too
        self.stale = stale

    @staticmethod
    def make(items: list[ScheduleItem], s: Structure, stale: list[LazyBuffer]) -> _Reuse | None:
        """None when an item names a buffer that is not in the graph (the scheduler added a copy)."""
        pos = s.position
        # one Kernel per distinct key (an LSTM's schedule holds a thousand items of thirty kernels): kept
        # schedules hold their kernels' ASTs, which every full collection of the garbage collector walks
        # (it took 300 ms every eighth step of word_language_model, with 126,000 KOps alive)
        kernels: dict[tuple, Kernel] = {}
        try:
            steps = [(it.kind, pos[id(it.out)],
                      it.kernel if it.kernel is None else kernels.setdefault(it.kernel.key, it.kernel),
                      None if it.src is None else pos[id(it.src)], [pos[id(b)] for b in it.inputs],
                      it.program) for it in items]
            stale_at = tuple(pos[id(b)] for b in stale)
        except KeyError:
            return None
        fast = _Reuse._fast_steps(items, steps, len(s.leaves))
        used = {i for step in fast for i in (step[0], *step[1])} if fast is not None else set()
        # bases fused into a kernel are no step's output or input: run lets go of them first, so that
        # only their readers' sources hold them, as in run_schedule
        unused = tuple(i for i in range(len(s.leaves) + len(s.bases)) if i not in used)
        return _Reuse(steps, fast, unused, stale_at)

    @staticmethod
    def _fast_steps(items: list[ScheduleItem], steps: list[tuple], n_leaves: int) -> list[tuple] | None:
        """The steps as run wants them, or None when one is a copy between devices (that goes
        through run_schedule). Each: its output's and inputs' indices into leaves[::-1] + bases (index
        n_leaves + position), the program, the output's element count, device and dtype, whether it
        writes its target's memory (ASSIGN), flops and bytes, and the indices whose last use it is
        (run drops them after it, so a buffer the schedule made is freed right after its last reader,
        as run_schedule frees it). All of these are fixed by the graph's structure."""
        if any(it.kind == "copy" for it in items):
            return None
        last: dict[int, int] = {}
        for i, (_, out, _, _, inputs, _) in enumerate(steps):
            for p in (out, *inputs):
                last[n_leaves + p] = i
        drops: list[list[int]] = [[] for _ in steps]
        for index, i in last.items():
            drops[i].append(index)
        fast = []
        for it, (_, out, _, _, inputs, program), drop in zip(items, steps, drops):
            lb, info = it.out, getattr(program, "info", None)
            fast.append((n_leaves + out, [n_leaves + i for i in inputs], program, prod(lb.shape), lb.device,
                         lb.dtype, lb.op is BufferOps.ASSIGN, 0 if info is None else info.flops,
                         0 if info is None else info.mem_bytes, tuple(drop)))
        return fast

    def bind(self, s: Structure) -> list[ScheduleItem]:
        at = s.at
        return [ScheduleItem(kind, at(out), kernel, None if src is None else at(src), [at(i) for i in inputs],
                             program) for kind, out, kernel, src, inputs, program in self.steps]

    def run(self, graph: list) -> None:
        """Run the schedule (`fast` is set: no copies) on a graph of its structure, given as
        leaves[::-1] + bases of its Structure, as run_schedule runs bind(s). Empties graph as it goes."""
        assert self.fast is not None
        for i in self.unused:
            graph[i] = None
        recording, traced = capture.active() is not None, trace.ON
        launched = ops = mem = 0
        for out_index, inputs, prog, size, device, dtype, assign, flops, nbytes, drops in self.fast:
            out = graph[out_index]
            if assign:
                buf = out.srcs[0].base.realized
                assert buf is not None, "assign target must be realized first"
            else:
                buf = Buffer(device, size, dtype)
            if size > 0 and prog is not None:      # no program: an allocation
                bufs = [buf, *[graph[i]._realized for i in inputs]]
                assert None not in bufs, "kernel input not realized"
                if traced:
                    trace.launch(prog, bufs, device, flops, nbytes)
                else:
                    prog(bufs)
                if recording:
                    capture.record(prog, bufs)
                del bufs
                launched += 1
                ops += flops
                mem += nbytes
            out.realized = buf
            out.srcs = ()
            del out, buf
            for i in drops:
                graph[i] = None
        GlobalCounters.kernel_count += launched
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem


# Schedules by graph structure, least recently used first (config.TG_SCHEDULE_CACHE of them).
_REUSE: OrderedDict[GraphKey, _Reuse] = OrderedDict()


# Replays by what they compute and their inputs' kind (Replay.signature), least recently used first
# (config.TG_SCHEDULE_CACHE of them); None: a computation whose schedule cannot be rerun this way.
_REPLAYS: OrderedDict[tuple, Replay | None] = OrderedDict()


def replayed(tag: tuple, inputs: list[LazyBuffer],
             build: Callable[..., list[LazyBuffer]]) -> list[LazyBuffer]:
    """build(*inputs) (lazy buffers, bases or not) realized now, each as a base of its own. The first
    time for inputs of one kind (tag, and each input's dtype, shape, view and which share memory) the
    graph is built and realized, and its schedule kept; every later time that schedule reruns on the
    new inputs' memory into new buffers without building any graph (see Replay). `tag` names what
    build computes from such inputs (build must make the same graph for inputs of the same kind).
    Unrealized inputs are realized first. With DEBUG, a schedule watcher or the schedule cache off,
    the graph is built every time (as watchers expect to see it)."""
    pending = [x for x in inputs if x.base._realized is None and x.base.op is not BufferOps.CONST]
    if pending:
        realize(pending)
    if config.DEBUG or capture.watching() or config.TG_SCHEDULE_CACHE <= 0:
        return _realized_bases(build(*inputs))
    key = (tag, Replay.signature(inputs))
    if key in _REPLAYS:
        _REPLAYS.move_to_end(key)
        replay = _REPLAYS[key]
        return replay.run(inputs) if replay is not None else _realized_bases(build(*inputs))
    outs = _own_bases(build(*inputs))
    # no memory slices: a replay binds its inputs' memory, not views of it
    s = structure(outs, slices=False)
    layout = None if s is None else _Layout(s)    # before realize, which empties the graph
    realize(outs, slices=False)
    reuse = None if s is None else _REUSE.get(s.key)
    _REPLAYS[key] = None if layout is None or reuse is None else Replay.make(layout, reuse, inputs, outs)
    while len(_REPLAYS) > config.TG_SCHEDULE_CACHE:
        _REPLAYS.popitem(last=False)
    return outs


def _own_bases(outs: list[LazyBuffer]) -> list[LazyBuffer]:
    """outs, each an unrealized base that is not a constant (the others copied into one)."""
    return [o if o.is_base and o._realized is None and o.op is not BufferOps.CONST
            else LazyBuffer.empty(o.shape, o.dtype, o.device).assign(o) for o in outs]


def _realized_bases(outs: list[LazyBuffer]) -> list[LazyBuffer]:
    outs = _own_bases(outs)
    realize(outs)
    return outs


class _Layout:
    """Where a Structure's lazy buffers sit in the list _Reuse.run and Replay.run work on (its leaves,
    reversed, then its bases): index by id, how many leaves, and each assign's target."""

    def __init__(self, s: Structure):
        n = len(s.leaves)
        self.size = n + len(s.bases)
        self.index = {id(lb): n - 1 - j for j, lb in enumerate(s.leaves)}
        self.index.update((id(lb), n + p) for p, lb in enumerate(s.bases))
        self.n_leaves = n
        self.targets = {n + p: self.index[id(lb.srcs[0].base)] for p, lb in enumerate(s.bases)
                        if lb.op is BufferOps.ASSIGN}


class Replay:
    """A schedule rerun on new inputs without its graph. For a Function whose graph is large and
    the same every call (an LSTM layer's: thousands of nodes a step), building the graph, walking its
    structure and collecting it afterwards cost more than its kernels; a replay costs only the
    launches. Each step as _Reuse.run runs it, but on a list of buffers (the graph's leaves, reversed,
    then its bases, as there): the inputs' memory is bound to their leaves, every other buffer is new,
    and an assign writes the buffer its target holds. A graph that reads memory other than its inputs'
    (a tensor build's closure holds, a value build realized) is not replayed: that memory may differ
    from call to call."""

    def __init__(self, size: int, bind: list[tuple[int, int]], steps: list[tuple],
                 outs: list[tuple[int, tuple[int, ...]]]):
        self.size, self.bind, self.steps, self.outs = size, bind, steps, outs

    @staticmethod
    def signature(inputs: list[LazyBuffer]) -> tuple:
        """What a schedule depends on in its inputs: each one's dtype, device, base shape and view (a
        constant: its value), and which of them share memory."""
        memory: dict[int, int] = {}
        sig: list[tuple] = []
        for x in inputs:
            base = x.base
            if base.op is BufferOps.CONST and base._realized is None:
                sig.append((x.dtype.name, x.device, value_key(base.arg), x.st.key))
            else:
                sig.append((x.dtype.name, x.device, base.shape, x.st.key,
                            memory.setdefault(id(base._realized), len(memory))))
        return tuple(sig)

    @staticmethod
    def make(layout: _Layout, reuse: _Reuse, inputs: list[LazyBuffer],
             outs: list[LazyBuffer]) -> Replay | None:
        """The replay of reuse, the schedule of a graph (laid out in layout) that read inputs and made
        outs; None when it has a step this cannot rerun (a copy between devices), leaves values
        uncomputed or reads memory that is not an input's."""
        if reuse.fast is None or reuse.stale:
            return None
        index = layout.index
        bind = [(i, index[id(x.base)]) for i, x in enumerate(inputs) if id(x.base) in index]
        if len({at for _, at in bind if at < layout.n_leaves}) < layout.n_leaves:    # a leaf no input binds
            return None
        keep = {index[id(o)] for o in outs}
        last: dict[int, int] = {}
        steps: list[tuple] = []
        for k, (out, ins, prog, size, device, dtype, assign, flops, nbytes, _) in enumerate(reuse.fast):
            target = layout.targets[out] if assign else -1
            for at in (out, *ins, target):
                last[at] = k
            steps.append((out, ins, prog, size, device, dtype, target, flops, nbytes, []))
        for at, k in last.items():
            if at >= 0 and at not in keep:
                steps[k][9].append(at)
        return Replay(layout.size, bind, steps, [(index[id(o)], o.shape) for o in outs])

    def run(self, inputs: list[LazyBuffer]) -> list[LazyBuffer]:
        """The outputs computed from inputs (of the recorded kind), each a new realized base."""
        bufs: list[Buffer | None] = [None] * self.size
        for i, at in self.bind:
            bufs[at] = inputs[i].base._realized
        recording, traced = capture.active() is not None, trace.ON
        launched = ops = mem = 0
        for out, ins, prog, size, device, dtype, target, flops, nbytes, drops in self.steps:
            buf = bufs[target] if target >= 0 else Buffer(device, size, dtype)
            if size > 0 and prog is not None:      # no program: an allocation
                args = [buf, *[bufs[i] for i in ins]]
                assert None not in args, "kernel input not bound"
                if traced:
                    trace.launch(prog, args, device, flops, nbytes)
                else:
                    prog(args)
                if recording:
                    capture.record(prog, args)
                launched += 1
                ops += flops
                mem += nbytes
            bufs[out] = buf
            for at in drops:
                bufs[at] = None
        GlobalCounters.kernel_count += launched
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem
        return [LazyBuffer.realized_as(bufs[at], shape) for at, shape in self.outs]  # type: ignore[arg-type]


def _make_schedule(todo: list[LazyBuffer], s: Structure | None, limit: int,
                   slices: bool = True) -> list[ScheduleItem]:
    """A new schedule for todo, compiled, and kept by its structure s (when there is one) for the
    next graph of the same structure (a training step's second and later realizes)."""
    overwritten = Overwritten()
    t0 = trace.now() if trace.ON else 0
    items = _fuse_rows(create_schedule(todo, None if s is None else s.bases, overwritten), todo)
    if trace.ON:
        trace.span("schedule", "lower", t0, None, {"items": len(items)})
    GlobalCounters.schedules_built += 1
    _compile(items)
    if s is not None and overwritten.kept:
        # it also computes values held elsewhere that an in-place write overwrites: the schedule of
        # todo + those, which is what a reuse (see realize) runs for such a graph
        s = structure(todo + overwritten.kept, slices)
    if s is not None:
        made = _Reuse.make(items, s, overwritten.left)
        if made is not None:
            _REUSE[s.key] = made
            while len(_REUSE) > limit:
                _REUSE.popitem(last=False)
    return items


def _fuse_rows(items: list[ScheduleItem], outs: list[LazyBuffer]) -> list[ScheduleItem]:
    """items with the row groups of each device that makes them (the CPU's) as one item each."""
    for dev in {it.out.device for it in items if it.kind == "kernel"}:
        fuse = getattr(Device[dev], "fuse_rows", None)
        if fuse is not None:
            items = fuse(items, outs)
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
        # schedule inputs are bases: their memory is _realized (the property costs a call each)
        bufs = [buf, *[b._realized for b in it.inputs]]
        assert None not in bufs, "kernel input not realized"
        info = getattr(prog, "info", None)
        if size > 0:
            if trace.ON:
                elapsed = trace.launch(prog, bufs, out.device, info.flops if info is not None else 0,
                                       info.mem_bytes if info is not None else 0)
            else:
                elapsed = prog(bufs, wait=debug >= 2)
            if capture.active() is not None:
                capture.record(prog, bufs)
            launched = 1
            GlobalCounters.kernel_count += 1
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
