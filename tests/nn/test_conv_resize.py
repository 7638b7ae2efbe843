"""conv1d/conv3d, the transposed convolutions, 1-d and adaptive pooling, interpolate and einsum against
numpy references written out here from torch's documented definitions, and their gradients against
finite differences."""
import itertools
import math

import numpy as np
import pytest
from helpers import gradcheck

import tg.nn.functional as F
from tg import Tensor, nn


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(got, want, atol=1e-5):
    np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=1e-5)


def np_conv(x, w, stride, padding, dilation, groups):
    """Cross-correlation of x (N, C, *spatial) with w (O, C/groups, *kernel), tap by tap."""
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    kernel = w.shape[2:]
    outs = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(x.shape[2:], kernel, stride, dilation)]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    out = np.zeros((x.shape[0], w.shape[0], *outs))
    for tap in itertools.product(*[range(k) for k in kernel]):
        window = tuple(slice(t * d, t * d + (o - 1) * st + 1, st)
                       for t, d, o, st in zip(tap, dilation, outs, stride))
        patch = x[(slice(None), slice(None)) + window]                    # (N, C, *outs)
        for g in range(groups):
            weight = w[(slice(g * og, (g + 1) * og), slice(None)) + tap]   # (O/g, C/g)
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], weight)
    return out


def np_conv_transpose(x, w, stride, padding, output_padding, dilation, groups):
    """Each input pixel i scatters x[i] * w into output i * stride - padding + tap * dilation; w is
    (C, O/groups, *kernel); output_padding adds room at the end."""
    kernel, og, cg = w.shape[2:], w.shape[1], x.shape[1] // groups
    full = [(i - 1) * s + d * (k - 1) + 1 + op
            for i, s, d, k, op in zip(x.shape[2:], stride, dilation, kernel, output_padding)]
    out = np.zeros((x.shape[0], og * groups, *full))
    for tap in itertools.product(*[range(k) for k in kernel]):
        spots = tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                      for t, d, i, s in zip(tap, dilation, x.shape[2:], stride))
        for g in range(groups):
            weight = w[(slice(g * cg, (g + 1) * cg), slice(None)) + tap]   # (C/g, O/g)
            out[(slice(None), slice(g * og, (g + 1) * og)) + spots] += np.einsum(
                "nc...,co->no...", x[:, g * cg:(g + 1) * cg], weight)
    return out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]


# ---------------------------------------------------------------- convolutions

@pytest.mark.parametrize("stride,padding,dilation,groups",
                         [(1, 0, 1, 1), (2, 1, 1, 1), (3, 2, 2, 2), (1, 0, 2, 3)])
def test_conv1d_matches_numpy(stride, padding, dilation, groups):
    x, w, b = rand(2, 6, 11), rand(12, 6 // groups, 3, seed=1), rand(12, seed=2)
    got = F.conv1d(Tensor(x), Tensor(w), Tensor(b), stride, padding, dilation, groups)
    want = np_conv(x, w, (stride,), (padding,), (dilation,), groups) + b[:, None]
    close(got, want)
    close(F.conv1d(Tensor(x[0]), Tensor(w), None, stride, padding, dilation, groups), want[0] - b[:, None])


def test_conv1d_same_padding_and_layer():
    x = rand(1, 2, 7)
    assert F.conv1d(Tensor(x), Tensor(rand(4, 2, 4)), padding="same").shape == (1, 4, 7)
    layer = nn.Conv1d(2, 5, 3, stride=2, padding=1, bias=True)
    assert layer.weight.shape == (5, 2, 3) and layer.bias.shape == (5,)
    want = np_conv(x, layer.weight.numpy(), (2,), (1,), (1,), 1) + layer.bias.numpy()[:, None]
    close(layer(Tensor(x)), want)


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 0, 1, 1, 1), (2, 1, 1, 1, 2), (2, 2, 1, 1, 1), (3, 3, 0, 1, 2),
    ((3, 2), (2, 1), (1, 0), (1, 2), 1), (1, 2, 1, 2, 3),
])
def test_conv_transpose2d_matches_numpy(stride, padding, output_padding, dilation, groups):
    x, w, b = rand(2, 6, 5, 7), rand(6, 4, 3, 2, seed=1), rand(4 * groups, seed=2)
    pair = (lambda v: v if isinstance(v, tuple) else (v, v))
    got = F.conv_transpose2d(Tensor(x), Tensor(w), Tensor(b), stride, padding, output_padding, groups,
                             dilation)
    want = np_conv_transpose(x, w, pair(stride), pair(padding), pair(output_padding), pair(dilation), groups)
    close(got, want + b[:, None, None])


