"""The torch-op parity suite: the torch tensor ops and torch.* functions most used in training code,
each written the way a torch user writes it (`import tg as torch`, `tg.nn.functional as F`) and
checked against an independent numpy reference written here.

Each Case is one table row: the tg call, the numpy reference, its inputs (random, odd sizes) and
tolerances; values, shapes and dtype kinds are compared on every test device, exact dtype names where
torch pins them (`dtype=`), and for `grad=True` rows the gradient on float64 inputs is checked against
a central finite difference along a random direction. Semantics (argument names, defaults, result
dtypes, tie rules) follow torch 2.x; the reference never calls tg or torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from op_helpers import DEVICES, np_erf, np_gelu, np_gelu_tanh, np_logsumexp, np_sigmoid, np_softmax

import tg as torch
import tg.nn.functional as F


@dataclass(frozen=True)
class In:
    """One random input: shape, dtype, value range (ints: [low, high))."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = -2.0
    high: float = 2.0

    def make(self, rng: np.random.Generator) -> np.ndarray:
        if self.dtype == "bool":
            return rng.random(self.shape) < 0.5
        if self.dtype.startswith(("int", "uint")):
            return rng.integers(int(self.low), int(self.high), size=self.shape).astype(self.dtype)
        return rng.uniform(self.low, self.high, size=self.shape).astype(self.dtype)


def U(*shape: int, low: float = -2.0, high: float = 2.0) -> In:  # noqa: N802  (short table names)
    return In(shape, "float32", low, high)


def I(*shape: int, low: int = -5, high: int = 6, dtype: str = "int64") -> In:  # noqa: N802, E743
    return In(shape, dtype, low, high)


def B(*shape: int) -> In:  # noqa: N802
    return In(shape, "bool")


@dataclass(frozen=True)
class Case:
    name: str
    call: Callable[..., Any]  # tg tensors -> Tensor, tuple of Tensors, or a Python value
    ref: Callable[..., Any]  # numpy arrays -> the same structure
    inputs: tuple[Any, ...]  # In specs or literal numpy arrays
    grad: bool = False  # check d(call)/d(float inputs) by finite differences
    tol: float = 1e-5  # rtol and atol
    dtype: str | None = None  # the exact dtype torch gives (first output)


def _float(*xs: np.ndarray) -> Any:
    return xs[0].astype(np.float64) if len(xs) == 1 else tuple(x.astype(np.float64) for x in xs)


def _std(x: np.ndarray, axis: Any = None, ddof: int = 1, keepdims: bool = False) -> np.ndarray:
    return np.std(x.astype(np.float64), axis=axis, ddof=ddof, keepdims=keepdims)


def _lower_median(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(x, axis=axis, kind="stable")
    k = (x.shape[axis] - 1) // 2
    idx = np.take(order, [k], axis=axis)
    return np.take_along_axis(x, idx, axis).squeeze(axis), idx.squeeze(axis)


def _cum_extreme(x: np.ndarray, dim: int, better: Callable[..., Any]) -> tuple[np.ndarray, np.ndarray]:
    x = np.moveaxis(x, dim, -1)
    vals, idx = x.copy(), np.zeros(x.shape, np.int64)
    for i in range(1, x.shape[-1]):
        take = ~better(vals[..., i - 1], x[..., i])  # torch: a tie moves the index forward
        vals[..., i] = np.where(take, x[..., i], vals[..., i - 1])
        idx[..., i] = np.where(take, i, idx[..., i - 1])
    return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)


def _scatter(x: np.ndarray, index: np.ndarray, src: np.ndarray, add: bool) -> np.ndarray:
    out = x.copy()
    for pos in np.ndindex(*index.shape):
        target = (pos[0], index[pos]) + pos[2:]  # dim=1
        out[target] = out[target] + src[pos] if add else src[pos]
    return out


def _unique_index(n: int) -> np.ndarray:
    """A permutation of 0..n-1 as int64, a scatter index with no repeats along dim 1."""
    return np.stack([np.random.default_rng(n + r).permutation(n) for r in range(3)]).astype(np.int64)


def _cross_entropy(
    x: np.ndarray, t: np.ndarray, w: np.ndarray | None = None, smoothing: float = 0.0, reduction: str = "mean"
) -> np.ndarray:
    logp = np.log(np_softmax(x.astype(np.float64), 1))
    n, c = x.shape
    w = np.ones(c) if w is None else w.astype(np.float64)
    nll = -logp[np.arange(n), t] * w[t]
    smooth = -(logp * w).sum(1) / c
    per = (1 - smoothing) * nll + smoothing * smooth
    if reduction == "none":
        return per
    return per.sum() if reduction == "sum" else per.sum() / w[t].sum()


def _bce_logits(z: np.ndarray, y: np.ndarray, pos_weight: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    log_sig, log_not = -np.logaddexp(0, -z), -np.logaddexp(0, z)
    return np.mean(-(pos_weight * y * log_sig + (1 - y) * log_not))


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0, -x.astype(np.float64))


def _cosine_embedding(a: np.ndarray, b: np.ndarray, y: np.ndarray, margin: float) -> np.ndarray:
    a, b = _float(a, b)
    cos = (a * b).sum(-1) / np.sqrt(((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12))
    return np.where(y == 1, 1 - cos, np.maximum(cos - margin, 0)).mean()


def _triplet(a: np.ndarray, p: np.ndarray, n: np.ndarray, swap: bool = False) -> np.ndarray:
    a, p, n = _float(a, p, n)
    d_pos, d_neg = np.linalg.norm(a - p + 1e-6, axis=-1), np.linalg.norm(a - n + 1e-6, axis=-1)
    if swap:
        d_neg = np.minimum(d_neg, np.linalg.norm(p - n + 1e-6, axis=-1))
    return np.maximum(d_pos - d_neg + 1.0, 0).mean()


def _poisson_full(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    x, t = _float(x, t)
    loss = x - t * np.log(x + 1e-8)
    safe = np.where(t > 1, t, 1.0)
    return (loss + np.where(t > 1, safe * np.log(safe) - safe + 0.5 * np.log(2 * np.pi * safe), 0)).mean()


def _kl_div_mean(x: Any, t: Any) -> Any:
    with pytest.warns(UserWarning, match="batchmean"):    # torch warns that 'mean' is not the KL divergence
        return F.kl_div(x, t)


SIGNS = np.array([1, -1, -1, 1, -1], np.int64)


def _unique(x: np.ndarray) -> tuple[np.ndarray, ...]:
    return np.unique(x, return_inverse=True, return_counts=True)


def _one_hot(t: np.ndarray, n: int) -> np.ndarray:
    return (t[..., None] == np.arange(n)).astype(np.int64)


ROUND = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7, 2.2], np.float32)
SPECIAL = np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 3.5], np.float32)
MIXED_SIGNS = np.array([[5.0, -5.0, 7.5, -7.5, 3.0], [-1.0, 1.0, 0.0, 6.0, -6.5]], np.float32)
DIVISORS = np.array([[3.0, 3.0, -2.0, -2.0, 1.5], [2.0, -4.0, 5.0, -2.5, 2.0]], np.float32)
INT_MIXED = np.array([[7, -7, 7, -7, 0], [9, -9, 1, -1, 5]], np.int64)
INT_DIVISORS = np.array([[2, 2, -2, -2, 3], [4, 4, -4, -4, 7]], np.int64)
TIES = np.array([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0], [0.0, 0.0, -1.0, 5.0, 5.0, 2.0]], np.float32)
SORTED = np.array([-1.0, 0.5, 2.0, 2.0, 4.5], np.float32)

