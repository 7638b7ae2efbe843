"""Start real rank processes on loopback and collect what each returns (or raises).

    results = run_ranks(3, fn, arg)      # fn(rank, world, arg) runs in 3 processes after
                                         # dist.init_process_group(); results[i] is rank i's value
    run_ranks(3, fn, backend="mpi")      # the same under mpiexec -n 3 (fn's module is imported there,
                                         # so fn must be a module-level function, args and results JSON)

Backends: tcp (sockets only), shm (tcp + the shared-memory engine for a group on one host: the
default), rings (tcp + per-pair shared-memory slot rings, what a group across hosts uses between the
ranks of one host), ucx (ucxx) and mpi (mpi4py under mpiexec).
"""
from __future__ import annotations

import inspect
import json
import multiprocessing as mp
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import pytest
from ports import free_port

BACKENDS = ["tcp", "shm", "rings", "ucx", "mpi"]
BACKEND_ENV = {"tcp": {"TG_BACKEND": "tcp", "TG_SHM": "0"}, "shm": {"TG_BACKEND": "tcp", "TG_SHM": "1"},
               "rings": {"TG_BACKEND": "tcp", "TG_SHM": "2"}, "ucx": {"TG_BACKEND": "ucx"},
               "mpi": {"TG_BACKEND": "mpi"}}
NEEDS = {"ucx": "ucxx", "mpi": "mpi4py"}


def require(backend: str) -> None:
    """Skip when the backend's package is missing on a developer's machine; CI installs every extra,
    so there a missing package fails instead of skipping."""
    import importlib.util
    module = NEEDS.get(backend)
    if module is None or importlib.util.find_spec(module) is not None:
        from tg.launch.agent import mpiexec_command
        if backend != "mpi" or mpiexec_command(1) is not None:
            return
    message = f"backend {backend} needs pip install -e '.[dev]' ({module} and its libraries)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def mpiexec(world: int) -> list[str]:
    """The mpiexec command line for `world` ranks (tglaunch's, with the flags Open MPI needs here), after
    removing the session folders that killed mpiexecs left (one at the pid it gets stops it)."""
    from tg.launch.agent import mpiexec_command, remove_dead_mpi_sessions
    remove_dead_mpi_sessions()
    cmd = mpiexec_command(world)
    assert cmd is not None
    return cmd


def _worker(rank: int, world: int, port: int, secret: str, fn: Callable, args: tuple, q: Any,
            init: bool, extra_env: dict, dist_timeout: float) -> None:
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TG_SECRET": secret,
            **extra_env,
        }
    )
    pid = os.getpid()
    try:
        import tg.distributed as dist
        if init:
            dist.init_process_group(timeout=dist_timeout)
        result = fn(rank, world, *args)
        if init:
            dist.destroy_process_group()
        q.put((rank, "ok", result))
    except BaseException as e:  # noqa: BLE001 - report everything to the parent
        if os.getpid() != pid:     # a process fn forked, ending (sys.exit): not the rank's result
            raise
        q.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class RankError(AssertionError):
    pass


# Complexity: one launcher per backend (processes or mpiexec) and result collection with readable errors.
def run_ranks(world: int, fn: Callable, *args: Any, timeout: float = 120, init: bool = True,  # noqa: C901
              allow_errors: bool = False, env: dict | None = None, dist_timeout: float = 60,
              backend: str = "shm") -> list[Any]:
    """Run fn(rank, world, *args) in `world` fresh processes; returns each rank's result.

    With allow_errors, a rank's exception comes back as the string "ERROR: ..." instead of failing."""
    require(backend)
    env = {**BACKEND_ENV[backend], **(env or {})}
    if backend == "mpi":
        return _run_mpi(world, fn, args, timeout, init, allow_errors, env, dist_timeout)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port, secret = free_port(), secrets.token_hex(16)
    procs = [ctx.Process(target=_worker, args=(r, world, port, secret, fn, args, q, init, env, dist_timeout),
                         daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RankError(
                    f"ranks {sorted(set(range(world)) - set(results))} did not finish in {timeout}s"
                )
            try:
                rank, status, value = q.get(timeout=min(left, 1.0))
            except Exception:  # noqa: BLE001 - queue.Empty; check for dead processes
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
                if dead and all(p.exitcode is not None for p in procs):
                    for r in dead:
                        results[r] = f"ERROR: exited with code {procs[r].exitcode}"
                continue
            if status == "error" and not allow_errors:
                raise RankError(f"rank {rank} raised:\n{value}")
            results[rank] = value if status == "ok" else f"ERROR: {value}"
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]


def _run_mpi(world: int, fn: Callable, args: tuple, timeout: float, init: bool, allow_errors: bool, env: dict,
             dist_timeout: float) -> list[Any]:
    out = tempfile.mkdtemp(prefix="tg-mpi-")
    try:
        spec = json.dumps({"module": inspect.getfile(fn), "fn": fn.__name__, "args": list(args), "init": init,
                           "dist_timeout": dist_timeout, "out": out})
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_worker.py")
        cmd = [*mpiexec(world), sys.executable, worker, spec]
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)
        results = []
        for r in range(world):
            path = os.path.join(out, f"rank{r}.json")
            if not os.path.exists(path):
                status, value = "error", f"exited without a result (mpiexec exit {proc.returncode}):\n" \
                                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            else:
                with open(path) as f:
                    status, value = json.load(f)
            if status == "error" and not allow_errors:
                raise RankError(f"rank {r} raised:\n{value}")
            results.append(value if status == "ok" else f"ERROR: {value}")
        return results
    finally:
        shutil.rmtree(out, ignore_errors=True)
