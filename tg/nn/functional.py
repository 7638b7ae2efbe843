"""Functional nn ops with torch.nn.functional names: activations, convolutions, pooling, resizing,
norms, attention, einsum and losses.

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

import itertools
import math
import warnings
from typing import Sequence

import numpy as np

from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.dtype import DType, dtypes, min_value
from tg.core.indexing import as_index
from tg.core.realize import known_values
from tg.core.shape import broadcast_shape
from tg.core.tensor import Tensor, apply, index_range

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

def _in_place(name: str, x: Tensor, out: Tensor, inplace: bool) -> Tensor:
    """torch's inplace=True: x takes the result and is returned, recorded for autograd as Tensor's own
    in-place ops are (Tensor._write_in_place: a leaf that requires grad raises, as in torch); computations
    still pending on x's old values keep reading them."""
    if not inplace:
        return out
    return x._write_in_place(f"{name}(inplace=True)", lambda old: out)


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0) elementwise, as torch.nn.functional.relu.

        >>> relu(Tensor([-1.0, 0.0, 2.0])).tolist()
        [0.0, 0.0, 2.0]
    """
    return _in_place("relu", x, x.relu(), inplace)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (approximate='none', with erf) or its tanh approximation ('tanh'), as torch.

        >>> [round(v, 4) for v in gelu(Tensor([-1.0, 0.0, 1.0])).tolist()]
        [-0.1587, 0.0, 0.8413]
        >>> [round(v, 4) for v in gelu(Tensor([-1.0, 0.0, 1.0]), approximate="tanh").tolist()]
        [-0.1588, 0.0, 0.8412]
    """
    return x.gelu(approximate)


def silu(x: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (swish), as torch.nn.functional.silu.

        >>> [round(v, 4) for v in silu(Tensor([-1.0, 0.0, 1.0])).tolist()]
        [-0.2689, 0.0, 0.7311]
    """
    return _in_place("silu", x, x.silu(), inplace)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where positive, else x * negative_slope, as torch.nn.functional.leaky_relu.

        >>> leaky_relu(Tensor([-2.0, 3.0]), 0.5).tolist()
        [-1.0, 3.0]
    """
    return _in_place("leaky_relu", x, x.leaky_relu(negative_slope), inplace)


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where positive, else alpha * (exp(x) - 1), as torch.nn.functional.elu.

        >>> [round(v, 4) for v in elu(Tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """
    return _in_place("elu", x, x.elu(alpha), inplace)


@autocast_op
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as torch.

        >>> [round(v, 4) for v in softplus(Tensor([0.0, 30.0])).tolist()]
        [0.6931, 30.0]
    """
    return x.softplus(beta, threshold)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) elementwise, as torch.sigmoid.

        >>> sigmoid(Tensor([0.0])).tolist()
        [0.5]
    """
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent elementwise, as torch.tanh.

        >>> tanh(Tensor([0.0])).tolist()
        [0.0]
    """
    return x.tanh()


@autocast_op
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along dim (default the last; torch has no default).

        >>> [round(v, 4) for v in softmax(Tensor([0.0, 1.0, 2.0])).tolist()]
        [0.09, 0.2447, 0.6652]
        >>> [round(v, 4) for v in softmax(Tensor([[0.0, 0.0], [1.0, 1.0]]), dim=0)[:, 0].tolist()]
        [0.2689, 0.7311]
    """
    return x.softmax(dim)


@autocast_op
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along dim (default the last), computed stably.

        >>> [round(v, 4) for v in log_softmax(Tensor([0.0, 0.0])).tolist()]          # log(1/2)
        [-0.6931, -0.6931]
        >>> log_softmax(Tensor([0.0, 1000.0])).tolist()                            # no overflow
        [-1000.0, 0.0]
    """
    return x.log_softmax(dim)


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6) elementwise, as torch.nn.functional.relu6.

        >>> relu6(Tensor([-1.0, 3.0, 8.0])).tolist()
        [0.0, 3.0, 6.0]
    """
    return _in_place("relu6", x, x.hardtanh(0.0, 6.0), inplace)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val], as torch.nn.functional.hardtanh.

        >>> hardtanh(Tensor([-2.0, 0.5, 3.0]), -1.0, 2.0).tolist()
        [-1.0, 0.5, 2.0]
    """
    if min_val > max_val:
        raise ValueError(f"[nn] hardtanh: expected min_val <= max_val, got min_val={min_val}, "
                         f"max_val={max_val}")
    return _in_place("hardtanh", x, x.hardtanh(min_val, max_val), inplace)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """clamp(x / 6 + 1/2, 0, 1) elementwise, as torch.nn.functional.hardsigmoid.

        >>> hardsigmoid(Tensor([-4.0, 0.0, 4.0])).tolist()
        [0.0, 0.5, 1.0]
    """
    return _in_place("hardsigmoid", x, x.hardsigmoid(), inplace)


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """x * hardsigmoid(x) elementwise, as torch.nn.functional.hardswish.

        >>> hardswish(Tensor([-4.0, 0.0, 4.0])).tolist()
        [-0.0, 0.0, 4.0]
    """
    return _in_place("hardswish", x, x.hardswish(), inplace)


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with torch's constants (alpha 1.6733, scale 1.0507).

        >>> [round(v, 4) for v in selu(Tensor([-1.0, 2.0])).tolist()]
        [-1.1113, 2.1014]
    """
    return _in_place("selu", x, x.selu(), inplace)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where positive, else alpha * (exp(x / alpha) - 1), as torch.nn.functional.celu.

        >>> [round(v, 4) for v in celu(Tensor([-1.0, 2.0]), alpha=2.0).tolist()]
        [-0.7869, 2.0]
    """
    if alpha == 0:
        raise ValueError("[nn] celu: expected a nonzero alpha (it divides x), got 0")
    return _in_place("celu", x, x.celu(alpha), inplace)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x)) elementwise, as torch.nn.functional.mish.

        >>> [round(v, 4) for v in mish(Tensor([-1.0, 2.0])).tolist()]
        [-0.3034, 1.944]
    """
    return _in_place("mish", x, x.mish(), inplace)


def logsigmoid(x: Tensor) -> Tensor:
    """log(sigmoid(x)) elementwise, computed as min(x, 0) - log1p(exp(-|x|)) so that neither large
    positive nor large negative x loses precision (torch.nn.functional.logsigmoid).

        >>> [round(v, 4) for v in logsigmoid(Tensor([-200.0, 0.0, 30.0])).tolist()]
        [-200.0, -0.6931, -0.0]
    """
    _check_float("logsigmoid", x)
    return x.minimum(0.0) - (-x.abs()).exp().log1p()


def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|) elementwise, as torch.nn.functional.softsign.

        >>> softsign(Tensor([-3.0, 0.0, 1.0])).tolist()
        [-0.75, 0.0, 0.5]
    """
    return x / (1 + x.abs())


def tanhshrink(x: Tensor) -> Tensor:
    """x - tanh(x) elementwise, as torch.nn.functional.tanhshrink.

        >>> tanhshrink(Tensor([0.0])).tolist()
        [0.0]
    """
    return x - x.tanh()


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """The gated linear unit: a * sigmoid(b), where a and b are the two halves of x along dim.

        >>> glu(Tensor([[1.0, 2.0, 0.0, 0.0]])).tolist()
        [[0.5, 1.0]]
    """
    if x.ndim == 0:
        raise ValueError("[nn] glu: expected a tensor with at least one dim to halve, got a 0-d tensor")
    d = dim % x.ndim if -x.ndim <= dim < x.ndim else dim
    if not 0 <= d < x.ndim:
        raise IndexError(f"[nn] glu: dim {dim} is out of range for a tensor of shape {x.shape}")
    if x.shape[d] % 2:
        raise ValueError(f"[nn] glu: expected an even size along dim {dim} (it is halved), got shape "
                         f"{x.shape}")
    a, b = x.chunk(2, d)
    return a * b.sigmoid()


