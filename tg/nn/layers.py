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


class _ConvNd(Module):
    """Conv1d/2d/3d: weight (C_out, C_in/groups, *kernel) and bias from U(-b, b), b = 1/sqrt(fan_in),
    fan_in = C_in/groups * prod(kernel), as torch; the math is F.conv1d/2d/3d."""

    _nsp = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        name, nsp = type(self).__name__, self._nsp
        _positive(name, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"[nn] {name}: expected in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) divisible by groups, got groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F._ntuple(name, "kernel_size", kernel_size, nsp)
        self.stride = F._ntuple(name, "stride", stride, nsp)
        self.dilation = F._ntuple(name, "dilation", dilation, nsp)
        _positive(name, kernel_size=min(self.kernel_size), stride=min(self.stride),
                  dilation=min(self.dilation))
        if isinstance(padding, str):
            F._conv_pads(name, padding, self.kernel_size, self.stride, self.dilation)     # checks the string
            self.padding: tuple[int, ...] | str = padding
        else:
            self.padding = F._ntuple(name, "padding", padding, nsp)
        bound = _fan_in_bound(in_channels // groups * math.prod(self.kernel_size))
        self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound, device, dtype)
        self.bias = _uniform((out_channels,), bound, device, dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        nsp = self._nsp
        shape = getattr(x, "shape", ())
        if len(shape) not in (nsp + 1, nsp + 2) or shape[-nsp - 1] != self.in_channels:
            dims = ", ".join(F._SPATIAL_NAMES[nsp])
            raise ValueError(f"[nn] {type(self).__name__}: expected input of shape (N, {self.in_channels}, "
                             f"{dims}) or ({self.in_channels}, {dims}) (in_channels), got "
                             f"{shape if isinstance(x, Tensor) else type(x).__name__}")
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


class Conv1d(_ConvNd):
    """1-d convolution over (N, C_in, L) or (C_in, L); weight (C_out, C_in/groups, k). padding is an int,
    'valid' or 'same' (stride 1). Weight and bias start from U(-b, b), b = 1/sqrt(C_in/groups * k), as torch.

        >>> conv = Conv1d(3, 8, 5, padding=2)
        >>> conv(Tensor.ones(2, 3, 9)).shape, conv.weight.shape
        ((2, 8, 9), (8, 3, 5))
    """

    _nsp = 1


class Conv2d(_ConvNd):
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

    _nsp = 2


class Conv3d(_ConvNd):
    """3-d convolution over (N, C_in, D, H, W) or (C_in, D, H, W); weight (C_out, C_in/groups, kd, kh, kw).
    padding is an int, 3 ints, 'valid' or 'same' (stride 1). Weight and bias start from U(-b, b),
    b = 1/sqrt(C_in/groups * kd * kh * kw), as torch.

        >>> conv = Conv3d(2, 4, 3, padding=1)
        >>> conv(Tensor.ones(1, 2, 5, 6, 7)).shape, conv.weight.shape
        ((1, 4, 5, 6, 7), (4, 2, 3, 3, 3))
    """

    _nsp = 3


class _ConvTransposeNd(Module):
    """ConvTranspose1d/2d/3d: weight (C_in, C_out/groups, *kernel) and bias from U(-b, b),
    b = 1/sqrt(C_out/groups * prod(kernel)) (torch's fan_in of this layout); the math is
    F.conv_transpose1d/2d/3d."""

    _nsp = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 output_padding: int | Sequence[int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | Sequence[int] = 1, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        name, nsp = type(self).__name__, self._nsp
        _positive(name, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"[nn] {name}: expected in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) divisible by groups, got groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F._ntuple(name, "kernel_size", kernel_size, nsp)
        self.stride = F._ntuple(name, "stride", stride, nsp)
        self.padding = F._ntuple(name, "padding", padding, nsp)
        self.output_padding = F._ntuple(name, "output_padding", output_padding, nsp)
        self.dilation = F._ntuple(name, "dilation", dilation, nsp)
        _positive(name, kernel_size=min(self.kernel_size), stride=min(self.stride),
                  dilation=min(self.dilation))
        bound = _fan_in_bound(out_channels // groups * math.prod(self.kernel_size))
        self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound, device, dtype)
        self.bias = _uniform((out_channels,), bound, device, dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[self._nsp]
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups,
                    self.dilation)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, output_padding={self.output_padding}")


class ConvTranspose1d(_ConvTransposeNd):
    """The transpose of Conv1d over (N, C_in, L) or (C_in, L), as torch: weight (C_in, C_out/groups, k),
    output (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 long.

        >>> up = ConvTranspose1d(4, 2, 4, stride=2, padding=1)
        >>> up(Tensor.ones(3, 4, 5)).shape, up.weight.shape
        ((3, 2, 10), (4, 2, 4))
    """

    _nsp = 1


class ConvTranspose2d(_ConvTransposeNd):
    """The transpose of Conv2d over (N, C_in, H, W) or (C_in, H, W), as torch: weight (C_in, C_out/groups, kh,
    kw), output (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1 high. Weight and
    bias start from U(-b, b), b = 1/sqrt(C_out/groups * kh * kw).

        >>> up = ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        >>> up(Tensor.ones(2, 8, 5, 5)).shape, up.weight.shape
        ((2, 4, 10, 10), (8, 4, 3, 3))
    """

    _nsp = 2


class ConvTranspose3d(_ConvTransposeNd):
    """The transpose of Conv3d over (N, C_in, D, H, W) or (C_in, D, H, W), as torch: weight (C_in,
    C_out/groups, kd, kh, kw), each output dim (in - 1) * stride - 2 * padding + dilation * (k - 1) +
    output_padding + 1.

        >>> up = ConvTranspose3d(4, 2, 2, stride=2)
        >>> up(Tensor.ones(1, 4, 2, 3, 3)).shape, up.weight.shape
        ((1, 2, 4, 6, 6), (4, 2, 2, 2, 2))
    """

    _nsp = 3


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
    """Zero each element with probability p and scale the rest by 1/(1-p) while self.training (True
    from construction, as torch's; set by train()/eval()); the identity otherwise.

        >>> Dropout(0.5).eval()(Tensor([1.0, 2.0])).tolist()
        [1.0, 2.0]
        >>> kept = set(Dropout(0.5)(Tensor.ones(100)).tolist())
        >>> kept <= {0.0, 2.0}                                            # dropped, or scaled by 1/(1-p)
        True
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        F._check_p("Dropout", p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)


class Dropout2d(Module):
    """Zero whole channels of (N, C, H, W) or (C, H, W) with probability p while self.training, scaling the
    kept ones by 1/(1-p); the identity otherwise.

        >>> y = Dropout2d(0.5).train()(Tensor.ones(4, 6, 3, 3)).reshape(24, 9)
        >>> bool((y.amax(1) == y.amin(1)).all())                          # each channel kept or dropped
        True
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        F._check_p("Dropout2d", p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout2d(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# ---------------------------------------------------------------- activations and reshapes

class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments, as torch.

        >>> Identity(54, unused="x")(Tensor([1.0])).tolist()
        [1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class _Elementwise(Module):
    """A layer without parameters or options whose forward is `fn` of the input."""
    fn: Callable[[Tensor], Tensor]

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


class _ElementwiseInplace(_Elementwise):
    """An _Elementwise layer whose torch constructor takes `inplace`: accepted and ignored (the layer
    returns its result; F's functions take inplace=)."""

    def __init__(self, inplace: bool = False):
        super().__init__()


class ReLU(_ElementwiseInplace):
    """max(x, 0) elementwise (inplace is accepted and ignored: tg tensors are values).

        >>> ReLU()(Tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """

    fn = staticmethod(F.relu)


class LeakyReLU(Module):
    """x where positive, else negative_slope * x.

        >>> LeakyReLU(0.5)(Tensor([-1.0, 2.0])).tolist()
        [-0.5, 2.0]
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """x where positive, else alpha * (exp(x) - 1).

        >>> [round(v, 4) for v in ELU()(Tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class GELU(Module):
    """x * Phi(x) with erf (approximate='none') or torch's tanh approximation ('tanh').

        >>> [round(v, 4) for v in GELU(approximate="tanh")(Tensor([1.0])).tolist()]
        [0.8412]
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"[nn] GELU: expected approximate 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(_ElementwiseInplace):
    """x * sigmoid(x).

        >>> [round(v, 4) for v in SiLU()(Tensor([1.0])).tolist()]
        [0.7311]
    """

    fn = staticmethod(F.silu)


class Tanh(_Elementwise):
    """tanh(x) elementwise.

        >>> Tanh()(Tensor([0.0])).tolist()
        [0.0]
    """

    fn = staticmethod(F.tanh)


class Sigmoid(_Elementwise):
    """1 / (1 + exp(-x)) elementwise.

        >>> Sigmoid()(Tensor([0.0])).tolist()
        [0.5]
    """

    fn = staticmethod(F.sigmoid)


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, and x where beta * x > threshold.

        >>> [round(v, 4) for v in Softplus()(Tensor([0.0])).tolist()]
        [0.6931]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class ReLU6(_ElementwiseInplace):
    """min(max(x, 0), 6) elementwise (inplace is accepted and ignored, as ReLU).

        >>> ReLU6()(Tensor([-1.0, 3.0, 8.0])).tolist()
        [0.0, 3.0, 6.0]
    """

    fn = staticmethod(F.relu6)


class Hardtanh(Module):
    """x clamped to [min_val, max_val] (min_val > max_val is refused at the call, by F.hardtanh).

        >>> Hardtanh(-1.0, 2.0)(Tensor([-2.0, 0.5, 3.0])).tolist()
        [-1.0, 0.5, 2.0]
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Hardsigmoid(_ElementwiseInplace):
    """clamp(x / 6 + 1/2, 0, 1) elementwise.

        >>> Hardsigmoid()(Tensor([-4.0, 0.0, 4.0])).tolist()
        [0.0, 0.5, 1.0]
    """

    fn = staticmethod(F.hardsigmoid)


class Hardswish(_ElementwiseInplace):
    """x * hardsigmoid(x) elementwise.

        >>> Hardswish()(Tensor([-4.0, 1.0, 4.0])).tolist()
        [-0.0, 0.6666666865348816, 4.0]
    """

    fn = staticmethod(F.hardswish)


class SELU(_ElementwiseInplace):
    """scale * elu(x, alpha) with torch's fixed constants (alpha 1.6733, scale 1.0507).

        >>> [round(v, 4) for v in SELU()(Tensor([-1.0, 2.0])).tolist()]
        [-1.1113, 2.1014]
    """

    fn = staticmethod(F.selu)


class CELU(Module):
    """x where positive, else alpha * (exp(x / alpha) - 1).

        >>> [round(v, 4) for v in CELU(alpha=2.0)(Tensor([-1.0, 2.0])).tolist()]
        [-0.7869, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.celu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Mish(_ElementwiseInplace):
    """x * tanh(softplus(x)) elementwise.

        >>> [round(v, 4) for v in Mish()(Tensor([-1.0, 2.0])).tolist()]
        [-0.3034, 1.944]
    """

    fn = staticmethod(F.mish)


class LogSigmoid(_Elementwise):
    """log(sigmoid(x)) elementwise, stable for large |x|.

        >>> [round(v, 4) for v in LogSigmoid()(Tensor([-200.0, 0.0])).tolist()]
        [-200.0, -0.6931]
    """

    fn = staticmethod(F.logsigmoid)


class Softsign(_Elementwise):
    """x / (1 + |x|) elementwise.

        >>> Softsign()(Tensor([-3.0, 1.0])).tolist()
        [-0.75, 0.5]
    """

    fn = staticmethod(F.softsign)


class Tanhshrink(_Elementwise):
    """x - tanh(x) elementwise.

        >>> [round(v, 4) for v in Tanhshrink()(Tensor([0.0, 1.0])).tolist()]
        [0.0, 0.2384]
    """

    fn = staticmethod(F.tanhshrink)


class GLU(Module):
    """a * sigmoid(b), where a and b are the two halves of the input along dim (its size there must be even).

        >>> GLU()(Tensor([[1.0, 2.0, 0.0, 0.0]])).tolist()
        [[0.5, 1.0]]
    """

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def _softmax_dim(dim: int | None, x: Tensor) -> int:
    """torch's implicit dim for dim=None (deprecated there): 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is not None:
        return dim
    return 0 if x.ndim in (0, 1, 3) else 1


class Softmax(Module):
    """exp(x) / sum(exp(x)) along dim. Give dim: dim=None takes torch's legacy rule (0 for 0-, 1- and 3-d
    inputs, else 1), which is rarely the class dim you mean.

        >>> [round(v, 4) for v in Softmax(dim=-1)(Tensor([[0.0, 1.0]]))[0].tolist()]
        [0.2689, 0.7311]
    """

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, _softmax_dim(self.dim, x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """x - logsumexp(x) along dim (dim=None: torch's legacy rule, as Softmax).

        >>> [round(v, 4) for v in LogSoftmax(dim=1)(Tensor([[0.0, 0.0]]))[0].tolist()]
        [-0.6931, -0.6931]
    """

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, _softmax_dim(self.dim, x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class CosineSimilarity(Module):
    """The cosine of the angle between x1 and x2 along dim, each norm clamped to at least eps.

        >>> CosineSimilarity()(Tensor([[1.0, 0.0]]), Tensor([[2.0, 0.0]])).tolist()
        [1.0]
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"


class PairwiseDistance(Module):
    """The p-norm of x1 - x2 + eps over the last dim.

        >>> [round(v, 4) for v in PairwiseDistance()(Tensor([[0.0, 0.0]]), Tensor([[3.0, 4.0]])).tolist()]
        [5.0]
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim     # torch's attribute name for p

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)

    def extra_repr(self) -> str:
        return f"p={self.norm}, eps={self.eps}, keepdim={self.keepdim}"


class Flatten(Module):
    """Merge dims start_dim..end_dim into one (by default all but the batch dim).

        >>> Flatten()(Tensor.ones(2, 3, 4, 5)).shape
        (2, 60)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim into unflattened_size (one entry may be -1).

        >>> Unflatten(1, (3, 4))(Tensor.ones(2, 12)).shape
        (2, 3, 4)
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


# ---------------------------------------------------------------- pooling

class _MaxPoolNd(Module):
    """MaxPool1d/2d/3d: the settings of F.max_pool1d/2d/3d, checked at the first call."""

    _pool: Callable[..., Any] = staticmethod(F.max_pool2d)

    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return self._pool(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                          self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """The max over kernel_size windows of (N, C, L) or (C, L) (see tg.nn.functional.max_pool1d).

        >>> MaxPool1d(2)(Tensor([[1.0, 5.0, 2.0, 4.0, 3.0]])).tolist()
        [[5.0, 4.0]]
    """

    _pool = staticmethod(F.max_pool1d)


class MaxPool2d(_MaxPoolNd):
    """The max over kernel_size windows of (N, C, H, W) or (C, H, W); stride defaults to kernel_size, padding
    reads as -inf, ceil_mode keeps a last partial window; return_indices=True also returns each max's flat
    index into its (H, W) plane (see tg.nn.functional.max_pool2d).

        >>> MaxPool2d(2)(Tensor.arange(16).reshape(1, 1, 4, 4).float()).tolist()
        [[[[5.0, 7.0], [13.0, 15.0]]]]
        >>> MaxPool2d(3, stride=2, padding=1)(Tensor.ones(2, 3, 7, 7)).shape
        (2, 3, 4, 4)
    """

    _pool = staticmethod(F.max_pool2d)


class MaxPool3d(_MaxPoolNd):
    """The max over kernel_size windows of (N, C, D, H, W) or (C, D, H, W) (see
    tg.nn.functional.max_pool3d).

        >>> MaxPool3d(2, stride=1, padding=1)(Tensor.ones(2, 3, 4, 5, 6)).shape
        (2, 3, 5, 6, 7)
    """

    _pool = staticmethod(F.max_pool3d)


class AvgPool1d(Module):
    """The mean over kernel_size windows of (N, C, L) or (C, L) (see tg.nn.functional.avg_pool1d).

        >>> AvgPool1d(2, stride=1)(Tensor([[1.0, 5.0, 2.0]])).tolist()
        [[3.0, 3.5]]
    """

    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AvgPoolNd(AvgPool1d):
    """AvgPool2d/3d: AvgPool1d's settings and a divisor_override."""

    _pool: Callable[..., Tensor] = staticmethod(F.avg_pool2d)

    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return self._pool(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, self.divisor_override)


class AvgPool2d(_AvgPoolNd):
    """The mean over kernel_size windows of (N, C, H, W) or (C, H, W), torch's divisor rules (see
    tg.nn.functional.avg_pool2d).

        >>> AvgPool2d(2)(Tensor.arange(16).reshape(1, 1, 4, 4).float()).tolist()
        [[[[2.5, 4.5], [10.5, 12.5]]]]
    """

    _pool = staticmethod(F.avg_pool2d)


class AvgPool3d(_AvgPoolNd):
    """The mean over kernel_size windows of (N, C, D, H, W) or (C, D, H, W), torch's divisor rules (see
    tg.nn.functional.avg_pool3d).

        >>> AvgPool3d(2)(Tensor.ones(1, 2, 4, 4, 5)).shape
        (1, 2, 2, 2, 2)
    """

    _pool = staticmethod(F.avg_pool3d)


class _AdaptivePoolNd(Module):
    """Adaptive pools: the output_size (None keeps that dim) of an F.adaptive_* function."""

    _pool: Callable[..., Any] = staticmethod(F.adaptive_avg_pool2d)

    def __init__(self, output_size: int | None | Sequence[int | None]):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return self._pool(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePoolNd):
    """The mean over windows of (N, C, L) or (C, L) sized to give output_size, as torch (see
    tg.nn.functional.adaptive_avg_pool1d).

        >>> AdaptiveAvgPool1d(2)(Tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])).tolist()
        [[2.0, 4.0]]
    """

    _pool = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_AdaptivePoolNd):
    """The mean over windows of (N, C, H, W) or (C, H, W) sized to give output_size (None keeps that dim), as
    torch (see tg.nn.functional.adaptive_avg_pool2d).

        >>> AdaptiveAvgPool2d((1, 1))(Tensor.ones(2, 3, 7, 5)).shape
        (2, 3, 1, 1)
    """

    _pool = staticmethod(F.adaptive_avg_pool2d)


class AdaptiveAvgPool3d(_AdaptivePoolNd):
    """The mean over windows of (N, C, D, H, W) or (C, D, H, W) sized to give output_size (None keeps that
    dim), as torch (see tg.nn.functional.adaptive_avg_pool3d).

        >>> AdaptiveAvgPool3d((1, 2, None))(Tensor.ones(2, 3, 5, 4, 7)).shape
        (2, 3, 1, 2, 7)
    """

    _pool = staticmethod(F.adaptive_avg_pool3d)


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    """Adaptive max pools: output_size and return_indices."""

    def __init__(self, output_size: int | None | Sequence[int | None], return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:     # type: ignore[override]
        return self._pool(x, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """The max over adaptive windows of (N, C, L) or (C, L) (see tg.nn.functional.adaptive_max_pool1d).

        >>> AdaptiveMaxPool1d(2)(Tensor([[1.0, 5.0, 2.0, 4.0, 3.0]])).tolist()
        [[5.0, 4.0]]
    """

    _pool = staticmethod(F.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """The max over adaptive windows of (N, C, H, W) or (C, H, W); return_indices=True also returns each
    max's flat index into its (H, W) plane (see tg.nn.functional.adaptive_max_pool2d).

        >>> AdaptiveMaxPool2d(1)(Tensor.arange(12).reshape(1, 3, 4).float()).tolist()
        [[[11.0]]]
    """

    _pool = staticmethod(F.adaptive_max_pool2d)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """The max over adaptive windows of (N, C, D, H, W) or (C, D, H, W) (see
    tg.nn.functional.adaptive_max_pool3d).

        >>> AdaptiveMaxPool3d((1, 2, 2))(Tensor.ones(2, 3, 4, 5, 6)).shape
        (2, 3, 1, 2, 2)
    """

    _pool = staticmethod(F.adaptive_max_pool3d)


# ---------------------------------------------------------------- padding

class _PadNd(Module):
    """The padding layers: F.pad with a fixed mode over the last 1, 2 or 3 dims; padding is an int for every
    side or (left, right[, top, bottom[, front, back]]), last dim first, as torch."""

    _nsp = 1
    _mode = "constant"

    def __init__(self, padding: int | Sequence[int]):
        super().__init__()
        self.padding = F._ntuple(type(self).__name__, "padding", padding, 2 * self._nsp)
        self.value = 0.0

    def forward(self, x: Tensor) -> Tensor:
        if self._mode == "constant":
            return F.pad(x, self.padding, value=self.value)
        return F.pad(x, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding: int | Sequence[int], value: float):
        super().__init__(padding)
        self.value = value

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ReflectionPad1d(_PadNd):
    """Pad the last dim of (N, C, L) or (C, L):
    mirrors the input without repeating the edge, as torch.nn.ReflectionPad1d.

        >>> ReflectionPad1d((2, 1))(Tensor([[1.0, 2.0, 3.0]])).tolist()
        [[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]
    """

    _nsp = 1
    _mode = "reflect"


class ReflectionPad2d(_PadNd):
    """Pad the last 2 dims of (N, C, H, W) or (C, H, W):
    mirrors the input without repeating the edge, as torch.nn.ReflectionPad2d.

        >>> ReflectionPad2d(1)(Tensor.ones(1, 3, 4)).shape
        (1, 5, 6)
    """

    _nsp = 2
    _mode = "reflect"


class ReflectionPad3d(_PadNd):
    """Pad the last 3 dims of (N, C, D, H, W) or (C, D, H, W):
    mirrors the input without repeating the edge, as torch.nn.ReflectionPad3d.

        >>> ReflectionPad3d(1)(Tensor.ones(1, 2, 3, 4)).shape
        (1, 4, 5, 6)
    """

    _nsp = 3
    _mode = "reflect"


class ReplicationPad1d(_PadNd):
    """Pad the last dim of (N, C, L) or (C, L): repeats the edge values, as torch.nn.ReplicationPad1d.

        >>> ReplicationPad1d((2, 1))(Tensor([[1.0, 2.0, 3.0]])).tolist()
        [[1.0, 1.0, 1.0, 2.0, 3.0, 3.0]]
    """

    _nsp = 1
    _mode = "replicate"


class ReplicationPad2d(_PadNd):
    """Pad the last 2 dims of (N, C, H, W) or (C, H, W):
    repeats the edge values, as torch.nn.ReplicationPad2d.

        >>> ReplicationPad2d(1)(Tensor.ones(1, 3, 4)).shape
        (1, 5, 6)
    """

    _nsp = 2
    _mode = "replicate"


class ReplicationPad3d(_PadNd):
    """Pad the last 3 dims of (N, C, D, H, W) or (C, D, H, W):
    repeats the edge values, as torch.nn.ReplicationPad3d.

        >>> ReplicationPad3d(1)(Tensor.ones(1, 2, 3, 4)).shape
        (1, 4, 5, 6)
    """

    _nsp = 3
    _mode = "replicate"


class CircularPad1d(_PadNd):
    """Pad the last dim of (N, C, L) or (C, L): wraps around, as torch.nn.CircularPad1d.

        >>> CircularPad1d((2, 1))(Tensor([[1.0, 2.0, 3.0]])).tolist()
        [[2.0, 3.0, 1.0, 2.0, 3.0, 1.0]]
    """

    _nsp = 1
    _mode = "circular"


class CircularPad2d(_PadNd):
    """Pad the last 2 dims of (N, C, H, W) or (C, H, W): wraps around, as torch.nn.CircularPad2d.

        >>> CircularPad2d(1)(Tensor.ones(1, 3, 4)).shape
        (1, 5, 6)
    """

    _nsp = 2
    _mode = "circular"


class CircularPad3d(_PadNd):
    """Pad the last 3 dims of (N, C, D, H, W) or (C, D, H, W): wraps around, as torch.nn.CircularPad3d.

        >>> CircularPad3d(1)(Tensor.ones(1, 2, 3, 4)).shape
        (1, 4, 5, 6)
    """

    _nsp = 3
    _mode = "circular"


class ZeroPad1d(_PadNd):
    """Pad the last dim of a tensor: adds zeros, as torch.nn.ZeroPad1d.

        >>> ZeroPad1d((2, 1))(Tensor([[1.0, 2.0, 3.0]])).tolist()
        [[0.0, 0.0, 1.0, 2.0, 3.0, 0.0]]
    """

    _nsp = 1


class ZeroPad2d(_PadNd):
    """Pad the last 2 dims of a tensor: adds zeros, as torch.nn.ZeroPad2d.

        >>> ZeroPad2d(1)(Tensor.ones(1, 3, 4)).shape
        (1, 5, 6)
    """

    _nsp = 2


class ZeroPad3d(_PadNd):
    """Pad the last 3 dims of a tensor: adds zeros, as torch.nn.ZeroPad3d.

        >>> ZeroPad3d(1)(Tensor.ones(1, 2, 3, 4)).shape
        (1, 4, 5, 6)
    """

    _nsp = 3


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim of a tensor: adds `value`, as torch.nn.ConstantPad1d.

        >>> ConstantPad1d((2, 1), 9.0)(Tensor([[1.0, 2.0, 3.0]])).tolist()
        [[9.0, 9.0, 1.0, 2.0, 3.0, 9.0]]
    """

    _nsp = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last 2 dims of a tensor: adds `value`, as torch.nn.ConstantPad2d.

        >>> ConstantPad2d(1, 9.0)(Tensor.ones(1, 3, 4)).shape
        (1, 5, 6)
    """

    _nsp = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last 3 dims of a tensor: adds `value`, as torch.nn.ConstantPad3d.

        >>> ConstantPad3d(1, 9.0)(Tensor.ones(1, 2, 3, 4)).shape
        (1, 4, 5, 6)
    """

    _nsp = 3


class Upsample(Module):
    """Resize the spatial dims of (N, C, *spatial) to size or floor(in * scale_factor), with mode 'nearest',
    'linear', 'bilinear' or 'trilinear' (see tg.nn.functional.interpolate).

        >>> Upsample(scale_factor=2)(Tensor([[[1.0, 2.0]]])).tolist()
        [[[1.0, 1.0, 2.0, 2.0]]]
    """

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class PixelShuffle(Module):
    """(*, C * r^2, H, W) -> (*, C, H * r, W * r) (tg.nn.functional.pixel_shuffle).

        >>> PixelShuffle(3)(Tensor.ones(1, 9, 4, 4)).shape
        (1, 1, 12, 12)
    """

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H * r, W * r) -> (*, C * r^2, H, W) (tg.nn.functional.pixel_unshuffle).

        >>> PixelUnshuffle(2)(Tensor.ones(1, 1, 4, 6)).shape
        (1, 4, 2, 3)
    """

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


# ---------------------------------------------------------------- losses

class _Loss(Module):
    """Holds reduction ('mean', 'sum' or 'none'), checked when the loss is built."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        F._check_reduction(type(self).__name__, reduction)
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
