"""The `tcp` transport: one authenticated, full-duplex TCP connection per pair of ranks.

Frames are a fixed 24-byte header (magic, kind, sequence number, argument, payload bytes) and
the payload, received with `recv_into` straight into the destination. Large sends go through a
per-peer sender thread, so a rank can send to one peer while receiving from another (a ring step)
without deadlock; small sends go out directly. A peer that dies is noticed at once (its socket
reaches EOF); a rank that fails sends ABORT frames naming the culprit before closing, so every
rank raises within milliseconds instead of waiting for the timeout.
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tg import config
from tg.distributed.errors import CollectiveTimeout, DistributedError
from tg.distributed.store import Doorman, RejectLog, SecretRejected, TCPStore, prove, verify
from tg.distributed.transport.base import Transport
from tg.distributed.transport.shm import Segment, ShmRing, boot_id, pid_alive
from tg.distributed.transport.wire import ABORT, DATA, DESC, FRAME, MAGIC, MAX_CONTROL, P2P, check_in_step

log = logging.getLogger("tg.distributed.transport.tcp")
DIRECT_SEND = 1 << 16                  # smaller payloads are sent from the calling thread
PIECE = 256 << 10                      # bytes received and reduced at a time (fits L2)
IN_SHM = 1                             # frame flag: the payload waits in shared-memory slot `arg`
SHM_SLOTS, SHM_SLOT_BYTES = 8, 4 << 20


@dataclass
class _Peer:
    rank: int
    sock: socket.socket
    p2p: socket.socket
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    recv_lock: threading.Lock = field(default_factory=threading.Lock)
    state: threading.Lock = field(default_factory=threading.Lock)
    queue: queue.Queue = field(default_factory=queue.Queue)
    pending: int = 0
    thread: threading.Thread | None = None
    dead: str | None = None
    shm_out: ShmRing | None = None     # our slots for payloads to this peer (same host only)
    shm_in: ShmRing | None = None      # the peer's slots for payloads to us
    shm_slot: int | None = None        # slot of the frame just read, until its payload is taken
    pid: int = 0


class SendHandle:
    def __init__(self, what: str = "a send") -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.what = what

    def wait(self, timeout: float | None = None) -> None:
        if not self.done.wait(timeout):
            raise CollectiveTimeout(
                f"[distributed] {self.what} did not complete within {timeout:.0f}s: the peer "
                f"is alive but not receiving (stuck, or not in this collective)"
            )
        if self.error is not None:
            raise self.error


_DONE = SendHandle()
_DONE.done.set()


class _FrameReceive:
    """A DATA frame's payload into view, read when waited for (TcpTransport.irecv)."""

    def __init__(self, t: TcpTransport, peer: int, seq: int, view: memoryview, what: str):
        self.t, self.peer, self.seq, self.view, self.what = t, peer, seq, view, what

    def wait(self) -> int:
        _, _, n = self.t.recv_frame(self.peer, DATA, self.seq, self.what)
        if n == len(self.view) and n:
            self._take(n)
        return n

    def _take(self, n: int) -> None:
        self.t.recv_into(self.peer, self.view)