def _phase_cases():
    """Strided transposed convs (the per-phase path): 1-, 2- and 3-d, strides above, at and below the
    kernel, every padding that leaves an output, output_padding, groups."""
    rng = np.random.default_rng(7)
    cases = []
    for nsp, stride, k in itertools.product((1, 2, 3), (2, 3, 4), (1, 2, 3, 4)):
        if nsp == 3 and (stride > 2 or k > 3):
            continue
        ks = tuple(int(v) for v in rng.integers(max(1, k - 1), k + 1, nsp))
        strides = tuple(int(v) for v in rng.integers(2, stride + 1, nsp)) if nsp > 1 else (stride,)
        pads = tuple(int(rng.integers(0, (kk + 1) // 2 + 1)) for kk in ks)
        out_pads = tuple(int(rng.integers(0, st)) for st in strides)
        cases.append((nsp, strides, ks, pads, out_pads, int(rng.choice([1, 2]))))
    return cases


@pytest.mark.parametrize("nsp,stride,kernel,padding,output_padding,groups", _phase_cases())
def test_strided_transposed_convs_match_numpy(nsp, stride, kernel, padding, output_padding, groups):
    x = rand(2, 4, *[5, 4, 3][:nsp], seed=nsp)
    w, b = rand(4, 6 // groups, *kernel, seed=nsp + 1), rand(6 // groups * groups, seed=3)
    want = np_conv_transpose(x, w, stride, padding, output_padding, (1,) * nsp, groups)
    call = getattr(F, f"conv_transpose{nsp}d")
    if min(want.shape[2:]) < 1:
        with pytest.raises(ValueError, match="leaves no output"):
            call(Tensor(x), Tensor(w), Tensor(b), stride, padding, output_padding, groups)
        return
    got = call(Tensor(x), Tensor(w), Tensor(b), stride, padding, output_padding, groups)
    close(got, want + b.reshape(-1, *[1] * nsp), atol=1e-9)


def test_a_strided_transposed_conv_multiplies_no_stuffed_zeros():
    """DCGAN's layer (4x4 taps, stride 2, padding 1): the kernels multiply what the result needs, 2 N Cin
    Cout k^2 H W operations, and add the window positions back (1.23x in all here), not a conv over
    the zero-stuffed input (5.3x); and its gradients are finite differences'."""
    from tg.core.device import GlobalCounters
    x, w = rand(2, 8, 6, 6), rand(8, 5, 4, 4, seed=1)
    xt, wt = Tensor(x).realize(), Tensor(w).realize()
    GlobalCounters.reset()
    F.conv_transpose2d(xt, wt, stride=2, padding=1).realize()
    useful = 2 * 2 * 8 * 5 * 16 * 6 * 6
    assert GlobalCounters.global_ops < 2 * useful, (GlobalCounters.global_ops, useful)
    gradcheck(lambda a, b: F.conv_transpose2d(a, b, stride=2, padding=1, output_padding=1),
              rand(1, 3, 3, 4), rand(3, 2, 4, 3, seed=1))


def _transpose2d_grad_cases():
    """conv_transpose2d's gradients (fused.ConvTranspose2d's backward) over generated strides, kernels,
    paddings, output paddings (below the stride), dilations, groups and bias."""
    rng = np.random.default_rng(11)
    cases = []
    for _ in range(14):
        stride = tuple(int(v) for v in rng.integers(1, 4, 2))
        kernel = tuple(int(v) for v in rng.integers(1, 5, 2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, 2))
        padding = tuple(int(rng.integers(0, d * (k - 1) // 2 + 1)) for k, d in zip(kernel, dilation))
        out_pad = tuple(int(rng.integers(0, s)) for s in stride)
        groups, bias = int(rng.choice([1, 2])), bool(rng.integers(2))
        cases.append((stride, kernel, padding, out_pad, dilation, groups, bias))
    return cases


@pytest.mark.parametrize("stride,kernel,padding,out_pad,dilation,groups,bias", _transpose2d_grad_cases())
def test_conv_transpose2d_gradients(stride, kernel, padding, out_pad, dilation, groups, bias):
    x, w = rand(2, 4, 3, 4, seed=5), rand(4, 6 // groups, *kernel, seed=6)
    b = rand(6 // groups * groups, seed=7)
    want = np_conv_transpose(x, w, stride, padding, out_pad, dilation, groups)
    got = F.conv_transpose2d(Tensor(x), Tensor(w), Tensor(b) if bias else None, stride, padding, out_pad,
                             groups, dilation)
    close(got, want + (b[:, None, None] if bias else 0), atol=1e-9)
    inputs = (x[:1], w, b) if bias else (x[:1], w)
    gradcheck(lambda *t: F.conv_transpose2d(t[0], t[1], t[2] if bias else None, stride, padding, out_pad,
                                            groups, dilation), *inputs)


def test_conv_transpose2d_is_the_gradient_of_conv2d():
    """conv_transpose2d(g, w) is d(sum(conv2d(x, w) * g))/dx, which is how torch defines it."""
    x, w, g = rand(1, 4, 9, 8), rand(6, 2, 3, 3, seed=1), rand(1, 6, 5, 4, seed=2)
    xt = Tensor(x, requires_grad=True)
    (F.conv2d(xt, Tensor(w), stride=2, padding=1, groups=2) * Tensor(g)).sum().backward()
    close(F.conv_transpose2d(Tensor(g), Tensor(w), stride=2, padding=1, output_padding=(0, 1), groups=2),
          xt.grad.numpy())


def _phase_grad_cases():
    """Strided conv2d's whose input gradient is one conv over the output phases (fused._by_phases: each
    kernel dim a whole number of strides): strides of 2 and 3, each dim its own, 1 to 3 taps a phase,
    paddings up to the kernel less one, groups, and input sizes the windows do not reach to the end
    (the rows past the reach get zeros)."""
    rng = np.random.default_rng(23)
    cases = []
    for _ in range(16):
        stride = tuple(int(v) for v in rng.integers(2, 4, 2))
        kernel = tuple(s * int(rng.integers(1, 4)) for s in stride)
        padding = tuple(int(rng.integers(0, k)) for k in kernel)
        size = tuple(k + int(rng.integers(0, 3 * s + 1)) for k, s in zip(kernel, stride))
        cases.append((stride, kernel, padding, size, int(rng.choice([1, 2]))))
    return cases


@pytest.mark.parametrize("stride,kernel,padding,size,groups", _phase_grad_cases())
def test_strided_conv2d_input_gradient_by_phases(stride, kernel, padding, size, groups):
    """dx of a strided conv2d taken over its phases equals the transposed conv of the output's gradient
    (numpy's, scattered tap by tap), in float64."""
    from tg.core import fused
    assert fused._by_phases((1, 1, *kernel), stride, (1, 1))
    x, w = rand(2, 4, *size, seed=1), rand(6, 4 // groups, *kernel, seed=2)
    xt = Tensor(x, requires_grad=True)
    y = F.conv2d(xt, Tensor(w), stride=stride, padding=padding, groups=groups)
    g = rand(*y.shape, seed=3)
    (y * Tensor(g)).sum().backward()
    full = np_conv_transpose(g, w, stride, (0, 0), (0, 0), (1, 1), groups)    # over the padded input
    padded = np.zeros((2, 4, *(s + 2 * p for s, p in zip(size, padding))))
    reach = tuple(min(f, s) for f, s in zip(full.shape[2:], padded.shape[2:]))
    padded[:, :, :reach[0], :reach[1]] = full[:, :, :reach[0], :reach[1]]
    (ph, pw), (h, wd) = padding, size
    close(xt.grad, padded[:, :, ph:ph + h, pw:pw + wd], atol=1e-9)


@pytest.mark.parametrize("size", [4, 6, 8, 16])
def test_transposed_conv_by_phases_either_side_of_the_waste_bound(size):
    """DCGAN's transposed layer (4x4 taps, stride 2, padding 1) at input sizes whose phase conv wastes
    more (4: 1.9x) or less (8: 1.4x) than fused.PHASE_MAX_WASTE: both ways give numpy's result."""
    from tg.core import fused
    x, w = rand(2, 6, size, size + 1, seed=4), rand(6, 4, 4, 4, seed=5)
    expect = (size + 1) * (size + 3) <= fused.PHASE_MAX_WASTE * size * (size + 1)
    assert fused._by_phases(w.shape, (2, 2), (1, 1), x.shape) == expect
    got = F.conv_transpose2d(Tensor(x), Tensor(w), stride=2, padding=1, output_padding=1)
    close(got, np_conv_transpose(x, w, (2, 2), (1, 1), (1, 1), (1, 1), 1), atol=1e-9)


def test_conv_transpose1d_matches_numpy():
    x, w = rand(2, 4, 6), rand(4, 3, 3, seed=1)
    got = F.conv_transpose1d(Tensor(x), Tensor(w), None, 3, 1, 2, 2, 1)
    close(got, np_conv_transpose(x, w, (3,), (1,), (2,), (1,), 2))
    close(F.conv_transpose1d(Tensor(x[0]), Tensor(w), stride=2),
          np_conv_transpose(x, w, (2,), (0,), (0,), (1,), 1)[0])


def test_conv_transpose2d_layer():
    layer = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    assert layer.weight.shape == (4, 3, 3, 3) and layer.bias.shape == (6,)
    x = rand(2, 4, 5, 3)
    out = layer(Tensor(x))
    assert out.shape == (2, 6, 10, 6)
    want = np_conv_transpose(x, layer.weight.numpy(), (2, 2), (1, 1), (1, 1), (1, 1), 2)
    close(out, want + layer.bias.numpy()[:, None, None])
    assert layer(Tensor(x[0])).shape == (6, 10, 6)


@pytest.mark.parametrize("stride,padding,dilation,groups",
                         [(1, 0, 1, 1), ((2, 1, 2), (1, 0, 1), (1, 2, 1), 2)])
def test_conv3d_matches_numpy(stride, padding, dilation, groups):
    x, w, b = rand(2, 4, 5, 6, 7), rand(6, 4 // groups, 2, 3, 2, seed=1), rand(6, seed=2)
    trip = (lambda v: v if isinstance(v, tuple) else (v, v, v))
    got = F.conv3d(Tensor(x), Tensor(w), Tensor(b), stride, padding, dilation, groups)
    want = np_conv(x, w, trip(stride), trip(padding), trip(dilation), groups) + b[:, None, None, None]
    close(got, want)
    close(F.conv3d(Tensor(x[1]), Tensor(w), Tensor(b), stride, padding, dilation, groups), want[1])


@pytest.mark.parametrize("call,error,match", [
    (lambda: F.conv1d(Tensor.ones(2, 3, 5), Tensor.ones(4, 2, 3)), ValueError, "C_in=3"),
    (lambda: F.conv1d(Tensor.ones(5), Tensor.ones(4, 1, 3)), ValueError, r"\(N, C, L\)"),
    (lambda: F.conv_transpose2d(Tensor.ones(1, 2, 3, 3), Tensor.ones(3, 1, 2, 2)), ValueError, "C_in=2"),
    (lambda: F.conv_transpose2d(Tensor.ones(1, 1, 3, 3), Tensor.ones(1, 1, 2, 2), stride=2, output_padding=2),
     ValueError, "output_padding"),
    (lambda: F.conv_transpose2d(Tensor.ones(1, 1, 1, 1), Tensor.ones(1, 1, 1, 1), padding=1), ValueError,
     "no output"),
    (lambda: F.conv3d(Tensor.ones(1, 1, 2, 3, 3), Tensor.ones(1, 1, 3, 1, 1)), ValueError, "input D"),
])
def test_conv_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_conv_gradients():
    gradcheck(lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2),
              rand(1, 2, 3, 2), rand(2, 2, 3, 2, seed=1), atol=1e-5)
    gradcheck(lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), dilation=(2, 1)),
              rand(1, 1, 2, 3), rand(1, 2, 2, 2, seed=1), atol=1e-5)
    gradcheck(lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1),
              rand(1, 2, 4), rand(2, 1, 3, seed=1), atol=1e-5)
    gradcheck(lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=2),
              rand(1, 2, 7), rand(2, 2, 2, seed=1), atol=1e-5)
    gradcheck(lambda x, w: F.conv3d(x, w, padding=(1, 0, 0)),
              rand(1, 1, 2, 3, 2), rand(1, 1, 2, 2, 1, seed=1), atol=1e-5)


# ---------------------------------------------------------------- pooling

def np_pool1d(x, k, s, p, reduce, fill):
    x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(p, p)], constant_values=fill)
    n = (x.shape[-1] - k) // s + 1
    return np.stack([reduce(x[..., i * s:i * s + k], axis=-1) for i in range(n)], axis=-1)


def test_pool1d_matches_numpy():
    x = rand(2, 3, 11)
    close(F.max_pool1d(Tensor(x), 3, 2, 1), np_pool1d(x, 3, 2, 1, np.max, -np.inf))
    close(F.max_pool1d(Tensor(x[0]), 2), np_pool1d(x[0], 2, 2, 0, np.max, 0))
    close(F.avg_pool1d(Tensor(x), 3, 2, 1), np_pool1d(x, 3, 2, 1, np.mean, 0))
    close(F.avg_pool1d(Tensor(x), 4, 3), np_pool1d(x, 4, 3, 0, np.mean, 0))
    assert F.max_pool1d(Tensor(x), 3, ceil_mode=True).shape == (2, 3, 4)


def np_adaptive_avg_pool(x, sizes):
    """torch's windows: output i of a dim of n averages [floor(i * n / out), ceil((i + 1) * n / out))."""
    for axis, out in zip(range(x.ndim - len(sizes), x.ndim), sizes):
        n = x.shape[axis]
        parts = [np.take(x, range(i * n // out, math.ceil((i + 1) * n / out)), axis=axis).mean(axis=axis)
                 for i in range(out)]
        x = np.stack(parts, axis=axis)
    return x


@pytest.mark.parametrize("size", [1, (2, 3), (5, 7), (3, None), (4, 6)])
def test_adaptive_avg_pool2d_matches_numpy(size):
    x = rand(2, 3, 5, 7)
    sizes = (size, size) if isinstance(size, int) else tuple(s if s is not None else 7 for s in size)
    close(F.adaptive_avg_pool2d(Tensor(x), size), np_adaptive_avg_pool(x, sizes))
    close(nn.AdaptiveAvgPool2d(size)(Tensor(x[0])), np_adaptive_avg_pool(x[0], sizes))
    close(F.adaptive_avg_pool1d(Tensor(x[0]), 3), np_adaptive_avg_pool(x[0], (3,)))


def test_pooling_gradients():
    gradcheck(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), rand(1, 1, 3, 5))
    gradcheck(lambda x: F.avg_pool1d(x, 3, 2, 1), rand(1, 2, 5))
    gradcheck(lambda x: F.max_pool1d(x, 2, 1), rand(1, 2, 5))


# ---------------------------------------------------------------- interpolate

def np_nearest_index(n_in, n_out, scale):
    """torch's nearest_idx: a copy or a halving for out == in and out == 2 * in, else floor in float32."""
    if n_out == n_in:
        return np.arange(n_out)
    if n_out == 2 * n_in:
        return np.arange(n_out) // 2
    return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * np.float32(scale)).astype(int), n_in - 1)


def np_linear_1d(x, n_out, scale, align_corners, axis):
    """torch's linear resampling of one axis: source = (i + 0.5) * scale - 0.5 clamped at 0, or
    i * (in - 1) / (out - 1) with align_corners."""
    n_in = x.shape[axis]
    parts = []
    for i in range(n_out):
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * scale - 0.5, 0.0)
        lo = int(src)
        hi = lo + 1 if lo < n_in - 1 else lo
        lam = src - lo
        parts.append((1 - lam) * np.take(x, lo, axis=axis) + lam * np.take(x, hi, axis=axis))
    return np.stack(parts, axis=axis)


@pytest.mark.parametrize("size,scale_factor", [((7, 3), None), ((10, 14), None), (None, 2),
                                               (None, (1.5, 0.6)), ((5, 5), None), (None, 1.3)])
def test_interpolate_nearest_matches_numpy(size, scale_factor):
    x = rand(2, 3, 5, 5)
    got = F.interpolate(Tensor(x), size=size, scale_factor=scale_factor)
    factors = (scale_factor, scale_factor) if isinstance(scale_factor, (int, float)) else scale_factor
    outs = size if size is not None else tuple(math.floor(5 * f) for f in factors)
    scales = [5 / o for o in outs] if size is not None else [1 / f for f in factors]
    rows, cols = (np_nearest_index(5, o, s) for o, s in zip(outs, scales))
    close(got, x[:, :, rows][:, :, :, cols])


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size,scale_factor", [((7, 3), None), ((11, 13), None), (None, 2),
                                               (None, (1.7, 0.5)), ((1, 4), None)])
