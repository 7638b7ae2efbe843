"""Data-parallel training at 1, 2 and 4 ranks: the byte-level GPT (scripts/train.py's model) with DDP and
with ZeRO-2, each with and without activation checkpointing, and with FSDP (each block a unit); then a
parameter-heavy MLP whose table is the memory ZeRO-2 and FSDP save.

    python scripts/bench_train_dist.py                          # ranks 1,2,4; both tables
    python scripts/bench_train_dist.py --ranks 1,2 --steps 20 --n-layer 4 --tables gpt
    python scripts/bench_train_dist.py --tables memory          # the MLP's memory table only

Every configuration is a real job started by tglaunch, each rank with one thread (TG_CPU_THREADS=1).
Columns: step time (median of the timed steps, TinyJit replays) and tokens/s over all ranks; peak
tensor memory of a rank during the timed steps; the activation memory of one eager step (its peak
above what was allocated before it: what checkpointing trades for recompute); optimizer-state
bytes per rank (the wrapped optimizer's moments: ZeRO-2 keeps 1/N of them; its float32 master and
summed gradient of the shard, another 2/N of the parameters' bytes, are in peak MiB). The limits are
measured in the same run: 1 rank's tokens/s (linear scaling), DDP's step time and state, the
uncheckpointed run's memory and step time.

The memory table: 8 Linear(1024, 1024) layers (P = 33.6 MB of float32 parameters), batch 8 per rank,
Adam, 4 MiB buckets; plain Adam (one process), DDP, ZeRO-2 and FSDP (each layer a unit), each rank's
peak tensor bytes over the timed steps (GlobalCounters.mem_peak) in MiB and in units of P, beside the
formula's bound, and the bytes a rank moves a step (tg.distributed.bytes_moved):

    plain, DDP      params P + gradients P + moments 2P                  = 4 P
    ZeRO-2          P + moments 2P/N + summed gradient shard P/N         = (1 + 3/N) P
                    + 2 buckets of full gradients in flight (N > 1)
    FSDP            shards, their gradients, moments 4P/N + one unit gathered + one unit's gradients

and the targets: ZeRO-2 <= (1 + 3/N) P + 0.5 P, at one rank <= plain; DDP <= plain + 0.5 P; FSDP <= its
bound + one step's other tensors + 0.1 P; ZeRO-2's step time <= 1.15 x DDP's, FSDP's <= 1.3 x ZeRO-2's
at 2 ranks; FSDP moves 1.5x DDP's bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


MLP_LAYERS, MLP_WIDTH, MLP_BATCH, MLP_BUCKET_MB = 8, 1024, 8, 4.0


def mlp() -> Any:
    """The parameter-heavy model of the memory table: square Linear layers, relu between them."""
    from tg import nn

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(MLP_WIDTH, MLP_WIDTH) for _ in range(MLP_LAYERS)])

        def forward(self, x: Any) -> Any:
            for i, layer in enumerate(self.layers):
                x = layer(x)
                x = x.relu() if i < len(self.layers) - 1 else x
            return x

        def loss(self, x: Any, y: Any) -> Any:
            return ((self(x) - y) ** 2).mean()
    return MLP()


def strategy(mode: str, model: Any, mlp: bool) -> tuple[Any, Any, list]:
    """(optimizer, what the loss is computed through, gradient buckets) of a mode: plain, ddp, zero (ZeRO-2)
    or fsdp (each layer or block a unit, the rest the root's)."""
    import tg.distributed as dist
    from tg import nn
    from tg.nn.state import get_parameters
    optimizer_class, bucket_mb = (nn.optim.Adam, MLP_BUCKET_MB) if mlp else (nn.optim.AdamW, 25.0)
    if mode == "zero":
        zero = dist.ZeroOptimizer(get_parameters(model), optimizer_class, lr=1e-3, bucket_mb=bucket_mb)
        return zero, model, zero.buckets
    if mode == "fsdp":
        from tg.distributed.fsdp import fully_shard
        for unit in model.layers if mlp else model.blocks:
            fully_shard(unit)
        fully_shard(model)
        return optimizer_class(model.parameters(), lr=1e-3), model, []
    opt = optimizer_class(get_parameters(model), lr=1e-3)
    if mode == "ddp":
        ddp = dist.DistributedDataParallel(model, bucket_mb=bucket_mb)
        return opt, ddp, ddp.buckets
    return opt, model, []


def worker(args: argparse.Namespace) -> None:
    import tg.distributed as dist
    from tg import GlobalCounters, Tensor, TinyJit
    from tg.nn.state import get_parameters
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    Tensor.manual_seed(0)
    mlp = args.model == "mlp"
    if mlp:
        model: Any = globals()["mlp"]()
    else:
        from train import GPT
        model = GPT(256, args.block, args.n_layer, args.n_head, args.n_embd, checkpoint_activations=args.ckpt)
    n_params = sum(p.numel() for p in get_parameters(model))
    P = sum(p.nbytes for p in get_parameters(model))
    opt, net, buckets = strategy(args.mode, model, mlp)
    rng = np.random.default_rng(rank)

    def batch() -> tuple[Tensor, Tensor]:
        if mlp:
            x, y = (rng.normal(size=(MLP_BATCH, MLP_WIDTH)).astype(np.float32) for _ in range(2))
            return Tensor(x), Tensor(y)
        tok = rng.integers(0, 256, (args.batch, args.block + 1)).astype(np.int32)
        return Tensor(tok[:, :-1]), Tensor(tok[:, 1:])

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = net.loss(x, y)
        loss.backward()
        opt.step()
        return loss.realize()
    step(*batch())                                   # compile every kernel, allocate the optimizer state
    x, y = batch()
    x.realize(y)
    GlobalCounters.reset()
    before = GlobalCounters.mem_used
    step(x, y)                                       # one eager step: its activation memory
    activation = GlobalCounters.mem_peak - before
    jit_step = TinyJit(step)
    for _ in range(3):
        jit_step(*batch())                           # warm-up, capture, first replay
    GlobalCounters.reset()
    times = []
    moved = -dist.bytes_moved()
    for _ in range(args.steps):
        x, y = batch()
        x.realize(y)
        dist.barrier()
        start = time.perf_counter()
        jit_step(x, y).item()
        times.append(time.perf_counter() - start)
    moved += dist.bytes_moved()
    plain = opt.optimizer if args.mode == "zero" else opt
    state = sum(t.nbytes for k, t in plain.flat_state_dict().items() if k.startswith("state."))
    unit = (MLP_WIDTH * MLP_WIDTH + MLP_WIDTH) * 4 if mlp else max((b.nbytes for b in buckets), default=0)
    mine = {"step_s": float(np.median(times)), "peak": GlobalCounters.mem_peak, "activation": activation,
            "state": state, "params": n_params, "P": P,
            "bucket": unit if args.mode == "fsdp" else max((b.nbytes for b in buckets), default=0),
            "moved": moved / args.steps}
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        print("BENCH " + json.dumps(every), flush=True)
    dist.destroy_process_group()


def run(world: int, mode: str, ckpt: bool, args: argparse.Namespace, model: str = "gpt") -> list[dict]:
    cmd = [sys.executable, "-m", "tg.launch", "--nproc", str(world), os.path.abspath(__file__), "--worker",
           "--mode", mode, "--steps", str(args.steps), "--batch", str(args.batch), "--block", str(args.block),
           "--n-layer", str(args.n_layer), "--n-head", str(args.n_head), "--n-embd", str(args.n_embd),
           "--model", model]
    cmd += ["--ckpt"] if ckpt else []
    env = {**os.environ, "TG_CPU_THREADS": "1", "PYTHONPATH": os.path.join(HERE, "..")}
    if mode == "fsdp-serial":       # FSDP with every gather started only when it is needed
        cmd[cmd.index("--mode") + 1] = "fsdp"
        env["TG_FSDP_PREFETCH"] = "0"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("[rank0]: BENCH "):
            return json.loads(line[len("[rank0]: BENCH "):])
    raise RuntimeError(
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank")
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--tables", default="gpt,memory", help="which tables: gpt, memory or both")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="gpt", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="ddp", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    ranks = [int(r) for r in args.ranks.split(",")]
    tables = args.tables.split(",")
    if "gpt" in tables:
        gpt_table(ranks, args)
    if "memory" in tables:
        memory_table(ranks, args)


def memory_table(ranks: list[int], args: argparse.Namespace) -> None:
    """Peak MiB per rank of the parameter-heavy MLP: plain Adam, DDP, ZeRO-2 and FSDP beside the formula,
    and the bytes each moves a step."""
    print(f"\nMLP {MLP_LAYERS} x Linear({MLP_WIDTH}, {MLP_WIDTH}), batch {MLP_BATCH} per rank, Adam, "
          f"{MLP_BUCKET_MB:g} MiB buckets (FSDP: a layer a unit); peak tensor memory per rank over "
          f"{args.steps} timed steps; {cpu_name()}")
    head = (f"{'ranks':>5} {'mode':>11} | {'peak MiB':>8} {'peak/P':>6} | {'bound MiB':>9} {'bound/P':>7} | "
            f"{'target/P':>8} {'met':>3} | {'step ms':>7} {'step/DDP':>8} {'step/ZeRO':>9} | "
            f"{'MB moved':>8} {'x DDP':>5}")
    print(head)
    print("-" * len(head))
    plain: dict = {}
    ddp: dict[int, tuple[float, float]] = {}
    zero: dict[int, float] = {}
    runs = [(1, "plain")] + [(world, mode) for world in ranks for mode in ("ddp", "zero", "fsdp")] + \
        [(world, "fsdp-serial") for world in ranks if world > 1]
    for world, mode in runs:
        res = run(world, mode, False, args, model="mlp")
        P, bucket = res[0]["P"], res[0]["bucket"]
        peak, step, moved = max(r["peak"] for r in res), max(r["step_s"] for r in res), res[0]["moved"]
        plain = plain or {"peak": peak, "P": P}
        if mode == "zero":
            bound = (1 + 3 / world) * P + (2 * bucket if world > 1 else 0)
            target = plain["peak"] if world == 1 else (1 + 3 / world) * P + 0.5 * P
            zero[world] = step
        elif mode.startswith("fsdp"):   # shards, their gradients, Adam's moments; two units; + one step's
            bound = 4 * P / world + 2 * bucket       # other tensors (plain's peak above 4 P), within 0.1 P
            target = bound + (plain["peak"] - 4 * plain["P"]) + 0.1 * P
        else:
            bound, target = 4 * P, plain["peak"] + (0.5 * P if mode == "ddp" else 0)
        if mode == "ddp":
            ddp[world] = (step, moved)
        d_step, d_moved = ddp.get(world, (float("nan"), float("nan")))
        ratio = f"{step / d_step:8.2f}" if mode not in ("plain", "ddp") else f"{'-':>8}"
        vs_zero = f"{step / zero[world]:9.2f}" if mode.startswith("fsdp") and world in zero else f"{'-':>9}"
        moved_x = f"{moved / d_moved:5.2f}" if mode != "plain" and d_moved else f"{'-':>5}"
        print(f"{world:>5} {mode:>11} | {peak / 2**20:8.1f} {peak / P:6.2f} | {bound / 2**20:9.1f} "
              f"{bound / P:7.2f} | {target / P:8.2f} {'yes' if peak <= target else 'NO':>3} | "
              f"{step * 1e3:7.1f} {ratio} {vs_zero} | {moved / 1e6:8.1f} {moved_x}", flush=True)
    print("bound: plain/DDP 4 P; ZeRO-2 (1 + 3/N) P + 2 buckets in flight (N > 1); FSDP 4P/N + 2 units. "
          "targets: ZeRO-2 <= (1 + 3/N) P + 0.5 P, at one rank <= plain; DDP <= plain + 0.5 P; FSDP <= its "
          "bound + one step's other tensors (plain - 4 P) + 0.1 P; ZeRO step/DDP <= 1.15; FSDP step/ZeRO "
          "<= 1.3 at 2 ranks; FSDP moves 1.5x DDP; fsdp-serial: no gather ahead (TG_FSDP_PREFETCH=0)")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "CPU unknown"


def gpt_table(ranks: list[int], args: argparse.Namespace) -> None:
    print(
        f"GPT {args.n_layer} layers x {args.n_embd}, batch {args.batch}x{args.block} per rank, "
        f"one thread per rank, "
        f"{os.cpu_count()} cores ({cpu_name()}); {args.steps} timed steps (median)"
    )
    head = (
        f"{'ranks':>5} {'mode':>5} {'ckpt':>4} | {'step ms':>8} {'tok/s':>9} "
        f"{'x 1 rank':>8} | {'peak MiB':>8} "
        f"{'act MiB':>8} {'act/plain':>9} | {'state KiB':>9} "
        f"{'x N/DDP':>7} | {'step/DDP':>8} {'step/plain':>10}"
    )
    print(head)
    print("-" * len(head))
    results: dict[tuple[int, str, bool], list[dict]] = {}
    for world in ranks:
        for mode in ("ddp", "zero", "fsdp"):
            for ckpt in (False, True):
                res = results[(world, mode, ckpt)] = run(world, mode, ckpt, args)
                step = max(r["step_s"] for r in res)
                tok = world * args.batch * args.block / step
                one = results.get((1, mode, ckpt))
                scale = (
                    tok / (args.batch * args.block / max(r["step_s"] for r in one)) if one else float("nan")
                )
                plain = results.get((world, mode, False))
                ddp = results.get((world, "ddp", ckpt))
                act = max(r["activation"] for r in res)
                act_ratio = act / max(r["activation"] for r in plain) if plain else float("nan")
                state = max(r["state"] for r in res)
                state_ratio = (
                    state * world / max(r["state"] for r in ddp) if ddp and mode != "ddp" else float("nan")
                )
                step_ddp = step / max(r["step_s"] for r in ddp) if ddp else float("nan")
                step_plain = step / max(r["step_s"] for r in plain) if plain else float("nan")
                on = "on" if ckpt else "off"
                print(
                    f"{world:>5} {mode:>5} {on:>4} | {step * 1e3:8.1f} {tok:9,.0f} {scale:8.2f} | "
                    f"{max(r['peak'] for r in res) / 2**20:8.1f} {act / 2**20:8.1f} {act_ratio:9.2f} | "
                    f"{state / 1024:9.1f} {state_ratio:7.3f} | {step_ddp:8.2f} {step_plain:10.2f}",
                    flush=True,
                )
    print(
        "targets: ZeRO and FSDP state x N/DDP = 1.00 (within 1%); ZeRO step/DDP <= 1.15; checkpointing "
        "act/plain <= 0.5 at step/plain <= 1.4; 2 ranks x 1 rank >= 1.6"
    )


if __name__ == "__main__":
    main()
