"""Tensor indexing (`x[...]`), in three steps:

1. `normalize`: the index as a tuple with the ellipsis expanded, one entry per dim or new axis (bool
   masks first become the integer tensors of their True positions, read back from the device as their
   count depends on the data: torch's mask.nonzero());
2. `basic`: ints, slices and None as views: one shrink, flips for negative steps, strides by pad +
   reshape + shrink, and the record of which output dims are dropped, kept, new or indexed;
3. `advanced`: integer tensors (lists, arrays) as one-hot masks summed in one reduce, with torch's
   placement of the indexed dims (in place when adjacent, else first).

`setitem_value` is the way back for `x[index] = value`: value placed at the positions `basic` selects
(pads, strides and flips undone) and, for integer tensors, picked per position from the one-hot mask
(the last write of a duplicate index wins; `index_put(accumulate=True)` and `index_add` sum them), then
chosen over x by a mask of the written positions; a bool mask with a one-element value stays a lazy
where(). Tensor.__setitem__ assigns the result into x's memory; `index_put`, `index_fill`, `index_copy`
and `index_add` return new tensors for torch's methods of those names (and their in-place `_` forms).

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
from tg.core.realize import from_numpy, known_values
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
    values = known_values(index.lazydata) if index.numel() else None
    if values is None:
        return
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
        if m * s != n:
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
        y = y.flip(tuple(i for i, f in enumerate(plan.flips) if f))   # numpy's x[::-1] is a view too
    if any(s != 1 for s in plan.steps):
        y = _strided(y, plan.steps)
    return y, plan


def _one_hot(x: Tensor, y: Tensor, plan: Plan) -> tuple[Tensor, tuple[int, ...]]:
    """(mask, bshape) for the plan's integer tensors, broadcast together to bshape: mask[*b, *a] is True
    where the index tensors at b point at a; shape (*bshape, *sizes of the indexed dims)."""
    adv = plan.adv
    for d, t in adv:
        check_bounds(t, x.shape[d])
    bshape = adv[0][1].shape
    for _, t in adv[1:]:
        bshape = broadcast_shape(bshape, t.shape)
    k = len(bshape)
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
    return mask, bshape


@dataclass
class Layout:
    """Where `advanced` puts things: y's dims split into `rest` (not indexed) and the indexed dims;
    the selection made as (*rest, *bshape), then permuted by `order` (to `permuted`) and reshaped to
    torch's `final` shape."""
    rest: list[int]
    dims_adv: list[int]
    rest_shape: tuple[int, ...]
    adv_sizes: tuple[int, ...]
    order: list[int]
    permuted: tuple[int, ...]
    final: tuple[int, ...]


def _layout(y: Tensor, plan: Plan, bshape: tuple[int, ...]) -> Layout:
    dims_adv = [d for d, _ in plan.adv]
    rest = [d for d in range(y.ndim) if d not in dims_adv]
    rest_shape = tuple(y.shape[d] for d in rest)
    k = len(bshape)
    # torch: adjacent advanced dims stay in place, otherwise they go first
    # adjacent in the index itself: a None or a slice between them separates them (ints are
    # applied first, as torch selects, so they do not)
    entries = [nd for nd in plan.out if nd != "drop"]
    where_adv = [i for i, nd in enumerate(entries) if nd is not None and nd[0] == "adv"]
    adjacent = where_adv == list(range(where_adv[0], where_adv[0] + len(where_adv)))
    nb = len([d for d in rest if d < dims_adv[0]]) if adjacent else 0
    order = list(range(nb)) + list(range(len(rest), len(rest) + k)) + list(range(nb, len(rest)))
    # the output shape honours dropped dims (ints) and new axes (None)
    rest_sizes = dict(zip(rest, rest_shape))
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
    return Layout(rest, dims_adv, rest_shape, tuple(y.shape[d] for d in dims_adv), order,
                  rest_shape[:nb] + tuple(bshape) + rest_shape[nb:], tuple(final))


