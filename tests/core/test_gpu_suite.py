"""The core and nn suites, unchanged, on the CL device: `TG_DEVICE=CL` makes CL the default device
and `TG_TEST_DEVICES=CL` the device of every op test. In CI the OpenCL driver is the one the `cl`
extra installs (a real OpenCL device on the CPU), so the GPU code path runs on every change. The
same run renders every kernel it schedules as CUDA C and compiles it with NVRTC (`TG_TEST_NVRTC`,
see tests/conftest.py), which needs no GPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import gpu_support

REPO = Path(__file__).resolve().parents[2]


# Two runs, so that pytest-xdist can give them a worker each; with a cold kernel cache tests/nn takes
# about five minutes on two busy cores (every kernel is built by the OpenCL driver and by NVRTC), and
# tests/core, with issue 34's generated tests and fuzzer, 25 to 60 (the bound leaves room for the slow
# end; making this run shorter is the suite-time work still open).
@pytest.mark.slow
@pytest.mark.timeout(4000)
@pytest.mark.parametrize("suite", ["tests/core", "tests/nn"])
@pytest.mark.skipif(os.environ.get("TG_DEVICE") == "CL", reason="this is the run it starts")
def test_core_and_nn_suites_pass_on_cl(suite):
    if gpu_support("CL") is not None:
        pytest.skip('no OpenCL device here: pip install -e ".[cl]"')
    # each generated test on the device runs 3 of its cases (tests/conftest.py): the device's code path,
    # not the cases, is what this run checks; the cases all run on the CPU
    env = {**os.environ, "TG_DEVICE": "CL", "TG_TEST_DEVICES": "CL", "TG_TEST_CASES": "3"}
    if gpu_support("NVRTC") is None:
        env["TG_TEST_NVRTC"] = "sm_90"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            suite,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
