"""The rendezvous store: a small TCP key-value server (set, get, add, wait, compare_set, delete)
hosted by rank 0 or by the launcher.

Security and framing: the server binds only to the address it is given. On every new connection it first
sends a random challenge; the client must answer with HMAC-SHA256(secret, challenge) before the server
reads anything else, and sends a challenge of its own that the server answers the same way (so a process
that took over a dead server's port gets no client). Requests and replies are fixed binary frames
(magic, version, op, lengths), never pickle; a malformed frame closes that connection and is logged, and
the server carries on. Connections that fail the handshake are logged at most once every
REJECT_LOG_EVERY seconds, with a count, so nobody who can reach the port can flood the job's log. At
most TG_STORE_MAX_UNPROVEN connections wait to prove the secret (a new one closes the oldest), and an
accept() that fails for want of descriptors or memory is retried after a pause: a flood of connections
neither uses up the store's descriptors nor stops it serving.

Ephemeral keys: `set(key, value, ephemeral=True)` makes a key that lives as long as the connection that
set it; when that connection closes (its process died or left) the store deletes it. The launcher's
agents announce themselves so, which tells the others at once that a node's agent is gone.

Sizes: keys are at most 64 KiB and values at most TG_STORE_MAX_VALUE bytes (4 MiB; the store holds
addresses, counters and short JSON records). Values are read in pieces as they arrive, so a frame
that claims more than it sends costs no memory; a request over the limit, and one the store cannot
carry out (add on a key that holds no integer), gets an error reply, which the client raises as
StoreRequestError, and the connection stays usable.

    >>> server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s3cret")
    >>> client = TCPStore("127.0.0.1", server.port, secret=b"s3cret")
    >>> client.set("k", b"v"); client.get("k")
    b'v'
    >>> client.add("n", 2), client.add("n", 3)
    (2, 5)
    >>> client.close(); server.close()
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import math
import os
import socket
import struct
import threading
import time
from typing import Callable

from tg import config
from tg.distributed.errors import DistributedError  # noqa: E402

log = logging.getLogger("tg.distributed.store")

MAGIC = b"TGST"
VERSION = 1
CHALLENGE = 32
REQ = struct.Struct("<4sBBHIQ")    # magic, version, op, flags, key length, value length
REP = struct.Struct("<4sBBHQ")     # magic, version, status, flags, value length
MAX_KEY = 1 << 16
PIECE = 1 << 16                    # bytes read at a time: memory grows only with what really arrives
REJECT_LOG_EVERY = 10.0            # seconds between two warnings about rejected connections
# accept() errors that pass (descriptors, buffers or memory short for now): wait, then accept again
ACCEPT_SHORTAGE = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
ACCEPT_BACKOFF = (0.01, 1.0)       # seconds: first and longest wait after such an error
OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CAS, OP_DELETE, OP_NUM_KEYS, OP_PING = range(1, 9)
OP_NAMES = {OP_SET: "set", OP_GET: "get", OP_ADD: "add", OP_WAIT: "wait", OP_CAS: "compare_set",
            OP_DELETE: "delete", OP_NUM_KEYS: "num_keys", OP_PING: "ping"}
OK, TIMEOUT, ERROR = 0, 1, 2
EPHEMERAL = 1                      # set's flag: the key goes when the connection that set it closes


class StoreError(DistributedError):
    """The rendezvous store failed or is gone (its host, rank 0 or the launcher, left or died)."""


class StoreTimeout(StoreError, TimeoutError):
    pass


class SecretRejected(StoreError):
    """The store hung up on this process's answer to its challenge: another secret than the job's."""


class ServerNotProven(ConnectionError):
    """The process listening did not prove the job's secret (one that took over a dead server's port);
    nothing was sent to it. Callers treat it as a failed connection and try again."""


class StoreRequestError(StoreError, ValueError):
    """The store refused one request (a value over the size limit, add on a key holding no integer);
    the connection and the store stay usable."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """n bytes from sock, gathered in pieces as they arrive: a peer that claims a size and sends less
    never makes this side allocate what it claimed."""
    parts, got = [], 0
    while got < n:
        part = sock.recv(min(n - got, PIECE))
        if not part:
            raise ConnectionError("connection closed")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _discard(sock: socket.socket, n: int) -> None:
    """Read n bytes and drop them, a piece at a time."""
    while n > 0:
        part = sock.recv(min(n, PIECE))
        if not part:
            raise ConnectionError("connection closed")
        n -= len(part)


def too_large(what: str, n: int, limit: int) -> str:
    """Why a key or value is refused, and what to do."""
    if what == "key":
        return f"the key is {n} bytes, more than the store accepts ({limit} bytes); use a shorter key"
    return (f"the value is {n} bytes, more than the store accepts ({limit} bytes, TG_STORE_MAX_VALUE); "
            f"keep store values small (addresses, counters, short JSON), or raise TG_STORE_MAX_VALUE on "
            f"every rank")


class _Missing(Exception):
    """peek's key is not set."""


