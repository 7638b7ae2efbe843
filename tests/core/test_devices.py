"""Devices beyond the CPU: transfers both ways between CPU, CL and NUMPY (COPY is a scheduled op),
the CUDA device's compiler (NVRTC, no GPU needed) and its error when no GPU is present, and how the
default device is chosen."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import gpu_support, kernel_count

from tg import Device, Tensor
from tg.core.codegen.linearizer import linearize_for
from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
from tg.core.schedule import create_schedule


def needs(what: str) -> None:
    reason = gpu_support(what)
    if reason is not None:
        pytest.skip(f"{what} is not available here: {reason}")


@pytest.mark.parametrize(
    "src,dst", [("CPU", "CL"), ("CL", "CPU"), ("CL", "NUMPY"), ("NUMPY", "CL"), ("CL", "CL")]
)
def test_transfers_both_ways(src, dst):
    needs("CL")
    a = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    x = Tensor(a, device=src)
    y = (x * 2).to(dst) + 1            # computed on src, copied, computed on dst
    assert y.device == dst
    np.testing.assert_allclose(y.numpy(), a * 2 + 1, rtol=1e-6)
    back = y.to(src).T.contiguous()
    np.testing.assert_allclose(back.numpy(), (a * 2 + 1).T, rtol=1e-6)


def test_copy_is_a_scheduled_op():
    needs("CL")
    x = Tensor(np.arange(6, dtype=np.float32), device="CPU")
    y = (x + 1).to("CL") * 3
    kinds = [it.kind for it in create_schedule([y.lazydata])]
    assert kinds == ["kernel", "copy", "kernel"] and kernel_count(y) == 2
    assert y.tolist() == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0]


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "bool", "bfloat16"])
def test_dtypes_round_trip_through_cl(dtype):
    needs("CL")
    a = (np.arange(-3, 9) % 5).astype(np.float32 if dtype == "bfloat16" else dtype)
    t = Tensor(a, dtype=dtype, device="CL")
    np.testing.assert_array_equal((t.to("CPU")).numpy(), a)
    np.testing.assert_array_equal((t + t).numpy(), (a + a) if dtype != "bool" else (a | a))


def _cuda_source(out: Tensor) -> tuple[str, str]:
    kernel = create_schedule([out.lazydata])[-1].kernel
    lin = linearize_for(kernel, DIALECTS["cuda"])
    return lin.name, CStyleRenderer(DIALECTS["cuda"]).render(lin)


def test_nvrtc_builds_a_cubin_for_a_real_arch_and_ptx_for_a_virtual_one():
    needs("NVRTC")
    from tg.core.runtime.ops_cuda import NVRTCCompiler
    x = Tensor(np.ones((3, 5), np.float32), device="CPU")
    name, src = _cuda_source((x.half() * 2).sum(axis=1))
    sm90 = NVRTCCompiler("sm_90")
    cubin = sm90.compile_binary(src)
    assert cubin[:4] == b"\x7fELF" and name.encode() in cubin  # machine code: loads under any 13.x driver
    assert sm90.suffix == ".cubin" and f"{sm90.version[0]}.{sm90.version[1]} sm_90 cubin" in sm90.ident
    ptx = NVRTCCompiler("compute_90").compile_binary(src).decode()
    assert f".entry {name}" in ptx and ".target sm_90" in ptx
    assert sm90.cached_path(src) != NVRTCCompiler("compute_90").cached_path(src)   # target in the cache key


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint32", "int64"])
def test_cuda_integer_maxes_avoid_the_ptxas_fusion_that_drops_a_negation(dtype):
    """ptxas 13.0 for sm_90 fused a chain of int32 maxes over negated values (min is -max(-x)) into
    VIMNMX3 and lost one negation, so x.min() was wrong on an H100 (scripts/gpu_check.py caught it).
    CUDA's integer max of 32 bits or fewer goes through tg_max, which ptxas cannot fuse so; checked on
    the GPU by gpu_check's suites, here that every such max takes it and that the source builds."""
    needs("NVRTC")
    from tg.core.runtime.ops_cuda import NVRTCCompiler
    x = Tensor(np.arange(21).reshape(3, 7).astype(dtype), device="CPU").realize()
    sources = [CStyleRenderer(DIALECTS["cuda"]).render(linearize_for(it.kernel, DIALECTS["cuda"]))
               for out in (x.amin(), x.argmin(1), x.max(0).values) for it in create_schedule([out.lazydata])
               if it.kind == "kernel"]
    maxes = []     # (accumulator type, how it takes the max)
    for src in sources:
        types = dict((name, t) for t, name in re.findall(r"([a-z][a-z ]*?) (acc\d+) = ", src))
        maxes += [(types[m[0]], m[1]) for m in re.findall(r"\n\s*(acc\d+) = ([^;]*);", src)
                  if not re.search(r"[+|]", m[1])]
    assert len(maxes) >= 3 and (dtype != "int64" or any("long" in t for t, _ in maxes)), maxes
    for ctype, how in maxes:      # 64-bit maxes are no VIMNMX: the ternary stays
        assert how.startswith("tg_max(") == ("long" not in ctype), (ctype, how)
    for src in sources:
        NVRTCCompiler("sm_90").compile_binary(src)


