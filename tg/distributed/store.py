"""The rendezvous store: a small TCP key-value server (set, get, add, wait, compare_set, delete)
hosted by rank 0 or by the launcher.

Security and framing: the server binds only to the address it is given. On every new connection
it first sends a random challenge; the client must answer with HMAC-SHA256(secret, challenge)
before the server reads anything else. Requests and replies are fixed binary frames (magic,
version, op, lengths), never pickle; a malformed frame closes that connection and is logged, and
the server carries on.

    >>> server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s3cret")
    >>> client = TCPStore("127.0.0.1", server.port, secret=b"s3cret")
    >>> client.set("k", b"v"); client.get("k")
    b'v'
    >>> client.add("n", 2), client.add("n", 3)
    (2, 5)
    >>> client.close(); server.close()
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
import time

from tg.distributed.errors import DistributedError  # noqa: E402

log = logging.getLogger("tg.distributed.store")

MAGIC = b"TGST"
VERSION = 1
CHALLENGE = 32
REQ = struct.Struct("<4sBBHIQ")    # magic, version, op, flags, key length, value length
REP = struct.Struct("<4sBBHQ")     # magic, version, status, flags, value length
MAX_KEY, MAX_VALUE = 1 << 16, 1 << 30
OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CAS, OP_DELETE, OP_NUM_KEYS, OP_PING = range(1, 9)
OK, TIMEOUT, ERROR = 0, 1, 2


class StoreError(DistributedError):
    """The rendezvous store failed or is gone (its host, rank 0 or the launcher, left or died)."""


class StoreTimeout(StoreError, TimeoutError):
    pass


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed")
        got += k
    return bytes(buf)


def _mac(secret: bytes, challenge: bytes, purpose: bytes) -> bytes:
    return hmac.new(secret, purpose + challenge, hashlib.sha256).digest()


def prove(sock: socket.socket, secret: bytes, purpose: bytes) -> None:
    """Client side of the handshake: answer the server's challenge."""
    challenge = _recv_exact(sock, CHALLENGE)
    sock.sendall(_mac(secret, challenge, purpose))
    try:
        ok = _recv_exact(sock, 2)
    except (OSError, ConnectionError):
        ok = b""                   # the server hangs up on a wrong answer
    if ok != b"OK":
        raise StoreError("handshake rejected")


def verify(sock: socket.socket, secret: bytes, purpose: bytes, timeout: float = 10.0) -> bool:
    """Server side: send a challenge, check the answer in constant time. Nothing else is read first."""
    challenge = os.urandom(CHALLENGE)
    sock.settimeout(timeout)
    try:
        sock.sendall(challenge)
        answer = _recv_exact(sock, 32)
    except (OSError, ConnectionError):
        return False
    if not hmac.compare_digest(answer, _mac(secret, challenge, purpose)):
        return False
    sock.sendall(b"OK")
    sock.settimeout(None)
    return True


