"""Casts, bitcasts, half / bfloat16 arithmetic, and torch's type-promotion rules."""
import operator

import numpy as np
import pytest
from op_helpers import DEVICES, LAYOUTS, assert_close, bf16_round, check, raises_at_call, random_array

from tg import Tensor, dtypes
from tg.core.dtype import promote_types


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# ------------------------------------------------------------ casts

CASTS = {
    # name: (tg call, numpy reference, tg dtype of the result, (low, high) of the float input)
    "int": (lambda x: x.int(), lambda x: x.astype(np.int32), "int32", (-100.0, 100.0)),
    "long": (lambda x: x.long(), lambda x: x.astype(np.int64), "int64", (-1e6, 1e6)),
    "int8": (lambda x: x.cast("int8"), lambda x: x.astype(np.int8), "int8", (-127.0, 127.0)),
    "uint8": (lambda x: x.cast(dtypes.uint8), lambda x: x.astype(np.uint8), "uint8", (0.0, 255.0)),
    "int16": (lambda x: x.cast(np.int16), lambda x: x.astype(np.int16), "int16", (-3e4, 3e4)),
    "bool": (lambda x: x.bool(), lambda x: x.astype(bool), "bool", (-1, 2)),
    "half": (lambda x: x.half(), lambda x: x.astype(np.float16), "float16", (-7e4, 7e4)),
    "half_small": (lambda x: x.cast("float16"), lambda x: x.astype(np.float16), "float16", (-1e-4, 1e-4)),
    "bfloat16": (lambda x: x.bfloat16(), bf16_round, "bfloat16", (-1e30, 1e30)),
    "bfloat16_cast": (lambda x: x.cast("bfloat16"), bf16_round, "bfloat16", (-3.0, 3.0)),
    "double": (lambda x: x.double(), lambda x: x.astype(np.float64), "float64", (-3.0, 3.0)),
    "float": (lambda x: x.float(), lambda x: x, "float32", (-3.0, 3.0)),
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("shape", [(), (7,), (3, 7), (2, 1, 5), (0, 3), (1023,)], ids=str)
@pytest.mark.parametrize("name", CASTS)
def test_cast_from_float32(name, shape, layout, device):
    """Float to int truncates toward zero (torch); to half / bfloat16 rounds to nearest even: exact."""
    tg_fn, np_fn, out, (low, high) = CASTS[name]
    check(np_fn, tg_fn, [shape], device, low=low, high=high, layout=layout, out_dtype=out, atol=0, rtol=0)


def test_cast_bfloat16_ties_round_to_even(device):
    # 1 + 2**-8 lies exactly between two bfloat16 values: ties go to the even mantissa
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20, np.inf, -np.inf, 0.0,
                  3.4e38, 1e-40], np.float32)
    got = Tensor(x, device=device).cast("bfloat16")
    assert got.dtype == dtypes.bfloat16
    assert got.numpy().dtype == np.float32
    assert_close(got, bf16_round(x), atol=0, rtol=0)
    nan = Tensor(np.array([np.nan], np.float32), device=device).bfloat16().numpy()
    assert np.isnan(nan).all()


@pytest.mark.parametrize("src,dst,values", [
    ("int32", "int8", [300, -129, 127, -128, 0]),          # wraps modulo 2**8, like torch
    ("int32", "uint8", [-1, 256, 257, 255, 3]),
    ("int64", "int32", [2 ** 31, -2 ** 31 - 1, 5, -5, 0]),
    ("uint8", "int8", [255, 128, 127, 0, 1]),
    ("int64", "float32", [2 ** 24 + 1, -3, 0, 7, 2 ** 40]),
    ("int32", "float16", [2049, 70000, -3, 0, 1]),
    ("bool", "float32", [True, False, True, True, False]),
    ("bool", "int64", [True, False, True, True, False]),
    ("int32", "bool", [0, -1, 2, 0, 1]),
    ("uint8", "float32", [0, 255, 128, 1, 7]),
    ("float16", "float32", [0.1, -65504.0, 6e-8, 1.5, 0.0]),
    ("float16", "int32", [-2.5, 2.5, 1000.9, -0.9, 0.0]),
    ("float64", "float32", [1e-50, 1e50, 0.1, -1.5, 0.0]),
    ("float32", "float64", [0.1, -3.5, 1e30, 2.0, 0.0]),
])
def test_cast_between_dtypes(src, dst, values, device):
    with np.errstate(all="ignore"):
        a = np.array(values).astype(src)
        want = a.astype(dst)
    assert_close(Tensor(a, device=device).cast(dst), want, dtype=dst, atol=0, rtol=0)


