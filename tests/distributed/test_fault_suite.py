"""The fault suite: seeded random sequences of collectives in which one rank deviates.

Each case is a short plan of collectives (kind, size, dtype, root, reduce op drawn at random), run on
a fresh subgroup of every rank and closed by a barrier on it. One rank deviates at one step: another
kind, root, op, dtype or shape, a skipped or an extra call, an error of its own (it leaves the group,
as a rank whose script raised would), or nothing at all (the control). The rule under test, on every
backend and at 2, 3 and 4 ranks: every rank either finishes with the data numpy says, when nothing
deviated, or raises within seconds naming the deviating rank. Never a hang, a crash or wrong data.

Under mpi, a rank that skips or adds a call, or leaves, is caught by the watchdog after the timeout
and ends the whole job (MPI cannot take a rank out of a collective): those deviations run on the
other backends only.
"""
import time

import numpy as np
import pytest
from harness import run_ranks

import tg.distributed as dist

KINDS = [
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "barrier",
]
DEVIATIONS = ["none", "kind", "root", "op", "dtype", "shape", "skip", "extra", "error"]
IN_CALL = {"none", "kind", "root", "op", "dtype", "shape"}      # what MPI's agreement can catch
DTYPES = ["float32", "float64", "int32"]
OPS = {
    "float32": ["SUM", "MAX", "MIN", "AVG"],
    "float64": ["SUM", "PRODUCT", "AVG"],
    "int32": ["SUM", "MAX", "BXOR"],
}
CASES = 24           # per backend and world size
WITHIN = 5.0         # seconds a case may take, failures included


def plan(seed: int, world: int, mpi: bool) -> tuple[list[dict], int, int, str]:
    """(steps, deviating rank, step at which it deviates, deviation): the same on every rank."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(int(rng.integers(1, 4))):
        dtype = str(rng.choice(DTYPES))
        kind = str(rng.choice(KINDS[:-1]))
        # sizes span recursive doubling and the ring (SMALL is 32 KiB), and odd counts
        n = int(rng.choice([1, 7, 100, 1001, 9000 + world])) * (
            world if kind in ("reduce_scatter", "all_to_all") else 1
        )
        step = {"kind": kind, "n": n, "dtype": dtype, "root": int(rng.integers(world)),
                "op": str(rng.choice(OPS[dtype]))}
        if steps and step == steps[-1]:     # a skipped or repeated call must change what a peer sees
            step["n"] += world
        steps.append(step)
    steps.append({"kind": "barrier", "n": 0, "dtype": "float32", "root": 0, "op": "SUM"})
    kinds = [d for d in DEVIATIONS if d in IN_CALL or not mpi]
    return steps, int(rng.integers(world)), int(rng.integers(len(steps) - 1)), str(rng.choice(kinds))


def deviate(step: dict, how: str, world: int) -> dict:
    """This step as the deviating rank makes it."""
    s = dict(step)
    if how == "kind":
        s["kind"] = {"all_reduce": "broadcast", "broadcast": "all_reduce", "reduce": "all_reduce"}.get(
            s["kind"], "all_reduce" if s["kind"] != "all_reduce" else "barrier")
    elif how == "root":
        s["kind"] = s["kind"] if s["kind"] in ("broadcast", "reduce", "gather", "scatter") else "broadcast"
        s["root"] = (s["root"] + 1) % world
    elif how == "op":
        s["kind"] = s["kind"] if s["kind"] in ("all_reduce", "reduce", "reduce_scatter") else "all_reduce"
        s["op"] = next(o for o in ("MAX", "SUM") if o != s["op"])
    elif how == "dtype":
        s["dtype"] = "float64" if s["dtype"] != "float64" else "float32"
        s["op"] = "SUM"
    elif how == "shape":
        s["n"] = s["n"] + world
    return s


def inputs(seed: int, k: int, step: dict, world: int) -> list[np.ndarray]:
    """Every rank's input to step k (each rank computes all of them, to check its result)."""
    rng = np.random.default_rng([seed, k])
    if step["dtype"] == "int32":
        return [rng.integers(-9, 9, step["n"]).astype(np.int32) for _ in range(world)]
    return [rng.uniform(0.5, 1.5, step["n"]).astype(step["dtype"]) for _ in range(world)]


def reduced(xs: list[np.ndarray], op: str) -> np.ndarray:
    fn = {"SUM": np.sum, "AVG": np.mean, "MAX": np.max, "MIN": np.min, "PRODUCT": np.prod,
          "BXOR": np.bitwise_xor.reduce}[op]
    return fn(np.stack(xs), axis=0).astype(xs[0].dtype)


