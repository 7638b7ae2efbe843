"""Composite ops (tg/core/composite.py): each is one node of the lazy graph with its own gradient, no
kernel ever holds one (the scheduler expands it), and the expansion means what ops_numpy.REFERENCE
says, on every device and float dtype, special values included. Generated over CompositeOps, so an
op added there is tested here or the coverage test fails. Also the fused LSTM cell built on them."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import gpu_support

import tg
from tg import Tensor
from tg.core import fused
from tg.core.ops import CompositeOps
from tg.core.runtime.ops_numpy import REFERENCE
from tg.core.schedule import create_schedule
from tg.core.tensor import apply

METHOD = {CompositeOps.EXP: "exp", CompositeOps.SIGMOID: "sigmoid", CompositeOps.TANH: "tanh",
          CompositeOps.ERF: "erf", CompositeOps.ERFC: "erfc"}
DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.float32}
# relative error allowed against the float64 reference (of the input as rounded to the dtype)
RTOL = {"float32": 4e-7, "float64": 1e-15, "float16": 1e-3, "bfloat16": 8e-3}
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 0.54, 0.56, -0.56, 30.0, -30.0])


def test_every_composite_is_tested_here():
    assert set(METHOD) == set(CompositeOps)
    assert all(op in REFERENCE for op in CompositeOps)


@pytest.mark.parametrize("op", list(CompositeOps), ids=lambda o: o.name)
def test_one_lazy_node_with_its_own_gradient(op):
    x = Tensor(np.linspace(-2, 2, 7, dtype=np.float32), requires_grad=True)
    y = getattr(x, METHOD[op])()
    base = y.lazydata.base
    assert base.op is op and base.srcs[0].base is x.lazydata.base
    assert type(y._ctx).__name__ == METHOD[op].capitalize()


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_no_kernel_holds_a_composite(dtype):
    x = Tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)).cast(dtype)
    out = (x.exp() * x.sigmoid() + x.tanh().tanh() + x.erf() * x.erfc()).sum(1) + x.sigmoid().amax(1)
    for item in create_schedule([out.lazydata]):
        if item.kernel is not None:
            assert not any(isinstance(n.op, CompositeOps) for n in item.kernel.ast.walk())


def _rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as the dtype holds it, in float64."""
    return Tensor(x.astype(np.float32) if dtype != "float64" else x).cast(dtype).float().numpy() \
        .astype(np.float64) if dtype != "float64" else x


@pytest.mark.parametrize("device", ["CPU", "NUMPY", "CL"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(CompositeOps), ids=lambda o: o.name)
def test_expansion_follows_the_reference(op, dtype, device):
    if device == "CL" and (reason := gpu_support("CL")) is not None:
        pytest.skip(f"CL is not available here: {reason}")
    rng = np.random.default_rng(list(CompositeOps).index(op) * 10 + list(DTYPES).index(dtype))
    top = {"float16": 10.0, "bfloat16": 80.0, "float32": 80.0, "float64": 700.0}[dtype]
    x = np.concatenate([rng.uniform(-top, top, 301), rng.uniform(-1, 1, 130), rng.uniform(-1e-4, 1e-4, 37),
                        SPECIAL])
    x = _rounded(x, dtype)
    t = Tensor(x.astype(np.float32) if dtype != "float64" else x, device=device).cast(dtype)
    got = getattr(t, METHOD[op])().cast("float64").numpy()
    with np.errstate(all="ignore"):
        want = REFERENCE[op](x)
    if dtype in ("float16", "bfloat16"):    # the exact value rounded once to the narrow type
        want = _rounded(want, dtype)
    tiny = np.finfo(np.float32 if dtype != "float64" else np.float64).tiny
    finite = np.isfinite(want) & (np.abs(want) > tiny)
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL[dtype], atol=0)
    # the rest: infinities, NaN and zeros (with their sign) exactly, underflow to 0 or a subnormal
    rest = ~finite
    assert np.array_equal(np.isnan(got[rest]), np.isnan(want[rest]))
    big = rest & np.isinf(want)
    assert np.array_equal(got[big], want[big])
    zero = rest & (want == 0)
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])) and np.all(got[zero] == 0)
    small = rest & ~np.isnan(want) & ~np.isinf(want) & (want != 0)
    assert np.all(np.abs(got[small]) <= 2 * tiny)


