"""torch.multiprocessing: Python's multiprocessing (its names re-exported) and `spawn(fn, args, nprocs)`,
which runs `fn(i, *args)` in `nprocs` fresh processes, as the DDP tutorial's scripts start their ranks.
tg's tensors are not shared between processes through it (tg has no shared-memory tensors): each process
makes its own, and ranks talk through tg.distributed. `fn` and `args` reach the children as Python's
multiprocessing sends them (pickled, as in torch); nothing tg writes or sends is.

When a process raises, the others are stopped and spawn raises ProcessRaisedException with that
process's traceback (as text, read from a file it wrote); when one dies without raising (a signal, an
os._exit), ProcessExitedException with its exit code. tglaunch is tg's own way to start ranks (the
environment, restarts, several nodes); spawn is for scripts written for torch's.
"""
from __future__ import annotations

import multiprocessing.connection
import os
import signal
import sys
import tempfile
import traceback
from multiprocessing import (  # noqa: F401  (torch.multiprocessing re-exports multiprocessing)
    Array,
    Barrier,
    Condition,
    Event,
    Lock,
    Manager,
    Pipe,
    Pool,
    Process,
    Queue,
    RLock,
    Semaphore,
    SimpleQueue,
    Value,
    active_children,
    cpu_count,
    current_process,
    get_all_start_methods,
    get_context,
    get_start_method,
    set_start_method,
)
from typing import Any, Callable


class ProcessException(Exception):
    """A spawned process failed: `error_index` is its index i, `pid` its process id."""

    def __init__(self, msg: str, error_index: int, pid: int | None):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process ended with a nonzero exit code, or by a signal (`signal_name`), without raising."""

    def __init__(self, msg: str, error_index: int, pid: int | None, exit_code: int,
                 signal_name: str | None = None):
        super().__init__(msg, error_index, pid)
        self.exit_code, self.signal_name = exit_code, signal_name


def _run(fn: Callable[..., Any], i: int, args: tuple, error_file: str) -> None:
    """A child's body: fn(i, *args); an exception is written to error_file as text and ends the process
    with 1."""
    try:
        fn(i, *args)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole group: the parent reports it, not each child
        return
    except Exception:          # as torch: sys.exit(code) ends the process with its code, no traceback
        with open(error_file, "w") as f:
            f.write(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes spawn started (returned by spawn(..., join=False)); join() waits for them."""

    def __init__(self, processes: list[Any], error_files: list[str]):
        self.processes, self.error_files = processes, error_files

    def pids(self) -> list[int | None]:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` seconds (None: until one ends) for the processes; True once all have
        ended well, False while some still run. A failed one stops the others and raises."""
        alive = [p for p in self.processes if p.exitcode is None]
        if alive:
            multiprocessing.connection.wait([p.sentinel for p in alive], timeout)
        # each exit code read once: a process reaped between two reads must not be passed over as alive
        # by the first and counted as ended well by the second
        codes = [p.exitcode for p in self.processes]
        for i, (p, code) in enumerate(zip(self.processes, codes)):
            if code is not None and code != 0:
                self._stop_all()
                raise self._failure(i, p)
        if any(code is None for code in codes):
            return False
        for name in self.error_files:
            if os.path.exists(name):
                os.unlink(name)
        return True

    def _stop_all(self) -> None:
        for p in self.processes:
            if p.exitcode is None:
                p.terminate()
        for p in self.processes:
            p.join(10)
            if p.exitcode is None:
                p.kill()
                p.join()

    def _failure(self, i: int, p: Any) -> ProcessException:
        error_file = self.error_files[i]
        if os.path.exists(error_file) and os.path.getsize(error_file):
            with open(error_file) as f:
                text = f.read()
            return ProcessRaisedException(f"\n\n-- Process {i} terminated with the following error:\n{text}",
                                          i, p.pid)
        if p.exitcode < 0:
            name = signal.Signals(-p.exitcode).name
            return ProcessExitedException(f"process {i} terminated with signal {name}", i, p.pid, p.exitcode,
                                          name)
        return ProcessExitedException(f"process {i} terminated with exit code {p.exitcode}", i, p.pid,
                                      p.exitcode)


def start_processes(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, join: bool = True,
                    daemon: bool = False, start_method: str = "spawn") -> ProcessContext | None:
    """Start `nprocs` processes running fn(i, *args) by `start_method`; join them (raising for a failed
    one) or, with join=False, return their ProcessContext."""
    if not isinstance(nprocs, int) or isinstance(nprocs, bool) or nprocs < 1:
        raise ValueError(f"[multiprocessing] spawn: expected nprocs an int >= 1, got {nprocs!r}")
    ctx: Any = get_context(start_method)
    error_files, processes = [], []
    for i in range(nprocs):
        fd, name = tempfile.mkstemp(prefix=f"tg-spawn-{i}-", suffix=".txt")
        os.close(fd)
        os.unlink(name)               # the child creates it only when it raises
        error_files.append(name)
        p = ctx.Process(target=_run, args=(fn, i, tuple(args), name), daemon=daemon)
        p.start()
        processes.append(p)
    context = ProcessContext(processes, error_files)
    if not join:
        return context
    while not context.join():     # each call waits until some process ends
        continue
    return None


def spawn(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str = "spawn") -> ProcessContext | None:
    """torch.multiprocessing.spawn: fn(i, *args) for i in range(nprocs), each in a fresh process."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)


__all__ = ["spawn", "start_processes", "ProcessContext", "ProcessException", "ProcessRaisedException",
           "ProcessExitedException", "Array", "Barrier", "Condition", "Event", "Lock", "Manager", "Pipe",
           "Pool", "Process", "Queue", "RLock", "Semaphore", "SimpleQueue", "Value", "active_children",
           "cpu_count", "current_process", "get_all_start_methods", "get_context", "get_start_method",
           "set_start_method"]
