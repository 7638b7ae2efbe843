"""float16 and bfloat16 in SIMD lanes on the CPU (renderer.NARROW_VECTORS): a narrow value computes as a
float vector, a load widens the words, a store or a cast to the narrow type rounds to nearest even with
NaNs kept (bfloat16: quiet, top bits unchanged; float16: sign and the payload's top bits). The vector
kernels must give the very bits the scalar ones (TG_NOOPT=1: no lanes) and numpy's bit arithmetic give,
for every float32 bit pattern class (ties, NaN payloads, infinities, signed zeros, subnormals), at sizes
with and without a tail, in elementwise chains, selects, comparisons, integer casts and reduces."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import tg
from tests.core.test_half_precision import _floats_to_test, bf16_round, half_bits, half_floats
from tg import Device, Tensor

# NaNs whose top 16 bits alone would read as an infinity (the quiet bit must be set) or keep a payload
ODD_NANS = np.array([0x7F800001, 0xFF800001, 0x7F80FFFF, 0x7FA00000, 0xFFC00001, 0x7FFFFFFF],
                    np.uint32).view(np.float32)


def floats(rng: np.random.Generator) -> np.ndarray:
    """Every float32 class the conversions treat apart (test_half_precision's, and ODD_NANS)."""
    return np.concatenate([_floats_to_test(rng), np.repeat(ODD_NANS, 50)])


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 words: nearest even, a NaN its top half with the quiet bit set."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    top = (u >> 16).astype(np.uint16)
    rounded = bf16_round(x).view(np.uint32) >> 16
    nan = np.isnan(x)
    quiet = np.where((top & 0x7F) == 0, top | 0x40, top)
    return np.where(nan, quiet, rounded.astype(np.uint16)).astype(np.uint16)


def narrow_bits(x: np.ndarray, dtype) -> np.ndarray:
    return bf16_bits(x) if dtype == tg.bfloat16 else half_bits(x)


def widened(bits: np.ndarray, dtype) -> np.ndarray:
    """Narrow words as the float32 values tg reads them as."""
    return (bits.astype(np.uint32) << 16).view(np.float32) if dtype == tg.bfloat16 else half_floats(bits)


NARROW = (tg.bfloat16, tg.float16)


@pytest.fixture
def fresh(monkeypatch):
    """Each kernel lowered afresh (the knob TG_NOOPT changes the lowering); returns the sources run."""
    dev = Device["CPU"]
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    monkeypatch.setattr(dev, "_by_key", OrderedDict())
    return lambda: [p.src for p in dev._by_key.values()]


def both_ways(monkeypatch, fn):
    """fn()'s arrays with lanes and without (TG_NOOPT=1), each kernel built afresh."""
    dev = Device["CPU"]
    out = []
    for noopt in ("0", "1"):
        monkeypatch.setenv("TG_NOOPT", noopt)
        dev._by_key.clear()
        out.append([np.asarray(a) for a in fn()])
    monkeypatch.setenv("TG_NOOPT", "0")
    return out


def same_bits(a: np.ndarray, b: np.ndarray, dtype, any_nan: bool = False) -> None:
    """Equal bits; with any_nan a NaN matches any NaN (16-bit words are dtype's)."""
    assert a.dtype == b.dtype
    if any_nan:
        as_float = widened(a, dtype) if a.dtype == np.uint16 else a
        other = widened(b, dtype) if b.dtype == np.uint16 else b
        both = np.isnan(as_float) & np.isnan(other)
        a, b = a[~both], b[~both]
    w = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, None)
    if w is None or a.dtype == np.bool_:
        np.testing.assert_array_equal(a, b)
        return
    bad = a.view(w) != b.view(w)
    assert not bad.any(), f"{int(bad.sum())} differ, first {a[bad][:4]} vs {b[bad][:4]}"


