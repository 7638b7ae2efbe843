"""The torch.nn layers and functions ported scripts use (activations, reshapes, pooling, Dropout2d, the
losses, tg.nn.init) against numpy implementations of torch's documented formulas."""
import math

import numpy as np
import pytest
from helpers import gradcheck

import tg.nn.functional as F
from tg import Tensor, nn
from tg.nn import init


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(got, want, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=rtol)


def np_reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def np_log_softmax(x, axis):
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


# ------------------------------------------------------------ activations and reshapes

def np_softmax(x, axis):
    return np.exp(np_log_softmax(x, axis))


ACTIVATIONS = [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (nn.ELU(0.7), lambda x: np.where(x > 0, x, 0.7 * (np.exp(x) - 1))),
    (nn.GELU(approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Softplus(beta=2.0), lambda x: np.log1p(np.exp(2 * x)) / 2),
    (nn.Softmax(dim=1), lambda x: np_softmax(x, 1)),
    (nn.Softmax(), lambda x: np_softmax(x, 1)),                 # dim=None on a 2-d input: torch's dim 1
    (nn.LogSoftmax(dim=-1), lambda x: np_log_softmax(x, -1)),
    (nn.Identity(3, key="ignored"), lambda x: x),
]


@pytest.mark.parametrize("layer, reference", ACTIVATIONS, ids=lambda v: type(v).__name__)
def test_activation_layers_match_numpy(layer, reference):
    x = (rand(3, 7) * 3).astype(np.float32)
    close(layer(Tensor(x)), reference(x.astype(np.float64)), atol=2e-5)
    assert list(layer.state_dict()) == []


def test_softmax_dim_none_follows_torch_legacy_rule():
    x = rand(3, 5, 2).astype(np.float32)
    close(nn.Softmax()(Tensor(x)), np_softmax(x, 0))            # 3-d: dim 0
    close(nn.LogSoftmax()(Tensor(x[0, 0])), np_log_softmax(x[0, 0], 0))


def test_flatten_unflatten():
    x = Tensor(rand(2, 3, 5, 7).astype(np.float32))
    assert nn.Flatten()(x).shape == (2, 105)
    assert nn.Flatten(0, 2)(x).shape == (30, 7)
    assert nn.Unflatten(1, (5, 21))(nn.Flatten()(x)).shape == (2, 5, 21)
    close(nn.Unflatten(-1, (3, -1))(nn.Flatten()(x)), x.numpy().reshape(2, 3, 35))


def test_functional_helpers():
    x = rand(3, 5).astype(np.float32)
    close(F.normalize(Tensor(x)), x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12))
    close(F.normalize(Tensor(x), p=1.0, dim=0), x / np.abs(x).sum(0, keepdims=True))
    labels = np.array([[0, 4], [2, 2], [1, 3]])
    assert (F.one_hot(Tensor(labels), 6).numpy() == np.eye(6, dtype=np.int64)[labels]).all()
    assert F.one_hot(Tensor(labels)).shape == (3, 2, 5)
    close(F.pad(Tensor(x), (1, 2, 0, 3), value=-1.0), np.pad(x, ((0, 3), (1, 2)), constant_values=-1.0))
    with pytest.raises(NotImplementedError, match="wrap"):
        F.pad(Tensor(x), (1, 1), mode="wrap")
    w, b = rand(4, 5).astype(np.float32), rand(4).astype(np.float32)
    close(F.linear(Tensor(x), Tensor(w), Tensor(b)), x @ w.T + b)


# ------------------------------------------------------------ pooling

