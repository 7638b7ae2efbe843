"""The lazy graph. A LazyBuffer is either a *base* (an op over source LazyBuffers, or realized
device memory) or a *view* of a base through a ShapeTracker. Movement ops only make views;
nothing runs until realize.py runs it (Tensor.numpy(), .item(), .realize() or a collective).
This module builds graphs only: it imports no scheduler, device or runtime.

    >>> from tg.core.ops import BinaryOps
    >>> a = LazyBuffer.const(2.0, dtypes.float32, "NUMPY", (3,))
    >>> b = a.e(BinaryOps.ADD, a)
    >>> b.shape, b.realized is None
    ((3,), True)
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Iterator

from tg.core.dtype import DType, dtypes, min_value, value_key
from tg.core.ops import COMPARISON_OPS, BinaryOps, BufferOps, Op, ReduceOps, TernaryOps, UnaryOps
from tg.core.shape import ShapeTracker, prod

if TYPE_CHECKING:
    from tg.core.device import Buffer

# Reductions over several large axes are split in two stages (see LazyBuffer.r).
SPLIT_MIN, SPLIT_MIN_SIZE, SPLIT_MAX_PARTIAL = 16, 1 << 16, 1 << 25
# a reduce split per slice of its outermost axis reduces at least this many elements a slice: shorter
# inner reduces vectorize badly and their partials are many (a conv's weight gradient over 5 x 5
# positions: 2M partials of 25, 11 GFLOPS; an embedding's gradient: 18 MB of partials of 20 tokens)
SPLIT_MIN_INNER = 256
COLUMN_SPLIT_OUTPUTS, COLUMN_SPLIT_MIN, COLUMN_SPLIT_SIZE = 1 << 14, 2048, 1 << 22
assert COLUMN_SPLIT_SIZE >= SPLIT_MIN_SIZE, "LazyBuffer._split_reduce stops below SPLIT_MIN_SIZE"

# Constants handed out again (LazyBuffer.const); cleared when it holds this many.
_CONSTS: dict[tuple, LazyBuffer] = {}
CONST_CACHE = 4096

# Float ops that give the same bits in every kernel that computes them from the same inputs: IEEE
# negation, addition, max, comparison and selection. Not exp2 / log2 (on the CPU a vector polynomial
# in one kernel and libm's in another), nor a multiply (an add after it may be fused into an FMA in one
# kernel and not in another), nor a float cast (a float16 round trip is not rounded inside a kernel).
# Integer and bool ops are exact wherever they run. See LazyBuffer.stored.
SAME_IN_EVERY_KERNEL = frozenset({UnaryOps.NEG, BinaryOps.ADD, BinaryOps.MAX, BinaryOps.CMPLT,
                                  BinaryOps.CMPNE, TernaryOps.WHERE})
# Bases whose values are read from memory by every kernel that reads them: a reduce read by another
# reduce, or by two kernels, is stored (schedule._plan).
_READ_FROM_MEMORY = (BufferOps.CONST, BufferOps.ASSIGN, BufferOps.COPY, BufferOps.EMPTY, *ReduceOps)

class Readers(list):
    """The bases that read one base (or share one buffer's memory), held weakly: a dropped graph
    drops out. The list itself holds the weak references, pruned whenever its length reaches a power
    of two from 32 on (so a base read every step but never iterated stays bounded, at amortized O(1)
    an append): adding one is an append, which matters because every op adds one per source (a
    WeakSet costs a callback reference per edge). A list subclass with no instance state is one
    object for the garbage collector, made without running any Python."""
    __slots__ = ()

    def add(self, lb: LazyBuffer) -> None:
        self.append(weakref.ref(lb))

    def append(self, ref: weakref.ref[LazyBuffer]) -> None:  # type: ignore[override]
        list.append(self, ref)
        n = list.__len__(self)
        if n >= 32 and not n & (n - 1):
            self[:] = [r for r in list.__iter__(self) if r() is not None]

    def refs(self) -> list[weakref.ref[LazyBuffer]]:
        """The weak references as stored, dead ones included."""
        return list(list.__iter__(self))

    def discard(self, lb: LazyBuffer) -> None:
        self[:] = [r for r in list.__iter__(self) if r() is not lb]

    def __len__(self) -> int:
        return sum(1 for r in list.__iter__(self) if r() is not None)

    def __bool__(self) -> bool:
        return any(r() is not None for r in list.__iter__(self))

    def __iter__(self) -> Iterator[LazyBuffer]:  # type: ignore[override]
        live = [x for x in (r() for r in list.__iter__(self)) if x is not None]
        if len(live) < list.__len__(self):
            # drop the dead while they are found (a parameter's readers die every step): weakref.ref
            # of a live object hands back its existing reference
            self[:] = [weakref.ref(x) for x in live]
        return iter(live)


# Assigns not yet run, in the order they were made; TinyJit flushes them (realize.flush_assigns) so no
# update leaks from one call into the next. Ordered: their order is the order of a flush's outputs,
# which a schedule's structure key reads (a set's order changed from step to step, so a step that
# flushed assigns (BatchNorm's running statistics) was scheduled afresh every time).
PENDING_ASSIGNS = Readers()


class LazyBuffer:
    # Slots: a training step makes hundreds of these, and each is one object for the garbage
    # collector to track and count instead of two (an instance dict). A view has only the first five;
    # op, srcs, arg, _realized and readers are a base's.
    __slots__ = ("device", "st", "dtype", "shape", "_base", "op", "srcs", "arg", "_realized", "readers",
                 "views", "__weakref__")

    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Op | None = None,
                 srcs: tuple[LazyBuffer, ...] = (), arg: Any = None, base: LazyBuffer | None = None):
        self.device, self.st, self.dtype = device, st, dtype
        self.shape = st.shape
        self._base = base
        if base is None:
            self.op, self.srcs, self.arg = op, srcs, arg
            self._realized: Buffer | None = None     # not through the setter: nothing to alias yet
            # Unrealized computations that read this buffer; assign() realizes them first.
            self.readers = Readers()
            # The views of this buffer made so far (held weakly, made on the first): a view read after
            # an assign overwrote this memory reads a snapshot instead (schedule._protect_outside_readers)
            self.views: Readers | None = None
            if srcs:
                me = weakref.ref(self)
                for s in srcs:
                    sb = s._base or s
                    if sb.op is not BufferOps.CONST:   # a constant is shared and never overwritten
                        sb.readers.append(me)

    def __repr__(self) -> str:
        kind = "realized" if self.base.realized is not None else (self.base.op.name if self.base.op else "?")
        view = "" if self.is_base else " view"
        return f"<LB {self.device} {self.dtype.name}{list(self.shape)} {kind}{view}>"

    @property
    def base(self) -> LazyBuffer:
        return self if self._base is None else self._base

    @property
    def is_base(self) -> bool:
        return self._base is None

    @property
    def realized(self) -> Buffer | None:
        """The memory holding this buffer's values once it is realized (a base's `_realized`, which
        hot loops read directly on bases)."""
        return (self._base or self)._realized

    @realized.setter
    def realized(self, buf: Buffer | None) -> None:
        self._realized = buf
        if buf is not None:
            buf.aliases.add(self)

    @property
    def is_const(self) -> bool:
        return self.base.op is BufferOps.CONST

    # ---- creation
    @staticmethod
    def realized_as(buf: Buffer, shape: tuple[int, ...]) -> LazyBuffer:
        """A base standing for memory that already holds its values."""
        lb = LazyBuffer(buf.device, ShapeTracker.from_shape(shape), buf.dtype, BufferOps.EMPTY)
        lb.realized = buf
        return lb

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: DType, device: str) -> LazyBuffer:
        return LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, BufferOps.EMPTY)

    @staticmethod
    def const(value: Any, dtype: DType, device: str, shape: tuple[int, ...]) -> LazyBuffer:
        """`value` at every index of `shape`: a view that repeats one CONST base. Constants are
        immutable and never realized, so one object serves every graph that asks for the same
        value (by its bits), dtype, device and shape."""
        value = bool(value) if dtype == dtypes.bool else (float(value) if dtype.is_float else int(value))
        key = (value_key(value), dtype.name, device, shape)
        found = _CONSTS.get(key)
        if found is None:
            if len(_CONSTS) >= CONST_CACHE:
                _CONSTS.clear()
            base = LazyBuffer(device, ShapeTracker.from_shape(()), dtype, BufferOps.CONST, (), value)
            found = _CONSTS[key] = base.reshape((1,) * len(shape)).expand(shape) if shape else base
        return found

    # ---- compute
    def e(self, op: Op, *srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        shape = self.shape
        for s in srcs:
            assert s.shape == shape, f"{op} on shapes {[shape] + [s.shape for s in srcs]}"
        if op in COMPARISON_OPS:
            out_dtype = dtypes.bool
        elif op is UnaryOps.CAST or op is UnaryOps.BITCAST:
            out_dtype = arg
        elif op is TernaryOps.WHERE:
            out_dtype = srcs[0].dtype
        else:
            out_dtype = self.dtype
        return LazyBuffer(self.device, ShapeTracker.from_shape(shape), out_dtype, op, (self, *srcs), arg)

    def r(self, op: ReduceOps, axes: tuple[int, ...], split: bool = True,
          partial: bool = False) -> LazyBuffer:
        """The reduce over axes (kept as size 1). `partial`: a part of a split reduce, whose float16 or
        bfloat16 sum is a float32 (the whole rounds once, at its end, as torch's does)."""
        in_shape = self.shape
        shape = tuple(1 if i in axes else s for i, s in enumerate(in_shape))
        sizes = [in_shape[a] for a in axes]
        if sizes.count(1) == len(sizes):          # no axes, or only axes of size 1
            return self.reshape(shape)
        if 0 in sizes:   # an empty reduce is its identity
            identity = 0 if op is ReduceOps.SUM else min_value(self.dtype)
            return LazyBuffer.const(identity, self.dtype, self.device, shape)
        if split:
            split_to = self._split_reduce(op, axes, shape)
            if split_to is not None:
                return split_to
        wide = partial and op is ReduceOps.SUM and self.dtype in (dtypes.float16, dtypes.bfloat16)
        dtype = dtypes.float32 if wide else self.dtype
        return LazyBuffer(self.device, ShapeTracker.from_shape(shape), dtype, op, (self,),
                          tuple(sorted(axes)))

    def _split_reduce(self, op: ReduceOps, axes: tuple[int, ...],
                      shape: tuple[int, ...]) -> LazyBuffer | None:
        """The reduce as two (partials, then their reduce) when one kernel would parallelize or cache
        badly; None when one kernel is right."""
        in_shape = self.shape
        n, outputs = prod(in_shape), prod(shape)
        if n < SPLIT_MIN_SIZE:     # below every rule's size (COLUMN_SPLIT_SIZE is larger still)
            return None
        if outputs == 1:
            # A full reduction has no output loop to spread over cores: reduce chunks, then the partials.
            chunks = next((f for f in (1024, 512, 256, 128, 64, 32, 16) if n % f == 0 and n // f >= 256),
                          None)
            if chunks is not None:
                partial = self.reshape((chunks, n // chunks)).r(op, (1,), split=False, partial=True)
                return self._narrowed(partial.r(op, (0,), split=False).reshape(shape))
        big = [a for a in sorted(axes) if in_shape[a] > 1]
        if len(big) == 1 and outputs < COLUMN_SPLIT_OUTPUTS and n >= COLUMN_SPLIT_SIZE and \
                in_shape[big[0]] >= COLUMN_SPLIT_MIN and \
                big[0] < max(i for i, s in enumerate(in_shape) if s > 1):
            # A long reduce over a strided axis with few outputs (a column sum, a bias gradient): split
            # it so that many more work items share the reading, then sum the partials.
            a, n_red = big[0], in_shape[big[0]]
            chunks = next((f for f in (64, 32, 16) if n_red % f == 0), None)
            if chunks is not None:
                parts = self.reshape(in_shape[:a] + (chunks, n_red // chunks) + in_shape[a + 1:])
                partial = parts.r(op, (a + 1,), split=False, partial=True)
                return self._narrowed(partial.r(op, (a,), split=False).reshape(shape))
        first = in_shape[big[0]] if big else 0
        if len(big) >= 2 and first >= SPLIT_MIN and outputs * first <= SPLIT_MAX_PARTIAL \
                and prod(in_shape[a] for a in big[1:]) >= SPLIT_MIN_INNER:
            # Reduce the inner axes first, per slice of the outermost one (that slice's data stays
            # in cache, and the slices run in parallel), then sum the partials.
            partial = self.r(op, tuple(a for a in axes if a != big[0]), split=False, partial=True)
            return self._narrowed(partial.r(op, (big[0],), split=False))
        return None

    def _narrowed(self, total: LazyBuffer) -> LazyBuffer:
        """A split reduce's result (float32 for a narrow sum) in self's dtype: its one rounding."""
        return total if total.dtype == self.dtype else total.e(UnaryOps.CAST, arg=self.dtype)

    def copy_to_device(self, device: str) -> LazyBuffer:
        if device == self.device:
            return self
        if self.is_const:
            return LazyBuffer(device, self.st, self.dtype, base=self.base.copy_to_device_const(device))
        src = self if self.st.contiguous and self.is_base else self.contiguous()
        return LazyBuffer(device, ShapeTracker.from_shape(self.shape), self.dtype, BufferOps.COPY, (src,))

    def copy_to_device_const(self, device: str) -> LazyBuffer:
        return LazyBuffer(device, self.st, self.dtype, BufferOps.CONST, (), self.arg)

    def contiguous(self) -> LazyBuffer:
        """A base with its own memory holding this view's values."""
        if self.is_base and self.op is not BufferOps.CONST:
            return self
        return LazyBuffer.empty(self.shape, self.dtype, self.device).assign(self)

    def stored(self) -> LazyBuffer:
        """This view's values as one computation that every kernel reading them sees bit for bit: self
        when they come from memory through ops in SAME_IN_EVERY_KERNEL, else the value written to a
        buffer once. An elementwise value is otherwise recomputed by every kernel that reads it, which
        for exp or a multiply-add may differ in the last bit; so whatever is compared for equality with
        a value computed elsewhere (a max's index, a tie's share of a gradient) is read through this."""
        if prod(self.shape) == 0 or self._same_in_every_kernel():
            return self
        base = self.base
        if prod(self.shape) < prod(base.shape):   # a part of a larger value: store that part only
            return LazyBuffer.empty(self.shape, self.dtype, self.device).assign(self)
        kept = LazyBuffer.empty(base.shape, base.dtype, base.device).assign(base)
        return kept if self.is_base else kept._view(self.st)

    def _same_in_every_kernel(self) -> bool:
        seen: set[int] = set()
        stack = [self.base]
        while stack:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or b.op in _READ_FROM_MEMORY:
                continue
            seen.add(id(b))
            if b.dtype.is_float and b.op not in SAME_IN_EVERY_KERNEL:
                return False
            stack.extend(s.base for s in b.srcs)
        return True

    def assign(self, value: LazyBuffer) -> LazyBuffer:
        """Write value into this buffer's memory (this lazy buffer must be a base or a view of one)."""
        assert value.shape == self.shape, f"assign {value.shape} into {self.shape}"
        out = LazyBuffer(self.device, ShapeTracker.from_shape(self.shape), self.dtype, BufferOps.ASSIGN,
                         (self, value))
        PENDING_ASSIGNS.add(out)
        return out

    # ---- movement: views of the same base
    def _view(self, st: ShapeTracker) -> LazyBuffer:
        base = self._base or self
        mask = st.views[-1].mask
        if mask is not None and any(lo >= hi for lo, hi in mask):   # entirely padding: zeros
            return LazyBuffer.const(0, self.dtype, self.device, st.shape)
        # (movements back to the whole of base, in its order, are a view of it too, not base itself: a
        # tensor holding one keeps its values when base's memory is written, see alias())
        view = LazyBuffer(self.device, st, self.dtype, base=base)
        if base.op is not BufferOps.CONST:      # a constant is never overwritten
            views = base.views
            if views is None:
                views = base.views = Readers()
            views.append(weakref.ref(view))
        return view

    def alias(self) -> LazyBuffer:
        """The same values as a lazy buffer of their own over this one's memory (a view of all of it): what
        a second tensor of these values holds, so that a write into this memory, which leaves the tensors
        that are views in torch's sense re-derived from the write, gives it a snapshot of the old values
        (schedule._protect_outside_readers) instead of the new ones."""
        base = self._base or self
        if base.op is BufferOps.CONST:
            return self
        return self._view(self.st if self._base is not None else ShapeTracker.from_shape(self.shape))

    def reshape(self, shape: tuple[int, ...]) -> LazyBuffer:
        return self if shape == self.shape else self._view(self.st.reshape(shape))

    def permute(self, order: tuple[int, ...]) -> LazyBuffer:
        return self if order == tuple(range(len(order))) else self._view(self.st.permute(order))

    def expand(self, shape: tuple[int, ...]) -> LazyBuffer:
        return self if shape == self.shape else self._view(self.st.expand(shape))

    def pad(self, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        return self if all(p == (0, 0) for p in arg) else self._view(self.st.pad(arg))

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        if all(a == (0, s) for a, s in zip(arg, self.shape)):
            return self
        return self._view(self.st.shrink(arg))

    def flip(self, axes: tuple[bool, ...]) -> LazyBuffer:
        return self if not any(axes) else self._view(self.st.flip(axes))
