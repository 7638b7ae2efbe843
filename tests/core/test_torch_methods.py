"""Tensor methods torch users expect (issue 17 items 7 and 9): in-place writes (setitem, copy_),
masks and triangles, diagonals, sort / topk / multinomial, running products and extremes, and the
inverse trig, hyperbolic, bitwise and activation functions, against numpy."""
import math

import numpy as np
import pytest
from helpers import gradcheck
from op_helpers import DEVICES, assert_close, check, random_array

import tg
from tg import Tensor, dtypes

rng = np.random.default_rng(0)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# ------------------------------------------------------------ item 7: in-place writes

SETITEM_CASES = [
    ((slice(1, 3),), 7),
    ((slice(None), 0), np.arange(5)),
    ((slice(None, None, -2), slice(1, None, 3)), -1),
    ((1, None, slice(5, 0, -2)), np.array([10, 20, 30])),
    ((Ellipsis, 2), 0),
    ((slice(0, 4, 3), slice(None)), np.arange(7)),
    ((slice(2, 2),), 9),
]


@pytest.mark.parametrize("case", range(len(SETITEM_CASES)))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_setitem_basic_matches_numpy(case, dtype, device):
    index, value = SETITEM_CASES[case]
    a = random_array((5, 7), dtype)
    x = Tensor(a, device=device)
    before = x * 1                              # a reader of the old values, not yet run
    want = a.copy()
    want[index] = value
    x[index] = Tensor(value, device=device) if isinstance(value, np.ndarray) else value
    assert_close(x, want, dtype=dtype)
    assert_close(before, a, dtype=dtype)


def test_setitem_bool_mask_and_readers_see_old_values(device):
    a = random_array((4, 5))
    x = Tensor(a, device=device)
    old_sum = x.sum()
    x[x > 0] = 0.5
    want = np.where(a > 0, 0.5, a)
    assert_close(x, want)
    np.testing.assert_allclose(old_sum.item(), a.sum(), rtol=1e-5)
    rows = np.array([True, False, True, False])
    x[Tensor(rows, device=device)] = Tensor(-1.0, device=device)
    want[rows] = -1.0
    assert_close(x, want)


def test_setitem_errors():
    x = Tensor.zeros(3, 4)
    with pytest.raises(ValueError, match="cannot fill"):
        x[0] = Tensor.ones(3)
    with pytest.raises(ValueError, match="cannot fill"):
        x[[0, 1]] = Tensor.ones(3)
    with pytest.raises(ValueError, match="bool mask"):
        x[x == 0] = Tensor.ones(5)
    w = Tensor.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        w[0] = 1.0
    with pytest.raises(RuntimeError, match="requires grad"):
        w.copy_(Tensor.ones(3))
    with pytest.raises(RuntimeError, match="value requires grad"):
        x[0] = Tensor.ones(4, requires_grad=True)
    with tg.no_grad():                          # as in torch: allowed outside the graph
        w[1] = 2.0
    assert w.tolist() == [0.0, 2.0, 0.0]


def test_copy_broadcasts_casts_and_writes_in_place(device):
    x = Tensor.zeros(2, 3, device=device)
    y = x * 1
    assert x.copy_(Tensor([1, 2, 3], device=device)) is x
    assert x.tolist() == [[1.0, 2.0, 3.0]] * 2 and x.dtype == dtypes.float32
    assert y.tolist() == [[0.0] * 3] * 2


def test_small_methods(device):
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    assert x.dim() == 2 and x.t().shape == (3, 2) and x.t().tolist() == np.arange(6).reshape(2, 3).T.tolist()
    assert Tensor([1, 2]).t().shape == (2,)
    with pytest.raises(ValueError, match="at most 2 dims"):
        Tensor.zeros(1, 1, 1).t()
    assert x.view_as(Tensor.zeros(3, 2)).shape == (3, 2)
    assert x.type_as(Tensor([1])).dtype == dtypes.int64
    for made, shape, value in [(x.new_zeros(2, 2), (2, 2), 0.0), (x.new_ones((3,)), (3,), 1.0),
                               (x.new_full((1, 2), 7), (1, 2), 7.0)]:
        assert made.shape == shape and made.dtype == x.dtype and made.device == x.device
        assert (made.numpy() == value).all()
    assert x.new_empty(4).shape == (4,)
    t = x.new_tensor([1, 2])
    assert t.dtype == dtypes.float32 and t.tolist() == [1.0, 2.0]
    assert x.new_zeros(2, dtype="int32").dtype == dtypes.int32


