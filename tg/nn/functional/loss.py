"""Losses with torch's names, reductions and argument checks."""
from __future__ import annotations

import math
import warnings

from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.indexing import as_index
from tg.core.realize import known_values
from tg.core.tensor import Tensor, apply, index_range
from tg.nn.functional.activation import logsigmoid
from tg.nn.functional.basic import pairwise_distance
from tg.nn.functional.checks import (
    REDUCTIONS,
    _check_broadcasts_to,
    _check_float,
    _check_known_range,
    _check_param,
    _check_reduction,
    _check_same_shape,
    _reduce,
)


@autocast_op
def mse_loss(x: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(x - target)^2, reduced by 'mean', 'sum' or 'none'; shapes must be equal (torch only warns).

        >>> mse_loss(Tensor([1.0, 2.0]), Tensor([3.0, 2.0])).item()
        2.0
        >>> mse_loss(Tensor([1.0, 2.0]), Tensor([3.0, 2.0]), reduction="none").tolist()
        [4.0, 0.0]
    """
    _check_reduction("mse_loss", reduction)
    _check_same_shape("mse_loss", x, target)
    diff = x - target
    return _reduce(diff * diff, reduction)


@autocast_op
def l1_loss(x: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|x - target|, reduced by 'mean', 'sum' or 'none'; shapes must be equal.

        >>> l1_loss(Tensor([1.0, 2.0]), Tensor([3.0, 2.0])).item()
        1.0
    """
    _check_reduction("l1_loss", reduction)
    _check_same_shape("l1_loss", x, target)
    return _reduce((x - target).abs(), reduction)


def _smooth_abs(op: str, x: Tensor, target: Tensor, reduction: str, limit: float) -> Tensor:
    """0.5 d^2 where |d| < limit, else limit * (|d| - 0.5 limit): huber_loss; smooth_l1 is it / limit."""
    _check_reduction(op, reduction)
    _check_same_shape(op, x, target)
    if limit < 0:
        raise ValueError(f"[nn] {op}: expected a non-negative beta/delta, got {limit}")
    diff = (x - target).abs()
    return _reduce((diff < limit).where(0.5 * diff * diff, limit * (diff - 0.5 * limit)), reduction)


@autocast_op
def smooth_l1_loss(x: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, with d = x - target; beta=0 is l1_loss.

        >>> smooth_l1_loss(Tensor([0.5, 3.0]), Tensor([0.0, 0.0]), reduction="none").tolist()
        [0.125, 2.5]
    """
    if beta == 0:
        return l1_loss(x, target, reduction)
    return _smooth_abs("smooth_l1_loss", x, target, reduction, beta) / beta


@autocast_op
def huber_loss(x: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta * (|d| - 0.5 delta), with d = x - target.

        >>> huber_loss(Tensor([0.5, 3.0]), Tensor([0.0, 0.0]), reduction="none", delta=2.0).tolist()
        [0.125, 4.0]
    """
    return _smooth_abs("huber_loss", x, target, reduction, delta)


@autocast_op
def binary_cross_entropy(x: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """-(t log p + (1 - t) log(1 - p)) for probabilities p; each log is clamped at -100 as in torch.

        >>> round(binary_cross_entropy(Tensor([0.5]), Tensor([1.0])).item(), 4)
        0.6931
    """
    _check_reduction("binary_cross_entropy", reduction)
    _check_float("binary_cross_entropy", x)
    _check_same_shape("binary_cross_entropy", x, target)
    _check_broadcasts_to("binary_cross_entropy", "weight", weight, x.shape)
    target = target.cast(x.dtype)
    loss = -(target * x.log().clamp(min=-100.0) + (1 - target) * (1 - x).log().clamp(min=-100.0))
    return _reduce(loss * weight if weight is not None else loss, reduction)


@autocast_op
def binary_cross_entropy_with_logits(logits: Tensor, target: Tensor, weight: Tensor | None = None,
                                     pos_weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """Sigmoid + binary cross entropy in one stable expression: (1 - t) x + (1 + (pw - 1) t) log(1 + e^-x).
    pos_weight scales the positive term and broadcasts over the last (class) dim.

        >>> round(binary_cross_entropy_with_logits(Tensor([0.0]), Tensor([1.0])).item(), 4)
        0.6931
    """
    op = "binary_cross_entropy_with_logits"
    _check_reduction(op, reduction)
    _check_float(op, logits)
    _check_same_shape(op, logits, target)
    _check_broadcasts_to(op, "weight", weight, logits.shape)
    _check_broadcasts_to(op, "pos_weight", pos_weight, logits.shape)
    x, target = logits, target.cast(logits.dtype)
    # log(1 + e^-x) = m + log(e^-m + e^(-x-m)) with m = max(-x, 0): both exps are <= 1, so nothing
    # overflows; m is held constant (as in logsumexp), which keeps the gradient exact at x = 0
    m = (-x).relu().detach()
    softplus_neg = ((-m).exp() + (-x - m).exp()).log() + m
    positive = softplus_neg if pos_weight is None else (1 + (pos_weight - 1) * target) * softplus_neg
    loss = (1 - target) * x + positive
    return _reduce(loss * weight if weight is not None else loss, reduction)


def _class_loss(op: str, logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int,
                reduction: str, label_smoothing: float) -> Tensor:
    """The loss of log-probabilities logp (N, C, *) against class indices target (N, *), as torch's
    nll_loss (label_smoothing 0) and cross_entropy: the mean divides by the summed weights of the
    targets that are not ignore_index, for the smoothing term too."""
    _check_reduction(op, reduction)
    _check_float(op, logp)
    if not isinstance(target, Tensor) or not target.dtype.is_int:
        got = target.dtype.name if isinstance(target, Tensor) else type(target).__name__
        raise TypeError(f"[nn] {op}: expected target of class indices as an integer Tensor, got {got}; "
                        f"fix: .long() (cross_entropy also takes class probabilities as a float target "
                        f"of the input's shape)")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"[nn] {op}: expected label_smoothing in [0, 1], got {label_smoothing}")
    if logp.ndim == 0 or target.shape != (logp.shape[:1] + logp.shape[2:] if logp.ndim > 1 else ()):
        raise ValueError(f"[nn] {op}: expected input (N, C, *) with target (N, *), or input (C,) with a 0-d "
                         f"target, got input {logp.shape} and target {target.shape}")
    unbatched = logp.ndim == 1
    if unbatched:
        logp, target = logp.unsqueeze(0), target.reshape(1)               # (1, C), (1,)
    classes = logp.shape[1]
    _check_param(op, "weight", weight, (classes,))
    _check_known_range(op, target, classes, ignore_index)
    logp = logp.permute(0, *range(2, logp.ndim), 1)                      # (N, *, C)
    if weight is None and label_smoothing == 0 and logp.numel() > 0:
        loss = apply(fused.ClassNll, logp, as_index(target), ignore_index=ignore_index, reduction=reduction)
        return loss.reshape(()) if unbatched and reduction == "none" else loss
    valid = target != ignore_index                                        # (N, *)
    onehot = (as_index(target).unsqueeze(-1) == index_range(classes, target.device)) & valid.unsqueeze(-1)
    # where, not a multiply, so an -inf log-probability of another class stays out of the sum
    loss = -onehot.where(logp, 0).sum(-1)                                 # (N, *)
    if weight is not None:
        target_weight = onehot.where(weight, 0).sum(-1)                   # weight[target], 0 if ignored
        loss = loss * target_weight
    else:
        target_weight = valid.cast(logp.dtype)
    if label_smoothing > 0:
        smooth = -(logp * weight if weight is not None else logp).sum(-1)
        smooth = valid.where(smooth, 0)
        loss = (1 - label_smoothing) * loss + (label_smoothing / classes) * smooth
    if reduction == "mean":
        return loss.sum() / target_weight.sum()
    if reduction == "sum":
        return loss.sum()
    return loss.reshape(()) if unbatched else loss


@autocast_op
def nll_loss(logp: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities (N, C, *) for class indices (N, *), torch semantics.

        >>> nll_loss(Tensor([[-1.0, -2.0], [-0.5, -3.0]]), Tensor([1, 0]), reduction="none").tolist()
        [2.0, 0.5]
    """
    return _class_loss("nll_loss", logp, target, weight, ignore_index, reduction, 0.0)


def _probability_loss(logp: Tensor, target: Tensor, class_dim: int, weight: Tensor | None, reduction: str,
                      label_smoothing: float) -> Tensor:
    """cross_entropy against class probabilities of logp's shape, torch's formula (ignore_index unused)."""
    op = "cross_entropy"
    _check_reduction(op, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"[nn] {op}: expected label_smoothing in [0, 1], got {label_smoothing}")
    classes = logp.shape[class_dim]
    _check_param(op, "weight", weight, (classes,))
    target = target.cast(logp.dtype)
    if label_smoothing > 0:
        target = (1 - label_smoothing) * target + label_smoothing / classes
    per_class = target * logp
    if weight is not None:
        per_class = per_class * weight.reshape((classes,) + (1,) * (logp.ndim - 1 - class_dim))
    return _reduce(-per_class.sum(class_dim), reduction)                 # (N, *) or () before reducing


@autocast_op
def cross_entropy(logits: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """log_softmax over the class dim + nll_loss, with torch's label smoothing: logits (N, C, *) or (C,),
    target class indices (N, *) or (). Targets equal to ignore_index add nothing and leave the mean's
    denominator. A float target of the logits' shape holds class probabilities instead: the loss is
    -sum_c weight_c t_c log p_c (t smoothed to (1 - s) t + s / C), and the mean divides by N * (*).

        >>> round(cross_entropy(Tensor([[0.0, 0.0]]), Tensor([1])).item(), 4)
        0.6931
        >>> logits = Tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
        >>> round(cross_entropy(logits, Tensor([0, -100])).item(), 4)      # the second row is ignored
        0.2395
        >>> round(cross_entropy(Tensor([[0.0, 0.0]]), Tensor([[0.25, 0.75]])).item(), 4)   # soft target
        0.6931
    """
    _check_float("cross_entropy", logits)
    if logits.ndim == 0:
        raise ValueError("[nn] cross_entropy: expected logits of shape (N, C, *) or (C,), got a 0-d tensor")
    class_dim = 0 if logits.ndim == 1 else 1
    logp = logits.log_softmax(class_dim)
    if isinstance(target, Tensor) and target.dtype.is_float and target.shape == logits.shape:
        return _probability_loss(logp, target, class_dim, weight, reduction, label_smoothing)
    return _class_loss("cross_entropy", logp, target, weight, ignore_index, reduction, label_smoothing)


# ---------------------------------------------------------------- margin, divergence and likelihood losses

def _check_signs(op: str, name: str, y: Tensor) -> None:
    """Labels already on the host (a realized tensor) are checked to be 1 or -1; lazy ones cannot be."""
    if not isinstance(y, Tensor):
        raise TypeError(f"[nn] {op}: expected {name} to be a Tensor of 1 and -1, got {type(y).__name__}")
    values = known_values(y.lazydata) if y.numel() else None
    if values is None:
        return
    bad = (values != 1) & (values != -1)
    if bad.any():
        raise ValueError(f"[nn] {op}: expected {name} of 1 and -1, got {values[bad].flat[0]}")


@autocast_op
def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:  # noqa: A002
    """The Kullback-Leibler divergence of target from log-probabilities `input`, pointwise
    target * (log(target) - input) (0 where target is 0), or exp(target) * (target - input) when
    log_target. As in torch, "mean" averages over every element (and warns); "batchmean", the sum over
    the batch size input.shape[0], is the true KL divergence per sample.

        >>> logp = Tensor([[0.25, 0.75]]).log()
        >>> round(kl_div(logp, Tensor([[0.5, 0.5]]), reduction="batchmean").item(), 4)
        0.1438
    """
    if reduction not in (*REDUCTIONS, "batchmean"):
        raise ValueError(f"[nn] kl_div: expected reduction 'mean', 'batchmean', 'sum' or 'none', got "
                         f"{reduction!r}")
    _check_float("kl_div", input)
    _check_broadcasts_to("kl_div", "target", target, input.shape)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = target.xlogy(target) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    if reduction == "mean":
        warnings.warn("[nn] kl_div: reduction='mean' divides the total loss by the batch size and the "
                      "support size, so it is not the KL divergence; reduction='batchmean' divides by the "
                      "batch size only (torch gives the same warning)", UserWarning, stacklevel=2)
    return _reduce(loss, reduction)


@autocast_op
def cosine_embedding_loss(x1: Tensor, x2: Tensor, y: Tensor, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where y == 1 and max(0, cos(x1, x2) - margin) where y == -1, with the cosine over
    the last dim of (N, D) inputs and a (N,) y, or (D,) inputs and a 0-d y (torch's shapes and its 1e-12
    added to each squared norm).

        >>> cosine_embedding_loss(Tensor([[1.0, 0.0]]), Tensor([[0.0, 1.0]]), Tensor([1.0])).item()
        1.0
    """
    _check_reduction("cosine_embedding_loss", reduction)
    _check_signs("cosine_embedding_loss", "y", y)
    if not (y.ndim in (0, 1) and x1.ndim == x2.ndim == y.ndim + 1 and x1.shape == x2.shape
            and x1.shape[:-1] == y.shape):
        raise ValueError(f"[nn] cosine_embedding_loss: expected x1 and x2 of shape (N, D) with y (N,), or "
                         f"(D,) with a 0-d y; got {x1.shape}, {x2.shape} and {y.shape}")
    dot = (x1 * x2).sum(-1)
    cos = dot / (((x1 * x1).sum(-1) + 1e-12) * ((x2 * x2).sum(-1) + 1e-12)).sqrt()
    loss = (y == 1).where(1 - cos, 0.0) + (y == -1).where((cos - margin).relu(), 0.0)
    return _reduce(loss, reduction)


@autocast_op
def margin_ranking_loss(x1: Tensor, x2: Tensor, y: Tensor, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    """max(0, -y * (x1 - x2) + margin): y = 1 asks x1 to rank above x2 by the margin, y = -1 below.

        >>> margin_ranking_loss(Tensor([1.0, 2.0]), Tensor([2.0, 0.0]), Tensor([1.0, 1.0])).item()
        0.5
    """
    _check_reduction("margin_ranking_loss", reduction)
    if not x1.ndim == x2.ndim == y.ndim:
        raise ValueError(f"[nn] margin_ranking_loss: expected x1, x2 and y with the same number of dims, got "
                         f"{x1.shape}, {x2.shape} and {y.shape}")
    return _reduce((-y * (x1 - x2) + margin).relu(), reduction)


@autocast_op
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0,
                        p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                        reduction: str = "mean") -> Tensor:
    """max(0, d(anchor, positive) - d(anchor, negative) + margin) with d the pairwise_distance over the last
    dim; swap uses min(d(a, n), d(p, n)) as the negative distance.

        >>> a, pos, neg = Tensor([[0.0, 0.0]]), Tensor([[0.0, 1.0]]), Tensor([[0.0, 3.0]])
        >>> triplet_margin_loss(a, pos, neg).item()
        0.0
    """
    _check_reduction("triplet_margin_loss", reduction)
    if not anchor.ndim == positive.ndim == negative.ndim or anchor.ndim not in (1, 2):
        raise ValueError(f"[nn] triplet_margin_loss: expected anchor, positive and negative all (N, D) or "
                         f"all (D,), got {anchor.shape}, {positive.shape} and {negative.shape}")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((d_pos - d_neg + margin).relu(), reduction)


@autocast_op
def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0,  # noqa: A002
                         reduction: str = "mean") -> Tensor:
    """x where target == 1 and max(0, margin - x) where target == -1 (input x is usually a distance).

        >>> hinge_embedding_loss(Tensor([0.3, 0.4]), Tensor([1.0, -1.0]), reduction="none").tolist()
        [0.30000001192092896, 0.6000000238418579]
    """
    _check_reduction("hinge_embedding_loss", reduction)
    _check_signs("hinge_embedding_loss", "target", target)
    _check_broadcasts_to("hinge_embedding_loss", "target", target, input.shape)
    loss = (target != 1).where((margin - input).relu(), 0.0) + (target != -1).where(input, 0.0)
    return _reduce(loss, reduction)


@autocast_op
def soft_margin_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """log(1 + exp(-y x)), the logistic loss of labels y in {1, -1}, computed stably.

        >>> round(soft_margin_loss(Tensor([0.0]), Tensor([1.0])).item(), 4)
        0.6931
    """
    _check_reduction("soft_margin_loss", reduction)
    _check_float("soft_margin_loss", input)
    _check_same_shape("soft_margin_loss", input, target)
    return _reduce(-logsigmoid(target * input), reduction)


@autocast_op
def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                reduction: str = "mean") -> Tensor:
    """Binary cross entropy of sigmoid(input) against 0/1 targets, averaged over the classes (the last dim)
    of each sample: -(y log s(x) + (1 - y) log s(-x)), weighted per class if weight is given.

        >>> round(multilabel_soft_margin_loss(Tensor([[0.0, 0.0]]), Tensor([[1.0, 0.0]])).item(), 4)
        0.6931
    """
    _check_reduction("multilabel_soft_margin_loss", reduction)
    _check_float("multilabel_soft_margin_loss", input)
    _check_same_shape("multilabel_soft_margin_loss", input, target)
    _check_broadcasts_to("multilabel_soft_margin_loss", "weight", weight, input.shape)
    if input.ndim == 0:
        raise ValueError("[nn] multilabel_soft_margin_loss: expected input of shape (N, C) or (C,), got a "
                         "0-d tensor")
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.mean(-1), reduction)


@autocast_op
def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,  # noqa: A002
                     eps: float = 1e-8, reduction: str = "mean") -> Tensor:
    """The negative log likelihood of target under Poisson(rate): exp(x) - t x when log_input (x is the
    log rate), else x - t log(x + eps). full adds Stirling's t log t - t + log(2 pi t) / 2 where t > 1.

        >>> poisson_nll_loss(Tensor([0.0]), Tensor([1.0])).item()
        1.0
    """
    _check_reduction("poisson_nll_loss", reduction)
    _check_float("poisson_nll_loss", input)
    _check_broadcasts_to("poisson_nll_loss", "target", target, input.shape)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = (target > 1).where(target, 1.0)   # log of t <= 1 is never used, but must not be NaN for grad
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + (target > 1).where(stirling, 0.0)
    return _reduce(loss, reduction)