def test_nvrtc_errors_name_the_problem():
    needs("NVRTC")
    from tg.core.compiler import CompileError
    from tg.core.runtime.ops_cuda import NVRTCCompiler
    with pytest.raises(ValueError, match="expected sm_XY"):
        NVRTCCompiler("volta")
    with pytest.raises(ValueError, match="cannot build for sm_20; it supports .*sm_90"):
        NVRTCCompiler("sm_20")
    with pytest.raises(CompileError, match="NVRTC failed"):
        NVRTCCompiler("sm_90").compile_binary(
            'extern "C" __global__ void k(float* a) { a[0] = undefined_name; }'
        )


def test_driver_and_nvrtc_versions_are_checked():
    needs("NVRTC")
    from tg.core.runtime.ops_cuda import check_arch, check_versions
    check_versions((13, 0), (13, 5), "sm_90")              # a cubin runs under minor-version compatibility
    check_versions((13, 5), (13, 5), "compute_90")
    with pytest.raises(RuntimeError, match=r"CUDA 12\.8, older than NVRTC 13\.5.*cuda12"):
        check_versions((12, 8), (13, 5), "sm_90")
    with pytest.raises(RuntimeError, match=r"PTX from NVRTC 13\.5 .*CUDA 13\.0.*TG_CUDA_ARCH=sm_XY"):
        check_versions((13, 0), (13, 5), "compute_90")
    check_arch("sm_90", (9, 0), "H100")
    check_arch("sm_80", (8, 6), "RTX 3090")                # a cubin runs on later minors of its major
    with pytest.raises(ValueError, match=r"TG_CUDA_ARCH=sm_80 cannot run on H100 .*9\.0.*sm_90"):
        check_arch("sm_80", (9, 0), "H100")


def test_cuda_without_a_gpu_says_so():
    needs("NVRTC")
    from tg.core.runtime.ops_cuda import gpu_count
    try:
        gpu_count()
    except RuntimeError as e:
        assert "no CUDA driver or GPU" in str(e) or "sees no GPU" in str(e)
        with pytest.raises(RuntimeError, match="TG_DEVICE"):
            Device["CUDA"]
        assert Device.count("CUDA") == 0
        with pytest.raises(RuntimeError, match="no CUDA device is usable here"):
            Device.canonicalize("CUDA:1")
    else:
        pytest.skip("a CUDA GPU is present")


