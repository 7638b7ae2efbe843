"""An index, or a tie's share of a gradient, comes from the same values as the extreme it points at.

max(dim), argmax, cummax, sort/topk/kthvalue/median/mode, max_pool's indices and the gradients of amax
and maximum all compare elements for equality with a reduce of them. When the elements come from a
transcendental op, a kernel that recomputed them (the vector exp2 polynomial in one kernel, libm's exp2f
in the other) matched nothing: 3 of 64 indices of exp(x).max(0) were wrong, and maximum's gradient was
0/0. Each case here composes a random chain of transcendental ops at odd shapes, then checks values,
indices and gradients against numpy float64 (indices: the picked element is the extreme within float32
rounding, and of exactly equal elements the one torch picks).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import DEVICES

import tg
import tg.nn.functional as F
from tg import Tensor


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# name: (tg op, numpy op, numpy derivative), each defined on all reals
CHAIN_OPS = {
    "exp": (lambda t: t.exp(), np.exp, np.exp),
    "log": (lambda t: (t.abs() + 0.5).log(), lambda a: np.log(np.abs(a) + 0.5),
            lambda a: np.sign(a) / (np.abs(a) + 0.5)),
    "sin": (lambda t: t.sin(), np.sin, np.cos),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)),
                lambda a: np.exp(-a) / (1 + np.exp(-a)) ** 2),
    "tanh": (lambda t: t.tanh(), np.tanh, lambda a: 1 - np.tanh(a) ** 2),
    "pow": (lambda t: (t.abs() + 0.25) ** 1.7, lambda a: (np.abs(a) + 0.25) ** 1.7,
            lambda a: 1.7 * np.sign(a) * (np.abs(a) + 0.25) ** 0.7),
    "sqrt": (lambda t: (t.abs() + 0.1).sqrt(), lambda a: np.sqrt(np.abs(a) + 0.1),
             lambda a: np.sign(a) * 0.5 / np.sqrt(np.abs(a) + 0.1)),
}
BOUNDED = [n for n in CHAIN_OPS if n != "exp"]   # exp at most once, first, so nothing overflows


class Chain:
    """A random composition of 2-4 transcendental ops, on tg tensors and in numpy float64."""

    def __init__(self, rng: np.random.Generator):
        names = list(rng.choice(BOUNDED, size=int(rng.integers(2, 4))))
        self.names = (["exp"] if rng.random() < 0.5 else []) + names

    def tg(self, t: Tensor) -> Tensor:
        for n in self.names:
            t = CHAIN_OPS[n][0](t)
        return t

    def np(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value, derivative) in float64."""
        v, d = a.astype(np.float64), np.ones(a.shape)
        for n in self.names:
            d = d * CHAIN_OPS[n][2](v)
            v = CHAIN_OPS[n][1](v)
        return v, d

    def __repr__(self) -> str:
        return "->".join(self.names)


