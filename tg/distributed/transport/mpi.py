"""The `mpi` backend: tg's collectives mapped straight onto MPI's own, through mpi4py's buffer API
(Allreduce, Bcast, Allgather, Reduce_scatter_block, Send/Recv, ...; never the pickling lower-case
API). Processes come from `mpiexec`; rank and size come from MPI.

What tg adds on top of MPI:
- **Agreement before data.** Every collective first reduces a 62-bit hash of its descriptor (op,
  dtype, shape, root, reduce op) with MIN and MAX in one 16-byte Allreduce. Ranks that disagree all
  see it, gather the descriptors and raise naming the odd rank, instead of MPI's hang or garbage.
- **No silent hang.** A watchdog thread aborts the whole job (MPI_Abort) when a call blocks past
  the job's timeout, and an uncaught exception in any rank aborts the job too (mpi4py's `-m mpi4py`
  idea), so the other ranks never wait forever in a collective the dead one will not join.
- **The late rank is named.** Before it aborts, the watchdog asks the other ranks' watchdogs (on a
  communicator of their own, answered from their threads) which collective each last entered and
  what it is in now, and prints one report: `rank 2 did not arrive (its last collective in the
  group was all_reduce #3; it is in no tg call); ranks 0, 1 are waiting in it`. A rank killed by a
  signal is beyond this: mpiexec kills the others at once and names it in its own message.
- **p2p on its own communicator** (a Dup), so sends and receives never match a collective's
  messages; each message is preceded by its descriptor, checked by the receiver.

Async calls run on the group's worker thread in blocking MPI calls (mpi4py releases the GIL), which
overlaps them with the caller's compute; MPI's nonblocking collectives would only progress inside
later MPI calls. This needs MPI_THREAD_MULTIPLE, which Open MPI and MPICH provide.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from tg import config
from tg.distributed.errors import DistributedError, ranks_phrase
from tg.distributed.process_group import ProcessGroup, ReduceOp
from tg.distributed.transport import wire

DESC_BYTES = wire.DESC_MAX + 2     # room for any descriptor, plus its 2-byte length
_P2P_DESC, _P2P_DATA = 1, 2


_OP_NAMES = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "SUM", ReduceOp.PRODUCT: "PROD", ReduceOp.MIN: "MIN",
             ReduceOp.MAX: "MAX", ReduceOp.BAND: "BAND", ReduceOp.BOR: "BOR", ReduceOp.BXOR: "BXOR"}
_BOOL_OP_NAMES = {ReduceOp.SUM: "LOR", ReduceOp.MAX: "LOR", ReduceOp.BOR: "LOR", ReduceOp.PRODUCT: "LAND",
                  ReduceOp.MIN: "LAND", ReduceOp.BAND: "LAND", ReduceOp.BXOR: "LXOR"}


def load_mpi() -> Any:
    """mpi4py's MPI module, imported so that ucxx still works afterwards.

    The MPI wheels bundle their own UCX; if MPI's copy loads first, ucxx's copy fails to load
    (undefined symbols). Loading ucxx's UCX first, when it is installed, keeps both usable."""
    if "mpi4py.MPI" not in sys.modules and importlib.util.find_spec("libucx") is not None:
        import libucx
        libucx.load_library()
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"[distributed] backend 'mpi' needs mpi4py and an MPI library ({e}); install them "
                          f"with pip install 'tg[mpi]' (Open MPI) and start the job with mpiexec") from None
    return MPI


def under_mpiexec() -> bool:
    """True when Open MPI's or MPICH's launcher started this process."""
    return config.OMPI_COMM_WORLD_SIZE > 0 or config.PMI_SIZE > 0


# ------------------------------------------------------------------------ failure: watchdog and excepthook

_QUERY, _REPLY = 1, 2      # tags on the watchdogs' own communicator
_QUERY_BYTES, _REPLY_BYTES = 256, 2048
ASK_GRACE = 3.0            # seconds a timed-out rank waits for the others' watchdogs to say where they are
DEFER = 5.0                # seconds a waiting rank leaves the report to the lowest waiting rank


