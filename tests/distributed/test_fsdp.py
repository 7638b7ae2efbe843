"""ZeRO-3 / FSDP (tg.distributed.fsdp.fully_shard) in real rank processes: it trains as DDP does (the
same parameters after 20 steps, eager and under TinyJit, uneven row counts, a tied embedding and head,
a frozen parameter, two parameter groups), holds the memory the design promises, and refuses what it
cannot shard or run.

    per rank, P the parameters' bytes, u a unit's:  shards, their gradients and Adam's two moments 4P/N
                                                    + one unit's full parameters + one unit's full
                                                    gradients + what one step needs besides (A)
"""
import numpy as np
import pytest
from harness import run_ranks

import tg.distributed as dist
from tg import Tensor, TinyJit, nn
from tg.nn import functional as F

VOCAB, WIDTH, HIDDEN, LAYERS, BATCH, SEQ = 37, 12, 21, 3, 4, 5     # rows no world size divides


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(self.up(self.ln(x)).gelu())


class Net(nn.Module):
    """An embedding and a head sharing one weight (in the root unit), blocks (a unit each), a frozen
    bias."""

    def __init__(self) -> None:
        super().__init__()
        Tensor.manual_seed(0)
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.wte.weight
        self.blocks[0].up.bias.requires_grad = False

    def forward(self, idx: Tensor, y: Tensor) -> Tensor:
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def wrapped(model: Net, mode: str) -> dist.DistributedDataParallel | None:
    """model with each block a unit and itself the root (mode "fsdp"), or its DDP wrapper."""
    from tg.distributed.fsdp import fully_shard
    if mode != "fsdp":
        return dist.DistributedDataParallel(model)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return None


