"""x[index] = value with integer tensors, lists and bool masks (torch's index_put semantics), and
index_put / index_fill / index_copy / index_add, against numpy and plain loops."""
import numpy as np
import pytest
from helpers import gradcheck
from op_helpers import DEVICES, assert_close, random_array

from tg import Tensor
from tg.core import indexing

rng = np.random.default_rng(7)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def loop_put(a, rows, values, accumulate=False):
    """The reference for duplicates: one write (or add) per index entry, in order."""
    out = a.copy()
    for i, r in enumerate(rows):
        out[r] = out[r] + values[i] if accumulate else values[i]
    return out


# index (with integer lists/arrays, no duplicates) and how value is made from the target shape
UNIQUE_CASES = [
    (np.array([3, 0, 4]), "full"),                      # rows, a matching value
    ([1, -1], "row"),                                    # negative index, a value broadcast over rows
    ((slice(None), np.array([6, 2, 0])), "full"),        # x[:, idx]
    ((np.array([2, 4]), slice(1, 4)), "full"),           # x[idx, 1:3]
    ((slice(None, None, -2), [5, 1]), "scalar"),         # a flipped, strided slice, then idx
    ((np.array([[0, 1], [4, 3]]), np.array([[6, 0], [2, 5]])), "full"),   # two 2-d index arrays
    ((np.array([1, 2]), 3), "scalar"),                   # an int beside the tensor
    ((Ellipsis, np.array([0, 6])), "full"),
    ((np.array([0, 4]), None, slice(2, 7, 2)), "full"),  # a new axis splits nothing
    ((np.array([1, 3]), slice(None), ), "leading1"),    # value with an extra leading 1 dim
]


@pytest.mark.parametrize("case", range(len(UNIQUE_CASES)))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_setitem_integer_index_matches_numpy(case, dtype, device):
    index, kind = UNIQUE_CASES[case]
    a = random_array((5, 7), dtype)
    target = a[index].shape
    value = {"full": random_array(target, dtype), "row": random_array(target[1:], dtype),
             "scalar": np.array(3, a.dtype), "leading1": random_array((1,) + target, dtype)}[kind]
    want = a.copy()
    want[index] = value[0] if kind == "leading1" else value
    x = Tensor(a, device=device)
    before = x * 1                                   # a reader of the old values, not yet run
    tg_index = tuple(Tensor(i, device=device) if isinstance(i, np.ndarray) and i.ndim == 1 else i
                     for i in (index if isinstance(index, tuple) else (index,)))
    x[tg_index] = Tensor(value, device=device) if value.ndim else value.item()
    assert_close(x, want, dtype=dtype)
    assert_close(before, a, dtype=dtype)


@pytest.mark.parametrize("shape", [(11,), (6, 5), (3, 4, 2)])
def test_duplicate_indices_last_write_wins(shape, device):
    a = random_array(shape)
    rows = rng.integers(-shape[0], shape[0], size=2 * shape[0] + 1)
    values = random_array((rows.size,) + shape[1:])
    x = Tensor(a, device=device)
    x[Tensor(rows, device=device)] = Tensor(values, device=device)
    assert_close(x, loop_put(a, rows % shape[0], values))
    got = indexing.index_put(Tensor(a, device=device), (Tensor(rows, device=device),),
                             Tensor(values, device=device), accumulate=True)
    assert_close(got, loop_put(a, rows % shape[0], values, accumulate=True), atol=1e-5)


@pytest.mark.parametrize("shape, mask_dims", [((9,), 1), ((4, 6), 1), ((4, 6), 2), ((3, 2, 5), 1),
                                              ((3, 2, 5), 2)])
def test_bool_mask_with_a_vector_value(shape, mask_dims, device):
    a = random_array(shape)
    mask = rng.random(shape[:mask_dims]) < 0.5
    k = int(mask.sum())
    value = random_array((k,) + shape[mask_dims:])
    want = a.copy()
    want[mask] = value
    x = Tensor(a, device=device)
    x[Tensor(mask, device=device)] = Tensor(value, device=device)
    assert_close(x, want)
    if len(shape) > mask_dims:                      # one row broadcast to every True position
        row = random_array(shape[mask_dims:])
        want[mask] = row
        x[mask] = Tensor(row, device=device)       # a numpy mask works too
        assert_close(x, want)
    assert_close(Tensor(a, device=device)[Tensor(mask, device=device)], a[mask])


def test_bool_mask_scalar_stays_lazy_and_masks_combine_with_slices(device):
    a = random_array((4, 6))
    x = Tensor(a, device=device)
    mask = x > 0
    x[mask] = 0.25
    assert mask.lazydata.base.realized is None      # the scalar path never reads the mask back
    want = np.where(a > 0, 0.25, a)
    assert_close(x, want)
    cols = np.array([True, False, False, True, True, False])
    x[1:3, cols] = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    want[1:3, cols] = np.arange(6).reshape(2, 3)
    assert_close(x, want)
    x[[True, False, True, False], 2] = -1.0          # a bool list is a mask, as in torch
    want[[True, False, True, False], 2] = -1.0
    assert_close(x, want)