def test_masked_fill(device):
    a = random_array((3, 5))
    mask = rng.random(5) < 0.5
    r = Tensor(a, device=device).masked_fill(Tensor(mask, device=device), -9)
    assert_close(r, np.where(mask, -9.0, a), dtype="float32")
    gradcheck(lambda t: t.masked_fill(Tensor(mask), 2.0) * t, a)
    with pytest.raises(TypeError, match="bool"):
        Tensor(a).masked_fill(Tensor([1, 0, 1, 0, 1]), 0)


@pytest.mark.parametrize("diagonal", [-2, 0, 1, 5])
def test_tril_triu(diagonal, device):
    for shape in [(4, 6), (2, 5, 3)]:
        check(lambda a: np.tril(a, diagonal), lambda t: t.tril(diagonal), [shape], device)
        check(lambda a: np.triu(a, diagonal), lambda t: t.triu(diagonal), [shape], device, dtype="int32")
    gradcheck(lambda t: t.tril(diagonal) * t, rng.standard_normal((3, 4)))


@pytest.mark.parametrize("offset", [-3, -1, 0, 2, 7])
def test_diagonal_diag_trace(offset, device):
    check(lambda a: np.diagonal(a, offset), lambda t: t.diagonal(offset), [(4, 6)], device)
    check(lambda a: np.diagonal(a, offset, 0, 2), lambda t: t.diagonal(offset, 0, 2), [(5, 3, 4)], device,
          dtype="int32")
    check(lambda a: np.diag(a, offset), lambda t: t.diag(offset), [(5,)], device)
    check(lambda a: np.diag(a, offset), lambda t: t.diag(offset), [(3, 5)], device)
    gradcheck(lambda t: t.diagonal(offset, 1, 0) * 2, rng.standard_normal((4, 6)))
    gradcheck(lambda t: t.diag(offset), rng.standard_normal(3))
    check(np.trace, lambda t: t.trace(), [(4, 7)], device)
    assert Tensor([[1, 2], [3, 4]], device=device).trace().dtype == dtypes.int64


# ------------------------------------------------------------ sorting

def np_sort(a, axis, descending):
    """Stable sort with NaN as the largest value (torch's order)."""
    a = np.moveaxis(a, axis, -1)
    idx = np.broadcast_to(np.arange(a.shape[-1]), a.shape)
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        filled = np.where(nan, 0, a)
        order = np.lexsort((idx, -filled, ~nan)) if descending else np.lexsort((idx, filled, nan))
    else:
        order = np.lexsort((idx, -a.astype(np.int64))) if descending else np.lexsort((idx, a))
    return np.moveaxis(np.take_along_axis(a, order, -1), -1, axis), np.moveaxis(order, -1, axis)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((3, 9), -1), ((5, 4, 3), 1), ((1,), 0), ((2, 0), 1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_numpy(dtype, shape, dim, descending, device):
    a = random_array(shape, dtype, low=-3, high=3)          # integer-valued: ties
    if dtype == "float32" and a.size > 2:
        a.flat[[0, a.size // 2]] = np.nan
    values, indices = Tensor(a, device=device).sort(dim, descending)
    want_v, want_i = np_sort(a, dim, descending)
    assert_close(values, want_v, dtype=dtype)
    assert_close(indices, want_i, dtype="int64")
    assert_close(Tensor(a, device=device).argsort(dim, descending), want_i, dtype="int64")


@pytest.mark.parametrize("k, largest", [(1, True), (3, True), (4, False), (0, True), (9, False)])
def test_topk_matches_numpy(k, largest, device):
    a = random_array((3, 9), low=-4, high=4)
    values, indices = Tensor(a, device=device).topk(k, largest=largest)
    want_v, want_i = np_sort(a, -1, largest)
    assert_close(values, want_v[:, :k])
    assert_close(indices, want_i[:, :k], dtype="int64")
    v0, i0 = Tensor(a.T.copy(), device=device).topk(k, dim=0, largest=largest)
    assert_close(v0, want_v[:, :k].T)
    assert_close(i0, want_i[:, :k].T)


def test_sort_gradient_and_limits():
    a = rng.standard_normal((3, 5))
    gradcheck(lambda t: t.sort(1)[0], a)
    gradcheck(lambda t: t.sort(0, descending=True)[0], a)
    gradcheck(lambda t: t.topk(2, 1)[0], a)
    with pytest.raises(ValueError, match="above the limit"):
        Tensor.zeros(5000).sort()
    with pytest.raises(ValueError, match="out of range"):
        Tensor.zeros(3).topk(4)


def test_multinomial_is_seeded_and_follows_the_probabilities(device):
    p = np.array([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0]], dtype=np.float32)
    Tensor.manual_seed(3)
    draw = Tensor(p, device=device).multinomial(4000, replacement=True)
    Tensor.manual_seed(3)
    again = Tensor(p, device=device).multinomial(4000, replacement=True)
    assert draw.shape == (2, 4000) and draw.dtype == dtypes.int64
    d = draw.numpy()
    assert (d == again.numpy()).all()
    np.testing.assert_allclose(np.bincount(d[0], minlength=4) / 4000, p[0], atol=0.03)
    assert (d[1] == 2).all()
    picks = Tensor(p[0] * 2, device=device).multinomial(3).numpy()     # without replacement
    assert sorted(picks.tolist()) == [0, 2, 3]
    firsts = np.array([Tensor(p[0], device=device).multinomial(2)[0].item() for _ in range(60)])
    assert (firsts == 2).mean() > 0.4       # the likeliest category comes first most often
    with pytest.raises(ValueError, match="cannot draw"):
        Tensor(p).multinomial(5)


# ------------------------------------------------------------ running products and extremes

def np_cum_extreme(a, axis, largest):
    a = np.moveaxis(a, axis, -1)
    values, idx = np.empty_like(a), np.zeros(a.shape, dtype=np.int64)
    for pos in np.ndindex(a.shape[:-1]):
        best, at = None, 0
        for i, v in enumerate(a[pos]):   # torch's rule: a tie or a NaN takes over; nothing beats a NaN
            if best is None or np.isnan(v) or (v >= best if largest else v <= best):
                best, at = v, i
            values[pos + (i,)], idx[pos + (i,)] = best, at
    return np.moveaxis(values, -1, axis), np.moveaxis(idx, -1, axis)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((3, 8), 1), ((4, 3, 2), 0)])
