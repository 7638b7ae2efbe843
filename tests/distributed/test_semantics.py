"""DDP and ZeRO against torch's documented semantics, in real processes over the default transport.

torch's rules, each a scenario below: an optimizer steps only parameters whose `.grad` is set, so a
frozen parameter (requires_grad=False) and one no rank used keep their values (no weight decay, no
momentum) and DDP leaves their `.grad` None; whatever reads the gradients between backward and
step (clip_grad_norm_, clip_grad_value_) sees the gradients of the whole model, so clipping gives the
result of unsharded training and returns the global norm; a tensor used twice in the forward gets the
sum of both uses; several backward()s before a step accumulate; a parameter written between steps
steps from the written value. In every scenario the ranks split one global batch, and the result
must equal a one-process run of the plain optimizer on the joined batch (tested against numpy and
torch in tests/nn), bit-identical on every rank.

Each (kind, world) runs every scenario in one set of processes (cached per module), so each test
costs only its share of one launch.
"""
import numpy as np
import pytest
from harness import run_ranks

import tg
import tg.distributed as dist
from tg import Tensor, nn
from tg.distributed.optim import ZeroRedundancyOptimizer
from tg.nn.state import get_parameters, get_state_dict

ROWS = 12             # global batch: splits evenly over 1, 2 and 3 ranks
TINY_BUCKET = 4e-5    # MiB (about 40 bytes): several buckets per model
STEPS = 3
KINDS = ["ddp", "zero", "zero1"]    # DDP + plain optimizer, ZeroOptimizer (ZeRO-2), DDP + ZeRO-1


class Net:
    """frozen (requires_grad=False) -> l1 -> relu -> l2; `unused` is never called."""

    def __init__(self, seed: int):
        Tensor.manual_seed(seed)
        self.frozen = nn.Linear(5, 5)
        for p in get_parameters(self.frozen):
            p.requires_grad_(False)
        self.l1 = nn.Linear(5, 7)
        self.l2 = nn.Linear(7, 3)
        self.unused = nn.Linear(3, 2)

    def __call__(self, x: Tensor, tied: bool = False) -> Tensor:
        h = self.l1(self.frozen(x)).relu()
        if tied:           # l1 used a second time: its gradient is the sum of both uses
            h = self.l1(h[:, :5]).relu()
        return self.l2(h)


def data(steps: int, micro: int) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(11)

    def pair() -> tuple[np.ndarray, np.ndarray]:
        x, y = rng.normal(size=(ROWS, 5)), 3 * rng.normal(size=(ROWS, 3))
        return x.astype(np.float32), y.astype(np.float32)
    return [[pair() for _ in range(micro)] for _ in range(steps)]


def values(model: Net) -> dict[str, list]:
    return {k: v.numpy().tolist() for k, v in get_state_dict(model).items()}


def wrapped(model: Net, kind: str, optimizer: str, kwargs: dict):
    """(what to call, optimizer, the DDP wrapper or None) for kind plain / ddp / zero / zero1."""
    cls = {"sgd": nn.optim.SGD, "adamw": nn.optim.AdamW}[optimizer]
    params = get_parameters(model)
    if kind == "zero":
        return model, dist.ZeroOptimizer(params, cls, lr=0.05, bucket_mb=TINY_BUCKET, **kwargs), None
    if kind == "plain":
        return model, cls(params, lr=0.05, **kwargs), None
    ddp = dist.DistributedDataParallel(model, bucket_mb=TINY_BUCKET)
    if kind == "zero1":
        return ddp, ZeroRedundancyOptimizer(params, cls, lr=0.05, **kwargs), ddp
    return ddp, cls(params, lr=0.05, **kwargs), ddp