class _Server:
    def __init__(self, host: str, port: int, secret: bytes):
        self.secret = secret
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.sock = socket.create_server((host, port), backlog=128, reuse_port=False)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.conns: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name="tg-store-accept").start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, addr), daemon=True, name="tg-store-conn").start()

    def _serve(self, conn: socket.socket, addr: tuple) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not verify(conn, self.secret, b"tg-store"):
            log.warning("[store] rejected a connection from %s:%s: it did not prove the job secret", *addr[:2])
            conn.close()
            return
        self.conns.add(conn)
        try:
            while True:
                head = _recv_exact(conn, REQ.size)
                magic, version, op, _flags, klen, vlen = REQ.unpack(head)
                if magic != MAGIC or version != VERSION or not OP_SET <= op <= OP_PING or klen > MAX_KEY \
                        or vlen > MAX_VALUE:
                    log.warning("[store] malformed frame from %s:%s (magic %r, version %d, op %d); closing it",
                                addr[0], addr[1], magic, version, op)
                    return
                key = _recv_exact(conn, klen).decode("utf-8", "replace")
                value = _recv_exact(conn, vlen)
                status, out = self._handle(op, key, value)
                conn.sendall(REP.pack(MAGIC, VERSION, status, 0, len(out)) + out)
        except (ConnectionError, OSError, struct.error):
            return
        finally:
            self.conns.discard(conn)
            conn.close()

    def _wait_for(self, keys: list[str], timeout_ms: int) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000
        with self.cond:
            while not all(k in self.data for k in keys):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return False
                self.cond.wait(min(left, 1.0))
        return True

    def _handle(self, op: int, key: str, value: bytes) -> tuple[int, bytes]:
        if op == OP_SET:
            with self.cond:
                self.data[key] = value
                self.cond.notify_all()
            return OK, b""
        if op == OP_GET:
            (timeout_ms,) = struct.unpack("<Q", value)
            if not self._wait_for([key], timeout_ms):
                return TIMEOUT, b""
            with self.cond:
                return OK, self.data[key]
        if op == OP_ADD:
            (delta,) = struct.unpack("<q", value)
            with self.cond:
                current = int(self.data.get(key, b"0"))
                self.data[key] = str(current + delta).encode()
                self.cond.notify_all()
                return OK, struct.pack("<q", current + delta)
        if op == OP_WAIT:
            (timeout_ms,) = struct.unpack("<Q", value[:8])
            keys = [k for k in value[8:].decode().split("\0") if k]
            return (OK, b"") if self._wait_for(keys, timeout_ms) else (TIMEOUT, b"")
        if op == OP_CAS:
            (elen,) = struct.unpack("<Q", value[:8])
            expected, desired = value[8:8 + elen], value[8 + elen:]
            with self.cond:
                held = self.data.get(key)
                if (held is None and expected == b"") or held == expected:
                    self.data[key] = desired
                    self.cond.notify_all()
                    return OK, desired
                return OK, held if held is not None else expected
        if op == OP_DELETE:
            with self.cond:
                return OK, b"\x01" if self.data.pop(key, None) is not None else b"\x00"
        if op == OP_NUM_KEYS:
            with self.cond:
                return OK, struct.pack("<Q", len(self.data))
        return OK, b""   # PING

    def close(self, grace: float = 0.0) -> None:
        """Stop serving; with grace, first wait (that long at most) for the other clients to hang up,
        so a rank leaving early (say after a failure) does not cut off a reply still on its way."""
        deadline = time.monotonic() + grace
        while self.conns and time.monotonic() < deadline:      # ours closed first: wait for the rest
            time.sleep(0.01)
        self.closed = True
        with self.cond:
            self.cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes the accept() thread; close alone does not
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        for c in list(self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TCPStore:
    """Client (and, with is_server=True, the server too) of the rendezvous store.

    timeout (seconds) bounds connecting and every blocking call."""

    def __init__(self, host: str, port: int, is_server: bool = False, secret: bytes = b"",
                 timeout: float = 300.0):
        self.host, self.timeout, self.secret = host, timeout, secret
        self._server = _Server(host, port, secret) if is_server else None
        self.port = self._server.port if self._server else port
        self._lock = threading.Lock()
        self._sock = self._connect()

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        delay = 0.01
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.1))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                prove(sock, self.secret, b"tg-store")
                sock.settimeout(None)
                return sock
            except StoreError:
                raise StoreError(f"[store] {self.host}:{self.port} rejected this process's secret; every rank "
                                 f"must get the same TG_SECRET (tglaunch sets it)") from None
            except (OSError, ConnectionError) as e:
                if time.monotonic() + delay > deadline:
                    raise StoreTimeout(f"[store] could not reach the store at {self.host}:{self.port} within "
                                       f"{self.timeout:.0f}s ({e}); is rank 0 (or the launcher) running, and "
                                       f"are MASTER_ADDR/MASTER_PORT right?") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _call(self, op: int, key: str, value: bytes = b"", wait: float | None = None) -> bytes:
        kb = key.encode()
        with self._lock:
            self._sock.settimeout(None if wait is None else wait + 5.0)
            try:
                self._sock.sendall(REQ.pack(MAGIC, VERSION, op, 0, len(kb), len(value)) + kb + value)
                magic, version, status, _flags, vlen = REP.unpack(_recv_exact(self._sock, REP.size))
                out = _recv_exact(self._sock, vlen)
            except (OSError, ConnectionError) as e:
                raise StoreError(f"[store] lost the connection to the store at {self.host}:{self.port} ({e}); its "
                                 f"host (rank 0 or the launcher) left or died") from None
        if magic != MAGIC or version != VERSION:
            raise StoreError(f"[store] malformed reply from {self.host}:{self.port}")
        if status == TIMEOUT:
            raise StoreTimeout(f"[store] timed out after {wait:.1f}s waiting for key {key!r}")
        return out

    def set(self, key: str, value: bytes | str) -> None:
        self._call(OP_SET, key, value.encode() if isinstance(value, str) else value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of key, waiting up to timeout seconds for it to be set."""
        t = self.timeout if timeout is None else timeout
        return self._call(OP_GET, key, struct.pack("<Q", int(t * 1000)), wait=t)

    def add(self, key: str, delta: int) -> int:
        return struct.unpack("<q", self._call(OP_ADD, key, struct.pack("<q", delta)))[0]

    def wait(self, keys: list[str], timeout: float | None = None) -> None:
        t = self.timeout if timeout is None else timeout
        self._call(OP_WAIT, "", struct.pack("<Q", int(t * 1000)) + "\0".join(keys).encode(), wait=t)

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        """Set key to desired if it holds expected (b"" matches a missing key); returns the value now."""
        return self._call(OP_CAS, key, struct.pack("<Q", len(expected)) + expected + desired)

    def delete(self, key: str) -> bool:
        return self._call(OP_DELETE, key) == b"\x01"

    def num_keys(self) -> int:
        return struct.unpack("<Q", self._call(OP_NUM_KEYS, ""))[0]

    def close(self, grace: float = 5.0) -> None:
        try:
            self._sock.close()
        finally:
            if self._server is not None:
                self._server.close(grace)
