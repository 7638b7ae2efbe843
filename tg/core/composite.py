"""Composite ops: one node in the lazy graph, the primitives that compute it in the kernel.

exp, sigmoid and tanh are each some twenty to fifty primitive ops (a range reduction, a series near
0, the care for NaN and overflow). Built from primitives at the Tensor level, every call made that
many lazy buffers, hashed them into every graph key and walked them in every schedule: an LSTM's
step spent most of its time there. As `CompositeOps` they stay one lazy node (one Function, one
gradient) until the scheduler builds a kernel's AST (`schedule.Builder`), where `expand` writes the
primitives in once per kernel. Every backend, the numpy reference interpreter included, only ever
sees primitives; ops_numpy.REFERENCE still states what each composite means, and the tests hold the
expansions to it.

float16 and bfloat16 operands are computed in float32 and rounded once; float64 uses its own
constants (a finer split of ln 2, a wider clamp).

    >>> from tg.core.shape import ShapeTracker
    >>> from tg.core.kernel import AstOps
    >>> x = KOp(AstOps.LOAD, (), (1, ShapeTracker.from_shape((4,))), dtypes.float32)
    >>> tree = expand(CompositeOps.SIGMOID, x, (4,))
    >>> tree.op, len(tree.walk()) > 10
    (<UnaryOps.RECIP: 6>, True)
"""
from __future__ import annotations

import math
from fractions import Fraction

from tg.core.dtype import DType, dtypes
from tg.core.kernel import KOp
from tg.core.ops import BinaryOps, BufferOps, CompositeOps, TernaryOps, UnaryOps
from tg.core.shape import ShapeTracker


def _tanh_series(terms: int) -> tuple[float, ...]:
    """The coefficients of x, x^3, x^5, ... in tanh's Taylor series around 0: 2^2n (2^2n - 1) B_2n / (2n)!
    for n = 1.. (B: the Bernoulli numbers, exact as fractions)."""
    bern: list[Fraction] = [Fraction(1)]
    for m in range(1, 2 * terms + 1):
        bern.append(-sum((math.comb(m + 1, k) * bern[k] for k in range(m)), Fraction(0)) / (m + 1))
    return tuple(float(4 ** n * (4 ** n - 1) * bern[2 * n] / math.factorial(2 * n))
                 for n in range(1, terms + 1))


# terms shrink by (x / (pi/2))^2 each: 9 reach float32's precision below 0.55, 18 float64's
TANH_SERIES = {dtypes.float32: _tanh_series(9), dtypes.float64: _tanh_series(18)}

NARROW = (dtypes.float16, dtypes.bfloat16)


class _Values:
    """Builds primitive KOps of one dtype over one kernel space (constants need its shape)."""

    def __init__(self, dtype: DType, shape: tuple[int, ...]):
        self.dtype, self.st = dtype, ShapeTracker.from_shape(shape)

    def const(self, value: float) -> KOp:
        return KOp(BufferOps.CONST, (), (float(value), self.st), self.dtype)

    def alu(self, op, *srcs: KOp | float) -> KOp:
        ks = tuple(s if isinstance(s, KOp) else self.const(s) for s in srcs)
        dtype = dtypes.bool if op is BinaryOps.CMPLT or op is BinaryOps.CMPNE else ks[-1].dtype
        return KOp(op, ks, None, dtype)

    def add(self, a: KOp | float, b: KOp | float) -> KOp:
        return self.alu(BinaryOps.ADD, a, b)

    def mul(self, a: KOp | float, b: KOp | float) -> KOp:
        return self.alu(BinaryOps.MUL, a, b)

    def neg(self, a: KOp) -> KOp:
        return KOp(UnaryOps.NEG, (a,), None, a.dtype)

    def where(self, cond: KOp, a: KOp | float, b: KOp | float) -> KOp:
        return self.alu(TernaryOps.WHERE, cond, a, b)

    def unary(self, op: UnaryOps, a: KOp) -> KOp:
        return KOp(op, (a,), None, a.dtype)