class _Refused(Exception):
    """A request the server answers with an error reply (the message goes back to the client)."""


class RejectLog:
    """Warnings about connections that failed the handshake: one line at once, then at most one every
    `every` seconds counting the connections since the last line, and a last count at flush(). Anyone
    who can reach a port can make rejected connections; they must not be able to flood the log.

        >>> rejects = RejectLog(logging.getLogger("example"), "[store]")
        >>> rejects.rejected(("127.0.0.1", 5000))    # logs a line
        >>> rejects.rejected(("127.0.0.1", 5001))    # counted for the next line
        >>> rejects.count
        1
    """

    def __init__(self, logger: logging.Logger, who: str, every: float = REJECT_LOG_EVERY):
        self.logger, self.who, self.every = logger, who, every
        self.lock = threading.Lock()
        self.count, self.latest = 0, ""
        self.last: float | None = None

    def rejected(self, addr: tuple) -> None:
        with self.lock:
            self.count += 1
            self.latest = f"{addr[0]}:{addr[1]}"
            if self.last is None or time.monotonic() - self.last >= self.every:
                self._report()

    def flush(self) -> None:
        with self.lock:
            if self.count:
                self._report()

    def _report(self) -> None:
        self.logger.warning("%s rejected %d connection(s) since its last report (the latest from %s): they "
                            "did not prove the job secret; the next report comes in %.0fs at the earliest",
                            self.who, self.count, self.latest, self.every)
        self.count, self.last = 0, time.monotonic()


def _mac(secret: bytes, challenge: bytes, purpose: bytes) -> bytes:
    return hmac.new(secret, purpose + challenge, hashlib.sha256).digest()


def prove(sock: socket.socket, secret: bytes, purpose: bytes) -> None:
    """Client side of the handshake: answer the server's challenge with a challenge of its own, which the
    server must answer too: a process that took over a port a job's server had (it died, its port was
    free) learns nothing and gets no client."""
    challenge = _recv_exact(sock, CHALLENGE)
    ours = os.urandom(CHALLENGE)
    sock.sendall(_mac(secret, challenge, purpose) + ours)
    try:
        ok = _recv_exact(sock, 2)
    except (OSError, ConnectionError):
        ok = b""                   # the server hangs up on a wrong answer
    if ok == b"NO":
        raise SecretRejected("handshake rejected")
    if ok != b"OK":    # closed without a verdict (a server full of unproven connections): try again
        raise ConnectionError("the server closed the connection during the handshake")
    if not hmac.compare_digest(_recv_exact(sock, 32), _mac(secret, ours, purpose + b"/server")):
        raise ServerNotProven("the server did not prove the job's secret: another process listens there")


