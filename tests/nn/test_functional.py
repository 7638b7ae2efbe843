"""tg.nn.functional against numpy formulas written out here, and its gradients against finite differences."""
import math

import numpy as np
import pytest
from helpers import gradcheck

import tg.nn.functional as F
from tg import Tensor


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def np_log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def np_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", smoothing=0.0):
    """torch's formula, one sample at a time: logits (N, C, *), target (N, *)."""
    classes = logits.shape[1]
    logp = np.moveaxis(np_log_softmax(logits.astype(np.float64), 1), 1, -1).reshape(-1, classes)
    flat = target.reshape(-1)
    w = np.ones(classes) if weight is None else weight.astype(np.float64)
    losses, denominator = [], 0.0
    for lp, t in zip(logp, flat):
        if t == ignore_index:
            losses.append(0.0)
            continue
        nll = -w[t] * lp[t]
        smooth = -(w * lp).sum()
        losses.append((1 - smoothing) * nll + smoothing / classes * smooth)
        denominator += w[t]
    losses = np.array(losses)
    if reduction == "none":
        return losses.reshape(target.shape)
    return losses.sum() / denominator if reduction == "mean" else losses.sum()


def np_softplus(x):
    return np.logaddexp(0.0, x)


def np_bce_with_logits(x, t, weight=None, pos_weight=None):
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * t * -np_softplus(-x) + (1 - t) * -np_softplus(x))     # -[pw t log s(x) + (1-t) log(1-s(x))]
    return loss * (1.0 if weight is None else weight)


