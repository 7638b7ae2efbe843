"""The job secret is never derived from public facts, and the store holds up against what any local
user (no secret) or a confused client (the secret) can send it: huge claimed sizes, add on text,
floods of rejected connections."""
import hashlib
import logging
import os
import queue
import re
import select
import socket
import stat
import subprocess
import sys
import threading
import time
import tracemalloc

import harness
import numpy as np
import pytest
from harness import free_port, run_ranks

import tg.distributed as dist
from tg.distributed import secret as job_secret
from tg.distributed import store as wire
from tg.distributed.errors import DistributedError
from tg.distributed.store import StoreError, StoreRequestError, TCPStore, prove

NO_SECRET = {"TG_SECRET": ""}       # the harness gives every job one; an empty value unsets it


def write_stale_file(port: int) -> str:
    """What a SIGKILLed earlier job on this port leaves: its secret file, mode 0600."""
    folder = job_secret._private_folder()
    try:
        path = job_secret.secret_path("127.0.0.1", port)
        job_secret._write(folder, os.path.basename(path), os.urandom(job_secret.SECRET_BYTES))
    finally:
        os.close(folder)
    return path


# ---------------------------------------------------------------------------- the secret file

def test_secret_file_is_private_and_removed_once_joined():
    port = free_port()
    host, secret, joined = job_secret.join_store("127.0.0.1", port, hosts_store=True, timeout=10)
    path = job_secret.secret_path("127.0.0.1", port)
    try:
        folder = os.lstat(job_secret.secret_dir())
        assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == os.getuid()
        assert stat.S_IMODE(folder.st_mode) == 0o700
        info = os.lstat(path)
        assert stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert len(secret) == 32
        guest, theirs, _ = job_secret.join_store("127.0.0.1", port, hosts_store=False, timeout=10)
        assert theirs == secret
        guest.set("k", "v")
        assert host.get("k") == b"v"
        guest.close()
    finally:
        joined()
        host.close(grace=0)
    assert not os.path.exists(path)


def allreduce_and_try_the_old_secret(rank: int, world: int) -> list:
    from tg import config
    from tg.distributed import _State
    x = np.full(3, rank + 1.0)
    dist.all_reduce(x)
    old = hashlib.sha256(f"tg:127.0.0.1:{config.MASTER_PORT}:{world}".encode()).digest()
    outcome = "accepted"
    if rank == 1:
        try:
            TCPStore("127.0.0.1", config.MASTER_PORT, secret=old, timeout=5).close()
        except StoreError as e:
            outcome = "rejected" if "rejected this process's secret" in str(e) else str(e)
    # rank 0 removes the file once every rank has joined, before its init returns
    gone = rank != 0 or not os.path.exists(job_secret.secret_path("127.0.0.1", config.MASTER_PORT))
    return [x.tolist(), len(_State.secret), _State.secret != old, outcome, gone]


def test_ranks_without_tg_secret_agree_and_the_derived_secret_is_rejected():
    results = run_ranks(2, allreduce_and_try_the_old_secret, env=NO_SECRET, backend="tcp")
    assert results[0] == [[3.0] * 3, 32, True, "accepted", True]
    assert results[1] == [[3.0] * 3, 32, True, "rejected", True]


def test_stale_secret_file_does_not_break_a_job(monkeypatch):
    port = free_port()
    path = write_stale_file(port)
    monkeypatch.setattr(harness, "free_port", lambda: port)   # the job runs on the stale file's port
    results = run_ranks(2, allreduce_and_try_the_old_secret, env=NO_SECRET, backend="tcp")
    assert [r[0] for r in results] == [[3.0] * 3] * 2
    assert not os.path.exists(path)


