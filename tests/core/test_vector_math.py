"""The SIMD exp2 / log2 the C renderer emits match numpy across the range and on special values."""
from collections import OrderedDict

import numpy as np
import pytest

from tg import Tensor


def lanes_friendly(x: np.ndarray) -> np.ndarray:
    return x[: len(x) // 16 * 16]   # a multiple of the lane count, so the vector path is used


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_exp2_vector():
    rng = np.random.default_rng(0)
    specials = [0, -0.0, np.inf, -np.inf, np.nan, 127.5, 128, 200, -126, -200]
    # the specials first: lanes_friendly cuts the tail
    edges = [np.linspace(-151, -149, 13), np.linspace(127, 129, 13)]
    x = lanes_friendly(np.concatenate([specials, rng.standard_normal(4000) * 50, rng.uniform(-1, 1, 4000),
                                       *edges]).astype(np.float32))
    got, want = Tensor(x, device="CPU").exp2().numpy(), np.exp2(x)
    normal = np.isfinite(want) & (want > 1.2e-38)
    np.testing.assert_allclose(got[normal], want[normal], rtol=3e-7)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    assert np.all(got[want < 1.2e-38] <= 1.2e-38)
    assert got[3] == 0 and got[2] == np.inf and np.isnan(got[4]) and got[0] == 1 and got[1] == 1


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_log2_vector():
    rng = np.random.default_rng(1)
    x = lanes_friendly(
        np.concatenate(
            [
                [0, np.inf, np.nan, -1.0, 1.0, 2.0, 0.5, 1.41421356, 1e-40, 1e-45],   # first: the tail is cut
                np.exp(rng.uniform(-80, 80, 8000)),
                rng.uniform(0.5, 2, 2000),
            ]
        ).astype(np.float32)
    )
    got, want = Tensor(x, device="CPU").log2().numpy(), np.log2(x)
    assert got[0] == -np.inf and got[1] == np.inf and np.isnan(got[2]) and np.isnan(got[3]) and got[4] == 0
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-6, rtol=1e-6)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))


def _reductions(rng: np.random.Generator) -> list[np.ndarray]:
    """Reduce kernels whose lane dim is the reduce dim, so each output's lanes are folded: matmuls
    with both operands contiguous along K (one to sixteen outputs a tile), a max with NaN, an int sum."""
    outs = []
    for m, k, n in [(512, 64, 256), (7, 48, 5), (3, 16, 1), (33, 160, 17), (64, 1024, 2)]:
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        outs.append((Tensor(a, device="CPU") @ Tensor(b, device="CPU").T).numpy())
    x = rng.standard_normal((37, 64)).astype(np.float32)
    x[3, 5] = np.nan
    outs.append(Tensor(x, device="CPU").amax(1).numpy())
    outs.append(Tensor(rng.integers(-1000, 1000, (29, 96)).astype(np.int32), device="CPU").sum(1).numpy())
    return outs


def test_folded_lanes_give_the_bits_of_the_scalar_tree(monkeypatch):
    """HREDUCE folds a tile's vectors with shuffles (TG_SHUF); the sums must be bit for bit those of
    folding each vector's lanes one by one, which is what the renderer writes without shuffles."""
    import dataclasses

    from tg import config
    from tg.core.codegen.renderer import C_VECTORS
    from tg.core.device import Device
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    assert config.TG_SCHEDULE_CACHE == 0
    dev = Device["CPU"]
    results, sources = [], []
    for vec in (C_VECTORS, dataclasses.replace(C_VECTORS, evens="", odds="")):
        monkeypatch.setattr(dev.renderer, "d", dataclasses.replace(dev.renderer.d, vec=vec))
        monkeypatch.setattr(dev, "_by_key", OrderedDict())
        monkeypatch.setattr(dev, "_programs", OrderedDict())
        results.append(_reductions(np.random.default_rng(5)))
        sources.append("".join(dev._programs))
    assert "TG_SHUF(acc" in sources[0] and "TG_SHUF(acc" not in sources[1]
    for folded, scalar in zip(*results):
        assert folded.dtype == scalar.dtype
        assert np.array_equal(folded.view(np.uint32), scalar.view(np.uint32))


def test_values_constant_along_the_lanes_may_have_any_type():
    """A row's int64 class index beside the row's float32 values (cross-entropy's pick) keeps its
    lanes: the index stays a scalar, broadcast where it meets the vectors; the result is numpy's."""
    from tg.core.codegen.linearizer import Dims
    from tg.core.runtime.ops_cpu import _vector_bytes
    from tg.core.schedule import create_schedule
    from tg.nn import functional as F
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 160)).astype(np.float32)
    y = rng.integers(0, 160, 37)
    xt, yt = Tensor(x, device="CPU"), Tensor(y, device="CPU")
    loss = F.cross_entropy(xt, yt)
    kernels = [it.kernel for it in create_schedule([loss.lazydata]) if it.kind == "kernel"]
    picks = [k for k in kernels
             if any(n.dtype.name == "int64" for n in k.ast.walk()) and x.size in k.buf_sizes]
    assert len(picks) == 1 and Dims(picks[0], _vector_bytes(), True, False).lane_dim is not None
    shifted = x - x.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    np.testing.assert_allclose(loss.numpy(), -logp[np.arange(37), y].mean(), rtol=1e-5)
    # a value that does vary along the lanes in a type without SIMD keeps the kernel scalar
    z = Tensor(rng.integers(-5, 5, (8, 64)), device="CPU")
    total = (z * 3).sum(1)
    k = next(it.kernel for it in create_schedule([total.lazydata]) if it.kind == "kernel")
    assert Dims(k, _vector_bytes(), True, False).lane_dim is None
    np.testing.assert_array_equal(total.numpy(), (z.numpy() * 3).sum(1))