@pytest.mark.parametrize("dst", ["float32", "float16", "int32", "bfloat16"])
def test_cast_from_bfloat16(dst, device):
    a = bf16_round(random_array((3, 7), "float32", -100.0, 100.0))
    t = Tensor(a, device=device, dtype="bfloat16")
    assert t.dtype == dtypes.bfloat16
    want = bf16_round(a) if dst == "bfloat16" else a.astype(dst)
    assert_close(t.cast(dst), want, dtype=dst, atol=0, rtol=0)


def test_cast_chain_and_non_contiguous(device):
    check(lambda x: x.astype(np.float16).astype(np.float32), lambda x: x.half().float(), [(3, 7)], device,
          layout="flipped", atol=0, rtol=0)
    check(lambda x: bf16_round(x).astype(np.int32), lambda x: x.bfloat16().int(), [(3, 7)], device, low=-50.0,
          high=50.0, layout="transposed", atol=0, rtol=0)
    check(lambda x: x.astype(np.int64).astype(np.float32), lambda x: x.long().float(), [(2, 1, 5)], device,
          low=-9.0, high=9.0, layout="expanded", atol=0, rtol=0)


def _bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """The host bit pattern of `values` stored as `dtype` (bfloat16: the top half of the float32 bits)."""
    if dtype == "bfloat16":
        return (bf16_round(values).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(values.astype(dtype))


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Values of `dtype` with these bits, as tg shows them (bfloat16 as float32)."""
    if dtype == "bfloat16":
        return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return bits.view(dtype)


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float32", "uint32"), ("int32", "float32"),
                                     ("float16", "int16"), ("int16", "float16"), ("int64", "float64"),
                                     ("uint8", "int8"), ("float32", "float32"), ("bfloat16", "uint16"),
                                     ("bfloat16", "int16"), ("uint16", "bfloat16"), ("int16", "bfloat16"),
                                     ("bfloat16", "float16"), ("float16", "bfloat16")])
def test_bitcast(src, dst, device):
    """Reinterpret the bits (torch's Tensor.view(dtype)): nothing is converted."""
    # integer sources stay in 0..15999 so that no bit pattern is a NaN (see the payload test below)
    a = random_array((3, 7), "float32" if src == "bfloat16" else src, *((-100.0, 100.0) if src[0] in "fb" else
                                                                       (0, 16000)))
    want = _from_bits(_bits(a, src), dst)
    got = Tensor(a, device=device, dtype=src).bitcast(dst)
    assert got.dtype.name == dst
    np.testing.assert_array_equal(got.numpy().view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@pytest.mark.parametrize("via", ["bfloat16", "float16"])
def test_bitcast_round_trip_keeps_nan_payload_bits(via, device):
    bits = np.array(
        [0x7F81, 0xFFFB, 0x7FC1, 0xFF80, 0x7C01, 0x3F80], np.uint16
    )  # NaNs with payloads, -inf, 1.0
    got = Tensor(bits, device=device).bitcast(via).bitcast("uint16")
    assert_close(got, bits, dtype="uint16")


def test_bitcast_of_a_view(device):
    a = random_array((4, 6), "float32")
    got = Tensor(a, device=device).T[1:].bitcast("int32")
    np.testing.assert_array_equal(got.numpy(), np.ascontiguousarray(a.T[1:]).view(np.int32))


def test_bitcast_errors(device):
    x = Tensor.ones(3, device=device)
    raises_at_call(TypeError, r"float32 to int16.*4 vs 2", lambda: x.bitcast("int16"))
    raises_at_call(TypeError, r"float32 to float64", lambda: x.bitcast(dtypes.float64))
    raises_at_call(TypeError, r"int8 to bfloat16", lambda: Tensor([1], dtype="int8", device=device).bitcast(
        "bfloat16"))


def test_cast_errors(device):
    raises_at_call(TypeError, r"unknown dtype 'float8'", lambda: Tensor.ones(2, device=device).cast("float8"))


# ------------------------------------------------------------ half / bfloat16 arithmetic

LOW_PRECISION = {"float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "name,np_fn,tg_fn,shapes,low",
    [
        ("add", np.add, operator.add, [(3, 7), (7,)], -2.0),
        ("mul", np.multiply, operator.mul, [(3, 7), (3, 7)], -2.0),
        ("div", np.divide, operator.truediv, [(3, 7), (3, 7)], 0.5),
        ("exp", np.exp, lambda x: x.exp(), [(2, 1, 5)], -2.0),
        ("sqrt", np.sqrt, lambda x: x.sqrt(), [(7,)], 0.5),
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), lambda x: x.sigmoid(), [(7,)], -2.0),
        ("sum", lambda x: x.sum(1), lambda x: x.sum(1), [(3, 7)], -2.0),
        ("max", lambda x: x.max(0), lambda x: x.amax(0), [(3, 7)], -2.0),
        ("matmul", np.matmul, operator.matmul, [(3, 7), (7, 4)], -2.0),
        (
            "softmax",
            lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True),
            lambda x: x.softmax(-1),
            [(3, 7)],
            -2.0,
        ),
    ],
)
def test_low_precision_ops(name, np_fn, tg_fn, shapes, low, dtype, device):
    """The result keeps the dtype; values match the float32 computation within the dtype's precision."""
    atol, rtol = LOW_PRECISION[dtype]
    check(np_fn, tg_fn, shapes, device, dtype=dtype, low=low, out_dtype=dtype, atol=atol, rtol=rtol)