ELEMENTWISE = [
    Case("sin", lambda x: torch.sin(x), np.sin, (U(3, 7),), grad=True),
    Case("cos", lambda x: x.cos(), np.cos, (U(3, 7),), grad=True),
    Case("tan", lambda x: x.tan(), np.tan, (U(3, 7, low=-1.2, high=1.2),), grad=True, tol=1e-4),
    Case("asin", lambda x: torch.asin(x), np.arcsin, (U(5, 3, low=-0.9, high=0.9),), grad=True),
    Case("acos", lambda x: x.acos(), np.arccos, (U(5, 3, low=-0.9, high=0.9),), grad=True),
    Case("atan", lambda x: x.atan(), np.arctan, (U(5, 3),), grad=True),
    Case("arctan", lambda x: torch.arctan(x), np.arctan, (U(5, 3),)),
    Case("atan2", lambda y, x: torch.atan2(y, x), np.arctan2, (U(3, 5), U(3, 5)), grad=True),
    Case("sinh", lambda x: x.sinh(), np.sinh, (U(3, 7),), grad=True),
    Case("cosh", lambda x: torch.cosh(x), np.cosh, (U(3, 7),), grad=True),
    Case("tanh", lambda x: torch.tanh(x), np.tanh, (U(3, 7),), grad=True),
    Case("asinh", lambda x: x.asinh(), np.arcsinh, (U(3, 7),), grad=True),
    Case("acosh", lambda x: x.acosh(), np.arccosh, (U(3, 7, low=1.1, high=3.0),), grad=True),
    Case("atanh", lambda x: x.atanh(), np.arctanh, (U(3, 7, low=-0.9, high=0.9),), grad=True),
    Case("exp", lambda x: torch.exp(x), np.exp, (U(3, 7),), grad=True),
    Case("exp2", lambda x: x.exp2(), np.exp2, (U(3, 7),), grad=True),
    Case("expm1", lambda x: torch.expm1(x), np.expm1, (U(3, 7, low=-1e-3, high=1e-3),), grad=True, tol=1e-4),
    Case("log", lambda x: torch.log(x), np.log, (U(3, 7, low=0.1, high=3.0),), grad=True),
    Case("log2", lambda x: x.log2(), np.log2, (U(3, 7, low=0.1, high=3.0),), grad=True),
    Case("log10", lambda x: torch.log10(x), np.log10, (U(3, 7, low=0.1, high=3.0),), grad=True),
    Case("log1p", lambda x: torch.log1p(x), np.log1p, (U(3, 7, low=-1e-4, high=1e-4),), grad=True, tol=1e-4),
    Case("sqrt", lambda x: torch.sqrt(x), np.sqrt, (U(3, 7, low=0.1, high=3.0),), grad=True),
    Case(
        "rsqrt", lambda x: torch.rsqrt(x), lambda x: 1 / np.sqrt(x), (U(3, 7, low=0.1, high=3.0),), grad=True
    ),
    Case(
        "reciprocal", lambda x: torch.reciprocal(x), lambda x: 1 / x, (U(3, 7, low=0.5, high=2.0),), grad=True
    ),
    Case("square", lambda x: torch.square(x), np.square, (U(3, 7),), grad=True),
    Case("abs", lambda x: torch.abs(x), np.abs, (U(3, 7),), grad=True),
    Case("absolute int", lambda x: torch.absolute(x), np.abs, (I(3, 7),), dtype="int64"),
    Case("neg", lambda x: torch.neg(x), np.negative, (U(3, 7),), grad=True),
    Case("negative", lambda x: torch.negative(x), np.negative, (U(3, 7),)),
    Case("sign", lambda x: torch.sign(x), np.sign, (np.array([-2.0, 0.0, 3.5, -0.0], np.float32),)),
    Case("sign int", lambda x: x.sign(), np.sign, (I(3, 7),), dtype="int64"),
    Case("sgn", lambda x: torch.sgn(x), np.sign, (U(3, 7),)),
    Case("signbit", lambda x: torch.signbit(x), np.signbit, (SPECIAL,)),
    Case("sigmoid", lambda x: torch.sigmoid(x), np_sigmoid, (U(3, 7),), grad=True),
    Case("erf", lambda x: torch.erf(x), np_erf, (U(3, 7),), grad=True),
    Case("erfc", lambda x: torch.erfc(x), lambda x: 1 - np_erf(x), (U(3, 7),), grad=True),
    Case("round half even", lambda x: torch.round(x), np.round, (ROUND,)),
    Case(
        "round decimals",
        lambda x: x.round(decimals=2),
        lambda x: np.round(x.astype(np.float64), 2),
        (U(3, 7, low=-9, high=9),),
        tol=1e-6,
    ),
    Case("floor", lambda x: torch.floor(x), np.floor, (ROUND,)),
    Case("ceil", lambda x: torch.ceil(x), np.ceil, (ROUND,)),
    Case("trunc", lambda x: torch.trunc(x), np.trunc, (ROUND,)),
    Case("fix", lambda x: torch.fix(x), np.trunc, (ROUND,)),
    Case("frac", lambda x: torch.frac(x), lambda x: x - np.trunc(x), (ROUND,)),
    Case(
        "clamp scalars",
        lambda x: torch.clamp(x, min=-0.5, max=0.7),
        lambda x: np.clip(x, -0.5, 0.7),
        (U(3, 7),),
        grad=True,
    ),
    Case("clamp min only", lambda x: x.clamp(min=0.25), lambda x: np.maximum(x, 0.25), (U(3, 7),)),
    Case("clamp max only", lambda x: x.clamp(max=0.25), lambda x: np.minimum(x, 0.25), (U(3, 7),)),
    Case(
        "clamp tensors",
        lambda x, lo, hi: x.clamp(lo, hi),
        lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
        (U(3, 7), U(7, low=-2, high=-0.5), U(3, 1, low=0.5, high=2)),
        grad=True,
    ),
    Case("clip", lambda x: torch.clip(x, -1, 1), lambda x: np.clip(x, -1, 1), (U(3, 7),)),
    Case("clamp_min", lambda x: x.clamp_min(0.1), lambda x: np.maximum(x, 0.1), (U(3, 7),)),
    Case("clamp_max", lambda x: x.clamp_max(0.1), lambda x: np.minimum(x, 0.1), (U(3, 7),)),
    Case(
        "lerp scalar",
        lambda a, b: torch.lerp(a, b, 0.3),
        lambda a, b: a + 0.3 * (b - a),
        (U(3, 7), U(3, 7)),
        grad=True,
    ),
    Case(
        "lerp tensor",
        lambda a, b, w: a.lerp(b, w),
        lambda a, b, w: a + w * (b - a),
        (U(3, 7), U(7), U(3, 7, low=0, high=1)),
        grad=True,
    ),
    Case(
        "addcmul",
        lambda x, a, b: torch.addcmul(x, a, b, value=0.5),
        lambda x, a, b: x + 0.5 * a * b,
        (U(3, 7), U(3, 7), U(7)),
        grad=True,
    ),
    Case(
        "addcdiv",
        lambda x, a, b: x.addcdiv(a, b, value=-2),
        lambda x, a, b: x - 2 * a / b,
        (U(3, 7), U(3, 7), U(3, 7, low=0.5, high=2)),
        grad=True,
    ),
    Case("hypot", lambda a, b: torch.hypot(a, b), np.hypot, (U(3, 7), U(3, 7)), grad=True),
    Case("logaddexp", lambda a, b: torch.logaddexp(a, b), np.logaddexp, (U(3, 7), U(3, 7)), grad=True),
    Case("logaddexp2", lambda a, b: a.logaddexp2(b), np.logaddexp2, (U(3, 7), U(3, 7)), grad=True),
    Case("fmod", lambda a, b: torch.fmod(a, b), np.fmod, (MIXED_SIGNS, DIVISORS)),
    Case("fmod scalar", lambda a: a.fmod(-3), lambda a: np.fmod(a, -3), (MIXED_SIGNS,)),
    Case("fmod int", lambda a, b: torch.fmod(a, b), np.fmod, (INT_MIXED, INT_DIVISORS), dtype="int64"),
    Case("remainder", lambda a, b: torch.remainder(a, b), np.remainder, (MIXED_SIGNS, DIVISORS)),
    Case("remainder int", lambda a, b: a % b, np.remainder, (INT_MIXED, INT_DIVISORS), dtype="int64"),
    Case("floor_divide", lambda a, b: torch.floor_divide(a, b), np.floor_divide, (MIXED_SIGNS, DIVISORS)),
    Case("floor_divide int", lambda a, b: a // b, np.floor_divide, (INT_MIXED, INT_DIVISORS), dtype="int64"),
    Case(
        "div trunc",
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: np.trunc(a / b),
        (MIXED_SIGNS, DIVISORS),
    ),
    Case(
        "div floor int",
        lambda a, b: a.div(b, rounding_mode="floor"),
        np.floor_divide,
        (INT_MIXED, INT_DIVISORS),
        dtype="int64",
    ),
    Case("true_divide", lambda a, b: torch.true_divide(a, b), np.true_divide, (U(3, 7), U(7, low=0.5))),
    Case(
        "pow tensor", lambda a, b: torch.pow(a, b), np.power, (U(3, 7, low=0.5, high=2), U(3, 7)), grad=True
    ),
    Case("pow scalar", lambda a: a**3, lambda a: a**3, (U(3, 7),), grad=True),
    Case("rpow", lambda a: 2.0**a, lambda a: 2.0**a, (U(3, 7),), grad=True),
    Case(
        "float_power",
        lambda a: torch.float_power(a, 2),
        lambda a: a.astype(np.float64) ** 2,
        (U(3, 7),),
        dtype="float64",
    ),
    Case("maximum", lambda a, b: torch.maximum(a, b), np.maximum, (U(3, 7), U(7)), grad=True),
    Case("minimum", lambda a, b: torch.minimum(a, b), np.minimum, (U(3, 7), U(7)), grad=True),
    Case("fmax nan", lambda a, b: torch.fmax(a, b), np.fmax, (SPECIAL, SPECIAL[::-1].copy())),
    Case("fmin nan", lambda a, b: torch.fmin(a, b), np.fmin, (SPECIAL, SPECIAL[::-1].copy())),
    Case("copysign", lambda a, b: torch.copysign(a, b), np.copysign, (U(3, 7), U(3, 7))),
    Case("deg2rad", lambda a: torch.deg2rad(a), np.deg2rad, (U(3, 7, low=-180, high=180),)),
    Case("rad2deg", lambda a: a.rad2deg(), np.rad2deg, (U(3, 7),)),
    Case(
        "xlogy",
        lambda a, b: torch.xlogy(a, b),
        lambda a, b: a * np.log(b),
        (U(3, 7), U(3, 7, low=0.1, high=2)),
        grad=True,
    ),
    Case(
        "add alpha", lambda a, b: torch.add(a, b, alpha=2), lambda a, b: a + 2 * b, (U(3, 7), U(7)), grad=True
    ),
    Case("sub alpha", lambda a, b: a.sub(b, alpha=0.5), lambda a, b: a - 0.5 * b, (U(3, 7), U(7)), grad=True),
    Case("rsub", lambda a: 1 - a, lambda a: 1 - a, (U(3, 7),)),
    Case("mul broadcast", lambda a, b: torch.mul(a, b), np.multiply, (U(2, 1, 5), U(3, 5)), grad=True),
    Case("div broadcast", lambda a, b: a / b, np.divide, (U(3, 1), U(1, 7, low=0.5)), grad=True),
    Case("nan_to_num", lambda x: torch.nan_to_num(x), lambda x: np.nan_to_num(x), (SPECIAL,)),
    Case(
        "nan_to_num values",
        lambda x: x.nan_to_num(nan=0.5, posinf=9.0, neginf=-9.0),
        lambda x: np.nan_to_num(x, nan=0.5, posinf=9.0, neginf=-9.0),
        (SPECIAL,),
    ),
]

COMPARISON = [
    Case(
        "eq",
        lambda a, b: torch.eq(a, b),
        np.equal,
        (I(3, 7, low=0, high=3), I(7, low=0, high=3)),
        dtype="bool",
    ),
    Case("ne", lambda a, b: a != b, np.not_equal, (I(3, 7, low=0, high=3), I(7, low=0, high=3))),
    Case("lt", lambda a, b: torch.lt(a, b), np.less, (U(3, 7), U(7))),
    Case("le scalar", lambda a: a.le(0.5), lambda a: a <= 0.5, (U(3, 7),)),
    Case("gt", lambda a, b: torch.gt(a, b), np.greater, (U(3, 7), U(3, 1))),
    Case("ge", lambda a, b: a >= b, np.greater_equal, (I(3, 7, low=0, high=3), I(7, low=0, high=3))),
    Case("greater", lambda a, b: torch.greater(a, b), np.greater, (U(3, 7), U(7))),
    Case("less_equal", lambda a, b: torch.less_equal(a, b), np.less_equal, (U(3, 7), U(7))),
    Case(
        "not_equal",
        lambda a, b: torch.not_equal(a, b),
        np.not_equal,
        (I(5, low=0, high=2), I(5, low=0, high=2)),
    ),
    Case("logical_and", lambda a, b: torch.logical_and(a, b), np.logical_and, (B(3, 7), B(7))),
    Case("logical_or", lambda a, b: a.logical_or(b), np.logical_or, (B(3, 7), B(3, 7))),
    Case("logical_xor", lambda a, b: torch.logical_xor(a, b), np.logical_xor, (B(3, 7), B(3, 7))),
    Case(
        "logical_not float",
        lambda a: torch.logical_not(a),
        np.logical_not,
        (np.array([0.0, 1.5, -2.0, 0.0], np.float32),),
        dtype="bool",
    ),
    Case(
        "logical_and ints",
        lambda a, b: a.logical_and(b),
        np.logical_and,
        (I(7, low=0, high=2), I(7, low=0, high=2)),
    ),
    Case("bool & |", lambda a, b: (a & b) | ~a, lambda a, b: (a & b) | ~a, (B(3, 7), B(3, 7))),
    Case("isnan", lambda x: torch.isnan(x), np.isnan, (SPECIAL,)),
    Case("isinf", lambda x: torch.isinf(x), np.isinf, (SPECIAL,)),
    Case("isfinite", lambda x: torch.isfinite(x), np.isfinite, (SPECIAL,)),
    Case("isposinf", lambda x: torch.isposinf(x), np.isposinf, (SPECIAL,)),
    Case("isneginf", lambda x: torch.isneginf(x), np.isneginf, (SPECIAL,)),
    Case(
        "isclose",
        lambda a, b: torch.isclose(a, b, rtol=1e-2, atol=1e-3),
        lambda a, b: np.isclose(a, b, rtol=1e-2, atol=1e-3),
        (np.array([1.0, 2.0, 3.0, 0.0], np.float32), np.array([1.005, 2.1, 3.0, 1e-4], np.float32)),
    ),
    Case(
        "allclose",
        lambda a, b: torch.allclose(a, a + 1e-7) and not torch.allclose(a, b),
        lambda a, b: True,
        (U(3, 7), U(3, 7)),
    ),
    Case(
        "equal",
        lambda a, b: torch.equal(a, a * 1) and not torch.equal(a, b),
        lambda a, b: True,
        (U(3, 7), U(3, 7)),
    ),
    Case("where", lambda c, a, b: torch.where(c, a, b), np.where, (B(3, 7), U(3, 7), U(7)), grad=True),
    Case(
        "where scalar",
        lambda c, a: torch.where(c, a, 0.0),
        lambda c, a: np.where(c, a, 0.0),
        (B(3, 7), U(3, 7)),
    ),
    Case("where condition", lambda x: (x > 0).where(x, -x), np.abs, (U(3, 7),)),
    Case(
        "masked_fill",
        lambda x, m: x.masked_fill(m, -1.0),
        lambda x, m: np.where(m, -1.0, x),
        (U(3, 7), B(7)),
        grad=True,
    ),
    Case(
        "bitwise_and", lambda a, b: torch.bitwise_and(a, b), np.bitwise_and, (I(3, 7, low=-9, high=9), I(7))
    ),
    Case("bitwise_xor", lambda a, b: a ^ b, np.bitwise_xor, (I(3, 7, low=-9, high=9), I(7))),
    Case("bitwise_not", lambda a: ~a, np.invert, (I(3, 7, low=-9, high=9),)),
    Case("shifts", lambda a: (a << 2) >> 1, lambda a: (a << 2) >> 1, (I(3, 7, low=0, high=9),)),
]

REDUCTION = [
    Case("sum", lambda x: torch.sum(x), np.sum, (U(3, 7),), grad=True, tol=1e-4),
    Case(
        "sum dim keepdim",
        lambda x: x.sum(dim=1, keepdim=True),
        lambda x: x.sum(1, keepdims=True),
        (U(3, 7, 5),),
        grad=True,
        tol=1e-4,
    ),
    Case("sum dims", lambda x: x.sum((0, 2)), lambda x: x.sum((0, 2)), (U(3, 7, 5),), grad=True, tol=1e-4),
    Case("sum negative dim", lambda x: torch.sum(x, -1), lambda x: x.sum(-1), (U(3, 7, 5),), tol=1e-4),
    Case(
        "sum dtype",
        lambda x: x.sum(dtype=torch.float64),
        lambda x: x.astype(np.float64).sum(),
        (U(3, 7),),
        dtype="float64",
    ),
    Case("sum bool", lambda x: x.sum(), np.sum, (B(3, 7),), dtype="int64"),
    Case("sum int32", lambda x: x.sum(0), lambda x: x.sum(0), (I(3, 7, dtype="int32"),), dtype="int64"),
    Case("nansum", lambda x: torch.nansum(x), np.nansum, (SPECIAL[[0, 1, 4, 5]],)),
    Case("mean", lambda x: torch.mean(x, dim=0), lambda x: x.mean(0), (U(3, 7),), grad=True),
    Case(
        "mean dims keepdim",
        lambda x: x.mean((1, 2), keepdim=True),
        lambda x: x.mean((1, 2), keepdims=True),
        (U(3, 7, 5),),
        grad=True,
    ),
    Case("nanmean", lambda x: torch.nanmean(x), np.nanmean, (SPECIAL[[0, 1, 4, 5]],)),
    Case("prod", lambda x: torch.prod(x), np.prod, (U(3, 5, low=0.5, high=1.5),), grad=True, tol=1e-4),
    Case(
        "prod dim",
        lambda x: x.prod(1, keepdim=True),
        lambda x: x.prod(1, keepdims=True),
        (U(3, 5),),
        grad=True,
        tol=1e-4,
    ),
    Case("prod int", lambda x: x.prod(0), lambda x: x.prod(0), (I(3, 5),), dtype="int64"),
    Case("std", lambda x: torch.std(x), lambda x: _std(x), (U(3, 7),), grad=True),
    Case(
        "std dim correction",
        lambda x: x.std(dim=1, correction=0),
        lambda x: _std(x, 1, 0),
        (U(3, 7),),
        grad=True,
    ),
    Case("std unbiased False", lambda x: x.std(1, unbiased=False), lambda x: _std(x, 1, 0), (U(3, 7),)),
    Case(
        "var",
        lambda x: torch.var(x, 0, keepdim=True),
        lambda x: _std(x, 0, 1, True) ** 2,
        (U(3, 7),),
        grad=True,
    ),
    Case("var correction 2", lambda x: x.var(dim=1, correction=2), lambda x: _std(x, 1, 2) ** 2, (U(3, 7),)),
    Case("var_mean", lambda x: torch.var_mean(x, dim=1), lambda x: (_std(x, 1) ** 2, x.mean(1)), (U(3, 7),)),
    Case(
        "std_mean",
        lambda x: torch.std_mean(x, dim=0, correction=0),
        lambda x: (_std(x, 0, 0), x.mean(0)),
        (U(3, 7),),
    ),
    Case("max", lambda x: torch.max(x), np.max, (U(3, 7),), grad=True),
    Case("min", lambda x: x.min(), np.min, (U(3, 7),), grad=True),
    Case("max binary", lambda a, b: torch.max(a, b), np.maximum, (U(3, 7), U(7))),
    Case("min binary", lambda a, b: torch.min(a, b), np.minimum, (U(3, 7), U(7))),
    Case("amax", lambda x: torch.amax(x, dim=(0, 2)), lambda x: x.max((0, 2)), (U(3, 7, 5),), grad=True),
    Case(
        "max dim",
        lambda x: torch.max(x, 1),
        lambda x: (np.max(x, 1), np.argmax(x, 1)),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "max dim keepdim",
        lambda x: x.max(dim=0, keepdim=True),
        lambda x: (np.max(x, 0, keepdims=True), np.argmax(x, 0)[None]),
        (U(5, 3),),
        grad=True,
    ),
    Case(
        "min dim negative",
        lambda x: x.min(-1),
        lambda x: (np.min(x, -1), np.argmin(x, -1)),
        (U(2, 3, 5),),
        grad=True,
    ),
    Case("max ties", lambda x: x.max(1), lambda x: (np.max(x, 1), np.argmax(x, 1)), (TIES,)),
    Case(
        "min int ties",
        lambda x: torch.min(x, 0),
        lambda x: (np.min(x, 0), np.argmin(x, 0)),
        (I(5, 4, low=0, high=3),),
        dtype="int64",
    ),
    Case("max(1)[1]", lambda x: x.max(1)[1], lambda x: np.argmax(x, 1), (U(4, 9),), dtype="int64"),
    Case("max(1).values", lambda x: x.max(1).values, lambda x: np.max(x, 1), (U(4, 9),), grad=True),
    Case(
        "amin keepdim",
        lambda x: x.amin(1, keepdim=True),
        lambda x: x.min(1, keepdims=True),
        (U(3, 7, 5),),
        grad=True,
    ),
    Case("aminmax", lambda x: torch.aminmax(x, dim=1), lambda x: (x.min(1), x.max(1)), (U(3, 7),)),
    Case("argmax", lambda x: torch.argmax(x), np.argmax, (U(3, 7),)),
    Case(
        "argmax dim keepdim",
        lambda x: x.argmax(dim=1, keepdim=True),
        lambda x: np.argmax(x, 1)[:, None],
        (U(3, 7),),
        dtype="int64",
    ),
    Case("argmin ties", lambda x: x.argmin(1), lambda x: np.argmin(x, 1), (TIES,), dtype="int64"),
    Case("argmax ties", lambda x: torch.argmax(x, 1), lambda x: np.argmax(x, 1), (TIES,)),
    Case("all", lambda x: torch.all(x), np.all, (B(3, 7),)),
    Case("all dim", lambda x: x.all(dim=1), lambda x: x.all(1), (np.array([[1, 1, 0], [1, 1, 1]], bool),)),
    Case("any dim keepdim", lambda x: x.any(0, keepdim=True), lambda x: x.any(0, keepdims=True), (B(3, 7),)),
    Case("any float", lambda x: torch.any(x), np.any, (np.array([0.0, 0.0, 0.5], np.float32),), dtype="bool"),
    Case(
        "count_nonzero",
        lambda x: torch.count_nonzero(x, dim=1),
        lambda x: np.count_nonzero(x, 1),
        (I(3, 7, low=0, high=2),),
    ),
    Case(
        "logsumexp", lambda x: torch.logsumexp(x, dim=1), lambda x: np_logsumexp(x, 1), (U(3, 7),), grad=True
    ),
    Case(
        "logsumexp keepdim",
        lambda x: x.logsumexp(0, keepdim=True),
        lambda x: np_logsumexp(x, 0, True),
        (U(3, 7, low=50, high=90),),
        tol=1e-4,
    ),
    Case("norm", lambda x: torch.norm(x), lambda x: np.linalg.norm(x), (U(3, 7),), grad=True),
    Case("norm p dim", lambda x: x.norm(p=1, dim=1), lambda x: np.abs(x).sum(1), (U(3, 7),), grad=True),
    Case(
        "norm 3",
        lambda x: x.norm(3, dim=0, keepdim=True),
        lambda x: (np.abs(x) ** 3).sum(0, keepdims=True) ** (1 / 3),
        (U(3, 7),),
        grad=True,
        tol=1e-4,
    ),
    Case(
        "vector_norm",
        lambda x: torch.linalg.vector_norm(x, dim=-1),
        lambda x: np.linalg.norm(x, axis=-1),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "vector_norm inf",
        lambda x: torch.linalg.vector_norm(x, ord=float("inf")),
        lambda x: np.abs(x).max(),
        (U(3, 7),),
    ),
    Case(
        "vector_norm 0",
        lambda x: torch.linalg.vector_norm(x, 0, dim=1),
        lambda x: np.count_nonzero(x, 1) * 1.0,
        (np.array([[0.0, 1.0, -2.0], [0.0, 0.0, 3.0]], np.float32),),
    ),
    Case(
        "linalg.norm fro", lambda x: torch.linalg.norm(x), lambda x: np.linalg.norm(x), (U(3, 7),), grad=True
    ),
    Case(
        "linalg.norm dim",
        lambda x: torch.linalg.norm(x, dim=1),
        lambda x: np.linalg.norm(x, axis=1),
        (U(3, 7),),
    ),
    Case(
        "cumsum", lambda x: torch.cumsum(x, dim=1), lambda x: np.cumsum(x, 1), (U(3, 7),), grad=True, tol=1e-4
    ),
    Case(
        "cumsum int",
        lambda x: x.cumsum(0),
        lambda x: np.cumsum(x, 0),
        (I(5, 3, dtype="int32"),),
        dtype="int64",
    ),
    Case(
        "cumprod",
        lambda x: torch.cumprod(x, 1),
        lambda x: np.cumprod(x, 1),
        (U(3, 7, low=0.5, high=1.5),),
        grad=True,
        tol=1e-4,
    ),
    Case("cummax", lambda x: torch.cummax(x, dim=1), lambda x: _cum_extreme(x, 1, np.greater), (TIES,)),
    Case("cummin", lambda x: x.cummin(0), lambda x: _cum_extreme(x, 0, np.less), (TIES.T.copy(),)),
    Case(
        "logcumsumexp",
        lambda x: torch.logcumsumexp(x, 1),
        lambda x: np.logaddexp.accumulate(x, 1),
        (U(3, 7),),
        grad=True,
    ),
    Case("median", lambda x: torch.median(x), lambda x: np.sort(x.ravel())[(x.size - 1) // 2], (U(3, 6),)),
    Case("median dim", lambda x: x.median(dim=1), lambda x: _lower_median(x, 1), (U(3, 6),)),
    Case(
        "nanmedian",
        lambda x: torch.nanmedian(x),
        lambda x: np.float32(2.0),
        (np.array([3.0, np.nan, 1.0, 2.0, np.nan], np.float32),),
    ),
    Case("mode values", lambda x: x.mode(1)[0], lambda x: np.array([3.0, 0.0], np.float32), (TIES,)),
    Case(
        "mode indices hit",
        lambda x: x.gather(1, x.mode(1)[1][:, None]).squeeze(1),
        lambda x: np.array([3.0, 0.0], np.float32),
        (TIES,),
    ),
]

SHAPE = [
    Case("reshape", lambda x: x.reshape(7, -1), lambda x: x.reshape(7, -1), (U(3, 7, 5),), grad=True),
    Case("reshape tuple", lambda x: torch.reshape(x, (-1,)), lambda x: x.reshape(-1), (U(3, 7),)),
    Case("view", lambda x: x.view(3, 35), lambda x: x.reshape(3, 35), (U(3, 7, 5),), grad=True),
    Case("view -1", lambda x: x.view(-1, 5), lambda x: x.reshape(-1, 5), (U(3, 7, 5),)),
    Case("view_as", lambda x, y: x.view_as(y), lambda x, y: x.reshape(y.shape), (U(3, 7), U(7, 3))),
    Case("reshape_as", lambda x, y: x.reshape_as(y), lambda x, y: x.reshape(y.shape), (U(3, 7), U(21))),
    Case("permute", lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), (U(3, 7, 5),), grad=True),
    Case(
        "permute tuple", lambda x: torch.permute(x, (1, 2, 0)), lambda x: x.transpose(1, 2, 0), (U(3, 7, 5),)
    ),
    Case("transpose", lambda x: x.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2), (U(3, 7, 5),), grad=True),
    Case(
        "torch.transpose",
        lambda x: torch.transpose(x, -1, -2),
        lambda x: np.swapaxes(x, -1, -2),
        (U(3, 7, 5),),
    ),
    Case("swapaxes", lambda x: x.swapaxes(0, 1), lambda x: np.swapaxes(x, 0, 1), (U(3, 7, 5),)),
    Case("swapdims", lambda x: torch.swapdims(x, 0, 1), lambda x: np.swapaxes(x, 0, 1), (U(3, 7, 5),)),
    Case("t", lambda x: x.t(), lambda x: x.T, (U(3, 7),)),
    Case("T", lambda x: x.T, lambda x: x.T, (U(3, 7),)),
    Case("mT", lambda x: x.mT, lambda x: np.swapaxes(x, -1, -2), (U(2, 3, 7),)),
    Case(
        "movedim",
        lambda x: torch.movedim(x, 0, -1),
        lambda x: np.moveaxis(x, 0, -1),
        (U(3, 7, 5),),
        grad=True,
    ),
    Case(
        "movedim tuple",
        lambda x: x.movedim((0, 1), (2, 0)),
        lambda x: np.moveaxis(x, (0, 1), (2, 0)),
        (U(3, 7, 5),),
    ),
    Case("moveaxis", lambda x: torch.moveaxis(x, 1, 0), lambda x: np.moveaxis(x, 1, 0), (U(3, 7, 5),)),
    Case("squeeze", lambda x: x.squeeze(), np.squeeze, (U(3, 1, 5, 1),), grad=True),
    Case("squeeze dim", lambda x: torch.squeeze(x, 1), lambda x: np.squeeze(x, 1), (U(3, 1, 5, 1),)),
    Case("squeeze dims", lambda x: x.squeeze((1, 3)), lambda x: np.squeeze(x, (1, 3)), (U(3, 1, 5, 1),)),
    Case("squeeze non-1 dim", lambda x: x.squeeze(0), lambda x: x, (U(3, 1, 5),)),
    Case("unsqueeze", lambda x: torch.unsqueeze(x, -1), lambda x: x[..., None], (U(3, 7),), grad=True),
    Case("None index", lambda x: x[:, None, 1:], lambda x: x[:, None, 1:], (U(3, 7),)),
    Case("flatten", lambda x: x.flatten(1), lambda x: x.reshape(3, -1), (U(3, 7, 5),), grad=True),
    Case("flatten range", lambda x: torch.flatten(x, 0, 1), lambda x: x.reshape(21, 5), (U(3, 7, 5),)),
    Case("ravel", lambda x: x.ravel(), np.ravel, (U(3, 7),)),
    Case("unflatten", lambda x: x.unflatten(1, (5, 7)), lambda x: x.reshape(3, 5, 7), (U(3, 35),), grad=True),
    Case(
        "expand", lambda x: x.expand(4, 3, 7), lambda x: np.broadcast_to(x, (4, 3, 7)), (U(3, 1),), grad=True
    ),
    Case("expand -1", lambda x: x.expand(-1, 7), lambda x: np.broadcast_to(x, (3, 7)), (U(3, 1),)),
    Case("expand_as", lambda x, y: x.expand_as(y), lambda x, y: np.broadcast_to(x, y.shape), (U(7), U(3, 7))),
    Case(
        "broadcast_to",
        lambda x: torch.broadcast_to(x, (5, 3, 7)),
        lambda x: np.broadcast_to(x, (5, 3, 7)),
        (U(3, 7),),
    ),
    Case(
        "broadcast_tensors", lambda a, b: torch.broadcast_tensors(a, b), np.broadcast_arrays, (U(3, 1), U(5))
    ),
    Case("repeat", lambda x: x.repeat(2, 1, 3), lambda x: np.tile(x, (2, 1, 3)), (U(3, 5),), grad=True),
    Case("tile", lambda x: torch.tile(x, (2, 3)), lambda x: np.tile(x, (2, 3)), (U(3, 5),), grad=True),
    Case("tile short", lambda x: x.tile((2,)), lambda x: np.tile(x, 2), (U(3, 5),)),
    Case(
        "repeat_interleave",
        lambda x: x.repeat_interleave(3, dim=1),
        lambda x: np.repeat(x, 3, 1),
        (U(3, 5),),
        grad=True,
    ),
    Case(
        "repeat_interleave flat",
        lambda x: torch.repeat_interleave(x, 2),
        lambda x: np.repeat(x, 2),
        (U(3, 5),),
    ),
    Case(
        "repeat_interleave tensor",
        lambda x: x.repeat_interleave(torch.tensor([1, 0, 3]), dim=0),
        lambda x: np.repeat(x, [1, 0, 3], 0),
        (U(3, 5),),
    ),
    Case("roll", lambda x: torch.roll(x, 2, 1), lambda x: np.roll(x, 2, 1), (U(3, 7),), grad=True),
    Case("roll dims", lambda x: x.roll((1, -3), (0, 1)), lambda x: np.roll(x, (1, -3), (0, 1)), (U(3, 7),)),
    Case("roll flat", lambda x: x.roll(4), lambda x: np.roll(x, 4), (U(3, 7),)),
    Case("flip", lambda x: torch.flip(x, (0, 2)), lambda x: np.flip(x, (0, 2)), (U(3, 7, 5),), grad=True),
    Case("fliplr", lambda x: torch.fliplr(x), np.fliplr, (U(3, 7),)),
    Case("flipud", lambda x: x.flipud(), np.flipud, (U(3, 7),)),
    Case("rot90", lambda x: torch.rot90(x, 1, (0, 1)), lambda x: np.rot90(x, 1, (0, 1)), (U(3, 7),)),
    Case(
        "chunk", lambda x: x.chunk(3, dim=1), lambda x: tuple(np.split(x, [3, 6], 1)), (U(3, 7),), grad=True
    ),
    Case("torch.chunk", lambda x: torch.chunk(x, 2), lambda x: tuple(np.split(x, [2], 0)), (U(3, 7),)),
    Case("split int", lambda x: x.split(3, 1), lambda x: tuple(np.split(x, [3, 6], 1)), (U(3, 7),)),
    Case(
        "split sizes",
        lambda x: torch.split(x, [2, 4, 1], dim=1),
        lambda x: tuple(np.split(x, [2, 6], 1)),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "tensor_split sections",
        lambda x: x.tensor_split(3, dim=1),
        lambda x: tuple(np.array_split(x, 3, 1)),
        (U(3, 7),),
    ),
    Case(
        "tensor_split indices",
        lambda x: torch.tensor_split(x, [1, 4], dim=1),
        lambda x: tuple(np.split(x, [1, 4], 1)),
        (U(3, 7),),
    ),
    Case("unbind", lambda x: x.unbind(1), lambda x: tuple(np.moveaxis(x, 1, 0)), (U(3, 4),), grad=True),
    Case("torch.unbind", lambda x: torch.unbind(x), lambda x: tuple(x), (U(3, 4),)),
    Case("narrow", lambda x: x.narrow(1, 2, 3), lambda x: x[:, 2:5], (U(3, 7),), grad=True),
    Case("torch.narrow", lambda x: torch.narrow(x, 0, 1, 2), lambda x: x[1:3], (U(3, 7),)),
    Case("select", lambda x: x.select(1, -2), lambda x: x[:, -2], (U(3, 7),), grad=True),
    Case("torch.select", lambda x: torch.select(x, 0, 1), lambda x: x[1], (U(3, 7),)),
    Case(
        "gather",
        lambda x, i: torch.gather(x, 1, i),
        lambda x, i: np.take_along_axis(x, i, 1),
        (U(3, 7), I(3, 4, low=0, high=7)),
        grad=True,
    ),
    Case(
        "take_along_dim",
        lambda x, i: torch.take_along_dim(x, i, dim=0),
        lambda x, i: np.take_along_axis(x, i, 0),
        (U(3, 7), I(2, 7, low=0, high=3)),
        grad=True,
    ),
    Case(
        "take_along_dim flat",
        lambda x, i: x.take_along_dim(i),
        lambda x, i: x.ravel()[i],
        (U(3, 7), I(5, low=0, high=21)),
    ),
    Case(
        "take", lambda x, i: torch.take(x, i), lambda x, i: x.ravel()[i], (U(3, 7), I(2, 3, low=0, high=21))
    ),
    Case(
        "index_select",
        lambda x, i: torch.index_select(x, 1, i),
        lambda x, i: x[:, i],
        (U(3, 7), I(5, low=0, high=7)),
        grad=True,
    ),
    Case(
        "index_select dim 0",
        lambda x, i: x.index_select(0, i),
        lambda x, i: x[i],
        (U(3, 7), I(4, low=0, high=3)),
    ),
    Case(
        "scatter",
        lambda x, s: x.scatter(1, torch.tensor(_unique_index(5), device=x.device), s),
        lambda x, s: _scatter(x, _unique_index(5), s, add=False),
        (U(3, 5), U(3, 5)),
    ),
    Case(
        "scatter value",
        lambda x: torch.scatter(x, 1, torch.tensor(_unique_index(5)[:, :2], device=x.device), 9.0),
        lambda x: _scatter(x, _unique_index(5)[:, :2], np.full((3, 2), 9.0, np.float32), add=False),
        (U(3, 5),),
    ),
    Case(
        "scatter_add",
        lambda x, i, s: x.scatter_add(1, i, s),
        lambda x, i, s: _scatter(x, i, s, add=True),
        (U(3, 5), I(3, 4, low=0, high=5), U(3, 4)),
        grad=True,
    ),
    Case(
        "torch.scatter_add",
        lambda x, i, s: torch.scatter_add(x, 1, i, s),
        lambda x, i, s: _scatter(x, i, s, add=True),
        (U(3, 5), I(3, 6, low=0, high=5), U(3, 6)),
    ),
    Case(
        "index_add",
        lambda x, i, s: x.index_add(0, i, s, alpha=2),
        lambda x, i, s: x + 2 * np.stack([s[i == r].sum(0) for r in range(3)]),
        (U(3, 5), I(4, low=0, high=3), U(4, 5)),
        grad=True,
    ),
    Case(
        "masked_select",
        lambda x, m: torch.masked_select(x, m),
        lambda x, m: x[np.broadcast_to(m, x.shape)],
        (U(3, 7), B(7)),
    ),
    Case("bool index", lambda x: x[x > 0], lambda x: x[x > 0], (U(3, 7),)),
    Case("nonzero", lambda x: torch.nonzero(x), np.argwhere, (I(3, 7, low=0, high=2),), dtype="int64"),
    Case("nonzero as_tuple", lambda x: x.nonzero(as_tuple=True), np.nonzero, (I(3, 7, low=0, high=2),)),
    Case("argwhere", lambda x: torch.argwhere(x), np.argwhere, (B(3, 7),)),
    Case(
        "cat",
        lambda a, b: torch.cat([a, b], dim=1),
        lambda a, b: np.concatenate([a, b], 1),
        (U(3, 7), U(3, 2)),
        grad=True,
    ),
    Case(
        "cat int float",
        lambda a, b: torch.cat((a, b)),
        lambda a, b: np.concatenate([a, b]),
        (I(3, 2), U(2, 2)),
        dtype="float32",
    ),
    Case(
        "concatenate",
        lambda a, b: torch.concatenate([a, b], -1),
        lambda a, b: np.concatenate([a, b], -1),
        (U(3, 7), U(3, 2)),
    ),
    Case(
        "stack",
        lambda a, b: torch.stack([a, b], dim=1),
        lambda a, b: np.stack([a, b], 1),
        (U(3, 7), U(3, 7)),
        grad=True,
    ),
    Case("hstack", lambda a, b: torch.hstack([a, b]), lambda a, b: np.hstack([a, b]), (U(3, 7), U(3, 2))),
    Case("hstack 1d", lambda a, b: torch.hstack((a, b)), lambda a, b: np.hstack([a, b]), (U(3), U(4))),
    Case("vstack", lambda a, b: torch.vstack([a, b]), lambda a, b: np.vstack([a, b]), (U(3, 7), U(7))),
    Case("row_stack", lambda a, b: torch.row_stack([a, b]), lambda a, b: np.vstack([a, b]), (U(7), U(7))),
    Case("dstack", lambda a, b: torch.dstack([a, b]), lambda a, b: np.dstack([a, b]), (U(3, 7), U(3, 7))),
    Case(
        "column_stack",
        lambda a, b: torch.column_stack([a, b]),
        lambda a, b: np.column_stack([a, b]),
        (U(5), U(5, 2)),
    ),
    Case(
        "meshgrid ij",
        lambda a, b: torch.meshgrid(a, b, indexing="ij"),
        lambda a, b: tuple(np.meshgrid(a, b, indexing="ij")),
        (U(3), U(5)),
    ),
    Case(
        "meshgrid xy",
        lambda a, b: torch.meshgrid([a, b], indexing="xy"),
        lambda a, b: tuple(np.meshgrid(a, b, indexing="xy")),
        (U(3), U(5)),
    ),
    Case("tril", lambda x: torch.tril(x), np.tril, (U(4, 6),), grad=True),
    Case("tril -1", lambda x: x.tril(-1), lambda x: np.tril(x, -1), (U(2, 4, 6),)),
    Case("triu 1", lambda x: torch.triu(x, diagonal=1), lambda x: np.triu(x, 1), (U(4, 6),), grad=True),
    Case("diag vector", lambda x: torch.diag(x), np.diag, (U(5),), grad=True),
    Case("diag vector offset", lambda x: x.diag(-2), lambda x: np.diag(x, -2), (U(3),)),
    Case("diag matrix", lambda x: torch.diag(x, 1), lambda x: np.diag(x, 1), (U(4, 6),)),
    Case("diagonal", lambda x: x.diagonal(), np.diagonal, (U(4, 6),), grad=True),
    Case(
        "diagonal dims",
        lambda x: torch.diagonal(x, offset=1, dim1=1, dim2=2),
        lambda x: np.diagonal(x, 1, 1, 2),
        (U(2, 4, 6),),
    ),
    Case(
        "diag_embed", lambda x: torch.diag_embed(x), lambda x: np.stack([np.diag(r) for r in x]), (U(3, 4),)
    ),
    Case("trace", lambda x: torch.trace(x), np.trace, (U(4, 6),), grad=True),
    Case("outer", lambda a, b: torch.outer(a, b), np.outer, (U(3), U(5)), grad=True),
    Case("ger", lambda a, b: a.ger(b), np.outer, (U(3), U(5))),
    Case("kron", lambda a, b: torch.kron(a, b), np.kron, (U(2, 3), U(3, 2)), grad=True),
    Case(
        "cross",
        lambda a, b: torch.cross(a, b, dim=1),
        lambda a, b: np.cross(a, b, axis=1),
        (U(4, 3), U(4, 3)),
        grad=True,
    ),
    Case("linalg.cross", lambda a, b: torch.linalg.cross(a, b), np.cross, (U(4, 3), U(4, 3))),
    Case("clone", lambda x: x.clone(), lambda x: x, (U(3, 7),), grad=True),
    Case("contiguous", lambda x: x.T.contiguous(), lambda x: x.T, (U(3, 7),)),
    Case("getitem mixed", lambda x: x[1:, ::2, -1], lambda x: x[1:, ::2, -1], (U(3, 7, 5),), grad=True),
    Case("getitem int tensor", lambda x, i: x[i], lambda x, i: x[i], (U(5, 3), I(4, low=0, high=5))),
    Case("getitem ellipsis", lambda x: x[..., 1], lambda x: x[..., 1], (U(3, 7, 5),)),
]

MATMUL = [
    Case("matmul", lambda a, b: torch.matmul(a, b), np.matmul, (U(3, 5), U(5, 7)), grad=True, tol=1e-4),
    Case(
        "matmul batched broadcast",
        lambda a, b: a @ b,
        np.matmul,
        (U(2, 1, 3, 5), U(4, 5, 7)),
        grad=True,
        tol=1e-4,
    ),
    Case("matmul vector", lambda a, b: a @ b, np.matmul, (U(3, 5), U(5)), grad=True, tol=1e-4),
    Case("matmul vector left", lambda a, b: a.matmul(b), np.matmul, (U(5), U(2, 5, 3)), tol=1e-4),
    Case("matmul int", lambda a, b: a @ b, np.matmul, (I(3, 5), I(5, 2)), dtype="int64"),
    Case("mm", lambda a, b: torch.mm(a, b), np.matmul, (U(3, 5), U(5, 7)), grad=True, tol=1e-4),
    Case("mv", lambda a, b: torch.mv(a, b), np.matmul, (U(3, 5), U(5)), tol=1e-4),
    Case("bmm", lambda a, b: torch.bmm(a, b), np.matmul, (U(2, 3, 5), U(2, 5, 7)), grad=True, tol=1e-4),
    Case(
        "baddbmm",
        lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2),
        lambda c, a, b: 0.5 * c + 2 * a @ b,
        (U(2, 3, 7), U(2, 3, 5), U(2, 5, 7)),
        grad=True,
        tol=1e-4,
    ),
    Case(
        "addmm",
        lambda c, a, b: torch.addmm(c, a, b),
        lambda c, a, b: c + a @ b,
        (U(7), U(3, 5), U(5, 7)),
        grad=True,
        tol=1e-4,
    ),
    Case(
        "addmm beta alpha",
        lambda c, a, b: c.addmm(a, b, beta=2, alpha=-1),
        lambda c, a, b: 2 * c - a @ b,
        (U(3, 7), U(3, 5), U(5, 7)),
        tol=1e-4,
    ),
    Case(
        "addmv",
        lambda c, a, b: torch.addmv(c, a, b),
        lambda c, a, b: c + a @ b,
        (U(3), U(3, 5), U(5)),
        tol=1e-4,
    ),
    Case(
        "einsum",
        lambda a, b: torch.einsum("bij,bjk->bik", a, b),
        lambda a, b: np.einsum("bij,bjk->bik", a, b),
        (U(2, 3, 5), U(2, 5, 4)),
        grad=True,
        tol=1e-4,
    ),
    Case("einsum list", lambda a, b: torch.einsum("i,j->ij", [a, b]), np.outer, (U(3), U(5))),
    Case("einsum trace", lambda a: torch.einsum("ii", a), np.trace, (U(4, 4),)),
    Case("dot", lambda a, b: torch.dot(a, b), np.dot, (U(7), U(7)), grad=True, tol=1e-4),
    Case("inner", lambda a, b: torch.inner(a, b), np.inner, (U(3, 5), U(4, 5)), tol=1e-4),
    Case("vdot", lambda a, b: torch.vdot(a, b), np.vdot, (U(7), U(7)), tol=1e-4),
    Case(
        "tensordot",
        lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])),
        lambda a, b: np.tensordot(a, b, ([1, 2], [0, 1])),
        (U(3, 4, 5), U(4, 5, 2)),
        tol=1e-4,
    ),
    Case(
        "tensordot int",
        lambda a, b: torch.tensordot(a, b, 1),
        lambda a, b: np.tensordot(a, b, 1),
        (U(3, 4), U(4, 5)),
        tol=1e-4,
    ),
    Case(
        "linalg.matrix_norm",
        lambda a: torch.linalg.matrix_norm(a),
        lambda a: np.linalg.norm(a, axis=(-2, -1)),
        (U(2, 3, 5),),
    ),
    Case(
        "cdist",
        lambda a, b: torch.cdist(a, b),
        lambda a, b: np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)),
        (U(3, 4), U(5, 4)),
        grad=True,
        tol=1e-4,
    ),
]


