"""Graph walks in the core visit each node once and never recurse on the graph's depth (issue 34,
items 11 and 13): a chain thousands of ops deep schedules, compiles, runs and differentiates, and a
graph that reuses each value twice per level (a residual chain) costs time linear in its levels,
not 2 ** levels. Values are checked against numpy float64 (float32 tolerances bound the rounding of
every op along the chain); the walks' cost is pinned by counting how often node sources are read."""
from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import gpu_support
from op_helpers import DEVICES

from tg import Device, Tensor, TinyJit
from tg.core.codegen import heuristics
from tg.core.codegen.renderer import DIALECTS
from tg.core.kernel import KOp
from tg.core.lazy import LazyBuffer
from tg.core.schedule import create_schedule

DEPTH = 2000          # well past Python's recursion limit (1000) and the old ~250-op failure
REUSE_LEVELS = 30     # 2 ** 30 paths through the graph: a tree walk would never finish
EPS32 = 2.0 ** -24    # float32's unit roundoff


def _chain_f32_rtol(ops: int) -> float:
    """A bound on the relative error after `ops` float32 roundings along a chain that amplifies an earlier
    error at most 8 times (1.001 ** DEPTH = e ** 2): each rounding is at most EPS32 of a value."""
    return 16 * ops * EPS32


# ---- deep chains: forward on every device kind, through the interpreter too

def _deep_affine(x: Tensor, depth: int) -> Tensor:
    for _ in range(depth):
        x = x * 1.001 + 0.5
    return x


def _deep_affine_np(x: np.ndarray, depth: int) -> np.ndarray:
    x = x.astype(np.float64)
    for _ in range(depth):
        x = x * 1.001 + 0.5
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(), (7,), (3, 33)])
def test_deep_elementwise_chain(device, shape):
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = _deep_affine(Tensor(a, device=device), DEPTH).numpy()
    np.testing.assert_allclose(got, _deep_affine_np(a, DEPTH), rtol=_chain_f32_rtol(2 * DEPTH))