@autocast_op
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias, with weight (out_features, in_features), as torch.nn.functional.linear.

        >>> linear(Tensor([[1.0]]), Tensor([[2.0]]), Tensor([0.5])).item()
        2.5
    """
    return x.linear(weight, bias)


def _einsum_labels(equation: str, term: str) -> list[str]:
    head, dots, tail = term.partition("...")
    if not all(c.isalpha() for c in head + tail):
        raise ValueError(f"[nn] einsum: expected letters and at most one '...' per term, got {term!r} in "
                         f"{equation!r}")
    return list(head) + (["..."] if dots else []) + list(tail)


def _einsum_parse(equation: str, operands: tuple[Tensor, ...]) -> tuple[list[list[str]], list[str]]:
    """Each operand's labels and the output's, with '...' spread into labels of its own ('...0', ...),
    aligned from the right so those dims broadcast as in numpy."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = [_einsum_labels(equation, t) for t in lhs.split(",")]
    if len(terms) != len(operands):
        raise ValueError(f"[nn] einsum: {equation!r} has {len(terms)} terms, got {len(operands)} operands")
    widths = []
    for labels, t in zip(terms, operands):
        width = t.ndim - len(labels) + ("..." in labels)
        if width < 0 or (width and "..." not in labels):
            raise ValueError(f"[nn] einsum: term {''.join(labels)!r} of {equation!r} does not fit an operand "
                             f"of shape {t.shape}")
        widths.append(width)
    dots = [f"...{i}" for i in range(max(widths, default=0))]

    def spread(labels: list[str], width: int) -> list[str]:
        if "..." not in labels:
            return labels
        at = labels.index("...")
        return labels[:at] + dots[len(dots) - width:] + labels[at + 1:]

    terms = [spread(labels, w) for labels, w in zip(terms, widths)]
    seen = [label for labels in terms for label in labels]
    if not arrow:
        return terms, dots + sorted(c for c in set(seen) if seen.count(c) == 1 and not c.startswith("..."))
    out = spread(_einsum_labels(equation, rhs), len(dots))
    if len(set(out)) != len(out) or not set(out) <= set(seen):
        raise ValueError(f"[nn] einsum: expected output labels that are distinct and appear in an input, "
                         f"got {rhs!r} in {equation!r}")
    return terms, out


def _einsum_reduce(equation: str, labels: list[str], t: Tensor, keep: set[str]) -> tuple[list[str], Tensor]:
    """Take the diagonal of each label repeated in one operand, then sum the labels not in `keep`."""
    while len(set(labels)) < len(labels):
        dup = next(c for c in labels if labels.count(c) > 1)
        a = labels.index(dup)
        b = labels.index(dup, a + 1)
        if t.shape[a] != t.shape[b]:
            raise ValueError(f"[nn] einsum: label {dup!r} of {equation!r} has sizes {t.shape[a]} and "
                             f"{t.shape[b]} in one operand")
        t = t.diagonal(0, a, b)
        labels = [c for k, c in enumerate(labels) if k not in (a, b)] + [dup]
    alone = tuple(k for k, c in enumerate(labels) if c not in keep)
    if alone:
        t = t.sum(alone, dtype=t.dtype)
        labels = [c for c in labels if c in keep]
    return labels, t


@autocast_op
def einsum(equation: str, *operands: Tensor) -> Tensor:
    """Sum of products over the labelled dims, as torch.einsum: 'ij,jk->ik' is a matmul; without '->' the
    output is '...' and then the labels seen once, in alphabetical order. A label repeated in one operand
    takes its diagonal ('ii->i', 'ii->' the trace); '...' stands for broadcast dims.

        >>> a, b = Tensor([[1, 2], [3, 4]]), Tensor([[5, 6], [7, 8]])
        >>> einsum("ij,jk->ik", a, b).tolist(), einsum("ii", a).item(), einsum("ij->ji", a).tolist()
        ([[19, 22], [43, 50]], 5, [[1, 3], [2, 4]])
        >>> einsum("...ij,j", Tensor.ones(2, 3, 4), Tensor.ones(4)).shape
        (2, 3)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not all(isinstance(t, Tensor) for t in operands):
        raise TypeError(f"[nn] einsum: expected Tensor operands, got {[type(t).__name__ for t in operands]}")
    terms, out = _einsum_parse(equation, operands)
    xs = []
    for i, (labels, t) in enumerate(zip(terms, operands)):
        # a label no other operand has and the output lacks is summed before any product
        keep = set(out).union(*(ls for j, ls in enumerate(terms) if j != i))
        xs.append(_einsum_reduce(equation, labels, t, keep))
    order = out + sorted({c for labels, _ in xs for c in labels} - set(out))
    sizes: dict[str, int] = {}
    for labels, t in xs:
        for c, s in zip(labels, t.shape):
            if sizes.get(c, 1) not in (1, s) and s != 1:
                raise ValueError(f"[nn] einsum: label {c!r} of {equation!r} has sizes {sizes[c]} and {s}")
            if sizes.get(c, 1) == 1:       # 1 broadcasts to any size, 0 included (max would keep the 1)
                sizes[c] = s
    product: Tensor | None = None
    for labels, t in xs:                           # each operand laid out in `order`, 1 for a missing label
        ranked = sorted(labels, key=order.index)
        t = t.permute(tuple(labels.index(c) for c in ranked)) if labels else t
        t = t.reshape(tuple(t.shape[ranked.index(c)] if c in ranked else 1 for c in order))
        product = t if product is None else product * t
    assert product is not None
    if len(order) > len(out):
        product = product.sum(tuple(range(len(out), len(order))), dtype=product.dtype)
    return product.expand(tuple(sizes.get(c, 1) for c in out))

def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
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
    return _in_place("dropout", x, kept if p == 1.0 else kept * (1.0 / (1.0 - p)), inplace)


def dropout2d(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero whole channels of (N, C, H, W) or (C, H, W) with probability p and scale the kept ones by
    1/(1-p); the identity if not training, as torch.nn.functional.dropout2d.

        >>> y = dropout2d(Tensor.ones(2, 8, 3, 3), p=0.5).reshape(16, 9)     # a row per channel
        >>> bool((y.amax(1) == y.amin(1)).all()), set(y.reshape(-1).tolist()) <= {0.0, 2.0}
        (True, True)
    """
    _check_p("dropout2d", p)
    if x.ndim not in (3, 4):
        raise ValueError(f"[nn] dropout2d: expected input of shape (N, C, H, W) or (C, H, W), got {x.shape}")
    if not training or p == 0.0:
        return x
    keep = Tensor.rand(*x.shape[:-2], 1, 1, device=x.device) >= p         # one draw per channel
    kept = keep.where(x, 0)
    return kept if p == 1.0 else kept * (1.0 / (1.0 - p))


@autocast_op
def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along dim, as torch.nn.functional.normalize.

        >>> [round(v, 4) for v in normalize(Tensor([[3.0, 4.0]]))[0].tolist()]
        [0.6, 0.8]
    """
    _check_float("normalize", x)
    # below eps the norm is clamped: its gradient is 0 there (a zero vector's is then grad / eps)
    return x / x.norm(p, dim, keepdim=True).clamp(min=eps)


@autocast_op
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between x1 and x2 along dim, broadcasting the two: as torch, each is
    divided by its own 2-norm (at least eps) before the dot product, so the result stays in [-1, 1].

        >>> cos = cosine_similarity(Tensor([[1.0, 0.0], [1.0, 1.0]]), Tensor([[2.0, 0.0], [-1.0, -1.0]]))
        >>> [round(v, 4) for v in cos.tolist()]
        [1.0, -1.0]
    """
    _check_float("cosine_similarity", x1, "x1")
    _check_float("cosine_similarity", x2, "x2")
    shape = _broadcast_pair("cosine_similarity", x1, x2)
    x1, x2 = x1.expand(*shape), x2.expand(*shape)
    n1 = x1.norm(2, dim, keepdim=True).clamp(min=eps)
    n2 = x2.norm(2, dim, keepdim=True).clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """The p-norm of x1 - x2 + eps over the last dim, broadcasting the two (torch adds eps to keep the
    gradient finite where x1 == x2).

        >>> [round(v, 4) for v in pairwise_distance(Tensor([[0.0, 0.0]]), Tensor([[3.0, 4.0]])).tolist()]
        [5.0]
    """
    _check_float("pairwise_distance", x1, "x1")
    _check_float("pairwise_distance", x2, "x2")
    _broadcast_pair("pairwise_distance", x1, x2)
    return (x1 - x2 + eps).norm(p, -1, keepdim)


def _broadcast_pair(op: str, x1: Tensor, x2: Tensor) -> tuple[int, ...]:
    try:
        return broadcast_shape(x1.shape, x2.shape)
    except ValueError:
        raise ValueError(f"[nn] {op}: expected x1 and x2 to broadcast together, got {x1.shape} and "
                         f"{x2.shape}") from None