def _rand_props(t: Any) -> tuple[Any, ...]:
    """What a random tensor can be checked by: shape, dtype name, and whether values lie in [0, 1)."""
    return t.shape, t.dtype.name, bool(((t >= 0) & (t < 1)).all().item())


CREATION = [
    Case("zeros_like", lambda x: torch.zeros_like(x), np.zeros_like, (U(3, 7),), dtype="float32"),
    Case("zeros_like int", lambda x: torch.zeros_like(x), np.zeros_like, (I(3, 7),), dtype="int64"),
    Case(
        "ones_like dtype",
        lambda x: torch.ones_like(x, dtype=torch.int32),
        lambda x: np.ones(x.shape, np.int32),
        (U(3, 7),),
        dtype="int32",
    ),
    Case("full_like", lambda x: torch.full_like(x, 2.5), lambda x: np.full_like(x, 2.5), (U(3, 7),)),
    Case(
        "full_like int",
        lambda x: torch.full_like(x, 7),
        lambda x: np.full_like(x, 7),
        (I(3, 7),),
        dtype="int64",
    ),
    Case("empty_like", lambda x: torch.empty_like(x).shape, lambda x: x.shape, (U(3, 7),)),
    Case(
        "rand_like",
        lambda x: _rand_props(torch.rand_like(x)),
        lambda x: ((3, 7), "float32", True),
        (U(3, 7),),
    ),
    Case("randn_like", lambda x: torch.randn_like(x).shape, lambda x: x.shape, (U(3, 7),)),
    Case("rand", lambda: _rand_props(torch.rand(3, 5)), lambda: ((3, 5), "float32", True), ()),
    Case(
        "rand tuple",
        lambda: _rand_props(torch.rand((2, 3), dtype=torch.float64)),
        lambda: ((2, 3), "float64", True),
        (),
    ),
    Case("randn", lambda: torch.randn(4, 3).shape, lambda: (4, 3), ()),
    Case("randint", lambda: _rand_props(torch.randint(0, 1, (3, 4))), lambda: ((3, 4), "int64", True), ()),
    Case("randint high", lambda: torch.randint(3, (5,)).lt(3).all(), lambda: True, ()),
    Case("randperm", lambda: torch.randperm(7).sort()[0], lambda: np.arange(7), ()),
    Case(
        "empty",
        lambda: (torch.empty(2, 3).shape, torch.empty((4,), dtype=torch.int32).dtype.name),
        lambda: ((2, 3), "int32"),
        (),
    ),
    Case("zeros", lambda: torch.zeros(2, 3), lambda: np.zeros((2, 3), np.float32), (), dtype="float32"),
    Case(
        "zeros tuple dtype",
        lambda: torch.zeros((2, 3), dtype=torch.long),
        lambda: np.zeros((2, 3), np.int64),
        (),
        dtype="int64",
    ),
    Case("ones", lambda: torch.ones(3), lambda: np.ones(3, np.float32), ()),
    Case("full", lambda: torch.full((2, 3), 1.5), lambda: np.full((2, 3), 1.5), (), dtype="float32"),
    Case("full int", lambda: torch.full((2,), 4), lambda: np.full(2, 4), (), dtype="int64"),
    Case("full bool", lambda: torch.full((2,), True), lambda: np.full(2, True), (), dtype="bool"),
    Case("arange int", lambda: torch.arange(5), lambda: np.arange(5), (), dtype="int64"),
    Case("arange start step", lambda: torch.arange(1, 10, 3), lambda: np.arange(1, 10, 3), (), dtype="int64"),
    Case("arange float", lambda: torch.arange(0, 1, 0.3), lambda: np.arange(0, 1, 0.3), (), dtype="float32"),
    Case("arange negative step", lambda: torch.arange(5, -3, -2), lambda: np.arange(5, -3, -2), ()),
    Case(
        "arange dtype",
        lambda: torch.arange(4, dtype=torch.float32),
        lambda: np.arange(4.0),
        (),
        dtype="float32",
    ),
    Case("linspace", lambda: torch.linspace(-1, 2, 7), lambda: np.linspace(-1, 2, 7), (), dtype="float32"),
    Case("linspace one", lambda: torch.linspace(3, 5, steps=1), lambda: np.array([3.0]), ()),
    Case("logspace", lambda: torch.logspace(0, 2, 5), lambda: np.logspace(0, 2, 5), (), tol=1e-4),
    Case("logspace base", lambda: torch.logspace(0, 3, 4, base=2), lambda: np.logspace(0, 3, 4, base=2), ()),
    Case("eye", lambda: torch.eye(3), lambda: np.eye(3), (), dtype="float32"),
    Case("eye rect", lambda: torch.eye(2, 4), lambda: np.eye(2, 4), ()),
    Case("tensor int list", lambda: torch.tensor([1, 2, 3]), lambda: np.array([1, 2, 3]), (), dtype="int64"),
    Case(
        "tensor float list",
        lambda: torch.tensor([[1.0, 2], [3, 4]]),
        lambda: np.array([[1.0, 2], [3, 4]]),
        (),
        dtype="float32",
    ),
    Case(
        "tensor bool list",
        lambda: torch.tensor([True, False]),
        lambda: np.array([True, False]),
        (),
        dtype="bool",
    ),
    Case("tensor scalar", lambda: torch.tensor(3.5), lambda: np.array(3.5), (), dtype="float32"),
    Case(
        "tensor dtype",
        lambda: torch.tensor([1, 2], dtype=torch.float16),
        lambda: np.array([1.0, 2.0]),
        (),
        dtype="float16",
    ),
    Case("tensor of tensors", lambda x: torch.tensor(x.tolist()), lambda x: x, (U(3, 2),)),
    Case("as_tensor", lambda x: torch.as_tensor(x.numpy()), lambda x: x, (U(3, 2),), dtype="float32"),
    Case("from_numpy", lambda x: torch.from_numpy(x.numpy()), lambda x: x, (I(3, 2),), dtype="int64"),
    Case(
        "new_zeros",
        lambda x: x.new_zeros(2, 3),
        lambda x: np.zeros((2, 3), np.int64),
        (
            I(
                3,
            ),
        ),
        dtype="int64",
    ),
    Case(
        "new_ones",
        lambda x: x.new_ones((2,)),
        lambda x: np.ones(2),
        (
            U(
                3,
            ),
        ),
        dtype="float32",
    ),
    Case(
        "new_full",
        lambda x: x.new_full((2,), 5),
        lambda x: np.full(2, 5.0),
        (
            U(
                3,
            ),
        ),
        dtype="float32",
    ),
    Case(
        "new_tensor",
        lambda x: x.new_tensor([1, 2]),
        lambda x: np.array([1.0, 2.0]),
        (
            U(
                3,
            ),
        ),
        dtype="float32",
    ),
    Case(
        "tril_indices",
        lambda: torch.tril_indices(3, 4),
        lambda: np.stack(np.tril_indices(3, 0, 4)),
        (),
        dtype="int64",
    ),
    Case("triu_indices", lambda: torch.triu_indices(3, 3, 1), lambda: np.stack(np.triu_indices(3, 1, 3)), ()),
]

