"""Every collective x dtype x reduce op x size against numpy, in real processes at world sizes
1, 2, 3 and 4. Each rank builds its inputs from a seed, so it can compute every expected value."""
import numpy as np
import pytest
from harness import BACKENDS, require, run_ranks

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool"]
SIZES = [0, 1, 7, 1 << 20]


def inputs(rank: int, dtype: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + n)
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype in ("int32", "int64", "uint8"):
        return rng.integers(1, 5, n).astype(dtype)
    return rng.uniform(0.5, 1.5, n).astype(dtype)


def expected(op: str, parts: list) -> np.ndarray:
    stack = np.stack(parts).astype(np.float64 if parts[0].dtype.kind == "f" else parts[0].dtype)
    if parts[0].dtype == bool:
        return {"SUM": np.any, "MAX": np.any, "MIN": np.all, "PRODUCT": np.all, "BAND": np.all, "BOR": np.any,
                "BXOR": lambda s, axis: np.bitwise_xor.reduce(s, axis=axis)}[op](stack, axis=0)
    return {
        "SUM": lambda s: s.sum(0),
        "AVG": lambda s: s.mean(0),
        "PRODUCT": lambda s: s.prod(0),
        "MIN": lambda s: s.min(0),
        "MAX": lambda s: s.max(0),
        "BAND": lambda s: np.bitwise_and.reduce(s, 0),
        "BOR": lambda s: np.bitwise_or.reduce(s, 0),
        "BXOR": lambda s: np.bitwise_xor.reduce(s, 0),
    }[op](stack)


def close(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    tol = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}.get(dtype, 0)
    if got.shape != want.shape:
        return False
    return (
        bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol))
        if tol
        else bool(np.array_equal(got, want))
    )


