"""Shared pytest setup: every test starts from the same RNG seeds (tg's and numpy's global one),
whatever order xdist runs it in."""
import os

import numpy as np
import pytest

import tg


@pytest.fixture(autouse=True)
def _seed():
    tg.Tensor.manual_seed(0)
    np.random.seed(0)
    yield


def _compile_every_kernel_with_nvrtc(arch: str) -> None:
    """TG_TEST_NVRTC=sm_90 (set by tests/core/test_gpu_suite.py): every kernel the tests schedule is
    also rendered as CUDA C and compiled by NVRTC for that target, so a CUDA source that does not
    compile fails the test that produced it. No GPU is needed."""
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
                    compiler.compile(null.render(k, "cuda"))
    add_schedule_watcher(compile_for_cuda)


if os.environ.get("TG_TEST_NVRTC"):
    _compile_every_kernel_with_nvrtc(os.environ["TG_TEST_NVRTC"])
