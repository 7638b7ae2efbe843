"""Contiguous reduces the widest SIMD vectors do not divide (linearizer: Dim.tail, Lowerer._reduce_tail):
the loops take whole vectors of the widest lanes, then a tail of whole vectors adds the rest into the
same accumulators, the last one moved back to end at the dim's end, its lanes already added replaced by
the reduce's identity. A conv weight
gradient's 26 x 26 = 676 positions: 42 vectors of 16 and a tail of 4, not 169 vectors of 4. Every
result must be numpy's (float64), whatever the tail's length, op or dtype."""
import numpy as np
import pytest
from helpers import cpu_source, kernels_of

from tg import Tensor


def widest() -> int:
    from tg.core.runtime.ops_cpu import _vector_bytes
    return _vector_bytes() // 4


def tails(t: Tensor) -> list[int]:
    """The tail length of each of t's CPU kernels with one (their reduce lane dim's leftover)."""
    from tg.core.codegen.linearizer import Dims
    from tg.core.runtime.ops_cpu import _vector_bytes
    found = []
    for k in kernels_of(t):
        dims = Dims(k, _vector_bytes(), True, False)
        found += [d.tail for d in dims.dims if d.tail]
    return found


@pytest.mark.parametrize("n", [65, 100, 131, 676, 1000, 1027])
def test_sum_max_min_mean_over_rows_with_a_tail(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((7, n)) * 5).astype(np.float32)
    t = Tensor(x, device="CPU")
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(t.sum(1).numpy(), x64.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(t.amax(1).numpy(), x.max(1))
    np.testing.assert_array_equal(t.amin(1).numpy(), x.min(1))      # max of the negation: identity -inf
    np.testing.assert_allclose(t.exp().mean(1).numpy(), np.exp(x64).mean(1), rtol=1e-5)
    if widest() == 16 and n % 16:
        assert tails(t.sum(1)) and all(0 < r < 64 for r in tails(t.sum(1)))


def test_a_tail_of_negative_values_never_takes_the_padding():
    """A lane the tail adds twice adds the identity instead: a max of all-negative rows, a sum of exp and a
    sum of shifted values (each counted twice would be wrong)."""
    x = -np.abs(np.random.default_rng(1).standard_normal((5, 676)).astype(np.float32)) - 1
    t = Tensor(x, device="CPU")
    np.testing.assert_array_equal(t.amax(1).numpy(), x.max(1))
    np.testing.assert_allclose(t.exp().sum(1).numpy(), np.exp(x.astype(np.float64)).sum(1), rtol=1e-5)
    np.testing.assert_allclose((t + 3).sum(1).numpy(), (x.astype(np.float64) + 3).sum(1), rtol=1e-5)


def test_nan_and_inf_in_the_tail():
    x = np.random.default_rng(2).standard_normal((4, 100)).astype(np.float32)
    x[0, 99], x[1, 98], x[2, 97] = np.nan, np.inf, -np.inf
    t = Tensor(x, device="CPU")
    got = t.amax(1).numpy()
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == x[2].max() and got[3] == x[3].max()
    s = t.sum(1).numpy()
    assert np.isnan(s[0]) and s[1] == np.inf and s[2] == -np.inf


def test_conv_weight_gradient_takes_the_widest_lanes():
    """bench_core's 1->32 layer: the weight gradient's reduce over 26 x 26 = 676 positions per image."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 1, 28, 28)).astype(np.float32)
    w = Tensor(rng.standard_normal((32, 1, 3, 3)).astype(np.float32), device="CPU", requires_grad=True)
    g = rng.standard_normal((5, 32, 26, 26)).astype(np.float32)
    (Tensor(x, device="CPU").conv2d(w) * Tensor(g, device="CPU")).sum().backward()
    if widest() == 16:
        assert tails(w.grad) == [4]         # 42 vectors of 16: 672 positions, then 4
        src = "\n".join(cpu_source(k) for k in kernels_of(w.grad))
        assert "< 42;" in src and "< 169;" not in src       # not 169 vectors of 4
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    want = np.einsum("bopq,bipqkl->oikl", g.astype(np.float64), win)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5, atol=1e-4)


def test_tail_with_int_lanes_and_a_scalar_per_row():
    """An int32 reduce, and a row's int64 label (constant along the lanes: it stays a scalar load)."""
    rng = np.random.default_rng(4)
    a = rng.integers(-1000, 1000, (6, 83)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(a, device="CPU").sum(1).numpy(), a.sum(1))
    np.testing.assert_array_equal(Tensor(a, device="CPU").amax(1).numpy(), a.max(1))
    logits, labels = rng.standard_normal((9, 77)).astype(np.float32), rng.integers(0, 77, 9)
    from tg.nn import functional as F
    loss = F.cross_entropy(Tensor(logits, device="CPU"), Tensor(labels, device="CPU"))
    l64 = logits.astype(np.float64)
    logp = l64 - l64.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    np.testing.assert_allclose(loss.item(), -logp[np.arange(9), labels].mean(), rtol=1e-6)