def test_interpolate_bilinear_matches_numpy(size, scale_factor, align_corners):
    x = rand(2, 3, 5, 6)
    got = F.interpolate(Tensor(x), size, scale_factor, mode="bilinear", align_corners=align_corners)
    factors = (scale_factor, scale_factor) if isinstance(scale_factor, (int, float)) else scale_factor
    outs = size if size is not None else tuple(math.floor(n * f) for n, f in zip((5, 6), factors))
    scales = [n / o for n, o in zip((5, 6), outs)] if size is not None else [1 / f for f in factors]
    rows = np_linear_1d(x, outs[0], scales[0], align_corners, 2)
    want = np_linear_1d(rows, outs[1], scales[1], align_corners, 3)
    close(got, want)


def test_interpolate_linear_and_upsample():
    x = rand(2, 3, 7)
    close(F.interpolate(Tensor(x), size=12, mode="linear"), np_linear_1d(x, 12, 7 / 12, False, 2))
    close(F.interpolate(Tensor(x), size=4, mode="linear", align_corners=True), np_linear_1d(x, 4, 0, True, 2))
    close(F.interpolate(Tensor(x), scale_factor=1.5, mode="linear", recompute_scale_factor=True),
          np_linear_1d(x, 10, 7 / 10, False, 2))
    img = rand(1, 2, 3, 4)
    close(nn.Upsample(scale_factor=2)(Tensor(img)), img.repeat(2, axis=2).repeat(2, axis=3))
    up = nn.Upsample(size=(5, 7), mode="bilinear", align_corners=True)
    close(up(Tensor(img)), np_linear_1d(np_linear_1d(img, 5, 0, True, 2), 7, 0, True, 3))
    vol = rand(1, 1, 2, 3, 2)
    assert F.interpolate(Tensor(vol), scale_factor=2, mode="trilinear").shape == (1, 1, 4, 6, 4)
    close(F.interpolate(Tensor(vol), scale_factor=2), vol.repeat(2, 2).repeat(2, 3).repeat(2, 4))


