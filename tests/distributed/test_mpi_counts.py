"""MPI counts are C ints: one call over more than 2^31 - 1 elements aborts the job with MPI_ERR_ARG.
The mpi backend moves larger transfers in parts of at most TG_MPI_MAX_COUNT elements per buffer; here
the limit is forced down to a few elements, so every collective and send/recv of a few hundred
elements goes in many parts, and a recording communicator checks that no MPI call was given a larger
buffer (but a send's fixed 272-byte descriptor). The results must still equal numpy's."""
from __future__ import annotations

from typing import Any

import numpy as np
from harness import run_ranks

LIMIT = 7
SIZES = [0, 1, 6, 7, 8, 50, 333]
DTYPES = ["float64", "int8", "float16", "int32"]


class Recording:
    """A communicator that passes every call on, after noting the largest buffer it was given."""

    def __init__(self, comm: Any, seen: list[tuple[str, int]]):
        self._comm, self._seen = comm, seen

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._comm, name)
        if not callable(method) or not name[:1].isupper():
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            for a in [*args, *kwargs.values()]:
                buf = a[0] if isinstance(a, list) and a else a
                if isinstance(buf, np.ndarray):
                    self._seen.append((name, buf.size))
            return method(*args, **kwargs)
        return call

    def __eq__(self, other: object) -> bool:
        return self._comm == (other._comm if isinstance(other, Recording) else other)

    __hash__ = None  # type: ignore[assignment]


def data(rank: int, dtype: str, n: int, salt: int) -> np.ndarray:
    rng = np.random.default_rng(100 * salt + rank)
    return rng.integers(-9, 9, n).astype(dtype)


# Complexity: one block per collective, each checked against numpy.
def count_suite(rank: int, world: int) -> list[str]:  # noqa: C901
    import tg.distributed as dist
    from tg.distributed import _State
    g = _State.default
    seen: list[tuple[str, int]] = []
    g.coll.comm = Recording(g.coll.comm, seen)       # MpiCollectives: the collectives' communicator
    g.transport.p2p = Recording(g.transport.p2p, seen)
    bad: list[str] = []

    def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
        if not np.array_equal(got, want):
            bad.append(f"{what}: got {got[:8]}, expected {want[:8]}")
    salt = 0
    for dtype in DTYPES:
        for n in SIZES:
            salt += 1
            name = f"{dtype}[{n}]"
            parts = [data(r, dtype, n * world, salt) for r in range(world)]
            wide = np.float64 if dtype == "float16" else dtype
            total = sum(p.astype(wide) for p in parts).astype(dtype)
            x = parts[rank].copy()
            dist.all_reduce(x)
            check(f"all_reduce {name}", x, total)
            x = parts[rank].copy()
            dist.reduce(x, dst=1)
            check(f"reduce {name}", x, total if rank == 1 else parts[rank])
            x = parts[rank].copy()
            dist.broadcast(x, src=world - 1)
            check(f"broadcast {name}", x, parts[-1])
            out = np.zeros(n * world * world, dtype)
            dist.all_gather_into_tensor(out, parts[rank])
            check(f"all_gather_into_tensor {name}", out, np.concatenate(parts))
            outs = [np.zeros(n * world, dtype) for _ in range(world)]
            dist.all_gather(outs, parts[rank])
            check(f"all_gather {name}", np.concatenate(outs), np.concatenate(parts))
            out = np.zeros(n, dtype)
            dist.reduce_scatter_tensor(out, parts[rank])
            check(f"reduce_scatter_tensor {name}", out, total.reshape(world, n)[rank])
            outs = [np.zeros(n * world, dtype) for _ in range(world)] if rank == 0 else None
            dist.gather(parts[rank], outs, dst=0)
            if rank == 0:
                check(f"gather {name}", np.concatenate(outs), np.concatenate(parts))
            out = np.zeros(n, dtype)
            dist.scatter(out, list(parts[0].reshape(world, n)) if rank == 0 else None, src=0)
            check(f"scatter {name}", out, parts[0].reshape(world, n)[rank])
            out = np.zeros(n * world, dtype)
            dist.all_to_all_single(out, parts[rank])
            check(f"all_to_all_single {name}", out,
                  np.concatenate([p.reshape(world, n)[rank] for p in parts]))
            x = np.zeros(n * world, dtype)
            if rank == 0:
                dist.send(parts[0], dst=1)
            elif rank == 1:
                dist.recv(x, src=0)
                check(f"recv {name}", x, parts[0])
    # a receive of the wrong shape still raises naming both, and leaves the ranks in step
    if rank == 0:
        dist.send(np.arange(40.0), dst=1)
    elif rank == 1:
        try:
            dist.recv(np.zeros(30), src=0)
            bad.append("recv of a float64[30] from a float64[40] did not raise")
        except dist.DistributedError as e:
            if "float64[40]" not in str(e) or "float64[30]" not in str(e):
                bad.append(f"recv of the wrong shape said: {e}")
    x = np.ones(5)
    dist.all_reduce(x)
    check("all_reduce after the wrong recv", x, np.full(5, float(world)))
    from tg.distributed.transport.mpi import (
        DESC_BYTES,  # a send's descriptor: a fixed, small message of its own
    )
    big = [(name, size) for name, size in seen if size > LIMIT and size != DESC_BYTES]
    if big:
        bad.append(f"MPI calls given more than {LIMIT} elements: {sorted(set(big))[:10]}")
    return bad


def test_mpi_moves_large_counts_in_parts():
    for rank, bad in enumerate(run_ranks(3, count_suite, backend="mpi", env={"TG_MPI_MAX_COUNT": str(LIMIT)},
                                         timeout=240, dist_timeout=60)):
        assert not bad, f"rank {rank}:\n" + "\n".join(bad[:20])
