"""The closed set of primitive ops. Every Tensor method is composed from these; every backend
implements exactly these (CompositeOps are lazy-graph shorthands that kernels expand into them).
Per-op tables (render templates, reference implementations, gradients) are plain dicts keyed by op,
and tests/core/test_tables.py asserts that every op has an entry in every table."""
from __future__ import annotations

from enum import Enum, auto


class _Ops(Enum):
    """The base of the op enums: hashed by identity (members are singletons). Enum's own hash runs
    Python code on every dict and set lookup, and ops key the per-op tables on every node."""
    __hash__ = object.__hash__


class UnaryOps(_Ops):
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    COS = auto()     # its own op: sin(x + pi/2) would round x + pi/2 first (off by 0.003 at 1e6)
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    CAST = auto()      # arg: target DType, value conversion
    BITCAST = auto()   # arg: target DType of the same size, bits reinterpreted


class BinaryOps(_Ops):
    ADD = auto()
    MUL = auto()
    MAX = auto()
    MOD = auto()     # C remainder: sign of the dividend (fmod for floats)
    IDIV = auto()    # C division: truncates toward zero; integer x/0 gives 0
    CMPLT = auto()
    CMPNE = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()


class TernaryOps(_Ops):
    WHERE = auto()
    MULACC = auto()  # a*b+c


class CompositeOps(_Ops):
    """Float ops made of primitives: one node in the lazy graph, expanded into primitives when a
    kernel's AST is built (tg/core/composite.py), so no backend ever sees one."""
    EXP = auto()
    SIGMOID = auto()
    TANH = auto()
    ERF = auto()
    ERFC = auto()


class ReduceOps(_Ops):
    SUM = auto()
    MAX = auto()


class MovementOps(_Ops):
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()


class BufferOps(_Ops):
    EMPTY = auto()    # an allocated buffer with undefined contents (host data is copied into it)
    CONST = auto()    # a scalar broadcast through a view; never allocated
    COPY = auto()     # a transfer between devices
    ASSIGN = auto()   # write a value into an existing buffer (in-place update)


Op = UnaryOps | BinaryOps | TernaryOps | CompositeOps | ReduceOps | MovementOps | BufferOps
ALU_OPS: list[Op] = [*UnaryOps, *BinaryOps, *TernaryOps]
ALL_OPS: list[Op] = [*UnaryOps, *BinaryOps, *TernaryOps, *CompositeOps, *ReduceOps, *MovementOps,
                     *BufferOps]
# Ops whose result is a bool regardless of the operands' dtype.
COMPARISON_OPS = {BinaryOps.CMPLT, BinaryOps.CMPNE}
