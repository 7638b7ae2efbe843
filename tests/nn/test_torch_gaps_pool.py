"""1-, 2- and 3-d pooling (max with indices, avg with torch's divisors, adaptive max and avg), F.pad's
reflect/replicate/circular modes, interpolate's bicubic/area/nearest-exact modes and the Conv3d and
ConvTranspose1d/3d layers, against numpy references written out here from torch's documented rules, and
their gradients against finite differences."""
import itertools
import math

import numpy as np
import pytest
from helpers import gradcheck

import tg.nn.functional as F
from tg import Tensor, dtypes, nn


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(got, want, atol=1e-5):
    np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=1e-5)


# ---------------------------------------------------------------- references

def np_out_size(n, k, s, p, d, ceil_mode):
    """torch's pooling output size: the last ceil_mode window must start inside the input or left padding."""
    room = n + 2 * p - d * (k - 1) - 1
    out = (-(-room // s) if ceil_mode else room // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def np_max_pool(x, k, s, p, d=None, ceil_mode=False):
    """Max and flat plane index of every window of x (N, C, *spatial), scanning taps in row-major order and
    keeping the first of equal values, as torch's kernels."""
    nsp = len(k)
    d = d or (1,) * nsp
    spatial = x.shape[2:]
    outs = [np_out_size(n, kk, ss, pp, dd, ceil_mode) for n, kk, ss, pp, dd in zip(spatial, k, s, p, d)]
    values = np.zeros(x.shape[:2] + tuple(outs))
    index = np.zeros(x.shape[:2] + tuple(outs), dtype=np.int64)
    for nc in itertools.product(*map(range, x.shape[:2])):
        for o in itertools.product(*map(range, outs)):
            best, where = -np.inf, None
            for tap in itertools.product(*map(range, k)):
                pos = [oi * si - pi + ti * di for oi, si, pi, ti, di in zip(o, s, p, tap, d)]
                if all(0 <= q < n for q, n in zip(pos, spatial)):
                    v = x[nc + tuple(pos)]
                    if where is None or v > best:
                        best, where = v, pos
            values[nc + o] = best
            index[nc + o] = np.ravel_multi_index(where, spatial)
    return values, index


def np_avg_pool(x, k, s, p, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """Window means of x (N, C, *spatial): the sum over the real elements, over the window's size clipped
    to the padded input (count_include_pad), its count of real elements, or divisor_override."""
    spatial = x.shape[2:]
    outs = [np_out_size(n, kk, ss, pp, 1, ceil_mode) for n, kk, ss, pp in zip(spatial, k, s, p)]
    out = np.zeros(x.shape[:2] + tuple(outs))
    for o in itertools.product(*map(range, outs)):
        starts = [oi * si - pi for oi, si, pi in zip(o, s, p)]
        ranges = [range(max(0, a), min(a + kk, n)) for a, kk, n in zip(starts, k, spatial)]
        block = x[(slice(None), slice(None)) + tuple(slice(r.start, r.stop) for r in ranges)]
        if divisor_override:
            div = divisor_override
        elif count_include_pad:
            div = math.prod(min(a + kk, n + pp) - a for a, kk, n, pp in zip(starts, k, spatial, p))
        else:
            div = math.prod(len(r) for r in ranges)
        out[(slice(None), slice(None)) + o] = block.sum(axis=tuple(range(2, x.ndim))) / div
    return out


def np_adaptive(x, sizes, kind):
    """torch's adaptive windows [floor(i * n / out), ceil((i + 1) * n / out)) per dim; for 'max' also the
    flat index of the first max in row-major order."""
    spatial = x.shape[2:]
    values = np.zeros(x.shape[:2] + tuple(sizes))
    index = np.zeros(x.shape[:2] + tuple(sizes), dtype=np.int64)
    for o in itertools.product(*map(range, sizes)):
        ranges = [range(i * n // m, -(-(i + 1) * n // m)) for i, n, m in zip(o, spatial, sizes)]
        block = x[(slice(None), slice(None)) + tuple(slice(r.start, r.stop) for r in ranges)]
        flat = block.reshape(x.shape[:2] + (-1,))
        if kind == "avg":
            values[(slice(None), slice(None)) + o] = flat.mean(-1)
            continue
        first = flat.argmax(-1)                                            # numpy: the first max too
        values[(slice(None), slice(None)) + o] = flat.max(-1)
        local = np.unravel_index(first, block.shape[2:])
        index[(slice(None), slice(None)) + o] = np.ravel_multi_index(
            tuple(loc + r.start for loc, r in zip(local, ranges)), spatial)
    return values, index


def keys_cubic(t):
    """Keys' cubic convolution kernel with a = -0.75 at distance t."""
    a, t = -0.75, abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def np_bicubic_1d(x, n_out, axis, align_corners, scale=None):
    """Resample one axis: source (i + 0.5) * scale - 0.5 (unclamped) or i * (n - 1)/(out - 1), four taps
    around floor(source), their indices clamped to the border."""
    n = x.shape[axis]
    scale = n / n_out if scale is None else scale
    parts = []
    for i in range(n_out):
        src = (i * (n - 1) / (n_out - 1) if n_out > 1 else 0.0) if align_corners else (i + 0.5) * scale - 0.5
        base = math.floor(src)
        acc = 0.0
        for j in range(base - 1, base + 3):
            acc = acc + keys_cubic(src - j) * np.take(x, min(max(j, 0), n - 1), axis=axis)
        parts.append(acc)
    return np.stack(parts, axis=axis)


def np_conv(x, w, stride, padding, dilation, groups):
    """Cross-correlation of x (N, C, *spatial) with w (O, C/groups, *kernel), output element by element."""
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    kernel = w.shape[2:]
    outs = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[2:], kernel, stride, dilation)]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    out = np.zeros((x.shape[0], w.shape[0], *outs))
    for o in itertools.product(*map(range, outs)):
        window = tuple(slice(oi * s, oi * s + d * (k - 1) + 1, d)
                       for oi, s, d, k in zip(o, stride, dilation, kernel))
        for c in range(w.shape[0]):
            g = c // og
            patch = x[(slice(None), slice(g * cg, (g + 1) * cg)) + window]
            out[(slice(None), c) + o] = (patch * w[c]).reshape(x.shape[0], -1).sum(-1)
    return out


def np_conv_transpose(x, w, stride, padding, output_padding, dilation, groups):
    """Each input element scatters x * w to output position i * stride - padding + tap * dilation."""
    kernel, og, cg = w.shape[2:], w.shape[1], x.shape[1] // groups
    full = [(n - 1) * s + d * (k - 1) + 1 + op
            for n, s, d, k, op in zip(x.shape[2:], stride, dilation, kernel, output_padding)]
    out = np.zeros((x.shape[0], og * groups, *full))
    for i in itertools.product(*map(range, x.shape[2:])):
        for tap in itertools.product(*map(range, kernel)):
            pos = tuple(ii * s + t * d for ii, s, t, d in zip(i, stride, tap, dilation))
            for c in range(x.shape[1]):
                g = c // cg
                out[(slice(None), slice(g * og, (g + 1) * og)) + pos] += np.outer(x[(slice(None), c) + i],
                                                                                  w[(c, slice(None)) + tap])
    return out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]


# ---------------------------------------------------------------- max pooling

MAX_CASES = [  # nsp, shape, kernel, stride, padding, dilation, ceil_mode
    (1, (2, 3, 11), (3,), (2,), (1,), (1,), False),
    (1, (2, 2, 10), (4,), (3,), (2,), (1,), True),
    (1, (1, 2, 13), (3,), (2,), (1,), (2,), True),
    (2, (2, 3, 7, 5), (3, 2), (2, 1), (1, 0), (1, 1), False),              # per-dim ("asymmetric") padding
    (2, (1, 2, 9, 7), (3, 3), (2, 2), (1, 1), (2, 1), True),
    (2, (2, 1, 6, 5), (2, 3), (2, 2), (0, 1), (1, 1), True),
    (3, (2, 2, 5, 6, 7), (2, 3, 2), (2, 2, 1), (1, 1, 0), (1, 1, 1), False),
    (3, (1, 2, 7, 5, 6), (3, 2, 3), (2, 2, 2), (0, 1, 1), (1, 1, 2), True),
]
MAX_POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
MAX_LAYERS = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}


@pytest.mark.parametrize("nsp, shape, kernel, stride, padding, dilation, ceil_mode", MAX_CASES)
def test_max_pool_values_and_indices(nsp, shape, kernel, stride, padding, dilation, ceil_mode):
    x = rand(*shape).astype(np.float32)
    want, want_index = np_max_pool(x, kernel, stride, padding, dilation, ceil_mode)
    pool = MAX_POOLS[nsp]
    close(pool(Tensor(x), kernel, stride, padding, dilation, ceil_mode), want)
    values, index = pool(Tensor(x), kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    close(values, want)
    assert index.dtype == dtypes.int64
    np.testing.assert_array_equal(index.numpy(), want_index)
    layer = MAX_LAYERS[nsp](kernel, stride, padding, dilation, return_indices=True, ceil_mode=ceil_mode)
    values, index = layer(Tensor(x[0]))                                     # unbatched (C, *spatial)
    close(values, want[0])
    np.testing.assert_array_equal(index.numpy(), want_index[0])


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_max_pool_indices_take_the_first_of_ties(nsp):
    x = np.random.default_rng(1).integers(0, 3, size=(2, 2) + (6,) * nsp).astype(np.float32)
    kernel, stride, padding = (3,) * nsp, (2,) * nsp, (1,) * nsp
    want, want_index = np_max_pool(x, kernel, stride, padding, ceil_mode=True)
    values, index = MAX_POOLS[nsp](Tensor(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    close(values, want)
    np.testing.assert_array_equal(index.numpy(), want_index)


def test_max_pool_indices_of_an_all_minus_inf_window_point_inside():
    x = np.full((1, 1, 4), -np.inf, dtype=np.float32)
    values, index = F.max_pool1d(Tensor(x), 2, 1, padding=1, return_indices=True)
    assert np.isneginf(values.numpy()).all()
    assert index.tolist() == [[[0, 0, 1, 2, 3]]]                           # the first real element, as torch


def test_max_pool_gradients():
    gradcheck(lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True), rand(1, 2, 8))
    gradcheck(lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 0)), rand(1, 2, 5, 4))
    gradcheck(lambda x: F.max_pool3d(x, 2, 1, 1, dilation=(1, 2, 1)), rand(1, 1, 3, 4, 3))
    gradcheck(lambda x: F.max_pool3d(x, 2, return_indices=True)[0], rand(1, 2, 4, 3, 4))


# ---------------------------------------------------------------- average pooling

AVG_CASES = [  # nsp, shape, kernel, stride, padding, ceil_mode
    (1, (2, 3, 11), (3,), (2,), (1,), False),
    (1, (2, 2, 10), (4,), (3,), (2,), True),
    (2, (2, 3, 7, 5), (3, 2), (2, 1), (1, 0), True),
    (2, (1, 2, 8, 9), (2, 3), (3, 2), (0, 1), False),
    (3, (2, 2, 5, 6, 7), (2, 3, 2), (2, 2, 1), (1, 1, 0), True),
    (3, (1, 2, 6, 5, 7), (3, 2, 3), (3, 2, 2), (1, 0, 1), False),
]
AVG_POOLS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
AVG_LAYERS = {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("nsp, shape, kernel, stride, padding, ceil_mode", AVG_CASES)
def test_avg_pool_matches_numpy(nsp, shape, kernel, stride, padding, ceil_mode, count_include_pad):
    x = rand(*shape).astype(np.float32)
    want = np_avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad)
    close(AVG_POOLS[nsp](Tensor(x), kernel, stride, padding, ceil_mode, count_include_pad), want)
    close(AVG_LAYERS[nsp](kernel, stride, padding, ceil_mode, count_include_pad)(Tensor(x[1 % len(x)])),
          want[1 % len(x)])


@pytest.mark.parametrize("nsp", [2, 3])
def test_avg_pool_divisor_override(nsp):
    x = rand(2, 2, *(7,) * nsp).astype(np.float32)
    want = np_avg_pool(x, (3,) * nsp, (2,) * nsp, (1,) * nsp, True, divisor_override=5)
    close(AVG_POOLS[nsp](Tensor(x), 3, 2, 1, ceil_mode=True, divisor_override=5), want)
    close(AVG_LAYERS[nsp](3, 2, 1, ceil_mode=True, divisor_override=5)(Tensor(x)), want)


def test_avg_pool_gradients():
    gradcheck(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), rand(1, 2, 8))
    gradcheck(lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 0), ceil_mode=True), rand(1, 1, 6, 5))
    gradcheck(lambda x: F.avg_pool3d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False),
              rand(1, 1, 3, 4, 3))