def train(rank: int, world: int, mode: str, jit: bool, steps: int = 20) -> dict:
    model = Net()
    keep = wrapped(model, mode)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = nn.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                         lr=3e-2)

    def step(idx: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (keep or model)(idx, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)    # the whole model's norm: shards' combined
        opt.step()
        return loss.realize()
    run = TinyJit(step) if jit else step
    rng = np.random.default_rng(100 + rank)
    losses = []
    for _ in range(steps):
        idx = Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        y = Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        losses.append(run(idx, y).item())
    if mode == "fsdp":
        for m in [*model.blocks, model]:
            m.unshard()
    return {"losses": losses, "params": {k: v.numpy().tolist() for k, v in model.state_dict().items()}}


@pytest.fixture(scope="module")
def ddp_runs() -> dict:
    return {world: run_ranks(world, train, "ddp", False, backend="tcp") for world in (1, 2, 3)}


@pytest.mark.parametrize("world,jit", [(1, False), (2, False), (3, False), (2, True), (3, True)])
def test_fsdp_trains_as_ddp(ddp_runs, world, jit):
    """20 AdamW steps (two parameter groups: decayed matrices, undecayed vectors, as nanoGPT's; the
    gradients clipped to norm 0.5, which they exceed) on every rank's own batches: every parameter
    equals DDP's to float32 rounding (1e-6 of the tensor's largest value; the tied weight's two
    gradients are summed in another order), and so do the losses."""
    got = run_ranks(world, train, "fsdp", jit, backend="tcp")
    for r, want in zip(got, ddp_runs[world]):
        np.testing.assert_allclose(r["losses"], want["losses"], rtol=1e-6)
        assert r["params"].keys() == want["params"].keys()
        for name, value in want["params"].items():
            scale = np.abs(np.asarray(value)).max()       # (float32 rounding, relative to the tensor)
            np.testing.assert_allclose(r["params"][name], value, rtol=1e-6, atol=1e-6 * scale, err_msg=name)
    frozen = "blocks.0.up.bias"
    first = run_ranks(1, train, "fsdp", False, 0, backend="tcp")[0]["params"][frozen]
    np.testing.assert_array_equal(got[0]["params"][frozen], first)        # never stepped


@pytest.mark.parametrize("backend", ["shm", "ucx", "mpi"])
def test_fsdp_trains_as_ddp_on_every_backend(ddp_runs, backend):
    got = run_ranks(2, train_short, backend=backend)
    for r, want in zip(got, ddp_runs[2]):
        np.testing.assert_allclose(r["losses"], want["losses"][:4], rtol=1e-6)


def train_short(rank: int, world: int) -> dict:
    return train(rank, world, "fsdp", False, steps=4)


# ---------------------------------------------------------------- memory

LINEARS, SIDE, ROWS = 8, 256, 4


def peak_of(rank: int, world: int, mode: str) -> dict:
    """Peak tensor bytes over steady steps of 8 square Linear layers (each a unit, in a root holding
    nothing), as test_zero_memory measures ZeRO-2."""
    from tg import GlobalCounters
    from tg.distributed.fsdp import fully_shard
    Tensor.manual_seed(rank)
    layers = [nn.Linear(SIDE, SIDE) for _ in range(LINEARS)]
    P = sum(p.nbytes for m in layers for p in m.parameters())
    model = nn.Sequential(*layers)
    if mode == "fsdp":
        for m in layers:
            fully_shard(m)
        fully_shard(model)
    opt = nn.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(rank)

    def step() -> float:
        x = Tensor(rng.normal(size=(ROWS, SIDE)).astype(np.float32))
        y = Tensor(rng.normal(size=(ROWS, SIDE)).astype(np.float32))
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()
    for _ in range(3):
        step()
    GlobalCounters.reset()
    losses = [step() for _ in range(3)]
    return {"peak": GlobalCounters.mem_peak, "P": P, "unit": P // LINEARS, "losses": losses}


@pytest.mark.parametrize("world", [1, 2, 4])
def test_fsdp_peak_per_rank_is_the_formula(world):
    plain = run_ranks(1, peak_of, "plain")[0]
    P, extra = plain["P"], plain["peak"] - 4 * plain["P"]
    for r in run_ranks(world, peak_of, "fsdp"):
        bound = 4 * P / world + 2 * r["unit"] + extra
        assert 4 * P / world <= r["peak"] <= bound + 0.02 * P, (
            f"FSDP at {world} ranks peaks at {r['peak'] / P:.3f} P; the formula gives 4/N = "
            f"{4 / world:.3f} P + two units ({2 * r['unit'] / P:.3f} P) + one step's other tensors "
            f"({extra / P:.3f} P) = {bound / P:.3f} P")
        assert np.isfinite(r["losses"]).all()


# ---------------------------------------------------------------- what it refuses

def test_a_module_sharded_twice_is_refused():
    from tg.distributed.fsdp import fully_shard
    layer = nn.Linear(3, 2)
    fully_shard(layer)
    with pytest.raises(ValueError, match="twice"):
        fully_shard(layer)


def test_a_parameter_shared_across_units_is_refused_naming_it():
    from tg.distributed.fsdp import fully_shard
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = a.weight
    model = nn.Sequential(a, b)
    fully_shard(a)
    with pytest.raises(ValueError, match=r"'1\.weight' .*shared across units"):
        fully_shard(model)


def skipping_rank(rank: int, world: int) -> str:
    """Rank 1 skips the second block in its second step: every rank must raise, naming the ranks."""
    from tg.distributed.fsdp import fully_shard
    model = Net()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    rng = np.random.default_rng(rank)
    for step in range(2):
        if step == 1 and rank == 1:
            model.blocks = nn.ModuleList([model.blocks[0], model.blocks[2]])
        idx = Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        model(idx, idx).backward()
    return "no error"


def test_a_rank_that_skips_a_unit_makes_every_rank_raise_naming_it():
    results = run_ranks(2, skipping_rank, allow_errors=True, dist_timeout=20, backend="tcp")
    for r in results:
        assert r.startswith("ERROR: DistributedError"), r
        assert "rank" in r and ("different orders" in r or "other FSDP units" in r), r


def evaluate(rank: int, world: int) -> list:
    """unshard() gathers a unit's parameters for use outside a training step (generation); reshard()
    gives them back."""
    from tg.distributed.fsdp import fully_shard
    model = Net()
    want = {k: v.numpy() for k, v in model.state_dict().items()}
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    shard_shapes = [tuple(p.shape) for p in model.blocks[1].parameters()]
    for m in [*model.blocks, model]:
        m.unshard()
    got = {k: v.numpy() for k, v in model.state_dict().items()}
    for m in [*model.blocks, model]:
        m.reshard()
    return [shard_shapes, [tuple(p.shape) for p in model.blocks[1].parameters()],
            all(np.array_equal(got[k], want[k]) for k in want), sorted(got) == sorted(want)]


def test_unshard_gives_the_whole_parameters_and_reshard_the_shards():
    for shards, again, equal, names in run_ranks(2, evaluate, backend="tcp"):
        rows = [(-(-n // 2), *rest) for n, *rest in [(WIDTH,), (WIDTH,), (HIDDEN, WIDTH), (HIDDEN,),
                                                     (WIDTH, HIDDEN), (WIDTH,)]]
        assert [tuple(s) for s in shards] == rows and [tuple(s) for s in again] == rows
        assert equal and names


# ---------------------------------------------------------------- what it moves

def moved_per_step(rank: int, world: int, mode: str) -> float:
    """Bytes this rank moves in one steady training step, as a fraction of the parameters' bytes."""
    from tg.distributed.fsdp import fully_shard
    Tensor.manual_seed(0)
    layers = [nn.Linear(SIDE, SIDE) for _ in range(LINEARS)]
    P = sum(p.nbytes for m in layers for p in m.parameters())
    model: nn.Module = nn.Sequential(*layers)
    keep = None
    if mode == "ddp":
        keep = dist.DistributedDataParallel(model, bucket_mb=0.25)
    else:
        for m in layers:
            fully_shard(m, reshard_after_forward=mode == "fsdp")
        fully_shard(model)
    opt = nn.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(rank)

    def step() -> None:
        x = Tensor(rng.normal(size=(ROWS, SIDE)).astype(np.float32))
        opt.zero_grad()
        ((keep or model)(x) ** 2).mean().backward()
        opt.step()
        model.parameters().__next__().realize()
    step()
    before = dist.bytes_moved()
    step()
    return (dist.bytes_moved() - before) / P


@pytest.mark.parametrize("world", [2, 4])
def test_resharding_moves_half_again_ddps_bytes(world):
    """Counted, not timed: DDP moves 2 (n - 1) / n P a step (its all-reduce); FSDP gathers in forward,
    gathers again in backward and reduce-scatters, 3 (n - 1) / n P = 1.5x DDP's; without resharding
    after forward it gathers once, as many bytes as DDP (the units' headers and the parameters' used
    bits add a few bytes)."""
    ddp = run_ranks(world, moved_per_step, "ddp")[0]
    assert ddp == pytest.approx(2 * (world - 1) / world, rel=1e-3)
    resharding = run_ranks(world, moved_per_step, "fsdp")[0]
    assert resharding / ddp == pytest.approx(1.5, rel=2e-3)
    kept = run_ranks(world, moved_per_step, "fsdp-kept")[0]
    assert kept / ddp == pytest.approx(1.0, rel=2e-3)


# ---------------------------------------------------------------- prefetch

def events_of(rank: int, world: int, depth: int, jit: bool) -> list:
    """The root's event log over one steady step of `depth` Linear units (the last of three steps:
    under TinyJit a replay, whose host steps log the same events)."""
    from tg.distributed.fsdp import fully_shard
    Tensor.manual_seed(0)
    layers = [nn.Linear(6, 6) for _ in range(depth)]
    model = nn.Sequential(*layers)
    for m in layers:
        fully_shard(m)
    fully_shard(model)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)

    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.realize()
    run = TinyJit(step) if jit else step
    for i in range(3):
        if model._fsdp_root is not None:        # (made at the first forward)
            model._fsdp_root.events.clear()
        run(Tensor.ones(2, 6) * i)
    return [list(e) for e in model._fsdp_root.events]


@pytest.mark.parametrize("depth,jit", [(2, False), (3, False), (5, False), (4, True)])
def test_the_next_unit_is_gathered_while_this_one_computes(depth, jit):
    """Forward: unit i + 1's all-gather starts before unit i's kernels run (and is waited for only when
    unit i + 1 starts); backward: unit i - 1's before unit i's gradients are computed, and each unit's
    reduce-scatter starts right after them. Pinned by the order of the host steps (a log the root
    keeps), eager and in a TinyJit replay."""
    for events in run_ranks(2, events_of, depth, jit, backend="tcp"):
        at = {tuple(e): i for i, e in enumerate(events)}           # the last occurrence of each
        first = {}
        for i, e in enumerate(events):
            first.setdefault(tuple(e), i)
        units = range(1, depth + 1)
        for u in units[1:]:          # forward: gathered ahead of the previous unit's computation
            assert first[("gather", u)] < first[("computed", u - 1)] < first[("gathered", u)], events
        for u in units[:-1]:         # backward: the unit before is gathered while this one computes
            assert at[("gather", u)] < at[("computed", u + 1)] < at[("gathered", u)], events
        for u in units:
            assert at[("computed", u)] < at[("scatter", u)], events


def test_without_prefetch_each_gather_starts_when_needed():
    """TG_FSDP_PREFETCH=0 (what the benchmark compares against): every gather is started right where it
    is waited for."""
    for events in run_ranks(2, events_of, 3, False, backend="tcp", env={"TG_FSDP_PREFETCH": "0"}):
        starts = [i for i, e in enumerate(events) if e[0] == "gather"]
        assert starts and all(events[i + 1] == ["gathered", events[i][1]] for i in starts), events


# ---------------------------------------------------------------- checkpoints

def _full_optimizer_state(path) -> dict:
    """name.key -> the whole state tensor, its rows collected from every rank's file."""
    import glob
    import json
    import os

    from tg.nn.state import safe_load, safe_load_metadata
    pieces: dict = {}
    for f in sorted(glob.glob(os.path.join(path, "optim-*.safetensors"))):
        rows = json.loads(safe_load_metadata(f)["rows"])
        for key, t in safe_load(f).items():
            if key.startswith("state."):
                name = key.split(".")[1:-1]
                pieces.setdefault(key, []).append((rows[".".join(name)][0], t.numpy()))
    return {k: np.concatenate([v for _, v in sorted(parts, key=lambda p: p[0])])
            for k, parts in pieces.items()}


def resume(rank: int, world: int, directory: str, out: str, steps: int) -> dict:
    """Load the newest checkpoint in directory (if any) into an FSDP model at this world size, save it
    again at once into out/again, train `steps` more steps and save into out."""
    from tg.distributed.fsdp import fully_shard
    model = Net()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = nn.optim.AdamW(model.parameters(), lr=3e-2)
    meta = dist.load_checkpoint(directory, model, opt)
    step = meta["step"] if meta else 0
    dist.save_checkpoint(f"{out}/again", step, model, opt)
    rng = np.random.default_rng(1000 * world + rank)
    for _ in range(steps):
        idx = Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        opt.zero_grad()
        model(idx, idx).backward()
        opt.step()
    dist.save_checkpoint(out, step + steps, model, opt)
    return {"step": step}


def test_checkpoints_resume_at_any_world_size(tmp_path):
    """4 -> 2 -> 1 -> 3 ranks: each run loads what the one before saved and saves it again at once;
    the whole model and every optimizer state tensor saved again equal what was saved (only the rows
    each rank holds moved), and the step count carries on."""
    from tg.nn.state import safe_load
    previous = str(tmp_path / "none")
    for i, (world, steps) in enumerate([(4, 2), (2, 2), (1, 1), (3, 1)]):
        out = str(tmp_path / f"run{i}")
        results = run_ranks(world, resume, previous, out, steps, backend="tcp")
        if i:
            before = dist.latest_checkpoint(previous)
            again = dist.latest_checkpoint(f"{out}/again")
            assert results[0]["step"] == int(before.name[5:]) > 0
            want, got = safe_load(before / "model.safetensors"), safe_load(again / "model.safetensors")
            assert want.keys() == got.keys()
            for k in want:
                np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)
            want_opt, got_opt = _full_optimizer_state(before), _full_optimizer_state(again)
            assert want_opt.keys() == got_opt.keys() and want_opt
            for k in want_opt:
                np.testing.assert_array_equal(got_opt[k], want_opt[k], err_msg=k)
        previous = out
    full = safe_load(dist.latest_checkpoint(previous) / "model.safetensors")
    assert full["wte.weight"].shape == (VOCAB, WIDTH) and full["blocks.2.up.weight"].shape == (HIDDEN, WIDTH)


# ---------------------------------------------------------------- gradient accumulation

def accumulate(rank: int, world: int, mode: str, jit: bool) -> dict:
    """Two microbatches a step, the first without gradient sync (DDP's no_sync(), FSDP's
    set_requires_gradient_sync(False)), for 4 steps."""
    import contextlib
    model = Net()
    ddp = wrapped(model, mode)
    opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(a: Tensor, b: Tensor) -> Tensor:
        opt.zero_grad()
        if ddp is None:
            model.set_requires_gradient_sync(False)
        with ddp.no_sync() if ddp is not None else contextlib.nullcontext():
            (ddp or model)(a, a).backward()
        if ddp is None:
            model.set_requires_gradient_sync(True)
        loss = (ddp or model)(b, b)
        loss.backward()
        opt.step()
        return loss.realize()
    run = TinyJit(step) if jit else step
    rng = np.random.default_rng(7 + rank)
    for _ in range(4):
        a, b = (Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)) for _ in range(2))
        run(a, b)
    if mode == "fsdp":
        for m in [*model.blocks, model]:
            m.unshard()
    return {k: v.numpy().tolist() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("world,jit", [(2, False), (3, False), (2, True)])
def test_gradient_accumulation_without_sync_matches_ddps_no_sync(world, jit):
    """The first microbatch's gradients are held whole on each rank and added to the second's before one
    reduce-scatter: the parameters after 4 such steps are DDP's with no_sync()."""
    want = run_ranks(world, accumulate, "ddp", False, backend="tcp")
    got = run_ranks(world, accumulate, "fsdp", jit, backend="tcp")
    for g, w in zip(got, want):
        for name, value in w.items():
            scale = np.abs(np.asarray(value)).max()
            np.testing.assert_allclose(g[name], value, rtol=1e-6, atol=1e-6 * scale, err_msg=name)


# ---------------------------------------------------------------- mixed precision

def mixed(rank: int, world: int, param: str | None, reduce: str | None, steps: int = 6,
          same_batches: bool = True) -> dict:
    """Net under a MixedPrecisionPolicy (dtype names or None), every rank on the same batches when
    same_batches; what the parameters look like during a step, the bytes moved, losses, the result."""
    import tg
    from tg.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dtype = {None: None, "bf16": tg.bfloat16, "fp16": tg.float16, "fp32": tg.float32}
    policy = MixedPrecisionPolicy(param_dtype=dtype[param], reduce_dtype=dtype[reduce])
    model = Net()
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = nn.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(3 if same_batches else 3 + rank)
    losses, seen = [], {}
    for step in range(steps):
        idx = Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        opt.zero_grad()
        before = dist.bytes_moved()
        loss = model(idx, idx)
        if step == 0:       # the root stays gathered until its backward; the blocks are shards again
            seen = {"root": model.wte.weight.dtype.name, "block": model.blocks[0].up.weight.dtype.name}
        loss.backward()
        seen["moved"] = dist.bytes_moved() - before
        opt.step()
        losses.append(loss.item())
    for m in [*model.blocks, model]:
        m.unshard()
    return {**seen, "losses": losses, "params": {k: v.float().numpy().tolist()
                                                for k, v in model.state_dict().items()}}


@pytest.mark.parametrize("param,reduce", [("bf16", "fp32"), ("bf16", None), ("fp16", "fp32")])
def test_mixed_precision_computes_in_param_dtype_on_float32_masters(param, reduce):
    """param_dtype: the gathered parameters are that dtype (the all-gathers carry half the bytes), the
    shards the optimizer steps stay float32; every rank on the same batches trains exactly as one rank
    does at 2 and 3 ranks with float32 reductions (the mean of equal gradients is the gradient), within
    bfloat16's rounding with bfloat16 ones, and close to float32 training."""
    one = run_ranks(1, mixed, param, reduce, backend="tcp")[0]
    assert one["root"] == {"bf16": "bfloat16", "fp16": "float16"}[param] and one["block"] == "float32"
    for world in (2, 3):
        for r in run_ranks(world, mixed, param, reduce, backend="tcp"):
            if reduce == "fp32":
                assert r["losses"] == one["losses"]
                for name, value in one["params"].items():
                    np.testing.assert_array_equal(r["params"][name], value, err_msg=name)
            else:        # bfloat16 on the wire: the ring's partial sums are rounded on the way
                np.testing.assert_allclose(r["losses"], one["losses"], rtol=0.02)
    full = run_ranks(2, mixed, None, None, backend="tcp")[0]
    np.testing.assert_allclose(one["losses"], full["losses"], rtol=0.05)
    fp32 = run_ranks(2, mixed, None, None, 2, backend="tcp")[0]["moved"]
    half = run_ranks(2, mixed, param, reduce, 2, backend="tcp")[0]["moved"]
    # forward and backward gathers in 2 bytes a value, the reduce-scatter in reduce_dtype's
    assert half / fp32 == pytest.approx((2 * 0.5 + (1 if reduce == "fp32" else 0.5)) / 3, rel=0.03)


def saved_mixed(rank: int, world: int, path: str) -> str:
    import tg
    from tg.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    model = Net()
    for block in model.blocks:
        fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=tg.bfloat16))
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=tg.bfloat16))
    opt = nn.optim.AdamW(model.parameters(), lr=1e-2)
    idx = Tensor(np.random.default_rng(rank).integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
    model(idx, idx).backward()
    opt.step()
    dist.save_checkpoint(path, 1, model, opt)
    return model.blocks[1].up.weight.dtype.name


def test_mixed_precision_checkpoints_hold_the_float32_masters(tmp_path):
    from tg.nn.state import safe_load
    assert run_ranks(2, saved_mixed, str(tmp_path), backend="tcp") == ["float32", "float32"]
    full = safe_load(dist.latest_checkpoint(str(tmp_path)) / "model.safetensors")
    assert {t.dtype.name for t in full.values()} == {"float32"}


# ---------------------------------------------------------------- activation checkpointing

class CheckpointedNet(Net):
    def forward(self, idx: Tensor, y: Tensor) -> Tensor:
        from tg.nn.checkpoint import checkpoint
        x = self.wte(idx)
        for block in self.blocks:
            x = checkpoint(block, x)          # recomputed in backward: the unit is gathered again then
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def checkpointed(rank: int, world: int, mode: str, jit: bool) -> dict:
    model = CheckpointedNet()
    keep = wrapped(model, mode)
    opt = nn.optim.AdamW(model.parameters(), lr=3e-2)

    def step(idx: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (keep or model)(idx, idx)
        loss.backward()
        opt.step()
        return loss.realize()
    run = TinyJit(step) if jit else step
    rng = np.random.default_rng(rank)
    losses = [run(Tensor(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32))).item() for _ in range(6)]
    slots = max(p.count for p in model._fsdp_root.pools.values()) if mode == "fsdp" else 0
    return {"losses": losses, "slots": slots}


@pytest.mark.parametrize("jit", [False, True])
def test_checkpointed_units_recompute_gathered_and_train_as_ddp(jit):
    """Activation checkpointing around FSDP units: each block's recompute in backward gathers it again
    and computes with that forward's parameters; the losses are DDP's with the same checkpointing, and
    no more than two units' full buffers are ever made."""
    want = run_ranks(2, checkpointed, "ddp", False, backend="tcp")
    for got, ref in zip(run_ranks(2, checkpointed, "fsdp", jit, backend="tcp"), want):
        np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-5)
        assert got["slots"] <= 2