# Complexity: a conformance suite: one block per collective, each checked against numpy.
def collective_suite(rank: int, world: int) -> list[str]:  # noqa: C901
    """Runs everything; returns a list of failures (empty when all is well)."""
    import tg.distributed as dist
    from tg import Tensor
    bad: list[str] = []
    for dtype in DTYPES:
        kind = np.dtype(dtype).kind
        ops = ["SUM", "PRODUCT", "MIN", "MAX"] + (["AVG"] if kind == "f" else ["BAND", "BOR", "BXOR"])
        for n in SIZES:
            if n > 7 and dtype not in ("float32", "int32"):
                continue
            parts = [inputs(r, dtype, n) for r in range(world)]
            for op in ops:
                if op == "PRODUCT" and n > 7:
                    continue
                x = parts[rank].copy()
                dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
                if not close(
                    x, expected(op, parts).astype(dtype) if dtype != "bool" else expected(op, parts), dtype
                ):
                    bad.append(f"all_reduce {op} {dtype}[{n}]")
            # broadcast from the last rank, all_gather, reduce_scatter, gather, scatter, all_to_all
            x = parts[rank].copy()
            dist.broadcast(x, src=world - 1)
            if not np.array_equal(x, parts[-1]):
                bad.append(f"broadcast {dtype}[{n}]")
            out = np.zeros(n * world, dtype)
            dist.all_gather_into_tensor(out, parts[rank])
            if not np.array_equal(out, np.concatenate(parts)):
                bad.append(f"all_gather_into_tensor {dtype}[{n}]")
            # the group's coalesced all_gather (ZeRO-2's buckets after step()): several outs in one call,
            # each part sent from its own block of its out (a copy under MPI, which forbids that)
            group = dist._group(None)
            small = [inputs(r, dtype, 3) for r in range(world)]
            outs = [np.zeros(n * world, dtype), np.zeros(3 * world, dtype)]
            outs[0][rank * n:(rank + 1) * n], outs[1][rank * 3:(rank + 1) * 3] = parts[rank], small[rank]
            mines = [outs[0][rank * n:(rank + 1) * n], outs[1][rank * 3:(rank + 1) * 3]]
            mines = [m.copy() for m in mines] if dist.get_backend() == "mpi" else mines
            group.run_now(group.all_gather, outs, mines)
            if not (np.array_equal(outs[0], np.concatenate(parts))
                    and np.array_equal(outs[1], np.concatenate(small))):
                bad.append(f"coalesced all_gather {dtype}[{n}] + {dtype}[3]")
            lst = [np.zeros(n, dtype) for _ in range(world)]
            dist.all_gather(lst, parts[rank])
            if not all(np.array_equal(a, b) for a, b in zip(lst, parts)):
                bad.append(f"all_gather {dtype}[{n}]")
            if kind != "b":
                big = [inputs(r, dtype, n * world) for r in range(world)]
                sent = big[rank].copy()
                for op in ["SUM"] + (["AVG", "MAX"] if kind == "f" else []):
                    rs = np.zeros(n, dtype)
                    dist.reduce_scatter_tensor(rs, big[rank], op=getattr(dist.ReduceOp, op))
                    if not close(rs, expected(op, big)[rank * n:(rank + 1) * n].astype(dtype), dtype):
                        bad.append(f"reduce_scatter_tensor {op} {dtype}[{n}]")
                    if not np.array_equal(big[rank], sent):   # torch's contract: the input is only read
                        bad.append(f"reduce_scatter_tensor {op} {dtype}[{n}] changed its input")
                want = expected("SUM", big)[rank * n:(rank + 1) * n].astype(dtype)
                rsl = np.zeros(n, dtype)
                dist.reduce_scatter(rsl, [b.copy() for b in np.split(big[rank], world)])
                if not close(rsl, want, dtype):
                    bad.append(f"reduce_scatter {dtype}[{n}]")
                red = parts[rank].copy()
                dist.reduce(red, dst=0)
                if rank == 0 and not close(red, expected("SUM", parts).astype(dtype), dtype):
                    bad.append(f"reduce {dtype}[{n}]")
            gl = [np.zeros(n, dtype) for _ in range(world)] if rank == 0 else None
            dist.gather(parts[rank], gl, dst=0)
            if rank == 0 and not all(np.array_equal(a, b) for a, b in zip(gl, parts)):
                bad.append(f"gather {dtype}[{n}]")
            sc = np.zeros(n, dtype)
            dist.scatter(sc, [inputs(99, dtype, n) + 0 * r if kind != "b" else inputs(99, dtype, n)
                              for r in range(world)] if rank == 1 % world else None, src=1 % world)
            if not np.array_equal(sc, inputs(99, dtype, n)):
                bad.append(f"scatter {dtype}[{n}]")
            a2a_in = np.concatenate([np.full(max(n, 1), 10 * rank + j, np.int64) for j in range(world)])
            a2a_out = np.zeros_like(a2a_in)
            dist.all_to_all_single(a2a_out, a2a_in)
            if not np.array_equal(a2a_out, np.concatenate([np.full(max(n, 1), 10 * j + rank, np.int64)
                                                           for j in range(world)])):
                bad.append(f"all_to_all_single [{n}]")
    # tg Tensors (in place), bfloat16 reduced in float32, async handles, barrier, objects, p2p
    t = Tensor(np.full(5, rank + 1, np.float32))
    dist.all_reduce(t)
    if t.tolist() != [world * (world + 1) / 2] * 5:
        bad.append("all_reduce on a Tensor")
    tb = Tensor(np.full(3, rank + 1.0, np.float32), dtype="bfloat16")
    dist.all_reduce(tb, op=dist.ReduceOp.AVG)
    if not np.allclose(tb.numpy(), (world + 1) / 2, rtol=1e-2):
        bad.append("bfloat16 AVG")
    works = [dist.all_reduce(np.full(4, float(i)), async_op=True) for i in range(3)]
    for w in works:
        w.wait(timeout=30)
    if not all(w.is_completed() and w.exception() is None for w in works):
        bad.append("async handles")
    dist.barrier()
    if dist.broadcast_object({"from": rank, "list": [1, 2]}, src=0) != {"from": 0, "list": [1, 2]}:
        bad.append("broadcast_object")
    objs = [None] * world
    dist.all_gather_object(objs, f"rank{rank}")
    if objs != [f"rank{r}" for r in range(world)]:
        bad.append("all_gather_object")
    if world > 1:
        if rank == 0:
            dist.send(np.arange(6, dtype=np.float32), dst=1)
            back = np.zeros(6, np.float32)
            dist.recv(back, src=world - 1)
            if not np.array_equal(back, np.arange(6, dtype=np.float32) * world):
                bad.append("send/recv ring")
        else:
            buf = np.zeros(6, np.float32)
            dist.recv(buf, src=rank - 1)
            buf += np.arange(6, dtype=np.float32)
            dist.send(buf, dst=(rank + 1) % world)
    locals_ = [None] * world      # one host: each rank has its own local rank (mpiexec may permute them)
    dist.all_gather_object(locals_, dist.get_local_rank())
    if dist.get_rank() != rank or dist.get_world_size() != world or sorted(locals_) != list(range(world)):
        bad.append("get_rank / get_world_size / get_local_rank")
    return bad


