"""Lowered kernels kept on disk (tg/core/lower_cache.py): a kernel the device has not lowered in this process
is read back from an earlier lowering, with the same source and the same results as lowering it afresh;
anything lowering reads that the key names (a knob, a heuristic, tg's code, the device) files apart; a
damaged entry is lowered again. Programs are generated over ops, shapes and dtypes; results against numpy."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import gpu_support

from tg import Device, GlobalCounters, Tensor, config
from tg.core import lower_cache, realize
from tg.core.codegen import heuristics, search

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _kept(monkeypatch, tmp_path):
    monkeypatch.setenv("TG_LOWER_CACHE", "1")
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))


def _forget(device: str) -> None:
    """Drop the device's programs (and the kept schedules holding them) from memory, as a new process
    starts without them."""
    realize._REUSE.clear()
    dev = Device[device]
    dev._by_key.clear()
    dev._programs.clear()


def _program(seed: int, device: str) -> tuple[Tensor, np.ndarray]:
    """A random small program (elementwise chain, reduce or matmul) on odd shapes, of a random dtype."""
    rng = np.random.default_rng(seed)
    dtype = [np.float32, np.float64, np.int32][seed % 3]
    n, m = int(rng.integers(3, 40)), int(rng.integers(2, 70))
    def draw(shape: tuple[int, int]) -> np.ndarray:
        if dtype == np.int32:
            return rng.integers(-9, 9, shape, np.int32)
        return rng.uniform(-2, 2, shape).astype(dtype)
    a, b = draw((n, m)), draw((m, n))
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    kind = seed % 4
    if kind == 0:
        return (x * 3 + x.T.T.abs()).maximum(x[:, ::-1]), np.maximum(a * 3 + np.abs(a), a[:, ::-1])
    if kind == 1:
        return x.sum(1) - x.amax(0).sum(), a.sum(1) - a.max(0).sum()
    if kind == 2:
        return x @ y, a @ b
    return (x.T + y).sum(0, keepdim=True) * 2, (a.T + b).sum(0, keepdims=True) * 2


def _check(t: Tensor, want: np.ndarray) -> None:
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4 if t.dtype.itemsize == 4 else 1e-10, atol=1e-4)


def _sources(device: str) -> dict:
    return {k: p.src for k, p in Device[device]._by_key.items()}


def _cuda_missing() -> str | None:
    try:
        Device["CUDA"]
        return None
    except (ImportError, RuntimeError) as e:
        return str(e)


@pytest.mark.parametrize("device", ["CPU", "CL", "CUDA"])
@pytest.mark.parametrize("seed", range(12))
def test_a_kept_lowering_is_the_fresh_one(seed, device):
    """On CUDA where a GPU is (scripts/gpu_check.py's machines); CI has none."""
    if device == "CL" and (reason := gpu_support("CL")) is not None:
        pytest.skip(f"CL is not available here: {reason}")
    if device == "CUDA" and (reason := _cuda_missing()) is not None:
        pytest.skip(f"no CUDA GPU here: {reason}")
    _forget(device)
    t, want = _program(seed, device)
    lowered = GlobalCounters.kernels_lowered
    _check(t, want)
    assert GlobalCounters.kernels_lowered > lowered
    fresh = _sources(device)
    _forget(device)
    lowered, recalled = GlobalCounters.kernels_lowered, GlobalCounters.kernels_recalled
    t, want = _program(seed, device)
    _check(t, want)
    assert GlobalCounters.kernels_lowered == lowered and GlobalCounters.kernels_recalled > recalled
    assert _sources(device) == fresh


def _matmul() -> tuple[Tensor, np.ndarray]:
    """A float32 matmul big enough to be a contraction the CPU may block (heuristics.large_enough)."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((64, 48)).astype(np.float32)
    return Tensor(a, device="CPU") @ Tensor(b, device="CPU"), a @ b


def _lowers_again(program=lambda: _program(2, "CPU")) -> bool:
    """Whether realizing a program (by default an int32 matmul) after forgetting lowers it afresh."""
    _forget("CPU")
    lowered = GlobalCounters.kernels_lowered
    t, want = program()
    _check(t, want)
    return GlobalCounters.kernels_lowered > lowered


def test_what_lowering_reads_files_apart(monkeypatch):
    assert _lowers_again() and not _lowers_again()
    with monkeypatch.context() as m:
        m.setenv("TG_NOOPT", "1")                                # a knob
        assert _lowers_again() and not _lowers_again()
    with monkeypatch.context() as m:
        m.setattr(heuristics, "MIN_MACS", heuristics.MIN_MACS + 1)    # a tuned heuristic
        assert _lowers_again() and not _lowers_again()
    with monkeypatch.context() as m:
        m.setattr(lower_cache, "_CODE", ["another tg"])          # another version of tg's code
        assert _lowers_again()
    assert not _lowers_again()


def test_what_lowering_does_not_read_shares_entries(monkeypatch):
    """A rank, a launcher's run id, DEBUG (or a malformed knob lowering never reads) neither files apart
    nor fails: every rank of a job reads the entries the first wrote."""
    assert _lowers_again()
    for knob, value in (("RANK", "3"), ("TG_RUN_ID", "job-7"), ("DEBUG", "1"), ("LOCAL_RANK", "abc")):
        with monkeypatch.context() as m:
            m.setenv(knob, value)
            assert not _lowers_again()


def _config_reads(path: Path) -> set[str]:
    """The knobs a file reads (`config.NAME`; config's functions are lower-case)."""
    return {n.attr for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "config"
            and n.attr.isupper()}


# knobs read where kernels are lowered that decide nothing about a kernel's source
NOT_LOWERING = {"TG_CACHE_DIR", "TG_DISABLE_CACHE", "TG_LOWER_CACHE", "TG_PROGRAM_CACHE", "TG_DEVICE",
                "DEBUG", "KNOBS"}


def test_every_knob_lowering_reads_is_in_the_key():
    """Every knob read by codegen, the runtimes, device.py, compiler.py or lower_cache.py is either in
    LOWERING_KNOBS (part of an entry's name) or known not to shape a kernel's source."""
    core = REPO / "tg" / "core"
    files = [*sorted((core / "codegen").glob("*.py")), *sorted((core / "runtime").glob("*.py")),
             core / "device.py", core / "compiler.py", core / "lower_cache.py", core / "kernel.py",
             core / "shape.py", core / "symbolic.py"]
    read = set().union(*(_config_reads(p) for p in files))
    assert read - NOT_LOWERING - set(lower_cache.LOWERING_KNOBS) == set()
    assert set(lower_cache.LOWERING_KNOBS) <= set(config.KNOBS)


def test_an_unfinished_search_is_not_kept(monkeypatch):
    """A matmul lowered while the search budget is spent gets the rule's nest for now; a later process
    must search it, so that lowering is not kept. With the search off (TG_BEAM=0) the rule is final."""
    monkeypatch.setenv("TG_BEAM_MIN_MACS", "1")
    monkeypatch.setattr(heuristics, "MIN_MACS", 1)           # a contraction however small
    monkeypatch.setattr(search, "_spent", [1e9])
    assert _lowers_again(_matmul) and _lowers_again(_matmul)
    monkeypatch.setenv("TG_BEAM", "0")
    assert _lowers_again(_matmul) and not _lowers_again(_matmul)


def test_a_damaged_entry_is_lowered_again(tmp_path):
    assert _lowers_again()
    entries = sorted((tmp_path / "lowered").glob("*.json"))
    assert entries
    for i, path in enumerate(entries):        # each a different kind of damage
        text = path.read_text()
        path.write_text([text[: len(text) // 2], "[]", json.dumps({**json.loads(text), "flops": "x"}),
                         json.dumps({**json.loads(text), "src": 3})][i % 4])
    assert _lowers_again()
    assert not _lowers_again()             # rewritten whole
    assert not list((tmp_path / "lowered").glob(".tmp-*"))


def test_off_writes_nothing(monkeypatch, tmp_path):
    for knob, value in (("TG_LOWER_CACHE", "0"), ("TG_DISABLE_CACHE", "1")):
        with monkeypatch.context() as m:
            m.setenv(knob, value)
            assert _lowers_again() and _lowers_again()
            assert not (tmp_path / "lowered").exists()


def test_a_new_process_lowers_nothing(tmp_path):
    """Two processes run the same training step on one cache: the second lowers no kernel."""
    script = textwrap.dedent("""
        import numpy as np
        from tg import GlobalCounters, Tensor, nn, optim
        Tensor.manual_seed(0)
        model = nn.Sequential(nn.Linear(13, 31), nn.GELU(), nn.LayerNorm(31), nn.Linear(31, 5))
        opt = optim.AdamW(model.parameters(), lr=1e-2)
        x = Tensor(np.random.default_rng(0).standard_normal((7, 13)).astype(np.float32))
        loss = nn.functional.cross_entropy(model(x), Tensor(np.arange(7) % 5))
        opt.zero_grad(); loss.backward(); opt.step()
        print(GlobalCounters.kernels_lowered, GlobalCounters.kernels_recalled, repr(loss.item()))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TG_LOWER_CACHE": "1", "TG_DEVICE": "CPU",
           "TG_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    (lowered1, recalled1, loss1), (lowered2, recalled2, loss2) = [r.stdout.split() for r in runs]
    assert int(lowered1) > 0 and int(recalled1) == 0
    assert int(lowered2) == 0 and int(recalled2) == int(lowered1)
    assert loss1 == loss2
