"""The fused Functions (tg/core/fused.py) against float64 numpy references of the values and of the
derivatives written out by hand, on odd shapes, every input's gradient and the special values."""
import math

import numpy as np
import pytest

import tg.nn.functional as F
from tg import Tensor
from tg.core import fused

RNG = np.random.default_rng(7)


def run(fn, *arrays: np.ndarray, grad_of_out: np.ndarray | None = None):
    """fn's value, the Function that made it, and the gradients of sum(fn * g) for every array (None
    where absent)."""
    ts = [Tensor(a.astype(np.float32), requires_grad=True) if a is not None else None for a in arrays]
    out = fn(*ts)
    made_by = type(out._ctx)
    g = RNG.standard_normal(out.shape) if grad_of_out is None else grad_of_out
    (out * Tensor(g.astype(np.float32))).sum().backward()
    return out.detach(), made_by, g, [t.grad.numpy() if t is not None else None for t in ts]


def close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max(initial=0))))


@pytest.mark.parametrize("lead", [(), (5,), (3, 7), (70,), (2, 40)])   # 64+ rows: weight copied transposed
@pytest.mark.parametrize("bias", [True, False])
def test_linear(lead, bias):
    x, w = RNG.standard_normal((*lead, 13)), RNG.standard_normal((6, 13))
    b = RNG.standard_normal(6) if bias else None
    out, made_by, g, (gx, gw, gb) = run(lambda x, w, b: x.linear(w, b), x, w, b)
    assert made_by is fused.Linear
    want = x @ w.T + (b if bias else 0)
    close(out.numpy(), want)
    g2, x2 = g.reshape(-1, 6), x.reshape(-1, 13)
    close(gx, (g2 @ w).reshape(x.shape))
    close(gw, g2.T @ x2)
    if bias:
        close(gb, g2.sum(0))


@pytest.mark.parametrize("shapes", [((3, 5, 7), (3, 7, 4)), ((2, 1, 5, 7), (3, 7, 1)), ((9, 11), (11, 2))])
def test_matmul(shapes):
    a, b = RNG.standard_normal(shapes[0]), RNG.standard_normal(shapes[1])
    out, made_by, g, (ga, gb) = run(lambda a, b: a @ b, a, b)
    close(out.numpy(), a @ b)
    ga_want = g @ np.swapaxes(b, -1, -2)
    gb_want = np.swapaxes(a, -1, -2) @ g
    # broadcast batch dims sum back to each operand's shape
    while ga_want.ndim > a.ndim:
        ga_want = ga_want.sum(0)
    while gb_want.ndim > b.ndim:
        gb_want = gb_want.sum(0)
    close(ga, ga_want.sum(axis=tuple(i for i, s in enumerate(a.shape) if s == 1), keepdims=True)
          if ga_want.shape != a.shape else ga_want)
    close(gb, gb_want.sum(axis=tuple(i for i, s in enumerate(b.shape) if s == 1), keepdims=True)
          if gb_want.shape != b.shape else gb_want)


def test_gelu_values_gradients_and_tails():
    x = np.concatenate([RNG.standard_normal(301) * 3, [0.0, -0.0, -5.0, -8.0, -12.0, 6.0, 30.0]])
    out, made_by, g, (gx,) = run(lambda t: t.gelu(), x)
    assert made_by is fused.Gelu
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    # within the erf formula's bound (|error| < 1.5e-7, so Phi within 7.5e-8), float32 rounding aside
    bound = 7.5e-8 * np.abs(x) + 2e-6 * np.abs(x * cdf)
    assert np.all(np.abs(out.numpy() - x * cdf) <= bound)
    assert out.numpy()[-3] < 0                           # gelu(-12) = -2e-32: no 1 - erf cancellation to 0
    np.testing.assert_allclose(gx, g * (cdf + x * pdf), rtol=2e-6, atol=1e-6)
    special = Tensor(np.array([np.nan, np.inf, -np.inf], np.float32)).gelu().numpy()
    assert np.isnan(special[0]) and special[1] == np.inf and np.isnan(special[2])   # -inf * 0, as torch


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_log_softmax(axis):
    x = RNG.standard_normal((4, 9, 5)) * 4
    x[1, 2, :] = 80.0                                     # a large row stays finite (shifted by its max)
    e = np.exp(x - x.max(axis, keepdims=True))
    y = e / e.sum(axis, keepdims=True)
    out, made_by, g, (gx,) = run(lambda t: t.softmax(axis), x)
    assert made_by is fused.Softmax
    close(out.numpy(), y)
    close(gx, y * (g - (g * y).sum(axis, keepdims=True)))
    out, made_by, g, (gx,) = run(lambda t: t.log_softmax(axis), x)
    assert made_by is fused.LogSoftmax
    close(out.numpy(), np.log(y), 1e-5)
    close(gx, g - y * g.sum(axis, keepdims=True))


def test_softmax_of_minus_inf_rows_and_ints():
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, 2.0, -np.inf]], np.float32)
    np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), [[1 / (1 + math.e), 0, math.e / (1 + math.e)],
                                                               [0, 1, 0]], rtol=1e-6)
    ints = Tensor(np.array([1, 2, 3], np.int32)).softmax(0)
    assert ints.dtype.name == "float32" and abs(float(ints.sum().item()) - 1) < 1e-6


@pytest.mark.parametrize("normalized, weight, bias", [((7,), True, True), ((7,), False, False),
                                                       ((5, 7), True, False), ((7,), False, True)])