def test_pinned_values():
    x = Tensor(np.array([-np.inf, -100.0, -0.0, 0.0, 1e-6, 100.0, np.inf, np.nan], np.float32))
    want = np.array([0, 0, 0.5, 0.5, 0.50000025, 1, 1, np.nan], np.float32)
    got = x.sigmoid().numpy()
    exact = [0, 1, 2, 3, 5, 6, 7]     # saturated, zero and special values: the same bits on every device
    np.testing.assert_array_equal(got[exact], want[exact])
    # CUDA's exp2f is within 2 ulp (the CUDA math API's bound), so 1 / (1 + e) may round one ulp off there
    np.testing.assert_array_max_ulp(got[4:5], want[4:5], maxulp=1)
    t = x.tanh().numpy()
    np.testing.assert_array_equal(t, [-1.0, -1.0, -0.0, 0.0, np.float32(1e-6), 1.0, 1.0, np.nan])
    assert np.signbit(t[2]) and not np.signbit(t[3])
    e = x.exp().numpy()
    np.testing.assert_array_equal(e[[0, 2, 3, 6, 7]], [0.0, 1.0, 1.0, np.inf, np.nan])
    assert Tensor([88.0]).exp().item() == pytest.approx(math.exp(88.0), rel=3e-7)


def test_gradients_at_saturation_are_zero_not_nan():
    x = Tensor(np.array([-200.0, -50.0, 0.0, 50.0, 200.0], np.float32), requires_grad=True)
    (x.sigmoid().sum() + x.tanh().sum()).backward()
    g = x.grad.numpy()
    assert np.all(np.isfinite(g)) and g[0] == 0 and g[-1] == 0
    assert g[2] == pytest.approx(0.25 + 1.0)


# ---------------------------------------------------------------- the fused LSTM cell

