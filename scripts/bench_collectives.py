"""Collective benchmarks in the style of nccl-tests: for sizes 4 B .. 128 MiB, time and busbw
(nccl-tests' factors) of all_reduce, all_gather, reduce_scatter and broadcast, at world sizes 2 and
4, over every tg backend: tcp, shm (tcp + shared memory), ucx (ucxx) and mpi (mpi4py under
mpiexec), beside mpi4py called directly in the same mpiexec job, so tg's overhead over raw MPI is
the `mpi/raw` column (time ratio). The limits are measured in the same run: np.copyto bandwidth and
a loopback socket's bandwidth; `--vs gloo` adds PyTorch gloo's numbers when torch is importable.
A backend whose package is missing is left out, with a line saying so.

    python scripts/bench_collectives.py                 # all_reduce, world 2 and 4
    python scripts/bench_collectives.py --ops all --vs gloo
    python scripts/bench_collectives.py --quick --backends shm,mpi
    TG_CL_SPLIT=2 python scripts/bench_collectives.py --backends shm --device CL   # CL tensors vs host

`--device CL` (or CUDA) adds a column per tg backend with the same collectives on tg Tensors on that
device (rank r on device r mod count), staged through the host: beside the host column it shows
what the staging costs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
         "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def sizes(quick: bool) -> list[int]:
    top = 8 << 20 if quick else 128 << 20
    out, s = [], 4
    while s <= top:
        out.append(s)
        s *= 4 if s < (1 << 20) else 2
    return out


def iters_for(nbytes: int) -> int:
    return max(5, min(1000, (64 << 20) // max(nbytes, 1)))


def _tg_call(dist, op: str, x: np.ndarray, out: np.ndarray, small: np.ndarray, world: int) -> None:
    if op == "all_reduce":
        dist.all_reduce(x)
    elif op == "broadcast":
        dist.broadcast(x, src=0)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, x[: x.size // world])
    else:
        dist.reduce_scatter_tensor(small, x)


def _gloo_call(tdist, op: str, x) -> None:
    if op == "all_reduce":
        tdist.all_reduce(x)
    else:
        tdist.broadcast(x, 0)


BACKEND_ENV = {"tcp": {"TG_BACKEND": "tcp", "TG_SHM": "0"}, "shm": {"TG_BACKEND": "tcp", "TG_SHM": "1"},
               "ucx": {"TG_BACKEND": "ucx"}}


def _tg_rank(rank: int, world: int, port: int, ops: list[str], size_list: list[int], q, backend: str,
             device: str = "") -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "TG_SECRET": "bench", **BACKEND_ENV[backend]})
    if device:     # each rank on its own device of the kind, as under tglaunch
        os.environ.update({"TG_DEVICE": device, "LOCAL_RANK": str(rank)})
    import tg.distributed as dist
    from tg import Tensor

    def buffer(n: int):
        return Tensor(np.zeros(n, np.float32)).realize() if device else np.zeros(n, np.float32)
    dist.init_process_group()
    rows = []
    for op in ops:
        for nbytes in size_list:
            n = max(nbytes // 4, 1)
            if op in ("all_gather", "reduce_scatter"):
                n = max(n // world, 1) * world
            x, out, small = buffer(n), buffer(n), buffer(n // world if n >= world else 1)

            k = iters_for(n * 4)
            for _ in range(3):
                _tg_call(dist, op, x, out, small, world)
            dist.barrier()
            t = time.perf_counter()
            for _ in range(k):
                _tg_call(dist, op, x, out, small, world)
            dist.barrier()
            rows.append((op, n * 4, (time.perf_counter() - t) / k))
    dist.destroy_process_group()
    if rank == 0:
        q.put(rows)


def _gloo_rank(rank: int, world: int, port: int, ops: list[str], size_list: list[int], q) -> None:
    import torch
    import torch.distributed as tdist
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    tdist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for op in ops:
        if op not in ("all_reduce", "broadcast"):
            continue
        for nbytes in size_list:
            x = torch.zeros(max(nbytes // 4, 1))
            k = iters_for(x.numel() * 4)
            for _ in range(3):
                _gloo_call(tdist, op, x)
            tdist.barrier()
            t = time.perf_counter()
            for _ in range(k):
                _gloo_call(tdist, op, x)
            tdist.barrier()
            rows.append((op, x.numel() * 4, (time.perf_counter() - t) / k))
    tdist.destroy_process_group()
    if rank == 0:
        q.put(rows)


def _raw_mpi_call(comm, mpi, op: str, x: np.ndarray, out: np.ndarray, small: np.ndarray, world: int) -> None:
    if op == "all_reduce":
        comm.Allreduce(mpi.IN_PLACE, x, op=mpi.SUM)
    elif op == "broadcast":
        comm.Bcast(x, root=0)
    elif op == "all_gather":
        comm.Allgather(x[: x.size // world], out)
    else:
        comm.Reduce_scatter_block(x, small, op=mpi.SUM)


def mpi_child(ops: list[str], size_list: list[int]) -> None:
    """Runs under mpiexec: tg's mpi backend and raw mpi4py, alternating per size (best of two rounds
    each), so both see the same machine state. Rank 0 prints the rows as one JSON line."""
    import tg.distributed as dist
    dist.init_process_group(backend="mpi")
    from mpi4py import MPI
    comm, world = MPI.COMM_WORLD, dist.get_world_size()
    rows: dict[str, list] = {"tg mpi": [], "mpi4py": []}
    for op in ops:
        for nbytes in size_list:
            n = max(nbytes // 4, 1)
            if op in ("all_gather", "reduce_scatter"):
                n = max(n // world, 1) * world
            x, out = np.zeros(n, np.float32), np.empty(n, np.float32)
            small = np.empty(n // world if n >= world else 1, np.float32)
            k = iters_for(n * 4)
            calls = {"tg mpi": lambda: _tg_call(dist, op, x, out, small, world),  # noqa: B023 - used in-loop
                     "mpi4py": lambda: _raw_mpi_call(comm, MPI, op, x, out, small, world)}  # noqa: B023
            best = {name: float("inf") for name in calls}
            for _ in range(2):
                for name, call in calls.items():
                    for _ in range(3):
                        call()
                    comm.Barrier()
                    t = time.perf_counter()
                    for _ in range(k):
                        call()
                    comm.Barrier()
                    best[name] = min(best[name], (time.perf_counter() - t) / k)
            for name, t in best.items():
                rows[name].append((op, n * 4, t))
    rank = dist.get_rank()
    dist.destroy_process_group()
    if rank == 0:
        print("ROWS " + json.dumps(rows), flush=True)


def run_mpi_job(world: int, ops: list[str], size_list: list[int]) -> dict[str, list]:
    from tg.launch.agent import mpiexec_command
    mpiexec = mpiexec_command(world) or ["mpiexec", "-n", str(world)]
    cmd = [*mpiexec, sys.executable, os.path.abspath(__file__), "--mpi-child", "--ops", ",".join(ops),
           "--sizes", ",".join(map(str, size_list))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("ROWS "):
            return {name: [tuple(r) for r in rows] for name, rows in json.loads(line[5:]).items()}
    raise RuntimeError(
        f"the mpi job failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )


def run_job(fn, world: int, ops: list[str], size_list: list[int], *extra) -> list:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=fn, args=(r, world, port, ops, size_list, q, *extra)) for r in range(world)]
    for p in procs:
        p.start()
    rows = q.get(timeout=1800)
    for p in procs:
        p.join(60)
    return rows


def copy_bw() -> float:
    a, b = np.ones(32 << 18, np.float32), np.empty(32 << 18, np.float32)
    best = min(
        (lambda t0: (np.copyto(b, a), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(20)
    )
    return a.nbytes / best / 1e9


def socket_bw() -> float:
    """One loopback TCP stream, 32 MiB, large buffers: the most a tcp transport can move."""
    srv = socket.create_server(("127.0.0.1", 0))
    total = 256 << 20
    payload = memoryview(bytearray(1 << 22))

    def sink() -> None:
        conn, _ = srv.accept()
        buf = memoryview(bytearray(1 << 22))
        got = 0
        while got < total:
            got += conn.recv_into(buf)
        conn.close()
    th = threading.Thread(target=sink)
    th.start()
    c = socket.create_connection(srv.getsockname())
    t = time.perf_counter()
    sent = 0
    while sent < total:
        c.sendall(payload)
        sent += len(payload)
    th.join()
    dt = time.perf_counter() - t
    c.close()
    srv.close()
    return total / dt / 1e9


def fmt_size(n: int) -> str:
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n // f} {unit}"
    return f"{n} B"


def available(backend: str) -> str | None:
    """None when the backend can run here, else why not."""
    need = {"ucx": "ucxx", "mpi": "mpi4py"}.get(backend)
    if need and importlib.util.find_spec(need) is None:
        return f"{need} is not installed (pip install -e '.[{backend}]')"
    return None


# Complexity: flag parsing and the run matrix (backends x worlds x devices), read top to bottom.
def main() -> None:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="all_reduce", help="comma list, or 'all'")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--backends", default="tcp,shm,ucx,mpi")
    ap.add_argument("--vs", default="", help="'gloo' to add PyTorch gloo in the same run")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="", help="also time tg Tensors on this device kind (CL, CUDA), "
                                                 "each rank on its own device: the cost of staging")
    ap.add_argument("--mpi-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    ops = list(BUSBW) if args.ops == "all" else args.ops.split(",")
    size_list = [int(v) for v in args.sizes.split(",")] if args.sizes else sizes(args.quick)
    if args.mpi_child:
        mpi_child(ops, size_list)
        return
    print(f"tg bench_collectives  cores={os.cpu_count()}  limits: np.copyto {copy_bw():.2f} GB/s, "
          f"loopback socket {socket_bw():.2f} GB/s")
    backends = args.backends.split(",")
    for backend in backends:
        why = available(backend)
        if why:
            print(f"(no {backend} column: {why})")
    for world in map(int, args.worlds.split(",")):
        results: dict[str, list] = {}
        for backend in backends:
            if available(backend):
                continue
            if backend == "mpi":
                results.update(run_mpi_job(world, ops, size_list))
            else:
                results[f"tg {backend}"] = run_job(_tg_rank, world, ops, size_list, backend)
                if args.device:
                    results[f"{backend} {args.device}"] = run_job(_tg_rank, world, ops, size_list, backend,
                                                                  args.device)
        if args.vs == "gloo":
            try:
                import torch  # noqa: F401
                results["gloo"] = run_job(_gloo_rank, world, ops, size_list)
            except ImportError:
                print("(torch is not installed: no gloo column)")
        print_tables(results, ops, size_list, world)


def print_tables(results: dict[str, list], ops: list[str], size_list: list[int], world: int) -> None:
    ratio = "tg mpi" in results and "mpi4py" in results
    for op in ops:
        print(
            f"\n{op}  world={world}   (time in us, busbw in GB/s"
            + ("; mpi/raw = tg mpi time / mpi4py time)" if ratio else ")")
        )
        head = f"{'size':>9}"
        for name in results:
            head += f" | {name:>8} {'time':>9} {'busbw':>6}"
        print(head + (f" | {'mpi/raw':>7}" if ratio else ""))
        for nbytes in size_list:
            line = f"{fmt_size(nbytes):>9}"
            times = {}
            for name, rows in results.items():
                hit = sorted((r for r in rows if r[0] == op), key=lambda r: abs(r[1] - nbytes))[:1]
                if not hit:
                    line += f" | {'':>8} {'-':>9} {'-':>6}"
                    continue
                _, nb, t = hit[0]
                times[name] = t
                line += f" | {'':>8} {t * 1e6:9.1f} {nb / t / 1e9 * BUSBW[op](world):6.2f}"
            if ratio and "tg mpi" in times and "mpi4py" in times:
                line += f" | {times['tg mpi'] / times['mpi4py']:7.2f}"
            print(line)


if __name__ == "__main__":
    main()
