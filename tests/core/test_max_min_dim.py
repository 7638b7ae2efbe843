"""torch.max / torch.min along a dim: a (values, indices) pair with .values and .indices, as in torch
scripts (`x.max(1)[1]`, `values, idx = x.max(1)`); with no dim a 0-d tensor, with a tensor maximum()."""
import numpy as np
import pytest
from helpers import gradcheck
from op_helpers import DEVICES

import tg
from tg import Tensor
from tg.core.tensor import ValuesIndices


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def expected(x: np.ndarray, dim: int, keepdim: bool, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    values = (np.max if largest else np.min)(x, axis=dim, keepdims=keepdim)
    indices = (np.argmax if largest else np.argmin)(x, axis=dim)           # numpy: the first one too
    return values, np.expand_dims(indices, dim) if keepdim else indices


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 7), 1), ((3, 7), 0), ((5, 3, 9), -1), ((5, 3, 9), -2),
                                       ((2, 1, 5), 1), ((1023,), 0)])
def test_values_and_indices_match_numpy(shape, dim, keepdim, largest, device):
    a = np.random.default_rng(len(shape) + dim).standard_normal(shape).astype(np.float32)
    x = Tensor(a, device=device)
    got = x.max(dim, keepdim) if largest else x.min(dim=dim, keepdim=keepdim)
    values, indices = expected(a, dim, keepdim, largest)
    assert isinstance(got, ValuesIndices) and got.indices.dtype == tg.int64 and got.values.dtype == tg.float32
    np.testing.assert_array_equal(got.values.numpy(), values)
    np.testing.assert_array_equal(got.indices.numpy(), indices)


@pytest.mark.parametrize("dtype", ["float32", "int8", "int32", "int64", "uint8"])
def test_ties_pick_the_first_index(dtype, device):
    a = np.random.default_rng(3).integers(0, 3, size=(5, 11)).astype(dtype)   # many ties
    x = Tensor(a, device=device)
    for dim in (0, 1, -1):
        for largest in (True, False):
            values, indices = x.max(dim) if largest else x.min(dim)
            want_values, want_indices = expected(a, dim, False, largest)
            assert values.dtype.name == dtype
            np.testing.assert_array_equal(values.numpy(), want_values)
            np.testing.assert_array_equal(indices.numpy(), want_indices)
            assert indices.tolist() == (x.argmax(dim) if largest else x.argmin(dim)).tolist()


def test_torch_script_idioms():
    out = tg.tensor([[0.25, 2.0, 0.75], [4.0, 0.5, 4.0]])
    assert out.max(1)[1].tolist() == [1, 0] and out.max(1)[0].tolist() == [2.0, 4.0]
    values, idx = out.max(1)
    assert values.tolist() == [2.0, 4.0] and idx.tolist() == [1, 0]
    assert out.min(dim=0).values.tolist() == [0.25, 0.5, 0.75]
    assert out.min(dim=0).indices.tolist() == [0, 1, 0]
    assert tg.max(out, 1).indices.tolist() == [1, 0]
    assert tg.min(out, dim=1, keepdim=True)[1].tolist() == [[0], [1]]
    assert (out.max(1)[1] == tg.tensor([1, 0])).sum().item() == 2               # accuracy counting
    assert out.max().item() == 4.0 and out.max().shape == () and tg.min(out).item() == 0.25
    assert out.max(tg.tensor([1.0, 1.0, 1.0])).tolist() == [[1.0, 2.0, 1.0], [4.0, 1.0, 4.0]]
    assert tg.min(out, tg.tensor(1.0)).tolist() == [[0.25, 1.0, 0.75], [1.0, 0.5, 1.0]]


def test_edge_inputs():
    v, i = tg.tensor(2.5).max(0)                       # a 0-d tensor's dim 0 is itself
    assert (v.item(), i.item(), v.shape, i.shape) == (2.5, 0, (), ())
    v, i = tg.tensor([[True, False], [False, False]]).max(1)
    assert v.tolist() == [True, False] and i.tolist() == [0, 0]
    nan = float("nan")
    v, i = tg.tensor([[1.0, nan, 3.0], [2.0, 5.0, 1.0]]).max(1)    # NaN wins, as in torch
    assert np.isnan(v.tolist()[0]) and v.tolist()[1] == 5.0 and i.tolist() == [1, 1]
    assert tg.tensor([[1.0, nan, 0.0]]).min(1).indices.tolist() == [1]
    low = np.iinfo(np.int32).min
    assert tg.tensor([[3, low, low]], dtype=tg.int32).min(1).indices.tolist() == [1]


def test_errors_say_what_to_do():
    x = tg.zeros(3, 4)
    with pytest.raises(TypeError, match=r"max: expected one int dim.*use x\.amax\(\(0, 1\)\)"):
        x.max((0, 1))
    with pytest.raises(TypeError, match=r"min: expected one int dim.*amin"):
        x.min(dim=[0])
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        x.max(2)
    with pytest.raises(ValueError, match=r"empty.*\(0, 4\)"):
        tg.zeros(0, 4).min(0)


@pytest.mark.parametrize("largest", [True, False])
def test_gradient_through_values_matches_finite_differences(largest):
    a = np.random.default_rng(5).standard_normal((4, 7))
    gradcheck(lambda t: (t.max(1) if largest else t.min(1)).values, a)
    gradcheck(lambda t: (t.max(-2, keepdim=True) if largest else t.min(0, True))[0] * 3, a)


def test_gradient_goes_to_the_picked_index_on_a_tie():
    """As torch's max(dim) (and unlike amax, which shares it), the whole gradient goes to the index given."""
    x = tg.tensor([[2.0, 5.0, 5.0], [1.0, 1.0, 0.0]], requires_grad=True)
    values, indices = x.max(1)
    (values * tg.tensor([1.0, 2.0])).sum().backward()
    assert indices.tolist() == [1, 0]
    assert x.grad.tolist() == [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]
    y = tg.tensor([[2.0, 5.0, 5.0]], requires_grad=True)
    y.amax(1).sum().backward()
    assert y.grad.tolist() == [[0.0, 0.5, 0.5]]