@autocast_op
def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,  # noqa: A002
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """The negative log likelihood of target under N(input, var): (log var + (x - t)^2 / var) / 2, plus
    log(2 pi) / 2 if full. var has input's shape, or one value per sample (input.shape[:-1], with or without
    a trailing 1), or is a float; values below eps count as eps (the gradient passes as if unclamped).

        >>> gaussian_nll_loss(Tensor([1.0]), Tensor([1.0]), Tensor([1.0])).item()
        0.0
    """
    _check_reduction("gaussian_nll_loss", reduction)
    _check_float("gaussian_nll_loss", input)
    _check_broadcasts_to("gaussian_nll_loss", "target", target, input.shape)
    if not isinstance(var, Tensor):
        var = input.full_like(float(var)).detach()
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:
            var = var.unsqueeze(-1)
        elif not (var.ndim == input.ndim and var.shape[:-1] == input.shape[:-1] and var.shape[-1] == 1):
            raise ValueError(f"[nn] gaussian_nll_loss: expected var of the input's shape {input.shape}, or "
                             f"{input.shape[:-1]} (+ a trailing 1), got {var.shape}")
    known = known_values(var.lazydata) if var.numel() else None
    if known is not None and (known < 0).any():
        raise ValueError("[nn] gaussian_nll_loss: expected a non-negative var, got negative entries")
    var = var + (var.clamp(min=eps) - var).detach()   # torch clamps under no_grad: values clamped, grad not
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)
