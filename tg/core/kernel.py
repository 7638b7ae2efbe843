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
from typing import Any

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
        arg = self.arg
        if self.op is BufferOps.CONST:
            arg = (value_key(arg[0]), arg[1].key)
        elif self.op in (AstOps.LOAD, AstOps.STORE):
            arg = (arg[0], arg[1].key)
        return (self.op, self.dtype, arg, tuple(s.key for s in self.src))

    def walk(self) -> list[KOp]:
        """Every node once, sources before users."""
        seen: dict[int, KOp] = {}

        def visit(n: KOp) -> None:
            if id(n) in seen:
                return
            for s in n.src:
                visit(s)
            seen[id(n)] = n
        visit(self)
        return list(seen.values())


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
        """What the kernel's code depends on (devices keep programs by it)."""
        return self.ast.key

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
