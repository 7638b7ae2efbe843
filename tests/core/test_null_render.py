"""The NULL device renders OpenCL and CUDA source for the op suite without any GPU."""
import numpy as np
import pytest

from tg import Device, Tensor
from tg.core.schedule import create_schedule


def op_suite():
    x = Tensor(np.random.randn(6, 10).astype(np.float32), device="NULL")
    w = Tensor(np.random.randn(10, 4).astype(np.float32), device="NULL")
    img = Tensor(np.random.randn(2, 3, 9, 9).astype(np.float32), device="NULL")
    k = Tensor(np.random.randn(4, 3, 3, 3).astype(np.float32), device="NULL")
    return {
        "elementwise": (x * 2 + 1).relu().exp().log2().sqrt().sin(),
        "sum": x.sum(1), "max": x.amax(0), "softmax": x.softmax(-1), "matmul": x @ w,
        "conv2d": img.conv2d(k, padding=1, stride=2), "pool": img.max_pool2d(2),
        "casts": x.half().float() + x.bfloat16().float() + x.int().float(),
        "int": (x.int() // 3 + x.int() % 5) << 1, "bool": (x > 0) & (x < 1),
        "pad": x.pad((1, 2)).contiguous(), "where": (x > 0).where(x, -x), "cumsum": x.cumsum(1),
        "gather": x[[0, 3, 5]], "double": x.double().exp(),
    }


@pytest.mark.parametrize("dialect", ["opencl", "cuda", "c"])
def test_every_suite_kernel_renders(dialect):
    null = Device["NULL"]
    for name, out in op_suite().items():
        items = [it for it in create_schedule([out.lazydata]) if it.kind == "kernel"]
        assert items, name
        for it in items:
            src = null.render(it.kernel, dialect)
            if dialect == "opencl":
                assert "__kernel void" in src and "get_global_id(0)" in src, name
            elif dialect == "cuda":
                assert 'extern "C" __global__ void' in src and "blockIdx.x" in src, name
            else:
                assert src.count("{") == src.count("}"), name


def test_null_runs_nothing_and_reads_zeros():
    out = Tensor([1.0, 2.0], device="NULL") * 3
    assert out.numpy().tolist() == [0.0, 0.0]


def test_rendered_opencl_kernel_shape():
    x = Tensor(np.ones((4, 8), np.float32), device="NULL")
    it = [i for i in create_schedule([x.sum(1).lazydata]) if i.kind == "kernel"][0]
    src = Device["NULL"].render(it.kernel, "opencl")
    assert "__global float* data0" in src and "__global const float* data1" in src
    assert "for (int r" in src          # the reduce stays a loop inside each work item


def test_the_op_suite_uses_every_uop_and_each_renders():
    """UOps is closed: the op suite, lowered for the C and a GPU dialect, emits every member (a new
    member needs a kernel here that makes it, and a rendering), and each dialect renders them all."""
    from tg.core.codegen.linearizer import linearize_for
    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    from tg.core.codegen.uops import UOps
    x = Tensor(np.random.randn(3, 4096).astype(np.float32), device="NULL")
    outs = {**op_suite(), "long_reduce": x.sum(1),                  # GROUP, LOCAL_REDUCE on GPUs
            "padded_const": Tensor.full((6, 10), 2.0, device="NULL").pad((1, 2)) * x[:1, :13]}  # INDEX_COND
    seen = {}
    for dialect in ("c", "opencl", "cuda"):
        for name, out in outs.items():
            for it in [i for i in create_schedule([out.lazydata]) if i.kind == "kernel"]:
                lin = linearize_for(it.kernel, DIALECTS[dialect])
                CStyleRenderer(DIALECTS[dialect]).render(lin)
                for u in lin.uops:
                    seen.setdefault(u.op, f"{dialect}/{name}")
    assert [op for op in UOps if op not in seen] == []


def contraction_suite():
    """Contractions large enough for the CPU's nests (gemm.contraction): a matmul past
    heuristics.worth's sizes, a conv (a reduce over Cin x kh x kw) and its weight gradient, and a
    bfloat16 product."""
    rng = np.random.default_rng(0)

    def t(*shape, dtype=np.float32, grad=False):
        return Tensor(rng.standard_normal(shape).astype(dtype), device="NULL", requires_grad=grad)
    img, k = t(2, 64, 40, 40), t(64, 64, 3, 3, grad=True)
    (img.conv2d(k, padding=1) * t(2, 64, 40, 40)).sum().backward()
    return {"matmul": t(512, 256) @ t(256, 1024), "conv2d": img.conv2d(k, padding=1),
            "conv2d weight grad": k.grad, "bfloat16 matmul": t(64, 256).bfloat16() @ t(256, 256).bfloat16()}


def test_the_cpu_nests_render_and_compile():
    """In the c dialect the NULL device renders a contraction as the CPU's nest by the rules of thumb
    (codegen/cpu.py nest_by_rule), so the nests' C (codegen/nests.py) is checked with the other
    kernels': every source of the suites builds with the CPU's compiler, and the nests are among them."""
    from tg.core.codegen import gemm, heuristics, nests
    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    null, cpu, c_renderer = Device["NULL"], Device["CPU"], CStyleRenderer(DIALECTS["c"])
    seen = set()
    for name, out in {**op_suite(), **contraction_suite()}.items():
        for it in [it for it in create_schedule([out.lazydata]) if it.kind == "kernel"]:
            src = null.render(it.kernel, "c")
            cpu.compiler.compile(src)                   # raises CompileError with the source's line
            c = gemm.contraction(it.kernel, 16)
            p = c and (heuristics.params(c, 16) if c.narrow or c.low else heuristics.rule(c, 16))
            if p is not None:          # the nest's own source, not the one-pass kernel's
                assert src == nests.lower(c, p, c_renderer, 16)[1], name
                seen.add(p.nest)
    assert seen == {"packed", "direct", "broadcast"}, seen