class _Watchdog:
    """Aborts the MPI job when any guarded call runs past its deadline: a blocked MPI call cannot be
    interrupted, and a job that hangs forever is the one outcome tg never allows.

    Before aborting, it asks the other ranks where they are. A rank blocked in a collective cannot
    answer, and one that stopped calling tg may be outside MPI, so each rank's watchdog thread answers
    for it: it polls its own communicator (a Dup of COMM_WORLD that only watchdogs use; each poll also
    drives MPI's progress) and replies with the last collective its rank entered in the asked group and
    the calls it is blocked in now. The timed-out rank names the ranks that did not arrive; the lowest
    rank that did arrive reports, the others only if it has not aborted the job DEFER seconds later."""

    def __init__(self, mpi: Any) -> None:
        self.mpi = mpi
        self.calls: dict[int, _Guard] = {}                # one slot per calling thread
        self.entered: dict[str, tuple[int, str]] = {}     # group -> (seq, what) of its last collective
        self.comm: Any = None                             # set once the whole world has joined
        self.sending: list[tuple[Any, np.ndarray]] = []   # replies in flight, with their buffers
        self.lock = threading.Lock()                      # held around every MPI call of this thread
        self.stopped = False
        atexit.register(self._stop)     # before mpi4py's MPI_Finalize, which runs after every atexit hook
        threading.Thread(target=self._watch, daemon=True, name="tg-mpi-watchdog").start()

    def guard(self, what: str, timeout: float, peers: list[int], group: str | None = None,
              seq: int = 0) -> _Guard:
        """Times a call; `peers` are the world ranks to ask about on a timeout, `group` and `seq` name a
        collective (which the peers must all enter)."""
        return _Guard(self, what, timeout, peers, group, seq)

    def connect(self, world: Any) -> None:
        """The watchdogs' communicator; collective over `world`, so called where every rank is."""
        if self.comm is None and world.Get_size() > 1:
            comm = world.Dup()
            with self.lock:
                self.comm = comm

    def _stop(self) -> None:
        with self.lock:
            self.stopped = True

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self.lock:
                if self.stopped or self.mpi.Is_finalized():
                    return
                try:
                    self._answer()
                except Exception:  # noqa: BLE001 - a failed reply must not stop the watchdog
                    pass
                now = time.monotonic()
                late = [g for g in list(self.calls.values()) if g.deadline < now]
                if late:
                    self._handle(late[0])

    def _handle(self, guard: _Guard) -> None:
        if guard.report is None:
            try:
                guard.report, first = self._report(guard, self._ask(guard))
            except Exception as e:  # noqa: BLE001 - whatever asking did, the job must still end
                guard.report, first = f"{self._head(guard)} (asking the other ranks where they are failed: " \
                                      f"{type(e).__name__}: {e}); aborting the MPI job\n", True
            if not first:
                guard.defer_until = time.monotonic() + DEFER
                return
        elif time.monotonic() < guard.defer_until:
            return
        if guard not in self.calls.values():
            return       # it completed after all, while the others were asked
        sys.stderr.write(guard.report)
        sys.stderr.flush()
        self.mpi.COMM_WORLD.Abort(1)

    # ------------------------------------------------------------------ asking and answering
    def _answer(self) -> None:
        """Reply to every query waiting on the watchdogs' communicator."""
        if self.comm is None:
            return
        self.sending = [(req, buf) for req, buf in self.sending if not req.Test()]
        status = self.mpi.Status()
        while self.comm.Iprobe(source=self.mpi.ANY_SOURCE, tag=_QUERY, status=status):
            query = np.zeros(_QUERY_BYTES, np.uint8)
            self.comm.Recv(query, source=status.Get_source(), tag=_QUERY)
            try:
                group = json.loads(query.tobytes().rstrip(b"\0"))["group"]
            except (ValueError, KeyError, TypeError):
                continue
            seq, last = self.entered.get(group, (0, "")) if isinstance(group, str) else (0, "")
            last = last.removesuffix(f" (group {group})")      # stripped here, not on every call
            now = [g.what[:200] for g in list(self.calls.values())][:4]
            reply = np.zeros(_REPLY_BYTES, np.uint8)
            body = json.dumps({"seq": seq, "last": last[:200], "now": now}).encode()[:_REPLY_BYTES]
            reply[:len(body)] = np.frombuffer(body, np.uint8)
            self.sending.append((self.comm.Isend(reply, dest=status.Get_source(), tag=_REPLY), reply))

    def _ask(self, guard: _Guard) -> dict[int, dict | None]:
        """Each peer's reply (None: no answer within ASK_GRACE seconds)."""
        if self.comm is None or not guard.peers:
            return {}
        query = np.zeros(_QUERY_BYTES, np.uint8)
        body = json.dumps({"group": guard.group}).encode()[:_QUERY_BYTES]
        query[:len(body)] = np.frombuffer(body, np.uint8)
        buffers = {p: np.zeros(_REPLY_BYTES, np.uint8) for p in guard.peers}
        sends = [self.comm.Isend(query, dest=p, tag=_QUERY) for p in guard.peers]
        recvs = {p: self.comm.Irecv(buffers[p], source=p, tag=_REPLY) for p in guard.peers}
        replies: dict[int, dict | None] = dict.fromkeys(guard.peers)
        deadline = time.monotonic() + ASK_GRACE
        while recvs and time.monotonic() < deadline:
            self._answer()                  # peers that timed out too are asking this rank meanwhile
            for p, req in list(recvs.items()):
                if req.Test():
                    del recvs[p]
                    try:
                        reply = json.loads(buffers[p].tobytes().rstrip(b"\0"))
                        replies[p] = reply if isinstance(reply, dict) else None
                    except ValueError:
                        pass
            time.sleep(0.02)
        self.sending += [(req, query) for req in sends]
        for p, req in recvs.items():        # no answer: stop waiting for it (its buffer lives on until then)
            req.Cancel()
            self.sending.append((req, buffers[p]))
        return replies

    def _head(self, guard: _Guard) -> str:
        return (f"[distributed] rank {self.mpi.COMM_WORLD.Get_rank()}: {guard.what} did not complete within "
                f"{guard.timeout:g}s (TG_DIST_TIMEOUT)")

    def _report(self, guard: _Guard, replies: dict[int, dict | None]) -> tuple[str, bool]:
        """The message, and whether this rank is the one to print it (the lowest rank that arrived)."""
        me, head = self.mpi.COMM_WORLD.Get_rank(), self._head(guard)
        if self.comm is None or not guard.peers:
            return f"{head}; aborting the MPI job\n", True

        def doing(reply: dict) -> str:
            now = reply.get("now") or []
            return f"it is in {' and '.join(map(str, now))}" if now else "it is in no tg call"
        silent = f"did not answer within {ASK_GRACE:g}s (it has exited, or holds the GIL in native code)"
        if guard.group is None:
            parts = [f"rank {p} {silent}" if r is None else f"rank {p}: {doing(r)}"
                     for p, r in replies.items()]
            return f"{head}; {'; '.join(parts)}; aborting the MPI job\n", True
        late = [p for p, r in replies.items() if r is None or int(r.get("seq", 0)) < guard.seq]
        waiting = sorted([me] + [p for p in replies if p not in late])
        parts = []
        for p in late:
            r = replies[p]
            if r is None:
                parts.append(f"rank {p} {silent}")
            else:
                last = f"its last collective in the group was {r['last']}" if r.get("last") \
                    else "it made no collective in the group"
                parts.append(f"rank {p} did not arrive ({last}; {doing(r)})")
        if not late:
            parts.append("every rank arrived, but the call did not complete (MPI itself is stuck)")
        who = f"{ranks_phrase(waiting)} {'is' if len(waiting) == 1 else 'are'}"
        hint = f"Find why {ranks_phrase(late)} stopped, or raise TG_DIST_TIMEOUT if it is only slow" if late \
            else "Raise TG_DIST_TIMEOUT if the transfer is only slow"
        report = f"{head}: {'; '.join(parts)}; {who} waiting in it. {hint}; aborting the MPI job\n"
        return report, me == waiting[0]