def test_a_rank_that_read_a_stale_file_reads_it_again(monkeypatch):
    """Deterministic: the joining rank reads the stale file before the host even starts."""
    port = free_port()
    write_stale_file(port)
    reads, stale_read = [], threading.Event()
    real_read = job_secret._read

    def counting_read(*args):
        value = real_read(*args)
        reads.append(value)
        stale_read.set()
        return value
    monkeypatch.setattr(job_secret, "_read", counting_read)
    joined: dict = {}

    def guest():
        try:
            joined["store"], joined["secret"], _ = job_secret.join_store("127.0.0.1", port, False, timeout=20)
        except BaseException as e:  # noqa: BLE001 - reported below
            joined["error"] = e
    thread = threading.Thread(target=guest)
    thread.start()
    assert stale_read.wait(10)
    host, secret, done = job_secret.join_store("127.0.0.1", port, hosts_store=True, timeout=20)
    try:
        thread.join(30)
        assert "error" not in joined, joined.get("error")
        assert joined["secret"] == secret and reads[0] != secret   # it had the stale one first
        joined["store"].close()
    finally:
        done()
        host.close(grace=0)


@pytest.mark.parametrize("kind", ["symlink", "wide"])
def test_a_folder_that_is_not_private_is_refused(monkeypatch, tmp_path, kind):
    folder = tmp_path / "tg-secrets"
    if kind == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir()
        folder.chmod(0o755)
    monkeypatch.setattr(job_secret, "secret_dir", lambda: str(folder))
    with pytest.raises(DistributedError, match="symlink" if kind == "symlink" else "drwxr-xr-x"):
        job_secret.join_store("127.0.0.1", free_port(), hosts_store=True, timeout=5)


def test_remote_master_without_tg_secret_is_a_value_error(monkeypatch):
    for name in ("TG_SECRET", "RANK", "WORLD_SIZE", "TG_BACKEND", "TG_STORE_EXTERNAL"):
        monkeypatch.delenv(name, raising=False)
    start = time.monotonic()
    with pytest.raises(ValueError, match="TG_SECRET") as caught:
        dist.init_process_group(init_method="tcp://192.0.2.1:29500", rank=1, world_size=2)
    assert "token_hex" in str(caught.value) and time.monotonic() - start < 10
    assert not dist.is_initialized()


# ---------------------------------------------------------------------------- the store server

