"""Kernels split along a ragged lane dim (linearizer: Dims.ragged, _split_ragged): an output dim that
the widest SIMD vectors do not divide becomes one loop nest with the widest lanes over the part they
divide, then one more vector over the last outputs (recomputing a few), or, where the kernel reads its
own output's memory, a scalar nest over the rest. Every result must be numpy's, whatever the split."""
import numpy as np
import pytest
from helpers import cpu_source, kernels_of

from tg import Tensor, dtypes


def widest() -> int:
    from tg.core.runtime.ops_cpu import _vector_bytes
    return _vector_bytes() // 4


def split_kernels(t: Tensor) -> list:
    from tg.core.codegen.linearizer import linearize
    from tg.core.runtime.ops_cpu import _vector_bytes
    return [k for k in kernels_of(t) if linearize(k, _vector_bytes()).lanes == widest() and
            _ragged(k) is not None]


def _ragged(kernel):
    from tg.core.codegen.linearizer import Dims
    from tg.core.runtime.ops_cpu import _vector_bytes
    return Dims(kernel, _vector_bytes(), True, False).ragged


def test_conv_reduce_takes_the_widest_lanes_with_an_overlapping_tail():
    """A conv computed over rows of the input's width (fused._correlate_rows) on a 27 x 27 input: 25 x 27
    = 675 outputs per channel, which no width within a seventh more columns makes whole vectors of 16
    (25 is odd): 42 vectors of 16, then, in a second loop nest, one vector over outputs 659..674."""
    if widest() < 8:
        pytest.skip("no vectors wider than 4 lanes on this CPU: nothing is ragged")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 1, 27, 27)).astype(np.float32)
    w = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    y = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"))
    split = split_kernels(y)
    assert len(split) == 1, [k.name for k in kernels_of(y)]
    body = cpu_source(split[0]).split("void k(", 1)[1]
    assert body.count("for (int g0 = 0;") == 2, body          # two loop nests, one function
    if widest() == 16:
        tail = body.split("for (int g0 = 0;")[2]
        assert "+659)" in tail and "*(f32v*)(data0+" in tail, tail      # a vector store at 675 - 16
    want = sum(np.einsum("bhw,o->bohw", x[:, 0, i:i + 25, j:j + 25].astype(np.float64), w[:, 0, i, j])
               for i in range(3) for j in range(3))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_conv_rows_widen_to_whole_vectors_and_stream():
    """bench_train's first conv layer: 26 output rows of the padded width 28 would be 728 positions a plane
    (45.5 vectors: every other plane's rows unaligned); rows of 32 make 832, whole vectors, so the 11 MB
    output streams past the cache. The values are the conv's, the extra columns cut off."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 1, 28, 28)).astype(np.float32)
    w = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    y = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"))
    names = [k.name for k in kernels_of(y)]
    assert any("832" in n for n in names), names
    if widest() == 16:
        src = "\n".join(cpu_source(k) for k in kernels_of(y))
        assert "_mm512_stream_ps" in src and "_mm_sfence" in src
    want = sum(np.einsum("bhw,o->bohw", x[:, 0, i:i + 26, j:j + 26].astype(np.float64), w[:, 0, i, j])
               for i in range(3) for j in range(3))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def _cases(rng):
    """(name, tg function of the inputs, numpy function, input arrays): dims that neither 16 nor 8
    lanes divide (AVX-512, AVX2), in elementwise, reduce, padded, broadcast, matmul and int kernels."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)    # noqa: E731
    return [
        ("add-mul", lambda a, b: a + b * 2, lambda a, b: a + b * 2, [f(3, 131), f(3, 131)]),
        # rows of 26 (a slice: not mergeable): one vector of 16, then one over outputs 10..25
        ("short-rows", lambda a: a[:, 2:28] * 3, lambda a: a[:, 2:28] * 3, [f(7, 30)]),
        ("broadcast", lambda a, b: a * b - 1, lambda a, b: a * b - 1, [f(133), f(5, 1)]),
        ("sum-axis0", lambda a: a.sum(0), lambda a: a.sum(0), [f(9, 200)]),
        ("max-cols", lambda a: a.amax(0), lambda a: a.max(0), [f(7, 131)]),
        ("pad", lambda a: a.pad(((0, 0), (3, 2))) * 3, lambda a: np.pad(a, ((0, 0), (3, 2))) * 3,
         [f(4, 100)]),
        ("matmul", lambda a, b: a @ b, lambda a, b: a @ b, [f(7, 9), f(9, 100)]),
        ("exp-where", lambda a: (a > 0).where(a.exp(), a * 0.5),
         lambda a: np.where(a > 0, np.exp(a), a * 0.5), [f(2, 3, 75)]),
        ("int", lambda a: (a * 7).cast(dtypes.int32) % 5, lambda a: np.mod((a * 7).astype(np.int32), 5),
         [f(2, 99)]),
    ]


@pytest.mark.parametrize("case", range(9))
def test_ragged_kernels_match_numpy(case):
    rng = np.random.default_rng(case)
    name, fn, ref, arrays = _cases(rng)[case]
    out = fn(*[Tensor(a, device="CPU") for a in arrays])
    if widest() >= 8:
        assert split_kernels(out), f"{name}: no kernel was split"
    got = out.numpy()
    np.testing.assert_allclose(got, ref(*arrays), rtol=1e-5, atol=1e-5, err_msg=name)


def test_in_place_update_of_a_ragged_buffer():
    """An assign (an optimizer step's kind of kernel) writes both parts into the existing memory, each
    output once."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 197)).astype(np.float32)
    t = Tensor(a.copy(), device="CPU").realize()
    update = t.assign(t * 2 + 1)
    if widest() >= 8:      # split, with a scalar tail: a vector over the last outputs would read some twice
        assert split_kernels(update)
    update.realize()
    np.testing.assert_allclose(t.numpy(), a * 2 + 1, rtol=1e-6)


def test_a_contiguous_row_reduce_is_not_split():
    """Rows of 1000 (8 divides, 16 does not) keep 8 lanes along the row: a split over 3000 outputs
    would read each row's elements 16 rows apart (gathers)."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3000, 1000)).astype(np.float32)
    out = Tensor(a, device="CPU").sum(1)
    assert not split_kernels(out)
    np.testing.assert_allclose(out.numpy(), a.sum(1), rtol=1e-4, atol=1e-3)