# ---------------------------------------------------------------- adaptive pooling

ADAPTIVE_CASES = [(1, (2, 3, 11), (4,)), (1, (1, 2, 5), (5,)), (2, (2, 2, 7, 5), (3, 2)),
                  (2, (1, 2, 5, 7), (5, 3)), (3, (2, 2, 5, 7, 6), (2, 3, 4)), (3, (1, 1, 4, 5, 3), (3, 5, 1))]


@pytest.mark.parametrize("nsp, shape, sizes", ADAPTIVE_CASES)
def test_adaptive_pools_match_numpy(nsp, shape, sizes):
    x = rand(*shape).astype(np.float32)
    want, want_index = np_adaptive(x, sizes, "max")
    pool = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[nsp]
    close(pool(Tensor(x), sizes), want)
    values, index = pool(Tensor(x), sizes, return_indices=True)
    close(values, want)
    np.testing.assert_array_equal(index.numpy(), want_index)
    layer = {1: nn.AdaptiveMaxPool1d, 2: nn.AdaptiveMaxPool2d, 3: nn.AdaptiveMaxPool3d}[nsp]
    np.testing.assert_array_equal(layer(sizes, return_indices=True)(Tensor(x[0]))[1].numpy(), want_index[0])
    avg = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[nsp]
    avg_layer = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}[nsp]
    want_avg = np_adaptive(x, sizes, "avg")[0]
    close(avg(Tensor(x), sizes), want_avg)
    close(avg_layer(sizes)(Tensor(x)), want_avg)