def cases(count: int, seed: int):
    """(rng, chain, input with exactly repeated elements along `axis`, axis) at odd shapes."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        shape = tuple(int(s) for s in rng.choice([1, 3, 5, 7, 17, 33, 67], size=int(rng.integers(1, 4))))
        shape = shape if math.prod(shape) > 1 else (5, 9)
        axis = int(rng.integers(len(shape)))
        a = rng.standard_normal(shape).astype(np.float32)
        n = shape[axis]
        if n > 2:   # exact ties along the axis: two positions hold the same input, so the same output
            src, dst = sorted(rng.choice(n, size=2, replace=False))
            idx = [slice(None)] * len(shape)
            idx[axis] = src
            picked = a[tuple(idx)].copy()
            idx[axis] = dst
            a[tuple(idx)] = picked
        yield rng, Chain(rng), a, axis


def tolerance(ref: np.ndarray) -> float:
    return 2e-5 * max(1.0, float(np.abs(ref).max()))


def assert_picks_extreme(indices: np.ndarray, ref: np.ndarray, axis: int, largest: bool, last: bool = False):
    """ref at each index is the extreme along axis within float32 rounding, and of exactly equal
    extremes it is the first one (last=True: the last one)."""
    idx = np.expand_dims(indices, axis)
    assert idx.min() >= 0 and idx.max() < ref.shape[axis], f"index out of range: {indices}"
    picked = np.take_along_axis(ref, idx, axis)
    best = (ref.max if largest else ref.min)(axis, keepdims=True)
    np.testing.assert_allclose(picked, best, rtol=0, atol=tolerance(ref), err_msg="not the extreme")
    positions = np.arange(ref.shape[axis]).reshape([-1 if i == axis else 1 for i in range(ref.ndim)])
    other_side = positions > idx if last else positions < idx
    assert not ((ref == picked) & other_side).any(), "an exactly equal extreme comes first in torch's order"


@pytest.mark.parametrize("largest", [True, False])
def test_max_min_dim_and_arg_after_transcendental_ops(largest, device):
    for rng, chain, a, axis in cases(6, 1 + largest):
        ref, deriv = chain.np(a)
        x = Tensor(a, device=device, requires_grad=True)
        y = chain.tg(x)
        values, indices = y.max(axis) if largest else y.min(axis)
        cot = rng.standard_normal(values.shape)
        (values * Tensor(cot, device=device, dtype=tg.float32)).sum().backward()
        got = indices.numpy()
        assert_picks_extreme(got, ref, axis, largest)
        picked = np.take_along_axis(ref, np.expand_dims(got, axis), axis).squeeze(axis)
        np.testing.assert_allclose(values.numpy(), picked, rtol=2e-5, atol=1e-6, err_msg=repr(chain))
        want = np.zeros(a.shape)
        np.put_along_axis(want, np.expand_dims(got, axis), np.expand_dims(cot, axis), axis)
        np.testing.assert_allclose(x.grad.numpy(), want * deriv, rtol=1e-4, atol=1e-5, err_msg=repr(chain))
        arg = y.argmax(axis) if largest else y.argmin(axis)
        np.testing.assert_array_equal(arg.numpy(), got)
        flat = (y.argmax() if largest else y.argmin()).item()
        assert_picks_extreme(np.array(flat), ref.reshape(-1), 0, largest)


@pytest.mark.parametrize("read", ["before", "after", "never"])
@pytest.mark.parametrize("largest", [True, False])
def test_amax_amin_gradient_goes_to_the_extremes(largest, read, device):
    """The gradient of amax/amin is the cotangent shared among the extremes (exactly equal ones alike),
    whether or not the forward value was read first."""
    for rng, chain, a, axis in cases(4, 10 + largest):
        ref, deriv = chain.np(a)
        x = Tensor(a, device=device, requires_grad=True)
        y = chain.tg(x)
        out = y.amax(axis) if largest else y.amin(axis)
        if read == "before":
            out.numpy()
        cot = rng.standard_normal(out.shape)
        (out * Tensor(cot, device=device, dtype=tg.float32)).sum().backward()
        if read == "after":
            np.testing.assert_allclose(out.numpy(), (ref.max if largest else ref.min)(axis), rtol=2e-5,
                                       atol=1e-6)
        grad = x.grad.numpy().astype(np.float64)
        assert np.isfinite(grad).all(), f"{chain}: {np.isnan(grad).sum()} NaN in the gradient"
        best = (ref.max if largest else ref.min)(axis, keepdims=True)
        near = np.abs(ref - best) <= tolerance(ref)
        assert not (grad[~near] != 0).any(), f"{chain}: gradient away from the extreme"
        # the shares add up to the cotangent: sum(grad / derivative) over the extremes (where the
        # derivatives are large enough that float32 keeps the shares)
        steep = (~near | (np.abs(deriv) > 1e-3)).all(axis)
        shares = np.where(near, grad / np.where(near, deriv, 1.0), 0.0).sum(axis)
        np.testing.assert_allclose(shares[steep], cot[steep], rtol=1e-3, atol=1e-5, err_msg=repr(chain))


@pytest.mark.parametrize("read", ["before", "after"])
@pytest.mark.parametrize("op", ["maximum", "minimum", "clamp_min", "clamp_max"])
def test_maximum_minimum_gradient_after_transcendental_ops(op, read, device):
    """The issue's case: maximum(x, sigmoid(b)).repeat(1, 3), forward read after backward, had NaNs. Each
    operand gets the whole gradient where it is the extreme and half of it where both are equal."""
    for rng, chain, a, _axis in cases(5, 20):
        other = Chain(rng)
        b = rng.standard_normal(a.shape).astype(np.float32)
        tie = rng.random(a.shape) < 0.2
        b[tie] = a[tie]
        ref_x, dx = chain.np(a)
        ref_y, dy = chain.np(b)           # where b == a the two operands are exactly equal
        x = Tensor(a, device=device, requires_grad=True)
        w = Tensor(b, device=device, requires_grad=True)
        xs, ys = chain.tg(x), chain.tg(w)
        largest = op in ("maximum", "clamp_min")
        out = (xs.maximum(ys) if op == "maximum" else xs.minimum(ys) if op == "minimum" else
               xs.clamp(min=ys) if op == "clamp_min" else xs.clamp(max=ys))
        out = out.reshape(-1, 1).repeat(1, 3)
        if read == "before":
            out.numpy()
        out.sum().backward()
        want = np.repeat((np.maximum if largest else np.minimum)(ref_x, ref_y).reshape(-1, 1), 3, 1)
        np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=1e-6, err_msg=f"{chain} {other}")
        gx, gy = x.grad.numpy(), w.grad.numpy()
        assert np.isfinite(gx).all() and np.isfinite(gy).all(), f"{chain}: NaN in the gradient"
        x_wins = (ref_x > ref_y) if largest else (ref_x < ref_y)
        near = np.abs(ref_x - ref_y) <= tolerance(np.stack([ref_x, ref_y]))
        share_x = np.where(tie, 0.5, np.where(x_wins, 1.0, 0.0))
        sure = tie | ~near
        np.testing.assert_allclose(gx[sure], (3 * share_x * dx)[sure], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gy[sure], (3 * (1 - share_x) * dy)[sure], rtol=1e-4, atol=1e-5)
        # a near tie goes to one side or is shared, never lost or doubled (where the derivatives are
        # large enough that float32 keeps the shares)
        steep = ~sure & (np.abs(dx) > 1e-3) & (np.abs(dy) > 1e-3)
        np.testing.assert_allclose((gx / dx + gy / dy)[steep], 3.0, rtol=1e-3)


def _cum_reference(ref: np.ndarray, largest: bool) -> np.ndarray:
    """torch's cummax/cummin index along the last axis: the latest position holding the running extreme."""
    idx = np.zeros(ref.shape, dtype=np.int64)
    for row in np.ndindex(ref.shape[:-1]):
        best, at = ref[row][0], 0
        for i, v in enumerate(ref[row]):
            if (v >= best) if largest else (v <= best):
                best, at = v, i
            idx[row][i] = at
    return idx


