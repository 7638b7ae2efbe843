"""Pooling layers (max, average, adaptive), Upsample and pixel shuffles."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.module import Module


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
