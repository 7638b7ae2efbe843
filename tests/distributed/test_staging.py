"""Collectives on device memory go through the host in reused staging blocks; elementwise ones on
tensors over STAGE_PART bytes move in parts, so copies overlap the transport. Ranks run on CL devices
of their own (TG_CL_SPLIT=2 makes two of the CPU), with several parts and a ragged last one.
TG_TEST_RANK_KIND=CUDA runs these and test_device_tensors.py on GPUs instead (one device per local rank,
as many ranks per GPU as it takes); CI runs them on CL."""
import gc
import os

import numpy as np
import pytest
from harness import require, run_ranks

KIND = os.environ.get("TG_TEST_RANK_KIND", "CL").upper()
CL_ENV = {"TG_DEVICE": KIND, "TG_CL_SPLIT": "2"}


def needs_cl() -> None:
    from helpers import gpu_support  # here: mpiexec's ranks import this file without tests/ on the path
    if KIND == "CL":
        reason = gpu_support("CL")
        if reason is not None:
            pytest.skip(f"no OpenCL device here: {reason}")
        return
    from tg import Device
    try:
        Device[KIND]
    except (ImportError, RuntimeError, ValueError) as e:
        pytest.skip(f"TG_TEST_RANK_KIND={KIND}: no such device here: {e}")


def per_rank_devices(world: int, count: int) -> list[str]:
    """The default device of each local rank: KIND:(rank mod count), KIND:0 spelled KIND. On CL, count
    depends on the machine: TG_CL_SPLIT parts per OpenCL CPU runtime that compiles there (Intel's, and
    PoCL where it can)."""
    return [f"{KIND}:{r % count}" if r % count else KIND for r in range(world)]


def _data(rank: int, n: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(100 + rank)
    if dtype == "int32":
        return rng.integers(-1000, 1000, n).astype(np.int32)
    return rng.standard_normal(n).astype(np.float32)


def _pipelined_collectives(rank: int, world: int, n: int, dtype: str) -> dict:
    import tg.distributed as dist
    from tg import Device, Tensor
    data = [_data(r, n, dtype) for r in range(world)]
    made = []

    def tensor() -> Tensor:
        made.append(Tensor(data[rank], dtype=dtype).realize())
        return made[-1]
    total = tensor()
    dist.all_reduce(total)
    np.testing.assert_allclose(total.numpy(), np.sum(data, axis=0, dtype=data[0].dtype), rtol=1e-5, atol=1e-4)
    biggest = tensor()
    dist.all_reduce(biggest, op=dist.ReduceOp.MAX, async_op=True).wait()
    np.testing.assert_array_equal(biggest.numpy(), np.max(data, axis=0))
    sent = tensor()
    dist.broadcast(sent, src=world - 1)
    np.testing.assert_array_equal(sent.numpy(), data[world - 1])
    reduced = tensor()
    dist.reduce(reduced, dst=1, op=dist.ReduceOp.SUM)
    want = np.sum(data, axis=0, dtype=data[0].dtype) if rank == 1 else data[rank]
    np.testing.assert_allclose(reduced.numpy(), want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose((total * 2).numpy(), 2 * total.numpy())      # still usable on the device
    staged = Device[total.device].allocator.staged
    made.clear()
    del total, biggest, sent, reduced
    gc.collect()
    return {"device": Tensor([0.0]).device, "free_blocks": sum(len(v) for v in staged.values()),
            "count": Device.count(KIND)}


@pytest.mark.parametrize("world", [2, 3])
def test_large_collectives_on_device_tensors_move_in_parts(world):
    needs_cl()
    from tg.distributed.staging import STAGE_PART
    n = 2 * STAGE_PART // 4 + 12345                   # three parts, the last one short
    results = run_ranks(world, _pipelined_collectives, n, "float32", env=CL_ENV, timeout=240)
    assert [r["device"] for r in results] == per_rank_devices(world, results[0]["count"])
    assert all(r["free_blocks"] >= 1 for r in results)     # staging blocks went back to the pool


def test_pipelined_int32_over_mpi():
    needs_cl()
    require("mpi")
    from tg.distributed.staging import STAGE_PART
    # mpiexec binds each rank to a core, so each rank's CPU device is already its own: no split
    results = run_ranks(2, _pipelined_collectives, STAGE_PART // 4 + 3, "int32", env={"TG_DEVICE": KIND},
                        backend="mpi", timeout=240)
    assert [r["device"] for r in results] == per_rank_devices(2, results[0]["count"])


def test_staging_blocks_are_reused_and_never_shared_while_alive():
    needs_cl()
    from tg import Device, Tensor
    from tg.core.host import HostView
    alloc = Device[KIND].allocator
    x = Tensor(np.arange(1000, dtype=np.float32), device=KIND).realize()
    first = HostView(x)
    held = first.read()                       # the view's staging block, still in use
    del first
    gc.collect()
    second = HostView(x)
    assert not np.may_share_memory(second.read(), held)       # a live block is never handed out twice
    address = held.__array_interface__["data"][0]
    del second, held
    gc.collect()
    again = HostView(x).read()
    assert again.__array_interface__["data"][0] in (address, *[b.ctypes.data for v in alloc.staged.values()
                                                              for b in v])
    np.testing.assert_array_equal(again, np.arange(1000, dtype=np.float32))
