"""The search of how a contraction runs (tg/core/codegen/search.py) is safe by construction: each
candidate's first run is a check against the one-pass kernel on guarded scratch buffers, so a candidate
that computes other values, or writes next to its output, is never chosen; one that crashes its process
is marked in flight beforehand, so the next process leaves it out and goes on. And every nest the search
may take computes the layers of real models (mnist, the CNN, GPT) at odd sizes as a float64 sum does,
on guarded memory.

CI runs two representative layers; the whole matrix (every layer at batch 1, 7, 64 and 200; the
85-px conv at 1 and 7) runs with `python3 tests/core/test_search.py`."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tg import Device, Tensor
from tg.core.codegen import gemm, heuristics, nests, search
from tg.core.codegen.linearizer import linearize_for
from tg.core.dtype import dtypes
from tg.core.runtime.ops_cpu import ClangCompiler, _vector_bytes
from tg.core.schedule import create_schedule

LANES = _vector_bytes() // 4
ROOT = Path(__file__).resolve().parents[2]


def contraction(out: Tensor) -> gemm.Contraction:
    found = [gemm.contraction(it.kernel, LANES) for it in create_schedule([out.lazydata])
             if it.kind == "kernel"]
    c = next((c for c in found if c is not None), None)
    assert c is not None
    return c


def T(values: np.ndarray, requires_grad: bool = False) -> Tensor:
    return Tensor(values, device="CPU", requires_grad=requires_grad)


def run_script(body: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    """body in a fresh process with the search forced on small kernels and a cache folder of its own."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), TG_CACHE_DIR=str(cache), TG_BEAM="60",
                TG_BEAM_MIN_MACS="1", TG_DEVICE="CPU", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=full, capture_output=True,
                          text=True, timeout=300)


def records(cache: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((cache / "search").glob("*.json"))]


# ---------------------------------------------------------------------------- the scratch buffers

def test_the_scratch_is_aligned_and_guarded(tmp_path):
    """Every buffer starts at a multiple of 64 bytes, as the device's allocator gives them (a one-pass
    kernel's streaming stores fault on less); a write next to a buffer shows in its canaries; a write
    into an input, or far past a buffer, stops the process at once (SIGSEGV) instead of corrupting it."""
    for size in (1, 61, 64, 1000, 1025, 300000):
        kernel = SimpleNamespace(buf_sizes=[size, size + 3, 7], buf_dtypes=[dtypes.float32, dtypes.float32,
                                                                             dtypes.int32])
        scratch = search.Scratch(kernel)
        assert all(a.value % 64 == 0 for a in scratch.args)
        assert not scratch.overran()
        scratch.clear()
        assert np.isnan(scratch.out).all()
        assert 0 <= scratch.bufs[1].min() and scratch.bufs[1].max() < 1 and not scratch.bufs[2].any()
        end = scratch.args[0].value + scratch.out.nbytes
        ctypes.memset(end + 4, 0, 4)               # one float past the end (and one more)
        assert scratch.overran()
        scratch.clear()
        assert not scratch.overran()
    for where in ("", " + 4000 + 200"):         # into the buffer made read-only; into the guard page
        done = run_script(f"""
            import ctypes
            from tg.core.codegen import search
            buf, zones, read_only = search.guarded(4000)
            read_only()
            ctypes.memset(buf.ctypes.data{where}, 0, 4)
            print("survived")
        """, tmp_path)
        assert done.returncode == -11 and "survived" not in done.stdout, done.stderr