@pytest.mark.parametrize("device", DEVICES)
def test_sum_of_many_scalar_terms(device):
    """One kernel with 600 inputs and a 599-deep chain of adds."""
    values = np.random.default_rng(2).standard_normal(600)
    terms = [Tensor(float(v), device=device) for v in values]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    assert abs(total.item() - values.astype(np.float32).astype(np.float64).sum()) <= \
        600 * EPS32 * np.abs(values).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_deep_chains_around_reduces(device):
    """A deep chain inside a reduce's input, and another after it as its epilogue (small outputs: fused),
    plus a deep chain of int64 ops and one that mixes dtypes through casts."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 17)).astype(np.float32)
    x = Tensor(a, device=device)
    depth = 1500
    inner = _deep_affine(x, depth).sum(1)
    outer = _deep_affine(x.sum(1), depth)
    want_inner = _deep_affine_np(a, depth).sum(1)
    want_outer = _deep_affine_np(a.astype(np.float64).sum(1), depth)
    rtol = _chain_f32_rtol(2 * depth + 17)
    np.testing.assert_allclose(inner.numpy(), want_inner, rtol=rtol)
    np.testing.assert_allclose(outer.numpy(), want_outer, rtol=rtol)

    ints = Tensor(np.arange(-6, 6), device=device)
    y = ints
    for i in range(depth):
        y = (y * 3 + i) % 1000 if i % 2 else y - 7
    want = np.arange(-6, 6, dtype=np.int64)
    for i in range(depth):
        want = np.fmod(want * 3 + i, 1000) if i % 2 else want - 7    # tg's % truncates, like C
    assert y.numpy().tolist() == want.tolist()

    z = x
    for _ in range(600):
        z = (z.double() * 0.999).float() + 0.001
    want_z = a.astype(np.float64)
    for _ in range(600):
        want_z = want_z * 0.999 + 0.001
    np.testing.assert_allclose(z.numpy(), want_z, rtol=_chain_f32_rtol(2 * 600), atol=1e-6)


@pytest.mark.parametrize("dialect", ["c", "opencl", "cuda"])
def test_deep_chain_renders_for_every_dialect(dialect):
    """The NULL device lowers and renders for the GPU dialects without a GPU: every ALU op is its own
    statement, so a chain thousands deep is no deeper as C than one op."""
    x = _deep_affine(Tensor(np.ones((4, 64), np.float32), device="NULL"), DEPTH)
    (item,) = [it for it in create_schedule([x.lazydata]) if it.kind == "kernel"]
    src = Device["NULL"].render(item.kernel, dialect)
    deepest = max(len(line) - len(line.lstrip("(")) for line in src.splitlines())
    assert src.count("+0.5f)") >= DEPTH and deepest < 8


CHAINS = {"sin": Tensor.sin, "cos": Tensor.cos, "log2": lambda t: (t.abs() + 1).log2(), "exp2": Tensor.exp2,
          "sqrt": lambda t: t.abs().sqrt()}


@pytest.mark.parametrize("calls", [heuristics.OUTLINE_CALLS, heuristics.OUTLINE_CALLS + 1, 60])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", list(CHAINS))
def test_cuda_outlines_a_math_function_called_often(fn, dtype, calls, monkeypatch):
    """NVRTC expands every call of sin, cos, log2 (and float64's exp2) in place: a 2,000-deep
    float64 sin chain took minutes to compile on the GPU. A kernel calling one of them more than
    OUTLINE_CALLS times calls one out-of-line copy; the source calls the same functions as many times as
    before, and compiles (NVRTC, where installed)."""
    x = Tensor(np.linspace(-3, 3, 64).astype(dtype), device="NULL")
    for _ in range(calls):
        x = CHAINS[fn](x) * 0.5 + 0.25
    (item,) = [it for it in create_schedule([x.lazydata]) if it.kind == "kernel"]
    d = DIALECTS["cuda"]
    name = (d.func32 if dtype == np.float32 else d.func64)["exp2" if fn == "exp2" else fn]
    src = Device["NULL"].render(item.kernel, "cuda")
    body = src[src.index('extern "C"'):]
    inline, through = len(re.findall(rf"\b{name}\(", body)), body.count(f"tg_{name}_call(")
    limit = heuristics.OUTLINE_CALLS
    monkeypatch.setattr(heuristics, "OUTLINE_CALLS", 1 << 30)
    plain = Device["NULL"].render(item.kernel, "cuda")
    assert inline + through == len(re.findall(rf"\b{name}\(", plain)) >= calls
    assert (through > 0) == (name in d.outlined and inline + through > limit)
    assert inline <= limit or name not in d.outlined
    if gpu_support("NVRTC") is None:
        from tg.core.runtime.ops_cuda import NVRTCCompiler
        NVRTCCompiler("sm_90").compile(src)


def test_deep_chain_under_tinyjit():
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return _deep_affine(x, 1200).realize()

    for seed in range(4):
        a = np.random.default_rng(seed).standard_normal(9).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(a)).numpy(), _deep_affine_np(a, 1200), rtol=_chain_f32_rtol(2400))


# ---- backward through deep chains

@pytest.mark.parametrize("device", DEVICES)
def test_gradient_of_a_deep_chain(device):
    """x_{k+1} = 0.9 sin(x_k) + 0.1: the gradient is the product of 0.9 cos(x_k) along the chain."""
    a = np.random.default_rng(4).uniform(-1, 1, 6)
    x = Tensor(a, device=device, requires_grad=True)     # float64: the reference's precision, nearly
    y, xs = x, [a]
    for _ in range(DEPTH):
        y = y.sin() * 0.9 + 0.1
        xs.append(np.sin(xs[-1]) * 0.9 + 0.1)
    y.sum().backward()
    want_grad = np.prod([0.9 * np.cos(v) for v in xs[:-1]], axis=0)
    np.testing.assert_allclose(y.numpy(), xs[-1], rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy(), want_grad, rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_of_a_deep_affine_chain_float32(device):
    a = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    x = Tensor(a, device=device, requires_grad=True)
    y = _deep_affine(x, DEPTH)
    (y * y).sum().backward()
    want_y = _deep_affine_np(a, DEPTH)
    rtol = _chain_f32_rtol(4 * DEPTH)
    np.testing.assert_allclose(x.grad.numpy(), 2 * want_y * 1.001 ** DEPTH, rtol=rtol)


# ---- graphs that reuse values

def _residual(x: Tensor, levels: int) -> Tensor:
    for i in range(levels):
        x = x * 0.5 + x * (0.25 + i / 1024)
    return x


def _residual_scale(levels: int) -> float:
    return float(np.prod([0.75 + i / 1024 for i in range(levels)], dtype=np.float64))


@pytest.mark.parametrize("device", DEVICES)
def test_reused_values_forward_and_backward(device):
    a = np.random.default_rng(6).standard_normal((3, 5)).astype(np.float32)
    x = Tensor(a, device=device, requires_grad=True)
    y = _residual(x, REUSE_LEVELS)
    y.sum().backward()
    scale = _residual_scale(REUSE_LEVELS)
    rtol = _chain_f32_rtol(3 * REUSE_LEVELS)
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) * scale, rtol=rtol)
    np.testing.assert_allclose(x.grad.numpy(), np.full(a.shape, scale), rtol=rtol)


def test_reused_values_in_reduce_and_epilogue():
    """Reuse inside a reduce's input and in its epilogue, and a value read by both."""
    a = np.random.default_rng(7).standard_normal((4, 9)).astype(np.float32)
    x = Tensor(a)
    s = _residual(x, REUSE_LEVELS).sum(1)
    out = _residual(s, REUSE_LEVELS) + s
    scale = _residual_scale(REUSE_LEVELS)
    want = a.astype(np.float64).sum(1) * scale * (scale + 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=_chain_f32_rtol(6 * REUSE_LEVELS + 9), atol=1e-6)


# ---- the cost of every walk: source reads per node do not grow with the graph

class _SourceReads:
    """Counts reads of LazyBuffer.srcs and KOp.src: whatever walks the graphs, each visit of a node
    reads its sources."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        slot = LazyBuffer.__dict__["srcs"]
        counter = self

        class CountedSlot:
            def __get__(self, obj, owner=None):
                if obj is None:
                    return self
                counter.count += 1
                return slot.__get__(obj, owner)

            def __set__(self, obj, value):
                slot.__set__(obj, value)

        monkeypatch.setattr(LazyBuffer, "srcs", CountedSlot())
        plain = KOp.__getattribute__

        def counted(node, name):
            if name == "src":
                counter.count += 1
            return plain(node, name)

        monkeypatch.setattr(KOp, "__getattribute__", counted)


def _graph_size(out: Tensor) -> int:
    """Lazy bases plus kernel AST nodes: what the walks may visit."""
    from tg.core.schedule import _toposort
    items = create_schedule([out.lazydata])
    nodes = sum(len(it.kernel.ast.walk()) for it in items if it.kind == "kernel")
    return len(_toposort([out.lazydata])) + nodes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["residual", "chain", "residual_reduce", "backward"])
def test_source_reads_per_node_are_bounded(device, kind, monkeypatch):
    """Scheduling, lowering, rendering and running a graph twice the size reads sources about twice as
    often: per node, the reads stay the same (a tree walk of the residual graph doubles them per level)."""
    def build(levels: int) -> Tensor:
        x = Tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 12), device=device,
                   requires_grad=kind == "backward")
        if kind == "chain":
            return _deep_affine(x, 40 * levels)
        if kind == "residual_reduce":
            return _residual(_residual(x, levels).sum(1), levels)
        y = _residual(x, levels)
        if kind == "backward":
            y.sum().backward()
            assert x.grad is not None
            return x.grad
        return y

    per_node = []
    for levels in (4, 8, 12):
        out = build(levels)
        size = _graph_size(out)
        with monkeypatch.context() as m:
            reads = _SourceReads(m)
            out.numpy()
        per_node.append(reads.count / size)
    assert per_node[2] <= 1.2 * per_node[0], per_node