def subgroup_suite(rank: int, world: int) -> list:
    import tg.distributed as dist
    odd = dist.new_group([r for r in range(world) if r % 2 == 1])
    even = dist.new_group([r for r in range(world) if r % 2 == 0])
    mine = even if rank % 2 == 0 else odd
    x = np.array([float(rank)])
    dist.all_reduce(x, group=mine)
    members = [r for r in range(world) if r % 2 == rank % 2]
    ok = x[0] == sum(members) and dist.get_world_size(mine) == len(members)
    other = odd if rank % 2 == 0 else even
    try:
        dist.all_reduce(np.ones(1), group=other)
        ok = False
    except ValueError:
        pass
    return [ok]


def transport_kind(rank: int, world: int) -> list:
    import tg.distributed as dist
    return [dist.get_backend(), dist._State.default.transport.kind if world > 1 else "local"]


def ucx_engine_suite(rank: int, world: int) -> dict:
    """Large all_reduce on the ucx transport: the C engine's ring, its pieces wrapping round its scratch
    (blocks of several pieces), odd sizes, each dtype family, against numpy; the bits each rank got."""
    import hashlib

    import tg.distributed as dist
    bad, digests = [], []
    cases = [("float64", "SUM", (1 << 18) + 5), ("float32", "AVG", (1 << 19) + 3), ("float16", "SUM", 300001),
             ("int64", "MAX", (1 << 17) + 1), ("bool", "BOR", 1 << 20), ("uint8", "BXOR", (1 << 20) + 7)]
    for dtype, op, n in cases:
        parts = [inputs(r, dtype, n) for r in range(world)]
        x = parts[rank].copy()
        dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
        want = expected(op, parts)
        if not close(x, want.astype(dtype) if dtype != "bool" else want, dtype):
            bad.append(f"all_reduce {op} {dtype}[{n}]")
        digests.append(hashlib.sha256(x.tobytes()).hexdigest())
    return {"bad": bad, "digests": digests, "coll": type(dist._State.default.coll).__name__}


@pytest.mark.parametrize("world", [2, 3])
def test_ucx_engine_all_reduce_against_numpy(world):
    require("ucx")
    results = run_ranks(world, ucx_engine_suite, timeout=300, backend="ucx")
    assert all(r["coll"] == "UcxCollectives" for r in results), results[0]["coll"]   # the engine ran
    assert all(r["bad"] == [] for r in results), [r["bad"] for r in results]
    assert all(r["digests"] == results[0]["digests"] for r in results)     # the same bits on every rank


def ucx_engine_missing_on_one_rank(rank: int, world: int) -> dict:
    """Rank 1 cannot build the engine (as without a C compiler): every rank then runs the Python ring."""
    import tg.distributed as dist
    from tg.core.compiler import CompileError
    from tg.distributed.transport import ucx_engine
    if rank == 1:
        def no_compiler() -> None:
            raise CompileError("[distributed] ucx_engine.c failed to compile (test)")
        ucx_engine.library = no_compiler
    dist.init_process_group()
    x = np.full((1 << 16) + 3, rank + 1.0, np.float32)
    dist.all_reduce(x)
    return {"ok": bool((x == world * (world + 1) / 2).all()), "coll": type(dist._State.default.coll).__name__}


def test_ucx_engine_missing_on_one_rank_means_none_uses_it():
    require("ucx")
    results = run_ranks(3, ucx_engine_missing_on_one_rank, init=False, backend="ucx")
    assert results == [{"ok": True, "coll": "OverTransport"}] * 3


