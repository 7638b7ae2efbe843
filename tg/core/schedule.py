"""The scheduler cuts the lazy graph into kernels.

Rules (pinned by tests/core/test_fusion.py):
- elementwise ops are inlined into every consumer (recomputed, never stored), unless a consumer
  reads them through a padded view (the padding must read as zero, not as f(0)), or two kernels
  would recompute more than SHARED_RECOMPUTE_LIMIT ops of them;
- a reduce takes its elementwise producers with it;
- an elementwise consumer that reads a reduce's result at the same index (any reshape of it)
  fuses after it as an epilogue, when it is the reduce's only consumer (unless the epilogue is long
  and the output large: an epilogue runs unvectorised, so gelu after a big matmul is stored first,
  rounded where the product is float16 / bfloat16);
- a kernel holds at most one reduce, and a reduce is never inlined into another reduce's input;
- COPY, ASSIGN (and so `contiguous()`) and the outputs asked for are always stored.

    >>> from tg.core.lazy import LazyBuffer
    >>> x = LazyBuffer.const(1.0, dtypes.float32, "NUMPY", (4,))
    >>> len(create_schedule([x.e(BinaryOps.ADD, x).r(ReduceOps.SUM, (0,))]))
    1
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from tg.core import composite
from tg.core.dtype import DType, dtypes, value_key
from tg.core.kernel import AstOps, Kernel, KOp
from tg.core.lazy import PENDING_ASSIGNS, LazyBuffer, Readers
from tg.core.ops import BinaryOps, BufferOps, CompositeOps, MovementOps, ReduceOps, TernaryOps, UnaryOps
from tg.core.shape import ShapeTracker, contiguous_strides, prod


@dataclass
class ScheduleItem:
    """One step of a schedule: a kernel writing `out` from `inputs` (the bases its LOADs 1.. read),
    a copy of `src` into `out` (across devices), or an allocation of `out`."""
    kind: str                    # "kernel" | "copy" | "alloc"
    out: LazyBuffer
    kernel: Any = None           # a Kernel, or after realize._fuse_rows a CPU row group of them (rows.py)
    src: LazyBuffer | None = None
    inputs: list[LazyBuffer] = field(default_factory=list)
    program: Any = None          # set by realize once compiled (a reused schedule comes with them)

    @property
    def name(self) -> str:
        if self.kernel is not None:
            return self.kernel.name
        return f"{self.kind} {self.out.dtype.name}{list(self.out.shape)}"


def _toposort(outs: list[LazyBuffer]) -> list[LazyBuffer]:
    order: list[LazyBuffer] = []
    seen: set[int] = set()
    stack: list[tuple[LazyBuffer, bool]] = [(o.base, False) for o in reversed(outs)]
    while stack:
        lb, expanded = stack.pop()
        if expanded:
            order.append(lb)
            continue
        if id(lb) in seen:
            continue
        seen.add(id(lb))
        if lb.realized is not None:
            continue
        stack.append((lb, True))
        for s in reversed(lb.srcs):
            if id(s.base) not in seen:
                stack.append((s.base, False))
    return [b for b in order if b.realized is None]


def _is_same_index(view: LazyBuffer) -> bool:
    """True when a consumer reads `view.base` element-for-element (any reshape of it)."""
    return view.st.contiguous and prod(view.shape) == prod(view.base.shape)


def _plan(bases: list[LazyBuffer], outs: list[LazyBuffer]) -> set[int]:
    """Which bases get their own buffer (ids). A reduce that would be inlined into two kernels is stored
    instead (computed once), and so is an elementwise value of more than SHARED_RECOMPUTE_LIMIT ops that
    two kernels would recompute; either can change other choices, so iterate to a fixpoint."""
    store: set[int] = set()
    readers: dict[int, int] = {}
    for b in bases:
        for s in b.srcs:
            readers[id(s.base)] = readers.get(id(s.base), 0) + 1
    while True:
        cost: dict[int, int] = {}
        store = _plan_once(bases, outs, store, readers, cost)
        kernels: dict[int, int] = {}       # unstored base -> how many kernels would contain it
        reduces: set[int] = set()
        for b in bases:
            if id(b) in store:
                for x in _inlined(b, store):
                    kernels[id(x)] = kernels.get(id(x), 0) + 1
                    if isinstance(x.op, ReduceOps):
                        reduces.add(id(x))
        shared = {i for i, n in kernels.items()
                  if n > 1 and (i in reduces or cost.get(i, 0) > SHARED_RECOMPUTE_LIMIT)}
        if not shared:
            return store
        store |= shared


def _inlined(b: LazyBuffer, store: set[int]) -> list[LazyBuffer]:
    """The unstored bases a kernel rooted at b would contain: its inlined values, and b if a reduce."""
    found: dict[int, LazyBuffer] = {}
    seen: set[int] = set()
    stack = [s.base for s in b.srcs] + ([b] if isinstance(b.op, ReduceOps) else [])
    while stack:
        x = stack.pop()
        if id(x) in seen or x.realized is not None or x.op is BufferOps.CONST:
            continue
        seen.add(id(x))
        if id(x) in store and x is not b:
            continue
        found[id(x)] = x
        stack.extend(s.base for s in x.srcs)
    return list(found.values())


# An elementwise value read through an expanding view is recomputed for every copy; past this
# many ALU ops it is cheaper to store it once (the cross-entropy gradient feeding a matmul; a cat, each
# piece a masked read that counts as one more op, feeding one).
RECOMPUTE_LIMIT = 2

# An elementwise value that two kernels would each recompute is stored once past this many ALU ops: a
# recurrence (an LSTM's cell state and its gradient through time, each read by the next step's kernels
# and by the step's own) otherwise inlines the whole chain into every later step, kernels that grow with
# the sequence (word_language_model's first step took 30 s to schedule and lower). Far above one exp
# (softmax's, recomputed by its sum and its division in one row group, is cheaper than a round trip) and
# above what a transformer's layers share (at 256 or 1024 the GPT of bench_train stored more: peak
# tensor memory 38 MiB against 30, no faster).
SHARED_RECOMPUTE_LIMIT = 2048

# An elementwise epilogue runs once per output element after the reduce, unvectorised; a long one
# (gelu's tanh, say) over a large output is faster as its own vectorised kernel.
EPILOGUE_LIMIT, EPILOGUE_SIZE = 8, 1 << 16


def _plan_once(bases: list[LazyBuffer], outs: list[LazyBuffer], seed: set[int],  # noqa: C901
               readers: dict[int, int], cost: dict[int, int]) -> set[int]:
    # the fusion rules of the module docstring, applied base by base in one loop: kept together so
    # they read as that list
    store: set[int] = set(seed) | {id(o.base) for o in outs}
    # cost (filled here): the ALU ops a base brings along when inlined
    carried: dict[int, LazyBuffer | None] = {}   # the reduce a base's kernel would contain
    # a reduce whose one reader rounds it to float16 / bfloat16 (fused.sum_of_products): where the
    # reduce is stored, the rounded value is (half the bytes, the same numbers)
    narrowed: dict[int, LazyBuffer] = {}
    for b in bases:
        if b.op in (BufferOps.COPY, BufferOps.ASSIGN, BufferOps.EMPTY):
            store.add(id(b))
        if b.op is BufferOps.COPY:
            store.add(id(b.srcs[0].base))
        if b.op is BufferOps.ASSIGN and b.srcs[0].base.realized is None:
            store.add(id(b.srcs[0].base))
    for b in bases:
        if b.op is BufferOps.CONST or b.realized is not None:
            carried[id(b)] = None
            continue
        srcs = b.srcs[1:] if b.op is BufferOps.ASSIGN else b.srcs
        for s in srcs:
            sb = s.base
            if id(sb) in store or sb.realized is not None or sb.op is BufferOps.CONST:
                continue
            if prod(s.shape) > prod(sb.shape) and cost.get(id(sb), 0) > RECOMPUTE_LIMIT:
                store.add(id(sb))
        # a read through a masked view (a pad, a cat's pieces) costs its test and select per element
        cost[id(b)] = composite.COST.get(b.op, 1) + sum(cost.get(id(s.base), 0) for s in srcs
                              if id(s.base) not in store and s.base.realized is None) + \
            sum(1 for s in srcs if any(v.mask is not None for v in s.st.views))
        reduces: list[tuple[LazyBuffer, LazyBuffer]] = []
        for s in srcs:
            sb = s.base
            if id(sb) in store or sb.realized is not None or sb.op is BufferOps.CONST:
                continue
            if s.st.views[-1].mask is not None or any(v.mask is not None for v in s.st.views):
                store.add(id(sb))       # padding of f(x) must read as 0, so f(x) is stored first
                continue
            c = carried.get(id(sb))
            if c is None:
                continue
            if isinstance(b.op, ReduceOps) or not _is_same_index(s):
                store.add(id(sb))       # a reduce never goes inside another, nor is recomputed
                continue
            if cost[id(b)] - cost.get(id(c), 0) > EPILOGUE_LIMIT and prod(b.shape) >= EPILOGUE_SIZE:
                store.add(id(narrowed.get(id(c), c)))   # a long epilogue runs unvectorised: store first
                continue
            reduces.append((sb, c))
        distinct = {id(c): (sb, c) for sb, c in reduces}
        for sb, _c in list(distinct.values())[1:]:
            store.add(id(sb))           # one reduce per kernel
        kept = [c for sb, c in distinct.values() if id(sb) not in store]
        carried[id(b)] = b if isinstance(b.op, ReduceOps) else (kept[0] if kept else None)
        src = b.srcs[0] if b.srcs else None
        if b.op is UnaryOps.CAST and b.dtype in (dtypes.float16, dtypes.bfloat16) and src is not None \
                and isinstance(src.base.op, ReduceOps) and readers.get(id(src.base)) == 1 \
                and _is_same_index(src) and carried[id(b)] is src.base:
            narrowed[id(src.base)] = b
    return store


class _KernelBuilder:
    def __init__(self, out: LazyBuffer, store: set[int]):
        self.out, self.store = out, store
        self.inputs: list[LazyBuffer] = []
        self.target = out.srcs[0].base if out.op is BufferOps.ASSIGN else out
        self.memo: dict[tuple, KOp] = {}   # a value read twice at the same index is one node
        self.reads_own_target_elsewhere = False

    def buf_index(self, base: LazyBuffer) -> int:
        """The kernel's buffer for base: 0 for the target, also when base is another lazy buffer over the
        target's memory (so a kernel never gets one memory under two names: its loads of the target say
        so in the AST, which codegen relies on: the GEMM nest keeps partial sums in its output)."""
        memory = self.target.realized
        if base is self.target or (memory is not None and base.realized is memory
                                   and base.dtype == self.target.dtype):
            return 0
        for i, b in enumerate(self.inputs):
            if b is base:
                return i + 1
        self.inputs.append(base)
        return len(self.inputs)

    def build(self, view: LazyBuffer, outer: ShapeTracker) -> KOp:
        """The value of `view`, indexed by the kernel space that `outer` maps onto view.shape."""
        return self.value(view.base, view.st + outer)

    def value(self, base: LazyBuffer, st: ShapeTracker) -> KOp:
        """base's value indexed by st. A loop over (base, index) pairs, each built once, sources first:
        a chain may be thousands of ops deep."""
        root = (base, st)
        expanded: dict[tuple, list[tuple[LazyBuffer, ShapeTracker]]] = {}   # sources, once pushed
        stack = [root]
        while stack:
            base, st = stack[-1]
            key = (id(base), st.key)
            if key in self.memo:
                stack.pop()
                continue
            if key not in expanded:
                expanded[key] = self._sources(base, st)
                missing = [s for s in expanded[key] if (id(s[0]), s[1].key) not in self.memo]
                if missing:      # built before base comes back to the top
                    stack.extend(reversed(missing))
                    continue
            stack.pop()
            srcs = [self.memo[(id(b), t.key)] for b, t in expanded[key]]
            self.memo[key] = self._node(base, st, srcs)
        return self.memo[(id(root[0]), root[1].key)]

    def _inlined(self, base: LazyBuffer) -> bool:
        """Whether base's value is computed in this kernel (else loaded, or a constant)."""
        return base is self.out or (base.op is not BufferOps.CONST and base.realized is None and
                                    base is not self.target and id(base) not in self.store)

    def _sources(self, base: LazyBuffer, st: ShapeTracker) -> list[tuple[LazyBuffer, ShapeTracker]]:
        """The (base, index) pairs base's value at st is made of: none for a load or a constant."""
        if not self._inlined(base):
            return []
        if isinstance(base.op, ReduceOps):
            src = base.srcs[0]
            return [(src.base, src.st + ShapeTracker.from_shape(src.shape))]
        srcs = base.srcs[1:] if base.op is BufferOps.ASSIGN else base.srcs
        return [(s.base, s.st + st) for s in srcs]

    def _node(self, base: LazyBuffer, st: ShapeTracker, srcs: list[KOp]) -> KOp:
        if base.op is BufferOps.CONST:
            return KOp(BufferOps.CONST, (), (base.arg, st), base.dtype)
        if not self._inlined(base):
            return KOp(AstOps.LOAD, (), (self.buf_index(base), st), base.dtype)
        if isinstance(base.op, ReduceOps):
            if not (st.contiguous and st.shape == base.shape):
                # an epilogue reading the reduce reshaped: express as a reshape of the reduced shape
                raise AssertionError(f"reduce read through a non-identity view {st}")
            return KOp(base.op, (srcs[0],), base.arg, base.dtype)
        if base.op is BufferOps.ASSIGN:
            return srcs[0]
        if isinstance(base.op, CompositeOps):
            return composite.expand(base.op, srcs[0], st.shape)
        assert base.op is not None   # every base buffer is created with an op
        return KOp(base.op, tuple(srcs), base.arg, base.dtype)

    def _reads_target_elsewhere(self, value: KOp, store_st: ShapeTracker) -> bool:
        """Whether the kernel loads the memory it overwrites at other indices than it writes
        (x.assign(x.T)): one kernel cannot do that in place, whichever lazy buffer the load is through."""
        memory = self.target.realized
        for n in value.walk():
            if n.op is not AstOps.LOAD:
                continue
            i, st = n.arg
            same = i == 0 or (memory is not None and self.inputs[i - 1].realized is memory)
            if same and st.key != store_st.key:
                return True
        return False

    def kernel(self) -> Kernel:
        out = self.out
        red = _carried_reduce(out, self.store)
        space = ShapeTracker.from_shape(out.shape)
        if red is not None and red is not out:
            # an epilogue: index by the reduced shape (reshaped into out's shape)
            space = space.reshape(red.shape)
        if out.op is BufferOps.ASSIGN:
            value = self.build(out.srcs[1], space)
            store_st = out.srcs[0].st + space
        else:
            value = self.value(out, space)
            store_st = space
        if value.dtype != self.target.dtype:
            raise AssertionError(f"store of {value.dtype} into {self.target.dtype}")
        if out.op is BufferOps.ASSIGN:
            self.reads_own_target_elsewhere = self._reads_target_elsewhere(value, store_st)
        root = KOp(AstOps.STORE, (value,), (0, store_st), self.target.dtype)
        bufs = [self.target, *self.inputs]
        return Kernel(
            root, [b.dtype for b in bufs], [prod(b.shape) for b in bufs], out.op is BufferOps.ASSIGN
        )


