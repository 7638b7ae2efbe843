"""scripts/gpu_check.py, the one-command check of a GPU box, end to end: on CL (the OpenCL device CI
has on its CPU) its quick mode passes and prints every row; on a machine with no GPU, `--device CUDA`
stops at once with tg's own message and exit status 2."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import gpu_support

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def run_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TG_DEVICE", "TG_TEST_DEVICES")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def table_row(stdout: str, name: str) -> str:
    rows = [line for line in stdout.splitlines() if line.startswith(name)]
    assert rows, f"no {name!r} row in:\n{stdout}"
    return rows[0]


# a suite run on a device (test_gpu_suite's, or gpu_check's own) must not start another one inside it
@pytest.mark.skipif(bool(os.environ.get("TG_DEVICE")), reason="runs inside a device's suite run")
def test_quick_check_passes_on_cl_and_prints_every_row():
    if gpu_support("CL") is not None:
        pytest.skip('no OpenCL device here: pip install -e ".[cl]"')
    proc = run_check("--device", "CL", "--quick", timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    assert re.search(r"^device\s+CL$", out, re.M) and table_row(out, "driver").split()[1:]
    suites = re.search(r"(\d+) passed, (\d+) failed, (\d+) skipped", table_row(out, "op suites"))
    assert suites and int(suites[1]) > 100 and int(suites[2]) == 0, table_row(out, "op suites")
    for name in ("TinyJit training step", "DDP step"):
        assert " PASS " in table_row(out, name)
    rows = [("elementwise chain + sum", "GB/s"), ("elementwise chain,", "GB/s"), ("sum(-1)", "GB/s"),
            ("matmul 256x256 float32", "GFLOPS"), ("matmul 256x256 float16", "GFLOPS"),
            ("matmul 256x256 bfloat16", "GFLOPS")]
    for name, unit in rows:
        number = re.search(rf"\s(\d+\.\d+) {unit}\s+(\d+\.\d+)x ", table_row(out, name))
        assert number and float(number[1]) > 0 and float(number[2]) > 0, table_row(out, name)
    assert "PASS: every check passed" in out


def test_cuda_without_a_gpu_fails_fast_with_tgs_message():
    from tg import Device
    if Device.count("CUDA") > 0:
        pytest.skip("a CUDA GPU is present")
    proc = run_check("--device", "CUDA", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert re.search(r"\[cuda\] (no CUDA driver or GPU found|the CUDA driver sees no GPU|.*pip install)",
                     proc.stderr), proc.stderr
    assert "Fix" in proc.stderr or "pip install" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "[gpu_check]" not in proc.stdout, "it went on past the device"
