"""ProcessGroup: a set of ranks, one transport among them and the collectives that run over it. Every
collective runs on the group's worker thread in call order (so async calls keep their order), on host
numpy arrays, in place.

What moves the data is the group's `Collectives` (transport/base.py): the shared-memory engine when
every rank is on this host, tg's algorithms over the transport's point-to-point frames otherwise, and
identities for a one-rank group (which needs no transport).
"""
from __future__ import annotations

import json
import math
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from tg.core import trace
from tg.distributed import flight
from tg.distributed.errors import CollectiveTimeout, DistributedError, ranks_phrase
from tg.distributed.transport import algorithms as alg
from tg.distributed.transport.algorithms import Arrays, ReduceOp, gather_pairs, reducer
from tg.distributed.transport.wire import describe, encode_desc

__all__ = ["ProcessGroup", "ReduceOp", "reducer", "gather_pairs", "Arrays"]


_DTYPE_NAMES: dict[np.dtype, str] = {}      # numpy's dtype.name is slow to ask every collective


def _dtype_name(dtype: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


class ProcessGroup:
    """rank/size within the group, and `ranks`, the global rank of each group rank."""
    live: weakref.WeakSet[ProcessGroup] = weakref.WeakSet()    # for a process forked after init to keep

    def __init__(self, rank: int, size: int, ranks: list[int], transport: Any = None, name: str = "default"):
        self.rank, self.size, self.ranks, self.transport, self.name = rank, size, ranks, transport, name
        self.coll: Any = alg.Alone() if transport is None else transport.collectives(ranks)
        self.seq = 0
        self.pending = 0          # async calls submitted and not yet finished
        self.failure: DistributedError | None = None
        self.store: Any = None    # the job's store and this group's key prefix: where ranks that time out
        self.prefix = ""          # say where they wait (_who_is_stuck)
        self.destroyed = False    # destroy_process_group(this group) ran: calls on it are a mistake
        # bytes this rank moved in bulk collectives, as bandwidth-optimal algorithms move them: an
        # all_reduce or reduce of B bytes 2 (n - 1) / n B, an all-gather's output or a reduce-scatter's
        # input of B bytes (n - 1) / n B, a broadcast (n - 1) / n B (startup.bytes_moved says more)
        self.moved = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tg-pg-{name}")
        self._lock = threading.Lock()
        # held by the call that runs (inline or on the worker), from taking its number to its end
        self._calling = threading.RLock()
        ProcessGroup.live.add(self)

    def __repr__(self) -> str:
        via = getattr(self.transport, "kind", "local")
        return f"<ProcessGroup {self.name} rank {self.rank}/{self.size} via {via}>"

    # ------------------------------------------------------------------ running
    def submit(self, fn: Callable[..., None], *args: Any) -> Future:
        with self._lock:      # queued under the lock: threads' calls run in the order of their numbers
            self.seq += 1
            self.pending += 1
            ticket = self._issue(self.seq, fn, args)
            fut = self._executor.submit(self._run, self.seq, fn, args, ticket)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _fut: Future) -> None:
        with self._lock:
            self.pending -= 1

    def run_now(self, fn: Callable[..., None], *args: Any) -> None:
        """A synchronous call: inline when no async call is queued (saves a thread hand-off). Calls from
        several threads run one at a time, each whole, in the order of their numbers: the peers see one
        stream of calls (which thread's comes first may differ between ranks, as under torch)."""
        before = trace.phase("communication")
        try:
            self._run_now(fn, args)
        finally:
            trace.phase(before)

    def _run_now(self, fn: Callable[..., None], args: tuple) -> None:
        with self._calling:
            with self._lock:
                inline = self.pending == 0
                if inline:
                    self.seq += 1
                    seq = self.seq
                    ticket = self._issue(seq, fn, args, inline=True)
            if inline:
                self._call(seq, fn, args, ticket)
                return
        self.submit(fn, *args).result()

    def _run(self, seq: int, fn: Callable[..., None], args: tuple, ticket: tuple | None) -> None:
        """An async call, on the worker thread: after any inline call that took a lower number."""
        with self._calling:
            self._call(seq, fn, args, ticket)

    def _issue(self, seq: int, fn: Callable[..., None], args: tuple, inline: bool = False) -> tuple | None:
        """Note a call in the flight recorder (and, while profiling, when it was issued): its ticket.
        `inline`: it runs now, on this thread (issued and transferring at once)."""
        rec = flight.recorder(self.ranks[self.rank])
        if rec is None and not trace.ON:
            return None
        kind = getattr(fn, "__name__", "call")
        first = args[0] if args else None     # the data: an array, or a list of them gathered as one
        if isinstance(first, np.ndarray):
            dtype, count, nbytes = _dtype_name(first.dtype), first.size, first.nbytes
        else:
            arrays = [x for x in first if isinstance(x, np.ndarray)] if isinstance(first, list) else []
            dtype = _dtype_name(arrays[0].dtype) if arrays else "-"
            count, nbytes = sum(a.size for a in arrays), sum(a.nbytes for a in arrays)
        ticket = -1 if rec is None else rec.issue(self.name, seq, kind, dtype, count, nbytes, inline)
        return (rec, ticket, kind, dtype, count, nbytes, trace.now(), inline)

    def _call(self, seq: int, fn: Callable[..., None], args: tuple, ticket: tuple | None = None) -> None:
        if ticket is None:
            self._guarded(seq, fn, args)
            return
        rec, t, kind, dtype, count, nbytes, issued, inline = ticket
        if rec is not None and not inline:
            rec.update(t, flight.TRANSFERRING)
        start, state = trace.now(), flight.FAILED
        try:
            self._guarded(seq, fn, args)
            state = flight.DONE
        finally:
            if rec is not None:
                rec.update(t, state)
            if trace.ON:
                trace.span(f"{kind} #{seq}", "collective", start, None, {
                    "group": self.name, "ranks": self.ranks, "seq": seq, "dtype": dtype, "count": count,
                    "bytes": nbytes, "queued_us": (start - issued) // 1000, "ok": state == flight.DONE})

    def _guarded(self, seq: int, fn: Callable[..., None], args: tuple) -> None:
        if self.failure is not None:
            raise self.failure
        try:
            fn(seq, *args)
        except CollectiveTimeout as e:
            err = self._who_is_stuck(seq, e)
            self._fail(err)
            raise err from None
        except DistributedError as e:
            self._fail(e)
            raise
        except BaseException as e:
            err = DistributedError(f"[distributed] rank {self.ranks[self.rank]} failed inside a collective: "
                                   f"{type(e).__name__}: {e}")
            self._fail(err)
            raise err from e

    def _who_is_stuck(self, seq: int, err: CollectiveTimeout) -> DistributedError:
        """The error for a timeout, naming its cause. The wait that timed out was on a neighbour in the
        algorithm (a ring's, a tree's), which may be waiting too: so each rank that times out says, in
        the store, which call it waits in, and waits a grace (TG_DIST_TIMEOUT, at most 30s) for the
        others' word. A rank that said nothing by then is the one that is stuck: stopped, hung, or busy
        outside this group's collectives for longer than the timeout. All saying: the calls diverged
        (different numbers), or the transfer itself is stuck."""
        if self.store is None or self.size < 3:      # two ranks: the peer waited on is the only other
            return err
        timeout = getattr(self.transport, "timeout", 0.0)
        # a rank that entered the call later than the others times out later too: the grace is the
        # timeout itself, up to 30s; the store's answers get 10s at least (a slow one must not cost the
        # process its store connection)
        grace = min(max(timeout, 1.0), 30.0) if math.isfinite(timeout) else 30.0
        answer = max(grace, 10.0)
        key = f"{self.prefix}/waiting/%d"
        try:
            self.store.set(key % self.rank, json.dumps({"seq": seq}), timeout=answer)
            try:
                self.store.wait([key % r for r in range(self.size)], timeout=grace, answer_within=answer)
            except TimeoutError:
                pass
            said = [self.store.compare_set(key % r, b"\0peek", b"", timeout=answer) for r in range(self.size)]
        except (DistributedError, OSError) as e:
            return CollectiveTimeout(f"{err} (asking the other ranks where they wait failed: {e})")
        waiting: dict[int, int] = {}
        for r, raw in enumerate(said):
            try:
                waiting[r] = int(json.loads(raw)["seq"])
            except (ValueError, KeyError, TypeError):
                pass
        silent = [self.ranks[r] for r in range(self.size) if r not in waiting]
        if silent:
            verb = "is" if len(silent) == 1 else "are"
            return CollectiveTimeout(
                f"[distributed] {ranks_phrase(silent)} {verb} stuck: every other rank of group {self.name} "
                f"waited in a collective past TG_DIST_TIMEOUT ({timeout:g}s) and {ranks_phrase(silent)} "
                f"did not (stopped, hung, or busy outside this group's collectives) -- here, {err}")
        if len(set(waiting.values())) > 1:
            where = ", ".join(f"rank {self.ranks[r]} in #{s}" for r, s in sorted(waiting.items()))
            return CollectiveTimeout(f"{err}; every rank of group {self.name} is waiting, in different "
                                     f"collectives ({where}): the ranks' calls diverged")
        return CollectiveTimeout(f"{err}; every rank of group {self.name} is waiting in collective #{seq}: "
                                 f"the transfer itself is stuck, or slower than TG_DIST_TIMEOUT allows")

    def _fail(self, err: DistributedError) -> None:
        self.failure = err
        if self.transport is not None:
            self.transport.abort(str(err))

    # ------------------------------------------------------------------ collectives on numpy (host) arrays
    def _count(self, nbytes: int, passes: int = 1) -> None:
        self.moved += passes * nbytes * (self.size - 1) // self.size

    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp) -> None:
        self.coll.all_reduce(seq, arr, op)
        self._count(arr.nbytes, 2)

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None:
        self.coll.broadcast(seq, arr, root)
        self._count(arr.nbytes)

    def all_gather(self, seq: int, out: Arrays, mine: Arrays) -> None:
        """out is (size * mine.size,) flat; rank i's part lands at block i. Lists of outs and mines (one
        dtype) are gathered as one call: one agreement, one pass for all of them (ZeRO-2 gathers its
        buckets so: fewer round trips than a call each)."""
        outs, mines, call = gather_pairs(out, mine)
        flats = [o.reshape(-1) for o in outs]
        parts = [m.reshape(-1) for m in mines]
        for flat, part in zip(flats, parts):
            flat[self.rank * part.size:(self.rank + 1) * part.size] = part   # no copy if it is there already
        self.coll.all_gather(seq, flats, parts, call)
        self._count(sum(f.nbytes for f in flats))

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        """inp is (size * out.size,) flat; rank i gets the reduction of block i. inp is only read, and the
        result is written straight into out unless out overlaps inp or is of another dtype."""
        mine = out.reshape(-1)
        direct = mine.dtype == inp.dtype and out.flags.c_contiguous and not np.may_share_memory(out, inp)
        result = mine if direct else np.empty(mine.size, inp.dtype)
        self.coll.reduce_scatter(seq, result, inp.reshape(-1), op)
        self._count(inp.nbytes)
        if result is not mine:
            mine[...] = result

    def reduce(self, seq: int, arr: np.ndarray, root: int, op: ReduceOp) -> None:
        """An all_reduce (agreed as a reduce to root) whose result only root keeps."""
        result = arr.copy()
        self.coll.all_reduce(seq, result, op, "reduce", root)
        self._count(arr.nbytes, 2)
        if self.rank == root:
            arr[...] = result

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray] | None, root: int) -> None:
        self.coll.gather(seq, mine, chunks or [], root)

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray] | None, root: int) -> None:
        self.coll.scatter(seq, out, chunks or [], root)

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None:
        self.coll.all_to_all(seq, out.reshape(-1), inp.reshape(-1))

    def barrier(self, seq: int, op: str = "barrier") -> None:
        """No rank leaves before every rank arrived: the agreement alone is that."""
        self.coll.barrier(seq, op)

    def leave(self, seq: int) -> None:
        """destroy_process_group's exit barrier: a rank still in another call is named, not left hanging."""
        self.barrier(seq, "leave")

    def send(self, seq: int, arr: np.ndarray, dst: int) -> None:
        """Point-to-point runs on its own connection, so it never interleaves with collectives."""
        flat = np.ascontiguousarray(arr).reshape(-1)
        payload = memoryview(flat).cast("B") if flat.nbytes else memoryview(b"")  # type: ignore[arg-type]
        self.transport.p2p_send(dst, encode_desc("send", arr.dtype, arr.shape), payload)

    def recv(self, seq: int, arr: np.ndarray, src: int) -> None:
        flat = arr.reshape(-1)
        view = memoryview(flat).cast("B") if flat.nbytes else memoryview(bytearray(0))  # type: ignore[arg-type]
        self.transport.p2p_recv(src, encode_desc("send", arr.dtype, arr.shape), view, describe)

    def close(self) -> None:
        self.destroyed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.transport is not None:
            self.transport.close()
