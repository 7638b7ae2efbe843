"""Elementwise ops against numpy: arithmetic, unary math, activations, comparisons, logic, where."""
import math
import operator

import numpy as np
import pytest
from op_helpers import (
    BINARY_SHAPES,
    DEVICES,
    LAYOUTS,
    UNARY_SHAPES,
    assert_close,
    check,
    np_erf,
    np_gelu,
    np_gelu_tanh,
    np_sigmoid,
    np_softplus,
)

from tg import Tensor


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# ------------------------------------------------------------ binary arithmetic

ARITH = {
    "add": (np.add, operator.add, {}),
    "sub": (np.subtract, operator.sub, {}),
    "mul": (np.multiply, operator.mul, {}),
    "truediv": (np.divide, operator.truediv, {"low": [-2.0, "nonzero"], "high": [2.0, 2.0]}),
    "floordiv": (np.floor_divide, operator.floordiv, {"low": [-2.0, "nonzero"], "high": [2.0, 2.0]}),
    "mod": (np.mod, operator.mod, {"low": [-2.0, "nonzero"], "high": [2.0, 2.0], "atol": 1e-5}),
    "pow": (np.power, operator.pow, {"low": [0.1, -2.0], "high": [3.0, 2.0], "atol": 1e-5}),
}


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", ARITH)
def test_binary_tensor_tensor(name, shapes, device):
    np_fn, op, kw = ARITH[name]
    check(np_fn, op, shapes, device, **kw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", ["add", "mul", "truediv", "pow"])
def test_binary_non_contiguous(name, layout, device):
    np_fn, op, kw = ARITH[name]
    check(np_fn, op, [(3, 7), (3, 7)], device, layout=layout, **kw)
    check(np_fn, op, [(2, 4, 5), (4, 5)], device, layout=layout, **kw)


SCALARS = [2.5, -3, 0.7, 2]


@pytest.mark.parametrize("scalar", SCALARS)
@pytest.mark.parametrize("name", ARITH)
def test_binary_tensor_scalar(name, scalar, device):
    np_fn, op, _ = ARITH[name]
    low = 0.1 if name == "pow" else -2.0
    check(lambda a: np_fn(a, np.float32(scalar)), lambda a: op(a, scalar), [(3, 7)], device,
          low=low, atol=1e-5, out_dtype="float32")


@pytest.mark.parametrize("scalar", SCALARS)
@pytest.mark.parametrize("name", ARITH)
def test_binary_scalar_tensor_reversed(name, scalar, device):
    np_fn, op, _ = ARITH[name]
    low = "nonzero" if name in ("truediv", "floordiv", "mod") else -2.0
    if name == "pow":
        scalar = abs(scalar)
    check(lambda a: np_fn(np.float32(scalar), a), lambda a: op(scalar, a), [(3, 7)], device,
          low=low, high=2.0, atol=1e-5, rtol=1e-5, out_dtype="float32")


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -1, -2, 0.5, -0.5, 5, 2.0])
def test_pow_integer_exponents_on_negative_bases(exponent, device):
    low = "nonzero" if exponent in (-1, -2, -0.5) else -2.0
    if exponent in (0.5, -0.5):
        low = 0.1
    check(lambda a: np.power(a, np.float32(exponent)), lambda a: a ** exponent, [(3, 7)], device, low=low,
          atol=1e-5)


def test_pow_special_values(device):
    x = Tensor([-2.0, -1.5, 0.0, 2.0], device=device)
    assert_close(
        x ** Tensor([3.0, 2.0, 0.0, -1.0], device=device), np.array([-8.0, 2.25, 1.0, 0.5], np.float32)
    )
    assert_close(x ** 0.5, np.array([np.nan, np.nan, 0.0, math.sqrt(2)], np.float32))
    assert_close(x ** Tensor([0.5, 0.5, 0.5, 0.5], device=device),
                 np.array([np.nan, np.nan, 0.0, math.sqrt(2)], np.float32))


