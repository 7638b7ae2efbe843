"""Shared helpers for the op tests: random inputs, non-contiguous views, and a one-line numpy check.

    check(np.add, lambda a, b: a + b, [(3, 7), (7,)], device)

builds random inputs of those shapes, runs the numpy reference and the tg expression, and compares
values (and shape, and dtype kind). numpy is the independent reference; tg's own NUMPY device is
tested alongside CPU, never used as the reference.
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import pytest

from tg import GlobalCounters, Tensor

# TG_TEST_DEVICES=CL runs the op tests on other devices (tests/core/test_gpu_suite.py does, for CL)
DEVICES = (
    tuple(os.environ["TG_TEST_DEVICES"].split(",")) if os.environ.get("TG_TEST_DEVICES") else ("CPU", "NUMPY")
)
LAYOUTS = ("contiguous", "transposed", "strided", "flipped", "expanded")

# odd sizes, 0-d, size-1 and empty dims; used by many parametrized tests
UNARY_SHAPES = [(), (1,), (7,), (3, 7), (2, 1, 5), (1023,), (0,), (2, 0, 3)]
BINARY_SHAPES = [
    [(), ()], [(7,), (7,)], [(3, 7), (7,)], [(3, 7), ()], [(), (3, 7)], [(2, 1, 5), (3, 5)],
    [(3, 1), (1, 7)], [(1023,), (1023,)], [(0, 3), (1, 3)], [(2, 0), (2, 1)],
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still held as float32."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32("nan"), out).astype(np.float32)


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype tg shows values of `dtype` in (bfloat16 is shown as float32)."""
    return np.dtype(np.float32) if dtype == "bfloat16" else np.dtype(dtype)


