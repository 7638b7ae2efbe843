"""The in-place index_* methods write the tensor's own memory with what the out-of-place ones compute
(checked against numpy), and refuse tensors that require grad as torch does for leaves."""
import numpy as np
import pytest

import tg
from tg import Tensor


def test_index_put_and_its_in_place_form():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    rows, vals = np.array([3, 0, 3]), np.array([[1, 1, 1], [2, 2, 2], [4, 4, 4]], np.float32)
    acc = a.copy()
    np.add.at(acc, rows, vals)
    summed = Tensor(a).index_put((Tensor(rows),), Tensor(vals), accumulate=True)
    np.testing.assert_array_equal(summed.numpy(), acc)
    x = Tensor(a.copy())
    pending = x * 1.0
    assert x.index_put_((Tensor(rows),), Tensor(vals), accumulate=True) is x
    np.testing.assert_array_equal(x.numpy(), acc)
    np.testing.assert_array_equal(pending.numpy(), a)      # read before the write: the old values
    last = a.copy()
    last[0], last[3] = vals[1], vals[2]                      # duplicates: the last write wins
    np.testing.assert_array_equal(Tensor(a).index_put((Tensor(rows),), Tensor(vals)).numpy(), last)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_fill_copy_in_place(dim):
    rng = np.random.default_rng(dim + 5)
    a = rng.standard_normal((5, 4)).astype(np.float32)
    n = a.shape[dim]
    index = np.array([n - 1, 0])
    source = np.take(rng.standard_normal((5, 4)).astype(np.float32), [0, 1], axis=dim)
    cases = [("index_add", (Tensor(source),)), ("index_fill", (2.5,)), ("index_copy", (Tensor(source),))]
    for name, args in cases:
        want = getattr(Tensor(a), name)(dim, Tensor(index), *args).numpy()
        x = Tensor(a.copy())
        assert getattr(x, name + "_")(dim, Tensor(index), *args) is x
        np.testing.assert_array_equal(x.numpy(), want)
    added = a.copy()
    np.add.at(added, (slice(None),) * (dim % 2) + (index,), source)
    got = Tensor(a).index_add(dim, Tensor(index), Tensor(source)).numpy()
    np.testing.assert_allclose(got, added, rtol=1e-6)


def test_in_place_index_writes_refuse_tensors_that_require_grad():
    w = Tensor.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        w.index_fill_(0, Tensor([1]), 1.0)
    with tg.no_grad():
        w.index_fill_(0, Tensor([1]), 1.0)
    assert w.tolist() == [0.0, 1.0, 0.0]