class _Guard:
    __slots__ = ("watchdog", "what", "timeout", "peers", "group", "seq", "key", "deadline", "report",
                 "defer_until")

    def __init__(self, watchdog: _Watchdog, what: str, timeout: float, peers: list[int], group: str | None,
                 seq: int) -> None:
        self.watchdog, self.what, self.timeout, self.peers = watchdog, what, timeout, peers
        self.group, self.seq = group, seq
        self.report: str | None = None
        self.defer_until = 0.0

    def __enter__(self) -> None:
        self.key = threading.get_ident()
        self.deadline = time.monotonic() + self.timeout
        if self.group is not None:
            self.watchdog.entered[self.group] = (self.seq, self.what)
        self.watchdog.calls[self.key] = self

    def __exit__(self, *exc: Any) -> None:
        self.watchdog.calls.pop(self.key, None)


_watchdog: _Watchdog | None = None
_previous_hook: Any = None


def _install_abort_hook(mpi: Any) -> None:
    global _previous_hook
    if _previous_hook is not None:
        return
    _previous_hook = previous = sys.excepthook

    def abort_job(kind: type, value: BaseException, tb: Any) -> None:
        rank = mpi.COMM_WORLD.Get_rank()
        note = (f"[distributed] rank {rank} raised {kind.__name__}; aborting the MPI job so no rank is left "
                f"waiting for it\n")
        if previous is sys.__excepthook__:
            # one write: mpiexec relays output in the pieces it receives, and its abort banner must not
            # land in the middle of the traceback's last line
            sys.stderr.write("".join(traceback.format_exception(kind, value, tb)) + note)
        else:
            previous(kind, value, tb)
            sys.stderr.write(note)
        sys.stderr.flush()
        mpi.COMM_WORLD.Abort(1)
    sys.excepthook = abort_job


