"""torch.optim.LBFGS (tg/nn/lbfgs.py) against what the method must reach and torch's documented rules:
the exact minimizer of random convex quadratics (numpy's solve), Rosenbrock's minimum, a least-squares
fit (numpy's lstsq), the closure calls a step makes, the history it keeps, a state_dict round trip that
continues the same trajectory, and the arguments torch refuses. (During development the iterates were
also compared with torch's LBFGS in float64: equal to 1e-13, the same closure calls.)"""
import json

import numpy as np
import pytest

import tg
from tg import Tensor
from tg.optim import LBFGS


def quadratic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    return m @ m.T + n * np.eye(n) * 0.5, rng.standard_normal(n)


TIGHT = {"tolerance_grad": 1e-12, "tolerance_change": 1e-16}   # stop at the minimum, not at torch's defaults


def minimize(x0, loss_fn, steps: int, **kw):
    x = Tensor(np.array(x0, np.float64), requires_grad=True)
    opt = LBFGS([x], **kw)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = loss_fn(x)
        loss.backward()
        return loss
    for _ in range(steps):
        opt.step(closure)
    return x.numpy(), calls[0], opt


@pytest.mark.parametrize("ls", [None, "strong_wolfe"])
@pytest.mark.parametrize("n,seed", [(2, 0), (6, 1), (13, 2)])
def test_convex_quadratics_reach_the_exact_minimizer(n, seed, ls):
    a, b = quadratic(n, seed)
    at, bt = Tensor(a), Tensor(b)
    lr = 1.0 if ls else 0.5
    got, _, _ = minimize(np.zeros(n), lambda x: 0.5 * (x @ (at @ x)) - bt @ x, 3, lr=lr, line_search_fn=ls,
                         max_iter=50, **TIGHT)
    np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-6, atol=1e-8)


def test_rosenbrock_with_strong_wolfe():
    got, calls, opt = minimize([-1.5, 2.0], lambda x: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2, 4,
                               line_search_fn="strong_wolfe", **TIGHT)
    np.testing.assert_allclose(got, [1.0, 1.0], atol=1e-6)
    assert calls == opt._memory["func_evals"] and calls < 120


def test_a_least_squares_fit_of_a_linear_layer():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((40, 5)), rng.standard_normal((40, 2))
    layer = tg.nn.Linear(5, 2, dtype=tg.float64)
    opt = LBFGS(layer.parameters(), line_search_fn="strong_wolfe", max_iter=100, **TIGHT)

    def closure():
        opt.zero_grad()
        loss = ((layer(Tensor(x)) - Tensor(y)) ** 2).mean()
        loss.backward()
        return loss
    first = opt.step(closure)
    assert first.item() > 0
    coef, *_ = np.linalg.lstsq(np.c_[x, np.ones(40)], y, rcond=None)
    np.testing.assert_allclose(layer.weight.numpy().T, coef[:5], atol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), coef[5], atol=1e-6)


@pytest.mark.parametrize("max_iter", [1, 2, 7])
def test_without_line_search_a_step_calls_the_closure_max_iter_times(max_iter):
    a, b = quadratic(4, 5)
    at, bt = Tensor(a), Tensor(b)
    _, calls, _ = minimize(np.ones(4), lambda x: 0.5 * (x @ (at @ x)) - bt @ x, 2, lr=0.01, max_iter=max_iter)
    assert calls == 2 * max_iter          # the first evaluation, then one after each step but the last


def test_history_is_bounded_and_the_state_round_trips():
    a, b = quadratic(8, 6)
    at, bt = Tensor(a), Tensor(b)
    fn = lambda x: 0.5 * (x @ (at @ x)) - bt @ x + (x ** 4).sum() * 0.01     # noqa: E731
    want, _, _ = minimize(np.ones(8), fn, 4, lr=0.3, max_iter=3, history_size=2)
    first, _, opt = minimize(np.ones(8), fn, 2, lr=0.3, max_iter=3, history_size=2)
    assert len(opt._memory["old_dirs"]) <= 2
    saved = json.loads(json.dumps(opt.state_dict()))            # plain JSON: no pickle, no tensors
    x = Tensor(first, requires_grad=True)
    again = LBFGS([x], lr=1.0, max_iter=3, history_size=2)
    again.load_state_dict(saved)
    assert again.param_groups[0]["lr"] == 0.3

    def closure():
        again.zero_grad()
        loss = fn(x)
        loss.backward()
        return loss
    for _ in range(2):
        again.step(closure)
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-12)


def test_what_torch_refuses():
    w = Tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="one parameter group"):
        LBFGS([{"params": [w]}, {"params": [Tensor([2.0], requires_grad=True)], "lr": 0.1}])
    with pytest.raises(ValueError, match="line_search_fn"):
        LBFGS([w], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="needs a closure"):
        LBFGS([w]).step()
    with pytest.raises(ValueError, match="history_size"):
        LBFGS([w], history_size=0)