INT_DTYPES = ["int8", "uint8", "int16", "int32", "int64"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "floordiv", "mod"])
def test_integer_arithmetic(name, dtype, device):
    np_fn, op, _ = ARITH[name]
    signed = dtype[0] == "i"
    low = (
        ["nonzero" if signed else 0, "nonzero"] if name in ("floordiv", "mod") else [-5 if signed else 0] * 2
    )
    high = [6, 6] if signed else [12, 6]
    if not signed and name in ("floordiv", "mod"):
        low = [0, 1]
    if not signed and name == "sub":
        low, high = [6, 0], [12, 6]
    check(np_fn, op, [(3, 7), (7,)], device, dtype=dtype, low=low, high=high, out_dtype=dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_floordiv_mod_signs(dtype, device):
    """Python / torch semantics: floor division, remainder has the sign of the divisor."""
    a = np.array([7, -7, 7, -7, 0, 6, -6, 1], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 3, -5], dtype=dtype)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    assert_close(ta // tb, a // b, dtype=dtype)
    assert_close(ta % tb, a % b, dtype=dtype)
    assert_close(ta // 3, a // 3, dtype=dtype)
    assert_close(ta % -3, a % -3, dtype=dtype)
    assert_close(11 // tb, 11 // b, dtype=dtype)
    assert_close(-11 % tb, -11 % b, dtype=dtype)
    assert_close(ta.fmod(tb), np.fmod(a, b), dtype=dtype)


def test_integer_true_division_gives_float32(device):
    a, b = np.array([7, -7, 1, 0]), np.array([2, 2, 3, 5])
    assert_close(Tensor(a, device=device) / Tensor(b, device=device), a / b, dtype="float32")
    assert_close(Tensor(a, device=device) / 2, a / 2, dtype="float32")
    assert_close(1 / Tensor(b, device=device), 1 / b, dtype="float32")


def test_float_division_rounding_modes(device):
    check(
        lambda a, b: np.trunc(a / b),
        lambda a, b: a.div(b, rounding_mode="trunc"),
        [(3, 7), (3, 7)],
        device,
        low=[-5.0, "nonzero"],
        high=[5.0, 2.0],
    )
    check(
        lambda a, b: np.floor(a / b),
        lambda a, b: a.div(b, rounding_mode="floor"),
        [(3, 7), (3, 7)],
        device,
        low=[-5.0, "nonzero"],
        high=[5.0, 2.0],
    )
    check(lambda a, b: np.fmod(a, b), lambda a, b: a.fmod(b), [(3, 7), (3, 7)], device,
          low=[-5.0, "nonzero"], high=[5.0, 2.0], atol=1e-5)


# ------------------------------------------------------------ unary math and activations

UNARY = {
    "neg": (np.negative, lambda x: -x, {}),
    "neg_method": (np.negative, lambda x: x.neg(), {}),
    "abs": (np.abs, lambda x: x.abs(), {}),
    "exp": (np.exp, lambda x: x.exp(), {"low": -5.0, "high": 5.0, "rtol": 1e-5}),
    "log": (np.log, lambda x: x.log(), {"low": 0.01, "high": 10.0, "atol": 1e-5}),
    "exp2": (np.exp2, lambda x: x.exp2(), {"low": -5.0, "high": 5.0}),
    "log2": (np.log2, lambda x: x.log2(), {"low": 0.01, "high": 10.0, "atol": 1e-5}),
    "log10": (np.log10, lambda x: x.log10(), {"low": 0.01, "high": 10.0, "atol": 1e-5}),
    "log1p": (np.log1p, lambda x: x.log1p(), {"low": -0.5, "high": 3.0, "atol": 1e-5}),
    "expm1": (np.expm1, lambda x: x.expm1(), {"atol": 1e-5}),
    "sqrt": (np.sqrt, lambda x: x.sqrt(), {"low": 0.0, "high": 10.0}),
    "rsqrt": (lambda x: 1 / np.sqrt(x), lambda x: x.rsqrt(), {"low": 0.01, "high": 10.0}),
    "reciprocal": (np.reciprocal, lambda x: x.reciprocal(), {"low": "nonzero"}),
    "square": (np.square, lambda x: x.square(), {}),
    "sin": (np.sin, lambda x: x.sin(), {"low": -10.0, "high": 10.0, "atol": 1e-5}),
    "cos": (np.cos, lambda x: x.cos(), {"low": -10.0, "high": 10.0, "atol": 1e-5}),
    "tan": (np.tan, lambda x: x.tan(), {"low": -1.2, "high": 1.2, "atol": 1e-5, "rtol": 1e-4}),
    "tanh": (np.tanh, lambda x: x.tanh(), {"low": -6.0, "high": 6.0, "atol": 1e-6}),
    "sigmoid": (np_sigmoid, lambda x: x.sigmoid(), {"low": -10.0, "high": 10.0}),
    "relu": (lambda x: np.maximum(x, 0), lambda x: x.relu(), {}),
    "leaky_relu": (lambda x: np.where(x > 0, x, 0.01 * x), lambda x: x.leaky_relu(), {}),
    "leaky_relu_0.2": (lambda x: np.where(x > 0, x, 0.2 * x), lambda x: x.leaky_relu(0.2), {}),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), lambda x: x.elu(), {"atol": 1e-6}),
    "gelu": (np_gelu, lambda x: x.gelu(), {"low": -5.0, "high": 5.0, "atol": 1e-6}),
    "gelu_tanh": (np_gelu_tanh, lambda x: x.gelu(approximate="tanh"), {"low": -5.0, "high": 5.0}),
    "erf": (np_erf, lambda x: x.erf(), {"low": -4.0, "high": 4.0, "atol": 1e-6}),
    "silu": (lambda x: x * np_sigmoid(x), lambda x: x.silu(), {"low": -10.0, "high": 10.0}),
    "swish": (lambda x: x * np_sigmoid(x), lambda x: x.swish(), {}),
    "softplus": (np_softplus, lambda x: x.softplus(), {"low": -30.0, "high": 30.0, "atol": 1e-6}),
    "softplus_beta": (lambda x: np_softplus(x, 2.0, 5.0), lambda x: x.softplus(beta=2.0, threshold=5.0),
                      {"low": -10.0, "high": 10.0}),
    "sign": (np.sign, lambda x: x.sign(), {}),
    "trunc": (np.trunc, lambda x: x.trunc(), {"low": -5.0, "high": 5.0}),
    "floor": (np.floor, lambda x: x.floor(), {"low": -5.0, "high": 5.0}),
    "ceil": (np.ceil, lambda x: x.ceil(), {"low": -5.0, "high": 5.0}),
    "round": (np.round, lambda x: x.round(), {"low": -5.0, "high": 5.0}),
    "clamp": (lambda x: np.clip(x, -0.5, 0.75), lambda x: x.clamp(-0.5, 0.75), {}),
    "clamp_min": (lambda x: np.maximum(x, -0.5), lambda x: x.clamp(min=-0.5), {}),
    "clamp_max": (lambda x: np.minimum(x, 1.0), lambda x: x.clamp(max=1.0), {}),
    "clip": (lambda x: np.clip(x, -1, 1), lambda x: x.clip(-1.0, 1.0), {}),
}


@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, shape, device):
    np_fn, tg_fn, kw = UNARY[name]
    check(np_fn, tg_fn, [shape], device, **kw)


