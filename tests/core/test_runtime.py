"""CPU runtime: disk cache, compile errors, counters, DEBUG output, laziness."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tg
from tg import GlobalCounters, Tensor
from tg.core.compiler import CompileError
from tg.core.runtime.ops_cpu import ClangCompiler


def run_py(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_second_process_compiles_nothing(tmp_path):
    code = """
        import numpy as np
        from tg import Tensor
        x = Tensor(np.arange(10, dtype=np.float32))
        print(((x * 3 + 1).relu().sum()).item())
    """
    env = {"TG_CACHE_DIR": str(tmp_path), "TG_DEVICE": "CPU"}
    first = run_py(code, env)
    assert first.returncode == 0, first.stderr
    libs = sorted(p.name for p in (tmp_path / "kernels").glob("*.so"))
    assert libs
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "kernels").glob("*.so")}
    second = run_py(code, env)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "kernels").glob("*.so")} == mtimes
    assert not list((tmp_path / "kernels").glob("*.tmp"))


def test_compile_error_names_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError, match=r"source written to .*\.c"):
        ClangCompiler().compile("void broken( {")
    assert not list((tmp_path / "kernels").glob("*.so"))   # nothing half-written under the real name


def test_interrupted_compile_leaves_no_library(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    comp = ClangCompiler()

    def boom(src, out):
        out.write_bytes(b"partial")
        raise KeyboardInterrupt
    monkeypatch.setattr(comp, "compile_to", boom)
    with pytest.raises(KeyboardInterrupt):
        comp.compile("int x;")
    assert list((tmp_path / "kernels").iterdir()) == []


def test_counters_track_allocations():
    # no garbage collection mid-test: another test's buffers freed by a GC cycle would move mem_used
    gc.collect()
    gc.disable()
    try:
        _check_counters()
    finally:
        gc.enable()


def _check_counters():
    GlobalCounters.reset()
    before = GlobalCounters.mem_used
    x = Tensor(np.zeros(1000, dtype=np.float32))
    assert GlobalCounters.mem_used == before + 4000
    y = (x + 1).realize()
    assert GlobalCounters.mem_used == before + 8000 and GlobalCounters.mem_peak >= before + 8000
    k = GlobalCounters.kernel_count
    (y * 2).realize()
    assert GlobalCounters.kernel_count == k + 1
    del x, y
    assert GlobalCounters.mem_used == before


@pytest.mark.parametrize("level,needle", [(1, "[realize]"), (2, "GFLOPS"), (3, "[schedule]"), (4, "void ")])
def test_debug_levels(level, needle):
    out = run_py("""
        from tg import Tensor
        (Tensor([1.0, 2.0, 3.0]) * 2).sum().item()
    """, {"DEBUG": str(level)})
    assert out.returncode == 0, out.stderr
    assert needle in out.stdout


def test_nothing_runs_until_needed():
    k = GlobalCounters.kernel_count
    x = Tensor(np.ones(8, dtype=np.float32))
    y = (x * 2).exp().sum()
    assert GlobalCounters.kernel_count == k
    y.item()
    assert GlobalCounters.kernel_count == k + 1


def test_default_device_from_environment():
    out = run_py("from tg import Tensor; print(Tensor([1]).device)", {"TG_DEVICE": "numpy"})
    assert out.stdout.strip() == "NUMPY"
    bad = run_py("from tg import Tensor; Tensor([1])", {"TG_DEVICE": "TPU"})
    assert bad.returncode != 0 and "TG_DEVICE='TPU'" in bad.stderr


def test_no_grad_is_context_and_decorator():
    x = Tensor([1.0], requires_grad=True)
    with tg.no_grad():
        assert (x * 2)._ctx is None

    @tg.no_grad()
    def f(t):
        return t * 2
    assert f(x)._ctx is None and (x * 2)._ctx is not None


def test_large_elementwise_output_is_exact():
    # large enough for the streaming-store path on AVX-512 machines (and plain stores elsewhere)
    a = np.random.default_rng(0).standard_normal(3 << 20).astype(np.float32)
    out = ((Tensor(a) * 2.0 + 1.0).relu() * 0.5).numpy()
    np.testing.assert_array_equal(out, np.maximum(a * 2.0 + 1.0, 0) * 0.5)


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_assign_reading_its_own_target_through_another_view(device):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    y = Tensor(a, device=device).realize()
    y.assign(y.T).realize()
    np.testing.assert_array_equal(y.numpy(), a.T)
    x = Tensor(np.arange(8, dtype=np.float32), device=device).realize()
    x.assign(x.flip(0) * 2 + x).realize()
    np.testing.assert_array_equal(x.numpy(), np.arange(8)[::-1] * 2 + np.arange(8))
    z = Tensor(np.arange(4, dtype=np.float32), device=device).realize()
    handle = z.detach()
    z.assign(z + 1).realize()                     # z's memory now belongs to two lazy buffers
    z.assign(handle.flip(0)).realize()            # reads that memory reversed through the old handle
    np.testing.assert_array_equal(z.numpy(), [4.0, 3.0, 2.0, 1.0])


def _kernel_sources() -> list[str]:
    """C sources of kernels with distinct names that use every kind of file-level helper: vector
    typedefs and math (exp2, log2), bfloat16 conversion, the shuffle fold."""
    from tg.core.device import Device
    from tg.core.schedule import create_schedule
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((64, 48)).astype(np.float32))
    outs = [x.exp().log().relu(), (x @ x.T).sum(1), x.bfloat16().float() * 2, x.amax(0)]
    dev, found = Device["CPU"], {}
    for item in create_schedule([o.lazydata for o in outs]):
        if item.kind == "kernel":
            name, src, _ = dev.lower(item.kernel)
            found.setdefault(name, src)
    return list(found.values())


def test_c_file_names_lists_every_file_level_helper():
    """A batch build renames each kernel's file-level helpers; one missing from the list would clash."""
    import re

    from tg.core.codegen.renderer import C_FILE_NAMES
    declared = set()
    for src in _kernel_sources():
        declared |= set(re.findall(r"^typedef [\w ]+? (\w+) __attribute__", src, re.M))
        declared |= set(re.findall(r"^static inline [\w ]+? (\w+)\(", src, re.M))
    assert declared and declared <= set(C_FILE_NAMES), declared - set(C_FILE_NAMES)
    assert {"f32v", "tg_exp2_v", "tg_log2_v", "tg_f32_to_bf16"} <= declared


