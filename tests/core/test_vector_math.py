"""The SIMD exp2 / log2 the C renderer emits match numpy across the range and on special values."""
import numpy as np
import pytest

from tg import Tensor


def lanes_friendly(x: np.ndarray) -> np.ndarray:
    return x[: len(x) // 16 * 16]   # a multiple of the lane count, so the vector path is used


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_exp2_vector():
    rng = np.random.default_rng(0)
    specials = [0, -0.0, np.inf, -np.inf, np.nan, 127.5, 128, 200, -126, -200]
    x = lanes_friendly(np.concatenate([rng.standard_normal(4000) * 50, rng.uniform(-1, 1, 4000),
                                       specials]).astype(np.float32))
    got, want = Tensor(x, device="CPU").exp2().numpy(), np.exp2(x)
    normal = np.isfinite(want) & (want > 1.2e-38)
    np.testing.assert_allclose(got[normal], want[normal], rtol=3e-7)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    assert np.all(got[want < 1.2e-38] <= 1.2e-38)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_log2_vector():
    rng = np.random.default_rng(1)
    x = lanes_friendly(
        np.concatenate(
            [
                np.exp(rng.uniform(-80, 80, 8000)),
                rng.uniform(0.5, 2, 2000),
                [0, np.inf, np.nan, -1.0, 1.0, 2.0, 0.5, 1.41421356],
            ]
        ).astype(np.float32)
    )
    got, want = Tensor(x, device="CPU").log2().numpy(), np.log2(x)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-6, rtol=1e-6)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