def verify(sock: socket.socket, secret: bytes, purpose: bytes, timeout: float = 10.0,
           admit: Callable[[], bool] | None = None, rejected: Callable[[], None] | None = None) -> bool:
    """Server side: send a challenge, check the answer in constant time. Nothing else is read first.
    A wrong answer gets "NO" (the client then knows its secret is wrong); a right one "OK" and the answer
    to the client's own challenge, unless
    `admit` says the connection was dropped meanwhile (it is then closed without a verdict).
    `rejected()` runs for every connection that fails, before a wrong one hears "NO" (so whoever counts
    rejections has counted it by the time the client knows)."""
    challenge = os.urandom(CHALLENGE)
    sock.settimeout(timeout)
    try:
        sock.sendall(challenge)
        answer = _recv_exact(sock, 32)
        if not hmac.compare_digest(answer, _mac(secret, challenge, purpose)):
            if rejected is not None:
                rejected()
            sock.sendall(b"NO")
            return False
        theirs = _recv_exact(sock, CHALLENGE)      # the client's challenge: this side proves the secret too
        if admit is not None and not admit():
            if rejected is not None:
                rejected()
            return False
        sock.sendall(b"OK" + _mac(secret, theirs, purpose + b"/server"))
    except (OSError, ConnectionError):
        if rejected is not None:
            rejected()
        return False
    sock.settimeout(None)
    return True


class Doorman:
    """The accept loop of a listening socket that serves holders of the job secret only (the store, a tcp
    transport's set-up). It never gives up for want of descriptors or memory: accept() is retried after
    a pause (the waiting connections stay in the backlog; returning would leave them, and every later
    rank, unanswered for good), with a warning at most every REJECT_LOG_EVERY seconds. It holds at most
    TG_STORE_MAX_UNPROVEN connections that have not proven the secret: a new one closes the oldest, so
    whoever can reach the port cannot hold its descriptors and threads. Each connection goes to
    `serve(conn, addr)` on a thread of its own, which calls `verify(..., admit=lambda:
    doorman.admitted(conn))` and `doorman.drop(conn)` when it fails."""

    def __init__(self, sock: socket.socket, serve: Callable[[socket.socket, tuple], None], who: str,
                 stopped: Callable[[], bool], thread: str, least: int = 1):
        """least: the cap is at least this (the connections a tcp transport's set-up expects at once)."""
        self.sock, self.serve, self.who, self.stopped, self.thread = sock, serve, who, stopped, thread
        self.least = least
        self.unproven: dict[socket.socket, None] = {}     # oldest first
        self.lock = threading.Lock()
        self.short_logged: float | None = None             # when the loop last warned of a shortage

    def run(self) -> str | None:
        """Accept until stopped() (None) or accept() fails for another reason (its message: the socket
        was closed, or its timeout passed)."""
        wait = ACCEPT_BACKOFF[0]
        while not self.stopped():
            try:
                conn, addr = self.sock.accept()
            except OSError as e:
                if self.stopped():
                    return None
                if e.errno not in ACCEPT_SHORTAGE:
                    return str(e)
                self._short_of(e, wait)
                time.sleep(wait)
                wait = min(wait * 2, ACCEPT_BACKOFF[1])
                continue
            wait = ACCEPT_BACKOFF[0]
            self._hold(conn)
            threading.Thread(target=self.serve, args=(conn, addr), daemon=True, name=self.thread).start()
        return None

    def _short_of(self, e: OSError, wait: float) -> None:
        now = time.monotonic()
        if self.short_logged is None or now - self.short_logged >= REJECT_LOG_EVERY:
            self.short_logged = now
            log.warning("%s cannot accept a connection (%s: out of file descriptors or memory); trying again "
                        "in %.2fs. Raise the limit (ulimit -n) if this process needs more",
                        self.who, os.strerror(e.errno or 0), wait)

    def _hold(self, conn: socket.socket) -> None:
        """Count conn among the unproven; beyond the cap the oldest is closed (its thread then ends)."""
        with self.lock:
            self.unproven[conn] = None
            cap = max(config.TG_STORE_MAX_UNPROVEN, self.least, 1)
            while len(self.unproven) > cap:
                oldest = next(iter(self.unproven))
                del self.unproven[oldest]
                try:
                    oldest.shutdown(socket.SHUT_RDWR)   # wakes its thread's recv; the thread closes it
                except OSError:
                    pass

    def admitted(self, conn: socket.socket) -> bool:
        """conn proved the secret: it leaves the unproven, unless the cap closed it meanwhile."""
        with self.lock:
            return self.unproven.pop(conn, False) is None

    def drop(self, conn: socket.socket) -> None:
        with self.lock:
            self.unproven.pop(conn, None)


