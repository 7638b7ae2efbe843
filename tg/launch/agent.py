"""The per-node agent behind tglaunch: starts this node's workers, relays their output line by line,
stops them all when one fails (or when told to), restarts the job, and on several nodes keeps the
agents in step through the rendezvous store hosted by node 0's agent."""
from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from tg import config
from tg.launch.job import Failure, Launch, LaunchError, blame, check_port, free_port, is_echo
from tg.launch.rendezvous import JobFinished, Rendezvous, Round

BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")
POLL = 0.02          # seconds between checks of the workers while no output arrives
PR_SET_PDEATHSIG = 1


def _die_with_launcher() -> None:
    """Runs in the child between fork and exec: the kernel SIGKILLs it if the launcher dies."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)



# How long an agent whose best failure is an echo (a DistributedError) waits for the cause: a rank of
# its own still on its way out, or another node's record (that node notices its rank's exit within a poll).
ECHO_WAIT = 3.0


class _Worker:
    def __init__(self, rank: int, proc: subprocess.Popen, logs: dict[str, IO[bytes]]):
        self.rank, self.proc, self.logs = rank, proc, logs
        self.partial = {"stdout": b"", "stderr": b""}


class Agent:
    def __init__(self, launch: Launch):
        self.launch, self.spec = launch, launch.spec
        self.node = launch.node_rank or 0
        self.stop_signal = 0
        self.rdzv: Rendezvous | None = None
        self.base_rank, self.world = 0, self.spec.nproc_per_node
        self.host = socket.gethostname()

    # ------------------------------------------------------------------ the job
    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.spec.nnodes > 1:
                self.rdzv = Rendezvous(self.spec, self.launch.secret, self.host, self.launch.node_rank,
                                       stop_asked=lambda: bool(self.stop_signal))
                return self._rounds()
            for attempt in range(self.spec.max_restarts + 1):
                failure = self._attempt(attempt)
                if self.stop_signal or failure is None:
                    return self._stopped() if self.stop_signal else 0
                self._report(failure)
                if attempt < self.spec.max_restarts:
                    print(f"[tglaunch] restarting the whole job (restart {attempt + 1} of "
                          f"{self.spec.max_restarts})", file=sys.stderr)
                    continue
                return failure.exit_code
            return 1
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if self.rdzv is not None:
                self.rdzv.leave()

    def _rounds(self) -> int:
        """A job of several nodes: a rendezvous round, the workers, and again while the job goes on (the
        rounds are in tg.launch.rendezvous). A signal while it waits for the store is a stop, as ever."""
        try:
            return self._each_round()
        except JobFinished as e:
            print(f"[tglaunch] {e}", file=sys.stderr)
            return 0
        except KeyboardInterrupt:
            if self.stop_signal:
                return self._stopped()
            raise

    def _each_round(self) -> int:
        assert self.rdzv is not None
        last_failure: Failure | None = None
        while True:
            rnd = self.rdzv.join()
            if rnd.give_up:
                return self._ended(rnd, last_failure)
            self.node, self.base_rank, self.world = rnd.node, rnd.base_rank, rnd.world
            addr, port = self.rdzv.store_address
            why = f"{rnd.why}; " if rnd.number else ""
            print(f"[tglaunch] round {rnd.number}: {why}{len(rnd.members)} node(s), {rnd.world} ranks "
                  f"(restarts used {rnd.restarts} of {self.spec.max_restarts}, membership changes "
                  f"{rnd.changes}); this is node {rnd.node}; the store is at {addr}:{port}"
                  f"{' (here)' if self.rdzv.hosting else ''}", file=sys.stderr)
            outcome = self._attempt(rnd.number)
            if self.stop_signal:
                return self._stopped()
            if outcome is None and not self.rdzv.why:
                self.rdzv.finish()
                return 0
            if outcome is not None:
                self._report(outcome)
                last_failure = outcome
            self.rdzv.after_stop(outcome)

    def _ended(self, rnd: Round, last_failure: Failure | None) -> int:
        """The job cannot go on (a fixed-size job lost a node, or the restarts are used up): report why,
        and exit with the failure's code."""
        given = Failure(**rnd.give_up)
        ended = last_failure if given.rank < 0 and last_failure is not None else given
        if rnd.why == "failure":
            print(f"[tglaunch] the job used its {self.spec.max_restarts} restart(s); it ends",
                  file=sys.stderr)
        else:
            print(f"[tglaunch] the job cannot go on: {rnd.why}", file=sys.stderr)
        if given.rank < 0:
            print(f"[tglaunch]   {given.error}", file=sys.stderr)
        return ended.exit_code

    def _stopped(self) -> int:
        print(f"[tglaunch] stopped by {signal.Signals(self.stop_signal).name}; every worker is gone",
              file=sys.stderr)
        return 128 + self.stop_signal

    @staticmethod
    def _report(failure: Failure) -> None:
        print(failure.describe(), file=sys.stderr)
        for line in failure.flight:
            print(line, file=sys.stderr)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_signal = signum

    def _attempt(self, attempt: int) -> Failure | None:
        errors = tempfile.mkdtemp(prefix="tglaunch-")
        try:
            self._clear_traces()
            if self.spec.backend == "mpi":
                failure = self._attempt_mpi(attempt, errors)
            else:
                workers = self._start(attempt, self._worker_env(attempt, errors), errors)
                failure = self._supervise(workers, attempt, errors)
            if failure is not None and not self.stop_signal:
                failure.flight = self._flight_summary(errors)
            return failure
        finally:
            self._merge_traces()
            shutil.rmtree(errors, ignore_errors=True)

    def _flight_summary(self, errors: str) -> list[str]:
        """What the local ranks' flight recorders say (who is behind, in which collective); with
        --log-dir every record also goes to DIR/flight_recorder.json."""
        from tg.distributed import flight
        rings: dict[int, list[dict]] = {}
        for name in sorted(os.listdir(errors)):
            if name.endswith(".flight"):
                try:
                    rank, _, entries = flight.read_file(os.path.join(errors, name))
                except (OSError, ValueError) as e:
                    print(f"[tglaunch] flight recorder {name} unreadable: {e}", file=sys.stderr)
                    continue
                rings[rank] = entries
        if not rings:
            return []
        local = range(self.base_rank, self.base_rank + self.spec.nproc_per_node)
        if self.spec.log_dir:
            os.makedirs(self.spec.log_dir, exist_ok=True)
            from tg.nn.state import write_atomic
            write_atomic(os.path.join(self.spec.log_dir, "flight_recorder.json"),
                         json.dumps({str(r): e for r, e in rings.items()}, indent=1).encode())
        return [f"[tglaunch] flight recorder: {line}" for line in flight.summary(rings, expected=local)]

    def _trace_parts(self) -> list[str]:
        """This node's ranks' trace files in the --profile folder."""
        folder = self.spec.profile_dir or ""
        ranks = range(self.base_rank, self.base_rank + self.spec.nproc_per_node)
        names = [f"trace.rank{r}.json" for r in ranks]
        return [os.path.join(folder, n) for n in names if folder and os.path.exists(os.path.join(folder, n))]

    def _clear_traces(self) -> None:
        """An attempt's traces are its own: an earlier run's (or attempt's) are removed first."""
        for path in self._trace_parts():
            os.remove(path)

    def _merge_traces(self) -> None:
        """--profile: this node's ranks' traces (the ranks that exited normally wrote one) as one,
        DIR/trace.json; a merge that fails is reported, not raised (the job's own result stands)."""
        parts = self._trace_parts()
        if not parts:
            return
        from tg.profiler import merge_traces
        name = "trace.json" if self.spec.nnodes == 1 else f"trace.node{self.node}.json"   # a node's ranks
        out = os.path.join(self.spec.profile_dir or "", name)
        try:
            merge_traces(parts, out)
        except (OSError, ValueError) as e:
            print(f"[tglaunch] could not merge the ranks' traces into {out}: {e}", file=sys.stderr)
            return
        print(f"[tglaunch] merged the traces of {len(parts)} rank(s) into {out}", file=sys.stderr)

    def _worker_env(self, attempt: int, errors: str) -> dict[str, str]:
        spec = self.spec
        env = config.environment()
        env.update(spec.env)
        master = spec.master_addr
        if self.rdzv is not None:
            master, port = self.rdzv.store_address
            env.update(TG_STORE_EXTERNAL="1", TG_STORE_PREFIX=f"{self.rdzv.key}/r{attempt}/w/")
            assert self.rdzv.last is not None
            env.update(TG_MEMBERSHIP_CHANGES=str(self.rdzv.last.changes),
                       TG_FAILURE_RESTARTS=str(self.rdzv.last.restarts))
        elif spec.master_port:
            check_port(spec.master_addr, spec.master_port)
            port = spec.master_port
        else:
            port = free_port(spec.master_addr)
        env.update(
            WORLD_SIZE=str(self.world),
            LOCAL_WORLD_SIZE=str(spec.nproc_per_node),
            NODE_RANK=str(self.node),
            GROUP_RANK=str(self.node),
            MASTER_ADDR=master,
            MASTER_PORT=str(port),
            TG_RESTART_COUNT=str(attempt),
            TG_MAX_RESTARTS=str(spec.max_restarts),
            TG_RUN_ID=spec.run_id or "",
            TG_BACKEND=spec.backend,
            TG_SECRET=self.launch.secret,
            TG_ERROR_FILE=os.path.join(errors, "rank{rank}.json"),
            PYTHONUNBUFFERED="1",
            TG_LAUNCHER_PID=str(os.getpid()),
            TG_FLIGHT_DIR=errors,
        )
        if spec.flight_recorder is not None:       # else the environment's TG_FLIGHT_RECORDER (or 512)
            env["TG_FLIGHT_RECORDER"] = str(spec.flight_recorder)
        if spec.profile_dir:
            env["TG_PROFILE"] = os.path.abspath(spec.profile_dir)
        # the node's cores shared among its ranks, unless the user chose (torchrun sets OMP_NUM_THREADS=1)
        if "TG_CPU_THREADS" not in env:
            env["TG_CPU_THREADS"] = str(max(1, (os.cpu_count() or 1) // spec.nproc_per_node))
        return env

    def _command(self) -> list[str]:
        spec = self.spec
        target = ["-m", spec.module] if spec.module else [spec.script or ""]
        return [sys.executable, BOOTSTRAP, *target, *spec.args]

    def _start(self, attempt: int, env: dict[str, str], errors: str) -> list[_Worker]:
        workers = []
        for local in range(self.spec.nproc_per_node):
            rank = self.base_rank + local
            wenv = {**env, "RANK": str(rank), "LOCAL_RANK": str(local)}
            proc = subprocess.Popen(self._command(), env=wenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, process_group=0, preexec_fn=_die_with_launcher)
            workers.append(_Worker(rank, proc, self._open_logs(rank, attempt)))
        return workers

    def _open_logs(self, rank: int, attempt: int) -> dict[str, IO[bytes]]:
        if not self.spec.log_dir:
            return {}
        os.makedirs(self.spec.log_dir, exist_ok=True)
        logs: dict[str, IO[bytes]] = {}
        for stream in ("stdout", "stderr"):
            f = open(os.path.join(self.spec.log_dir, f"rank{rank}.{stream}"), "ab")
            if attempt:
                f.write(f"--- restart {attempt}\n".encode())
            logs[stream] = f
        return logs

    # ------------------------------------------------------------------ watching the workers
    # Complexity: the supervision loop: output relay, exits, failures and signals handled in one select loop.
    def _supervise(self, workers: list[_Worker], attempt: int, errors: str) -> Failure | None:  # noqa: C901
        sel = selectors.DefaultSelector()
        for w in workers:
            for stream in ("stdout", "stderr"):
                pipe = getattr(w.proc, stream)
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe, selectors.EVENT_READ, (w, stream))
        failure: Failure | None = None
        next_store_check = 0.0
        echo_since: float | None = None
        failed: dict[int, Failure] = {}     # rank -> its failure, read once: an exited rank's record is final
        try:
            while True:
                for key, _ in sel.select(POLL):
                    self._relay(sel, key)
                if self.stop_signal:
                    break
                exited = [w for w in workers if w.proc.poll() is not None]
                for w in exited:
                    if w.proc.returncode != 0 and w.rank not in failed:
                        failed[w.rank] = self._failure(w, errors)
                found = list(failed.values())
                local = bool(found)
                if not found and self.rdzv is not None and time.monotonic() >= next_store_check:
                    next_store_check = time.monotonic() + 0.1
                    found, ended = self._watch_round()
                    if ended:
                        print(f"[tglaunch] node {self.node}: the round ends ({ended}); stopping this node's "
                              f"workers", file=sys.stderr)
                        break
                if found and local and self.rdzv is not None and (ended := self.rdzv.check()):
                    # the round had ended already (a node lost or joining, the store lost): these ranks
                    # failed because the job was being stopped, which is no failure of theirs
                    print(f"[tglaunch] node {self.node}: the round ends ({ended}); stopping this node's "
                          f"workers", file=sys.stderr)
                    break
                if found:
                    failure = blame(found)
                    if is_echo(failure) and len(exited) < len(workers):
                        # A rank raised because a peer left; the peer itself may be a rank of
                        # this node still on its way out: give it a moment to be the one named.
                        echo_since = echo_since or time.monotonic()
                        if time.monotonic() - echo_since < ECHO_WAIT:
                            continue
                    if local and self.rdzv is not None:
                        failure = self._publish(failure)
                    break
                if len(exited) == len(workers):
                    break
        finally:
            self._stop(workers)
            while sel.get_map():
                for key, _ in sel.select(0.1):
                    self._relay(sel, key)
            sel.close()
            for w in workers:
                for f in w.logs.values():
                    f.close()
        if failure is None and not self.stop_signal and self.rdzv is not None and not self.rdzv.why:
            return self._finish_together()
        return failure

    def _relay(self, sel: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        """Copy what a worker wrote, a whole line at a time, each line prefixed with its rank."""
        w, stream = key.data
        try:
            chunk = os.read(key.fd, 1 << 16)
        except BlockingIOError:
            return
        out = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        if not chunk:
            sel.unregister(key.fileobj)
            if w.partial[stream]:
                self._emit(w, stream, out, w.partial[stream] + b"\n")
            return
        data = w.partial[stream] + chunk
        cut = data.rfind(b"\n") + 1
        w.partial[stream] = data[cut:]
        if cut:
            self._emit(w, stream, out, data[:cut])

    def _emit(self, w: _Worker, stream: str, out: IO[bytes], lines: bytes) -> None:
        prefix = f"[rank{w.rank}]: ".encode()
        out.write(b"".join(prefix + line + b"\n" for line in lines[:-1].split(b"\n")))
        out.flush()
        if stream in w.logs:
            w.logs[stream].write(lines)
            w.logs[stream].flush()

    def _failure(self, w: _Worker, errors: str) -> Failure:
        failure = Failure(w.rank, w.proc.returncode, self.host, time.time(), node=self.node)
        path = os.path.join(errors, f"rank{w.rank}.json")
        if os.path.exists(path):
            try:
                with open(path) as f:
                    record = json.load(f)
                failure.error, failure.traceback = record.get("error", ""), record.get("traceback", "")
                failure.when = record.get("time", failure.when)
            except (OSError, ValueError):
                pass
        return failure

    def _stop(self, workers: list[_Worker]) -> None:
        """SIGTERM to every worker still running (and its children), SIGKILL after the grace period."""
        alive = [w for w in workers if w.proc.poll() is None]
        for w in alive:
            _killpg(w.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.launch.grace
        while alive and time.monotonic() < deadline:
            time.sleep(0.005)
            alive = [w for w in alive if w.proc.poll() is None]
        for w in alive:
            _killpg(w.proc.pid, signal.SIGKILL)
        for w in workers:
            w.proc.wait()
            _killpg(w.proc.pid, signal.SIGKILL)   # anything the worker started and left behind

    # ------------------------------------------------------------------ mpiexec starts the processes
    # Complexity: mpiexec's start, relay and exit handling in one place, mirroring _supervise for the
    # mpi backend.
    def _attempt_mpi(self, attempt: int, errors: str) -> Failure | None:  # noqa: C901
        spec = self.spec
        env = self._worker_env(attempt, errors)
        env.update(TG_PREFIX_OUTPUT="1")
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            env.pop(name, None)             # the bootstrap takes them from mpiexec
        mpiexec = mpiexec_command(spec.nproc_per_node)
        if mpiexec is None:
            raise LaunchError("--backend mpi needs mpiexec: pip install 'tg[mpi]' (Open MPI) or 'tg[mpich]'")
        removed = remove_dead_mpi_segments()
        if removed:
            print(f"[tglaunch] removed {len(removed)} Open MPI shared-memory segment(s) that a dead job left "
                  f"in {SHM_DIR}: {', '.join(os.path.basename(p) for p in removed)}", file=sys.stderr)
        removed = remove_dead_mpi_sessions(env)
        if removed:
            print(f"[tglaunch] removed {len(removed)} Open MPI session folder(s) that a dead mpiexec left in "
                  f"{os.path.dirname(removed[0])}: {', '.join(os.path.basename(p) for p in removed)}",
                  file=sys.stderr)
        proc = subprocess.Popen([*mpiexec, *self._command()], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                process_group=0, preexec_fn=_die_with_launcher)
        job = _Worker(-1, proc, {})
        sel = selectors.DefaultSelector()
        for stream in ("stdout", "stderr"):
            sel.register(getattr(proc, stream), selectors.EVENT_READ, stream)
        while sel.get_map():
            for key, _ in sel.select(POLL):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                out = sys.stdout.buffer if key.data == "stdout" else sys.stderr.buffer
                out.write(chunk)       # the bootstrap prefixed these lines already
                out.flush()
            if self.stop_signal:
                self._stop([job])
        sel.close()
        proc.wait()
        if proc.returncode == 0 or self.stop_signal:
            return None
        records = sorted(f for f in os.listdir(errors) if f.endswith(".json"))
        if records:
            rank = int(records[0][4:-5])
            failure = self._failure(_Worker(rank, proc, {}), errors)
            failure.code = proc.returncode if proc.returncode > 0 else failure.code
            return failure
        return Failure(-1, proc.returncode, self.host, time.time(), error="mpiexec ended the job (see above)")

    # ------------------------------------------------------------------ several nodes
    def _watch_round(self) -> tuple[list[Failure], str | None]:
        """The failures other nodes recorded for this round, and why the round ended if it did (a member
        lost, a newcomer waiting, this agent stopped too long, the store lost)."""
        from tg.distributed.store import StoreError
        assert self.rdzv is not None
        ended = self.rdzv.check()
        if ended:
            return [], ended
        try:
            return self.rdzv.failures(), None
        except StoreError:
            self.rdzv.why = "store lost"
            return [], "lost the rendezvous store"

    def _publish(self, failure: Failure) -> Failure:
        """Record this node's failure, let the other nodes' land (a rank on another node often fails
        second, having noticed the first through the transport), and return the earliest: the root cause.
        A member lost meanwhile (its agent died: its failure never lands) ends the wait."""
        from tg.distributed.store import StoreError
        assert self.rdzv is not None
        try:
            self.rdzv.publish(failure)
        except StoreError:
            self.rdzv.why = "store lost"
            return failure
        start = time.monotonic()
        while True:
            time.sleep(0.05)
            found, ended = self._watch_round()
            cause = blame(found) if found else failure
            waited = time.monotonic() - start
            settled = len(found) == len(self.rdzv.known) or (waited >= 0.25 and not is_echo(cause))
            if settled or ended or waited >= ECHO_WAIT:
                return cause

    def _finish_together(self) -> Failure | None:
        """This node's workers succeeded: wait until every node's did, or one failed, or the round ended
        (a member lost before it finished: the job goes on without it, from the last checkpoint)."""
        from tg.distributed.store import StoreError
        assert self.rdzv is not None
        try:
            self.rdzv.done()
            while not self.rdzv.all_done():
                if self.stop_signal:
                    return None
                found, ended = self._watch_round()
                if ended:
                    return None
                if found:
                    time.sleep(0.25)   # the first record to land need not be the cause: let the rest land
                    return blame(self._watch_round()[0] or found)
                time.sleep(0.05)
        except StoreError:
            self.rdzv.why = "store lost"
        return None


def mpiexec_command(nproc: int) -> list[str] | None:
    """`mpiexec [flags] -n nproc` (the one beside this Python first), or None without one. Open MPI refuses
    root and more ranks than cores unless told; MPICH's hydra needs neither flag. Whoever starts it
    calls remove_dead_mpi_sessions (and remove_dead_mpi_segments) first."""
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = exe if os.path.exists(exe) else shutil.which("mpiexec") or ""
    if not exe:
        return None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    flags = []
    if "Open MPI" in version or "OpenRTE" in version:
        flags += ["--allow-run-as-root"] if os.geteuid() == 0 else []
        flags += ["--oversubscribe"] if nproc > (os.cpu_count() or 1) else []
    return [exe, *flags, "-n", str(nproc)]


def remove_dead_mpi_sessions(env: dict[str, str] | None = None) -> list[str]:
    """Remove this user's Open MPI 5 session folders `<base>/ompi.<pid>` of this host whose launcher is
    gone, base being where an mpiexec started with env puts them (config.mpi_session_base). mpiexec
    removes its own on a clean exit, but one killed with SIGKILL (a timeout, a killed agent) leaves it,
    and the next mpiexec that the kernel gives the same pid (pids wrap at pid_max) fails to start:
    "The PMIx server's listener thread failed to start". Kept: a folder whose pid is taken (its
    launcher, or a process whose pid no new mpiexec can get while it lives; a zombie too) and one
    without this host's `pmix.<host>.*` files (another host or container sharing the folder, whose
    pids this /proc does not show). A folder is renamed away in one step and its pid looked at again
    before it is removed, so a launcher that took the pid meanwhile keeps it. Returns the folders
    removed; also removes what a cleaner that died mid-way left (`.ompi.<pid>.dead-<its pid>-*`)."""
    base = config.mpi_session_base(env)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    host = socket.gethostname()
    hosts = (f"pmix.{host}.", f"pmix.{host.split('.')[0]}.")
    removed = []
    for name in names:
        path, parts = os.path.join(base, name), name.split(".")
        if name.startswith(".ompi.") and len(parts) == 4 and parts[3].startswith("dead-"):
            cleaner = parts[3].removeprefix("dead-").split("-")[0]
            if _pid_number(cleaner) and not os.path.exists(f"/proc/{cleaner}"):
                shutil.rmtree(path, ignore_errors=True)
        elif len(parts) == 2 and parts[0] == "ompi" and _pid_number(parts[1]):
            if _remove_if_dead(path, hosts):
                removed.append(path)
    return removed


def _remove_if_dead(path: str, hosts: tuple[str, ...]) -> bool:
    """Remove the session folder path (`.../ompi.<pid>`) if it is this user's and host's and no process
    has its pid; True when removed."""
    pid = path.rsplit(".", 1)[1]
    try:
        st = os.lstat(path)
        if st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode) or os.path.exists(f"/proc/{pid}"):
            return False
        if not any(entry.startswith(hosts) for entry in os.listdir(path)):
            return False
        doomed = f"{os.path.dirname(path)}/.{os.path.basename(path)}.dead-{os.getpid()}-{time.monotonic_ns()}"
        os.rename(path, doomed)          # atomic: another cleaner or a new launcher sees it or not
    except OSError:
        return False                     # gone meanwhile (another cleaner took it)
    if os.path.exists(f"/proc/{pid}"):   # a launcher took the pid between the look and the rename
        try:
            os.rename(doomed, path)      # give it back
            return False
        except OSError:
            pass                         # it made its own folder already: this one is the stale one
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def _pid_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


SHM_DIR = "/dev/shm"
MPI_SEGMENTS = ("sm_segment.", "vader_segment.")    # Open MPI 5's btl/sm, Open MPI 4's btl/vader


def remove_dead_mpi_segments(min_age: float = 10.0) -> list[str]:
    """Remove the Open MPI shared-memory segment files of this user that no process maps or holds open
    (and none younger than min_age seconds, which a starting job may not have mapped yet): a job killed
    by SIGKILL never unlinks them, and each holds 16 MiB of memory until someone does. Their names carry
    host, uid, job id and local rank but no pid, so "dead" is proved by no process using the file;
    when some process of this user cannot be inspected, nothing is removed. Returns the paths removed."""
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(MPI_SEGMENTS)]
    except OSError:
        return []
    candidates = set()
    for name in names:
        path = os.path.join(SHM_DIR, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > min_age:
            candidates.add(path)
    if not candidates:
        return []
    in_use = _files_in_use(candidates)
    if in_use is None:
        return []
    removed = []
    for path in sorted(candidates - in_use):
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def _files_in_use(paths: set[str]) -> set[str] | None:
    """Which of paths some process maps or holds open, from /proc; None when a process of this user
    could not be inspected (then nothing can be proved unused). The init process (pid 1, which a
    container may hide) never belongs to an MPI job."""
    used: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, os.getpid()):
            continue
        try:
            with open(f"/proc/{entry}/maps") as f:
                used.update(p for p in (line.rstrip("\n").split(None, 5)[-1] for line in f) if p in paths)
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    if (target := os.readlink(f"/proc/{entry}/fd/{fd}")) in paths:
                        used.add(target)
        except (FileNotFoundError, ProcessLookupError):
            continue                                  # it ended while we looked
        except PermissionError:
            try:
                if os.stat(f"/proc/{entry}").st_uid == os.geteuid():
                    return None
            except OSError:
                pass
    return used


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