def test_adaptive_max_pool_ties_and_none_sizes():
    x = np.random.default_rng(2).integers(0, 2, size=(2, 3, 5, 7)).astype(np.float32)
    want, want_index = np_adaptive(x, (3, 4), "max")
    values, index = F.adaptive_max_pool2d(Tensor(x), (3, 4), return_indices=True)
    close(values, want)
    np.testing.assert_array_equal(index.numpy(), want_index)
    assert F.adaptive_max_pool3d(Tensor.ones(1, 4, 5, 6), (None, 2, None)).shape == (1, 4, 2, 6)


def test_adaptive_pool_gradients():
    gradcheck(lambda x: F.adaptive_max_pool2d(x, (2, 3)), rand(1, 2, 5, 4))
    gradcheck(lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True)[0], rand(2, 7))
    gradcheck(lambda x: F.adaptive_avg_pool3d(x, (2, 1, 3)), rand(1, 1, 3, 2, 4))


# ---------------------------------------------------------------- pad modes

NP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", sorted(NP_MODES))
@pytest.mark.parametrize("shape, pads", [((2, 7), (3, 2)), ((2, 3, 5), (4, 0)), ((2, 3, 5, 6), (2, 3, 4, 1)),
                                         ((3, 4, 5), (0, 3, 3, 2)), ((1, 2, 4, 5, 3), (1, 2, 3, 0, 2, 3)),
                                         ((2, 5, 4, 3), (2, 1, 0, 2, 3, 1))])