def bits_of(t: Tensor) -> np.ndarray:
    """A narrow tensor's words (through a bitcast, no rounding on the way)."""
    return t.bitcast(tg.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("dtype", NARROW)
def test_casts_to_and_from_a_narrow_type_round_as_numpy_in_lanes(dtype, fresh):
    xs = floats(np.random.default_rng(0))
    xs = xs[: len(xs) // 16 * 16 + 5]                       # a tail past the last whole vector
    b = Tensor(xs, device="CPU").cast(dtype)
    got = bits_of(b.realize())
    narrow = "tg_bf16_narrow_v" if dtype == tg.bfloat16 else "tg_f2h_v"
    assert any(narrow in s for s in fresh())
    np.testing.assert_array_equal(got, narrow_bits(xs, dtype))
    back = b.float().numpy()
    want = widened(narrow_bits(xs, dtype), dtype)
    np.testing.assert_array_equal(back.view(np.uint32), want.view(np.uint32))
    # every word read into lanes and stored back keeps its bits (NaN payloads, signaling ones too)
    words = np.arange(1 << 16, dtype=np.uint16)
    every = Tensor(words.view(np.int16), device="CPU").bitcast(dtype).realize()
    np.testing.assert_array_equal(bits_of(every[1:].contiguous()), words[1:])      # a copy in lanes
    np.testing.assert_array_equal(every.float().numpy().view(np.uint32),
                                  widened(np.arange(1 << 16, dtype=np.uint16), dtype).view(np.uint32))


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("n", [16, 37, 4096 + 9])
@pytest.mark.parametrize("seed", range(4))
def test_narrow_programs_give_the_same_bits_with_lanes_and_without(dtype, n, seed, fresh, monkeypatch):
    """Random chains over float16 or bfloat16 tensors (values of every scale, NaN, inf, -0.0 among them): the
    lanes' kernels and the scalar ones agree bit for bit."""
    rng = np.random.default_rng(seed)
    base = floats(rng)
    x = rng.choice(base, (3, n)).astype(np.float32)
    y = rng.choice(base, (3, n)).astype(np.float32)
    k = rng.integers(-1000, 1000, (3, n)).astype(np.int32)
    c = float(rng.standard_normal())
    other = tg.float16 if dtype == tg.bfloat16 else tg.bfloat16

    def program():
        a = Tensor(x, device="CPU").cast(dtype)
        b = Tensor(y, device="CPU").cast(dtype)
        i = Tensor(k, device="CPU")
        outs = [
            a * c + b,                                   # rounded once, at the store
            (a * b).exp().sqrt(),                        # the product rounded before the float math
            tg.maximum(a, b) - tg.minimum(a, -b),
            (a < b).where(a, b * 2),
            (a.abs() + 1).log(),
            a.cast(tg.int32).cast(dtype),          # lanes converted to integers and back
            i.cast(dtype) * a,
            (a.float() * 3.0).cast(dtype),
            a.cast(other).float() * 2,                   # into the other narrow type, used before a store
            (a * c).cast(other).cast(tg.int32),
            (a.cast(other) < b.cast(other)).where(a, b),
            a.sum(axis=1) if n < 4096 else a[:, :512].sum(axis=1),
            (a + b).amax(axis=1),
        ]
        with np.errstate(all="ignore"):
            for o in outs:        # computed and stored by their own kernels (a bitcast fused into one
                o.realize()       # would make it int16's: no lanes), then read as words
            return [bits_of(o) if o.dtype == dtype else o.numpy() for o in outs] + \
                [(a == b).numpy(), a.cast(tg.int32).numpy()]
    with np.errstate(all="ignore"):
        lanes, scalar = both_ways(monkeypatch, program)
    for got, want in zip(lanes, scalar):
        # a NaN matches any NaN: which operand's payload (and sign) an op on two NaNs keeps is the C
        # compiler's choice, and lanes and scalar code differ there for float32 too (the conversions'
        # NaN bits are pinned by test_casts_to_and_from_a_narrow_type_round_as_numpy_in_lanes)
        same_bits(got, want, dtype, any_nan=True)


@pytest.mark.parametrize("dtype", NARROW)
def test_the_lanes_are_taken(dtype, fresh):
    x = Tensor(np.arange(64, dtype=np.float32), device="CPU").cast(dtype)
    (x * 3 + 1).realize()
    widen = "tg_bf16_widen_v" if dtype == tg.bfloat16 else "tg_h2f_v"
    assert any(widen in s and "u16v" in s for s in fresh())


@pytest.mark.parametrize("dtype", NARROW)
def test_kernels_of_several_widths_build_in_one_file(dtype, fresh, tmp_path):
    """A batch build puts kernels of different lane widths in one translation unit (each kernel's
    helpers renamed for its stretch): the narrow helpers of one width must not leak into the next."""
    from tg.core.runtime.ops_cpu import ClangCompiler
    for n in (64 * 3, 8 * 3, 4 * 3, 7):
        x = Tensor(np.linspace(-3, 3, n, dtype=np.float32), device="CPU")
        (x.cast(dtype) * 3 + 1).realize()
    srcs = fresh()
    assert len({s.split("typedef float f32v __attribute__((vector_size(")[1][:3] for s in srcs
                if "vector_size(" in s}) >= 2, "expected kernels of several widths"
    ClangCompiler().compile_many_to(srcs, tmp_path / "batch.so")
