"""The test jobs' ports (tests/ports.py): outside the ephemeral range, disjoint between xdist workers,
never the same twice in a row."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import ports


def _ports_of(worker: str, n: int) -> list[int]:
    code = f"import json, ports; print(json.dumps([ports.free_port() for _ in range({n})]))"
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker}
    out = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(__file__), env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_ports_avoid_the_ephemeral_range_and_each_other():
    band = ports._band()
    got = {w: _ports_of(w, 50) for w in ("gw0", "gw1", "gw7")}
    for w, ps in got.items():
        assert len(set(ps)) == len(ps), f"{w} got a port twice: {ps}"
        if band is not None:
            assert all(band[0] <= p < band[1] for p in ps), (band, ps)
    if band is not None:
        assert not set(got["gw0"]) & set(got["gw1"]) and not set(got["gw1"]) & set(got["gw7"])


def test_a_port_in_use_is_skipped():
    import socket
    first = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", first + 1 if ports._SLICE and first + 1 in ports._SLICE else 0))
        taken = s.getsockname()[1]
        for _ in range(5):
            assert ports.free_port() != taken
