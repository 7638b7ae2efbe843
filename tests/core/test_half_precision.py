"""float16 and bfloat16 (issue 34 item 9): a cast to a narrow type rounds to it wherever it sits in a
fused kernel, and sums, means, matmuls and softmax accumulate in float32 and round once at the end
(torch's rule), whatever the CPU (native AVX512-FP16, F16C only, or neither) and compiler do with
_Float16. References are numpy: float16's own rounding, bfloat16's round to nearest even written out
below, and float64 for what a computation should give before its one rounding."""
from __future__ import annotations

import ctypes
import platform
import subprocess

import numpy as np
import pytest

import tg
from tg import config
from tg.core.codegen.renderer import DIALECTS
from tg.core.runtime.ops_cpu import ClangCompiler
from tg.core.tensor import Tensor


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even), as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    low, top = u & 0xFFFF, u >> 16
    up = (low > 0x8000) | ((low == 0x8000) & ((top & 1) == 1))
    return ((top + up) << 16).astype(np.uint32).view(np.float32)


def narrow(x: np.ndarray, dtype) -> np.ndarray:
    """float32 (or float64: one rounding, numpy's) values rounded to dtype, as float32."""
    if dtype == tg.float16:
        return np.asarray(x).astype(np.float16).astype(np.float32)
    return bf16_round(np.asarray(x, np.float32))


def ulp(x: np.ndarray, dtype) -> np.ndarray:
    """The spacing of dtype's values at |x| (its smallest subnormal step near 0)."""
    bits, min_exp = (10, -14) if dtype == tg.float16 else (7, -126)
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** min_exp)))
    return 2.0 ** (e - bits)


# ---- the C helpers themselves, on both paths this CPU can take (F16C, and the integer code without)
def _flag_sets() -> list[list[str]]:
    sets = [[]]
    if platform.machine() in ("x86_64", "AMD64"):
        sets.append(["-mno-f16c", "-mno-avx512f"])     # the integer fallback, on this same machine
    return sets


_HARNESS = """
#define EACH for (int i = 0; i < n; i++)
void h2f_all(const unsigned short* in, float* out, int n) { EACH out[i] = tg_h2f(in[i]); }
void f2h_all(const float* in, unsigned short* out, int n) { EACH out[i] = tg_f2h(in[i]); }
void d2h_all(const double* in, unsigned short* out, int n) { EACH out[i] = tg_d2h(in[i]); }
void round_all(const float* in, float* out, int n) { EACH out[i] = tg_h2f(tg_f2h(in[i])); }
"""


def _helpers(tmp_path, extra: list[str]):
    flags = [f for f in ClangCompiler().flags if f not in ("-x", "c", "-", "-fno-tree-loop-vectorize")]
    out = tmp_path / f"half{len(extra)}.so"
    src = DIALECTS["c"].header + _HARNESS
    proc = subprocess.run([config.TG_CC, *flags, *extra, "-x", "c", "-", "-o", str(out)], input=src,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return ctypes.CDLL(str(out))


def _call(lib, name: str, x: np.ndarray, out_dtype) -> np.ndarray:
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape, out_dtype)
    getattr(lib, name)(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), len(x))
    return out


def _same_halves(got: np.ndarray, want: np.ndarray) -> None:
    """Equal float16 bit patterns, a NaN equal to any NaN of the same sign."""
    g, w = got.view(np.float16), want.view(np.float16)
    both_nan = np.isnan(g) & np.isnan(w) & (np.signbit(g) == np.signbit(w))
    bad = ~both_nan & (got.view(np.uint16) != want.view(np.uint16))
    assert not bad.any(), (g[bad][:8], w[bad][:8])


def _floats_to_test(rng: np.random.Generator) -> np.ndarray:
    every_half = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    bits = every_half.view(np.uint32)
    ties = np.concatenate([(bits + d).view(np.float32) for d in (0xFFF, 0x1000, 0x1001, 0x2000, 0x3000)])
    wide = rng.standard_normal(100_000) * np.exp2(rng.integers(-30, 20, 100_000))
    edges = [np.inf, -np.inf, np.nan, -np.nan, 65519.996, 65520.0, 3e38, -0.0, 1e-45]
    with np.errstate(invalid="ignore"):
        return np.concatenate([every_half, ties, wide, edges]).astype(np.float32)


