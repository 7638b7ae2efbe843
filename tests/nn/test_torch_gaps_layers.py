"""The nn classes over the newer functional ops (ReLU6 ... GLU, CosineSimilarity, PairwiseDistance and the
margin, divergence and likelihood losses): each gives its F function's values, and for most a numpy formula
written out here from torch's docs; constructor defaults are torch's; bad reductions are refused."""
import inspect
import math
import warnings

import numpy as np
import pytest

import tg.nn.functional as F
from tg import Tensor, nn


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def signs(*shape, seed=1):
    return np.where(np.random.default_rng(seed).random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


def close(got, want, atol=1e-5):
    np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=1e-5)


def np_reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def np_softplus(x):
    return np.logaddexp(0.0, x)


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ---------------------------------------------------------------- activations

SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805

# (layer, its F call, a numpy reference)
ACTIVATIONS = [
    (nn.ReLU6(), F.relu6, lambda x: np.clip(x, 0, 6)),
    (nn.Hardtanh(-0.5, 2.0), lambda x: F.hardtanh(x, -0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0)),
    (nn.Hardsigmoid(), F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    (nn.Hardswish(), F.hardswish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    (nn.SELU(), F.selu, lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))),
    (nn.CELU(0.5), lambda x: F.celu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x / 0.5))),
    (nn.Mish(), F.mish, lambda x: x * np.tanh(np_softplus(x))),
    (nn.LogSigmoid(), F.logsigmoid, lambda x: -np_softplus(-x)),
    (nn.Softsign(), F.softsign, lambda x: x / (1 + np.abs(x))),
    (nn.Tanhshrink(), F.tanhshrink, lambda x: x - np.tanh(x)),
    (nn.GLU(), F.glu, lambda x: x[..., :2] * np_sigmoid(x[..., 2:])),
    (nn.GLU(dim=0), lambda x: F.glu(x, 0), lambda x: x[:1] * np_sigmoid(x[1:])),
]


@pytest.mark.parametrize("layer, fn, ref", ACTIVATIONS, ids=lambda v: type(v).__name__)
def test_activation_matches_functional_and_numpy(layer, fn, ref):
    x = rand(2, 4) * 4
    close(layer(Tensor(x)), fn(Tensor(x)).numpy())
    close(layer(Tensor(x)), ref(x))


def test_inplace_accepted_and_ignored():
    x = Tensor([-1.0, 7.0])
    for cls in (nn.ReLU6, nn.Hardsigmoid, nn.Hardswish, nn.SELU, nn.Mish):
        cls(inplace=True)(x)
    assert nn.Hardtanh(inplace=True)(x).tolist() == [-1.0, 1.0]
    assert nn.CELU(2.0, True).alpha == 2.0
    assert x.tolist() == [-1.0, 7.0]


def test_activation_errors_come_from_functional():
    with pytest.raises(ValueError, match="min_val <= max_val"):
        nn.Hardtanh(2.0, 1.0)(Tensor([0.0]))
    with pytest.raises(ValueError, match="even size"):
        nn.GLU()(Tensor.ones(2, 3))


# ---------------------------------------------------------------- distances

def test_cosine_similarity():
    x1, x2 = rand(3, 4, seed=2), rand(3, 4, seed=3)
    want = (x1 * x2).sum(1) / (np.linalg.norm(x1, axis=1) * np.linalg.norm(x2, axis=1))
    close(nn.CosineSimilarity()(Tensor(x1), Tensor(x2)), want)
    close(nn.CosineSimilarity(dim=0, eps=1e-3)(Tensor(x1), Tensor(x2)),
          F.cosine_similarity(Tensor(x1), Tensor(x2), 0, 1e-3).numpy())


@pytest.mark.parametrize("p, keepdim", [(2.0, False), (1.0, True), (3.0, False)])
def test_pairwise_distance(p, keepdim):
    x1, x2 = rand(3, 4, seed=2), rand(3, 4, seed=3)
    want = (np.abs(x1 - x2 + 1e-6) ** p).sum(-1, keepdims=keepdim) ** (1 / p)
    got = nn.PairwiseDistance(p, keepdim=keepdim)(Tensor(x1), Tensor(x2))
    close(got, want, atol=1e-4)
    close(got, F.pairwise_distance(Tensor(x1), Tensor(x2), p, 1e-6, keepdim).numpy())


# ---------------------------------------------------------------- losses against F

