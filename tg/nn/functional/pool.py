"""Pooling (max, average, adaptive), interpolation and pixel shuffles."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tg.core.autocast import autocast_op
from tg.core.dtype import dtypes, min_value
from tg.core.tensor import Tensor, index_range
from tg.nn.functional.checks import _SPATIAL_NAMES, _check_float, _check_spatial, _ntuple


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