# ---------------------------------------------------------------- the ways a step can go

class Ways(nn.Module):
    """Units b1, b2 and p (whose child x the root calls directly), a head in the root."""

    def __init__(self) -> None:
        super().__init__()
        Tensor.manual_seed(0)
        self.b1, self.b2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1)
        self.p = nn.Sequential(nn.Linear(4, 4))
        self.p.x = nn.Linear(4, 4)

    def forward(self, x: Tensor, way: str = "plain") -> Tensor:
        x = self.b1(x).tanh()
        if way != "skip":
            x = self.b2(x).tanh()
        if way == "twice":
            x = self.b2(x).tanh()
        x = self.p(self.p.x(x)).tanh() if way == "child" else self.p(x).tanh()
        return self.head(x).sum()


WAYS = {   # per step: [(way of each microbatch, gradient sync on for it)], zero_grad's set_to_none
    "skip_then_step": ([("plain", True), ("skip", True)], True),
    "twice": ([("twice", True)], True),
    "child_from_root": ([("child", True)], True),
    "zero_not_none": ([("plain", True)], False),
    "unused_then_used": ([("skip", True), ("plain", True)], True),
    "no_sync_then_skip": ([("plain", False), ("skip", True)], True),
    "root_twice": ([("plain+plain", True)], True),
    "eval_between": ([("plain+eval", True)], True),
}