X, Y, Z = rand(3, 4, seed=4), rand(3, 4, seed=5), rand(3, 4, seed=6)
LOGP = np.log(np.random.default_rng(7).dirichlet(np.ones(4), size=3)).astype(np.float32)
PROBS = np.random.default_rng(8).dirichlet(np.ones(4), size=3).astype(np.float32)
COUNTS = np.random.default_rng(9).poisson(2.0, (3, 4)).astype(np.float32)
VAR = (np.abs(Z) + 0.1).astype(np.float32)
WEIGHT = np.array([0.5, 1.0, 2.0, 1.0], np.float32)      # per class
LABELS = (signs(3, 4) > 0).astype(np.float32)           # multi-label 0/1 targets

# (layer given a reduction, the inputs, the F call given a reduction): every constructor argument not at its
# default, so that a wrongly passed one would show
LOSSES = {
    "KLDivLoss": (lambda r: nn.KLDivLoss(r), (LOGP, PROBS),
                  lambda r, x, t: F.kl_div(x, t, r)),
    "KLDivLoss-log_target": (lambda r: nn.KLDivLoss(r, log_target=True), (LOGP, np.log(PROBS)),
                             lambda r, x, t: F.kl_div(x, t, r, log_target=True)),
    "CosineEmbeddingLoss": (lambda r: nn.CosineEmbeddingLoss(0.2, r), (X, Y, signs(3)),
                            lambda r, a, b, y: F.cosine_embedding_loss(a, b, y, 0.2, r)),
    "MarginRankingLoss": (lambda r: nn.MarginRankingLoss(0.3, r), (X, Y, signs(3, 4)),
                          lambda r, a, b, y: F.margin_ranking_loss(a, b, y, 0.3, r)),
    "TripletMarginLoss": (lambda r: nn.TripletMarginLoss(2.0, 1.0, 1e-3, True, r), (X, Y, Z),
                          lambda r, a, p, n: F.triplet_margin_loss(a, p, n, 2.0, 1.0, 1e-3, True, r)),
    "HingeEmbeddingLoss": (lambda r: nn.HingeEmbeddingLoss(0.5, r), (np.abs(X), signs(3, 4)),
                           lambda r, x, t: F.hinge_embedding_loss(x, t, 0.5, r)),
    "SoftMarginLoss": (lambda r: nn.SoftMarginLoss(r), (X, signs(3, 4)),
                       lambda r, x, t: F.soft_margin_loss(x, t, r)),
    "MultiLabelSoftMarginLoss": (lambda r: nn.MultiLabelSoftMarginLoss(Tensor(WEIGHT), r), (X, LABELS),
                                 lambda r, x, t: F.multilabel_soft_margin_loss(x, t, Tensor(WEIGHT), r)),
    "PoissonNLLLoss": (lambda r: nn.PoissonNLLLoss(True, True, 1e-8, r), (X, COUNTS),
                       lambda r, x, t: F.poisson_nll_loss(x, t, True, True, 1e-8, r)),
    "PoissonNLLLoss-rates": (lambda r: nn.PoissonNLLLoss(False, False, 1e-3, r), (np.abs(X), COUNTS),
                             lambda r, x, t: F.poisson_nll_loss(x, t, False, False, 1e-3, r)),
    "GaussianNLLLoss": (lambda r: nn.GaussianNLLLoss(full=True, eps=0.5, reduction=r), (X, Y, VAR),
                        lambda r, x, t, v: F.gaussian_nll_loss(x, t, v, True, 0.5, r)),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", LOSSES)
def test_loss_matches_functional(name, reduction):
    make, inputs, fn = LOSSES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # kl_div's warning for reduction='mean'
        got = make(reduction)(*map(Tensor, inputs))
        want = fn(reduction, *map(Tensor, inputs))
    assert got.shape == want.shape
    close(got, want.numpy())


# ---------------------------------------------------------------- losses against numpy

def test_kl_div_batchmean_and_mean_warning():
    want = (PROBS * (np.log(PROBS) - LOGP)).sum() / 3
    close(nn.KLDivLoss("batchmean")(Tensor(LOGP), Tensor(PROBS)), want)
    with pytest.warns(UserWarning, match="batchmean"):
        nn.KLDivLoss()(Tensor(LOGP), Tensor(PROBS))


def test_margin_losses_against_numpy():
    y = signs(3, 4)
    close(nn.MarginRankingLoss(0.3, "none")(Tensor(X), Tensor(Y), Tensor(y)),
          np.maximum(0, -y * (X - Y) + 0.3))
    close(nn.HingeEmbeddingLoss(0.5, "sum")(Tensor(np.abs(X)), Tensor(y)),
          np.where(y == 1, np.abs(X), np.maximum(0, 0.5 - np.abs(X))).sum())
    close(nn.SoftMarginLoss()(Tensor(X), Tensor(y)), np.log1p(np.exp(-y * X)).mean())
    d_pos = np.linalg.norm(X - Y + 1e-6, axis=-1)
    d_neg = np.linalg.norm(X - Z + 1e-6, axis=-1)
    close(nn.TripletMarginLoss(reduction="none")(Tensor(X), Tensor(Y), Tensor(Z)),
          np.maximum(0, d_pos - d_neg + 1.0))


def test_likelihood_losses_against_numpy():
    stirling = np.where(COUNTS > 1, COUNTS * np.log(np.maximum(COUNTS, 1)) - COUNTS
                        + 0.5 * np.log(2 * np.pi * np.maximum(COUNTS, 1)), 0.0)
    close(nn.PoissonNLLLoss(full=True, reduction="none")(Tensor(X), Tensor(COUNTS)),
          np.exp(X) - COUNTS * X + stirling, atol=1e-4)
    want = 0.5 * (np.log(VAR) + (X - Y) ** 2 / VAR + math.log(2 * math.pi))
    close(nn.GaussianNLLLoss(full=True)(Tensor(X), Tensor(Y), Tensor(VAR)), want.mean())
    close(nn.GaussianNLLLoss(reduction="sum")(Tensor(X), Tensor(Y), 2.0),
          (0.5 * (math.log(2.0) + (X - Y) ** 2 / 2.0)).sum())


def test_multilabel_soft_margin_loss_weight_is_a_buffer():
    t = LABELS
    per_class = -(t * np.log(np_sigmoid(X)) + (1 - t) * np.log(np_sigmoid(-X))) * WEIGHT
    loss = nn.MultiLabelSoftMarginLoss(weight=Tensor(WEIGHT))
    close(loss(Tensor(X), Tensor(t)), per_class.mean(-1).mean())
    assert list(loss.state_dict()) == ["weight"]
    assert list(nn.MultiLabelSoftMarginLoss().state_dict()) == []


# ---------------------------------------------------------------- constructor signatures

# torch 2.x's documented defaults in its positional order, without the deprecated size_average/reduce
TORCH_DEFAULTS = {
    nn.ReLU6: {"inplace": False},
    nn.Hardtanh: {"min_val": -1.0, "max_val": 1.0, "inplace": False},
    nn.Hardsigmoid: {"inplace": False},
    nn.Hardswish: {"inplace": False},
    nn.SELU: {"inplace": False},
    nn.CELU: {"alpha": 1.0, "inplace": False},
    nn.Mish: {"inplace": False},
    nn.LogSigmoid: {},
    nn.Softsign: {},
    nn.Tanhshrink: {},
    nn.GLU: {"dim": -1},
    nn.CosineSimilarity: {"dim": 1, "eps": 1e-8},
    nn.PairwiseDistance: {"p": 2.0, "eps": 1e-6, "keepdim": False},
    nn.KLDivLoss: {"reduction": "mean", "log_target": False},
    nn.CosineEmbeddingLoss: {"margin": 0.0, "reduction": "mean"},
    nn.MarginRankingLoss: {"margin": 0.0, "reduction": "mean"},
    nn.TripletMarginLoss: {"margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False, "reduction": "mean"},
    nn.HingeEmbeddingLoss: {"margin": 1.0, "reduction": "mean"},
    nn.SoftMarginLoss: {"reduction": "mean"},
    nn.MultiLabelSoftMarginLoss: {"weight": None, "reduction": "mean"},
    nn.PoissonNLLLoss: {"log_input": True, "full": False, "eps": 1e-8, "reduction": "mean"},
    nn.GaussianNLLLoss: {"full": False, "eps": 1e-6, "reduction": "mean"},
}


@pytest.mark.parametrize("cls", TORCH_DEFAULTS, ids=lambda c: c.__name__)
def test_defaults_are_torchs(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params] == list(TORCH_DEFAULTS[cls].items())   # order too
    assert cls.__name__ in nn.__all__


def test_gaussian_nll_loss_takes_keywords_only():
    with pytest.raises(TypeError):
        nn.GaussianNLLLoss(True)


LOSS_CLASSES = [cls for cls in TORCH_DEFAULTS if "reduction" in TORCH_DEFAULTS[cls]]


@pytest.mark.parametrize("cls", LOSS_CLASSES, ids=lambda c: c.__name__)
def test_bad_reduction_raises(cls):
    with pytest.raises(ValueError, match=f"{cls.__name__}: expected reduction"):
        cls(reduction="avg")
    assert cls(reduction="sum").reduction == "sum"


def test_only_kl_div_takes_batchmean():
    assert nn.KLDivLoss("batchmean").reduction == "batchmean"
    assert "batchmean" in repr(nn.KLDivLoss("batchmean"))
    with pytest.raises(ValueError, match="expected reduction"):
        nn.SoftMarginLoss("batchmean")
