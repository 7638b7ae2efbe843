"""Binary ops with only one operand requiring grad, isclose at infinities, scatter with duplicate indices, and
the gradients of saturating functions at extreme inputs (issue 34 item 15).

`copysign(a, b)` with only b requiring grad gave a result with no graph (backward raised), with both it left
b.grad None; torch gives a zero gradient for the sign operand. Every binary op is run with x, y or both
requiring grad: the result requires grad exactly when an operand does, and each operand that requires grad
gets a gradient equal to central finite differences of a numpy float64 forward.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tg
import tg.nn.functional as F
from tg import Tensor

H = 1e-6
ANY_SIGN = (-2.0, 2.0)
POSITIVE = (0.5, 2.0)
PROB = (0.1, 0.9)

Binary = tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray],
               tuple[float, float], tuple[float, float]]
# name: (tg call, numpy float64 reference, range of x, range of y); inputs (3, 5) unless the op says
BINARY: dict[str, Binary] = {
    "add": (lambda x, y: x + y, np.add, ANY_SIGN, ANY_SIGN),
    "sub": (lambda x, y: x - y, np.subtract, ANY_SIGN, ANY_SIGN),
    "mul": (lambda x, y: x * y, np.multiply, ANY_SIGN, ANY_SIGN),
    "div": (lambda x, y: x / y, np.divide, ANY_SIGN, POSITIVE),
    "pow": (lambda x, y: x ** y, np.power, POSITIVE, ANY_SIGN),
    "float_power": (lambda x, y: x.float_power(y), np.power, POSITIVE, ANY_SIGN),
    "atan2": (lambda x, y: x.atan2(y), np.arctan2, ANY_SIGN, POSITIVE),
    "copysign": (lambda x, y: x.copysign(y), np.copysign, ANY_SIGN, ANY_SIGN),
    "hypot": (lambda x, y: x.hypot(y), np.hypot, ANY_SIGN, ANY_SIGN),
    "logaddexp": (lambda x, y: x.logaddexp(y), np.logaddexp, ANY_SIGN, ANY_SIGN),
    "logaddexp2": (lambda x, y: x.logaddexp2(y), np.logaddexp2, ANY_SIGN, ANY_SIGN),
    "xlogy": (lambda x, y: x.xlogy(y), lambda x, y: x * np.log(y), ANY_SIGN, POSITIVE),
    "fmod": (lambda x, y: x.fmod(y), np.fmod, ANY_SIGN, POSITIVE),
    "remainder": (lambda x, y: x % y, np.mod, ANY_SIGN, POSITIVE),
    "lerp": (lambda x, y: x.lerp(y, 0.3), lambda x, y: x + 0.3 * (y - x), ANY_SIGN, ANY_SIGN),
    "lerp_tensor_weight": (lambda x, y: x.lerp(x * 2, y), lambda x, y: x + y * x, ANY_SIGN, PROB),
    "where": (lambda x, y: tg.where(x > 0, x, y), lambda x, y: np.where(x > 0, x, y), ANY_SIGN, ANY_SIGN),
    "clamp_min_tensor": (lambda x, y: x.clamp(min=y), np.maximum, ANY_SIGN, ANY_SIGN),
    "addcmul": (lambda x, y: x.addcmul(x, y, value=0.5), lambda x, y: x + 0.5 * x * y, ANY_SIGN, ANY_SIGN),
    "addcdiv": (lambda x, y: x.addcdiv(x, y, value=0.5), lambda x, y: x + 0.5 * x / y, ANY_SIGN, POSITIVE),
    "matmul": (lambda x, y: x @ y.T, lambda x, y: x @ y.T, ANY_SIGN, ANY_SIGN),
    "outer": (lambda x, y: x[0].outer(y[0]), lambda x, y: np.outer(x[0], y[0]), ANY_SIGN, ANY_SIGN),
    "kron": (lambda x, y: x.kron(y), np.kron, ANY_SIGN, ANY_SIGN),
    "inner": (lambda x, y: x.inner(y), np.inner, ANY_SIGN, ANY_SIGN),
    "cross": (lambda x, y: x[:, :3].cross(y[:, :3], dim=1), lambda x, y: np.cross(x[:, :3], y[:, :3]),
              ANY_SIGN, ANY_SIGN),
    "cdist": (lambda x, y: tg.cdist(x, y), lambda x, y: np.sqrt(((x[:, None] - y[None]) ** 2).sum(-1)),
              ANY_SIGN, ANY_SIGN),
    "mse_loss": (lambda x, y: F.mse_loss(x, y), lambda x, y: ((x - y) ** 2).mean(), ANY_SIGN, ANY_SIGN),
    "l1_loss": (lambda x, y: F.l1_loss(x, y), lambda x, y: np.abs(x - y).mean(), ANY_SIGN, ANY_SIGN),
    "bce": (lambda x, y: F.binary_cross_entropy(x, y),
            lambda x, y: -(y * np.log(x) + (1 - y) * np.log(1 - x)).mean(), PROB, PROB),
    "bce_with_logits": (lambda x, y: F.binary_cross_entropy_with_logits(x, y),
                        lambda x, y: (np.logaddexp(0, x) - y * x).mean(), ANY_SIGN, PROB),
    "kl_div": (lambda x, y: F.kl_div(x, y, reduction="sum"), lambda x, y: (y * (np.log(y) - x)).sum(),
               ANY_SIGN, PROB),
    "cosine_similarity": (lambda x, y: F.cosine_similarity(x, y),
                          lambda x, y: (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1)), ANY_SIGN,
                          ANY_SIGN),
}


def _numeric_grad(f: Callable[[np.ndarray, np.ndarray], np.ndarray], x: np.ndarray, y: np.ndarray,
                  w: np.ndarray, side: int) -> np.ndarray:
    args = [x, y]
    grad = np.zeros_like(args[side])
    for i in np.ndindex(grad.shape):
        up, down = [a.copy() for a in args], [a.copy() for a in args]
        up[side][i] += H
        down[side][i] -= H
        grad[i] = ((w * f(*up)).sum() - (w * f(*down)).sum()) / (2 * H)
    return grad


def _away_from_kinks(a: np.ndarray, b: np.ndarray) -> bool:
    """No input sits within 1e-3 of a kink the finite differences would straddle."""
    return bool(np.abs(a).min() > 1e-3 and np.abs(np.abs(a) - np.abs(b)).min() > 1e-3
                and np.abs(a - b).min() > 1e-3)


@pytest.mark.parametrize("needs", ["x", "y", "both"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradient_with_either_operand_requiring_grad(name: str, needs: str) -> None:
    f_tg, f_np, x_range, y_range = BINARY[name]
    rng = np.random.default_rng([len(name), len(needs)])
    while True:
        x, y = rng.uniform(*x_range, (3, 5)), rng.uniform(*y_range, (3, 5))
        if _away_from_kinks(x, y):
            break
    tx, ty = Tensor(x, requires_grad=needs != "y"), Tensor(y, requires_grad=needs != "x")
    out = f_tg(tx, ty)
    assert out.requires_grad, f"{name}: an operand requires grad, the result does not"
    np.testing.assert_allclose(out.numpy(), f_np(x, y), rtol=1e-6, atol=1e-9)  # values: other tests
    w = rng.standard_normal(np.shape(f_np(x, y)))
    (out * Tensor(w)).sum().backward()
    for side, t in enumerate((tx, ty)):
        if not t.requires_grad:
            assert t.grad is None
            continue
        assert t.grad is not None, f"{name}: operand {'xy'[side]} requires grad and got none"
        np.testing.assert_allclose(t.grad.numpy(), _numeric_grad(f_np, x, y, w, side), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}: gradient of operand {'xy'[side]}")


def test_copysign_gradient_of_sign_operand_is_zero() -> None:
    x, y = Tensor([1.0, -2.0, 0.0]), Tensor([-1.0, 1.0, -1.0], requires_grad=True)
    x.copysign(y).sum().backward()
    assert y.grad.numpy().tolist() == [0.0, 0.0, 0.0]


# ------------------------------------------------------------ isclose at inf and nan

def _np_isclose_torch(a: np.ndarray, b: np.ndarray, rtol: float, atol: float, equal_nan: bool) -> np.ndarray:
    """torch.isclose's documented rule: equal, or a finite |a - b| within atol + rtol * |b|; NaNs only
    with equal_nan."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - b)
        close = (a == b) | (np.isfinite(err) & (err <= atol + rtol * np.abs(b)))
    return close | (np.isnan(a) & np.isnan(b)) if equal_nan else close


