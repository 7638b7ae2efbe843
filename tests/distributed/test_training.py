"""Data-parallel training end to end: DistributedDataParallel, ZeroOptimizer (ZeRO-2) and sharded
checkpoints, in real processes on loopback at 1 to 4 ranks.

Every distributed run is compared with a float64 numpy model of the same training on one process: a
5 -> 7 -> 3 MLP (relu, mean squared error) trained by torch-semantics SGD / Adam / AdamW on the global
batch of ROWS rows, which the ranks split between them. The ranks start from *different* random
weights, so the wrap-time broadcast from rank 0 is part of what is checked. SGD is in the mix because
Adam is almost blind to the scale of the gradient: a SUM where a mean belongs only shows under SGD.
"""
import json
import math
from typing import Any

import numpy as np
import pytest
from harness import run_ranks

import tg.distributed as dist
from tg import Tensor, TinyJit, dtypes, nn
from tg.nn.state import get_parameters, get_state_dict

ROWS = 12          # global batch: splits evenly over 1, 2, 3 and 4 ranks
LR = 0.01
TINY_BUCKET = 2e-5  # MiB: 20 bytes, so the 66 parameters span three buckets (see make_buckets)
OPTIMIZERS = {"sgd": nn.optim.SGD, "adam": nn.optim.Adam, "adamw": nn.optim.AdamW}
EXTRA = {"sampler": {"epoch": 1, "position": [3, 7]}, "note": "résumé"}


class MLP:
    def __init__(self, seed: int, sizes: tuple[int, int, int] = (5, 7, 3), dtype=None):
        Tensor.manual_seed(seed)
        self.l1 = nn.Linear(sizes[0], sizes[1], dtype=dtype)
        self.l2 = nn.Linear(sizes[1], sizes[2], dtype=dtype)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def batches(steps: int, micro: int = 1) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """steps x micro global batches (x (ROWS, 5), y (ROWS, 3)); the same on every rank."""
    rng = np.random.default_rng(7)
    return [[(rng.normal(size=(ROWS, 5)).astype(np.float32), rng.normal(size=(ROWS, 3)).astype(np.float32))
             for _ in range(micro)] for _ in range(steps)]


def rows_of(rank: int, world: int, batch: tuple[np.ndarray, np.ndarray], dtype=None) -> tuple[Tensor, Tensor]:
    """This rank's share of a global batch, as tensors."""
    n = ROWS // world
    x, y = (a[rank * n:(rank + 1) * n] for a in batch)
    return Tensor(x, dtype=dtype), Tensor(y, dtype=dtype)


def mse(model, x: Tensor, y: Tensor) -> Tensor:
    return ((model(x) - y) ** 2).mean()


def numpy_params(model) -> dict[str, np.ndarray]:
    return {k: v.numpy().astype(np.float64) for k, v in get_state_dict(model).items()}


def wrap(
    model: MLP, kind: str, name: str = "adam", kwargs: dict | None = None, bucket_mb: float = TINY_BUCKET
):
    """(what to call, optimizer) for training `kind` "plain" (one process), "ddp" or "zero"."""
    params, kwargs = get_parameters(model), kwargs or {}
    if kind == "zero":
        return model, dist.ZeroOptimizer(params, OPTIMIZERS[name], lr=LR, bucket_mb=bucket_mb, **kwargs)
    net = dist.DistributedDataParallel(model, bucket_mb=bucket_mb) if kind == "ddp" else model
    return net, OPTIMIZERS[name](params, lr=LR, **kwargs)