def ways(rank: int, world: int, mode: str, name: str) -> dict:
    import contextlib

    import tg
    from tg.distributed.fsdp import fully_shard
    model = Ways()
    ddp = None
    if mode == "fsdp":
        for m in (model.b1, model.b2, model.p.x, model.p):
            fully_shard(m)
        fully_shard(model)
    else:
        ddp = dist.DistributedDataParallel(model)
    opt = nn.optim.SGD(model.parameters(), lr=0.3, momentum=0.5)
    micro, to_none = WAYS[name]
    x = Tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4) * (rank + 1))
    for _ in range(3):
        opt.zero_grad(set_to_none=to_none)
        for way, sync in micro:
            if mode == "fsdp":
                model.set_requires_gradient_sync(sync)
            with ddp.no_sync() if ddp is not None and not sync else contextlib.nullcontext():
                first, _, then = way.partition("+")
                loss = (ddp or model)(x, first)
                if then == "plain":
                    loss = loss + (ddp or model)(x * 0.5, "plain")
                elif then == "eval":
                    with tg.no_grad():
                        model(x, "plain")
                loss.backward()
        opt.step()
    if mode == "fsdp":
        for m in (model.b1, model.b2, model.p.x, model.p, model):
            m.unshard()
    return {k: v.numpy().tolist() for k, v in model.state_dict().items()}


