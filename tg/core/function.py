"""One small Function per primitive op: forward on LazyBuffers, and the gradient rule.
Composite Tensor methods get their gradients only by composition of these.

FUNCTIONS maps every primitive op to its Function (the per-op gradient table; ops that have
no gradient, like comparisons, map to a Function whose backward returns None)."""
from __future__ import annotations

import math
from typing import Any

from tg.core.dtype import DType, dtypes
from tg.core.lazy import LazyBuffer
from tg.core.ops import BinaryOps, BufferOps, CompositeOps, MovementOps, Op, ReduceOps, TernaryOps, UnaryOps


def _const(like: LazyBuffer, value: Any, dtype: DType | None = None) -> LazyBuffer:
    return LazyBuffer.const(value, dtype or like.dtype, like.device, like.shape)


class Function:
    parents: tuple[Any, ...]
    # each parent's in-place version when this Function read it, where one had been written in place
    # (Tensor._prior); None: every parent at version 0. autograd.parents resolves them.
    versions: tuple[int, ...] | None = None
    # True for a Function whose backward runs a computation of its own (activation checkpointing
    # recomputes its forward there): backprop first computes every gradient it holds pending, so the
    # activations those read are freed before that computation starts (see autograd.backprop).
    runs_in_backward: bool = False

    def __init__(self, device: str, *tensors: Any):
        self.device = device
        self.needs_input_grad = [t.requires_grad for t in tensors]
        self.requires_grad = (
            True if any(self.needs_input_grad) else (None if None in self.needs_input_grad else False)
        )

    def forward(self, *args: Any, **kwargs: Any) -> LazyBuffer:
        raise NotImplementedError

    def backward(self, grad: LazyBuffer) -> LazyBuffer | None | tuple[LazyBuffer | None, ...]:
        raise RuntimeError(f"[autograd] {type(self).__name__} has no gradient")


class NoGrad(Function):
    """Primitives with no gradient (comparisons, integer and bit ops): results never require grad."""
    op: Op

    def __init__(self, device: str, *tensors: Any):
        super().__init__(device, *tensors)
        self.requires_grad = False

    def forward(self, *args: LazyBuffer, **kwargs: Any) -> LazyBuffer:
        return args[0].e(self.op, *args[1:], arg=kwargs.get("arg"))


def _nograd(op: Op) -> type[NoGrad]:
    return type(f"NoGrad_{op.name}", (NoGrad,), {"op": op})


