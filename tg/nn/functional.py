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

from tg.core.dtype import DType, dtypes, min_value
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


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """x where positive, else x * negative_slope, as torch.nn.functional.leaky_relu.

        >>> leaky_relu(Tensor([-2.0, 3.0]), 0.5).tolist()
        [-1.0, 3.0]
    """
    return x.leaky_relu(negative_slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x where positive, else alpha * (exp(x) - 1), as torch.nn.functional.elu.

        >>> [round(v, 4) for v in elu(Tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """
    return x.elu(alpha)


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


def dropout2d(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero whole channels of (N, C, H, W) or (C, H, W) with probability p and scale the kept ones by
    1/(1-p); the identity if not training, as torch.nn.functional.dropout2d.

        >>> y = dropout2d(Tensor.ones(2, 8, 3, 3), p=0.5).reshape(16, 9)     # a row per channel
        >>> bool((y.max(1) == y.min(1)).all()), set(y.reshape(-1).tolist()) <= {0.0, 2.0}
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


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along dim, as torch.nn.functional.normalize.

        >>> [round(v, 4) for v in normalize(Tensor([[3.0, 4.0]]))[0].tolist()]
        [0.6, 0.8]
    """
    _check_float("normalize", x)
    if p == float("inf"):
        norm = x.abs().max(dim, keepdim=True)
    elif p == 2.0:
        norm = (x * x).sum(dim, keepdim=True).sqrt()
    else:
        norm = x.abs().pow(p).sum(dim, keepdim=True).pow(1.0 / p)
    return x / norm.clamp(min=eps)


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

def _pair(op: str, name: str, value: int | Sequence[int]) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) for v in pair):
        raise ValueError(f"[nn] {op}: expected {name} to be an int or a pair of ints, got {value!r}")
    return (int(pair[0]), int(pair[1]))


def _check_image(op: str, x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"[nn] {op}: expected input to be a Tensor, got {type(x).__name__}")
    if x.ndim not in (3, 4):
        raise ValueError(f"[nn] {op}: expected input of shape (N, C, H, W) or (C, H, W), got {x.shape}")


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last len(pad) // 2 dims, last dim first: (left, right, top, bottom, ...), as torch F.pad.
    Negative sizes cut. Only mode='constant' is supported.

        >>> pad(Tensor([[1, 2]]), (1, 0, 0, 1), value=7).tolist()
        [[7, 1, 2], [7, 7, 7]]
    """
    if mode != "constant":
        raise NotImplementedError(f"[nn] pad: mode={mode!r} is not supported, only 'constant'; fix: build "
                                  f"reflect/replicate padding from slices and Tensor.cat")
    flat = [int(v) for v in pad]
    if len(flat) % 2 or len(flat) // 2 > x.ndim:
        raise ValueError(f"[nn] pad: expected (before, after) pairs for at most {x.ndim} dims, last dim "
                         f"first, got {tuple(pad)}")
    return x.pad(flat, value=0.0 if value is None else value)


def _conv_pads(op: str, padding: int | Sequence[int] | str, kernel: tuple[int, int], stride: tuple[int, int],
               dilation: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(before, after) padding of H and W; 'same' puts the odd pixel after, as torch."""
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise ValueError(f"[nn] {op}: expected padding 'valid', 'same' or ints, got {padding!r}")
        if padding == "valid":
            return (0, 0), (0, 0)
        if stride != (1, 1):
            raise ValueError(f"[nn] {op}: padding='same' needs stride 1, got stride={stride}; "
                             f"fix: give the padding as ints")
        th, tw = (d * (k - 1) for d, k in zip(dilation, kernel))
        return (th // 2, th - th // 2), (tw // 2, tw - tw // 2)
    ph, pw = _pair(op, "padding", padding)
    return (ph, ph), (pw, pw)


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


def _pool_pads(op: str, x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
               dilation: tuple[int, int], ceil_mode: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """(before, after) padding of H and W: padding on both sides, plus what ceil_mode's last window reads
    past it. As torch, a ceil_mode window must start inside the input or the left padding."""
    pads = []
    for size, k, s, p, d, axis in zip(x.shape[-2:], kernel, stride, padding, dilation, "HW"):
        span = d * (k - 1) + 1
        if p < 0 or p > span // 2:
            raise ValueError(f"[nn] {op}: expected padding in [0, {span // 2}] (half the kernel) for kernel "
                             f"{k}, got {p} along {axis}")
        if size + 2 * p < span:
            raise ValueError(f"[nn] {op}: expected input {axis} of at least {span - 2 * p} for kernel {k} "
                             f"(dilation {d}, padding {p}), got {size}")
        room = size + 2 * p - span
        out = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        pads.append((p, p + max(0, (out - 1) * s + span - size - 2 * p)))
    return pads[0], pads[1]


def max_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """The max over kernel_size windows of (N, C, H, W) or (C, H, W), as torch.nn.functional.max_pool2d:
    stride defaults to kernel_size, padding reads as -inf, ceil_mode keeps a last partial window.

        >>> x = Tensor.arange(25).reshape(1, 5, 5).float()
        >>> max_pool2d(x, 2).tolist()
        [[[6.0, 8.0], [16.0, 18.0]]]
        >>> max_pool2d(x, 2, ceil_mode=True).tolist()
        [[[6.0, 8.0, 9.0], [16.0, 18.0, 19.0], [21.0, 23.0, 24.0]]]
    """
    if return_indices:
        raise NotImplementedError("[nn] max_pool2d: return_indices=True is not supported; fix: compare the "
                                  "input with the pooled max to locate it")
    _check_image("max_pool2d", x)
    kernel = _pair("max_pool2d", "kernel_size", kernel_size)
    stride_ = kernel if stride is None or stride == [] else _pair("max_pool2d", "stride", stride)
    dilation_ = _pair("max_pool2d", "dilation", dilation)
    pad_h, pad_w = _pool_pads("max_pool2d", x, kernel, stride_, _pair("max_pool2d", "padding", padding),
                              dilation_, ceil_mode)
    padded = x.pad(((0, 0),) * (x.ndim - 2) + (pad_h, pad_w), value=min_value(x.dtype))
    return padded.max_pool2d(kernel, stride_, 0, dilation_)


def avg_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over kernel_size windows of (N, C, H, W) or (C, H, W), as torch.nn.functional.avg_pool2d.
    Padding adds zeros, counted in the divisor when count_include_pad; a ceil_mode window's part past the
    padding is never counted; divisor_override replaces the divisor.

        >>> x = Tensor.arange(9).reshape(1, 3, 3).float()
        >>> avg_pool2d(x, 2, stride=1).tolist()
        [[[2.0, 3.0], [5.0, 6.0]]]
        >>> avg_pool2d(x, 2, ceil_mode=True).tolist()                   # the last windows average 2 and 1
        [[[2.0, 3.5], [6.5, 8.0]]]
    """
    _check_image("avg_pool2d", x)
    _check_float("avg_pool2d", x)
    kernel = _pair("avg_pool2d", "kernel_size", kernel_size)
    stride_ = kernel if stride is None or stride == [] else _pair("avg_pool2d", "stride", stride)
    padding_ = _pair("avg_pool2d", "padding", padding)
    pad_h, pad_w = _pool_pads("avg_pool2d", x, kernel, stride_, padding_, (1, 1), ceil_mode)
    mean = x.pad(((0, 0),) * (x.ndim - 2) + (pad_h, pad_w)).avg_pool2d(kernel, stride_)   # sum / kh*kw
    if divisor_override is not None:
        if divisor_override <= 0:
            raise ValueError(f"[nn] avg_pool2d: expected a positive divisor_override, got {divisor_override}")
        return mean * (kernel[0] * kernel[1] / divisor_override)
    extra = pad_h[1] > pad_h[0] or pad_w[1] > pad_w[0]
    if not extra and (count_include_pad or padding_ == (0, 0)):
        return mean
    # the share of each window that counts: ones over what is counted, zeros elsewhere (H', W')
    if count_include_pad:
        counted = Tensor.ones(x.shape[-2] + 2 * padding_[0], x.shape[-1] + 2 * padding_[1], device=x.device)
        counted = counted.pad(((0, pad_h[1] - pad_h[0]), (0, pad_w[1] - pad_w[0])))
    else:
        counted = Tensor.ones(*x.shape[-2:], device=x.device).pad((pad_h, pad_w))
    return mean / counted.cast(x.dtype).avg_pool2d(kernel, stride_)


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


def smooth_l1_loss(x: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, with d = x - target; beta=0 is l1_loss.

        >>> smooth_l1_loss(Tensor([0.5, 3.0]), Tensor([0.0, 0.0]), reduction="none").tolist()
        [0.125, 2.5]
    """
    if beta == 0:
        return l1_loss(x, target, reduction)
    return _smooth_abs("smooth_l1_loss", x, target, reduction, beta) / beta


def huber_loss(x: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta * (|d| - 0.5 delta), with d = x - target.

        >>> huber_loss(Tensor([0.5, 3.0]), Tensor([0.0, 0.0]), reduction="none", delta=2.0).tolist()
        [0.125, 4.0]
    """
    return _smooth_abs("huber_loss", x, target, reduction, delta)


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