def one_hot(x: Tensor, num_classes: int = -1) -> Tensor:
    """Class indices (*) -> int64 (*, num_classes) with a 1 at each index; num_classes=-1 takes the largest
    index + 1 (which reads the indices back to the host), as torch.nn.functional.one_hot.

        >>> one_hot(Tensor([0, 2])).tolist()
        [[1, 0, 0], [0, 0, 1]]
        >>> one_hot(Tensor([1]), num_classes=4).tolist()
        [[0, 1, 0, 0]]
    """
    if not isinstance(x, Tensor) or not x.dtype.is_int:
        got = x.dtype.name if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"[nn] one_hot: expected an integer index Tensor, got {got}; fix: .long()")
    if num_classes == -1:
        num_classes = int(x.max().item()) + 1 if x.numel() else 0
    if num_classes < 0:
        raise ValueError(f"[nn] one_hot: expected num_classes >= 0 or -1 (inferred), got {num_classes}")
    _check_known_range("one_hot", x, num_classes, None)
    return (as_index(x).unsqueeze(-1) == index_range(num_classes, x.device)).cast(dtypes.int64)


# ---------------------------------------------------------------- padding, convolution and pooling

_SPATIAL_NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


def _ntuple(op: str, name: str, value: int | Sequence[int], n: int) -> tuple[int, ...]:
    """An int for every one of n spatial dims: one int for all, or n of them."""
    values = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    if len(values) != n or not all(isinstance(v, (int, np.integer)) for v in values):
        what = {1: "a 1-tuple of ints", 2: "a pair of ints"}.get(n, f"{n} ints")
        raise ValueError(f"[nn] {op}: expected {name} to be an int or {what}, got {value!r}")
    return tuple(int(v) for v in values)


def _one(op: str, name: str, value: int | Sequence[int]) -> int:
    return _ntuple(op, name, value, 1)[0]


def _pair(op: str, name: str, value: int | Sequence[int]) -> tuple[int, int]:
    first, second = _ntuple(op, name, value, 2)
    return first, second


def _triple(op: str, name: str, value: int | Sequence[int]) -> tuple[int, int, int]:
    first, second, third = _ntuple(op, name, value, 3)
    return first, second, third


def _check_spatial(op: str, x: Tensor, nsp: int) -> None:
    """x is (N, C, *spatial) or (C, *spatial) with nsp spatial dims."""
    if not isinstance(x, Tensor):
        raise TypeError(f"[nn] {op}: expected input to be a Tensor, got {type(x).__name__}")
    if x.ndim not in (nsp + 1, nsp + 2):
        dims = ", ".join(_SPATIAL_NAMES[nsp])
        raise ValueError(f"[nn] {op}: expected input of shape (N, C, {dims}) or (C, {dims}), got {x.shape}")


def _check_image(op: str, x: Tensor) -> None:
    _check_spatial(op, x, 2)


def _check_signal(op: str, x: Tensor) -> None:
    _check_spatial(op, x, 1)


def _take(x: Tensor, axis: int, lo: int, hi: int) -> Tensor:
    """x[..., lo:hi, ...] along `axis`, as a view."""
    return x.shrink(tuple((lo, hi) if i == axis else None for i in range(x.ndim)))


def _pad_axis(x: Tensor, axis: int, lo: int, hi: int, mode: str) -> Tensor:
    """Pad dim `axis` by lo before and hi after with reflect, replicate or circular values, from slices, flips
    and a cat (views, so gradients flow back to the elements copied). Negative sizes cut, as torch: after
    the padding for reflect and replicate, before it for circular."""
    n = x.shape[axis]
    if mode == "circular":
        x = _take(x, axis, max(0, -lo), n - max(0, -hi))
        n = x.shape[axis]
        if max(lo, hi) > n:
            raise ValueError(f"[nn] pad: circular padding ({lo}, {hi}) wraps around dim {axis} of size {n} "
                             f"more than once; fix: pad at most the dim size on each side")
        parts = [_take(x, axis, n - lo, n)] if lo > 0 else []
        parts += [x] + ([_take(x, axis, 0, hi)] if hi > 0 else [])
        return parts[0].cat(*parts[1:], dim=axis)

    def edge(at: int, width: int) -> Tensor:         # `width` copies of element `at`
        shape = list(x.shape)
        shape[axis] = width
        return _take(x, axis, at, at + 1).expand(tuple(shape))
    parts = []
    if lo > 0:
        parts.append(_take(x, axis, 1, lo + 1).flip(axis) if mode == "reflect" else edge(0, lo))
    parts.append(x)
    if hi > 0:
        parts.append(_take(x, axis, n - 1 - hi, n - 1).flip(axis) if mode == "reflect" else edge(n - 1, hi))
    out = parts[0].cat(*parts[1:], dim=axis)
    return _take(out, axis, max(0, -lo), out.shape[axis] - max(0, -hi))


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last len(pad) // 2 dims, last dim first: (left, right, top, bottom, ...), as torch F.pad.
    mode 'constant' fills with value (0 by default) for any number of dims; 'reflect' mirrors without
    repeating the edge, 'replicate' repeats the edge and 'circular' wraps around, for the last 1, 2 or 3
    dims of a (N, C, *spatial) or (C, *spatial) input. Negative sizes cut.

        >>> pad(Tensor([[1, 2]]), (1, 0, 0, 1), value=7).tolist()
        [[7, 1, 2], [7, 7, 7]]
        >>> x = Tensor([[[1, 2, 3]]])
        >>> [pad(x, (2, 1), mode).tolist()[0][0] for mode in ("reflect", "replicate", "circular")]
        [[3, 2, 1, 2, 3, 2], [1, 1, 1, 2, 3, 3], [2, 3, 1, 2, 3, 1]]
    """
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"[nn] pad: mode={mode!r} is not supported; expected 'constant', "
                                  f"'reflect', 'replicate' or 'circular'")
    flat = [int(v) for v in pad]
    if len(flat) % 2 or len(flat) // 2 > x.ndim:
        raise ValueError(f"[nn] pad: expected (before, after) pairs for at most {x.ndim} dims, last dim "
                         f"first, got {tuple(pad)}")
    if mode == "constant":
        return x.pad(flat, value=0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"[nn] pad: mode={mode!r} takes no value, got value={value}; fix: drop it, or use "
                         f"mode='constant'")
    nsp = len(flat) // 2
    if nsp not in (1, 2, 3) or x.ndim not in (nsp + 1, nsp + 2):
        raise ValueError(f"[nn] pad: mode={mode!r} pads the last 1, 2 or 3 dims of a (N, C, *spatial) or "
                         f"(C, *spatial) input, so {len(flat)} sizes need a {nsp + 1}-d or {nsp + 2}-d "
                         f"input, got {x.shape}")
    for i in range(nsp):
        lo, hi, n = flat[2 * i], flat[2 * i + 1], x.shape[-1 - i]
        if mode == "reflect" and max(lo, hi) >= n:
            raise ValueError(f"[nn] pad: reflect padding ({lo}, {hi}) of dim {x.ndim - 1 - i} needs each "
                             f"side less than the dim size {n} (input {x.shape}); fix: pad less, or use "
                             f"mode='replicate'")
    for i in range(nsp):
        x = _pad_axis(x, x.ndim - 1 - i, flat[2 * i], flat[2 * i + 1], mode)
    return x


def _conv_pads(op: str, padding: int | Sequence[int] | str, kernel: tuple[int, ...], stride: tuple[int, ...],
               dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(before, after) padding of each spatial dim; 'same' puts the odd pixel after, as torch."""
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise ValueError(f"[nn] {op}: expected padding 'valid', 'same' or ints, got {padding!r}")
        if padding == "valid":
            return ((0, 0),) * len(kernel)
        if any(s != 1 for s in stride):
            raise ValueError(f"[nn] {op}: padding='same' needs stride 1, got stride={stride}; "
                             f"fix: give the padding as ints")
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in _ntuple(op, "padding", padding, len(kernel)))