def advanced(x: Tensor, y: Tensor, plan: Plan) -> Tensor:
    """y (x after `basic`) indexed by the plan's integer tensors: a one-hot mask per indexed dim,
    broadcast together, selects in one reduce; the result has torch's shape."""
    mask, bshape = _one_hot(x, y, plan)
    lay = _layout(y, plan, bshape)
    k = len(bshape)
    yp = y.permute(lay.rest + lay.dims_adv).reshape(lay.rest_shape + (1,) * k + lay.adv_sizes)
    yp = yp.expand(lay.rest_shape + bshape + lay.adv_sizes)
    first_adv_axis = len(lay.rest_shape) + k
    picked = (
        mask.where(yp, 0)
        .sum(
            tuple(range(first_adv_axis, first_adv_axis + len(lay.adv_sizes))),
            dtype=y.dtype if y.dtype.is_float else None,
        )
        .cast(y.dtype)
    )  # (*rest, *bshape)
    return picked.permute(lay.order).reshape(lay.final)


def _is_mask(x: Tensor, i: Any) -> bool:
    if isinstance(i, type(x)):
        return i.dtype == dtypes.bool
    return isinstance(i, (np.ndarray, list)) and np.asarray(i).dtype == np.bool_


def _expand_masks(x: Tensor, idx: tuple) -> tuple:
    """Bool masks (tensors, arrays, lists) replaced by the integer tensors of their True positions, one
    per dim the mask covers (torch's mask.nonzero()). How many there are depends on the data, so the mask
    is read back to the host here."""
    masks = {p: i if isinstance(i, type(x)) else type(x)(np.asarray(i), device=x.device)
             for p, i in enumerate(idx) if _is_mask(x, i)}
    if not masks:
        return idx
    width = [masks[p].ndim if p in masks else 0 if i is None or i is Ellipsis else 1
             for p, i in enumerate(idx)]
    if sum(width) > x.ndim:
        raise TgIndexError(f"[core] too many indices ({sum(width)} dims with the masks) for a tensor of "
                           f"{x.ndim} dims")
    out: list[Any] = []
    dim = 0
    for p, i in enumerate(idx):
        if p in masks:
            mask = masks[p]
            covered = x.shape[dim:dim + mask.ndim]
            if mask.ndim == 0 or mask.shape != covered:
                raise TgIndexError(f"[core] a bool mask of shape {mask.shape} must match the dims it "
                                   f"indexes, {covered} (tensor of shape {x.shape}, mask at dim {dim})")
            out.extend(type(x)(ix.astype(np.int32), device=x.device) for ix in np.nonzero(mask.numpy()))
        else:
            out.append(i)
        dim += x.ndim - sum(width) if i is Ellipsis else width[p]
    return tuple(out)


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index] (see Tensor.__getitem__)."""
    idx = index if isinstance(index, tuple) else (index,)
    y, plan = basic(x, normalize(_expand_masks(x, idx), x.ndim))
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


def _fit_value(x: Tensor, value: Any, target: tuple[int, ...], who: str, hint: str = "") -> Tensor:
    """value as x's dtype, broadcast to the target shape (leading size-1 dims dropped first, as torch's
    setitem does)."""
    v = value if isinstance(value, type(x)) else type(x)(value, device=x.device, dtype=x.dtype)
    while v.ndim > len(target) and v.shape[0] == 1:
        v = v.reshape(v.shape[1:])
    error = f"[core] {who}: value of shape {v.shape} cannot fill x[index] of shape {target}{hint}"
    try:
        v = v.cast(x.dtype)._broadcast_to(broadcast_shape(v.shape, target))
    except ValueError:
        raise ValueError(error) from None
    if v.shape != target:
        raise ValueError(error)
    return v


def _put_advanced(x: Tensor, y: Tensor, plan: Plan, value: Any, accumulate: bool, who: str,
                  hint: str) -> Tensor:
    """x with value written at y's positions the plan's integer tensors select (`advanced` in reverse):
    the one-hot mask picks, for each position, the value written there, in one reduce over the index
    entries. Without accumulate the last write of a duplicate index wins, with it all writes add up."""
    mask, bshape = _one_hot(x, y, plan)
    lay = _layout(y, plan, bshape)
    inverse = np.argsort(lay.order).tolist()
    v = _fit_value(x, value, lay.final, who, hint).reshape(lay.permuted).permute(inverse)   # (*rest, *bshape)
    writes = math.prod(bshape)
    if writes == 0 or y.numel() == 0:
        return x
    k = len(lay.adv_sizes)
    v = v.reshape(lay.rest_shape + (writes,) + (1,) * k)
    mask = mask.reshape((writes,) + lay.adv_sizes)                               # (writes, *adv_sizes)
    last = None
    if not accumulate:
        order = type(x)(arange(writes, x.device), device=x.device).reshape((writes,) + (1,) * k)
        last = mask.where(order, -1).amax(0)                 # the last write to each position; -1: none
        mask = order == last
    put = (mask.where(v, 0)
           .sum(len(lay.rest_shape), dtype=x.dtype if x.dtype.is_float else None)
           .cast(x.dtype))                                                      # (*rest, *adv_sizes)
    to_y = np.argsort(lay.rest + lay.dims_adv).tolist()
    put = _scatter_basic(put.permute(to_y), plan, x.shape)
    if last is None:
        return (x + put).cast(x.dtype)
    written = (last >= 0).reshape((1,) * len(lay.rest) + lay.adv_sizes).permute(to_y)._broadcast_to(y.shape)
    return _scatter_basic(written, plan, x.shape).where(put, x)


def _put(x: Tensor, index: tuple, value: Any, accumulate: bool, who: str) -> Tensor:
    """x after x[index] = value (or += with accumulate), as a new tensor."""
    hint = ""
    if any(_is_mask(x, i) for i in index):
        hint = ("; a bool mask's True positions, in row-major order, take one entry of the value each "
                "(or give one value for all)")
    view, plan = basic(x, normalize(_expand_masks(x, index), x.ndim))
    if plan.adv:
        return _put_advanced(x, view, plan, value, accumulate, who, hint)
    target = tuple(1 if nd is None else view.shape[nd[1]] for nd in plan.out if nd != "drop")
    v = _scatter_basic(_fit_value(x, value, target, who).reshape(view.shape), plan, x.shape)
    if accumulate:
        return (x + v).cast(x.dtype)
    ones = type(x).ones(*view.shape, dtype=dtypes.bool, device=x.device)
    return _scatter_basic(ones, plan, x.shape).where(v, x)


def setitem_value(x: Tensor, index: Any, value: Any) -> Tensor:
    """What x holds after `x[index] = value` (see Tensor.__setitem__), as a new tensor: a mask of the
    written positions selects value placed there, else x. A duplicate integer index writes its last
    value (torch leaves this undefined). A bool mask with a one-element value stays lazy; any other bool
    mask is read back to count its True positions, which take value's entries in row-major order.

        >>> from tg import Tensor
        >>> x = Tensor([0, 0, 0, 0])
        >>> setitem_value(x, [3, 1, 3], Tensor([1, 2, 5])).tolist()
        [0, 2, 0, 5]
        >>> setitem_value(x, Tensor([True, False, True, False]), Tensor([7, 8])).tolist()
        [7, 0, 8, 0]
    """
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) == 1 and _is_mask(x, idx[0]):
        mask = idx[0] if isinstance(idx[0], type(x)) else type(x)(np.asarray(idx[0]), device=x.device)
        v = value if isinstance(value, type(x)) else type(x)(value, device=x.device, dtype=x.dtype)
        if v.numel() == 1 and mask.ndim >= 1 and mask.shape == x.shape[:mask.ndim]:
            m = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
            return m.where(v.reshape(()).cast(x.dtype), x)
    return _put(x, idx, value, False, "setitem")


def index_put(x: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """torch's index_put: x with values written at x[indices] (indices a tuple of integer or bool
    tensors, one per leading dim; None for a whole dim), added there with accumulate (duplicates add
    up), else the last write of a duplicate wins. Returns a new tensor.

        >>> from tg import Tensor
        >>> index_put(Tensor([0, 0, 0]), (Tensor([0, 2, 0]),), Tensor([1, 2, 3]), accumulate=True).tolist()
        [4, 0, 2]
    """
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"[core] index_put: indices must be a tuple of tensors, got "
                        f"{type(indices).__name__}; write (index,) for one")
    return _put(x, tuple(slice(None) if i is None else i for i in indices), values, bool(accumulate),
                "index_put")


def _along(x: Tensor, dim: int, index: Any, who: str) -> tuple:
    """The index tuple selecting `index` (0-d or 1-d integers) along dim."""
    d = x._axis(dim)
    t = index if isinstance(index, type(x)) else type(x)(np.asarray(index), device=x.device)
    if t.ndim > 1 or not t.dtype.is_int:
        raise TypeError(f"[core] {who}: index must be a 0-d or 1-d integer tensor, got {t.dtype.name} of "
                        f"shape {t.shape}")
    return (slice(None),) * d + (t.reshape(-1),)


def _check_source(x: Tensor, dim: int, index: Tensor, source: Any, who: str) -> None:
    want = tuple(index.numel() if i == x._axis(dim) else n for i, n in enumerate(x.shape))
    got = source.shape if isinstance(source, type(x)) else np.shape(source)
    if tuple(got) != want:
        raise ValueError(f"[core] {who}: source of shape {tuple(got)}, expected {want} (x's shape with dim "
                         f"{dim} the index's length)")


def index_fill(x: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    """x with value (a scalar or one-element tensor) at the positions `index` names along dim.

        >>> from tg import Tensor
        >>> index_fill(Tensor([[1, 2, 3], [4, 5, 6]]), 1, Tensor([0, 2]), -1).tolist()
        [[-1, 2, -1], [-1, 5, -1]]
    """
    idx = _along(x, dim, index, "index_fill")
    if isinstance(value, type(x)) and value.numel() != 1:
        raise ValueError(f"[core] index_fill: value must be a scalar or a one-element tensor, got shape "
                         f"{value.shape}")
    return _put(x, idx, value.reshape(()) if isinstance(value, type(x)) else value, False, "index_fill")


def index_copy(x: Tensor, dim: int, index: Any, source: Any) -> Tensor:
    """x with source's slices along dim written at the positions in index (the last write of a
    duplicate wins).

        >>> from tg import Tensor
        >>> index_copy(Tensor([[0, 0], [0, 0], [0, 0]]), 0, Tensor([2, 0]), Tensor([[1, 2], [3, 4]])).tolist()
        [[3, 4], [0, 0], [1, 2]]
    """
    idx = _along(x, dim, index, "index_copy")
    _check_source(x, dim, idx[-1], source, "index_copy")
    return _put(x, idx, source, False, "index_copy")


def index_add(x: Tensor, dim: int, index: Any, source: Any, alpha: Any = 1) -> Tensor:
    """x plus alpha * source's slices along dim, added at the positions in index (duplicates add up).

        >>> from tg import Tensor
        >>> index_add(Tensor([1, 1, 1]), 0, Tensor([0, 0, 2]), Tensor([1, 2, 3])).tolist()
        [4, 1, 4]
    """
    idx = _along(x, dim, index, "index_add")
    _check_source(x, dim, idx[-1], source, "index_add")
    if alpha != 1:
        source = (source if isinstance(source, type(x)) else type(x)(source, device=x.device)) * alpha
    return _put(x, idx, source, True, "index_add")
