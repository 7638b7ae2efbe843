"""Collectives, DDP and ZeRO-2 on tensors in device memory: every rank on an OpenCL device of its own
(TG_CL_SPLIT=2 makes two of the CPU; LOCAL_RANK picks one), results left on that device, equal to the
same work on host memory. The large, pipelined case is in test_staging.py."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from harness import run_ranks
from test_staging import CL_ENV, KIND, needs_cl, per_rank_devices
from test_training import (
    MLP,
    TINY_BUCKET,
    assert_ranks_agree,
    batches,
    max_diff,
    mse,
    numpy_params,
    reference,
    rows_of,
    zero_train,
)


def _data(rank: int, shape: tuple, dtype: str, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * salt + rank)
    if dtype == "int32":
        return rng.integers(-50, 50, shape).astype(np.int32)
    return rng.standard_normal(shape).astype(np.float32)


def _every_collective(rank: int, world: int, dtype: str) -> dict:
    """Each collective once on device tensors of odd sizes; checks values against numpy on every rank
    and that each result is still on this rank's device."""
    import tg.distributed as dist
    from tg import Tensor
    device = Tensor([0]).device
    seen = []

    def on_device(a: np.ndarray) -> Tensor:
        t = Tensor(a, dtype=dtype).realize()
        seen.append(t)
        return t

    def rows(salt: int, shape: tuple) -> list[np.ndarray]:
        return [_data(r, shape, dtype, salt) for r in range(world)]

    def close(t: Tensor, want: np.ndarray) -> None:
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)

    x = rows(1, (5, 7))
    t = on_device(x[rank])
    dist.all_reduce(t)
    close(t, np.sum(x, axis=0, dtype=x[0].dtype))
    t = on_device(x[rank])
    dist.all_reduce(t, op=dist.ReduceOp.MIN, async_op=True).wait()
    close(t, np.min(x, axis=0))
    t = on_device(x[rank])
    dist.broadcast(t, src=world - 1)
    close(t, x[world - 1])
    t = on_device(x[rank])
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    close(t, np.max(x, axis=0) if rank == 0 else x[rank])

    g = rows(2, (3, 4))
    outs = [on_device(np.zeros((3, 4), g[0].dtype)) for _ in range(world)]
    dist.all_gather(outs, on_device(g[rank]))
    for r, o in enumerate(outs):
        close(o, g[r])
    whole = on_device(np.zeros((3 * world, 4), g[0].dtype))
    dist.all_gather_into_tensor(whole, on_device(g[rank]))
    close(whole, np.concatenate(g))

    s = rows(3, (world * 3, 5))
    part = on_device(np.zeros((3, 5), s[0].dtype))
    dist.reduce_scatter_tensor(part, on_device(s[rank]))
    close(part, np.sum(s, axis=0, dtype=s[0].dtype)[rank * 3:(rank + 1) * 3])
    part = on_device(np.zeros((3, 5), s[0].dtype))
    dist.reduce_scatter(part, [on_device(s[rank][i * 3:(i + 1) * 3]) for i in range(world)])
    close(part, np.sum(s, axis=0, dtype=s[0].dtype)[rank * 3:(rank + 1) * 3])

    a = rows(4, (world * 2, 3))
    swapped = on_device(np.zeros((world * 2, 3), a[0].dtype))
    dist.all_to_all_single(swapped, on_device(a[rank]))
    close(swapped, np.concatenate([a[r][rank * 2:(rank + 1) * 2] for r in range(world)]))
    gathered = [on_device(np.zeros(3, a[0].dtype)) for _ in range(world)] if rank == 0 else None
    dist.gather(on_device(a[rank][0]), gathered, dst=0)
    if rank == 0:
        for r, o in enumerate(gathered):
            close(o, a[r][0])
    got = on_device(np.zeros(3, a[0].dtype))
    dist.scatter(got, [on_device(a[0][r]) for r in range(world)] if rank == 0 else None, src=0)
    close(got, a[0][rank])

    p = rows(5, (9,))
    if rank == 0:
        dist.send(on_device(p[0]), dst=1)
    elif rank == 1:
        got = on_device(np.zeros(9, p[0].dtype))
        dist.recv(got, src=0)
        close(got, p[0])
    dist.barrier()
    from tg import Device
    return {"device": device, "stayed": sorted({s.device for s in seen}), "count": Device.count(KIND)}