def p2p_while_engine_waits(rank: int, world: int) -> list:
    """Rank 0's large all_reduce waits in the engine (async) while rank 0 sends to rank 1, which takes
    part in the all_reduce only once it has received: the send must go on during the wait."""
    import tg.distributed as dist
    x = np.full(1 << 20, rank + 1.0, np.float32)
    msg = np.arange(1000, dtype=np.float32)
    if rank == 0:
        work = dist.all_reduce(x, async_op=True)
        dist.send(msg, 1)
        work.wait()
    else:
        got = np.zeros_like(msg)
        dist.recv(got, 0)
        assert np.array_equal(got, msg)
        dist.all_reduce(x)
    return [float(x.min()), float(x.max())]


def test_point_to_point_goes_on_while_an_engine_all_reduce_waits():
    require("ucx")
    results = run_ranks(2, p2p_while_engine_waits, backend="ucx", timeout=60, dist_timeout=20)
    assert results == [[3.0, 3.0]] * 2


# the tcp backend's one-rank group has no transport, so tcp, shm and rings are the same at world 1
@pytest.mark.parametrize(
    "world,backend", [(w, b) for w in (1, 2, 3, 4) for b in BACKENDS if w > 1 or b not in ("shm", "rings")]
)
def test_collectives_against_numpy(world, backend):
    failures = run_ranks(world, collective_suite, timeout=300, backend=backend)
    assert failures == [[]] * world


@pytest.mark.parametrize("backend,kind", [("tcp", ["tcp", "tcp"]), ("shm", ["tcp", "tcp+shm"]),
                                          ("rings", ["tcp", "tcp+rings"]), ("ucx", ["ucx", "ucx"]),
                                          ("mpi", ["mpi", "mpi"])])
def test_backend_choice(backend, kind):
    assert run_ranks(2, transport_kind, backend=backend) == [kind, kind]


@pytest.mark.parametrize("world,backend", [(w, b) for w in (3, 4) for b in BACKENDS])
def test_subgroups(world, backend):
    assert run_ranks(world, subgroup_suite, backend=backend) == [[True]] * world


def test_one_rank_group_without_environment():
    import tg.distributed as dist
    dist.init_process_group()
    try:
        x = np.arange(4.0)
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0] and dist.get_world_size() == 1 and dist.get_rank() == 0
        w = dist.broadcast(x, src=0, async_op=True)
        assert w.wait() and w.is_completed()
    finally:
        dist.destroy_process_group()


def async_p2p_exchange(rank: int, world: int) -> list:
    """Both ranks post the receive first, then the send: async p2p must not serialise them."""
    import tg.distributed as dist
    peer = 1 - rank
    got = np.zeros(1000, np.float32)
    recv_work = dist.irecv(got, src=peer)
    send_work = dist.isend(np.full(1000, rank, np.float32), dst=peer)
    send_work.wait(timeout=30)
    recv_work.wait(timeout=30)
    return [bool((got == peer).all()), recv_work.is_completed(), recv_work.exception() is None]


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_point_to_point_both_directions(backend):
    assert run_ranks(2, async_p2p_exchange, backend=backend) == [[True, True, True]] * 2


def p2p_around_collectives(rank: int, world: int) -> list:
    """Legal in torch: p2p in flight while a collective runs, and send/recv on either side of one."""
    import tg.distributed as dist
    out = []
    if rank == 0:
        work = dist.isend(np.full(3_000_000, 7.0, np.float32), dst=1)
    else:
        buf = np.zeros(3_000_000, np.float32)
        work = dist.irecv(buf, src=0)
    x = np.ones(1 << 20, np.float32)
    dist.all_reduce(x)
    work.wait(timeout=30)
    out.append(float(x[0]))
    if rank == 1:
        out.append(float(buf[123]))
    y = np.ones(4)
    if rank == 0:
        dist.send(np.arange(10.0), dst=1)
        dist.all_reduce(y)
    else:
        dist.all_reduce(y)
        z = np.zeros(10)
        dist.recv(z, src=0)
        out.append(float(z.sum()))
    out.append(float(y[0]))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_point_to_point_around_collectives(backend):
    assert run_ranks(2, p2p_around_collectives, backend=backend) == [[2.0, 2.0], [2.0, 7.0, 45.0, 2.0]]


def group_on_other_backend(rank: int, world: int) -> list:
    import tg.distributed as dist
    other = "ucx" if dist.get_backend() == "tcp" else "gloo"      # torch's name for tcp
    g = dist.new_group(backend=other)
    x = np.array([rank + 1.0])
    dist.all_reduce(x, group=g)
    kind = g.transport.kind
    dist.destroy_process_group(g)
    return [x.tolist(), kind]


