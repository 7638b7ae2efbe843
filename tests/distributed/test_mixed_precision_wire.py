"""bfloat16 on the wire (issue 36 item 4): collectives carry bfloat16 words (wire.BF16), combined in
float32 and rounded once per combine, on every backend; DDP and ZeroOptimizer take reduce_dtype, which
sends float32 gradients as bfloat16 (half the bytes, counted on the TCP transport) and widens the mean
back, within bfloat16's rounding of the float32 run."""
from __future__ import annotations

import numpy as np
import pytest
from harness import BACKENDS, run_ranks


def _values(rank: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed * 100 + rank)
    v = (rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))).astype(np.float32)
    v[rng.integers(0, n, 3)] = 0.0
    return v


def _bf16_collectives(rank: int, world: int, n: int, seed: int) -> dict:
    import tg.distributed as dist
    from tg.distributed.transport import wire
    vals = _values(rank, n, seed)
    out: dict = {}
    for op in ("SUM", "AVG", "MIN", "MAX"):
        w = np.empty(n, wire.BF16)
        wire.bf16_narrow(vals, w)
        dist.all_reduce(w, op=getattr(dist.ReduceOp, op))
        out[op] = wire.bf16_widen(w).tolist()      # (lists: an MPI rank's result travels as JSON)
    w = np.empty(n, wire.BF16)
    wire.bf16_narrow(vals, w)
    part = np.empty(n // world, wire.BF16)
    dist.reduce_scatter_tensor(part, w, op=dist.ReduceOp.AVG)
    out["reduce_scatter"] = wire.bf16_widen(part).tolist()
    try:
        dist.all_reduce(w, op=dist.ReduceOp.PRODUCT)
        out["product"] = "no error"
    except TypeError as e:
        out["product"] = str(e)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", [2, 3])
def test_bf16_words_are_reduced_in_float32_on_every_backend(backend, world):
    n = world * 9001      # bfloat16 bytes past every backend's 32 KiB small-message path: the rings run
    seed = world + 10 * BACKENDS.index(backend)
    results = run_ranks(world, _bf16_collectives, n, seed, backend=backend)
    from tg.distributed.transport import wire
    terms = []
    for r in range(world):
        w = np.empty(n, np.uint16)
        wire.bf16_narrow(_values(r, n, seed), w)
        terms.append(wire.bf16_widen(w).astype(np.float64))
    exact, size = np.sum(terms, 0), np.sum(np.abs(terms), 0)
    # a ring rounds at each of its world - 1 steps, the shared-memory engine once: each rounding is at
    # most half a step of bfloat16 (2^-8 relative) of a partial sum no larger than `size`
    bound = (world - 1) * 2.0 ** -8 * size + 1e-30
    results = [{k: np.asarray(v) if isinstance(v, list) else v for k, v in res.items()} for res in results]
    for res in results:
        assert np.all(np.abs(res["SUM"] - exact) <= bound)
        assert np.all(np.abs(res["AVG"] - exact / world) <= (bound + 2.0 ** -8 * size) / world)
        np.testing.assert_array_equal(res["MIN"], np.min(terms, 0))
        np.testing.assert_array_equal(res["MAX"], np.max(terms, 0))
        np.testing.assert_array_equal(res["SUM"], results[0]["SUM"])      # every rank the same bits
        assert "bfloat16" in res["product"]
    parts = np.concatenate([res["reduce_scatter"] for res in results])
    assert np.all(np.abs(parts - exact / world) <= (bound + 2.0 ** -8 * size) / world)


def _ddp_bytes(rank: int, world: int, reduce_dtype: str | None) -> dict:
    """One step's gradients through DDP with and without the policy: the gradients and the payload bytes
    this rank sent while they were averaged."""
    import tg
    import tg.distributed as dist
    from tg import Tensor, nn
    transport = dist._group(None).transport
    out = {}
    for policy in (None, reduce_dtype):
        Tensor.manual_seed(0)            # the same model for both
        model = nn.Sequential(nn.Linear(64, 256), Tensor.relu, nn.Linear(256, 64))
        ddp = dist.DistributedDataParallel(model, reduce_dtype=getattr(tg, policy) if policy else None)
        rng = np.random.default_rng(rank)
        x = Tensor(rng.standard_normal((32, 64)).astype(np.float32))
        before = transport.sent_bytes
        ddp(x).square().mean().backward()
        [p.grad.realize() for p in ddp.parameters()]
        out[policy or "float32"] = {"bytes": transport.sent_bytes - before,
                                    "grads": [p.grad.numpy() for p in ddp.parameters()]}
    return out


def test_ddp_reduces_bf16_gradients_in_half_the_bytes():
    results = run_ranks(2, _ddp_bytes, "bfloat16", backend="tcp")
    for res in results:
        full, half = res["float32"], res["bfloat16"]
        assert 0.45 <= half["bytes"] / full["bytes"] <= 0.55, (half["bytes"], full["bytes"])
        for g32, g16 in zip(full["grads"], half["grads"]):
            scale = np.abs(g32).max() + 1e-30
            assert np.abs(g16 - g32).max() <= 2.0 ** -7 * scale
    for a, b in zip(results[0]["bfloat16"]["grads"], results[1]["bfloat16"]["grads"]):
        np.testing.assert_array_equal(a, b)


def _zero_steps(rank: int, world: int, reduce_dtype: str | None) -> dict:
    import tg
    import tg.distributed as dist
    from tg import Tensor, nn
    from tg.nn.state import get_parameters
    transport = dist._group(None).transport
    out = {}
    for policy in (None, reduce_dtype):
        Tensor.manual_seed(1)
        model = nn.Sequential(nn.Linear(32, 128), Tensor.relu, nn.Linear(128, 8))
        start = [p.numpy() for p in get_parameters(model)]
        opt = dist.ZeroOptimizer(get_parameters(model), nn.optim.SGD, lr=0.1,
                                 reduce_dtype=getattr(tg, policy) if policy else None)
        rng = np.random.default_rng(rank)
        before = transport.sent_bytes
        for _ in range(3):
            opt.zero_grad()
            x = Tensor(rng.standard_normal((16, 32)).astype(np.float32))
            model(x).square().mean().backward()
            opt.step()
        out[policy or "float32"] = {"bytes": transport.sent_bytes - before,
                                    "moved": [p.numpy() - p0 for p, p0 in zip(get_parameters(model), start)],
                                    "dtypes": sorted({str(m.dtype) for m in opt.masters})}
    return out


def test_zero_reduce_scatters_bf16_with_float32_master_shards():
    results = run_ranks(2, _zero_steps, "bfloat16", backend="tcp")
    for res in results:
        full, half = res["float32"], res["bfloat16"]
        # the gradients' reduce-scatter halves; the parameters' all-gather stays float32
        assert 0.7 <= half["bytes"] / full["bytes"] <= 0.8, (half["bytes"], full["bytes"])
        assert half["dtypes"] == ["dtypes.float32"]
        for d32, d16 in zip(full["moved"], half["moved"]):
            # three SGD steps: each update is the gradient's mean rounded to bfloat16 (and the gradients
            # of later steps follow the parameters that moved a little differently)
            assert np.abs(d16 - d32).max() <= 2.0 ** -6 * np.abs(d32).max()
    for a, b in zip(results[0]["bfloat16"]["moved"], results[1]["bfloat16"]["moved"]):
        np.testing.assert_array_equal(a, b)


def test_only_bf16_itself_travels_as_bfloat16():
    """Another two-byte record (or a plain V2) has BF16's dtype string: it is refused, not summed as
    bfloat16 words."""
    import tg.distributed as dist
    from tg.distributed.transport import wire
    dist.init_process_group()
    try:
        for other in (np.dtype("V2"), np.dtype([("count", "<i2")]), np.dtype([("bfloat16", ">u2")])):
            with pytest.raises(TypeError, match="cannot send a void16"):
                dist.all_reduce(np.zeros(4, other))
        dist.all_reduce(np.zeros(4, wire.BF16))
    finally:
        dist.destroy_process_group()


def test_a_reduce_dtype_other_than_a_float_is_an_error():
    import tg
    import tg.distributed as dist
    from tg import nn
    with pytest.raises(ValueError, match="reduce_dtype must be tg.bfloat16, tg.float16 or tg.float32"):
        dist.DistributedDataParallel(nn.Linear(2, 2), reduce_dtype=tg.int32)
    with pytest.raises(ValueError, match="ZeroOptimizer: reduce_dtype"):
        dist.ZeroOptimizer(tg.nn.state.get_parameters(nn.Linear(2, 2)), nn.optim.SGD, reduce_dtype="int8")
