"""Gradients where a spread or a norm is zero (issue 34 item 7): a constant channel, a zero vector.

torch's documented subgradients there are finite: std's and a norm's is 0 (`std_backward`,
`norm_backward` mask the zero result), `F.normalize` clamps the norm at eps so a zero vector's gradient is
grad / eps, and the eps-guarded norms (layer/group/batch/rms) are smooth. sqrt's own derivative at 0 is inf,
so a composite that reaches it used to give 0 * inf = nan and poison every gradient of the step.

Each case is a random float64 input with some slices made degenerate (constant, or zero), and the tg gradient
of sum(w * f(x)) is compared with central finite differences of a numpy float64 forward. Central
differences give exactly the subgradient 0 at the symmetric kinks (|h| around a zero norm or spread) and
grad / eps inside normalize's clamp (h is far below eps there), so one reference covers every position.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tg
import tg.nn.functional as F
from tg import Tensor

H = 1e-6


def _np_norm(x: np.ndarray, p: float, axis: int, keepdims: bool = False) -> np.ndarray:
    if p == np.inf:
        return np.abs(x).max(axis, keepdims=keepdims)
    return (np.abs(x) ** p).sum(axis, keepdims=keepdims) ** (1 / p)


def _np_normalized(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axes, keepdims=True) + eps)


def _np_group_norm(x: np.ndarray, groups: int, eps: float) -> np.ndarray:
    g = x.reshape(x.shape[0], groups, -1)
    return _np_normalized(g, (2,), eps).reshape(x.shape)


def _np_rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def _np_cosine(x1: np.ndarray, x2: np.ndarray, eps: float) -> np.ndarray:
    n1 = np.maximum(_np_norm(x1, 2, 1, True), eps)
    n2 = np.maximum(_np_norm(x2, 2, 1, True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(1)


def _np_cdist(x: np.ndarray, p: float) -> np.ndarray:
    return _np_norm(x[:, None, :] - x[None, :, :], p, -1)


# name -> (tg function, numpy float64 forward); inputs are 2-d (rows, cols), degenerate slices are rows
CASES: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
    "std": (lambda x: x.std(1), lambda x: x.std(1, ddof=1)),
    "std_c0": (lambda x: x.std(1, correction=0), lambda x: x.std(1)),
    "std_all_cols": (lambda x: x.std(0), lambda x: x.std(0, ddof=1)),
    "var": (lambda x: x.var(1), lambda x: x.var(1, ddof=1)),
    "std_mean": (lambda x: sum(tg.std_mean(x, 1)), lambda x: x.std(1, ddof=1) + x.mean(1)),
    "var_mean": (lambda x: sum(tg.var_mean(x, 1)), lambda x: x.var(1, ddof=1) + x.mean(1)),
    "norm2": (lambda x: x.norm(dim=1), lambda x: _np_norm(x, 2, 1)),
    "norm1": (lambda x: x.norm(1, dim=1), lambda x: _np_norm(x, 1, 1)),
    "norm3": (lambda x: x.norm(3, dim=1), lambda x: _np_norm(x, 3, 1)),
    "vector_norm": (lambda x: tg.linalg.vector_norm(x, dim=1), lambda x: _np_norm(x, 2, 1)),
    "linalg_norm": (lambda x: tg.linalg.norm(x, dim=1), lambda x: _np_norm(x, 2, 1)),
    "normalize": (lambda x: F.normalize(x, dim=1, eps=1e-3),
                  lambda x: x / np.maximum(_np_norm(x, 2, 1, True), 1e-3)),
    "normalize_p3": (lambda x: F.normalize(x, p=3, dim=1, eps=1e-3),
                     lambda x: x / np.maximum(_np_norm(x, 3, 1, True), 1e-3)),
    "layer_norm": (lambda x: F.layer_norm(x, (x.shape[1],)), lambda x: _np_normalized(x, (1,), 1e-5)),
    "group_norm": (lambda x: F.group_norm(x.reshape(x.shape[0], 1, -1), 1).reshape(x.shape),
                   lambda x: _np_group_norm(x.reshape(x.shape[0], 1, -1), 1, 1e-5).reshape(x.shape)),
    "batch_norm": (lambda x: F.batch_norm(x.T, None, None, training=True).T,
                   lambda x: _np_normalized(x.T, (0,), 1e-5).T),
    "rms_norm": (lambda x: F.rms_norm(x, (x.shape[1],), eps=1e-6), lambda x: _np_rms_norm(x, 1e-6)),
    "cosine_similarity": (lambda x: F.cosine_similarity(x, x.flip(0) + 1, eps=1e-3),
                          lambda x: _np_cosine(x, x[::-1] + 1, 1e-3)),
    "pairwise_distance": (lambda x: F.pairwise_distance(x, x.flip(0), eps=0.0),
                          lambda x: _np_norm(x - x[::-1], 2, 1)),
    "cdist": (lambda x: tg.cdist(x, x), lambda x: _np_cdist(x, 2)),
    "cdist_p1": (lambda x: tg.cdist(x, x, p=1), lambda x: _np_cdist(x, 1)),
}


def _degenerate_input(rng: np.random.Generator) -> np.ndarray:
    rows, cols = int(rng.integers(3, 8)), int(rng.integers(2, 9))
    x = rng.standard_normal((rows, cols))
    for r in rng.choice(rows, size=int(rng.integers(1, rows)), replace=False):
        x[r] = 0.0 if rng.random() < 0.5 else rng.standard_normal()    # a zero vector or a constant row
    return x


def _finite_differences(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, w: np.ndarray) -> np.ndarray:
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += H
        down[i] -= H
        grad[i] = ((w * f(up)).sum() - (w * f(down)).sum()) / (2 * H)
    return grad


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_at_zero_spread_matches_subgradient(name: str, seed: int) -> None:
    f_tg, f_np = CASES[name]
    rng = np.random.default_rng([seed, len(name)])
    x = _degenerate_input(rng)
    w = rng.standard_normal(f_np(x).shape)
    t = Tensor(x, requires_grad=True)
    out = f_tg(t)
    np.testing.assert_allclose(out.numpy(), f_np(x), rtol=1e-9, atol=1e-9)
    (out * Tensor(w)).sum().backward()
    got = t.grad.numpy()
    assert np.isfinite(got).all(), f"{name}: non-finite gradient\n{got}\nfor input\n{x}"
    np.testing.assert_allclose(got, _finite_differences(f_np, x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normalize_zero_vector_gradient_is_grad_over_eps(dtype: str) -> None:
    # torch: x / clamp_min(norm, eps); the clamp passes no gradient below eps, so d/dx = I / eps
    g = np.array([[1.0, -2.0, 3.0]])
    x = Tensor(np.zeros((1, 3)), dtype=dtype, requires_grad=True)
    y = F.normalize(x, dim=1)
    (y * Tensor(g, dtype=dtype)).sum().backward()
    assert y.numpy().tolist() == [[0.0, 0.0, 0.0]]
    np.testing.assert_allclose(x.grad.numpy(), g / 1e-12, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_std_of_constant_gradient_is_zero(dtype: str) -> None:
    x = Tensor([2.0, 2.0, 2.0], dtype=dtype, requires_grad=True)
    x.std().backward()
    assert x.grad.numpy().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("op", ["prod", "cumprod", "prod_all"])
def test_product_gradient_at_zeros_is_product_rule(op: str, seed: int) -> None:
    # d prod / d x_i is the product of the others: nonzero at a lone zero (a sum of logs gave 0 there)
    rng = np.random.default_rng([seed, len(op)])
    x = rng.uniform(-2, 2, (int(rng.integers(2, 6)), int(rng.integers(2, 9))))
    x[rng.random(x.shape) < 0.25] = 0.0
    f_tg, f_np = {"prod": (lambda t: t.prod(1), lambda a: a.prod(1)),
                  "cumprod": (lambda t: t.cumprod(1), lambda a: a.cumprod(1)),
                  "prod_all": (lambda t: t.prod(), lambda a: a.prod())}[op]
    w = rng.standard_normal(np.shape(f_np(x)))
    t = Tensor(x, requires_grad=True)
    out = f_tg(t)
    np.testing.assert_allclose(out.numpy(), f_np(x), rtol=1e-12, atol=1e-300)
    (out * Tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), _finite_differences(f_np, x, w), rtol=1e-6, atol=1e-8)
