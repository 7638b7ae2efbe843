"""Functional nn ops with torch.nn.functional names: activations, norms, attention and losses.

Every op is a composition of Tensor methods, so autograd differentiates it with no gradient
written here. Inputs are checked at the call, before any kernel is built.

    >>> from tg import Tensor
    >>> import tg.nn.functional as F
    >>> F.mse_loss(Tensor([1.0, 2.0]), Tensor([1.0, 4.0])).item()
    2.0
    >>> round(F.cross_entropy(Tensor([[0.0, 0.0]]), Tensor([1])).item(), 4)     # log 2
    0.6931
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tg.core.dtype import DType, dtypes
from tg.core.indexing import as_index
from tg.core.shape import broadcast_shape
from tg.core.tensor import Tensor, index_range

REDUCTIONS = ("mean", "sum", "none")


# ---------------------------------------------------------------- checks shared by the ops below

def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"[nn] {op}: expected reduction 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _check_float(op: str, x: Tensor, what: str = "input") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"[nn] {op}: expected {what} to be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise TypeError(f"[nn] {op}: expected a floating-point {what}, got {x.dtype.name}; "
                        f"fix: cast it with .float()")


def _check_same_shape(op: str, x: Tensor, target: Tensor) -> None:
    if not isinstance(target, Tensor):
        raise TypeError(f"[nn] {op}: expected target to be a Tensor, got {type(target).__name__}")
    if target.shape != x.shape:
        raise ValueError(f"[nn] {op}: expected target of the input's shape {x.shape}, got {target.shape}; "
                         f"fix: reshape the target (broadcasting a target is almost always a bug)")


def _check_broadcasts_to(op: str, name: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is None:
        return
    try:
        ok = broadcast_shape(t.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"[nn] {op}: expected {name} to broadcast to the input shape {shape}, got {t.shape}")


def _as_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, (int, np.integer)):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


def _check_trailing(op: str, x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes normalized over: the last len(shape) dims, which must equal shape."""
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape):] != shape:
        raise ValueError(f"[nn] {op}: expected input whose last dims are {shape} (normalized_shape), "
                         f"got shape {x.shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


def _check_param(op: str, name: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is not None and t.shape != shape:
        raise ValueError(f"[nn] {op}: expected {name} of shape {shape}, got {t.shape}")


def _check_p(op: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"[nn] {op}: expected a probability p in [0, 1], got {p}")


def finfo_eps(dtype: DType) -> float:
    """Machine epsilon of a float dtype (torch.finfo(dtype).eps), the default eps of rms_norm.

        >>> finfo_eps(dtypes.float32) == 2.0 ** -23
        True
    """
    return 2.0 ** -7 if dtype == dtypes.bfloat16 else float(np.finfo(dtype.np).eps)


# ---------------------------------------------------------------- activations (thin wrappers)

def relu(x: Tensor) -> Tensor:
    """max(x, 0) elementwise, as torch.nn.functional.relu.

        >>> relu(Tensor([-1.0, 0.0, 2.0])).tolist()
        [0.0, 0.0, 2.0]
    """
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (approximate='none', with erf) or its tanh approximation ('tanh'), as torch.

        >>> [round(v, 4) for v in gelu(Tensor([-1.0, 0.0, 1.0])).tolist()]
        [-0.1587, 0.0, 0.8413]
        >>> [round(v, 4) for v in gelu(Tensor([-1.0, 0.0, 1.0]), approximate="tanh").tolist()]
        [-0.1588, 0.0, 0.8412]
    """
    return x.gelu(approximate)


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x) (swish), as torch.nn.functional.silu.

        >>> [round(v, 4) for v in silu(Tensor([-1.0, 0.0, 1.0])).tolist()]
        [-0.2689, 0.0, 0.7311]
    """
    return x.silu()


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along dim (default the last; torch has no default).

        >>> [round(v, 4) for v in softmax(Tensor([0.0, 1.0, 2.0])).tolist()]
        [0.09, 0.2447, 0.6652]
        >>> [round(v, 4) for v in softmax(Tensor([[0.0, 0.0], [1.0, 1.0]]), dim=0)[:, 0].tolist()]
        [0.2689, 0.7311]
    """
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along dim (default the last), computed stably.

        >>> [round(v, 4) for v in log_softmax(Tensor([0.0, 0.0])).tolist()]          # log(1/2)
        [-0.6931, -0.6931]
        >>> log_softmax(Tensor([0.0, 1000.0])).tolist()                            # no overflow
        [-1000.0, 0.0]
    """
    return x.log_softmax(dim)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias, with weight (out_features, in_features), as torch.nn.functional.linear.

        >>> linear(Tensor([[1.0]]), Tensor([[2.0]]), Tensor([0.5])).item()
        2.5
    """
    return x.linear(weight, bias)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); the identity if not training.
    training defaults to True, as torch's.

        >>> dropout(Tensor([1.0, 2.0]), p=0.5, training=False).tolist()
        [1.0, 2.0]
        >>> set(dropout(Tensor.ones(100), p=0.5).tolist()) <= {0.0, 2.0}
        True
    """
    _check_p("dropout", p)
    if not training or p == 0.0:
        return x
    keep = Tensor.rand(*x.shape, device=x.device) >= p       # never true when p == 1: all zeros
    kept = keep.where(x, 0)
    return kept if p == 1.0 else kept * (1.0 / (1.0 - p))


# ---------------------------------------------------------------- normalization

def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + eps) over axes, with the (keepdim) mean and biased variance."""
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    return centered * (var + eps).rsqrt(), mean, var


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    if weight is not None:
        x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing normalized_shape dims, then scale and shift elementwise.

        >>> [round(v, 4) for v in layer_norm(Tensor([[1.0, 3.0]]), 2).reshape(-1).tolist()]
        [-1.0, 1.0]
    """
    _check_float("layer_norm", x)
    shape = _as_shape(normalized_shape)
    axes = _check_trailing("layer_norm", x, shape)
    _check_param("layer_norm", "weight", weight, shape)
    _check_param("layer_norm", "bias", bias, shape)
    out, _, _ = _normalize(x, axes, eps)
    return _affine(out, weight, bias, shape)


def rms_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the trailing dims, times weight; eps=None is finfo(dtype).eps, as torch.

        >>> [round(v, 4) for v in rms_norm(Tensor([[3.0, 4.0]]), 2, eps=0.0).reshape(-1).tolist()]
        [0.8485, 1.1314]
    """
    _check_float("rms_norm", x)
    shape = _as_shape(normalized_shape)
    axes = _check_trailing("rms_norm", x, shape)
    _check_param("rms_norm", "weight", weight, shape)
    eps = finfo_eps(x.dtype) if eps is None else eps
    out = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return _affine(out, weight, None, shape)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize (N, C, *) over each group of C/num_groups channels and all spatial dims; per-channel affine.

        >>> [round(v, 4) for v in group_norm(Tensor([[[1.0], [3.0]]]), 1).reshape(-1).tolist()]
        [-1.0, 1.0]
    """
    _check_float("group_norm", x)
    if x.ndim < 2:
        raise ValueError(f"[nn] group_norm: expected input of shape (N, C, *), got {x.shape}")
    n, c = x.shape[0], x.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise ValueError(f"[nn] group_norm: expected the {c} channels to split into num_groups={num_groups} "
                         f"equal groups; fix: pick num_groups dividing {c}")
    _check_param("group_norm", "weight", weight, (c,))
    _check_param("group_norm", "bias", bias, (c,))
    grouped = x.reshape(n, num_groups, c // num_groups * math.prod(x.shape[2:]))   # (N, G, C/G * spatial)
    out, _, _ = _normalize(grouped, (2,), eps)
    return _affine(out.reshape(x.shape), weight, bias, (1, c) + (1,) * (x.ndim - 2))


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | Tensor = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize (N, C, *) per channel C. Training: batch statistics, and running_mean / running_var (when
    given) are updated in place: r = (1 - momentum) * r + momentum * batch_stat, the variance unbiased.
    Not training: the running statistics.

        >>> x = Tensor([[1.0], [3.0]])                                   # (N=2, C=1)
        >>> mean, var = Tensor([0.0]), Tensor([1.0])
        >>> [round(v, 4) for v in batch_norm(x, mean, var, training=True).reshape(-1).tolist()]
        [-1.0, 1.0]
        >>> round(mean.item(), 4), round(var.item(), 4)                  # 0.1 * 2.0, 0.9 + 0.1 * 2.0
        (0.2, 1.1)
    """
    _check_float("batch_norm", x)
    if x.ndim < 2:
        raise ValueError(f"[nn] batch_norm: expected input of shape (N, C, *), got {x.shape}")
    c = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_param("batch_norm", name, t, (c,))
    channel = (1, c) + (1,) * (x.ndim - 2)                                # broadcasts over (N, C, *)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("[nn] batch_norm: expected running_mean and running_var when not training, "
                             "got None; fix: pass training=True to use batch statistics")
        out = (x - running_mean.reshape(channel)) * (running_var.reshape(channel) + eps).rsqrt()
        return _affine(out, weight, bias, channel)
    count = x.numel() // c if c else 0
    if count <= 1:
        raise ValueError(f"[nn] batch_norm: expected more than 1 value per channel when training, got input "
                         f"of shape {x.shape}; fix: use a larger batch or eval mode")
    out, mean, var = _normalize(x, tuple(i for i in range(x.ndim) if i != 1), eps)
    # the running statistics are state, not part of the graph: their update carries no gradient
    if running_mean is not None:
        running_mean.assign((1 - momentum) * running_mean + momentum * mean.detach().reshape(c))
    if running_var is not None:
        unbiased = var.detach().reshape(c) * (count / (count - 1))
        running_var.assign((1 - momentum) * running_var + momentum * unbiased)
    return _affine(out, weight, bias, channel)


# ---------------------------------------------------------------- embedding and attention

def embedding(indices: Tensor, weight: Tensor) -> Tensor:
    """Rows of weight (num_embeddings, dim) picked by an integer tensor of any shape: (*idx, dim).

        >>> embedding(Tensor([[1]]), Tensor([[0.0, 0.0], [1.0, 2.0]])).tolist()
        [[[1.0, 2.0]]]
    """
    if not isinstance(indices, Tensor) or not indices.dtype.is_int:
        got = indices.dtype.name if isinstance(indices, Tensor) else type(indices).__name__
        raise TypeError(f"[nn] embedding: expected an integer index Tensor, got {got}; fix: .long()")
    if weight.ndim != 2:
        raise ValueError(f"[nn] embedding: expected weight of shape (num_embeddings, dim), "
                         f"got {weight.shape}")
    _check_known_range("embedding", indices, weight.shape[0], None)
    return weight[indices]


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """softmax(query @ key^T * scale + mask) @ value, torch semantics: query (..., L, E), key (..., S, E),
    value (..., S, Ev) -> (..., L, Ev). A bool attn_mask keeps True positions, a float one is added;
    is_causal keeps key j <= query i. As in torch, dropout_p > 0 drops attention weights whatever
    Tensor.training says (pass 0.0 in eval).

        >>> q = Tensor([[[1.0, 0.0], [0.0, 1.0]]])
        >>> scaled_dot_product_attention(q, q, q, is_causal=True)[0, 0].tolist()
        [1.0, 0.0]
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_float("scaled_dot_product_attention", t, name)
        if t.ndim < 2:
            raise ValueError(f"[nn] scaled_dot_product_attention: expected {name} of shape (..., seq, dim), "
                             f"got {t.shape}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"[nn] scaled_dot_product_attention: expected query (..., L, E), key (..., S, E), "
                         f"value (..., S, Ev), got {query.shape}, {key.shape}, {value.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError("[nn] scaled_dot_product_attention: expected either attn_mask or is_causal, "
                         "got both; fix: fold the causal mask into attn_mask")
    _check_p("scaled_dot_product_attention", dropout_p)
    seq_q, seq_k = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale                      # (..., L, S)
    if is_causal:
        rows = index_range(seq_q, query.device).reshape(seq_q, 1)
        cols = index_range(seq_k, query.device).reshape(1, seq_k)
        scores = (cols <= rows).where(scores, float("-inf"))
    if attn_mask is not None:
        _check_broadcasts_to("scaled_dot_product_attention", "attn_mask", attn_mask, scores.shape)
        if attn_mask.dtype == dtypes.bool:
            scores = attn_mask.where(scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = dropout(scores.softmax(-1), dropout_p)                      # (..., L, S)
    return weights @ value                                                # (..., L, Ev)


# ---------------------------------------------------------------- losses

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


def _check_known_range(op: str, target: Tensor, n: int, ignore_index: int | None) -> None:
    """Index values already on the host (a realized tensor) are checked now; lazy ones cannot be."""
    if target.lazydata.realized is None or target.numel() == 0:
        return
    values = target.numpy()
    bad = (values < 0) | (values >= n)
    if ignore_index is not None:
        bad &= values != ignore_index
    if bad.any():
        also = "" if ignore_index is None else f" or ignore_index={ignore_index}"
        raise IndexError(f"[nn] {op}: expected indices in [0, {n}){also}, got {values[bad].flat[0]}")


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
                        f"fix: .long() (probability targets are not supported)")
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


def nll_loss(logp: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities (N, C, *) for class indices (N, *), torch semantics.

        >>> nll_loss(Tensor([[-1.0, -2.0], [-0.5, -3.0]]), Tensor([1, 0]), reduction="none").tolist()
        [2.0, 0.5]
    """
    return _class_loss("nll_loss", logp, target, weight, ignore_index, reduction, 0.0)


def cross_entropy(logits: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """log_softmax over the class dim + nll_loss, with torch's label smoothing: logits (N, C, *) or (C,),
    target class indices (N, *) or (). Targets equal to ignore_index add nothing and leave the mean's
    denominator.

        >>> round(cross_entropy(Tensor([[0.0, 0.0]]), Tensor([1])).item(), 4)
        0.6931
        >>> logits = Tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
        >>> round(cross_entropy(logits, Tensor([0, -100])).item(), 4)      # the second row is ignored
        0.2395
    """
    _check_float("cross_entropy", logits)
    if logits.ndim == 0:
        raise ValueError("[nn] cross_entropy: expected logits of shape (N, C, *) or (C,), got a 0-d tensor")
    logp = logits.log_softmax(0 if logits.ndim == 1 else 1)
    return _class_loss("cross_entropy", logp, target, weight, ignore_index, reduction, label_smoothing)
