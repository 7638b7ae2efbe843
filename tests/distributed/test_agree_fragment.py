"""The C engines' agreement (tg/distributed/transport/agree.c, spliced into shm_engine.c and
ucx_engine.c) against Python's (algorithms.Call.agree): for every world size up to 40 and every rank,
the C exchange order (agree_steps) is the order in which Python's agreement sends and receives, peer for
peer; and the verdict over random hashes, one odd or none, is Python's (the range of the hashes is one
value). Both engines splice the one fragment (native.source), and neither restates the rule."""
import ctypes
import struct

import numpy as np
import pytest

from tg.core.compiler import CCompiler
from tg.distributed.transport import algorithms, native

HARNESS = """
int tg_steps(int n, int r, int *peers, int *merges) { return agree_steps(n, r, peers, merges); }
int tg_agreed(const uint64_t *hashes, int n) {
    hash_range all = range_of(hashes[0]);
    for (int i = 1; i < n; i++) range_fold(&all, range_of(hashes[i]));
    return range_agreed(all);
}
"""


@pytest.fixture(scope="module")
def lib():
    src = native.AGREE.read_text() + HARNESS
    out = ctypes.CDLL(str(CCompiler(native.FLAGS + ["-x", "c", "-"], "the agreement harness").compile(src)))
    out.tg_agreed.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return out


class Recording:
    """A transport that records the agreement's sends and receives (each receive answers with a frame
    of the same hash), as (peer, 0) for a send and (peer, 1) for a receive."""
    timeout = 5.0

    def __init__(self, world: int, rank: int):
        self.world, self.rank, self.steps = world, rank, []

    def send_control(self, peer, seq, payload, fixed):
        self.steps.append((peer, 0))

        class Done:
            def wait(self, timeout=None):
                return len(payload)
        return Done()

    def recv_control(self, peer, seq, size, what):
        self.steps.append((peer, 1))
        frame = bytearray(size)
        h = algorithms.desc_hash(b"same")
        struct.pack_into("<QQ", frame, 0, h, h)
        return bytes(frame)


@pytest.mark.parametrize("n", range(1, 41))
def test_the_c_exchange_is_pythons_order(lib, n):
    for r in range(n):
        t = Recording(n, r)
        algorithms.Call(t, 1, b"same", "test", list(range(n))).agree()
        peers, merges = (ctypes.c_int * 64)(), (ctypes.c_int * 64)()
        steps = lib.tg_steps(n, r, peers, merges)
        assert [(peers[i], merges[i]) for i in range(steps)] == t.steps, (n, r)
        assert steps <= 2 * max(n - 1, 1).bit_length() + 2     # what ucx_engine.c's MAX_OPS holds


def test_the_verdict_is_one_value_of_the_hashes(lib):
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 20))
        hashes = np.full(n, rng.integers(0, 1 << 62), dtype=np.uint64)
        if trial % 2:
            hashes[rng.integers(0, n)] ^= np.uint64(1) << np.uint64(rng.integers(0, 62))
        assert lib.tg_agreed(hashes.ctypes.data, n) == (len(set(hashes.tolist())) == 1)


@pytest.mark.parametrize("engine", ["shm_engine.c", "ucx_engine.c"])
def test_both_engines_splice_the_fragment_and_restate_nothing(engine):
    path = native.AGREE.with_name(engine)
    raw, spliced = path.read_text(), native.source(path)
    assert '#include "agree.c"' in raw and native.AGREE.read_text() in spliced
    local = [line for line in spliced.splitlines() if line.startswith('#include "')]
    assert local == []          # every fragment spliced: the compiler reads the source from stdin
    assert "lo == hi" not in raw and "p2 * 2 <= n" not in raw     # the rule and the order are agree.c's
