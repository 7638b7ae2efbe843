"""Padding and convolutions (1-3 spatial dims, transposed too), as fused contractions
(tg/core/fused.py) where they apply."""
from __future__ import annotations

import itertools
from typing import Sequence

from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.tensor import Tensor, apply
from tg.nn.functional.checks import (
    _SPATIAL_NAMES,
    _check_image,
    _check_signal,
    _check_spatial,
    _ntuple,
    _one,
    _pair,
    _triple,
)


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
