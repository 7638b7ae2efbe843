"""Integer and bool tensors never require grad (torch's rule): every op whose result is an integer or
bool tensor cuts the graph there, so no gradient flows back through a cast to int, a comparison or
an index (issue 34 item 5). Cases are generated over ops and input shapes; gradients are checked
against the ones written out by hand."""
import numpy as np
import pytest

from tg import Tensor, dtypes

# ops whose result is an integer or bool tensor, applied to a float tensor that requires grad
INT_RESULTS = {
    "int": lambda x: x.int(), "long": lambda x: x.long(), "bool": lambda x: x.bool(),
    "cast_int8": lambda x: x.cast(dtypes.int8), "cast_uint8": lambda x: x.abs().cast(dtypes.uint8),
    "to_int32": lambda x: x.to(dtypes.int32),
    "lt": lambda x: x < 0.5, "gt": lambda x: x > 0.5, "le": lambda x: x <= 0.5, "ge": lambda x: x >= 0.5,
    "eq": lambda x: x == x, "ne": lambda x: x != 0.5, "isnan": lambda x: x.isnan(),
    "isinf": lambda x: x.isinf(), "isfinite": lambda x: x.isfinite(), "signbit": lambda x: x.signbit(),
    "argmax": lambda x: x.argmax(), "argmin": lambda x: x.argmin(-1),
    "max_indices": lambda x: x.max(-1).indices,
    "min_indices": lambda x: x.min(0).indices, "sort_indices": lambda x: x.sort(-1).indices,
    "topk_indices": lambda x: x.topk(1, -1).indices, "argsort": lambda x: x.argsort(-1),
    "floor_divide_int": lambda x: x.int() // 2, "remainder_int": lambda x: x.int() % 3,
    "logical_not": lambda x: x.logical_not(), "nonzero_mask": lambda x: (x > 0) & (x < 1),
    "cummax_indices": lambda x: x.cummax(-1).indices,
}


@pytest.mark.parametrize("name", sorted(INT_RESULTS))
@pytest.mark.parametrize("shape", [(3,), (2, 5)])
def test_integer_and_bool_results_never_require_grad(name, shape):
    rng = np.random.default_rng(len(name) * 7 + len(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    y = INT_RESULTS[name](x)
    assert not (y.dtype.is_float), f"{name} gave {y.dtype}"
    assert not y.requires_grad, f"{name}: a {y.dtype.name} result requires grad"
    # used in a float computation next to x, only x's own path carries a gradient: d/dx sum(f(y) * 3 + x) = 1
    (y.float().reshape(-1).sum() * 3 + x.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(shape, np.float32))


def test_cast_to_int_then_back_passes_no_gradient():
    x = Tensor([1.5, 2.5], requires_grad=True)
    y = x.int()
    (y.float() * 3 + x).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]     # torch: [1, 1]; the cast path carries nothing


def test_float_casts_keep_the_gradient():
    for dt in (dtypes.float16, dtypes.float64, dtypes.bfloat16):
        x = Tensor([1.0, 2.0], requires_grad=True)
        y = x.cast(dt)
        assert y.requires_grad
        (y.float() * 3).sum().backward()
        assert x.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("dt", ["int32", "int64", "bool", "uint8"])
def test_integer_tensors_cannot_require_grad(dt):
    with pytest.raises(RuntimeError, match="floating point"):
        Tensor([1, 0], dtype=dt, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        Tensor([1, 0], dtype=dt).requires_grad_()
    Tensor([1, 0], dtype=dt).requires_grad_(False)    # turning it off is always allowed