def test_layer_norm(normalized, weight, bias):
    x = RNG.standard_normal((3, 5, 7)) * 2 + 1
    w = RNG.standard_normal(normalized) if weight else None
    b = RNG.standard_normal(normalized) if bias else None
    out, made_by, g, grads = run(lambda x, w, b: F.layer_norm(x, normalized, w, b, eps=1e-5), x, w, b)
    assert made_by is fused.LayerNorm
    axes = tuple(range(3 - len(normalized), 3))
    n = math.prod(normalized)
    mean = x.mean(axes, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axes, keepdims=True) + 1e-5)
    xhat = (x - mean) * rstd
    close(out.numpy(), xhat * (w if weight else 1) + (b if bias else 0))
    h = g * (w if weight else 1)
    gx = rstd * (h - h.sum(axes, keepdims=True) / n - xhat * (h * xhat).sum(axes, keepdims=True) / n)
    close(grads[0], gx, 1e-4)
    lead = tuple(range(3 - len(normalized)))
    if weight:
        close(grads[1], (g * xhat).sum(lead))
    if bias:
        close(grads[2], g.sum(lead))


def test_only_the_needed_gradients_are_built():
    x = Tensor(RNG.standard_normal((4, 3)).astype(np.float32))          # no grad
    w = Tensor(RNG.standard_normal((2, 3)).astype(np.float32), requires_grad=True)
    y = x.linear(w)
    assert y._ctx.needs_input_grad == [None, True]
    y.sum().backward()
    assert x.grad is None
    close(w.grad.numpy(), np.ones((4, 2)).T @ x.numpy())


@pytest.mark.parametrize("idx_shape", [(7,), (3, 5), ()])
def test_embedding_rows_and_gradient(idx_shape):
    w = RNG.standard_normal((11, 6))
    idx = RNG.integers(0, 11, idx_shape)
    if idx.size:
        idx.flat[0] = idx.flat[-1]                           # a repeated row sums its gradients
    out, made_by, g, (gw,) = run(lambda w: F.embedding(Tensor(idx.astype(np.int32)), w), w)
    assert made_by is fused.Embedding
    close(out.numpy(), w[idx])
    want = np.zeros_like(w)
    np.add.at(want, idx.reshape(-1), g.reshape(-1, 6))
    close(gw, want)
    assert F.embedding(Tensor(idx), Tensor(w.astype(np.float32))).shape == (*idx_shape, 6)   # int64 indices


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(9, 6), (3, 6, 4)])
def test_cross_entropy_pick_with_ignored_targets(reduction, shape):
    logits = RNG.standard_normal(shape) * 3
    target = RNG.integers(0, 6, (shape[0], *shape[2:]))
    target.flat[::4] = -1                                    # ignored: no loss, not in the mean
    t = Tensor(target.astype(np.int32))
    out, made_by, g, (gl,) = run(lambda x: F.cross_entropy(x, t, ignore_index=-1, reduction=reduction),
                                 logits)
    assert made_by is fused.ClassNll
    logp = logits - logits.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    valid = target != -1
    picked = np.take_along_axis(logp, np.where(valid, target, 0)[:, None], 1)[:, 0]
    per = np.where(valid, -picked, 0.0)
    want = {"mean": per.sum() / valid.sum(), "sum": per.sum(), "none": per}[reduction]
    close(out.numpy(), want)
    scale = np.broadcast_to(g, per.shape) / (valid.sum() if reduction == "mean" else 1)
    onehot = np.moveaxis(np.eye(6)[np.where(valid, target, 0)], -1, 1) * np.expand_dims(valid, 1)
    probs = np.exp(logp)
    dpick = -onehot * np.expand_dims(scale, 1)                 # d loss / d logp
    close(gl, dpick - probs * dpick.sum(1, keepdims=True))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shapes", [((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)), ((6, 8), (6, 8), (6, 3)),
                                    ((2, 70, 8), (2, 66, 8), (2, 66, 5))])   # 64+ rows: k, v packed
def test_attention_against_the_softmax_formula(shapes, causal):
    q, k, v = (RNG.standard_normal(s) for s in shapes)
    attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    out, made_by, g, (gq, gk, gv) = run(attend, q, k, v)
    assert made_by is fused.Attention
    scale = 1 / math.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:                                               # key j <= query i, torch's top-left rule
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    close(out.numpy(), p @ v)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    close(gv, np.swapaxes(p, -1, -2) @ g)
    close(gq, ds @ k)
    close(gk, np.swapaxes(ds, -1, -2) @ q)


def test_layer_norm_in_half_precision_scales_before_storing_sums():
    """A float16 row whose sum passes 65504 still normalizes (the mean is scaled in the reduce)."""
    x = (RNG.standard_normal((2, 4096)) + 100).astype(np.float16)
    tx = Tensor(x).detach()
    tx.requires_grad = True
    y = F.layer_norm(tx, 4096)
    y.sum().backward()
    xf = x.astype(np.float64)
    want = (xf - xf.mean(1, keepdims=True)) / np.sqrt(xf.var(1, keepdims=True) + 1e-5)
    assert np.isfinite(y.numpy()).all() and np.isfinite(tx.grad.numpy()).all()
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, atol=0.05)


def test_a_class_index_out_of_range_picks_nothing():
    """A lazy target torch would refuse (out of 0..C-1, not ignore_index) adds no loss; it never wraps."""
    logp = Tensor(np.log(np.array([[0.7, 0.3], [0.4, 0.6]], np.float32)))
    target = Tensor(np.array([0, 0], np.int32)) - 1                    # -1: lazy, so not checked
    assert F.nll_loss(logp, target, reduction="none").tolist() == [0.0, 0.0]
