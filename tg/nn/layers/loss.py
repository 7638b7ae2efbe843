"""Loss layers: torch's names and defaults over tg.nn.functional's losses."""
from __future__ import annotations

from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.functional.checks import _check_reduction
from tg.nn.module import Module


class _Loss(Module):
    """Holds reduction ('mean', 'sum' or 'none'), checked when the loss is built."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        _check_reduction(type(self).__name__, reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class MSELoss(_Loss):
    """mean((input - target)^2) (reduction 'mean', 'sum' or 'none').

        >>> MSELoss()(Tensor([1.0, 2.0]), Tensor([3.0, 2.0])).item()
        2.0
    """

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(x, target, self.reduction)


class L1Loss(_Loss):
    """mean(|input - target|) (reduction 'mean', 'sum' or 'none').

        >>> L1Loss(reduction="sum")(Tensor([1.0, 2.0]), Tensor([3.0, 2.0])).item()
        2.0
    """

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(x, target, self.reduction)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, d = input - target.

        >>> SmoothL1Loss(reduction="none")(Tensor([0.5, 3.0]), Tensor([0.0, 0.0])).tolist()
        [0.125, 2.5]
    """

    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(x, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    """0.5 d^2 where |d| < delta, else delta * (|d| - 0.5 delta), d = input - target.

        >>> HuberLoss(reduction="none", delta=2.0)(Tensor([0.5, 3.0]), Tensor([0.0, 0.0])).tolist()
        [0.125, 4.0]
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.huber_loss(x, target, self.reduction, self.delta)


class _WeightedLoss(_Loss):
    """A loss whose optional weight is a buffer named 'weight', as torch's state dicts have it."""
    weight: Tensor | None

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities, weight broadcast over the elements.

        >>> round(BCELoss()(Tensor([0.5]), Tensor([1.0])).item(), 4)
        0.6931
    """

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(x, target, self.weight, self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Sigmoid + binary cross entropy, computed stably; pos_weight (a buffer) scales the positive term per
    class (the last dim).

        >>> round(BCEWithLogitsLoss(pos_weight=Tensor([2.0]))(Tensor([0.0]), Tensor([1.0])).item(), 4)
        1.3863
        >>> list(BCEWithLogitsLoss(weight=Tensor([1.0]), pos_weight=Tensor([2.0])).state_dict())
        ['weight', 'pos_weight']
    """
    pos_weight: Tensor | None

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None):
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(x, target, self.weight, self.pos_weight, self.reduction)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities (N, C, *) for class indices (N, *); weight (C,) per class,
    targets equal to ignore_index skipped; the mean divides by the targets' summed weights.

        >>> NLLLoss()(Tensor([[-1.0, -2.0], [-0.5, -3.0]]), Tensor([1, 0])).item()
        1.25
    """

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(x, target, self.weight, self.ignore_index, self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """log_softmax over the class dim + NLLLoss, for class indices (N, *) or class probabilities (a float
    target of the input's shape), with torch's label_smoothing and per-class weight.

        >>> loss = CrossEntropyLoss(label_smoothing=0.1)
        >>> round(loss(Tensor([[0.0, 0.0]]), Tensor([1])).item(), 4)
        0.6931
        >>> round(CrossEntropyLoss()(Tensor([[0.0, 0.0]]), Tensor([[0.3, 0.7]])).item(), 4)
        0.6931
    """

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(weight, reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"[nn] CrossEntropyLoss: expected label_smoothing in [0, 1], "
                             f"got {label_smoothing}")
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(x, target, self.weight, self.ignore_index, self.reduction,
                               self.label_smoothing)


class KLDivLoss(_Loss):
    """KL divergence of target from log-probabilities input (target log-probabilities too if log_target).
    reduction also takes 'batchmean', the sum over the batch size: the true KL divergence per sample; 'mean'
    averages over every element and warns, as torch.

        >>> loss = KLDivLoss(reduction="batchmean")
        >>> round(loss(Tensor([[0.25, 0.75]]).log(), Tensor([[0.5, 0.5]])).item(), 4)
        0.1438
    """

    def __init__(self, reduction: str = "mean", log_target: bool = False):
        # _Loss checks the three common reductions; 'batchmean' is kl_div's own, checked like them here
        super().__init__("sum" if reduction == "batchmean" else reduction)
        self.reduction, self.log_target = reduction, log_target

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(x, target, self.reduction, self.log_target)


class CosineEmbeddingLoss(_Loss):
    """1 - cos(x1, x2) where target is 1 and max(0, cos(x1, x2) - margin) where it is -1, the cosine over the
    last dim of (N, D) inputs with a (N,) target.

        >>> CosineEmbeddingLoss()(Tensor([[1.0, 0.0]]), Tensor([[0.0, 1.0]]), Tensor([1.0])).item()
        1.0
    """

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, x1: Tensor, x2: Tensor, target: Tensor) -> Tensor:
        return F.cosine_embedding_loss(x1, x2, target, self.margin, self.reduction)


class MarginRankingLoss(_Loss):
    """max(0, -target * (x1 - x2) + margin): target 1 asks x1 to rank above x2 by the margin, -1 below.

        >>> MarginRankingLoss()(Tensor([1.0, 2.0]), Tensor([2.0, 0.0]), Tensor([1.0, 1.0])).item()
        0.5
    """

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, x1: Tensor, x2: Tensor, target: Tensor) -> Tensor:
        return F.margin_ranking_loss(x1, x2, target, self.margin, self.reduction)


class TripletMarginLoss(_Loss):
    """max(0, d(anchor, positive) - d(anchor, negative) + margin), d the p-norm pairwise distance; swap uses
    min(d(anchor, negative), d(positive, negative)) as the negative distance.

        >>> a, pos, neg = Tensor([[0.0, 0.0]]), Tensor([[0.0, 1.0]]), Tensor([[0.0, 1.5]])
        >>> round(TripletMarginLoss()(a, pos, neg).item(), 4)
        0.5
    """

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 reduction: str = "mean"):
        super().__init__(reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                     self.reduction)


class HingeEmbeddingLoss(_Loss):
    """x where target is 1 and max(0, margin - x) where it is -1 (x is usually a distance).

        >>> HingeEmbeddingLoss(reduction="sum")(Tensor([0.25, 0.5]), Tensor([1.0, -1.0])).item()
        0.75
    """

    def __init__(self, margin: float = 1.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.hinge_embedding_loss(x, target, self.margin, self.reduction)


class SoftMarginLoss(_Loss):
    """log(1 + exp(-target * x)), the logistic loss of labels in {1, -1}.

        >>> round(SoftMarginLoss()(Tensor([0.0]), Tensor([1.0])).item(), 4)
        0.6931
    """

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.soft_margin_loss(x, target, self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """Binary cross entropy of sigmoid(x) against 0/1 targets, averaged over the classes (the last dim) of
    each sample, weight (C,) per class.

        >>> round(MultiLabelSoftMarginLoss()(Tensor([[0.0, 0.0]]), Tensor([[1.0, 0.0]])).item(), 4)
        0.6931
    """

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.multilabel_soft_margin_loss(x, target, self.weight, self.reduction)


class PoissonNLLLoss(_Loss):
    """Negative log likelihood of target under Poisson(rate): exp(x) - target * x when log_input (x is the
    log rate), else x - target * log(x + eps); full adds Stirling's term.

        >>> PoissonNLLLoss()(Tensor([0.0]), Tensor([1.0])).item()
        1.0
    """

    def __init__(self, log_input: bool = True, full: bool = False, eps: float = 1e-8,
                 reduction: str = "mean"):
        super().__init__(reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.poisson_nll_loss(x, target, self.log_input, self.full, self.eps, self.reduction)


class GaussianNLLLoss(_Loss):
    """Negative log likelihood of target under N(x, var): (log var + (x - target)^2 / var) / 2, var clamped
    to at least eps, plus log(2 pi) / 2 if full. Keyword-only arguments, as torch.

        >>> GaussianNLLLoss()(Tensor([1.0]), Tensor([1.0]), Tensor([1.0])).item()
        0.0
    """

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, x: Tensor, target: Tensor, var: Tensor | float) -> Tensor:
        return F.gaussian_nll_loss(x, target, var, self.full, self.eps, self.reduction)