def test_pad_modes_match_numpy(mode, shape, pads):
    x = rand(*shape).astype(np.float32)
    last_first = [(pads[i], pads[i + 1]) for i in range(len(pads) - 2, -1, -2)]
    pairs = [(0, 0)] * (x.ndim - len(pads) // 2) + last_first
    close(F.pad(Tensor(x), pads, mode), np.pad(x, pairs, NP_MODES[mode]))


def test_pad_negative_sizes_cut_as_torch():
    x = Tensor([[[0.0, 1.0, 2.0, 3.0]]])
    assert F.pad(x, (3, -2), "reflect").tolist() == [[[3.0, 2.0, 1.0, 0.0, 1.0]]]
    assert F.pad(x, (-3, 3), "replicate").tolist() == [[[3.0, 3.0, 3.0, 3.0]]]
    assert F.pad(x, (1, -1), "circular").tolist() == [[[2.0, 0.0, 1.0, 2.0]]]
    assert F.pad(x, (2, -1), "circular").tolist() == [[[1.0, 2.0, 0.0, 1.0, 2.0]]]


def test_pad_mode_gradients():
    gradcheck(lambda x: F.pad(x, (2, 1, 1, 2), "reflect"), rand(1, 2, 3, 4))
    gradcheck(lambda x: F.pad(x, (2, 3), "replicate"), rand(2, 4))
    gradcheck(lambda x: F.pad(x, (1, 2, 2, 0, 1, 1), "circular"), rand(1, 2, 3, 2))


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.pad(Tensor.ones(1, 2, 3), (3, 0), "reflect"), ValueError, r"less than the dim size 3"),
    (lambda: F.pad(Tensor.ones(1, 4, 3), (0, 0, 1, 4), "reflect"), ValueError, r"reflect padding \(1, 4\)"),
    (lambda: F.pad(Tensor.ones(1, 2, 3), (4, 0), "circular"), ValueError, "more than once"),
    (lambda: F.pad(Tensor.ones(1, 2, 3), (1, 1), "reflect", value=2.0), ValueError, "takes no value"),
    (lambda: F.pad(Tensor.ones(3), (1, 1), "replicate"), ValueError, r"2-d or 3-d input, got \(3,\)"),
    (lambda: F.pad(Tensor.ones(1, 1, 2, 3), (1, 1), "reflect"), ValueError, "2 sizes need a 2-d or 3-d"),
    (lambda: F.pad(Tensor.ones(2, 3), (1, 1), "wrap"), NotImplementedError, "expected 'constant'"),
    (lambda: nn.ReflectionPad2d((1, 2, 3))(Tensor.ones(1, 4, 4)), ValueError, "4 ints"),
])
def test_pad_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("kind, mode", [("Reflection", "reflect"), ("Replication", "edge"),
                                        ("Circular", "wrap"), ("Zero", "constant"), ("Constant", "constant")])