@pytest.mark.parametrize("largest", [True, False])
def test_cummax_cummin_after_transcendental_ops(largest, device):
    for rng, chain, a, axis in cases(5, 30 + largest):
        ref, deriv = chain.np(a)
        x = Tensor(a, device=device, requires_grad=True)
        values, indices = chain.tg(x).cummax(axis) if largest else chain.tg(x).cummin(axis)
        cot = rng.standard_normal(values.shape)
        (values * Tensor(cot, device=device, dtype=tg.float32)).sum().backward()
        got = np.moveaxis(indices.numpy(), axis, -1)
        r = np.moveaxis(ref, axis, -1)
        running = (np.maximum if largest else np.minimum).accumulate(r, -1)
        picked = np.take_along_axis(r, got, -1)
        np.testing.assert_allclose(picked, running, rtol=0, atol=tolerance(ref), err_msg=repr(chain))
        assert (got <= np.arange(r.shape[-1])).all()
        exact = np.take_along_axis(r, _cum_reference(r, largest), -1) == running
        np.testing.assert_array_equal(got[exact], _cum_reference(r, largest)[exact])
        np.testing.assert_allclose(np.moveaxis(values.numpy(), axis, -1), picked, rtol=2e-5, atol=1e-6)
        want = np.zeros(r.shape)
        c = np.moveaxis(cot, axis, -1)
        for pos in np.ndindex(r.shape):
            want[pos[:-1] + (got[pos],)] += c[pos]
        np.testing.assert_allclose(x.grad.numpy(), np.moveaxis(want, -1, axis) * deriv, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_topk_kthvalue_median_after_transcendental_ops(descending, device):
    for rng, chain, a, axis in cases(5, 40 + descending):
        ref, deriv = chain.np(a)
        n = a.shape[axis]
        x = Tensor(a, device=device, requires_grad=True)
        y = chain.tg(x)
        values, indices = y.sort(axis, descending=descending)
        got = np.moveaxis(indices.numpy(), axis, -1)
        r = np.moveaxis(ref, axis, -1)
        np.testing.assert_array_equal(np.sort(got, -1), np.broadcast_to(np.arange(n), got.shape))
        picked = np.take_along_axis(r, got, -1)
        want = -np.sort(-r, -1) if descending else np.sort(r, -1)
        np.testing.assert_allclose(picked, want, rtol=0, atol=tolerance(ref), err_msg=repr(chain))
        v = np.moveaxis(values.numpy(), axis, -1)
        assert ((np.diff(v, axis=-1) <= 0) if descending else (np.diff(v, axis=-1) >= 0)).all()
        np.testing.assert_allclose(v, picked, rtol=2e-5, atol=1e-6)
        k = int(rng.integers(1, n + 1))
        top = y.topk(k, axis, largest=descending)
        np.testing.assert_array_equal(np.moveaxis(top.indices.numpy(), axis, -1), got[..., :k])
        kth = y.kthvalue(k, axis)
        picked = np.take_along_axis(ref, np.expand_dims(kth.indices.numpy(), axis), axis).squeeze(axis)
        np.testing.assert_allclose(picked, np.sort(ref, axis).take(k - 1, axis), rtol=0, atol=tolerance(ref))
        np.testing.assert_allclose(kth.values.numpy(), np.sort(ref, axis).take(k - 1, axis), rtol=2e-5,
                                   atol=tolerance(ref))
        med = y.median(axis)
        np.testing.assert_allclose(med.values.numpy(), np.sort(ref, axis).take((n - 1) // 2, axis),
                                   rtol=2e-5, atol=tolerance(ref))
        values.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), deriv, rtol=1e-4, atol=1e-5, err_msg=repr(chain))


