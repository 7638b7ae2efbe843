"""Collective benchmarks in the style of nccl-tests: time and busbw (nccl-tests' factors) of
all_reduce, all_gather, reduce_scatter and broadcast for sizes 4 B .. 32 MiB, at world sizes 2, 3
and 4, for every tg transport beside Open MPI (mpi4py's buffer API) and PyTorch's gloo, all in one
job per world size: each rank holds a tg group per transport, MPI_COMM_WORLD and a gloo group, and
the contenders take turns (one timed window each, then again), so the machine's noise hits all of
them alike. A cell is the median of the rounds. The ratios are bandwidth ratios (time of the
reference over time of tg's transport): above 1.00 tg is faster.

tg's transports: shm (the shared-memory engine: the default for ranks on one host), tcp (TG_SHM=0),
rings (TG_SHM=2: sockets carry headers, per-pair shared-memory slots the payloads: what a group
across hosts uses between ranks of one host) and ucx (ucxx). The limits are measured in the same run:
np.copyto's bandwidth, one loopback TCP stream's, and two ends of one loopback connection each sending
and receiving 32 MiB at once (a C poll loop per end: what a 2-rank 32 MiB all_reduce must move over
TCP, each way, with no reduction and no Python: at 2 ranks all_reduce's busbw is those bytes each way
per second, so this is the tcp column's ceiling there).

    python scripts/bench_collectives.py                        # all_reduce at worlds 2, 3 and 4
    python scripts/bench_collectives.py --ops all --quick
    python scripts/bench_collectives.py --transports shm,tcp --worlds 2 --top 128M
    python scripts/bench_collectives.py --mpi-overhead         # tg's mpi backend over raw mpi4py
    TG_CL_SPLIT=2 python scripts/bench_collectives.py --device CL   # + tg Tensors on CL devices (staged)

Without mpiexec and mpi4py the ranks are started as plain processes and the MPI column is left out;
without torch, the gloo column. A transport whose package is missing is left out, with a line saying so.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
         "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
TRANSPORTS = {"shm": "1", "tcp": "0", "rings": "2", "ucx": None}     # transport -> TG_SHM of its group
REFERENCES = ("mpi", "gloo")


def sizes(quick: bool, top: int) -> list[int]:
    top = min(top, 8 << 20) if quick else top
    out, s = [], 4
    while s <= top:
        out.append(s)
        s *= 16 if s < (1 << 16) and quick else 4 if s < (1 << 20) else 2
    return out


def iters_for(nbytes: int, quick: bool) -> int:
    return max(3 if quick else 5, min(200 if quick else 1000, (32 << 20) // max(nbytes, 1)))


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


# ---------------------------------------------------------------------------- one rank of the job

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Contender:
    """One way to run the op: call(op) on buffers made for one size by make(n_floats)."""

    def __init__(self, name: str, make: Callable[[int], Any], call: Callable[[str, Any], None]):
        self.name, self.make, self.call = name, make, call


def _tg_contender(name: str, group: Any, device: str = "") -> Contender:
    import tg.distributed as dist
    from tg import Tensor

    def make(n: int) -> tuple:
        world = dist.get_world_size(group)
        arr = (lambda k: Tensor(np.ones(k, np.float32), device=device).realize()) if device else \
            (lambda k: np.ones(k, np.float32))
        return arr(n), arr(n), arr(max(n // world, 1))

    def call(op: str, bufs: tuple) -> None:
        x, out, small = bufs
        world = dist.get_world_size(group)
        if op == "all_reduce":
            dist.all_reduce(x, group=group)
        elif op == "broadcast":
            dist.broadcast(x, src=0, group=group)
        elif op == "all_gather":
            dist.all_gather_into_tensor(out, small, group=group)
        else:
            dist.reduce_scatter_tensor(small, x[:small.shape[0] * world], group=group)
    return Contender(name, make, call)


def _mpi_contender(comm: Any, mpi: Any) -> Contender:
    def make(n: int) -> tuple:
        return np.ones(n, np.float32), np.ones(n, np.float32), np.ones(max(n // comm.size, 1), np.float32)

    def call(op: str, bufs: tuple) -> None:
        x, out, small = bufs
        if op == "all_reduce":
            comm.Allreduce(mpi.IN_PLACE, x, op=mpi.SUM)
        elif op == "broadcast":
            comm.Bcast(x, root=0)
        elif op == "all_gather":
            comm.Allgather(small, out[:small.size * comm.size])
        else:
            comm.Reduce_scatter_block(x[:small.size * comm.size], small, op=mpi.SUM)
    return Contender("mpi", make, call)


def _gloo_contender(tdist: Any, torch: Any, world: int) -> Contender:
    def make(n: int) -> tuple:
        return torch.ones(n), torch.ones(n), torch.ones(max(n // world, 1))

    def call(op: str, bufs: tuple) -> None:
        x, out, small = bufs
        if op == "all_reduce":
            tdist.all_reduce(x)
        elif op == "broadcast":
            tdist.broadcast(x, 0)
        elif op == "all_gather":
            tdist.all_gather_into_tensor(out[:small.numel() * world], small)
        else:
            tdist.reduce_scatter_tensor(small, x[:small.numel() * world])
    return Contender("gloo", make, call)


# Complexity: the job's set-up in order (MPI, tg's groups, gloo), then the timing loop.
def child(args: argparse.Namespace) -> None:  # noqa: C901
    """One rank: every contender, every op and size, ROUNDS interleaved windows each; rank 0 prints the
    medians as one JSON line."""
    transports = [t for t in args.transports.split(",") if t]
    if "ucx" in transports:     # ucxx's UCX must load before mpi4py's (see tg.distributed.transport.ucx)
        from tg.distributed.transport.ucx import load_ucxx
        load_ucxx()
    comm = mpi = None
    if args.mpi:
        from mpi4py import MPI as mpi
        comm = mpi.COMM_WORLD
        rank, world = comm.rank, comm.size
        ports = comm.bcast([free_port(), free_port()] if rank == 0 else None)
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        ports = [int(p) for p in os.environ["BENCH_PORTS"].split(",")]
    os.environ.update({"TG_SECRET": "bench", "LOCAL_RANK": str(rank)})
    import tg.distributed as dist
    os.environ["TG_SHM"] = TRANSPORTS["shm"]
    dist.init_process_group(backend="tcp", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank,
                            world_size=world)
    contenders = []
    for name in transports:
        if name == "ucx":
            group = dist.new_group(backend="ucx")
        else:
            os.environ["TG_SHM"] = TRANSPORTS[name]
            group = dist.new_group()
        contenders.append(_tg_contender(f"tg {name}", group))
        if args.device and name == "shm":
            contenders.append(_tg_contender(f"shm {args.device}", group, args.device))
    if comm is not None:
        contenders.append(_mpi_contender(comm, mpi))
    if args.gloo:
        import torch
        import torch.distributed as tdist
        torch.set_num_threads(1)
        tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[1]}", rank=rank,
                                 world_size=world)
        contenders.append(_gloo_contender(tdist, torch, world))
    rows = []
    for op in args.ops.split(","):
        for nbytes in [int(s) for s in args.sizes.split(",")]:
            n = max(nbytes // 4, 1)
            n = max(n // world, 1) * world
            k = iters_for(n * 4, args.quick)
            bufs = {c.name: c.make(n) for c in contenders}
            times: dict[str, list[float]] = {c.name: [] for c in contenders}
            for _ in range(args.rounds):
                for c in contenders:
                    for _ in range(2):
                        c.call(op, bufs[c.name])
                    dist.barrier()
                    t = time.perf_counter()
                    for _ in range(k):
                        c.call(op, bufs[c.name])
                    dist.barrier()
                    times[c.name].append((time.perf_counter() - t) / k)
            rows.append({"op": op, "bytes": n * 4, **{c: statistics.median(ts) for c, ts in times.items()}})
    if args.gloo:
        import torch.distributed as tdist
        tdist.destroy_process_group()
    dist.destroy_process_group()
    if rank == 0:
        print("ROWS " + json.dumps(rows), flush=True)


# ---------------------------------------------------------------------------- the job

def mpiexec(world: int) -> list[str] | None:
    if importlib.util.find_spec("mpi4py") is None:
        return None
    from tg.launch.agent import mpiexec_command, remove_dead_mpi_sessions
    remove_dead_mpi_sessions()
    return mpiexec_command(world)


def run_world(world: int, args: argparse.Namespace, transports: list[str], gloo: bool) -> list[dict]:
    """One job of `world` ranks (under mpiexec when there is one); rank 0's rows."""
    launcher = mpiexec(world)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--ops", args.ops, "--sizes",
           ",".join(map(str, args.size_list)), "--transports", ",".join(transports)]
    cmd += ["--gloo"] if gloo else []
    cmd += ["--quick"] if args.quick else []
    cmd += ["--rounds", str(args.rounds)]
    cmd += ["--device", args.device] if args.device else []
    if launcher is not None:
        procs = [subprocess.Popen([*launcher, *cmd, "--mpi"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)]
    else:
        ports = f"{free_port()},{free_port()}"
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(world),
                                       "BENCH_PORTS": ports}) for r in range(world)]
    outs = [p.communicate(timeout=7200) for p in procs]
    for out, _ in outs:
        for line in out.splitlines():
            if line.startswith("ROWS "):
                return json.loads(line[5:])
    raise RuntimeError(f"the world={world} job failed:\n" + "\n".join(o[-3000:] + e[-3000:] for o, e in outs))