@pytest.mark.parametrize("equal_nan", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_isclose_on_every_pair_of_special_values(dtype: str, equal_nan: bool) -> None:
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, 1.0 + 1e-6, -1.0, 1e30, 65000.0])
    a, b = np.meshgrid(special, special)
    with np.errstate(over="ignore"):          # 1e30 is inf in float16
        a, b = a.astype(dtype), b.astype(dtype)
    got = Tensor(a).isclose(Tensor(b), equal_nan=equal_nan).numpy()
    np.testing.assert_array_equal(got, _np_isclose_torch(a, b, 1e-5, 1e-8, equal_nan))
    assert Tensor(a[:, 0]).allclose(Tensor(a[:, 0]), equal_nan=True)
    assert not Tensor([np.inf]).allclose(Tensor([-np.inf]))


# ------------------------------------------------------------ duplicates in scatter-like writes

def _np_scatter(x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, add: bool) -> np.ndarray:
    """torch's CPU loop: every index entry in row-major order, so a duplicate's last write wins."""
    out = x.copy()
    for pos in np.ndindex(index.shape):
        target = list(pos)
        target[dim] = index[pos]
        out[tuple(target)] = out[tuple(target)] + src[pos] if add else src[pos]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_scatter_with_duplicate_indices_last_write_wins(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(1, 6, ndim))
    dim = int(rng.integers(0, ndim))
    index_shape = tuple(int(rng.integers(1, s + 1)) if i != dim else int(rng.integers(1, 9))
                        for i, s in enumerate(shape))
    index = rng.integers(0, min(2, shape[dim]), index_shape)          # few targets: many duplicates
    x, src = rng.standard_normal(shape), rng.standard_normal(index_shape)
    t, ti, ts = Tensor(x), Tensor(index), Tensor(src)
    np.testing.assert_array_equal(t.scatter(dim, ti, ts).numpy(), _np_scatter(x, dim, index, src, False))
    np.testing.assert_allclose(t.scatter_add(dim, ti, ts).numpy(), _np_scatter(x, dim, index, src, True),
                               rtol=1e-12)
    # index_put and index_add along one dim with the same duplicates
    base, flat, values = x.reshape(-1)[:shape[dim]], index.reshape(-1), src.reshape(-1)
    tb, tf, tv = Tensor(base), Tensor(flat), Tensor(values)
    np.testing.assert_array_equal(tb.index_put((tf,), tv).numpy(), _np_put(base, flat, values, False))
    added = _np_put(base, flat, values, True)
    np.testing.assert_allclose(tb.index_put((tf,), tv, accumulate=True).numpy(), added, rtol=1e-12)
    np.testing.assert_allclose(tb.index_add(0, tf, tv).numpy(), added, rtol=1e-12)


