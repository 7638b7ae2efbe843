"""tg.nn.layers against numpy reference implementations, their default inits, train/eval behaviour,
input checks, and gradients of every parameter and input against finite differences."""
import math

import numpy as np
import pytest
from helpers import gradcheck

from tg import Tensor, dtypes
from tg.nn import layers as nn


@pytest.fixture
def training(monkeypatch):
    monkeypatch.setattr(Tensor, "training", True)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(got, want, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=rtol)


def set_params(layer, **params):
    for name, value in params.items():
        setattr(layer, name, value)
    return layer


# ------------------------------------------------------------ numpy references

def np_conv2d(x, w, b, stride, padding, dilation, groups):
    """Direct loops over output positions: x (N, C, H, W), w (O, C/groups, kh, kw),
    padding ((top, bottom), (left, right))."""
    x = np.pad(x, ((0, 0), (0, 0), padding[0], padding[1]))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    for oc in range(o):
        g = oc // (o // groups)
        for i in range(oh):
            for j in range(ow):
                rows = i * stride[0] + dilation[0] * np.arange(kh)
                cols = j * stride[1] + dilation[1] * np.arange(kw)
                patch = x[:, g * cg:(g + 1) * cg][:, :, rows][:, :, :, cols]           # (N, C/groups, kh, kw)
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


def np_normalize(x, axes, eps):
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


def np_group_norm(x, groups, w, b, eps=1e-5):
    n, c = x.shape[:2]
    out = np_normalize(x.reshape(n, groups, -1), (2,), eps).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return out * w.reshape(shape) + b.reshape(shape)


# ------------------------------------------------------------ Linear

@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_linear_matches_numpy(batch, device):
    layer = nn.Linear(7, 3, device=device)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    x = rand(batch, 7).astype(np.float32)
    close(layer(Tensor(x, device=device)), x @ w.T + b)
    x3 = rand(batch, 2, 7).astype(np.float32)                                  # leading dims pass through
    close(layer(Tensor(x3, device=device)), x3 @ w.T + b)
    no_bias = nn.Linear(7, 3, bias=False, device=device)
    assert no_bias.bias is None
    close(no_bias(Tensor(x, device=device)), x @ no_bias.weight.numpy().T)


def test_linear_init_and_errors():
    layer = nn.Linear(400, 300)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (300, 400) and b.shape == (300,)
    assert layer.weight.requires_grad and layer.bias.requires_grad
    bound = 1 / math.sqrt(400)                                                 # kaiming_uniform(a=sqrt(5))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound and np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound and abs(w.mean()) < 0.01 * bound
    assert nn.Linear(2, 3, dtype="float64").weight.dtype == dtypes.float64
    with pytest.raises(ValueError, match=r"\[nn\] Linear: expected input of shape \(\.\.\., 7\)"):
        nn.Linear(7, 3)(Tensor.ones(2, 6))
    with pytest.raises(ValueError, match="in_features"):
        nn.Linear(0, 3)


def test_linear_gradients():
    layer = nn.Linear(3, 2)
    gradcheck(lambda x, w, b: set_params(layer, weight=w, bias=b)(x),
              rand(2, 3), rand(2, 3, seed=1), rand(2, seed=2))


# ------------------------------------------------------------ Conv2d

CONV_CASES = [  # (in, out, kernel, stride, padding, dilation, groups)
    (3, 4, 3, 1, 0, 1, 1), (3, 5, (3, 2), 2, 1, (2, 1), 1), (3, 6, 2, 1, (0, 1), 1, 3),
    (2, 4, 4, 1, "same", 1, 2), (3, 2, 3, (1, 2), "valid", 1, 1),
]


def conv_pads(padding, kernel, dilation):
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in padding)


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("batch", [1, 5])
def test_conv2d_matches_numpy(case, batch):
    cin, cout, kernel, stride, padding, dilation, groups = case
    layer = nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups)
    x = rand(batch, cin, 7, 5).astype(np.float32)
    pads = conv_pads(layer.padding, layer.kernel_size, layer.dilation)
    want = np_conv2d(x, layer.weight.numpy(), layer.bias.numpy(), layer.stride, pads, layer.dilation, groups)
    close(layer(Tensor(x)), want, atol=1e-5)


def test_conv2d_unbatched_no_bias_and_numpy_device():
    layer = nn.Conv2d(3, 2, 3, padding=1, bias=False, device="NUMPY")
    x = rand(3, 7, 5).astype(np.float32)
    want = np_conv2d(x[None], layer.weight.numpy(), None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)[0]
    close(layer(Tensor(x, device="NUMPY")), want)