@pytest.mark.parametrize("name,op", [("add", operator.add), ("mul", operator.mul), ("sub", operator.sub)])
def test_bfloat16_add_mul_are_correctly_rounded(name, op, device):
    """A bfloat16 result is the float32 result rounded once to bfloat16 (exact, not just close)."""
    a = bf16_round(random_array((3, 7), "float32", rng=np.random.default_rng(1)))
    b = bf16_round(random_array((3, 7), "float32", rng=np.random.default_rng(2)))
    got = op(Tensor(a, device=device, dtype="bfloat16"), Tensor(b, device=device, dtype="bfloat16"))
    assert_close(got, bf16_round(op(a, b)), dtype="bfloat16", atol=0, rtol=0)


def test_float16_add_is_correctly_rounded(device):
    a = random_array((3, 7), "float16", rng=np.random.default_rng(1))
    b = random_array((3, 7), "float16", rng=np.random.default_rng(2))
    got = Tensor(a, device=device) + Tensor(b, device=device)
    assert_close(
        got, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16), dtype="float16", atol=0, rtol=0
    )


# ------------------------------------------------------------ promotion

PROMOTIONS = [  # torch.promote_types
    ("int8", "uint8", "int16"),
    ("uint8", "int16", "int16"),
    ("uint8", "int32", "int32"),
    ("uint8", "int64", "int64"),
    ("int8", "int16", "int16"),
    ("int32", "int64", "int64"),
    ("bool", "int8", "int8"),
    ("bool", "uint8", "uint8"),
    ("bool", "float16", "float16"),
    ("bool", "bool", "bool"),
    ("float16", "bfloat16", "float32"),
    ("int64", "float16", "float16"),
    ("int32", "bfloat16", "bfloat16"),
    ("uint8", "float32", "float32"),
    ("float32", "float64", "float64"),
    ("int64", "float32", "float32"),
    ("float16", "float32", "float32"),
    ("bfloat16", "float64", "float64"),
    ("bool", "int64", "int64"),
    ("uint8", "uint8", "uint8"),
    ("int16", "float16", "float16"),
]


@pytest.mark.parametrize("a,b,want", PROMOTIONS)
def test_promote_types_matches_torch(a, b, want):
    assert promote_types(getattr(dtypes, a), getattr(dtypes, b)) == getattr(dtypes, want)
    assert promote_types(getattr(dtypes, b), getattr(dtypes, a)) == getattr(dtypes, want)


@pytest.mark.parametrize("a,b,want", PROMOTIONS)
def test_binary_op_result_dtype_and_values(a, b, want, device):
    """The op computes in the promoted dtype: int8 100 + uint8 200 is int16 300, not a wrapped byte."""
    big = 10 if want in ("int8", "uint8", "bool") else 100    # products stay inside the promoted type
    va = np.array([big, 1, 0, 1] if a != "bool" else [1, 1, 0, 1]).astype(np.float32)
    vb = np.array([big + 20, 2, 3, 0] if b != "bool" else [1, 0, 1, 1]).astype(np.float32)
    ta, tb = Tensor(va, device=device, dtype=a), Tensor(vb, device=device, dtype=b)
    for op in (operator.add, operator.mul):
        got = op(ta, tb)
        want_values = op(va.astype(np.float64), vb.astype(np.float64))
        if want == "bool":
            want_values = want_values != 0
        assert_close(
            got, want_values.astype(np.float32 if want == "bfloat16" else want), dtype=want, rtol=1e-2
        )
        assert op(tb, ta).dtype.name == want


SCALAR_PROMOTIONS = [  # torch.result_type(tensor, python scalar)
    ("int8", 1, "int8"),
    ("uint8", 3, "uint8"),
    ("int32", 1.5, "float32"),
    ("int64", 2.0, "float32"),
    ("bool", 1, "int64"),
    ("bool", True, "bool"),
    ("bool", 1.5, "float32"),
    ("float16", 1.5, "float16"),
    ("float16", 2, "float16"),
    ("bfloat16", 0.5, "bfloat16"),
    ("float64", 1, "float64"),
    ("int16", True, "int16"),
    ("float32", True, "float32"),
]