# Complexity: one branch per collective kind, each checked against numpy.
def run_step(step: dict, xs: list[np.ndarray], rank: int, world: int, group) -> None:  # noqa: C901
    """Step `step` on this rank's input, checked against numpy when it returns."""
    kind, n, root = step["kind"], step["n"], step["root"]
    op = getattr(dist.ReduceOp, step["op"])
    mine = xs[rank].copy()

    def same(got: np.ndarray, want: np.ndarray) -> None:
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{kind} gave wrong data")
    if kind == "all_reduce":
        dist.all_reduce(mine, op=op, group=group)
        same(mine, reduced(xs, step["op"]))
    elif kind == "reduce":
        dist.reduce(mine, dst=root, op=op, group=group)
        same(mine, reduced(xs, step["op"]) if rank == root else xs[rank])
    elif kind == "broadcast":
        dist.broadcast(mine, src=root, group=group)
        same(mine, xs[root])
    elif kind == "all_gather":
        out = np.zeros(n * world, mine.dtype)
        dist.all_gather_into_tensor(out, mine, group=group)
        same(out, np.concatenate(xs))
    elif kind == "reduce_scatter":
        out = np.zeros(n // world, mine.dtype)
        dist.reduce_scatter_tensor(out, mine, op=op, group=group)
        same(out, reduced(xs, step["op"])[rank * (n // world):(rank + 1) * (n // world)])
    elif kind == "all_to_all":
        out = np.zeros_like(mine)
        dist.all_to_all_single(out, mine, group=group)
        per = n // world
        same(out, np.concatenate([x[rank * per:(rank + 1) * per] for x in xs]))
    elif kind == "gather":
        outs = [np.zeros_like(mine) for _ in range(world)] if rank == root else None
        dist.gather(mine, outs, dst=root, group=group)
        if outs is not None:
            same(np.concatenate(outs), np.concatenate(xs))
    elif kind == "scatter":
        out = np.zeros_like(mine)
        dist.scatter(out, [x.copy() for x in xs] if rank == root else None, src=root, group=group)
        same(out, xs[rank])         # the root's list entry r goes to rank r
    else:
        dist.barrier(group=group)


def run_cases(rank: int, world: int, base: int, cases: int, mpi: bool) -> list[dict]:
    """Every case on a fresh subgroup; what happened on this rank, per case."""
    log = []
    for case in range(cases):
        seed = base + case
        steps, odd, at, how = plan(seed, world, mpi)
        mine = list(steps)
        if rank == odd and how != "none":
            if how == "skip":
                del mine[at]
            elif how == "extra":
                mine.insert(at, steps[-1])          # a barrier too many
            elif how != "error":
                mine[at] = deviate(steps[at], how, world)
        group = dist.new_group(list(range(world)))
        start, outcome = time.monotonic(), "ok"
        try:
            for k, step in enumerate(mine):
                if rank == odd and how == "error" and k == at:
                    raise RuntimeError("this rank's own code failed")
                # the inputs of the step the plan has at this position; a deviating rank's own step
                # may have another size or dtype
                xs = inputs(seed, k, step, world)
                run_step(step, xs, rank, world, group)
        except (dist.DistributedError, TypeError, ValueError, RuntimeError, AssertionError) as e:
            outcome = f"{type(e).__name__}: {e}"
        finally:
            try:   # leaving is itself a collective: a rank that left early is named there
                dist.destroy_process_group(group)
            except dist.DistributedError as e:
                outcome = outcome if outcome != "ok" else f"{type(e).__name__}: {e}"
        log.append({"seed": seed, "odd": odd, "how": how, "at": at, "outcome": outcome,
                    "seconds": time.monotonic() - start})
        dist.barrier()         # the default group is untouched by the case's failure: line up again
    return log


def check(results: list[list[dict]], world: int) -> None:
    for case in zip(*results):
        first = case[0]
        odd, how = first["odd"], first["how"]
        where = f"case seed={first['seed']}: rank {odd} deviates by {how!r} at step {first['at']}"
        for rank, rec in enumerate(case):
            assert rec["seconds"] < WITHIN, (
                f"{where}: rank {rank} took {rec['seconds']:.1f}s: {rec['outcome']}"
            )
            if how == "none":
                assert rec["outcome"] == "ok", f"{where}: rank {rank}: {rec['outcome']}"
                continue
            assert rec["outcome"] != "ok", f"{where}: rank {rank} finished as if nothing happened"
            if rank != odd:      # the deviating rank knows what it did; the others must name it
                assert "DistributedError" in rec["outcome"], f"{where}: rank {rank}: {rec['outcome']}"
                assert (
                    f"rank {odd} " in rec["outcome"]
                    or f"rank {odd})" in rec["outcome"]
                    or f"ranks {odd}," in rec["outcome"]
                ), f"{where}: rank {rank} did not name rank {odd}: {rec['outcome']}"


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("backend", ["tcp", "shm", "rings", "ucx", "mpi"])
def test_one_deviating_rank_is_named_or_harmless(backend, world):
    base = 1000 * world + 100 * ["tcp", "shm", "ucx", "mpi", "rings"].index(backend)
    results = run_ranks(world, run_cases, base, CASES, backend == "mpi", backend=backend, timeout=300,
                        dist_timeout=30)
    check(results, world)
    seen = {rec["how"] for rec in results[0]}
    assert len(seen) >= 5, seen         # the seeds cover most kinds of deviation
