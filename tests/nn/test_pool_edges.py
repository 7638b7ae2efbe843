"""Pooling at its edges (issue 34 item 14): ceil_mode windows that hang past the input, inputs smaller than
the kernel, padding and count_include_pad, on odd sizes, against a numpy loop over torch's documented
output size and window rule (`avg_pool2d(zeros(1, 1, 2, 2), 3, stride=2, ceil_mode=True)` raised).

torch: out = floor_or_ceil((size + 2p - d(k - 1) - 1) / s) + 1, less one when ceil_mode's last window would
start past the input and its left padding; a max window reads only the input, an avg window's divisor is its
extent clipped to the padded input (count_include_pad) or to the input itself.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tg.nn.functional as F
from tg import Tensor


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    room = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(room / s) if ceil_mode else math.floor(room / s)) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _np_pool(x: np.ndarray, kind: str, k: tuple, s: tuple, p: tuple, d: tuple, ceil_mode: bool,
             count_include_pad: bool) -> np.ndarray:
    nsp = len(k)
    spatial = x.shape[-nsp:]
    outs = [_out_size(*args, ceil_mode) for args in zip(spatial, k, s, p, d)]
    res = np.zeros(x.shape[:-nsp] + tuple(outs))
    for o in itertools.product(*[range(n) for n in outs]):
        starts = [oi * si - pi for oi, si, pi in zip(o, s, p)]
        if kind == "max":
            taps = [[st + j * di for j in range(ki) if 0 <= st + j * di < n]
                    for st, ki, di, n in zip(starts, k, d, spatial)]
            window = x[(...,) + np.ix_(*taps)]
            flat = window.reshape(window.shape[:-nsp] + (-1,))
            res[(...,) + o] = flat.max(-1) if flat.shape[-1] else -np.inf    # only padding: its -inf
            continue
        ends = [min(st + ki, n + pi) for st, ki, n, pi in zip(starts, k, spatial, p)]
        padded_count = math.prod(e - st for st, e in zip(starts, ends))
        lo = [max(st, 0) for st in starts]
        hi = [min(e, n) for e, n in zip(ends, spatial)]
        window = x[(...,) + tuple(slice(a, b) for a, b in zip(lo, hi))]
        count = padded_count if count_include_pad else math.prod(b - a for a, b in zip(lo, hi))
        res[(...,) + o] = window.reshape(window.shape[:-nsp] + (-1,)).sum(-1) / count
    return res


POOLS = {
    ("max", 1): F.max_pool1d, ("max", 2): F.max_pool2d, ("max", 3): F.max_pool3d,
    ("avg", 1): F.avg_pool1d, ("avg", 2): F.avg_pool2d, ("avg", 3): F.avg_pool3d,
}


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("kind,nsp", sorted(POOLS))
def test_pool_matches_torch_rule_on_odd_sizes_and_ceil_mode(kind: str, nsp: int, seed: int) -> None:
    rng = np.random.default_rng([seed, nsp, len(kind)])
    k = tuple(int(v) for v in rng.integers(1, 5, nsp))
    s = tuple(int(v) for v in rng.integers(1, 4, nsp))
    d = tuple(int(v) for v in rng.integers(1, 3, nsp)) if kind == "max" else (1,) * nsp
    p = tuple(int(rng.integers(0, (di * (ki - 1) + 1) // 2 + 1)) for ki, di in zip(k, d))
    ceil_mode, count_include_pad = bool(rng.integers(0, 2)) or seed < 5, bool(rng.integers(0, 2))
    # odd sizes around the window's span: smaller than it (ceil_mode's partial window), equal, larger
    sizes = tuple(max(1, di * (ki - 1) + 1 - 2 * pi + int(rng.integers(-2, 4)))
                  for ki, di, pi in zip(k, d, p))
    if any(_out_size(*a, ceil_mode) < 1 for a in zip(sizes, k, s, p, d)):
        sizes = tuple(di * (ki - 1) + 1 for ki, di in zip(k, d))
    x = rng.standard_normal((2, 3) + sizes)
    want = _np_pool(x, kind, k, s, p, d, ceil_mode, count_include_pad)
    kw = {"dilation": d} if kind == "max" else {"count_include_pad": count_include_pad}
    got = POOLS[(kind, nsp)](Tensor(x), k, s, p, ceil_mode=ceil_mode, **kw)
    assert got.shape == want.shape, f"kernel {k} stride {s} padding {p} dilation {d} on {sizes}"
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_ceil_mode_window_larger_than_the_input(kind: str) -> None:
    x = np.arange(4.0).reshape(1, 1, 2, 2)
    got = POOLS[(kind, 2)](Tensor(x), 3, 2, ceil_mode=True)
    assert got.numpy().tolist() == [[[[3.0 if kind == "max" else 1.5]]]]


def test_floor_mode_window_larger_than_the_input_raises() -> None:
    with pytest.raises(ValueError, match=r"\[nn\] avg_pool2d: expected input H of at least 3"):
        F.avg_pool2d(Tensor.zeros(1, 1, 2, 2), 3, stride=2)