def test_default_device_is_printed_with_debug():
    env = {k: v for k, v in os.environ.items() if k != "TG_DEVICE"}
    proc = subprocess.run([sys.executable, "-c", "from tg import Tensor; print(Tensor([1]).device)"],
                          env={**env, "DEBUG": "1"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    device = proc.stdout.strip().splitlines()[-1]
    assert device in ("CPU", "CUDA") and f"[device] default device {device}" in proc.stdout


def test_gpu_matmul_work_items_hold_four_by_four_tiles():
    from tg.core.codegen.linearizer import linearize
    a, b = Tensor(np.ones((64, 32), np.float32)), Tensor(np.ones((32, 48), np.float32))
    kernel = create_schedule([(a @ b).lazydata])[-1].kernel
    lin = linearize(kernel, use_lanes=False, gpu=True)
    assert lin.global_size == (64 // 4) * (48 // 4)      # each work item: 16 outputs in registers
    small = create_schedule([(a[:6] @ b[:, :6]).lazydata])[-1].kernel
    assert linearize(small, use_lanes=False, gpu=True).global_size == 36   # too small to tile


def _gpu_kernel(out: Tensor, dialect: str = "opencl", **options):
    from tg.core.codegen.linearizer import linearize_for
    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    lin = linearize_for(create_schedule([out.lazydata])[-1].kernel, DIALECTS[dialect], **options)
    return lin, CStyleRenderer(DIALECTS[dialect]).render(lin)


def test_few_long_reductions_share_a_work_group_through_local_memory():
    x = Tensor(np.ones((100, 1024), np.float32))
    for dialect, local, barrier in (("opencl", "__local float", "barrier(CLK_LOCAL_MEM_FENCE)"),
                                    ("cuda", "__shared__ float", "__syncthreads()")):
        lin, src = _gpu_kernel(x.amax(axis=1), dialect)
        assert lin.local_size >= 128 and lin.global_size == 100 * lin.local_size, (
            dialect
        )  # a group per output
        assert local in src and barrier in src and "if ((lidx0<1))" in src
    lin, src = _gpu_kernel(x.amax(axis=1), "cuda", group_size=96)   # a device allowing at most 96 items
    assert lin.local_size == 64 and "[64];" in src and "s = 32" in src   # the halving tree needs 2**k
    lin, src = _gpu_kernel(x.sum(axis=1)[:, None] * Tensor(np.ones((100, 4096), np.float32)))
    assert lin.local_size == 0      # many outputs: one work item per output, no local memory
    lin, _ = _gpu_kernel(Tensor(np.ones((64, 32), np.float32)).sum(axis=1))
    assert lin.local_size == 0      # a short reduce stays in one work item


@pytest.mark.parametrize(
    "shape,axis",
    [
        ((3, 4096), 1),
        ((1, 512), 1),
        ((7, 3 * 256 * 5), 1),
        ((2, 3, 2048), 2),
        ((4096,), 0),
        ((5, 8192), None),
        ((3000, 2), 0),
    ],
)
def test_grouped_reductions_on_cl_match_numpy(shape, axis):
    needs("CL")
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape).astype(np.float32)
    x = Tensor(a, device="CL")
    np.testing.assert_allclose(x.sum(axis=axis).numpy(), a.sum(axis=axis), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(x.amax(axis=axis).numpy(), a.max(axis=axis))
    np.testing.assert_allclose((x.exp().sum(axis=axis) + 1).log().numpy(),
                               np.log(np.exp(a).sum(axis=axis) + 1), rtol=1e-4)   # and an epilogue
    n = (a > 0.5).astype(np.int32)
    np.testing.assert_array_equal(Tensor(n, device="CL").sum(axis=axis).numpy(), n.sum(axis=axis))
    np.testing.assert_array_equal(Tensor(a > 2, device="CL").any(axis=axis).numpy(), (a > 2).any(axis=axis))
    h = a.astype(np.float16)
    np.testing.assert_allclose(Tensor(h, device="CL").float().sum(axis=axis).numpy(),
                               h.astype(np.float32).sum(axis=axis), rtol=1e-3, atol=1e-2)


def test_grouped_reduction_nan_propagates_like_numpy():
    needs("CL")
    a = np.zeros((2, 4096), np.float32)
    a[1, 3001] = np.nan
    np.testing.assert_array_equal(Tensor(a, device="CL").amax(axis=1).numpy(), a.max(axis=1))


def test_opencl_kernels_load_and_store_float4():
    x = Tensor(np.ones((64, 256), np.float32))
    _, src = _gpu_kernel(((x * 2 + 1).relu() - 0.25).contiguous())
    assert "vload4(0, data1+" in src and "vstore4(" in src and "float4 " in src
    _, src = _gpu_kernel(x.exp2())
    assert "exp2(v" in src                                       # built-in vector math
    _, src = _gpu_kernel((x[:, :255] * 2).contiguous())
    assert "vload4" not in src                                   # 255 columns: scalar code


@pytest.mark.parametrize("n", [4, 12, 1000, 4099])
def test_float4_elementwise_on_cl_matches_numpy(n):
    needs("CL")
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.integers(-9, 9, n).astype(np.int32)
    x, y = Tensor(a, device="CL"), Tensor(b, device="CL")
    np.testing.assert_allclose(
        (x.relu() * 3 - x.sigmoid()).numpy(),
        np.maximum(a, 0) * 3 - 1 / (1 + np.exp(-a)),
        rtol=1e-5,
        atol=1e-6,
    )
    np.testing.assert_array_equal(((y * 3) // 2 + (y < 2).where(y, -y)).numpy(),
                                  (b * 3) // 2 + np.where(b < 2, b, -b))
    np.testing.assert_array_equal(x.bitcast("int32").numpy(), a.view(np.int32))
    np.testing.assert_allclose((x[1:] + x[:-1]).numpy(), a[1:] + a[:-1], rtol=1e-6)   # offset views