def _carried_reduce(b: LazyBuffer, store: set[int]) -> LazyBuffer | None:
    """The reduce inlined into b's kernel: the first found depth-first along unstored same-index sources."""
    seen: set[int] = set()
    stack = [b]
    while stack:
        x = stack.pop()
        if isinstance(x.op, ReduceOps):
            return x
        if x.op in (BufferOps.CONST, BufferOps.COPY, BufferOps.EMPTY) or x.realized is not None:
            continue
        srcs = x.srcs[1:] if x.op is BufferOps.ASSIGN else x.srcs
        for s in reversed(srcs):
            sb = s.base
            if sb.realized is None and id(sb) not in store and sb.op is not BufferOps.CONST and \
                    id(sb) not in seen:
                seen.add(id(sb))
                stack.append(sb)
    return None


@dataclass
class Overwritten:
    """What create_schedule found about values an ASSIGN in the schedule overwrites: `left` are
    the bases it would leave unstored that read the old contents (`stale_readers`), `kept` those
    of them that something outside the graph holds, which it stores (computes now) instead."""
    left: list[LazyBuffer] = field(default_factory=list)
    kept: list[LazyBuffer] = field(default_factory=list)


def create_schedule(outs: list[LazyBuffer], bases: list[LazyBuffer] | None = None,
                    overwritten: Overwritten | None = None,
                    graph_lists: tuple[list[LazyBuffer], ...] = ()) -> list[ScheduleItem]:
    """Kernels (and copies) that realize `outs`, in an order that respects dependencies, and in
    which every kernel reading a buffer's old contents runs before the ASSIGN overwriting it.
    `bases`, when given, is `_toposort(outs)` already computed (by `structure`); `overwritten`,
    when given, is filled in (see Overwritten); `graph_lists` are the caller's other lists of the
    graph's bases (held_elsewhere counts them)."""
    outs = list(outs)
    if bases is not None:
        graph_lists = (*graph_lists, bases)
    else:
        bases = _toposort(outs)
    snapshots = _protect_outside_readers(bases)
    if snapshots:
        outs += snapshots   # kept in `outs`, so that a planning again below still computes them
        bases = _toposort(outs)
    lists = [bases, *(lst for lst in graph_lists if lst is not bases)]
    store = _plan_keeping_overwritten(bases, outs, lists, overwritten)
    items: list[ScheduleItem] = []
    for b in bases:
        if id(b) not in store or b.realized is not None:
            continue
        if b.op is BufferOps.EMPTY:
            items.append(ScheduleItem("alloc", b))
        elif b.op is BufferOps.COPY:
            items.append(ScheduleItem("copy", b, src=b.srcs[0].base))
        elif b.op is BufferOps.CONST:
            continue
        else:
            builder = _KernelBuilder(b, store)
            kernel = builder.kernel()
            if builder.reads_own_target_elsewhere:
                # compute the value into a fresh buffer first, then copy it in: plan again with that
                b.srcs = (b.srcs[0], LazyBuffer.empty(b.shape, b.dtype, b.device).assign(b.srcs[1]))
                return create_schedule(outs, None, overwritten, tuple(lists))
            items.append(ScheduleItem("kernel", b, kernel=kernel, inputs=builder.inputs))
    order, cycle = _order(items)
    if cycle is not None:
        # some kernel needs this buffer's old contents after an assign that needs it to have run
        # (a swap, or old and new contents read together): those readers read a copy made first
        in_schedule = {id(b) for b in bases}
        readers = {id(r): r for x in same_memory(cycle) for r in list(x.readers) if id(r) in in_schedule}
        return create_schedule(outs + [_snapshot(cycle, list(readers.values()), [])], None, overwritten,
                               tuple(lists))
    return order