def _remove_abort_hook() -> None:
    global _previous_hook
    if _previous_hook is not None:
        sys.excepthook, _previous_hook = _previous_hook, None


# ---------------------------------------------------------------------------- the group

def _store(arr: np.ndarray, values: np.ndarray) -> None:
    """A widened result back into arr (bfloat16 words rounded to nearest even)."""
    if wire.is_bf16(arr.dtype):
        wire.bf16_narrow(values.reshape(arr.shape), arr)
    else:
        arr[...] = values


def _bytes(arr: np.ndarray) -> np.ndarray:
    return arr.reshape(-1).view(np.uint8)


def _pack_desc(desc: bytes) -> np.ndarray:
    out = np.zeros(DESC_BYTES, np.uint8)
    body = desc[:DESC_BYTES - 2]
    out[:2] = np.frombuffer(len(body).to_bytes(2, "little"), np.uint8)
    out[2:2 + len(body)] = np.frombuffer(body, np.uint8)
    return out


def _columns(a: np.ndarray | None, parts: bool, size: int, lo: int, hi: int) -> np.ndarray | None:
    """Elements lo:hi of flat a, or of each of its `size` equal parts (end to end, contiguous) when
    `parts`."""
    if a is None:
        return None
    return np.ascontiguousarray(a.reshape(size, -1)[:, lo:hi]).reshape(-1) if parts else a[lo:hi]


def _payload_bytes(desc: bytes) -> int:
    """The bytes a send's descriptor says follow it (0 for one that cannot be read)."""
    try:
        _, _, code, _, ndim = wire.DESC_HEAD.unpack(desc[:wire.DESC_HEAD.size])
        shape = np.frombuffer(desc[wire.DESC_HEAD.size:wire.DESC_HEAD.size + 8 * ndim], np.uint64)
        return int(np.prod(shape, dtype=np.uint64)) * np.dtype(wire.DTYPE_CODES[code]).itemsize
    except (ValueError, IndexError):
        return 0


def _unpack_desc(packed: np.ndarray) -> bytes:
    n = int.from_bytes(packed[:2].tobytes(), "little")
    return packed[2:2 + min(n, DESC_BYTES - 2)].tobytes()


