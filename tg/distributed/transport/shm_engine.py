"""Every collective of a group whose ranks share one host, through shared memory, in C
(`shm_engine.c`, built by the system C compiler on first use and cached like kernels).

Each rank owns one Segment (a head of counters and two slots) that every other rank maps. A
collective is a fixed number of rounds; in each, a rank writes what its peers need into its slot,
publishes it, and reads straight from theirs into the tensor's own memory. A small all_reduce is one
round: every rank reduces every rank's slot in rank order (the same bits everywhere). From
PARTS_FROM bytes each rank reduces one part of a chunk and posts it for the others (two rounds a
chunk, half the memory traffic at two ranks). Round 0 carries the call's descriptor: the agreement
is that exchange, so a 4-byte all_reduce is one round trip through cache lines, with no thread
hand-off and no socket. Waiting spins, then yields, then sleeps on a futex; the TCP connections stay
open beside it, so an ABORT frame or a dead peer's closed socket ends any wait within a millisecond
(the C side polls them), and the job's timeout names the rank that never arrived.

    engine = ShmEngine(rank, segments, fds, timeout, why_peer)     # made by TcpTransport
    engine.named(group_ranks).all_reduce(seq, arr, ReduceOp.SUM)
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tg.distributed.errors import CollectiveTimeout, DistributedError
from tg.distributed.transport import native, wire

if TYPE_CHECKING:
    from tg.distributed.transport.algorithms import ReduceOp
    from tg.distributed.transport.shm import Segment

log = logging.getLogger("tg.distributed.transport.shm")

SLOT_BYTES = 512 << 10     # bytes a round carries per rank (two slots a segment)
SPINS = 2048               # polls before a wait yields the core (measured: PAUSE loops on AMD Zen 5)
SPINS_OVERSUBSCRIBED = 16  # with more ranks than cores, the rank waited for needs this core: yield soon
PARTS_FROM = 16 << 10      # all_reduce bytes from which each rank reduces one part (measured crossover)
OK, DISAGREE, TIMEOUT, PEER_SOCKET = 0, 1, 2, 3
DESC_CAP = 4096           # bytes of a descriptor read back for an error (the C side keeps at most 4080)
SOURCE = Path(__file__).with_name("shm_engine.c")


_u64, _vp, _int, _dbl, _mem = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int, ctypes.c_double, native.Memory
_desc = (_u64, ctypes.c_char_p, ctypes.c_uint32)          # every collective ends with its descriptor
SIGNATURES: dict[str, tuple] = {
    "tg_barrier": (_vp, *_desc),
    "tg_all_reduce": (_vp, _mem, _u64, _int, _int, *_desc),
    "tg_broadcast": (_vp, _mem, _u64, _int, *_desc),
    "tg_all_gather": (_vp, _vp, _vp, _vp, _int, _int, *_desc),
    "tg_reduce_scatter": (_vp, _mem, _mem, _u64, _int, _int, *_desc),
    "tg_scatter": (_vp, _vp, _mem, _u64, _int, *_desc),
    "tg_all_to_all": (_vp, _mem, _mem, _vp, _vp, _int, *_desc),
    "tg_engine_new": (_int, _int, _u64, _vp, _vp, _dbl),
    "tg_engine_tune": (_vp, _int, _dbl, _u64),
    "tg_engine_free": (_vp,),
    "tg_engine_culprit": (_vp,),
    "tg_engine_desc": (_vp, _int, ctypes.c_char_p, ctypes.c_uint32),
    "tg_engine_head_bytes": (),
    "tg_engine_slot_head": (),
}
RESTYPES = {"tg_engine_new": _vp, "tg_engine_free": None, "tg_engine_tune": None,
            "tg_engine_desc": ctypes.c_uint32, "tg_engine_head_bytes": _u64, "tg_engine_slot_head": _u64}


def library() -> ctypes.CDLL:
    """The engine, compiled on first use (cached on disk). Raises CompileError when the C compiler is
    missing or fails."""
    return native.build(SOURCE, SIGNATURES, RESTYPES)


def segment_bytes() -> int:
    """The size of one rank's segment."""
    lib = library()
    return lib.tg_engine_head_bytes() + 2 * (lib.tg_engine_slot_head() + SLOT_BYTES)


