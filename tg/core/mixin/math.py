"""MathMixin, a part of the Tensor class: unary math (exp, log, trigonometric and hyperbolic
functions and their inverses, erf), activations, rounding, clamping and torch's other elementwise
functions (hypot, logaddexp, isclose, nan_to_num, ...). tg/core/tensor.py builds Tensor from the mixins
and binds `Tensor` here once the class exists (see tg/core/mixin/__init__.py)."""
from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tg.core import function as F
from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.dtype import (
    dtypes,
    scalar_result_type,
)
from tg.core.mixin.base import NoGrad, apply

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


# Cephes' atanf (float32) and atan (float64) coefficients (Stephen L. Moshier, 1984-2000, freely
# redistributable), lowest power first: atan(r) = r + r z P(z) (float32), r + r z P(z)/(Q(z) + z^5) (float64),
# z = r^2
ATANF_P = (-3.33329491539e-1, 1.99777106478e-1, -1.38776856032e-1, 8.05374449538e-2)


ATAN_P = (-6.485021904942025371773e1, -1.228866684490136173410e2, -7.500855792314704667340e1,
          -1.615753718733365076637e1, -8.750608600031904122785e-1)


ATAN_Q = (1.945506571482613964425e2, 4.853903996359136964868e2, 4.328810604912902668951e2,
          1.650270098316988542046e2, 2.485846490142306297962e1)


ATAN_MOREBITS = 6.123233995736765886130e-17    # pi/2 - float64(pi/2)


def _poly(x: Tensor, coeffs: Sequence[builtins.float]) -> Tensor:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
    acc: Any = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