@autocast_op
def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """2-d cross-correlation of (N, C_in, H, W) or (C_in, H, W) with weight (C_out, C_in/groups, kh, kw), as
    torch.nn.functional.conv2d; padding is ints, 'valid' or 'same' (stride 1).

        >>> x = Tensor.arange(9).reshape(1, 1, 3, 3).float()
        >>> conv2d(x, Tensor.ones(1, 1, 2, 2)).tolist()
        [[[[8.0, 12.0], [20.0, 24.0]]]]
        >>> conv2d(x[0], Tensor.ones(2, 1, 3, 3), padding="same").shape
        (2, 3, 3)
    """
    op = "conv2d"
    _check_image(op, x)
    if weight.ndim != 4 or x.shape[-3] != weight.shape[1] * groups:
        raise ValueError(f"[nn] {op}: expected weight (C_out, C_in/groups, kh, kw) with C_in={x.shape[-3]} "
                         f"and groups={groups}, got weight {weight.shape}")
    kernel = (weight.shape[2], weight.shape[3])
    stride_, dilation_ = _pair(op, "stride", stride), _pair(op, "dilation", dilation)
    pad_h, pad_w = _conv_pads(op, padding, kernel, stride_, dilation_)
    for size, (lo, hi), k, d, axis in zip(x.shape[-2:], (pad_h, pad_w), kernel, dilation_, "HW"):
        span = d * (k - 1) + 1
        if size + lo + hi < span:
            raise ValueError(f"[nn] {op}: expected input {axis} of at least {span - lo - hi} for "
                             f"kernel {k} (dilation {d}, padding {lo}+{hi}), got {size}")
    batched = x if x.ndim == 4 else x.unsqueeze(0)                        # (N, C_in, H, W)
    batched = batched.pad(((0, 0), (0, 0), pad_h, pad_w))
    out = batched.conv2d(weight, bias, stride_, 0, dilation_, groups)
    return out if x.ndim == 4 else out.squeeze(0)                         # (N, C_out, H', W')


@autocast_op
def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """1-d cross-correlation of (N, C_in, L) or (C_in, L) with weight (C_out, C_in/groups, k), as
    torch.nn.functional.conv1d: conv2d over a height of 1.

        >>> conv1d(Tensor([[[1.0, 2.0, 3.0, 4.0]]]), Tensor([[[1.0, -1.0]]])).tolist()
        [[[-1.0, -1.0, -1.0]]]
    """
    op = "conv1d"
    _check_signal(op, x)
    if weight.ndim != 3 or x.shape[-2] != weight.shape[1] * groups:
        raise ValueError(f"[nn] {op}: expected weight (C_out, C_in/groups, k) with C_in={x.shape[-2]} and "
                         f"groups={groups}, got weight {weight.shape}")
    padding_ = padding if isinstance(padding, str) else (0, _one(op, "padding", padding))
    out = conv2d(x.unsqueeze(-2), weight.unsqueeze(-2), bias, (1, _one(op, "stride", stride)), padding_,
                 (1, _one(op, "dilation", dilation)), groups)
    return out.squeeze(-2)


def _conv_transpose(op: str, x: Tensor, weight: Tensor, bias: Tensor | None, nsp: int,
                    stride: int | Sequence[int], padding: int | Sequence[int],
                    output_padding: int | Sequence[int], groups: int,
                    dilation: int | Sequence[int]) -> Tensor:
    """conv_transpose1d/2d/3d. 2-d: fused.ConvTranspose2d (conv2d's adjoint: one contraction over the
    input channels, then each window position added back where it lies). Otherwise strided: one
    stride-1 conv per output phase (_transpose_by_phases); else zeros between the input pixels, padding
    for a full correlation, then the forward convolution with the taps reversed."""
    _check_spatial(op, x, nsp)
    cin = x.shape[-nsp - 1]
    if weight.ndim != nsp + 2 or cin != weight.shape[0] or groups < 1 or cin % groups:
        taps = ", ".join(f"k{a.lower()}" for a in _SPATIAL_NAMES[nsp])
        raise ValueError(f"[nn] {op}: expected weight (C_in, C_out/groups, {taps}) with C_in="
                         f"{x.shape[-nsp - 1]} divisible by groups={groups}, got weight {weight.shape}")
    stride_, dilation_ = _ntuple(op, "stride", stride, nsp), _ntuple(op, "dilation", dilation, nsp)
    padding_ = _ntuple(op, "padding", padding, nsp)
    out_pad = _ntuple(op, "output_padding", output_padding, nsp)
    kernel = weight.shape[2:]
    if min(stride_) < 1 or min(dilation_) < 1 or min(padding_) < 0:
        raise ValueError(f"[nn] {op}: expected positive stride and dilation and padding >= 0, got stride="
                         f"{stride_}, dilation={dilation_}, padding={padding_}")
    batched = x if x.ndim == nsp + 2 else x.unsqueeze(0)                 # (N, C_in, *spatial)
    n, cin, *spatial = batched.shape
    for size, k, s, p, o, d, axis in zip(spatial, kernel, stride_, padding_, out_pad, dilation_,
                                         _SPATIAL_NAMES[nsp]):
        if not 0 <= o < max(s, d):
            raise ValueError(f"[nn] {op}: expected output_padding in [0, max(stride, dilation)) = "
                             f"[0, {max(s, d)}) along {axis}, got {o}")
        if (size - 1) * s - 2 * p + d * (k - 1) + o + 1 < 1:
            raise ValueError(f"[nn] {op}: padding {p} leaves no output along {axis} (input {size}, "
                             f"kernel {k}, stride {s}); fix: lower the padding")
    if nsp == 2 and batched._fusable_with(weight, bias) and batched.numel() > 0 and weight.numel() > 0 \
            and all(o < s for o, s in zip(out_pad, stride_)):
        # as conv2d's adjoint (fused.ConvTranspose2d); its backward is that conv2d, whose output is x's size
        # exactly when output_padding stays below the stride (it may reach the dilation)
        size = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1
                     for i, s, p, d, k, o in zip(spatial, stride_, padding_, dilation_, kernel, out_pad))
        out = apply(fused.ConvTranspose2d, batched, weight, *([bias] if bias is not None else []),
                    stride=stride_, padding=padding_, dilation=dilation_, groups=groups, out_size=size)
        return out if x.ndim == nsp + 2 else out.squeeze(0)
    if max(stride_) > 1 and max(dilation_) == 1:
        out = _transpose_by_phases(batched, weight, bias, stride_, padding_, out_pad, groups)
        return out if x.ndim == nsp + 2 else out.squeeze(0)
    # the zeros the forward stride skipped: each pixel becomes an s x s block, itself at the top left
    up = batched.reshape(n, cin, *(v for i in spatial for v in (i, 1)))
    up = up.pad(((0, 0), (0, 0)) + tuple(v for s in stride_ for v in ((0, 0), (0, s - 1))))
    up = up.reshape(n, cin, *(i * s for i, s in zip(spatial, stride_)))
    up = up.shrink((None, None) + tuple((0, (i - 1) * s + 1) for i, s in zip(spatial, stride_)))
    # a full correlation pads k - 1 dilated taps on each side; padding takes from both, output_padding adds
    grow, cut = [(0, 0), (0, 0)], [(0, n), (0, cin)]
    for size, k, s, p, o, d in zip(spatial, kernel, stride_, padding_, out_pad, dilation_):
        lo, hi = d * (k - 1) - p, d * (k - 1) - p + o
        grow.append((max(0, lo), max(0, hi)))
        padded = (size - 1) * s + 1 + max(0, lo) + max(0, hi)
        cut.append((max(0, -lo), padded - max(0, -hi)))
    up = up.pad(tuple(grow)).shrink(tuple(cut))
    flipped = _swapped(weight, groups).flip(*range(2, 2 + nsp))       # taps reversed
    forward = {1: conv1d, 2: conv2d, 3: conv3d}[nsp]
    out = forward(up, flipped, bias, 1, 0, dilation_, groups)
    return out if x.ndim == nsp + 2 else out.squeeze(0)                  # (N, C_out, *spatial')


