"""The ucx transport's large all_reduce in C (`ucx_engine.c`): the agreement and the ring in one call on
the worker and endpoints ucxx made, with messages of PIECE bytes, each reduced while it is in cache.

In Python every message costs a few microseconds of ucxx calls, so the ring there sends few, large
messages (algorithms.CHUNK), and a received chunk has left the cache before it is reduced. The engine
sends the same messages as the Python algorithms (same tags, same agreement frames), only in pieces;
every rank of a group uses it or none does (`start` agrees through the store), so the pieces always
match. A disagreement is found by the engine and named by the Python side, as everywhere else.

    engine = start(transport, store, prefix)     # None: some rank could not build it
    UcxCollectives(transport, ranks, engine).all_reduce(seq, arr, ReduceOp.SUM)
"""
from __future__ import annotations

import ctypes
import logging
import select
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tg.distributed.errors import CollectiveTimeout, DistributedError
from tg.distributed.transport import native, wire
from tg.distributed.transport.algorithms import FOLD, SMALL, Call, OverTransport, ReduceOp

if TYPE_CHECKING:
    from tg.distributed.store import TCPStore
    from tg.distributed.transport.ucx import UcxTransport

log = logging.getLogger("tg.distributed.transport.ucx")

SOURCE = Path(__file__).with_name("ucx_engine.c")
PIECE = 128 << 10          # bytes per data message (measured: 128-512 KiB alike, 1 MiB slower from 8 MiB up)
SLOTS = 4                  # pieces of scratch that received partial sums land in, in turn: half an L2
SLEEP_S = 1e-3             # seconds of one sleep (then the failures are looked at again)
OK, DISAGREE, TIMEOUT, STOPPED, BAD_STEP, BAD_SIZE, UCX_FAILED = range(7)

CHECK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int)
_u64, _vp, _int = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
SIGNATURES: dict[str, tuple] = {
    "tg_ucx_new": (_vp, _vp, _int, _int, ctypes.c_double, _int, ctypes.c_double, _u64, _int, _u64, CHECK),
    "tg_ucx_free": (_vp,),
    "tg_ucx_all_reduce": (_vp, native.Memory, _u64, _int, _int, ctypes.c_uint32, _u64),
    "tg_ucx_culprit": (_vp,),
    "tg_ucx_got_seq": (_vp,),
    "tg_ucx_got_bytes": (_vp,),
    "tg_ucx_want_bytes": (_vp,),
    "tg_ucx_status": (_vp,),
}
RESTYPES = {"tg_ucx_new": _vp, "tg_ucx_free": None, "tg_ucx_got_seq": ctypes.c_uint32,
            "tg_ucx_got_bytes": _u64, "tg_ucx_want_bytes": _u64, "tg_ucx_status": ctypes.c_char_p}


def library() -> ctypes.CDLL:
    """The engine, built against the UCX of the libucx wheel ucxx loads (its headers and libraries; the
    version is in the flags, so a new UCX builds anew). Raises CompileError or OSError."""
    import libucx
    root = Path(libucx.__file__).parent
    flags = (f"-I{root / 'include'}", f"-L{root / 'lib'}", f"-Wl,-rpath,{root / 'lib'}", "-lucp", "-lucs",
             f"-DTG_UCX_VERSION=\"{getattr(libucx, '__version__', '?')}\"")
    return native.build(SOURCE, SIGNATURES, RESTYPES, flags)


def start(transport: UcxTransport, store: TCPStore, prefix: str) -> UcxEngine | None:
    """The group's engine when every rank could build it, else None on every rank (a rank that could not
    says why)."""
    engine = None
    try:
        engine = UcxEngine(transport)
    except Exception as e:  # noqa: BLE001 - whatever stops this rank's engine, every rank goes without
        log.warning("[distributed] rank %d: no UCX engine (%s); large all_reduce runs in Python",
                    transport.rank, str(e).splitlines()[0])
    store.set(f"{prefix}/ucx-engine/{transport.rank}", b"1" if engine else b"0")
    everyone = all(store.get(f"{prefix}/ucx-engine/{r}") == b"1" for r in range(transport.world))
    if engine is not None and not everyone:
        engine.close()
        return None
    return engine


