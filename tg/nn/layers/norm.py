"""Normalization layers: BatchNorm, LayerNorm, RMSNorm, GroupNorm."""
from __future__ import annotations

from typing import Any, Sequence

from tg.core.dtype import DType, dtypes
from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.functional.checks import _as_shape
from tg.nn.layers.basic import _positive
from tg.nn.module import Module


class _BatchNorm(Module):
    """Shared by BatchNorm1d / BatchNorm2d, which differ only in the input ranks they take."""
    ranks: tuple[int, ...] = ()
    layout = ""
    running_mean: Tensor | None      # buffers, None without track_running_stats
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        name = type(self).__name__
        _positive(name, num_features=num_features)
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"[nn] {name}: expected momentum in [0, 1] or None, got {momentum}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw: dict[str, Any] = {"device": device, "dtype": dtype or dtypes.default_float}
        self.weight = Tensor.ones(num_features, requires_grad=True, **kw) if affine else None
        self.bias = Tensor.zeros(num_features, requires_grad=True, **kw) if affine else None
        tracked = track_running_stats
        self.register_buffer("running_mean", Tensor.zeros(num_features, **kw) if tracked else None)
        self.register_buffer("running_var", Tensor.ones(num_features, **kw) if tracked else None)
        self.register_buffer("num_batches_tracked",
                             Tensor.zeros((), dtype=dtypes.int64, device=device) if tracked else None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.ranks or x.shape[1] != self.num_features:
            raise ValueError(f"[nn] {type(self).__name__}: expected input of shape {self.layout} with "
                             f"C={self.num_features} (num_features), got {x.shape}")
        factor: float | Tensor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
            if self.momentum is None:                                     # cumulative moving average
                factor = 1.0 / self.num_batches_tracked.cast(x.dtype)
        # without running statistics the batch's own are used in eval mode too, as torch
        use_batch_stats = self.training or self.running_mean is None
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_batch_stats,
                            factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) per channel, torch semantics (see BatchNorm2d).
    In training mode the batch's statistics normalize and move the running ones by momentum:

        >>> bn = BatchNorm1d(2)
        >>> bn.weight.shape, bn.bias.shape, bn.running_mean.shape
        ((2,), (2,), (2,))
        >>> y = bn(Tensor([[1.0, 0.0], [3.0, 4.0]]))          # a new module is in training mode
        >>> [[round(v, 4) for v in row] for row in y.tolist()]
        [[-1.0, -1.0], [1.0, 1.0]]
        >>> [round(v, 4) for v in bn.running_mean.tolist() + bn.running_var.tolist()]   # unbiased var: 2, 8
        [0.2, 0.2, 1.1, 1.7]
        >>> bn.num_batches_tracked.item()
        1
    """
    ranks, layout = (2, 3), "(N, C) or (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) per channel. When self.training: normalize with the batch's
    mean and biased variance, and update running_mean / running_var in place (momentum, or a cumulative
    average when momentum is None; the variance unbiased) and num_batches_tracked. Otherwise: normalize
    with the running statistics. weight starts at 1, bias at 0.

        >>> bn = BatchNorm2d(3)                                  # in training mode, as torch's
        >>> def var() -> list: return [round(v, 4) for v in bn.running_var.tolist()]
        >>> bn(Tensor.ones(2, 3, 4, 4)).shape, var()            # batch variance 0, momentum 0.1
        ((2, 3, 4, 4), [0.9, 0.9, 0.9])
        >>> bn.eval()(Tensor.ones(2, 3, 4, 4)).shape, var()     # eval: nothing updated
        ((2, 3, 4, 4), [0.9, 0.9, 0.9])
    """
    ranks, layout = (4,), "(N, C, H, W)"


class LayerNorm(Module):
    """Normalize over the trailing normalized_shape dims, then an elementwise affine (weight 1, bias 0).

        >>> norm = LayerNorm(2)
        >>> [round(v, 4) for v in norm(Tensor([[1.0, 3.0]]))[0].tolist()], norm.weight.shape, norm.bias.shape
        ([-1.0, 1.0], (2,), (2,))
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        _positive("LayerNorm", **{f"normalized_shape[{i}]": s for i, s in enumerate(self.normalized_shape)})
        self.eps = eps
        kw: dict[str, Any] = {"device": device, "dtype": dtype or dtypes.default_float, "requires_grad": True}
        self.weight = Tensor.ones(*self.normalized_shape, **kw) if elementwise_affine else None
        self.bias = Tensor.zeros(*self.normalized_shape, **kw) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the trailing dims, times weight (starts at 1). eps=None uses the input
    dtype's machine epsilon (torch.finfo(dtype).eps), as torch.

        >>> norm = RMSNorm(2)
        >>> [round(v, 4) for v in norm(Tensor([[3.0, 4.0]]))[0].tolist()], norm.weight.shape   # rms = 3.5355
        ([0.8485, 1.1314], (2,))
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        _positive("RMSNorm", **{f"normalized_shape[{i}]": s for i, s in enumerate(self.normalized_shape)})
        self.eps = eps
        kw: dict[str, Any] = {"device": device, "dtype": dtype or dtypes.default_float, "requires_grad": True}
        self.weight = Tensor.ones(*self.normalized_shape, **kw) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class GroupNorm(Module):
    """Normalize (N, C, *) over groups of C/num_groups channels, then a per-channel affine (1, 0).

        >>> norm = GroupNorm(2, 6)
        >>> norm(Tensor.randn(3, 6, 5)).shape, norm.weight.shape, norm.bias.shape
        ((3, 6, 5), (6,), (6,))
        >>> y = GroupNorm(2, 4)(Tensor([[[1.0], [3.0], [0.0], [4.0]]]))       # groups {1, 3} and {0, 4}
        >>> [round(v, 4) for v in y.reshape(-1).tolist()]
        [-1.0, 1.0, -1.0, 1.0]
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        _positive("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise ValueError(f"[nn] GroupNorm: expected num_channels ({num_channels}) divisible by "
                             f"num_groups, got num_groups={num_groups}")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        kw: dict[str, Any] = {"device": device, "dtype": dtype or dtypes.default_float, "requires_grad": True}
        self.weight = Tensor.ones(num_channels, **kw) if affine else None
        self.bias = Tensor.zeros(num_channels, **kw) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"[nn] GroupNorm: expected input of shape (N, {self.num_channels}, *) "
                             f"(num_channels), got {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