def every_way(rank: int, world: int, mode: str) -> dict:
    return {name: ways(rank, world, mode, name) for name in sorted(WAYS)}


@pytest.mark.parametrize("world", [1, 2])
def test_every_way_a_step_can_go_trains_as_ddp(world):
    """The ways users' steps differ from forward-backward-step, each against DDP doing the same: a unit
    gathered ahead but not called before the optimizer steps (its gather must not outlive the step), a
    unit called twice in one forward, a unit's child called by the root, zero_grad(set_to_none=False),
    a parameter unused in one microbatch and used in the next, gradients held without sync by a unit
    the synced microbatch skips, the root called twice before backward, and an evaluation under
    no_grad between a forward and its backward."""
    want = run_ranks(world, every_way, "ddp", backend="tcp", timeout=300)
    for got, ref in zip(run_ranks(world, every_way, "fsdp", backend="tcp", timeout=300), want):
        for name in WAYS:
            for key, value in ref[name].items():
                np.testing.assert_allclose(got[name][key], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{name}: {key}")


def test_a_bfloat16_model_and_a_top_down_wrapping():
    """Parameters stored in bfloat16 shard (and train); fully_shard on a child after its parent is
    refused, saying to go bottom-up."""
    import tg
    from tg.distributed.fsdp import fully_shard
    layer = nn.Linear(4, 4).to(tg.bfloat16) if hasattr(nn.Linear(1, 1), "to") else None
    model = nn.Sequential(layer)
    fully_shard(model)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    before = layer.weight.float().numpy().copy()
    (model(Tensor.ones(2, 4, dtype=tg.bfloat16)) ** 2).sum().backward()
    opt.step()
    model.unshard()
    assert layer.weight.dtype == tg.bfloat16 and not np.array_equal(layer.weight.float().numpy(), before)
    parent = nn.Sequential(nn.Linear(4, 4))
    fully_shard(parent)
    with pytest.raises(ValueError, match="bottom-up"):
        fully_shard(parent[0])


def test_fsdp_on_device_memory_trains_as_ddp():
    """Every rank on a device of its own (an OpenCL device in CI, TG_TEST_RANK_KIND=CUDA on GPUs): the
    shards, full buffers and gradients are device memory, staged through the host for each collective;
    6 steps equal DDP's on the same devices."""
    from test_staging import CL_ENV, needs_cl
    needs_cl()
    want = run_ranks(2, train, "ddp", False, 6, env=CL_ENV, timeout=240, backend="tcp")
    for got, ref in zip(run_ranks(2, train, "fsdp", False, 6, env=CL_ENV, timeout=240, backend="tcp"), want):
        np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-5)
        for name, value in ref["params"].items():
            scale = np.abs(np.asarray(value)).max()
            np.testing.assert_allclose(got["params"][name], value, rtol=1e-5, atol=1e-5 * scale, err_msg=name)