@pytest.mark.parametrize("extra", _flag_sets())
def test_the_c_half_helpers_convert_as_numpy_on_every_path(tmp_path, extra):
    lib = _helpers(tmp_path, extra)
    rng = np.random.default_rng(0)
    every = np.arange(1 << 16, dtype=np.uint16)
    got = _call(lib, "h2f_all", every, np.float32)
    want = every.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all() and np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    np.testing.assert_array_equal(_call(lib, "f2h_all", got, np.uint16), every)   # NaN payloads too
    xs = _floats_to_test(rng)
    with np.errstate(over="ignore"):
        _same_halves(_call(lib, "f2h_all", xs, np.uint16), xs.astype(np.float16).view(np.uint16))
        rounded = _call(lib, "round_all", xs, np.float32)      # a loop the vectorizer may take
        np.testing.assert_array_equal(rounded, xs.astype(np.float16).astype(np.float32))
        # doubles just off a tie between halves: rounding to float first would land on the tie
        doubles = np.concatenate([xs.astype(np.float64) * (1 + s * 2.0 ** -30) for s in (-1, 1, 3)])
        _same_halves(_call(lib, "d2h_all", doubles, np.uint16), doubles.astype(np.float16).view(np.uint16))


def half_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as float16 words as tg converts them: numpy's rounding, and a NaN its sign, 0x7c00
    and the top 10 bits of its payload (0x200 where those are all zero: still a NaN)."""
    x = np.ascontiguousarray(x, np.float32)
    u = x.view(np.uint32)
    m = (u >> 13) & 0x3FF
    nan = ((u >> 16) & 0x8000) | 0x7C00 | np.where(m != 0, m, 0x200)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isnan(x), nan, x.astype(np.float16).view(np.uint16)).astype(np.uint16)


def half_floats(h: np.ndarray) -> np.ndarray:
    """float16 words as float32 as tg widens them: numpy's values, a NaN's sign and payload kept (a
    signaling NaN stays signaling)."""
    h = np.asarray(h, np.uint16).astype(np.uint32)
    nan = ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13)
    plain = h.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    return np.where(((h & 0x7FFF) > 0x7C00), nan, plain).astype(np.uint32).view(np.float32)


# ---- the vector helpers (float16 in SIMD lanes), at every width and on every path: the conversion
# instructions (AVX-512's 16 lanes, F16C's 8) and the integer code, each the scalar helpers' bits
_VECTOR_HARNESS = """
void h2f_v(const unsigned short* in, float* out, int n) {
  for (int i = 0; i < n; i += LANES) *(f32v*)(out + i) = tg_h2f_v(*(u16v*)(in + i)); }
void f2h_v(const float* in, unsigned short* out, int n) {
  for (int i = 0; i < n; i += LANES) *(u16v*)(out + i) = tg_f2h_v(*(f32v*)(in + i)); }
void round_v(const float* in, float* out, int n) {
  for (int i = 0; i < n; i += LANES) *(f32v*)(out + i) = tg_h_round_v(*(f32v*)(in + i)); }
