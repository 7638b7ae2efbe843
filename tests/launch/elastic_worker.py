"""A small elastic training job (tests/launch/test_elastic.py, scripts/bench_elastic.py): linear regression
under DistributedDataParallel, the pattern of scripts/train.py in a few lines. On every start it loads the
newest checkpoint at whatever world size the job now has; the loader deals the rest of the epoch out among
the ranks there are, and the step count goes on. Rank 0 appends one JSON line a step to OUT/steps.jsonl:
step, epoch, world size, restart count, every rank's sample indices, loss, time.

    tglaunch --config job.yaml elastic_worker.py OUT STEPS CKPT_EVERY STEP_SECONDS [CRASH_AT_STEP]

With CRASH_AT_STEP the last rank raises at that step on the job's first start (a worker failure, not a
node lost).
"""
import json
import os
import sys
import time

import numpy as np

import tg.distributed as dist
from tg import Tensor, config, nn

N, BATCH, FEATURES = 240, 2, 8


def main() -> None:
    out, steps, ckpt_every, step_seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    crash_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, FEATURES)).astype(np.float32)
    y = x @ rng.standard_normal((FEATURES, 1)).astype(np.float32)
    loader = dist.DataLoader(np.arange(N), BATCH, drop_last=True,
                             sampler=dist.DistributedSampler(N, seed=1, drop_last=True))
    model = nn.Linear(FEATURES, 1)
    opt = nn.optim.SGD(nn.state.get_parameters(model), lr=0.05)
    net = dist.DistributedDataParallel(model)
    ckpt = os.path.join(out, "ckpt")
    meta = dist.load_checkpoint(ckpt, model, opt) if config.TG_RESTART_COUNT > 0 else None
    step, epoch = 0, 0
    if meta is not None:
        step, epoch = meta["step"], meta["extra"]["loader"]["epoch"]
        loader.load_state_dict(meta["extra"]["loader"])
    if rank == 0:
        print(f"start: world {world}, restart {config.TG_RESTART_COUNT}, from step {step}", flush=True)
    while step < steps:
        loader.set_epoch(epoch)
        for idx in loader:
            step += 1
            if step == crash_at and config.TG_RESTART_COUNT == 0 and rank == world - 1:
                raise RuntimeError(f"rank {rank} fails at step {step} (the test's crash)")
            loss = ((net(Tensor(x[idx])) - Tensor(y[idx])) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            every = np.zeros((world, BATCH + 1), np.float64)
            dist.all_gather_into_tensor(every, np.array([*idx, loss.item()], np.float64))
            if rank == 0:
                record = {"step": step, "epoch": epoch, "world": world, "restart": config.TG_RESTART_COUNT,
                          "failures": config.TG_FAILURE_RESTARTS, "changes": config.TG_MEMBERSHIP_CHANGES,
                          "indices": every[:, :BATCH].astype(int).ravel().tolist(),
                          "loss": float(every[:, BATCH].mean()), "time": time.time()}
                with open(os.path.join(out, "steps.jsonl"), "a") as f:
                    f.write(json.dumps(record) + "\n")
            if step % ckpt_every == 0:
                dist.save_checkpoint(ckpt, step, model, opt, extra={"loader": loader.state_dict()})
            time.sleep(step_seconds)
            if step == steps:
                break
        else:
            epoch += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