def buffers_round_trip(rank: int, world: int, path: str, save: bool) -> dict:
    """A unit holding a BatchNorm (running statistics are buffers, not sharded): saved at one world
    size, loaded at another; what the loaded model holds."""
    from tg.distributed.fsdp import fully_shard
    Tensor.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Linear(7, 3))
    fully_shard(model[1])
    fully_shard(model)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    if save:
        rng = np.random.default_rng(rank)
        for _ in range(2):
            (model(Tensor(rng.normal(size=(6, 5)).astype(np.float32))) ** 2).mean().backward()
            opt.step()
            opt.zero_grad()
        dist.save_checkpoint(path, 2, model, opt)
    else:
        dist.load_checkpoint(path, model, opt)
    return {k: v.numpy().tolist() for k, v in model.state_dict().items() if "running" in k}


def test_buffers_round_trip_across_world_sizes(tmp_path):
    from tg.nn.state import safe_load
    run_ranks(2, buffers_round_trip, str(tmp_path), True, backend="tcp")
    saved = safe_load(dist.latest_checkpoint(str(tmp_path)) / "model.safetensors")
    (loaded,) = run_ranks(1, buffers_round_trip, str(tmp_path), False, backend="tcp")
    assert loaded and all(np.array_equal(v, saved[k].numpy()) for k, v in loaded.items())
    assert not np.array_equal(loaded["1.running_mean"], np.zeros(7))