def np_pool(x, k, s, p, ceil_mode, kind, count_include_pad=True, dilation=(1, 1)):
    """Direct loops over output positions, torch's window rules (ceil_mode windows start in the input or
    the left padding; the avg divisor clips windows at the padded edge, or at the input if not counting)."""
    h, w = x.shape[-2:]
    outs = []
    for size, kk, ss, pp, dd in zip((h, w), k, s, p, dilation):
        room = size + 2 * pp - dd * (kk - 1) - 1
        o = (-(-room // ss) if ceil_mode else room // ss) + 1
        if ceil_mode and (o - 1) * ss >= size + pp:
            o -= 1
        outs.append(o)
    out = np.zeros(x.shape[:-2] + tuple(outs))
    for i in range(outs[0]):
        for j in range(outs[1]):
            rows = [i * s[0] - p[0] + dilation[0] * a for a in range(k[0])]
            cols = [j * s[1] - p[1] + dilation[1] * a for a in range(k[1])]
            rin = [r for r in rows if 0 <= r < h]
            cin = [c for c in cols if 0 <= c < w]
            patch = x[..., rin, :][..., cin]
            if kind == "max":
                out[..., i, j] = patch.max((-2, -1))
            else:
                r_end, c_end = min(rows[0] + k[0], h + p[0]), min(cols[0] + k[1], w + p[1])
                div = ((r_end - rows[0]) * (c_end - cols[0]) if count_include_pad else len(rin) * len(cin))
                out[..., i, j] = patch.sum((-2, -1)) / div
    return out


POOLS = [  # kernel, stride, padding, ceil_mode
    ((2, 2), None, (0, 0), False),
    ((3, 3), (2, 2), (1, 1), False),
    ((3, 2), (2, 1), (1, 0), True),
    ((2, 2), (2, 2), (0, 0), True),
    ((3, 3), (2, 2), (1, 1), True),
]


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", POOLS)
def test_max_pool2d_matches_numpy(kernel, stride, padding, ceil_mode):
    x = rand(2, 3, 7, 5).astype(np.float32)
    layer = nn.MaxPool2d(kernel, stride, padding, ceil_mode=ceil_mode)
    close(layer(Tensor(x)), np_pool(x, kernel, stride or kernel, padding, ceil_mode, "max"))
    close(F.max_pool2d(Tensor(x[0]), kernel, stride, padding, ceil_mode=ceil_mode),       # unbatched
          np_pool(x[0], kernel, stride or kernel, padding, ceil_mode, "max"))


def test_max_pool2d_dilation():
    x = rand(1, 2, 7, 7).astype(np.float32)
    close(F.max_pool2d(Tensor(x), 2, 1, 0, dilation=2), np_pool(x, (2, 2), (1, 1), (0, 0), False, "max",
                                                                 dilation=(2, 2)))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", POOLS)
def test_avg_pool2d_matches_numpy(kernel, stride, padding, ceil_mode, count_include_pad):
    x = rand(2, 3, 7, 5).astype(np.float32)
    layer = nn.AvgPool2d(kernel, stride, padding, ceil_mode, count_include_pad)
    want = np_pool(x, kernel, stride or kernel, padding, ceil_mode, "avg", count_include_pad)
    close(layer(Tensor(x)), want)


def test_avg_pool2d_divisor_override_and_errors():
    x = rand(1, 1, 4, 4).astype(np.float32)
    want = np_pool(x, (2, 2), (2, 2), (0, 0), False, "avg") * 4 / 3
    close(F.avg_pool2d(Tensor(x), 2, divisor_override=3), want)
    with pytest.raises(ValueError, match="padding in"):
        F.avg_pool2d(Tensor(x), 2, padding=2)


def test_pool_gradients():
    gradcheck(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), rand(1, 2, 6, 5))
    gradcheck(lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 0), ceil_mode=True), rand(1, 2, 6, 5))


def test_functional_conv2d_same_and_unbatched():
    x, w = rand(3, 6, 5).astype(np.float32), rand(4, 3, 3, 2).astype(np.float32)
    out = F.conv2d(Tensor(x), Tensor(w), padding="same")
    assert out.shape == (4, 6, 5)
    padded = np.pad(x, ((0, 0), (1, 1), (0, 1)))
    want = np.zeros((4, 6, 5))
    for i in range(6):
        for j in range(5):
            want[:, i, j] = (padded[None, :, i:i + 3, j:j + 2] * w).sum((1, 2, 3))
    close(out, want, atol=1e-4)


# ------------------------------------------------------------ Dropout2d

def test_dropout2d_drops_whole_channels():
    layer = nn.Dropout2d(0.4)
    x = Tensor.ones(6, 10, 3, 5)
    assert (layer.eval()(x).numpy() == 1).all()                 # eval: the identity
    y = layer.train()(x).numpy().reshape(60, 15)
    assert ((y == 0) | np.isclose(y, 1 / 0.6)).all()
    assert (y.min(1) == y.max(1)).all()                         # a channel is kept or dropped whole
    assert 0.2 < (y[:, 0] == 0).mean() < 0.6
    assert F.dropout2d(Tensor.ones(4, 3, 3), 1.0).numpy().sum() == 0


# ------------------------------------------------------------ elementwise losses

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_elementwise_losses_match_numpy(reduction):
    x, t = rand(3, 7, seed=1) * 2, rand(3, 7, seed=2)
    d = x - t
    a = np.abs(d)
    cases = [
        (nn.MSELoss(reduction), d ** 2),
        (nn.L1Loss(reduction), a),
        (nn.SmoothL1Loss(reduction, beta=0.5), np.where(a < 0.5, 0.5 * d ** 2 / 0.5, a - 0.25)),
        (nn.HuberLoss(reduction, delta=0.5), np.where(a < 0.5, 0.5 * d ** 2, 0.5 * (a - 0.25))),
    ]
    for layer, loss in cases:
        close(layer(Tensor(x), Tensor(t)), np_reduce(loss, reduction))
    close(F.smooth_l1_loss(Tensor(x), Tensor(t), reduction, beta=0.0), np_reduce(a, reduction))