def np_sdpa(q, k, v, mask=None, causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def close(got, want, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=rtol)


# ------------------------------------------------------------ cross_entropy / nll_loss

CE_CASES = [  # (logits shape, target shape)
    ((5, 7), (5,)), ((1, 3), (1,)), ((5, 3, 4), (5, 4)), ((2, 3, 2, 3), (2, 2, 3)),
]


@pytest.mark.parametrize("shapes", CE_CASES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_numpy(shapes, reduction):
    logits = rand(*shapes[0]).astype(np.float32)
    classes = shapes[0][1]
    target = np.random.default_rng(1).integers(0, classes, shapes[1])
    target.reshape(-1)[1::3] = -100                                           # some ignored samples
    weight = np.random.default_rng(2).uniform(0.5, 2.0, classes).astype(np.float32)
    for w, smoothing in [(None, 0.0), (weight, 0.0), (None, 0.2), (weight, 0.1)]:
        got = F.cross_entropy(Tensor(logits), Tensor(target), None if w is None else Tensor(w),
                              reduction=reduction, label_smoothing=smoothing)
        close(got, np_cross_entropy(logits, target, w, reduction=reduction, smoothing=smoothing))


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_cross_entropy_ignore_index_in_range_and_nll(device):
    logits, target = rand(5, 3).astype(np.float32), np.array([0, 2, 0, 1, 0])
    got = F.cross_entropy(Tensor(logits, device=device), Tensor(target, device=device), ignore_index=0)
    close(got, np_cross_entropy(logits, target, ignore_index=0))               # mean over the 2 kept
    logp = np_log_softmax(logits, 1)
    got = F.nll_loss(Tensor(logp, device=device), Tensor(target, device=device), reduction="none")
    close(got, -logp[np.arange(5), target])


def test_cross_entropy_unbatched_and_all_ignored():
    logits = rand(7).astype(np.float32)
    got = F.cross_entropy(Tensor(logits), Tensor(3), reduction="none")
    assert got.shape == ()
    close(got, -np_log_softmax(logits, 0)[3])
    all_ignored = F.cross_entropy(Tensor(rand(3, 4).astype(np.float32)), Tensor([-100, -100, -100]))
    assert math.isnan(all_ignored.item())                                     # 0 / 0, as torch


def test_cross_entropy_label_smoothing_one_is_uniform_target():
    logits = rand(4, 5).astype(np.float32)
    got = F.cross_entropy(Tensor(logits), Tensor([0, 1, 2, 3]), label_smoothing=1.0)
    close(got, -np_log_softmax(logits, 1).mean(1).mean())


def test_cross_entropy_is_stable_for_large_logits():
    got = F.cross_entropy(Tensor([[1000.0, -1000.0], [-1000.0, 1000.0]]), Tensor([0, 0]), reduction="none")
    close(got, [0.0, 2000.0])


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.cross_entropy(Tensor(np.zeros((2, 3))), Tensor([0.0, 1.0])), TypeError, "integer"),
    (lambda: F.cross_entropy(Tensor(np.zeros((2, 3))), Tensor([0, 1, 1])), ValueError, "target"),
    (lambda: F.cross_entropy(Tensor(np.zeros((2, 3))), Tensor([0, 1]), reduction="avg"), ValueError,
     "reduction 'mean', 'sum' or 'none', got 'avg'"),
    (lambda: F.cross_entropy(Tensor(np.zeros((2, 3))), Tensor([0, 3])), IndexError, r"\[0, 3\)"),
    (lambda: F.cross_entropy(Tensor(np.zeros((2, 3))), Tensor([0, 1]), weight=Tensor([1.0, 2.0])), ValueError,
     "weight"),
    (lambda: F.cross_entropy(Tensor(np.zeros((2, 3))), Tensor([0, 1]), label_smoothing=1.5), ValueError,
     "smoothing"),
    (lambda: F.cross_entropy(Tensor([[0, 1]]), Tensor([0])), TypeError, "floating-point"),
    (lambda: F.nll_loss(Tensor(np.zeros(3)), Tensor([1])), ValueError, "0-d"),
])
def test_cross_entropy_errors(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert str(info.value).startswith("[nn]")


def test_cross_entropy_gradients():
    target = Tensor([1, -100, 4])
    weight = np.array([0.5, 1.0, 2.0, 1.5, 0.7])
    gradcheck(lambda x, w: F.cross_entropy(x, target, w, label_smoothing=0.1), rand(3, 5), weight)
    target_nd = Tensor([[0, 2], [1, 1]])                                      # (N, d1) with (N, C, d1) logits
    gradcheck(lambda x: F.cross_entropy(x, target_nd, reduction="sum"), rand(2, 3, 2))
    gradcheck(lambda x: F.nll_loss(x, Tensor([2, 0]), reduction="none"), rand(2, 3))


# ------------------------------------------------------------ binary cross entropy, mse

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits_matches_numpy(reduction):
    x, t = rand(5, 3) * 3, np.random.default_rng(1).uniform(0, 1, (5, 3))
    w, pw = np.random.default_rng(2).uniform(0.5, 2, (5, 3)), np.array([0.5, 1.0, 3.0])
    for weight, pos_weight in [(None, None), (w, None), (None, pw), (w, pw)]:
        as_tensor = [None if a is None else Tensor(a) for a in (weight, pos_weight)]
        got = F.binary_cross_entropy_with_logits(Tensor(x), Tensor(t), *as_tensor, reduction=reduction)
        want = np_bce_with_logits(x, t, weight, pos_weight)
        close(got, {"mean": want.mean(), "sum": want.sum(), "none": want}[reduction])


def test_bce_with_logits_is_stable_and_exact_at_zero():
    x = Tensor([-200.0, -30.0, 0.0, 30.0, 200.0], requires_grad=True)
    t = Tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    loss = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    close(loss, np_bce_with_logits(np.array([-200.0, -30, 0, 30, 200]), t.numpy()), atol=1e-4)
    loss.sum().backward()
    sigmoid = 1 / (1 + np.exp(-np.array([-200.0, -30, 0, 30, 200])))
    close(x.grad, sigmoid - t.numpy(), atol=1e-6)                        # d/dx = sigmoid(x) - t, also at 0


def test_bce_and_mse_match_numpy():
    p, t = np.random.default_rng(0).uniform(0.05, 0.95, (7,)), np.random.default_rng(1).uniform(0, 1, (7,))
    want = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    close(F.binary_cross_entropy(Tensor(p), Tensor(t), reduction="none"), want)
    close(F.binary_cross_entropy(Tensor([0.0, 1.0]), Tensor([1.0, 0.0]), reduction="none"), [100.0, 100.0])
    a, b = rand(3, 7), rand(3, 7, seed=1)
    close(F.mse_loss(Tensor(a), Tensor(b)), ((a - b) ** 2).mean())
    close(F.mse_loss(Tensor(a), Tensor(b), reduction="sum"), ((a - b) ** 2).sum())
    close(F.mse_loss(Tensor(a), Tensor(b), reduction="none"), (a - b) ** 2)


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.mse_loss(Tensor(np.zeros((3, 1))), Tensor(np.zeros(3))), ValueError, "target of the input's"),
    (lambda: F.mse_loss(Tensor(np.zeros(3)), Tensor(np.zeros(3)), reduction="batchmean"), ValueError,
     "reduction"),
    (lambda: F.binary_cross_entropy_with_logits(Tensor(np.zeros((2, 3))), Tensor(np.zeros((2, 3))),
                                                pos_weight=Tensor(np.ones(2))), ValueError, "pos_weight"),
    (lambda: F.binary_cross_entropy_with_logits(Tensor(np.zeros(3)), Tensor(np.zeros(2))), ValueError,
     "shape"),
])
def test_loss_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_loss_gradients():
    x, t = rand(2, 3), np.random.default_rng(1).uniform(0, 1, (2, 3))
    w, pw = np.random.default_rng(2).uniform(0.5, 2, (2, 3)), np.array([0.5, 1.0, 3.0])
    gradcheck(lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, w, pw), x, t, w, pw)
    probabilities = np.random.default_rng(3).uniform(0.1, 0.9, (2, 3))
    gradcheck(lambda p, t, w: F.binary_cross_entropy(p, t, w), probabilities, t, w)
    gradcheck(lambda a, b: F.mse_loss(a, b, reduction="sum"), x, rand(2, 3, seed=4))


