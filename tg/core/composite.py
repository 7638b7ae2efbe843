"""Composite ops: one node in the lazy graph, the primitives that compute it in the kernel.

exp, sigmoid, tanh, erf and erfc are each some twenty to two hundred primitive ops (a range
reduction, a series near 0, fdlibm's rational approximations, the care for NaN and overflow). Built
from primitives at the Tensor level, every call made that many lazy buffers, hashed them into every
graph key and walked them in every schedule: an LSTM's step spent most of its time there. As
`CompositeOps` they stay one lazy node (one Function, one gradient) until the scheduler builds a
kernel's AST (schedule.py's kernel builder), where `expand` writes the primitives in once per
kernel. Every backend, the numpy reference interpreter included, only ever sees primitives;
ops_numpy.REFERENCE still states what each composite means, and the tests hold the expansions to it.

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

# fdlibm's s_erf.c coefficients (Sun Microsystems, 1993, freely redistributable), lowest power first:
# erf(a) = a + a P(a^2)/Q(a^2) below 0.84375; erx + P(a - 1)/Q(a - 1) below 1.25; above, erfc(a) from
# exp and R(1/a^2)/S(1/a^2), RA/SA below 1/0.35 and RB/SB beyond (_erf_parts)
ERF_ERX = 8.45062911510467529297e-01


ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
          -5.77027029648944159157e-03, -2.37630166566501626084e-05)


ERF_QQ = (3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
          1.32494738004321644526e-04, -3.96022827877536812320e-06)


ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
          3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
          -2.16637559486879084300e-03)


ERF_QA = (1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
          1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)


ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
          -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
          -8.12874355063065934246e+01, -9.81432934416914548592e+00)


ERF_SA = (1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
          6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
          6.57024977031928170135e+00, -6.04244152148580987438e-02)


ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
          -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
          -4.83519191608651397019e+02)


ERF_SB = (3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
          3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
          -2.24409524465858183362e+01)


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

    def pow2(self, n: KOp) -> KOp:
        """2 ** n for n a whole number that is a normal exponent of the dtype, from its bits."""
        wide = self.dtype == dtypes.float64
        ints, bias, bits = (dtypes.int64, 1023, 52) if wide else (dtypes.int32, 127, 23)
        whole = KOp(UnaryOps.CAST, (n,), ints, ints)
        const = lambda c: KOp(BufferOps.CONST, (), (c, self.st), ints)  # noqa: E731
        biased = KOp(BinaryOps.ADD, (whole, const(bias)), None, ints)
        field = KOp(BinaryOps.SHL, (biased, const(bits)), None, ints)
        return KOp(UnaryOps.BITCAST, (field,), self.dtype, self.dtype)


def _exp(v: _Values, x: KOp) -> KOp:
    """e ** x with Cody-Waite's reduction: x = k ln2 + r, ln2 in two parts (k * the first is exact),
    then 2**k * exp2(r / ln2). exp2(x / ln2) rounds x / ln2 at |x| and loses log2|x| bits (60
    float32 ulps at x = 80, 400 float64 ulps at 700); here r / ln2 is below 1/2. 2**k is two factors
    so that neither overflows where the result does not, each made from its exponent bits (exact, a
    few integer ops where exp2 is a polynomial): x is clamped to where the result is already 0 or inf,
    so that both halves of k are normal exponents. NaN stays NaN."""
    wide = v.dtype == dtypes.float64
    ln2_hi, ln2_lo = (6.93147180369123816490e-01, 1.90821492927058770002e-10) if wide else \
        (6.93145751953125e-01, 1.428606765330187e-06)
    # adding and taking away 1.5 * 2**mantissa-bits rounds to a whole number (in range: clamped)
    magic = 1.5 * 2.0 ** (52 if wide else 23)
    # e**low is below half the smallest subnormal and e**high above the largest finite value
    low, high = (-760.0, 720.0) if wide else (-110.0, 90.0)
    xc = v.where(v.alu(BinaryOps.CMPLT, x, low), low, x)
    xc = v.where(v.alu(BinaryOps.CMPLT, high, xc), high, xc)
    k = v.add(v.add(v.mul(xc, 1 / math.log(2)), magic), -magic)
    r = v.add(v.add(xc, v.mul(k, -ln2_hi)), v.mul(k, -ln2_lo))
    half = v.add(v.add(v.mul(k, 0.5), magic), -magic)
    out = v.mul(v.mul(v.unary(UnaryOps.EXP2, v.mul(r, 1 / math.log(2))), v.pow2(half)),
                v.pow2(v.add(k, v.neg(half))))
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


def _poly(v: _Values, x: KOp, coeffs: tuple[float, ...]) -> KOp:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
    acc = v.const(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = v.add(v.mul(acc, x), c)
    return acc


def _erf_parts(v: _Values, x: KOp) -> tuple[KOp, KOp]:
    """(erf(|x|), erfc(|x|)) by fdlibm's s_erf.c: rational approximations on [0, 0.84375), [0.84375,
    1.25) and beyond, where erfc(a) = exp(-z^2 - 0.5625) * exp((z - a)(z + a) + R/S) / a with z = a
    cut to half its bits (z^2 is exact, so the large exponent carries no rounding error). The
    coefficients are double's. NaN stays NaN."""
    dtype = v.dtype
    word = dtypes.int64 if dtype == dtypes.float64 else dtypes.int32
    bits = KOp(UnaryOps.BITCAST, (x,), word, word)
    magnitude = KOp(BinaryOps.AND, (bits, KOp(BufferOps.CONST, (), ((1 << (8 * word.itemsize - 1)) - 1, v.st),
                                                                     word)), None, word)
    a = KOp(UnaryOps.BITCAST, (magnitude,), dtype, dtype)          # |x|, x read once
    z2, s = v.mul(a, a), v.add(a, -1.0)
    lt = lambda p, q: v.alu(BinaryOps.CMPLT, p, q)  # noqa: E731
    at = v.where(lt(a, 40.0), a, 40.0)              # erfc(40) is 0 even in float64; no inf - inf below
    inv = v.unary(UnaryOps.RECIP, v.mul(at, at))
    near, low, middle = lt(at, 1 / 0.35), lt(a, 0.84375), lt(a, 1.25)
    # each range's rational function is one quotient P/Q, and a value uses one range: the numerators
    # and denominators are chosen first, so the four quotients are one division
    top = v.where(low, _poly(v, z2, ERF_PP), v.where(middle, _poly(v, s, ERF_PA), v.where(
        near, _poly(v, inv, ERF_RA), _poly(v, inv, ERF_RB))))
    bottom = v.where(low, _poly(v, z2, (1.0, *ERF_QQ)), v.where(middle, _poly(v, s, (1.0, *ERF_QA)), v.where(
        near, _poly(v, inv, (1.0, *ERF_SA)), _poly(v, inv, (1.0, *ERF_SB)))))
    q = v.mul(top, v.unary(UnaryOps.RECIP, bottom))
    small = v.add(a, v.mul(a, q))
    at_bits = KOp(UnaryOps.BITCAST, (at,), word, word)
    keep = -(1 << 32) if word == dtypes.int64 else -(1 << 13)
    cut = KOp(UnaryOps.BITCAST, (KOp(BinaryOps.AND, (at_bits, KOp(BufferOps.CONST, (), (keep, v.st), word)),
                                     None, word),), dtype, dtype)
    first = _exp(v, v.add(v.mul(v.neg(cut), cut), -0.5625))
    second = _exp(v, v.add(v.mul(v.add(cut, v.neg(at)), v.add(cut, at)), q))
    tail = v.mul(v.mul(first, second), v.unary(UnaryOps.RECIP, at))
    erf_a = v.where(low, small, v.where(middle, v.add(q, ERF_ERX), v.add(1.0, v.neg(tail))))
    erfc_a = v.where(low, v.add(1.0, v.neg(small)), v.where(middle, v.add(1 - ERF_ERX, v.neg(q)), tail))
    nan = v.alu(BinaryOps.CMPNE, a, a)
    return v.where(nan, a, erf_a), v.where(nan, a, erfc_a)


