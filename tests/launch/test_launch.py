"""End-to-end tests of tglaunch: real launches of tiny worker scripts through `python -m tg.launch`.

Every launch is bounded by a subprocess timeout; the worker scripts are written into pytest's tmp_path
and import tg only when they need a process group."""
from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from ports import free_port

from tg.launch.job import load_config

REPO = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "tg.launch"]
CONTRACT = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "TG_RESTART_COUNT", "TG_MAX_RESTARTS", "TG_RUN_ID", "TG_BACKEND", "TG_SECRET"]

# A worker that records its environment and argv in OUT/rank{RANK}.json.
ENV_SCRIPT = """
import json, os, sys
keys = {keys!r}
record = {{"env": {{k: os.environ.get(k) for k in keys}}, "argv": sys.argv[1:], "name": __name__}}
with open(os.path.join({out!r}, "rank" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(record, f)
"""

# A worker that writes its pid, says it is ready, and sleeps (for the signal tests).
SLEEPER = """
import os, sys, time
with open(os.path.join({out!r}, "pid" + os.environ["RANK"]), "w") as f:
    f.write(str(os.getpid()))
print("ready", flush=True)
time.sleep(60)
"""

ALL_REDUCE = """
import os
if os.environ["RANK"] == "{fail_before}":
    raise RuntimeError("rank " + os.environ["RANK"] + " gives up before joining")
import numpy
import tg.distributed as dist
dist.init_process_group()
if dist.get_rank() == {fail_rank}:
    raise RuntimeError("rank " + str(dist.get_rank()) + " gives up")
x = numpy.ones(3) * (dist.get_rank() + 1)
dist.all_reduce(x)
print("backend", dist.get_backend(), "sum", float(x[0]), flush=True)
"""