@pytest.mark.parametrize("layout", LAYOUTS[1:])
@pytest.mark.parametrize("name", ["exp", "sqrt", "sigmoid", "gelu", "relu", "abs", "tanh"])
def test_unary_non_contiguous(name, layout, device):
    np_fn, tg_fn, kw = UNARY[name]
    check(np_fn, tg_fn, [(3, 7)], device, layout=layout, **kw)
    check(np_fn, tg_fn, [(2, 1, 5)], device, layout=layout, **kw)


def test_round_half_to_even(device):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49, -0.51], np.float32)
    assert_close(Tensor(x, device=device).round(), np.round(x))


@pytest.mark.parametrize("name,values", [
    ("exp", [-np.inf, 0.0, 100.0, np.nan]),
    ("log", [0.0, -1.0, np.inf, 1.0]),
    ("sqrt", [-1.0, 0.0, np.inf, 4.0]),
    ("sigmoid", [-100.0, 100.0, -np.inf, np.inf]),
    ("tanh", [-100.0, 100.0, 0.0, 1e-4]),
    ("softplus", [-100.0, 100.0, 0.0, 19.0]),
])
def test_unary_special_values(name, values, device):
    np_fn, tg_fn, _ = UNARY[name]
    x = np.array(values, np.float32)
    with np.errstate(all="ignore"):
        want = np_fn(x)
    assert_close(tg_fn(Tensor(x, device=device)), want, rtol=1e-5, atol=1e-6)