def test_conv2d_init_and_errors():
    layer = nn.Conv2d(8, 6, (3, 5), groups=2)
    assert layer.weight.shape == (6, 4, 3, 5) and layer.bias.shape == (6,)
    bound = 1 / math.sqrt(4 * 3 * 5)                                           # fan_in = in/groups * kh * kw
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.abs(layer.bias.numpy()).max() <= bound
    with pytest.raises(ValueError, match=r"\[nn\] Conv2d: expected input of shape \(N, 3, H, W\)"):
        nn.Conv2d(3, 2, 3)(Tensor.ones(1, 4, 7, 7))
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="stride 1"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding 'valid', 'same'"):
        nn.Conv2d(3, 4, 3, padding="full")
    with pytest.raises(ValueError, match="input H of at least 5"):
        nn.Conv2d(1, 1, 3, dilation=2)(Tensor.ones(1, 1, 4, 9))


def test_conv2d_gradients():
    layer = nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2)
    gradcheck(lambda x, w, b: set_params(layer, weight=w, bias=b)(x),
              rand(1, 2, 4, 5), rand(4, 1, 3, 3, seed=1), rand(4, seed=2))
    same = nn.Conv2d(1, 2, (2, 3), padding="same", dilation=(2, 1), bias=False)
    gradcheck(lambda x, w: set_params(same, weight=w)(x), rand(2, 1, 4, 3), rand(2, 1, 2, 3, seed=1))


# ------------------------------------------------------------ BatchNorm

@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_batchnorm2d_running_stats_match_numpy(batch, device, training):
    bn = nn.BatchNorm2d(3, momentum=0.2, device=device)
    bn.weight, bn.bias = Tensor(rand(3, seed=7) + 1, device=device), Tensor(rand(3, seed=8), device=device)
    gamma, beta = bn.weight.numpy().reshape(1, 3, 1, 1), bn.bias.numpy().reshape(1, 3, 1, 1)
    mean, var = np.zeros(3), np.ones(3)
    for step in range(3):
        x = (rand(batch, 3, 7, 3, seed=step) * (step + 1) + step).astype(np.float32)
        close(bn(Tensor(x, device=device)), np_normalize(x, (0, 2, 3), 1e-5) * gamma + beta, atol=1e-4)
        mean = 0.8 * mean + 0.2 * x.mean((0, 2, 3))
        var = 0.8 * var + 0.2 * x.var((0, 2, 3), ddof=1)                       # unbiased, as torch
    close(bn.running_mean, mean, atol=1e-5)
    close(bn.running_var, var, atol=1e-4)
    assert bn.num_batches_tracked.item() == 3 and bn.num_batches_tracked.dtype == dtypes.int64
    Tensor.training = False                                                    # eval: the running statistics
    x = rand(2, 3, 4, 4, seed=9).astype(np.float32)
    want = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    close(bn(Tensor(x, device=device)), want * gamma + beta, atol=1e-4)
    close(bn.running_mean, mean, atol=1e-5)                                    # unchanged in eval
    assert bn.num_batches_tracked.item() == 3


def test_batchnorm_cumulative_average_and_untracked(training):
    bn = nn.BatchNorm1d(4, momentum=None)                           # running stat = mean of the batch stats
    xs = [rand(5, 4, seed=s).astype(np.float32) + s for s in range(3)]
    for x in xs:
        bn(Tensor(x))
    close(bn.running_mean, np.mean([x.mean(0) for x in xs], axis=0))
    close(bn.running_var, np.mean([x.var(0, ddof=1) for x in xs], axis=0), atol=1e-5)
    untracked = nn.BatchNorm1d(4, affine=False, track_running_stats=False)
    assert untracked.running_mean is None and untracked.weight is None
    x = rand(5, 4, 3).astype(np.float32)
    close(untracked(Tensor(x)), np_normalize(x, (0, 2), 1e-5), atol=1e-5)
    Tensor.training = False                                                    # batch statistics in eval too
    close(untracked(Tensor(x)), np_normalize(x, (0, 2), 1e-5), atol=1e-5)


