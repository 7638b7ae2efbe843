"""ElementwiseMixin, a part of the Tensor class: casts, arithmetic and its operators, in-place
arithmetic, comparisons, logic and bitwise ops, `where`. tg/core/tensor.py builds Tensor from the mixins
and binds `Tensor` here once the class exists (see tg/core/mixin/__init__.py)."""
from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Callable

from tg.core import function as F
from tg.core.autocast import autocast_op
from tg.core.dtype import (
    DType,
    dtype_of_scalar,
    dtypes,
    max_value,
    promote_types,
    scalar_result_type,
)
from tg.core.lazy import LazyBuffer
from tg.core.mixin.base import NoGrad, apply
from tg.core.ops import BinaryOps
from tg.core.realize import known_values
from tg.core.shape import broadcast_shape

if TYPE_CHECKING:
    from tg.core.tensor import Tensor




def _cmp(x: Tensor, y: Any, kind: str) -> Tensor:
    a, b = x._broadcasted(y)
    lt = F.FUNCTIONS[BinaryOps.CMPLT]
    ne = F.FUNCTIONS[BinaryOps.CMPNE]
    if kind == "lt":
        return apply(lt, a, b)
    if kind == "gt":
        return apply(lt, b, a)
    if kind == "ne":
        return apply(ne, a, b)
    if kind == "eq":
        return apply(ne, a, b).logical_not()
    if not a.dtype.is_float:
        return apply(lt, b, a).logical_not() if kind == "le" else apply(lt, a, b).logical_not()
    # with NaN neither a < b nor a >= b holds, so >= is "> or ==", not "not <"
    eq = apply(ne, a, b).logical_not()
    return (apply(lt, a, b) if kind == "le" else apply(lt, b, a)) | eq


_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
               "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
               "bool": "Bool"}


