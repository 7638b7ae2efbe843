"""The `ucx` transport: UCX through ucxx (`ucxx-cu13`), under the shared collective algorithms.

Each rank opens one UCX worker per group and publishes its worker address in the rendezvous
store; peers connect by worker address (not through a listener). Each pair of ranks has two
endpoints. The data endpoint asks for no peer-failure handling, which lets UCX carry it over shared
memory between ranks on one host (its fifo, not CMA: see HOST_MEMORY), TCP or RDMA across hosts:
UCX's shared-memory transports offer no failure handling, so an endpoint that asks for it goes over
TCP even on one host (seen: a 1 MiB all_reduce 12x slower). The control endpoint asks for it: it
carries the secret's proof and ABORT messages, and its closing is how a dead peer is noticed. Closing
a data endpoint flushes it, which never ends when its peer is dead or stopped: close bounds it.

Messages are UCX tagged sends; the tag says which part it is (a frame header, data, ABORT, the
proof), which channel (collectives or point-to-point), which call (the low 24 bits of its sequence
number) and which rank sent it; UCX keeps messages with equal tags from one sender in order. A
control frame (the agreement) is one message: the 24-byte header and its payload. A collective's
data goes without a header, into a receive posted before the peer sends, so it lands straight in
its buffer: the agreement before it has shown every rank's sizes equal. For host memory the data
stays eager (copied through UCX's shared-memory fifo, in pipelined fragments) up to RNDV_THRESH
between ranks of one host, which measured faster than rendezvous over CMA below 4 MiB; ucxx's own
default (8 KiB, tuned for GPU buffers) is replaced unless the user set UCX_RNDV_THRESH.

An all_reduce past 32 KiB runs in C instead (`ucx_engine.py`: the agreement and the ring in one call,
the same messages in pieces that are reduced while in cache), when every rank of the group built it.

Waiting progresses the worker, then sleeps on its event file descriptor (no core is burnt while a
peer computes). While waiting, a closed control endpoint (UCX reports a dead process at once)
raises naming that peer, and a standing receive catches the ABORT message a failing rank sends to
everyone, so all ranks raise within milliseconds with the first failure's reason.

Security: worker addresses are only handed out by the authenticated store, and every endpoint
proves the job secret (an HMAC over both ranks) before use. That handshake is all UCX authenticates:
its tagged messages carry no proof and do not identify the sending endpoint, so a process that can
reach a worker's UCX ports could inject messages. UCX's TCP transport listens on every interface it
uses, so for a job whose transport host is loopback (the master is local) tg creates the UCX context
with UCX_NET_DEVICES=lo and UCX_TLS=self,posix,sysv,tcp (`context_options`; a UCX_* variable the user set
wins): nothing listens beyond loopback. Across hosts, run ucx only on a private network (and point
UCX_NET_DEVICES at it); on an untrusted network, use the tcp backend.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import select
import socket
import struct
import sys
import threading
import time
from typing import Any

from tg import config
from tg.distributed.errors import CollectiveTimeout, DistributedError
from tg.distributed.store import TCPStore
from tg.distributed.transport.base import Sent, Transport
from tg.distributed.transport.wire import DATA, DESC, FRAME, MAGIC, MAX_CONTROL, P2P, check_in_step, header

HEADER, PAYLOAD, ABORT, AUTH, CONTROL = 0, 1, 2, 3, 4    # tag part (wire.DATA, a collective's data, is 1)
COLLECTIVE, POINT = 0, 1                        # tag channel
SPIN = 200                                      # progress polls before sleeping on the event fd
SPIN_OVERSUBSCRIBED = 4                         # with more ranks than cores the peer needs the core
CLOSE_PERIOD_NS, CLOSE_ATTEMPTS = 50_000_000, 2  # close waits 0.1 s at most for an endpoint's flush
INLINE = 8 << 10                                # payloads up to this ride in the header's message
_PART_MASK = 0xF << 60
SEQ = struct.Struct("<I")        # a header-less control message starts with its call's number
# a job on one host: UCX's TCP on the loopback device only (and shared memory), so no UCX port is
# reachable from another host; keys are UCX options without the UCX_ prefix
LOOPBACK_ONLY = {"NET_DEVICES": "lo", "TLS": "self,posix,sysv,tcp"}
# host memory between ranks of one host: eager (copied through the shared-memory fifo) below 4 MiB,
# rendezvous from there; UCX's own choice across hosts. No single-copy transport (CMA, KNEM, XPMEM):
# the data endpoints have no failure handling, and UCX aborts a process whose CMA read from a peer
# fails (seen: a survivor killed by SIGABRT when its peer died mid-rendezvous), so a dead rank would
# take its peers down unnamed; the shared-memory fifo carries the rendezvous instead.
HOST_MEMORY = {"RNDV_THRESH": "intra:4mb,inter:auto", "TLS": "^cma,knem,xpmem"}

log = logging.getLogger("tg.distributed.transport.ucx")


def _tag(part: int, channel: int, src: int, seq: int = 0) -> int:
    return (part << 60) | (channel << 56) | ((seq & 0xFFFFFF) << 32) | src


_api: Any = None
_contexts: dict[tuple[tuple[str, str], ...], Any] = {}     # one UCP context per set of options
_ucxx_set: dict[str, str] = {}     # the UCX_* variables ucxx set itself when imported (its GPU defaults)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def context_options(host: str) -> dict[str, str]:
    """The UCX options tg sets for a transport whose rank serves on `host`: HOST_MEMORY, and
    LOOPBACK_ONLY when `host` is a loopback address; an option whose UCX_ variable the user set (before
    ucxx was imported, which sets some of its own) is left to UCX.

        >>> context_options("10.0.0.7")
        {'RNDV_THRESH': 'intra:4mb,inter:auto', 'TLS': '^cma,knem,xpmem'}
    """
    wanted = {**HOST_MEMORY, **(LOOPBACK_ONLY if _is_loopback(host) else {})}
    user = {k for k, v in config.environment().items() if k.startswith("UCX_") and _ucxx_set.get(k) != v}
    chosen = {k: v for k, v in wanted.items() if f"UCX_{k}" not in user}
    kept = sorted(f"UCX_{k}" for k in wanted if f"UCX_{k}" in user)
    log.debug("[distributed] ucx: transport host %s: %s%s", host,
              ", ".join(f"UCX_{k}={v}" for k, v in chosen.items()) or "nothing set by tg",
              f"; kept the user's {kept}" if kept else "")
    return chosen


def ucx_context(options: dict[str, str]) -> Any:
    """The UCP context for these options, created on first use: options only act when a context is
    created (UCX reads its settings then), so each distinct set gets its own."""
    api = load_ucxx()
    key = tuple(sorted(options.items()))
    if key not in _contexts:
        _contexts[key] = api.UCXContext(dict(options))
    return _contexts[key]


def load_ucxx() -> Any:
    """ucxx's low-level module, with a clear message when it is missing or when mpi4py loaded the MPI
    wheel's own UCX first."""
    global _api
    if _api is not None:
        return _api
    config.export_default("UCX_WARN_UNUSED_ENV_VARS", "n")
    before = config.environment()
    try:
        import ucxx._lib.libucxx as api
    except ImportError as e:
        if "UCX" in str(e) and "upgrade" in str(e).lower():
            # seen on a GPU image whose system UCX 1.16 loaded before the libucx wheel's own
            raise ImportError(
                f"[distributed] backend 'ucx': ucxx is installed but found an older UCX library before "
                f"its own ({str(e).splitlines()[0]}). Fix: make the libucx wheel's UCX the one that "
                f"loads (UCX_LOG_LEVEL=debug prints which libucs.so was loaded; drop the directory of "
                f"the other one from LD_LIBRARY_PATH), or use another backend"
            ) from None
        raise ImportError(
            f"[distributed] backend 'ucx' needs ucxx ({e}); install it with pip install 'tg[ucx]'"
        ) from None
    except OSError as e:
        if "mpi4py.MPI" in sys.modules:
            raise ImportError(
                f"[distributed] backend 'ucx': ucxx could not load its UCX ({e}) because mpi4py was "
                f"imported first and loaded the MPI wheel's own UCX; import tg.distributed and call "
                f"init_process_group before importing mpi4py"
            ) from None
        raise
    after = config.environment()
    _ucxx_set.update({k: v for k, v in after.items() if k.startswith("UCX_") and k not in before})
    _api = api
    return api


