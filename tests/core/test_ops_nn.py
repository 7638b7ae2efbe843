"""matmul / dot / linear, conv2d and pooling against numpy references."""
import numpy as np
import pytest
from op_helpers import DEVICES, LAYOUTS, assert_close, check, np_conv2d, np_pool2d, raises_at_call

from tg import Tensor


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param



def ids(v):
    return str(v).replace(" ", "")


# ------------------------------------------------------------ matmul, dot, linear

MATMUL_SHAPES = [
    [(3, 7), (7, 5)],
    [(1, 1), (1, 1)],
    [(7,), (7,)],
    [(7,), (7, 5)],
    [(3, 7), (7,)],
    [(2, 3, 7), (7, 5)],
    [(7,), (2, 7, 5)],
    [(2, 3, 7), (7,)],
    [(2, 1, 3, 7), (4, 7, 5)],
    [(1, 3, 4), (2, 4, 5)],
    [(3, 0), (0, 4)],
    [(0, 3), (3, 4)],
    [(3, 4), (4, 0)],
    [(2, 1023), (1023, 3)],
    [(5, 1), (1, 6)],
    [(2, 2, 3, 4), (2, 2, 4, 3)],
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=ids)
def test_matmul(shapes, device):
    check(np.matmul, lambda a, b: a @ b, shapes, device, atol=1e-5)
    check(np.matmul, lambda a, b: a.matmul(b), shapes, device, atol=1e-5, layout="transposed")


