"""Argument checks the functional ops (and nn's layers) share: each raises at the call, naming the op,
what it expected and what it got."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tg.core.dtype import DType, dtypes
from tg.core.realize import known_values
from tg.core.shape import broadcast_shape
from tg.core.tensor import Tensor

REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"[nn] {op}: expected reduction 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _check_float(op: str, x: Tensor, what: str = "input") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"[nn] {op}: expected {what} to be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise TypeError(f"[nn] {op}: expected a floating-point {what}, got {x.dtype.name}; "
                        f"fix: cast it with .float()")


def _check_same_shape(op: str, x: Tensor, target: Tensor) -> None:
    if not isinstance(target, Tensor):
        raise TypeError(f"[nn] {op}: expected target to be a Tensor, got {type(target).__name__}")
    if target.shape != x.shape:
        raise ValueError(f"[nn] {op}: expected target of the input's shape {x.shape}, got {target.shape}; "
                         f"fix: reshape the target (broadcasting a target is almost always a bug)")


def _check_broadcasts_to(op: str, name: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is None:
        return
    try:
        ok = broadcast_shape(t.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"[nn] {op}: expected {name} to broadcast to the input shape {shape}, got {t.shape}")


def _as_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, (int, np.integer)):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


def _check_trailing(op: str, x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes normalized over: the last len(shape) dims, which must equal shape."""
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape):] != shape:
        raise ValueError(f"[nn] {op}: expected input whose last dims are {shape} (normalized_shape), "
                         f"got shape {x.shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


def _check_param(op: str, name: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is not None and t.shape != shape:
        raise ValueError(f"[nn] {op}: expected {name} of shape {shape}, got {t.shape}")


def _check_p(op: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"[nn] {op}: expected a probability p in [0, 1], got {p}")


def finfo_eps(dtype: DType) -> float:
    """Machine epsilon of a float dtype (torch.finfo(dtype).eps), the default eps of rms_norm.

        >>> finfo_eps(dtypes.float32) == 2.0 ** -23
        True
    """
    return 2.0 ** -7 if dtype == dtypes.bfloat16 else float(np.finfo(dtype.np).eps)




_SPATIAL_NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


def _ntuple(op: str, name: str, value: int | Sequence[int], n: int) -> tuple[int, ...]:
    """An int for every one of n spatial dims: one int for all, or n of them."""
    values = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    if len(values) != n or not all(isinstance(v, (int, np.integer)) for v in values):
        what = {1: "a 1-tuple of ints", 2: "a pair of ints"}.get(n, f"{n} ints")
        raise ValueError(f"[nn] {op}: expected {name} to be an int or {what}, got {value!r}")
    return tuple(int(v) for v in values)


def _one(op: str, name: str, value: int | Sequence[int]) -> int:
    return _ntuple(op, name, value, 1)[0]


def _pair(op: str, name: str, value: int | Sequence[int]) -> tuple[int, int]:
    first, second = _ntuple(op, name, value, 2)
    return first, second


def _triple(op: str, name: str, value: int | Sequence[int]) -> tuple[int, int, int]:
    first, second, third = _ntuple(op, name, value, 3)
    return first, second, third


def _check_spatial(op: str, x: Tensor, nsp: int) -> None:
    """x is (N, C, *spatial) or (C, *spatial) with nsp spatial dims."""
    if not isinstance(x, Tensor):
        raise TypeError(f"[nn] {op}: expected input to be a Tensor, got {type(x).__name__}")
    if x.ndim not in (nsp + 1, nsp + 2):
        dims = ", ".join(_SPATIAL_NAMES[nsp])
        raise ValueError(f"[nn] {op}: expected input of shape (N, C, {dims}) or (C, {dims}), got {x.shape}")


def _check_image(op: str, x: Tensor) -> None:
    _check_spatial(op, x, 2)


def _check_signal(op: str, x: Tensor) -> None:
    _check_spatial(op, x, 1)



def _check_known_range(op: str, target: Tensor, n: int, ignore_index: int | None) -> None:
    """Index values already on the host (a realized tensor) are checked now; lazy ones cannot be."""
    values = known_values(target.lazydata) if target.numel() else None
    if values is None:
        return
    bad = (values < 0) | (values >= n)
    if ignore_index is not None:
        bad &= values != ignore_index
    if bad.any():
        also = "" if ignore_index is None else f" or ignore_index={ignore_index}"
        raise IndexError(f"[nn] {op}: expected indices in [0, {n}){also}, got {values[bad].flat[0]}")