def test_isnan_isinf(device):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32)
    assert_close(Tensor(x, device=device).isnan(), np.isnan(x), dtype="bool")
    assert_close(Tensor(x, device=device).isinf(), np.isinf(x), dtype="bool")


@pytest.mark.parametrize("dtype", ["int32", "int8", "int64"])
def test_integer_unary(dtype, device):
    check(np.negative, lambda x: -x, [(3, 7)], device, dtype=dtype, out_dtype=dtype)
    check(np.abs, lambda x: x.abs(), [(3, 7)], device, dtype=dtype, out_dtype=dtype)
    check(np.sign, lambda x: x.sign(), [(3, 7)], device, dtype=dtype, out_dtype=dtype)
    check(lambda x: np.maximum(x, 0), lambda x: x.relu(), [(3, 7)], device, dtype=dtype, out_dtype=dtype)
    check(
        lambda x: np.clip(x, -2, 3), lambda x: x.clamp(-2, 3), [(3, 7)], device, dtype=dtype, out_dtype=dtype
    )


def test_unary_on_int_gives_float(device):
    check(lambda x: np.exp(x.astype(np.float32)), lambda x: x.exp(), [(7,)], device, dtype="int32",
          out_dtype="float32", rtol=1e-5)
    check(lambda x: np.sqrt(x.astype(np.float32)), lambda x: x.sqrt(), [(7,)], device, dtype="int64",
          low=0, high=100, out_dtype="float32")


@pytest.mark.parametrize(
    "shapes", [[(3, 7), (3, 7)], [(3, 7), (7,)], [(2, 1, 5), (3, 5)], [(), (4,)], [(0,), (1,)]], ids=str
)
def test_maximum_minimum(shapes, device):
    check(np.maximum, lambda a, b: a.maximum(b), shapes, device)
    check(np.minimum, lambda a, b: a.minimum(b), shapes, device)
    check(np.maximum, lambda a, b: a.maximum(b), shapes, device, dtype="int32")
    check(np.minimum, lambda a, b: a.minimum(b), shapes, device, dtype="int32")


def test_maximum_minimum_scalars_and_ties(device):
    x = np.array([-1.0, 0.0, 2.0, 3.0], np.float32)
    assert_close(Tensor(x, device=device).maximum(2.0), np.maximum(x, 2.0))
    assert_close(Tensor(x, device=device).minimum(0.0), np.minimum(x, 0.0))
    assert_close(Tensor(x, device=device).maximum(Tensor(x, device=device)), x)