@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_pad_layers_match_numpy(kind, mode, nsp):
    x = rand(2, *(4,) * nsp).astype(np.float32)
    sides = (1, 2, 3, 0, 2, 1)[:2 * nsp]
    layer = getattr(nn, f"{kind}Pad{nsp}d")
    pairs = [(0, 0)] + [(sides[i], sides[i + 1]) for i in range(2 * nsp - 2, -1, -2)]
    extra = {"constant_values": 1.5} if kind == "Constant" else {}
    out = layer(sides, 1.5)(Tensor(x)) if kind == "Constant" else layer(sides)(Tensor(x))
    close(out, np.pad(x, pairs, mode, **extra))
    assert (layer(1, 1.5) if kind == "Constant" else layer(1))(Tensor(x)).shape == (2,) + (6,) * nsp


# ---------------------------------------------------------------- interpolate

@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size, scale_factor",
                         [((7, 9), None), ((3, 2), None), (None, 2.0), (None, (1.7, 0.6))])
def test_bicubic_matches_numpy(align_corners, size, scale_factor):
    x = rand(2, 3, 5, 4)
    got = F.interpolate(Tensor(x), size, scale_factor, mode="bicubic", align_corners=align_corners)
    factors = (scale_factor,) * 2 if isinstance(scale_factor, float) else scale_factor
    outs = size if size is not None else tuple(math.floor(n * f) for n, f in zip((5, 4), factors))
    scales = (None, None) if size is not None else tuple(1 / f for f in factors)
    want = np_bicubic_1d(np_bicubic_1d(x, outs[0], 2, align_corners, scales[0]), outs[1], 3, align_corners,
                         scales[1])
    close(got, want)
    up = nn.Upsample(size=size, scale_factor=scale_factor, mode="bicubic", align_corners=align_corners)
    close(up(Tensor(x)), want)


@pytest.mark.parametrize("shape, size",
                         [((2, 3, 11), (4,)), ((1, 2, 7, 5), (3, 5)), ((1, 2, 5, 6, 7), (2, 4, 3))])
def test_area_is_adaptive_avg_pool(shape, size):
    x = rand(*shape)
    close(F.interpolate(Tensor(x), size=size, mode="area"), np_adaptive(x, size, "avg")[0])
    doubled = tuple(2 * n for n in shape[2:])
    close(F.interpolate(Tensor(x), scale_factor=2, mode="area"), np_adaptive(x, doubled, "avg")[0])


def test_nearest_exact_and_3d_nearest_scale():
    x = rand(1, 2, 5)
    src = np.minimum(np.floor((np.arange(8) + 0.5) * (5 / 8)).astype(int), 4)
    close(F.interpolate(Tensor(x), size=8, mode="nearest-exact"), x[..., src])
    vol = rand(1, 1, 2, 3, 2)
    want = vol.repeat(2, axis=2).repeat(2, axis=3).repeat(2, axis=4)
    close(F.interpolate(Tensor(vol), scale_factor=2), want)
    close(nn.Upsample(size=(4, 6, 4), mode="nearest")(Tensor(vol)), want)