@dataclass
class Structure:
    """A graph to realize, reduced to what its schedule depends on. `key` is equal for two graphs
    exactly when one schedule serves both: every unrealized base in topological order (op, arg,
    dtype, shape, device, and each source as (position, view)), the realized leaves it reads
    (dtype, shape, device, and which of them share memory) and which bases are the outputs.
    `bases` and `leaves` are this graph's objects at those positions: position i >= 0 is
    bases[i], position -1 - j is leaves[j]; `position` maps id(lazy buffer) to its position."""
    key: GraphKey
    bases: list[LazyBuffer]
    leaves: list[LazyBuffer]
    position: dict[int, int]

    def at(self, position: int) -> LazyBuffer:
        return self.bases[position] if position >= 0 else self.leaves[-1 - position]


# Complexity: the topological walk and the key are one loop on purpose (this runs on every realize; a
# second pass over the graph cost as much as the walk).
def structure(outs: list[LazyBuffer], slices: bool = True) -> Structure | None:  # noqa: C901
    """The structure of the graph realizing `outs`, or None when its schedule also depends on
    something outside the graph (a pending computation reading memory an assign overwrites, which
    needs a snapshot): such graphs are scheduled afresh every time. With `slices`, a source that is a
    run of realized memory past its start (`data[i:i + n]`) becomes a leaf of its own over that run
    (memory_slice), so that neither the structure nor any kernel depends on where the run starts."""
    # One walk: the topological order of _toposort, each base's key made as it is placed (its
    # sources are placed before it). Reads attributes, not the properties, on this hot path.
    bases: list[LazyBuffer] = []
    nodes: list = []   # flat: op, arg, dtype, shape, device, number of sources, (position, view) each
    leaves: list[LazyBuffer] = []
    leaf_keys: list[tuple] = []
    memory: dict[int, int] = {}
    pos: dict[int, int] = {}
    seen: set[int] = set()
    stack: list[tuple[LazyBuffer, bool]] = [(o.base, False) for o in reversed(outs)]
    while stack:
        lb, placed = stack.pop()
        if placed:
            arg, srcs = lb.arg, lb.srcs
            arg = arg.name if type(arg) is DType else value_key(arg)
            nodes += (_OP_CODE[id(lb.op)], arg, lb.dtype.name, lb.shape, lb.device, len(srcs))
            for k, src in enumerate(srcs):
                sb = src._base or src
                if slices and sb is not src and sb._realized is not None and src.st.views[-1].offset:
                    sliced = memory_slice(src)
                    if sliced is not None:
                        src = sb = sliced
                        lb.srcs = lb.srcs[:k] + (sliced,) + lb.srcs[k + 1:]
                p = pos.get(id(sb))
                if p is None:   # a realized leaf
                    p = pos[id(sb)] = -1 - len(leaves)
                    leaves.append(sb)
                    mem = memory.setdefault(id(sb._realized), len(memory))
                    leaf_keys.append((sb.dtype.name, sb.shape, sb.device, mem))
                nodes += (p, src.st.key)
            pos[id(lb)] = len(bases)
            bases.append(lb)
            continue
        if id(lb) in seen:
            continue
        seen.add(id(lb))
        if lb._realized is not None:
            continue
        stack.append((lb, True))
        for src in reversed(lb.srcs):
            sb = src._base or src
            if id(sb) not in seen:
                stack.append((sb, False))
    if _outside_readers(bases):
        return None
    key = GraphKey((tuple(nodes), tuple(leaf_keys), tuple((pos[id(o.base)], o.st.key) for o in outs)))
    return Structure(key, bases, leaves, pos)