# ---------------------------------------------------------------- unary
class Exp2(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(UnaryOps.EXP2)
        return self.ret

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return self.ret.e(BinaryOps.MUL, grad).e(BinaryOps.MUL, _const(grad, math.log(2)))


class _Composite(Function):
    """A composite op (tg/core/composite.py) whose derivative is written from its value (`slope`)."""
    op: CompositeOps

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(self.op)
        return self.ret

    def slope(self) -> LazyBuffer:
        raise NotImplementedError     # each subclass writes its derivative

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return self.slope().e(BinaryOps.MUL, grad)


def _one_minus(x: LazyBuffer) -> LazyBuffer:
    return x.e(UnaryOps.NEG).e(BinaryOps.ADD, _const(x, 1.0))


class Exp(_Composite):
    op = CompositeOps.EXP

    def slope(self) -> LazyBuffer:
        return self.ret


class Sigmoid(_Composite):
    op = CompositeOps.SIGMOID

    def slope(self) -> LazyBuffer:
        # 0, not 0 * inf = nan, where exp(-x) overflows
        return self.ret.e(BinaryOps.MUL, _one_minus(self.ret))


class Tanh(_Composite):
    op = CompositeOps.TANH

    def slope(self) -> LazyBuffer:
        return _one_minus(self.ret.e(BinaryOps.MUL, self.ret))


class Erf(_Composite):
    op = CompositeOps.ERF

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x           # the slope is of the input; the others keep only their value
        return super().forward(x)

    def slope(self) -> LazyBuffer:      # 2/sqrt(pi) exp(-x^2)
        x = self.x
        return x.e(BinaryOps.MUL, x).e(UnaryOps.NEG).e(CompositeOps.EXP).e(BinaryOps.MUL,
                                                                          _const(x, 2 / math.sqrt(math.pi)))


class Erfc(Erf):
    op = CompositeOps.ERFC

    def slope(self) -> LazyBuffer:
        return super().slope().e(UnaryOps.NEG)


class Log2(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(UnaryOps.LOG2)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.e(BinaryOps.MUL, self.x.e(BinaryOps.MUL, _const(grad, math.log(2))).e(UnaryOps.RECIP))


class Sin(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(UnaryOps.SIN)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return self.x.e(UnaryOps.COS).e(BinaryOps.MUL, grad)


class Cos(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(UnaryOps.COS)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return self.x.e(UnaryOps.SIN).e(UnaryOps.NEG).e(BinaryOps.MUL, grad)


class Sqrt(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(UnaryOps.SQRT)
        return self.ret

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.e(BinaryOps.MUL, self.ret.e(BinaryOps.MUL, _const(grad, 2.0)).e(UnaryOps.RECIP))


class Reciprocal(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(UnaryOps.RECIP)
        return self.ret

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.e(UnaryOps.NEG).e(BinaryOps.MUL, self.ret).e(BinaryOps.MUL, self.ret)


class Neg(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(UnaryOps.NEG)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.e(UnaryOps.NEG)


class Cast(Function):
    def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        self.input_dtype, self.bitcast = x.dtype, bitcast
        return x.e(UnaryOps.BITCAST if bitcast else UnaryOps.CAST, arg=dtype)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        if self.bitcast:
            raise RuntimeError("[autograd] bitcast has no gradient")
        return grad.e(UnaryOps.CAST, arg=self.input_dtype)


# ---------------------------------------------------------------- binary / ternary
class Add(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.ADD, y)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        return (grad if self.needs_input_grad[0] else None, grad if self.needs_input_grad[1] else None)


class Mul(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        return x.e(BinaryOps.MUL, y)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        return (self.y.e(BinaryOps.MUL, grad) if self.needs_input_grad[0] else None,
                self.x.e(BinaryOps.MUL, grad) if self.needs_input_grad[1] else None)


class Maximum(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        if self.requires_grad:   # backward compares them: the same bits as the forward's (LazyBuffer.stored)
            x, y = x.stored(), y.stored()
        self.x, self.y = x, y
        return x.e(BinaryOps.MAX, y)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        # torch.maximum's rule: the larger operand takes the gradient, a tie shares it equally, and
        # where either is NaN (no order) both take it; from the operands, so it adds up to grad
        zero, tie = _const(grad, 0), self.x.e(BinaryOps.CMPNE, self.y).e(UnaryOps.NEG)
        either = tie.e(TernaryOps.WHERE, grad.e(BinaryOps.MUL, _const(grad, 0.5)), grad)
        return (self.x.e(BinaryOps.CMPLT, self.y).e(TernaryOps.WHERE, zero, either)
                if self.needs_input_grad[0] else None,
                self.y.e(BinaryOps.CMPLT, self.x).e(TernaryOps.WHERE, zero, either)
                if self.needs_input_grad[1] else None)


class Where(Function):
    def forward(self, cond: LazyBuffer, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        if self.needs_input_grad[1] and self.needs_input_grad[2]:
            cond = cond.stored()   # the two gradients, maybe two kernels, split by one decision
        self.cond = cond
        return cond.e(TernaryOps.WHERE, x, y)

    def backward(self, grad: LazyBuffer) -> tuple[None, LazyBuffer | None, LazyBuffer | None]:
        zero = _const(grad, 0)
        return (None, self.cond.e(TernaryOps.WHERE, grad, zero) if self.needs_input_grad[1] else None,
                self.cond.e(TernaryOps.WHERE, zero, grad) if self.needs_input_grad[2] else None)


class MulAcc(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer, z: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        return x.e(TernaryOps.MULACC, y, z)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None, LazyBuffer | None]:
        return (self.y.e(BinaryOps.MUL, grad) if self.needs_input_grad[0] else None,
                self.x.e(BinaryOps.MUL, grad) if self.needs_input_grad[1] else None,
                grad if self.needs_input_grad[2] else None)


# ---------------------------------------------------------------- reduce
class Sum(Function):
    def forward(self, x: LazyBuffer, axes: tuple[int, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.r(ReduceOps.SUM, axes)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.expand(self.input_shape)


class Max(Function):
    def forward(self, x: LazyBuffer, axes: tuple[int, ...]) -> LazyBuffer:
        if self.requires_grad:   # backward compares x with the max of it: the same bits (LazyBuffer.stored)
            x = x.stored()
        self.x, self.ret, self.axes = x, x.r(ReduceOps.MAX, axes), axes
        return self.ret

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        # ties share the gradient equally
        is_max = (self.x.e(BinaryOps.CMPNE, self.ret.expand(self.x.shape)).e(UnaryOps.NEG)
                  .e(UnaryOps.CAST, arg=grad.dtype))
        count = is_max.r(ReduceOps.SUM, self.axes)
        return is_max.e(BinaryOps.MUL, grad.e(BinaryOps.MUL, count.e(UnaryOps.RECIP)).expand(self.x.shape))


class Local(Function):
    """A value computed elsewhere (with no graph) and the local derivative of it by each input:
    backward is grad * derivative. For composites whose composed gradient would meet 0 * inf or
    cancellation where the true derivative is plain: pow at 0, sigmoid far from 0, log1p near 0,
    and the zero gradient of piecewise-constant functions (sign, round)."""

    def forward(self, *inputs: LazyBuffer, value: LazyBuffer,
                derivatives: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
        self.derivatives = derivatives
        return value

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        return tuple(grad.e(BinaryOps.MUL, d) if need else None
                     for d, need in zip(self.derivatives, self.needs_input_grad))


# ---------------------------------------------------------------- movement
class Reshape(Function):
    def forward(self, x: LazyBuffer, shape: tuple[int, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.reshape(shape)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.reshape(self.input_shape)


class Permute(Function):
    def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
        self.order = order
        return x.permute(order)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        inverse = tuple(sorted(range(len(self.order)), key=lambda i: self.order[i]))
        return grad.permute(inverse)


class Expand(Function):
    def forward(self, x: LazyBuffer, shape: tuple[int, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.expand(shape)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        axes = tuple(i for i, (a, b) in enumerate(zip(self.input_shape, grad.shape)) if a != b)
        return grad.r(ReduceOps.SUM, axes)


class Pad(Function):
    def forward(self, x: LazyBuffer, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
        return x.pad(arg)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.shrink(self.narg)


class Shrink(Function):
    def forward(self, x: LazyBuffer, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
        return x.shrink(arg)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.pad(self.narg)


def placed(parts: list[tuple[LazyBuffer, tuple[tuple[int, int], ...]]]) -> LazyBuffer:
    """Each part padded by its pad arg to one shape and picked where it lies (a where of its range),
    the later over the earlier: every element is its part's value as it is."""
    out: LazyBuffer | None = None
    for x, arg in parts:
        padded = x.pad(arg)
        inside = LazyBuffer.const(True, dtypes.bool, x.device, x.shape).pad(arg)
        out = padded if out is None else inside.e(TernaryOps.WHERE, padded, out)
    assert out is not None
    return out


def join(xs: tuple[LazyBuffer, ...] | list[LazyBuffer],
         dim: int) -> tuple[LazyBuffer, list[tuple[tuple[int, int], ...]]]:
    """xs joined along dim (Cat's forward), and each one's range in the result (for shrink)."""
    total = sum(x.shape[dim] for x in xs)
    ranges: list[tuple[tuple[int, int], ...]] = []
    args = []
    offset = 0
    for x in xs:
        n = x.shape[dim]
        args.append(tuple((offset, total - offset - n) if d == dim else (0, 0) for d in range(len(x.shape))))
        ranges.append(tuple((offset, offset + n) if d == dim else (0, s) for d, s in enumerate(x.shape)))
        offset += n
    return placed(list(zip(xs, args))), ranges


class Cat(Function):
    """Tensors joined along dim: each padded to the whole length and picked where it lies (a where of
    each one's range), so every element is its input's value as it is: a sum of the padded tensors would
    make -0.0 into +0.0 (-0.0 + 0.0) and quiet a signalling NaN. The gradient of each is the slice of the
    output's, not a chain of wheres through the later ones."""

    def forward(self, *xs: LazyBuffer, dim: int) -> LazyBuffer:
        out, self.ranges = join(xs, dim)
        return out

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        return tuple(grad.shrink(r) if need else None for r, need in zip(self.ranges, self.needs_input_grad))


class Flip(Function):
    def forward(self, x: LazyBuffer, axes: tuple[bool, ...]) -> LazyBuffer:
        self.axes = axes
        return x.flip(axes)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.flip(self.axes)


# ---------------------------------------------------------------- buffers
class Stored(Function):
    """The values as one computation every kernel reads bit for bit (LazyBuffer.stored)."""

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.stored()

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad


class Contiguous(Function):
    """ASSIGN into a fresh buffer: the values of a view, stored; copy=True stores a base again too (clone)."""

    def forward(self, x: LazyBuffer, copy: bool = False) -> LazyBuffer:
        if copy and x.is_base and x.op is not BufferOps.CONST:
            return LazyBuffer.empty(x.shape, x.dtype, x.device).assign(x)
        return x.contiguous()

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad


class Copy(Function):
    def forward(self, x: LazyBuffer, device: str) -> LazyBuffer:
        self.input_device = x.device
        return x.copy_to_device(device)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        return grad.copy_to_device(self.input_device)


class Const(Function):
    """A constant has no inputs and so nothing to differentiate (used for completeness)."""

    def forward(self, x: LazyBuffer, value: Any = 0) -> LazyBuffer:
        return LazyBuffer.const(value, x.dtype, x.device, x.shape)

    def backward(self, grad: LazyBuffer) -> None:
        return None


class Empty(Const):
    pass


class Assign(Function):
    def forward(self, target: LazyBuffer, value: LazyBuffer) -> LazyBuffer:
        return target.assign(value)


class Freed(Function):
    """Stands in for the Function of a tensor whose graph a backward pass consumed without
    retain_graph: what the Function saved is gone, so going back through it again is an error."""
    parents = ()

    def backward(self, grad: LazyBuffer) -> None:
        raise RuntimeError(
            "[autograd] backward through a graph a second time: the first backward() freed the "
            "values it saved; pass retain_graph=True to the first backward() (or gradient()) "
            "to go through it again, or recompute the forward"
        )


FREED = Freed("")


FUNCTIONS: dict[Op, type[Function]] = {
    UnaryOps.EXP2: Exp2, UnaryOps.LOG2: Log2, UnaryOps.SIN: Sin, UnaryOps.COS: Cos,
    UnaryOps.SQRT: Sqrt, CompositeOps.EXP: Exp, CompositeOps.SIGMOID: Sigmoid, CompositeOps.TANH: Tanh,
    CompositeOps.ERF: Erf, CompositeOps.ERFC: Erfc,
    UnaryOps.RECIP: Reciprocal, UnaryOps.NEG: Neg, UnaryOps.CAST: Cast, UnaryOps.BITCAST: Cast,
    BinaryOps.ADD: Add, BinaryOps.MUL: Mul, BinaryOps.MAX: Maximum,
    TernaryOps.WHERE: Where, TernaryOps.MULACC: MulAcc,
    ReduceOps.SUM: Sum, ReduceOps.MAX: Max,
    MovementOps.RESHAPE: Reshape, MovementOps.PERMUTE: Permute, MovementOps.EXPAND: Expand,
    MovementOps.PAD: Pad, MovementOps.SHRINK: Shrink, MovementOps.FLIP: Flip,
    BufferOps.EMPTY: Empty, BufferOps.CONST: Const, BufferOps.COPY: Copy, BufferOps.ASSIGN: Assign,
    **{op: _nograd(op) for op in (BinaryOps.MOD, BinaryOps.IDIV, BinaryOps.CMPLT, BinaryOps.CMPNE,
                                  BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR, BinaryOps.SHL, BinaryOps.SHR)},
}