DTYPE = [
    Case("int + float", lambda a, b: a + b, lambda a, b: a + b, (I(3, 7), U(7)), dtype="float32"),
    Case("int + python float", lambda a: a + 1.5, lambda a: a + 1.5, (I(3, 7),), dtype="float32"),
    Case("int * python int", lambda a: a * 3, lambda a: a * 3, (I(3, 7, dtype="int32"),), dtype="int32"),
    Case(
        "int / int", lambda a, b: a / b, lambda a, b: a / b, (I(3, 7), I(7, low=1, high=5)), dtype="float32"
    ),
    Case(
        "torch.div int",
        lambda a, b: torch.div(a, b),
        lambda a, b: a / b,
        (I(3, 7), I(7, low=1, high=5)),
        dtype="float32",
    ),
    Case("int32 + int64", lambda a, b: a + b, lambda a, b: a + b, (I(3, dtype="int32"), I(3)), dtype="int64"),
    Case(
        "uint8 + int8",
        lambda a, b: a + b,
        lambda a, b: a.astype(np.int16) + b,
        (I(3, low=0, high=9, dtype="uint8"), I(3, dtype="int8")),
        dtype="int16",
    ),
    Case(
        "half + float", lambda a, b: a.half() + b, lambda a, b: a + b, (U(3), U(3)), dtype="float32", tol=1e-3
    ),
    Case("bool + int", lambda a, b: a + b, lambda a, b: a + b, (B(3), I(3)), dtype="int64"),
    Case("bool * float scalar", lambda a: a * 0.5, lambda a: a * 0.5, (B(3),), dtype="float32"),
    Case(
        "float64 + float32",
        lambda a, b: a.double() + b,
        lambda a, b: a.astype(np.float64) + b,
        (U(3), U(3)),
        dtype="float64",
    ),
    Case(
        "float32 tensor + float64 scalar tensor",
        lambda a: a + torch.tensor(2.0, dtype=torch.float64, device=a.device),
        lambda a: a + 2.0,
        (U(3),),
        dtype="float32",
    ),
    Case("comparison dtype", lambda a: a > 0, lambda a: a > 0, (U(3, 7),), dtype="bool"),
    Case(
        ".long()",
        lambda x: x.long(),
        lambda x: np.trunc(x).astype(np.int64),
        (U(3, 7, low=-9, high=9),),
        dtype="int64",
    ),
    Case(
        ".int()",
        lambda x: x.int(),
        lambda x: np.trunc(x).astype(np.int32),
        (U(3, 7, low=-9, high=9),),
        dtype="int32",
    ),
    Case(".float()", lambda x: x.float(), lambda x: x.astype(np.float32), (I(3, 7),), dtype="float32"),
    Case(".double()", lambda x: x.double(), lambda x: x.astype(np.float64), (U(3, 7),), dtype="float64"),
    Case(
        ".half()", lambda x: x.half(), lambda x: x.astype(np.float16), (U(3, 7),), dtype="float16", tol=1e-3
    ),
    Case(".bfloat16()", lambda x: x.bfloat16().float(), lambda x: x, (U(3, 7),), dtype="float32", tol=1e-2),
    Case(".bool()", lambda x: x.bool(), lambda x: x != 0, (I(3, 7, low=-1, high=2),), dtype="bool"),
    Case(".short()", lambda x: x.short(), lambda x: x.astype(np.int16), (I(3, 7),), dtype="int16"),
    Case(
        ".byte()", lambda x: x.byte(), lambda x: x.astype(np.uint8), (I(3, 7, low=0, high=9),), dtype="uint8"
    ),
    Case(".char()", lambda x: x.char(), lambda x: x.astype(np.int8), (I(3, 7),), dtype="int8"),
    Case(
        "to(dtype)",
        lambda x: x.to(torch.float16),
        lambda x: x.astype(np.float16),
        (U(3, 7),),
        dtype="float16",
        tol=1e-3,
    ),
    Case(
        "to(int)",
        lambda x: x.to(torch.int64),
        lambda x: np.trunc(x).astype(np.int64),
        (U(3, 7, low=-9, high=9),),
        dtype="int64",
    ),
    Case(
        "to(device, dtype)",
        lambda x: x.to("cpu", torch.float64),
        lambda x: x.astype(np.float64),
        (
            U(
                3,
            ),
        ),
        dtype="float64",
    ),
    Case(
        "to(dtype=)",
        lambda x: x.to(dtype=torch.int32),
        lambda x: x.astype(np.int32),
        (
            I(
                3,
            ),
        ),
        dtype="int32",
    ),
    Case(
        "to(other)",
        lambda x, y: x.to(y),
        lambda x, y: x.astype(np.float32),
        (
            I(
                3,
            ),
            U(2),
        ),
        dtype="float32",
    ),
    Case(
        "type(dtype)",
        lambda x: x.type(torch.int16),
        lambda x: x.astype(np.int16),
        (
            I(
                3,
            ),
        ),
        dtype="int16",
    ),
    Case(
        "type_as",
        lambda x, y: x.type_as(y),
        lambda x, y: x.astype(np.float32),
        (
            I(
                3,
            ),
            U(2),
        ),
        dtype="float32",
    ),
    Case(
        "dtype attributes",
        lambda x: (
            x.dtype == torch.float32,
            x.is_floating_point(),
            x.long().dtype == torch.long,
            torch.is_floating_point(x),
        ),
        lambda x: (True, True, True, True),
        (
            U(
                3,
            ),
        ),
    ),
    Case(
        "is_complex",
        lambda x: (x.is_complex(), torch.is_complex(x)),
        lambda x: (False, False),
        (
            U(
                3,
            ),
        ),
    ),
    Case("bool sum dtype", lambda x: x.sum(1), lambda x: x.sum(1), (B(3, 7),), dtype="int64"),
    Case("argmax dtype", lambda x: x.argmax(), np.argmax, (U(3, 7),), dtype="int64"),
    Case(
        "mean float64",
        lambda x: x.double().mean(0),
        lambda x: x.astype(np.float64).mean(0),
        (U(3, 7),),
        dtype="float64",
    ),
    Case(
        "result_type",
        lambda a, b: (torch.result_type(a, b), torch.promote_types(torch.int32, torch.float16)),
        lambda a, b: (torch.float32, torch.float16),
        (
            I(
                3,
            ),
            U(3),
        ),
    ),
    Case(
        "can_cast",
        lambda: (torch.can_cast(torch.int32, torch.float32), torch.can_cast(torch.float32, torch.int32)),
        lambda: (True, False),
        (),
    ),
    Case(
        "finfo iinfo",
        lambda: (torch.finfo(torch.float32).eps, torch.iinfo(torch.int8).max),
        lambda: (float(np.finfo(np.float32).eps), 127),
        (),
    ),
    Case(
        "item",
        lambda x: (x.sum().item(), x[0, 0].item()),
        lambda x: (float(x.sum()), float(x[0, 0])),
        (I(3, 7),),
    ),
    Case("tolist", lambda x: x.tolist(), lambda x: x.tolist(), (I(3, 7),)),
    Case(
        "numel size",
        lambda x: (x.numel(), x.size(), x.size(1), x.dim(), x.ndimension(), x.nelement()),
        lambda x: (21, (3, 7), 7, 2, 2, 21),
        (U(3, 7),),
    ),
    Case(
        "element_size",
        lambda x: (x.element_size(), x.half().element_size()),
        lambda x: (4, 2),
        (
            U(
                3,
            ),
        ),
    ),
]