def test_batchnorm_init_and_errors(training):
    bn = nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0, 1.0, 1.0] and bn.bias.tolist() == [0.0, 0.0, 0.0]
    assert bn.running_mean.tolist() == [0.0] * 3 and bn.running_var.tolist() == [1.0] * 3
    assert bn.weight.requires_grad and not bn.running_mean.requires_grad
    with pytest.raises(ValueError, match=r"\[nn\] BatchNorm2d: expected input .* \(N, C, H, W\) with C=3 "):
        bn(Tensor.ones(2, 4, 3, 3))
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected input of shape"):
        bn(Tensor.ones(2, 3, 3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        bn(Tensor.ones(1, 3, 1, 1))
    with pytest.raises(ValueError, match="momentum"):
        nn.BatchNorm2d(3, momentum=1.5)


def test_batchnorm_gradients(training):
    bn = nn.BatchNorm2d(2, dtype="float64")
    x, w, b = rand(3, 2, 2, 1), rand(2, seed=1), rand(2, seed=2)
    gradcheck(lambda x, w, b: set_params(bn, weight=w, bias=b)(x), x, w, b)    # batch statistics
    Tensor.training = False
    bn.running_mean, bn.running_var = Tensor(rand(2, seed=3)), Tensor(np.array([0.5, 2.0]))
    gradcheck(lambda x, w, b: set_params(bn, weight=w, bias=b)(x), x, w, b)    # running statistics


# ------------------------------------------------------------ LayerNorm, RMSNorm, GroupNorm

@pytest.mark.parametrize("shape", [7, (3, 7)], ids=str)
@pytest.mark.parametrize("batch", [1, 5])
def test_layernorm_matches_numpy(shape, batch):
    layer = nn.LayerNorm(shape)
    normalized = (shape,) if isinstance(shape, int) else shape
    layer.weight, layer.bias = Tensor(rand(*normalized, seed=1) + 1), Tensor(rand(*normalized, seed=2))
    x = rand(batch, 3, 7) * 3 + 1
    axes = tuple(range(3 - len(normalized), 3))
    close(layer(Tensor(x)), np_normalize(x, axes, 1e-5) * layer.weight.numpy() + layer.bias.numpy())
    plain = nn.LayerNorm(shape, elementwise_affine=False)
    assert plain.weight is None and plain.bias is None and nn.LayerNorm(7, bias=False).bias is None
    close(plain(Tensor(x)), np_normalize(x, axes, 1e-5))


def test_layernorm_numpy_device_and_errors():
    x = rand(5, 7).astype(np.float32)
    close(nn.LayerNorm(7, device="NUMPY")(Tensor(x, device="NUMPY")), np_normalize(x, (1,), 1e-5), atol=1e-5)
    with pytest.raises(ValueError, match=r"\[nn\] layer_norm: expected input whose last dims are \(3, 7\)"):
        nn.LayerNorm((3, 7))(Tensor.ones(2, 7, 3))
    with pytest.raises(TypeError, match="floating-point"):
        nn.LayerNorm(3)(Tensor([[1, 2, 3]]))


@pytest.mark.parametrize("batch", [1, 5])
def test_rmsnorm_matches_numpy(batch):
    layer = nn.RMSNorm(7)
    layer.weight = Tensor(rand(7, seed=1))
    x = rand(batch, 3, 7).astype(np.float32)
    eps = np.finfo(np.float32).eps                                             # eps=None: finfo(dtype).eps
    close(layer(Tensor(x)), x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * layer.weight.numpy())
    x64 = np.zeros((2, 7))                                     # eps follows the input dtype (float64)
    x64[0, 0] = 1e-9
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.finfo(np.float64).eps)
    close(nn.RMSNorm(7, elementwise_affine=False)(Tensor(x64)), want)
    close(nn.RMSNorm((3, 7), eps=0.1)(Tensor(x)), x / np.sqrt((x * x).mean((-2, -1), keepdims=True) + 0.1))
    with pytest.raises(ValueError, match=r"\[nn\] rms_norm: expected input whose last dims are \(7,\)"):
        layer(Tensor.ones(2, 6))


@pytest.mark.parametrize("batch", [1, 5])
def test_groupnorm_matches_numpy(batch):
    layer = nn.GroupNorm(3, 6)
    layer.weight, layer.bias = Tensor(rand(6, seed=1)), Tensor(rand(6, seed=2))
    for shape in [(batch, 6), (batch, 6, 7), (batch, 6, 3, 5)]:
        x = rand(*shape) * 2 + 1
        close(layer(Tensor(x)), np_group_norm(x, 3, layer.weight.numpy(), layer.bias.numpy()))
    with pytest.raises(ValueError, match=r"\[nn\] GroupNorm: expected input of shape \(N, 6, \*\)"):
        layer(Tensor.ones(2, 5, 3))
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)


