"""What tglaunch shows of a job: the flight recorder (rings read from files, the summary of who is
behind, a killed or stopped rank named with its last collective) and --profile's merged trace of every
rank (kernel names as DEBUG=2 prints them, each collective overlapping on every rank's row)."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tg.distributed import flight

REPO = Path(__file__).resolve().parents[2]


def launch(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    import os
    return subprocess.run([sys.executable, "-m", "tg.launch", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


# ---------------------------------------------------------------------------- the rings
@pytest.mark.parametrize("seed", range(4))
def test_ring_file_keeps_the_newest_records_in_order(tmp_path, seed):
    r = random.Random(seed)
    slots, n = r.randint(1, 9), r.randint(0, 30)
    rec = flight.Recorder(rank=r.randint(0, 7), slots=slots, path=str(tmp_path / "r.flight"))
    states = []
    for i in range(n):
        t = rec.issue(r.choice(["default", "sub"]), i + 1, r.choice(["all_reduce", "broadcast"]), "float32",
                      r.randint(0, 99), 4, )
        state = r.choice([flight.ISSUED, flight.TRANSFERRING, flight.DONE, flight.FAILED])
        if state >= flight.TRANSFERRING:
            rec.update(t, flight.TRANSFERRING)
        if state >= flight.DONE:
            rec.update(t, state)
        states.append(flight.STATES[state])
    rank, _, entries = flight.read_file(str(tmp_path / "r.flight"))
    assert rank == int(rec.head["rank"][0])
    assert [e["seq"] for e in entries] == list(range(max(0, n - slots) + 1, n + 1))
    assert [e["state"] for e in entries] == states[max(0, n - slots):]
    assert entries == rec.entries()
    for e in entries:
        assert e["issued"] > 0 and (e["started"] > 0) == (e["state"] != "issued")
    rec.update(0, flight.DONE)          # a ticket whose slot a newer record took changes nothing
    assert flight.read_file(str(tmp_path / "r.flight"))[2] == entries


def test_not_a_ring_file_is_refused(tmp_path):
    (tmp_path / "x.flight").write_bytes(b"nonsense" * 10)
    with pytest.raises(ValueError, match="not a flight recorder file"):
        flight.read_file(str(tmp_path / "x.flight"))


def ring(seq: int, state: str, kind: str = "all_reduce", group: str = "default") -> list[dict]:
    return [{"seq": s, "kind": kind, "dtype": "float32", "count": 8, "group": group, "issued": 1.0,
             "started": 1.0, "ended": 2.0 if s < seq else 0.0, "state": "done" if s < seq else state}
            for s in range(1, seq + 1)]


@pytest.mark.parametrize("seed", range(8))
def test_summary_names_the_ranks_behind_and_what_the_others_wait_in(seed):
    r = random.Random(seed)
    world = r.randint(2, 6)
    newest = r.randint(2, 40)
    behind = sorted(r.sample(range(world), r.randint(1, world - 1)))
    rings = {}
    for rank in range(world):
        if rank in behind:
            rings[rank] = ring(r.randint(0, newest - 1), "done")
        else:
            rings[rank] = ring(newest, "transferring")
    lines = flight.summary(rings, now=10.0)
    for rank in behind:
        last = rings[rank][-1]["seq"] if rings[rank] else None
        line = next(ln for ln in lines if ln.startswith(f"rank {rank} is behind"))
        assert (f"all_reduce #{last} " in line) if last else "no collective" in line
    waiting = [rank for rank in range(world) if rank not in behind]
    assert any(f"wait in all_reduce #{newest} " in ln and ln.startswith(("rank ", "ranks "))
               and all(str(w) in ln.split(" wait")[0] for w in waiting) for ln in lines)


def test_summary_names_diverged_calls_and_ranks_without_a_ring():
    rings = {0: ring(6, "transferring"), 1: ring(5, "done") + ring(6, "transferring", kind="leave")[-1:]}
    lines = flight.summary(rings, now=3.0, expected=[0, 1, 2])
    assert lines[0].startswith("rank 2 left no flight record")
    assert "the calls diverged at #6 in group default: rank 0 all_reduce #6 (float32[8]), rank 1 leave #6" \
        in "\n".join(lines)


def test_a_busy_group_does_not_push_another_groups_last_call_out(tmp_path):
    rec = flight.Recorder(rank=0, slots=4, path=str(tmp_path / "r.flight"))
    t = rec.issue("default", 7, "all_reduce", "float32", 3, 12)
    rec.update(t, flight.TRANSFERRING)
    for i in range(20):
        rec.update(rec.issue("sub", i + 1, "broadcast", "int64", 1, 8), flight.DONE)
    entries = flight.read_file(str(tmp_path / "r.flight"))[2]
    default = [e for e in entries if e["group"] == "default"]
    assert [(e["seq"], e["state"]) for e in default] == [(7, "transferring")]
    assert [e["seq"] for e in entries if e["group"] == "sub"] == [17, 18, 19, 20]
    rec.update(t, flight.DONE)
    assert [e["state"] for e in flight.read_file(str(tmp_path / "r.flight"))[2] if e["group"] == "default"] \
        == ["done"]


def test_an_unmakeable_ring_file_falls_back_to_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_FLIGHT_DIR", str(tmp_path / "missing"))
    monkeypatch.setattr(flight, "_made", False)
    monkeypatch.setattr(flight, "_recorder", None)
    with pytest.warns(UserWarning, match="could not be made"):
        rec = flight.recorder(3)
    assert rec is not None and rec.path is None
    rec.update(rec.issue("default", 1, "barrier", "-", 0, 0), flight.DONE)
    assert rec.entries()[0]["kind"] == "barrier"


def test_summary_when_every_rank_is_in_the_same_call():
    lines = flight.summary({0: ring(5, "transferring"), 1: ring(5, "transferring")}, now=3.0)
    assert lines[0] == "every rank of group default reached all_reduce #5 (float32[8])"
    assert "ranks 0, 1 wait in all_reduce #5" in lines[1]


# ---------------------------------------------------------------------------- real jobs
LOOP = """
import os, signal, sys
import numpy as np
import tg.distributed as dist
dist.init_process_group()
rank, how, at = dist.get_rank(), sys.argv[1], int(sys.argv[2])
x = np.ones(1000, np.float32)
for i in range(40):
    if rank == 1 and i == at:
        os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    dist.all_reduce(x)
    if i % 3 == 0:
        dist.broadcast(np.zeros(5, np.int64), 0)