def raw_client(port: int, secret: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    prove(sock, secret, b"tg-store")
    return sock


def claim_set(size: int) -> bytes:
    """The head of a set request on key 'k' whose value claims `size` bytes (the value not included)."""
    return wire.REQ.pack(wire.MAGIC, wire.VERSION, wire.OP_SET, 0, 1, size) + b"k"


def read_reply(sock: socket.socket) -> tuple[int, bytes]:
    head = b""
    while len(head) < wire.REP.size:
        head += sock.recv(wire.REP.size - len(head))
    magic, version, status, _flags, n = wire.REP.unpack(head)
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    assert (magic, version) == (wire.MAGIC, wire.VERSION)
    return status, body


def test_a_claimed_huge_value_is_refused_without_allocating_it():
    server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s", timeout=5)
    tracemalloc.start()
    try:
        sock = raw_client(server.port, b"s")
        sock.sendall(claim_set(1 << 30) + b"only a little")
        status, message = read_reply(sock)
        assert status == wire.ERROR and b"TG_STORE_MAX_VALUE" in message and b"1073741824" in message
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 32 << 20, f"the server allocated {peak} bytes for a value it refused"
        sock.close()
        client = TCPStore("127.0.0.1", server.port, secret=b"s", timeout=5)      # still serving
        client.set("next", "call")
        assert client.get("next") == b"call"
        client.close()
    finally:
        tracemalloc.stop()
        server.close(grace=0)


def test_a_value_under_the_limit_is_read_as_it_arrives(monkeypatch):
    monkeypatch.setenv("TG_STORE_MAX_VALUE", str(2 << 30))
    server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s", timeout=5)
    tracemalloc.start()
    try:
        before = set(threading.enumerate())
        sock = raw_client(server.port, b"s")
        serving = [t for t in threading.enumerate() if t not in before and t.name == "tg-store-conn"]
        sock.sendall(claim_set(1 << 30) + b"x" * 1000)
        sock.close()                                 # claimed 1 GiB, sent 1000 bytes, gone
        for thread in serving:                       # the server read what came, then saw it go
            thread.join(10)
        assert len(serving) == 1 and not serving[0].is_alive()
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 32 << 20, f"the server allocated {peak} bytes for 1000 that arrived"
    finally:
        tracemalloc.stop()
        server.close(grace=0)


def test_over_limit_values_are_refused_and_the_connection_stays_usable(monkeypatch):
    monkeypatch.setenv("TG_STORE_MAX_VALUE", "1024")
    server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s", timeout=5)
    try:
        client = TCPStore("127.0.0.1", server.port, secret=b"s", timeout=5)
        with pytest.raises(StoreRequestError, match="'big'.*TG_STORE_MAX_VALUE"):     # refused before sending
            client.set("big", b"x" * 2000)
        monkeypatch.setenv("TG_STORE_MAX_VALUE", "4096")         # a client that allows more than the server
        with pytest.raises(StoreRequestError, match="refused by the store.*2000 bytes"):
            client.set("big", b"x" * 2000)
        client.set("small", b"y" * 100)                         # the same connection, still in step
        assert client.get("small") == b"y" * 100
        client.close()
    finally:
        server.close(grace=0)


def test_add_on_a_non_integer_is_an_error_reply():
    server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s", timeout=5)
    try:
        client = TCPStore("127.0.0.1", server.port, secret=b"s", timeout=5)
        client.set("word", "abc")
        with pytest.raises(StoreRequestError, match="add 'word'.*not a 64-bit integer") as caught:
            client.add("word", 1)
        assert isinstance(caught.value, ValueError)
        client.set("word", "12")                # the same client and connection carry on
        assert client.add("word", 1) == 13 and client.get("word") == b"13"
        assert client.add("word", 1 << 62) == 13 + (1 << 62)
        with pytest.raises(StoreRequestError, match="64-bit"):     # past int64: refused, nothing changed
            client.add("word", 1 << 62)
        assert client.add("word", 0) == 13 + (1 << 62)
        client.close()
    finally:
        server.close(grace=0)


def test_rejected_connections_are_counted_not_logged_one_by_one(caplog):
    caplog.set_level(logging.WARNING, logger="tg.distributed.store")
    server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"right", timeout=5)
    tries = 40
    try:
        for _ in range(tries):
            with pytest.raises(StoreError, match="rejected this process's secret"):
                TCPStore("127.0.0.1", server.port, secret=b"wrong", timeout=5)
    finally:
        server.close(grace=0)
    lines = [r.getMessage() for r in caplog.records if "did not prove the job secret" in r.getMessage()]
    counts = [int(re.search(r"rejected (\d+) connection", line).group(1)) for line in lines]
    assert 1 <= len(lines) <= 4, lines     # the first at once, the rest counted (one line per 10 s)
    assert sum(counts) == tries, lines


# ---------------------------------------------------------------------------- connections that never prove

STORE_PROCESS = r"""
import logging, os, resource, sys
logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
from tg.distributed.store import TCPStore
server = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s", timeout=10)
free = int(sys.argv[1])
if free:     # only `free` more descriptors for this process: what a flood of connections runs into
    soft = len(os.listdir("/proc/self/fd")) + free
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(server.port, flush=True)
sys.stdin.read()        # serves until the test closes stdin
server.close(grace=0)
"""


