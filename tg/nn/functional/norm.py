"""Normalizations: layer, RMS, group and batch norm (training statistics and running estimates)."""
from __future__ import annotations

import math
from typing import Sequence

from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.tensor import Tensor, apply
from tg.nn.functional.checks import _as_shape, _check_float, _check_param, _check_trailing, finfo_eps


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