class _FrameReduce(_FrameReceive):
    """A DATA frame's payload reduced into dst (through tmp, or in place from a shared-memory slot),
    read when waited for (TcpTransport.irecv_reduce)."""

    def __init__(self, t: TcpTransport, peer: int, seq: int, dst: np.ndarray, reduce: Callable[..., None],
                 tmp: np.ndarray, base: np.ndarray | None, what: str):
        view = memoryview(tmp).cast("B") if tmp.nbytes else memoryview(b"")  # type: ignore[arg-type]
        super().__init__(t, peer, seq, view, what)
        self.dst, self.reduce, self.tmp, self.base = dst, reduce, tmp, base

    def _take(self, n: int) -> None:
        p = self.t.peers[self.peer]
        if p.shm_slot is None:
            # in pieces that stay in L2: each is read from the socket and reduced while still in cache
            # (one pass over the chunk through the tmp buffer would write and read it all in memory)
            step = max(PIECE // self.tmp.itemsize, 1)
            dst, base = self.dst.reshape(-1), None if self.base is None else self.base.reshape(-1)
            tmp = self.tmp.reshape(-1)[:step]
            for i in range(0, dst.size, step):
                piece = tmp[:min(step, dst.size - i)]
                self.t.recv_into(self.peer, memoryview(piece).cast("B"))  # type: ignore[arg-type]
                self.reduce(dst[i:i + len(piece)], piece, None if base is None else base[i:i + len(piece)])
            return
        assert p.shm_in is not None
        self.reduce(self.dst, p.shm_in.slot(p.shm_slot, n).view(self.dst.dtype), self.base)
        p.shm_slot = None
        p.shm_in.ctrl[0] += 1


def _cannot_map(rank: int, said: str) -> DistributedError:
    """The error for a rank that reported (as "error: why") it could not map its peers' engine segments."""
    return DistributedError(f"[distributed] rank {rank} could not map the shared memory of its peers: "
                            f"{said[len('error: '):]}")


def _unmapped(peer: int, creator: int, said: str) -> DistributedError:
    """The creator's error for a peer that reported (as "error: why") it could not map the creator's
    segment."""
    return DistributedError(f"[distributed] rank {peer} could not map the shared memory rank {creator} made "
                            f"for it: {said[len('error: '):]}")


class TcpTransport(Transport):
    name = "tcp"

    @property
    def kind(self) -> str:
        """tcp+shm: the collectives run in the shared-memory engine; tcp+rings: large payloads to peers
        on this host go through slot rings; tcp: sockets only."""
        if getattr(self, "engine", None) is not None:
            return "tcp+shm"
        return "tcp+rings" if getattr(self, "shm_peers", None) else "tcp"

    # Complexity: the connection set-up in order (listen, accept, connect, prove, exchange); each step's
    # failure is named where it happens.
    def __init__(self, rank: int, world: int, store: TCPStore, prefix: str, secret: bytes, host: str,  # noqa: C901
                 timeout: float):
        self.rank, self.world, self.timeout, self.secret = rank, world, timeout, secret
        self.peers: dict[int, _Peer] = {}
        self.sent_bytes = 0               # payload bytes of the frames this rank has sent (collectives' data)
        self._count = threading.Lock()
        self.closed = False
        self.abort_reason: str | None = None
        listener = socket.create_server((host, 0), backlog=max(world, 8))
        store.set(f"{prefix}/tcp/{rank}", f"{host}:{listener.getsockname()[1]}")
        expected = {(peer, ch) for peer in range(rank + 1, world) for ch in (0, 1)}
        accepted: dict[tuple[int, int], socket.socket] = {}
        errors: list[str] = []

        lock = threading.Lock()
        all_in, stopping = threading.Event(), threading.Event()
        rejects = RejectLog(log, f"[distributed] rank {rank}")

        def admit(conn: socket.socket, addr: tuple) -> None:
            # each connection proves the secret on its own thread: a silent one delays nobody
            if not verify(conn, secret, b"tg-transport", admit=lambda: door.admitted(conn),
                          rejected=lambda: rejects.rejected(addr)):
                door.drop(conn)
                conn.close()   # a stray or hostile connection: rejected, the job carries on
                return
            try:
                peer, channel = struct.unpack("<IB", _recv_exact(conn, 5, timeout))
            except (OSError, ConnectionError, TimeoutError):
                conn.close()
                return
            with lock:
                if (peer, channel) in expected and (peer, channel) not in accepted:
                    accepted[(peer, channel)] = conn
                    if len(accepted) == len(expected):
                        all_in.set()
                    return
            conn.close()

        # the store's accept loop: it waits out a shortage of descriptors, and caps unproven connections
        door = Doorman(listener, admit, f"[distributed] rank {rank}",
                       lambda: all_in.is_set() or stopping.is_set(), "tg-tcp-admit", least=len(expected))

        def accept_all() -> None:
            if not expected:
                all_in.set()
                return
            listener.settimeout(timeout)
            error = door.run()
            if error is not None:
                errors.append(error)
        acceptor = threading.Thread(target=accept_all, daemon=True)
        acceptor.start()
        outgoing: dict[tuple[int, int], socket.socket] = {}
        for peer in range(rank):
            host_port = store.get(f"{prefix}/tcp/{peer}").decode()
            h, p = host_port.rsplit(":", 1)
            for channel in (0, 1):     # 0: collectives, 1: point-to-point (they never interleave)
                sock = _connect_proven(h, int(p), secret, timeout)
                sock.sendall(struct.pack("<IB", rank, channel))
                outgoing[(peer, channel)] = sock
        all_in.wait(timeout)
        # shutdown wakes the acceptor (close alone does not): it would otherwise sit in accept() until the
        # timeout, a thread per group made
        stopping.set()
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
        acceptor.join()
        rejects.flush()
        if len(accepted) < len(expected):
            missing = sorted({peer for peer, _ in expected - set(accepted)})
            raise DistributedError(f"[distributed] rank {rank}: ranks {missing} never connected within "
                                   f"{timeout:.0f}s {errors[:1]}")
        both = {**outgoing, **accepted}
        for peer in sorted({peer for peer, _ in both}):
            self._add_peer(peer, both[(peer, 0)], both[(peer, 1)])
        self.shm_peers: list[int] = []
        self.engine: Any = None
        if config.TG_SHM and world > 1:
            self._setup_shm(store, prefix)

    # Complexity: two phases (create, then attach and confirm) whose failures must each be reported to
    # the peer at once.
    def _setup_shm(self, store: TCPStore, prefix: str) -> None:  # noqa: C901
        """The shared-memory engine when every rank is on this host, else slot rings to every peer on this
        host. Segment files are unlinked once every side maps them."""
        store.set(f"{prefix}/host/{self.rank}", f"{boot_id()}|{os.getpid()}")
        me = boot_id()
        local = []
        for peer in self.peers:
            host, _, pid = store.get(f"{prefix}/host/{peer}").decode().rpartition("|")
            if host == me:
                self.peers[peer].pid = int(pid)
                local.append(peer)
        if config.TG_SHM == 1 and len(local) == self.world - 1 and self._setup_engine(store, prefix):
            self.shm_peers = local
            return
        created = {}
        try:
            for peer in local:
                try:
                    ring = ShmRing.create(SHM_SLOTS, SHM_SLOT_BYTES)
                except OSError as e:      # /dev/shm too small (a container's 64 MB): TCP for this pair
                    log.warning("[distributed] rank %d: no shared memory for rank %d (%s); using TCP",
                                self.rank, peer, e)
                    store.set(f"{prefix}/shm/{self.rank}->{peer}", "none")
                    store.set(f"{prefix}/shmok/{self.rank}->{peer}", "1")
                    continue
                created[peer] = ring
                self.peers[peer].shm_out = ring
                store.set(f"{prefix}/shm/{self.rank}->{peer}", ring.path)
            for peer in local:
                path = store.get(f"{prefix}/shm/{peer}->{self.rank}").decode()
                if path != "none":
                    try:
                        self.peers[peer].shm_in = ShmRing.attach(path, SHM_SLOTS, SHM_SLOT_BYTES)
                    except DistributedError as e:    # tell the creator now, not after its timeout
                        store.set(f"{prefix}/shmok/{peer}->{self.rank}", f"error: {e}")
                        # The peer may have failed first and removed its segment on the way out:
                        # its report is the cause, the missing file only the effect.
                        try:
                            said = store.compare_set(
                                f"{prefix}/shmok/{self.rank}->{peer}", b"\0peek", b""
                            ).decode()
                        except (DistributedError, OSError):
                            # the creator read our report and left, taking the store with it: our own
                            # error is the cause to report, not the lost connection
                            raise e from None
                        if said.startswith("error: "):
                            raise _unmapped(peer, self.rank, said) from e
                        raise
                    store.set(f"{prefix}/shmok/{peer}->{self.rank}", "1")
            for peer in local:
                key = f"{prefix}/shmok/{self.rank}->{peer}"
                store.wait([key], timeout=self.timeout)
                said = store.get(key).decode()
                if said != "1":
                    raise _unmapped(peer, self.rank, said)
        finally:
            for ring in created.values():
                ring.unlink()          # mapped by both sides now (or setup failed): nothing to leak
        self.shm_peers = local

    def collectives(self, ranks: list[int]) -> Any:
        """The group's collectives: the shared-memory engine when it was set up, else the algorithms
        over this transport's frames."""
        from tg.distributed.transport.algorithms import OverTransport
        return OverTransport(self, ranks) if self.engine is None else self.engine.named(ranks)

    def _setup_engine(self, store: TCPStore, prefix: str) -> bool:
        """Map every rank's engine segment (see shm_engine.py); False when a rank could not make one
        (no C compiler, a full /dev/shm: every rank then falls back alike, and says why)."""
        from tg.core.compiler import CompileError
        from tg.distributed.transport import shm_engine
        own: Segment | None = None
        try:
            size = shm_engine.segment_bytes()
            own = Segment.create(size)
            store.set(f"{prefix}/engine/{self.rank}", own.path)
        except (CompileError, OSError) as e:
            log.warning("[distributed] rank %d: no shared-memory engine (%s); collectives use the slot rings",
                        self.rank, e)
            store.set(f"{prefix}/engine/{self.rank}", "none")
        try:
            paths = [store.get(f"{prefix}/engine/{r}").decode() for r in range(self.world)]
            if "none" in paths:
                if own is not None:
                    own.close()
                return False
            assert own is not None
            segments = self._attach_all(store, prefix, own, paths, size)
        finally:
            if own is not None:
                own.unlink()       # mapped by every rank now (or set-up failed): nothing to leak
        fds = [-1 if r == self.rank else self.peers[r].sock.fileno() for r in range(self.world)]
        self.engine = shm_engine.ShmEngine(self.rank, segments, fds, self.timeout, self._why)
        return True

    def _attach_all(self, store: TCPStore, prefix: str, own: Segment, paths: list[str],
                    size: int) -> list[Segment]:
        """Every rank's segment (own for this rank's), once every rank reported it mapped them all."""
        key = f"{prefix}/engineok/{{}}".format
        try:
            segments = [own if r == self.rank else Segment.attach(p, size) for r, p in enumerate(paths)]
        except DistributedError as e:
            store.set(key(self.rank), f"error: {e}")
            # a peer that failed first removed its segment on the way out: its report is the cause,
            # the missing file only the effect
            try:
                said = [store.compare_set(key(r), b"\0peek", b"").decode() for r in range(self.world)]
            except (DistributedError, OSError):
                raise e from None      # the store's host left after reading our report
            failed = [r for r in range(self.world) if r != self.rank and said[r].startswith("error: ")]
            if failed:
                raise _cannot_map(failed[0], said[failed[0]]) from e
            raise
        store.set(key(self.rank), "1")
        for r in range(self.world):
            store.wait([key(r)], timeout=self.timeout)
            said_r = store.get(key(r)).decode()
            if said_r != "1":
                raise _cannot_map(r, said_r)
        return segments

    def _why(self, peer: int, what: str) -> None:
        """Raise what ended the engine's wait on peer's connection: its ABORT frame, or its death."""
        self.recv_frame(peer, ABORT, 0, what)

    def _add_peer(self, peer: int, sock: socket.socket, p2p: socket.socket) -> None:
        # Blocking sockets with kernel-level timeouts: no poll per call, and no read or write ever
        # blocks longer than the job's timeout (a peer that is alive but stuck included). Buffer sizes
        # are left to Linux's autotuning (up to tcp_rmem/tcp_wmem's maximum): a fixed SO_SNDBUF/
        # SO_RCVBUF turns it off and is capped by rmem_max (208 KiB on many hosts); at 32 MiB over
        # loopback autotuning measured 10.8-10.9 ms against 11.1-11.3 ms with 4 MiB.
        tv = struct.pack("ll", int(self.timeout), int((self.timeout % 1) * 1e6))
        for sk in (sock, p2p):
            sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sk.settimeout(None)
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        p = _Peer(peer, sock, p2p)
        p.thread = threading.Thread(target=self._sender, args=(p,), daemon=True, name=f"tg-send-{peer}")
        p.thread.start()
        self.peers[peer] = p

    # ------------------------------------------------------------------ sending
    def _sender(self, p: _Peer) -> None:
        while True:
            item = p.queue.get()
            if item is None:
                return
            header, payload, handle = item
            try:
                if p.shm_out is not None and 0 < len(payload) <= SHM_SLOT_BYTES:
                    slot = p.shm_out.put(payload, lambda: pid_alive(p.pid) and not self.closed, self.timeout)
                    magic, kind, _f, _r, seq, _arg, nbytes = FRAME.unpack(header)
                    header, payload = FRAME.pack(magic, kind, IN_SHM, 0, seq, slot, nbytes), b""
                with p.send_lock:
                    p.sock.sendall(header)
                    if len(payload):
                        p.sock.sendall(payload)
            except BaseException as e:  # noqa: BLE001 - every failure reaches the waiting caller
                late = isinstance(e, (CollectiveTimeout, TimeoutError))
                handle.error = (CollectiveTimeout if late else DistributedError)(
                    f"[distributed] rank {self.rank}: sending to rank {p.rank} "
                    f"failed ({e}); rank {p.rank} died, aborted or stopped reading"
                )
            finally:
                with p.state:
                    p.pending -= 1
                handle.done.set()

    def isend(
        self, peer: int, kind: int, seq: int, arg: int, payload: memoryview | bytes = b""
    ) -> SendHandle:
        p = self.peers[peer]
        header = FRAME.pack(MAGIC, kind, 0, 0, seq & 0xFFFFFFFF, arg & 0xFFFFFFFF, len(payload))
        with self._count:
            self.sent_bytes += len(payload)
        with p.state:
            direct = p.pending == 0 and len(payload) <= DIRECT_SEND
            if not direct:
                p.pending += 1
        if direct:
            try:
                with p.send_lock:
                    p.sock.sendall(header + bytes(payload) if len(payload) else header)
            except TimeoutError:
                raise CollectiveTimeout(f"[distributed] rank {self.rank} timed out after {self.timeout:.0f}s "
                                        f"sending to rank {peer}: it stopped reading") from None
            except OSError as e:
                raise self._peer_error(p, f"sending failed ({e})") from None
            return _DONE
        handle = SendHandle(f"rank {self.rank} sending to rank {peer}")
        p.queue.put((header, payload, handle))
        return handle

    # ------------------------------------------------------------------ receiving
    def recv_frame(self, peer: int, expect_kind: int, seq: int, what: str) -> tuple[int, int, int]:
        """Read the next frame header from peer: (kind, arg, payload bytes). ABORT frames raise."""
        p = self.peers[peer]
        try:
            raw = _recv_exact(p.sock, FRAME.size)
        except TimeoutError:
            raise CollectiveTimeout(
                f"[distributed] {what}: rank {self.rank} timed out after {self.timeout:.0f}s "
                f"waiting for rank {peer}"
            ) from None
        except (OSError, ConnectionError):
            raise self._peer_error(p, f"{what}: the connection closed") from None
        magic, kind, flags, _r, fseq, arg, nbytes = FRAME.unpack(raw)
        p.shm_slot = arg if flags & IN_SHM else None
        if magic != MAGIC:
            raise self._peer_error(p, f"{what}: a malformed frame arrived")
        if kind in (ABORT, DESC) and nbytes > MAX_CONTROL:
            raise self._peer_error(
                p, f"{what}: a control frame claims {nbytes} bytes (at most {MAX_CONTROL})"
            )
        if kind == ABORT:
            reason = _recv_exact(p.sock, nbytes).decode("utf-8", "replace")
            raise DistributedError(reason)
        check_in_step(kind, fseq, expect_kind, seq, peer, self.rank, what)
        return kind, arg, nbytes

    def recv_into(self, peer: int, buf: memoryview) -> None:
        """The payload after a frame header: blocking reads (a peer that dies mid-message shows as EOF)."""
        p = self.peers[peer]
        if p.shm_slot is not None:
            assert p.shm_in is not None
            slot, p.shm_slot = p.shm_slot, None
            p.shm_in.take(slot, buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf)
            return
        try:
            _recv_into_exact(p.sock, buf)
        except TimeoutError:
            raise CollectiveTimeout(
                f"[distributed] rank {self.rank} timed out after {self.timeout:.0f}s receiving "
                f"from rank {peer}"
            ) from None
        except (OSError, ConnectionError):
            raise self._peer_error(p, "the connection closed mid-message") from None

    def irecv(self, peer: int, seq: int, view: memoryview, what: str) -> _FrameReceive:
        """Deferred: frames arrive in order on the peer's socket, so the read happens at wait()."""
        return _FrameReceive(self, peer, seq, view, what)

    def irecv_reduce(self, peer: int, seq: int, dst: np.ndarray, reduce: Callable[..., None], tmp: np.ndarray,
                     base: np.ndarray | None, what: str) -> _FrameReduce:
        """Deferred as irecv; a payload waiting in a shared-memory slot is reduced from there in place."""
        return _FrameReduce(self, peer, seq, dst, reduce, tmp, base, what)

    def p2p_send(self, peer: int, desc: bytes, payload: memoryview) -> None:
        """One message on the point-to-point connection: header, descriptor, data."""
        p = self.peers[peer]
        header = FRAME.pack(MAGIC, P2P, 0, 0, 0, len(desc), len(desc) + len(payload))
        try:
            with p.state:     # one writer at a time on this connection
                p.p2p.sendall(header + desc)
                if len(payload):
                    p.p2p.sendall(payload)
        except OSError as e:
            raise DistributedError(f"[distributed] send to rank {peer} failed ({e}); it died or stopped "
                                   f"receiving (noticed by rank {self.rank})") from None

    def p2p_recv(self, peer: int, desc: bytes, buf: memoryview, describe) -> None:
        """Receive the next point-to-point message from peer into buf, checking its descriptor."""
        p = self.peers[peer]
        try:
            magic, kind, _f, _r, _s, dlen, nbytes = FRAME.unpack(_recv_exact(p.p2p, FRAME.size))
            if magic != MAGIC or kind != P2P or dlen > MAX_CONTROL or nbytes < dlen:
                raise DistributedError(f"[distributed] recv from rank {peer}: a malformed message arrived")
            theirs = _recv_exact(p.p2p, dlen)
            if theirs != desc or nbytes - dlen != len(buf):
                if nbytes - dlen <= (64 << 20):    # read it away in pieces: never allocate a claimed size
                    _discard(p.p2p, nbytes - dlen)
                raise DistributedError(f"[distributed] recv from rank {peer}: it sent {describe(theirs)}, "
                                       f"rank {self.rank} expected {describe(desc)}")
            if len(buf):
                _recv_into_exact(p.p2p, buf)
        except TimeoutError:
            raise CollectiveTimeout(
                f"[distributed] recv: rank {self.rank} timed out after {self.timeout:.0f}s "
                f"waiting for rank {peer}"
            ) from None
        except (OSError, ConnectionError) as e:
            raise DistributedError(f"[distributed] recv from rank {peer} failed ({e}); it died or aborted "
                                   f"(noticed by rank {self.rank})") from None

    def recv_bytes(self, peer: int, n: int) -> bytes:
        buf = bytearray(n)
        self.recv_into(peer, memoryview(buf))
        return bytes(buf)

    def _peer_error(self, p: _Peer, detail: str) -> DistributedError:
        """The error for a failed exchange with p: the reason p gave in an ABORT frame if it sent one
        before closing (read what it left in the socket), else that p died."""
        reason = self._drain_for_abort(p)
        if reason is not None:
            return DistributedError(reason)
        return DistributedError(f"[distributed] rank {p.rank} died or aborted: {detail} "
                                f"(noticed by rank {self.rank})")

    def _drain_for_abort(self, p: _Peer, limit: int = 64 << 20) -> str | None:
        if not p.recv_lock.acquire(timeout=0.5):
            return None
        try:
            seen = 0
            while seen < limit:
                raw = _recv_exact(p.sock, FRAME.size, 0.5)
                magic, kind, _f, _r, _seq, _arg, nbytes = FRAME.unpack(raw)
                if magic != MAGIC:
                    return None
                if kind == ABORT:
                    return _recv_exact(p.sock, min(nbytes, MAX_CONTROL), 0.5).decode("utf-8", "replace")
                if nbytes > limit - seen:
                    return None
                _discard(p.sock, nbytes, 0.5)     # a frame still in the socket: skipped, never held whole
                seen += FRAME.size + nbytes
        except (OSError, ConnectionError, ValueError, TimeoutError):
            return None
        finally:
            p.recv_lock.release()
        return None

    # ------------------------------------------------------------------ failure and teardown
    def abort(self, reason: str) -> None:
        """Tell every peer why this rank stops (best effort), then close everything."""
        if self.closed:
            return
        msg = reason.encode()[:MAX_CONTROL]
        for p in self.peers.values():
            if not p.send_lock.acquire(timeout=0.5):
                continue          # a sender is stuck on this peer: close() below unblocks it
            try:
                p.sock.settimeout(0.5)
                p.sock.sendall(FRAME.pack(MAGIC, ABORT, 0, 0, 0, self.rank, len(msg)) + msg)
            except OSError:
                pass
            finally:
                p.send_lock.release()
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for p in self.peers.values():
            p.queue.put(None)
            for sk in (p.sock, p.p2p):
                try:
                    sk.shutdown(socket.SHUT_RDWR)    # wakes a wait in the engine, which polls these
                except OSError:
                    pass
        # the engine goes before the sockets: their numbers must not be reused while it may poll them
        # (a call that does not end leaves the engine, and so the sockets, to the process's exit)
        freed = self.engine.close() if self.engine is not None else True
        for p in self.peers.values():
            if freed:
                p.sock.close()
                p.p2p.close()
            for ring in (p.shm_out, p.shm_in):
                if ring is not None:
                    ring.unlink()
                    ring.close()


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            return socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.1))
        except OSError as e:
            if time.monotonic() + delay > deadline:
                raise DistributedError(
                    f"[distributed] could not connect to {host}:{port} within {timeout:.0f}s: {e}"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _connect_proven(host: str, port: int, secret: bytes, timeout: float) -> socket.socket:
    """A connection to a peer's listener that proved the job secret. A listener full of unproven
    connections closes the oldest without a verdict (store.Doorman): then connect again, until the
    timeout."""
    deadline = time.monotonic() + timeout
    while True:
        sock = _connect(host, port, max(deadline - time.monotonic(), 0.1))
        try:
            prove(sock, secret, b"tg-transport")
            return sock
        except SecretRejected:
            sock.close()
            raise DistributedError(f"[distributed] the peer at {host}:{port} rejected this rank's job "
                                   f"secret; every rank must get the same TG_SECRET (tglaunch sets it)"
                                   ) from None
        except (OSError, ConnectionError) as e:
            sock.close()
            if time.monotonic() > deadline:
                raise DistributedError(f"[distributed] the peer at {host}:{port} kept closing the connection "
                                       f"before the handshake for {timeout:.0f}s ({e}): more connections "
                                       f"than TG_STORE_MAX_UNPROVEN reach it at once; raise it") from None
            time.sleep(0.01)


def _recv_exact(sock: socket.socket, n: int, timeout: float | None = None) -> bytes:
    buf = bytearray(n)
    _recv_into_exact(sock, memoryview(buf), timeout)
    return bytes(buf)


def _discard(sock: socket.socket, n: int, timeout: float | None = None) -> None:
    """Read n bytes and drop them, through one small buffer."""
    piece = memoryview(bytearray(min(n, 1 << 16)))
    while n > 0:
        _recv_into_exact(sock, piece[:min(n, len(piece))], timeout)
        n -= min(n, len(piece))


def _recv_into_exact(sock: socket.socket, view: memoryview, timeout: float | None = None) -> None:
    """Fill view from sock. Without `timeout` the socket's own (kernel) receive timeout applies."""
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    got, n = 0, len(view)
    if timeout is not None:
        sock.settimeout(timeout)
    try:
        while got < n:
            try:
                k = sock.recv_into(view[got:])
            except BlockingIOError:
                raise TimeoutError("receive timed out") from None   # SO_RCVTIMEO expired
            if k == 0:
                raise ConnectionError("connection closed")
            got += k
    finally:
        if timeout is not None:
            sock.settimeout(None)