def memory_slice(src: LazyBuffer) -> LazyBuffer | None:
    """src, a view of realized memory that is one contiguous run of it not at its start, as a realized
    base of its own over that run (its Buffer.view): what reads it then reads it from offset 0. None
    when src is no such run, its device cannot view memory from there, or an assign not yet run writes
    that memory (the schedule orders a write after the reads of the same buffer, not of a view)."""
    views, buf = src.st.views, None if src._base is None else src._base._realized
    v = views[0]
    if buf is None or len(views) != 1 or v.mask is not None or not v.offset or \
            v.strides != contiguous_strides(v.shape):
        return None
    start = v.offset * src.dtype.itemsize
    owner = buf.owner or buf
    if (buf.view_offset + start) % buf.allocator.view_align or any(
            a._realized is None and a.srcs and ((t := a.srcs[0].base._realized) is not None)
            and (t.owner or t) is owner for a in PENDING_ASSIGNS):
        return None
    return LazyBuffer.realized_as(buf.view(start, prod(v.shape)), src.shape)


# Each op as a small int, found by identity: hashing an Enum member runs Python code, and a graph key
# holds thousands of them. Members live as long as the process, so their ids never change.
_OP_CODE = {id(op): i for i, op in enumerate(
    op for kind in (UnaryOps, BinaryOps, TernaryOps, CompositeOps, ReduceOps, MovementOps, BufferOps)
    for op in kind)}