def _exp(v: _Values, x: KOp) -> KOp:
    """e ** x with Cody-Waite's reduction: x = k ln2 + r, ln2 in two parts (k * the first is exact),
    then 2**k * exp2(r / ln2). exp2(x / ln2) rounds x / ln2 at |x| and loses log2|x| bits (60
    float32 ulps at x = 80, 400 float64 ulps at 700); here r / ln2 is below 1/2. 2**k is two factors
    so that neither overflows where the result does not. NaN stays NaN."""
    wide = v.dtype == dtypes.float64
    ln2_hi, ln2_lo = (6.93147180369123816490e-01, 1.90821492927058770002e-10) if wide else \
        (6.93145751953125e-01, 1.428606765330187e-06)
    # adding and taking away 1.5 * 2**mantissa-bits rounds to a whole number (in range: clamped)
    magic = 1.5 * 2.0 ** (52 if wide else 23)
    bound = 1500.0 if wide else 200.0
    xc = v.where(v.alu(BinaryOps.CMPLT, x, -bound), -bound, x)
    xc = v.where(v.alu(BinaryOps.CMPLT, bound, xc), bound, xc)
    k = v.add(v.add(v.mul(xc, 1 / math.log(2)), magic), -magic)
    r = v.add(v.add(xc, v.mul(k, -ln2_hi)), v.mul(k, -ln2_lo))
    half = v.add(v.add(v.mul(k, 0.5), magic), -magic)
    out = v.mul(v.mul(v.unary(UnaryOps.EXP2, v.mul(r, 1 / math.log(2))), v.unary(UnaryOps.EXP2, half)),
                v.unary(UnaryOps.EXP2, v.add(k, v.neg(half))))
    return v.where(v.alu(BinaryOps.CMPNE, x, x), x, out)


def _sigmoid(v: _Values, x: KOp) -> KOp:
    """1 / (1 + exp(-x)): 0 where exp(-x) overflows, 1 where it underflows."""
    return v.unary(UnaryOps.RECIP, v.add(1.0, _exp(v, v.neg(x))))


def _tanh(v: _Values, x: KOp) -> KOp:
    """2 sigmoid(2x) - 1, except below 0.55 where that cancels (tanh(1e-6) was 7% off in float32, and
    float64 lost 8 ulps at 0.25): there the Taylor series (TANH_SERIES)."""
    x2 = v.mul(x, x)
    coefficients = TANH_SERIES[v.dtype][::-1]
    series = v.const(coefficients[0])
    for c in coefficients[1:]:
        series = v.add(v.mul(series, x2), c)
    magnitude = v.alu(BinaryOps.MAX, x, v.neg(x))
    far = v.add(v.mul(_sigmoid(v, v.mul(x, 2.0)), 2.0), -1.0)
    return v.where(v.alu(BinaryOps.CMPLT, magnitude, 0.55), v.mul(x, series), far)


_EXPANSIONS = {CompositeOps.EXP: _exp, CompositeOps.SIGMOID: _sigmoid, CompositeOps.TANH: _tanh}

# what each composite costs when the scheduler weighs recomputing a value against storing it
# (schedule._plan counts one per primitive op): its primitives' count in float32
COST: dict[object, int] = {CompositeOps.EXP: 20, CompositeOps.SIGMOID: 22, CompositeOps.TANH: 45}


def expand(op: CompositeOps, x: KOp, shape: tuple[int, ...]) -> KOp:
    """The primitives computing op of x, a value over a kernel space of `shape`."""
    if x.dtype in NARROW:
        wide = KOp(UnaryOps.CAST, (x,), dtypes.float32, dtypes.float32)
        return KOp(UnaryOps.CAST, (_EXPANSIONS[op](_Values(dtypes.float32, shape), wide),), x.dtype, x.dtype)
    return _EXPANSIONS[op](_Values(x.dtype, shape), x)