def _np_put(x: np.ndarray, index: np.ndarray, values: np.ndarray, add: bool) -> np.ndarray:
    out = x.copy()
    for i, v in zip(index, values):
        out[i] = out[i] + v if add else v
    return out


# ------------------------------------------------------------ saturating functions at extreme inputs

def _np_log1pexp(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0, -x))


# name: (tg call, numpy float64 value, numpy float64 derivative)
EXTREME: dict[str, tuple[Callable[[Tensor], Tensor], Callable, Callable]] = {
    "sigmoid": (lambda x: x.sigmoid(), _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x)),
    # torch's threshold (20): above it softplus is x itself, with derivative 1
    "softplus": (lambda x: F.softplus(x), lambda x: np.where(x > 20, x, _np_log1pexp(x)),
                 lambda x: np.where(x > 20, 1.0, _sigmoid(x))),
    "logsigmoid": (lambda x: F.logsigmoid(x), lambda x: -_np_log1pexp(-x), lambda x: _sigmoid(-x)),
    "tanh": (lambda x: x.tanh(), np.tanh, lambda x: 1 / np.cosh(np.clip(x, -700, 700)) ** 2),
    "silu": (lambda x: F.silu(x), lambda x: x * _sigmoid(x),
             lambda x: _sigmoid(x) * (1 + x * _sigmoid(-x))),
    "exp": (lambda x: x.exp(), np.exp, np.exp),
    "expm1": (lambda x: x.expm1(), np.expm1, np.exp),
    "log1p": (lambda x: (x.abs() - 0.999999).log1p(), lambda x: np.log1p(np.abs(x) - 0.999999),
              lambda x: np.sign(x) / (np.abs(x) + 1e-6)),
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("name", sorted(EXTREME))
def test_saturating_function_gradient_at_extreme_inputs(name: str, dtype: str) -> None:
    # torch's backward formulas in the dtype: finite (no NaN, no raise), and within a few ulps of the
    # float64 truth, or of 0 where the truth is below the dtype's resolution next to 1
    f_tg, f_np, df_np = EXTREME[name]
    x = np.array([-1e4, -800.0, -100.0, -30.0, -1.0, -0.5, 0.5, 1.0, 30.0, 100.0, 800.0, 1e4]).astype(dtype)
    t = Tensor(x, requires_grad=True)
    out = f_tg(t)
    out.sum().backward()
    info = np.finfo(dtype)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        want, dwant = f_np(x64), df_np(x64)
        # where the float64 value overflows the dtype, inf is the right answer; NaN never is
        want = np.where(np.abs(want) > info.max, np.sign(want) * np.inf, want)
        dwant = np.where(np.abs(dwant) > info.max, np.sign(dwant) * np.inf, dwant)
    got, dgot = out.numpy().astype(np.float64), t.grad.numpy().astype(np.float64)
    assert not np.isnan(dgot).any(), f"{name}({dtype}): NaN gradient {dgot}"
    np.testing.assert_allclose(got, want, rtol=64 * info.eps, atol=2 * info.eps)
    np.testing.assert_allclose(dgot, dwant, rtol=64 * info.eps, atol=2 * info.eps)