class ElementwiseMixin:
    __slots__ = ()

    def cast(self: Tensor, dtype: DType | str) -> Tensor:
        """The values converted to `dtype` (a DType or its name); float to int rounds toward zero. Returns
        self when the dtype already matches.

            >>> Tensor([1.7, -1.7]).cast("int32").tolist()
            [1, -1]
        """
        if dtype is self.lazydata.dtype:
            return self
        dt = dtypes.from_any(dtype)
        return self if dt == self.dtype else apply(F.Cast, self, dtype=dt)

    def bitcast(self: Tensor, dtype: DType | str) -> Tensor:
        """The same bits read as another dtype of the same size (torch's view(dtype)): no value changes.

            >>> Tensor([1.0]).bitcast("int32").tolist()
            [1065353216]
        """
        dt = dtypes.from_any(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"[core] bitcast from {self.dtype.name} to {dt.name}: sizes differ "
                            f"({self.dtype.itemsize} vs {dt.itemsize} bytes)")
        return self if dt == self.dtype else apply(F.Cast, self, dtype=dt, bitcast=True)

    def type_as(self: Tensor, other: Tensor) -> Tensor:
        """This tensor cast to other's dtype.

            >>> Tensor([1.7, 2.2]).type_as(Tensor([0])).tolist()
            [1, 2]
        """
        return self.cast(other.dtype)

    def float(self: Tensor) -> Tensor:
        """cast() to float32.

            >>> Tensor([1, 2]).float().tolist()
            [1.0, 2.0]
        """
        return self.cast(dtypes.float32)

    def half(self: Tensor) -> Tensor:
        """cast() to float16.

            >>> Tensor([1.0, 2.5]).half().dtype
            dtypes.float16
        """
        return self.cast(dtypes.float16)

    def bfloat16(self: Tensor) -> Tensor:
        """cast() to bfloat16.

            >>> x = Tensor([1.0, 3.0]).bfloat16()
            >>> x.dtype, x.tolist()
            (dtypes.bfloat16, [1.0, 3.0])
        """
        return self.cast(dtypes.bfloat16)

    def double(self: Tensor) -> Tensor:
        """cast() to float64.

            >>> Tensor([1, 2]).double().dtype
            dtypes.float64
        """
        return self.cast(dtypes.float64)

    def int(self: Tensor) -> Tensor:
        """cast() to int32 (floats round toward zero).

            >>> Tensor([1.9, -1.9]).int().tolist()
            [1, -1]
        """
        return self.cast(dtypes.int32)

    def long(self: Tensor) -> Tensor:
        """cast() to int64 (floats round toward zero).

            >>> Tensor([2.5]).long().dtype
            dtypes.int64
        """
        return self.cast(dtypes.int64)

    def bool(self: Tensor) -> Tensor:
        """cast() to bool: nonzero is True.

            >>> Tensor([0, 2, -1]).bool().tolist()
            [False, True, True]
        """
        return self.cast(dtypes.bool)

    def _float_like(self: Tensor) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)
    def _nograd_op(self: Tensor, op: Any, *others: Tensor, arg: Any = None) -> Tensor:
        return apply(F.FUNCTIONS[op], self, *others, arg=arg)

    def neg(self: Tensor) -> Tensor:
        """-self, elementwise (the unary minus operator); a bool tensor raises, as in torch.

            >>> Tensor([1, -2]).neg().tolist(), (-Tensor([1.5])).tolist()
            ([-1, 2], [-1.5])
        """
        if self.dtype == dtypes.bool:
            raise TypeError("[core] negation of a bool tensor; use logical_not() or ~")
        return apply(F.Neg, self)

    def __neg__(self: Tensor) -> Tensor:
        return self.neg()

    def add(self: Tensor, y: Any, reverse: builtins.bool = False, *, alpha: Any = 1) -> Tensor:
        """self + alpha * y, broadcasting, with torch's type promotion: a Python int keeps the tensor's dtype
        and a float turns an int tensor into float32. reverse=True computes y + self.

            >>> Tensor([1, 2]).add(Tensor([10, 20])).tolist(), (Tensor([[1], [2]]) + 0.5).tolist()
            ([11, 22], [[1.5], [2.5]])
            >>> Tensor([1, 2], dtype="int32").add(3).dtype
            dtypes.int32
        """
        return apply(F.Add, *self._broadcasted(y if alpha == 1 else self._to_tensor(y) * alpha, reverse))

    def sub(self: Tensor, y: Any, reverse: builtins.bool = False, *, alpha: Any = 1) -> Tensor:
        """self - alpha * y, broadcasting and promoting as add(); reverse=True computes y - self. Bool
        tensors raise, as in torch.

            >>> Tensor([5, 7]).sub(Tensor([1, 2])).tolist(), Tensor([5, 7]).sub(10, reverse=True).tolist()
            ([4, 5], [5, 3])
        """
        a, b = self._broadcasted(y if alpha == 1 else self._to_tensor(y) * alpha, reverse)
        if a.dtype == dtypes.bool:
            raise TypeError("[core] subtraction of bool tensors; use logical_xor() or ^")
        return apply(F.Add, a, apply(F.Neg, b))

    def mul(self: Tensor, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self * y, broadcasting and promoting as add(); reverse=True computes y * self.

            >>> Tensor([2, 3]).mul(Tensor([4, 5])).tolist(), (Tensor([2, 3]) * 0.5).tolist()
            ([8, 15], [1.0, 1.5])
        """
        return apply(F.Mul, *self._broadcasted(y, reverse))

    def div(self: Tensor, y: Any, reverse: builtins.bool = False, rounding_mode: str | None = None) -> Tensor:
        """self / y, broadcasting; as in torch, integer inputs give float32. rounding_mode="floor" is
        floordiv() and "trunc" rounds the quotient toward zero. reverse=True computes y / self.

            >>> Tensor([1, 3]).div(2).tolist(), Tensor([-7, 7]).div(2, rounding_mode="floor").tolist()
            ([0.5, 1.5], [-4, 3])
            >>> Tensor([-7.0, 7.0]).div(2, rounding_mode="trunc").tolist()
            [-3.0, 3.0]
            >>> Tensor([-7, 7]).div(2, rounding_mode="trunc").tolist()
            [-3, 3]
        """
        if rounding_mode == "floor":
            return self.floordiv(y, reverse)
        a, b = self._broadcasted(y, reverse)
        if rounding_mode == "trunc":
            # ints: C division truncates, exactly and in the int dtype (torch keeps it too)
            return (a / b).trunc() if a.dtype.is_float else a._nograd_op(BinaryOps.IDIV, b)
        a, b = a._float_like(), b._float_like()
        return apply(F.Mul, a, apply(F.Reciprocal, b))

    def floordiv(self: Tensor, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self // y, rounded toward minus infinity (Python's //, torch.floor_divide); ints stay ints.

            >>> Tensor([-7, 7]).floordiv(2).tolist(), (Tensor([-7.0, 7.0]) // 2).tolist()
            ([-4, 3], [-4.0, 3.0])
        """
        a, b = self._broadcasted(y, reverse)
        if a.dtype.is_float:
            return (a / b).floor()
        q = a._nograd_op(BinaryOps.IDIV, b)
        r = a._nograd_op(BinaryOps.MOD, b)
        adjust = (r != 0) & ((r < 0) != (b < 0))
        return q - adjust.cast(q.dtype)

    def mod(self: Tensor, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self % y with Python / torch.remainder semantics: the result has the sign of the divisor.

            >>> Tensor([-7, 7]).mod(3).tolist(), (Tensor([-7.5, 7.5]) % -2).tolist()
            ([2, 1], [-1.5, -0.5])
        """
        a, b = self._broadcasted(y, reverse)
        if a.dtype.is_float:
            return a - (a / b).floor() * b
        r = a._nograd_op(BinaryOps.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(r + b, r)

    def fmod(self: Tensor, y: Any) -> Tensor:
        """The remainder with the sign of the dividend (C's fmod, torch.fmod); compare mod().

            >>> Tensor([-7, 7]).fmod(3).tolist(), Tensor([-7.5, 7.5]).fmod(2).tolist()
            ([-1, 1], [-1.5, 1.5])
        """
        a, b = self._broadcasted(y)
        return a._nograd_op(BinaryOps.MOD, b) if not a.dtype.is_float else a - (a / b).trunc() * b

    @autocast_op
    def pow(self: Tensor, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self ** y, broadcasting, with torch's dtypes: int ** int stays int (the promoted int dtype)
        and is exact, wrapping on overflow as torch does; a float on either side gives float. A scalar
        whole-number float exponent with |y| <= 16 is an exact repeated product; other float exponents
        go through exp2/log2, and a negative base gives nan unless the exponent is whole. An int
        tensor to a negative int scalar raises, as in torch. reverse=True is y ** self.

            >>> Tensor([1, 2, 3]).pow(2).tolist(), Tensor([2.0, 4.0]).pow(-1).tolist()
            ([1, 4, 9], [0.5, 0.25])
            >>> Tensor([4.0, 9.0]).pow(0.5).tolist(), Tensor([-2.0, 2.0]).pow(3.0).tolist()
            ([2.0, 3.0], [-8.0, 8.0])
            >>> Tensor([2, 3]).pow(20).tolist(), (2 ** Tensor([1, 2, 3])).tolist()
            ([1048576, 3486784401], [2, 4, 8])
        """
        if not reverse and isinstance(y, (int, float)) and not isinstance(y, bool):
            x = self.cast(scalar_result_type(self.dtype, y))
            if not x.dtype.is_float:
                if y < 0:
                    raise ValueError(f"[core] pow: Integers to negative integer powers are not allowed "
                                     f"(as in torch), got {x.dtype.name} ** {y}; use a float tensor")
                return x._pow_by_squaring(int(y))
            with NoGrad():
                value = x._detached()._pow_scalar_value(y)
            return x._local(value, (x, lambda: 0 if y == 0 else y * x._detached()._pow_scalar_value(y - 1)))
        a, b = self._broadcasted(y, reverse)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if not a.dtype.is_float:
            return a._int_pow(b)
        ad, bd = a._detached(), b._detached()
        with NoGrad():
            value = ad._pow_value(bd)
        # torch's derivatives: b * a**(b-1) (0 where b == 0) and a**b * log(a) (0 where a == 0 <= b)
        return a._local(value, (a, lambda: (bd == 0).where(0.0, bd * ad._pow_value(bd - 1))),
                        (b, lambda: ((ad == 0) & (bd >= 0)).where(0.0, value * ad.log())))

    def _pow_by_squaring(self: Tensor, n: builtins.int) -> Tensor:
        """self ** n for a whole n >= 0 by repeated squaring: exact in integer arithmetic."""
        acc, base = None, self
        while n:
            if n & 1:
                acc = base if acc is None else acc * base
            n >>= 1
            if n:
                base = base * base
        return self.ones_like() if acc is None else acc

    def _pow_scalar_value(self: Tensor, y: builtins.int | builtins.float) -> Tensor:
        if y == 0.5:
            return self.sqrt()
        if y == -0.5:
            return self.rsqrt()
        if float(y).is_integer() and abs(y) <= 16:
            acc = self._pow_by_squaring(abs(int(y)))
            return acc.reciprocal() if y < 0 else acc
        return self._pow_value(Tensor(LazyBuffer.const(y, self.dtype, self.device, ()), device=self.device)
                               ._broadcast_to(self.shape))

    def _pow_value(self: Tensor, b: Tensor) -> Tensor:
        """a ** b for float tensors of one shape, with no gradient rule of its own (pow() gives one)."""
        a = self
        mag = (b == 0).where(1.0, (b * a.abs().log2()).exp2())   # 0**0 is 1
        # negative bases: real only for integer exponents; sign flips for odd ones
        is_int = b == b.trunc()
        odd = (b.abs() % 2) == 1
        neg = a < 0
        sign = (neg & odd).where(-1.0, 1.0)
        return (neg & is_int.logical_not()).where(float("nan"), mag * sign)

    def _int_pow(self: Tensor, e: Tensor) -> Tensor:
        """self ** e for int tensors of one shape and dtype: square-and-multiply over every bit of the
        exponent, so exact (wrapping as the dtype does). A negative exponent gives what torch's
        integer pow gives: 1 for base 1, +-1 for base -1, else 0."""
        bits = self.dtype.itemsize * 8 - (0 if self.dtype.is_unsigned else 1)
        known = known_values(e.lazydata) if e.numel() else None
        if known is not None:   # host data: only the bits in use
            bits = min(bits, max(int(known.max()).bit_length(), 1))
        acc, base = self.ones_like(), self
        for bit in range(bits):
            acc = acc * ((e >> bit) & 1).bool().where(base, 1)
            if bit + 1 < bits:
                base = base * base
            if bit % 6 == 5:
                # each square reads base twice, and kernels inline it as a tree: cut the chain
                acc, base = acc.realize(), base.realize()
        if self.dtype.is_unsigned:
            return acc
        odd = (e & 1) == 1
        neg_pow = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0))
        return (e < 0).where(neg_pow.cast(self.dtype), acc)

    def _local(self: Tensor, value: Tensor, *inputs: tuple[Tensor, Callable[[], Any]]) -> Tensor:
        """value (computed with no graph) joined to the graph of the given inputs, each with a callable
        giving d(value)/d(input) (a scalar or a tensor of value's shape), called only when a gradient is
        wanted. The inputs have value's shape and dtype."""
        if Tensor.no_grad or not any(t.requires_grad for t, _ in inputs):
            return value
        derivatives = []
        for _, fn in inputs:
            with NoGrad():
                d = fn()
                d = d.cast(value.dtype) if isinstance(d, Tensor) else \
                    Tensor(LazyBuffer.const(d, value.dtype, value.device, ()), device=value.device)
                derivatives.append(d._broadcast_to(value.shape).lazydata)
        return apply(F.Local, *(t for t, _ in inputs), value=value.lazydata, derivatives=tuple(derivatives))

    def __add__(self: Tensor, y: Any) -> Tensor: return self.add(y)
    def __radd__(self: Tensor, y: Any) -> Tensor: return self.add(y, True)
    def __sub__(self: Tensor, y: Any) -> Tensor: return self.sub(y)
    def __rsub__(self: Tensor, y: Any) -> Tensor: return self.sub(y, True)
    def __mul__(self: Tensor, y: Any) -> Tensor: return self.mul(y)
    def __rmul__(self: Tensor, y: Any) -> Tensor: return self.mul(y, True)
    def __truediv__(self: Tensor, y: Any) -> Tensor: return self.div(y)
    @autocast_op
    def __rtruediv__(self: Tensor, y: Any) -> Tensor: return self.div(y, True)
    def __floordiv__(self: Tensor, y: Any) -> Tensor: return self.floordiv(y)
    def __rfloordiv__(self: Tensor, y: Any) -> Tensor: return self.floordiv(y, True)
    def __mod__(self: Tensor, y: Any) -> Tensor: return self.mod(y)
    def __rmod__(self: Tensor, y: Any) -> Tensor: return self.mod(y, True)
    @autocast_op
    def __pow__(self: Tensor, y: Any) -> Tensor: return self.pow(y)
    @autocast_op
    def __rpow__(self: Tensor, y: Any) -> Tensor: return self.pow(y, True)
    @autocast_op
    def __matmul__(self: Tensor, y: Tensor) -> Tensor: return self.matmul(y)
    @autocast_op
    def __rmatmul__(self: Tensor, y: Tensor) -> Tensor: return self._to_tensor(y).matmul(self)
    def __iadd__(self: Tensor, y: Any) -> Tensor: return self._binary_in_place("+=", Tensor.add, y)
    def __isub__(self: Tensor, y: Any) -> Tensor: return self._binary_in_place("-=", Tensor.sub, y)
    def __imul__(self: Tensor, y: Any) -> Tensor: return self._binary_in_place("*=", Tensor.mul, y)
    def __itruediv__(self: Tensor, y: Any) -> Tensor: return self._binary_in_place("/=", Tensor.div, y)

    def add_(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
        """self += alpha * other, in place (torch's add_); returns self.

            >>> Tensor([1.0, 2.0]).add_(Tensor([1.0, 1.0]), alpha=3).tolist()
            [4.0, 5.0]
        """
        return self._binary_in_place("add_", Tensor.add, other if alpha == 1 else other * alpha)

    def sub_(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
        """self -= alpha * other, in place (torch's sub_); returns self.

            >>> Tensor([1.0, 2.0]).sub_(1).tolist()
            [0.0, 1.0]
        """
        return self._binary_in_place("sub_", Tensor.sub, other if alpha == 1 else other * alpha)

    def mul_(self: Tensor, other: Any) -> Tensor:
        """self *= other, in place (torch's mul_); returns self.

            >>> Tensor([1.0, 2.0]).mul_(3).tolist()
            [3.0, 6.0]
        """
        return self._binary_in_place("mul_", Tensor.mul, other)

    def div_(self: Tensor, other: Any) -> Tensor:
        """self /= other, in place (torch's div_); returns self.

            >>> Tensor([1.0, 2.0]).div_(2).tolist()
            [0.5, 1.0]
        """
        return self._binary_in_place("div_", Tensor.div, other)

    def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002  (torch's names)
        """self clamped to [min, max], in place (torch's clamp_); returns self.

            >>> Tensor([-2.0, 0.5, 3.0]).clamp_(-1, 1).tolist()
            [-1.0, 0.5, 1.0]
        """
        return self._write_in_place("clamp_", lambda old: old.clamp(min, max))

    def fill_(self: Tensor, value: Any) -> Tensor:
        """Every element set to value, in place (torch's fill_); returns self.

            >>> Tensor([1.0, 2.0]).fill_(7).tolist()
            [7.0, 7.0]
        """
        return self.copy_(value)

    def zero_(self: Tensor) -> Tensor:
        """Every element set to 0, in place (torch's zero_); returns self.

            >>> Tensor([1.0, 2.0]).zero_().tolist()
            [0.0, 0.0]
        """
        return self.copy_(0)

    def _binary_in_place(self: Tensor, name: str, op: Callable[[Tensor, Any], Tensor], y: Any) -> Tensor:
        # x += x reads x's old value on both sides
        return self._write_in_place(name, lambda old: op(old, old if y is self else y))

    # comparisons and logic (no gradients)
    def __lt__(self: Tensor, y: Any) -> Tensor: return _cmp(self, y, "lt")
    def __gt__(self: Tensor, y: Any) -> Tensor: return _cmp(self, y, "gt")
    def __le__(self: Tensor, y: Any) -> Tensor: return _cmp(self, y, "le")
    def __ge__(self: Tensor, y: Any) -> Tensor: return _cmp(self, y, "ge")
    def __eq__(self: Tensor, y: Any) -> Tensor: return _cmp(self, y, "eq")  # type: ignore[override]
    def __ne__(self: Tensor, y: Any) -> Tensor: return _cmp(self, y, "ne")  # type: ignore[override]

    def lt(self: Tensor, y: Any) -> Tensor:
        """self < y elementwise, broadcasting, as a bool tensor (comparisons have no gradient).

            >>> Tensor([1, 2, 3]).lt(2).tolist()
            [True, False, False]
        """
        return self < y

    def gt(self: Tensor, y: Any) -> Tensor:
        """self > y elementwise, broadcasting, as a bool tensor.

            >>> Tensor([1, 2, 3]).gt(2).tolist()
            [False, False, True]
        """
        return self > y

    def le(self: Tensor, y: Any) -> Tensor:
        """self <= y elementwise, broadcasting, as a bool tensor (False where either side is NaN).

            >>> Tensor([1, 2, 3]).le(2).tolist()
            [True, True, False]
        """
        return self <= y

    def ge(self: Tensor, y: Any) -> Tensor:
        """self >= y elementwise, broadcasting, as a bool tensor (False where either side is NaN).

            >>> Tensor([1.0, 2.0, float("nan")]).ge(2).tolist()
            [False, True, False]
        """
        return self >= y

    def eq(self: Tensor, y: Any) -> Tensor:
        """self == y elementwise, broadcasting, as a bool tensor (the == operator does the same).

            >>> Tensor([1, 2, 3]).eq(Tensor([1, 0, 3])).tolist()
            [True, False, True]
        """
        return self == y

    def ne(self: Tensor, y: Any) -> Tensor:
        """self != y elementwise, broadcasting, as a bool tensor; NaN != NaN is True.

            >>> Tensor([1.0, float("nan")]).ne(Tensor([1.0, float("nan")])).tolist()
            [False, True]
        """
        return self != y

    def _bitwise(self: Tensor, op: Any, y: Any, reverse: builtins.bool = False) -> Tensor:
        a, b = self._broadcasted(y, reverse)
        if a.dtype.is_float:
            raise TypeError(
                f"[core] bitwise {op.name.lower()} needs integer or bool tensors, got {a.dtype.name}"
            )
        return a._nograd_op(op, b)

    def __and__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.AND, y)
    def __rand__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.AND, y, True)
    def __or__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.OR, y)
    def __ror__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.OR, y, True)
    def __xor__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.XOR, y)
    def __rxor__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.XOR, y, True)
    def __lshift__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.SHL, y)
    def __rshift__(self: Tensor, y: Any) -> Tensor: return self._bitwise(BinaryOps.SHR, y)

    def __invert__(self: Tensor) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if self.dtype.is_float:
            raise TypeError(f"[core] ~ needs an integer or bool tensor, got {self.dtype.name}")
        return self ^ -1 if not self.dtype.is_unsigned else self ^ int(max_value(self.dtype))

    def logical_not(self: Tensor) -> Tensor:
        """Elementwise NOT of the truth values (nonzero is True), as a bool tensor.

            >>> Tensor([0, 3]).logical_not().tolist()
            [True, False]
        """
        return self.bool()._nograd_op(
            BinaryOps.CMPNE, Tensor(True, device=self.device)._broadcast_to(self.shape)
        )

    def logical_and(self: Tensor, y: Any) -> Tensor:
        """Elementwise AND of the truth values (nonzero is True), broadcasting, as a bool tensor.

            >>> Tensor([0, 1, 2]).logical_and(Tensor([1, 1, 0])).tolist()
            [False, True, False]
        """
        return self.bool() & self._to_tensor(y).bool()

    def logical_or(self: Tensor, y: Any) -> Tensor:
        """Elementwise OR of the truth values (nonzero is True), broadcasting, as a bool tensor.

            >>> Tensor([0, 1, 0]).logical_or(Tensor([0, 0, 5])).tolist()
            [False, True, True]
        """
        return self.bool() | self._to_tensor(y).bool()

    def logical_xor(self: Tensor, y: Any) -> Tensor:
        """Elementwise XOR of the truth values (nonzero is True), broadcasting, as a bool tensor.

            >>> Tensor([0, 1, 2]).logical_xor(Tensor([1, 1, 0])).tolist()
            [True, False, True]
        """
        return self.bool() ^ self._to_tensor(y).bool()

    def where(self: Tensor, x: Any, y: Any) -> Tensor:
        """x where self is true, else y (torch.where(self, x, y)), broadcasting all three; x and y may be
        tensors or scalars.

            >>> Tensor([True, False, True]).where(Tensor([1, 2, 3]), 0).tolist()
            [1, 0, 3]
        """
        cond = self.bool()
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            a, b = x._broadcasted(y)
        elif isinstance(x, Tensor):
            a, b = x._broadcasted(y)
        elif isinstance(y, Tensor):
            b, a = y._broadcasted(x)
        else:
            dt = promote_types(dtype_of_scalar(x), dtype_of_scalar(y))
            a = Tensor(LazyBuffer.const(x, dt, self.device, ()), device=self.device)
            b = Tensor(LazyBuffer.const(y, dt, self.device, ()), device=self.device)
        shape = broadcast_shape(cond.shape, broadcast_shape(a.shape, b.shape))
        return apply(F.Where, cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape))

    def bitwise_and(self: Tensor, other: Any) -> Tensor:
        """self & other, elementwise, for int and bool tensors.

            >>> Tensor([12, 10]).bitwise_and(6).tolist()
            [4, 2]
        """
        return self._bitwise(BinaryOps.AND, other)

    def bitwise_or(self: Tensor, other: Any) -> Tensor:
        """self | other, elementwise, for int and bool tensors.

            >>> Tensor([12, 10]).bitwise_or(1).tolist()
            [13, 11]
        """
        return self._bitwise(BinaryOps.OR, other)

    def bitwise_xor(self: Tensor, other: Any) -> Tensor:
        """self ^ other, elementwise, for int and bool tensors.

            >>> Tensor([12, 10]).bitwise_xor(6).tolist()
            [10, 12]
        """
        return self._bitwise(BinaryOps.XOR, other)

    def bitwise_not(self: Tensor) -> Tensor:
        """~self, elementwise, for int and bool tensors.

            >>> Tensor([0, 5]).bitwise_not().tolist(), Tensor([True]).bitwise_not().tolist()
            ([-1, -6], [False])
        """
        return ~self
    negative = neg
    multiply = mul
    divide = div
    true_divide = div
    subtract = sub
    remainder = mod
    floor_divide = floordiv
    greater = gt
    greater_equal = ge
    less = lt
    less_equal = le
    not_equal = ne
    def short(self: Tensor) -> Tensor:
        """cast() to int16.

            >>> Tensor([1.7]).short().tolist()
            [1]
        """
        return self.cast(dtypes.int16)

    def byte(self: Tensor) -> Tensor:
        """cast() to uint8.

            >>> Tensor([3]).byte().dtype
            dtypes.uint8
        """
        return self.cast(dtypes.uint8)

    def char(self: Tensor) -> Tensor:
        """cast() to int8.

            >>> Tensor([3]).char().dtype
            dtypes.int8
        """
        return self.cast(dtypes.int8)

    def type(self: Tensor, dtype: DType | str | None = None) -> Any:
        """cast() to dtype; with no dtype, the dtype's torch type name ("torch.FloatTensor").

            >>> Tensor([1]).type(), Tensor([1]).type(dtypes.float32).dtype
            ('torch.LongTensor', dtypes.float32)
        """
        if dtype is None:
            return f"torch.{_TYPE_NAMES.get(self.dtype.name, self.dtype.name)}Tensor"
        return self.cast(dtype)

    def is_floating_point(self: Tensor) -> builtins.bool:
        """Whether the dtype is a float type.

            >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
            (True, False)
        """
        return self.dtype.is_float

    def is_complex(self: Tensor) -> builtins.bool:
        """False: tg has no complex dtypes.

            >>> Tensor([1.0]).is_complex()
            False
        """
        return False
