"""Devices with an index: `CL:1`, `CUDA:3`. `KIND` is `KIND:0`; a process with LOCAL_RANK takes device
LOCAL_RANK mod count of its default kind; bad names and indices raise at the call, saying how many
devices there are. Several CL devices come from splitting the CPU (TG_CL_SPLIT=2, OpenCL device
fission), which works with any OpenCL CPU driver; each test that needs them runs in a fresh process,
since the device list is read once per process."""
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import gpu_support

from tg import Device, Tensor


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TG_DEVICE", "LOCAL_RANK", "TG_CL_SPLIT")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**base, **env},
                          capture_output=True, text=True, timeout=300)


def needs_cl() -> None:
    reason = gpu_support("CL")
    if reason is not None:
        pytest.skip(f"no OpenCL device here: {reason}")


def test_names_are_canonical():
    assert Device.canonicalize("cpu") == "CPU" and Device.canonicalize("CPU:0") == "CPU"
    assert Device.canonicalize("numpy:0") == "NUMPY"
    assert Device.count("CPU") == 1 and Device["cpu:0"] is Device["CPU"]
    assert Tensor([1.0], device="cpu:0").device == "CPU"


@pytest.mark.parametrize("name,error", [
    ("TPU", r"unknown device 'TPU'; expected one of .*CL.*CPU.*CUDA"),
    ("CL:one", r"expected KIND or KIND:N .*got index 'one'"),
    ("CPU:1", r"'CPU:1' does not exist: this machine has 1 CPU device \(CPU\)"),
    ("NUMPY:-1", r"got index '-1'"),
])
def test_bad_device_names_raise_at_the_call(name, error):
    with pytest.raises(ValueError, match=error):
        Tensor([1.0], device=name)
    with pytest.raises(ValueError, match=error):
        Tensor([1.0]).to(name)


def test_two_cl_devices_are_distinct_and_copy_both_ways():
    needs_cl()
    proc = run_py(
        """
        import numpy as np
        from tg import Device, Tensor, TinyJit
        assert Device.count("CL") == 2, Device.count("CL")
        a, b = Device["CL"], Device["CL:1"]
        assert a is Device["CL:0"] and a is not b and a.ctx != b.ctx and a.name == "CL" and b.name == "CL:1"
        x = np.random.default_rng(0).standard_normal((37, 29)).astype(np.float32)
        t1 = Tensor(x, device="cl:1")
        assert t1.device == "CL:1" and t1.lazydata.base.realized.allocator is b.allocator
        y = (t1 * 2).to("CL") + 1                            # computed on CL:1, copied, computed on CL:0
        assert y.device == "CL"
        np.testing.assert_allclose(y.numpy(), x * 2 + 1, rtol=1e-6)
        z = (y.to("CL:1") @ t1.T).sum(axis=0)                # back to CL:1
        np.testing.assert_allclose(z.numpy(), ((x * 2 + 1) @ x.T).sum(axis=0), rtol=1e-4, atol=1e-3)
        pairs = (("CPU", "CL:1"), ("CL:1", "CPU"), ("NUMPY", "CL:1"), ("CL:1", "NUMPY"), ("CL:1", "CL:1"))
        for src, dst in pairs:
            np.testing.assert_array_equal(Tensor(x, device=src).to(dst).numpy(), x)
            assert Tensor(x, device=src).to(dst).device == dst
        try:
            Tensor(x, device="CL") + t1
            raise SystemExit("mixing devices must raise")
        except ValueError as e:
            assert "different devices: CL and CL:1" in str(e), e
        try:
            Tensor(x, device="CL:2")
            raise SystemExit("CL:2 must raise")
        except ValueError as e:
            assert "this machine has 2 CL devices (CL:0..CL:1)" in str(e), e
        step = TinyJit(lambda u: (u * 3).sum(axis=1).realize())
        for i in range(4):                                  # captured and replayed on CL:1
            u = Tensor(x + i, device="CL:1")
            np.testing.assert_allclose(step(u).numpy(), ((x + i) * 3).sum(axis=1), rtol=1e-5)
        print("ok")
    """,
        TG_CL_SPLIT="2",
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


@pytest.mark.parametrize("env,want", [
    ({"TG_DEVICE": "CL", "LOCAL_RANK": "1"}, "CL:1"),
    ({"TG_DEVICE": "CL", "LOCAL_RANK": "2"}, "CL"),           # 2 mod 2
    ({"TG_DEVICE": "CL", "LOCAL_RANK": "3"}, "CL:1"),
    ({"TG_DEVICE": "CL:0", "LOCAL_RANK": "1"}, "CL"),         # an explicit index wins
    ({"TG_DEVICE": "CL:1"}, "CL:1"),
    ({"TG_DEVICE": "CL"}, "CL"),                              # not a rank: device 0
])
def test_each_rank_takes_its_own_device(env, want):
    needs_cl()
    proc = run_py("from tg import Tensor; t = Tensor([1.0]) + 1; print(t.device, t.tolist())",
                  TG_CL_SPLIT="2", DEBUG="1", **env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == f"{want} [2.0]"
    said = next(line for line in lines if line.startswith("[device] default device"))
    assert said.startswith(f"[device] default device {want} (")
    if "LOCAL_RANK" in env and env["TG_DEVICE"] == "CL":
        assert f"local rank {env['LOCAL_RANK']} of 2 CL devices" in said


def test_a_rank_without_a_gpu_takes_the_cpu():
    proc = run_py("from tg import Tensor; print(Tensor([1.0]).device)", LOCAL_RANK="3", TG_DEVICE="CPU")
    assert proc.returncode == 0 and proc.stdout.strip() == "CPU", proc.stderr


def test_an_impossible_split_says_why():
    needs_cl()
    units = Device["CL"].cl_device.max_compute_units
    proc = run_py("from tg import Tensor; Tensor([1.0], device='CL')", TG_CL_SPLIT=str(units + 1))
    assert proc.returncode != 0
    assert f"TG_CL_SPLIT={units + 1}" in proc.stderr and f"it has {units} compute units" in proc.stderr