def test_interpolate_gradients():
    gradcheck(lambda x: F.interpolate(x, size=(4, 5), mode="bicubic"), rand(1, 1, 3, 3))
    gradcheck(lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True),
              rand(1, 1, 2, 3))
    gradcheck(lambda x: F.interpolate(x, size=(2, 3), mode="area"), rand(1, 2, 5, 4))


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, mode="bicubic"), ValueError, "2 spatial"),
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, mode="area", align_corners=True), ValueError,
     "align_corners"),
    (lambda: F.interpolate(Tensor.ones(1, 1, 4), size=2, mode="lanczos"), NotImplementedError, "lanczos"),
])
def test_interpolate_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------- pool argument errors

@pytest.mark.parametrize("call, match", [
    (lambda: F.max_pool3d(Tensor.ones(1, 4, 4), 2), r"\(N, C, D, H, W\) or \(C, D, H, W\), got \(1, 4, 4\)"),
    (lambda: F.max_pool2d(Tensor.ones(1, 1, 6, 6), (3, 3, 3)), "kernel_size to be an int or a pair of ints"),
    (lambda: F.avg_pool3d(Tensor.ones(1, 4, 4, 4), 2, padding=(1, 2, 1)), r"half the kernel.*along H"),
    (lambda: F.max_pool1d(Tensor.ones(1, 1, 6), 2, stride=0), "positive kernel_size, stride"),
    (lambda: F.avg_pool2d(Tensor.ones(1, 1, 4, 4), 2, divisor_override=0), "positive int divisor_override"),
    (lambda: F.adaptive_max_pool3d(Tensor.ones(1, 1, 4, 4, 4), (2, 0, 2)), "positive int or 3 of them"),
    (lambda: F.max_pool1d(Tensor.ones(1, 1, 2), 4), "expected input L of at least 4"),
])
def test_pool_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- conv layers

def test_conv3d_layer_matches_numpy():
    layer = nn.Conv3d(4, 6, (3, 2, 3), stride=(2, 1, 1), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2)
    assert layer.weight.shape == (6, 2, 3, 2, 3)
    bound = 1 / math.sqrt(2 * 3 * 2 * 3)
    assert np.abs(layer.weight.numpy()).max() <= bound
    x = rand(2, 4, 5, 6, 5).astype(np.float32)
    want = np_conv(x, layer.weight.numpy(), (2, 1, 1), (1, 0, 1), (1, 2, 1), 2) + \
        layer.bias.numpy().reshape(1, 6, 1, 1, 1)
    close(layer(Tensor(x)), want, atol=1e-4)
    same = nn.Conv3d(4, 2, (3, 2, 4), padding="same", bias=False)
    assert same(Tensor(x[0])).shape == (2, 5, 6, 5)
    with pytest.raises(ValueError, match=r"Conv3d: expected input of shape \(N, 4, D, H, W\)"):
        layer(Tensor.ones(1, 3, 4, 4, 4))


@pytest.mark.parametrize("nsp, stride, padding, output_padding, dilation, groups", [
    (1, (2,), (1,), (1,), (1,), 1), (1, (3,), (0,), (0,), (2,), 2),
    (3, (2, 1, 2), (1, 0, 1), (1, 0, 0), (1, 1, 1), 1), (3, (1, 2, 1), (0, 1, 0), (0, 1, 0), (2, 1, 1), 2),
])
def test_conv_transpose_layers_match_numpy(nsp, stride, padding, output_padding, dilation, groups):
    layer_type = {1: nn.ConvTranspose1d, 3: nn.ConvTranspose3d}[nsp]
    layer = layer_type(4, 6, 3, stride, padding, output_padding, groups, dilation=dilation)
    assert layer.weight.shape == (4, 6 // groups) + (3,) * nsp
    x = rand(2, 4, *(4, 3, 5)[:nsp]).astype(np.float32)
    want = np_conv_transpose(x, layer.weight.numpy(), stride, padding, output_padding, dilation, groups)
    close(layer(Tensor(x)), want + layer.bias.numpy().reshape((1, 6) + (1,) * nsp), atol=1e-4)


def test_conv_transpose3d_gradients():
    gradcheck(lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1, output_padding=1),
              rand(1, 2, 2, 2, 1), rand(2, 1, 2, 3, 2, seed=1), atol=1e-5)
