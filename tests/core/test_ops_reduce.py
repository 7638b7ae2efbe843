"""Reductions against numpy: every axis form (None, int, negative, tuple) with and without keepdim."""
import numpy as np
import pytest
from op_helpers import DEVICES, LAYOUTS, assert_close, check, np_logsumexp, np_softmax, raises_at_call

from tg import Tensor


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# (shape, axis) pairs: 0-d, size-1 dims, odd sizes, negative and tuple axes
AXES = [((), None), ((7,), None), ((7,), 0), ((7,), -1), ((3, 7), 0), ((3, 7), 1), ((3, 7), -1),
        ((3, 7), (0, 1)), ((3, 7), None), ((2, 1, 5), 1), ((2, 1, 5), (0, 2)), ((2, 1, 5), (-1, 0)),
        ((2, 3, 4), (1,)), ((2, 3, 4), -2), ((1023,), 0), ((4, 1023), 1)]
EMPTY_AXES = [((0,), None), ((0, 3), 0), ((0, 3), 1), ((2, 0, 3), (0, 2)), ((2, 0, 3), None)]


def ids(v):
    return str(v).replace(" ", "")


REDUCE = {
    "sum": (np.sum, lambda x, a, k: x.sum(a, keepdim=k), {"atol": 1e-5}),
    "mean": (np.mean, lambda x, a, k: x.mean(a, keepdim=k), {}),
    "amax": (np.max, lambda x, a, k: x.amax(a, keepdim=k), {}),
    "amin": (np.min, lambda x, a, k: x.amin(a, keepdim=k), {}),
    "prod": (np.prod, lambda x, a, k: x.prod(a, keepdim=k), {"low": 0.5, "high": 1.5, "rtol": 1e-4}),
    "prod_signs": (np.prod, lambda x, a, k: x.prod(a, keepdim=k), {"low": "nonzero", "rtol": 1e-4}),
    "var": (lambda x, axis, keepdims: np.var(x, axis=axis, keepdims=keepdims, ddof=1),
            lambda x, a, k: x.var(a, keepdim=k), {"atol": 1e-5}),
    "var_biased": (np.var, lambda x, a, k: x.var(a, keepdim=k, correction=0), {"atol": 1e-5}),
    "std": (lambda x, axis, keepdims: np.std(x, axis=axis, keepdims=keepdims, ddof=1),
            lambda x, a, k: x.std(a, keepdim=k), {"atol": 1e-5}),
    "std_unbiased_false": (np.std, lambda x, a, k: x.std(a, keepdim=k, unbiased=False), {"atol": 1e-5}),
    "logsumexp": (lambda x, axis, keepdims: np_logsumexp(x, axis, keepdims),
                  lambda x, a, k: x.logsumexp(a, keepdim=k), {"low": -10.0, "high": 10.0, "atol": 1e-5}),
    "any": (np.any, lambda x, a, k: x.any(a, keepdim=k), {"dtype": "bool"}),
    "all": (np.all, lambda x, a, k: x.all(a, keepdim=k), {"dtype": "bool"}),
}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", AXES, ids=ids)
@pytest.mark.parametrize("name", REDUCE)
def test_reduce(name, shape, axis, keepdim, device):
    np_fn, tg_fn, kw = REDUCE[name]
    if name == "prod_signs" and shape in ((1023,), (4, 1023)):
        kw = {**kw, "low": 0.5, "high": 1.5}
    check(
        lambda x: np_fn(x, axis=axis, keepdims=keepdim),
        lambda x: tg_fn(x, axis, keepdim),
        [shape],
        device,
        **kw,
    )


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", EMPTY_AXES, ids=ids)
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "any", "all"])
def test_reduce_empty(name, shape, axis, keepdim, device):
    np_fn, tg_fn, kw = REDUCE[name]
    check(
        lambda x: np_fn(x, axis=axis, keepdims=keepdim),
        lambda x: tg_fn(x, axis, keepdim),
        [shape],
        device,
        **kw,
    )


def test_reduce_over_empty_slice_of_a_filled_buffer(device):
    """An empty view of a non-empty buffer: the reduce must not read the buffer behind the view."""
    x = Tensor(np.full((4, 3), 7.0, np.float32), device=device)[0:0]
    assert_close(x.sum(0), np.zeros(3, np.float32))
    assert_close(x.prod(0), np.ones(3, np.float32))
    assert_close(x.sum(), np.float32(0.0))
    assert_close(x.T.sum(1, keepdim=True), np.zeros((3, 1), np.float32))


