"""Start real rank processes on loopback and collect what each returns (or raises).

    results = run_ranks(3, fn, arg)      # fn(rank, world, arg) runs in 3 processes after
                                         # dist.init_process_group(); results[i] is rank i's value
"""
from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import socket
import time
import traceback
from typing import Any, Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, secret: str, fn: Callable, args: tuple, q: Any,
            init: bool, extra_env: dict, dist_timeout: float) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TG_SECRET": secret, **extra_env})
    try:
        import tg.distributed as dist
        if init:
            dist.init_process_group(timeout=dist_timeout)
        result = fn(rank, world, *args)
        if init:
            dist.destroy_process_group()
        q.put((rank, "ok", result))
    except BaseException as e:  # noqa: BLE001 - report everything to the parent
        q.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class RankError(AssertionError):
    pass


def run_ranks(world: int, fn: Callable, *args: Any, timeout: float = 120, init: bool = True,
              allow_errors: bool = False, env: dict | None = None, dist_timeout: float = 60) -> list[Any]:
    """Run fn(rank, world, *args) in `world` fresh processes; returns each rank's result.

    With allow_errors, a rank's exception comes back as the string "ERROR: ..." instead of failing."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port, secret = free_port(), secrets.token_hex(16)
    procs = [ctx.Process(target=_worker, args=(r, world, port, secret, fn, args, q, init, env or {}, dist_timeout),
                         daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RankError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in {timeout}s")
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
