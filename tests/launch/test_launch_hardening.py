"""tglaunch against bad input and hard deaths: every bad flag or YAML value is a usage error (exit code 2,
argparse's message), and a SIGKILLed launcher leaves nothing of its job behind (the workers' children,
mpiexec's ranks) or nothing a later job trips over (Open MPI's shared-memory files and session folders)."""
from __future__ import annotations

import json
import mmap
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launch import ALL_REDUCE, alive, launch, start_sleepers, wait_dead, write

from tg.launch.agent import SHM_DIR, mpiexec_command, remove_dead_mpi_sessions

# A worker that starts a grandchild, writes its own pid and the grandchild's, and sleeps.
GRANDPARENT = """
import os, subprocess, time
child = subprocess.Popen(["sleep", "60"])
for name, pid in (("pid", os.getpid()), ("child", child.pid)):
    with open(os.path.join({out!r}, name + os.environ["RANK"]), "w") as f:
        f.write(str(pid))
print("ready", flush=True)
time.sleep(60)
"""

ALL_REDUCE_MPI = ALL_REDUCE.format(fail_rank=-1, fail_before=-1)
needs_mpiexec = pytest.mark.skipif(mpiexec_command(1) is None, reason="needs mpiexec (pip install 'tg[mpi]')")


def usage_error(*args: str, cwd: Path) -> str:
    """Run tglaunch, expect argparse's usage error (exit code 2, no worker started); return stderr."""
    r = launch(*args, cwd=cwd)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "tglaunch: error:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "should not run" not in r.stdout
    return r.stderr


# ---------------------------------------------------------------------------- flags and YAML keys
@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--max-restarts", "-1", "at least 0, got -1"), ("--grace", "-1", "at least 0, got -1.0"),
    ("--grace", "nan", "got nan"), ("--nproc", "0", "at least 1, got 0"), ("--nnodes", "0", "at least 1"),
    ("--node-rank", "-1", "at least 0"), ("--master-port", "70000", "in 0..65535, got 70000"),
    ("--master-port", "-5", "in 0..65535"), ("--max-restarts", "two", "invalid int value: 'two'")])
def test_bad_flag_is_a_usage_error(tmp_path: Path, flag: str, value: str, expected: str) -> None:
    script = write(tmp_path / "ok.py", "print('should not run')\n")
    err = usage_error(f"{flag}={value}", str(script), cwd=tmp_path)
    assert f"argument {flag}" in err and expected in err, err


@pytest.mark.parametrize(("line", "expected"), [
    ("max_restarts: -1", "max_restarts must be at least 0, got -1"),
    ("master_port: 70000", "master_port must be in 0..65535, got 70000"),
    ("nproc_per_node: 0", "nproc_per_node must be at least 1, got 0"),
    ("nnodes: 0", "nnodes must be at least 1, got 0"),
    ("nproc_per_nod: 2", "unknown key 'nproc_per_nod'; did you mean 'nproc_per_node'?"),
    ("max-restarts: 1", "unknown key 'max-restarts'; did you mean 'max_restarts'?"),
    ("nproc: 2", "unknown key 'nproc'; did you mean 'nproc_per_node'?"),
    ("grace: 3", "unknown key 'grace'; grace is a command-line flag only: --grace")])
def test_bad_yaml_is_a_usage_error(tmp_path: Path, line: str, expected: str) -> None:
    write(tmp_path / "ok.py", "print('should not run')\n")
    cfg = write(tmp_path / "job.yaml", f"script: ok.py\n{line}\n")
    err = usage_error("--config", str(cfg), cwd=tmp_path)
    assert f"{cfg}:2: {expected}" in err, err


# ---------------------------------------------------------------------------- a SIGKILLed launcher
@pytest.mark.parametrize("backend", ["tcp", pytest.param("mpi", marks=needs_mpiexec)])
def test_sigkilled_launcher_takes_grandchildren(tmp_path: Path, backend: str) -> None:
    """PR_SET_PDEATHSIG reaches only the launcher's children; each worker's watchdog takes the rest:
    what the workers started and, under mpiexec, the ranks themselves."""
    proc, pids = start_sleepers(tmp_path, 2, "--backend", backend, text=GRANDPARENT)
    children = [int((tmp_path / f"child{rank}").read_text()) for rank in range(2)]
    try:
        assert all(alive(p) for p in pids + children)
        proc.kill()
        proc.wait(timeout=5)
        assert wait_dead(pids + children) == [], "the job outlived its SIGKILLed launcher"
    finally:
        for pid in pids + children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@needs_mpiexec
