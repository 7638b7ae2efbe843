"""Layers with torch.nn names and default initialisations: nn.Modules whose parameters are Tensors with
requires_grad=True and whose buffers are running statistics.

The math lives in tg.nn.functional; a layer holds state, checks its input and calls it.

    >>> from tg import Tensor
    >>> model = Sequential(Linear(3, 4), Tensor.relu, Linear(4, 2))
    >>> model(Tensor.ones(5, 3)).shape
    (5, 2)
"""
from __future__ import annotations

import math
import types
from typing import Any, Callable, Iterator, Sequence

from tg.core.dtype import DType, dtypes
from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.module import Module
from tg.nn.state import get_state_dict


def _describe(layer: Callable[[Tensor], Tensor]) -> str:
    return repr(layer) if isinstance(layer, Module) else getattr(layer, "__name__", repr(layer))


_STATELESS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType)


def _uniform(shape: tuple[int, ...], bound: float, device: str | None, dtype: DType | str | None) -> Tensor:
    """U(-bound, bound) with bound = 1/sqrt(fan_in): torch's kaiming_uniform_(a=sqrt(5)) for weights,
    and its rule for biases."""
    return Tensor.uniform(*shape, low=-bound, high=bound, device=device, dtype=dtype, requires_grad=True)


def _fan_in_bound(fan_in: int) -> float:
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _pair(value: int | Sequence[int], name: str, layer: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"[nn] {layer}: expected {name} to be an int or a pair of ints, got {value!r}")
    return (int(pair[0]), int(pair[1]))


def _positive(layer: str, **sizes: int) -> None:
    for name, size in sizes.items():
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"[nn] {layer}: expected {name} to be a positive int, got {size!r}")