@pytest.mark.parametrize("backend,kind", [("shm", "ucx"), ("ucx", "tcp+shm")])
def test_new_group_on_another_backend(backend, kind):
    """torch's new_group(backend=...): a tcp job's group on ucx, a ucx job's on tcp."""
    require("ucx")
    assert run_ranks(2, group_on_other_backend, backend=backend) == [[[3.0], kind]] * 2


def group_on_tcp_in_mpi_job(rank: int, world: int) -> str:
    import tg.distributed as dist
    try:
        dist.new_group(backend="tcp")
    except ValueError as e:
        return str(e)
    return "no error"


def test_an_mpi_job_refuses_a_group_of_another_backend():
    for said in run_ranks(2, group_on_tcp_in_mpi_job, backend="mpi"):
        assert "this job runs on mpi" in said and "needs the rendezvous store" in said, said


def coalesced_gathers(rank: int, world: int) -> list[str]:
    """all_gather_into_tensor_coalesced on random lists of pairs (sizes, dtypes, inputs that are the
    output's own block or a separate array, async or not) against numpy; group.WORLD is the default."""
    import tg.distributed as dist
    failures = []
    assert dist.group.WORLD is not None and dist.group.WORLD.size == world
    for case in range(12):
        rng = np.random.default_rng(case)            # the same choices on every rank
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        sizes = [int(s) for s in rng.integers(0, 3000, int(rng.integers(1, 4)))]
        in_place = bool(rng.integers(2))
        outs = [np.zeros(world * n, dtype) for n in sizes]
        mine = [inputs(rank, dtype, n + case)[:n] for n in sizes]
        if in_place:         # each input the output's own block of this rank, as ZeRO-2 passes it
            for out, m, n in zip(outs, mine, sizes):
                out[rank * n:(rank + 1) * n] = m
            ins = [out[rank * n:(rank + 1) * n] for out, n in zip(outs, sizes)]
        else:
            ins = mine
        work = dist.all_gather_into_tensor_coalesced(outs, ins, async_op=bool(case % 2))
        if work is not None:
            work.wait()
        for out, n in zip(outs, sizes):
            want = np.concatenate([inputs(r, dtype, n + case)[:n] for r in range(world)])
            if not np.array_equal(out, want):
                failures.append(f"case {case} ({dtype}, sizes {sizes}, in place {in_place})")
    return failures


@pytest.mark.parametrize("world,backend", [(w, b) for w in (2, 3) for b in BACKENDS])
def test_coalesced_all_gather_against_numpy(world, backend):
    require(backend)
    assert run_ranks(world, coalesced_gathers, timeout=120, backend=backend) == [[]] * world


def test_coalesced_all_gather_refuses_bad_lists_at_the_call():
    import tg.distributed as dist
    dist.init_process_group()
    try:
        with pytest.raises(ValueError, match="same non-zero length"):
            dist.all_gather_into_tensor_coalesced([np.zeros(2)], [])
        with pytest.raises(ValueError, match="share one dtype"):
            dist.all_gather_into_tensor_coalesced([np.zeros(2), np.zeros(2, np.int32)],
                                                  [np.zeros(2), np.zeros(2, np.int32)])
        with pytest.raises(ValueError, match="must hold 1 x input"):
            dist.all_gather_into_tensor_coalesced([np.zeros(3)], [np.zeros(2)])
    finally:
        dist.destroy_process_group()
    assert dist.group.WORLD is None


def destroy_the_world(rank: int, world: int) -> list:
    import tg.distributed as dist
    x = np.ones(3)
    dist.all_reduce(x, group=dist.group.WORLD)
    dist.destroy_process_group(dist.group.WORLD)       # torch: the job's group, as destroy_process_group()
    gone = [dist.is_initialized(), dist.group.WORLD]
    dist.init_process_group()                          # and a new one may start (the same port's store)
    y = np.ones(2) * (rank + 1)
    dist.all_reduce(y)
    dist.destroy_process_group()
    return [float(x[0]), *gone, y.tolist()]


@pytest.mark.parametrize("world", [1, 2])
def test_destroying_group_world_leaves_the_job(world):
    total = float(world * (world + 1) / 2)
    want = [float(world), False, None, [total, total]]
    assert run_ranks(world, destroy_the_world, timeout=120) == [want] * world