def test_cummax_cummin(dtype, shape, dim, device):
    a = random_array(shape, dtype, low=-3, high=3)
    if dtype == "float32":
        a.flat[a.size // 2] = np.nan
    for largest, fn in ((True, Tensor.cummax), (False, Tensor.cummin)):
        values, indices = fn(Tensor(a, device=device), dim)
        want_v, want_i = np_cum_extreme(a, dim, largest)
        assert_close(values, want_v, dtype=dtype)
        assert_close(indices, want_i, dtype="int64")


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_cumprod(dtype, device):
    check(lambda a: np.cumprod(a, 1), lambda t: t.cumprod(1), [(3, 7)], device, dtype=dtype, rtol=1e-4)
    check(lambda a: np.cumprod(a, 0), lambda t: t.cumprod(0), [(5, 2)], device, dtype=dtype, rtol=1e-4)


def test_cumulative_gradients():
    a = rng.uniform(0.5, 2.0, (2, 5)) * rng.choice([-1, 1], (2, 5))
    gradcheck(lambda t: t.cumprod(1), a)
    gradcheck(lambda t: t.cummax(1)[0], rng.standard_normal((3, 6)))
    gradcheck(lambda t: t.cummin(0)[0], rng.standard_normal((5, 2)))


# ------------------------------------------------------------ item 9: elementwise

def _selu(a):
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return scale * np.where(a > 0, a, alpha * np.expm1(a))


UNARY = {
    "atan": (np.arctan, -20.0, 20.0), "asin": (np.arcsin, -1.0, 1.0), "acos": (np.arccos, -1.0, 1.0),
    "sinh": (np.sinh, -5.0, 5.0), "cosh": (np.cosh, -5.0, 5.0), "asinh": (np.arcsinh, -30.0, 30.0),
    "acosh": (np.arccosh, 1.0, 30.0), "atanh": (np.arctanh, -0.99, 0.99),
    "hardtanh": (lambda a: np.clip(a, -1, 1), -3.0, 3.0),
    "hardsigmoid": (lambda a: np.clip(a / 6 + 0.5, 0, 1), -5.0, 5.0),
    "hardswish": (lambda a: a * np.clip(a / 6 + 0.5, 0, 1), -5.0, 5.0),
    "celu": (lambda a: np.where(a > 0, a, np.expm1(a)), -3.0, 3.0), "selu": (_selu, -3.0, 3.0),
    "mish": (lambda a: a * np.tanh(np.logaddexp(0, a)), -5.0, 5.0),
}


@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_numpy(name, device):
    np_fn, lo, hi = UNARY[name]
    check(np_fn, lambda t: getattr(t, name)(), [(3, 7)], device, low=lo, high=hi, atol=2e-6, rtol=2e-6)
    assert getattr(Tensor([1], device=device), name)().dtype == dtypes.float32


def test_inverse_functions_at_edges(device):
    x = np.array([-np.inf, -1.0, -0.0, 0.0, 1e-30, 1.0, 1e20, np.inf, np.nan], dtype=np.float32)
    with np.errstate(all="ignore"):
        for name, np_fn in [("atan", np.arctan), ("asinh", np.arcsinh), ("asin", np.arcsin),
                            ("acos", np.arccos), ("atanh", np.arctanh), ("acosh", np.arccosh)]:
            assert_close(getattr(Tensor(x, device=device), name)(), np_fn(x), rtol=2e-6)


def test_atan2_and_copysign(device):
    check(np.arctan2, lambda y, x: y.atan2(x), [(3, 7), (7,)], device, atol=2e-6, rtol=2e-6)
    check(np.arctan2, lambda y, x: y.atan2(x), [(5,), (5,)], device, low=-2, high=3)   # zeros
    edges = np.array([0.0, -0.0, 1.0, -1.0], dtype=np.float32)
    ys, xs = np.meshgrid(edges, edges)
    assert_close(Tensor(ys, device=device).atan2(Tensor(xs, device=device)), np.arctan2(ys, xs), rtol=2e-6)
    check(np.copysign, lambda a, b: a.copysign(b), [(3, 7), (3, 7)], device)
    assert_close(Tensor([1.0, 2.0], device=device).copysign(Tensor([-0.0, 0.0], device=device)), [-1.0, 2.0])


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
def test_bitwise(dtype, device):
    for name, np_fn in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                        ("bitwise_xor", np.bitwise_xor)]:
        check(np_fn, lambda a, b, n=name: getattr(a, n)(b), [(3, 7), (7,)], device, dtype=dtype, low=0,
              high=100)
    check(np.invert, lambda a: a.bitwise_not(), [(9,)], device, dtype=dtype, low=0, high=100)
    with pytest.raises(TypeError, match="integer or bool"):
        Tensor([1.0]).bitwise_and(1)