def test_a_searched_kernel_whose_one_pass_kernel_streams_runs(tmp_path):
    """The search's reference, the one-pass kernel, streams its stores into an output of 4 MiB or more
    (with AVX-512): on unaligned scratch buffers (numpy's) it crashed the process (issue 34 item 12: a
    conv 64->64 at 85 x 85 px, the mnist net at batch 200)."""
    done = run_script("""
        import numpy as np
        from tg import Tensor
        from tg.core.codegen import search
        search.candidates = search.direct_candidates = search.broadcast_candidates = lambda lanes: []
        x = np.random.default_rng(0).random((1, 16, 300, 300), np.float32)
        w = np.random.default_rng(1).random((16, 16, 3, 3), np.float32)
        got = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        want = sum(np.einsum("bchw,oc->bohw", xp[:, :, i:i + 300, j:j + 300], w[:, :, i, j])
                   for i in range(3) for j in range(3))
        assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()
        print("ok")
    """, tmp_path)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    (record,) = records(tmp_path)
    assert record["tried"] == record["of"] == 2 and all(sec is not None for _, sec in record["timed"])


# ---------------------------------------------------------------------------- bad candidates

CRASH = """
    import numpy as np
    from tg import Tensor
    from tg.core.codegen import nests, search
    first = search.candidates
    search.candidates = lambda lanes: [(5, lanes, 64, 20, 4096)] + first(lanes)[:1]
    search.direct_candidates = search.broadcast_candidates = lambda lanes: []
    render = nests.render
    def crashing(c, p, renderer, name, lanes):
        if p.mr == 5:                  # no other candidate has 5 rows
            return f"void {name}(void) {{ *(volatile float*)16 = 1.0f; }}"
        return render(c, p, renderer, name, lanes)
    nests.render = crashing
    a = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((256, 160)).astype(np.float32)
    got = (Tensor(a) @ Tensor(b)).numpy()
    want = a.astype(np.float64) @ b
    assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()
    print("ok")
"""


def test_a_candidate_that_crashes_its_process_is_left_out_by_the_next(tmp_path):
    """The record marks each candidate in flight before it runs: the process it crashes dies (once),
    the next one counts it bad, times the others and runs the fastest good one."""
    first = run_script(CRASH, tmp_path)
    assert first.returncode == -11 and "ok" not in first.stdout
    (record,) = records(tmp_path)
    assert record["running"][0] == 5 and record["tried"] < record["of"]
    second = run_script(CRASH, tmp_path)
    assert second.returncode == 0 and "ok" in second.stdout, second.stderr
    assert "did not finish in an earlier process" in second.stderr
    (record,) = records(tmp_path)
    assert "running" not in record and record["tried"] == record["of"]
    timed = {json.dumps(k): sec for k, sec in record["timed"]}
    assert [sec for k, sec in record["timed"] if k is not None and k[0] == 5] == [None]
    assert record["params"] is None or record["params"][0] != 5
    assert timed[json.dumps(record["params"])] == record["seconds"] == min(s for s in timed.values() if s)
    third = run_script(CRASH, tmp_path)            # done: nothing runs again
    assert third.returncode == 0 and "ok" in third.stdout and records(tmp_path) == [record]


def wrapped(real: str, name: str, after: str) -> str:
    """The real nest as `name`_real, and `name` calling it and then doing `after`."""
    return real.replace(f"void {name}(", f"void {name}_real(") + \
        f"\nvoid {name}(float* d0, const float* d1, const float* d2) {{ {name}_real(d0, d1, d2); {after} }}\n"


