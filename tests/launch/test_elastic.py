"""Elastic jobs on one machine: several tglaunch agents on localhost form a `nnodes: '1:3'` job of one rank
each (tests/launch/elastic_worker.py, linear regression under DDP with checkpoints), and the tests take
nodes away (SIGKILL of an agent, of the store's host, SIGSTOP of a whole node) or add one, then check
from the job's own step records that it re-formed at the new size, resumed from its last checkpoint,
took every sample of an epoch once across the change, and that its loss went on from where it was."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port

from tg.launch import parse_args

WORKER = Path(__file__).with_name("elastic_worker.py")
BATCH = 2          # elastic_worker's batch per rank
TIMEOUT = 3        # TG_ELASTIC_TIMEOUT for these jobs: a stopped node is lost after 3s


class Node:
    def __init__(self, proc: subprocess.Popen, err: Path):
        self.proc, self.err = proc, err

    def log(self) -> str:
        return self.err.read_text(errors="replace")

    def node_rank(self) -> int:
        found = re.findall(r"this is node (\d+)", self.log())
        return int(found[-1]) if found else -1

    def hosts_store(self) -> bool:
        lines = [line for line in self.log().splitlines() if "this is node" in line]
        return bool(lines) and lines[-1].endswith("(here)")

    def processes(self) -> list[int]:
        """The agent and every process below it (its workers and what they started)."""
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += children.get(pid, [])
        return found


class Job:
    def __init__(self, tmp_path: Path, steps: int, ckpt_every: int = 10, step_seconds: float = 0.08,
                 nnodes: str = "1:3", join_timeout: float = 3, max_restarts: int = 0, crash_at: int = -1):
        self.dir, self.out = tmp_path, tmp_path / "out"
        self.out.mkdir()
        self.cfg = tmp_path / "job.yaml"
        self.cfg.write_text(f"nnodes: '{nnodes}'\nnproc_per_node: 1\nmaster_port: {free_port()}\n"
                            f"join_timeout: {join_timeout}\nmax_restarts: {max_restarts}\n")
        numbers = (steps, ckpt_every, step_seconds, crash_at)
        self.args = [str(WORKER), str(self.out), *(str(v) for v in numbers)]
        self.env = {**os.environ, "TG_SECRET": "elastic-test-secret-0123456789", "TG_DIST_TIMEOUT": "30",
                    "TG_ELASTIC_TIMEOUT": str(TIMEOUT)}
        self.nodes: list[Node] = []

    def start(self, count: int = 1) -> None:
        for _ in range(count):
            err = self.dir / f"agent{len(self.nodes)}.err"
            with open(err, "w") as e, open(self.dir / f"agent{len(self.nodes)}.out", "w") as o:
                proc = subprocess.Popen([sys.executable, "-m", "tg.launch", "--config", str(self.cfg),
                                         *self.args], stdout=o, stderr=e, env=self.env)
            self.nodes.append(Node(proc, err))

    def records(self) -> list[dict]:
        path = self.out / "steps.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def wait_for(self, what, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting; logs:\n{self.logs()}")
            time.sleep(0.05)

    def wait_steps(self, world: int, count: int = 1, timeout: float = 60.0) -> None:
        self.wait_for(lambda: sum(r["world"] == world for r in self.records()) >= count, timeout)

    def finish(self, timeout: float = 90.0) -> list[int | None]:
        deadline = time.monotonic() + timeout
        codes = []
        for node in self.nodes:
            try:
                codes.append(node.proc.wait(timeout=max(deadline - time.monotonic(), 0.1)))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def kill_all(self) -> None:
        for node in self.nodes:
            for pid in node.processes():
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            node.proc.wait()

    def logs(self) -> str:
        return "\n".join(f"--- agent {i}\n{n.log()[-3000:]}" for i, n in enumerate(self.nodes))


@pytest.fixture
def job_factory(tmp_path: Path):
    jobs: list[Job] = []

    def make(**kw) -> Job:
        jobs.append(Job(tmp_path, **kw))
        return jobs[-1]
    yield make
    for job in jobs:
        job.kill_all()


def committed(records: list[dict]) -> list[dict]:
    """The trajectory the final model has: a step done again after a restart replaces the earlier one."""
    last: dict[int, dict] = {}
    for r in records:
        last[r["step"]] = r
    return [last[s] for s in sorted(last)]


def check_trajectory(records: list[dict], steps: int) -> None:
    """Every step once; no sample twice in an epoch; an epoch that ended left only what the last world size
    could not fill a step with; the loss after every restart goes on from where the checkpoint left it."""
    path = committed(records)
    assert [r["step"] for r in path] == list(range(1, steps + 1))
    epochs: dict[int, list[int]] = {}
    for r in path:
        epochs.setdefault(r["epoch"], []).extend(r["indices"])
    for epoch, taken in epochs.items():
        assert len(taken) == len(set(taken)), f"epoch {epoch}: a sample was taken twice"
        if epoch + 1 in epochs:
            world = [r["world"] for r in path if r["epoch"] == epoch][-1]
            assert 240 - len(taken) < world * BATCH + world, f"epoch {epoch} skipped samples"
    first_loss = path[0]["loss"]
    for before, after in zip(path, path[1:]):
        if after["restart"] != before["restart"]:
            recent = [r["loss"] for r in path if before["step"] - 8 <= r["step"] <= before["step"]]
            assert after["loss"] < max(3 * max(recent), 0.05) and after["loss"] < 0.5 * first_loss, \
                (before, after)


def test_lost_node_shrinks_the_job_and_it_resumes(job_factory) -> None:
    job = job_factory(steps=140)
    job.start(3)
    job.wait_steps(world=3, count=25)
    victim = next(n for n in job.nodes if not n.hosts_store())
    killed_at = time.time()
    victim.proc.send_signal(signal.SIGKILL)
    job.wait_steps(world=2)
    reformed = min(r["time"] for r in job.records() if r["world"] == 2) - killed_at
    assert reformed < 30, f"re-formed {reformed:.1f}s after the kill"
    codes = job.finish()
    survivors = [n for n in job.nodes if n is not victim]
    assert [codes[job.nodes.index(n)] for n in survivors] == [0, 0], job.logs()
    records = job.records()
    check_trajectory(records, 140)
    after = [r for r in records if r["world"] == 2]
    assert {(r["restart"], r["failures"], r["changes"]) for r in after} == {(1, 0, 1)}
    lost_steps = max(r["step"] for r in records if r["world"] == 3) - (after[0]["step"] - 1)
    assert 0 <= lost_steps <= 10, "more than one checkpoint interval of work was lost"
    for node in survivors:
        assert re.search(r"round 1: lost node \d \(", node.log()), node.log()


def test_store_host_lost(job_factory) -> None:
    job = job_factory(steps=100)
    job.start(3)
    job.wait_steps(world=3, count=20)
    host = next(n for n in job.nodes if n.hosts_store())
    host.proc.send_signal(signal.SIGKILL)
    job.wait_steps(world=2)
    codes = job.finish()
    assert [c for n, c in zip(job.nodes, codes) if n is not host] == [0, 0], job.logs()
    check_trajectory(job.records(), 100)
    for node in job.nodes:
        if node is not host:
            assert re.search(r"the job's store is (now here, )?at 127\.0\.0\.1:\d+", node.log()), node.log()
    assert sum(n.log().count("the job's store is now here") for n in job.nodes if n is not host) == 1


@pytest.mark.parametrize("store_host", [False, True])
def test_stopped_node_is_lost_by_its_heartbeat(job_factory, store_host: bool) -> None:
    """SIGSTOP of a whole node (agent and workers: a hang, not a death) is noticed by the heartbeat (or, for
    the store's host, by the store not answering); the others go on without it, and when it wakes up it
    joins again as a new node (a store it hosted closed: the job's store is elsewhere now)."""
    job = job_factory(steps=160)
    job.start(3)
    job.wait_steps(world=3, count=20)
    frozen = next(n for n in job.nodes if n.hosts_store() == store_host)
    pids = frozen.processes()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stopped_at = time.time()
    job.wait_steps(world=2, timeout=40)
    reformed = min(r["time"] for r in job.records() if r["world"] == 2) - stopped_at
    assert reformed < 30, f"re-formed {reformed:.1f}s after the stop"
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    codes = job.finish()
    assert codes == [0, 0, 0], job.logs()
    records = job.records()
    check_trajectory(records, 160)
    assert "was stopped for" in frozen.log(), frozen.log()
    assert [r["world"] for r in committed(records)][-1] == 3, "the woken node did not join again"


def test_new_node_grows_the_job_without_a_restart(job_factory) -> None:
    job = job_factory(steps=120, join_timeout=1)
    job.start(2)
    job.wait_steps(world=2, count=15)
    job.start(1)
    job.wait_steps(world=3)
    codes = job.finish()
    assert codes == [0, 0, 0], job.logs()
    records = job.records()
    check_trajectory(records, 120)
    assert {(r["failures"], r["changes"]) for r in records if r["world"] == 3} == {(0, 1)}
    assert all(n.node_rank() >= 0 for n in job.nodes)


def test_worker_failure_uses_a_restart_and_keeps_the_size(job_factory) -> None:
    job = job_factory(steps=60, max_restarts=1, crash_at=25)
    job.start(3)
    codes = job.finish()
    assert codes == [0, 0, 0], job.logs()
    records = job.records()
    check_trajectory(records, 60)
    assert {(r["world"], r["failures"], r["changes"]) for r in records if r["restart"] == 1} == {(3, 1, 0)}
    assert "rank 2 fails at step 25" in job.logs()


def test_past_the_restart_budget_every_node_stops(job_factory) -> None:
    job = job_factory(steps=60, max_restarts=0, crash_at=10)
    job.start(3)
    codes = job.finish()
    assert codes == [1, 1, 1], job.logs()
    for node in job.nodes:
        assert "used its 0 restart(s)" in node.log() and "rank 2 fails at step 10" in node.log(), node.log()


# ---------------------------------------------------------------------------- the flag and the YAML key
@pytest.mark.parametrize("text,nodes", [("3", (3, 3)), ("1:3", (1, 3)), ("2:2", (2, 2)), ("1:1", (1, 1))])
def test_nnodes_flag(text: str, nodes: tuple[int, int], monkeypatch) -> None:
    monkeypatch.setenv("TG_SECRET", "s" * 32)
    launch = parse_args(["--nnodes", text, "--master-port", "29999", "--node-rank", "0", "x.py"])
    assert (launch.spec.min_nodes, launch.spec.nnodes) == nodes
    assert launch.spec.elastic == (nodes[0] < nodes[1])


@pytest.mark.parametrize("text", ["3:1", "0:2", "a:b", "1:2:3", "", "-1"])
def test_nnodes_flag_rejects(text: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(["--nnodes", text, "x.py"])
    assert e.value.code == 2
    assert "nnodes" in capsys.readouterr().err


@pytest.mark.parametrize("value,error", [("'3:1'", "MIN <= MAX"), ("'x'", "MIN:MAX"), ("true", "MIN:MAX"),
                                         ("'0:2'", "at least 1")])
def test_nnodes_key_rejects(tmp_path: Path, value: str, error: str) -> None:
    from tg.launch.job import load_config
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"nproc_per_node: 1\nnnodes: {value}\n")
    with pytest.raises(ValueError, match=error) as e:
        load_config(str(cfg))
    assert f"{cfg}:2" in str(e.value)


def test_elastic_job_needs_no_node_rank(monkeypatch) -> None:
    monkeypatch.setenv("TG_SECRET", "s" * 32)
    launch = parse_args(["--nnodes", "1:3", "--master-port", "29999", "x.py"])
    assert launch.node_rank is None and launch.spec.elastic
    with pytest.raises(SystemExit):
        parse_args(["--nnodes", "3", "--master-port", "29999", "x.py"])    # a fixed size still does
