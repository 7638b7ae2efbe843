"""linear, einsum, dropout, distances and similarities, one_hot, embedding and scaled dot-product
attention."""
from __future__ import annotations

import math

from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.dtype import dtypes
from tg.core.indexing import as_index
from tg.core.shape import broadcast_shape
from tg.core.tensor import Tensor, apply, index_range
from tg.nn.functional.activation import _in_place
from tg.nn.functional.checks import _check_broadcasts_to, _check_float, _check_known_range, _check_p


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