def random_array(shape: tuple[int, ...], dtype: str = "float32", low: Any = -2.0, high: Any = 2.0,
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """Random values of `dtype` in [low, high).

    low="nonzero" gives magnitudes in [0.5, 2) (ints: 1..5) with a random sign; int bounds for a float
    dtype give integer-valued floats (so comparisons see ties); float bounds for an int dtype mean -5..5.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np_dtype(dtype).kind in "iu":
        if low == "nonzero":
            mag = rng.integers(1, 6, size=shape)
            return (mag * rng.choice([-1, 1], size=shape)).astype(dtype)
        lo, hi = (low, high) if isinstance(low, int) and isinstance(high, int) else (-5, 6)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    if low == "nonzero":
        values = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    elif isinstance(low, int) and isinstance(high, int):
        values = rng.integers(low, high, size=shape)   # int bounds: integer-valued floats, so ties happen
    else:
        values = rng.uniform(low, high, size=shape)
    values = values.astype(np.float32)
    if dtype == "bfloat16":
        return bf16_round(values)
    return values.astype(dtype)


def make_input(shape: tuple[int, ...], dtype: str, device: str, layout: str = "contiguous", low: Any = -2.0,
               high: Any = 2.0, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Tensor]:
    """The same random values as a numpy array and as a tg Tensor, the latter reached through a view:

    transposed: .T of a tensor of the reversed shape;  strided: x[1::2, 1::2, ...] of a bigger tensor;
    flipped: .flip() of every dim;  expanded: dim 0 expanded from size 1.
    """
    def gen(s: tuple[int, ...]) -> np.ndarray:
        return random_array(s, dtype, low, high, rng)

    def tg(a: np.ndarray) -> Tensor:
        return Tensor(a, device=device, dtype=dtype)

    if layout == "contiguous" or len(shape) == 0:
        a = gen(shape)
        return a, tg(a)
    if layout == "transposed":
        base = gen(tuple(reversed(shape)))
        return base.T, tg(base).T
    if layout == "strided":
        base = gen(tuple(2 * s + 1 for s in shape))
        index = tuple(slice(1, None, 2) for _ in shape)
        return base[index], tg(base)[index]
    if layout == "flipped":
        base = gen(shape)
        return np.flip(base), tg(base).flip(tuple(range(len(shape))))
    if layout == "expanded":
        base = gen((1,) + tuple(shape[1:]))
        return np.broadcast_to(base, shape), tg(base).expand(shape)
    raise ValueError(f"unknown layout {layout!r}")


def _kind(dt: np.dtype) -> str:
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}[dt.kind]


def assert_close(got: Tensor, want: Any, atol: float = 1e-6, rtol: float = 1e-5,
                 dtype: str | None = None) -> None:
    """Shape, dtype (exact name if given, else bool/int/float kind) and values of a tg result vs numpy."""
    want = np.asarray(want)
    assert isinstance(got, Tensor), f"expected a Tensor, got {type(got).__name__}"
    assert got.shape == want.shape, f"shape: tg {got.shape} vs numpy {want.shape}"
    if dtype is not None:
        assert got.dtype.name == dtype, f"dtype: tg {got.dtype.name}, expected {dtype}"
    else:
        assert _kind(got.dtype.np_value) == _kind(want.dtype), (
            f"dtype: tg {got.dtype.name} vs numpy {want.dtype}"
        )
    values = got.numpy()
    assert values.shape == want.shape, f".numpy() shape {values.shape} vs {want.shape}"
    if want.dtype.kind in "biu" and got.dtype.np_value.kind in "biu":
        np.testing.assert_array_equal(values, want)
    else:
        np.testing.assert_allclose(values.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol,
                                   equal_nan=True)


def check(
    np_fn: Callable[..., Any],
    tg_fn: Callable[..., Tensor],
    shapes: Sequence[tuple[int, ...]],
    device: str,
    dtype: str | Sequence[str] = "float32",
    atol: float = 1e-6,
    rtol: float = 1e-5,
    low: Any = -2.0,
    high: Any = 2.0,
    layout: str = "contiguous",
    out_dtype: str | None = None,
    seed: int = 0,
) -> None:
    """Random inputs of `shapes` (one dtype, or one per input); np_fn(*arrays) vs tg_fn(*tensors).

    `low`/`high` may be a list with one range per input. float16/bfloat16 inputs are handed to numpy as
    float32, so the reference is the exact value and the tolerance covers tg's rounding.
    """
    rng = np.random.default_rng(seed)
    n = len(shapes)
    dtypes_ = [dtype] * n if isinstance(dtype, str) else list(dtype)
    lows = list(low) if isinstance(low, (list, tuple)) else [low] * n
    highs = list(high) if isinstance(high, (list, tuple)) else [high] * n
    arrays, tensors = [], []
    for shape, dt, lo, hi in zip(shapes, dtypes_, lows, highs):
        a, t = make_input(tuple(shape), dt, device, layout, lo, hi, rng)
        arrays.append(a.astype(np.float32) if dt == "float16" else a)
        tensors.append(t)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # numpy's "mean of empty slice" and the like
        want = np.asarray(np_fn(*arrays))
    assert_close(tg_fn(*tensors), want, atol=atol, rtol=rtol, dtype=out_dtype)


def raises_at_call(exc: type[BaseException] | tuple, match: str, fn: Callable[[], Any]) -> None:
    """fn() raises exc with a message matching `match`, and no kernel ran before it did."""
    before = GlobalCounters.kernel_count
    with pytest.raises(exc, match=match):
        fn()
    assert GlobalCounters.kernel_count == before, "the error came only after kernels ran (not at the call)"


# ------------------------------------------------------------ numpy references that numpy lacks

_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_erf(x: np.ndarray) -> np.ndarray:
    return _erf(np.asarray(x, dtype=np.float64))


def np_gelu(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1 + np_erf(x / math.sqrt(2)))


def np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-np.asarray(x, dtype=np.float64)))


def np_softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.where(x * beta > threshold, x, np.logaddexp(0, beta * x) / beta)


def np_logsumexp(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def np_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: Any = 1, padding: Any = 0,
              dilation: Any = 1, groups: int = 1) -> np.ndarray:
    """Direct convolution: one strided window slice per kernel tap, contracted with einsum."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, cout, oh, ow))
    cout_g = cout // groups
    for g in range(groups):
        xs = x[:, g * cin_g:(g + 1) * cin_g]
        ws = w[g * cout_g:(g + 1) * cout_g].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * cout_g:(g + 1) * cout_g] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def np_pool2d(x: np.ndarray, kernel: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
              kind: str = "max", count_include_pad: bool = True) -> np.ndarray:
    """max / avg pooling over the last two dims of (..., H, W), with torch's padding rules."""
    (kh, kw) = _pair(kernel)
    (sh, sw) = _pair(stride) if stride is not None else (kh, kw)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    lead = ((0, 0),) * (x.ndim - 2)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype(np.float64), lead + ((ph, ph), (pw, pw)), constant_values=fill)
    ones = np.pad(np.ones(x.shape[-2:]), ((ph, ph), (pw, pw)))
    h, w = xp.shape[-2:]
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    taps = [xp[..., i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]
    if kind == "max":
        return np.max(taps, axis=0)
    total = np.sum(taps, axis=0)
    if count_include_pad:
        return total / (kh * kw)
    counts = np.sum([ones[i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
                     for i in range(kh) for j in range(kw)], axis=0)
    return total / counts