def test_mode_after_transcendental_ops(device):
    """mode compares every element with every other: after exp they must still find themselves."""
    for _rng, chain, a, axis in cases(5, 50):
        a = np.moveaxis(a, axis, -1).copy()
        n = a.shape[-1]
        if n >= 3:
            a[..., n - 1] = a[..., 0]
            a[..., n // 2] = a[..., 0]     # the first element three times: the mode
        ref, _ = chain.np(a)
        values, indices = chain.tg(Tensor(a, device=device)).mode(-1)
        if n >= 3:
            np.testing.assert_array_equal(indices.numpy(), n - 1)
            np.testing.assert_allclose(values.numpy(), ref[..., 0], rtol=2e-5, atol=1e-6)
        else:   # all distinct: the smallest, at its position
            assert_picks_extreme(indices.numpy(), ref, -1, False)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)])
def test_max_pool_indices_and_gradient_after_transcendental_ops(kernel, stride, padding, device):
    rng = np.random.default_rng(kernel * 10 + stride)
    for _ in range(2):
        chain = Chain(rng)
        h, w = int(rng.choice([5, 7, 9])), int(rng.choice([6, 7, 11]))
        a = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        ref, deriv = chain.np(a)
        x = Tensor(a, device=device, requires_grad=True)
        values, indices = F.max_pool2d(chain.tg(x), kernel, stride, padding, return_indices=True)
        want = np_pool(ref, kernel, stride, padding)
        np.testing.assert_allclose(values.numpy(), want, rtol=2e-5, atol=1e-6, err_msg=repr(chain))
        got = indices.numpy()
        flat = ref.reshape(2, 3, -1)
        picked = np.take_along_axis(flat, got.reshape(2, 3, -1), -1).reshape(got.shape)
        np.testing.assert_allclose(picked, want, rtol=0, atol=tolerance(ref), err_msg=repr(chain))
        # the gradient of the plain pool: each window's cotangent at its max (no exact ties here)
        cot = rng.standard_normal(want.shape)
        out = F.max_pool2d(chain.tg(x), kernel, stride, padding)
        out.numpy()
        (out * Tensor(cot, device=device, dtype=tg.float32)).sum().backward()
        grad = np.zeros(flat.shape)
        for pos in np.ndindex(got.shape):
            grad[pos[0], pos[1], got[pos]] += cot[pos]
        np.testing.assert_allclose(x.grad.numpy(), grad.reshape(a.shape) * deriv, rtol=1e-4, atol=1e-5)
        av, ai = F.adaptive_max_pool2d(chain.tg(Tensor(a, device=device)), (2, 3), return_indices=True)
        picked = np.take_along_axis(flat, ai.numpy().reshape(2, 3, -1), -1).reshape(ai.shape)
        np.testing.assert_allclose(picked, av.numpy(), rtol=2e-5, atol=tolerance(ref), err_msg=repr(chain))


