"""Fusion is pinned: how many kernels an expression compiles to, and that the fused result is right."""
import numpy as np
import pytest
from helpers import assert_kernels, kernel_count

from tg import Tensor


@pytest.fixture(params=["CPU", "NUMPY"])
def device(request):
    return request.param


def test_elementwise_chain_into_reduce_is_one_kernel(device):
    a = np.random.randn(37, 129).astype(np.float32)
    x = Tensor(a, device=device)
    out = ((x * 2 + 1).relu()).sum()
    assert_kernels(out, 1)
    np.testing.assert_allclose(out.item(), np.maximum(a * 2 + 1, 0).sum(), rtol=1e-4)


def test_softmax_is_at_most_three_kernels(device):
    a = np.random.randn(8, 33).astype(np.float32)
    out = Tensor(a, device=device).softmax(-1)
    assert kernel_count(out) <= 3
    ref = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_matmul_bias_relu_epilogue_fuses(device):
    a, w, b = (np.random.randn(*s).astype(np.float32) for s in ((16, 24), (24, 32), (32,)))
    out = (Tensor(a, device=device) @ Tensor(w, device=device) + Tensor(b, device=device)).relu()
    assert_kernels(out, 1)
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ w + b, 0), rtol=1e-4, atol=1e-5)


def test_long_epilogue_on_a_large_output_is_its_own_kernel(device):
    # gelu's tanh after a 300x256 matmul: one vectorised elementwise kernel, not a scalar epilogue
    rng = np.random.default_rng(5)
    a, w = (
        rng.standard_normal((300, 24)).astype(np.float32),
        rng.standard_normal((24, 256)).astype(np.float32),
    )
    out = (Tensor(a, device=device) @ Tensor(w, device=device)).gelu(approximate="tanh")
    assert_kernels(out, 2)
    h = a @ w
    ref = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    small = (Tensor(a[:8], device=device) @ Tensor(w, device=device)).gelu(approximate="tanh")
    assert_kernels(small, 1)                 # a small output keeps the fused epilogue


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("epilogue", ["gelu", "gelu_tanh", "silu_grad"])
def test_a_narrow_product_before_a_long_epilogue_is_stored_rounded(device, dtype, epilogue):
    """A float16 / bfloat16 product (float32 sums rounded once) whose epilogue is too long to fuse is
    stored as the rounded value, not as the float32 sums: half the bytes, the same numbers (the
    epilogue reads what it would have computed first)."""
    import tg
    from tg.core.schedule import create_schedule
    rng = np.random.default_rng(len(epilogue))
    a, w = (rng.standard_normal(shape).astype(np.float32) for shape in ((300, 24), (24, 256)))
    narrow = getattr(tg, dtype)
    h = Tensor(a, device=device).cast(narrow) @ Tensor(w, device=device).cast(narrow)
    f = {"gelu": lambda t: t.gelu(), "gelu_tanh": lambda t: t.gelu(approximate="tanh"),
         "silu_grad": lambda t: t.sigmoid() * (1 + t * (1 - t.sigmoid()))}[epilogue]
    out = f(h)
    items = [it for it in create_schedule([out.lazydata]) if it.kind == "kernel"]
    assert len(items) == 2
    assert items[0].out.dtype == narrow and np.prod(items[0].out.shape) == 300 * 256
    hn = Tensor(a).cast(narrow).float().numpy() @ Tensor(w).cast(narrow).float().numpy()
    want = f(Tensor(Tensor(hn).cast(narrow).float().numpy())).numpy()
    np.testing.assert_allclose(out.float().numpy(), want, rtol=2e-2, atol=2e-2)


def test_cheap_elementwise_inputs_of_matmul_fuse(device):
    a, w = np.random.randn(9, 7).astype(np.float32), np.random.randn(7, 5).astype(np.float32)
    out = (Tensor(a, device=device) * 2 + 1) @ (Tensor(w, device=device) + 1)
    assert_kernels(out, 1)
    np.testing.assert_allclose(out.numpy(), (a * 2 + 1) @ (w + 1), rtol=1e-4, atol=1e-4)


def test_expensive_elementwise_read_many_times_is_stored_once(device):
    # exp(2x) would be recomputed for every column of the matmul: it is stored instead
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((9, 7)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)
    out = (Tensor(a, device=device) * 2).exp() @ Tensor(w, device=device)
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.numpy(), np.exp(a * 2) @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pieces", [2, 3, 4])
@pytest.mark.parametrize("axis", [0, 1])
def test_a_cat_read_by_every_column_of_a_matmul_is_stored_once(device, pieces, axis):
    """Each piece of a cat is a masked read (a test and a select per element, with its index
    arithmetic): two pieces or more read by each column of a matmul cost more than storing the cat (the
    qkv gradients of attention, concatenated, into both products of a linear's backward)."""
    rng = np.random.default_rng(pieces * 10 + axis)
    parts = [rng.standard_normal((5, 6) if axis == 0 else (6, 5)).astype(np.float32) for _ in range(pieces)]
    w = rng.standard_normal((6 if axis == 0 else 5 * pieces, 7)).astype(np.float32)
    x = Tensor.cat(*[Tensor(p, device=device) for p in parts], dim=axis)
    out = x @ Tensor(w, device=device)
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.numpy(), np.concatenate(parts, axis) @ w, rtol=1e-4, atol=1e-4)
    a, b = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((6, 7)).astype(np.float32)
    one = Tensor(a, device=device).pad(((0, 2), (0, 0))) @ Tensor(b, device=device)
    assert_kernels(one, 1)          # a single padded read stays fused
    np.testing.assert_allclose(one.numpy(), np.pad(a, ((0, 2), (0, 0))) @ b, rtol=1e-4, atol=1e-4)