"""


def _vector_paths() -> list[tuple[int, list[str]]]:
    paths = [(16, []), (32, []), (64, [])]
    if platform.machine() in ("x86_64", "AMD64"):
        paths += [(32, ["-mno-avx512f"]), (64, ["-mno-f16c", "-mno-avx512f"]),
                  (32, ["-mno-f16c", "-mno-avx512f"])]
    return paths


def _vector_harness(out, harness: str, width: int, extra: list[str]) -> ctypes.CDLL:
    """The C vector helpers at `width` bytes with a harness of LANES-wide loops, built with the CPU's
    flags and `extra`, loaded."""
    from tg.core.codegen.renderer import C_VECTORS
    flags = [f for f in ClangCompiler().flags if f not in ("-x", "c", "-", "-fno-tree-loop-vectorize")]
    src = DIALECTS["c"].header + C_VECTORS.header.replace("BYTES", str(width)) + \
        harness.replace("LANES", str(width // 4))
    proc = subprocess.run([config.TG_CC, *flags, *extra, "-x", "c", "-", "-o", str(out)], input=src,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return ctypes.CDLL(str(out))


@pytest.mark.parametrize("width,extra", _vector_paths())
def test_the_c_half_vector_helpers_convert_as_the_scalar_ones(tmp_path, width, extra):
    lanes = width // 4
    lib = _vector_harness(tmp_path / f"halfv{width}_{len(extra)}.so", _VECTOR_HARNESS, width, extra)

    def pad(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x, x[: -len(x) % lanes]]) if len(x) % lanes else x
    every = np.arange(1 << 16, dtype=np.uint16)
    got = _call(lib, "h2f_v", every, np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), half_floats(every).view(np.uint32))
    np.testing.assert_array_equal(_call(lib, "f2h_v", got, np.uint16), every)        # NaN payloads too
    # NaNs with every kind of payload, signaling and quiet, in lanes beside ordinary values
    rng = np.random.default_rng(width)
    nans = (rng.integers(0, 1 << 23, 4096, dtype=np.uint32) | np.uint32(0x7F800001)
            | (rng.integers(0, 2, 4096, dtype=np.uint32) << 31)).view(np.float32)
    xs = pad(np.concatenate([_floats_to_test(rng), nans, rng.standard_normal(4096).astype(np.float32)]))
    xs[rng.permutation(len(xs))[: len(xs) // 2]] = rng.permutation(xs)[: len(xs) // 2]
    np.testing.assert_array_equal(_call(lib, "f2h_v", xs, np.uint16), half_bits(xs))
    np.testing.assert_array_equal(_call(lib, "round_v", xs, np.float32).view(np.uint32),
                                  half_floats(half_bits(xs)).view(np.uint32))


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 words as tg converts them: round to nearest even (subnormals kept,
    overflow to inf), a NaN its top 16 bits with the quiet bit set only where those would read inf."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    top = u >> 16
    rounded = ((u.astype(np.uint64) + 0x7FFF + (top & 1)) >> 16).astype(np.uint32)
    nan = np.where((top & 0x7F) != 0, top, top | 0x40)
    return np.where(np.isnan(x), nan, rounded).astype(np.uint16)


_BF16_HARNESS = """
void narrow_v(const float* in, unsigned short* out, int n) {
  for (int i = 0; i < n; i += LANES) *(u16v*)(out + i) = tg_bf16_narrow_v(*(f32v*)(in + i)); }
void round_v(const float* in, float* out, int n) {
  for (int i = 0; i < n; i += LANES) *(f32v*)(out + i) = tg_bf16_round_v(*(f32v*)(in + i)); }
void widen_v(const unsigned short* in, float* out, int n) {
  for (int i = 0; i < n; i += LANES) *(f32v*)(out + i) = tg_bf16_widen_v(*(u16v*)(in + i)); }
"""


def _bf16_paths() -> list[tuple[int, list[str]]]:
    paths = [(16, []), (32, []), (64, [])]
    if platform.machine() in ("x86_64", "AMD64"):      # the integer path where the CPU converts itself
        paths += [(64, ["-mno-avx512bf16"]), (64, ["-mno-avx512f"])]
    return paths


@pytest.mark.parametrize("width,extra", _bf16_paths())
def test_the_c_bfloat16_vector_helpers_round_as_numpy(tmp_path, width, extra):
    """tg_bf16_narrow_v (VCVTNEPS2BF16 where the CPU has it, its NaN and subnormal vectors by integer
    arithmetic) against numpy's bit arithmetic, on every kind of value mixed across lanes."""
    lib = _vector_harness(tmp_path / f"bf16v{width}_{len(extra)}.so", _BF16_HARNESS, width, extra)
    rng = np.random.default_rng(width + len(extra))
    words = rng.integers(0, 1 << 32, 60_000, dtype=np.uint64).astype(np.uint32)
    sign = rng.integers(0, 2, 4096, dtype=np.uint32) << 31
    subnormal = rng.integers(1, 1 << 23, 4096, dtype=np.uint32) | sign
    nans = rng.integers(1, 1 << 23, 4096, dtype=np.uint32) | np.uint32(0x7F800000) | sign
    ties = (rng.integers(0, 1 << 16, 4096, dtype=np.uint32) << 16) | np.uint32(0x8000)
    edges = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x80000000, 0, 0x7F800000, 0xFF800000, 0x7F800001,
                      0x7FC00000, 0x00000001], np.uint32)
    xs = np.concatenate([words, subnormal, nans, ties, edges])
    xs = np.resize(rng.permutation(xs), len(xs) + (-len(xs) % 64)).view(np.float32)
    np.testing.assert_array_equal(_call(lib, "narrow_v", xs, np.uint16), bf16_bits(xs))
    clean = xs[rng.permutation(len(xs))]          # vectors of normal values only: the one-instruction path
    clean = clean[np.isfinite(clean) & ((np.abs(clean) >= np.float32(2.0 ** -126)) | (clean == 0))]
    clean = clean[: len(clean) - len(clean) % 64]
    np.testing.assert_array_equal(_call(lib, "narrow_v", clean, np.uint16), bf16_bits(clean))
    np.testing.assert_array_equal(_call(lib, "round_v", xs, np.float32).view(np.uint32),
                                  bf16_bits(xs).astype(np.uint32) << 16)
    every = np.arange(1 << 16, dtype=np.uint16)
    np.testing.assert_array_equal(_call(lib, "widen_v", every, np.float32).view(np.uint32),
                                  every.astype(np.uint32) << 16)