class _Sent:
    """An in-flight send: wait() progresses the worker until UCX is done with the buffers."""

    def __init__(self, transport: UcxTransport, peer: int, requests: list, keep: tuple):
        self.t, self.peer, self.requests, self.keep = transport, peer, requests, keep

    def done(self) -> bool:
        return all(r.completed for r in self.requests)

    def wait(self, timeout: float | None = None) -> None:
        if not self.done():
            self.t.wait(self.requests, self.peer, f"sending to rank {self.peer}")


class _Posted:
    """A posted receive of a collective's data (UcxTransport.irecv)."""

    def __init__(self, transport: UcxTransport, peer: int, request: Any, nbytes: int, what: str):
        self.t, self.peer, self.request, self.nbytes, self.what = transport, peer, request, nbytes, what

    def wait(self) -> int:
        if self.request is not None:
            self.t.wait([self.request], self.peer, self.what)
        return self.nbytes


class UcxTransport(Transport):
    name = kind = "ucx"

    def __init__(self, rank: int, world: int, store: TCPStore, prefix: str, secret: bytes, timeout: float,
                 host: str):
        """`host`: the address this rank serves on (TG_DIST_HOST's rule, as init_process_group chose it).
        A loopback host keeps UCX to loopback (`context_options`)."""
        api = load_ucxx()
        from ucxx._lib.arr import Array
        self.api, self.Array = api, Array
        self.rank, self.world, self.timeout = rank, world, timeout
        # a group larger than this host's cores is (at least in part) oversubscribed: sleep sooner
        self.spin = SPIN_OVERSUBSCRIBED if world > len(os.sched_getaffinity(0)) else SPIN
        self.closed = self.closing = False
        self.engine: Any = None           # the C all_reduce (ucx_engine.py), once every rank has it
        self.lock = threading.RLock()
        self.worker = api.UCXWorker(ucx_context(context_options(host)))
        self.worker.init_blocking_progress_mode()
        self.fd = self.worker.epoll_file_descriptor
        store.set(f"{prefix}/ucx/{rank}", self.worker.address.tobytes())
        self.abort_buf = bytearray(4 + MAX_CONTROL)
        self.abort_req = self.worker.tag_recv(Array(self.abort_buf), api.UCXXTag(_tag(ABORT, 0, 0)),
                                              api.UCXXTagMask(_PART_MASK))
        self.eps: dict[int, Any] = {}       # data: no failure handling, so shared memory can carry it
        self.ctl: dict[int, Any] = {}       # control: the proof and ABORT; its closing names a dead peer
        self.in_flight: list[_Sent] = []
        self.inline: dict[int, memoryview | None] = {}   # the payload that came inside the last header
        for peer in range(world):
            if peer != rank:
                address = api.UCXAddress.create_from_buffer(store.get(f"{prefix}/ucx/{peer}"))
                self.ctl[peer] = api.UCXEndpoint.create_from_worker_address(self.worker, address, True)
                self.eps[peer] = api.UCXEndpoint.create_from_worker_address(self.worker, address, False)
        self._prove(secret, prefix)
        from tg.distributed.transport import ucx_engine
        self.engine = ucx_engine.start(self, store, prefix)

    def collectives(self, ranks: list[int]) -> Any:
        """The algorithms over this transport, with the large all_reduce in the engine (ucx_engine.py)
        when every rank has it."""
        from tg.distributed.transport.algorithms import OverTransport
        from tg.distributed.transport.ucx_engine import UcxCollectives
        return OverTransport(self, ranks) if self.engine is None else UcxCollectives(self, ranks, self.engine)

    def _proof(self, secret: bytes, prefix: str, src: int, dst: int, channel: int) -> bytes:
        return hmac.new(secret, f"tg-ucx|{prefix}|{src}->{dst}|{channel}".encode(), hashlib.sha256).digest()

    def _prove(self, secret: bytes, prefix: str) -> None:
        """Each rank sends every peer, over both endpoints (channel 0: control, 1: data), an HMAC of
        (prefix, itself, the peer, the channel) and checks the ones it gets."""
        mine = [(eps[p], channel, bytearray(self._proof(secret, prefix, self.rank, p, channel)))
                for channel, eps in enumerate((self.ctl, self.eps)) for p in eps]     # alive until sent
        sent = [ep.tag_send(self.Array(proof), self.api.UCXXTag(_tag(AUTH, channel, self.rank)))
                for ep, channel, proof in mine]
        for channel in (0, 1):
            for peer in self.eps:
                got = bytearray(32)
                tag = self.api.UCXXTag(_tag(AUTH, channel, peer))
                self.wait([self.worker.tag_recv(self.Array(got), tag)], peer, "connecting")
                if not hmac.compare_digest(bytes(got), self._proof(secret, prefix, peer, self.rank, channel)):
                    raise DistributedError(
                        f"[distributed] rank {self.rank}: the UCX endpoint of rank {peer} did not "
                        f"prove the job secret; check that every rank has the same TG_SECRET"
                    )
        self.wait(sent, None, "connecting")

    # ------------------------------------------------------------------ waiting
    def wait(self, requests: list, peer: int | None, what: str) -> None:
        """Progress until every request completes. Raises when the peer's control endpoint closes,
        when any rank aborts, or after the timeout."""
        deadline = 0.0
        polls = 0
        while True:
            armed = self._poll(requests, peer, what, polls >= self.spin)
            if armed is None:
                break
            if not deadline:
                deadline = time.monotonic() + self.timeout
            elif time.monotonic() > deadline:
                raise CollectiveTimeout(
                    f"[distributed] {what}: rank {self.rank} timed out after "
                    f"{self.timeout:.0f}s" + (f" waiting for rank {peer}" if peer is not None else "")
                )
            polls += 1
            if armed:
                select.select([self.fd], [], [], 0.05)
        for r in requests:
            try:
                r.check_error()
            except Exception as e:  # noqa: BLE001 - UCX's own error types
                raise DistributedError(f"[distributed] {what}: UCX failed ({type(e).__name__}: {e}); rank "
                                       f"{peer} died or aborted (noticed by rank {self.rank})") from None

    def _poll(self, requests: list, peer: int | None, what: str, may_sleep: bool) -> bool | None:
        """Progress the worker: None once every request completed, else whether it is armed (the caller
        then sleeps on its event fd). Raises on an ABORT message or a closed control endpoint."""
        with self.lock:
            while self.worker.progress_once():
                pass
            if all(r.completed for r in requests) and not self.abort_req.completed:
                return None
            self.failures(peer, what)
            return may_sleep and self.worker.arm()

    def failures(self, peer: int | None, what: str) -> None:
        """Raise what ucxx has seen go wrong: an ABORT message from any rank, or peer's control endpoint
        closed (a dead process)."""
        if self.abort_req.completed:
            raise DistributedError(self._abort_reason())
        if self.closing:
            raise DistributedError(f"[distributed] {what}: the group's transport was closed on rank "
                                   f"{self.rank} while the call waited")
        if peer is not None and not self.ctl[peer].alive:
            raise DistributedError(f"[distributed] rank {peer} died or aborted: {what}: its UCX endpoint "
                                   f"closed (noticed by rank {self.rank})")

    def _abort_reason(self) -> str:
        n = min(int.from_bytes(self.abort_buf[:4], "little"), MAX_CONTROL)
        return bytes(self.abort_buf[4:4 + n]).decode("utf-8", "replace")

    # ------------------------------------------------------------------ the algorithms' interface
    def _keep(self, sent: _Sent) -> _Sent:
        """Hold a send's buffers until UCX is done with them, even if nobody waits on it."""
        self.in_flight = [s for s in self.in_flight if not s.done()]
        self.in_flight.append(sent)
        return sent

    def _post(self, peer: int, messages: list[tuple[int, Any]]) -> _Sent:
        """Tagged sends of (tag, buffer) on peer's data endpoint, in order, kept until UCX is done."""
        with self.lock:
            ep = self.eps[peer]
            reqs = [ep.tag_send(self.Array(buf), self.api.UCXXTag(tag)) for tag, buf in messages]
            return self._keep(_Sent(self, peer, reqs, tuple(buf for _, buf in messages)))

    def _send(self, peer: int, channel: int, header: bytes, payload: Any) -> _Sent:
        """A frame: the header with the payload inside it (up to INLINE bytes), or then the payload."""
        if len(payload) <= INLINE:
            return self._post(peer, [(_tag(HEADER, channel, self.rank), bytearray(header) + payload)])
        return self._post(peer, [(_tag(HEADER, channel, self.rank), bytearray(header)),
                                 (_tag(PAYLOAD, channel, self.rank), payload)])

    def _recv(self, peer: int, part: int, channel: int, buf: Any, what: str) -> None:
        with self.lock:
            req = self.worker.tag_recv(self.Array(buf), self.api.UCXXTag(_tag(part, channel, peer)))
        self.wait([req], peer, what)

    def isend(self, peer: int, kind: int, seq: int, arg: int, payload: memoryview | bytes = b"") -> _Sent:
        """A collective's data goes alone (its receive was posted with its size); other frames with their
        header."""
        if kind != DATA:
            return self._send(peer, COLLECTIVE, header(kind, seq, arg, len(payload)), payload)
        return self._post(peer, [(_tag(DATA, COLLECTIVE, self.rank, seq), payload)])

    def send_control(self, peer: int, seq: int, payload: bytes, fixed: bool) -> Sent:
        """A fixed-size message goes without a header: its call's number, then the payload."""
        if not fixed:
            return Transport.send_control(self, peer, seq, payload, fixed)
        msg = SEQ.pack(seq & 0xFFFFFFFF) + payload
        return self._post(peer, [(_tag(CONTROL, COLLECTIVE, self.rank), msg)])

    def recv_control(self, peer: int, seq: int, size: int | None, what: str) -> bytes:
        if size is None:
            return Transport.recv_control(self, peer, seq, size, what)
        msg = bytearray(SEQ.size + size)
        self._recv(peer, CONTROL, COLLECTIVE, msg, what)
        check_in_step(DESC, SEQ.unpack_from(msg)[0], DESC, seq, peer, self.rank, what)
        return bytes(msg[SEQ.size:])

    def irecv(self, peer: int, seq: int, view: memoryview, what: str) -> _Posted:
        if not len(view):
            view = memoryview(bytearray(0))
        with self.lock:
            tag = self.api.UCXXTag(_tag(DATA, COLLECTIVE, peer, seq))
            req = self.worker.tag_recv(self.Array(view), tag)
        return _Posted(self, peer, req, len(view), what)

    def recv_frame(self, peer: int, expect_kind: int, seq: int, what: str) -> tuple[int, int, int]:
        raw = bytearray(FRAME.size + INLINE)
        self._recv(peer, HEADER, COLLECTIVE, raw, what)
        magic, kind, _flags, _r, fseq, arg, nbytes = FRAME.unpack_from(raw)
        self.inline[peer] = memoryview(raw)[FRAME.size:FRAME.size + nbytes] if nbytes <= INLINE else None
        if magic != MAGIC:
            raise DistributedError(f"[distributed] {what}: a malformed frame arrived from rank {peer}")
        if kind == DESC and nbytes > MAX_CONTROL:     # recv_bytes would allocate what it claims
            raise DistributedError(f"[distributed] {what}: rank {peer} sent a control frame of {nbytes} "
                                   f"bytes (at most {MAX_CONTROL})")
        check_in_step(kind, fseq, expect_kind, seq, peer, self.rank, what)
        return kind, arg, nbytes

    def recv_into(self, peer: int, buf: memoryview) -> None:
        inline, self.inline[peer] = self.inline.get(peer), None
        if inline is not None:
            view = buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
            if len(view) != len(inline):
                raise DistributedError(
                    f"[distributed] rank {peer} sent {len(inline)} bytes, rank {self.rank} "
                    f"expected {len(view)}"
                )
            view[:] = inline
            return
        self._recv(peer, PAYLOAD, COLLECTIVE, buf, f"receiving from rank {peer}")

    def recv_bytes(self, peer: int, n: int) -> bytes:
        buf = bytearray(n)
        if n:
            self.recv_into(peer, memoryview(buf))
        return bytes(buf)

    def p2p_send(self, peer: int, desc: bytes, payload: memoryview) -> None:
        head = FRAME.pack(MAGIC, P2P, 0, 0, 0, len(desc), len(desc) + len(payload)) + desc
        self._send(peer, POINT, head, payload).wait()     # _send inlines payloads up to INLINE bytes

    def p2p_recv(self, peer: int, desc: bytes, buf: memoryview, describe: Any) -> None:
        """The header message carries the descriptor (and the payload too when it is small)."""
        raw = bytearray(FRAME.size + MAX_CONTROL + INLINE)
        self._recv(peer, HEADER, POINT, raw, f"recv from rank {peer}")
        magic, kind, _f, _r, _s, dlen, nbytes = FRAME.unpack_from(raw)
        if magic != MAGIC or kind != P2P or dlen > MAX_CONTROL or nbytes < dlen:
            raise DistributedError(f"[distributed] recv from rank {peer}: a malformed message arrived")
        theirs = bytes(raw[FRAME.size:FRAME.size + dlen])
        inline = nbytes - dlen <= INLINE
        if theirs != desc or nbytes - dlen != len(buf):
            # take the payload, so the sender is not left waiting, unless it claims more than is sane to hold
            if not inline and nbytes - dlen <= (64 << 20):
                self._recv(peer, PAYLOAD, POINT, bytearray(nbytes - dlen), f"recv from rank {peer}")
            raise DistributedError(f"[distributed] recv from rank {peer}: it sent {describe(theirs)}, "
                                   f"rank {self.rank} expected {describe(desc)}")
        view = buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
        if inline:
            view[:] = raw[FRAME.size + dlen:FRAME.size + nbytes]
        elif len(buf):
            self._recv(peer, PAYLOAD, POINT, buf, f"recv from rank {peer}")

    # ------------------------------------------------------------------ failure and teardown
    def abort(self, reason: str) -> None:
        """Tell every peer why this rank stops (best effort, half a second), then close."""
        if self.closed:
            return
        body = reason.encode()[:MAX_CONTROL]
        msg = bytearray(struct.pack("<I", len(body)) + body)
        with self.lock:
            reqs = [ep.tag_send(self.Array(msg), self.api.UCXXTag(_tag(ABORT, 0, self.rank)))
                    for ep in self.ctl.values() if ep.alive]
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and not all(r.completed for r in reqs):
            with self.lock:
                self.worker.progress_once()
            time.sleep(0.001)
        self.close()

    def close(self) -> None:
        """Close every endpoint within a deadline. A data endpoint has no peer-failure handling (shared
        memory needs that), so flushing one whose peer died or is stopped never ends; ucxx gives up on
        a close after CLOSE_ATTEMPTS periods, but only while a progress thread drives the worker (without
        one it progresses until the flush ends): one runs for the closes."""
        if self.closed:
            return
        self.closing = True      # an engine call waiting in another thread stops (failures)
        self.closed = True
        with self.lock:
            # ucxx bounds an endpoint's close only while a progress thread drives the worker
            self.worker.start_progress_thread(polling_mode=True)
            try:
                for ep in [*self.eps.values(), *self.ctl.values()]:
                    try:
                        ep.close_blocking(period=CLOSE_PERIOD_NS, max_attempts=CLOSE_ATTEMPTS)
                    except Exception:  # noqa: BLE001 - the peer may be gone already
                        pass
            finally:
                self.worker.stop_progress_thread()
            self.eps.clear()
            self.ctl.clear()
            self.in_flight.clear()
        # dropped, not only closed: the engine and the sends kept refer back to this transport, and the
        # worker (its fds and memory) would otherwise wait for the cyclic garbage collector
        engine, self.engine = self.engine, None
        if engine is not None:        # outside the lock: a call waiting in the engine needs it to end
            engine.close()
