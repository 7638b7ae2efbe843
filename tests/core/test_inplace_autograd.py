"""In-place ops are recorded for autograd as torch records them (issue 34 item 4): `y *= 3` makes y the
product, with its gradient rule; a write of a value that requires grad into a tensor that did not makes it
require grad. A leaf that requires grad raises, as in torch; a value backward saved or another computation
read keeps its value (torch raises there). Random chains of in-place ops are checked against central finite
differences of the same program run in numpy float64."""
import numpy as np
import pytest

import tg
from tg import Tensor

# (name, tg in-place op, numpy value of the result); v is a second operand of the target's shape
IN_PLACE = [
    ("iadd", lambda y, v: y.__iadd__(v), lambda a, v: a + v),
    ("isub", lambda y, v: y.__isub__(v * 2), lambda a, v: a - v * 2),
    ("imul", lambda y, v: y.__imul__(v), lambda a, v: a * v),
    ("idiv", lambda y, v: y.__itruediv__(v * v + 1), lambda a, v: a / (v * v + 1)),
    ("add_alpha", lambda y, v: y.add_(v, alpha=-3), lambda a, v: a - 3 * v),
    ("sub_", lambda y, v: y.sub_(v), lambda a, v: a - v),
    ("mul_scalar", lambda y, v: y.mul_(2.5), lambda a, v: a * 2.5),
    ("div_", lambda y, v: y.div_(4.0), lambda a, v: a / 4.0),
    ("clamp_wide", lambda y, v: y.clamp_(-100, 100), lambda a, v: np.clip(a, -100, 100)),
    ("copy_", lambda y, v: y.copy_(v * v), lambda a, v: v * v),
    ("self_add", lambda y, v: y.__iadd__(y), lambda a, v: a + a),
    ("zero_then_add", lambda y, v: y.zero_().__iadd__(v), lambda a, v: v + 0 * a),
]
# how the target is made from x (a non-leaf), and the second operand from x
MAKE = [
    (lambda x: x * 2, lambda a: a * 2),
    (lambda x: x + 1, lambda a: a + 1),
    (lambda x: (x * x).sum(-1, keepdim=True) * x, lambda a: (a * a).sum(-1, keepdims=True) * a),
    (lambda x: Tensor.zeros(*x.shape) + 0, lambda a: np.zeros_like(a)),   # no grad until a write brings it
]


def _program(seed: int):
    rng = np.random.default_rng(seed)
    make = MAKE[rng.integers(len(MAKE))]
    steps = [IN_PLACE[i] for i in rng.integers(len(IN_PLACE), size=int(rng.integers(1, 5)))]
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)))
    return make, steps, shape, rng.standard_normal(shape), rng.standard_normal(shape)


def _numpy_loss(make, steps, a, w):
    y = make[1](a)
    v = np.sin(a)
    for _, _, ref in steps:
        y = ref(y, v)
    return (y * w).sum()


@pytest.mark.parametrize("seed", range(50))
def test_random_in_place_chains_have_the_gradient_of_their_values(seed):
    make, steps, shape, a, w = _program(seed)
    x = Tensor(a.astype(np.float32), requires_grad=True)
    y = make[0](x)
    v = x.sin()
    for _, op, _ in steps:
        assert op(y, v) is y
    # + x * 0: a program whose result no longer depends on x (zeros, then a scalar product) still has a graph
    ((y * Tensor(w.astype(np.float32))).sum() + (x * 0).sum()).backward()
    eps, grad = 1e-6, np.zeros_like(a)
    for i in np.ndindex(shape):
        d = np.zeros_like(a)
        d[i] = eps
        grad[i] = (_numpy_loss(make, steps, a + d, w) - _numpy_loss(make, steps, a - d, w)) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=2e-3, atol=2e-3,
                               err_msg=f"seed {seed}: {[s[0] for s in steps]}")


def test_the_issues_examples():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y *= 3
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]          # torch: [6, 6]
    x = Tensor([1.0, 2.0], requires_grad=True)
    z = Tensor.zeros(2)
    z += x * 5
    assert z.requires_grad
    z.sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]