SORT = [
    Case(
        "sort",
        lambda x: torch.sort(x, dim=1),
        lambda x: (np.sort(x, 1), np.argsort(x, 1, kind="stable")),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "sort descending",
        lambda x: x.sort(0, descending=True),
        lambda x: (-np.sort(-x, 0), np.argsort(-x, 0, kind="stable")),
        (U(5, 3),),
    ),
    Case(
        "sort stable ties",
        lambda x: x.sort(stable=True),
        lambda x: (np.sort(x, -1), np.argsort(x, -1, kind="stable")),
        (TIES,),
    ),
    Case("sort int", lambda x: x.sort()[0], lambda x: np.sort(x, -1), (I(3, 7),), dtype="int64"),
    Case("msort", lambda x: torch.msort(x), lambda x: np.sort(x, 0), (U(5, 3),)),
    Case("argsort", lambda x: torch.argsort(x, dim=1), lambda x: np.argsort(x, 1), (U(3, 7),), dtype="int64"),
    Case(
        "argsort descending", lambda x: x.argsort(descending=True), lambda x: np.argsort(-x, -1), (U(3, 7),)
    ),
    Case(
        "topk",
        lambda x: torch.topk(x, 3),
        lambda x: (-np.sort(-x, -1)[:, :3], np.argsort(-x, -1)[:, :3]),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "topk smallest dim",
        lambda x: x.topk(2, dim=0, largest=False),
        lambda x: (np.sort(x, 0)[:2], np.argsort(x, 0)[:2]),
        (U(5, 3),),
    ),
    Case(
        "topk values attr",
        lambda x: (x.topk(2).values, x.topk(2).indices),
        lambda x: (-np.sort(-x, -1)[:, :2], np.argsort(-x, -1)[:, :2]),
        (U(3, 7),),
    ),
    Case(
        "topk unsorted set",
        lambda x: x.topk(3, sorted=False)[0].sort(descending=True)[0],
        lambda x: -np.sort(-x, -1)[:, :3],
        (U(3, 7),),
    ),
    Case(
        "kthvalue",
        lambda x: torch.kthvalue(x, 3, dim=1),
        lambda x: (np.sort(x, 1)[:, 2], np.argsort(x, 1)[:, 2]),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "kthvalue keepdim",
        lambda x: x.kthvalue(2, 0, keepdim=True),
        lambda x: (np.sort(x, 0)[1:2], np.argsort(x, 0)[1:2]),
        (U(5, 3),),
    ),
    Case("unique", lambda x: torch.unique(x), np.unique, (I(3, 7, low=0, high=6),), dtype="int64"),
    Case(
        "unique inverse counts",
        lambda x: x.unique(return_inverse=True, return_counts=True),
        _unique,
        (I(3, 7, low=0, high=6),),
    ),
    Case("unique float", lambda x: x.unique(), np.unique, (TIES,)),
    Case(
        "unique_consecutive",
        lambda x: torch.unique_consecutive(x),
        lambda x: x[np.r_[True, x[1:] != x[:-1]]],
        (np.array([1, 1, 2, 2, 3, 1, 1, 2]),),
    ),
    Case(
        "searchsorted",
        lambda s, v: torch.searchsorted(s, v),
        lambda s, v: np.searchsorted(s, v),
        (SORTED, U(4, 5, low=-2, high=5)),
        dtype="int64",
    ),
    Case(
        "searchsorted right",
        lambda s, v: torch.searchsorted(s, v, right=True),
        lambda s, v: np.searchsorted(s, v, side="right"),
        (SORTED, SORTED),
    ),
    Case(
        "bucketize",
        lambda v, b: torch.bucketize(v, b),
        lambda v, b: np.searchsorted(b, v),
        (U(4, 5, low=-2, high=5), SORTED),
    ),
    Case("bincount", lambda x: torch.bincount(x), np.bincount, (I(9, low=0, high=5),)),
    Case(
        "bincount minlength",
        lambda x: x.bincount(minlength=8),
        lambda x: np.bincount(x, minlength=8),
        (I(9, low=0, high=5),),
    ),
    Case(
        "histc",
        lambda x: torch.histc(x, bins=4, min=-2, max=2),
        lambda x: np.histogram(x, 4, (-2, 2))[0] * 1.0,
        (U(30),),
    ),
]


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    x = x.astype(np.float64)
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805

