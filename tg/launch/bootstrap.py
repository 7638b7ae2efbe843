"""The first code a tglaunch worker runs (started by path, importing only tg.config): it fills in
torchrun's variables when mpiexec started the process, prefixes output lines when nobody else does,
records an uncaught exception in the worker's error file (what the launcher's failure summary
shows, like torch's @record), then runs the user's script or module as `__main__`.

    python bootstrap.py script.py ARGS...      python bootstrap.py -m package.module ARGS...
"""
import json
import os
import runpy
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