def store_process(free: int, env: dict) -> tuple[subprocess.Popen, int, queue.Queue]:
    """A store in its own process (limits and descriptors of its own); its log lines come to a queue."""
    proc = subprocess.Popen([sys.executable, "-c", STORE_PROCESS, str(free)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "the store process did not start"
    return proc, int(proc.stdout.readline()), lines


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def silent_connections(port: int, n: int) -> list[socket.socket]:
    """n connections that never answer the challenge."""
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]


def wait_for_line(lines: queue.Queue, words: str, within: float) -> str | None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            return None
        if words in line:
            return line
    return None


@pytest.mark.parametrize("free", [12, 25])
def test_the_store_serves_again_after_running_out_of_descriptors(free: int):
    # the cap on unproven connections is set above the limit, so the connections use up the descriptors
    proc, port, lines = store_process(free, {"TG_STORE_MAX_UNPROVEN": "1000"})
    try:
        flood = silent_connections(port, free + 20)     # more than the process may open: accept fails
        out_of_fds = wait_for_line(lines, "file descriptors", within=10)
        for sock in flood:
            sock.close()
        client = TCPStore("127.0.0.1", port, secret=b"s", timeout=10)
        client.set("after", "the flood")
        assert client.get("after") == b"the flood"
        client.close()
        assert out_of_fds is not None and "Too many open files" in out_of_fds, out_of_fds
    finally:
        stop(proc)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server hung up on sock (after its challenge) within `within` seconds."""
    sock.settimeout(within)
    got = b""
    try:
        while True:
            part = sock.recv(64)
            if not part:
                return True
            got += part
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("cap,flood", [(8, 30), (3, 7)])
def test_unproven_connections_beyond_the_cap_are_closed_and_a_client_is_served(cap: int, flood: int):
    proc, port, _ = store_process(0, {"TG_STORE_MAX_UNPROVEN": str(cap)})
    try:
        silent = silent_connections(port, flood)
        client = TCPStore("127.0.0.1", port, secret=b"s", timeout=10)     # served with the flood held open
        client.set("k", "v")
        assert client.get("k") == b"v"
        # accepted in order, the oldest closed first: the client's connection took one more place
        dropped = flood - cap + 1
        assert [closed_by_server(s, 5) for s in silent[:dropped]] == [True] * dropped
        assert [closed_by_server(s, 0.2) for s in silent[dropped:]] == [False] * (cap - 1)
        client.close()
        for s in silent:
            s.close()
    finally:
        stop(proc)


_STOPPED_HOST = """
import os, signal, sys
from tg.distributed.store import TCPStore
s = TCPStore("127.0.0.1", 0, is_server=True, secret=b"k", timeout=30)
print(s.port, flush=True)
sys.stdin.readline()
"""


def test_every_call_to_a_store_whose_host_is_stopped_raises_in_its_bound():
    """A store's host stopped (SIGSTOP, a debugger, a swap storm) made every call without a wait block
    forever (issue 35 item 14: the ranks that ask where the others wait must not hang on it). Each
    operation raises StoreTimeout within its bound (its own, or the store's timeout but 10s at least), and
    the connection, now out of step, is not used again."""
    import signal

    from tg.distributed.store import StoreTimeout
    calls = {
        "set": lambda s: s.set("k", "v", timeout=1.0),
        "compare_set": lambda s: s.compare_set("k", b"", b"v", timeout=1.0),
        "wait": lambda s: s.wait(["k"], timeout=0.5, answer_within=0.5),
        "get": lambda s: s.get("k", timeout=0.5),
        "add": lambda s: s.add("n", 1),             # the store's timeout (2s here), 10s at least
    }
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    host = subprocess.Popen([sys.executable, "-c", _STOPPED_HOST], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=root))
    try:
        port = int(host.stdout.readline())
        for name, call in calls.items():
            client = TCPStore("127.0.0.1", port, secret=b"k", timeout=2.0)
            client.set("warm", "1")
            os.kill(host.pid, signal.SIGSTOP)
            while open(f"/proc/{host.pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "TZ":
                time.sleep(0.01)                    # stopped for real (the signal lands asynchronously)
            start = time.monotonic()
            with pytest.raises(StoreTimeout, match="did not answer|timed out"):
                call(client)
            took = time.monotonic() - start
            os.kill(host.pid, signal.SIGCONT)
            assert took < 10.0 + 5.0, (name, took)
            with pytest.raises(StoreError):
                client.set("after", "1")            # closed: never a reply meant for another request
    finally:
        os.kill(host.pid, signal.SIGCONT)
        host.kill()
        host.wait()


# ---------------------------------------------------------------------------- the tcp transport's set-up

TRANSPORT_SETUP = r"""
import logging, os, resource, socket, sys, threading, time
logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
from tg.distributed.store import TCPStore
from tg.distributed.transport.tcp import TcpTransport
free, flood = int(sys.argv[1]), int(sys.argv[2])
store = TCPStore("127.0.0.1", 0, is_server=True, secret=b"s", timeout=20)
held, flooded = [], threading.Event()

def flooder():
    try:
        asker = TCPStore("127.0.0.1", store.port, secret=b"s", timeout=20)
        host, port = asker.get("p/tcp/0").decode().rsplit(":", 1)
        for _ in range(flood):             # connections that never prove the secret
            held.append(socket.create_connection((host, int(port)), timeout=10))
    except OSError:                        # this process is out of descriptors too (the limit is shared)
        pass
    flooded.set()

def rank1(out):
    flooded.wait()
    if free:
        time.sleep(1.0)                    # rank 0 is out of descriptors meanwhile; then they come back
        for s in held:
            s.close()
    try:
        out.append(TcpTransport(1, 2, TCPStore("127.0.0.1", store.port, secret=b"s", timeout=20), "p", b"s",
                                "127.0.0.1", 20))
    except Exception as e:
        out.append(e)

if free:
    soft = len(os.listdir("/proc/self/fd")) + free
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
got = []
threads = [threading.Thread(target=flooder), threading.Thread(target=rank1, args=(got,))]
for t in threads:
    t.start()
zero = TcpTransport(0, 2, store, "p", b"s", "127.0.0.1", 20)
for t in threads:
    t.join()
assert isinstance(got[0], TcpTransport), got
closed = 0
for s in held if not free else []:
    s.settimeout(0.2)
    try:
        closed += s.recv(64)[32:] == b"" and s.recv(64) == b""
    except TimeoutError:
        pass
    except OSError:
        closed += 1
print("ok", closed, flush=True)
"""


@pytest.mark.parametrize("free,flood,cap", [(14, 40, 1000), (0, 30, 8), (0, 9, 3)])
def test_the_tcp_transport_set_up_survives_a_flood_as_the_store_does(free: int, flood: int, cap: int):
    """The tcp transport's listener (open while a group is set up) had the store's two weaknesses (issue 35
    item 12's sibling): accept() failing for want of descriptors ended its loop, so the ranks still to
    connect "never connected"; and every unproven connection held a descriptor and a thread. It now runs
    the store's Doorman: a shortage is waited out, and beyond TG_STORE_MAX_UNPROVEN the oldest unproven
    connection is closed (here: all but cap - 1 of the flood, the last place taken by rank 1)."""
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root, TG_SHM="0", TG_STORE_MAX_UNPROVEN=str(cap))
    done = subprocess.run([sys.executable, "-c", TRANSPORT_SETUP, str(free), str(flood)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-3000:]
    if free:
        assert "Too many open files" in done.stderr, done.stderr[-2000:]
    else:
        assert int(done.stdout.split()[1]) == flood - cap + 1, done.stdout


def _sum_of_ranks(rank: int, world: int) -> float:
    x = np.full(3, float(rank), np.float32)
    dist.all_reduce(x)
    return float(x[0])


@pytest.mark.parametrize("world", [4, 6])
def test_a_job_with_more_ranks_than_the_cap_on_unproven_connections_starts(world):
    """The cap closes the oldest unproven connection: a tcp set-up where every rank connects to rank 0 at
    once (more than the cap) must still come up. The set-up listener's cap is at least the connections it
    expects, and a rank whose connection was closed before the handshake connects again (the store's
    clients already did)."""
    got = run_ranks(world, _sum_of_ranks, backend="tcp", env={"TG_STORE_MAX_UNPROVEN": "1"}, timeout=120)
    assert got == [float(sum(range(world)))] * world