def test_interpolate_nearest_keeps_inf():
    x = np.array([[[1.0, np.inf, -np.inf]]])
    assert F.interpolate(Tensor(x), size=5).tolist() == [[[1.0, 1.0, np.inf, np.inf, -np.inf]]]


@pytest.mark.parametrize("call,error,match", [
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, mode="bicubic"), ValueError, "2 spatial"),
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, mode="bilinear"), ValueError, "2 spatial"),
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, align_corners=True), ValueError, "align_corners"),
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, scale_factor=2), ValueError, "exactly one"),
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), scale_factor=0.1), ValueError, "no output"),
    (lambda: F.adaptive_avg_pool2d(Tensor.ones(1, 4, 4), (0, 2)), ValueError, "output_size"),
])
def test_resize_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_interpolate_gradients():
    gradcheck(lambda x: F.interpolate(x, size=(4, 5), mode="bilinear"), rand(1, 1, 3, 2))
    gradcheck(lambda x: F.interpolate(x, size=(2, 4), mode="bilinear", align_corners=True), rand(1, 1, 3, 3))
    gradcheck(lambda x: F.interpolate(x, size=(5, 2)), rand(1, 1, 3, 3))
    gradcheck(lambda x: F.interpolate(x, scale_factor=1.5, mode="linear"), rand(1, 2, 3))