class GraphKey:
    """A graph's key (a long tuple) with its hash computed once: the cache looks it up and moves
    it, and a tuple recomputes its hash every time."""
    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple):
        self.parts, self._hash = parts, hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphKey) and self._hash == other._hash and self.parts == other.parts


def same_memory(b: LazyBuffer) -> list[LazyBuffer]:
    """b and every other lazy buffer whose value lives in the same memory."""
    return [b] + [a for a in list(b.realized.aliases) if a is not b] if b.realized is not None else [b]


def _storage(b: LazyBuffer) -> int:
    return id(b.realized) if b.realized is not None else id(b)


def _outside_readers(bases: list[LazyBuffer]) -> list[tuple[LazyBuffer, list[LazyBuffer], list[LazyBuffer]]]:
    """(target, readers, views) for each ASSIGN among bases whose target's old contents are read by a
    computation that is still pending outside this schedule, or by a view of it that something outside
    the schedule holds (a tensor that is a copy in torch's sense: a flip, a pad, torch.tensor(t), a sum
    over a dim of size 1; tg's views in torch's sense were re-derived from the assign, see
    Tensor._refresh_views)."""
    in_schedule: set[int] | None = None    # made only when an assign has another pending reader
    found: list[tuple[LazyBuffer, list[LazyBuffer], list[LazyBuffer]]] = []
    for b in bases:
        if b.op is not BufferOps.ASSIGN:
            continue
        target = b.srcs[0].base
        same = same_memory(target)
        # the commonest assign (contiguous() into a fresh buffer) has no reader but itself
        pending = [r for x in same for r in list(x.readers) if r is not b and r.srcs and r._realized is None]
        views = [v for x in same if x.views for v in x.views]
        if not pending and not views:
            continue
        if in_schedule is None:
            in_schedule = {id(x) for x in bases} | {id(s) for x in bases for s in x.srcs}
        outside = {id(r): r for r in pending if id(r) not in in_schedule}
        held = [v for v in views if id(v) not in in_schedule]
        if outside or held:
            found.append((target, list(outside.values()), held))
    return found


