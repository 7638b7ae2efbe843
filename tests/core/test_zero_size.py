"""Zero-size tensors through every op class (issue 34 item 14): `einsum('...k,kn->...n', zeros(0, 3),
zeros(3, 2))` raised (a label of size 0 was taken as 1, the broadcast size), logsumexp over an empty dim
raised (torch: -inf). Each case runs on several shapes with a zero-size dim in different places and is
compared with numpy float64 (shape and values); the empty sum is 0, the empty product 1, an empty max
raises as in torch.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tg
import tg.nn.functional as F
from tg import Tensor

EINSUM = [
    ("...k,kn->...n", [(0, 3), (3, 2)]), ("ij,jk->ik", [(2, 0), (0, 3)]), ("ij,jk", [(0, 4), (4, 0)]),
    ("bij,bjk->bik", [(0, 2, 3), (1, 3, 4)]), ("i,i->", [(0,), (0,)]), ("ij->j", [(0, 3)]),
    ("ii->i", [(0, 0)]), ("...,...->...", [(2, 0), (1, 1)]), ("i,j->ij", [(0,), (3,)]),
    ("bij,bjk->bik", [(2, 0, 3), (2, 3, 4)]), ("...ij,...jk", [(3, 1, 2, 0), (5, 0, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM, ids=[f"{e}-{s}" for e, s in EINSUM])
def test_einsum_with_zero_size_labels(equation: str, shapes: list) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    want = np.einsum(equation, *arrays)
    got = tg.einsum(equation, *[Tensor(a) for a in arrays]).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12)


def _rows(x):
    """x as a matrix of its first dim by the rest (reshape(n, -1) is ambiguous with a zero-size dim)."""
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:])))


SHAPES = [(0,), (2, 0, 3), (0, 4), (3, 0), (1, 0, 1)]

# name: (tg call, numpy reference); each is applied to every shape, along its last dim where it takes one
CASES: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
    "exp": (lambda x: x.exp(), np.exp),
    "add_broadcast": (lambda x: x + Tensor(np.ones((1,) * x.ndim)), lambda a: a + 1),
    "where": (lambda x: tg.where(x > 0, x, 0.0), lambda a: np.where(a > 0, a, 0.0)),
    "sum": (lambda x: x.sum(), np.sum),
    "sum_last": (lambda x: x.sum(-1), lambda a: a.sum(-1)),
    "sum_first_keepdim": (lambda x: x.sum(0, keepdim=True), lambda a: a.sum(0, keepdims=True)),
    "prod_last": (lambda x: x.prod(-1), lambda a: a.prod(-1)),
    "cumsum": (lambda x: x.cumsum(-1), lambda a: a.cumsum(-1)),
    "logsumexp_last": (lambda x: x.logsumexp(-1), lambda a: np.log(np.exp(a).sum(-1))),
    "softmax_first": (lambda x: x.softmax(0), lambda a: np.exp(a) / np.exp(a).sum(0, keepdims=True)),
    "matmul_self_t": (lambda x: _rows(x) @ _rows(x).T, lambda a: _rows(a) @ _rows(a).T),
    "matmul_inner": (lambda x: _rows(x).T @ _rows(x), lambda a: _rows(a).T @ _rows(a)),
    "cat": (lambda x: tg.cat([x, x], -1), lambda a: np.concatenate([a, a], -1)),
    "stack": (lambda x: tg.stack([x, x], 0), lambda a: np.stack([a, a])),
    "flip": (lambda x: x.flip(0), lambda a: a[::-1]),
    "pad": (lambda x: F.pad(x, (1, 2)), lambda a: np.pad(a, [(0, 0)] * (a.ndim - 1) + [(1, 2)])),
    "permute": (lambda x: x.permute(*reversed(range(x.ndim))), lambda a: a.transpose()),
    "reshape": (lambda x: x.reshape(-1), lambda a: a.reshape(-1)),
    "repeat": (lambda x: x.repeat(*([2] * x.ndim)), lambda a: np.tile(a, [2] * a.ndim)),
    "getitem": (lambda x: x[1:], lambda a: a[1:]),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_zero_size_through_op_classes(name: str, shape: tuple) -> None:
    f_tg, f_np = CASES[name]
    a = np.zeros(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.asarray(f_np(a))
    got = f_tg(Tensor(a)).numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_conv_of_an_empty_batch() -> None:
    out = F.conv2d(Tensor.zeros(0, 2, 5, 5), Tensor.ones(3, 2, 3, 3))
    assert out.shape == (0, 3, 3, 3)


def test_max_of_empty_raises_as_torch() -> None:
    with pytest.raises(ValueError, match="empty"):
        Tensor.zeros(2, 0).max()
