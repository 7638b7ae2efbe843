"""The tensor-core kernel for bfloat16 and float16 contractions on CUDA (codegen/mma.py, issue 36 item 3),
checked without a GPU: its fragment coordinates against the PTX ISA's statement of the m16n8k16 layouts,
its index arithmetic run over whole blocks in numpy into a product (against numpy's matmul), the whole
generated kernel run on the CPU by an emulator of the CUDA threads and of mma.sync (tests/core/cuda_emu.py)
against the CPU device's result for the same buffers, which kernels take it (the NULL device rendering
CUDA, as tests/conftest.py's NVRTC run does), and NVRTC compiling them to cubins for sm_80 and sm_90.
scripts/gpu_check.py runs them where a GPU is lent."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import gpu_support

import tg
from tg import Device, Tensor
from tg.core.codegen import gemm, heuristics, mma


def _c(expr: str, **values: int) -> int:
    """A FRAGMENTS expression (C: + * & >> on non-negative ints, the same in Python) at these values."""
    return int(eval(expr, {}, dict(values)))


# The PTX ISA's statement for mma.m16n8k16 with .f16/.bf16 operands, by element index i of a lane's
# elements (two per 32-bit register, the lower index in the lower half):
#   A (16 x 16): row = groupID for 0 <= i < 2 or 4 <= i < 6, else groupID + 8;
#                col = threadID_in_group * 2 + (i & 1), plus 8 for i >= 4
#   B (16 x 8):  row = threadID_in_group * 2 + (i & 1), plus 8 for i >= 2; col = groupID
#   C (16 x 8, float32): row = groupID for i < 2, else groupID + 8; col = threadID_in_group * 2 + (i & 1)
def isa_a(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return (g if i < 2 or 4 <= i < 6 else g + 8), t * 2 + (i & 1) + (8 if i >= 4 else 0)


def isa_b(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return t * 2 + (i & 1) + (8 if i >= 2 else 0), g


def isa_c(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


def test_the_fragment_coordinates_are_the_isa_layouts():
    """Each register's first element at FRAGMENTS' coordinates, the second one k further (A, B), every
    element of each operand held by exactly one lane."""
    for name, isa, regs, pairs in (("a", isa_a, 4, True), ("b", isa_b, 2, True), ("c", isa_c, 4, False)):
        row, col = mma.FRAGMENTS[name]
        seen = set()
        for lane in range(32):
            g, t = lane >> 2, lane % 4
            for reg in range(regs):
                at = (_c(row, g=g, t=t, reg=reg), _c(col, g=g, t=t, reg=reg))
                if pairs:
                    assert isa(lane, 2 * reg) == at
                    second = (at[0], at[1] + 1) if name == "a" else (at[0] + 1, at[1])
                    assert isa(lane, 2 * reg + 1) == second
                    seen |= {at, second}
                else:
                    assert isa(lane, reg) == at
                    seen.add(at)
        shape = {"a": (16, 16), "b": (16, 8), "c": (16, 8)}[name]
        assert seen == set(itertools.product(range(shape[0]), range(shape[1])))


def _mma_on_the_tensor_cores(a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray) -> np.ndarray:
    """What one mma.sync.m16n8k16 does to the 32 lanes' registers, placed by the ISA's statement:
    a_regs [32][8] elements, b_regs [32][4], c_regs [32][4] -> the new c_regs."""
    a, b, c = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane in range(32):
        for i in range(8):
            a[isa_a(lane, i)] = a_regs[lane, i]
        for i in range(4):
            b[isa_b(lane, i)] = b_regs[lane, i]
            c[isa_c(lane, i)] = c_regs[lane, i]
    d = a @ b + c
    return np.array([[d[isa_c(lane, i)] for i in range(4)] for lane in range(32)])


@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (80, 72, 48), (17, 130, 100)])
def test_the_kernels_index_arithmetic_over_whole_blocks_is_a_product(m, n, k):
    """The kernel's walk (its tiles, warps, fragment loads from the staged blocks, the sums' stores: the
    C expressions of codegen/mma.py evaluated here) with the ISA's mma gives x @ y."""
    rng = np.random.default_rng(m * n + k)
    x, y = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = np.full((m, n), np.nan)
    for ic, jc in itertools.product(range(0, m, mma.BM), range(0, n, mma.BN)):
        sums = np.zeros((4, 2, 4, 32, 4))       # warp, i, j, lane, reg
        for k0 in range(0, k, mma.BK):
            As = np.zeros((mma.BM, mma.ROW))
            Bs = np.zeros((mma.BN, mma.ROW))
            xs, ys = x[ic:ic + mma.BM, k0:k0 + mma.BK], y[k0:k0 + mma.BK, jc:jc + mma.BN]
            As[:xs.shape[0], :xs.shape[1]] = xs
            Bs[:ys.shape[1], :ys.shape[0]] = ys.T
            for warp, ks in itertools.product(range(4), range(0, mma.BK, 16)):
                wm, wn = (_c(e, warp=warp) for e in mma.WARP)
                for i, j in itertools.product(range(2), range(4)):
                    a_regs, b_regs = np.zeros((32, 8)), np.zeros((32, 4))
                    for lane in range(32):
                        g, t = lane >> 2, lane % 4
                        for reg in range(4):
                            r, kk = (_c(e, g=g, t=t, reg=reg) for e in mma.FRAGMENTS["a"])
                            a_regs[lane, 2 * reg:2 * reg + 2] = As[wm + 16 * i + r, ks + kk:ks + kk + 2]
                        for reg in range(2):
                            kk, col = (_c(e, g=g, t=t, reg=reg) for e in mma.FRAGMENTS["b"])
                            b_regs[lane, 2 * reg:2 * reg + 2] = Bs[wn + 8 * j + col, ks + kk:ks + kk + 2]
                    sums[warp, i, j] = _mma_on_the_tensor_cores(a_regs, b_regs, sums[warp, i, j])
        for warp, i, j, lane, reg in itertools.product(range(4), range(2), range(4), range(32), range(4)):
            wm, wn = (_c(e, warp=warp) for e in mma.WARP)
            r, col = (_c(e, g=lane >> 2, t=lane % 4, reg=reg) for e in mma.FRAGMENTS["c"])
            mm, nn = ic + wm + 16 * i + r, jc + wn + 8 * j + col
            if mm < m and nn < n:
                assert np.isnan(out[mm, nn]), "two sums stored to one output"
                out[mm, nn] = sums[warp, i, j, lane, reg]
    np.testing.assert_allclose(out, x @ y, rtol=1e-12, atol=1e-12)


