"""Movement ops copy values as they are, bit for bit, in every float type: pad, permute, flip, strided
slices, expand, repeat, cat and stack of float16 / bfloat16 / float32 tensors keep -0.0, every NaN's
payload (signalling ones too), infinities and subnormals, as torch's copies do. The reference is numpy's
same movement of the raw words. On the CPU a 16-bit tensor that is only moved is moved as its words (no
widening to float and rounding back: renderer._moved_words), which the rendered source shows.

Found: cat summed its padded inputs (x + 0.0), so -0.0 came out as +0.0 and a signalling NaN quieted.
OpenCL's float16 is its native half: a value converted to float there (any arithmetic, a where) comes
back with a signalling NaN quieted, the one difference allowed below."""
from __future__ import annotations

import numpy as np
import pytest

import tg
from tests.helpers import cpu_source, kernels_of
from tg import Tensor
from tg.core.device import Device

WORDS = {tg.float16: np.uint16, tg.bfloat16: np.uint16, tg.float32: np.uint32}


def _bits(dtype, shape, seed) -> np.ndarray:
    """Random words of dtype's width; for 16 bits every one of the 65536 patterns appears (all NaNs,
    both zeros, subnormals, infinities); for float32 random words with the special ones mixed in."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if WORDS[dtype] is np.uint16:
        words = np.resize(rng.permutation(65536).astype(np.uint16), n)
    else:
        words = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
        special = np.array([0x80000000, 0, 0x7F800001, 0xFFC00123, 0x7F800000, 0xFF800000, 1, 0x807FFFFF],
                           np.uint32)
        words[rng.choice(n, min(n, 64), replace=False)] = np.resize(special, min(n, 64))
    return words.reshape(shape)


def _tensor(words: np.ndarray, dtype) -> Tensor:
    return Tensor(words).bitcast(dtype).contiguous().realize()


def _words(t: Tensor) -> np.ndarray:
    return t.bitcast(tg.uint16 if t.dtype.itemsize == 2 else tg.uint32).numpy()


# (name, tg move, numpy move of the words)
MOVES = [
    ("pad", lambda t: t.pad(((1, 2), (0, 3))), lambda a: np.pad(a, ((1, 2), (0, 3)))),
    ("pad-crop", lambda t: t.pad(((-1, 2), (3, -2))), lambda a: np.pad(a[1:, :-2], ((0, 2), (3, 0)))),
    ("permute", lambda t: t.T, lambda a: a.T),
    ("flip", lambda t: t.flip(0, 1), lambda a: a[::-1, ::-1]),
    ("strided slice", lambda t: t[1::2, ::3], lambda a: a[1::2, ::3]),
    ("expand", lambda t: t[:, None, :].expand(t.shape[0], 3, t.shape[1]),
     lambda a: np.broadcast_to(a[:, None, :], (a.shape[0], 3, a.shape[1]))),
    ("repeat", lambda t: t.repeat(2, 3), lambda a: np.tile(a, (2, 3))),
    ("cat 0", lambda t: t.cat(t.flip(0), t[:1], dim=0), lambda a: np.concatenate([a, a[::-1], a[:1]], 0)),
    ("cat 1", lambda t: t.cat(t[:, :5], dim=1), lambda a: np.concatenate([a, a[:, :5]], 1)),
    ("stack", lambda t: Tensor.stack([t, t.flip(1)], dim=1), lambda a: np.stack([a, a[:, ::-1]], 1)),
    ("roll", lambda t: t.roll(3, 1), lambda a: np.roll(a, 3, 1)),
]


@pytest.mark.parametrize("dtype", list(WORDS), ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(256, 256), (37, 61), (9, 1031)])
@pytest.mark.parametrize("name,move,ref", MOVES, ids=[m[0] for m in MOVES])
def test_a_move_keeps_every_bit(dtype, shape, name, move, ref):
    words = _bits(dtype, shape, hash((name, shape)) % 1000)
    got = _words(move(_tensor(words, dtype)).contiguous().realize())
    want = ref(words)
    assert got.shape == want.shape
    if dtype == tg.float16 and Device[Device.DEFAULT].renderer.d.types["float16"] == "half":
        # OpenCL computes float16 in its own half type: a value that passes through float (a where) is
        # converted by the device, which quiets a signalling NaN (IEEE 754's conversion); its payload stays
        snan = ((want & 0x7C00) == 0x7C00) & ((want & 0x3FF) != 0) & ((want & 0x200) == 0)
        got = np.where(snan & (got == (want | 0x200)), want, got)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{name} of {dtype.name} {shape}: {bad.size} words differ, e.g. "
                           f"{want.flat[bad[0]]:#x} came out as {got.flat[bad[0]]:#x}")


@pytest.mark.parametrize("dtype", [tg.float16, tg.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("name,move,ref", MOVES, ids=[m[0] for m in MOVES])
def test_a_16_bit_move_is_compiled_as_a_copy_of_words(dtype, name, move, ref):
    x = _tensor(_bits(dtype, (37, 61), 0), dtype)
    for kernel in kernels_of(move(x).contiguous()):
        src = cpu_source(kernel)
        assert "tg_bf16_to_f32(" not in src.split("void k(")[1] and "tg_h2f" not in src.split("void k(")[1], \
            f"{name}: the kernel converts the words it only moves:\n{src.split('void k(')[1]}"


def test_cat_gradients_are_the_slices_of_the_output_gradient():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((3, n)).astype(np.float32) for n in (2, 5, 1, 4)]
    ts = [Tensor(p, requires_grad=True) for p in parts]
    cot = rng.standard_normal((3, 12)).astype(np.float32)
    (ts[0].cat(*ts[1:], dim=1) * Tensor(cot)).sum().backward()
    offsets = np.cumsum([0] + [p.shape[1] for p in parts])
    for t, lo, hi in zip(ts, offsets, offsets[1:]):
        np.testing.assert_array_equal(t.grad.numpy(), cot[:, lo:hi])
    a = Tensor(parts[0], requires_grad=True)             # one tensor twice: its two slices summed
    cot2 = rng.standard_normal((6, 2)).astype(np.float32)
    (a.cat(a, dim=0) * Tensor(cot2)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), cot2[:3] + cot2[3:], rtol=1e-6)


@pytest.mark.parametrize("parts", [2, 7, 40])
@pytest.mark.parametrize("dim", [0, 1])
def test_a_cat_is_one_picking_load_per_part(parts, dim):
    """A cat of n parts lowers to n loads, each reading its part where it lies and the previous pick
    elsewhere: no select, no second test of the same ranges (n loads and n selects on the same
    conditions took GCC 9 s at 300 parts)."""
    from tg.core.codegen.linearizer import linearize
    from tg.core.codegen.uops import UOps
    from tg.core.ops import TernaryOps
    from tg.core.runtime.ops_cpu import _vector_bytes
    rng = np.random.default_rng(parts)
    xs = [Tensor(rng.standard_normal((3, 5) if dim else (int(rng.integers(1, 4)), 37)).astype(np.float32))
          for _ in range(parts)]
    out = xs[0].cat(*xs[1:], dim=dim)
    (kernel,) = kernels_of(out)
    uops = linearize(kernel, _vector_bytes()).uops
    assert not [u for u in uops if u.op is UOps.ALU and u.arg[0] is TernaryOps.WHERE]
    loads = [u for u in uops if u.op is UOps.LOAD]
    assert {u.arg[0] for u in loads} == set(range(1, parts + 1))
    reads = [(u.arg[0], u.arg[1].key) for u in loads]
    assert len(reads) == len(set(reads)), reads                       # no element read twice
    np.testing.assert_array_equal(out.numpy(), np.concatenate([x.numpy() for x in xs], dim))


def test_a_long_cat_renders_and_refuses_two_devices():
    """A cat of more parts than Python's recursion limit, cast in the same kernel, renders (the chain
    of picks is walked, not recursed); a cat across devices says which and how to fix it."""
    parts = [Tensor(np.full((1, 3), i, np.float32)).cast(tg.bfloat16).realize() for i in range(1100)]
    (kernel,) = kernels_of(parts[0].cat(*parts[1:]).float())
    assert "data1100" in cpu_source(kernel)
    with pytest.raises(ValueError, match="different devices .* .to()"):
        Tensor([1.0], device="CPU").cat(Tensor([2.0], device="NULL"))