def test_candidates_that_compute_other_values_are_never_chosen(monkeypatch, tmp_path, caplog):
    """A candidate that writes nothing (the fastest of all), one that is off at one output and one that
    writes a float past its output: each is found by its check and never timed or chosen; the others
    are."""
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TG_BEAM", "60")
    monkeypatch.setenv("TG_BEAM_MIN_MACS", "1")
    monkeypatch.setattr(search, "_spent", [0.0])
    monkeypatch.setattr(heuristics, "MIN_MACS", 1)
    rng = np.random.default_rng(3)
    c = contraction(T(rng.random((96, 200), np.float32)) @ T(rng.random((200, 2 * LANES + 9), np.float32)))
    size = c.kernel.buf_sizes[0]
    first = search.candidates
    monkeypatch.setattr(search, "candidates", lambda lanes: [(mr, lanes, 64, 20, 4096) for mr in (5, 7, 9)] +
                        first(lanes)[:1])
    monkeypatch.setattr(search, "direct_candidates", lambda lanes: [])
    monkeypatch.setattr(search, "broadcast_candidates", lambda lanes: [])
    render = nests.render
    bad = {5: "", 7: "d0[3] += 1.0f;", 9: f"d0[{size}] = 0.0f;"}

    def wrong(c, p, renderer, name, lanes):
        if p.mr == 5:
            return f"void {name}(void) {{ }}"
        real = render(c, p, renderer, name, lanes)
        return wrapped(real, name, bad[p.mr]) if p.mr in bad else real
    monkeypatch.setattr(nests, "render", wrong)
    dev = Device["CPU"]
    lin = linearize_for(c.kernel, dev.renderer.d, **dev.lower_options)
    won = search.choose(c, "g_bad", LANES, dev.renderer, ClangCompiler(),
                        lambda name: dev.renderer.render(lin, name))
    assert won is None or won.mr not in bad
    (record,) = records(tmp_path)
    assert record["tried"] == record["of"] == len(search.ways(c, LANES))
    for k, sec in record["timed"]:
        assert (sec is None) == (k is not None and k[0] in bad), (k, sec)
    assert sum("computed wrong values" in r.getMessage() for r in caplog.records) == 3


# ---------------------------------------------------------------------------- every nest, real layers

def windows(xp: np.ndarray, kh: int, kw: int) -> np.ndarray:
    """(B, C, OH, OW, kh, kw) views of the padded input."""
    return np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))