def _cases():
    """(name, output) of contractions the kernel takes: each layout, batched, fused epilogues, autocast's
    float32 factors cast in the kernel, a conv, float16."""
    e = lambda *s, dt=tg.bfloat16: Tensor.empty(*s, dtype=dt, device="CPU")      # noqa: E731
    f32 = lambda *s: Tensor.empty(*s, device="CPU")      # noqa: E731
    return [
        ("A B", e(100, 70) @ e(70, 130)),
        ("A^T B", e(70, 100).T @ e(70, 130)),
        ("A B^T", e(100, 70) @ e(130, 70).T),
        ("batched", e(3, 65, 40) @ e(3, 40, 33)),
        ("linear + bias + relu", e(5, 40, 96).linear(e(48, 96), e(48)).relu()),
        ("autocast factors", f32(96, 80).cast(tg.bfloat16) @ f32(80, 72).cast(tg.bfloat16)),
        ("float16", e(100, 70, dt=tg.float16) @ e(70, 130, dt=tg.float16)),
        ("float16 batched, A^T", e(2, 70, 100, dt=tg.float16).transpose(1, 2) @ e(2, 70, 50, dt=tg.float16)),
        ("conv", e(2, 16, 12, 12).conv2d(e(32, 16, 3, 3), padding=1)),
    ]


