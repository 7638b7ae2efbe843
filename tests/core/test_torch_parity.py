"""Results pinned to torch's documented values (issue 17 item 9): dtypes as torch gives them, and
integer results exact where a float detour would round."""
import numpy as np
import pytest
from op_helpers import DEVICES

from tg import Tensor


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", INTS)
def test_min_at_the_dtype_minimum(dtype, device):
    info = np.iinfo(dtype)
    x = np.array([[5, info.max], [info.min, 0]], dtype=dtype)
    t = Tensor(x, device=device)
    assert t.min().item() == info.min and t.min().dtype.name == dtype
    assert t.amin(0).tolist() == x.min(0).tolist() and t.min(dim=1).values.tolist() == x.min(1).tolist()
    assert t.amin(dim=0).tolist() == x.min(0).tolist()
    assert t.argmin().item() == int(np.argmin(x)) and t.argmin(1).tolist() == np.argmin(x, 1).tolist()
    assert t.minimum(Tensor(x[::-1].copy(), device=device)).tolist() == np.minimum(x, x[::-1]).tolist()


def test_integer_pow_is_exact_and_int(device):
    assert Tensor([2, 3], device=device).pow(Tensor([2, 2], device=device)).dtype.name == "int64"
    r = 2 ** Tensor([1, 2, 3], device=device)
    assert r.dtype.name == "int64" and r.tolist() == [2, 4, 8]
    r = Tensor([2, 3], device=device).pow(20)
    assert r.dtype.name == "int64" and r.tolist() == [1048576, 3486784401]
    assert Tensor([1, 2], device=device).pow(2.0).dtype.name == "float32"   # a float exponent: float
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        Tensor([2], device=device).pow(-1)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_pow_tensor_exponent(dtype, device):
    a = np.array([3, -3, 1, -1, 0, 2, 7, -5, 1, -1], dtype=dtype)
    e = np.array([40, 41, -2, -3, 0, 30, 5, 3, 0, -4], dtype=dtype)
    with np.errstate(over="ignore"):
        want = np.power(a, np.maximum(e, 0))            # wraps, as torch's integer pow does
    # torch's integer pow for a negative exponent: 1 for base 1, +-1 for base -1, else 0
    want = np.where(e < 0, np.where(a == 1, 1, np.where(a == -1, np.where(e % 2 == 1, -1, 1), 0)), want)
    for exponent in (Tensor(e, device=device), Tensor(e, device=device) + 0):   # host data and computed
        r = Tensor(a, device=device).pow(exponent)
        assert r.dtype.name == dtype and r.tolist() == want.tolist()