def test_two_reduces_never_share_a_kernel(device):
    a, b = np.random.randn(10).astype(np.float32), np.random.randn(11).astype(np.float32)
    out = Tensor(a, device=device).sum() + Tensor(b, device=device).max()
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.item(), a.sum() + b.max(), rtol=1e-5)


def test_padding_a_computed_value_stores_it_first(device):
    a = np.random.randn(5).astype(np.float32)
    out = Tensor(a, device=device).exp().pad((2, 1)).contiguous()
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.numpy(), np.pad(np.exp(a), (2, 1)), rtol=1e-6)


def test_movement_only_is_no_kernel_until_needed(device):
    x = Tensor(np.arange(12, dtype=np.float32), device=device)
    y = x.reshape(3, 4).T[1:, ::2]
    assert kernel_count(y) == 0   # a view of realized memory: nothing to compute
    np.testing.assert_array_equal(y.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T[1:, ::2])


def test_shared_reduce_is_computed_once(device):
    a = np.random.randn(6, 10).astype(np.float32)
    x = Tensor(a, device=device)
    m = x.sum(1, keepdim=True)
    out = (x - m) * (x + m)
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.numpy(), (a - a.sum(1, keepdims=True)) * (a + a.sum(1, keepdims=True)),
                               rtol=1e-4, atol=1e-5)


def test_large_full_reduction_splits_for_parallelism(device):
    a = np.random.default_rng(0).standard_normal(1 << 17).astype(np.float32)
    out = (Tensor(a, device=device) * 2).sum()
    assert_kernels(out, 2)      # chunk partials in parallel, then the partials
    np.testing.assert_allclose(out.item(), (a * 2).sum(dtype=np.float64), rtol=1e-4)


def test_reduction_over_batch_and_space_is_two_stage(device):
    # the conv weight-gradient shape: reduce over (N, H*W) per image first, then over N
    a = np.random.default_rng(1).standard_normal((32, 8, 300)).astype(np.float32)
    out = Tensor(a, device=device).sum((0, 2))
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.numpy(), a.sum((0, 2)), rtol=1e-4, atol=1e-4)
    small = Tensor(a[:4, :, :10], device=device).sum((0, 2))
    assert_kernels(small, 1)    # small reductions stay one kernel


@pytest.mark.parametrize("inner", [(5, 5), (4, 5), (8, 8), (16, 15), (16, 16), (20, 30)])
@pytest.mark.parametrize("outputs", [3, 64, 500])
def test_a_batch_split_needs_a_long_inner_reduce(device, inner, outputs):
    # per-image partials pay only when each reduces SPLIT_MIN_INNER elements or more: shorter ones (a
    # small conv's weight gradient over 5 x 5 positions, an embedding's over 20 tokens) vectorize badly
    # and make many partials
    from tg.core.lazy import SPLIT_MIN_INNER, SPLIT_MIN_SIZE
    rng = np.random.default_rng(outputs * 100 + inner[0] * inner[1])
    a = rng.standard_normal((64, outputs, *inner)).astype(np.float32)
    out = Tensor(a, device=device).sum((0, 2, 3))
    long_enough = inner[0] * inner[1] >= SPLIT_MIN_INNER and a.size >= SPLIT_MIN_SIZE
    assert_kernels(out, 2 if long_enough else 1)
    np.testing.assert_allclose(out.numpy(), a.sum((0, 2, 3), dtype=np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape,axis", [((4096, 1024), 0), ((2048, 4097), 0), ((3, 8192, 200), 1)])
def test_long_strided_reduction_with_few_outputs_is_two_stage(device, shape, axis):
    # a column sum (a bias gradient): chunks of rows in parallel, then the chunks
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    out = Tensor(a, device=device).sum(axis)
    assert_kernels(out, 2)
    np.testing.assert_allclose(out.numpy(), a.sum(axis), rtol=1e-4, atol=1e-3)
    top = Tensor(a, device=device).amax(axis, keepdim=True)
    np.testing.assert_array_equal(top.numpy(), a.max(axis, keepdims=True))


def test_short_or_contiguous_reductions_stay_one_kernel(device):
    a = np.random.default_rng(3).standard_normal((1024, 256)).astype(np.float32)
    assert_kernels(Tensor(a, device=device).sum(0), 1)          # too little data to split
    b = np.random.default_rng(4).standard_normal((1024, 4096)).astype(np.float32)
    assert_kernels(Tensor(b, device=device).sum(1), 1)          # the reduce axis is contiguous


def test_a_recurrence_keeps_its_kernels_bounded():
    """An LSTM through time, forward and backward: values of one step are read by the next step's kernels
    and by the step's own (the cell state by c_t+1 and h_t; its gradient likewise backwards). Inlined
    into every later kernel, the chain made kernels that grow with the sequence (3,600 nodes at 24 steps,
    9 s to schedule; word_language_model's first step took 30 s to schedule and lower): stored once long
    and read by two kernels, the largest kernel grows by at most a few nodes a step, a join's pick per
    part (1,932 and 3,624 nodes before)."""
    from tg import nn
    from tg.core.schedule import create_schedule
    largest = []
    for steps in (12, 24):
        lstm = nn.LSTM(6, 6)
        x = Tensor(np.random.default_rng(steps).standard_normal((steps, 2, 6)).astype(np.float32))
        lstm(x)[0].sum().backward()
        items = create_schedule([p.grad.lazydata for p in lstm.parameters()])
        largest.append(max(sum(1 for _ in it.kernel.ast.walk()) for it in items if it.kind == "kernel"))
    assert largest[1] <= largest[0] + 3 * 12 and largest[0] < 1500, largest
