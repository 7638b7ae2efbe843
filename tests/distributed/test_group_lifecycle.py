"""Groups come and go as torch's do: destroy_process_group(sub) on every rank (members or not) leaves
the default group working, destroy_process_group() then init_process_group() again works many times
over, and a call on a group already destroyed says so."""
from __future__ import annotations

import numpy as np
import pytest
from harness import BACKENDS, run_ranks


def destroy_sub_everywhere(rank: int, world: int) -> list[float]:
    """torch's pattern: every rank calls destroy_process_group(sub), members and not."""
    import tg.distributed as dist
    sums = []
    for members in ([0, 1], [world - 1], list(range(world))):
        sub = dist.new_group(members)
        if rank in members:
            x = np.full(3, float(rank + 1))
            dist.all_reduce(x, group=sub)
            sums.append(float(x[0]))
        dist.destroy_process_group(sub)
        assert dist.is_initialized(), f"destroy_process_group(new_group({members})) left the job"
        x = np.full(3, float(rank + 1))
        dist.all_reduce(x)
        sums.append(float(x[0]))
    return sums


@pytest.mark.parametrize("backend", BACKENDS)
def test_destroying_a_subgroup_on_every_rank_leaves_the_default_group(backend: str):
    world = 3
    total = float(sum(range(1, world + 1)))
    want = {r: [] for r in range(world)}
    for members in ([0, 1], [world - 1], list(range(world))):
        for r in range(world):
            if r in members:
                want[r].append(float(sum(m + 1 for m in members)))
            want[r].append(total)
    got = run_ranks(world, destroy_sub_everywhere, backend=backend, timeout=120, dist_timeout=30)
    assert got == [want[r] for r in range(world)]


def init_again(rank: int, world: int, times: int) -> list[float]:
    """init, a collective, destroy; `times` times over in one process."""
    import tg.distributed as dist
    sums = []
    for i in range(times):
        dist.init_process_group(timeout=30)
        x = np.full(4, float(rank + i))
        dist.all_reduce(x)
        sub = dist.new_group([0, world - 1])
        if rank in (0, world - 1):
            dist.all_reduce(x, group=sub)
        sums.append(float(x[0]))
        dist.destroy_process_group()
        assert not dist.is_initialized()
    return sums


@pytest.mark.parametrize("backend", BACKENDS)
def test_init_after_destroy_five_times(backend: str):
    world, times = 3, 5
    got = run_ranks(world, init_again, times, backend=backend, init=False, timeout=180)
    for rank in range(world):
        want = []
        for i in range(times):
            s = float(sum(r + i for r in range(world)))
            want.append(2 * s if rank in (0, world - 1) else s)
        assert got[rank] == want, f"rank {rank}"


def call_destroyed_subgroup(rank: int, world: int) -> str:
    """A collective on a subgroup this rank already destroyed: the error says so."""
    import tg.distributed as dist
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.destroy_process_group(sub)
        dist.destroy_process_group(sub)      # a second time: nothing left to do
        try:
            dist.all_reduce(np.ones(3), group=sub)
            return "no error"
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            return f"{type(e).__name__}: {e}"
    dist.destroy_process_group(sub)
    return ""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_on_a_destroyed_group_says_so(backend: str):
    got = run_ranks(3, call_destroyed_subgroup, backend=backend, timeout=120, dist_timeout=20)
    for rank in (0, 1):
        assert got[rank].startswith("ValueError: [distributed] this group (sub"), got[rank]
        assert "was destroyed by destroy_process_group(group)" in got[rank], got[rank]
        assert "new_group" in got[rank], got[rank]


def infinite_timeout(rank: int, world: int) -> list[float]:
    import tg.distributed as dist
    dist.init_process_group()
    x = np.full(2, float(rank))
    dist.all_reduce(x)
    sub = dist.new_group([0, 1])
    if rank < 2:
        dist.broadcast(x, src=1, group=sub)
    dist.barrier()
    dist.destroy_process_group()
    return x.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_infinite_timeout_works(backend: str):
    got = run_ranks(3, infinite_timeout, backend=backend, init=False, env={"TG_DIST_TIMEOUT": "inf"},
                    timeout=120)
    assert got == [[3.0, 3.0]] * 3


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), "soon"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(timeout, monkeypatch):
    import tg.distributed as dist
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    if not isinstance(timeout, str):
        with pytest.raises(ValueError, match=r"\[distributed\] init_process_group\(timeout=.*positive"):
            dist.init_process_group(timeout=timeout)
    monkeypatch.setenv("TG_DIST_TIMEOUT", str(timeout))
    with pytest.raises(ValueError, match=r"\[config\] TG_DIST_TIMEOUT=.*Unset it or give a duration"):
        dist.init_process_group()
    assert not dist.is_initialized()


def test_unbounded_timeouts_are_the_longest_wait():
    from datetime import timedelta

    import tg.distributed as dist
    from tg import config
    for timeout in (float("inf"), timedelta.max, 1e300):
        dist.init_process_group(timeout=timeout)
        try:
            assert dist._State.timeout == config.LONGEST_WAIT
        finally:
            dist.destroy_process_group()


def open_fds() -> int:
    import os
    return len(os.listdir("/proc/self/fd"))


def make_and_destroy_groups(rank: int, world: int, count: int) -> dict:
    """`count` groups made, used and destroyed in turn: threads and fds are counted before and after,
    with the cyclic garbage collector off, so only what destroy frees counts as freed."""
    import gc
    import os
    import threading

    import tg.distributed as dist
    x = np.ones(4)
    dist.all_reduce(x)                    # the default group is fully up before counting
    sub = dist.new_group(list(range(world)))
    dist.all_reduce(x, group=sub)
    dist.destroy_process_group(sub)       # the first group pays any one-time set-up (pools, imports)
    gc.collect()
    gc.disable()
    try:
        before = (threading.active_count(), len(os.listdir("/proc/self/task")), open_fds())
        for _ in range(count):
            sub = dist.new_group(list(range(world)))
            dist.all_reduce(x, group=sub)
            dist.destroy_process_group(sub)
        dist.barrier()
        after = (threading.active_count(), len(os.listdir("/proc/self/task")), open_fds())
        names = sorted(t.name for t in threading.enumerate())
    finally:
        gc.enable()
    return {"before": before, "after": after, "names": names}


@pytest.mark.parametrize("backend", ["tcp", "shm", "ucx"])
def test_destroyed_groups_free_their_threads_and_fds(backend: str):
    count = 50
    got = run_ranks(2, make_and_destroy_groups, count, backend=backend, timeout=120, dist_timeout=60)
    for rank, r in enumerate(got):
        (py0, tasks0, fds0), (py1, tasks1, fds1) = r["before"], r["after"]
        # "about the starting count": a few threads of a pool may come and go, never one per group
        assert py1 <= py0 + 2 and tasks1 <= tasks0 + 2, (rank, r)
        assert fds1 <= fds0 + 4, (rank, r)