ACTIVATION = [
    Case("softmax", lambda x: torch.softmax(x, dim=1), lambda x: np_softmax(x, 1), (U(3, 7),), grad=True),
    Case("F.softmax", lambda x: F.softmax(x, dim=0), lambda x: np_softmax(x, 0), (U(3, 7),), grad=True),
    Case("softmax method", lambda x: x.softmax(-1), lambda x: np_softmax(x, -1), (U(3, 7),)),
    Case(
        "log_softmax",
        lambda x: torch.log_softmax(x, 1),
        lambda x: np.log(np_softmax(x, 1)),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "F.log_softmax", lambda x: F.log_softmax(x, dim=-1), lambda x: np.log(np_softmax(x, -1)), (U(3, 7),)
    ),
    Case("F.relu", lambda x: F.relu(x), lambda x: np.maximum(x, 0), (U(3, 7),), grad=True),
    Case("relu method", lambda x: x.relu(), lambda x: np.maximum(x, 0), (U(3, 7),)),
    Case("torch.relu", lambda x: torch.relu(x), lambda x: np.maximum(x, 0), (U(3, 7),)),
    Case(
        "F.leaky_relu",
        lambda x: F.leaky_relu(x, negative_slope=0.2),
        lambda x: np.where(x > 0, x, 0.2 * x),
        (U(3, 7),),
        grad=True,
    ),
    Case("F.elu", lambda x: F.elu(x, alpha=0.7), lambda x: _elu(x, 0.7), (U(3, 7),), grad=True),
    Case("selu", lambda x: torch.selu(x), lambda x: SELU_SCALE * _elu(x, SELU_ALPHA), (U(3, 7),), grad=True),
    Case(
        "celu",
        lambda x: torch.celu(x, alpha=0.5),
        lambda x: np.where(x > 0, x, 0.5 * np.expm1(x / 0.5)),
        (U(3, 7),),
        grad=True,
    ),
    Case("F.gelu", lambda x: F.gelu(x), np_gelu, (U(3, 7),), grad=True),
    Case("F.gelu tanh", lambda x: F.gelu(x, approximate="tanh"), np_gelu_tanh, (U(3, 7),), grad=True),
    Case("F.silu", lambda x: F.silu(x), lambda x: x * np_sigmoid(x), (U(3, 7),), grad=True),
    Case("mish", lambda x: x.mish(), lambda x: x * np.tanh(_softplus(x)), (U(3, 7),), grad=True),
    Case("F.softplus", lambda x: F.softplus(x), _softplus, (U(3, 7),), grad=True),
    Case(
        "F.softplus beta threshold",
        lambda x: F.softplus(x, beta=2, threshold=3),
        lambda x: _softplus(x, 2, 3),
        (U(3, 7, low=-3, high=3),),
        grad=True,
    ),
    Case("hardtanh", lambda x: x.hardtanh(-0.5, 1.0), lambda x: np.clip(x, -0.5, 1.0), (U(3, 7),), grad=True),
    Case(
        "hardsigmoid",
        lambda x: x.hardsigmoid(),
        lambda x: np.clip(x / 6 + 0.5, 0, 1),
        (U(3, 7, low=-5, high=5),),
        grad=True,
    ),
    Case(
        "hardswish",
        lambda x: x.hardswish(),
        lambda x: x * np.clip(x + 3, 0, 6) / 6,
        (U(3, 7, low=-5, high=5),),
        grad=True,
    ),
    Case("F.relu6", lambda x: F.relu6(x), lambda x: np.clip(x, 0, 6), (U(3, 7, low=-3, high=9),), grad=True),
    Case(
        "F.hardtanh",
        lambda x: F.hardtanh(x, min_val=-0.5, max_val=1.5),
        lambda x: np.clip(x, -0.5, 1.5),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "F.hardsigmoid",
        lambda x: F.hardsigmoid(x),
        lambda x: np.clip(x / 6 + 0.5, 0, 1),
        (U(3, 7, low=-5, high=5),),
        grad=True,
    ),
    Case(
        "F.hardswish",
        lambda x: F.hardswish(x),
        lambda x: x * np.clip(x + 3, 0, 6) / 6,
        (U(3, 7, low=-5, high=5),),
        grad=True,
    ),
    Case("F.selu", lambda x: F.selu(x), lambda x: SELU_SCALE * _elu(x, SELU_ALPHA), (U(3, 7),), grad=True),
    Case(
        "F.celu",
        lambda x: F.celu(x, alpha=1.5),
        lambda x: np.where(x > 0, x, 1.5 * np.expm1(x / 1.5)),
        (U(3, 7),),
        grad=True,
    ),
    Case("F.mish", lambda x: F.mish(x), lambda x: x * np.tanh(_softplus(x)), (U(3, 7),), grad=True),
    Case(
        "F.logsigmoid",
        lambda x: F.logsigmoid(x),
        lambda x: -np.logaddexp(0, -x.astype(np.float64)),
        (U(3, 7, low=-30, high=30),),
        grad=True,
    ),
    Case("F.softsign", lambda x: F.softsign(x), lambda x: x / (1 + np.abs(x)), (U(3, 7),), grad=True),
    Case("F.tanhshrink", lambda x: F.tanhshrink(x), lambda x: x - np.tanh(x), (U(3, 7),), grad=True),
    Case(
        "F.glu",
        lambda x: F.glu(x),
        lambda x: x[..., :3] * np_sigmoid(x[..., 3:]),
        (U(2, 5, 6),),
        grad=True,
    ),
    Case(
        "F.glu dim 0",
        lambda x: F.glu(x, dim=0),
        lambda x: x[:2] * np_sigmoid(x[2:]),
        (U(4, 7),),
        grad=True,
    ),
    Case(
        "F.cosine_similarity",
        lambda a, b: F.cosine_similarity(a, b),
        lambda a, b: (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)),
        (U(3, 7, 2), U(3, 7, 2)),
        grad=True,
    ),
    Case(
        "F.cosine_similarity broadcast dim -1",
        lambda a, b: F.cosine_similarity(a, b, dim=-1),
        lambda a, b: (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)),
        (U(4, 5), U(5)),
        grad=True,
    ),
    Case(
        "F.pairwise_distance",
        lambda a, b: F.pairwise_distance(a, b),
        lambda a, b: np.linalg.norm(a - b + 1e-6, axis=-1),
        (U(5, 7), U(5, 7)),
        grad=True,
    ),
    Case(
        "F.pairwise_distance p=1 keepdim",
        lambda a, b: F.pairwise_distance(a, b, p=1.0, keepdim=True),
        lambda a, b: np.abs(a - b + 1e-6).sum(-1, keepdims=True),
        (U(5, 7), U(7)),
        grad=True,
    ),
    Case("F.sigmoid", lambda x: F.sigmoid(x), np_sigmoid, (U(3, 7),)),
    Case("F.tanh", lambda x: F.tanh(x), np.tanh, (U(3, 7),)),
    Case(
        "F.normalize",
        lambda x: F.normalize(x, dim=1),
        lambda x: x / np.linalg.norm(x, axis=1, keepdims=True),
        (U(3, 7),),
        grad=True,
    ),
    Case(
        "F.normalize p=1 dim 0",
        lambda x: F.normalize(x, p=1, dim=0),
        lambda x: x / np.abs(x).sum(0, keepdims=True),
        (U(3, 7),),
    ),
    Case(
        "F.one_hot",
        lambda t: F.one_hot(t, num_classes=6),
        lambda t: _one_hot(t, 6),
        (I(3, 4, low=0, high=6),),
        dtype="int64",
    ),
    Case(
        "F.one_hot inferred",
        lambda t: F.one_hot(t),
        lambda t: _one_hot(t, int(t.max()) + 1),
        (I(7, low=0, high=4),),
    ),
]