def np_pool(x: np.ndarray, kernel: int, stride: int, padding: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=-np.inf)
    oh, ow = (xp.shape[2] - kernel) // stride + 1, (xp.shape[3] - kernel) // stride + 1
    taps = [xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            for i in range(kernel) for j in range(kernel)]
    return np.max(taps, axis=0)


def test_issue_repros(device):
    """issue 34 items 1 and 2, as filed."""
    a = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    r = tg.tensor(a, device=device).exp().max(dim=0)
    ref = np.exp(a.astype(np.float64))
    np.testing.assert_array_equal(r.indices.numpy(), ref.argmax(0))
    np.testing.assert_allclose(r.values.numpy(), ref.max(0), rtol=1e-6)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((33, 7)).astype(np.float32), rng.standard_normal((33, 7)).astype(np.float32)
    x = tg.tensor(a, requires_grad=True, device=device)
    y = tg.maximum(x, tg.tensor(b, device=device).sigmoid()).repeat(1, 3)
    y.sum().backward()
    y.numpy()
    sig = 1 / (1 + np.exp(-b.astype(np.float64)))
    np.testing.assert_array_equal(x.grad.numpy(), np.where(a > sig, 3.0, np.where(a == sig, 1.5, 0.0)))


def _torch_cum(x: np.ndarray, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """torch's cummax/cummin in float64 along the last axis: NaN or a tie takes the latest index, and the
    value is the element at that index (its sign too)."""
    values, idx = x.astype(np.float64).copy(), np.zeros(x.shape, dtype=np.int64)
    for row in np.ndindex(x.shape[:-1]):
        best, at = x[row][0], 0
        for i, v in enumerate(x[row]):
            if np.isnan(v) or (not np.isnan(best) and ((v >= best) if largest else (v <= best))):
                best, at = v, i
            values[row][i], idx[row][i] = best, at
    return values, idx


@pytest.mark.parametrize("largest", [True, False])
def test_cummax_cummin_keep_the_sign_of_zero(largest, device):
    """issue 34 item 10: cummax([-0.0, ...]) gave +0.0; the value is the element at the index, as torch."""
    rng = np.random.default_rng(3 + largest)
    for shape in [(2,), (7,), (3, 9), (2, 3, 17)]:
        a = rng.choice(np.array([-0.0, 0.0, -1.5, 1.5, 2.0, np.nan], np.float32), size=shape,
                       p=[0.3, 0.3, 0.1, 0.1, 0.15, 0.05])
        want_v, want_i = _torch_cum(a, largest)
        x = Tensor(a, device=device, requires_grad=True)
        values, indices = x.cummax(-1) if largest else x.cummin(-1)
        np.testing.assert_array_equal(indices.numpy(), want_i)
        got = values.numpy()
        np.testing.assert_array_equal(got, want_v)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want_v), err_msg=f"{a}")
        values.sum().backward()
        counts = np.zeros(a.shape)
        for pos in np.ndindex(a.shape):
            counts[pos[:-1] + (want_i[pos],)] += 1
        np.testing.assert_array_equal(x.grad.numpy(), counts)