class _Server:
    def __init__(self, host: str, port: int, secret: bytes):
        self.secret = secret
        self.max_value = config.TG_STORE_MAX_VALUE
        self.rejects = RejectLog(log, "[store]")
        self.data: dict[str, bytes] = {}
        self.owner: dict[str, socket.socket] = {}     # ephemeral key -> the connection that set it
        self.cond = threading.Condition()
        self.closed = False
        self.conns: set[socket.socket] = set()
        self.doors: list[Doorman] = []
        self.sock = self._listen(host, port)
        self.port = self.sock.getsockname()[1]

    def _listen(self, host: str, port: int) -> socket.socket:
        """Listen on host:port too, for the same data (each listening socket its own accept loop)."""
        try:
            sock = socket.create_server((host, port), backlog=128, reuse_port=False)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                fix = ("another process (another job?) holds it: pick another port (MASTER_PORT, or tglaunch "
                       "--master-port, where 0 picks a free one), or stop that job")
            else:
                fix = "is MASTER_ADDR an address of this host?"
            why = os.strerror(e.errno) if e.errno else str(e)
            raise StoreError(f"[store] cannot listen on {host}:{port} for the rendezvous store ({why}); "
                             f"{fix}") from None
        door = Doorman(sock, lambda conn, addr: self._serve(conn, addr, door), "[store]", lambda: self.closed,
                       "tg-store-conn")
        self.doors.append(door)
        threading.Thread(target=door.run, daemon=True, name="tg-store-accept").start()
        return sock

    def _serve(self, conn: socket.socket, addr: tuple, door: Doorman) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not verify(conn, self.secret, b"tg-store", admit=lambda: door.admitted(conn),
                      rejected=lambda: self.rejects.rejected(addr)):
            door.drop(conn)      # a wrong answer, none in time, or closed by the cap
            conn.close()
            return
        self.conns.add(conn)
        owned: set[str] = set()       # the ephemeral keys this connection set
        try:
            while True:
                head = _recv_exact(conn, REQ.size)
                magic, version, op, flags, klen, vlen = REQ.unpack(head)
                if magic != MAGIC or version != VERSION or not OP_SET <= op <= OP_PING or klen > MAX_KEY:
                    log.warning("[store] malformed frame from %s:%s (magic %r, version %d, op %d, key of %d "
                                "bytes); closing it", addr[0], addr[1], magic, version, op, klen)
                    return
                key = _recv_exact(conn, klen).decode("utf-8", "replace")
                if vlen > self.max_value:
                    # refused before anything is allocated for it; the value is then read away in pieces,
                    # so a client that sends it all stays in step
                    self._reply(conn, ERROR, too_large("value", vlen, self.max_value).encode())
                    _discard(conn, vlen)
                    continue
                value = _recv_exact(conn, vlen)
                if op == OP_SET:
                    with self.cond:     # the newest setter owns a key: an older connection's end spares it
                        if flags & EPHEMERAL:
                            self.owner[key] = conn
                            owned.add(key)
                        else:
                            self.owner.pop(key, None)
                try:
                    status, out = self._handle(op, key, value)
                except _Refused as e:
                    status, out = ERROR, str(e).encode()
                except (struct.error, ValueError) as e:
                    status, out = ERROR, f"a malformed {OP_NAMES[op]} request ({e})".encode()
                self._reply(conn, status, out)
        except (ConnectionError, OSError, struct.error):
            return
        finally:
            self.conns.discard(conn)
            conn.close()
            self._forget(conn, owned)

    def _forget(self, conn: socket.socket, owned: set[str]) -> None:
        """A connection closed (its owner's process ended, or hung up): the ephemeral keys it still owns
        go with it."""
        with self.cond:
            for key in owned:
                if self.owner.get(key) is conn:
                    del self.owner[key]
                    self.data.pop(key, None)
            self.cond.notify_all()

    @staticmethod
    def _reply(conn: socket.socket, status: int, out: bytes) -> None:
        conn.sendall(REP.pack(MAGIC, VERSION, status, 0, len(out)) + out)

    def _wait_for(self, keys: list[str], timeout_ms: int) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000
        with self.cond:
            while not all(k in self.data for k in keys):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return False
                self.cond.wait(min(left, 1.0))
        return True

    # Complexity: the server's dispatch: one branch per store op, each a few lines under the same lock.
    def _handle(self, op: int, key: str, value: bytes) -> tuple[int, bytes]:  # noqa: C901
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
                count = self.data.get(key, b"0")
                try:
                    total = struct.pack("<q", int(count) + delta)
                except (ValueError, struct.error):
                    raise _Refused(f"key {key!r} holds {count[:40]!r}, not a 64-bit integer; add counts "
                                   f"only on a key that add created or that was set to a decimal integer") \
                        from None
                self.data[key] = str(int(count) + delta).encode()
                self.cond.notify_all()
                return OK, total
        if op == OP_WAIT:
            (timeout_ms,) = struct.unpack("<Q", value[:8])
            keys = [k for k in value[8:].decode().split("\0") if k]
            return (OK, b"") if self._wait_for(keys, timeout_ms) else (TIMEOUT, b"")
        if op == OP_CAS:
            (elen,) = struct.unpack("<Q", value[:8])
            if elen > len(value) - 8:
                raise _Refused(f"compare_set on {key!r}: the expected value claims {elen} bytes, the request "
                               f"holds {len(value) - 8}")
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

    def stop_accepting(self) -> None:
        """Close the listening sockets (their ports are free for the next store); connections made are
        still served."""
        for door in self.doors:
            try:
                door.sock.shutdown(socket.SHUT_RDWR)   # wakes the accept() thread; close alone does not
            except OSError:
                pass
            try:
                door.sock.close()
            except OSError:
                pass

    def close(self, grace: float = 0.0) -> None:
        """Stop serving; with grace, first wait (that long at most) for the other clients to hang up,
        so a rank leaving early (say after a failure) does not cut off a reply still on its way."""
        deadline = time.monotonic() + grace
        while self.conns and time.monotonic() < deadline:      # ours closed first: wait for the rest
            time.sleep(0.01)
        self.closed = True
        self.rejects.flush()
        with self.cond:
            self.cond.notify_all()
        self.stop_accepting()
        for c in list(self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TCPStore:
    """Client (and, with is_server=True, the server too) of the rendezvous store.

    timeout (seconds) bounds connecting and every blocking call; reply_timeout, when given, bounds how
    long any answer may take beyond the wait asked for (else 5s after a wait, the store's timeout but
    10s at least otherwise): the launcher's agents use it to notice a stopped store host within seconds."""

    def __init__(self, host: str, port: int, is_server: bool = False, secret: bytes = b"",
                 timeout: float = 300.0, reply_timeout: float | None = None):
        self.host, self.timeout, self.secret = host, timeout, secret
        self.reply_timeout = reply_timeout
        self._server = _Server(host, port, secret) if is_server else None
        self.port = self._server.port if self._server else port
        self._lock = threading.Lock()
        self._broken = ""        # set when a call went unanswered: the connection is out of step, closed
        self._sock = self._connect()

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        delay = 0.01
        while True:
            try:
                sock = socket.create_connection(
                    (self.host, self.port), timeout=max(deadline - time.monotonic(), 0.1)
                )
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                prove(sock, self.secret, b"tg-store")
                sock.settimeout(None)
                return sock
            except SecretRejected:
                raise SecretRejected(f"[store] {self.host}:{self.port} rejected this process's secret; every "
                                     f"rank must get the same TG_SECRET (tglaunch sets it)") from None
            except (OSError, ConnectionError) as e:
                if time.monotonic() + delay > deadline:
                    raise StoreTimeout(f"[store] could not reach the store at {self.host}:{self.port} within "
                                       f"{self.timeout:.0f}s ({e}); is rank 0 (or the launcher) running, and "
                                       f"are MASTER_ADDR/MASTER_PORT right?") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _call(self, op: int, key: str, value: bytes = b"", wait: float | None = None,
              limit: float | None = None, flags: int = 0, missing_ok: bool = False) -> bytes:
        """One request and its reply. The reply is waited for `wait` seconds (a blocking get or wait) plus
        `limit` (default 5s after a wait, else the store's timeout, 10s at least): a store whose host is
        stopped makes the call raise, never hang. A reply that did not come in time leaves the connection
        out of step, so it is closed (later calls raise StoreError)."""
        kb = key.encode()
        cap = config.TG_STORE_MAX_VALUE
        if len(kb) > MAX_KEY or len(value) > cap:
            why = too_large("key", len(kb), MAX_KEY) if len(kb) > MAX_KEY else \
                too_large("value", len(value), cap)
            raise StoreRequestError(f"[store] {OP_NAMES[op]} {key[:80]!r}: {why}")
        # (no wait: the store's timeout, but 10s at least: a short TG_DIST_TIMEOUT must not fail set-up
        # on a loaded machine, where the store's thread may be late by seconds)
        if limit is None and self.reply_timeout is not None:
            limit = self.reply_timeout
        bound = (wait or 0.0) + (limit if limit is not None else 5.0 if wait is not None else
                                 max(self.timeout, 10.0))
        finite = math.isfinite(bound)         # TG_DIST_TIMEOUT=inf: wait as long as it takes
        if not self._lock.acquire(timeout=bound if finite else -1):
            raise StoreTimeout(f"[store] {OP_NAMES.get(op, op)} {key[:80]!r}: another thread of this process "
                               f"held the store's connection for {bound:.1f}s")
        try:
            if self._broken:
                raise StoreError(f"[store] {OP_NAMES.get(op, op)} {key[:80]!r}: this connection to the store "
                                 f"at {self.host}:{self.port} was closed after an earlier call went "
                                 f"unanswered ({self._broken})")
            self._sock.settimeout(bound if finite else None)
            try:
                self._sock.sendall(REQ.pack(MAGIC, VERSION, op, flags, len(kb), len(value)) + kb + value)
                magic, version, status, _flags, vlen = REP.unpack(_recv_exact(self._sock, REP.size))
                out = _recv_exact(self._sock, vlen)
            except TimeoutError:
                self._sock.close()
                self._broken = f"{OP_NAMES.get(op, op)} {key[:80]!r} after {bound:.1f}s"
                raise StoreTimeout(
                    f"[store] the store at {self.host}:{self.port} did not answer {OP_NAMES.get(op, op)} "
                    f"{key[:80]!r} within {bound:.1f}s; its host (rank 0 or the launcher) is stopped or "
                    f"overloaded"
                ) from None
            except (OSError, ConnectionError) as e:
                raise StoreError(
                    f"[store] lost the connection to the store at {self.host}:{self.port} ({e}); its "
                    f"host (rank 0 or the launcher) left or died"
                ) from None
        finally:
            self._lock.release()
        return self._result(op, key, wait, missing_ok, magic, version, status, out)

    def _result(self, op: int, key: str, wait: float | None, missing_ok: bool, magic: bytes, version: int,
                status: int, out: bytes) -> bytes:
        """A reply's value, or the error it stands for."""
        if magic != MAGIC or version != VERSION:
            raise StoreError(f"[store] malformed reply from {self.host}:{self.port}")
        if status == TIMEOUT and missing_ok:
            raise _Missing
        if status == TIMEOUT:
            raise StoreTimeout(f"[store] timed out after {wait:.1f}s waiting for key {key!r}")
        if status == ERROR:
            raise StoreRequestError(f"[store] {OP_NAMES.get(op, op)} {key!r} was refused by the store at "
                                    f"{self.host}:{self.port}: {out.decode('utf-8', 'replace')}")
        return out

    def set(self, key: str, value: bytes | str, timeout: float | None = None,
            ephemeral: bool = False) -> None:
        """Set key; timeout bounds the wait for the store's answer (default: the store's timeout). An
        ephemeral key is deleted when this client's connection closes, as when its process dies."""
        self._call(OP_SET, key, value.encode() if isinstance(value, str) else value, limit=timeout,
                   flags=EPHEMERAL if ephemeral else 0)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of key, waiting up to timeout seconds for it to be set."""
        t = self.timeout if timeout is None else timeout
        return self._call(OP_GET, key, struct.pack("<Q", int(t * 1000)), wait=t)

    def peek(self, key: str) -> bytes | None:
        """The value of key now, or None when it is not set (no waiting)."""
        try:
            return self._call(OP_GET, key, struct.pack("<Q", 0), wait=0.0, missing_ok=True)
        except _Missing:
            return None

    def add(self, key: str, delta: int) -> int:
        return struct.unpack("<q", self._call(OP_ADD, key, struct.pack("<q", delta)))[0]

    def wait(self, keys: list[str], timeout: float | None = None, answer_within: float | None = None) -> None:
        """Until every key is set (StoreTimeout after timeout seconds); answer_within bounds how much
        longer the store's own answer may take (default 5s)."""
        t = self.timeout if timeout is None else timeout
        self._call(OP_WAIT, "", struct.pack("<Q", int(t * 1000)) + "\0".join(keys).encode(), wait=t,
                   limit=answer_within)

    def compare_set(self, key: str, expected: bytes, desired: bytes, timeout: float | None = None) -> bytes:
        """Set key to desired if it holds expected (b"" matches a missing key); returns the value now.
        timeout bounds the wait for the answer (default: the store's timeout)."""
        return self._call(OP_CAS, key, struct.pack("<Q", len(expected)) + expected + desired, limit=timeout)

    def delete(self, key: str) -> bool:
        return self._call(OP_DELETE, key) == b"\x01"

    def num_keys(self) -> int:
        return struct.unpack("<Q", self._call(OP_NUM_KEYS, ""))[0]

    def listen_also(self, host: str, port: int) -> bool:
        """The server's side: serve the same data on host:port too (the launcher's agent that took the
        store over answers at the job's first address as well); False when it cannot bind it."""
        assert self._server is not None
        try:
            self._server._listen(host, port)
            return True
        except StoreError:
            return False

    @property
    def local_address(self) -> str:
        """This end's address of the connection to the store: the address of this host that reaches it."""
        return self._sock.getsockname()[0]

    def stop_accepting(self) -> None:
        """The server's side: take no new connection (the port is free for the next store); the clients
        connected are still served."""
        if self._server is not None:
            self._server.stop_accepting()

    def reconnect(self) -> None:
        """A new connection to the store when a call left this one unanswered (closed); else nothing."""
        with self._lock:
            if self._broken:
                self._sock.close()
                self._sock, self._broken = self._connect(), ""

    def close(self, grace: float = 5.0) -> None:
        try:
            self._sock.close()
        finally:
            if self._server is not None:
                self._server.close(grace)
