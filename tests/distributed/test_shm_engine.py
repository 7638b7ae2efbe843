"""The shared-memory engine (tg/distributed/shm_engine.c) against numpy, with slots so small that every
call takes many rounds: every dtype a collective carries, every reduce op it allows, both all_reduce
algorithms (one round a chunk, and parts), odd sizes, and the same bits on every rank."""
import hashlib

import numpy as np
import pytest
from harness import run_ranks

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
          "float32", "float64", "complex64", "complex128"]
SIZES = [0, 1, 7, 1001, 5003]


def ops_for(dtype: str) -> list[str]:
    kind = np.dtype(dtype).kind
    if kind == "b":
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    if kind in "iu":
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    if kind == "c":
        return ["SUM", "PRODUCT", "AVG"]
    return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]


def values(rank: int, dtype: str, n: int, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng([rank, n, salt, DTYPES.index(dtype)])
    kind = np.dtype(dtype).kind
    if kind == "b":      # bytes 0, 1 and 2: numpy reads any nonzero byte as True, and so must the engine
        return rng.integers(0, 3, n).astype(np.uint8).view(bool)
    if kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), n, endpoint=True).astype(dtype)
    x = rng.uniform(0.5, 1.5, n) * rng.choice([-1, 1], n)
    if kind == "c":
        x = x + 1j * rng.uniform(-1, 1, n)
    out = x.astype(dtype)
    if kind == "f" and n > 3:
        out[3] = np.nan            # MIN and MAX keep a NaN, as numpy's minimum and maximum do
    return out


UFUNC = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
         "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}


def reduced(parts: list[np.ndarray], op: str) -> np.ndarray:
    """The reduction in rank order, in the dtype (float16 in float32, rounded once), as numpy does it."""
    dtype = parts[0].dtype
    if dtype.kind == "b":
        parts = [p != 0 for p in parts]        # canonical bools: True is 1
    if dtype.kind == "b":
        fn = {"SUM": np.logical_or, "MAX": np.logical_or, "BOR": np.logical_or, "PRODUCT": np.logical_and,
              "MIN": np.logical_and, "BAND": np.logical_and, "BXOR": np.logical_xor}[op]
    else:
        fn = UFUNC[op]
    work = [p.astype(np.float32) if dtype == np.dtype(np.float16) else p for p in parts]
    acc = work[0].copy()
    for p in work[1:]:
        acc = fn(acc, p)
    if op == "AVG":
        acc = acc / len(parts)
    return acc.astype(dtype)


def same(got: np.ndarray, want: np.ndarray, exact: bool) -> bool:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if exact or got.dtype.kind not in "fc":
        return bool(np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"))
    tol = {"float16": 4e-3, "float32": 1e-6, "float64": 1e-14, "complex64": 1e-6, "complex128": 1e-14}
    return bool(np.allclose(got, want, rtol=tol[got.dtype.name], atol=tol[got.dtype.name], equal_nan=True))


def digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).view(np.uint8).tobytes()).hexdigest()[:16]


