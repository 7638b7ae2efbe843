"""Tensor.backward's graph freeing (retain_graph) and the functional Tensor.gradient."""

import numpy as np
import pytest

from tg import Tensor


def _leaves():
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((4, 2)).astype(np.float32), requires_grad=True)
    return x, w


def _loss(x: Tensor, w: Tensor) -> Tensor:
    return ((x @ w).tanh() * (x.sum(1, keepdim=True) + 1)).square().mean()


def test_gradient_equals_backward_and_leaves_grad_alone():
    x, w = _leaves()
    _loss(x, w).backward()
    want = [x.grad.numpy(), w.grad.numpy()]
    x2, w2 = _leaves()
    got = _loss(x2, w2).gradient(x2, w2)
    assert x2.grad is None and w2.grad is None
    for g, ref in zip(got, want):
        assert g is not None
        np.testing.assert_allclose(g.numpy(), ref, rtol=1e-6)


def test_gradient_of_intermediates_and_unused_targets():
    x, w = _leaves()
    hidden = x @ w
    unused = Tensor.ones(2, requires_grad=True)
    g_hidden, g_w, g_unused = (hidden * 3).sum().gradient(hidden, w, unused)
    assert g_hidden is not None and g_w is not None
    np.testing.assert_allclose(g_hidden.numpy(), np.full((3, 2), 3.0))
    np.testing.assert_allclose(g_w.numpy(), 3 * x.numpy().T @ np.ones((3, 2)), rtol=1e-6)
    assert g_unused is None


def test_gradient_of_a_target_named_twice():
    x, _ = _leaves()
    first, second = (x * x).sum().gradient(x, x)
    assert first is not None and second is not None
    np.testing.assert_allclose(first.numpy(), 2 * x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), first.numpy())


def test_gradient_with_a_given_output_gradient():
    x, _ = _leaves()
    cot = np.arange(12, dtype=np.float32).reshape(3, 4)
    (g,) = (x * 2).gradient(x, gradient=Tensor(cot))
    assert g is not None
    np.testing.assert_allclose(g.numpy(), 2 * cot)


def test_gradient_needs_a_target():
    x, _ = _leaves()
    with pytest.raises(ValueError, match=r"\[autograd\] gradient\(\) needs at least one target"):
        x.sum().gradient()


def test_second_backward_through_a_freed_graph_raises():
    x, w = _leaves()
    loss = _loss(x, w)
    loss.backward()
    with pytest.raises(
        RuntimeError, match=r"\[autograd\] backward through a graph a second time.*retain_graph=True"
    ):
        loss.backward()


def test_retain_graph_allows_a_second_backward():
    x, w = _leaves()
    loss = _loss(x, w)
    loss.backward(retain_graph=True)
    first = w.grad.numpy()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * first, rtol=1e-6)


def test_separate_graphs_over_the_same_leaves():
    x, w = _leaves()
    _loss(x, w).backward()
    _loss(x, w).backward()                             # a new forward is a new graph
    x2, w2 = _leaves()
    _loss(x2, w2).backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w2.grad.numpy(), rtol=1e-6)