def conv_layer(batch: int, cin: int, cout: int, hw: int, pad: int):
    """A conv2d with bias, its input's and weight's gradients, and the float64 sums they should be."""
    rng = np.random.default_rng(batch * 1000 + cin)
    x = rng.standard_normal((batch, cin, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    oh = hw + 2 * pad - 2
    g = rng.standard_normal((batch, cout, oh, oh)).astype(np.float32)

    def program() -> list[np.ndarray]:
        tx, tw, tb = T(x, True), T(w, True), T(b, True)
        y = tx.conv2d(tw, tb, padding=pad)
        (y * T(g)).sum().backward()
        return [y.numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]

    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win, g64 = windows(xp, 3, 3), g.astype(np.float64)
    y = np.einsum("bchwij,ocij->bohw", win, w, optimize=True) + b[:, None, None]
    dxp = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + oh, j:j + oh] += np.einsum("bohw,oc->bchw", g64, w[:, :, i, j])
    dx = dxp[:, :, pad:pad + hw, pad:pad + hw]
    dw = np.einsum("bohw,bchwij->ocij", g64, win, optimize=True)
    return program, [y, dx, dw, g64.sum((0, 2, 3))]


def linear_layer(rows: int, fan_in: int, fan_out: int):
    """A linear layer with bias over `rows` rows (batch x tokens), its gradients and their float64 sums."""
    rng = np.random.default_rng(rows * 1000 + fan_in)
    x = rng.standard_normal((rows, fan_in)).astype(np.float32)
    w = (rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(fan_out).astype(np.float32)
    g = rng.standard_normal((rows, fan_out)).astype(np.float32)

    def program() -> list[np.ndarray]:
        tx, tw, tb = T(x, True), T(w, True), T(b, True)
        y = tx @ tw.T + tb
        (y * T(g)).sum().backward()
        return [y.numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]

    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    return program, [x64 @ w.T.astype(np.float64) + b, g64 @ w, g64.T @ x64, g64.sum(0)]


# (name, layer(batch)): the layers of the mnist net (pytorch/examples), bench_train's CNN and GPT
# (n_embd 128, 64 tokens a sequence), and the conv whose odd 85-px rows crashed the search
LAYERS = {
    "mnist conv 1->32": lambda n: conv_layer(n, 1, 32, 28, 0),
    "mnist conv 32->64": lambda n: conv_layer(n, 32, 64, 26, 0),
    "mnist fc 9216->128": lambda n: linear_layer(n, 9216, 128),
    "cnn fc 9216->10": lambda n: linear_layer(n, 9216, 10),
    "gpt qkv 128->384": lambda n: linear_layer(64 * n, 128, 384),
    "gpt fc 128->512": lambda n: linear_layer(64 * n, 128, 512),
    "gpt fc_out 512->128": lambda n: linear_layer(64 * n, 512, 128),
    "gpt head 128->256": lambda n: linear_layer(64 * n, 128, 256),
    "conv 64->64 85px": lambda n: conv_layer(n, 64, 64, 85, 1),
}
BATCHES = {name: (1, 7) if "85px" in name else (1, 7, 64, 200) for name in LAYERS}
CI = [("mnist conv 32->64", 7), ("gpt qkv 128->384", 7)]


def guard_memory(mp: pytest.MonkeyPatch) -> list[np.ndarray]:
    """Every buffer the CPU device allocates from now on is guarded (search.guarded): a kernel's
    access far past it stops the process; the canary zones returned show a write next to it."""
    alloc = Device["CPU"].allocator
    zones: list[np.ndarray] = []

    def guarded_alloc(nbytes: int) -> np.ndarray:
        block, around, _ = search.guarded(nbytes)
        zones.extend(around)
        alloc.register(block, ctypes.c_void_p(block.ctypes.data))
        return block
    # no block from before the test is handed out again (each goes through _free); those the test
    # frees stay in the cache for later tests, guarded blocks as good as any
    alloc.release()
    mp.setattr(alloc, "_alloc", guarded_alloc)
    return zones


def every_nest(layer: str, batch: int, mp: pytest.MonkeyPatch) -> set:
    """The layer run once per way the search may run its contractions (the i-th of search.ways for
    each, in turn i), each time on guarded memory and against its float64 sums; the (kernel, nest)
    pairs that ran."""
    program, want = LAYERS[layer](batch)
    dev = Device["CPU"]
    mp.setenv("TG_SCHEDULE_CACHE", "0")
    zones = guard_memory(mp)
    turn, ran, counts = [0], set(), [1]

    def choose(c, name, lanes, renderer, compiler, one_pass):
        options = search.ways(c, lanes)
        counts.append(len(options))
        p = options[turn[0] % len(options)]
        ran.add((c.ast.key, p))
        return p
    mp.setattr(search, "choose", choose)
    while turn[0] < max(counts):
        mp.setattr(dev, "_by_key", OrderedDict())    # lowered afresh: each contraction asks choose again
        got = program()
        for name, g, w in zip(("y", "x.grad", "w.grad", "b.grad"), got, want):
            err = np.abs(g - w).max() / (np.abs(w).max() + 1e-30)
            assert err < 1e-5, f"{layer} at batch {batch}, turn {turn[0]}: {name} off by {err:.2e}"
        assert not any((z != 0xFF).any() for z in zones), f"{layer} at batch {batch}: a write past a buffer"
        turn[0] += 1
    return ran


@pytest.mark.parametrize("layer,batch", CI)
def test_every_nest_computes_real_models_layers_as_float64_sums(layer, batch, monkeypatch):
    """The forward and both gradients of each layer, with each contraction in every nest and block
    shape the search may choose for it (the one-pass kernel, packed, direct and broadcast nests, tiles
    that divide nothing: 624 = 24 x 26 positions, 85 x 87, 9 channel windows), on guarded memory."""
    monkeypatch.setattr(heuristics, "MIN_MACS", 1)         # the contractions of small batches too
    ran = every_nest(layer, batch, monkeypatch)
    nests = {p.nest for _, p in ran if p is not None}
    assert {"packed", "direct"} <= nests and any(p is None for _, p in ran)


if __name__ == "__main__":
    # the whole matrix: every layer at every batch (a few minutes on a few cores)
    heuristics.MIN_MACS = 1
    for name in LAYERS:
        for n in BATCHES[name]:
            with pytest.MonkeyPatch.context() as mp:
                print(f"{name} at batch {n}: {len(every_nest(name, n, mp))} (kernel, nest) pairs", flush=True)