@pytest.mark.parametrize("world,dtype", [(2, "float32"), (3, "float32"), (2, "int32")])
def test_every_collective_on_device_tensors(world, dtype):
    needs_cl()
    results = run_ranks(world, _every_collective, dtype, env=CL_ENV, timeout=240)
    devices = per_rank_devices(world, results[0]["count"])
    assert [r["device"] for r in results] == devices
    assert [r["stayed"] for r in results] == [[d] for d in devices]


def _ddp_on_device(rank: int, world: int, steps: int) -> dict:
    import tg.distributed as dist
    from tg import Device, Tensor
    from tg.nn.optim import Adam
    from tg.nn.state import get_parameters
    model = MLP(seed=100 + rank)
    ddp = dist.DistributedDataParallel(model, bucket_mb=TINY_BUCKET)
    opt = Adam(get_parameters(model), lr=0.01)
    for (batch,) in batches(steps):
        opt.zero_grad()
        mse(ddp, *rows_of(rank, world, batch)).backward()
        opt.step()
    return {
        "params": numpy_params(model),
        "devices": sorted({p.device for p in get_parameters(model)}),
        "grad_devices": sorted({p.grad.device for p in get_parameters(model)}),
        "default": Tensor([0]).device,
        "count": Device.count(KIND),
    }


def _zero_on_device(rank: int, world: int, steps: int) -> dict:
    from tg import Device, Tensor
    out = zero_train(rank, world, "adam", {}, 1, steps)
    return {**out, "default": Tensor([0]).device, "count": Device.count(KIND)}


@pytest.mark.parametrize("kind", ["ddp", "zero"])
def test_ddp_and_zero_on_device_parameters_equal_one_process(kind):
    needs_cl()
    fn = _ddp_on_device if kind == "ddp" else _zero_on_device
    results = run_ranks(2, fn, 3, env=CL_ENV, timeout=240)
    want, _ = reference(numpy_params(MLP(seed=100)), batches(3), "adam", {})
    devices = per_rank_devices(2, results[0]["count"])
    assert [r["default"] for r in results] == devices
    assert_ranks_agree([r["params"] for r in results])
    assert max_diff(results[0]["params"], want) < 1e-5
    if kind == "ddp":
        assert [r["devices"] for r in results] == [[d] for d in devices]
        assert [r["grad_devices"] for r in results] == [[d] for d in devices]


LAUNCHED = """
import json, os, sys
import numpy as np
import tg.distributed as dist
from tg import Device, Tensor
dist.init_process_group()
t = Tensor(np.full(4, dist.get_rank() + 1.0, np.float32))
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"device": t.device, "sum": t.numpy().tolist(),
               "count": Device.count(t.device.split(":")[0])}, f)
dist.destroy_process_group()
"""


def test_tglaunch_puts_each_rank_on_its_own_device(tmp_path):
    """tglaunch sets LOCAL_RANK; with no device named, rank r opens CL:r, and DEBUG=1 says why."""
    needs_cl()
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(LAUNCHED))
    env = {**os.environ, **CL_ENV, "DEBUG": "1"}
    r = subprocess.run([sys.executable, "-m", "tg.launch", "--nproc", "2", str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    got = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in range(2)]
    count = got[0]["count"]
    assert [g["device"] for g in got] == per_rank_devices(2, count)
    assert all(g["sum"] == [3.0] * 4 for g in got)
    said = r.stdout + r.stderr
    why = rf"local rank 1 of {count} {KIND} devices" if count > 1 else rf"TG_DEVICE={KIND}; 1 {KIND} device"
    rank1 = re.escape(per_rank_devices(2, count)[1])
    assert re.search(rf"\[rank1\]: \[device\] default device {rank1} \({why}", said), said[-2000:]