def _plan_keeping_overwritten(bases: list[LazyBuffer], outs: list[LazyBuffer], lists: list[list[LazyBuffer]],
                              overwritten: Overwritten | None) -> set[int]:
    """_plan, and in it stored too every value read before an in-place write that something still holds
    (a norm returned to the caller, a value a Function saved for backward): computed now, from the old
    contents. Those are added to `outs`, so that a planning again still stores them."""
    store = _plan(bases, outs)
    kept = held_elsewhere(stale_readers(bases, store), bases, lists)
    if kept:
        outs += kept
        store = _plan(bases, outs)
    if overwritten is not None:
        overwritten.kept += kept
        overwritten.left = stale_readers(bases, store)
    return store


def stale_readers(bases: list[LazyBuffer], store: set[int]) -> list[LazyBuffer]:
    """The bases left unstored (inlined into the kernels that read them) that read memory an ASSIGN
    among `bases` overwrites, directly or through other such bases: once the schedule has run, they
    would be computed from the new contents if anything still asked for them."""
    written: set[int] = set()
    for b in bases:
        if b.op is BufferOps.ASSIGN:
            written.update(id(x) for x in same_memory(b.srcs[0].base))
    if not written:
        return []
    found: list[LazyBuffer] = []
    for b in bases:     # sources come first: a reader of a stale base is found after it
        if id(b) in store or b.realized is not None or b.op is BufferOps.CONST:
            continue
        if any(id(s.base) in written for s in b.srcs):
            written.add(id(b))
            found.append(b)
    return found