# ------------------------------------------------------------ attention

SDPA_CASES = [  # (query shape, key shape, value shape)
    ((3, 4), (3, 4), (3, 5)), ((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 2)), ((1, 3, 2), (1, 7, 2), (1, 7, 3)),
]


@pytest.mark.parametrize("shapes", SDPA_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_numpy(shapes, causal):
    q, k, v = (rand(*s, seed=i) for i, s in enumerate(shapes))
    close(F.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=causal),
          np_sdpa(q, k, v, causal=causal))
    close(F.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=causal, scale=0.3),
          np_sdpa(q, k, v, causal=causal, scale=0.3))


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_sdpa_masks(device):
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 3, seed=2)
    bool_mask = np.random.default_rng(3).uniform(size=(3, 5)) > 0.3
    bool_mask[:, 0] = True                                                    # no fully masked row
    float_mask = rand(2, 3, 5, seed=4)
    tq, tk, tv = (Tensor(a, device=device) for a in (q, k, v))
    for mask in (bool_mask, float_mask):
        close(F.scaled_dot_product_attention(tq, tk, tv, Tensor(mask, device=device)), np_sdpa(q, k, v, mask))


def test_sdpa_dropout():
    q, v = Tensor(rand(4, 3)), Tensor(np.ones((4, 2)))
    assert np.all(F.scaled_dot_product_attention(q, q, v, dropout_p=1.0).numpy() == 0)
    rows = F.scaled_dot_product_attention(q, q, v, dropout_p=0.5).numpy()
    weights = np_sdpa(rand(4, 3), rand(4, 3), np.eye(4))                      # (L, S) attention weights
    keep = np.array([[m >> j & 1 for j in range(4)] for m in range(16)])     # every subset of the 4 keys
    possible = 2 * weights @ keep.T                                           # kept weights, doubled
    assert np.abs(possible - rows[:, :1]).min(axis=1).max() < 1e-9


@pytest.mark.parametrize("call, match", [
    (lambda q: F.scaled_dot_product_attention(q, q, q, Tensor(np.ones((3, 3), bool)), is_causal=True),
     "both"),
    (lambda q: F.scaled_dot_product_attention(q, Tensor(np.zeros((3, 2))), q), "key"),
    (lambda q: F.scaled_dot_product_attention(q, q, Tensor(np.zeros((2, 4)))), "value"),
    (lambda q: F.scaled_dot_product_attention(q, q, q, Tensor(np.ones((2, 3), bool))), "attn_mask"),
    (lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=2.0), r"\[0, 1\]"),
])
def test_sdpa_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call(Tensor(np.zeros((3, 4))))


def test_sdpa_gradients():
    q, k, v = rand(1, 3, 2), rand(1, 4, 2, seed=1), rand(1, 4, 2, seed=2)
    gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    gradcheck(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m), q, k, v, rand(3, 4, seed=3))


# ------------------------------------------------------------ dropout and the thin wrappers

def test_dropout_train_and_eval():
    x = Tensor(np.ones((100, 100), np.float32))
    assert F.dropout(x, 0.3, training=False) is x and F.dropout(x, 0.0) is x
    assert np.all(F.dropout(x, 1.0).numpy() == 0)
    out = F.dropout(x, 0.3).numpy()
    np.testing.assert_allclose(np.unique(out), [0.0, 1 / 0.7], rtol=1e-6)     # kept values scaled by 1/(1-p)
    assert abs((out == 0).mean() - 0.3) < 0.02
    assert not np.array_equal(out, F.dropout(x, 0.3).numpy())                 # a fresh mask each call
    with pytest.raises(ValueError, match=r"\[nn\] dropout: expected a probability"):
        F.dropout(x, -0.1)


def test_dropout_gradient():
    def fn(x):
        Tensor.manual_seed(3)                                                 # the same mask every evaluation
        return F.dropout(x, 0.4)
    gradcheck(fn, rand(3, 5))


def test_activations_match_numpy():
    x = rand(3, 7)
    from math import erf
    close(F.relu(Tensor(x)), np.maximum(x, 0))
    close(F.gelu(Tensor(x)), x * 0.5 * (1 + np.vectorize(erf)(x / math.sqrt(2))), atol=1e-6)
    close(F.silu(Tensor(x)), x / (1 + np.exp(-x)))
    close(F.softmax(Tensor(x), dim=0), np.exp(np_log_softmax(x, 0)))
    close(F.log_softmax(Tensor(x)), np_log_softmax(x, -1))
    close(F.linear(Tensor(x), Tensor(rand(2, 7, seed=1))), x @ rand(2, 7, seed=1).T)


def test_activation_gradients():
    gradcheck(lambda x: F.gelu(x) + F.silu(x) + F.relu(x), rand(2, 3))
    gradcheck(lambda x: F.softmax(x, 0) + F.log_softmax(x, 1), rand(2, 3))
