"""Tensor indexing (`x[...]`), in three steps:

1. `normalize`: the index as a tuple with the ellipsis expanded, one entry per dim or new axis;
2. `basic`: ints, slices and None as views: one shrink, flips for negative steps, strides by pad +
   reshape + shrink, and the record of which output dims are dropped, kept, new or indexed;
3. `advanced`: integer tensors (lists, arrays) as one-hot masks summed in one reduce, with torch's
   placement of the indexed dims (in place when adjacent, else first).

`setitem_value` is the way back for `x[index] = value`: value placed at the positions `basic` selects
(pads, strides and flips undone), or under one bool mask, chosen over x by a mask; Tensor.__setitem__
assigns the result into x's memory.

Functions take the tensor being indexed and build new tensors with its type, so this module sits
below tensor.py and imports it only for type checking.

    >>> from tg import Tensor
    >>> x = Tensor([[0, 1, 2], [3, 4, 5]])
    >>> getitem(x, (..., [2, 0])).tolist()
    [[2, 0], [5, 3]]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tg.core.dtype import dtypes
from tg.core.lazy import LazyBuffer
from tg.core.realize import from_numpy
from tg.core.shape import broadcast_shape

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


class TgIndexError(IndexError, ValueError):
    pass


_ARANGE: dict[tuple[int, str], LazyBuffer] = {}


def arange(n: int, device: str) -> LazyBuffer:
    """0..n-1 as int32 on device, realized once and cached: the other side of one-hot selections
    (32-bit compares keep the kernel on SIMD lanes)."""
    key = (n, device)
    if key not in _ARANGE:
        if len(_ARANGE) > 64:
            _ARANGE.clear()
        _ARANGE[key] = from_numpy(np.arange(n, dtype=np.int32), dtypes.int32, device)
    return _ARANGE[key]


def as_index(t: Tensor) -> Tensor:
    """Index values as int32 (stored once, so kernels reading them stay 32-bit)."""
    return t if t.dtype == dtypes.int32 else t.cast(dtypes.int32).contiguous()


def check_bounds(index: Tensor, n: int) -> None:
    """Bounds are checked at the call when the index values are already known (host data)."""
    if index.lazydata.base.realized is None or index.numel() == 0:
        return
    values = index.numpy()
    if values.min() < -n or values.max() >= n:
        bad = values[(values < -n) | (values >= n)][0]
        raise TgIndexError(f"[core] index {bad} is out of range for a dim of size {n}")


def normalize(index: Any, ndim: int) -> tuple:
    """The index as a tuple naming every dim: the ellipsis (at most one) expanded, trailing dims
    filled with full slices."""
    idx = index if isinstance(index, tuple) else (index,)
    n_ellipsis = sum(1 for i in idx if i is Ellipsis)
    if n_ellipsis > 1:
        raise TgIndexError("[core] an index can only have one ellipsis")
    consumes = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if consumes > ndim:
        raise TgIndexError(f"[core] too many indices ({consumes}) for a tensor of {ndim} dims")
    if n_ellipsis:
        pos = next(i for i, v in enumerate(idx) if v is Ellipsis)
        return idx[:pos] + (slice(None),) * (ndim - consumes) + idx[pos + 1:]
    return idx + (slice(None),) * (ndim - consumes)


@dataclass
class Plan:
    """What `basic` made of an index: per input dim a shrink, a flip and a step; the integer tensors
    by input dim; per output entry None (new axis), "drop" (an int), ("keep", dim) or ("adv", dim)."""
    shrink: list[tuple[int, int]] = field(default_factory=list)
    flips: list[bool] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    adv: list[tuple[int, Tensor]] = field(default_factory=list)
    out: list[Any] = field(default_factory=list)

    def add(self, shrink: tuple[int, int], out: Any, flip: bool = False, step: int = 1) -> None:
        self.shrink.append(shrink)
        self.flips.append(flip)
        self.steps.append(step)
        self.out.append(out)


# Complexity: one branch per kind of index item (None, Ellipsis, int, slice, tensor, bool mask) in one walk,
# as numpy documents them.
def _plan(x: Tensor, idx: tuple) -> Plan:  # noqa: C901
    plan, dim = Plan(), 0
    for i in idx:
        if i is None:
            plan.out.append(None)
            continue
        size = x.shape[dim]
        if isinstance(i, (bool, np.bool_)):
            raise TypeError("[core] bool scalars are not valid indices")
        if isinstance(i, (int, np.integer)):
            if not -size <= i < size:
                raise TgIndexError(f"[core] index {i} is out of range for dim {dim} of size {size}")
            j = int(i) % size
            plan.add((j, j + 1), "drop")
        elif isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step == 0:
                raise ValueError("[core] slice step cannot be zero")
            if step > 0:
                length = max(0, math.ceil((stop - start) / step))
                plan.add(
                    (start, start + (length - 1) * step + 1) if length else (0, 0), ("keep", dim), False, step
                )
            else:
                length = max(0, math.ceil((start - stop) / -step))
                lo = start - (length - 1) * (-step) if length else 0
                plan.add((lo, start + 1) if length else (0, 0), ("keep", dim), True, -step)
        elif isinstance(i, (type(x), list, np.ndarray)):
            t = i if isinstance(i, type(x)) else type(x)(np.asarray(i), device=x.device)
            if t.dtype == dtypes.bool:
                raise TypeError(
                    "[core] boolean mask indexing is not supported (its shape depends on the data); "
                    "use where() instead"
                )
            if not t.dtype.is_int:
                raise TypeError(f"[core] tensors used as indices must be integer, got {t.dtype.name}")
            plan.add((0, size), ("adv", dim))
            plan.adv.append((dim, t))
        else:
            raise TypeError(f"[core] unsupported index type {type(i).__name__}")
        dim += 1
    return plan


def _strided(y: Tensor, steps: list[int]) -> Tensor:
    """Every s-th element along each dim with step s: pad to a multiple, split, keep the first."""
    for d, s in enumerate(steps):
        if s == 1 or y.shape[d] == 0:
            continue
        n = y.shape[d]
        m = math.ceil(n / s)
        arg = [(0, 0)] * y.ndim
        arg[d] = (0, m * s - n)
        y = y.pad(tuple(arg))
        y = y.reshape(y.shape[:d] + (m, s) + y.shape[d + 1:])
        y = y._shrink(tuple((0, k) if j != d + 1 else (0, 1) for j, k in enumerate(y.shape)))
        y = y.reshape(y.shape[:d + 1] + y.shape[d + 2:])
    return y


def basic(x: Tensor, idx: tuple) -> tuple[Tensor, Plan]:
    """The view of x that ints, slices and None select (integer tensors keep their whole dim)."""
    plan = _plan(x, idx)
    y = x._shrink(tuple(plan.shrink))
    if any(plan.flips):
        y = y.flip(tuple(i for i, f in enumerate(plan.flips) if f))
    if any(s != 1 for s in plan.steps):
        y = _strided(y, plan.steps)
    return y, plan


def advanced(x: Tensor, y: Tensor, plan: Plan) -> Tensor:
    """y (x after `basic`) indexed by the plan's integer tensors: a one-hot mask per indexed dim,
    broadcast together, selects in one reduce; the result has torch's shape."""
    adv = plan.adv
    dims_adv = [d for d, _ in adv]
    for d, t in adv:
        check_bounds(t, x.shape[d])
    bshape = adv[0][1].shape
    for _, t in adv[1:]:
        bshape = broadcast_shape(bshape, t.shape)
    rest = [d for d in range(y.ndim) if d not in dims_adv]
    rest_shape = tuple(y.shape[d] for d in rest)
    adv_sizes = tuple(y.shape[d] for d in dims_adv)
    k = len(bshape)
    yp = y.permute(rest + dims_adv).reshape(rest_shape + (1,) * k + adv_sizes)
    yp = yp.expand(rest_shape + bshape + adv_sizes)
    mask = None
    for j, (d, t) in enumerate(adv):
        n = y.shape[d]
        t = as_index(t)
        t = (t < 0).where(t + n, t)._broadcast_to(bshape)
        one = tuple(n if jj == j else 1 for jj in range(len(adv)))
        oh = t.reshape(bshape + (1,) * len(adv)) == type(x)(arange(n, x.device), device=x.device).reshape(
            (1,) * k + one)
        oh = oh._broadcast_to(bshape + one)
        mask = oh if mask is None else mask & oh
    assert mask is not None
    first_adv_axis = len(rest_shape) + k
    picked = (
        mask.where(yp, 0)
        .sum(
            tuple(range(first_adv_axis, first_adv_axis + len(adv))),
            dtype=y.dtype if y.dtype.is_float else None,
        )
        .cast(y.dtype)
    )  # (*rest, *bshape)
    # torch: adjacent advanced dims stay in place, otherwise they go first
    # adjacent in the index itself: a None or a slice between them separates them (ints are
    # applied first, as torch selects, so they do not)
    entries = [nd for nd in plan.out if nd != "drop"]
    where_adv = [i for i, nd in enumerate(entries) if nd is not None and nd[0] == "adv"]
    adjacent = where_adv == list(range(where_adv[0], where_adv[0] + len(where_adv)))
    nb = len([d for d in rest if d < dims_adv[0]]) if adjacent else 0
    order = list(range(nb)) + list(range(len(rest), len(rest) + k)) + list(range(nb, len(rest)))
    y = picked.permute(order)
    # the output shape honours dropped dims (ints) and new axes (None)
    rest_sizes = dict(zip(rest, [y.shape[i] for i in list(range(nb)) + list(range(nb + k, y.ndim))]))
    final: list[int] = [] if adjacent else list(bshape)
    placed = False
    for nd in plan.out:
        if nd is None:
            final.append(1)
        elif nd == "drop":
            continue
        elif nd[0] == "adv":
            if adjacent and not placed:
                final.extend(bshape)
                placed = True
        else:
            final.append(rest_sizes[nd[1]])
    return y.reshape(tuple(final))


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index] (see Tensor.__getitem__)."""
    y, plan = basic(x, normalize(index, x.ndim))
    if plan.adv:
        return advanced(x, y, plan)
    final = [1 if nd is None else y.shape[nd[1]] for nd in plan.out if nd != "drop"]
    return y.reshape(tuple(final))


def _scatter_basic(v: Tensor, plan: Plan, shape: tuple[int, ...]) -> Tensor:
    """The inverse of `basic`: v (shaped as the view the plan selects, one entry per input dim) placed
    back at its positions in a tensor of `shape` by strides (pad + reshape), flips and pads; the
    padding is zeros."""
    for d, s in enumerate(plan.steps):
        n = v.shape[d]
        if s == 1 or n == 0:
            continue
        lo, hi = plan.shrink[d]
        v = v.unsqueeze(d + 1).pad(tuple((0, s - 1) if j == d + 1 else (0, 0) for j in range(v.ndim + 1)))
        v = v.reshape(v.shape[:d] + (n * s,) + v.shape[d + 2:])
        v = v._shrink(tuple((0, hi - lo) if j == d else (0, k) for j, k in enumerate(v.shape)))
    if any(plan.flips):
        v = v.flip(tuple(i for i, f in enumerate(plan.flips) if f))
    return v.pad(tuple((lo, size - hi) for (lo, hi), size in zip(plan.shrink, shape)))


def setitem_value(x: Tensor, index: Any, value: Any) -> Tensor:
    """What x holds after `x[index] = value` (see Tensor.__setitem__), as a new tensor: a mask of the
    written positions selects value placed there, else x."""
    idx = index if isinstance(index, tuple) else (index,)
    masks = [i for i in idx if isinstance(i, (type(x), np.ndarray, list)) and
             (i.dtype == dtypes.bool if isinstance(i, type(x)) else np.asarray(i).dtype == np.bool_)]
    if masks:
        mask = masks[0] if isinstance(masks[0], type(x)) else type(x)(np.asarray(masks[0]), device=x.device)
        if len(idx) != 1 or mask.shape != x.shape[:mask.ndim]:
            raise TgIndexError(f"[core] setitem: a bool mask must be the only index and match the leading "
                               f"dims of the tensor: mask {mask.shape}, tensor {x.shape}")
        v = value if isinstance(value, type(x)) else type(x)(value, device=x.device, dtype=x.dtype)
        if v.numel() != 1:
            raise ValueError(f"[core] setitem: x[mask] = value needs a scalar or a one-element value, got "
                             f"shape {v.shape} (its target's shape depends on the data); use where() instead")
        m = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
        return m.where(v.reshape(()).cast(x.dtype), x)
    norm = normalize(index, x.ndim)
    view, plan = basic(x, norm)
    if plan.adv:
        raise TypeError("[core] setitem: integer-tensor (advanced) indices are not supported; use ints, "
                        "slices, None, ... or one bool mask")
    v = value if isinstance(value, type(x)) else type(x)(value, device=x.device, dtype=x.dtype)
    target = tuple(1 if nd is None else view.shape[nd[1]] for nd in plan.out if nd != "drop")
    error = f"[core] setitem: value of shape {v.shape} cannot fill x[index] of shape {target}"
    try:
        v = v.cast(x.dtype)._broadcast_to(broadcast_shape(v.shape, target))
    except ValueError:
        raise ValueError(error) from None
    if v.shape != target:
        raise ValueError(error)
    v = v.reshape(view.shape)   # new axes dropped, int-indexed dims back as size 1
    ones = type(x).ones(*view.shape, dtype=dtypes.bool, device=x.device)
    return _scatter_basic(ones, plan, x.shape).where(_scatter_basic(v, plan, x.shape), x)
