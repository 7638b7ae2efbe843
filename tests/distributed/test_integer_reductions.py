"""Integer SUM and PRODUCT wrap as numpy's do, on every backend: the same input gives the same bits
everywhere. Open MPI's vector ops saturate 8- and 16-bit integers (127 + 100 -> 127) from 64 elements
on; tcp, shm, rings and ucx wrap. Values are drawn near each dtype's limits, at sizes on both sides of
the vector width, for all_reduce, reduce, reduce_scatter_tensor and reduce_scatter."""
from __future__ import annotations

import numpy as np
import pytest
from harness import BACKENDS, run_ranks

DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64"]
SIZES = [1, 63, 64, 65, 129, 1000]
OPS = ["SUM", "PRODUCT"]


def values(rank: int, dtype: str, n: int, case: int) -> np.ndarray:
    """Near the top and bottom of the dtype's range, so that sums and products leave it."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1000 * case + rank)
    span = min(int(info.max) - int(info.min), 1 << 20)
    low = rng.integers(int(info.min), int(info.min) + span // 4, n, dtype=np.int64, endpoint=True)
    high = rng.integers(int(info.max) - span // 4, int(info.max), n, dtype=np.int64, endpoint=True)
    return np.where(rng.integers(0, 2, n).astype(bool), high, low).astype(dtype)


def wrapped(op: str, parts: list[np.ndarray]) -> np.ndarray:
    stack = np.stack(parts)
    with np.errstate(over="ignore"):
        return (stack.sum(0, dtype=stack.dtype) if op == "SUM" else stack.prod(0, dtype=stack.dtype))


def integer_suite(rank: int, world: int) -> list[str]:
    import tg.distributed as dist
    bad: list[str] = []

    def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
        if not np.array_equal(got, want):
            wrong = np.flatnonzero(got != want)[:4]
            bad.append(f"{what}: at {wrong.tolist()} got {got[wrong]}, expected {want[wrong]}")
    case = 0
    for dtype in DTYPES:
        for n in SIZES:
            for op in OPS:
                case += 1
                red, name = getattr(dist.ReduceOp, op), f"{op} {dtype}[{n * world}]"
                parts = [values(r, dtype, n * world, case) for r in range(world)]
                want = wrapped(op, parts)
                x = parts[rank].copy()
                dist.all_reduce(x, op=red)
                check(f"all_reduce {name}", x, want)
                x = parts[rank].copy()
                dist.reduce(x, dst=world - 1, op=red)
                check(f"reduce {name}", x, want if rank == world - 1 else parts[rank])
                out = np.zeros(n, dtype)
                dist.reduce_scatter_tensor(out, parts[rank], op=red)
                check(f"reduce_scatter_tensor {name}", out, want.reshape(world, n)[rank])
                out = np.zeros(n, dtype)
                dist.reduce_scatter(out, list(parts[rank].reshape(world, n)), op=red)
                check(f"reduce_scatter {name}", out, want.reshape(world, n)[rank])
    return bad


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_sums_and_products_wrap_like_numpy(backend: str):
    for rank, bad in enumerate(run_ranks(3, integer_suite, backend=backend, timeout=240, dist_timeout=60)):
        assert not bad, f"{backend} rank {rank}:\n" + "\n".join(bad[:20])