"""


@pytest.mark.parametrize("how,world", [("kill", 3), ("stop", 2), ("stop", 3)])
def test_a_killed_or_stopped_rank_is_named_with_its_last_collective(tmp_path, how, world):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(LOOP))
    at = random.Random(world).randint(3, 20)
    r = launch("--nproc", str(world), "--log-dir", str(tmp_path / "logs"), "--grace", "1", str(script), how,
               str(at), env={"TG_DIST_TIMEOUT": "3"})
    assert r.returncode != 0
    # before iteration `at`, rank 1 finished all_reduce number (at + ceil(at / 3)) (broadcasts every third)
    last = at + (at + 2) // 3
    summary = [ln for ln in r.stderr.splitlines() if ln.startswith("[tglaunch] flight recorder:")]
    assert any(re.search(rf"rank 1 is behind in group default: its last was (all_reduce|broadcast) #{last} "
                         rf"\(\w+\[\d+\]\) \(done", ln) for ln in summary), r.stderr[-3000:]
    named = set()          # the others: each waiting in, or failed in, the call rank 1 never made
    for ln in summary:
        m = re.match(rf"\[tglaunch\] flight recorder: ranks? ([\d, ]+) (wait|failed) in \w+ #{last + 1} ", ln)
        if m:
            named |= {int(k) for k in m.group(1).split(", ")}
    assert named == set(range(world)) - {1}, summary
    dump = json.loads((tmp_path / "logs" / "flight_recorder.json").read_text())
    assert sorted(dump) == [str(k) for k in range(world)]
    assert dump["1"][-1]["seq"] == last and dump["1"][-1]["state"] == "done"


def test_profile_merges_every_ranks_trace_with_collectives_lined_up(tmp_path):
    """The main job (scripts/train.py, DDP, 2 ranks) under tglaunch --profile: one trace, a row per rank,
    every collective overlapping on both rows, the kernels those DEBUG=2 prints for the same run."""
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    script = str(REPO / "scripts" / "train.py")
    args = ["--data", str(text), "--steps", "3", "--batch", "2", "--block", "16", "--n-layer", "1",
            "--n-embd", "32", "--n-head", "2", "--eval-every", "3", "--eval-batches", "1", "--warmup", "1",
            "--precision", "fp32", "--sample-tokens", "2", "--out", str(tmp_path / "run")]
    r = launch("--nproc", "2", "--profile", str(tmp_path / "prof"), script, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "merged the traces of 2 rank(s)" in r.stderr
    events = json.loads((tmp_path / "prof" / "trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert sorted(n.split(" (")[0] for n in names) == ["rank 0", "rank 1"]
    spans: dict[tuple[int, int, str], tuple[float, float]] = {}
    for e in events:
        if e.get("cat") == "collective":
            spans[(e["pid"], e["args"]["seq"], e["args"]["group"])] = (e["ts"], e["ts"] + e["dur"])
    calls = {(s, g) for _, s, g in spans}
    assert len(calls) >= 8 and {e["name"].split(" #")[0] for e in events if e.get("cat") == "collective"} >= {
        "all_reduce", "all_gather", "broadcast"}
    for seq, group in calls:
        both = [spans[(p, seq, group)] for p in (0, 1)]
        # a collective ends on no rank before every rank started it: the rows overlap (to 1 ms)
        assert max(a for a, _ in both) <= min(b for _, b in both) + 1000, (seq, group, both)
    # the kernels as DEBUG=2 names them, on both ranks
    r2 = launch("--nproc", "2", script, *args[:-1], str(tmp_path / "run2"), env={"DEBUG": "2"})
    assert r2.returncode == 0, r2.stderr[-3000:]
    for rank in (0, 1):
        printed = {ln.split()[2] for ln in r2.stdout.splitlines() if ln.startswith(f"[rank{rank}]: [kernel]")}
        traced = {e["name"] for e in events if e["pid"] == rank and e.get("cat") == "kernel"}
        assert traced == printed and traced


def test_profile_from_the_environment_is_the_workers(tmp_path):
    """TG_PROFILE=DIR in tglaunch's environment is --profile DIR: the workers' traces, merged; the
    launcher's own process (which imported tg) writes none over rank 0's."""
    script = tmp_path / "w.py"
    script.write_text("import numpy as np, tg.distributed as dist\ndist.init_process_group()\n"
                      "dist.all_reduce(np.ones(3))\n")
    r = launch("--nproc", "2", str(script), env={"TG_PROFILE": str(tmp_path / "prof")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "merged the traces of 2 rank(s)" in r.stderr
    for rank in (0, 1):
        events = json.loads((tmp_path / "prof" / f"trace.rank{rank}.json").read_text())["traceEvents"]
        assert any(e.get("cat") == "collective" for e in events), rank


def test_the_environment_sets_the_ring_and_zero_turns_it_off(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(LOOP))
    r = launch("--nproc", "2", "--grace", "1", str(script), "kill", "4", env={"TG_FLIGHT_RECORDER": "0"})
    assert r.returncode != 0 and "flight recorder:" not in r.stderr
    r = launch("--nproc", "2", "--grace", "1", "--log-dir", str(tmp_path / "logs"), str(script), "kill", "9",
               env={"TG_FLIGHT_RECORDER": "3"})
    dump = json.loads((tmp_path / "logs" / "flight_recorder.json").read_text())
    assert 1 <= len([e for e in dump["1"] if e["group"] == "default"]) <= 3


def test_mpi_jobs_get_the_summary_too(tmp_path):
    import shutil
    if shutil.which("mpiexec") is None:
        from tg.launch.agent import mpiexec_command
        assert mpiexec_command(2) is not None, "the dev extra installs Open MPI (mpiexec)"
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(LOOP))
    r = launch("--nproc", "2", "--backend", "mpi", "--log-dir", str(tmp_path / "logs"), str(script), "kill",
               "5", env={"TG_DIST_TIMEOUT": "5"})
    assert r.returncode != 0
    assert re.search(r"flight recorder: rank 1 is behind in group default: its last was \w+ #7 ", r.stderr), \
        r.stderr[-3000:]


def test_a_forked_child_records_in_its_own_ring(tmp_path, monkeypatch):
    """A DataLoader worker forked after init must neither write the parent's ring file nor carry its
    records: its own ring, in memory."""
    import os

    import tg.distributed.startup  # noqa: F401  (registers the fork hook)
    monkeypatch.setenv("TG_FLIGHT_DIR", str(tmp_path))
    monkeypatch.setattr(flight, "_made", False)
    monkeypatch.setattr(flight, "_recorder", None)
    monkeypatch.setattr(flight, "_in_memory", False)
    parent = flight.recorder(0)
    assert parent is not None and parent.path == str(tmp_path / "rank0.flight")
    parent.issue("default", 1, "all_reduce", "float32", 1, 4)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        child = flight.recorder(0)
        ok = child is not None and child is not parent and child.path is None and child.entries() == []
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert [e["seq"] for e in flight.read_file(parent.path)[2]] == [1]
