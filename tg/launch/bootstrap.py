"""The first code a tglaunch worker runs (started by path, importing only tg.config): it fills in
torchrun's variables when mpiexec started the process, starts the watchdog that takes the worker's
process group down with the launcher, prefixes output lines when nobody else does, records an
uncaught exception in the worker's error file (what the launcher's failure summary shows, like
torch's @record), then runs the user's script or module as `__main__`.

    python bootstrap.py script.py ARGS...      python bootstrap.py -m package.module ARGS...
"""
import json
import os
import runpy
import select
import signal
import socket
import sys
import time
import traceback

from tg import config


def _from_mpi() -> None:
    """Under `tglaunch --backend mpi` the ranks come from mpiexec: translate its variables."""
    env = config.environment()
    for rank, size, local, local_size in (
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE"),
            ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")):
        if rank in env:
            config.export("RANK", env[rank])
            config.export("WORLD_SIZE", env[size])
            config.export("LOCAL_RANK", env.get(local, env[rank]))
            config.export("LOCAL_WORLD_SIZE", env.get(local_size, env[size]))
            return


def _watch_launcher() -> None:
    """Fork a watchdog that SIGKILLs this worker's whole process group (the worker, what it started,
    and the watchdog itself) when the launcher dies, even by SIGKILL: PR_SET_PDEATHSIG reaches only
    the launcher's own children, which are neither the processes a worker starts nor the ranks
    mpiexec starts. When the worker ends first, the watchdog takes what it left behind, as the
    launcher does for its own workers. Without pidfds (Linux < 5.3) only PR_SET_PDEATHSIG is left."""
    launcher = config.TG_LAUNCHER_PID
    if launcher <= 0:
        return
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)          # lead a group of our own (tglaunch's and Open MPI's workers already do)
    try:
        watched = [os.pidfd_open(launcher), os.pidfd_open(os.getpid())]
    except ProcessLookupError:
        os._exit(128 + signal.SIGKILL)      # the launcher is gone already: so is this job
    except (OSError, AttributeError):
        return
    middle = os.fork()
    if middle == 0:
        try:
            if os.fork() == 0:    # a grandchild: the worker never waits for it, nor reaps it by surprise
                _watchdog(watched)
        finally:
            os._exit(0)
    for fd in watched:
        os.close(fd)
    os.waitpid(middle, 0)


def _watchdog(watched: list[int]) -> None:
    """Let go of the worker's files (its output pipes must end when it does), then wait for the
    launcher or the worker to end (a pidfd turns readable when its process exits) and kill the group."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    low = 3
    for fd in sorted(watched):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    select.select(watched, [], [])
    os.killpg(0, signal.SIGKILL)


class _Prefixed:
    """A text stream that starts every line with `[rankN]:` (mpiexec merges the ranks' output)."""

    def __init__(self, stream, prefix: str) -> None:
        self.stream, self.prefix, self.at_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self.at_start:
                out.append(self.prefix)
            out.append(piece)
            self.at_start = piece.endswith("\n")
        self.stream.write("".join(out))
        self.stream.flush()
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _record(kind, value, tb) -> None:
    """sys.excepthook: print as Python does (without the bootstrap's own frames), and leave the
    launcher a small error file."""
    while tb is not None and tb.tb_next is not None and (
            tb.tb_frame.f_code.co_filename == __file__ or "runpy" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    sys.__excepthook__(kind, value.with_traceback(tb), tb)
    path = config.TG_ERROR_FILE
    if not path:
        return
    rank = max(config.RANK, 0)
    path = path.replace("{rank}", str(rank))
    lines = traceback.format_exception(kind, value, tb)
    record = {"rank": rank, "host": socket.gethostname(), "time": time.time(),
              "error": f"{kind.__name__}: {value}", "traceback": "".join(lines)[-4000:]}
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def main() -> None:
    if config.TG_BACKEND == "mpi" and config.RANK < 0:
        _from_mpi()
    _watch_launcher()
    if config.TG_PREFIX_OUTPUT:
        prefix = f"[rank{config.RANK}]: "
        sys.stdout, sys.stderr = _Prefixed(sys.stdout, prefix), _Prefixed(sys.stderr, prefix)
    sys.excepthook = _record
    args = sys.argv[1:]
    if args and args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        script = args[0]
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