def test_div_rounding_modes_keep_int_dtype_and_are_exact(device):
    big = 2 ** 40 + 1
    for mode, want in (("trunc", [-3, 3, big // 3]), ("floor", [-4, 3, big // 3])):
        r = Tensor([-7, 7, big], device=device).div(Tensor([2, 2, 3], device=device), rounding_mode=mode)
        assert r.dtype.name == "int64" and r.tolist() == want
    assert Tensor([-7.0], device=device).div(2, rounding_mode="trunc").tolist() == [-3.0]


def test_round_keeps_int_dtype(device):
    for dtype in ("int32", "int64", "uint8"):
        r = Tensor([1, 2], dtype=dtype, device=device).round()
        assert r.dtype.name == dtype and r.tolist() == [1, 2]


def test_integer_prod_is_exact(device):
    r = Tensor([3] * 30, device=device).prod()
    assert r.dtype.name == "int64" and r.item() == 3 ** 30
    x = np.random.default_rng(0).integers(-4, 5, size=(3, 70, 2))
    for axis in (None, 0, 1, (0, 2), -1):
        for keepdim in (False, True):
            got = Tensor(x, device=device).prod(axis, keepdim=keepdim).numpy()
            want = np.prod(x, axis=axis, keepdims=keepdim)
            assert got.shape == want.shape and (got == want).all()
    assert Tensor(np.zeros((0, 3), np.int32), device=device).prod(0).tolist() == [1, 1, 1]
    assert Tensor([True, True], device=device).prod().dtype.name == "int64"


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_max_pool2d_keeps_int_dtype(dtype, device):
    x = Tensor(np.arange(16).reshape(1, 1, 4, 4), dtype=dtype, device=device)
    r = x.max_pool2d(2, padding=1)
    assert r.dtype.name == dtype and r.tolist() == [[[[0, 2, 3], [8, 10, 11], [12, 14, 15]]]]


def test_dim_keyword_and_torch_call_forms(device):
    x = Tensor([[1, 0], [1, 1]], device=device)
    assert x.amax(dim=0).tolist() == [1, 1] and x.amin(dim=1).tolist() == [0, 1]
    assert x.any(dim=0).tolist() == [True, True] and x.all(dim=1).tolist() == [False, True]
    assert Tensor.randint(5, (2, 3), device=device).shape == (2, 3)
    r = Tensor.randint(2, 5, (100,), device=device)
    assert r.shape == (100,) and r.min().item() >= 2 and r.max().item() < 5
    with pytest.raises(TypeError, match="dtype=float"):
        Tensor([1, 2], device=device).rand_like()
    assert Tensor([1, 2], device=device).rand_like(dtype="float32").dtype.name == "float32"


@pytest.mark.parametrize("index", [
    ("a", slice(None), "a"), (slice(None), "a", None, "a"), ("a", None, "a"), (slice(None), "a", "a"),
    ("a", slice(1, 3), None, "a"), (None, "a", "a"), (Ellipsis, "a", None, "a"), ("b", slice(None), "a"),
])
def test_advanced_index_placement_matches_numpy(index, device):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 100, size=(3, 4, 5, 6))
    arrays = {"a": np.array([[0, 2], [1, 1]]), "b": np.array([2, 0])}
    np_index = tuple(arrays[i] if isinstance(i, str) else i for i in index)
    tg_index = tuple(Tensor(arrays[i], device=device) if isinstance(i, str) else i for i in index)
    got, want = Tensor(x, device=device)[tg_index].numpy(), x[np_index]
    assert got.shape == want.shape and (got == want).all()


def test_pow_and_sign_gradients_match_torch(device):
    x = Tensor([0.0, 1.0, 2.0], device=device, requires_grad=True)
    (x ** 2.5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.5 * np.array([0.0, 1.0, 2.0]) ** 1.5, rtol=1e-6)
    x = Tensor([0.0, 4.0], device=device, requires_grad=True)
    (x ** 0.5).sum().backward()
    assert x.grad.tolist() == [float("inf"), 0.25]
    x = Tensor([0.0, 2.0], device=device, requires_grad=True)
    y = Tensor([2.0, 3.0], device=device, requires_grad=True)
    (x ** y).sum().backward()
    assert x.grad.tolist() == [0.0, 12.0]
    np.testing.assert_allclose(y.grad.numpy(), [0.0, 8 * np.log(2)], rtol=1e-6)   # 0 * log(0) masked
    zero_grad = (lambda t: t ** 0, Tensor.sign, Tensor.trunc, Tensor.floor, Tensor.ceil, Tensor.round)
    for fn in zero_grad:   # a graph with no gradient gives zeros, as in torch
        x = Tensor([-1.0, 0.0, 2.0], device=device, requires_grad=True)
        fn(x).sum().backward()
        assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_log1p_expm1_accurate_for_tiny_inputs(device):
    x = np.array([1e-5, 1e-8, -1e-5, 1e-3, 0.3, -0.4999, 0.4999, -0.5, 5.0, -0.99999], np.float32)
    np.testing.assert_allclose(Tensor(x, device=device).log1p().numpy(), np.log1p(x), rtol=3e-7)
    np.testing.assert_allclose(Tensor(x, device=device).expm1().numpy(), np.expm1(x), rtol=3e-7)
    assert Tensor([1e-8], device=device).log1p().item() == np.float32(1e-8)
    edges = Tensor([-1.0, -2.0, float("inf")], device=device).log1p().tolist()
    assert edges[0] == float("-inf") and np.isnan(edges[1]) and edges[2] == float("inf")
    assert Tensor([-100.0, float("inf")], device=device).expm1().tolist() == [-1.0, float("inf")]
    for fn, deriv in ((Tensor.log1p, lambda v: 1 / (1 + v)), (Tensor.expm1, np.exp)):
        t = Tensor([1e-6, 0.5, -0.5, 3.0], device=device, requires_grad=True)
        fn(t).sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), deriv(np.array([1e-6, 0.5, -0.5, 3.0])), rtol=1e-6)


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "cos", "tan", "sin"])
def test_gradients_match_the_analytic_derivative(name, device):
    x = np.array([-100.0, -20.0, -3.0, -0.5, 0.0, 0.7, 2.0, 20.0, 100.0])
    if name == "tan":
        x = np.array([-1.5, -0.7, 0.0, 0.3, 1.2, 3.0])
    sig = 1 / (1 + np.exp(-x))
    deriv = {"sigmoid": sig * (1 - sig), "tanh": 1 - np.tanh(x) ** 2, "cos": -np.sin(x),
             "tan": 1 / np.cos(x) ** 2, "sin": np.cos(x)}[name]
    t = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    getattr(t, name)().sum().backward()
    g = t.grad.numpy()
    assert not np.isnan(g).any()
    np.testing.assert_allclose(g, deriv, rtol=1e-4, atol=2e-5)