def test_maximum_minimum_propagate_nan(device):
    """torch.maximum / torch.minimum propagate NaN from either side."""
    a = np.array([np.nan, 1.0, np.nan], np.float32)
    b = np.array([0.0, np.nan, np.nan], np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    assert_close(ta.maximum(tb), np.maximum(a, b))
    assert_close(ta.minimum(tb), np.minimum(a, b))


def test_relu_propagates_nan(device):
    """torch.relu(nan) is nan (it is clamp_min(x, 0)), not 0."""
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    assert_close(Tensor(x, device=device).relu(), np.array([np.nan, 0.0, 2.0], np.float32))


def test_clamp_with_tensor_bounds(device):
    check(lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), lambda x, lo, hi: x.clamp(lo, hi),
          [(3, 7), (7,), (3, 1)], device, low=[-2.0, -2.0, 0.0], high=[2.0, 0.0, 2.0])


def test_lerp(device):
    check(lambda a, b: a + (b - a) * 0.3, lambda a, b: a.lerp(b, 0.3), [(3, 7), (7,)], device)


# ------------------------------------------------------------ comparisons

CMPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
        "ge": operator.ge}


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", CMPS)
def test_compare_tensor_tensor(name, shapes, device):
    op = CMPS[name]
    # small integer-valued floats so that ties (equal elements) really happen
    check(op, op, shapes, device, dtype="float32", low=-2, high=2, out_dtype="bool")
    check(op, op, shapes, device, dtype="int32", low=-2, high=3, out_dtype="bool")


@pytest.mark.parametrize("name", CMPS)
def test_compare_scalar_and_reversed(name, device):
    op = CMPS[name]
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0], np.float32)
    t = Tensor(x, device=device)
    assert_close(op(t, 0.5), op(x, 0.5), dtype="bool")
    assert_close(op(0.5, t), op(0.5, x), dtype="bool")
    assert_close(getattr(t, name)(1.0), op(x, 1.0), dtype="bool")
    xi = np.array([-2, 0, 1, 2, 3])
    assert_close(op(Tensor(xi, device=device), 1.5), op(xi, 1.5), dtype="bool")
    assert_close(op(Tensor(xi, device=device), 2), op(xi, 2), dtype="bool")


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_compare_non_contiguous(layout, device):
    check(operator.lt, operator.lt, [(3, 7), (3, 7)], device, layout=layout, out_dtype="bool")


def test_compare_with_nan(device):
    x = Tensor([np.nan, 1.0], device=device)
    assert_close(x == x, np.array([False, True]))
    assert_close(x != x, np.array([True, False]))
    assert_close(x < 2.0, np.array([False, True]))
    assert_close(x >= 2.0, np.array([False, False]))
    assert_close(x <= 1.0, np.array([False, True]))


# ------------------------------------------------------------ logic and bitwise

@pytest.mark.parametrize("dtype", ["bool", "float32", "int32"])
def test_logical_ops(dtype, device):
    shapes = [(3, 7), (7,)]
    low, high = (-1, 2) if dtype != "bool" else (-2.0, 2.0)
    kw = {"dtype": dtype, "low": low, "high": high, "out_dtype": "bool"}
    check(np.logical_and, lambda a, b: a.logical_and(b), shapes, device, **kw)
    check(np.logical_or, lambda a, b: a.logical_or(b), shapes, device, **kw)
    check(np.logical_xor, lambda a, b: a.logical_xor(b), shapes, device, **kw)
    check(np.logical_not, lambda a: a.logical_not(), shapes[:1], device, **kw)