def test_a_batch_is_built_once_and_cached_per_source(tmp_path, monkeypatch):
    import ctypes
    import re
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    comp, srcs = ClangCompiler(), _kernel_sources()
    assert len(srcs) >= 4
    runs = []
    monkeypatch.setattr(comp, "compile_to", lambda *a: runs.append("one") or pytest.fail("built alone"))
    real_many = comp.compile_many_to
    monkeypatch.setattr(comp, "compile_many_to", lambda s, out: runs.append(len(s)) or real_many(s, out))
    paths = comp.compile_batch(srcs)
    assert runs == [len(srcs)]                              # one compiler run for all of them
    assert paths == [comp.cached_path(s) for s in srcs] and len(set(paths)) == len(srcs)
    for src, path in zip(srcs, paths):                      # each entry holds its own kernel
        assert hasattr(ctypes.CDLL(str(path)), re.search(r"^void (\w+)\(", src, re.M).group(1))
    assert [comp.compile(s) for s in srcs] == paths and runs == [len(srcs)]   # later look-ups hit
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == sorted(p.name for p in paths)


def test_a_failing_batch_names_the_kernel_that_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    good = _kernel_sources()[0]
    with pytest.raises(CompileError, match=r"source written to .*\.c"):
        ClangCompiler().compile_batch([good, "void broken( {"])
    assert ClangCompiler().cached_path(good).exists()       # the good one was still built and cached


def test_reading_a_strided_view_of_realized_memory_runs_no_kernel():
    a = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    t = Tensor(a).realize()
    views = [(lambda x: x.transpose(0, 2) if isinstance(x, Tensor) else x.transpose(2, 1, 0)),
             lambda x: x[1, :, 1:4], lambda x: x[:, ::2], lambda x: x.reshape(-1)[7:20]]
    before = GlobalCounters.kernel_count
    for view in views:
        got = view(t).numpy()
        assert np.array_equal(got, view(a)) and got.flags.writeable and got.flags.c_contiguous
    assert GlobalCounters.kernel_count == before
    bf = Tensor(a).bfloat16().realize()
    assert np.array_equal(bf[1].numpy(), bf.numpy()[1])             # bfloat16 bits converted too
    flipped = t.flip(2).numpy()                                      # a negative stride still works
    assert np.array_equal(flipped, a[:, :, ::-1])


def test_entering_a_batch_never_writes_into_an_existing_file(tmp_path, monkeypatch):
    """Without hard links the batch's library is copied into a file made for it, never through a path
    that may already be a link to another entry's library."""
    import tg.core.compiler as compiler
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    comp, srcs = ClangCompiler(), _kernel_sources()
    first = comp.compile_batch(srcs[:2])
    before = {p: p.read_bytes() for p in first}

    def no_links(*a):
        raise OSError("no hard links here")
    monkeypatch.setattr(compiler.os, "link", no_links)
    later = comp.compile_batch(srcs[2:])
    assert {p: p.read_bytes() for p in first} == before and all(p.exists() for p in later)
    assert not list((tmp_path / "kernels").glob("*.link")) and not list((tmp_path / "kernels").glob("*.tmp"))


def test_an_empty_schedule_runs():
    from tg.core.realize import run_schedule
    run_schedule([])