def test_dead_jobs_mpi_segments_removed_at_start(tmp_path: Path) -> None:
    """Open MPI segment files of this user that no process uses are removed (with a log line) when an
    mpi job starts; one that a process maps, or one just made, stays."""
    stem = f"sm_segment.tgtest{os.getpid()}.{os.geteuid()}"
    dead, used, young = (Path(SHM_DIR) / f"{stem}.{name}.0" for name in ("dead", "used", "young"))
    script = write(tmp_path / "ok.py", "print('ran')\n")
    try:
        for path in (dead, used, young):
            path.write_bytes(b"\0" * 4096)
        now = time.time()
        for path, when in ((dead, now - 3600), (used, now - 3600), (young, now + 3600)):
            os.utime(path, (when, when))      # young stays young however slowly the launcher starts
        with open(used, "r+b") as f, mmap.mmap(f.fileno(), 4096):
            r = launch("--backend", "mpi", "--nproc", "1", str(script), timeout=60)
            assert r.returncode == 0, r.stderr
            assert not dead.exists() and used.exists() and young.exists()
        # Another test's mpi launch (pytest -n) may have removed the dead file first and said so there.
        if dead.name in r.stderr:
            assert f"that a dead job left in {SHM_DIR}: " in r.stderr, r.stderr
        assert used.name not in r.stderr and young.name not in r.stderr, r.stderr
        dead.write_bytes(b"\0" * 4096)
        os.utime(dead, (now - 3600, now - 3600))
        with open(used, "r+b") as f, mmap.mmap(f.fileno(), 4096):     # another process looks, as a launcher
            code = ("import json; from tg.launch.agent import remove_dead_mpi_segments as r; "
                    "print(json.dumps(r()))")
            removed = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                check=True, timeout=60).stdout)
        assert str(dead) in removed or not dead.exists()
        assert str(used) not in removed and str(young) not in removed and used.exists() and young.exists()
    finally:
        for path in (dead, used, young):
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- a dead mpiexec's session folder
def _dead_mpiexec_session(tmp: Path) -> Path:
    """The session folder `<tmp>/ompi.<pid>` that an mpiexec killed with SIGKILL leaves behind."""
    cmd = mpiexec_command(1)
    assert cmd is not None
    proc = subprocess.Popen([*cmd, "sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            process_group=0)
    folder = tmp / f"ompi.{proc.pid}"
    deadline = time.monotonic() + 30
    while not any(folder.glob("pmix.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert folder.is_dir(), f"mpiexec {proc.pid} left no session folder in {tmp}: {os.listdir(tmp)}"
    return folder


def _copy_session(src: Path, pid: int, host: str | None = None) -> Path:
    """src as the folder a dead launcher of pid (on host) would have left: its files carry both names."""
    old_pid, old_host = src.name.split(".")[1], socket.gethostname().split(".")[0]
    dst = src.parent / f"ompi.{pid}"
    shutil.copytree(src, dst)
    for f in list(dst.iterdir()):
        new = re.sub(rf"(?<![0-9]){old_pid}(?![0-9])", str(pid), f.name)
        new = new.replace(f"pmix.{old_host}.", f"pmix.{host}.") if host else new
        f.rename(dst / new)
    return dst


def _upcoming_pids(n: int) -> list[int]:
    """The next n pids the kernel can hand out (after the last one given, wrapping past pid_max)."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    pids, pid = [], last
    while len(pids) < n:
        pid = pid + 1 if pid + 1 < pid_max else 300          # the kernel wraps to 300 and up
        if not Path(f"/proc/{pid}").exists():
            pids.append(pid)
    return pids


@needs_mpiexec
def test_a_dead_mpiexecs_session_folder_does_not_stop_the_next_job(tmp_path: Path, monkeypatch) -> None:
    """An mpiexec killed with SIGKILL leaves `<tmp>/ompi.<pid>`; the next mpiexec that got the same pid
    (pids wrap at pid_max, often 32768, within one test suite) failed with "The PMIx server's listener
    thread failed to start". Here every pid the job's mpiexec can get holds such a folder: tglaunch
    removes them first and says so."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))        # this test's own: other tests' launchers clean /tmp
    dead = _dead_mpiexec_session(tmp)
    for pid in _upcoming_pids(1000):              # far more than the machine starts during this test
        _copy_session(dead, pid)
    script = write(tmp_path / "mpi.py", ALL_REDUCE_MPI)
    r = launch("--backend", "mpi", "--nproc", "2", str(script), timeout=120)
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        assert f"[rank{rank}]: backend mpi sum 3.0" in r.stdout.splitlines(), r.stdout
    assert f"Open MPI session folder(s) that a dead mpiexec left in {tmp}: " in r.stderr, r.stderr
    assert not [p for p in tmp.iterdir() if p.name.startswith(".ompi.")]


@pytest.mark.parametrize("seed", range(4))
def test_only_dead_launchers_session_folders_of_this_host_are_removed(tmp_path: Path, monkeypatch,
                                                                      seed: int) -> None:
    """Generated folders and files: removed are `ompi.<pid>` folders of this user and host whose pid no
    process has, and the leftovers of a cleaner that died mid-way; everything else stays. Host names
    with digits and domains too (Open MPI names its files with the short name unless told not to)."""
    rng = random.Random(seed)
    hostname = [socket.gethostname(), "node1.cluster.example", "ip-10-0-1-5", "h7"][seed]
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    host = rng.choice([hostname, hostname.split(".")[0]])
    template = tmp_path / "ompi.987654321"
    template.mkdir()
    for name in (f"pmix.{host}.tool", f"pmix.{host}.tool.987654321", "hwloc.sm"):
        (template / name).write_text("x")
    (template / "0").mkdir()
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    never = rng.sample(range(pid_max + 1, pid_max + 10**6), rng.randrange(1, 8))     # no process has these
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        gone = [_copy_session(template, pid) for pid in never]
        gone += [tmp_path / f".ompi.{never[0]}.dead-{never[-1]}-{rng.randrange(10**9)}"]   # its cleaner died
        gone[-1].mkdir()
        kept = [_copy_session(template, pid) for pid in (sleeper.pid, os.getpid())]     # pids that are taken
        kept += [_copy_session(template, pid_max + 10**6 + 1, host="another-host")]     # another host's
        kept += [tmp_path / f".ompi.{never[0]}.dead-{os.getpid()}-1"]                   # a live cleaner's
        kept += [tmp_path / name for name in ("ompi.notapid", f"ompi.{never[0]}x", "ompi", "ompi.\u00b2",
                                              f"ompi.{never[0]}.1", f"xompi.{never[0]}")]
        for path in kept[3:]:
            path.mkdir()
        empty = tmp_path / f"ompi.{pid_max + 10**6 + 2}"         # no host files: not known to be this host's
        empty.mkdir()
        plain = tmp_path / f"ompi.{pid_max + 10**6 + 3}"
        plain.write_text("a file, not a session folder")
        kept += [empty, plain]
        shutil.rmtree(template)
        removed = remove_dead_mpi_sessions({"TMPDIR": str(tmp_path)})
        assert sorted(removed) == sorted(str(p) for p in gone[:-1])
        left = sorted(os.listdir(tmp_path))
        assert not any(p.exists() for p in gone) and all(p.exists() for p in kept), left
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ompi.") and p not in kept]
        assert remove_dead_mpi_sessions({"PRTE_MCA_prte_tmpdir_base": str(tmp_path), "TMPDIR": "/"}) == []
        stale = _copy_session(kept[0], never[0])          # the base Open MPI itself would take comes first
        assert remove_dead_mpi_sessions({"PRTE_MCA_prte_tmpdir_base": str(tmp_path), "TMPDIR": "/"}) == [
            str(stale)]
    finally:
        sleeper.kill()
        sleeper.wait()