# Complexity: one block per collective, each checked against numpy.
def engine_suite(rank: int, world: int, slot_bytes: int) -> dict:  # noqa: C901
    from tg.distributed.transport import native, shm_engine
    shm_engine.SLOT_BYTES = slot_bytes       # before the group is made: many rounds a call
    import tg.distributed as dist
    dist.init_process_group(timeout=60)
    engine = dist._group(None).coll
    assert type(engine).__name__ == "ShmEngine", engine
    bad, digests = [], []
    for parts_from, name in ((1 << 62, "rounds"), (0, "parts")):
        engine.tune(shm_engine.SPINS_OVERSUBSCRIBED, native.YIELD_S, parts_from)
        for dtype in DTYPES:
            for n in SIZES:
                parts = [values(r, dtype, n) for r in range(world)]
                for op in ops_for(dtype):
                    x = parts[rank].copy()
                    dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
                    # one round a chunk adds in rank order, as `reduced` does; in parts, the owner of a
                    # part adds its own values first. A complex product is rounded as written out (numpy
                    # may fuse its multiply-adds).
                    exact = name == "rounds" and not (op == "PRODUCT" and np.dtype(dtype).kind == "c")
                    if not same(x, reduced(parts, op), exact):
                        bad.append(f"all_reduce ({name}) {op} {dtype}[{n}]")
                    digests.append(digest(x))
    for dtype in ("bool", "int8", "float16", "float64", "complex128"):
        for n in SIZES:
            parts = [values(r, dtype, n, 1) for r in range(world)]
            x = parts[rank].copy()
            dist.broadcast(x, src=world - 1)
            if not same(x, parts[-1], True):
                bad.append(f"broadcast {dtype}[{n}]")
            out = np.zeros(n * world, dtype)
            dist.all_gather_into_tensor(out, parts[rank])
            if not same(out, np.concatenate(parts), True):
                bad.append(f"all_gather {dtype}[{n}]")
            group = dist._group(None)        # coalesced: two pieces as one stream of rounds
            small = [values(r, dtype, 3, 2) for r in range(world)]
            outs = [np.zeros(n * world, dtype), np.zeros(3 * world, dtype)]
            group.run_now(group.all_gather, outs, [parts[rank], small[rank]])
            if not (same(outs[0], np.concatenate(parts), True)
                    and same(outs[1], np.concatenate(small), True)):
                bad.append(f"coalesced all_gather {dtype}[{n}] + [3]")
            gl = [np.zeros(n, dtype) for _ in range(world)] if rank == 0 else None
            dist.gather(parts[rank], gl, dst=0)
            if rank == 0 and not all(same(a, b, True) for a, b in zip(gl, parts)):
                bad.append(f"gather {dtype}[{n}]")
            sc = np.zeros(n, dtype)
            dist.scatter(sc, [values(50 + r, dtype, n) for r in range(world)] if rank == 1 else None, src=1)
            if not same(sc, values(50 + rank, dtype, n), True):
                bad.append(f"scatter {dtype}[{n}]")
            a2a_in = values(rank, dtype, n * world, 3)
            a2a_out = np.zeros_like(a2a_in)
            dist.all_to_all_single(a2a_out, a2a_in)
            want = np.concatenate([values(r, dtype, n * world, 3)[rank * n:(rank + 1) * n]
                                   for r in range(world)])
            if not same(a2a_out, want, True):
                bad.append(f"all_to_all_single {dtype}[{n * world}]")
            if dtype != "bool":
                big = [values(r, dtype, n * world, 4) for r in range(world)]
                ops = ["SUM", "MAX"] if np.dtype(dtype).kind != "c" else ["SUM", "AVG"]
                for op in ops:
                    rs = np.zeros(n, dtype)
                    dist.reduce_scatter_tensor(rs, big[rank], op=getattr(dist.ReduceOp, op))
                    if not same(rs, reduced(big, op)[rank * n:(rank + 1) * n], True):
                        bad.append(f"reduce_scatter {op} {dtype}[{n}]")
                # in place: the output is this rank's own block of the input
                inplace = big[rank].copy()
                dist.reduce_scatter_tensor(inplace[rank * n:(rank + 1) * n], inplace)
                mine = slice(rank * n, (rank + 1) * n)
                if not same(inplace[mine], reduced(big, "SUM")[mine], True):
                    bad.append(f"reduce_scatter in place {dtype}[{n}]")
    dist.barrier()
    dist.destroy_process_group()
    return {"bad": bad, "digests": digests}


@pytest.mark.parametrize("world,slot_bytes", [(2, 1024), (3, 4096), (4, 2048)])
def test_engine_against_numpy_in_many_rounds(world, slot_bytes):
    results = run_ranks(world, engine_suite, slot_bytes, init=False, backend="shm", timeout=300)
    for rank, r in enumerate(results):
        assert r["bad"] == [], f"rank {rank}: {r['bad']}"
    assert all(r["digests"] == results[0]["digests"] for r in results), "the ranks' all_reduce bits differ"


def misuse(rank: int, world: int) -> list[str]:
    import tg.distributed as dist
    said = []
    for call in (lambda: dist.all_to_all_single(np.zeros((), np.float32), np.ones((), np.float32)),
                 lambda: dist.all_reduce(np.frombuffer(bytearray(13), np.uint8)[1:].view(np.float32))):
        try:
            call()
            said.append("no error")
        except ValueError as e:
            said.append(str(e))
    x = np.ones(3, np.float32)
    dist.all_reduce(x)           # the group is still usable
    return [*said, str(x.tolist())]


def test_calls_the_engine_cannot_take_raise_at_the_call():
    """A 0-d all_to_all (no equal parts to send) and an unaligned array (the engine's C reads typed
    memory) are ValueErrors on every rank, before anything moves."""
    for r in run_ranks(2, misuse, backend="shm"):
        assert "first dim divisible by 2" in r[0], r
        assert "aligned" in r[1], r
        assert r[2] == "[2.0, 2.0, 2.0]"


def segments_in_use(rank: int, world: int) -> dict:
    import os

    import tg.distributed as dist
    g = dist._group(None)
    return {"kind": g.transport.kind, "engine": type(g.coll).__name__,
            "maps": sum("tg-" in line and "(deleted)" in line for line in open(f"/proc/{os.getpid()}/maps"))}


def test_one_host_group_runs_the_engine_and_leaves_no_files():
    for r in run_ranks(3, segments_in_use, backend="shm"):
        assert r["kind"] == "tcp+shm" and r["engine"] == "ShmEngine"
        assert r["maps"] == 3      # every rank's segment mapped, each already unlinked
