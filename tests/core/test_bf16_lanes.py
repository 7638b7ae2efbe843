"""bfloat16 in SIMD lanes on the CPU (renderer.BF16_VECTORS): a bfloat16 value computes as a float
vector, a load widens the words, a store or a cast to bfloat16 rounds to nearest even with NaNs kept
(quiet, top bits unchanged). The vector kernels must give the very bits the scalar ones (TG_NOOPT=1: no
lanes) and numpy's bit arithmetic give, for every float32 bit pattern class (ties, NaN payloads,
infinities, signed zeros, subnormals), at sizes with and without a tail, in elementwise chains,
selects, comparisons, integer casts and reduces."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import tg
from tests.core.test_half_precision import _floats_to_test, bf16_round
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


@pytest.fixture
def fresh(monkeypatch):
    """Each kernel lowered afresh (the knob TG_NOOPT changes the lowering); returns the sources run."""
    dev = Device["CPU"]
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    monkeypatch.setattr(dev, "_by_ast", OrderedDict())
    return lambda: [p.src for p in dev._by_ast.values()]


def both_ways(monkeypatch, fn):
    """fn()'s arrays with lanes and without (TG_NOOPT=1), each kernel built afresh."""
    dev = Device["CPU"]
    out = []
    for noopt in ("0", "1"):
        monkeypatch.setenv("TG_NOOPT", noopt)
        dev._by_ast.clear()
        out.append([np.asarray(a) for a in fn()])
    monkeypatch.setenv("TG_NOOPT", "0")
    return out


def same_bits(a: np.ndarray, b: np.ndarray, any_nan: bool = False) -> None:
    """Equal bits; with any_nan a NaN matches any NaN."""
    assert a.dtype == b.dtype
    if any_nan:
        as_float = (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a
        other = (b.astype(np.uint32) << 16).view(np.float32) if b.dtype == np.uint16 else b
        both = np.isnan(as_float) & np.isnan(other)
        a, b = a[~both], b[~both]
    w = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, None)
    if w is None or a.dtype == np.bool_:
        np.testing.assert_array_equal(a, b)
        return
    bad = a.view(w) != b.view(w)
    assert not bad.any(), f"{int(bad.sum())} differ, first {a[bad][:4]} vs {b[bad][:4]}"


def bits_of(t: Tensor) -> np.ndarray:
    """A bfloat16 tensor's words (through a bitcast, no rounding on the way)."""
    return t.bitcast(tg.int16).numpy().view(np.uint16)


def test_casts_to_and_from_bfloat16_round_as_numpy_in_lanes(fresh):
    xs = floats(np.random.default_rng(0))
    xs = xs[: len(xs) // 16 * 16 + 5]                       # a tail past the last whole vector
    b = Tensor(xs, device="CPU").cast(tg.bfloat16)
    got = bits_of(b.realize())
    assert any("tg_bf16_narrow_v" in s for s in fresh())
    np.testing.assert_array_equal(got, bf16_bits(xs))
    back = b.float().numpy()
    want = (bf16_bits(xs).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("n", [16, 37, 4096 + 9])
@pytest.mark.parametrize("seed", range(4))
def test_bfloat16_programs_give_the_same_bits_with_lanes_and_without(n, seed, fresh, monkeypatch):
    """Random chains over bfloat16 tensors (values of every scale, NaN, inf, -0.0 among them): the
    lanes' kernels and the scalar ones agree bit for bit."""
    rng = np.random.default_rng(seed)
    base = floats(rng)
    x = rng.choice(base, (3, n)).astype(np.float32)
    y = rng.choice(base, (3, n)).astype(np.float32)
    k = rng.integers(-1000, 1000, (3, n)).astype(np.int32)
    c = float(rng.standard_normal())

    def program():
        a = Tensor(x, device="CPU").cast(tg.bfloat16)
        b = Tensor(y, device="CPU").cast(tg.bfloat16)
        i = Tensor(k, device="CPU")
        outs = [
            a * c + b,                                   # rounded once, at the store
            (a * b).exp().sqrt(),                        # the product rounded before the float math
            tg.maximum(a, b) - tg.minimum(a, -b),
            (a < b).where(a, b * 2),
            (a.abs() + 1).log(),
            a.cast(tg.int32).cast(tg.bfloat16),          # lanes converted to integers and back
            i.cast(tg.bfloat16) * a,
            (a.float() * 3.0).cast(tg.bfloat16),
            a.sum(axis=1) if n < 4096 else a[:, :512].sum(axis=1),
            (a + b).amax(axis=1),
        ]
        with np.errstate(all="ignore"):
            for o in outs:        # computed and stored by their own kernels (a bitcast fused into one
                o.realize()       # would make it int16's: no lanes), then read as words
            return [bits_of(o) if o.dtype == tg.bfloat16 else o.numpy() for o in outs] + \
                [(a == b).numpy(), a.cast(tg.int32).numpy()]
    with np.errstate(all="ignore"):
        lanes, scalar = both_ways(monkeypatch, program)
    for got, want in zip(lanes, scalar):
        # a NaN matches any NaN: which operand's payload (and sign) an op on two NaNs keeps is the C
        # compiler's choice, and lanes and scalar code differ there for float32 too (the conversions'
        # NaN bits are pinned by test_casts_to_and_from_bfloat16_round_as_numpy_in_lanes)
        same_bits(got, want, any_nan=True)


def test_the_lanes_are_taken(fresh):
    x = Tensor(np.arange(64, dtype=np.float32), device="CPU").cast(tg.bfloat16)
    (x * 3 + 1).realize()
    assert any("tg_bf16_widen_v" in s and "u16v" in s for s in fresh())