# ---------------------------------------------------------------- the numpy reference
def numpy_grads(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of mean((l2(relu(l1(x))) - y)**2) by hand."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    z1 = x @ p["l1.weight"].T + p["l1.bias"]                     # (B, 7)
    a1 = np.maximum(z1, 0.0)
    out = a1 @ p["l2.weight"].T + p["l2.bias"]                   # (B, 3)
    d_out = 2.0 * (out - y) / out.size
    d_z1 = (d_out @ p["l2.weight"]) * (z1 > 0)
    return {
        "l1.weight": d_z1.T @ x,
        "l1.bias": d_z1.sum(0),
        "l2.weight": d_out.T @ a1,
        "l2.bias": d_out.sum(0),
    }


def numpy_loss(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    out = np.maximum(x @ p["l1.weight"].T + p["l1.bias"], 0.0) @ p["l2.weight"].T + p["l2.bias"]
    return float(((out - y) ** 2).mean())


def reference(init: dict[str, np.ndarray], steps: list[list[tuple[np.ndarray, np.ndarray]]], name: str,
              kwargs: dict, lr: float = LR) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """One process, float64: each step sums the gradients of its micro-batches' mean losses, then
    applies torch's SGD (momentum) / Adam (L2 decay) / AdamW (decoupled decay). Returns the final
    parameters and the parameters before each step."""
    p = {k: v.astype(np.float64).copy() for k, v in init.items()}
    state = {k: {"buf": np.zeros_like(v), "m": np.zeros_like(v), "v": np.zeros_like(v)} for k, v in p.items()}
    b1, b2 = kwargs.get("betas", (0.9, 0.999))
    eps = kwargs.get("eps", 1e-8)
    wd = kwargs.get("weight_decay", 1e-2 if name == "adamw" else 0.0)
    before = []
    for t, micro in enumerate(steps, start=1):
        before.append(dict(p))
        grads = {k: sum(numpy_grads(p, x, y)[k] for x, y in micro) for k in p}
        for k, g in grads.items():
            s = state[k]
            if name == "sgd":   # the buffer starts at zero, so its first value is the first gradient
                s["buf"] = kwargs.get("momentum", 0.0) * s["buf"] + g
                p[k] = p[k] - lr * s["buf"]
                continue
            if name == "adamw":
                p[k] = p[k] * (1 - lr * wd)
            elif wd:
                g = g + wd * p[k]
            s["m"] = b1 * s["m"] + (1 - b1) * g
            s["v"] = b2 * s["v"] + (1 - b2) * g * g
            p[k] = p[k] - lr / (1 - b1 ** t) * s["m"] / (np.sqrt(s["v"]) / math.sqrt(1 - b2 ** t) + eps)
    return p, before


def max_diff(got: dict, want: dict) -> float:
    assert set(got) == set(want)
    return max(float(np.abs(np.asarray(got[k], np.float64) - want[k]).max()) for k in want)


def assert_ranks_agree(results: list[dict]) -> None:
    """Every rank ends with bit-identical parameters (they all apply the same averaged update)."""
    for r, res in enumerate(results[1:], start=1):
        for k in res:
            np.testing.assert_array_equal(
                res[k], results[0][k], err_msg=f"rank {r} differs from rank 0 in {k}"
            )


def test_numpy_reference_matches_tg_on_one_process():
    """The reference is only as good as its agreement with plain tg training on one process."""
    data = batches(3, micro=2)
    for name, kwargs in [("sgd", {"momentum": 0.9}), ("adam", {"weight_decay": 0.1}), ("adamw", {})]:
        model = MLP(seed=3)
        init = numpy_params(model)
        _, opt = wrap(model, "plain", name, kwargs)
        for micro in data:
            opt.zero_grad()
            for x, y in micro:
                mse(model, Tensor(x), Tensor(y)).backward()
            opt.step()
        want, _ = reference(init, data, name, kwargs)
        assert max_diff(numpy_params(model), want) < 1e-6, name
        assert max_diff(init, want) > 1e-2   # it trained


# ---------------------------------------------------------------- DistributedDataParallel
def ddp_train(rank: int, world: int, name: str, kwargs: dict, bucket_mb: float, steps: int) -> dict:
    model = MLP(seed=100 + rank)
    ddp, opt = wrap(model, "ddp", name, kwargs, bucket_mb)
    for (batch,) in batches(steps):
        opt.zero_grad()
        mse(ddp, *rows_of(rank, world, batch)).backward()
        opt.step()
    return {"params": numpy_params(model), "buckets": len(ddp.buckets)}


@pytest.mark.parametrize("world,backend,name,bucket_mb", [
    (2, "shm", "adam", TINY_BUCKET), (3, "shm", "adam", TINY_BUCKET), (3, "shm", "adam", 25.0),
    (3, "shm", "sgd", TINY_BUCKET), (2, "tcp", "adam", TINY_BUCKET), (3, "tcp", "sgd", 25.0)])
def test_ddp_equals_one_process_on_the_global_batch(world, backend, name, bucket_mb):
    kwargs = {"momentum": 0.9} if name == "sgd" else {}
    results = run_ranks(world, ddp_train, name, kwargs, bucket_mb, 3, backend=backend)
    want, _ = reference(numpy_params(MLP(seed=100)), batches(3), name, kwargs)
    assert_ranks_agree([r["params"] for r in results])
    assert max_diff(results[0]["params"], want) < 1e-5
    assert results[0]["buckets"] == (3 if bucket_mb == TINY_BUCKET else 1)
    # rank 1 started elsewhere: without the broadcast from rank 0 it could not land on rank 0's answer
    assert max_diff(numpy_params(MLP(seed=101)), numpy_params(MLP(seed=100))) > 0.1


def as_lists(rank: int, world: int, kind: str) -> dict:
    """ddp_train / zero_train with JSON-able results (the mpi harness sends them as JSON)."""
    out = ddp_train(rank, world, "adam", {}, TINY_BUCKET, 3) if kind == "ddp" else \
        zero_train(rank, world, "adam", {}, 1, 3)
    return {k: v.tolist() for k, v in out["params"].items()}


@pytest.mark.parametrize("backend", ["mpi", "ucx"])
@pytest.mark.parametrize("kind", ["ddp", "zero"])
def test_ddp_and_zero_on_every_backend(backend, kind):
    want, _ = reference(numpy_params(MLP(seed=100)), batches(3), "adam", {})
    results = [{k: np.array(v) for k, v in r.items()} for r in run_ranks(2, as_lists, kind, backend=backend)]
    assert_ranks_agree(results)
    assert max_diff(results[0], want) < 1e-5


def ddp_no_sync_train(rank: int, world: int, steps: int) -> dict:
    model = MLP(seed=100 + rank)
    ddp, opt = wrap(model, "ddp", "sgd", {"momentum": 0.9})
    names = get_state_dict(model)
    local = None
    for s, (first, second) in enumerate(batches(steps, micro=2)):
        opt.zero_grad()
        with ddp.no_sync():
            mse(ddp, *rows_of(rank, world, first)).backward()
        if s == 0:
            local = {k: p.grad.numpy() for k, p in names.items() if p.grad is not None}
        mse(ddp, *rows_of(rank, world, second)).backward()
        opt.step()
    return {"params": numpy_params(model), "local": local}


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_no_sync_accumulates_locally_then_averages(world):
    init = numpy_params(MLP(seed=100))
    data = batches(3, micro=2)
    results = run_ranks(world, ddp_no_sync_train, 3)
    # under no_sync each rank keeps the gradient of its own rows only
    n = ROWS // world
    for rank, res in enumerate(results):
        x, y = data[0][0]
        own = numpy_grads(init, x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n])
        assert max_diff(res["local"], own) < 1e-6, f"rank {rank}: no_sync gradient is not the local one"
    # sum over the 2 micro-batches of (mean over ranks of each rank's mean loss) = the sum of the
    # 2 micro-batches' mean losses over their concatenated rows
    want, _ = reference(init, data, "sgd", {"momentum": 0.9})
    assert_ranks_agree([r["params"] for r in results])
    assert max_diff(results[0]["params"], want) < 1e-5


def partly_used_train(rank: int, world: int, kind: str) -> dict:
    model = MLP(seed=100 + rank)
    net, opt = wrap(model, kind, "sgd")
    x, y = rows_of(rank, world, batches(1)[0][0])
    # odd ranks never reach l2: their l2 gradient is None and must count as zeros in the mean
    loss = mse(net, x, y) if rank % 2 == 0 else (net.l1(x).relu() ** 2).mean()
    loss.backward()
    opt.step()
    return numpy_params(model)


@pytest.mark.parametrize("kind", ["ddp", "zero"])
def test_parameter_without_gradient_on_some_ranks_gets_the_mean(kind):
    world, n = 3, ROWS // 3
    init = numpy_params(MLP(seed=100))
    results = run_ranks(world, partly_used_train, kind)
    x, y = batches(1)[0][0]
    grads = []
    for rank in range(world):
        xr, yr = x[rank * n:(rank + 1) * n].astype(np.float64), y[rank * n:(rank + 1) * n]
        if rank % 2 == 0:
            grads.append(numpy_grads(init, xr, yr))
            continue
        z1 = xr @ init["l1.weight"].T + init["l1.bias"]
        d_z1 = 2.0 * np.maximum(z1, 0.0) / z1.size                 # d mean(relu(z1)**2) / d z1
        grads.append(
            {
                "l1.weight": d_z1.T @ xr,
                "l1.bias": d_z1.sum(0),
                "l2.weight": np.zeros_like(init["l2.weight"]),
                "l2.bias": np.zeros_like(init["l2.bias"]),
            }
        )
    want = {k: init[k] - LR * sum(g[k] for g in grads) / world for k in init}
    assert_ranks_agree(results)
    assert max_diff(results[0], want) < 1e-6


# ---------------------------------------------------------------- ZeroOptimizer
def zero_train(rank: int, world: int, name: str, kwargs: dict, micro: int, steps: int) -> dict:
    model = MLP(seed=100 + rank)
    _, opt = wrap(model, "zero", name, kwargs)
    for batch in batches(steps, micro=micro):
        opt.zero_grad()
        for part in batch:
            mse(model, *rows_of(rank, world, part)).backward()
            assert all(p.grad is None for p in get_parameters(model)), "ZeRO-2 keeps no full gradient"
        opt.step()
    return {"params": numpy_params(model), "parts": [p["size"] for p in opt.shard_index()]}


@pytest.mark.parametrize("world,name,micro", [
    (2, "adam", 1), (3, "adamw", 1), (4, "adam", 1), (3, "sgd", 1),     # micro=2: two backward()s per step
    (2, "adam", 2), (3, "sgd", 2), (4, "adamw", 2),
    (1, "sgd", 1), (1, "adam", 2)])     # one rank: gradients computed into the shard itself, and added
def test_zero_equals_one_process_on_the_global_batch(world, name, micro):
    kwargs = {"momentum": 0.9} if name == "sgd" else {"weight_decay": 0.1} if name == "adamw" else {}
    data = batches(3, micro=micro)
    results = run_ranks(world, zero_train, name, kwargs, micro, 3)
    want, _ = reference(numpy_params(MLP(seed=100)), data, name, kwargs)
    assert_ranks_agree([r["params"] for r in results])
    assert max_diff(results[0]["params"], want) < 1e-5
    # tiny buckets of 24 (l2.bias 3 + l2.weight 21), 7 and 35 elements, each padded to a multiple of the
    # world size (a bucket closes once it holds TINY_BUCKET bytes)
    assert results[0]["parts"] == [-(-n // world) for n in (24, 7, 35)]


def grouped_train(rank: int, world: int, kind: str, add_later: bool, steps: int = 3) -> dict:
    """nanoGPT's configure_optimizers: AdamW with weights decayed and biases not (and a larger lr), the
    biases' group added after construction when add_later, and an lr write to one group mid-run."""
    from tg.distributed.optim import ZeroRedundancyOptimizer
    model = MLP(seed=100 + rank)
    groups = [{"params": [model.l1.weight, model.l2.weight], "weight_decay": 0.1},
              {"params": [model.l1.bias, model.l2.bias], "weight_decay": 0.0, "lr": LR * 3}]
    first = groups[:1] if add_later else groups
    if kind == "zero":
        opt = dist.ZeroOptimizer(first, nn.optim.AdamW, lr=LR, bucket_mb=TINY_BUCKET)
    elif kind == "zero1":
        opt = ZeroRedundancyOptimizer(first, nn.optim.AdamW, lr=LR)
    else:
        opt = nn.optim.AdamW(first, lr=LR)
    if add_later:
        opt.add_param_group(groups[1])
    net = dist.DistributedDataParallel(model) if kind == "zero1" and world > 1 else model
    for step, batch in enumerate(batches(steps)):
        opt.zero_grad()
        x, y = rows_of(rank, world, batch[0]) if kind != "plain" else rows_of(0, 1, batch[0])
        mse(net, x, y).backward()
        opt.step()
        if step == 0:
            opt.param_groups[1]["lr"] = LR / 2          # a scheduler's write reaches the right group
    return numpy_params(model)


@pytest.mark.parametrize("world,kind,add_later", [(2, "zero", False), (3, "zero", True), (1, "zero", True),
                                                  (2, "zero1", False), (3, "zero1", True)])
def test_zero_with_param_groups_equals_the_plain_optimizer(world, kind, add_later):
    """torch's ZeroRedundancyOptimizer takes param groups (and add_param_group): each group is packed
    into buckets of its own and stepped with its own options, as a plain AdamW with the same groups
    steps the global batch in one process."""
    want = grouped_train(0, 1, "plain", False)
    results = run_ranks(world, grouped_train, kind, add_later)
    assert_ranks_agree(results)
    assert max_diff(results[0], want) < 1e-5


def zero_state_bytes(rank: int, world: int, bucket_mb: float) -> dict:
    model = MLP(seed=rank, sizes=(101, 89, 13))
    params = get_parameters(model)
    _, zero = wrap(model, "zero", bucket_mb=bucket_mb)
    mse(model, Tensor.randn(ROWS, 101), Tensor.randn(ROWS, 13)).backward()
    zero.step()
    plain = nn.optim.Adam(params, lr=LR)

    def state_bytes(opt) -> int:
        return sum(v.nbytes for k, v in opt.flat_state_dict().items() if k.startswith("state."))
    return {"zero": state_bytes(zero), "plain": state_bytes(plain), "buckets": len(zero.buckets)}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_zero_optimizer_state_is_split_across_ranks(world):
    numel = 101 * 89 + 89 + 89 * 13 + 13                      # 10248 parameters
    total = 2 * 4 * numel                                     # Adam: two float32 moments each
    one_bucket = run_ranks(world, zero_state_bytes, 25.0)
    four_buckets = run_ranks(world, zero_state_bytes, 4e-5)
    for res in one_bucket + four_buckets:
        assert res["plain"] == total
    for res in one_bucket:
        assert res["buckets"] == 1 and res["zero"] == 2 * 4 * -(-numel // world)
    for res in four_buckets:
        # 42-byte buckets hold one parameter each (l2.bias, l2.weight, l1.bias, l1.weight), each padded
        assert res["buckets"] == 4
        assert res["zero"] == 2 * 4 * sum(-(-n // world) for n in (13, 89 * 13, 89, 101 * 89))
    for res in one_bucket + four_buckets:
        assert total / world <= res["zero"] <= 1.01 * total / world


def round_to_half(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to float16 or bfloat16 (to nearest even), back as float32."""
    values = np.asarray(values, np.float32)
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def zero_half_train(rank: int, world: int, dtype: str, steps: int, lr: float) -> dict:
    half = getattr(dtypes, dtype)
    model = MLP(seed=100 + rank, dtype=half)
    opt = dist.ZeroOptimizer(get_parameters(model), nn.optim.Adam, lr=lr, bucket_mb=TINY_BUCKET)
    for (batch,) in batches(steps):
        opt.zero_grad()
        mse(model, *rows_of(rank, world, batch, dtype=half)).backward()
        opt.step()
    return {"params": {k: v.numpy().astype(np.float32) for k, v in get_state_dict(model).items()},
            "dtypes": [str(v.dtype) for v in get_parameters(model)], "names": list(get_state_dict(model)),
            "index": opt.shard_index(), "masters": [m.numpy() for m in opt.masters],
            "master_dtypes": [str(m.dtype) for m in opt.masters]}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_zero_half_parameters_keep_float32_masters(dtype):
    world, lr = 3, 1e-4
    results = run_ranks(world, zero_half_train, dtype, 3, lr)
    init = numpy_params(MLP(seed=100, dtype=getattr(dtypes, dtype)))
    masters = {k: np.full(v.size, np.nan, np.float32) for k, v in init.items()}
    for res in results:
        assert set(res["master_dtypes"]) == {str(dtypes.float32)}
        assert set(res["dtypes"]) == {str(getattr(dtypes, dtype))}
        for part in res["index"]:
            for param, first, length, offset in part["pieces"]:
                masters[res["names"][param]][first:first + length] = \
                    res["masters"][part["part"]][offset:offset + length]
    assert not any(np.isnan(m).any() for m in masters.values()), "the shards do not cover every parameter"
    for res in results:   # every rank's parameters are the masters rounded to the parameters' dtype
        for k, p in res["params"].items():
            np.testing.assert_array_equal(p.reshape(-1), round_to_half(masters[k], dtype), err_msg=k)
    # the masters hold what the half type cannot: 1e-4 steps are below half an ulp for most weights
    assert any((m != round_to_half(m, dtype)).any() for m in masters.values())
    data = [[(round_to_half(x, dtype), round_to_half(y, dtype)) for x, y in b] for b in batches(3)]
    want, _ = reference(init, data, "adam", {}, lr=lr)
    got = {k: masters[k].reshape(want[k].shape) for k in want}
    assert max_diff(got, want) < 2e-5
    assert max_diff(init, want) > 2e-4


# ---------------------------------------------------------------- inside TinyJit
def count_collectives(kinds: list[str]) -> None:
    """Append the kind of every data collective the default group runs from now on to kinds."""
    group = dist._group(None)
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        method = getattr(group, kind)
        setattr(group, kind, lambda *args, kind=kind, method=method: (kinds.append(kind), method(*args))[1])


def jit_train(rank: int, world: int, kind: str, steps: int) -> dict:
    out = {}
    kinds: list[str] = []
    count_collectives(kinds)
    for mode in ("eager", "jit"):
        model = MLP(seed=100 + rank)
        net, opt = wrap(model, kind)
        calls = []

        def step(x: Tensor, y: Tensor, net=net, opt=opt) -> Tensor:
            opt.zero_grad()
            loss = mse(net, x, y)
            loss.backward()
            opt.step()
            return loss.realize()
        run = TinyJit(step) if mode == "jit" else step
        losses = []
        for (batch,) in batches(steps):
            kinds.clear()
            losses.append(run(*rows_of(rank, world, batch)).item())
            calls.append({k: kinds.count(k) for k in sorted(set(kinds))})
        buckets = len(opt.buckets if kind == "zero" else net.buckets)
        out[mode] = {"params": numpy_params(model), "losses": losses, "calls": calls, "buckets": buckets}
    return out


@pytest.mark.parametrize("kind,world", [("ddp", 2), ("zero", 3)])
def test_training_step_under_tinyjit_equals_eager(kind, world):
    steps = 5   # call 2 captures, calls 3-5 replay the kernels and the recorded collectives
    results = run_ranks(world, jit_train, kind, steps)
    data = batches(steps)
    want, before = reference(numpy_params(MLP(seed=100)), data, "adam", {})
    for mode in ("eager", "jit"):
        assert_ranks_agree([r[mode]["params"] for r in results])
        assert max_diff(results[0][mode]["params"], want) < 1e-5, mode
    assert max_diff(results[0]["jit"]["params"], results[0]["eager"]["params"]) < 1e-6
    # each rank's loss is on its own rows, computed before the step's update
    n = ROWS // world
    for rank, res in enumerate(results):
        own = [numpy_loss(p, x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n])
               for p, ((x, y),) in zip(before, data)]
        for mode in ("eager", "jit"):
            np.testing.assert_allclose(res[mode]["losses"], own, rtol=1e-5, err_msg=f"rank {rank} {mode}")
    # every step, replays included, moves each bucket's gradients once, plus one small all_reduce of a
    # bit per parameter (which got a gradient on some rank: torch's DDP all-reduces its local_used_map
    # too); ZeRO-2 then gathers every bucket's updated part in one coalesced all-gather (its latency
    # cannot hide behind backward)
    for mode in ("eager", "jit"):
        buckets = results[0][mode]["buckets"]
        assert buckets == 3, "TINY_BUCKET should split the MLP into 3 buckets"
        per_step = {"all_reduce": buckets + 1} if kind == "ddp" else \
            {"all_gather": 1, "all_reduce": 1, "reduce_scatter": buckets}
        assert results[0][mode]["calls"] == [per_step] * steps, mode


# ---------------------------------------------------------------- checkpoints
def checkpoint_run(rank: int, world: int, directory: str, kind: str, phase: str, keep: int = 2) -> dict:
    """phase "first": train steps 0-1 from scratch and save as step 2; "resume": start from other
    random weights, load the newest checkpoint, train steps 2-3 and save as step 4."""
    model = MLP(seed=200 + rank + (50 if phase == "resume" else 0))
    net, opt = wrap(model, kind)
    meta = resumed_steps(rank, world, net, opt, directory, phase, extra=EXTRA, keep=keep)
    return {"params": numpy_params(model), "meta": json.loads(json.dumps(meta))}


def resumed_steps(rank: int, world: int, net: Any, opt: Any, directory: str, phase: str,
                  **save: Any) -> dict | None:
    """Two training steps from where the newest checkpoint in directory left off ("resume") or from
    step 0 ("first"), then a checkpoint of them; returns the loaded checkpoint's metadata."""
    meta = dist.load_checkpoint(directory, net, opt) if phase == "resume" else None
    start = meta["step"] if meta else 0
    for (batch,) in batches(4)[start:start + 2]:
        opt.zero_grad()
        mse(net, *rows_of(rank, world, batch)).backward()
        opt.step()
    dist.save_checkpoint(directory, start + 2, net, opt, **save)
    return meta


@pytest.mark.parametrize("save_world,load_world", [(2, 3), (2, 1), (4, 2)])
def test_zero_checkpoint_resumes_at_another_world_size(tmp_path, save_world, load_world):
    directory = str(tmp_path / "ckpt")
    first = run_ranks(save_world, checkpoint_run, directory, "zero", "first")
    assert dist.latest_checkpoint(directory) == tmp_path / "ckpt" / "step-00000002"
    shards = sorted(p.name for p in (tmp_path / "ckpt" / "step-00000002").glob("optim-*"))
    assert shards == [f"optim-{r:05d}-of-{save_world:05d}.safetensors" for r in range(save_world)]
    resumed = run_ranks(load_world, checkpoint_run, directory, "zero", "resume")
    meta = resumed[0]["meta"]
    assert (meta["step"], meta["world_size"], meta["extra"]) == (2, save_world, EXTRA)
    init = numpy_params(MLP(seed=200))
    after_two, _ = reference(init, batches(2), "adam", {})
    assert max_diff(first[0]["params"], after_two) < 1e-5
    want, _ = reference(init, batches(4), "adam", {})
    assert_ranks_agree([r["params"] for r in resumed])
    assert max_diff(resumed[0]["params"], want) < 1e-5


def grouped_checkpoint_run(rank: int, world: int, directory: str, phase: str) -> dict:
    """checkpoint_run with nanoGPT's two groups (decayed weights; biases undecayed, at another lr that a
    scheduler's write after the first step changes): the groups' options come back from the checkpoint."""
    model = MLP(seed=200 + rank + (50 if phase == "resume" else 0))
    groups = [{"params": [model.l1.weight, model.l2.weight], "weight_decay": 0.1},
              {"params": [model.l1.bias, model.l2.bias], "weight_decay": 0.0, "lr": LR * 3}]
    opt = dist.ZeroOptimizer(groups, nn.optim.AdamW, lr=LR, bucket_mb=TINY_BUCKET)
    if phase == "first":
        opt.param_groups[1]["lr"] = LR / 2
    resumed_steps(rank, world, model, opt, directory, phase)
    return {"params": numpy_params(model), "lrs": [g["lr"] for g in opt.param_groups]}


def grouped_plain(steps: int) -> dict:
    model = MLP(seed=200)
    groups = [{"params": [model.l1.weight, model.l2.weight], "weight_decay": 0.1},
              {"params": [model.l1.bias, model.l2.bias], "weight_decay": 0.0, "lr": LR / 2}]
    opt = nn.optim.AdamW(groups, lr=LR)
    for (batch,) in batches(4)[:steps]:
        opt.zero_grad()
        mse(model, *rows_of(0, 1, batch)).backward()
        opt.step()
    return numpy_params(model)


@pytest.mark.parametrize("save_world,load_world", [(2, 3), (3, 1)])
def test_zero_with_param_groups_resumes_at_another_world_size(tmp_path, save_world, load_world):
    directory = str(tmp_path / "ckpt")
    run_ranks(save_world, grouped_checkpoint_run, directory, "first")
    resumed = run_ranks(load_world, grouped_checkpoint_run, directory, "resume")
    assert_ranks_agree([r["params"] for r in resumed])
    assert np.float32(resumed[0]["lrs"]).tolist() == np.float32([LR, LR / 2]).tolist()   # each group's, saved
    assert max_diff(resumed[0]["params"], grouped_plain(4)) < 1e-5


def load_into_one_group(rank: int, world: int, directory: str) -> str:
    model = MLP(seed=300)              # the parameters in the grouped run's order, in one group
    params = [model.l1.weight, model.l2.weight, model.l1.bias, model.l2.bias]
    opt = dist.ZeroOptimizer(params, nn.optim.AdamW, lr=LR, bucket_mb=TINY_BUCKET)
    try:
        dist.load_checkpoint(directory, model, opt)
    except ValueError as e:
        return str(e)
    return ""


def test_zero_shards_of_other_groups_are_refused_by_name(tmp_path):
    directory = str(tmp_path / "ckpt")
    run_ranks(2, grouped_checkpoint_run, directory, "first")
    (msg,) = run_ranks(1, load_into_one_group, directory)
    assert "saved with 2 parameter group(s), this ZeroOptimizer has 1" in msg


def test_ddp_checkpoint_resumes_and_ignores_a_half_written_save(tmp_path):
    directory = tmp_path / "ckpt"
    run_ranks(2, checkpoint_run, str(directory), "ddp", "first")
    # a crash while saving step 4 left its partial directory behind, without meta.json
    crashed = directory / "step-00000004.partial"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"\x00" * 10)
    assert dist.latest_checkpoint(directory) == directory / "step-00000002"
    resumed = run_ranks(2, checkpoint_run, str(directory), "ddp", "resume", 1)
    assert (resumed[0]["meta"]["step"], resumed[0]["meta"]["extra"]) == (2, EXTRA)
    want, _ = reference(numpy_params(MLP(seed=200)), batches(4), "adam", {})
    assert_ranks_agree([r["params"] for r in resumed])
    assert max_diff(resumed[0]["params"], want) < 1e-5
    # the second save replaced the leftover and, with keep=1, pruned step 2
    assert dist.latest_checkpoint(directory) == directory / "step-00000004"
    assert sorted(p.name for p in directory.iterdir()) == ["latest", "step-00000004"]
    assert sorted(p.name for p in (directory / "step-00000004").iterdir()) == \
        ["meta.json", "model.safetensors", "optim.safetensors"]


def test_load_checkpoint_without_a_checkpoint_returns_none(tmp_path):
    model = MLP(seed=0)
    opt = dist.ZeroOptimizer(get_parameters(model), nn.optim.Adam)
    before = numpy_params(model)
    assert dist.load_checkpoint(tmp_path, model, opt) is None
    assert dist.load_checkpoint(tmp_path / "missing", model, opt) is None
    assert dist.latest_checkpoint(tmp_path) is None
    assert max_diff(numpy_params(model), before) == 0


def test_latest_naming_an_incomplete_checkpoint_is_an_error(tmp_path):
    (tmp_path / "step-00000005").mkdir()
    (tmp_path / "latest").write_text("step-00000005")
    with pytest.raises(FileNotFoundError, match="meta.json"):
        dist.latest_checkpoint(tmp_path)


def one_process_checkpoint(directory, model, zero: bool = True) -> None:
    params = get_parameters(model)
    opt = dist.ZeroOptimizer(params, nn.optim.Adam) if zero else nn.optim.Adam(params)
    mse(model, Tensor.randn(4, 5), Tensor.randn(4, 3)).backward()
    opt.step()
    dist.save_checkpoint(directory, 1, model, opt)


def test_checkpoint_of_another_model_raises(tmp_path):
    one_process_checkpoint(tmp_path, MLP(seed=0))
    wider = MLP(seed=0, sizes=(5, 8, 3))
    with pytest.raises(ValueError, match="shape"):
        dist.load_checkpoint(tmp_path, wider, dist.ZeroOptimizer(get_parameters(wider), nn.optim.Adam))
    # same model, but the optimizer covers other parameters than the one that saved the shards
    model = MLP(seed=0)
    with pytest.raises(ValueError, match="changed since the checkpoint"):
        dist.load_checkpoint(tmp_path, model, dist.ZeroOptimizer(get_parameters(model.l2), nn.optim.Adam))
    # ZeRO shards into a plain optimizer, and a plain optimizer's state into ZeRO
    with pytest.raises(ValueError, match="ZeroOptimizer"):
        dist.load_checkpoint(tmp_path, model, nn.optim.Adam(get_parameters(model)))
    plain = tmp_path / "plain"
    one_process_checkpoint(plain, MLP(seed=0), zero=False)
    with pytest.raises(ValueError, match="plain optimizer"):
        dist.load_checkpoint(plain, model, dist.ZeroOptimizer(get_parameters(model), nn.optim.Adam))


def test_checkpoint_restores_the_random_stream(tmp_path):
    one_process_checkpoint(tmp_path, MLP(seed=0))
    after_save = Tensor.rand(6).numpy()
    Tensor.manual_seed(12345)
    dist.load_checkpoint(tmp_path, MLP(seed=1))
    np.testing.assert_array_equal(Tensor.rand(6).numpy(), after_save)


# ---------------------------------------------------------------- misuse
def test_misuse_raises_with_a_clear_message():
    params = get_parameters(MLP(seed=0))
    for bad in (object, nn.optim.Adam(params), lambda ps, **kw: nn.optim.Adam(ps, **kw), "Adam"):
        with pytest.raises(TypeError, match="optimizer_class"):
            dist.ZeroOptimizer(params, bad)
    for size in (0, -1.0):
        with pytest.raises(ValueError, match="bucket_mb"):
            dist.ZeroOptimizer(params, nn.optim.Adam, bucket_mb=size)
        with pytest.raises(ValueError, match="bucket_mb"):
            dist.DistributedDataParallel(MLP(seed=0), bucket_mb=size)
    frozen = MLP(seed=0)
    for p in get_parameters(frozen):
        p.requires_grad_(False)
    for model in (frozen, {}, {"scale": Tensor([1.0, 2.0])}):
        with pytest.raises(ValueError, match="requires_grad"):
            dist.DistributedDataParallel(model)


def unrelated_backward(rank: int, world: int) -> list:
    model = MLP(seed=100 + rank)
    _, opt = wrap(model, "ddp")
    mse(model, *rows_of(rank, world, batches(1)[0][0])).backward()
    opt.step()
    opt.zero_grad()
    other = Tensor([1.0, 2.0], requires_grad=True)
    (other * other).sum().backward()          # reaches no parameter of the model: no sync, no zeros
    return [p.grad is None for p in get_parameters(model)]


def test_ddp_ignores_a_backward_that_does_not_reach_the_model():
    assert all(all(r) for r in run_ranks(2, unrelated_backward))


def test_saves_keep_later_steps_of_another_run_and_survive_resaving(tmp_path):
    model = MLP(seed=1)
    opt = nn.optim.Adam(get_parameters(model), lr=0.1)
    for step in (900, 1000, 100, 200, 200):       # an older, longer run left steps 900 and 1000
        dist.save_checkpoint(tmp_path, step, model, opt, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "step-00000100", "step-00000200", "step-00000900", "step-00001000"]
    assert (tmp_path / "latest").read_text() == "step-00000200"
    (tmp_path / "step-00000300.partial").mkdir()   # a save cut short
    dist.save_checkpoint(tmp_path, 400, model, opt, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "step-00000200", "step-00000400", "step-00000900", "step-00001000"]
    assert dist.load_checkpoint(tmp_path, model, opt)["step"] == 400
