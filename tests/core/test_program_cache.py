"""A long process that builds many distinct kernels (a fuzzer, shapes that change, a kernel search) keeps
a bounded number of them loaded: each CPU kernel library is mapped into the process, and Linux caps a
process's mappings (vm.max_map_count, 65530): the fuzzer died at 14,280 kernels with "failed to map
segment from shared object". Programs past TG_PROGRAM_CACHE are let go of, and a library is unmapped once
nothing uses its kernels; a kernel needed again is loaded again and computes the same."""
import numpy as np

from tg import Tensor
from tg.core.device import Device


def _maps() -> int:
    """Mappings of kernel libraries (files under the kernel cache) in this process."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(".so") and "/kernels/" in line)


def _distinct_kernel(i: int) -> Tensor:
    # each i a different constant folded into the source: a new kernel, a new library
    return (Tensor(np.arange(5, dtype=np.float32)) * float(i) + float(i) / 7.0)


def test_kernels_past_the_cache_are_unloaded_and_load_again(monkeypatch):
    monkeypatch.setenv("TG_PROGRAM_CACHE", "16")      # knobs are read from the environment at each use
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    dev = Device[_distinct_kernel(-1).device]       # the default device (the suite also runs on CL)
    _distinct_kernel(-1).numpy()
    start = _maps()
    for i in range(300):
        got = _distinct_kernel(i).numpy()
        np.testing.assert_allclose(got, np.arange(5) * i + i / 7.0, rtol=1e-6)
        assert len(dev._programs) <= 16 and len(dev._by_key) <= 16
    # 300 libraries kept would be over a thousand mappings more
    assert _maps() - start < 100, (_maps(), start)
    for i in (0, 1, 299):        # evicted long ago (or not): built or loaded again, same values
        np.testing.assert_allclose(_distinct_kernel(i).numpy(), np.arange(5) * i + i / 7.0, rtol=1e-6)


def test_a_captured_replay_keeps_its_kernels_loaded(monkeypatch):
    import gc

    from tg import TinyJit
    monkeypatch.setenv("TG_PROGRAM_CACHE", "4")
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    step = TinyJit(lambda x: (x * 3.0 + 1.0).exp().sum() * 1.0)
    data = [np.random.default_rng(i).standard_normal(6).astype(np.float32) for i in range(6)]
    for d in data[:3]:
        step(Tensor(d)).numpy()             # eager, capture, replay
    for i in range(40):                      # every program the capture used is out of the cache now
        _distinct_kernel(1000 + i).numpy()
    gc.collect()
    for d in data[3:]:
        got = step(Tensor(d)).numpy()
        np.testing.assert_allclose(got, np.exp(d.astype(np.float64) * 3 + 1).sum(), rtol=1e-5)


_DROP_ALL = """
import gc, sys
import numpy as np
from tg import Tensor
from tg.core.device import Device
rng = np.random.default_rng(int(sys.argv[1]))
sizes = [int(n) for n in rng.integers(1 << 14, 1 << 18, 4)]     # large enough to run on every thread
def work(n, c):
    a = rng.standard_normal(n).astype(np.float32)
    got = (Tensor(a) * c + 1.0).relu().sum().numpy()
    want = np.maximum(a.astype(np.float64) * c + 1.0, 0).sum()
    assert abs(got - want) <= 1e-4 * abs(want) + 1e-3, (got, want)
for rnd in range(int(sys.argv[2])):
    for n in sizes:
        work(n, float(rnd) + 0.5)
    dev = Device[Tensor([1.0]).device]
    dev._programs.clear(); dev._by_key.clear()         # every program let go of: every library unmapped
    gc.collect()
print("ok")
"""


def test_unloading_every_kernel_library_leaves_the_thread_runtime_loaded():
    """The OpenMP runtime is a dependency of the kernel libraries: when the last one was unmapped (every
    program let go of, or every finalizer at exit) the runtime went with it while its worker threads
    slept inside it, and the process died of SIGSEGV, after its work or at its next kernel (CI: a
    process that printed "ok" and exited -11). Seeds draw the sizes; rounds drop everything in between."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    # OMP_WAIT_POLICY: the workers spin between kernels, so an unmapped runtime faults at once
    env = dict(os.environ, PYTHONPATH=str(root), TG_DEVICE="CPU", TG_SCHEDULE_CACHE="0",
               OMP_WAIT_POLICY="ACTIVE")
    for seed in range(8):
        done = subprocess.run([sys.executable, "-c", _DROP_ALL, str(seed), str(1 + seed % 3)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == "ok", \
            (seed, done.returncode, done.stderr[-2000:])
