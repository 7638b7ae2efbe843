"""torch's inplace=True on F's activations and dropout: the input's memory takes the result when it
does not require grad; a tensor that requires grad gets the result as a new tensor and a warning."""

import numpy as np
import pytest

from tg import Tensor
from tg.nn import functional as F

CASES = [
    ("relu", lambda x, **k: F.relu(x, **k), lambda a: np.maximum(a, 0)),
    ("leaky_relu", lambda x, **k: F.leaky_relu(x, 0.2, **k), lambda a: np.where(a > 0, a, 0.2 * a)),
    ("elu", lambda x, **k: F.elu(x, 0.7, **k), lambda a: np.where(a > 0, a, 0.7 * np.expm1(a))),
    ("relu6", lambda x, **k: F.relu6(x, **k), lambda a: np.clip(a, 0, 6)),
    ("hardtanh", lambda x, **k: F.hardtanh(x, -0.5, 0.5, **k), lambda a: np.clip(a, -0.5, 0.5)),
    ("silu", lambda x, **k: F.silu(x, **k), lambda a: a / (1 + np.exp(-a))),
    ("hardsigmoid", lambda x, **k: F.hardsigmoid(x, **k), lambda a: np.clip(a / 6 + 0.5, 0, 1)),
]


@pytest.mark.parametrize("name,fn,ref", CASES, ids=[c[0] for c in CASES])
def test_inplace_writes_the_input(name, fn, ref):
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32) * 4
    x = Tensor(a.copy())
    pending = x * 1.0                      # read before the write: keeps the old values
    out = fn(x, inplace=True)
    assert out is x
    np.testing.assert_allclose(x.numpy(), ref(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pending.numpy(), a)
    np.testing.assert_allclose(fn(Tensor(a), inplace=False).numpy(), ref(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn,ref,dref", [
    (F.relu, lambda a: np.maximum(a, 0), lambda a: (a > 0) * 1.0),
    (F.leaky_relu, lambda a: np.where(a > 0, a, 0.01 * a), lambda a: np.where(a > 0, 1.0, 0.01)),
    (F.hardtanh, lambda a: np.clip(a, -1, 1), lambda a: ((a > -1) & (a < 1)) * 1.0),
])
def test_inplace_on_a_tensor_with_a_graph_is_recorded_as_in_torch(fn, ref, dref):
    a = np.array([-1.7, -0.3, 0.2, 2.5], np.float32)
    w = Tensor(a, requires_grad=True)
    h = w * 3.0
    kept = h * 1.0                         # read before the write: keeps the old values
    out = fn(h, inplace=True)
    assert out is h                        # torch: the input itself, now holding the result
    np.testing.assert_allclose(h.numpy(), ref(3 * a), rtol=1e-6)
    (out.sum() + kept.sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), 3 * dref(3 * a) + 3, rtol=1e-6)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        fn(Tensor(a, requires_grad=True), inplace=True)


def test_dropout_inplace():
    x = Tensor(np.ones(200, np.float32))
    out = F.dropout(x, 0.5, training=True, inplace=True)
    assert out is x and set(np.unique(x.numpy())) <= {0.0, 2.0}