def write(path: Path, text: str) -> Path:
    """Write a dedented script and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def launch(*args: str, timeout: float = 30, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m tg.launch ARGS` to completion."""
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def alive(pid: int) -> bool:
    """True while pid runs (a zombie, waiting to be reaped by whoever adopted it, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], within: float = 5.0) -> list[int]:
    """Poll until every pid is gone; returns the ones still alive after `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def start_sleepers(tmp_path: Path, nproc: int, *flags: str,
                   text: str = SLEEPER) -> tuple[subprocess.Popen[bytes], list[int]]:
    """Start a launcher (with extra `flags`) of `nproc` workers running `text` (SLEEPER, or a script that
    also writes OUT/pid{RANK} and prints ready); return it and the worker pids once all said ready."""
    script = write(tmp_path / "sleeper.py", text.format(out=str(tmp_path)))
    proc = subprocess.Popen([*LAUNCH, "--nproc", str(nproc), "--grace", "2", *flags, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen, deadline = b"", time.monotonic() + 20
    while seen.count(b"ready") < nproc:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"workers never became ready: {seen!r}")
        if sel.select(0.1):
            seen += os.read(proc.stdout.fileno(), 4096)
    sel.close()
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(nproc)]
    return proc, pids


# ---------------------------------------------------------------------------- (a) the worker environment
@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_worker_environment(tmp_path: Path, nproc: int) -> None:
    script = write(tmp_path / "env.py", ENV_SCRIPT.format(keys=CONTRACT, out=str(tmp_path)))
    script_args = ["--lr", "3e-4", "two words", "-m", "x", "--", "--nproc", "9"]
    r = launch("--nproc", str(nproc), str(script), *script_args)
    assert r.returncode == 0, r.stderr
    records = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(nproc)]
    secrets = {rec["env"]["TG_SECRET"] for rec in records}
    run_ids = {rec["env"]["TG_RUN_ID"] for rec in records}
    ports = {rec["env"]["MASTER_PORT"] for rec in records}
    assert len(secrets) == 1 and all(secrets), secrets
    assert len(run_ids) == 1 and all(run_ids), run_ids
    assert len(ports) == 1 and int(ports.pop()) > 0
    for rank, rec in enumerate(records):
        env = rec["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == str(nproc)
        assert env["NODE_RANK"] == env["GROUP_RANK"] == "0"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["TG_RESTART_COUNT"] == "0" and env["TG_MAX_RESTARTS"] == "0"
        assert env["TG_BACKEND"] == "tcp"
        assert rec["argv"] == script_args
        assert rec["name"] == "__main__"


def run_module(tmp_path: Path, module_args: list[str]) -> None:
    """Launch 2 ranks of package module pkg.job (from tmp_path) with module_args; check what each saw."""
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "job.py", ENV_SCRIPT.format(keys=CONTRACT, out=str(tmp_path)))
    r = launch("--nproc", "2", "--run-id", "abc123", "-m", "pkg.job", *module_args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        rec = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert rec["argv"] == module_args and rec["name"] == "__main__"
        assert rec["env"]["RANK"] == str(rank) and rec["env"]["TG_RUN_ID"] == "abc123"


def test_module_mode(tmp_path: Path) -> None:
    run_module(tmp_path, ["steps", "3", "two words"])


def test_module_mode_flags(tmp_path: Path) -> None:
    run_module(tmp_path, ["--steps", "3"])


# ---------------------------------------------------------------------------- (b) output prefixes
def test_output_prefixed(tmp_path: Path) -> None:
    script = write(tmp_path / "talk.py", """
        import os, sys
        r = os.environ["RANK"]
        print("hello from", r)
        print("second line", r)
        print("to stderr", r, file=sys.stderr)
        sys.stdout.write("no newline " + r)
    """)
    r = launch("--nproc", "2", str(script))
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for rank in range(2):
        for line in (f"hello from {rank}", f"second line {rank}", f"no newline {rank}"):
            assert f"[rank{rank}]: {line}" in out, r.stdout
        assert f"[rank{rank}]: to stderr {rank}" in r.stderr.splitlines(), r.stderr
    assert all(line.startswith(("[rank0]: ", "[rank1]: ")) for line in out), r.stdout


# ---------------------------------------------------------------------------- (c), (d) failures
def test_raising_rank_ends_job(tmp_path: Path) -> None:
    script = write(tmp_path / "fail.py", """
        import os, time
        if os.environ["RANK"] == "1":
            raise ValueError("boom-xyz from rank one")
        time.sleep(30)
    """)
    start = time.monotonic()
    r = launch("--nproc", "3", str(script), timeout=20)
    wall = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    assert wall < 10, f"the sleeping ranks were not stopped quickly ({wall:.1f}s)"
    summary = [line for line in r.stderr.splitlines() if "rank 1 (node 0, host " in line]
    assert summary and "failed" in summary[0] and summary[0].endswith("with exit code 1"), r.stderr
    assert "ValueError: boom-xyz from rank one" in r.stderr


def test_sigkilled_rank(tmp_path: Path) -> None:
    script = write(tmp_path / "die.py", """
        import os, time
        if os.environ["RANK"] == "0":
            os.kill(os.getpid(), 9)
        time.sleep(30)
    """)
    start = time.monotonic()
    r = launch("--nproc", "2", str(script), timeout=20)
    assert r.returncode == 137, r.stderr
    assert time.monotonic() - start < 10
    assert "rank 0 (node 0, host " in r.stderr and "signal 9 (SIGKILL)" in r.stderr, r.stderr


# ---------------------------------------------------------------------------- (e) restarts
def test_max_restarts(tmp_path: Path) -> None:
    script = write(tmp_path / "flaky.py", """
        import os
        if os.environ["TG_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
            raise SystemExit(3)
        print("attempt", os.environ["TG_RESTART_COUNT"], "of", os.environ["TG_MAX_RESTARTS"])
    """)
    r = launch("--nproc", "2", "--max-restarts", "1", str(script))
    assert r.returncode == 0, r.stderr
    assert "restarting" in r.stderr and "exit code 3" in r.stderr
    assert "[rank0]: attempt 1 of 1" in r.stdout and "[rank1]: attempt 1 of 1" in r.stdout

    r = launch("--nproc", "2", str(script))          # without restarts the failure is the job's end
    assert r.returncode == 3 and "restarting" not in r.stderr


def test_killed_rank_resumes_training_from_checkpoint(tmp_path: Path) -> None:
    """The main job under --max-restarts: rank 1 is SIGKILLed at step 15, the job restarts and
    continues from the step-10 checkpoint to the end, with the same result as an unbroken run."""
    text = write(tmp_path / "corpus.txt", "the quick brown fox jumps over the lazy dog. " * 400)
    args = [
        "--data",
        str(text),
        "--steps",
        "30",
        "--batch",
        "4",
        "--block",
        "16",
        "--n-layer",
        "1",
        "--n-embd",
        "32",
        "--n-head",
        "2",
        "--eval-every",
        "100",
        "--warmup",
        "5",
        "--zero",
        "--ckpt-every",
        "10",
    ]
    train = str(REPO / "scripts" / "train.py")
    r = launch("--nproc", "2", "--max-restarts", "1", train, *args, "--out", str(tmp_path / "a"),
               "--crash-at-step", "15", timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "failed" in r.stderr and "SIGKILL" in r.stderr and "restarting the whole job" in r.stderr
    # the flight recorder names the killed rank and its last collective, and what rank 0 waits in
    assert re.search(r"flight recorder: rank 1 is behind in group default: its last was \w+ #\d+", r.stderr)
    assert re.search(r"flight recorder: rank 0 (wait|failed) in \w+ #\d+", r.stderr)
    assert "[rank0]: resumed from" in r.stdout and "at step 10" in r.stdout
    history = json.loads((tmp_path / "a" / "history.json").read_text())
    assert [s for s, _ in history["train"]] == list(range(1, 31))
    r = launch("--nproc", "2", train, *args, "--out", str(tmp_path / "b"), timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    unbroken = json.loads((tmp_path / "b" / "history.json").read_text())
    assert history["train"][-1][1] == pytest.approx(unbroken["train"][-1][1], abs=1e-5)


def test_fsdp_trains_as_ddp_and_resumes_at_another_world_size(tmp_path: Path) -> None:
    """The main job with --strategy fsdp (configs/gpt_fsdp.yaml's): at 2 ranks its losses are DDP's and
    ZeRO-2's; its sharded checkpoint resumes at 1 rank, the step count and history carrying on."""
    text = write(tmp_path / "corpus.txt", "the quick brown fox jumps over the lazy dog. " * 400)
    args = ["--data", str(text), "--batch", "4", "--block", "16", "--n-layer", "2", "--n-embd", "32",
            "--n-head", "2", "--eval-every", "100", "--warmup", "5", "--ckpt-every", "6", "--precision",
            "fp32"]
    train = str(REPO / "scripts" / "train.py")
    history = {}
    for strategy in ("ddp", "zero2", "fsdp"):
        r = launch("--nproc", "2", train, *args, "--steps", "12", "--strategy", strategy, "--out",
                   str(tmp_path / strategy), timeout=240)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        history[strategy] = json.loads((tmp_path / strategy / "history.json").read_text())["train"]
    for strategy in ("zero2", "fsdp"):
        assert [s for s, _ in history[strategy]] == list(range(1, 13))
        np.testing.assert_allclose([v for _, v in history[strategy]], [v for _, v in history["ddp"]],
                                   rtol=1e-5)
    r = launch("--nproc", "1", train, *args, "--steps", "18", "--strategy", "fsdp", "--resume", "--out",
               str(tmp_path / "fsdp"), timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "resumed from" in r.stdout and "at step 12 (saved by 2 ranks)" in r.stdout
    resumed = json.loads((tmp_path / "fsdp" / "history.json").read_text())["train"]
    assert [s for s, _ in resumed] == list(range(1, 19)) and np.isfinite([v for _, v in resumed]).all()


# ---------------------------------------------------------------------------- (f), (g) stopping the launcher
def test_sigint_stops_workers(tmp_path: Path) -> None:
    proc, pids = start_sleepers(tmp_path, 2)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 130, err
        assert wait_dead(pids) == [], "workers outlived the launcher's Ctrl-C"
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigkilled_launcher_takes_workers(tmp_path: Path) -> None:
    proc, pids = start_sleepers(tmp_path, 2)
    try:
        proc.kill()
        proc.wait(timeout=5)
        assert wait_dead(pids) == [], "workers outlived a SIGKILLed launcher (PR_SET_PDEATHSIG)"
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------- (h) log files
def test_log_dir(tmp_path: Path) -> None:
    script = write(tmp_path / "log.py", """
        import os, sys
        print("out of", os.environ["RANK"])
        print("err of", os.environ["RANK"], file=sys.stderr)
    """)
    logs = tmp_path / "logs"
    r = launch("--nproc", "2", "--log-dir", str(logs), str(script))
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        assert (logs / f"rank{rank}.stdout").read_text() == f"out of {rank}\n"
        assert (logs / f"rank{rank}.stderr").read_text() == f"err of {rank}\n"


# ---------------------------------------------------------------------------- (i) the master port is taken
def test_master_port_in_use(tmp_path: Path) -> None:
    script = write(tmp_path / "ok.py", "print('should not run')\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = launch("--nproc", "2", "--master-port", str(port), str(script))
    assert r.returncode != 0
    assert f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert "should not run" not in r.stdout
    assert "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------- (j) YAML errors, and configs/
def test_config_unknown_key(tmp_path: Path) -> None:
    cfg = write(tmp_path / "job.yaml", """
        # a job
        nnodes: 1
        nproc_per_nod: 4
    """)
    with pytest.raises(ValueError) as info:
        load_config(str(cfg))
    msg = str(info.value)
    assert f"{cfg}:3" in msg and "nproc_per_nod" in msg and "did you mean 'nproc_per_node'" in msg, msg


@pytest.mark.parametrize(("line", "key"), [("nproc_per_node: four", "nproc_per_node"), ("args: --x", "args"),
                                           ("nnodes: true", "nnodes"), ("env: [A, B]", "env")])
def test_config_wrong_type(tmp_path: Path, line: str, key: str) -> None:
    cfg = write(tmp_path / "job.yaml", f"script: train.py\n{line}\n")
    with pytest.raises(ValueError) as info:
        load_config(str(cfg))
    msg = str(info.value)
    assert f"{cfg}:2" in msg and key in msg, msg


def test_config_values(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    cfg = write(tmp_path / "sub" / "job.yaml", """
        nproc_per_node: 3
        env: {A: 1}
        script: ../train.py
        args: [--steps, 20]
    """)
    spec = load_config(str(cfg))
    assert spec.nproc_per_node == 3 and spec.env == {"A": "1"} and spec.args == ["--steps", "20"]
    assert os.path.normpath(spec.script or "") == str(tmp_path / "train.py")


JOB_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if "nproc_per_node:" in p.read_text())


@pytest.mark.parametrize("path", JOB_CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path: Path) -> None:
    spec = load_config(str(path))
    assert spec.script and os.path.exists(spec.script), spec.script
    assert spec.nproc_per_node >= 1 and spec.nnodes >= 1


def test_configs_folder_not_empty() -> None:
    names = {p.name for p in (REPO / "configs").glob("*.yaml")}
    assert names >= {"mpi.yaml", "single_node.yaml", "two_nodes.yaml", "gpt_zero2.yaml"}


# ---------------------------------------------------------------------------- (k) two nodes on one machine
def two_node_job(tmp_path: Path, fail_rank: int, fail_before: int = -1, hosts: list[str] | None = None,
                 master: str = "127.0.0.1", run_id: str | None = "two-node-test") -> Path:
    """A config for 2 nodes x 2 ranks running the all_reduce script (fail_rank raises after joining the
    process group, fail_before before); run_id None leaves the agents to agree on one themselves."""
    script = write(tmp_path / "allreduce.py", ALL_REDUCE.format(fail_rank=fail_rank, fail_before=fail_before))
    cfg: dict[str, object] = {
        "nnodes": 2,
        "nproc_per_node": 2,
        "master_addr": master,
        "master_port": free_port(),
        "script": str(script),
    }
    if run_id:
        cfg["run_id"] = run_id
    if hosts:
        cfg["hosts"] = hosts
    return write(tmp_path / "two.yaml", "\n".join(f"{k}: {json.dumps(v)}" for k, v in cfg.items()) + "\n")


def run_agents(
    commands: list[list[str]], timeout: float = 40, dist_timeout: int = 20
) -> list[tuple[int, str, str]]:
    """Start the agents together; return (exit code, stdout, stderr) of each."""
    env = {
        **os.environ,
        "TG_SECRET": "0123456789abcdef-shared-test-secret",
        "TG_DIST_TIMEOUT": str(dist_timeout),
    }
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for c in commands]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return results


def test_two_nodes_one_machine(tmp_path: Path) -> None:
    cfg = two_node_job(tmp_path, fail_rank=-1)
    results = run_agents([[*LAUNCH, "--config", str(cfg), "--node-rank", str(n)] for n in range(2)])
    for node, (code, _, err) in enumerate(results):
        assert code == 0, f"node {node}: {err}"
    assert "warning: no TG_SECRET" not in results[0][2]
    for rank in range(4):
        node = rank // 2
        assert f"[rank{rank}]: backend tcp sum 10.0" in results[node][1].splitlines(), results[node][1]


def test_two_nodes_default_run_id(tmp_path: Path) -> None:
    """Without run_id in the config or on the command line, the agents still name the same run."""
    cfg = two_node_job(tmp_path, fail_rank=-1, run_id=None)
    results = run_agents(
        [[*LAUNCH, "--config", str(cfg), "--node-rank", str(n)] for n in range(2)], dist_timeout=3
    )
    assert [code for code, _, _ in results] == [0, 0], [r[2] for r in results]


def test_two_nodes_remote_failure(tmp_path: Path) -> None:
    # Rank 3 fails before the process group forms, so node 0's ranks keep waiting in init_process_group and
    # only node 0's agent, through the store, can stop them.
    cfg = two_node_job(tmp_path, fail_rank=-1, fail_before=3)
    start = time.monotonic()
    results = run_agents(
        [[*LAUNCH, "--config", str(cfg), "--node-rank", str(n), "--grace", "2"] for n in range(2)]
    )
    assert time.monotonic() - start < 15, "node 0 did not stop its ranks promptly"
    assert all(code != 0 for code, _, _ in results), [r[2] for r in results]
    for _, _, err in results:
        assert "rank 3 (node 1, host " in err and "exit code 1" in err, err
        assert "RuntimeError: rank 3 gives up before joining" in err, err


def test_two_nodes_remote_failure_mid_collective(tmp_path: Path) -> None:
    cfg = two_node_job(tmp_path, fail_rank=3)
    results = run_agents(
        [[*LAUNCH, "--config", str(cfg), "--node-rank", str(n), "--grace", "2"] for n in range(2)]
    )
    assert all(code != 0 for code, _, _ in results), [r[2] for r in results]
    assert "RuntimeError: rank 3 gives up" in results[1][2]
    node0_err = results[0][2]
    assert "rank 3 (node 1, host " in node0_err and "exit code 1" in node0_err, node0_err


# ---------------------------------------------------------------------------- (l) mpiexec
def test_mpi_backend(tmp_path: Path) -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("mpi4py")
    script = write(tmp_path / "mpi.py", ALL_REDUCE.format(fail_rank=-1, fail_before=-1))
    r = launch("--backend", "mpi", "--nproc", "2", str(script), timeout=60)
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        assert f"[rank{rank}]: backend mpi sum 3.0" in r.stdout.splitlines(), r.stdout


# ---------------------------------------------------------------------------- (m) two hosts in network namesp
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def test_two_hosts_network_namespaces(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("ip") is None:
        pytest.skip("needs the `ip` command (iproute2)")
    tag = f"{os.getpid() % 100000}"
    names, addrs = [f"tgl{tag}a", f"tgl{tag}b"], ["10.77.0.1", "10.77.0.2"]
    created: list[str] = []
    try:
        try:
            for ns in names:
                _ip("netns", "add", ns)
                created.append(ns)
            _ip("link", "add", f"tgv{tag}a", "type", "veth", "peer", "name", f"tgv{tag}b")
            for ns, addr, end in zip(names, addrs, "ab"):
                _ip("link", "set", f"tgv{tag}{end}", "netns", ns)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", f"tgv{tag}{end}")
                _ip("-n", ns, "link", "set", f"tgv{tag}{end}", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot set up network namespaces here: {e.stderr.decode(errors='replace').strip()}")
        cfg = two_node_job(tmp_path, fail_rank=-1, hosts=addrs, master=addrs[0])
        # The namespaces share this machine's host name, which resolves outside them: each rank's transport
        # must listen on its namespace's address instead (on real hosts the host name does).
        results = run_agents(
            [
                ["ip", "netns", "exec", ns, "env", f"TG_DIST_HOST={addr}", *LAUNCH, "--config", str(cfg)]
                for ns, addr in zip(names, addrs)
            ]
        )
        for node, (code, _, err) in enumerate(results):
            assert code == 0, f"node {node}: {err}"
        for rank in range(4):
            assert f"[rank{rank}]: backend tcp sum 10.0" in results[rank // 2][1].splitlines(), results[
                rank // 2
            ]
    finally:
        for ns in created:      # deleting a namespace deletes the veth end inside it, and so the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def test_the_cause_is_blamed_not_the_ranks_that_noticed_it() -> None:
    from tg.launch import Failure
    from tg.launch.job import blame
    echo = Failure(2, 1, "h", 10.0, error="DistributedError: [distributed] rank 3 died or aborted")
    cause = Failure(3, 1, "h", 10.5, error="RuntimeError: rank 3 gives up")
    killed = Failure(1, -9, "h", 11.0)                        # no error record: killed by a signal
    assert blame([echo, cause]).rank == 3                     # even when the echo was recorded first
    assert blame([echo, killed]).rank == 1
    assert blame([Failure(4, 1, "h", 2.0, error="ValueError: x"), cause]).rank == 4   # then the earliest
    assert blame([echo, Failure(0, 1, "h", 10.0, error="DistributedError: timeout")]).rank == 0