def _swapped(weight: Tensor, groups: int) -> Tensor:
    """A transposed conv's weight (C_in, C_out/g, *k) as a conv's (C_out, C_in/g, *k), per group."""
    cin, cout_g, *kernel = weight.shape
    nsp = len(kernel)
    return weight.reshape(groups, cin // groups, cout_g, *kernel).permute(0, 2, 1, *range(3, 3 + nsp)) \
        .reshape(groups * cout_g, cin // groups, *kernel)


def _transpose_by_phases(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple[int, ...],
                         padding: tuple[int, ...], out_pad: tuple[int, ...], groups: int) -> Tensor:
    """A strided transposed conv (no dilation) as stride-1 convs, one per output phase: along a dim of
    stride s the full output f = i s + t (input i, tap t) splits by r = f mod s into y_r[q] = sum_m
    x[q - m] w[r + s m], a correlation of x padded by M_r - 1 with the taps r, r + s, ... reversed
    (M_r of them). The phases interleave into the full output, cut by the padding (zeros past it for
    output_padding). Every multiply is one the result needs: zero-stuffing the input instead multiplies
    zeros s^d - 1 times in s^d (DCGAN's stride-2 4x4 layers: 3 in 4)."""
    n, _, *spatial = x.shape
    nsp = len(spatial)
    kernel = weight.shape[2:]
    conv = {1: conv1d, 2: conv2d, 3: conv3d}[nsp]
    swapped = _swapped(weight, groups)
    cout = swapped.shape[0]
    longest = [i + -(-k // s) - 1 for i, k, s in zip(spatial, kernel, stride)]     # phase 0's length
    phases = []
    for r in itertools.product(*(range(s) for s in stride)):
        taps = [len(range(ri, k, s)) for ri, k, s in zip(r, kernel, stride)]
        if min(taps) == 0:               # a stride wider than the kernel: this phase has no taps
            phases.append(Tensor.zeros(n, cout, *longest, dtype=x.dtype, device=x.device))
            continue
        sub = swapped[(slice(None), slice(None)) + tuple(slice(ri, None, s) for ri, s in zip(r, stride))]
        y = conv(x, sub.flip(*range(2, 2 + nsp)), None, 1, tuple(m - 1 for m in taps), 1, groups)
        phases.append(y.pad(((0, 0), (0, 0)) + tuple((0, q - y.shape[2 + d]) for d, q in enumerate(longest))))
    woven = Tensor.stack(phases, dim=2).reshape(n, cout, *stride, *longest)
    woven = woven.permute(0, 1, *(a for d in range(nsp) for a in (2 + nsp + d, 2 + d)))
    full = woven.reshape(n, cout, *(q * s for q, s in zip(longest, stride)))
    sizes = [(i - 1) * s - 2 * p + k + o for i, s, p, k, o in zip(spatial, stride, padding, kernel, out_pad)]
    cut = tuple((-p, p + size - f) for p, size, f in zip(padding, sizes, full.shape[2:]))
    # stored once, as cut: read through the phases' interleaving, every reader (a bias, a norm's
    # statistics and its normalization) would pick each element from four buffers through masks, and
    # from the uncut weave its rows (8 of every 10 for DCGAN's 8 x 8 layer) would not fill a vector
    out = full.pad(((0, 0), (0, 0)) + cut).contiguous()
    return out if bias is None else out + bias.reshape(1, cout, *([1] * nsp))


@autocast_op
def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0,
                     groups: int = 1, dilation: int | Sequence[int] = 1) -> Tensor:
    """The transpose (gradient) of conv2d, as torch.nn.functional.conv_transpose2d: input (N, C_in, H, W) or
    (C_in, H, W), weight (C_in, C_out/groups, kh, kw); the output is
    (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1 high, and as wide.

        >>> conv_transpose2d(Tensor([[[[1.0, 2.0]]]]), Tensor.ones(1, 1, 1, 2), stride=2).tolist()
        [[[[1.0, 1.0, 2.0, 2.0]]]]
        >>> conv_transpose2d(Tensor.ones(2, 3, 5, 5), Tensor.ones(3, 4, 3, 3), stride=2, padding=1,
        ...                  output_padding=1).shape
        (2, 4, 10, 10)
    """
    return _conv_transpose("conv_transpose2d", x, weight, bias, 2, stride, padding, output_padding, groups,
                           dilation)


@autocast_op
def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0,
                     groups: int = 1, dilation: int | Sequence[int] = 1) -> Tensor:
    """The transpose of conv1d, as torch.nn.functional.conv_transpose1d: input (N, C_in, L) or (C_in, L),
    weight (C_in, C_out/groups, k).

        >>> conv_transpose1d(Tensor([[[1.0, 2.0]]]), Tensor([[[1.0, 1.0, 1.0]]]), stride=2).tolist()
        [[[1.0, 1.0, 3.0, 2.0, 2.0]]]
    """
    return _conv_transpose("conv_transpose1d", x, weight, bias, 1, stride, padding, output_padding, groups,
                           dilation)


@autocast_op
def conv_transpose3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0,
                     groups: int = 1, dilation: int | Sequence[int] = 1) -> Tensor:
    """The transpose of conv3d, as torch.nn.functional.conv_transpose3d: input (N, C_in, D, H, W) or
    (C_in, D, H, W), weight (C_in, C_out/groups, kd, kh, kw); each output dim is
    (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.

        >>> conv_transpose3d(Tensor.ones(1, 2, 2, 3, 3), Tensor.ones(2, 4, 2, 2, 2), stride=2).shape
        (1, 4, 4, 6, 6)
    """
    return _conv_transpose("conv_transpose3d", x, weight, bias, 3, stride, padding, output_padding, groups,
                           dilation)


@autocast_op
def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """3-d cross-correlation of (N, C_in, D, H, W) or (C_in, D, H, W) with weight (C_out, C_in/groups, kd, kh,
    kw), as torch.nn.functional.conv3d (padding ints, 'valid' or 'same'): a sum of conv2d over the depth taps.

        >>> conv3d(Tensor.ones(1, 1, 3, 4, 4), Tensor.ones(2, 1, 2, 2, 2)).shape
        (1, 2, 2, 3, 3)
        >>> conv3d(Tensor.ones(1, 3, 4, 4), Tensor.ones(2, 1, 3, 3, 2), padding="same").shape
        (2, 3, 4, 4)
    """
    op = "conv3d"
    _check_spatial(op, x, 3)
    if weight.ndim != 5 or x.shape[-4] != weight.shape[1] * groups:
        raise ValueError(f"[nn] {op}: expected weight (C_out, C_in/groups, kd, kh, kw) with "
                         f"C_in={x.shape[-4]} and groups={groups}, got weight {weight.shape}")
    (sd, *st), (dd, *dl) = _triple(op, "stride", stride), _triple(op, "dilation", dilation)
    pads = _conv_pads(op, padding, weight.shape[2:], (sd, *st), (dd, *dl))
    batched = x if x.ndim == 5 else x.unsqueeze(0)
    xp = batched.pad(((0, 0), (0, 0)) + pads)                            # (N, C_in, D, H, W)
    n, cin, depth, h, w = xp.shape
    kd = weight.shape[2]
    out_d = (depth - dd * (kd - 1) - 1) // sd + 1
    if out_d < 1:
        raise ValueError(f"[nn] {op}: expected input D of at least {dd * (kd - 1) + 1 - sum(pads[0])} for "
                         f"kernel {kd} (dilation {dd}, padding {pads[0]}), got {x.shape[-3]}")
    out: Tensor | None = None
    for z in range(kd):
        start = z * dd
        taps = xp[:, :, start:start + (out_d - 1) * sd + 1:sd]                 # (N, C_in, D', H, W)
        frames = taps.permute(0, 2, 1, 3, 4).reshape(n * out_d, cin, h, w)
        part = frames.conv2d(weight[:, :, z], None, tuple(st), 0, tuple(dl), groups)   # (N*D', C_out, H', W')
        out = part if out is None else out + part
    assert out is not None
    cout, oh, ow = out.shape[1:]
    out = out.reshape(n, out_d, cout, oh, ow).permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + bias.reshape(1, cout, 1, 1, 1)
    return out if x.ndim == 5 else out.squeeze(0)


def _pool_pads(op: str, x: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
               dilation: tuple[int, ...], ceil_mode: bool) -> tuple[tuple[int, int], ...]:
    """(before, after) padding of each spatial dim: padding on both sides, plus what ceil_mode's last window
    reads past it. As torch, a ceil_mode window must start inside the input or the left padding."""
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"[nn] {op}: expected positive kernel_size, stride and dilation, got kernel_size="
                         f"{kernel}, stride={stride}, dilation={dilation}")
    pads = []
    nsp = len(kernel)
    for size, k, s, p, d, axis in zip(x.shape[-nsp:], kernel, stride, padding, dilation, _SPATIAL_NAMES[nsp]):
        span = d * (k - 1) + 1
        if p < 0 or p > span // 2:
            raise ValueError(f"[nn] {op}: expected padding in [0, {span // 2}] (half the kernel) for kernel "
                             f"{k}, got {p} along {axis}")
        room = size + 2 * p - span
        out = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        if out < 1:     # ceil_mode keeps one partial window of an input smaller than the kernel, as torch
            raise ValueError(f"[nn] {op}: expected input {axis} of at least {span - 2 * p} for kernel {k} "
                             f"(dilation {d}, padding {p}{', ceil_mode' if ceil_mode else ''}), got {size}")
        pads.append((p, p + max(0, (out - 1) * s + span - size - 2 * p)))
    return tuple(pads)