class UcxEngine:
    """The C state over one transport's worker and data endpoints. Calls run under the transport's lock,
    released while a wait sleeps; while one waits, the engine calls back `_check`, which raises (into
    `stopped`) what the transport's own waits would: an ABORT from any rank, the waited-for peer's
    control endpoint closed, the transport closing."""

    def __init__(self, transport: UcxTransport):
        self.t, self.lib = transport, library()
        self.stopped: BaseException | None = None
        self.what = ""
        self.busy = threading.Lock()             # held by a call in C: close() frees the state after it
        self.check: Any = CHECK(self._check)     # kept: C holds the pointer
        eps = (_vp * transport.world)(*[transport.eps[p].handle if p in transport.eps else None
                                         for p in range(transport.world)])
        t = transport
        self.handle = self.lib.tg_ucx_new(t.worker.handle, eps, t.rank, t.world, t.timeout, t.spin,
                                          native.YIELD_S, PIECE, SLOTS, FOLD, self.check)
        if not self.handle:
            raise MemoryError("[distributed] the UCX engine could not start: no memory for its state")

    def _check(self, peer: int, sleep: int) -> int:
        """From C, while it waits on peer: nonzero to stop (the reason kept in `stopped`). To sleep, the
        worker is armed and its event fd waited on with the transport's lock released, so other threads'
        point-to-point calls (which take it) go on while this collective waits."""
        t = self.t
        try:
            t.failures(peer, self.what)
            if sleep:
                armed = t.worker.arm()
                t.lock.release()
                try:
                    if armed:
                        select.select([t.fd], [], [], SLEEP_S)
                finally:
                    t.lock.acquire()
        except BaseException as e:  # noqa: BLE001 - re-raised by all_reduce once C has returned
            self.stopped = e
            return 1
        return 0

    def all_reduce(self, seq: int, flat: np.ndarray, op: ReduceOp, desc: bytes, h: int, what: str,
                   ranks: list[int]) -> None:
        """The ring all_reduce of flat (contiguous, float16 already widened), agreement included."""
        t = self.t
        with self.busy, t.lock:
            if not self.handle:
                raise DistributedError("[distributed] the group's transport is closed")
            self.stopped, self.what = None, f"{what} #{seq}"
            rc = self.lib.tg_ucx_all_reduce(self.handle, flat, flat.size, *native.codes(flat.dtype, op),
                                            seq & 0xFFFFFFFF, h)
            if rc == OK:
                return
            peer = self.lib.tg_ucx_culprit(self.handle)
            got_seq = self.lib.tg_ucx_got_seq(self.handle)
            got, want = self.lib.tg_ucx_got_bytes(self.handle), self.lib.tg_ucx_want_bytes(self.handle)
            status = (self.lib.tg_ucx_status(self.handle) or b"?").decode()
        where = f"{what} #{seq}"
        if rc == DISAGREE:
            Call(t, seq, desc, what, ranks).name_the_odd_ranks()
        if rc == STOPPED and self.stopped is not None:
            raise self.stopped
        if rc == TIMEOUT:
            raise CollectiveTimeout(f"[distributed] {where}: rank {ranks[t.rank]} timed out after "
                                   f"{t.timeout:.0f}s waiting for rank {ranks[peer]}")
        if rc == BAD_STEP:
            wire.check_in_step(wire.DESC, got_seq, wire.DESC, seq, peer, t.rank, where)   # as recv_control
        if rc == BAD_SIZE:
            raise DistributedError(f"[distributed] {where}: rank {ranks[peer]} sent "
                                   f"{'more than ' + str(want) if got == want + 1 else got} bytes, rank "
                                   f"{ranks[t.rank]} expected {want}")
        raise DistributedError(f"[distributed] {where}: UCX failed ({status}); rank {ranks[peer]} died or "
                               f"aborted (noticed by rank {ranks[t.rank]})")

    def close(self) -> None:
        """Free the C state, once no call is in it (the transport closes its endpoints first, and a call
        waiting in C stops at its next look at the failures). Called without the transport's lock, which
        such a call needs to return. A call that does not end in time keeps the state (leaked, never
        freed under it)."""
        if not self.busy.acquire(timeout=5.0):
            log.warning("[distributed] a UCX engine call did not end after its transport closed; its state "
                        "stays allocated")
            return
        try:
            if self.handle:
                self.lib.tg_ucx_free(self.handle)
                self.handle = None
                self.check = None     # C no longer holds it; it referred back here (a cycle only gc frees)
        finally:
            self.busy.release()


class UcxCollectives(OverTransport):
    """The algorithms over the ucx transport, with the ring all_reduce in the engine."""

    def __init__(self, transport: Any, ranks: list[int], engine: UcxEngine):
        super().__init__(transport, ranks)
        self.engine = engine

    def reduce_flat(self, seq: int, what: str, arr: np.ndarray, root: int, op: ReduceOp,
                    flat: np.ndarray) -> None:
        if flat.nbytes <= SMALL or flat.size < self.size:
            super().reduce_flat(seq, what, arr, root, op, flat)
            return
        desc, h = wire.described(what, arr.dtype, tuple(arr.shape), root, op.value)
        self.engine.all_reduce(seq, flat, op, desc, h, what, self.ranks)
