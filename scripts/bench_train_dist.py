"""Data-parallel training of the byte-level GPT (scripts/train.py's model) at 1, 2 and 4 ranks, with
DDP and with ZeRO-2, each with and without activation checkpointing.

    python scripts/bench_train_dist.py                          # ranks 1,2,4; 8 layers
    python scripts/bench_train_dist.py --ranks 1,2 --steps 20 --n-layer 4

Every configuration is a real job started by tglaunch, each rank with one thread (TG_CPU_THREADS=1).
Columns: step time (median of the timed steps, TinyJit replays) and tokens/s over all ranks; peak
tensor memory of a rank during the timed steps; the activation memory of one eager step (its peak
above what was allocated before it: what checkpointing trades for recompute); optimizer-state
bytes per rank (the wrapped optimizer's moments: ZeRO-2 keeps 1/N of them; its float32 master and
summed gradient of the shard, another 2/N of the parameters' bytes, are in peak MiB). The limits are
measured in the same run: 1 rank's tokens/s (linear scaling), DDP's step time and state, the
uncheckpointed run's memory and step time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def worker(args: argparse.Namespace) -> None:
    from train import GPT

    import tg.distributed as dist
    from tg import GlobalCounters, Tensor, TinyJit, nn
    from tg.nn.state import get_parameters
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    Tensor.manual_seed(0)
    model = GPT(256, args.block, args.n_layer, args.n_head, args.n_embd, checkpoint_activations=args.ckpt)
    params = get_parameters(model)
    if args.mode == "zero":
        opt: nn.optim.Optimizer = dist.ZeroOptimizer(params, nn.optim.AdamW, lr=1e-3)
        net = model
    else:
        opt = nn.optim.AdamW(params, lr=1e-3)
        net = dist.DistributedDataParallel(model)
    rng = np.random.default_rng(rank)

    def batch() -> tuple[Tensor, Tensor]:
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
    for _ in range(args.steps):
        x, y = batch()
        x.realize(y)
        dist.barrier()
        start = time.perf_counter()
        jit_step(x, y).item()
        times.append(time.perf_counter() - start)
    plain = opt.optimizer if args.mode == "zero" else opt
    state = sum(t.nbytes for k, t in plain.flat_state_dict().items() if k.startswith("state."))
    mine = {"step_s": float(np.median(times)), "peak": GlobalCounters.mem_peak, "activation": activation,
            "state": state, "params": sum(p.numel() for p in params)}
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        print("BENCH " + json.dumps(every), flush=True)
    dist.destroy_process_group()


def run(world: int, mode: str, ckpt: bool, args: argparse.Namespace) -> list[dict]:
    cmd = [sys.executable, "-m", "tg.launch", "--nproc", str(world), os.path.abspath(__file__), "--worker",
           "--mode", mode, "--steps", str(args.steps), "--batch", str(args.batch), "--block", str(args.block),
           "--n-layer", str(args.n_layer), "--n-head", str(args.n_head), "--n-embd", str(args.n_embd)]
    cmd += ["--ckpt"] if ckpt else []
    env = {**os.environ, "TG_CPU_THREADS": "1", "PYTHONPATH": os.path.join(HERE, "..")}
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
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="ddp", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    ranks = [int(r) for r in args.ranks.split(",")]
    print(
        f"GPT {args.n_layer} layers x {args.n_embd}, batch {args.batch}x{args.block} per rank, "
        f"one thread per rank, "
        f"{os.cpu_count()} cores; {args.steps} timed steps (median)"
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
        for mode in ("ddp", "zero"):
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
                    state * world / max(r["state"] for r in ddp) if ddp and mode == "zero" else float("nan")
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
        "targets: ZeRO state x N/DDP = 1.00 (within 1%); ZeRO step/DDP <= 1.15; checkpointing act/plain "
        "<= 0.5 "
        "at step/plain <= 1.4; 2 ranks x 1 rank >= 1.6"
    )


if __name__ == "__main__":
    main()
