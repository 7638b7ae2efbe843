"""Convolutions (1-3 spatial dims, transposed too) and padding layers."""
from __future__ import annotations

import math
from typing import Sequence

from tg.core.dtype import DType
from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.functional.checks import _SPATIAL_NAMES, _ntuple
from tg.nn.functional.conv import _conv_pads
from tg.nn.layers.basic import _fan_in_bound, _positive, _uniform
from tg.nn.module import Module


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
        self.kernel_size = _ntuple(name, "kernel_size", kernel_size, nsp)
        self.stride = _ntuple(name, "stride", stride, nsp)
        self.dilation = _ntuple(name, "dilation", dilation, nsp)
        _positive(name, kernel_size=min(self.kernel_size), stride=min(self.stride),
                  dilation=min(self.dilation))
        if isinstance(padding, str):
            _conv_pads(name, padding, self.kernel_size, self.stride, self.dilation)     # checks the string
            self.padding: tuple[int, ...] | str = padding
        else:
            self.padding = _ntuple(name, "padding", padding, nsp)
        bound = _fan_in_bound(in_channels // groups * math.prod(self.kernel_size))
        self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound, device, dtype)
        self.bias = _uniform((out_channels,), bound, device, dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        nsp = self._nsp
        shape = getattr(x, "shape", ())
        if len(shape) not in (nsp + 1, nsp + 2) or shape[-nsp - 1] != self.in_channels:
            dims = ", ".join(_SPATIAL_NAMES[nsp])
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
        self.kernel_size = _ntuple(name, "kernel_size", kernel_size, nsp)
        self.stride = _ntuple(name, "stride", stride, nsp)
        self.padding = _ntuple(name, "padding", padding, nsp)
        self.output_padding = _ntuple(name, "output_padding", output_padding, nsp)
        self.dilation = _ntuple(name, "dilation", dilation, nsp)
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


class _PadNd(Module):
    """The padding layers: F.pad with a fixed mode over the last 1, 2 or 3 dims; padding is an int for every
    side or (left, right[, top, bottom[, front, back]]), last dim first, as torch."""

    _nsp = 1
    _mode = "constant"

    def __init__(self, padding: int | Sequence[int]):
        super().__init__()
        self.padding = _ntuple(type(self).__name__, "padding", padding, 2 * self._nsp)
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
