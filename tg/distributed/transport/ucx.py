"""The `ucx` transport: UCX through ucxx (`ucxx-cu13`), under the shared collective algorithms.

Each rank opens one UCX worker per group and publishes its worker address in the rendezvous
store; peers connect by worker address (not through a listener), which lets UCX pick shared
memory between ranks on one host and TCP (or RDMA) across hosts. Messages are UCX tagged sends:
a frame is one message holding the 24-byte header and a small payload (up to 8 KiB), or a header
message then a payload message received straight into the destination buffer. The tag says which
part it is, which channel (collectives or point-to-point) and which rank sent it; UCX keeps
messages with equal tags from one sender in order.

Waiting progresses the worker, then sleeps on its event file descriptor (no core is burnt while a
peer computes). While waiting for a peer, a closed endpoint (UCX reports a dead process at once)
raises naming that peer, and a standing receive catches the ABORT message a failing rank sends to
everyone, so all ranks raise within milliseconds with the first failure's reason.

Security: worker addresses are only handed out by the authenticated store, and every endpoint
proves the job secret (an HMAC over both ranks) before use. That handshake is all UCX authenticates:
its tagged messages carry no proof and do not identify the sending endpoint, so a process that can
reach a worker's UCX ports could inject messages. UCX's TCP transport listens on every interface it
uses, so for a job whose transport host is loopback (the master is local) tg creates the UCX context
with UCX_NET_DEVICES=lo and UCX_TLS=self,sm,tcp (`context_options`; a UCX_* variable the user set
wins): nothing listens beyond loopback. Across hosts, run ucx only on a private network (and point
UCX_NET_DEVICES at it); on an untrusted network, use the tcp backend.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import select
import socket
import struct
import sys
import threading
import time
from typing import Any

from tg import config
from tg.distributed.errors import DistributedError
from tg.distributed.store import TCPStore
from tg.distributed.transport.base import Transport
from tg.distributed.transport.wire import DESC, FRAME, MAGIC, MAX_CONTROL, P2P, check_in_step

HEADER, DATA, ABORT, AUTH = 0, 1, 2, 3          # tag part
COLLECTIVE, POINT = 0, 1                        # tag channel
SPIN = 200                                      # progress polls before sleeping on the event fd
INLINE = 8 << 10                                # payloads up to this ride in the header's message
_PART_MASK = 0xF << 36
# a job on one host: UCX's TCP on the loopback device only (and shared memory), so no UCX port is
# reachable from another host; keys are UCX options without the UCX_ prefix
LOOPBACK_ONLY = {"NET_DEVICES": "lo", "TLS": "self,sm,tcp"}

log = logging.getLogger("tg.distributed.transport.ucx")


def _tag(part: int, channel: int, src: int) -> int:
    return (part << 36) | (channel << 32) | src


_api: Any = None
_contexts: dict[tuple[tuple[str, str], ...], Any] = {}     # one UCP context per set of options


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def context_options(host: str) -> dict[str, str]:
    """The UCX options tg sets for a transport whose rank serves on `host`: LOOPBACK_ONLY when `host`
    is a loopback address, else none; an option whose UCX_ variable the user set is left to UCX.

        >>> context_options("10.0.0.7")
        {}
    """
    if not _is_loopback(host):
        return {}
    user = config.environment()
    chosen = {k: v for k, v in LOOPBACK_ONLY.items() if f"UCX_{k}" not in user}
    kept = {f"UCX_{k}": user[f"UCX_{k}"] for k in LOOPBACK_ONLY if f"UCX_{k}" in user}
    log.debug("[distributed] ucx: transport host %s is loopback, so UCX is kept to it: %s%s", host,
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
    _api = api
    return api


class _Sent:
    """An in-flight send: wait() progresses the worker until UCX is done with the buffers."""

    def __init__(self, transport: UcxTransport, peer: int, requests: list, keep: tuple):
        self.t, self.peer, self.requests, self.keep = transport, peer, requests, keep

    def done(self) -> bool:
        return all(r.completed for r in self.requests)

    def wait(self, timeout: float | None = None) -> None:
        self.t.wait(self.requests, self.peer, f"sending to rank {self.peer}")


class UcxTransport(Transport):
    name = kind = "ucx"

    def __init__(self, rank: int, world: int, store: TCPStore, prefix: str, secret: bytes, timeout: float,
                 host: str | None = None):
        """`host`: the address this rank serves on (TG_DIST_HOST's rule); None takes the one
        init_process_group chose. A loopback host keeps UCX to loopback (`context_options`)."""
        if host is None:
            from tg.distributed import _State
            host = _State.host
        api = load_ucxx()
        from ucxx._lib.arr import Array
        self.api, self.Array = api, Array
        self.rank, self.world, self.timeout = rank, world, timeout
        self.closed = False
        self.lock = threading.RLock()
        self.worker = api.UCXWorker(ucx_context(context_options(host)))
        self.worker.init_blocking_progress_mode()
        self.fd = self.worker.epoll_file_descriptor
        store.set(f"{prefix}/ucx/{rank}", self.worker.address.tobytes())
        self.abort_buf = bytearray(4 + MAX_CONTROL)
        self.abort_req = self.worker.tag_recv(Array(self.abort_buf), api.UCXXTag(_tag(ABORT, 0, 0)),
                                              api.UCXXTagMask(_PART_MASK))
        self.eps: dict[int, Any] = {}
        self.in_flight: list[_Sent] = []
        self.inline: dict[int, memoryview | None] = {}   # the payload that came inside the last header
        for peer in range(world):
            if peer != rank:
                address = api.UCXAddress.create_from_buffer(store.get(f"{prefix}/ucx/{peer}"))
                self.eps[peer] = api.UCXEndpoint.create_from_worker_address(self.worker, address, True)
        self._prove(secret, prefix)

    def _proof(self, secret: bytes, prefix: str, src: int, dst: int) -> bytes:
        return hmac.new(secret, f"tg-ucx|{prefix}|{src}->{dst}".encode(), hashlib.sha256).digest()

    def _prove(self, secret: bytes, prefix: str) -> None:
        """Each rank sends every peer an HMAC of (prefix, itself, the peer) and checks the ones it gets."""
        proofs = [bytearray(self._proof(secret, prefix, self.rank, p)) for p in self.eps]   # alive until sent
        sent = [ep.tag_send(self.Array(proof), self.api.UCXXTag(_tag(AUTH, 0, self.rank)))
                for ep, proof in zip(self.eps.values(), proofs)]
        for peer in self.eps:
            got = bytearray(32)
            self.wait([self.worker.tag_recv(self.Array(got), self.api.UCXXTag(_tag(AUTH, 0, peer)))], peer,
                      "connecting")
            if not hmac.compare_digest(bytes(got), self._proof(secret, prefix, peer, self.rank)):
                raise DistributedError(
                    f"[distributed] rank {self.rank}: the UCX endpoint of rank {peer} did not "
                    f"prove the job secret; check that every rank has the same TG_SECRET"
                )
        self.wait(sent, None, "connecting")

    # ------------------------------------------------------------------ waiting
    def wait(self, requests: list, peer: int | None, what: str) -> None:
        """Progress until every request completes. Raises when the peer's endpoint closes, when any
        rank aborts, or after the timeout."""
        deadline = time.monotonic() + self.timeout
        polls = 0
        while True:
            with self.lock:
                while self.worker.progress_once():
                    pass
                if self.abort_req.completed:
                    raise DistributedError(self._abort_reason())
                if all(r.completed for r in requests):
                    break
                if peer is not None and not self.eps[peer].alive:
                    raise DistributedError(
                        f"[distributed] rank {peer} died or aborted: {what}: its UCX endpoint "
                        f"closed (noticed by rank {self.rank})"
                    )
                armed = polls >= SPIN and self.worker.arm()
            if time.monotonic() > deadline:
                raise DistributedError(
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

    def _abort_reason(self) -> str:
        n = min(int.from_bytes(self.abort_buf[:4], "little"), MAX_CONTROL)
        return bytes(self.abort_buf[4:4 + n]).decode("utf-8", "replace")

    # ------------------------------------------------------------------ the algorithms' interface
    def _send(self, peer: int, channel: int, header: bytes, payload: Any) -> _Sent:
        inline = len(payload) <= INLINE
        head = bytearray(header) + payload if inline else bytearray(header)
        with self.lock:
            ep = self.eps[peer]
            reqs = [ep.tag_send(self.Array(head), self.api.UCXXTag(_tag(HEADER, channel, self.rank)))]
            if not inline:
                reqs.append(
                    ep.tag_send(self.Array(payload), self.api.UCXXTag(_tag(DATA, channel, self.rank)))
                )
            sent = _Sent(self, peer, reqs, (head, payload))
            self.in_flight = [s for s in self.in_flight if not s.done()]
            self.in_flight.append(sent)     # its buffers live until UCX is done, even if nobody waits on it
        return sent

    def _recv(self, peer: int, part: int, channel: int, buf: Any, what: str) -> None:
        with self.lock:
            req = self.worker.tag_recv(self.Array(buf), self.api.UCXXTag(_tag(part, channel, peer)))
        self.wait([req], peer, what)

    def isend(self, peer: int, kind: int, seq: int, arg: int, payload: memoryview | bytes = b"") -> _Sent:
        header = FRAME.pack(MAGIC, kind, 0, 0, seq & 0xFFFFFFFF, arg & 0xFFFFFFFF, len(payload))
        return self._send(peer, COLLECTIVE, header, payload)

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
        self._recv(peer, DATA, COLLECTIVE, buf, f"receiving from rank {peer}")

    def recv_bytes(self, peer: int, n: int) -> bytes:
        buf = bytearray(n)
        if n:
            self.recv_into(peer, memoryview(buf))
        return bytes(buf)

    def p2p_send(self, peer: int, desc: bytes, payload: memoryview) -> None:
        header = FRAME.pack(MAGIC, P2P, 0, 0, 0, len(desc), len(desc) + len(payload)) + desc
        self._send(peer, POINT, header, payload).wait()     # _send inlines payloads up to INLINE bytes

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
                self._recv(peer, DATA, POINT, bytearray(nbytes - dlen), f"recv from rank {peer}")
            raise DistributedError(f"[distributed] recv from rank {peer}: it sent {describe(theirs)}, "
                                   f"rank {self.rank} expected {describe(desc)}")
        view = buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
        if inline:
            view[:] = raw[FRAME.size + dlen:FRAME.size + nbytes]
        elif len(buf):
            self._recv(peer, DATA, POINT, buf, f"recv from rank {peer}")

    # ------------------------------------------------------------------ failure and teardown
    def abort(self, reason: str) -> None:
        """Tell every peer why this rank stops (best effort, half a second), then close."""
        if self.closed:
            return
        body = reason.encode()[:MAX_CONTROL]
        msg = bytearray(struct.pack("<I", len(body)) + body)
        with self.lock:
            reqs = [ep.tag_send(self.Array(msg), self.api.UCXXTag(_tag(ABORT, 0, self.rank)))
                    for ep in self.eps.values() if ep.alive]
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and not all(r.completed for r in reqs):
            with self.lock:
                self.worker.progress_once()
            time.sleep(0.001)
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self.lock:
            for ep in self.eps.values():
                try:
                    ep.close_blocking(
                        period=10**8, max_attempts=1
                    )  # flushes what is in flight, 0.1 s at most
                except Exception:  # noqa: BLE001 - the peer may be gone already
                    pass
            self.eps.clear()