def held_elsewhere(candidates: list[LazyBuffer], bases: list[LazyBuffer],
                   lists: list[list[LazyBuffer]]) -> list[LazyBuffer]:
    """The candidates (bases of this graph) that something besides the graph itself holds: a Tensor, a
    Function's saved values, a pending computation outside `bases`. Found by counting references (CPython
    counts them exactly): every reference the graph makes is a source edge of a base in `bases`, made to
    the candidate or to a view of it that nothing but such edges holds, or one of `lists`, the lists
    holding the graph's bases. Anything else holding one more can only make a candidate kept, which costs
    a stored buffer and is never wrong."""
    if not candidates:
        return []
    edges, views = _graph_edges(candidates, bases)
    held = {id(v[0]._base) for v in views if _refs(v[0]) > v[1] + 1}    # + 1: the list in views
    in_lists = [{id(x) for x in lst} for lst in lists]
    # + 2: the candidates list and the comprehension's variable
    return [c for c in candidates
            if id(c) in held or _refs(c) > edges[id(c)] + sum(id(c) in ids for ids in in_lists) + 2]


def _graph_edges(candidates: list[LazyBuffer], bases: list[LazyBuffer]) -> tuple[dict[int, int], list[list]]:
    """For held_elsewhere: the references bases' source edges make to each candidate (directly or through
    a view of it, which holds it once), and each such view with the number of edges to it. Its own
    function so that no loop variable outlives it holding a candidate."""
    edges = {id(c): 0 for c in candidates}
    views: dict[int, list] = {}
    for b in bases:
        for src in b.srcs:
            if id(src) in edges:
                edges[id(src)] += 1
            elif src._base is not None and id(src._base) in edges:
                views.setdefault(id(src), [src, 0])[1] += 1
    for view, _ in views.values():
        edges[id(view._base)] += 1
    return edges, list(views.values())


def _refs(x: Any) -> int:
    """References to x but this call's own two (its parameter and getrefcount's argument)."""
    return sys.getrefcount(x) - 2


def _protect_outside_readers(bases: list[LazyBuffer]) -> list[LazyBuffer]:
    """Copy-on-write for in-place assigns: a computation that is still pending outside this
    schedule and reads the old contents (say a loss, read after optimizer.step()) is rewired to a
    snapshot of them, so it never sees the new values. Returns the snapshots to schedule."""
    return [_snapshot(target, readers, views) for target, readers, views in _outside_readers(bases)]