@pytest.mark.parametrize("axis", [0, 1, -1, None, (0, 2)], ids=ids)
@pytest.mark.parametrize("layout", LAYOUTS[1:])
@pytest.mark.parametrize("name", ["sum", "amax", "amin", "mean", "var", "logsumexp"])
def test_reduce_non_contiguous(name, layout, axis, device):
    np_fn, tg_fn, kw = REDUCE[name]
    check(lambda x: np_fn(x, axis=axis, keepdims=False), lambda x: tg_fn(x, axis, False), [(3, 4, 5)], device,
          layout=layout, **kw)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "prod", "logsumexp", "var", "any"])
def test_reduce_0d_with_axis_0_and_minus_1(name, device):
    """torch lets a 0-d tensor reduce over dim 0 or -1; the value and the 0-d shape stay."""
    _, tg_fn, _ = REDUCE[name]
    x = Tensor(1.5, device=device)
    want = {"var": np.float32("nan"), "any": np.bool_(True)}.get(name, np.float32(1.5))
    for axis in (0, -1):
        for keepdim in (False, True):
            assert_close(tg_fn(x, axis, keepdim), np.asarray(want))


def test_reduce_dim_keyword(device):
    check(lambda x: x.sum(axis=1), lambda x: x.sum(dim=1), [(3, 7)], device, atol=1e-5)
    check(lambda x: x.max(axis=0), lambda x: x.amax(dim=0), [(3, 7)], device)
    check(lambda x: x.mean(axis=-1), lambda x: x.mean(dim=-1), [(3, 7)], device)
    check(lambda x: x.argmax(axis=1), lambda x: x.argmax(dim=1), [(3, 7)], device)


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "bool"])
def test_integer_sum_is_int64(dtype, axis, device):
    """torch: summing an integer or bool tensor gives int64 (no overflow in the narrow type)."""
    low, high = (0, 255) if dtype == "uint8" else (-128, 127) if dtype == "int8" else (-1000, 1000)
    check(lambda x: np.sum(x.astype(np.int64), axis=axis), lambda x: x.sum(axis), [(3, 70)], device,
          dtype=dtype, low=low, high=high, out_dtype="int64")


def test_sum_with_dtype_argument(device):
    check(
        lambda x: np.sum(x.astype(np.float64), axis=1),
        lambda x: x.sum(1, dtype="float64"),
        [(3, 7)],
        device,
        out_dtype="float64",
    )
    check(
        lambda x: np.sum(x.astype(np.float32), axis=0),
        lambda x: x.sum(0, dtype="float32"),
        [(3, 7)],
        device,
        dtype="int32",
        out_dtype="float32",
    )


@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "bool"])
def test_integer_max_min_keep_dtype(dtype, axis, device):
    low, high = (0, 255) if dtype == "uint8" else (-128, 127)
    kw = {"dtype": dtype, "low": low, "high": high, "out_dtype": dtype}
    check(lambda x: np.max(x, axis=axis), lambda x: x.max() if axis is None else x.max(axis).values, [(3, 7)],
          device, **kw)
    check(lambda x: np.min(x, axis=axis), lambda x: x.min() if axis is None else x.min(axis).values, [(3, 7)],
          device, **kw)


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_prod(dtype, axis, device):
    check(lambda x: np.prod(x.astype(np.int64), axis=axis), lambda x: x.prod(axis), [(3, 5)], device,
          dtype=dtype, low=-4, high=5, out_dtype="int64")


def test_max_min_with_infinities(device):
    x = np.array([[-np.inf, -np.inf], [1.0, np.inf]], np.float32)
    assert_close(Tensor(x, device=device).max(1).values, np.max(x, 1))
    assert_close(Tensor(x, device=device).min(1).values, np.min(x, 1))
    assert Tensor(x, device=device).max(1).indices.tolist() == np.argmax(x, 1).tolist()
    assert_close(Tensor(x, device=device).logsumexp(1), np.array([-np.inf, np.inf], np.float32))


def test_logsumexp_large_values_are_stable(device):
    x = np.array([[1000.0, 1000.0], [-1000.0, -1001.0]], np.float32)
    assert_close(Tensor(x, device=device).logsumexp(1), np_logsumexp(x, 1), atol=1e-3)


# ------------------------------------------------------------ argmax / argmin

ARG_AXES = [((7,), None), ((7,), 0), ((3, 7), 0), ((3, 7), 1), ((3, 7), -1), ((3, 7), None), ((2, 1, 5), 1),
            ((2, 1, 5), -1), ((2, 3, 4), 0), ((1023,), 0), ((), None)]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", ARG_AXES, ids=ids)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name, shape, axis, keepdim, device):
    np_fn = getattr(np, name)
    tg_fn = lambda x: getattr(x, name)(axis, keepdim=keepdim)  # noqa: E731
    # small integer values: many ties, and the first index must win (as in torch and numpy)
    check(lambda x: np_fn(x, axis=axis, keepdims=keepdim), tg_fn, [shape], device, low=-3, high=3,
          out_dtype="int64")
    check(lambda x: np_fn(x, axis=axis, keepdims=keepdim), tg_fn, [shape], device, dtype="int32",
          out_dtype="int64")
    check(lambda x: np_fn(x, axis=axis, keepdims=keepdim), tg_fn, [shape], device, layout="transposed",
          out_dtype="int64")


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("dtype", ["bool", "uint8"])
def test_argmax_argmin_small_dtypes(dtype, axis, device):
    kw = {"dtype": dtype, "low": 0, "high": 256, "out_dtype": "int64"}
    check(lambda x: np.argmax(x, axis=axis), lambda x: x.argmax(axis), [(3, 7)], device, **kw)
    check(lambda x: np.argmin(x, axis=axis), lambda x: x.argmin(axis), [(3, 7)], device, **kw)


