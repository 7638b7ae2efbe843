"""Shared pytest setup: every test starts from the same RNG seeds (tg's and numpy's global one) and the
global Tensor.training unset, whatever order xdist runs it in. With TG_TEST_CASES=N (set by
tests/core/test_gpu_suite.py for its run of the suites on the OpenCL device) a test generated over many
random seeds runs N of them, spread evenly: that run checks the device's code path, which the seeds share,
while every seed runs on the CPU. Cases per op, dtype or shape all run there too."""
import os

import numpy as np
import pytest

import tg

# Lowered kernels kept on disk (tg/core/lower_cache.py) are keyed by everything lowering reads in a normal
# run; tests also patch lowering's functions and devices' attributes, which no key can see, so the suite
# lowers afresh and tests/core/test_lower_cache.py turns the cache on for its own cases.
os.environ.setdefault("TG_LOWER_CACHE", "0")


@pytest.fixture(autouse=True)
def _seed():
    tg.Tensor.manual_seed(0)
    np.random.seed(0)
    tg.Tensor.training = None
    yield


# NVRTC's time grows faster than a source's length: the 2000-deep chains of test_graph_walks.py render
# to 180 KB (forward) and 360 KB (backward) of straight-line CUDA C, which took NVRTC 2 and 6 minutes
# before heavy math calls were outlined (renderer.outline_calls) and 2 and 9 s since. Longer sources are
# rendered (that check stays) but not compiled: they are long runs of the same expressions that the
# shorter kernels compile.
NVRTC_MAX_SOURCE = 200_000


def _compile_every_kernel_with_nvrtc(arch: str) -> None:
    """TG_TEST_NVRTC=sm_90 (set by tests/core/test_gpu_suite.py): every kernel the tests schedule is
    also rendered as CUDA C and compiled by NVRTC for that target (up to NVRTC_MAX_SOURCE characters),
    so a CUDA source that does not compile fails the test that produced it. No GPU is needed."""
    from tg import Device
    from tg.core.capture import add_schedule_watcher
    from tg.core.runtime.ops_cuda import NVRTCCompiler

    compiler, null = NVRTCCompiler(arch), Device["NULL"]
    seen: set = set()

    def compile_for_cuda(items):
        for it in items:
            if it.kind != "kernel" or it.kernel is None:
                continue
            for k in getattr(it.kernel, "members", [it.kernel]):     # a CPU row group: each of its kernels
                if k.key not in seen:
                    seen.add(k.key)
                    src = null.render(k, "cuda")
                    if len(src) <= NVRTC_MAX_SOURCE:
                        compiler.compile(src)
    add_schedule_watcher(compile_for_cuda)


if os.environ.get("TG_TEST_NVRTC"):
    _compile_every_kernel_with_nvrtc(os.environ["TG_TEST_NVRTC"])


def pytest_collection_modifyitems(config, items):
    keep_n = int(os.environ.get("TG_TEST_CASES", "0"))
    if keep_n <= 0:
        return
    groups: dict = {}
    for item in items:
        # only cases told apart by a random seed: a case per op or dtype is the device's code path itself
        seeded = "seed" in getattr(getattr(item, "callspec", None), "params", {})
        groups.setdefault((item.fspath, item.originalname) if seeded else id(item), []).append(item)
    kept, dropped = [], []
    for cases in groups.values():
        if len(cases) <= keep_n:
            kept += cases
            continue
        picks = {round(i * (len(cases) - 1) / (keep_n - 1)) for i in range(keep_n)} if keep_n > 1 else {0}
        for i, item in enumerate(cases):
            (kept if i in picks else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