# ---- casts inside fused kernels
SIZES = (1, 7, 33, 1000, 4099)
NARROW = (tg.float16, tg.bfloat16)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("n", SIZES)
def test_a_cast_to_a_narrow_type_rounds_inside_a_fused_kernel(dtype, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 14, n))).astype(np.float32)
    c = float(rng.uniform(1, 4))
    t = Tensor(x)
    with np.errstate(over="ignore"):
        want = narrow(x * np.float32(c), dtype)
        np.testing.assert_array_equal((t * c).cast(dtype).float().numpy(), want)
        np.testing.assert_array_equal(((t * c).cast(dtype).float() * 0.5).numpy(), want * np.float32(0.5))
        np.testing.assert_array_equal(((t * c).cast(dtype).float() - t * c).numpy(), want - x * np.float32(c))
        # a round trip through the narrow type and back again in one kernel, then stored as float64
        np.testing.assert_array_equal((t * c).cast(dtype).cast(tg.float64).numpy(), want.astype(np.float64))


@pytest.mark.parametrize("n", SIZES)
def test_a_double_is_rounded_to_float16_once(n):
    rng = np.random.default_rng(100 + n)
    halves = rng.standard_normal(n).astype(np.float16).astype(np.float64)
    step = np.exp2(np.floor(np.log2(np.abs(halves) + 1e-30)) - 11)        # half a float16 ulp
    x = halves + step * (1 + rng.choice([-1, 1], n) * 2.0 ** -40)           # just off the tie
    got = Tensor(x).cast(tg.float16).numpy()
    np.testing.assert_array_equal(got, x.astype(np.float16))
    np.testing.assert_array_equal((Tensor(x) * 1.0).cast(tg.float16).float().numpy(),
                                  x.astype(np.float16).astype(np.float32))


# ---- accumulation: float32 inside, one rounding at the end
def _within_one_ulp(got, exact64: np.ndarray, dtype, terms: np.ndarray | float = 0.0) -> None:
    """Within an ulp of the narrow type (one rounding, give or take), plus a few float32 ulps of
    `terms`, the size of what was added up in float32 before that rounding (where they cancel)."""
    got64 = np.asarray(got, np.float64)
    err = np.abs(got64 - exact64)
    allowed = ulp(exact64, dtype) + 2.0 ** -20 * np.asarray(terms)
    assert (err <= allowed).all(), (np.max(err / allowed), got64[:4], exact64[:4])