WRITES = {
    "+=": lambda t: t.__iadd__(1.0), "-=": lambda t: t.__isub__(1.0), "*=": lambda t: t.__imul__(2.0),
    "/=": lambda t: t.__itruediv__(2.0), "add_": lambda t: t.add_(1.0), "sub_": lambda t: t.sub_(1.0),
    "mul_": lambda t: t.mul_(2.0), "div_": lambda t: t.div_(2.0), "clamp_": lambda t: t.clamp_(0, 1),
    "copy_": lambda t: t.copy_(Tensor([5.0, 6.0])), "fill_": lambda t: t.fill_(1.0),
    "zero_": lambda t: t.zero_(), "setitem": lambda t: t.__setitem__(0, 1.0),
    "index_fill_": lambda t: t.index_fill_(0, Tensor([1]), 1.0),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_every_in_place_write_refuses_a_leaf_that_requires_grad(name):
    w = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        WRITES[name](w)
    assert w.tolist() == [1.0, 2.0]
    with tg.no_grad():
        WRITES[name](w)                    # allowed, and not recorded
    assert w._ctx is None


@pytest.mark.parametrize("name", sorted(set(WRITES) - {"setitem", "index_fill_"}))
def test_a_write_after_a_value_was_saved_or_read_keeps_its_gradient(name):
    # under autograd a write names a new value instead of writing memory, so what backward saved (exp
    # keeps its output, y * y keeps y) or another computation read is never changed: torch raises here,
    # tg gives the gradient of the values the program computed
    x = Tensor([0.5, 1.5], requires_grad=True)
    e = x.exp()
    y = x * 2
    z = y * y
    WRITES[name](e)
    WRITES[name](y)
    (z.sum() + e.sum() * 0 + (e * 0).sum() + x.exp().sum()).backward()
    a = np.array([0.5, 1.5])
    np.testing.assert_allclose(x.grad.numpy(), 8 * a + np.exp(a), rtol=1e-6)


def test_assign_is_not_recorded_so_it_refuses_values_with_a_graph():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="not recorded for autograd"):
        y.assign(y * 3)
    with pytest.raises(RuntimeError, match="not recorded for autograd"):
        Tensor.zeros(2).assign(x * 3)


def test_functional_in_place_on_a_tensor_with_a_graph_never_gives_a_wrong_gradient():
    import warnings

    import tg.nn.functional as F
    x = Tensor([-1.0, 2.0], requires_grad=True)
    h = x * 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = F.relu(h, inplace=True)
    out.sum().backward()
    assert x.grad.tolist() == [0.0, 3.0]


@pytest.mark.parametrize("seed", range(30))
def test_in_place_chains_read_forward_first_and_with_earlier_readers(seed):
    """The forward's values are read before backward (a training loop prints its loss), and a tensor that
    read y before a write (a sum over a size-1 dim: a computation, which keeps the old value in torch; tg
    builds it as a view of y's memory) still gets the gradient of the value it read."""
    make, steps, shape, a, w = _program(seed)
    rng = np.random.default_rng(1000 + seed)
    when = int(rng.integers(len(steps)))
    x = Tensor(a.astype(np.float32), requires_grad=True)
    y, v = make[0](x), x.sin()
    early = None
    for k, (_, op, _) in enumerate(steps):
        if k == when:
            early = y.unsqueeze(0).sum(0)
        op(y, v)
        y.numpy()
    loss = (y * Tensor(w.astype(np.float32))).sum() + (early * 3).sum() + (x * 0).sum()
    loss.numpy()
    loss.backward()

    def numpy_loss(b):
        out, vv = make[1](b), np.sin(b)
        for k, (_, _, ref) in enumerate(steps):
            if k == when:
                kept = out.copy()
            out = ref(out, vv)
        return (out * w).sum() + (kept * 3).sum()

    eps, grad = 1e-6, np.zeros_like(a)
    for i in np.ndindex(shape):
        d = np.zeros_like(a)
        d[i] = eps
        grad[i] = (numpy_loss(a + d) - numpy_loss(a - d)) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=2e-3, atol=2e-3,
                               err_msg=f"seed {seed}: {[s[0] for s in steps]}, early reader at {when}")