def _erf(v: _Values, x: KOp) -> KOp:
    """erf(|x|) with x's sign bit (erf(-0.0) is -0.0)."""
    erf_a, _ = _erf_parts(v, x)
    word = dtypes.int64 if v.dtype == dtypes.float64 else dtypes.int32
    negative = KOp(BinaryOps.CMPLT, (KOp(UnaryOps.BITCAST, (x,), word, word),
                                     KOp(BufferOps.CONST, (), (0, v.st), word)), None, dtypes.bool)
    return v.where(negative, v.neg(erf_a), erf_a)


def _erfc(v: _Values, x: KOp) -> KOp:
    """erfc(|x|), or 2 - it below 0: never 1 - erf rounded, so the tail keeps its digits."""
    _, erfc_a = _erf_parts(v, x)
    return v.where(v.alu(BinaryOps.CMPLT, x, 0.0), v.add(2.0, v.neg(erfc_a)), erfc_a)


_EXPANSIONS = {CompositeOps.EXP: _exp, CompositeOps.SIGMOID: _sigmoid, CompositeOps.TANH: _tanh,
               CompositeOps.ERF: _erf, CompositeOps.ERFC: _erfc}

# what each composite costs when the scheduler weighs recomputing a value against storing it
# (schedule._plan counts one per primitive op): its primitives' count in float32
COST: dict[object, int] = {CompositeOps.EXP: 20, CompositeOps.SIGMOID: 22, CompositeOps.TANH: 45,
                           CompositeOps.ERF: 120, CompositeOps.ERFC: 120}


def expand(op: CompositeOps, x: KOp, shape: tuple[int, ...]) -> KOp:
    """The primitives computing op of x, a value over a kernel space of `shape`."""
    if x.dtype in NARROW:
        wide = KOp(UnaryOps.CAST, (x,), dtypes.float32, dtypes.float32)
        return KOp(UnaryOps.CAST, (_EXPANSIONS[op](_Values(dtypes.float32, shape), wide),), x.dtype, x.dtype)
    return _EXPANSIONS[op](_Values(x.dtype, shape), x)