BITWISE = {"and": operator.and_, "or": operator.or_, "xor": operator.xor}


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("name", BITWISE)
def test_bitwise(name, dtype, device):
    op = BITWISE[name]
    low, high = (-100, 100) if dtype[0] == "i" else (0, 200)
    check(op, op, [(3, 7), (7,)], device, dtype=dtype, low=low, high=high, out_dtype=dtype)
    check(op, op, [(2, 1, 5), (3, 5)], device, dtype=dtype, low=low, high=high, out_dtype=dtype,
          layout="transposed")


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "int64"])
def test_invert(dtype, device):
    low, high = (-100, 100) if dtype[0] == "i" else (0, 200)
    check(np.invert, lambda a: ~a, [(3, 7)], device, dtype=dtype, low=low, high=high, out_dtype=dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_bitwise_scalars_and_shifts(dtype, device):
    a = np.array([0, 1, 5, 12, 100], dtype=dtype)
    t = Tensor(a, device=device)
    assert_close(t & 6, a & np.array(6, dtype), dtype=dtype)
    assert_close(6 | t, np.array(6, dtype) | a, dtype=dtype)
    assert_close(t ^ 3, a ^ np.array(3, dtype), dtype=dtype)
    assert_close(t << 2, (a << 2).astype(dtype), dtype=dtype)
    assert_close(t >> 1, a >> 1, dtype=dtype)
    shifts = np.array([0, 1, 2, 3, 1], dtype=dtype)
    assert_close(t << Tensor(shifts, device=device), (a << shifts).astype(dtype), dtype=dtype)


def test_right_shift_negative_is_arithmetic(device):
    a = np.array([-8, -1, -7, 7], np.int32)
    assert_close(Tensor(a, device=device) >> 1, a >> 1, dtype="int32")


def test_bitwise_on_float_is_a_type_error(device):
    x = Tensor([1.0], device=device)
    for fn in (lambda: x & x, lambda: x | 1, lambda: ~x):
        with pytest.raises(TypeError, match="float32"):
            fn()


# ------------------------------------------------------------ where

@pytest.mark.parametrize("shapes", [[(3, 7)] * 3, [(3, 7), (7,), (3, 1)], [(2, 1, 5), (3, 5), ()],
                                    [(), (4,), (4,)], [(0, 3), (1, 3), (3,)], [(7,), (7,), (1,)]], ids=str)
def test_where(shapes, device):
    check(np.where, lambda c, a, b: c.where(a, b), shapes, device, dtype=["bool", "float32", "float32"])


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_where_non_contiguous(layout, device):
    check(np.where, lambda c, a, b: c.where(a, b), [(3, 7)] * 3, device, dtype=["bool", "float32", "float32"],
          layout=layout)


def test_where_scalars_and_dtypes(device):
    c = np.array([True, False, True])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    tc, tx = Tensor(c, device=device), Tensor(x, device=device)
    assert_close(tc.where(tx, 0.0), np.where(c, x, 0.0), dtype="float32")
    assert_close(tc.where(-1.0, tx), np.where(c, -1.0, x), dtype="float32")
    assert_close(tc.where(1, 0), np.where(c, 1, 0), dtype="int64")
    assert_close(tc.where(1.5, 0), np.where(c, 1.5, 0), dtype="float32")
    xi = np.array([4, 5, 6], np.int32)
    assert_close(tc.where(Tensor(xi, device=device), tx), np.where(c, xi, x), dtype="float32")
    # a non-bool condition means "nonzero"
    assert_close(Tensor([0.0, 2.0, -1.0], device=device).where(tx, 9.0), np.array([9.0, 2.0, 3.0]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tanh_keeps_relative_accuracy_near_zero(dtype):
    # 2 * sigmoid(2x) - 1 cancels near 0: tanh(1e-8) was 0 and tanh(1e-6) 7% off in float32
    rng = np.random.default_rng(0)
    mags = np.concatenate([10.0 ** rng.uniform(-30, 0.7, 400), rng.uniform(0, 0.2, 100)])
    x = (mags * rng.choice([-1, 1], mags.size)).astype(dtype)
    got = Tensor(x).tanh().numpy().astype(np.float64)
    want = np.tanh(x.astype(np.float64))
    ulp = np.finfo(dtype).eps
    np.testing.assert_array_less(np.abs(got - want), 8 * ulp * np.abs(want) + np.finfo(dtype).tiny)