def _mma_sources() -> list[tuple[str, str]]:
    from tests.core.test_gemm import kernels
    null = Device["NULL"]
    out = []
    for name, t in _cases():
        srcs = [null.render(k, "cuda") for k in kernels(t)]
        found = [s for s in srcs if "mma.sync" in s]
        assert len(found) == 1, f"{name}: {len(found)} tensor-core kernels"
        out.append((name, found[0]))
    return out


def test_bf16_and_f16_contractions_take_the_tensor_core_kernel_and_others_do_not():
    sources = _mma_sources()
    for name, src in sources:
        ptx = "f16" if "float16" in name else "bf16"
        assert f"m16n8k16.row.col.f32.{ptx}.{ptx}.f32" in src, name
    from tests.core.test_gemm import kernels
    null = Device["NULL"]
    e = lambda *s, dt=tg.float32: Tensor.empty(*s, dtype=dt, device="CPU")      # noqa: E731
    for t in (e(100, 70) @ e(70, 130),                                        # float32: no tensor cores
              e(100, 70, dt=tg.bfloat16) @ e(70, 130, dt=tg.float16).cast(tg.bfloat16),   # (this one does)
              e(8, 8, dt=tg.bfloat16) @ e(8, 8, dt=tg.bfloat16)):             # too small to pay
        found = sum("mma.sync" in null.render(k, "cuda") for k in kernels(t))
        assert found == (1 if t.dtype == tg.bfloat16 and t.shape == (100, 130) else 0)
    c = gemm.contraction(kernels(e(64, 64, dt=tg.bfloat16) @ e(64, 64, dt=tg.bfloat16))[0], 8,
                               heuristics.MMA_MIN_MACS)
    assert c is not None and mma.find_mma(c.kernel, (7, 5)) is None          # before Ampere: none
    assert mma.find_mma(c.kernel, (8, 0)) is not None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_builds_the_tensor_core_kernels_to_cubins(arch):
    reason = gpu_support("NVRTC")
    if reason is not None:
        pytest.skip(f"NVRTC is not available here: {reason}")
    from tg.core.runtime.ops_cuda import NVRTCCompiler
    compiler = NVRTCCompiler(arch)
    for name, src in _mma_sources():
        assert len(compiler.compile_binary(src)) > 1000, name
    ptx = NVRTCCompiler("compute_" + arch[3:]).compile_binary(_mma_sources()[0][1]).decode()
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 16     # 2 k steps x 2 x 4


def _random_cases():
    """(name, a function making the output from random CPU tensors, float16?) of every kind of
    contraction gemm.find accepts: layouts, batches, epilogues, factors that are not plain loads, convs."""
    rng = np.random.default_rng(7)

    def R(*shape, dt=tg.bfloat16):
        return Tensor(rng.standard_normal(shape).astype(np.float32), device="CPU").cast(dt).realize()

    def F(*shape):
        return Tensor(rng.standard_normal(shape).astype(np.float32), device="CPU").realize()
    h = tg.float16
    return [
        ("A B", lambda: R(100, 70) @ R(70, 130)),
        ("A^T B", lambda: R(70, 100).T @ R(70, 130)),
        ("A B^T", lambda: R(100, 70) @ R(130, 70).T),
        ("A^T B^T", lambda: R(70, 100).T @ R(130, 70).T),
        ("A A^T", lambda: (lambda a: a @ a.T)(R(100, 70))),
        ("sliced", lambda: R(120, 90)[7:107, 5:75] @ R(80, 140)[3:73, 4:134]),
        ("batched", lambda: R(3, 65, 40) @ R(3, 40, 33)),
        ("broadcast batch", lambda: R(3, 65, 40) @ R(40, 33)),
        ("permuted batch", lambda: R(65, 3, 40).permute(1, 0, 2) @ R(40, 33)),
        ("output permuted", lambda: (R(3, 65, 40) @ R(3, 40, 33)).permute(1, 0, 2).contiguous()),
        ("linear + bias + relu", lambda: R(5, 40, 96).linear(R(48, 96), R(48)).relu()),
        ("autocast factors", lambda: F(96, 80).cast(tg.bfloat16) @ F(80, 72).cast(tg.bfloat16)),
        ("computed factor", lambda: (R(100, 70) * 2 + 1) @ R(70, 130)),
        ("float32 output", lambda: R(96, 80).float() @ R(80, 72).float()),
        ("long K", lambda: R(33, 1000) @ R(1000, 47)),
        ("float16", lambda: R(100, 70, dt=h) @ R(70, 130, dt=h)),
        ("float16 bias gelu", lambda: R(4, 30, 64, dt=h).linear(R(80, 64, dt=h), R(80, dt=h)).gelu()),
        ("conv", lambda: R(2, 16, 12, 12).conv2d(R(32, 16, 3, 3), padding=1)),
        ("conv stride 2", lambda: R(2, 16, 13, 13).conv2d(R(32, 16, 3, 3), stride=2, padding=1)),
        ("conv groups", lambda: R(2, 32, 12, 12).conv2d(R(32, 16, 3, 3), groups=2, padding=1)),
        ("conv dilated", lambda: R(2, 16, 12, 12).conv2d(R(32, 16, 3, 3), dilation=2, padding=2)),
    ]


