"""A ucx job whose master is loopback listens on loopback only (issue 15, defect 5): UCX's tagged
messages are not authenticated, so its ports must not be reachable from another host."""
from __future__ import annotations

import ipaddress
import os
import socket

import pytest
from harness import require, run_ranks


def _address(hex_addr: str) -> str:
    """/proc/net/tcp{,6} writes the address as the kernel's in-memory words, each 32 bits in host order."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def listening(pid: int) -> list[str]:
    """host:port of every TCP socket of process `pid` in LISTEN state and every bound UDP socket,
    found by matching the socket inodes of its open descriptors against its namespace's tables."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table, wanted_state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == wanted_state and inode in inodes:
                addr, port = local.split(":")
                found.append(f"{table} {_address(addr)}:{int(port, 16)}")
    return found


def _sockets_while_connected(rank: int, world: int) -> dict:
    import numpy as np

    import tg.distributed as dist
    x = np.full(5, rank + 1, np.float32)
    dist.all_reduce(x)                     # the UCX endpoints are up and have carried data
    sockets = listening(os.getpid())
    dist.barrier()                         # nobody tears down before every rank has looked
    return {"sum": float(x[0]), "sockets": sockets}


def _non_loopback_addresses() -> list[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        infos = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))    # no packet is sent: this only asks for the outgoing address
            infos.append((0, 0, 0, "", (s.getsockname()[0], 0)))
        except OSError:
            pass
    return sorted({i[4][0] for i in infos if not ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback})


def test_listener_helper_sees_a_wildcard_listener():
    # the check below is only worth something if it sees a socket that is not loopback
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        assert f"tcp 0.0.0.0:{port}" in listening(os.getpid())


def test_local_ucx_job_listens_on_loopback_only():
    require("ucx")
    if not _non_loopback_addresses():
        pytest.skip("this host has no address beyond loopback, so the check cannot tell")
    results = run_ranks(2, _sockets_while_connected, backend="ucx", timeout=120)
    for rank, result in enumerate(results):
        assert result["sum"] == 3.0
        # rank 0 serves the store; every rank has at least one UCX TCP listener of its own
        assert result["sockets"], f"rank {rank} listens nowhere; the check found no sockets"
        exposed = [s for s in result["sockets"]
                   if not ipaddress.ip_address(s.split(" ")[1].rsplit(":", 1)[0]).is_loopback]
        assert exposed == [], f"rank {rank} listens beyond loopback: {exposed} (all: {result['sockets']})"


def test_user_ucx_settings_win(monkeypatch):
    from tg.distributed.transport.ucx import HOST_MEMORY, LOOPBACK_ONLY, context_options, load_ucxx
    load_ucxx()          # ucxx sets UCX_RNDV_THRESH for GPU buffers when imported: that is not the user's
    for name in ("UCX_NET_DEVICES", "UCX_TLS"):
        monkeypatch.delenv(name, raising=False)
    assert context_options("127.0.0.1") == {**HOST_MEMORY, **LOOPBACK_ONLY}
    assert context_options("localhost") == {**HOST_MEMORY, **LOOPBACK_ONLY}
    assert context_options("192.0.2.7") == HOST_MEMORY     # a multi-host job: UCX picks its devices
    monkeypatch.setenv("UCX_NET_DEVICES", "eth0")
    monkeypatch.setenv("UCX_RNDV_THRESH", "64kb")
    assert context_options("127.0.0.1") == {"TLS": LOOPBACK_ONLY["TLS"]}


def test_an_older_ucx_loaded_first_is_named(monkeypatch):
    """Seen on a GPU image: the system's UCX 1.16 loaded before the libucx wheel's, and ucxx refused
    it. tg says that ucxx is there and another UCX came first, not that ucxx is missing."""
    import importlib.abc
    import sys

    import tg.distributed.transport.ucx as ucx

    class OldUcx(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.startswith("ucxx"):
                raise ImportError("Support for UCX 1.16.0 has ended. Please upgrade to 1.19.0 or newer.")
            return None

    for name in [m for m in sys.modules if m == "ucxx" or m.startswith("ucxx.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [OldUcx(), *sys.meta_path])
    monkeypatch.setattr(ucx, "_api", None)
    with pytest.raises(ImportError, match=r"ucxx is installed but found an older UCX library.*1\.16\.0.*"
                                          r"LD_LIBRARY_PATH"):
        ucx.load_ucxx()