def _cell_reference(a: np.ndarray, c: np.ndarray, dh: np.ndarray, dc: np.ndarray):
    """torch's LSTM step in float64 and its gradient by the chain rule: (h', c'), (da, dc_prev)."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, g, o = np.split(a, 4, axis=1)
    si, sf, tg_, so = sig(i), sig(f), np.tanh(g), sig(o)
    c2 = sf * c + si * tg_
    tc = np.tanh(c2)
    dct = dc + dh * so * (1 - tc * tc)
    da = np.concatenate([dct * tg_ * si * (1 - si), dct * c * sf * (1 - sf), dct * si * (1 - tg_ * tg_),
                         dh * tc * so * (1 - so)], axis=1)
    return (so * tc, c2), (da, dct * sf)


@pytest.mark.parametrize("n,h", [(1, 1), (3, 5), (7, 33), (20, 128)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstm_cell_follows_the_equations(n, h, dtype):
    rng = np.random.default_rng(n * 100 + h)
    a, c = rng.normal(0, 2, (n, 4 * h)), rng.normal(0, 1, (n, h))
    dh, dc = rng.normal(0, 1, (n, h)), rng.normal(0, 1, (n, h))
    ta, tc = (Tensor(v.astype(dtype), requires_grad=True) for v in (a, c))
    hc = apply(fused.LSTMCell, ta, tc)
    assert hc.shape == (n, 2 * h)
    (hc * Tensor(np.concatenate([dh, dc], 1).astype(dtype))).sum().backward()
    (h2, c2), (da, dcp) = _cell_reference(a, c, dh, dc)
    rtol, atol = (2e-5, 1e-6) if dtype == "float32" else (1e-12, 1e-14)
    np.testing.assert_allclose(hc.numpy()[:, :h], h2, rtol=rtol, atol=atol)
    np.testing.assert_allclose(hc.numpy()[:, h:], c2, rtol=rtol, atol=atol)
    np.testing.assert_allclose(ta.grad.numpy(), da, rtol=rtol, atol=atol)
    np.testing.assert_allclose(tc.grad.numpy(), dcp, rtol=rtol, atol=atol)


_cell_forward = fused.LSTMCell.forward


def test_lstm_fused_and_composed_paths_agree(monkeypatch):
    """The mixed-dtype path (ops that promote) and the fused Functions compute the same step."""
    calls = []
    monkeypatch.setattr(fused.LSTMCell, "forward",
                        lambda self, *a: calls.append(1) or _cell_forward(self, *a))
    tg.manual_seed(3)
    lstm = tg.nn.LSTM(6, 9, num_layers=2)
    x = Tensor(np.random.default_rng(1).normal(0, 1, (5, 4, 6)).astype(np.float32))
    out, (h, c) = lstm(x)
    h0 = Tensor.zeros(2, 4, 9, dtype=tg.float64)          # h in float64, c in float32: the composed path
    out64, (h64, c64) = lstm(x, (h0, Tensor.zeros(2, 4, 9)))
    np.testing.assert_allclose(out.numpy(), out64.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), c64.numpy(), rtol=1e-5, atol=1e-6)
    # each layer's first step promoted (composed ops: c float32, the rest float64); later ones were fused
    assert len(calls) == 2 * (5 - 1) and out64.dtype == tg.float64
    calls.clear()
    bf = tg.nn.LSTM(6, 9, dtype=tg.bfloat16)           # weights of another dtype than the data: step by step
    out_bf, _ = bf(x)
    out_bf.sum().backward()
    assert calls and all(p.grad.dtype == tg.bfloat16 for p in bf.parameters())


def _layer_by_steps(gi, h, c, w_hh, b_hh, reverse):
    """The reference recurrence: one LSTMCell Function per step (tested above against the equations)."""
    steps, n, _ = gi.shape
    size = c.shape[1]
    rows = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        a = gi[t] + h.linear(w_hh, b_hh)
        hc = apply(fused.LSTMCell, a, c)
        h, c = hc[:, :size], hc[:, size:]
        rows[t] = hc.reshape(1, n, 2 * size)
    return Tensor.cat(*rows)


@pytest.mark.parametrize("steps,n,h", [(1, 2, 3), (5, 3, 4), (4, 1, 9)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_layer_matches_its_steps(steps, n, h, reverse, bias):
    """Three calls with new values each (the first records the layer's forward and backward, the others
    replay them, realize.replayed), each with its own inputs wanting gradients."""
    rng = np.random.default_rng(steps * 31 + n * 7 + h)
    for call in range(3):
        values = [rng.normal(0, 1, s) for s in ((steps, n, 4 * h), (n, h), (n, h), (4 * h, h), (4 * h,))]
        weights = rng.normal(0, 1, (steps, n, 2 * h))
        wanted = [True] * 5 if call < 2 else list(rng.integers(0, 2, 5).astype(bool) | (np.arange(5) == 3))
        got_grads, want_grads, outs = [], [], []
        for fused_layer in (True, False):
            ts = [Tensor(v, requires_grad=bool(w)) for v, w in zip(values, wanted)]
            gi, h0, c0, w, b = ts
            if fused_layer:
                y = apply(fused.LSTMLayer, gi, h0, c0, w, *([b] if bias else []), reverse=reverse)
            else:
                y = _layer_by_steps(gi, h0, c0, w, b if bias else None, reverse)
            (y * Tensor(weights)).sum().backward()
            outs.append(y.numpy())
            (got_grads if fused_layer else want_grads).append(
                [t.grad.numpy() if t.grad is not None else None for t in (ts if bias else ts[:4])])
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, atol=1e-13)
        for got, want in zip(got_grads[0], want_grads[0]):
            assert (got is None) == (want is None)
            if got is not None:
                np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def _gru_reference(gi, gh, h, dh):
    """torch's GRU step in float64 and its gradient by the chain rule: h', (dgi, dgh, dh_prev)."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
    r, z = sig(ir + hr), sig(iz + hz)
    n = np.tanh(in_ + r * hn)
    d_n = dh * (1 - z) * (1 - n * n)
    d_z = dh * (h - n) * z * (1 - z)
    d_r = d_n * hn * r * (1 - r)
    return (1 - z) * n + z * h, (np.concatenate([d_r, d_z, d_n], 1), np.concatenate([d_r, d_z, d_n * r], 1),
                                 dh * z)


@pytest.mark.parametrize("n,h", [(1, 1), (3, 5), (20, 33)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gru_cell_follows_the_equations(n, h, dtype):
    rng = np.random.default_rng(n * 10 + h)
    gi, gh, h0, dh = (rng.normal(0, 2, s) for s in ((n, 3 * h), (n, 3 * h), (n, h), (n, h)))
    ts = [Tensor(v.astype(dtype), requires_grad=True) for v in (gi, gh, h0)]
    out = apply(fused.GRUCell, *ts)
    (out * Tensor(dh.astype(dtype))).sum().backward()
    want, grads = _gru_reference(gi, gh, h0, dh)
    rtol, atol = (2e-5, 1e-6) if dtype == "float32" else (1e-12, 1e-14)
    np.testing.assert_allclose(out.numpy(), want, rtol=rtol, atol=atol)
    for t, g in zip(ts, grads):
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=rtol, atol=atol)