def test_empty_index_and_empty_mask_write_nothing(device):
    a = random_array((3, 4))
    x = Tensor(a, device=device)
    x[Tensor(np.zeros(0, np.int64), device=device)] = 5.0
    x[np.zeros((3, 4), bool)] = Tensor(np.zeros(0, np.float32), device=device)
    assert_close(x, a)


def test_index_put_matches_numpy(device):
    a = random_array((5, 4, 3))
    i0, i1 = np.array([4, 0, 2]), np.array([1, 3, 3])
    value = random_array((3, 3))
    want = a.copy()
    want[i0, i1] = value
    got = indexing.index_put(Tensor(a, device=device), (Tensor(i0, device=device), Tensor(i1, device=device)),
                             Tensor(value, device=device))
    assert_close(got, want)
    # None stands for a whole dim, as in torch's C++ index lists
    want = a.copy()
    want[:, i1] = 1.5
    got = indexing.index_put(Tensor(a, device=device), (None, Tensor(i1, device=device)), 1.5)
    assert_close(got, want)
    mask = a[:, :, 0] > 0
    want = a.copy()
    np.add.at(want, np.nonzero(mask), 1.0)
    got = indexing.index_put(Tensor(a, device=device), (Tensor(mask, device=device),), 1.0, accumulate=True)
    assert_close(got, want)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_index_fill_copy_add(dim, dtype, device):
    a = random_array((4, 5, 3), dtype)
    d = dim % 3
    n = a.shape[d]
    index = rng.integers(0, n, size=n + 2)            # with duplicates
    unique = rng.permutation(n)[:n - 1]
    src_shape = a.shape[:d] + (index.size,) + a.shape[d + 1:]
    source = random_array(src_shape, dtype)
    at = [slice(None)] * 3

    want = a.copy()
    at[d] = index
    want[tuple(at)] = 7
    assert_close(indexing.index_fill(Tensor(a, device=device), dim, Tensor(index, device=device), 7), want,
                 dtype=dtype)

    want = np.moveaxis(a.copy(), d, 0)
    np.add.at(want, index, np.moveaxis(source, d, 0) * 2)
    got = indexing.index_add(Tensor(a, device=device), dim, Tensor(index, device=device),
                             Tensor(source, device=device), alpha=2)
    assert_close(got, np.moveaxis(want, 0, d), atol=1e-5, dtype=dtype)

    want = np.moveaxis(a.copy(), d, 0)
    want = loop_put(want, index, np.moveaxis(source, d, 0))
    got = indexing.index_copy(Tensor(a, device=device), dim, Tensor(index, device=device),
                              Tensor(source, device=device))
    assert_close(got, np.moveaxis(want, 0, d), dtype=dtype)

    at[d] = unique
    src = random_array(a.shape[:d] + (unique.size,) + a.shape[d + 1:], dtype)
    want = a.copy()
    want[tuple(at)] = src
    got = indexing.index_copy(Tensor(a, device=device), dim, Tensor(unique, device=device),
                              Tensor(src, device=device))
    assert_close(got, want, dtype=dtype)


def test_index_put_gradients_reach_values_and_the_kept_positions():
    idx = np.array([2, 0])
    # overwritten rows of x get no gradient; the value's rows get the output's gradient there
    gradcheck(lambda x, v: indexing.index_put(x, (Tensor(idx),), v), random_array((4, 3)),
              random_array((2, 3)))
    gradcheck(lambda x, v: indexing.index_put(x, (Tensor(idx),), v, accumulate=True),
              random_array((4, 3)), random_array((3,)))
    x = Tensor(random_array((4, 3)), requires_grad=True)
    indexing.index_put(x, (Tensor(idx),), 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.array([[0] * 3, [1] * 3, [0] * 3, [1] * 3], np.float32))


def test_errors():
    x = Tensor.zeros(3, 4)
    with pytest.raises(ValueError, match=r"cannot fill x\[index\] of shape \(2,\).*bool mask"):
        x[Tensor([[True, False, False, False], [False] * 4, [False, False, False, True]])] = Tensor.ones(3)
    with pytest.raises(ValueError, match=r"value of shape \(3,\) cannot fill x\[index\] of shape \(2, 4\)"):
        x[[0, 2]] = Tensor.ones(3)
    with pytest.raises(IndexError, match="index 3 is out of range"):
        x[Tensor([0, 3])] = 1.0
    with pytest.raises(IndexError, match="must match the dims it indexes"):
        x[Tensor([True, False])] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        x[Tensor([[True] * 4] * 3), 0] = 1.0
    with pytest.raises(TypeError, match="must be integer"):
        x[Tensor([0.5])] = 1.0
    with pytest.raises(TypeError, match="must be a tuple of tensors"):
        indexing.index_put(x, Tensor([0]), 1.0)
    with pytest.raises(ValueError, match=r"source of shape \(2, 4\), expected \(3, 4\)"):
        indexing.index_copy(x, 0, Tensor([0, 1, 2]), Tensor.ones(2, 4))
    with pytest.raises(TypeError, match="0-d or 1-d integer"):
        indexing.index_add(x, 1, Tensor([[0]]), Tensor.ones(3, 1))
    with pytest.raises(ValueError, match="one-element"):
        indexing.index_fill(x, 1, Tensor([0]), Tensor([1.0, 2.0]))
    assert x.tolist() == [[0.0] * 4] * 3
