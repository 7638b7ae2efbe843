"""The kernel IR: what the scheduler hands to codegen and devices. It holds buffer indices, dtypes
and sizes, never the lazy graph, so codegen, renderers and devices see kernels without importing it.

A kernel is one AST: ALU ops from ops.py and at most one REDUCE over LOAD and CONST leaves, under
one STORE root. Buffer 0 is the output; LOAD index i >= 1 reads the kernel's i-th input.

    >>> from tg.core.shape import ShapeTracker
    >>> st = ShapeTracker.from_shape((4,))
    >>> x = KOp(AstOps.LOAD, (), (1, st), dtypes.float32)
    >>> add = KOp(BinaryOps.ADD, (x, x), None, dtypes.float32)
    >>> store = KOp(AstOps.STORE, (add,), (0, st), dtypes.float32)
    >>> k = Kernel(store, [dtypes.float32, dtypes.float32], [4, 4])
    >>> k.name, k.full_shape
    ('E_4', (4,))
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Callable, Collection

from tg.core.dtype import DType, dtypes, value_key
from tg.core.ops import BinaryOps, BufferOps, Op, ReduceOps
from tg.core.symbolic import cached_property


class AstOps(Enum):
    LOAD = auto()    # arg: (buffer index, ShapeTracker)
    STORE = auto()   # arg: (buffer index, ShapeTracker); src: (value,)


@dataclass(frozen=True, eq=False)
class KOp:
    """A node of a kernel's AST: ALU and REDUCE ops, LOAD / CONST leaves and one STORE root."""
    op: Op | AstOps
    src: tuple[KOp, ...]
    arg: Any
    dtype: DType

    @cached_property
    def key(self) -> tuple:
        """What the node computes, as one flat tuple: each node below it once, in `walk` order, with its
        sources as positions in that order. (Nested keys would hash a value read twice twice, so a graph
        that reuses values would hash in time exponential in its depth, and deep ones recurse.)"""
        nodes = self.walk()
        position = {id(n): i for i, n in enumerate(nodes)}
        return tuple((n.op, n.dtype, n._arg_key(), tuple(position[id(s)] for s in n.src)) for n in nodes)

    def _arg_key(self) -> Any:
        arg = self.arg
        if self.op is BufferOps.CONST:
            return (value_key(arg[0]), arg[1].key)
        if self.op in (AstOps.LOAD, AstOps.STORE):
            return (arg[0], arg[1].key)
        return arg

    def walk(self, stop: Collection[int] = ()) -> list[KOp]:
        """Every node once, sources before users, in the order a depth-first walk of the sources (in
        order) finishes them. A node whose id is in `stop` is listed without what lies below it. A loop,
        not a recursion: a kernel's chain of ops may be thousands deep."""
        finished: dict[int, KOp] = {}
        entered: set[int] = set()
        stack: list[tuple[KOp, bool]] = [(self, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                finished[id(n)] = n
                continue
            if id(n) in entered:
                continue
            entered.add(id(n))
            stack.append((n, True))
            if id(n) not in stop:
                stack.extend((s, False) for s in reversed(n.src) if id(s) not in entered)
        return list(finished.values())

    def map_args(self, fn: Callable[[KOp], Any]) -> KOp:
        """The AST rebuilt with each node's arg replaced by fn(node) (a value shared stays shared)."""
        new: dict[int, KOp] = {}
        for n in self.walk():
            new[id(n)] = KOp(n.op, tuple(new[id(s)] for s in n.src), fn(n), n.dtype)
        return new[id(self)]


@dataclass
class Kernel:
    """One scheduled kernel: the AST and the dtype and element count of each buffer it touches
    (output first). `assign` marks a kernel that writes into existing memory (an in-place update)."""
    ast: KOp
    buf_dtypes: list[DType]
    buf_sizes: list[int]
    assign: bool = False

    @property
    def name(self) -> str:
        red = next((n for n in self.ast.walk() if isinstance(n.op, ReduceOps)), None)
        shape = self.full_shape
        kind = "r" if red is not None else "E"
        return f"{kind}_" + "_".join(str(s) for s in shape)

    @property
    def key(self) -> tuple:
        """Everything the kernel's code depends on (devices keep programs by it): the AST, whether it
        writes in place (no streaming stores, which need 64-byte aligned memory, and no split tail
        that rewrites outputs: an assign's target may be a view at any offset, read by another input)
        and the buffers' sizes (the index type, streaming from heuristics.STREAM_MIN_BYTES)."""
        return (self.ast.key, self.assign, tuple(self.buf_sizes))

    @cached_property
    def reads_target(self) -> bool:
        """Whether the kernel loads from buffer 0, the memory it writes."""
        return any(n.op is AstOps.LOAD and n.arg[0] == 0 for n in self.ast.walk())

    @cached_property
    def full_shape(self) -> tuple[int, ...]:
        shapes = [
            n.arg[1].shape for n in self.ast.walk() if n.op in (AstOps.LOAD, BufferOps.CONST, AstOps.STORE)
        ]
        return tuple(max(dims) for dims in zip(*shapes)) if shapes and shapes[0] else ()


__all__ = ["AstOps", "KOp", "Kernel", "BinaryOps", "dtypes"]