LOSS = [
    Case(
        "F.cross_entropy",
        lambda x, t: F.cross_entropy(x, t),
        lambda x, t: _cross_entropy(x, t),
        (U(5, 4), I(5, low=0, high=4)),
        grad=True,
    ),
    Case(
        "F.cross_entropy label_smoothing",
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2),
        lambda x, t: _cross_entropy(x, t, smoothing=0.2),
        (U(5, 4), I(5, low=0, high=4)),
        grad=True,
    ),
    Case(
        "F.cross_entropy weight",
        lambda x, t, w: F.cross_entropy(x, t, weight=w),
        lambda x, t, w: _cross_entropy(x, t, w),
        (U(5, 4), I(5, low=0, high=4), U(4, low=0.5, high=2)),
        grad=True,
    ),
    Case(
        "F.cross_entropy sum",
        lambda x, t: F.cross_entropy(x, t, reduction="sum"),
        lambda x, t: _cross_entropy(x, t, reduction="sum"),
        (U(5, 4), I(5, low=0, high=4)),
        tol=1e-4,
    ),
    Case(
        "F.cross_entropy none",
        lambda x, t: F.cross_entropy(x, t, reduction="none"),
        lambda x, t: _cross_entropy(x, t, reduction="none"),
        (U(5, 4), I(5, low=0, high=4)),
    ),
    Case(
        "F.cross_entropy probabilities",
        lambda x, p: F.cross_entropy(x, p.softmax(1)),
        lambda x, p: -(np_softmax(p, 1) * np.log(np_softmax(x, 1))).sum(1).mean(),
        (U(5, 4), U(5, 4)),
    ),
    Case(
        "F.cross_entropy ignore_index",
        lambda x, t: F.cross_entropy(x, t, ignore_index=0),
        lambda x, t: _cross_entropy(x[t != 0], t[t != 0]),
        (U(5, 4), np.array([1, 0, 3, 2, 0])),
        grad=True,
    ),
    Case(
        "F.nll_loss",
        lambda x, t: F.nll_loss(x.log_softmax(1), t),
        lambda x, t: _cross_entropy(x, t),
        (U(5, 4), I(5, low=0, high=4)),
        grad=True,
    ),
    Case(
        "F.mse_loss",
        lambda a, b: F.mse_loss(a, b),
        lambda a, b: ((a - b) ** 2).mean(),
        (U(3, 7), U(3, 7)),
        grad=True,
    ),
    Case(
        "F.mse_loss sum",
        lambda a, b: F.mse_loss(a, b, reduction="sum"),
        lambda a, b: ((a - b) ** 2).sum(),
        (U(3, 7), U(3, 7)),
        tol=1e-4,
    ),
    Case(
        "F.l1_loss",
        lambda a, b: F.l1_loss(a, b),
        lambda a, b: np.abs(a - b).mean(),
        (U(3, 7), U(3, 7)),
        grad=True,
    ),
    Case(
        "F.smooth_l1_loss beta",
        lambda a, b: F.smooth_l1_loss(a, b, beta=0.5),
        lambda a, b: np.where(np.abs(a - b) < 0.5, 0.5 * (a - b) ** 2 / 0.5, np.abs(a - b) - 0.25).mean(),
        (U(3, 7), U(3, 7)),
        grad=True,
    ),
    Case(
        "F.huber_loss",
        lambda a, b: F.huber_loss(a, b, delta=0.7),
        lambda a, b: np.where(np.abs(a - b) < 0.7, 0.5 * (a - b) ** 2, 0.7 * (np.abs(a - b) - 0.35)).mean(),
        (U(3, 7), U(3, 7)),
        grad=True,
    ),
    Case(
        "F.binary_cross_entropy",
        lambda p, y: F.binary_cross_entropy(p, y),
        lambda p, y: -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean(),
        (U(3, 7, low=0.05, high=0.95), U(3, 7, low=0, high=1)),
        grad=True,
    ),
    Case(
        "F.binary_cross_entropy_with_logits pos_weight",
        lambda z, y, w: F.binary_cross_entropy_with_logits(z, y, pos_weight=w),
        _bce_logits,
        (U(3, 7), U(3, 7, low=0, high=1), U(7, low=0.5, high=2)),
        grad=True,
    ),
    Case(
        "F.kl_div",
        lambda x, t: _kl_div_mean(x, t),
        lambda x, t: (t * (np.log(t) - x)).mean(),
        (U(4, 5), U(4, 5, low=0.05, high=1)),
        grad=True,
    ),
    Case(
        "F.kl_div batchmean",
        lambda x, t: F.kl_div(x.log_softmax(1), t.softmax(1), reduction="batchmean"),
        lambda x, t: (np_softmax(t, 1) * (np.log(np_softmax(t, 1)) - np.log(np_softmax(x, 1)))).sum() / 4,
        (U(4, 5), U(4, 5)),
        grad=True,
    ),
    Case(
        "F.kl_div log_target sum",
        lambda x, t: F.kl_div(x, t, reduction="sum", log_target=True),
        lambda x, t: (np.exp(t) * (t - x)).sum(),
        (U(4, 5), U(4, 5)),
        grad=True,
        tol=1e-4,
    ),
    Case(
        "F.cosine_embedding_loss",
        lambda a, b, y: F.cosine_embedding_loss(a, b, y, margin=0.2),
        lambda a, b, y: _cosine_embedding(a, b, y, 0.2),
        (U(5, 6), U(5, 6), SIGNS),
        grad=True,
    ),
    Case(
        "F.margin_ranking_loss",
        lambda a, b, y: F.margin_ranking_loss(a, b, y, margin=0.3),
        lambda a, b, y: np.maximum(-y * (a - b) + 0.3, 0).mean(),
        (U(7), U(7), np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0], np.float32)),
        grad=True,
    ),
    Case(
        "F.triplet_margin_loss",
        lambda a, p, n: F.triplet_margin_loss(a, p, n),
        _triplet,
        (U(5, 6), U(5, 6), U(5, 6)),
        grad=True,
    ),
    Case(
        "F.triplet_margin_loss swap",
        lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True),
        lambda a, p, n: _triplet(a, p, n, swap=True),
        (U(5, 6), U(5, 6), U(5, 6)),
        grad=True,
    ),
    Case(
        "F.hinge_embedding_loss",
        lambda x, y: F.hinge_embedding_loss(x, y, margin=1.5),
        lambda x, y: np.where(y == 1, x, np.maximum(1.5 - x, 0)).mean(),
        (U(5, low=0, high=3), SIGNS),
        grad=True,
    ),
    Case(
        "F.soft_margin_loss",
        lambda x, y: F.soft_margin_loss(x, y),
        lambda x, y: np.log1p(np.exp(-y * x.astype(np.float64))).mean(),
        (U(3, 5), np.where(np.arange(15).reshape(3, 5) % 3 == 0, 1.0, -1.0).astype(np.float32)),
        grad=True,
    ),
    Case(
        "F.multilabel_soft_margin_loss",
        lambda x, y, w: F.multilabel_soft_margin_loss(x, y, weight=w),
        lambda x, y, w: (-(y * _log_sigmoid(x) + (1 - y) * _log_sigmoid(-x)) * w).mean(-1).mean(),
        (U(4, 5), U(4, 5, low=0, high=1), U(5, low=0.5, high=2)),
        grad=True,
    ),
    Case(
        "F.poisson_nll_loss",
        lambda x, t: F.poisson_nll_loss(x, t),
        lambda x, t: (np.exp(x) - t * x).mean(),
        (U(4, 5), U(4, 5, low=0, high=4)),
        grad=True,
    ),
    Case(
        "F.poisson_nll_loss full rate",
        lambda x, t: F.poisson_nll_loss(x, t, log_input=False, full=True),
        _poisson_full,
        (U(4, 5, low=0.1, high=3), U(4, 5, low=0, high=4)),
        grad=True,
    ),
    Case(
        "F.gaussian_nll_loss",
        lambda x, t, v: F.gaussian_nll_loss(x, t, v),
        lambda x, t, v: (0.5 * (np.log(v) + (x - t) ** 2 / v)).mean(),
        (U(4, 5), U(4, 5), U(4, 5, low=0.2, high=2)),
        grad=True,
    ),
    Case(
        "F.gaussian_nll_loss per-sample var full sum",
        lambda x, t, v: F.gaussian_nll_loss(x, t, v, full=True, reduction="sum"),
        lambda x, t, v: (0.5 * (np.log(v[:, None]) + (x - t) ** 2 / v[:, None] + np.log(2 * np.pi))).sum(),
        (U(4, 5), U(4, 5), U(4, low=0.2, high=2)),
        grad=True,
        tol=1e-4,
    ),
]