def _pool_args(op: str, x: Tensor, nsp: int, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None,
               padding: int | Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """kernel, stride (the kernel when None or [], as torch) and padding of an nsp-d pool, checked."""
    _check_spatial(op, x, nsp)
    kernel = _ntuple(op, "kernel_size", kernel_size, nsp)
    stride_ = kernel if stride is None or stride == [] else _ntuple(op, "stride", stride, nsp)
    return kernel, stride_, _ntuple(op, "padding", padding, nsp)


def _first_index(hit: Tensor, candidates: Tensor) -> Tensor:
    """candidates[first True of hit] along the last dim: torch's tie rule, the first max in scan order."""
    n = hit.shape[-1]
    first = hit.argmax(-1, keepdim=True)                                 # (..., 1)
    return (first == index_range(n, hit.device)).where(candidates, 0).sum(-1).cast(dtypes.int64)


def _max_pool(op: str, x: Tensor, nsp: int, kernel_size: int | Sequence[int],
              stride: int | Sequence[int] | None, padding: int | Sequence[int], dilation: int | Sequence[int],
              ceil_mode: bool, return_indices: bool) -> Tensor | tuple[Tensor, Tensor]:
    """max_pool1d/2d/3d: a window view (Tensor.sliding_windows) of the input padded with the dtype's
    minimum."""
    kernel, stride_, padding_ = _pool_args(op, x, nsp, kernel_size, stride, padding)
    dilation_ = _ntuple(op, "dilation", dilation, nsp)
    pads = _pool_pads(op, x, kernel, stride_, padding_, dilation_, ceil_mode)
    lead = ((0, 0),) * (x.ndim - nsp)
    if return_indices or x.requires_grad:   # windows compared with their max: copies of one computation
        x = x._stored()
    windows = x.pad(lead + pads, value=min_value(x.dtype)).sliding_windows(kernel, stride_, dilation_)
    # windows: (..., *out, *kernel)
    if not return_indices:
        return windows.amax(tuple(range(-nsp, 0)))
    # each position's flat index in its (N, C) plane, read through the same windows; padding reads -1
    spatial = x.shape[-nsp:]
    plane = index_range(math.prod(spatial), x.device).reshape(spatial).pad(pads, value=-1)
    plane = plane.sliding_windows(kernel, stride_, dilation_)                      # (*out, *kernel)
    outs, taps = plane.shape[:nsp], math.prod(kernel)
    plane = plane.reshape(*outs, taps)
    flat = windows.reshape(*windows.shape[:-nsp], taps)                  # (..., *out, K)
    best = flat.amax(-1, keepdim=True)
    return best.squeeze(-1), _first_index((flat == best) & (plane >= 0), plane)


def max_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over kernel_size windows of (N, C, L) or (C, L), as torch.nn.functional.max_pool1d (see
    max_pool2d).

        >>> max_pool1d(Tensor([[1.0, 5.0, 2.0, 4.0, 3.0]]), 2).tolist()
        [[5.0, 4.0]]
    """
    return _max_pool("max_pool1d", x, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over kernel_size windows of (N, C, H, W) or (C, H, W), as torch.nn.functional.max_pool2d:
    stride defaults to kernel_size, padding (an int or one per dim) reads as -inf, ceil_mode keeps a last
    partial window. return_indices=True also gives each max's int64 flat index into its (H, W) plane; a
    tie goes to the first in the window, row by row, as torch.

        >>> x = Tensor.arange(25).reshape(1, 5, 5).float()
        >>> max_pool2d(x, 2).tolist()
        [[[6.0, 8.0], [16.0, 18.0]]]
        >>> max_pool2d(x, 2, ceil_mode=True).tolist()
        [[[6.0, 8.0, 9.0], [16.0, 18.0, 19.0], [21.0, 23.0, 24.0]]]
        >>> max_pool2d(x, 3, stride=2, return_indices=True)[1].tolist()
        [[[12, 14], [22, 24]]]
    """
    return _max_pool("max_pool2d", x, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@autocast_op
def max_pool3d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over kernel_size windows of (N, C, D, H, W) or (C, D, H, W), as torch.nn.functional.max_pool3d
    (see max_pool2d; indices are flat into each (D, H, W) volume).

        >>> max_pool3d(Tensor.arange(27).reshape(1, 3, 3, 3).float(), 2, stride=1).tolist()[0][0]
        [[13.0, 14.0], [16.0, 17.0]]
    """
    return _max_pool("max_pool3d", x, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool(op: str, x: Tensor, nsp: int, kernel_size: int | Sequence[int],
              stride: int | Sequence[int] | None, padding: int | Sequence[int], ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> Tensor:
    """avg_pool1d/2d/3d: window sums of the zero-padded input over torch's divisor."""
    kernel, stride_, padding_ = _pool_args(op, x, nsp, kernel_size, stride, padding)
    _check_float(op, x)
    ones = (1,) * nsp
    pads = _pool_pads(op, x, kernel, stride_, padding_, ones, ceil_mode)
    axes = tuple(range(-nsp, 0))
    sums = x.pad(((0, 0),) * (x.ndim - nsp) + pads).sliding_windows(kernel, stride_, ones).sum(axes)
    if divisor_override is not None:
        if not isinstance(divisor_override, (int, np.integer)) or divisor_override <= 0:
            raise ValueError(f"[nn] {op}: expected a positive int divisor_override, got {divisor_override!r}")
        return sums / int(divisor_override)
    extra = any(hi > lo for lo, hi in pads)
    if not extra and (count_include_pad or not any(padding_)):
        return sums / math.prod(kernel)
    # the count of each window: ones over what is counted, zeros elsewhere, summed by the same windows
    spatial = x.shape[-nsp:]
    if count_include_pad:
        counted = Tensor.ones(*(s + 2 * p for s, p in zip(spatial, padding_)), device=x.device)
        counted = counted.pad(tuple((0, hi - lo) for lo, hi in pads))
    else:
        counted = Tensor.ones(*spatial, device=x.device).pad(pads)
    return sums / counted.cast(x.dtype).sliding_windows(kernel, stride_, ones).sum(axes)


def avg_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """The mean over kernel_size windows of (N, C, L) or (C, L), as torch.nn.functional.avg_pool1d (see
    avg_pool2d).

        >>> avg_pool1d(Tensor([[1.0, 5.0, 2.0, 4.0, 3.0]]), 2, stride=1).tolist()
        [[3.0, 3.5, 3.0, 3.5]]
    """
    return _avg_pool("avg_pool1d", x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over kernel_size windows of (N, C, H, W) or (C, H, W), as torch.nn.functional.avg_pool2d.
    Padding (an int or one per dim) adds zeros, counted in the divisor when count_include_pad; a ceil_mode
    window's part past the padding is never counted; divisor_override replaces the divisor.

        >>> x = Tensor.arange(9).reshape(1, 3, 3).float()
        >>> avg_pool2d(x, 2, stride=1).tolist()
        [[[2.0, 3.0], [5.0, 6.0]]]
        >>> avg_pool2d(x, 2, ceil_mode=True).tolist()                   # the last windows average 2 and 1
        [[[2.0, 3.5], [6.5, 8.0]]]
    """
    return _avg_pool("avg_pool2d", x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@autocast_op
def avg_pool3d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over kernel_size windows of (N, C, D, H, W) or (C, D, H, W), as
    torch.nn.functional.avg_pool3d (see avg_pool2d).

        >>> avg_pool3d(Tensor.arange(8).reshape(1, 2, 2, 2).float(), 2).tolist()
        [[[[3.5]]]]
    """
    return _avg_pool("avg_pool3d", x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _along(x: Tensor, axis: int, weights: np.ndarray) -> Tensor:
    """Mix dim `axis` (size n) of x by an (m, n) matrix: out[.., i, ..] = sum_j weights[i, j] * x[.., j, ..].
    A 0/1 matrix selects (a where, so inf and nan pass through as they are)."""
    m, n = weights.shape
    if m == n and np.array_equal(weights, np.eye(n)):
        return x
    moved = x.transpose(axis, -1).unsqueeze(-2)                          # (..., 1, n)
    if np.isin(weights, (0.0, 1.0)).all():
        mixed = Tensor(weights.astype(bool), device=x.device).where(moved, 0)
    else:
        mixed = moved * Tensor(weights, device=x.device).cast(x.dtype)   # (..., m, n)
    return mixed.sum(-1, dtype=x.dtype).transpose(axis, -1)


def _output_sizes(op: str, x: Tensor, size: int | None | Sequence[int | None], nsp: int) -> tuple[int, ...]:
    sizes = (size,) * nsp if size is None or isinstance(size, (int, np.integer)) else tuple(size)
    if len(sizes) != nsp or not all(s is None or (isinstance(s, (int, np.integer)) and s > 0) for s in sizes):
        raise ValueError(f"[nn] {op}: expected output_size to be a positive int or {nsp} of them (None keeps "
                         f"the input size), got {size!r}")
    return tuple(int(s) if s is not None else i for s, i in zip(sizes, x.shape[-nsp:]))


def _adaptive_windows(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) 0/1: output i covers inputs [floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out)),
    as torch."""
    window = np.zeros((n_out, n_in))
    for i in range(n_out):
        window[i, i * n_in // n_out:-(-(i + 1) * n_in // n_out)] = 1.0
    return window


def _adaptive_avg(op: str, x: Tensor, nsp: int, output_size: int | None | Sequence[int | None]) -> Tensor:
    _check_spatial(op, x, nsp)
    _check_float(op, x)
    for axis, n_out in zip(range(x.ndim - nsp, x.ndim), _output_sizes(op, x, output_size, nsp)):
        window = _adaptive_windows(x.shape[axis], n_out)
        counts = window.sum(1).reshape((n_out,) + (1,) * (x.ndim - 1 - axis))
        x = _along(x, axis, window) / Tensor(counts, device=x.device).cast(x.dtype)
    return x


def adaptive_avg_pool1d(x: Tensor, output_size: int | Sequence[int]) -> Tensor:
    """adaptive_avg_pool2d's rule along the last dim of (N, C, L) or (C, L), as
    torch.nn.functional.adaptive_avg_pool1d.

        >>> adaptive_avg_pool1d(Tensor([[1.0, 2.0, 3.0, 4.0, 5.0]]), 2).tolist()
        [[2.0, 4.0]]
    """
    return _adaptive_avg("adaptive_avg_pool1d", x, 1, output_size)


def adaptive_avg_pool2d(x: Tensor, output_size: int | None | Sequence[int | None]) -> Tensor:
    """The mean over windows of (N, C, H, W) or (C, H, W) chosen to give output_size (None keeps that dim), as
    torch.nn.functional.adaptive_avg_pool2d: output row i averages rows floor(i*H/h) to ceil((i+1)*H/h).

        >>> x = Tensor.arange(15).reshape(1, 3, 5).float()
        >>> adaptive_avg_pool2d(x, (1, 2)).tolist()                      # columns 0-2 and 2-4
        [[[6.0, 8.0]]]
        >>> adaptive_avg_pool2d(Tensor.ones(2, 8, 7, 7), 1).shape
        (2, 8, 1, 1)
    """
    return _adaptive_avg("adaptive_avg_pool2d", x, 2, output_size)


@autocast_op
def adaptive_avg_pool3d(x: Tensor, output_size: int | None | Sequence[int | None]) -> Tensor:
    """adaptive_avg_pool2d's rule over the last three dims of (N, C, D, H, W) or (C, D, H, W), as
    torch.nn.functional.adaptive_avg_pool3d.

        >>> adaptive_avg_pool3d(Tensor.ones(2, 3, 5, 4, 7), (2, None, 3)).shape
        (2, 3, 2, 4, 3)
    """
    return _adaptive_avg("adaptive_avg_pool3d", x, 3, output_size)


def _adaptive_max(op: str, x: Tensor, nsp: int, output_size: int | None | Sequence[int | None],
                  return_indices: bool) -> Tensor | tuple[Tensor, Tensor]:
    """A box max is a max of maxes, so one spatial dim at a time, last first. With indices, each dim picks
    the first input slice that holds its window's max, and keeps the inner dims' index of that slice:
    together the first max of the box in row-major order, as torch."""
    _check_spatial(op, x, nsp)
    sizes = _output_sizes(op, x, output_size, nsp)
    # flat: index into the dims already reduced; the values are compared with their maxes, so they are
    # one computation (Tensor._stored)
    values, flat, inner = x._stored(), None, 1
    for axis in reversed(range(x.ndim - nsp, x.ndim)):
        n_in, n_out = x.shape[axis], sizes[axis - x.ndim]
        window = Tensor(_adaptive_windows(n_in, n_out).astype(bool), device=x.device)     # (n_out, n_in)
        masked = window.where(values.transpose(axis, -1).unsqueeze(-2), min_value(x.dtype))  # (.., out, in)
        best = masked.amax(-1)                                                             # (.., out)
        if return_indices:
            positions = index_range(n_in, x.device).cast(dtypes.int64)
            if flat is not None:                        # the position along this dim, then the inner index
                positions = positions * inner + flat.transpose(axis, -1).unsqueeze(-2)
            flat = _first_index(window & (masked == best.unsqueeze(-1)), positions).transpose(axis, -1)
        values, inner = best.transpose(axis, -1), inner * n_in
    return values if flat is None else (values, flat)


def adaptive_max_pool1d(x: Tensor, output_size: int | Sequence[int],
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over adaptive_avg_pool1d's windows of (N, C, L) or (C, L), as
    torch.nn.functional.adaptive_max_pool1d; return_indices also gives the int64 index of each max.

        >>> adaptive_max_pool1d(Tensor([[1.0, 5.0, 2.0, 4.0, 3.0]]), 2).tolist()
        [[5.0, 4.0]]
    """
    return _adaptive_max("adaptive_max_pool1d", x, 1, output_size, return_indices)


def adaptive_max_pool2d(x: Tensor, output_size: int | None | Sequence[int | None],
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over adaptive_avg_pool2d's windows of (N, C, H, W) or (C, H, W), as
    torch.nn.functional.adaptive_max_pool2d; return_indices also gives each max's int64 flat index into
    its (H, W) plane (the first max in the window, row by row, on a tie).

        >>> x = Tensor.arange(15).reshape(1, 3, 5).float()
        >>> adaptive_max_pool2d(x, (1, 2), return_indices=True)[1].tolist()   # columns 0-2 and 2-4
        [[[12, 14]]]
    """
    return _adaptive_max("adaptive_max_pool2d", x, 2, output_size, return_indices)


def adaptive_max_pool3d(x: Tensor, output_size: int | None | Sequence[int | None],
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """adaptive_max_pool2d over the last three dims of (N, C, D, H, W) or (C, D, H, W), as
    torch.nn.functional.adaptive_max_pool3d (indices flat into each (D, H, W) volume).

        >>> adaptive_max_pool3d(Tensor.arange(8).reshape(1, 2, 2, 2).float(), 1).tolist()
        [[[[7.0]]]]
    """
    return _adaptive_max("adaptive_max_pool3d", x, 3, output_size, return_indices)


_INTERPOLATE_DIMS = {"nearest": (1, 2, 3), "nearest-exact": (1, 2, 3), "linear": (1,), "bilinear": (2,),
                     "bicubic": (2,), "trilinear": (3,), "area": (1, 2, 3)}
_CUBIC_A = -0.75                                        # torch's cubic convolution coefficient


def _cubic_taps(t: np.ndarray) -> list[np.ndarray]:
    """Keys' cubic convolution weights of the 4 taps at offsets -1, 0, 1, 2 for a fraction t, as torch."""
    def near(d: np.ndarray) -> np.ndarray:              # |d| <= 1
        return ((_CUBIC_A + 2) * d - (_CUBIC_A + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:               # 1 < |d| < 2
        return ((_CUBIC_A * d - 5 * _CUBIC_A) * d + 8 * _CUBIC_A) * d - 4 * _CUBIC_A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _interpolate_weights(mode: str, n_in: int, n_out: int, scale: float, align_corners: bool) -> np.ndarray:
    """The (n_out, n_in) matrix of one spatial dim, by torch's index rules; `scale` is in/out, or
    1/scale_factor when that was given."""
    weights = np.zeros((n_out, n_in))
    dst = np.arange(n_out)
    if mode in ("nearest", "nearest-exact"):
        # torch's float32 arithmetic (so its indices, also where in/out is not exact), and its two shortcuts
        if n_out == n_in:
            src = dst
        elif n_out == 2 * n_in:
            src = dst // 2
        else:
            shift = np.float32(0.5 if mode == "nearest-exact" else 0.0)
            picked = np.floor((dst.astype(np.float32) + shift) * np.float32(scale))
            src = np.minimum(picked.astype(np.int64), n_in - 1)
        weights[dst, src] = 1.0
        return weights
    if align_corners:
        src_f = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src_f = (dst + 0.5) * scale - 0.5
        if mode != "bicubic":                           # torch clamps linear sources at 0, not cubic ones
            src_f = np.maximum(src_f, 0.0)
    lo = np.floor(src_f).astype(np.int64)
    frac = src_f - lo
    if mode == "bicubic":                               # taps lo-1 .. lo+2, clamped to the border
        for offset, tap in zip(range(-1, 3), _cubic_taps(frac)):
            np.add.at(weights, (dst, np.clip(lo + offset, 0, n_in - 1)), tap)
        return weights
    lo = np.minimum(lo, n_in - 1)
    np.add.at(weights, (dst, lo), 1.0 - frac)
    np.add.at(weights, (dst, np.minimum(lo + 1, n_in - 1)), frac)
    return weights


def _interpolate_sizes(op: str, x: Tensor, size: int | Sequence[int] | None,
                       scale_factor: float | Sequence[float] | None,
                       recompute_scale_factor: bool | None) -> tuple[tuple[int, ...], list[float]]:
    """Each spatial dim's output size, and the scale its source indices use."""
    nsp = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError(f"[nn] {op}: expected exactly one of size and scale_factor, got size={size!r}, "
                         f"scale_factor={scale_factor!r}")
    in_sizes = x.shape[2:]
    if size is not None:
        out_sizes = _output_sizes(op, x, size, nsp)
        scales = [i / o for i, o in zip(in_sizes, out_sizes)]
    elif scale_factor is not None:
        factors = tuple(scale_factor) if isinstance(scale_factor, Sequence) else (scale_factor,) * nsp
        if len(factors) != nsp or not all(isinstance(f, (int, float)) and f > 0 for f in factors):
            raise ValueError(f"[nn] {op}: expected scale_factor to be a positive number or {nsp} of them, "
                             f"got {scale_factor!r}")
        out_sizes = tuple(math.floor(i * f) for i, f in zip(in_sizes, factors))
        if min(out_sizes) < 1:
            raise ValueError(f"[nn] {op}: scale_factor {scale_factor!r} leaves no output for input {x.shape}")
        scales = [i / o if recompute_scale_factor else 1.0 / f
                  for i, o, f in zip(in_sizes, out_sizes, factors)]
    return out_sizes, scales


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    """(*, C * r^2, H, W) -> (*, C, H * r, W * r): each group of r^2 channels spread over an r x r block
    of pixels (torch.nn.functional.pixel_shuffle; sub-pixel convolution's upsampling).

        >>> pixel_shuffle(Tensor.arange(8).reshape(1, 4, 1, 2), 2).tolist()
        [[[[0, 2, 1, 3], [4, 6, 5, 7]]]]
    """
    r = _shuffle_factor("pixel_shuffle", x, upscale_factor)
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"[nn] pixel_shuffle: expected the channels ({c}) divisible by upscale_factor^2 "
                         f"({r * r}), got input of shape {x.shape}")
    n = len(lead)
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(x: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H * r, W * r) -> (*, C * r^2, H, W): pixel_shuffle undone (torch's pixel_unshuffle).

        >>> x = Tensor.arange(16).reshape(1, 4, 2, 2)
        >>> pixel_unshuffle(pixel_shuffle(x, 2), 2).tolist() == x.tolist()
        True
    """
    r = _shuffle_factor("pixel_unshuffle", x, downscale_factor)
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"[nn] pixel_unshuffle: expected height and width divisible by downscale_factor "
                         f"({r}), got input of shape {x.shape}")
    n = len(lead)
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def _shuffle_factor(who: str, x: Tensor, r: object) -> int:
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"[nn] {who}: expected a factor that is an int >= 1, got {r!r}")
    if x.ndim < 3:
        raise ValueError(f"[nn] {who}: expected an input of at least 3 dims (*, C, H, W), got shape "
                         f"{x.shape}")
    return r


@autocast_op
def interpolate(x: Tensor, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> Tensor:
    """Resize the spatial dims of (N, C, *spatial) to `size` or floor(in * scale_factor), as
    torch.nn.functional.interpolate with mode 'nearest' (1-3 spatial dims: out i reads
    floor(i * in/out)), 'nearest-exact' (floor((i + 0.5) * in/out)), 'area' (adaptive_avg_pool), 'linear'
    (1), 'bilinear' (2), 'bicubic' (2: Keys' cubic with a = -0.75 over 4 taps, border taps clamped) or
    'trilinear' (3). Linear and cubic modes with align_corners False read at (i + 0.5) * in/out - 0.5
    (linear clamps it at 0), with True at i * (in - 1)/(out - 1). Given a scale_factor, 1/scale_factor
    replaces in/out unless recompute_scale_factor, as torch.

        >>> x = Tensor([[[1.0, 2.0, 4.0]]])
        >>> interpolate(x, scale_factor=2).tolist()
        [[[1.0, 1.0, 2.0, 2.0, 4.0, 4.0]]]
        >>> interpolate(x, size=5, mode="linear", align_corners=True).tolist()
        [[[1.0, 1.5, 2.0, 3.0, 4.0]]]
        >>> interpolate(x.reshape(1, 1, 1, 3), size=(1, 5), mode="bicubic", align_corners=True).tolist()
        [[[[1.0, 1.3125, 2.0, 3.09375, 4.0]]]]
    """
    op = "interpolate"
    if mode not in _INTERPOLATE_DIMS:
        raise NotImplementedError(f"[nn] {op}: mode={mode!r} is not supported; expected one of "
                                  f"{sorted(_INTERPOLATE_DIMS)}")
    if not isinstance(x, Tensor):
        raise TypeError(f"[nn] {op}: expected input to be a Tensor, got {type(x).__name__}")
    nsp = x.ndim - 2
    if nsp not in _INTERPOLATE_DIMS[mode]:
        raise ValueError(f"[nn] {op}: mode={mode!r} expects (N, C, *spatial) with "
                         f"{' or '.join(map(str, _INTERPOLATE_DIMS[mode]))} spatial dims, got {x.shape}")
    if mode in ("nearest", "nearest-exact", "area") and align_corners is not None:
        raise ValueError(f"[nn] {op}: align_corners is only for the linear and cubic modes, got it with "
                         f"mode={mode!r}; fix: leave it None")
    _check_float(op, x)
    in_sizes = x.shape[2:]
    out_sizes, scales = _interpolate_sizes(op, x, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        return _adaptive_avg(op, x, nsp, out_sizes)
    for axis, (n_in, n_out, scale) in enumerate(zip(in_sizes, out_sizes, scales)):
        x = _along(x, 2 + axis, _interpolate_weights(mode, n_in, n_out, scale, bool(align_corners)))
    return x


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


@autocast_op
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
    params = [p for p in (weight, bias) if p is not None]
    if all(p.dtype == x.dtype and p.device == x.device for p in params) and x.numel() > 0:
        return apply(fused.LayerNorm, x, *params, dims=len(axes), eps=eps, has_weight=weight is not None)
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


@autocast_op
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
    if weight.dtype.is_float and indices.device == weight.device and indices.numel() > 0:
        return apply(fused.Embedding, weight, as_index(indices))
    return weight[indices]


@autocast_op
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
    same = all(t.shape[:-2] == query.shape[:-2] and t.dtype == query.dtype and t.device == query.device
               for t in (key, value))
    if same and attn_mask is None and dropout_p == 0 and seq_q * seq_k > 0 and query.shape[-1] > 0:
        return apply(fused.Attention, query, key, value, scale=float(scale), causal=is_causal)
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


def _check_known_range(op: str, target: Tensor, n: int, ignore_index: int | None) -> None:
    """Index values already on the host (a realized tensor) are checked now; lazy ones cannot be."""
    values = known_values(target.lazydata) if target.numel() else None
    if values is None:
        return
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