SCENARIOS = {
    # name: (optimizer, its options, micro-batches per step, what happens between backward and step)
    "adamw_decay": ("adamw", {"weight_decay": 0.5}, 1, None),
    "sgd_momentum_decay": ("sgd", {"momentum": 0.9, "weight_decay": 0.5}, 1, None),
    "clip_norm": ("sgd", {}, 1, "clip_norm"),
    "clip_norm_inf": ("adamw", {"weight_decay": 0.1}, 1, "clip_norm_inf"),
    "clip_value": ("sgd", {"momentum": 0.5}, 1, "clip_value"),
    "clip_some": ("sgd", {}, 1, "clip_some"),     # only l1's gradients: pieces of the shards
    "clip_accumulated": ("sgd", {}, 2, "clip_norm"),
    "tied": ("adamw", {}, 1, "tied"),
    "accumulate": ("adamw", {"weight_decay": 0.1}, 3, None),
    "written_between_steps": ("sgd", {"momentum": 0.9}, 1, "write"),
}


def train(rank: int, world: int, kind: str, scenario: str) -> dict:
    """One scenario on this rank's share of each global batch (world 1, kind plain: the reference)."""
    optimizer, kwargs, micro, extra = SCENARIOS[scenario]
    model = Net(seed=100 + rank)      # ranks start apart: the wrap-time broadcast is part of the test
    net, opt, ddp = wrapped(model, kind, optimizer, kwargs)
    n = ROWS // world
    norms, grads_none = [], []
    for s, batch in enumerate(data(STEPS, micro)):
        opt.zero_grad()
        for x, y in batch:
            xs, ys = Tensor(x[rank * n:(rank + 1) * n]), Tensor(y[rank * n:(rank + 1) * n])
            (((net(xs, tied=extra == "tied") - ys) ** 2).mean() / micro).backward()
        grads_none.append([name for name, p in get_state_dict(model).items() if p.grad is None])
        params = get_parameters(model)
        if extra == "clip_norm":
            norms.append(nn.utils.clip_grad_norm_(params, max_norm=0.5).item())
        elif extra == "clip_norm_inf":
            norms.append(nn.utils.clip_grad_norm_(params, max_norm=0.3, norm_type=float("inf")).item())
        elif extra == "clip_value":
            nn.utils.clip_grad_value_(params, 0.05)
        elif extra == "clip_some":
            norms.append(nn.utils.clip_grad_norm_([model.l1.bias, model.l1.weight], max_norm=0.2).item())
        opt.step()
        if extra == "write" and s == 0:      # a write between steps: the next step starts from it
            with tg.no_grad():
                model.l1.bias.assign(Tensor.full((7,), 0.25)).realize()
                model.l2.weight.assign(model.l2.weight * 2).realize()
    return {"params": values(model), "norms": norms, "grads_none": grads_none if kind != "zero" else None}


def reference(scenario: str) -> dict:
    """The plain optimizer on one process, on the joined batch, from rank 0's initial weights."""
    return train(0, 1, "plain", scenario)


_RUNS: dict[tuple[str, int], list[dict]] = {}


def all_scenarios(rank: int, world: int, kind: str) -> dict:
    out = {}
    for name in SCENARIOS:
        try:
            out[name] = train(rank, world, kind, name)
        except Exception as e:  # noqa: BLE001 - the scenario's test reports it
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


def runs(kind: str, world: int) -> list[dict]:
    if (kind, world) not in _RUNS:
        _RUNS[kind, world] = run_ranks(world, all_scenarios, kind, timeout=240)
    return _RUNS[kind, world]