# ------------------------------------------------------------ softmax, log_softmax, cumsum

SOFTMAX_AXES = [((7,), 0), ((7,), -1), ((3, 7), 0), ((3, 7), 1), ((3, 7), -1), ((2, 1, 5), 1), ((2, 3, 4), 1),
                ((2, 3, 4), -3), ((1023,), 0), ((1, 1), 0), ((0, 3), 1)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_AXES, ids=ids)
def test_softmax_log_softmax(shape, axis, device):
    check(lambda x: np_softmax(x, axis), lambda x: x.softmax(axis), [shape], device, low=-10.0, high=10.0)
    check(
        lambda x: x - np_logsumexp(x, axis, True),
        lambda x: x.log_softmax(axis),
        [shape],
        device,
        low=-10.0,
        high=10.0,
        atol=1e-5,
    )
    check(lambda x: np_softmax(x, axis), lambda x: x.softmax(dim=axis), [shape], device, layout="transposed")


def test_softmax_default_axis_and_large_values(device):
    x = np.array([[1000.0, 999.0, -1000.0], [0.0, 0.0, 0.0]], np.float32)
    assert_close(Tensor(x, device=device).softmax(), np_softmax(x.astype(np.float64), -1))
    assert_close(Tensor(x, device=device).log_softmax(), x - np_logsumexp(x, -1, True), atol=1e-4)


def test_softmax_of_0d_is_one(device):
    assert_close(Tensor(3.0, device=device).softmax(0), np.float32(1.0))
    assert_close(Tensor(3.0, device=device).log_softmax(0), np.float32(0.0))


CUMSUM_AXES = [((7,), 0), ((7,), -1), ((3, 7), 0), ((3, 7), 1), ((3, 7), -1), ((2, 1, 5), 1), ((2, 3, 4), 0),
               ((1023,), 0), ((0, 3), 0), ((2, 0), 1), ((3, 0), 0)]


@pytest.mark.parametrize("shape,axis", CUMSUM_AXES, ids=ids)
def test_cumsum(shape, axis, device):
    check(lambda x: np.cumsum(x, axis), lambda x: x.cumsum(axis), [shape], device, atol=1e-4)
    check(
        lambda x: np.cumsum(x, axis),
        lambda x: x.cumsum(dim=axis),
        [shape],
        device,
        layout="strided",
        atol=1e-4,
    )
    check(
        lambda x: np.cumsum(x.astype(np.int64), axis),
        lambda x: x.cumsum(axis),
        [shape],
        device,
        dtype="int32",
        out_dtype="int64",
    )


def test_cumsum_0d(device):
    """torch.cumsum of a 0-d tensor along dim 0 (or -1) is the tensor itself."""
    assert_close(Tensor(2.5, device=device).cumsum(0), np.float32(2.5))
    assert_close(Tensor(2.5, device=device).cumsum(-1), np.float32(2.5))


# ------------------------------------------------------------ errors at the call

def test_reduce_errors(device):
    x = Tensor(np.ones((3, 4), np.float32), device=device)
    raises_at_call(IndexError, r"axis 2 .*2 dims", lambda: x.sum(2))
    raises_at_call(ValueError, r"axis -3 .*2 dims", lambda: x.mean(-3))
    raises_at_call(IndexError, r"axis 5", lambda: x.amax((0, 5)))
    raises_at_call(ValueError, r"axis 2", lambda: x.softmax(2))
    raises_at_call(ValueError, r"axis 2", lambda: x.argmax(2))
    raises_at_call(ValueError, r"axis -3", lambda: x.cumsum(-3))
    raises_at_call(ValueError, r"repeats", lambda: x.sum((1, -1)))
    empty = Tensor(np.ones((0, 4), np.float32), device=device)
    raises_at_call(ValueError, r"empty.*\(0, 4\)", lambda: empty.max(0))
    raises_at_call(ValueError, r"empty.*\(0, 4\)", lambda: empty.min())
    raises_at_call(ValueError, r"empty.*\(0, 4\)", lambda: empty.argmax(0))
