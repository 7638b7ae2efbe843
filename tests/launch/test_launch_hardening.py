"""tglaunch against bad input and hard deaths: every bad flag or YAML value is a usage error (exit code 2,
argparse's message), and a SIGKILLed launcher leaves nothing of its job behind (the workers' children,
mpiexec's ranks) or nothing a later job trips over (Open MPI's shared-memory files and session folders)."""
from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launch import alive, launch, start_sleepers, wait_dead, write

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
    proc = subprocess.Popen([*cmd, "sleep", "60"], env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
    folder = tmp / f"ompi.{proc.pid}"
    deadline = time.monotonic() + 30
    while not any(folder.glob("pmix.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert folder.is_dir(), f"mpiexec {proc.pid} left no session folder in {tmp}: {os.listdir(tmp)}"
    return folder


def _copy_session(src: Path, pid: int) -> Path:
    """src as the folder a dead launcher of pid would have left (its files carry the pid in their names)."""
    old = src.name.split(".")[1]
    dst = src.parent / f"ompi.{pid}"
    shutil.copytree(src, dst)
    for f in list(dst.iterdir()):
        if old in f.name:
            f.rename(dst / f.name.replace(old, str(pid)))
    return dst


@needs_mpiexec
@pytest.mark.parametrize("seed", range(3))
def test_a_dead_mpiexecs_session_folder_does_not_stop_the_next(tmp_path: Path, monkeypatch,
                                                               seed: int) -> None:
    """An mpiexec killed with SIGKILL leaves `<tmp>/ompi.<pid>`; the next mpiexec that gets the same pid
    (pids wrap at pid_max, often 32768, within one test suite) failed with "The PMIx server's listener
    thread failed to start". The launcher removes the dead ones first: here every pid the next mpiexec
    can get has such a folder, and folders of live pids, of other names and plain files stay."""
    rng = random.Random(seed)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))        # this test's own; other tests' launchers clean /tmp
    dead = _dead_mpiexec_session(tmp)
    sleeper = subprocess.Popen(["sleep", "60"])
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    upcoming = [p for p in range(last + 1, last + 200) if p < pid_max and not alive(p)]
    never = [pid_max + rng.randrange(1, 10**6) for _ in range(rng.randrange(1, 6))]   # no process has these
    for pid in {*upcoming, *never}:
        _copy_session(dead, pid)
    try:
        kept = [_copy_session(dead, sleeper.pid), _copy_session(dead, os.getpid())]
        kept += [tmp / "ompi.notapid", tmp / f"ompi.{never[0]}x", tmp / "ompi"]
        for path in kept[2:]:
            path.mkdir()
        plain = tmp / f"ompi.{pid_max + 10**7}"
        plain.write_text("a file, not a session folder")
        kept.append(plain)
        cmd = mpiexec_command(2)                     # removes the dead ones, as every caller's launch does
        assert cmd is not None
        r = subprocess.run([*cmd, sys.executable, "-c", "print('ran')"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and r.stdout.count("ran") == 2, (r.returncode, r.stdout, r.stderr)
        for pid in never:
            assert not (tmp / f"ompi.{pid}").exists()
        assert not dead.exists() or Path(f"/proc/{dead.name[5:]}").exists()    # unless its pid is taken again
        assert all(path.exists() for path in kept), sorted(os.listdir(tmp))
        again = remove_dead_mpi_sessions()
        assert all(Path(p).parent == tmp and Path(p) not in kept for p in again), again
        assert all(path.exists() for path in kept) and not [p for p in tmp.iterdir() if ".dead-" in p.name]
    finally:
        sleeper.kill()
        sleeper.wait()