def copy_bw() -> float:
    a, b = np.ones(32 << 18, np.float32), np.empty(32 << 18, np.float32)
    best = min(
        (lambda t0: (np.copyto(b, a), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(20)
    )
    return a.nbytes / best / 1e9


def socket_bw() -> float:
    """One loopback TCP stream, 256 MiB, large buffers: the most one socket moves here."""
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


EXCHANGE_C = r"""
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
/* one end of a connection sends n bytes from out and receives n bytes into in, both at once */
int exchange(int fd, const char *out, char *in, long n) {
    long sent = 0, got = 0;
    while (sent < n || got < n) {
        struct pollfd p = {fd, (short)((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
        if (poll(&p, 1, 10000) <= 0) return -1;
        if (p.revents & POLLIN) {
            ssize_t k = recv(fd, in + got, n - got < (1 << 20) ? n - got : (1 << 20), MSG_DONTWAIT);
            if (k == 0) return -1;
            if (k > 0) got += k;
        }
        if (p.revents & POLLOUT) {
            ssize_t k = send(fd, out + sent, n - sent < (1 << 20) ? n - sent : (1 << 20), MSG_DONTWAIT);
            if (k > 0) sent += k;
        }
        if (p.revents & (POLLERR | POLLHUP)) return -1;
    }
    return 0;
}
"""


def exchange_bw(nbytes: int = 32 << 20, tries: int = 5) -> float:
    """Both ends of one loopback TCP connection each sending and receiving nbytes at once, one C poll loop
    per end on its own thread (ctypes lets go of the GIL): GB/s each way, best of `tries`."""
    import ctypes

    from tg.core.compiler import CCompiler
    cc = CCompiler(["-shared", "-fPIC", "-O2", "-x", "c", "-"], "the loopback exchange")
    lib = ctypes.CDLL(str(cc.compile(EXCHANGE_C)))
    lib.exchange.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    srv = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(srv.getsockname())
    b, _ = srv.accept()
    srv.close()
    bufs = [np.ones(nbytes, np.uint8) for _ in range(4)]
    best, codes = float("inf"), []
    for _ in range(tries):
        ends = [threading.Thread(target=lambda s, o, i: codes.append(lib.exchange(s.fileno(), o.ctypes.data,
                                                                                  i.ctypes.data, nbytes)),
                                 args=(s, bufs[k], bufs[k + 2])) for k, s in enumerate((a, b))]
        t = time.perf_counter()
        for th in ends:
            th.start()
        for th in ends:
            th.join()
        best = min(best, time.perf_counter() - t)
    a.close()
    b.close()
    if any(codes):
        raise RuntimeError("the loopback exchange failed")
    return nbytes / best / 1e9


def fmt_size(n: int) -> str:
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n // f} {unit}"
    return f"{n} B"


def print_tables(rows: list[dict], ops: list[str], world: int, names: list[str], rounds: int) -> None:
    tg_names = [n for n in names if n not in REFERENCES]
    refs = [r for r in REFERENCES if r in names]
    for op in ops:
        print(f"\n{op}  world={world}   (median of {rounds} interleaved rounds; time in us, busbw in GB/s; "
              f"x/ref: bandwidth ratio, above 1 tg is faster)")
        head = f"{'size':>9}" + "".join(f" | {n:>10} {'busbw':>6}" for n in names)
        head += "".join(f" | {n.split()[-1] + '/' + r:>10}" for r in refs for n in tg_names)
        print(head)
        for row in (r for r in rows if r["op"] == op):
            line = f"{fmt_size(row['bytes']):>9}"
            for n in names:
                t = row[n]
                line += f" | {t * 1e6:10.1f} {row['bytes'] / t / 1e9 * BUSBW[op](world):6.2f}"
            line += "".join(f" | {row[r] / row[n]:10.2f}" for r in refs for n in tg_names)
            print(line)


def mpi_overhead(world: int, args: argparse.Namespace) -> None:
    """tg's mpi backend against raw mpi4py on the same communicator, alternating (the mpi/raw ratio)."""
    launcher = mpiexec(world)
    if launcher is None:
        print("(no mpiexec / mpi4py: no mpi overhead table)")
        return
    cmd = [*launcher, sys.executable, os.path.abspath(__file__), "--mpi-overhead-child", "--ops", args.ops,
           "--sizes", ",".join(map(str, args.size_list))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    rows = next((json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("ROWS ")), None)
    if rows is None:
        raise RuntimeError(f"the mpi job failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    print(f"\ntg's mpi backend over raw mpi4py, world={world} (time in us; mpi/raw: time ratio)")
    for row in rows:
        print(f"{row['op']:>14} {fmt_size(row['bytes']):>9} | tg mpi {row['tg'] * 1e6:10.1f} | mpi4py "
              f"{row['raw'] * 1e6:10.1f} | {row['tg'] / row['raw']:5.2f}")


def mpi_overhead_child(args: argparse.Namespace) -> None:
    import tg.distributed as dist
    dist.init_process_group(backend="mpi")
    from mpi4py import MPI
    comm, world = MPI.COMM_WORLD, dist.get_world_size()
    tg, raw = _tg_contender("tg", None), _mpi_contender(comm, MPI)
    rows = []
    for op in args.ops.split(","):
        for nbytes in [int(s) for s in args.sizes.split(",")]:
            n = max(max(nbytes // 4, 1) // world, 1) * world
            k = iters_for(n * 4, False)
            best = {}
            for c in (tg, raw):
                bufs = c.make(n)
                for _ in range(2):
                    c.call(op, bufs)
                comm.Barrier()
                t = time.perf_counter()
                for _ in range(k):
                    c.call(op, bufs)
                comm.Barrier()
                best[c.name] = (time.perf_counter() - t) / k
            rows.append({"op": op, "bytes": n * 4, "tg": best["tg"], "raw": best["mpi"]})
    dist.destroy_process_group()
    if comm.rank == 0:
        print("ROWS " + json.dumps(rows), flush=True)


def available(transport: str) -> str | None:
    """None when the transport can run here, else why not."""
    if transport == "ucx" and importlib.util.find_spec("ucxx") is None:
        return "ucxx is not installed (pip install -e '.[ucx]')"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="all_reduce", help="comma list, or 'all'")
    ap.add_argument("--worlds", default="2,3,4")
    ap.add_argument("--transports", default="shm,tcp,rings,ucx")
    ap.add_argument("--vs", default="mpi,gloo", help="references: mpi, gloo (comma list; '' for none)")
    ap.add_argument("--top", default="32M", help="largest size (e.g. 128M)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and iterations (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; a cell is their median")
    ap.add_argument("--device", default="", help="also time tg Tensors on this device kind (CL, CUDA) over "
                                                 "the shm group, each rank on its own device (staged)")
    ap.add_argument("--mpi-overhead", action="store_true", help="also time tg's mpi backend against mpi4py")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi-overhead-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gloo", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.ops = ",".join(BUSBW) if args.ops == "all" else args.ops
    args.size_list = [int(v) for v in args.sizes.split(",")] if args.sizes else sizes(args.quick,
                                                                                   parse_size(args.top))
    if args.child:
        child(args)
        return
    if args.mpi_overhead_child:
        mpi_overhead_child(args)
        return
    print(f"tg bench_collectives  cores={os.cpu_count()}  limits: np.copyto {copy_bw():.2f} GB/s, "
          f"loopback socket {socket_bw():.2f} GB/s one way, {exchange_bw():.2f} GB/s each way at once")
    transports = []
    for t in args.transports.split(","):
        why = available(t)
        if why:
            print(f"(no {t} column: {why})")
        else:
            transports.append(t)
    refs = args.vs.split(",")
    gloo = "gloo" in refs and importlib.util.find_spec("torch") is not None
    if "gloo" in refs and not gloo:
        print("(no gloo column: torch is not installed)")
    for world in map(int, args.worlds.split(",")):
        if "mpi" in refs and mpiexec(world) is None:
            print("(no mpi column: mpiexec and mpi4py are needed: pip install -e '.[mpi]')")
        rows = run_world(world, args, transports, gloo)
        names = [k for k in rows[0] if k not in ("op", "bytes")]
        ours = [n for n in names if n not in REFERENCES]
        names = ours + [r for r in REFERENCES if r in names and r in refs]
        print_tables(rows, args.ops.split(","), world, names, args.rounds)
        if args.mpi_overhead:
            mpi_overhead(world, args)


if __name__ == "__main__":
    main()
