"""Ports for test jobs that cannot be taken between choosing one and binding it.

`bind(0)`, release, then let the job bind the number later races: in that gap the kernel may hand the
same number to any outgoing connection (it is an ephemeral port) or to another test running at the same
time (pytest-xdist) that did the same. Here a port comes from a band outside the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), so no outgoing connection is ever given it, and from this
xdist worker's own slice of that band, each handed out once per cycle, so two tests never share one.
Where no such band exists (an ephemeral range over almost every port), bind(0) it is."""
from __future__ import annotations

import itertools
import os
import socket

WORKERS = 16               # xdist workers with disjoint slices (more share slices modulo this)
LOWEST = 10000             # below this many system services listen


def _band() -> tuple[int, int] | None:
    """[lo, hi) outside the ephemeral range, at least 2,000 ports wide, or None."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        first, last = 32768, 60999          # Linux's default
    for lo, hi in ((LOWEST, first), (last + 1, 65536)):
        if hi - lo >= 2000:
            return lo, hi
    return None


def _slice() -> range | None:
    band = _band()
    if band is None:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    index = int(worker) % WORKERS if worker.isdigit() else 0
    width = (band[1] - band[0]) // WORKERS
    return range(band[0] + index * width, band[0] + (index + 1) * width)


_SLICE = _slice()
_NEXT = itertools.cycle(_SLICE) if _SLICE is not None else None


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 now that nothing else will be given before this test's job binds it."""
    if _NEXT is not None and _SLICE is not None:
        for _ in range(len(_SLICE)):
            port = next(_NEXT)
            if bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
