"""torch's distributed surface on tg: tg.nn.parallel.DistributedDataParallel, tg.distributed.optim.
ZeroRedundancyOptimizer (ZeRO-1), torch's backend names and tg.utils.checkpoint.

Training runs are checked against test_training's float64 numpy model of the same training on one
process (the MLP, batches and reference are that file's).
"""
import warnings

import numpy as np
import pytest
from harness import run_ranks
from test_training import (
    LR,
    MLP,
    assert_ranks_agree,
    batches,
    max_diff,
    mse,
    numpy_params,
    reference,
    resumed_steps,
    rows_of,
)

import tg.distributed as dist
from tg import Tensor, nn
from tg.distributed import startup
from tg.distributed.optim import ZeroRedundancyOptimizer
from tg.distributed.startup import _choose_backend
from tg.nn.parallel import DistributedDataParallel
from tg.nn.state import get_parameters
from tg.utils.checkpoint import checkpoint, checkpoint_sequential


# ---------------------------------------------------------------- DDP + ZeroRedundancyOptimizer
def zero1_train(rank: int, world: int, wrap_ddp: bool, replace_grads: bool, steps: int) -> dict:
    model = MLP(seed=100 + rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = DistributedDataParallel(model, device_ids=[0], output_device=0, bucket_cap_mb=1e-4) \
            if wrap_ddp else model
        opt = ZeroRedundancyOptimizer(get_parameters(model), optimizer_class=nn.optim.AdamW, lr=LR)
        scatters = []
        collective = opt._collective
        opt._collective = lambda kind, out, inp: (scatters.append(kind), collective(kind, out, inp))[1]
        grads_kept = True
        for (batch,) in batches(steps):
            opt.zero_grad()
            mse(net, *rows_of(rank, world, batch)).backward()
            grads_kept &= all(p.grad is not None for p in get_parameters(model))
            if replace_grads:
                for p in get_parameters(model):
                    p.grad = p.grad * 1.0
            opt.step()
    opt.consolidate_state_dict(to=0)
    state = opt.state_dict()
    return {"params": numpy_params(model), "grads_kept": grads_kept,
            "reduce_scatters": scatters.count("reduce_scatter"),
            "warnings": [str(w.message) for w in caught],
            "state": numpy_state(state)}


def numpy_state(sd: dict) -> dict:
    """An optimizer state dict as flat dotted names of numpy arrays: torch's nested shape (a plain
    optimizer's, or ZeroRedundancyOptimizer's once consolidated) or a shard's flat names."""
    if isinstance(sd.get("state"), dict):
        flat = {f"state.{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items()}
        flat.update({f"param_groups.{g}.{k}": v for g, group in enumerate(sd["param_groups"])
                     for k, v in group.items()})
        sd = flat
    return {k: v.numpy() if isinstance(v, Tensor) else np.asarray(v) for k, v in sd.items()}


def plain_adamw_state(steps: int) -> dict:
    """One process, the whole batch: AdamW's state_dict after `steps` steps."""
    model = MLP(seed=100)
    opt = nn.optim.AdamW(get_parameters(model), lr=LR)
    for (batch,) in batches(steps):
        opt.zero_grad()
        mse(model, Tensor(batch[0]), Tensor(batch[1])).backward()
        opt.step()
    return numpy_state(opt.state_dict())


@pytest.mark.parametrize("wrap_ddp,replace_grads", [(True, False), (False, False), (True, True)])
def test_ddp_with_zero_redundancy_optimizer_equals_one_process(wrap_ddp, replace_grads):
    results = run_ranks(2, zero1_train, wrap_ddp, replace_grads, 3)
    want, _ = reference(numpy_params(MLP(seed=100)), batches(3), "adamw", {})
    assert_ranks_agree([r["params"] for r in results])
    assert max_diff(results[0]["params"], want) < 1e-5
    assert all(r["grads_kept"] for r in results), "ZeRO-1 keeps the full gradients until zero_grad"
    # under DDP the averaged gradients are sliced, not reduced again, unless .grad was replaced
    assert results[0]["reduce_scatters"] == (0 if wrap_ddp and not replace_grads else 3)
    said = " ".join(results[0]["warnings"])
    assert ("device_ids" in said) == wrap_ddp
    assert ("reduced again" in said) == replace_grads
    # consolidated on rank 0: every parameter's state, as a plain AdamW over the whole batch has it
    whole, shard = results[0]["state"], results[1]["state"]
    plain = plain_adamw_state(3)
    assert sorted(whole) == sorted(plain)
    for k in plain:
        np.testing.assert_allclose(whole[k], plain[k], rtol=1e-4, atol=1e-6, err_msg=k)
    assert "master.0" in shard and "state.0.exp_avg" in shard   # rank 1: its own shard still


def test_consolidated_state_loads_back_on_one_rank():
    dist.init_process_group()
    try:
        model = MLP(seed=3)
        opt = ZeroRedundancyOptimizer(get_parameters(model), nn.optim.Adam, lr=0.01)
        for (batch,) in batches(2):
            opt.zero_grad()
            mse(model, Tensor(batch[0]), Tensor(batch[1])).backward()
            opt.step()
        shard = {k: v.numpy() for k, v in opt.shard_state_dict().items()}
        assert opt.state_dict().keys() == shard.keys()         # before consolidating: the shard
        opt.consolidate_state_dict()
        whole = opt.state_dict()
        assert list(whole) == ["state", "param_groups"]                  # torch's shape
        assert list(whole["state"][3]) == ["exp_avg", "exp_avg_sq", "step"]
        assert whole["param_groups"][0]["params"] == list(range(len(opt.params)))
        again = ZeroRedundancyOptimizer(get_parameters(model), nn.optim.Adam, lr=0.5)
        again.load_state_dict(whole)
        for k, v in again.shard_state_dict().items():
            np.testing.assert_allclose(v.numpy(), shard[k], rtol=1e-6, err_msg=k)
        assert again.lr == pytest.approx(0.01)
        opt.step()
        assert "master.0" in opt.state_dict()                  # a step drops the consolidated copy
        with pytest.raises(ValueError, match="to must be a rank"):
            opt.consolidate_state_dict(to=1)
    finally:
        dist.destroy_process_group()


def test_ignored_torch_arguments_warn_once_and_do_not_crash():
    dist.init_process_group()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = DistributedDataParallel(nn.Linear(3, 1), device_ids=None, find_unused_parameters=True,
                                            gradient_as_bucket_view=True, static_graph=True,
                                            check_reduction=True, mixed_precision=None)
            DistributedDataParallel(nn.Linear(3, 1), check_reduction=True)
            ZeroRedundancyOptimizer(model.parameters(), nn.optim.SGD, parameters_as_bucket_view=True,
                                    overlap_with_ddp=True, lr=0.1)
        said = [str(w.message) for w in caught]
        assert sum("check_reduction" in s for s in said) <= 1
        assert not any("device_ids" in s or "mixed_precision" in s for s in said)
        assert model.module.weight.shape == (1, 3)
    finally:
        dist.destroy_process_group()


def broadcast_buffers_run(rank: int, world: int) -> list:
    model = MLP(seed=rank)
    model.count = Tensor([float(rank + 1)])      # a buffer: not trained, differs per rank
    net = DistributedDataParallel(model)
    model.count.assign(Tensor([float(10 * (rank + 1))])).realize()
    net(Tensor.ones(2, 5))
    return model.count.tolist()


def test_broadcast_buffers_copies_rank_0s_buffers_before_forward():
    assert run_ranks(2, broadcast_buffers_run) == [[10.0], [10.0]]


# ---------------------------------------------------------------- backend names
@pytest.mark.parametrize("name,want", [("gloo", "tcp"), ("nccl", "tcp"), ("GLOO", "tcp"), ("Nccl", "tcp"),
                                       ("cpu:gloo,cuda:nccl", "tcp"), ("tcp", "tcp"), ("MPI", "mpi")])
def test_torch_backend_names_map_to_tg_backends(name, want):
    assert _choose_backend(name) == want


def test_unknown_backend_names_the_accepted_ones():
    with pytest.raises(ValueError, match="nccl2.*tcp, mpi, ucx.*gloo, nccl"):
        _choose_backend("nccl2")
    with pytest.raises(ValueError, match="choose one of"):
        _choose_backend("cpu:gloo,cuda:mpi")      # two tg backends at once


def test_backend_mapping_is_printed_once_at_debug_1(monkeypatch, capsys):
    monkeypatch.setenv("DEBUG", "1")
    monkeypatch.setattr(startup, "_MAPPED", set())
    _choose_backend("nccl")
    _choose_backend("nccl")
    out = capsys.readouterr().out
    assert out.count("backend 'nccl' -> tg's tcp") == 1
    dist.init_process_group(backend="gloo")
    try:
        assert dist.get_backend() == "tcp"
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- tg.utils.checkpoint
@pytest.mark.parametrize("use_reentrant", [False, True, None])
def test_utils_checkpoint_accepts_use_reentrant(use_reentrant):
    layer = nn.Linear(4, 3)

    def fn(t: Tensor) -> Tensor:
        return layer(t).relu() * 2

    data = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    x = Tensor(data, requires_grad=True)
    plain = fn(x)
    plain.sum().backward()
    want = plain.numpy(), x.grad.numpy(), layer.weight.grad.numpy()
    layer.weight.grad = layer.bias.grad = None
    x2 = Tensor(data, requires_grad=True)
    got = checkpoint(fn, x2, use_reentrant=use_reentrant)
    got.sum().backward()
    for a, b in zip((got.numpy(), x2.grad.numpy(), layer.weight.grad.numpy()), want):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # tg.nn.checkpoint takes it too (it used to reach fn and crash)
    assert nn.checkpoint.checkpoint(fn, x2, use_reentrant=use_reentrant).shape == (5, 3)


def test_utils_checkpoint_sequential_in_torchs_argument_order():
    layers = [nn.Linear(3, 3), Tensor.relu, nn.Linear(3, 1)]
    x = Tensor.ones(2, 3)
    want = layers[2](layers[1](layers[0](x))).numpy()
    got = checkpoint_sequential(layers, 2, x, use_reentrant=False, preserve_rng_state=False)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def zero2_under_ddp(rank: int, world: int, steps: int) -> dict:
    model = MLP(seed=100 + rank)
    net = dist.DistributedDataParallel(model, bucket_mb=1e-4)
    opt = dist.ZeroOptimizer(get_parameters(model), nn.optim.AdamW, lr=LR)
    kinds = []
    collective = opt._collective
    opt._collective = lambda kind, out, inp: (kinds.append(kind), collective(kind, out, inp))[1]
    for (batch,) in batches(steps):
        opt.zero_grad()
        mse(net, *rows_of(rank, world, batch)).backward()
        opt.step()
    return {"params": numpy_params(model), "reduce_scatters": kinds.count("reduce_scatter")}


def test_zero_optimizer_under_ddp_does_not_reduce_twice():
    results = run_ranks(2, zero2_under_ddp, 3)
    want, _ = reference(numpy_params(MLP(seed=100)), batches(3), "adamw", {})
    assert_ranks_agree([r["params"] for r in results])
    assert max_diff(results[0]["params"], want) < 1e-5
    assert results[0]["reduce_scatters"] == 0


def zero1_checkpoint(rank: int, world: int, directory: str, phase: str) -> dict:
    model = MLP(seed=300 + rank + (50 if phase == "resume" else 0))
    net = DistributedDataParallel(model)
    opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=nn.optim.AdamW, lr=LR)
    resumed_steps(rank, world, net, opt, directory, phase)
    return numpy_params(model)


def test_zero_redundancy_optimizer_checkpoints_reshard(tmp_path):
    """tg's sharded checkpoints work with ZeroRedundancyOptimizer: saved at 2 ranks, resumed at 1."""
    directory = str(tmp_path / "ckpt")
    run_ranks(2, zero1_checkpoint, directory, "first")
    (resumed,) = run_ranks(1, zero1_checkpoint, directory, "resume")
    want, _ = reference(numpy_params(MLP(seed=300)), batches(4), "adamw", {})
    assert max_diff(resumed, want) < 1e-5