class Linear(Module):
    """y = x @ weight.T + bias over the last dim. weight (out_features, in_features) and bias (out_features,)
    start from U(-1/sqrt(in_features), 1/sqrt(in_features)), as torch.

        >>> layer = Linear(3, 2)
        >>> layer(Tensor.ones(5, 7, 3)).shape, layer.weight.shape, layer.bias.shape
        ((5, 7, 2), (2, 3), (2,))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        bound = _fan_in_bound(in_features)
        self.weight = _uniform((out_features, in_features), bound, device, dtype)
        self.bias = _uniform((out_features,), bound, device, dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"[nn] Linear: expected input of shape (..., {self.in_features}) (in_features), "
                             f"got {x.shape}")
        return x.linear(self.weight, self.bias)                           # (..., out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Conv2d(Module):
    """2-d convolution over (N, C_in, H, W) or (C_in, H, W); weight (C_out, C_in/groups, kh, kw). padding
    is an int, a pair, 'valid' or 'same' (stride 1). Weight and bias start from U(-b, b) with
    b = 1/sqrt(fan_in), fan_in = C_in/groups * kh * kw, as torch.

        >>> conv = Conv2d(3, 8, 3, padding=1)
        >>> conv(Tensor.ones(2, 3, 7, 7)).shape, conv.weight.shape, conv.bias.shape
        ((2, 8, 7, 7), (8, 3, 3, 3), (8,))
        >>> box = Conv2d(1, 1, 2, bias=False)
        >>> box.weight = Tensor.ones(1, 1, 2, 2)                          # a 2x2 box sum
        >>> box(Tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])).tolist()
        [[[12.0, 16.0]]]
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        _positive("Conv2d", in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"[nn] Conv2d: expected in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) divisible by groups, got groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "kernel_size", "Conv2d")
        self.stride = _pair(stride, "stride", "Conv2d")
        self.dilation = _pair(dilation, "dilation", "Conv2d")
        _positive("Conv2d", kernel_size=min(self.kernel_size), stride=min(self.stride),
                  dilation=min(self.dilation))
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"[nn] Conv2d: expected padding 'valid', 'same' or ints, got {padding!r}")
            if padding == "same" and self.stride != (1, 1):
                raise ValueError(f"[nn] Conv2d: padding='same' needs stride 1, got stride={self.stride}; "
                                 f"fix: give the padding as ints")
            self.padding: tuple[int, int] | str = padding
        else:
            self.padding = _pair(padding, "padding", "Conv2d")
        kh, kw = self.kernel_size
        bound = _fan_in_bound(in_channels // groups * kh * kw)
        self.weight = _uniform((out_channels, in_channels // groups, kh, kw), bound, device, dtype)
        self.bias = _uniform((out_channels,), bound, device, dtype) if bias else None

    def _pads(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(before, after) padding of H and W; 'same' puts the odd pixel after, as torch."""
        if self.padding == "valid":
            return (0, 0), (0, 0)
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            return (totals[0] // 2, totals[0] - totals[0] // 2), (totals[1] // 2, totals[1] - totals[1] // 2)
        assert not isinstance(self.padding, str)
        return (self.padding[0], self.padding[0]), (self.padding[1], self.padding[1])

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ValueError(f"[nn] Conv2d: expected input of shape (N, {self.in_channels}, H, W) or "
                             f"({self.in_channels}, H, W) (in_channels), got {x.shape}")
        pad_h, pad_w = self._pads()
        for size, (lo, hi), k, d, axis in zip(x.shape[-2:], (pad_h, pad_w), self.kernel_size, self.dilation,
                                              "HW"):
            span = d * (k - 1) + 1
            if size + lo + hi < span:
                raise ValueError(f"[nn] Conv2d: expected input {axis} of at least {span - lo - hi} for "
                                 f"kernel {k} (dilation {d}, padding {lo}+{hi}), got {size}")
        batched = x if x.ndim == 4 else x.unsqueeze(0)                    # (N, C_in, H, W)
        batched = batched.pad(((0, 0), (0, 0), pad_h, pad_w))
        out = batched.conv2d(self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return out if x.ndim == 4 else out.squeeze(0)                     # (N, C_out, H', W')


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
        >>> Tensor.training = True
        >>> try:
        ...     y = bn(Tensor([[1.0, 0.0], [3.0, 4.0]]))
        ... finally:
        ...     Tensor.training = False
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

        >>> bn = BatchNorm2d(3)
        >>> bn(Tensor.ones(2, 3, 4, 4)).shape, bn.running_var.tolist()    # eval mode: nothing updated
        ((2, 3, 4, 4), [1.0, 1.0, 1.0])
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
        self.normalized_shape = F._as_shape(normalized_shape)
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
        self.normalized_shape = F._as_shape(normalized_shape)
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


class Embedding(Module):
    """A lookup table: integer indices of any shape -> (*shape, embedding_dim). weight starts N(0, 1).

        >>> table = Embedding(10, 4)
        >>> table(Tensor([[1, 2, 3]])).shape, table.weight.shape
        ((1, 3, 4), (10, 4))
        >>> table(Tensor([7]))[0].tolist() == table.weight[7].tolist()
        True
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        _positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Tensor.randn(num_embeddings, embedding_dim, device=device, dtype=dtype,
                                   requires_grad=True)

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight)


class Dropout(Module):
    """Zero each element with probability p and scale the rest by 1/(1-p) while self.training (set by
    train()/eval(), else the global Tensor.training); the identity otherwise.

        >>> Dropout(0.5)(Tensor([1.0, 2.0])).tolist()                    # Tensor.training is False
        [1.0, 2.0]
        >>> kept = set(Dropout(0.5).train()(Tensor.ones(100)).tolist())
        >>> kept <= {0.0, 2.0}                                            # dropped, or scaled by 1/(1-p)
        True
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        F._check_p("Dropout", p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)


class Sequential(Module):
    """Calls its layers in order; layers[i] is the i-th. Modules among them are submodules named by
    their index, as torch (`0.weight`); a function such as Tensor.relu takes an index but has no state.

        >>> model = Sequential(Linear(2, 3), Tensor.relu, Linear(3, 1))
        >>> model(Tensor.ones(4, 2)).shape, len(model), model[2].weight.shape
        ((4, 1), 3, (1, 3))
        >>> list(model.state_dict())
        ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    _layers: list[Callable[[Tensor], Tensor]]

    def __init__(self, *layers: Callable[[Tensor], Tensor]):
        super().__init__()
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"[nn] Sequential: expected callable layers, got a {type(layer).__name__} "
                                f"at position {i}")
            if isinstance(layer, Module):
                self.add_module(str(i), layer)
            elif not isinstance(layer, _STATELESS) and get_state_dict(layer):
                raise TypeError(f"[nn] Sequential: layer {i} (a {type(layer).__name__}) holds Tensors but is "
                                f"not an nn.Module, so parameters() and state_dict() would miss them; fix: "
                                f"make {type(layer).__name__} subclass tg.nn.Module (call super().__init__() "
                                f"first, rename __call__ to forward)")
        object.__setattr__(self, "_layers", list(layers))   # a plain list: call order, functions too

    @property
    def layers(self) -> list[Callable[[Tensor], Tensor]]:
        """The layers, functions included, in call order."""
        return list(self._layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self._layers:
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Callable[[Tensor], Tensor]:
        return self._layers[i]

    def __len__(self) -> int:
        return len(self._layers)

    def __iter__(self) -> Iterator[Callable[[Tensor], Tensor]]:
        return iter(self._layers)

    def _repr_children(self) -> list[tuple[str, str]]:
        return [(str(i), _describe(layer))
                for i, layer in enumerate(self._layers)]