def test_binary_losses_with_weights():
    x, t = rand(4, 3, seed=3), (rand(4, 3, seed=4) > 0).astype(np.float64)
    w, pw = np.abs(rand(3, seed=5)), np.abs(rand(3, seed=6)) + 0.5
    p = 1 / (1 + np.exp(-x))
    bce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    close(nn.BCELoss(Tensor(w), "sum")(Tensor(p), Tensor(t)), (bce * w).sum())
    with_pos = -(pw * t * np.log(p) + (1 - t) * np.log(1 - p)) * w
    layer = nn.BCEWithLogitsLoss(Tensor(w), pos_weight=Tensor(pw))
    close(layer(Tensor(x), Tensor(t)), with_pos.mean())
    assert list(layer.state_dict()) == ["weight", "pos_weight"]


def test_new_loss_gradients():
    t = rand(2, 5, seed=7)
    gradcheck(lambda x: F.smooth_l1_loss(x, Tensor(t), beta=0.7), rand(2, 5))
    gradcheck(lambda x: F.huber_loss(x, Tensor(t), "sum", delta=0.7), rand(2, 5))
    gradcheck(lambda x: F.l1_loss(x, Tensor(t)), rand(2, 5))


# ------------------------------------------------------------ class losses

def np_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", smoothing=0.0):
    """torch's documented formula for class indices: logits (N, C), target (N,)."""
    logp = np_log_softmax(logits, 1)
    n, c = logits.shape
    w = np.ones(c) if weight is None else weight
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    nll = -logp[np.arange(n), safe] * w[safe] * valid
    smooth = -(logp * w).sum(1) * valid
    loss = (1 - smoothing) * nll + smoothing / c * smooth
    if reduction == "mean":
        return loss.sum() / (w[safe] * valid).sum()
    return np_reduce(loss, reduction)