class _Agreed:
    """Enter: the watchdog starts timing the call, and one Allreduce of (h, -h) under MAX gives the max
    and -min of every rank's descriptor hash; unequal means some rank is in a different call. Exit:
    the watchdog stops timing."""
    __slots__ = ("coll", "seq", "op", "desc", "h", "guard")

    def __init__(self, coll: MpiCollectives, seq: int, op: str, desc_hash: tuple[bytes, int]) -> None:
        self.coll, self.seq, self.op = coll, seq, op
        self.desc, self.h = desc_hash

    def __enter__(self) -> None:
        c = self.coll
        assert _watchdog is not None
        self.guard = _watchdog.guard(f"{self.op} #{self.seq} (group {c.name})", c.timeout, c.peers, c.name,
                                     self.seq)
        self.guard.__enter__()
        pair = c.pair
        pair[0], pair[1] = self.h, -self.h
        c.comm.Allreduce(c.mpi.IN_PLACE, pair, op=c.mpi.MAX)
        if pair[0] != self.h or -pair[1] != self.h:
            c._name_the_odd_rank(self.seq, self.op, self.desc)

    def __exit__(self, *exc: Any) -> None:
        self.guard.__exit__()


class _Spans:
    """MPI counts are C ints, so a call over more than 2^31 - 1 elements fails (MPI_ERR_ARG aborts the
    job): a call moves at most TG_MPI_MAX_COUNT elements."""
    size: int

    def _spans(self, n: int, per_rank: bool = False) -> list[tuple[int, int]]:
        """[lo, hi) ranges of n elements, one MPI call each. `per_rank`: the range is taken of every
        rank's part at once (gather, scatter, all_gather, reduce_scatter, all_to_all), so it is kept to
        the limit over the group size."""
        step = max(config.TG_MPI_MAX_COUNT // (self.size if per_rank else 1), 1)
        return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


class MpiComms(_Spans):
    """The group's `transport`: its communicators, point-to-point on a Dup of its own (each message
    preceded by its descriptor), and its collectives (`collectives`: MPI's own). MPI aborts the job
    itself, so abort() only stops using them."""
    name = kind = "mpi"

    def __init__(self, mpi: Any, comm: Any, ranks: list[int], timeout: float, name: str):
        self.mpi, self.comm, self.ranks, self.timeout, self.group_name = mpi, comm, ranks, timeout, name
        self.p2p = comm.Dup()
        self.rank, self.world = comm.Get_rank(), comm.Get_size()
        self.size = self.world
        self.closed = False

    def collectives(self, ranks: list[int]) -> MpiCollectives:
        return MpiCollectives(self)

    def _guard(self, what: str, peers: list[int]) -> _Guard:
        """Times a call that is not a collective of this group; `peers`: the ranks it waits for."""
        assert _watchdog is not None
        return _watchdog.guard(f"{what} (group {self.group_name})", self.timeout, peers)

    def p2p_send(self, peer: int, desc: bytes, payload: memoryview) -> None:
        """One message to group rank `peer`: its descriptor, then the data in spans."""
        with self._guard(f"send to rank {self.ranks[peer]}", [self.ranks[peer]]):
            self.p2p.Send(_pack_desc(desc), dest=peer, tag=_P2P_DESC)
            data = np.frombuffer(payload, np.uint8) if len(payload) else np.zeros(0, np.uint8)
            for lo, hi in self._spans(data.size):
                self.p2p.Send(data[lo:hi], dest=peer, tag=_P2P_DATA)

    def p2p_recv(self, peer: int, desc: bytes, buf: memoryview, describe: Any) -> None:
        """The next message from group rank `peer` into buf, its descriptor checked first (a message of
        another call is received and dropped, then the error names both)."""
        packed = np.empty(DESC_BYTES, np.uint8)
        with self._guard(f"recv from rank {self.ranks[peer]}", [self.ranks[peer]]):
            self.p2p.Recv(packed, source=peer, tag=_P2P_DESC)
            theirs = _unpack_desc(packed)
            if theirs != desc:
                for lo, hi in self._spans(_payload_bytes(theirs)):    # the message's parts, dropped
                    self.p2p.Recv(np.empty(hi - lo, np.uint8), source=peer, tag=_P2P_DATA)
                raise DistributedError(f"[distributed] recv from rank {self.ranks[peer]}: it sent "
                                       f"{describe(theirs)}, rank {self.ranks[self.rank]} expected "
                                       f"{describe(desc)}")
            data = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
            for lo, hi in self._spans(data.size):
                self.p2p.Recv(data[lo:hi], source=peer, tag=_P2P_DATA)

    def abort(self, reason: str) -> None:
        self.closed = True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.p2p.Free()
        if self.comm != self.mpi.COMM_WORLD:
            self.comm.Free()


class MpiCollectives(_Spans):
    """A group's `Collectives` mapped onto MPI's own, on host numpy arrays, in place, each agreed first
    (`_Agreed`) and timed by the watchdog."""

    def __init__(self, comms: MpiComms):
        self.mpi, self.comm, self.timeout, self.name = comms.mpi, comms.comm, comms.timeout, comms.group_name
        self.rank, self.size, self.ranks = comms.rank, comms.size, comms.ranks
        self.pair = np.zeros(2, np.int64)     # the agreement's buffer: one collective at a time per group
        self.peers = [r for i, r in enumerate(self.ranks) if i != self.rank]    # whom a collective waits on
        if _watchdog is not None:
            _watchdog.entered.pop(self.name, None)  # a new group of an old name (a re-init) starts at #1

    def _agree(self, seq: int, op: str, arr: np.ndarray, root: int = -1,
               red: ReduceOp | None = None, shape: tuple[int, ...] | None = None) -> _Agreed:
        """`with self._agree(...)`: every rank must be in the same call before any data moves."""
        desc = wire.described(op, arr.dtype, arr.shape if shape is None else shape, root,
                              red.value if red is not None else 0)
        return _Agreed(self, seq, op, desc)

    def _name_the_odd_rank(self, seq: int, name: str, desc: bytes) -> None:
        everyone = np.empty(self.size * DESC_BYTES, np.uint8)
        self.comm.Allgather(_pack_desc(desc), everyone)
        descs = [_unpack_desc(everyone[r * DESC_BYTES:(r + 1) * DESC_BYTES]) for r in range(self.size)]
        raise wire.disagreement(f"collective #{seq}", descs, self.ranks)

    def _mpi_op(self, op: ReduceOp, dtype: np.dtype) -> Any:
        return getattr(self.mpi, (_BOOL_OP_NAMES if dtype == np.bool_ else _OP_NAMES)[op])

    @staticmethod
    def _typed(arr: np.ndarray) -> np.ndarray:
        """mpi4py reads the MPI datatype off the buffer's format (float32 -> MPI_FLOAT, bool -> C_BOOL)."""
        return arr.reshape(-1)

    @staticmethod
    def _reducible(arr: np.ndarray, op: ReduceOp) -> np.ndarray:
        """float16 is reduced in float32 (MPI has no half type), as the other backends do. 8- and 16-bit
        integers are summed in 32 bits: Open MPI's vector ops saturate them (127 + 100 -> 127) from 64
        elements on, where numpy and the other backends wrap; the low bits of the wide sum are the
        wrapped sum, and storing it back in the narrow dtype keeps just those."""
        kind, size = arr.dtype.kind, arr.itemsize
        if wire.is_bf16(arr.dtype):       # bfloat16 words: MPI has no such type either
            return wire.bf16_widen(arr)
        if kind == "f" and size < 4:
            return arr.astype(np.float32)
        if kind in "iu" and size < 4 and op is ReduceOp.SUM:
            return arr.astype(np.dtype(f"{kind}4"))
        return arr

    def _by_rank(self, call: Any, send: np.ndarray | None, recv: np.ndarray | None, send_parts: bool,
                 recv_parts: bool) -> None:
        """call(send, recv) over every rank's part in ranges: `send` / `recv` (flat, or None) are cut into
        size equal parts when `*_parts` (each rank's part in a row), else they are one part. A range of
        the parts is a column block of those rows, copied to and from contiguous buffers unless one
        range is all of it."""
        sized = [(a, parts) for a, parts in ((send, send_parts), (recv, recv_parts)) if a is not None]
        n = max((a.size // (self.size if parts else 1) for a, parts in sized), default=0)
        for lo, hi in self._spans(n, per_rank=True):
            if hi - lo == n:
                call(send, recv)
                continue
            r_cut = _columns(recv, recv_parts, self.size, lo, hi)
            call(_columns(send, send_parts, self.size, lo, hi), r_cut)
            if recv is not None and r_cut is not None:
                (recv.reshape(self.size, n)[:, lo:hi] if recv_parts else recv[lo:hi])[...] = \
                    r_cut.reshape(self.size, hi - lo) if recv_parts else r_cut

    # ------------------------------------------------------------------ the collectives
    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp, kind: str = "all_reduce",
                   root: int = -1) -> None:
        """An all_reduce, or with kind "reduce" MPI's Reduce: the result only at `root` (ProcessGroup.reduce
        keeps it there alone)."""
        if kind == "reduce":
            return self._reduce(seq, arr, root, op)
        work = self._reducible(arr, op)
        flat, mpi_op = self._typed(work), self._mpi_op(op, work.dtype)
        with self._agree(seq, "all_reduce", arr, red=op):
            for lo, hi in self._spans(flat.size):
                self.comm.Allreduce(self.mpi.IN_PLACE, flat[lo:hi], op=mpi_op)
        if op is ReduceOp.AVG:
            np.divide(work, self.size, out=work, casting="unsafe")
        if work is not arr:
            _store(arr, work)
        return None

    def _reduce(self, seq: int, arr: np.ndarray, root: int, op: ReduceOp) -> None:
        work = self._typed(self._reducible(arr, op))
        result = np.empty_like(work) if self.rank == root else None
        mpi_op = self._mpi_op(op, work.dtype)
        with self._agree(seq, "reduce", arr, root=root, red=op):
            for lo, hi in self._spans(work.size):
                self.comm.Reduce(work[lo:hi], result[lo:hi] if result is not None else None, op=mpi_op,
                                 root=root)
        if result is not None and work.size:
            if op is ReduceOp.AVG:
                result = result / self.size
            _store(arr, result.reshape(arr.shape))

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None:
        data = _bytes(arr)
        with self._agree(seq, "broadcast", arr, root=root):
            for lo, hi in self._spans(data.size):
                self.comm.Bcast(data[lo:hi], root=root)

    def all_gather(self, seq: int, outs: list[np.ndarray], mines: list[np.ndarray],
                   call: tuple[str, tuple[int, ...]]) -> None:
        op, shape = call
        with self._agree(seq, op, mines[0], shape=shape):
            for o, m in zip(outs, mines):
                # MPI forbids a send buffer inside the receive buffer (an input that is its own block)
                send = m.copy() if np.may_share_memory(m, o) else np.ascontiguousarray(m)
                self._by_rank(lambda s, r: self.comm.Allgather(s, r), _bytes(send), _bytes(o), False, True)

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        work_in = self._reducible(np.ascontiguousarray(inp).reshape(-1), op)
        # straight into out when MPI may write there (same dtype, not inside the send buffer)
        direct = (out.dtype == work_in.dtype and out.flags.c_contiguous
                  and not np.may_share_memory(out, work_in))
        work_out = out.reshape(-1) if direct else np.empty(out.size, work_in.dtype)
        mpi_op = self._mpi_op(op, work_in.dtype)
        with self._agree(seq, "reduce_scatter", inp, red=op):
            self._by_rank(lambda s, r: self.comm.Reduce_scatter_block(s, r, op=mpi_op), work_in, work_out,
                          True, False)
        if op is ReduceOp.AVG:
            np.divide(work_out, self.size, out=work_out, casting="unsafe")
        if not direct:
            _store(out.reshape(-1), work_out)

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        flat = np.empty(self.size * mine.nbytes, np.uint8) if self.rank == root else None
        with self._agree(seq, "gather", mine, root=root):
            self._by_rank(lambda s, r: self.comm.Gather(s, r, root=root), _bytes(np.ascontiguousarray(mine)),
                          flat, False, True)
        if flat is not None:
            for i, chunk in enumerate(chunks):
                _bytes(chunk)[...] = flat[i * mine.nbytes:(i + 1) * mine.nbytes]

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        flat = np.concatenate([_bytes(np.ascontiguousarray(c)) for c in chunks]) if self.rank == root \
            else None
        with self._agree(seq, "scatter", out, root=root):
            self._by_rank(lambda s, r: self.comm.Scatter(s, r, root=root), flat, _bytes(out), True, False)

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None:
        # the parts are equal (all_to_all_single checks the first dim divides by the group size)
        with self._agree(seq, "all_to_all", inp):
            self._by_rank(lambda s, r: self.comm.Alltoall(s, r), _bytes(np.ascontiguousarray(inp)),
                          _bytes(out), True, True)

    def barrier(self, seq: int, op: str = "barrier") -> None:
        with self._agree(seq, op, np.zeros(0, np.uint8)):
            pass      # the agreement Allreduce is itself a barrier


def mpi_group(mpi: Any, comm: Any, ranks: list[int], timeout: float, name: str) -> ProcessGroup:
    """A ProcessGroup over an MPI communicator: MpiComms its transport, MPI's collectives its own."""
    comms = MpiComms(mpi, comm, ranks, timeout, name)
    return ProcessGroup(comms.rank, comms.world, ranks, comms, name)


def subgroup(default: ProcessGroup, ranks: list[int], name: str) -> ProcessGroup:
    """A group of some of the default group's ranks; only its members call this
    (MPI_Comm_create_group)."""
    comms: MpiComms = default.transport
    world_ranks = [comms.ranks[r] for r in ranks]
    me = comms.ranks[comms.rank]
    with comms._guard(f"new_group({world_ranks})", [r for r in world_ranks if r != me]):
        members = comms.comm.Get_group().Incl(ranks)
        comm = comms.comm.Create_group(members)
        members.Free()
        return mpi_group(comms.mpi, comm, world_ranks, comms.timeout, name)


def init_world(rank: int | None, world_size: int | None, timeout: float) -> tuple[ProcessGroup, int]:
    """The default group over MPI_COMM_WORLD, and this process's local rank."""
    global _watchdog
    mpi = load_mpi()
    if mpi.Query_thread() < mpi.THREAD_MULTIPLE:
        raise RuntimeError("[distributed] backend 'mpi' needs an MPI library initialised with "
                           f"MPI_THREAD_MULTIPLE (got level {mpi.Query_thread()}); use Open MPI or MPICH "
                           f"from pip install 'tg[mpi]'")
    world = mpi.COMM_WORLD
    mpi_rank, mpi_size = world.Get_rank(), world.Get_size()
    if _watchdog is None:
        _watchdog = _Watchdog(mpi)
    if mpi_size > 1:
        _install_abort_hook(mpi)   # from here on, an uncaught error in any rank ends the job
    env_rank, env_world = config.RANK, config.WORLD_SIZE
    for source, r, w in (("RANK / WORLD_SIZE", env_rank, env_world),
                         ("init_process_group(rank=, world_size=)", rank, world_size)):
        if (r is not None and r >= 0 and r != mpi_rank) or (w is not None and w > 0 and w != mpi_size):
            raise ValueError(f"[distributed] backend 'mpi': MPI says this is rank {mpi_rank} of {mpi_size}, "
                             f"but {source} say rank {r} of {w}; start MPI jobs with mpiexec -n N (which "
                             f"sets both), or unset RANK / WORLD_SIZE")
    local = max(config.OMPI_COMM_WORLD_LOCAL_RANK, config.MPI_LOCALRANKID)
    if local < 0:      # a launcher that does not say: ask MPI which ranks share this node
        with _watchdog.guard("finding the local rank (MPI_Comm_split_type)", timeout, []):
            node = world.Split_type(mpi.COMM_TYPE_SHARED)
            local = node.Get_rank()
            node.Free()
    with _watchdog.guard("creating the default group (MPI_Comm_dup)", timeout, []):
        _watchdog.connect(world)
        return mpi_group(mpi, world, list(range(mpi_size)), timeout, "default"), local


def finish() -> None:
    """After destroy_process_group: exceptions no longer abort the job."""
    _remove_abort_hook()
