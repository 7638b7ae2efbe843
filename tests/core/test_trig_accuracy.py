"""sin, cos and tan to a few ulps in every float dtype at every argument size (issue 34 item 15): cos was
sin(pi/2 - x), whose subtraction rounds in the dtype (float32 cos(1e6) was 0.0029 off, its gradient
-sin 0.016 at 1e4..1e6). Random values over ranges of |x| up to 1e8, per dtype and device, against
math.sin / math.cos / math.tan of the float64 value of the input, errors measured in ulps of the dtype.
The inverse functions likewise: atan, asin, acos and atan2 in float64 had float32 accuracy (atan(0.3) was
2.3e-9 off), and acos near 1 was pi/2 - asin, which cancels (67 float32 ulps)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import DEVICES
from test_transcendental_accuracy import DTYPES, _in_dtype, _ulp

from tg.core.tensor import Tensor

RANGES = [(0.0, 1.0), (1.0, 1e2), (1e2, 1e4), (1e4, 1e6), (1e6, 1e8)]
LARGEST = {"float16": 65504.0, "bfloat16": 3e38, "float32": 3e38, "float64": 1e308}
# the largest error allowed, in ulps of the dtype: sin and cos are the device's library functions (OpenCL
# allows 4 ulps), tan is their quotient (both errors and the division's rounding); float16 and bfloat16
# are computed in float32 and rounded once
BOUND = {"sin": 4.0, "cos": 4.0, "tan": 8.5}
HALF_BOUND = 0.51
CASES = [(name, lo, min(hi, LARGEST[name])) for name in DTYPES for lo, hi in RANGES if lo < LARGEST[name]]


def _inputs(name: str, lo: float, hi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(lo, hi, 3001), -rng.uniform(lo, hi, 1000)])
    return _in_dtype(x, name)


def _worst_ulps(got: np.ndarray, ref: np.ndarray, name: str) -> tuple[float, int]:
    # float16 and bfloat16: the error against the exact value rounded once (what a correct result is)
    scale = _ulp(_in_dtype(ref, name), name) if name in ("float16", "bfloat16") else _ulp(ref, name)
    ulps = np.abs(got.astype(np.float64) - ref) / scale
    worst = int(np.argmax(ulps))
    return float(ulps[worst]), worst


def _values(t: Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == DTYPES["bfloat16"][0] else t.numpy()    # numpy has no bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,lo,hi", CASES)
@pytest.mark.parametrize("fn", ["sin", "cos", "tan"])
def test_trig_to_a_few_ulps_at_every_size(fn, name, lo, hi, device):
    x = _inputs(name, lo, hi, seed=int(math.log10(hi + 1) * 7))
    got = _values(getattr(Tensor(x, device=device).cast(DTYPES[name][0]), fn)())
    ref = np.vectorize(getattr(math, fn))(x)
    bound = HALF_BOUND if name in ("float16", "bfloat16") else BOUND[fn]
    ulps, worst = _worst_ulps(got, ref, name)
    assert ulps <= bound, (fn, name, device, x[worst], ref[worst], got[worst], ulps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,lo,hi", [c for c in CASES if c[0] in ("float32", "float64")])
def test_trig_gradients_at_every_size(name, lo, hi, device):
    x = _inputs(name, lo, hi, seed=int(math.log10(hi + 1) * 11))
    for fn, derivative, bound in [("sin", np.cos, BOUND["cos"]), ("cos", lambda v: -np.sin(v), BOUND["sin"]),
                                  ("tan", lambda v: 1 + np.tan(v) ** 2, 2 * BOUND["tan"])]:
        t = Tensor(x, device=device).cast(DTYPES[name][0]).requires_grad_()
        getattr(t, fn)().sum().backward()
        got, ref = t.grad.numpy(), derivative(x)
        ulps, worst = _worst_ulps(got, ref, name)
        assert ulps <= bound, (fn, name, device, x[worst], ref[worst], got[worst], ulps)


@pytest.mark.parametrize("device", DEVICES)
def test_trig_pinned_values(device):
    big = np.array([1e6, 12345.678, -3e7], np.float32)
    want = [math.cos(float(v)) for v in big]
    np.testing.assert_allclose(Tensor(big, device=device).cos().numpy(), want, rtol=0, atol=2e-7)
    t = Tensor([1e6], device=device).requires_grad_()
    t.cos().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [-math.sin(1e6)], rtol=0, atol=2e-7)
    special = Tensor(np.array([np.inf, -np.inf, np.nan, -0.0, 0.0], np.float32), device=device)
    np.testing.assert_array_equal(special.sin().numpy(), [np.nan, np.nan, np.nan, -0.0, 0.0])
    np.testing.assert_array_equal(special.cos().numpy(), [np.nan, np.nan, np.nan, 1.0, 1.0])
    np.testing.assert_array_equal(special.tan().numpy(), [np.nan, np.nan, np.nan, -0.0, 0.0])
    assert np.signbit(special.sin().numpy()[3]) and np.signbit(special.tan().numpy()[3])


INVERSE_RANGES = {"atan": [(0.0, 0.5), (0.5, 1.0), (1.0, 3.0), (3.0, 100.0), (100.0, 1e10)],
                  "asin": [(0.0, 0.5), (0.5, 0.9), (0.9, 1.0)], "acos": [(0.0, 0.5), (0.5, 0.9), (0.9, 1.0)]}
INVERSE_CASES = [(fn, name, lo, min(hi, LARGEST[name])) for fn, ranges in INVERSE_RANGES.items()
                 for name in DTYPES for lo, hi in ranges if lo < LARGEST[name]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn,name,lo,hi", INVERSE_CASES)
def test_inverse_trig_to_a_few_ulps(fn, name, lo, hi, device):
    x = _inputs(name, lo, hi, seed=int(hi * 13) % 1000)
    got = _values(getattr(Tensor(x, device=device).cast(DTYPES[name][0]), fn)())
    ref = np.vectorize(getattr(math, fn))(x)
    bound = HALF_BOUND if name in ("float16", "bfloat16") else 4.0
    ulps, worst = _worst_ulps(got, ref, name)
    assert ulps <= bound, (fn, name, device, x[worst], ref[worst], got[worst], ulps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(DTYPES))
def test_atan2_to_a_few_ulps(name, device):
    rng = np.random.default_rng(17)
    y, x = (_in_dtype(rng.standard_normal(4001) * 10.0 ** rng.uniform(-3, 3, 4001), name) for _ in range(2))
    dt = DTYPES[name][0]
    got = _values(Tensor(y, device=device).cast(dt).atan2(Tensor(x, device=device).cast(dt)))
    # y / x is rounded once before its arctangent, and base + pi once more (float16: computed in its type)
    bound = 1.5 if name in ("float16", "bfloat16") else 4.0
    ulps, worst = _worst_ulps(got, np.vectorize(math.atan2)(y, x), name)
    assert ulps <= bound, (name, device, y[worst], x[worst], got[worst], ulps)


@pytest.mark.parametrize("device", DEVICES)
def test_inverse_trig_pinned_values(device):
    assert Tensor([0.3], dtype=DTYPES["float64"][0], device=device).atan().item() == math.atan(0.3)
    edges = Tensor(np.array([1.0, -1.0, 0.0, 1.5, -1.5, np.nan], np.float32), device=device)
    np.testing.assert_allclose(edges.acos().numpy(), [0.0, math.pi, math.pi / 2, np.nan, np.nan, np.nan],
                               rtol=1e-7)
    np.testing.assert_allclose(edges.asin().numpy(), [math.pi / 2, -math.pi / 2, 0.0, np.nan, np.nan, np.nan],
                               rtol=1e-7)
    big = Tensor(np.array([np.inf, -np.inf, -0.0, 1e30], np.float64), device=device).atan().numpy()
    np.testing.assert_array_equal(big, [math.pi / 2, -math.pi / 2, -0.0, math.atan(1e30)])
    assert np.signbit(big[2])
    y, x = (Tensor(np.array(v), device=device) for v in ([0.0, -0.0, 0.0, -0.0], [-1.0, -1.0, -0.0, -0.0]))
    np.testing.assert_array_equal(y.atan2(x).numpy(), [math.pi, -math.pi, math.pi, -math.pi])   # float64 pi
