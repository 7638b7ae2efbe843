"""Every environment knob tg reads, declared once with its type, default and meaning.

Library code reads knobs only through this module (``from tg import config; config.DEBUG``);
a test asserts that no other file calls ``os.getenv`` or reads ``os.environ``.

    >>> from tg import config
    >>> config.DEBUG >= 0
    True
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Knob:
    name: str
    type: Callable[[str], Any]
    default: Any
    doc: str

    def read(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        try:
            return self.type(raw)
        except ValueError as e:
            kind = self.type.__name__
            article = "an" if kind[0] in "aeiou" else "a"
            raise ValueError(f"[config] {self.name}={raw!r} is not a valid {kind}: {e}. "
                             f"Unset it or give {article} {kind}.") from None


def _device_name(raw: str) -> str:
    return raw.upper()


LONGEST_WAIT = 30 * 24 * 3600.0    # seconds: what an unbounded timeout (inf) waits, which every wait can take


def duration(raw: str | float) -> float:
    """A timeout in seconds: a positive number, or inf for no limit in practice (LONGEST_WAIT, 30 days:
    sockets, the store's millisecond fields and thread waits all take that, not an infinity).

        >>> duration("inf") == LONGEST_WAIT, duration(2)
        (True, 2.0)
    """
    value = float(raw)
    if not value > 0:      # NaN too
        raise ValueError(f"a timeout must be a positive number of seconds (or inf), got {raw!r}")
    return min(value, LONGEST_WAIT)


def _cache_default() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tg")


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in [
        Knob(
            "DEBUG",
            int,
            0,
            "0 quiet; 1 kernel count and time per realize; 2 each kernel's name, shape, "
            "time, GFLOPS, GB/s; 3 the schedule; 4 the generated source",
        ),
        Knob(
            "TG_DEVICE",
            _device_name,
            "",
            "default device: CPU | CL | CUDA | NUMPY | NULL, or one of several "
            "(CL:1); empty picks CUDA when a GPU is usable, else CPU. Without an "
            "index, a rank takes device LOCAL_RANK mod count of the kind",
        ),
        Knob(
            "TG_CL_SPLIT",
            int,
            0,
            "N >= 2 splits each CPU OpenCL device into N sub-devices (CL:0..CL:N-1, equal "
            "shares of the cores), so ranks on one CPU take a CL device each",
        ),
        Knob("TG_CUDA_ARCH", str, "", "target NVRTC compiles for (sm_90, ...); empty: the GPU present"),
        Knob("TG_CACHE_DIR", str, _cache_default(), "folder for compiled kernels, keyed by source hash"),
        Knob("TG_DISABLE_CACHE", int, 0, "1 compiles every kernel afresh and never touches the disk cache"),
        Knob("TG_LOWER_CACHE", int, 1,
             "0 lowers every kernel afresh; 1 keeps lowered kernels (source, launch facts) in TG_CACHE_DIR"),
        Knob("TG_CC", str, "cc", "C compiler the CPU device calls"),
        Knob("TG_CPU_THREADS", int, 0, "threads a CPU kernel may use (OpenMP); 0 means one per core"),
        Knob("TG_CPU_DISABLE", str, "",
             "CPU features kernels must not use, as /proc/cpuinfo names them, comma-separated "
             "(amx_bf16,avx512_bf16): the fallback paths on a machine that has them"),
        Knob("TG_NOOPT", int, 0,
             "1 turns off the loop optimisations (upcast, vector lanes, unroll, GEMM blocking)"),
        Knob(
            "TG_BEAM",
            float,
            2.0,
            "seconds a process may spend timing how its large contractions (matmuls, convs) run on the CPU, "
            "once per kernel and machine (the winners are kept in TG_CACHE_DIR/search); 0: rules of thumb",
        ),
        Knob("TG_BEAM_MIN_MACS", int, 1 << 31,
             "multiply-adds from which a contraction's nest and block sizes are searched (below: rules)"),
        Knob(
            "TG_OPTIM_CAPTURE",
            int,
            1,
            "1: optimizer.step() of tg's optimizers replays its captured update from the third step of "
            "an unchanged configuration; 0 builds the update every step",
        ),
        Knob(
            "TG_SCHEDULE_CACHE",
            int,
            512,
            "schedules kept for reuse by graph structure (a repeated training step skips scheduling "
            "and lowering); 0 turns the cache off",
        ),
        Knob(
            "TG_PROGRAM_CACHE",
            int,
            4096,
            "compiled kernels each device keeps loaded for reuse, least recently built or used let go "
            "first (a CPU kernel library maps memory, and Linux caps a process's mappings at 65530)",
        ),
        Knob("TG_NULL_DIALECT", str, "opencl", "dialect the NULL device renders: c | opencl | cuda"),
        # --- distributed: torchrun's contract, plus what mpirun and Slurm set
        Knob("RANK", int, -1, "this process's global rank (torchrun contract); -1 when unset"),
        Knob("WORLD_SIZE", int, -1, "number of ranks in the job; -1 when unset"),
        Knob("LOCAL_RANK", int, -1, "rank among the processes on this host; -1 when unset"),
        Knob("MASTER_ADDR", str, "", "host of the rendezvous store (rank 0 or the launcher)"),
        Knob("MASTER_PORT", int, 0, "port of the rendezvous store"),
        Knob("OMPI_COMM_WORLD_RANK", int, -1, "rank, as Open MPI's mpirun sets it"),
        Knob("OMPI_COMM_WORLD_SIZE", int, -1, "world size, as Open MPI's mpirun sets it"),
        Knob("OMPI_COMM_WORLD_LOCAL_RANK", int, -1, "local rank, as Open MPI's mpirun sets it"),
        Knob("PMI_RANK", int, -1, "rank, as MPICH's mpiexec sets it"),
        Knob("PMI_SIZE", int, -1, "world size, as MPICH's mpiexec sets it"),
        Knob("MPI_LOCALRANKID", int, -1, "local rank, as MPICH's mpiexec sets it"),
        Knob("SLURM_PROCID", int, -1, "rank, as Slurm's srun sets it"),
        Knob("SLURM_NTASKS", int, -1, "world size, as Slurm's srun sets it"),
        Knob("SLURM_LOCALID", int, -1, "local rank, as Slurm's srun sets it"),
        Knob("SLURM_NODEID", int, -1, "this node's index in a Slurm allocation (tglaunch's node rank)"),
        Knob("LOCAL_WORLD_SIZE", int, -1, "ranks on this node (set by tglaunch)"),
        Knob("NODE_RANK", int, -1, "this node's rank in the job (set by tglaunch; GROUP_RANK is the same)"),
        Knob("TG_RESTART_COUNT", int, 0, "how many times tglaunch restarted the job's workers before this "
             "start, for a failure or a change of nodes (0 first): above 0, resume from a checkpoint"),
        Knob("TG_FAILURE_RESTARTS", int, 0, "of those restarts, how many a failure caused: the part of "
             "TG_MAX_RESTARTS used (set by tglaunch on a job of several nodes)"),
        Knob("TG_MEMBERSHIP_CHANGES", int, 0, "of those restarts, how many a node lost or joined caused (set "
             "by tglaunch on a job of several nodes)"),
        Knob("TG_ELASTIC_TIMEOUT", duration, 10.0, "seconds a tglaunch agent's heartbeat may stand still, or "
             "the store take to answer it, before the others count that node lost (a stopped node)"),
        Knob("TG_MAX_RESTARTS", int, 0, "restarts tglaunch allows the job"),
        Knob("TG_RUN_ID", str, "", "the job's id in the store and in logs (set by tglaunch)"),
        Knob(
            "TG_LAUNCHER_PID",
            int,
            0,
            "pid of the tglaunch agent; when it dies, even by SIGKILL, the worker's "
            "watchdog kills the worker's whole process group (set by tglaunch)",
        ),
        Knob("TG_ERROR_FILE", str, "", "where a worker records an uncaught exception for tglaunch's summary"),
        Knob(
            "TG_PREFIX_OUTPUT",
            int,
            0,
            "1 makes a worker prefix its own output lines with [rankN]: (under mpiexec)",
        ),
        Knob(
            "TG_STORE_PREFIX",
            str,
            "",
            "prefix of every store key the process group uses (one per tglaunch attempt)",
        ),
        Knob(
            "TG_SECRET",
            str,
            "",
            "per-job secret every store and transport connection proves (set by tglaunch); "
            "empty: random, shared through a file only this user can read (one host "
            "only; a multi-host job needs it set)",
        ),
        Knob(
            "TG_BACKEND",
            str,
            "",
            "distributed backend: tcp | mpi | ucx; empty: mpi when started by mpiexec, "
            "else tcp (shared memory between ranks on one host)",
        ),
        Knob(
            "TG_DIST_TIMEOUT",
            duration,
            300.0,
            "seconds any store call, init or collective may block before raising; inf: 30 days",
        ),
        Knob(
            "TG_MPI_MAX_COUNT",
            int,
            (1 << 31) - 1,
            "most elements one MPI call is given per buffer (MPI counts are C ints); the mpi backend "
            "moves a larger transfer in parts",
        ),
        Knob(
            "TG_DIST_HOST",
            str,
            "",
            "address this rank's transport listens on; empty: 127.0.0.1 when the "
            "master is local, else this host's name",
        ),
        Knob("TG_STORE_EXTERNAL", int, 0, "1 when the launcher hosts the store (rank 0 then only connects)"),
        Knob(
            "TG_STORE_MAX_UNPROVEN",
            int,
            64,
            "connections the rendezvous store (and a tcp transport's set-up listener) holds before they "
            "prove the job secret; a new one beyond that closes the oldest (a local flood cannot use up "
            "their file descriptors)",
        ),
        Knob(
            "TG_STORE_MAX_VALUE",
            int,
            4 << 20,
            "largest value (bytes) the rendezvous store accepts; a larger request gets an error reply",
        ),
        Knob(
            "TG_SHM",
            int,
            1,
            "1: a group on one host runs its collectives in shared memory (the engine), a group "
            "across hosts moves large payloads between ranks of one host through slot rings; "
            "2: slot rings only; 0: everything on TCP",
        ),
        Knob("TG_FLIGHT_RECORDER", int, 512,
             "collectives each rank's flight recorder keeps (the newest; 0 turns it off): what tglaunch "
             "prints when a job fails, and tg.distributed.flight_recorder()"),
        Knob("TG_FLIGHT_DIR", str, "",
             "folder of the ranks' flight recorder files (set by tglaunch); empty: kept in memory"),
        Knob("TG_PROFILE", str, "",
             "folder: profile the whole process and write trace.rank<RANK>.json there at exit "
             "(tglaunch --profile sets it and merges the ranks' traces into trace.json)"),
        Knob("TG_PROFILE_EVENTS", int, 1 << 20,
             "events a TG_PROFILE profile keeps, the newest (about 0.3 KiB each; a kernel launch is one, its "
             "output's allocation and free two more)"),
        Knob("TG_FSDP_PREFETCH", int, 1,
             "1: FSDP gathers the next unit while one computes (forward and backward); 0: each unit's "
             "gather starts when it is needed (to measure what the overlap saves)"),
    ]
}


def is_set(name: str) -> bool:
    """True when the environment gives knob `name` a value (an empty one counts as unset), so a caller
    can tell "not given" from "given the default's value" (RANK=-1 is a mistake, not "no launcher")."""
    assert name in KNOBS, name
    return os.environ.get(name, "") != ""


def local_rank() -> int:
    """This process's rank among the job's processes on this host, from whichever launcher started
    it (tglaunch/torchrun, Open MPI, MPICH, Slurm); -1 when none did."""
    for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        value = KNOBS[name].read()
        if value >= 0:
            return value
    return -1


def export_default(name: str, value: str) -> None:
    """Give a third-party library's own environment variable a default, before it is imported; a value
    the user set wins."""
    os.environ.setdefault(name, value)


def environment() -> dict[str, str]:
    """A copy of this process's environment, to start child processes with."""
    return dict(os.environ)


def mpi_session_base(env: Mapping[str, str] | None = None) -> str:
    """Where an Open MPI 5 launcher started with env (this process's environment when None) keeps its
    session folders: PRTE_MCA_prte_tmpdir_base when set, else the first of TMPDIR, TEMP, TMP that is
    set, else /tmp (Open MPI's own order)."""
    env = os.environ if env is None else env
    names = ("PRTE_MCA_prte_tmpdir_base", "TMPDIR", "TEMP", "TMP")
    return next((v for v in (env.get(n) for n in names) if v), "/tmp")


def export(name: str, value: str) -> None:
    """Set a variable in this process's environment (for code that reads it later, or for children)."""
    os.environ[name] = value


def __getattr__(name: str) -> Any:
    # Read lazily so tests and subprocesses that set the environment see the new value.
    if name in KNOBS:
        return KNOBS[name].read()
    raise AttributeError(f"[config] no knob named {name!r}; known: {', '.join(sorted(KNOBS))}")