def test_reference_is_torchs_semantics():
    """The one-process reference itself: frozen and unused parameters keep their values (AdamW's decay
    of 0.5 would move them), clipping bound (else the scenarios would not test it)."""
    init = values(Net(seed=100))
    for name in ("adamw_decay", "sgd_momentum_decay"):
        got = reference(name)["params"]
        for key in ("frozen.weight", "frozen.bias", "unused.weight", "unused.bias"):
            assert got[key] == init[key], f"{name}: {key} moved"
        assert got["l1.weight"] != init["l1.weight"]
    assert all(n > 0.5 for n in reference("clip_norm")["norms"])
    assert all(n > 0.3 for n in reference("clip_norm_inf")["norms"])
    assert all(n > 0.2 for n in reference("clip_some")["norms"])


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_distributed_equals_one_process(scenario, kind, world):
    results = runs(kind, world)
    got = [r[scenario] for r in results]
    assert "error" not in got[0], got[0]
    want = reference(scenario)
    for r, res in enumerate(got[1:], start=1):
        assert res["params"] == got[0]["params"], f"rank {r} differs from rank 0"
    for key, value in want["params"].items():
        np.testing.assert_allclose(np.array(got[0]["params"][key]), np.array(value), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{scenario} {kind} world {world}: {key}")
    np.testing.assert_allclose(got[0]["norms"], want["norms"], rtol=1e-5)
    if got[0]["grads_none"] is not None:     # DDP: .grad None exactly where torch leaves it None
        assert got[0]["grads_none"] == want["grads_none"]


# ---------------------------------------------------------------- many buckets (issue 35 item 5)
def many_buckets(rank: int, world: int, count: int) -> list:
    Tensor.manual_seed(5 + rank)
    params = [Tensor.randn(3, requires_grad=True) for _ in range(count)]
    opt = dist.ZeroOptimizer(params, nn.optim.SGD, lr=0.5, bucket_mb=1e-6)   # one parameter per bucket
    assert len(opt.buckets) == count
    x = Tensor(np.arange(1, 3 * world + 1, dtype=np.float32).reshape(world, 3)[rank])
    sum(((p * x) ** 2).sum() for p in params).backward()     # one kernel shape for every parameter
    opt.step()
    return [p.numpy().tolist() for p in params]


@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_zero_with_more_than_255_buckets_of_one_dtype(backend):
    count, world = 300, 2
    results = run_ranks(world, many_buckets, count, backend=backend, timeout=240)
    Tensor.manual_seed(5)
    init = [Tensor.randn(3).numpy().astype(np.float64) for _ in range(count)]
    xs = np.arange(1, 3 * world + 1, dtype=np.float64).reshape(world, 3)
    for i, p in enumerate(init):
        grad = np.mean([2 * p * x * x for x in xs], axis=0)
        np.testing.assert_allclose(results[0][i], p - 0.5 * grad, rtol=1e-5, atol=1e-5)
    assert results[0] == results[1]


def disagree(rank: int, world: int, call: str) -> str:
    """Rank 1 makes a call one element longer than rank 0's: a coalesced all_gather of 300 pieces, or
    a one-array all_gather of 40 dimensions. Every rank must raise the same described disagreement,
    never a packing error."""
    try:
        if call == "pieces":
            group = dist._group(None)
            sizes = [1] * 299 + [1 + rank]
            group.run_now(group.all_gather, [np.zeros(n * world, np.float32) for n in sizes],
                          [np.full(n, rank, np.float32) for n in sizes])
        else:
            shape = (1,) * 39 + (1 + rank,)
            dist.all_gather_into_tensor(np.zeros(world * (1 + rank), np.float32), np.zeros(shape, np.float32))
    except dist.DistributedError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize("backend", ["shm", "tcp", "mpi"])
@pytest.mark.parametrize("call", ["pieces", "dims"])
def test_disagreement_on_a_call_of_any_size_is_described(call, backend):
    """Every fixed-width field of a descriptor holds every call: 300 pieces (the count had one byte),
    40 dimensions (MPI's descriptor block held 32)."""
    want = ([f"all_gather of 300 float32 arrays ({n} elements" for n in (300, 301)] if call == "pieces" else
            ["float32[" + ", ".join(["1"] * 39 + [n]) + "]" for n in "12"])
    for text in run_ranks(2, disagree, call, backend=backend, timeout=120):
        assert all(w in text for w in want) and "rank 0" in text and "rank 1" in text, text


def half_written(rank: int, world: int, dtype: str, optimizer: str) -> list:
    """A float16/bfloat16 parameter written between steps, then stepped with a zero gradient."""
    from tg import dtypes
    w = Tensor([1.0, 2.0, 3.0], dtype=getattr(dtypes, dtype), requires_grad=True)
    cls = {"sgd": nn.optim.SGD, "adamw": nn.optim.AdamW}[optimizer]
    opt = dist.ZeroOptimizer([w], cls, lr=0.5)
    (w.float() * w.float()).sum().backward()
    opt.step()
    opt.zero_grad()
    with tg.no_grad():
        w.assign(Tensor([10.0, 12.0, 14.0], dtype=w.dtype)).realize()
    (w.float() * 0).sum().backward()
    opt.step()
    return w.float().numpy().tolist()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_zero_half_parameter_written_between_steps_steps_from_the_written_value(dtype, optimizer):
    """The float32 master of a half parameter follows a write to the parameter: a zero gradient leaves
    SGD's value and moves AdamW's only by its decay (0.01 * lr) and momentum, from the written value."""
    results = run_ranks(2, half_written, dtype, optimizer)
    assert results[0] == results[1]
    assert np.abs(np.array(results[0]) - [10.0, 12.0, 14.0]).max() < (0.01 if optimizer == "sgd" else 0.6)


# ---------------------------------------------------------------- GradScaler across ranks (issue 36 item 2)
OVERFLOWS = {1: 1, 3: 0}      # step -> the one rank whose gradients overflow there (only l2.bias[0])
SCALER_STEPS = 6


def scaled_training(rank: int, world: int, kind: str, amp: bool = False) -> dict:
    """SGD with momentum under a GradScaler; at the steps in OVERFLOWS one rank's l2.bias gradient gets
    an inf (world 1: the reference, overflowing at those steps itself). With ZeRO that gradient lives in
    one rank's shard: the verdict must still be every rank's."""
    model = Net(seed=100 + rank)
    if kind == "zero1_alone":        # ZeRO-1 without DDP: each rank's .grad is its own until step
        net, opt = model, ZeroRedundancyOptimizer(get_parameters(model), nn.optim.SGD, lr=0.05, momentum=0.9)
    else:
        net, opt, _ = wrapped(model, kind, "sgd", {"momentum": 0.9})
    scaler = tg.amp.GradScaler(init_scale=2.0 ** 8, growth_interval=2)
    n = ROWS // world
    scales = []
    for s, (batch,) in enumerate(data(SCALER_STEPS, 1)):
        opt.zero_grad()
        x, y = batch
        xs, ys = Tensor(x[rank * n:(rank + 1) * n]), Tensor(y[rank * n:(rank + 1) * n])
        with tg.autocast("cpu", enabled=amp):          # inside the DDP / ZeRO model: bfloat16 matmuls
            out = net(xs)
            loss = ((out.float() - ys) ** 2).mean()
        assert out.dtype == (tg.bfloat16 if amp else tg.float32)
        bad = np.zeros(3, np.float32)
        if (world == 1 and s in OVERFLOWS) or OVERFLOWS.get(s) == rank:
            bad[0] = np.inf
        loss = loss + (model.l2.bias * Tensor(bad)).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return {"params": values(model), "scales": scales}


@pytest.mark.parametrize("kind", [*KINDS, "zero1_alone"])
@pytest.mark.parametrize("world", [2, 3])
def test_grad_scaler_skips_an_overflowing_step_on_every_rank(kind, world):
    """One rank's overflow skips the step everywhere, with the same scales after it; the result equals a
    one-process run that skipped the same steps."""
    want = run_ranks(1, scaled_training, "plain", backend="shm")[0]
    got = run_ranks(world, scaled_training, kind, backend="shm", timeout=240)
    for r in got:
        assert r["scales"] == want["scales"] == [256.0, 128.0, 128.0, 64.0, 64.0, 128.0], r["scales"]
        for name, value in want["params"].items():
            np.testing.assert_allclose(r["params"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kind", ["ddp", "zero"])
def test_autocast_inside_ddp_and_zero_models(kind):
    """The same scaled training with the forward under bfloat16 autocast: every rank ends with the same
    bits, within bfloat16's precision of one process on the joined batch (a rank's rows round alike,
    but the gradient sums split differently)."""
    want = run_ranks(1, scaled_training, "plain", True, backend="shm")[0]
    got = run_ranks(2, scaled_training, kind, True, backend="shm", timeout=240)
    assert got[0]["params"] == got[1]["params"] and got[0]["scales"] == got[1]["scales"] == want["scales"]
    for name, value in want["params"].items():
        np.testing.assert_allclose(got[0]["params"][name], value, rtol=2e-2, atol=2e-3, err_msg=name)