# ---------------------------------------------------------------- einsum

@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iji->j", [(3, 5, 3)]),
    ("ij->ji", [(3, 5)]),
    ("ij->", [(3, 5)]),
    ("i,j->ij", [(3,), (5,)]),
    ("i,i", [(7,), (7,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("b...,b->...", [(3, 2, 4), (3,)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("ijk,k->", [(2, 3, 4), (4,)]),
    ("Ba,aB", [(3, 2), (2, 3)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
])
def test_einsum_matches_numpy(equation, shapes):
    arrays = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    got = F.einsum(equation, *[Tensor(a) for a in arrays])
    want = np.einsum(equation, *arrays)
    assert got.shape == want.shape
    close(got, want)
    close(F.einsum(equation, [Tensor(a) for a in arrays]), want)


def test_einsum_ints_and_gradients():
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    assert F.einsum("ij,jk->ik", Tensor(a), Tensor(b)).tolist() == (a @ b).tolist()
    gradcheck(lambda x, y: F.einsum("bij,bjk->bki", x, y), rand(2, 3, 2), rand(2, 2, 3, seed=1))
    gradcheck(lambda x: F.einsum("iji->j", x), rand(3, 2, 3))


@pytest.mark.parametrize("equation,shapes,match", [
    ("ij,jk", [(2, 3)], "2 terms"),
    ("ij", [(2, 3, 4)], "does not fit"),
    ("ij,jk", [(2, 3), (4, 5)], "sizes 3 and 4"),
    ("ii", [(2, 3)], "one operand"),
    ("ij->k", [(2, 3)], "output labels"),
    ("i1", [(2, 3)], "letters"),
])
def test_einsum_errors(equation, shapes, match):
    with pytest.raises(ValueError, match=match):
        F.einsum(equation, *[Tensor.ones(*s) for s in shapes])