class MathMixin:
    __slots__ = ()

    def exp2(self: Tensor) -> Tensor:
        """2 ** self, elementwise (int inputs give float32).

            >>> Tensor([0, 1, 3]).exp2().tolist()
            [1.0, 2.0, 8.0]
        """
        return apply(F.Exp2, self._float_like())

    @autocast_op
    def log2(self: Tensor) -> Tensor:
        """The base-2 logarithm, elementwise (int inputs give float32).

            >>> Tensor([1.0, 8.0, 0.5]).log2().tolist()
            [0.0, 3.0, -1.0]
        """
        return apply(F.Log2, self._float_like())

    @autocast_op
    def exp(self: Tensor) -> Tensor:
        """e ** self, elementwise (int inputs give float32).

            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).exp().tolist()]
            [1.0, 2.7183]
        """
        return apply(F.Exp, self._float_like())   # tg/core/composite.py: the reduction it runs

    @autocast_op
    def log(self: Tensor) -> Tensor:
        """The natural logarithm, elementwise: -inf at 0 and nan below it (int inputs give float32).

            >>> [round(v, 4) for v in Tensor([1.0, math.e, 0.0, -1.0]).log().tolist()]
            [0.0, 1.0, -inf, nan]
        """
        return apply(F.Log2, self._float_like()) * math.log(2)

    @autocast_op
    def log10(self: Tensor) -> Tensor:
        """The base-10 logarithm, elementwise (int inputs give float32).

            >>> [round(v, 4) for v in Tensor([1, 10, 1000]).log10().tolist()]
            [0.0, 1.0, 3.0]
        """
        return self.log2() * math.log10(2)

    @autocast_op
    def log1p(self: Tensor) -> Tensor:
        """log(1 + self), elementwise, accurate for tiny inputs as torch's is: for |x| < 0.5,
        x * log(u) / (u - 1) with u = 1 + x rounded (its rounding error cancels in the ratio; x where
        u is 1), else log(u).

            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).log1p().tolist()]
            [0.0, 0.6931]
            >>> Tensor([1e-8]).log1p().item() == Tensor([1e-8]).item()
            True
        """
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            u = xd + 1
            log_u = u.log()
            den = (u == 1).where(1.0, u - 1)
            out = (xd.abs() < 0.5).where((u == 1).where(xd, xd * (log_u / den)), log_u)
        return x._local(out, (x, lambda: u.reciprocal()))

    @autocast_op
    def expm1(self: Tensor) -> Tensor:
        """exp(self) - 1, elementwise, accurate for tiny inputs as torch's is: for |x| < 0.5,
        (u - 1) * x / log(u) with u = exp(x) rounded (x where u is 1), else u - 1.

            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).expm1().tolist()]
            [0.0, 1.7183]
            >>> Tensor([1e-8]).expm1().item() == Tensor([1e-8]).item()
            True
        """
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            u = xd.exp()
            log_u = (u == 1).where(1.0, u.log())
            out = (xd.abs() < 0.5).where((u == 1).where(xd, (u - 1) * (xd / log_u)), u - 1)
        return x._local(out, (x, lambda: u))

    def sqrt(self: Tensor) -> Tensor:
        """The square root, elementwise: nan for negative inputs (int inputs give float32).

            >>> Tensor([1, 4, 9]).sqrt().tolist()
            [1.0, 2.0, 3.0]
        """
        return apply(F.Sqrt, self._float_like())

    @autocast_op
    def rsqrt(self: Tensor) -> Tensor:
        """1 / sqrt(self), elementwise.

            >>> Tensor([1.0, 4.0, 0.25]).rsqrt().tolist()
            [1.0, 0.5, 2.0]
        """
        return self.sqrt().reciprocal()

    @autocast_op
    def reciprocal(self: Tensor) -> Tensor:
        """1 / self, elementwise: inf at 0 (int inputs give float32).

            >>> Tensor([2, 4, 0]).reciprocal().tolist()
            [0.5, 0.25, inf]
        """
        return apply(F.Reciprocal, self._float_like())

    def sin(self: Tensor) -> Tensor:
        """The sine of angles in radians, elementwise.

            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 6, math.pi / 2]).sin().tolist()]
            [0.0, 0.5, 1.0]
        """
        return apply(F.Sin, self._float_like())

    def cos(self: Tensor) -> Tensor:
        """The cosine of angles in radians, elementwise.

            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 3, math.pi]).cos().tolist()]
            [1.0, 0.5, -1.0]
        """
        return apply(F.Cos, self._float_like())

    @autocast_op
    def tan(self: Tensor) -> Tensor:
        """The tangent of angles in radians, elementwise.

            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 4]).tan().tolist()]
            [0.0, 1.0]
        """
        return self.sin() / self.cos()

    def square(self: Tensor) -> Tensor:
        """self * self, elementwise (the dtype is kept; bool gives int64, as torch's pow(2)).

            >>> Tensor([1, -2, 3]).square().tolist()
            [1, 4, 9]
        """
        x = self.cast(dtypes.int64) if self.dtype == dtypes.bool else self
        return x * x

    def relu(self: Tensor) -> Tensor:
        """max(self, 0), elementwise; NaN stays NaN and the gradient at 0 is 0, as in torch.

            >>> Tensor([-1.0, 0.0, 2.0]).relu().tolist()
            [0.0, 0.0, 2.0]
        """
        return (self <= 0).where(0, self)   # NaN stays NaN; the gradient at 0 is 0, as in torch

    def abs(self: Tensor) -> Tensor:
        """The absolute value, elementwise (the dtype is kept).

            >>> Tensor([-1.5, 0.0, 2.0]).abs().tolist(), Tensor([-3, 4]).abs().tolist()
            ([1.5, 0.0, 2.0], [3, 4])
        """
        if self.dtype.is_float:
            return self.relu() + (-self).relu()
        return (self < 0).where(-self, self) if self.dtype != dtypes.bool else self

    def sign(self: Tensor) -> Tensor:
        """-1, 0 or 1 for negative, zero or positive elements, in self's dtype.

            >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist(), Tensor([-7, 0, 3]).sign().tolist()
            ([-1.0, 0.0, 1.0], [-1, 0, 1])
        """
        if self.dtype == dtypes.bool:
            return self.clone()
        with NoGrad():
            out = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return self._local(out, (self, lambda: 0)) if self.dtype.is_float else out   # torch: gradient 0

    def sigmoid(self: Tensor) -> Tensor:
        """1 / (1 + exp(-self)), elementwise.

            >>> [round(v, 4) for v in Tensor([-2.0, 0.0, 2.0]).sigmoid().tolist()]
            [0.1192, 0.5, 0.8808]
        """
        return apply(F.Sigmoid, self._float_like())

    def tanh(self: Tensor) -> Tensor:
        """The hyperbolic tangent, elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).tanh().tolist()]
            [-0.7616, 0.0, 0.7616]
        """
        return apply(F.Tanh, self._float_like())   # tg/core/composite.py: its series near 0

    def leaky_relu(self: Tensor, negative_slope: builtins.float = 0.01) -> Tensor:
        """self where positive, else self * negative_slope (0.01 by default, as in torch).

            >>> Tensor([-2.0, 3.0]).leaky_relu(0.5).tolist()
            [-1.0, 3.0]
        """
        return (self > 0).where(self, self * negative_slope)

    def elu(self: Tensor, alpha: builtins.float = 1.0) -> Tensor:
        """self where positive, else alpha * (exp(self) - 1).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).elu().tolist()]
            [-0.6321, 0.0, 2.0]
        """
        return (self > 0).where(self, alpha * (self.exp() - 1))

    def silu(self: Tensor) -> Tensor:
        """self * sigmoid(self), elementwise; `swish` is another name for it.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).silu().tolist()]
            [-0.2689, 0.0, 1.7616]
            >>> Tensor([2.0]).swish().tolist() == Tensor([2.0]).silu().tolist()
            True
        """
        return self * self.sigmoid()
    swish = silu

    def erf(self: Tensor) -> Tensor:
        """The Gauss error function, elementwise, to about an ulp of the dtype (fdlibm's algorithm; see
        tg/core/composite.py).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 0.5]).erf().tolist()]
            [-0.8427, 0.0, 0.5205]
        """
        return apply(F.Erf, self._float_like())   # tg/core/composite.py: fdlibm's algorithm

    def gelu(self: Tensor, approximate: str = "none") -> Tensor:
        """self * Phi(self), Phi the standard normal CDF, with erf (approximate="none") or torch's tanh
        approximation (approximate="tanh").

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu().tolist()]
            [-0.1587, 0.0, 0.8413]
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu(approximate="tanh").tolist()]
            [-0.1588, 0.0, 0.8412]
        """
        if approximate == "tanh":
            return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
        if approximate != "none":
            raise ValueError(f"[core] gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        if self.dtype in (dtypes.float16, dtypes.bfloat16):    # in float32, rounded once
            return self.float().gelu().cast(self.dtype)
        x = self._float_like()
        with NoGrad():        # Phi(x) = erfc(-x / sqrt 2) / 2: the negative tail never 1 - erf rounded to 0
            cdf = (x.detach() * (-1 / math.sqrt(2))).erfc() * 0.5
        return apply(fused.Gelu, x, cdf)

    @autocast_op
    def softplus(self: Tensor, beta: builtins.float = 1.0, threshold: builtins.float = 20.0) -> Tensor:
        """log(1 + exp(beta * self)) / beta, elementwise, and self itself where beta * self > threshold
        (torch's defaults: beta=1, threshold=20).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 30.0]).softplus().tolist()]
            [0.3133, 0.6931, 30.0]
        """
        bx = self * beta
        soft = (1 + (-bx.abs()).exp()).log() / beta + self.relu()
        return (bx > threshold).where(self, soft)

    def clamp(self: Tensor, min_: Any = None, max_: Any = None, *, min: Any = None,
              max: Any = None) -> Tensor:  # noqa: A002
        """The values limited to [min, max]; either bound may be left out, and each is a scalar or a
        tensor. Int bounds keep an int tensor's dtype, a float bound makes it float32 (torch's
        promotion). `clip` is another name for it.

            >>> Tensor([-2, 0, 5]).clamp(-1, 3).tolist(), Tensor([-2, 0, 5]).clamp(min=0).tolist()
            ([-1, 0, 3], [0, 0, 5])
            >>> Tensor([-2.0, 0.5, 5.0]).clip(0, 1).tolist()
            [0.0, 0.5, 1.0]
        """
        lo = min_ if min_ is not None else min
        hi = max_ if max_ is not None else max
        if lo is None and hi is None:
            raise ValueError("[core] clamp: give at least one of min or max")
        # torch's result type: scalar bounds promote as in any binary op (bool with int bounds gives int64)
        dt = self.dtype
        for bound in (lo, hi):
            if bound is not None and not isinstance(bound, Tensor):
                dt = scalar_result_type(dt, bound)
        x = self.cast(dt)
        if lo is not None:
            x = (x < lo).where(lo, x) if not isinstance(lo, Tensor) else x.maximum(lo)
        if hi is not None:
            x = (x > hi).where(hi, x) if not isinstance(hi, Tensor) else x.minimum(hi)
        return x if isinstance(lo, Tensor) or isinstance(hi, Tensor) else x.cast(dt)
    clip = clamp

    def maximum(self: Tensor, y: Any) -> Tensor:
        """The larger of self and y, elementwise, broadcasting.

            >>> Tensor([1, 5, 3]).maximum(Tensor([4, 2, 3])).tolist(), Tensor([1, 5, 3]).maximum(2).tolist()
            ([4, 5, 3], [2, 5, 3])
        """
        a, b = self._broadcasted(y)
        return apply(F.Maximum, a, b)

    def minimum(self: Tensor, y: Any) -> Tensor:
        """The smaller of self and y, elementwise, broadcasting.

            >>> Tensor([1, 5, 3]).minimum(Tensor([4, 2, 3])).tolist(), Tensor([1, 5, 3]).minimum(2).tolist()
            ([1, 2, 3], [1, 2, 2])
        """
        a, b = self._broadcasted(y)
        if not a.dtype.is_float:
            return (a < b).where(a, b) if a.dtype != dtypes.bool else a & b   # -a wraps at INT_MIN
        return -apply(F.Maximum, -a, -b)

    def trunc(self: Tensor) -> Tensor:
        """Round toward zero, elementwise (int tensors are returned as they are).

            >>> Tensor([-1.5, 0.5, 2.7]).trunc().tolist()
            [-1.0, 0.0, 2.0]
        """
        if not self.dtype.is_float:
            return self
        # values beyond 2**23 have no fraction in float32; casting them would overflow ints
        with NoGrad():
            big = self.abs() >= 2.0 ** 52
            t = self._detached().cast(dtypes.int64).cast(self.dtype)
            out = big.where(self._detached(), t)
        return self._local(out, (self, lambda: 0))   # torch: gradient 0 (floor, ceil, round too)

    def floor(self: Tensor) -> Tensor:
        """Round down to a whole number, elementwise (int tensors are returned as they are).

            >>> Tensor([-1.5, 0.5, 2.7]).floor().tolist()
            [-2.0, 0.0, 2.0]
        """
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self: Tensor) -> Tensor:
        """Round up to a whole number, elementwise (int tensors are returned as they are).

            >>> Tensor([-1.5, 0.5, 2.7]).ceil().tolist()
            [-1.0, 1.0, 3.0]
        """
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self: Tensor, decimals: builtins.int = 0) -> Tensor:
        """Round half to even, like torch.round (int tensors are returned as they are); decimals= rounds
        to that many digits after the point (before it when negative) by scaling by 10**decimals.

            >>> Tensor([0.5, 1.5, 2.5, -1.5, 2.7]).round().tolist(), Tensor([3]).round().dtype
            ([0.0, 2.0, 2.0, -2.0, 3.0], dtypes.int64)
            >>> x = Tensor([1.25, 2.375], dtype="float64")
            >>> x.round(decimals=2).tolist(), Tensor([150.0]).round(-2).item()
            ([1.25, 2.38], 200.0)
        """
        if not self.dtype.is_float:
            return self
        if decimals:
            scale = 10.0 ** decimals
            return (self * scale).round() / scale
        f = (self + 0.5).floor()
        tie = (f - self) == 0.5
        odd = (f % 2) == 1
        return (tie & odd).where(f - 1, f)

    def isnan(self: Tensor) -> Tensor:
        """True where an element is NaN.

            >>> Tensor([1.0, float("nan"), float("inf")]).isnan().tolist()
            [False, True, False]
        """
        return self != self

    def isinf(self: Tensor) -> Tensor:
        """True where an element is +inf or -inf.

            >>> Tensor([1.0, float("-inf"), float("inf"), float("nan")]).isinf().tolist()
            [False, True, True, False]
        """
        return (self == float("inf")) | (self == float("-inf"))

    def lerp(self: Tensor, end: Tensor, weight: Any) -> Tensor:
        """self + weight * (end - self): the straight line from self (weight 0) to end (weight 1);
        weight is a scalar or a tensor.

            >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.5).tolist()
            [5.0, 15.0]
        """
        return self + (end - self) * weight

    # inverse trigonometric and hyperbolic functions: values computed without a graph, the derivative
    # given in closed form (so it is exact where the value's rounding would not let a composition be);
    # float16 and bfloat16 computed in float32 and rounded once
    def atan(self: Tensor) -> Tensor:
        """The arctangent, elementwise, in (-pi/2, pi/2), to about an ulp of the dtype (Cephes' atanf and
        atan; see `_atan_values`).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0, float("inf")]).atan().tolist()]
            [-0.7854, 0.0, 0.7854, 1.5708]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.float().atan().cast(self.dtype)
        x = self._float_like()
        with NoGrad():
            out = x._detached()._atan_values()
        return x._local(out, (x, lambda: 1 / (1 + x._detached() * x._detached())))

    def _atan_values(self: Tensor) -> Tensor:
        """atan of a float32 or float64 tensor: |x| reduced to |r| <= tan(pi/8) (float32) or 0.66 (float64)
        by atan(a) = pi/4 + atan((a - 1) / (a + 1)) and pi/2 - atan(1 / a), then Cephes' polynomial
        (float32) or rational (float64) in r^2; float64 adds the bits of pi/2 and pi/4 its constant drops."""
        a, f64 = self.abs(), self.dtype == dtypes.float64
        big, mid = a > 2.414213562373095, a > (0.66 if f64 else 0.4142135623730951)   # tan(3 pi / 8), ...
        r = big.where(-1 / a, mid.where((a - 1) / (a + 1), a))
        # constants of the dtype: where() of two Python floats is float32 (pi/2 then 4.4e-8 off in float64)
        base = big.where(a.full_like(math.pi / 2), mid.where(a.full_like(math.pi / 4), 0.0))
        z = r * r
        if f64:
            tail = z * _poly(z, ATAN_P) / _poly(z, (*ATAN_Q, 1.0)) * r + r
            more = a.full_like(ATAN_MOREBITS)
            tail = tail + big.where(more, mid.where(more / 2, 0.0))
        else:
            tail = _poly(z, ATANF_P) * z * r + r
        out = base + tail
        return self._sign_negative().where(-out, out)

    @autocast_op
    def asin(self: Tensor) -> Tensor:
        """The arcsine, elementwise, in [-pi/2, pi/2]; NaN outside [-1, 1].

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 0.5]).asin().tolist()]
            [-1.5708, 0.0, 0.5236]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.float().asin().cast(self.dtype)
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            out = (xd / ((1 - xd) * (1 + xd)).sqrt())._atan_values()
        return x._local(out, (x, lambda: ((1 - xd) * (1 + xd)).rsqrt()))

    @autocast_op
    def acos(self: Tensor) -> Tensor:
        """The arccosine, elementwise, in [0, pi]; NaN outside [-1, 1].

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).acos().tolist()]
            [3.1416, 1.5708, 0.0]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.float().acos().cast(self.dtype)
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            # not pi/2 - asin(x), which cancels near x = 1 (67 float32 ulps off at 0.99); 1 - x is exact there
            out = ((1 - xd) / (1 + xd)).sqrt()._atan_values() * 2
        return x._local(out, (x, lambda: -((1 - xd) * (1 + xd)).rsqrt()))

    @autocast_op
    def atan2(self: Tensor, other: Any) -> Tensor:
        """The angle of the point (other, self) (self is y, other is x), elementwise, in [-pi, pi], with
        the quadrant from both signs (a signed zero x picks 0 or pi, as in torch), broadcasting.

            >>> y, x = Tensor([1.0, 1.0, -1.0, 0.0]), Tensor([1.0, -1.0, -1.0, -1.0])
            >>> [round(v, 4) for v in y.atan2(x).tolist()]
            [0.7854, 2.3562, -2.3562, 3.1416]
        """
        y, x = self._float_like()._broadcasted(other)   # a float operand makes both float
        if y.dtype in (dtypes.float16, dtypes.bfloat16):
            return y.float().atan2(x.float()).cast(y.dtype)
        with NoGrad():
            yd, xd = y._detached(), x._detached()
            x_neg, y_neg = xd._sign_negative(), yd._sign_negative()
            both_zero = (xd == 0) & (yd == 0)
            ratio = both_zero.where(0.0, yd / xd)
            base = ratio._atan_values()
            out = x_neg.where(y_neg.where(base - math.pi, base + math.pi), base)
            pi = xd.full_like(math.pi)      # of the dtype (where() of two Python floats is float32)
            out = both_zero.where(x_neg.where(y_neg.where(-pi, pi), y_neg.where(-0.0, 0.0)), out)
            r2 = both_zero.where(1.0, xd * xd + yd * yd)
        return y._local(out, (y, lambda: both_zero.where(0.0, xd / r2)),
                        (x, lambda: both_zero.where(0.0, -yd / r2)))

    @autocast_op
    def sinh(self: Tensor) -> Tensor:
        """The hyperbolic sine, elementwise, (expm1(x) - expm1(-x)) / 2 (accurate near 0).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).sinh().tolist()]
            [-1.1752, 0.0, 3.6269]
        """
        x = self._float_like()
        return (x.expm1() - (-x).expm1()) * 0.5

    @autocast_op
    def cosh(self: Tensor) -> Tensor:
        """The hyperbolic cosine, elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).cosh().tolist()]
            [1.5431, 1.0, 3.7622]
        """
        x = self._float_like()
        return (x.exp() + (-x).exp()) * 0.5

    def asinh(self: Tensor) -> Tensor:
        """The inverse hyperbolic sine, elementwise (log1p form near 0, log|x| + log 2 for huge |x|).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).asinh().tolist()]
            [-0.8814, 0.0, 1.4436]
        """
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            a = xd.abs()
            huge = a > 1e15
            a_ok = huge.where(1.0, a)
            small = (a_ok + a_ok * a_ok / (1 + (a_ok * a_ok + 1).sqrt())).log1p()
            out = huge.where(a.log() + math.log(2), small) * xd.sign()
            out = xd.isnan().where(xd, out)
        return x._local(out, (x, lambda: (xd * xd + 1).rsqrt()))

    def acosh(self: Tensor) -> Tensor:
        """The inverse hyperbolic cosine, elementwise; NaN below 1.

            >>> [round(v, 4) for v in Tensor([1.0, 2.0, 10.0]).acosh().tolist()]
            [0.0, 1.317, 2.9932]
        """
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            huge = xd > 1e15
            xs = huge.where(2.0, xd)
            out = huge.where(xd.log() + math.log(2), ((xs - 1) + ((xs - 1) * (xs + 1)).sqrt()).log1p())
        return x._local(out, (x, lambda: ((xd - 1) * (xd + 1)).rsqrt()))

    def atanh(self: Tensor) -> Tensor:
        """The inverse hyperbolic tangent, elementwise: +-inf at +-1, NaN outside [-1, 1].

            >>> [round(v, 4) for v in Tensor([-0.5, 0.0, 0.5]).atanh().tolist()]
            [-0.5493, 0.0, 0.5493]
        """
        x = self._float_like()
        with NoGrad():
            xd = x._detached()
            out = (2 * xd / (1 - xd)).log1p() * 0.5
        return x._local(out, (x, lambda: 1 / ((1 - xd) * (1 + xd))))

    def copysign(self: Tensor, other: Any) -> Tensor:
        """|self| with the sign of other, elementwise (-0.0 counts as negative), as float.

            >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
            [-1.0, 2.0, -3.0]
        """
        x, y = self._float_like()._broadcasted(other)   # a float operand makes both float
        with NoGrad():
            xd = x.detach()
            out = y.detach()._sign_negative().where(-xd.abs(), xd.abs())
        # torch's derivatives: result / self (0 where self is 0) for self, and 0 for other, which still
        # joins the graph so that other's gradient is a zero tensor, not a missing one
        return x._local(out, (x, lambda: (xd == 0).where(0.0, out / xd)), (y, lambda: 0))

    def _sign_negative(self: Tensor) -> Tensor:
        """Whether a float tensor's sign bit is set: x < 0, and -0.0 (C's signbit; NaN gives False)."""
        return (self < 0) | ((self == 0) & (1 / self < 0))

    def hardtanh(self: Tensor, min_val: builtins.float = -1.0, max_val: builtins.float = 1.0) -> Tensor:
        """self clamped to [min_val, max_val] (-1 and 1 by default).

            >>> Tensor([-2.0, 0.5, 3.0]).hardtanh().tolist()
            [-1.0, 0.5, 1.0]
        """
        return self.clamp(min_val, max_val)

    def hardsigmoid(self: Tensor) -> Tensor:
        """clamp(self / 6 + 1 / 2, 0, 1), elementwise: 0 below -3, 1 above 3.

            >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
            [0.0, 0.5, 1.0]
        """
        return (self._float_like() / 6 + 0.5).clamp(0.0, 1.0)

    def hardswish(self: Tensor) -> Tensor:
        """self * hardsigmoid(self), elementwise.

            >>> Tensor([-4.0, 0.0, 1.0, 4.0]).hardswish().tolist()
            [-0.0, 0.0, 0.6666666865348816, 4.0]
        """
        return self._float_like() * self.hardsigmoid()

    def celu(self: Tensor, alpha: builtins.float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).celu(2.0).tolist()]
            [-0.7869, 0.0, 2.0]
        """
        x = self._float_like()
        return (x > 0).where(x, (x / alpha).expm1() * alpha)

    def selu(self: Tensor) -> Tensor:
        """scale * elu(self, alpha) with torch's constants (alpha 1.6733, scale 1.0507).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).selu().tolist()]
            [-1.1113, 0.0, 2.1014]
        """
        alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
        x = self._float_like()
        return (x > 0).where(x * scale, x.expm1() * (alpha * scale))

    def mish(self: Tensor) -> Tensor:
        """self * tanh(softplus(self)), elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).mish().tolist()]
            [-0.3034, 0.0, 1.944]
        """
        x = self._float_like()
        return x * x.softplus().tanh()
    # Each is built from the ops above (so gradients come by composition). Ops whose output shape
    # depends on the values (nonzero, unique, masked_select, bincount) read them to the host, as torch
    # syncs for them too.
    absolute = abs
    fix = trunc
    sgn = sign
    arcsin = asin
    arccos = acos
    arctan = atan
    arctan2 = atan2
    arcsinh = asinh
    arccosh = acosh
    arctanh = atanh

    def clamp_min(self: Tensor, min: Any) -> Tensor:  # noqa: A002  (torch's name)
        """clamp(min=min).

            >>> Tensor([-1.0, 2.0]).clamp_min(0.5).tolist()
            [0.5, 2.0]
        """
        return self.clamp(min=min)

    def clamp_max(self: Tensor, max: Any) -> Tensor:  # noqa: A002  (torch's name)
        """clamp(max=max).

            >>> Tensor([-1.0, 2.0]).clamp_max(0.5).tolist()
            [-1.0, 0.5]
        """
        return self.clamp(max=max)

    def frac(self: Tensor) -> Tensor:
        """The fractional part, self - trunc(self), with self's sign.

            >>> Tensor([1.25, -1.25]).frac().tolist()
            [0.25, -0.25]
        """
        return self - self.trunc()

    def erfc(self: Tensor) -> Tensor:
        """1 - erf(self), elementwise, to about an ulp of the dtype: never 1 - erf rounded, so the
        tail keeps its digits (erfc(5) is 1.5375e-12 in float32, not 0).

            >>> Tensor([0.0]).erfc().tolist()
            [1.0]
        """
        return apply(F.Erfc, self._float_like())

    def signbit(self: Tensor) -> Tensor:
        """True where the sign bit is set: negative numbers and -0.0.

            >>> Tensor([-0.0, 0.0, -2.0, 3.0]).signbit().tolist()
            [True, False, True, False]
        """
        return self.ones_like().copysign(self) < 0 if self.dtype.is_float else self < 0

    def isfinite(self: Tensor) -> Tensor:
        """True where an element is neither inf nor NaN (always, for ints and bools).

            >>> Tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
            [True, False, False]
        """
        return (self - self) == 0 if self.dtype.is_float else Tensor.ones(*self.shape, dtype=dtypes.bool,
                                                                             device=self.device)

    def isposinf(self: Tensor) -> Tensor:
        """True where an element is +inf.

            >>> Tensor([1.0, float("inf"), -float("inf")]).isposinf().tolist()
            [False, True, False]
        """
        return self == math.inf

    def isneginf(self: Tensor) -> Tensor:
        """True where an element is -inf.

            >>> Tensor([1.0, float("inf"), -float("inf")]).isneginf().tolist()
            [False, False, True]
        """
        return self == -math.inf

    def nan_to_num(self: Tensor, nan: builtins.float = 0.0, posinf: builtins.float | None = None,
                   neginf: builtins.float | None = None) -> Tensor:
        """NaN, +inf and -inf replaced by nan, posinf and neginf (by default 0 and the dtype's largest and
        smallest finite values), as torch.nan_to_num.

            >>> Tensor([float("nan"), float("inf"), 1.0]).nan_to_num(posinf=9.0).tolist()
            [0.0, 9.0, 1.0]
        """
        if not self.dtype.is_float:
            return self
        biggest = float(np.finfo(np.float32 if self.dtype == dtypes.bfloat16 else self.dtype.np_value).max)
        if self.dtype == dtypes.bfloat16:
            biggest = 3.3895313892515355e38
        hi = biggest if posinf is None else posinf
        lo = -biggest if neginf is None else neginf
        x = self.isnan().where(nan, self)
        return (x == math.inf).where(hi, (x == -math.inf).where(lo, x))

    def isclose(self: Tensor, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
                equal_nan: builtins.bool = False) -> Tensor:
        """True where |self - other| <= atol + rtol * |other| (equal infinities are close; NaNs only with
        equal_nan), as torch.isclose.

            >>> Tensor([1.0, 2.0]).isclose(Tensor([1.000001, 2.1])).tolist()
            [True, False]
        """
        a, b = self._broadcasted(other)
        # as torch: an infinite difference (inf vs -inf, inf vs a number) is never within tolerance
        err = (a._float_like() - b).abs()
        close = (a == b) | (err.isfinite() & (err <= atol + rtol * b._float_like().abs()))
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def allclose(self: Tensor, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
                 equal_nan: builtins.bool = False) -> builtins.bool:
        """Whether isclose() holds everywhere (a Python bool, read from the device).

            >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7]))
            True
        """
        return builtins.bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def equal(self: Tensor, other: Tensor) -> builtins.bool:
        """True when other has the same shape and the same values (a Python bool), as torch.equal.

            >>> Tensor([1, 2]).equal(Tensor([1, 2])), Tensor([1, 2]).equal(Tensor([1]))
            (True, False)
        """
        return self.shape == other.shape and builtins.bool((self == other).all().item())

    def hypot(self: Tensor, other: Any) -> Tensor:
        """sqrt(self ** 2 + other ** 2), elementwise.

            >>> Tensor([3.0]).hypot(Tensor([4.0])).tolist()
            [5.0]
        """
        a, b = self._broadcasted(other)
        return (a * a + b * b).sqrt()

    def logaddexp(self: Tensor, other: Any) -> Tensor:
        """log(exp(self) + exp(other)), without overflow.

            >>> round(Tensor([1000.0]).logaddexp(Tensor([1000.0])).item(), 2)
            1000.69
        """
        a, b = self._broadcasted(other)
        a, b = a._float_like(), b._float_like()
        m = a.maximum(b)._detached()
        m = m.isinf().where(0.0, m)    # both -inf (or an inf): no shift, so no inf - inf
        return ((a - m).exp() + (b - m).exp()).log() + m

    def logaddexp2(self: Tensor, other: Any) -> Tensor:
        """log2(2 ** self + 2 ** other), without overflow.

            >>> Tensor([3.0]).logaddexp2(Tensor([3.0])).tolist()
            [4.0]
        """
        ln2 = math.log(2)
        return (self._float_like() * ln2).logaddexp(self._to_tensor(other)._float_like() * ln2) / ln2

    def xlogy(self: Tensor, other: Any) -> Tensor:
        """self * log(other), and 0 where self is 0 (unless other is NaN), as torch.xlogy.

            >>> Tensor([0.0, 2.0]).xlogy(Tensor([0.0, 1.0])).tolist()
            [0.0, 0.0]
        """
        a, b = self._broadcasted(other)
        a, b = a._float_like(), b._float_like()
        return ((a == 0) & b.isnan().logical_not()).where(0.0, a * b.log())

    def float_power(self: Tensor, exponent: Any) -> Tensor:
        """pow() in float64, as torch.float_power.

            >>> Tensor([2]).float_power(3).dtype
            dtypes.float64
        """
        e = exponent.cast(dtypes.float64) if isinstance(exponent, Tensor) else builtins.float(exponent)
        return self.cast(dtypes.float64).pow(e)

    def fmax(self: Tensor, other: Any) -> Tensor:
        """maximum() that ignores NaN: where one side is NaN the other is taken. As in torch, self takes
        the whole gradient of a tie.

            >>> Tensor([1.0, float("nan")]).fmax(Tensor([float("nan"), 2.0])).tolist()
            [1.0, 2.0]
        """
        a, b = self._broadcasted(other)
        return ((a >= b) | b.isnan()).where(a, b)   # torch's rule for which side the gradient goes to

    def fmin(self: Tensor, other: Any) -> Tensor:
        """minimum() that ignores NaN: where one side is NaN the other is taken. As in torch, self takes
        the whole gradient of a tie.

            >>> Tensor([1.0, float("nan")]).fmin(Tensor([float("nan"), 2.0])).tolist()
            [1.0, 2.0]
        """
        a, b = self._broadcasted(other)
        return ((a <= b) | b.isnan()).where(a, b)

    def deg2rad(self: Tensor) -> Tensor:
        """Degrees to radians.

            >>> round(Tensor([180.0]).deg2rad().item(), 5)
            3.14159
        """
        return self._float_like() * (math.pi / 180)

    def rad2deg(self: Tensor) -> Tensor:
        """Radians to degrees.

            >>> round(Tensor([math.pi]).rad2deg().item(), 3)
            180.0
        """
        return self._float_like() * (180 / math.pi)

    @autocast_op
    def addcmul(self: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        """self + value * tensor1 * tensor2.

            >>> Tensor([1.0]).addcmul(Tensor([2.0]), Tensor([3.0]), value=0.5).tolist()
            [4.0]
        """
        return self + tensor1 * tensor2 * value

    @autocast_op
    def addcdiv(self: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        """self + value * tensor1 / tensor2.

            >>> Tensor([1.0]).addcdiv(Tensor([2.0]), Tensor([4.0]), value=2).tolist()
            [2.0]
        """
        return self + tensor1 / tensor2 * value