@functools.lru_cache(maxsize=4096)
def _described(op: str, dtype: np.dtype, shape: tuple[int, ...], root: int = -1,
               red: ReduceOp | None = None) -> tuple[int, bytes, int]:
    """(hash, descriptor, its length): how every call of this kind ends its arguments (cached: a training
    loop repeats a few)."""
    desc, h = wire.described(op, dtype, shape, root, 0 if red is None else red.value)
    return h, desc, len(desc)


def _pointers(arrays: list[np.ndarray]) -> ctypes.Array:
    return (_vp * len(arrays))(*[a.ctypes.data for a in arrays])


class ShmEngine:
    """The group's collectives over its ranks' segments (segments[r] is group rank r's). `why_peer(peer,
    what)` raises the reason a peer's TCP connection gives (an ABORT frame, or its end: the peer died).
    Calls hold `lock`, so close() never frees the C state under a call in progress."""

    def __init__(self, rank: int, segments: list[Segment], fds: list[int], timeout: float,
                 why_peer: Callable[[int, str], None]):
        self.lib = library()
        self.rank, self.segments, self.timeout, self.why_peer = rank, segments, timeout, why_peer
        self.ranks = list(range(len(segments)))
        self.lock = threading.Lock()
        addresses = (_vp * len(segments))(*[s.address() for s in segments])
        sockets = (_int * len(fds))(*fds)
        self.handle = self.lib.tg_engine_new(rank, len(segments), SLOT_BYTES, addresses, sockets, timeout)
        if not self.handle:
            raise MemoryError(f"[distributed] the shared-memory engine could not start: no memory for its "
                              f"state, or {SLOT_BYTES}-byte slots too small for {len(segments)} ranks")
        crowded = len(segments) > len(os.sched_getaffinity(0))
        self.tune(SPINS_OVERSUBSCRIBED if crowded else SPINS, native.YIELD_S, PARTS_FROM)

    def tune(self, spins: int, spin_s: float, parts_from: int) -> None:
        """Polls before a wait yields, seconds it yields before it sleeps, and the all_reduce size (bytes)
        from which each rank reduces one part (two rounds a chunk) instead of all of it (one round)."""
        with self.lock:
            if self.handle:
                self.lib.tg_engine_tune(self.handle, spins, spin_s, parts_from)

    def named(self, ranks: list[int]) -> ShmEngine:
        """This engine, naming ranks by their global numbers (ranks[r] for group rank r) in errors."""
        self.ranks = ranks
        return self

    def _call(self, seq: int, what: str, fn: Callable[..., int], *args: Any) -> None:
        """fn(engine, *args): one collective, the descriptor last among args; raises what went wrong
        (what the C state says about it is read before the lock goes: close() may free it then)."""
        with self.lock:
            if not self.handle:
                raise DistributedError("[distributed] the group's transport is closed")
            rc = fn(self.handle, *args)
            if rc == OK:
                return
            peer = self.lib.tg_engine_culprit(self.handle)
            descs = [self._desc(r) for r in range(len(self.ranks))] if rc == DISAGREE else []
        self._raise(rc, seq, what, peer, descs)

    # ------------------------------------------------------------------ the collectives
    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp, what: str = "all_reduce",
                   root: int = -1) -> None:
        self._call(seq, what, self.lib.tg_all_reduce, arr, arr.size, *native.codes(arr.dtype, op),
                   *_described(what, arr.dtype, arr.shape, root, op))

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None:
        self._call(seq, "broadcast", self.lib.tg_broadcast, arr, arr.nbytes, root,
                   *_described("broadcast", arr.dtype, arr.shape, root))

    def all_gather(self, seq: int, outs: list[np.ndarray], mines: list[np.ndarray],
                   call: tuple[str, tuple[int, ...]]) -> None:
        """outs[i] holds every rank's mines[i] end to end (this rank's own part placed already)."""
        sizes = (_u64 * len(mines))(*[m.nbytes for m in mines])
        self._call(seq, "all_gather", self.lib.tg_all_gather, _pointers(outs), _pointers(mines), sizes,
                   len(mines), -1, *_described(call[0], mines[0].dtype, call[1]))

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        outs = _pointers(chunks) if self.rank == root else None
        self._call(seq, "gather", self.lib.tg_all_gather, outs, _pointers([mine]), (_u64 * 1)(mine.nbytes),
                   1, root, *_described("gather", mine.dtype, mine.shape, root))
        if self.rank == root:
            chunks[root][...] = mine

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        """out (contiguous, not overlapping inp) gets block `rank` of inp reduced over the ranks."""
        self._call(seq, "reduce_scatter", self.lib.tg_reduce_scatter, inp, out, out.size,
                   *native.codes(inp.dtype, op), *_described("reduce_scatter", inp.dtype, inp.shape, -1, op))

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        ins = _pointers(chunks) if self.rank == root else None
        self._call(seq, "scatter", self.lib.tg_scatter, ins, out, out.nbytes, root,
                   *_described("scatter", out.dtype, out.shape, root))

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None:
        """Block i of out is block `rank` of rank i's inp: n blocks of one size (the API checks it)."""
        n = len(self.ranks)
        assert inp.size % n == 0 and out.size == inp.size, "all_to_all: equal blocks"
        sizes = [inp.size // n] * n
        starts = [i * (inp.size // n) for i in range(n)]
        src = inp.copy() if np.may_share_memory(out, inp) else inp    # blocks of out land before inp is read
        self._call(seq, "all_to_all", self.lib.tg_all_to_all, src, out, (_u64 * n)(*starts),
                   (_u64 * n)(*sizes), inp.itemsize, *_described("all_to_all", inp.dtype, inp.shape))

    def barrier(self, seq: int, op: str = "barrier") -> None:
        self._call(seq, op, self.lib.tg_barrier, *_described(op, np.dtype(np.uint8), (0,)))

    # ------------------------------------------------------------------ failures
    def _raise(self, rc: int, seq: int, what: str, peer: int, descs: list[bytes]) -> None:
        if rc == DISAGREE:
            raise wire.disagreement(f"collective #{seq}", descs, self.ranks)
        if rc == TIMEOUT:
            raise CollectiveTimeout(f"[distributed] {what} #{seq}: rank {self.ranks[self.rank]} timed out "
                                   f"after {self.timeout:.0f}s waiting for rank {self.ranks[peer]}")
        self.why_peer(peer, f"{what} #{seq}")
        raise DistributedError(f"[distributed] {what} #{seq}: rank {self.ranks[peer]} sent an unexpected "
                               f"frame while the group's collectives run in shared memory")

    def _desc(self, r: int) -> bytes:
        """The descriptor group rank r posted in the round that disagreed."""
        buf = ctypes.create_string_buffer(DESC_CAP)
        n = self.lib.tg_engine_desc(self.handle, r, buf, DESC_CAP)
        return buf.raw[:n]

    def close(self) -> bool:
        """Free the C state and unmap, once no call is in progress (the transport has shut its
        connections down, which ends any wait within a millisecond); True when done. A call that does
        not end in time keeps them (leaked, never freed under it): False."""
        if not self.lock.acquire(timeout=5.0):
            log.warning("[distributed] a collective did not end after its group closed; its shared memory "
                        "stays mapped")
            return False
        try:
            if self.handle:
                self.lib.tg_engine_free(self.handle)
                self.handle = None
                for s in self.segments:
                    s.close()
        finally:
            self.lock.release()
        return True