@pytest.mark.parametrize("dtype,scalar,want", SCALAR_PROMOTIONS)
def test_scalar_promotion(dtype, scalar, want, device):
    t = Tensor(np.array([1, 0, 1]), device=device, dtype=dtype)
    for got in (t + scalar, scalar + t, t * scalar, scalar * t):
        assert got.dtype.name == want, f"{dtype} tensor with {scalar!r}: {got.dtype.name}, torch gives {want}"
    values = np.array([1, 0, 1], np.float64) + float(scalar)
    assert_close(t + scalar, (values != 0) if want == "bool" else values.astype(
        np.float32 if want == "bfloat16" else want), dtype=want)


def test_int_tensor_with_float_scalar_computes_in_float(device):
    t = Tensor([1, 2, 3], device=device)
    assert_close(t * 0.5, np.array([0.5, 1.0, 1.5], np.float32), dtype="float32")
    assert_close(t + 0.25, np.array([1.25, 2.25, 3.25], np.float32), dtype="float32")
    assert_close(t ** 0.5, np.sqrt(np.array([1, 2, 3], np.float32)), dtype="float32")
    assert_close(0.5 - t, np.array([-0.5, -1.5, -2.5], np.float32), dtype="float32")


def test_comparison_between_dtypes_promotes_first(device):
    i = Tensor(np.array([1, 2, 3], np.int32), device=device)
    f = Tensor(np.array([1.5, 2.0, 2.5], np.float32), device=device)
    assert_close(i < f, np.array([True, False, False]), dtype="bool")
    assert_close(i == f, np.array([False, True, False]), dtype="bool")
    u = Tensor(np.array([255, 0, 1], np.uint8), device=device)
    s = Tensor(np.array([-1, 0, 2], np.int8), device=device)
    assert_close(u > s, np.array([True, False, False]), dtype="bool")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mixed_dtype_non_contiguous(layout, device):
    check(np.add, operator.add, [(3, 7), (3, 7)], device, dtype=["int32", "float32"], layout=layout,
          out_dtype="float32")
    check(lambda a, b: a * b, operator.mul, [(2, 1, 5), (5,)], device, dtype=["uint8", "int8"], layout=layout,
          low=[0, -5], high=[10, 5], out_dtype="int16")


# ------------------------------------------------------------ errors at the call

def test_broadcast_errors(device):
    a, b = Tensor.ones(3, 4, device=device), Tensor.ones(3, 5, device=device)
    raises_at_call(ValueError, r"\(3, 4\) and \(3, 5\)", lambda: a + b)
    raises_at_call(ValueError, r"\(3, 4\) and \(3, 5\)", lambda: a * b)
    raises_at_call(ValueError, r"\(3, 4\) and \(3, 5\)", lambda: a < b)
    raises_at_call(ValueError, r"\(3, 4\) and \(3, 5\)", lambda: a.maximum(b))
    raises_at_call(ValueError, r"\(2, 3, 4\) and \(4, 3\)",
                   lambda: Tensor.ones(2, 3, 4, device=device) + Tensor.ones(4, 3, device=device))
    raises_at_call(ValueError, r"\(3, 4\).*\(3, 5\)|\(3, 5\).*\(3, 4\)",
                   lambda: Tensor.ones(3, 4, dtype="bool", device=device).where(a, b))
    raises_at_call(ValueError, r"\(3, 4\).*\(2, 4\)|\(2, 4\).*\(3, 4\)",
                   lambda: Tensor.ones(2, 4, dtype="bool", device=device).where(a, 0.0))


def test_device_mismatch_error():
    a, b = Tensor.ones(3, device="CPU"), Tensor.ones(3, device="NUMPY")
    raises_at_call(ValueError, r"CPU and NUMPY", lambda: a + b)


def test_bool_arithmetic_errors(device):
    t = Tensor([True, False], device=device)
    raises_at_call(TypeError, r"bool", lambda: -t)
    raises_at_call(TypeError, r"bool", lambda: t - t)


# ------------------------------------------------------------ torch.dtype's properties

@pytest.mark.parametrize("dtype", dtypes.all(), ids=lambda d: d.name)
def test_dtype_properties_follow_torch(dtype):
    np_kind = np.dtype(dtype.np_value).kind
    assert dtype.is_floating_point == (np_kind == "f") == dtype.is_float
    assert dtype.is_signed == (np_kind in "if")          # torch: bool and unsigned ints are not signed
    assert dtype.is_complex is False
    assert dtype.itemsize == (2 if dtype.name == "bfloat16" else np.dtype(dtype.np).itemsize)