def _snapshot(target: LazyBuffer, readers: list[LazyBuffer], views: list[LazyBuffer]) -> LazyBuffer:
    """A copy of target's current contents (an ASSIGN into a fresh buffer), which `readers` and `views`
    read from now on instead of target's memory. An assign among the readers still writes target's
    memory."""
    same = same_memory(target)
    same_ids = {id(x) for x in same}
    snap = LazyBuffer.empty(target.shape, target.dtype, target.device).assign(target)
    for v in views:
        v._base = snap
        if snap.views is None:
            snap.views = Readers()
        snap.views.add(v)
    for r in readers:
        keep = 1 if r.op is BufferOps.ASSIGN else 0   # an assign's destination stays where it is
        r.srcs = r.srcs[:keep] + tuple(
            LazyBuffer(s.device, s.st, s.dtype, base=snap) if id(s.base) in same_ids else s
            for s in r.srcs[keep:]
        )
        snap.readers.add(r)
        if not any(id(s.base) in same_ids for s in r.srcs):
            for x in same:
                x.readers.discard(r)
    return snap


# Complexity: builds the dependency graph (producers, readers before an ASSIGN) and sorts it in one place so
# the ordering rule reads whole.
def _order(items: list[ScheduleItem]) -> tuple[list[ScheduleItem], LazyBuffer | None]:  # noqa: C901
    """Topological order (stable): producers first, and readers of a buffer before its ASSIGN.

    When no order exists (an assign must wait for a kernel that reads the old contents, which itself
    needs that assign or another one waiting on it), returns no items and the target of an assign on
    such a cycle: the buffer whose old contents the readers should read from a copy."""
    producer = {id(it.out): i for i, it in enumerate(items)}
    deps: list[set[int]] = [set() for _ in items]
    readers_of: dict[int, list[int]] = {}   # by memory: aliases of one buffer are one key
    for i, it in enumerate(items):
        srcs: list[LazyBuffer] = list(it.inputs) if it.kernel is not None else []
        if it.src is not None:
            srcs.append(it.src)
        for b in srcs:
            readers_of.setdefault(_storage(b), []).append(i)
        if it.kernel is not None and it.out.op is BufferOps.ASSIGN:
            srcs.append(it.out.srcs[0].base)   # written in place: after whatever computes it
        for b in srcs:
            if id(b) in producer and producer[id(b)] != i:
                deps[i].add(producer[id(b)])
    waits_for_reader: set[tuple[int, int]] = set()
    for i, it in enumerate(items):
        if it.kernel is not None and it.out.op is BufferOps.ASSIGN:
            for r in readers_of.get(_storage(it.out.srcs[0].base), []):
                if r != i:
                    deps[i].add(r)
                    waits_for_reader.add((i, r))
    done: set[int] = set()
    order: list[ScheduleItem] = []
    while len(order) < len(items):
        ready = [i for i in range(len(items)) if i not in done and deps[i] <= done]
        if not ready:
            return [], _cycle_target(items, deps, done, waits_for_reader)
        for i in ready:
            done.add(i)
            order.append(items[i])
    return order, None


def _cycle_target(items: list[ScheduleItem], deps: list[set[int]], done: set[int],
                  waits_for_reader: set[tuple[int, int]]) -> LazyBuffer:
    """The smallest target of an assign on a dependency cycle among the items not `done`."""
    # every item left waits for another one left: following those waits must come back round
    path: list[int] = []
    at: dict[int, int] = {}
    i = min(j for j in range(len(items)) if j not in done)
    while i not in at:
        at[i] = len(path)
        path.append(i)
        i = min(d for d in deps[i] if d not in done)
    cycle = path[at[i]:]
    targets = [items[a].out.srcs[0].base for a, r in zip(cycle, cycle[1:] + cycle[:1])
               if (a, r) in waits_for_reader]
    if not targets:   # producers alone are a DAG: cannot happen
        raise RuntimeError("[schedule] a dependency cycle without an in-place assign")
    return min(targets, key=lambda t: prod(t.shape))


__all__ = ["GraphKey", "ScheduleItem", "Structure", "create_schedule", "same_memory", "structure",
           "BinaryOps", "dtypes"]