CASES = ELEMENTWISE + COMPARISON + REDUCTION + SHAPE + MATMUL + CREATION + DTYPE + SORT + ACTIVATION + LOSS
GRAD_CASES = [c for c in CASES if c.grad]


def _names_unique() -> None:
    seen: set[str] = set()
    for case in CASES:
        assert case.name not in seen, f"two cases named {case.name!r}"
        seen.add(case.name)


_names_unique()


def _inputs(case: Case, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [spec.make(rng) if isinstance(spec, In) else np.array(spec) for spec in case.inputs]


def _compare(got: Any, want: Any, tol: float, dtype: str | None, where: str = "result") -> None:
    if isinstance(want, (tuple, list)) and not (isinstance(got, torch.Tensor) and isinstance(want, list)):
        assert isinstance(got, (tuple, list)), f"{where}: expected a sequence of {len(want)}, got {type(got)}"
        assert len(got) == len(want), f"{where}: {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(g, w, tol, dtype if i == 0 else None, f"{where}[{i}]")
        return
    if not isinstance(got, torch.Tensor):
        if isinstance(want, np.ndarray) or isinstance(got, float):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=where)
        else:
            assert got == want, f"{where}: {got!r} != {want!r}"
        return
    want = np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    if dtype is not None:
        assert got.dtype.name == dtype, f"{where}: dtype {got.dtype.name}, expected {dtype}"
    kinds = {"b": "bool", "i": "int", "u": "int", "f": "float"}
    assert kinds[got.dtype.np_value.kind] == kinds[want.dtype.kind], (
        f"{where}: dtype {got.dtype.name} vs {want.dtype}"
    )
    values = got.numpy()
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(values, want, err_msg=where)
    else:
        np.testing.assert_allclose(
            values.astype(np.float64),
            want.astype(np.float64),
            rtol=tol,
            atol=tol,
            equal_nan=True,
            err_msg=where,
        )


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_matches_numpy(case: Case, device: str) -> None:
    arrays = _inputs(case, seed=len(case.name))
    tensors = [torch.tensor(a, device=device) for a in arrays]
    with np.errstate(all="ignore"):
        want = case.ref(*arrays)
    _compare(case.call(*tensors), want, case.tol, case.dtype)


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.name for c in GRAD_CASES])
def test_op_gradient_matches_finite_differences(case: Case) -> None:
    """<dL/dx, v> against (L(x + eps v) - L(x - eps v)) / 2 eps, with L = sum(cotangent * out) in float64."""
    arrays = _inputs(case, seed=len(case.name))
    floats = [a.dtype.kind == "f" for a in arrays]
    xs = [a.astype(np.float64) if f else a for a, f in zip(arrays, floats)]
    rng = np.random.default_rng(1)
    directions = [rng.standard_normal(x.shape) if f else None for x, f in zip(xs, floats)]

    def loss(values: list[np.ndarray], grad: bool = False) -> tuple[Any, list[Any]]:
        tensors = [torch.tensor(v, requires_grad=grad and f) for v, f in zip(values, floats)]
        out = _first(case.call(*tensors))
        cot = np.random.default_rng(2).standard_normal(out.shape)
        return (out * torch.tensor(cot)).sum(), tensors

    total, tensors = loss(xs, grad=True)
    total.backward()
    got = sum(float((t.grad.numpy() * d).sum()) for t, d in zip(tensors, directions) if d is not None)
    eps = 1e-6
    plus = [x + eps * d if d is not None else x for x, d in zip(xs, directions)]
    minus = [x - eps * d if d is not None else x for x, d in zip(xs, directions)]
    want = (loss(plus)[0].item() - loss(minus)[0].item()) / (2 * eps)
    assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5), f"directional derivative {got} vs {want}"