GRADS = {
    "atan": (lambda t: t.atan(), rng.uniform(-3, 3, 7)),
    "asin": (lambda t: t.asin(), rng.uniform(-0.9, 0.9, 7)),
    "acos": (lambda t: t.acos(), rng.uniform(-0.9, 0.9, 7)),
    "atanh": (lambda t: t.atanh(), rng.uniform(-0.9, 0.9, 7)),
    "asinh": (lambda t: t.asinh(), np.append(rng.uniform(-3, 3, 6), 0.0)),
    "acosh": (lambda t: t.acosh(), rng.uniform(1.1, 4, 7)),
    "sinh": (lambda t: t.sinh(), rng.uniform(-3, 3, 7)),
    "cosh": (lambda t: t.cosh(), rng.uniform(-3, 3, 7)),
    "celu": (lambda t: t.celu(0.7), rng.uniform(-3, 3, 7)),
    "selu": (lambda t: t.selu(), rng.uniform(-3, 3, 7)),
    "mish": (lambda t: t.mish(), rng.uniform(-3, 3, 7)),
    "hardswish": (lambda t: t.hardswish(), rng.uniform(-4, 4, 7)),
}


@pytest.mark.parametrize("name", GRADS)
def test_elementwise_gradients(name):
    fn, a = GRADS[name]
    # the closed-form derivatives are exact; the finite differences see float32-accurate values
    gradcheck(fn, a, eps=1e-3, atol=2e-3, rtol=2e-3)


def test_atan2_gradient():
    gradcheck(lambda y, x: y.atan2(x), rng.uniform(-2, 2, (2, 3)), rng.uniform(0.5, 2, 3), eps=1e-3,
              atol=2e-3, rtol=2e-3)


def test_mean_dtype(device):
    x = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device=device)
    assert x.mean(dtype="float64").dtype == dtypes.float64
    assert x.mean(1, dtype="float64").tolist() == [1.0, 4.0]
    assert x.sum(dtype="float32").dtype == dtypes.float32 and x.sum(dtype="float32").item() == 15.0
    assert math.isclose(Tensor([1.0, 2.0], device=device).mean(dtype="float16").item(), 1.5)