def _as_float(values: np.ndarray, dtype) -> np.ndarray:
    if dtype == tg.bfloat16:
        return (values.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return values.view(np.float16).astype(np.float32) if dtype == tg.float16 else values.view(np.float32)


@pytest.mark.parametrize("case", range(len(_random_cases())), ids=[c[0] for c in _random_cases()])
def test_the_generated_kernel_run_by_the_emulator_gives_the_cpu_devices_result(case):
    """The kernel's CUDA C on the kernel's own input buffers, each CUDA thread a CPU thread and mma.sync
    placed by the ISA, against the CPU device's output for the same kernel: within a step of the output
    type (two float32 sums in another order round at most one step apart)."""
    import cuda_emu

    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    from tg.core.schedule import create_schedule
    name, make = _random_cases()[case]
    out = make()
    items = [it for it in create_schedule([out.lazydata]) if it.kind == "kernel"]
    renderer = CStyleRenderer(DIALECTS["cuda"])
    found = [(it, lowered) for it in items if (lowered := mma.lower(it.kernel, renderer, (9, 0))) is not None]
    assert len(found) == 1, f"{name}: {len(found)} tensor-core kernels"
    out.realize()
    it, (_, src, info) = found[0]
    want = it.out.realized.numpy()
    got = np.zeros_like(want)
    cuda_emu.run(src, info, it.kernel.buf_dtypes, [got, *[b.realized.numpy() for b in it.inputs]])
    dtype = it.kernel.buf_dtypes[0]
    g, w = _as_float(got, dtype), _as_float(want, dtype)
    step = 2.0 ** -8 if dtype == tg.bfloat16 else 2.0 ** -11 if dtype == tg.float16 else 2.0 ** -20
    np.testing.assert_allclose(g, w, rtol=step, atol=step * np.abs(w).max(), err_msg=name)


def test_the_compile_target_bounds_the_instructions_as_the_gpu_does():
    """TG_CUDA_ARCH=compute_75 on an sm_90 GPU: PTX for 7.5 must not hold sm_80's bf16 mma (the driver's
    JIT would reject the module), so the kernel is the linearizer's there."""
    from tg.core.runtime.ops_cuda import arch_capability
    targets = ("sm_90", "compute_90", "sm_90a", "sm_100", "compute_75", "sm_120f")
    assert [arch_capability(a) for a in targets] == [(9, 0), (9, 0), (9, 0), (10, 0), (7, 5), (12, 0)]
    from tests.core.test_gemm import kernels
    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    k = next(iter(kernels(Tensor.empty(64, 64, dtype=tg.bfloat16, device="CPU")
                          @ Tensor.empty(64, 64, dtype=tg.bfloat16, device="CPU"))))
    renderer = CStyleRenderer(DIALECTS["cuda"])
    assert mma.lower(k, renderer, min((9, 0), arch_capability("compute_75"))) is None
    assert mma.lower(k, renderer, min((9, 0), arch_capability("sm_90"))) is not None