def test_matmul_with_empty_inner_dim_is_zeros(device):
    a = Tensor(np.full((3, 4), 2.0, np.float32), device=device)[:, :0]      # (3, 0) view of a filled buffer
    b = Tensor(np.full((4, 2), 3.0, np.float32), device=device)[:0]         # (0, 2)
    assert_close(a @ b, np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_matmul_non_contiguous(layout, device):
    check(np.matmul, lambda a, b: a @ b, [(3, 7), (7, 5)], device, layout=layout, atol=1e-5)
    check(np.matmul, lambda a, b: a @ b, [(2, 3, 4), (4, 5)], device, layout=layout, atol=1e-5)


def test_matmul_of_transposed_views(device):
    check(lambda a, b: a.T @ b.T, lambda a, b: a.T @ b.T, [(7, 3), (5, 7)], device, atol=1e-5)
    check(
        lambda a, b: a[::2] @ b[:, ::-1],
        lambda a, b: a[::2] @ b[:, ::-1],
        [(6, 4), (4, 5)],
        device,
        atol=1e-5,
    )


@pytest.mark.parametrize("dtype", ["int32", "int64", "float16"])
def test_matmul_dtypes(dtype, device):
    atol, rtol = (5e-3, 5e-3) if dtype == "float16" else (0, 0)
    check(
        np.matmul,
        lambda a, b: a @ b,
        [(3, 7), (7, 5)],
        device,
        dtype=dtype,
        out_dtype=dtype,
        atol=atol,
        rtol=rtol,
    )


def test_matmul_mixed_dtypes_promote(device):
    check(
        np.matmul,
        lambda a, b: a @ b,
        [(3, 4), (4, 2)],
        device,
        dtype=["int32", "float32"],
        out_dtype="float32",
    )


def test_dot(device):
    check(np.dot, lambda a, b: a.dot(b), [(7,), (7,)], device, atol=1e-5)
    check(np.dot, lambda a, b: a.dot(b), [(3, 7), (7, 2)], device, atol=1e-5)
    check(np.dot, lambda a, b: a.dot(b), [(1023,), (1023,)], device, atol=1e-4)


@pytest.mark.parametrize("x_shape", [(7,), (3, 7), (2, 3, 7), (0, 7)], ids=ids)
@pytest.mark.parametrize("bias", [False, True])
def test_linear(x_shape, bias, device):
    if bias:
        check(
            lambda x, w, b: x @ w.T + b,
            lambda x, w, b: x.linear(w, b),
            [x_shape, (5, 7), (5,)],
            device,
            atol=1e-5,
        )
    else:
        check(lambda x, w: x @ w.T, lambda x, w: x.linear(w), [x_shape, (5, 7)], device, atol=1e-5)


def test_matmul_errors(device):
    a, b = Tensor.ones(3, 4, device=device), Tensor.ones(5, 2, device=device)
    raises_at_call(ValueError, r"\(3, 4\).*\(5, 2\)", lambda: a @ b)
    raises_at_call(ValueError, r"\(3, 4\).*\(3,\)", lambda: a @ Tensor.ones(3, device=device))
    raises_at_call(ValueError, r"at least 1 dim", lambda: a @ Tensor(2.0, device=device))
    raises_at_call(ValueError, r"\(2, 3, 4\).*\(3, 4, 2\)|\(2,\).*\(3,\)",
                   lambda: Tensor.ones(2, 3, 4, device=device) @ Tensor.ones(3, 4, 2, device=device))
    raises_at_call(
        ValueError, r"\(3, 4\).*\((6, 5|5, 6)\)", lambda: a.linear(Tensor.ones(6, 5, device=device))
    )


# ------------------------------------------------------------ conv2d

CONVS = [
    # (x shape, w shape, kwargs)
    ((1, 1, 5, 5), (1, 1, 3, 3), {}),
    ((2, 3, 7, 9), (4, 3, 3, 3), {}),
    ((2, 3, 7, 9), (4, 3, 3, 3), {"stride": 2}),
    ((2, 3, 7, 9), (4, 3, 3, 3), {"padding": 1}),
    ((2, 3, 7, 9), (4, 3, 3, 3), {"padding": (2, 1), "stride": (1, 2)}),
    ((2, 3, 7, 9), (4, 3, 3, 3), {"dilation": 2}),
    ((1, 3, 9, 8), (2, 3, 2, 3), {"dilation": (2, 1), "padding": (1, 0), "stride": (2, 1)}),
    ((2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2}),
    ((2, 4, 6, 6), (4, 1, 3, 3), {"groups": 4, "padding": 1}),       # depthwise
    ((2, 6, 5, 5), (3, 2, 1, 1), {"groups": 3}),
    ((1, 3, 5, 5), (2, 3, 1, 1), {}),                               # 1x1
    ((1, 2, 3, 3), (1, 2, 3, 3), {}),                               # kernel == input
    ((3, 2, 1, 7), (2, 2, 1, 3), {"stride": 3}),
    ((2, 3, 8, 8), (4, 3, 3, 3), {"stride": 3, "padding": 2, "dilation": 2, "groups": 1}),
    ((0, 3, 5, 5), (2, 3, 3, 3), {}),                               # empty batch
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("x_shape,w_shape,kw", CONVS, ids=ids)
def test_conv2d(x_shape, w_shape, kw, bias, device):
    if bias:
        check(lambda x, w, b: np_conv2d(x, w, b, **kw), lambda x, w, b: x.conv2d(w, b, **kw),
              [x_shape, w_shape, (w_shape[0],)], device, atol=1e-5)
    else:
        check(lambda x, w: np_conv2d(x, w, **kw), lambda x, w: x.conv2d(w, **kw), [x_shape, w_shape], device,
              atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_conv2d_non_contiguous(layout, device):
    check(
        lambda x, w: np_conv2d(x, w, padding=1),
        lambda x, w: x.conv2d(w, padding=1),
        [(2, 3, 6, 5), (4, 3, 3, 3)],
        device,
        layout=layout,
        atol=1e-5,
    )


def test_conv2d_errors(device):
    x = Tensor.ones(1, 3, 5, 5, device=device)
    raises_at_call(ValueError, r"3 channels", lambda: x.conv2d(Tensor.ones(2, 2, 3, 3, device=device)))
    raises_at_call(ValueError, r"groups", lambda: x.conv2d(Tensor.ones(2, 1, 3, 3, device=device), groups=2))
    raises_at_call(ValueError, r"4-d.*\(3, 5, 5\)", lambda: Tensor.ones(3, 5, 5, device=device).conv2d(
        Tensor.ones(2, 3, 3, 3, device=device)))
    raises_at_call(ValueError, r"larger than", lambda: x.conv2d(Tensor.ones(2, 3, 7, 7, device=device)))


# ------------------------------------------------------------ pooling

POOLS = [
    ((1, 1, 4, 4), {"kernel_size": 2}),
    ((2, 3, 7, 9), {"kernel_size": 2}),
    ((2, 3, 7, 9), {"kernel_size": 3, "stride": 2}),
    ((2, 3, 7, 9), {"kernel_size": 3, "stride": 1, "padding": 1}),
    ((2, 3, 7, 9), {"kernel_size": (2, 3), "stride": (1, 2)}),
    ((1, 2, 8, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((3, 7, 9), {"kernel_size": 2}),  # (C, H, W) input
    ((1, 1, 5, 5), {"kernel_size": 5}),
    ((2, 2, 6, 7), {"kernel_size": (3, 2), "padding": (1, 0)}),
    (
        (1, 2, 1, 7),
        {"kernel_size": (1, 2), "stride": 3},
    ),  # stride larger than the window and the input height
]


@pytest.mark.parametrize("x_shape,kw", POOLS, ids=ids)
def test_max_pool2d(x_shape, kw, device):
    ref = {("kernel" if k == "kernel_size" else k): v for k, v in kw.items()}
    check(lambda x: np_pool2d(x, kind="max", **ref), lambda x: x.max_pool2d(**kw), [x_shape], device)
    check(
        lambda x: np_pool2d(x, kind="max", **ref),
        lambda x: x.max_pool2d(**kw),
        [x_shape],
        device,
        layout="flipped",
    )


DILATED_POOLS = POOLS[:4] + [
    ((1, 2, 9, 9), {"kernel_size": 3, "dilation": 2}),
    ((1, 2, 9, 9), {"kernel_size": 2, "stride": 1, "dilation": (1, 3)}),
    ((1, 1, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}),
]


@pytest.mark.parametrize("x_shape,kw", DILATED_POOLS, ids=ids)
def test_max_pool2d_dilation(x_shape, kw, device):
    ref = {("kernel" if k == "kernel_size" else k): v for k, v in kw.items()}
    check(lambda x: np_pool2d(x, kind="max", **ref), lambda x: x.max_pool2d(**kw), [x_shape], device)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("x_shape,kw", POOLS, ids=ids)
def test_avg_pool2d(x_shape, kw, count_include_pad, device):
    ref = {("kernel" if k == "kernel_size" else k): v for k, v in kw.items()}
    check(lambda x: np_pool2d(x, kind="avg", count_include_pad=count_include_pad, **ref),
          lambda x: x.avg_pool2d(**kw, count_include_pad=count_include_pad), [x_shape], device)
    check(
        lambda x: np_pool2d(x, kind="avg", count_include_pad=count_include_pad, **ref),
        lambda x: x.avg_pool2d(**kw, count_include_pad=count_include_pad),
        [x_shape],
        device,
        layout="transposed",
    )


def test_max_pool2d_int_and_negative_values(device):
    check(
        lambda x: np_pool2d(x, 2, kind="max").astype(np.int32),
        lambda x: x.max_pool2d(2),
        [(1, 2, 4, 6)],
        device,
        dtype="int32",
        out_dtype="int32",
    )
    x = -np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    assert_close(Tensor(x, device=device).max_pool2d(2, padding=1), np_pool2d(x, 2, padding=1, kind="max"))


def test_pool_errors(device):
    x = Tensor.ones(1, 1, 3, 3, device=device)
    raises_at_call(ValueError, r"\(4, 4\).*\(3, 3\)", lambda: x.max_pool2d(4))
    raises_at_call(ValueError, r"\(4, 4\).*\(3, 3\)", lambda: x.avg_pool2d(4))