def _cancelling(rng: np.random.Generator, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Multiples of 1/64 in [1, 2) (exact in both narrow types, and their float32 sums exact), positive
    along the first half of axis and negative along the second, a tenth of them flipped: every
    partial sum is large and the total small, so a partial rounded to a narrow type shows."""
    idx = np.arange(shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
    sign = np.where(idx < shape[axis] // 2, 1.0, -1.0) * np.where(rng.random(shape) < 0.1, -1.0, 1.0)
    return (rng.integers(64, 128, shape) / 64 * sign).astype(np.float32)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("shape,axis", [((70_001,), 0), ((1 << 17,), 0), ((300, 257), 0), ((257, 300), 1),
                                        ((3, 5000, 31), 1), ((4096, 40), 0), ((8, 1 << 14), 1)])
def test_narrow_sums_and_means_accumulate_in_float32(dtype, shape, axis):
    rng = np.random.default_rng(sum(shape))
    x = _cancelling(rng, shape, axis)
    t = Tensor(x).cast(dtype)
    exact = x.astype(np.float64).sum(axis)
    _within_one_ulp(t.sum(axis).float().numpy(), exact, dtype)
    _within_one_ulp(t.mean(axis).float().numpy(), exact / shape[axis], dtype)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("n,k,m", [(3, 4097, 5), (17, 300, 9), (64, 1024, 64)])
def test_narrow_matmul_accumulates_in_float32(dtype, n, k, m):
    rng = np.random.default_rng(n * k)
    a = _cancelling(rng, (n, k), 1)
    b = np.abs(_cancelling(rng, (k, m), 0))
    got = (Tensor(a).cast(dtype) @ Tensor(b).cast(dtype)).float().numpy()
    _within_one_ulp(got, a.astype(np.float64) @ b.astype(np.float64), dtype)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("shape", [(5, 33), (64, 1000), (7, 4099)])
def test_narrow_softmax_rounds_once(dtype, shape):
    rng = np.random.default_rng(shape[1])
    x = narrow((rng.standard_normal(shape) * 3).astype(np.float32), dtype)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    probs = e / e.sum(1, keepdims=True)
    t = Tensor(x).cast(dtype)
    _within_one_ulp(t.softmax(1).float().numpy(), probs, dtype)
    _within_one_ulp(t.log_softmax(1).float().numpy(), np.log(probs), dtype)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("shape", [(5, 33), (64, 1000), (3, 7, 257)])
def test_narrow_layer_norm_rounds_once(dtype, shape):
    import tg.nn.functional as F
    rng = np.random.default_rng(shape[-1])
    x = narrow((rng.standard_normal(shape) * 2 + 1).astype(np.float32), dtype)
    w = narrow(rng.uniform(0.5, 2, shape[-1]).astype(np.float32), dtype)
    b = narrow(rng.standard_normal(shape[-1]).astype(np.float32), dtype)
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(-1, keepdims=True)
    scaled = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + 1e-5) * w
    got = F.layer_norm(Tensor(x).cast(dtype), shape[-1], Tensor(w).cast(dtype), Tensor(b).cast(dtype))
    # xhat * w + b cancels where they are opposite: their float32 error is then what is left
    _within_one_ulp(got.float().numpy(), scaled + b, dtype, np.abs(scaled) + np.abs(b))


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("causal", [False, True])
def test_narrow_attention_rounds_once(dtype, causal):
    import tg.nn.functional as F
    rng = np.random.default_rng(7)
    q, k, v = (narrow(rng.standard_normal((2, 37, 16)).astype(np.float32), dtype) for _ in range(3))
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) / 4.0
    if causal:
        s = np.where(np.tril(np.ones((37, 37), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    got = F.scaled_dot_product_attention(*(Tensor(a).cast(dtype) for a in (q, k, v)), is_causal=causal)
    _within_one_ulp(got.float().numpy(), want, dtype)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("causal", [False, True])
def test_narrow_attention_keeps_its_weights_narrow_for_backward_and_its_gradients_follow(dtype, causal):
    """The weights backward reads are kept in the inputs' type (half the bytes between forward and
    backward, as torch's autocast keeps its bfloat16 softmax output): a kernel writes them narrow, and
    dq, dk, dv stay within the narrow type's rounding of float64's."""
    import tg.nn.functional as F
    from tg.core.schedule import create_schedule
    rng = np.random.default_rng(11 + causal)
    shape = (2, 3, 29, 16)
    q, k, v = (narrow(rng.standard_normal(shape).astype(np.float32), dtype) for _ in range(3))
    g = narrow(rng.standard_normal(shape).astype(np.float32), dtype)
    ts = [Tensor(a).cast(dtype).requires_grad_() for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, is_causal=causal)
    out.backward(Tensor(g).cast(dtype))
    items = create_schedule([t.grad.lazydata for t in ts])
    weights = [it for it in items if it.kind == "kernel" and it.out.shape[-2:] == (29, 29)]
    assert any(it.out.dtype == dtype for it in weights)
    q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
    s_ = q64 @ k64.swapaxes(-1, -2) / 4.0
    if causal:
        s_ = np.where(np.tril(np.ones((29, 29), bool)), s_, -np.inf)
    p = np.exp(s_ - s_.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = p.swapaxes(-1, -2) @ g64
    dp = g64 @ v64.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / 4.0
    dq, dk = ds @ k64, ds.swapaxes(-1, -2) @ q64
    eps = 2.0 ** -8 if dtype == tg.bfloat16 else 2.0 ** -11
    for got, want in zip((t.grad.float().numpy() for t in ts), (dq, dk, dv)):
        np.testing.assert_allclose(got, want, rtol=4 * eps, atol=4 * eps * np.abs(want).max())