@pytest.mark.parametrize("op", ["fmax", "fmin"])
def test_fmax_fmin_give_a_tie_gradient_to_the_first_operand(op, device):
    """issue 34 item 10: torch's fmax gives the gradient to self where self >= other or other is NaN,
    else to other (fmin: self <= other); a tie is never split."""
    rng = np.random.default_rng(7)
    for shape in [(1,), (7,), (3, 5), (2, 3, 9)]:
        a = rng.choice(np.array([-1.0, 0.0, 1.0, 2.0, np.nan], np.float32), size=shape)
        b = rng.choice(np.array([-1.0, 0.0, 1.0, 2.0, np.nan], np.float32), size=shape)
        x, w = Tensor(a, device=device, requires_grad=True), Tensor(b, device=device, requires_grad=True)
        cot = rng.standard_normal(shape)
        out = x.fmax(w) if op == "fmax" else x.fmin(w)
        (out * Tensor(cot, device=device, dtype=tg.float32)).sum().backward()
        first = ((a >= b) if op == "fmax" else (a <= b)) | np.isnan(b)
        np.testing.assert_array_equal(out.numpy(), (np.fmax if op == "fmax" else np.fmin)(a, b))
        np.testing.assert_allclose(x.grad.numpy(), np.where(first, cot, 0.0), rtol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), np.where(first, 0.0, cot), rtol=1e-6)


@pytest.mark.parametrize("op", ["exp", "log", "sigmoid", "tanh", "pow", "sin"])
def test_a_value_has_the_same_bits_in_every_kernel(op, device):
    """An elementwise value computed by a vector loop, by its scalar tail and by a kernel with no lanes is
    the same float: equal inputs give equal outputs, and a reduce that recomputes the value finds the
    elementwise kernel's. (The C renderer's scalar exp2 was libm's, its vector one a polynomial.)"""
    rng = np.random.default_rng(9)
    f = CHAIN_OPS[op][0]
    for shape in [(3, 64), (5, 33), (7,), (1023,), (9, 35), (2, 3, 67)]:
        a = rng.standard_normal(shape).astype(np.float32) * 3
        y = f(Tensor(a, device=device)).numpy()
        for axis in range(len(shape)):
            np.testing.assert_array_equal(f(Tensor(a, device=device)).amax(axis).numpy(), y.max(axis))
            np.testing.assert_array_equal(f(Tensor(a, device=device)).amin(axis).numpy(), y.min(axis))
        same = np.repeat(a[..., :1], shape[-1], -1)      # every row one value repeated: tails included
        z = f(Tensor(same, device=device)).numpy()
        np.testing.assert_array_equal(z, np.repeat(z[..., :1], shape[-1], -1))