def np_soft_cross_entropy(logits, probs, weight=None, reduction="mean", smoothing=0.0):
    logp = np_log_softmax(logits, 1)
    c = logits.shape[1]
    w = np.ones(c) if weight is None else weight
    probs = (1 - smoothing) * probs + smoothing / c
    return np_reduce(-(probs * logp * w).sum(1), reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_loss_layer(reduction):
    logits, weight = rand(7, 5) * 2, np.abs(rand(5, seed=1)) + 0.1
    target = np.array([0, 4, 2, -100, 1, 3, 4])
    layer = nn.CrossEntropyLoss(Tensor(weight), ignore_index=-100, reduction=reduction, label_smoothing=0.15)
    close(layer(Tensor(logits), Tensor(target)),
          np_cross_entropy(logits, target, weight, -100, reduction, 0.15))
    assert list(layer.state_dict()) == ["weight"]
    assert list(nn.CrossEntropyLoss().state_dict()) == []
    logp = np_log_softmax(logits, 1)
    close(nn.NLLLoss(Tensor(weight), ignore_index=4, reduction=reduction)(Tensor(logp), Tensor(target % 5)),
          np_cross_entropy(logits, target % 5, weight, 4, reduction))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probability_targets(reduction):
    logits, weight = rand(6, 5) * 2, np.abs(rand(5, seed=1)) + 0.1
    probs = np_softmax(rand(6, 5, seed=2), 1)
    close(F.cross_entropy(Tensor(logits), Tensor(probs), reduction=reduction),
          np_soft_cross_entropy(logits, probs, reduction=reduction))
    layer = nn.CrossEntropyLoss(Tensor(weight), reduction=reduction, label_smoothing=0.2)
    close(layer(Tensor(logits), Tensor(probs)), np_soft_cross_entropy(logits, probs, weight, reduction, 0.2))


def test_cross_entropy_probability_targets_spatial_and_unbatched():
    logits, probs = rand(2, 4, 3), np_softmax(rand(2, 4, 3, seed=1), 1)
    want = -(probs * np_log_softmax(logits, 1)).sum(1).mean()               # mean over N and the spatial dim
    close(F.cross_entropy(Tensor(logits), Tensor(probs)), want)
    close(F.cross_entropy(Tensor(logits[0, :, 0]), Tensor(probs[0, :, 0])),
          -(probs[0, :, 0] * np_log_softmax(logits[0, :, 0], 0)).sum())
    with pytest.raises(TypeError, match="probabilities as a float target of the input's shape"):
        F.cross_entropy(Tensor(logits), Tensor(probs[:, :2]))


def test_cross_entropy_probability_target_gradients():
    probs, weight = np_softmax(rand(3, 4, seed=1), 1), np.abs(rand(4, seed=2))
    gradcheck(lambda x, t: F.cross_entropy(x, t, Tensor(weight), label_smoothing=0.1), rand(3, 4), probs)


# ------------------------------------------------------------ nn.init

def test_init_writes_in_place_and_returns_the_tensor():
    layer = nn.Linear(5, 3)
    weight = layer.weight
    fills = [init.zeros_, init.ones_, lambda t: init.constant_(t, 0.5), init.eye_, init.uniform_,
             init.normal_, init.xavier_uniform_, init.xavier_normal_, init.kaiming_uniform_,
             init.kaiming_normal_, init.trunc_normal_, init.orthogonal_]
    for fill in fills:
        assert fill(layer.weight) is weight
        assert layer.weight is weight and weight.requires_grad
    assert list(layer.state_dict()) == ["weight", "bias"]
    assert init.constant_(layer.bias, 0.5).tolist() == [0.5] * 3
    assert (init.eye_(Tensor.zeros(3, 4)).numpy() == np.eye(3, 4)).all()


def test_calculate_gain_and_fans():
    assert init.calculate_gain("linear") == init.calculate_gain("conv2d") == 1
    assert init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == 5 / 3 and init.calculate_gain("selu") == 0.75
    assert init.calculate_gain("relu") == math.sqrt(2)
    assert init.calculate_gain("leaky_relu") == math.sqrt(2 / (1 + 0.01 ** 2))
    assert init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    with pytest.raises(ValueError, match="got 'swish'"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="at least 2 dims"):
        init.xavier_uniform_(Tensor.zeros(5))


def check_uniform(t, bound):
    v = t.numpy()
    assert np.abs(v).max() <= bound * (1 + 1e-6)
    assert np.abs(v).max() > 0.95 * bound                       # the whole range is used
    np.testing.assert_allclose(v.std(), bound / math.sqrt(3), rtol=0.05)
    assert abs(v.mean()) < 0.05 * bound


def check_normal(t, std, mean=0.0):
    v = t.numpy()
    np.testing.assert_allclose(v.std(), std, rtol=0.05)
    assert abs(v.mean() - mean) < 0.05 * std


def test_init_distributions_follow_torch_formulas():
    conv = Tensor.zeros(64, 33, 3, 3)                           # fan_in 33 * 9, fan_out 64 * 9
    fan_in, fan_out = 33 * 9, 64 * 9
    check_uniform(init.xavier_uniform_(conv, gain=2.0), 2.0 * math.sqrt(6 / (fan_in + fan_out)))
    check_normal(init.xavier_normal_(conv), math.sqrt(2 / (fan_in + fan_out)))
    gain = math.sqrt(2 / (1 + 5))                               # leaky_relu, a = sqrt(5): Linear's default
    check_uniform(init.kaiming_uniform_(conv, a=math.sqrt(5)), gain * math.sqrt(3 / fan_in))
    assert math.isclose(gain * math.sqrt(3 / fan_in), 1 / math.sqrt(fan_in))
    check_normal(init.kaiming_normal_(conv, mode="fan_out", nonlinearity="relu"), math.sqrt(2 / fan_out))
    check_uniform(init.uniform_(conv, -0.3, 0.3), 0.3)
    check_normal(init.normal_(conv, 2.0, 0.5), 0.5, mean=2.0)


def test_trunc_normal_and_orthogonal():
    w = init.trunc_normal_(Tensor.zeros(200, 100), mean=0.5, std=1.0, a=-1.0, b=1.5).numpy()
    assert w.min() >= -1.0 and w.max() <= 1.5
    # the mean of N(0.5, 1) truncated to [-1, 1.5]: mu + (phi(alpha) - phi(beta)) / Z
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)                     # noqa: E731
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))                             # noqa: E731
    alpha, beta = -1.5, 1.0
    assert abs(w.mean() - (0.5 + (phi(alpha) - phi(beta)) / (cdf(beta) - cdf(alpha)))) < 0.02
    wide = init.trunc_normal_(Tensor.zeros(100, 100), std=0.02).numpy()       # a, b = -2, 2: untruncated
    np.testing.assert_allclose(wide.std(), 0.02, rtol=0.05)
    tall = init.orthogonal_(Tensor.zeros(7, 3, 2), gain=2.0).numpy().reshape(7, 6)
    np.testing.assert_allclose(tall.T @ tall, 4 * np.eye(6), atol=1e-5)
    wide_q = init.orthogonal_(Tensor.zeros(3, 8)).numpy()
    np.testing.assert_allclose(wide_q @ wide_q.T, np.eye(3), atol=1e-5)