def test_norm_gradients():
    ln = nn.LayerNorm((2, 3))
    gradcheck(lambda x, w, b: set_params(ln, weight=w, bias=b)(x),
              rand(2, 2, 3), rand(2, 3, seed=1), rand(2, 3, seed=2))
    rms = nn.RMSNorm(3, eps=1e-6)
    gradcheck(lambda x, w: set_params(rms, weight=w)(x), rand(2, 3), rand(3, seed=1))
    gn = nn.GroupNorm(2, 4)
    gradcheck(lambda x, w, b: set_params(gn, weight=w, bias=b)(x),
              rand(2, 4, 2), rand(4, seed=1), rand(4, seed=2))


# ------------------------------------------------------------ Embedding

@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_embedding_matches_numpy(device):
    layer = nn.Embedding(7, 3, device=device)
    table = layer.weight.numpy()
    for idx in [np.array([[0, 6, 2], [2, 2, 5]]), np.array([3]), np.arange(7)[::-1].copy(), np.array(4)]:
        got = layer(Tensor(idx, device=device))
        assert got.shape == idx.shape + (3,)
        close(got, table[idx])


def test_embedding_init_and_errors():
    weight = nn.Embedding(1000, 64).weight
    assert weight.requires_grad and weight.shape == (1000, 64)
    values = weight.numpy()
    assert abs(values.std() - 1) < 0.02 and abs(values.mean()) < 0.02                 # N(0, 1), as torch
    with pytest.raises(TypeError, match=r"\[nn\] embedding: expected an integer index Tensor, got float32"):
        nn.Embedding(5, 2)(Tensor([1.0]))
    with pytest.raises(IndexError, match=r"expected indices in \[0, 5\), got 5"):
        nn.Embedding(5, 2)(Tensor([0, 5]))


def test_embedding_gradient():
    idx = Tensor([[1, 3], [3, 0]])                                            # a repeated row sums its grads
    layer = nn.Embedding(4, 2)
    gradcheck(lambda w: set_params(layer, weight=w)(idx), rand(4, 2))


# ------------------------------------------------------------ Dropout, Sequential

def test_dropout_train_eval_and_scaling(monkeypatch):
    layer = nn.Dropout(0.25)
    x = Tensor(np.ones((200, 50), np.float32))
    assert layer.eval()(x) is x                                                # eval: the identity
    out = layer.train()(x).numpy()
    assert abs((out == 0).mean() - 0.25) < 0.02
    np.testing.assert_allclose(out[out != 0], 1 / 0.75, rtol=1e-6)
    assert abs(out.mean() - 1) < 0.03                                          # unbiased in expectation
    assert np.all(nn.Dropout(1.0)(x).numpy() == 0) and nn.Dropout(0.0)(x) is x
    with pytest.raises(ValueError, match=r"\[nn\] Dropout: expected a probability p in \[0, 1\]"):
        nn.Dropout(1.5)


def test_dropout_gradient(training):
    layer = nn.Dropout(0.5)

    def fn(x):
        Tensor.manual_seed(5)                                                 # the same mask every evaluation
        return layer(x)
    gradcheck(fn, rand(3, 4))


def test_sequential():
    model = nn.Sequential(nn.Linear(7, 5), Tensor.relu, nn.Linear(5, 3))
    assert len(model) == 3 and model[0] is model.layers[0] and list(model) == model.layers
    x = rand(5, 7).astype(np.float32)
    hidden = np.maximum(x @ model[0].weight.numpy().T + model[0].bias.numpy(), 0)
    close(model(Tensor(x)), hidden @ model[2].weight.numpy().T + model[2].bias.numpy())
    with pytest.raises(TypeError, match=r"\[nn\] Sequential: expected callable layers, got a int at"):
        nn.Sequential(Tensor.relu, 3)


def test_a_small_model_trains(training):
    """Every layer in one graph: a gradient step lowers the loss (the parameters all receive gradients)."""
    from tg.nn.functional import cross_entropy
    conv, bn, gn = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.GroupNorm(2, 4)
    emb, ln, head = nn.Embedding(3, 4), nn.LayerNorm(4), nn.Linear(4, 3)
    params = [conv.weight, conv.bias, bn.weight, bn.bias, gn.weight, gn.bias, emb.weight, ln.weight, ln.bias,
              head.weight, head.bias]
    x, y = Tensor(rand(6, 1, 3, 3).astype(np.float32)), Tensor([0, 1, 2, 0, 1, 2])

    def loss():
        h = gn(bn(conv(x)).relu()).mean((2, 3)) + emb(y)                       # (6, 4)
        return cross_entropy(head(ln(h)), y)
    before = loss()
    before.backward()
    for p in params:
        assert p.grad is not None and np.isfinite(p.grad.numpy()).all()
        p.assign(p.detach() - 0.5 * p.grad)
    assert loss().item() < before.item()
