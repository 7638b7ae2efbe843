"""ReduceMixin, a part of the Tensor class: sums, means, max / min with their indices, variance,
norms, sorting and top-k, cumulative ops, and the ops whose shape depends on the values (unique,
nonzero, bincount). tg/core/tensor.py builds Tensor from the mixins and binds `Tensor` here once the
class exists (see tg/core/mixin/__init__.py)."""
from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, overload

import numpy as np

from tg.core import function as F
from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.dtype import (
    DType,
    dtypes,
    max_value,
    min_value,
    promote_types,
)
from tg.core.mixin.base import NoGrad, apply, index_range
from tg.core.shape import broadcast_shape, prod

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


class MinMax(NamedTuple):
    """What aminmax gives: (min, max)."""
    min: Tensor
    max: Tensor


class ValuesIndices(NamedTuple):
    """What max and min along a dim, sort, topk, kthvalue, median, mode, cummax and cummin give: a
    (values, indices) pair whose parts also have torch's names (`x.max(1).indices`, `x.topk(2).values`)."""
    values: Tensor
    indices: Tensor


def _select_along(values: Tensor, indices: Tensor, d: int, k: int, keepdim: bool) -> ValuesIndices:
    """The k-th entry along dim d of a sorted (values, indices) pair."""
    if values.ndim == 0:
        return ValuesIndices(values, indices)
    v, i = values.narrow(d, k, 1), indices.narrow(d, k, 1)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


class ReduceMixin:
    __slots__ = ()

    def _reduce(self: Tensor, fn: type[F.Function], axis: Any, keepdim: builtins.bool) -> Tensor:
        axes = self._axes(axis)
        if self.ndim == 0:
            return self._fresh()
        out = apply(fn, self, axes=axes)
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @autocast_op
    def sum(self: Tensor, axis: Any = None, keepdim: builtins.bool = False,
            dtype: DType | str | None = None, *,
            dim: Any = None) -> Tensor:
        """The sum over `axis` (an int, a tuple, or None for all dims; `dim` is torch's name for it),
        dropping the summed dims unless keepdim. As in torch, bool and int tensors sum in int64;
        dtype= sets the type to sum in.

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.sum().item(), x.sum(0).tolist(), x.sum(dim=1, keepdim=True).tolist()
            (10, [4, 6], [[3], [7]])
            >>> Tensor([True, True, False]).sum().item()
            2
        """
        axis = dim if dim is not None else axis
        x = self
        if dtype is not None:
            x = x.cast(dtype)
        elif x.dtype.is_int or x.dtype == dtypes.bool:
            x = x.cast(dtypes.int64 if not x.dtype.is_unsigned or x.dtype.itemsize < 8 else x.dtype)
        return x._reduce(F.Sum, axis, keepdim)

    @overload
    def max(self: Tensor, axis: None = None, keepdim: builtins.bool = False, *,
            dim: None = None) -> Tensor: ...
    @overload
    def max(self: Tensor, axis: Tensor, keepdim: builtins.bool = False, *, dim: None = None) -> Tensor: ...
    @overload
    def max(self: Tensor, axis: builtins.int, keepdim: builtins.bool = False, *,
            dim: None = None) -> ValuesIndices: ...
    @overload
    def max(self: Tensor, axis: None = None, keepdim: builtins.bool = False, *,
            dim: builtins.int) -> ValuesIndices: ...

    def max(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *,
            dim: Any = None) -> Tensor | ValuesIndices:
        """torch.max: with no dim, the largest element as a 0-d tensor; along one dim, the pair
        (values, indices), also named `.values` and `.indices`: the int64 index is the first largest, as
        argmax() gives, and the gradient flows to it. max(other_tensor) is maximum(). amax() takes
        several dims and gives the values only.

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.max().item(), x.max(0).values.tolist(), x.max(dim=1, keepdim=True).indices.tolist()
            (5, [3, 5], [[1], [1]])
            >>> values, indices = x.max(1)
            >>> values.tolist(), indices.tolist()
            ([5, 4], [1, 1])
        """
        return self._extreme(dim if dim is not None else axis, keepdim, True)

    @overload
    def min(self: Tensor, axis: None = None, keepdim: builtins.bool = False, *,
            dim: None = None) -> Tensor: ...
    @overload
    def min(self: Tensor, axis: Tensor, keepdim: builtins.bool = False, *, dim: None = None) -> Tensor: ...
    @overload
    def min(self: Tensor, axis: builtins.int, keepdim: builtins.bool = False, *,
            dim: None = None) -> ValuesIndices: ...
    @overload
    def min(self: Tensor, axis: None = None, keepdim: builtins.bool = False, *,
            dim: builtins.int) -> ValuesIndices: ...

    def min(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *,
            dim: Any = None) -> Tensor | ValuesIndices:
        """torch.min: with no dim, the smallest element as a 0-d tensor; along one dim, the pair
        (values, indices), also named `.values` and `.indices` (the first smallest, as argmin()).
        min(other_tensor) is minimum(); amin() takes several dims and gives the values only.

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.min().item(), x.min(1).values.tolist(), x.min(1).indices.tolist()
            (1, [1, 3], [0, 0])
        """
        return self._extreme(dim if dim is not None else axis, keepdim, False)

    def _extreme(self: Tensor, axis: Any, keepdim: builtins.bool,
                 largest: builtins.bool) -> Tensor | ValuesIndices:
        """max()/min(): all elements, elementwise against a tensor, or (values, indices) along a dim."""
        if isinstance(axis, Tensor):
            return self.maximum(axis) if largest else self.minimum(axis)   # torch.max(a, b)
        if axis is None:
            return self.amax(None, keepdim) if largest else self.amin(None, keepdim)
        if isinstance(axis, builtins.bool) or not isinstance(axis, (builtins.int, np.integer)):
            name, values_only = ("max", "amax") if largest else ("min", "amin")
            raise TypeError(f"[core] {name}: expected one int dim (torch.{name} gives (values, indices) "
                            f"along one dim), got {axis!r}; for the values over several dims use "
                            f"x.{values_only}({axis!r})")
        self._check_nonempty(axis, "max" if largest else "min")
        d = self._axis(builtins.int(axis))
        x = self._stored()   # the value at the index is the one the index was found by
        indices = x._arg_extreme(d, True, largest)
        if self.ndim == 0:
            return ValuesIndices(self, indices)
        values = x.gather(d, indices).cast(self.dtype)   # the gradient goes to the picked position
        if not keepdim:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return ValuesIndices(values, indices)

    def _check_nonempty(self: Tensor, axis: Any, name: str) -> None:
        axes = self._axes(axis)
        if any(self.shape[a] == 0 for a in axes) or (self.numel() == 0 and axis is None):
            raise ValueError(f"[core] {name}: reduction over an empty dimension of shape {self.shape}")

    def amax(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """The largest value over `axis`: one dim, a tuple of dims, or None for all dims, dropping them
        unless keepdim (torch.amax). Ties share the gradient equally.

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.amax(0).tolist(), x.amax((0, 1)).item(), x.amax(dim=1, keepdim=True).tolist()
            ([3, 5], 5, [[5], [4]])
        """
        axis = dim if dim is not None else axis
        self._check_nonempty(axis, "amax")
        return self._reduce(F.Max, axis, keepdim)

    def amin(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """The smallest value over `axis`: one dim, a tuple of dims, or None for all dims, dropping them
        unless keepdim (torch.amin).

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.amin(1).tolist(), x.amin((0, 1)).item()
            ([1, 3], 1)
        """
        axis = dim if dim is not None else axis
        self._check_nonempty(axis, "amin")
        if self.dtype == dtypes.bool:
            return self.logical_not().amax(axis, keepdim).logical_not()
        if self.dtype.is_unsigned:
            top = int(max_value(self.dtype))
            return top - (top - self).amax(axis, keepdim)
        out = -((-self).amax(axis, keepdim))
        if self.dtype.is_float:
            return out
        # -x wraps at the dtype's minimum (-INT_MIN is INT_MIN, which then never wins the max), so
        # it is looked for on its own. (~x, which has no such case, OpenCL's pocl miscompiles in a max.)
        low = int(min_value(self.dtype))
        return (self == low).any(axis, keepdim).where(low, out)

    def mean(self: Tensor, axis: Any = None, keepdim: builtins.bool = False,
             dtype: DType | str | None = None, *,
             dim: Any = None) -> Tensor:
        """The average over `axis` (None for all dims), dropping it unless keepdim. Int and bool tensors
        give float32 (torch raises for them); dtype= sets the type to average in.

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.mean().item(), x.mean(0).tolist(), x.mean(dim=1, keepdim=True).tolist()
            (2.5, [2.0, 3.0], [[1.5], [3.5]])
            >>> x.mean(dtype="float64").dtype
            dtypes.float64
        """
        axis = dim if dim is not None else axis
        x = self.cast(dtype) if dtype is not None else self._float_like()
        axes = self._axes(axis)
        count = prod(self.shape[a] for a in axes)
        s = x.sum(axis, keepdim)
        return s * (1 / count) if count else s * float("nan")

    def var(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1, *,
            dim: Any = None, unbiased: builtins.bool | None = None) -> Tensor:
        """The variance over `axis`: the sum of squared deviations divided by N - correction. As in torch,
        correction=1 (Bessel's) is the default, and unbiased=False means correction=0.

            >>> x = Tensor([1.0, 2.0, 3.0, 4.0])
            >>> round(x.var().item(), 4), x.var(correction=0).item()
            (1.6667, 1.25)
        """
        axis = dim if dim is not None else axis
        if unbiased is not None:
            correction = int(unbiased)
        x = self._float_like()
        axes = self._axes(axis)
        n = prod(self.shape[a] for a in axes)
        dev = x - x.mean(axes, keepdim=True)
        return (dev * dev).sum(axes, keepdim) / max(n - correction, 0)

    def std(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1, *,
            dim: Any = None, unbiased: builtins.bool | None = None) -> Tensor:
        """The standard deviation over `axis`: sqrt(var()), with the same correction (1 by default).

            >>> x = Tensor([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
            >>> x.std(correction=0).item(), round(x.std().item(), 4)
            (2.0, 2.1381)
        """
        return self.var(axis, keepdim, correction, dim=dim, unbiased=unbiased)._sqrt_of_spread()

    def _sqrt_of_spread(self: Tensor) -> Tensor:
        """sqrt of a sum of squares (a variance, a squared 2-norm), whose derivative at 0 is 0, torch's
        subgradient for std and norms: a constant channel or a zero vector then gets a zero gradient,
        not 0 * inf = nan from sqrt's."""
        with NoGrad():
            out = self.detach().sqrt()
        return self._local(out, (self, lambda: (out == 0).where(0.0, 0.5 / out)))

    @autocast_op
    def prod(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """The product over `axis`: floats keep their dtype (float16/bfloat16 multiply in float32); ints
        (and bool) give int64, an exact product (wrapping on overflow, as in torch).

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.prod().item(), x.prod(0).tolist(), Tensor([-2.0, 0.5, 3.0]).prod().item()
            (24, [3, 8], -3.0)
        """
        axis = dim if dim is not None else axis
        if self.dtype.is_float:
            return self._tree_prod(axis, keepdim, promote_types(self.dtype, dtypes.float32)).cast(self.dtype)
        return self._tree_prod(axis, keepdim, dtypes.int64 if self.dtype != dtypes.uint64 else self.dtype)

    def _tree_prod(self: Tensor, axis: Any, keepdim: builtins.bool, acc: DType) -> Tensor:
        """The product in dtype acc as plain multiplications: the reduced dims flattened to one, then
        multiplied in groups of 8 (padded with ones) until one is left. Exact for ints, rounded as torch's
        for floats, and its gradient is the product rule's (the product of the others at a zero, where a
        sum of logs would give 0)."""
        x = self.cast(acc)
        axes = self._axes(axis)
        if self.ndim == 0:
            return x
        kept = [i for i in range(self.ndim) if i not in axes]
        kept_shape = tuple(self.shape[i] for i in kept)
        x = x.permute(kept + list(axes)).reshape(kept_shape + (prod(self.shape[a] for a in axes),))
        if x.shape[-1] == 0:
            x = Tensor.ones(*kept_shape, 1, dtype=x.dtype, device=x.device)
        while x.shape[-1] > 1:
            m = x.shape[-1]
            groups = math.ceil(m / 8)
            x = x.pad(((0, 0),) * len(kept_shape) + ((0, groups * 8 - m),), value=1)
            x = x.reshape(kept_shape + (groups, 8))
            parts = [x[..., j] for j in range(8)]
            x = parts[0]
            for part in parts[1:]:
                x = x * part
            if x.shape[-1] > 1:
                x = x.realize()   # each level reads the last 8 times: inlined, kernels would grow 8x a level
        out = x.reshape(kept_shape)
        if keepdim:
            out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))
        return out

    def _arg_extreme(
        self: Tensor, axis: builtins.int | None, keepdim: builtins.bool, largest: builtins.bool
    ) -> Tensor:
        if axis is None:
            return self.flatten()._arg_extreme(0, False, largest) if not keepdim else \
                self.flatten()._arg_extreme(0, False, largest).reshape((1,) * self.ndim)
        d = self._axis(axis)
        if self.ndim == 0:   # torch: dim 0 (or -1) of a 0-d tensor is the tensor itself, at index 0
            return Tensor.zeros((), dtype=dtypes.int64, device=self.device)
        n = self.shape[d]
        if n == 0:
            raise ValueError(f"[core] argmax/argmin over an empty dim of shape {self.shape}")
        x = self._stored()   # compared with its own max: one computation, not two kernels' (x.stored)
        best = x.amax(d, keepdim=True) if largest else x.amin(d, keepdim=True)
        hit = x == best
        if self.dtype.is_float:   # a NaN is the extreme, as in torch (NaN == NaN is false)
            hit = hit | (x.isnan() & best.isnan())
        # the first index wins: count down from n so the max picks the lowest index
        rev = (n - index_range(n, self.device)).reshape(tuple(n if i == d else 1 for i in range(self.ndim)))
        idx = n - hit.where(rev, 0).amax(d, keepdim=keepdim)
        return idx.cast(dtypes.int64)

    def argmax(self: Tensor, axis: builtins.int | None = None, keepdim: builtins.bool = False, *,
               dim: builtins.int | None = None) -> Tensor:
        """The int64 index of the largest value along `axis` (into the flattened tensor when axis is
        None); the first one wins a tie, as in torch.

            >>> x = Tensor([[1, 5, 5], [7, 2, 7]])
            >>> x.argmax().item(), x.argmax(1).tolist(), x.argmax(dim=0).tolist()
            (3, [1, 0], [1, 0, 1])
        """
        return self._arg_extreme(dim if dim is not None else axis, keepdim, True)

    def argmin(self: Tensor, axis: builtins.int | None = None, keepdim: builtins.bool = False, *,
               dim: builtins.int | None = None) -> Tensor:
        """The int64 index of the smallest value along `axis` (into the flattened tensor when axis is
        None); the first one wins a tie, as in torch.

            >>> x = Tensor([[1, 5, 5], [7, 2, 7]])
            >>> x.argmin().item(), x.argmin(1).tolist()
            (0, [0, 1])
        """
        return self._arg_extreme(dim if dim is not None else axis, keepdim, False)

    def any(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """True where any element over `axis` (None for all dims) is nonzero, as a bool tensor (uint8 for a
        uint8 input, as torch).

            >>> x = Tensor([[0, 0], [0, 3]])
            >>> x.any().item(), x.any(1).tolist()
            (True, [False, True])
        """
        return self.bool()._reduce(F.Max, dim if dim is not None else axis, keepdim)._as_logical_of(self)

    def _as_logical_of(self: Tensor, x: Tensor) -> Tensor:
        """A bool result of any/all in torch's dtype for input x: uint8 stays uint8 (torch's legacy rule)."""
        return self.cast(dtypes.uint8) if x.dtype == dtypes.uint8 else self

    def all(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """True where every element over `axis` (None for all dims) is nonzero, as a bool tensor (uint8 for a
        uint8 input, as torch).

            >>> x = Tensor([[1, 2], [0, 3]])
            >>> x.all().item(), x.all(1).tolist()
            (False, [True, False])
        """
        out = self.logical_not().any(dim if dim is not None else axis, keepdim).logical_not()
        return out._as_logical_of(self)

    @autocast_op
    def logsumexp(self: Tensor, axis: Any = None, keepdim: builtins.bool = False, *,
                  dim: Any = None) -> Tensor:
        """log(sum(exp(self))) over `axis`, shifted by the max so that large inputs do not overflow.

            >>> round(Tensor([1000.0, 1000.0]).logsumexp().item(), 3)
            1000.693
        """
        axis = dim if dim is not None else axis
        if any(self.shape[a] == 0 for a in self._axes(axis)):     # log of an empty sum: -inf, as torch
            return self._float_like().sum(axis, keepdim).log()
        m = self.amax(axis, keepdim=True)._detached()
        m = m.isinf().where(0.0, m)
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out._squeeze_axes(self._axes(axis))

    def _squeeze_axes(self: Tensor, axes: Iterable[builtins.int]) -> Tensor:
        axes = set(axes)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @autocast_op
    def softmax(self: Tensor, axis: builtins.int = -1, *, dim: builtins.int | None = None) -> Tensor:
        """exp(self) / sum(exp(self)) along `axis` (the last dim by default), shifted by the max for
        stability; int inputs give float32.

            >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmax().tolist()]
            [0.09, 0.2447, 0.6652]
            >>> Tensor([[0.0, 0.0], [5.0, 5.0]]).softmax(dim=1).tolist()
            [[0.5, 0.5], [0.5, 0.5]]
        """
        axis = dim if dim is not None else axis
        x = self._float_like()
        if x.ndim > 0:
            return apply(fused.Softmax, x, axis=x._axis(axis))
        e = (x - x.amax(axis, keepdim=True)._detached()).exp()
        return e / e.sum(axis, keepdim=True)

    @autocast_op
    def log_softmax(self: Tensor, axis: builtins.int = -1, *, dim: builtins.int | None = None) -> Tensor:
        """log(softmax(self)) along `axis` (the last dim by default), computed without taking the log of
        a small number.

            >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).log_softmax().tolist()]
            [-2.4076, -1.4076, -0.4076]
        """
        axis = dim if dim is not None else axis
        x = self._float_like()
        if x.ndim > 0:
            return apply(fused.LogSoftmax, x, axis=x._axis(axis))
        shifted = x - x.amax(axis, keepdim=True)._detached()
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    @autocast_op
    def cumsum(self: Tensor, axis: builtins.int = 0, *, dim: builtins.int | None = None) -> Tensor:
        """The running sum along `axis` (dim 0 by default; torch requires it). As in torch, int and bool
        tensors give int64.

            >>> Tensor([1, 2, 3, 4]).cumsum().tolist(), Tensor([[1, 2], [3, 4]]).cumsum(dim=1).tolist()
            ([1, 3, 6, 10], [[1, 3], [3, 7]])
        """
        d = self._axis(dim if dim is not None else axis)
        src = self if self.dtype.is_float else self.cast(dtypes.int64)
        if self.ndim == 0 or self.shape[d] == 0:
            return src
        n = self.shape[d]
        x = src.transpose(d, -1) if d != self.ndim - 1 else src
        # out[i] = sum_j x[j] * (j <= i): a masked reduce, so it is one fused kernel
        ar = index_range(n, self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)
        out = tri.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype if x.dtype.is_float else None)
        out = out if d == self.ndim - 1 else out.transpose(d, -1)
        return out

    # sorting without a sort primitive: each element's rank is counted by comparing it with every other
    # element of its row (O(n^2) work and memory per row), then the values are picked by a one-hot gather
    _SORT_LIMIT = 4096

    def _last_dim(self: Tensor, dim: builtins.int, name: str) -> tuple[builtins.int, Tensor]:
        """(dim, self with that dim moved last); 0-d tensors become 1-element rows."""
        x = self.reshape(1) if self.ndim == 0 else self
        d = x._axis(dim)
        if x.shape[d] > Tensor._SORT_LIMIT:
            raise ValueError(f"[core] {name}: {x.shape[d]} elements along dim {dim}, above the limit of "
                             f"{Tensor._SORT_LIMIT} (sorting compares every pair, n^2 memory per row); sort "
                             f"on the host (.numpy()) or in smaller pieces")
        return d, x.transpose(d, -1) if d != x.ndim - 1 else x

    def _sort_last(self: Tensor, k: builtins.int, descending: builtins.bool) -> tuple[Tensor, Tensor]:
        """The first k of the sorted last dim: (values, int64 indices); NaN sorts as the largest value and
        equal values keep their order."""
        n = self.shape[-1]
        src = self._stored()   # every pair compared, and the values picked, from one computation
        with NoGrad():
            x = src._detached() if self.dtype != dtypes.bool else src._detached().cast(dtypes.int32)
            a, b = x.unsqueeze(-1), x.unsqueeze(-2)          # a: element i, b: element j; (..., i, j)
            before = (b > a) if descending else (b < a)     # j goes before i
            ties = a == b
            if x.dtype.is_float:
                nan_a, nan_b = a.isnan(), b.isnan()
                nan_first = (nan_b & nan_a.logical_not()) if descending else (nan_a & nan_b.logical_not())
                before = before | nan_first
                ties = ties | (nan_a & nan_b)
            ar = index_range(n, self.device)
            earlier = ar.reshape(1, n) < ar.reshape(n, 1)    # [i, j]: j < i
            rank = (before | (ties & earlier)).sum(-1).cast(dtypes.int32)                      # (..., n)
            onehot = rank.unsqueeze(-2) == index_range(k, self.device).reshape(k, 1)           # (..., k, n)
            indices = onehot.where(ar.reshape(1, n), 0).sum(-1).cast(dtypes.int32)             # (..., k)
        return src.gather(-1, indices).cast(self.dtype), indices.cast(dtypes.int64)

    def sort(self: Tensor, dim: builtins.int = -1, descending: builtins.bool = False, *,
             stable: builtins.bool = True) -> ValuesIndices:
        """(values, int64 indices) sorted along `dim`, ascending unless descending=True; NaN sorts as the
        largest value and equal values keep their order (so stable= changes nothing). `.values` and
        `.indices` name the two, as in torch. The gradient flows to the picked positions.
        O(n^2) in the dim's size n (at most 4096).

            >>> values, indices = Tensor([3.0, 1.0, 2.0, 1.0]).sort()
            >>> values.tolist(), indices.tolist()
            ([1.0, 1.0, 2.0, 3.0], [1, 3, 2, 0])
        """
        d, x = self._last_dim(dim, "sort")
        values, indices = x._sort_last(x.shape[-1], descending)
        if d != x.ndim - 1:
            values, indices = values.transpose(d, -1), indices.transpose(d, -1)
        return ValuesIndices(values.reshape(self.shape), indices.reshape(self.shape))

    def argsort(self: Tensor, dim: builtins.int = -1, descending: builtins.bool = False) -> Tensor:
        """The int64 indices that sort(dim, descending) picks.

            >>> Tensor([[3, 1, 2]]).argsort(descending=True).tolist()
            [[0, 2, 1]]
        """
        return self.sort(dim, descending)[1]

    def topk(self: Tensor, k: builtins.int, dim: builtins.int = -1, largest: builtins.bool = True,
             sorted: builtins.bool = True) -> ValuesIndices:  # noqa: A002  (torch's name)
        """The k largest (or smallest) values along `dim` and their int64 indices, always in sorted order
        (so sorted=False gives the same). O(n * (n + k)) in the dim's size n (at most 4096).

            >>> values, indices = Tensor([[1, 5, 3, 4]]).topk(2)
            >>> values.tolist(), indices.tolist()
            ([[5, 4]], [[1, 3]])
        """
        d, x = self._last_dim(dim, "topk")
        if not 0 <= k <= x.shape[-1]:
            raise ValueError(f"[core] topk: k={k} is out of range for a dim of size {x.shape[-1]}")
        values, indices = x._sort_last(k, largest)
        if d != x.ndim - 1:
            values, indices = values.transpose(d, -1), indices.transpose(d, -1)
        if self.ndim == 0:
            values, indices = values.reshape(()), indices.reshape(())
        return ValuesIndices(values, indices)

    def multinomial(self: Tensor, num_samples: builtins.int = 1,
                    replacement: builtins.bool = False) -> Tensor:
        """int64 indices drawn from the categories whose (unnormalised) probabilities are this 1-d tensor
        or each row of this 2-d one, from tg's RNG (manual_seed makes them repeatable). With replacement
        by the inverse CDF, without by the Gumbel top-k trick.

            >>> Tensor.manual_seed(0)
            >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
            [1, 1]
            >>> sorted(Tensor([1.0, 1.0, 1.0]).multinomial(3).tolist())
            [0, 1, 2]
        """
        if self.ndim not in (1, 2):
            raise ValueError(f"[core] multinomial: expected a 1-d or 2-d tensor of probabilities, got "
                             f"{self.shape}")
        p = self._detached()._float_like()
        p = p.unsqueeze(0) if self.ndim == 1 else p
        rows, n = p.shape
        if num_samples <= 0 or (not replacement and num_samples > n):
            raise ValueError(f"[core] multinomial: cannot draw {num_samples} samples from {n} categories "
                             f"{'with' if replacement else 'without'} replacement")
        with NoGrad():
            if replacement:
                cdf = p.cumsum(1)
                cdf = cdf / cdf[:, -1:]
                u = Tensor.rand(rows, num_samples, device=self.device)
                out = (cdf.unsqueeze(1) <= u.unsqueeze(2)).sum(2).clamp(max=n - 1)
            else:
                gumbel = -(-Tensor.rand(rows, n, device=self.device).log()).log()
                out = (p.log() + gumbel).topk(num_samples, 1)[1]
        return out.reshape(num_samples) if self.ndim == 1 else out

    @autocast_op
    def cumprod(self: Tensor, dim: builtins.int) -> Tensor:
        """The running product along `dim` (int and bool tensors give int64, as prod does); O(n^2) in the
        dim's size.

            >>> Tensor([1, 2, 3, 4]).cumprod(0).tolist()
            [1, 2, 6, 24]
        """
        d = self._axis(dim)
        if self.ndim == 0 or self.shape[d] == 0:
            return self if self.dtype.is_float else self.cast(dtypes.int64)
        n = self.shape[d]
        x = self.transpose(d, -1) if d != self.ndim - 1 else self
        ar = index_range(n, self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)    # [i, j]: j <= i
        out = tri.where(x.unsqueeze(-2), Tensor(1, device=self.device, dtype=x.dtype)).prod(-1)
        return out if d == self.ndim - 1 else out.transpose(d, -1)

    def _cum_extreme(self: Tensor, dim: builtins.int, largest: builtins.bool) -> ValuesIndices:
        d = self._axis(dim)
        if self.ndim == 0 or self.shape[d] == 0:
            return ValuesIndices(self, Tensor.zeros(*self.shape, dtype=dtypes.int64, device=self.device))
        n = self.shape[d]
        x = self._stored()   # compared with its running extreme, and picked from: one computation
        x = x.transpose(d, -1) if d != self.ndim - 1 else x
        with NoGrad():
            xd = x._detached() if x.dtype != dtypes.bool else x._detached().cast(dtypes.int32)
            ar = index_range(n, self.device)
            tri = ar.reshape(1, n) <= ar.reshape(n, 1)    # [i, j]: j <= i
            if xd.dtype.is_float:
                fill = -math.inf if largest else math.inf
            else:
                fill = int(min_value(xd.dtype)) if largest else int(max_value(xd.dtype))
            a = tri.where(xd.unsqueeze(-2), Tensor(fill, device=self.device, dtype=xd.dtype))
            best = (a.amax(-1) if largest else a.amin(-1)).unsqueeze(-1)
            hit = xd.unsqueeze(-2) == best
            if xd.dtype.is_float:
                hit = hit | (xd.unsqueeze(-2).isnan() & best.isnan())
            # the last position holding the running extreme, as torch's cummax/cummin give
            idx = (tri & hit).where(ar.reshape(1, n), -1).amax(-1)
        values = x.gather(-1, idx).cast(self.dtype)   # carries the gradient to the picked position
        if x.dtype.is_float:
            # the picked value itself, -0.0 too (gather's one-hot sum gives +0.0 for it): the one
            # element of its row that is not -inf has the max
            with NoGrad():
                onehot = idx.unsqueeze(-1) == ar
                exact = onehot.where(xd.unsqueeze(-2), -math.inf).amax(-1).cast(self.dtype)
            values = values._local(exact, (values, lambda: 1))
        idx = idx.cast(dtypes.int64)
        if d != self.ndim - 1:
            values, idx = values.transpose(d, -1), idx.transpose(d, -1)
        return ValuesIndices(values, idx)

    def cummax(self: Tensor, dim: builtins.int) -> tuple[Tensor, Tensor]:
        """(running max, int64 index of it) along `dim`; a tie or NaN takes the latest index, as in torch.
        The gradient flows to the picked positions. O(n^2) in the dim's size.

            >>> values, indices = Tensor([1, 3, 2, 3]).cummax(0)
            >>> values.tolist(), indices.tolist()
            ([1, 3, 3, 3], [0, 1, 1, 3])
        """
        return self._cum_extreme(dim, True)

    def cummin(self: Tensor, dim: builtins.int) -> tuple[Tensor, Tensor]:
        """(running min, int64 index of it) along `dim`; a tie or NaN takes the latest index, as in torch.

            >>> values, indices = Tensor([3.0, 1.0, 2.0, 1.0]).cummin(0)
            >>> values.tolist(), indices.tolist()
            ([3.0, 1.0, 1.0, 1.0], [0, 1, 1, 3])
        """
        return self._cum_extreme(dim, False)
    def nansum(self: Tensor, dim: Any = None, keepdim: builtins.bool = False, *,
               dtype: DType | str | None = None) -> Tensor:
        """sum() with NaNs counted as zero.

            >>> Tensor([1.0, float("nan"), 2.0]).nansum().item()
            3.0
        """
        x = self.isnan().where(0.0, self) if self.dtype.is_float else self
        return x.sum(dim, keepdim, dtype)

    def nanmean(self: Tensor, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
        """mean() of the elements that are not NaN.

            >>> Tensor([1.0, float("nan"), 2.0]).nanmean().item()
            1.5
        """
        return self.nansum(dim, keepdim) / self.isnan().logical_not().sum(dim, keepdim)

    def aminmax(self: Tensor, *, dim: Any = None, keepdim: builtins.bool = False) -> MinMax:
        """(amin, amax) over dim, named .min and .max as in torch.aminmax.

            >>> Tensor([[1, 5], [3, 4]]).aminmax(dim=1).max.tolist()
            [5, 4]
        """
        return MinMax(self.amin(dim, keepdim), self.amax(dim, keepdim))

    def count_nonzero(self: Tensor, dim: Any = None) -> Tensor:
        """How many elements are not zero (int64), over dim (all dims when None).

            >>> Tensor([[0, 1], [2, 3]]).count_nonzero(dim=0).tolist()
            [1, 2]
        """
        return (self != 0).sum(dim)

    @autocast_op
    def norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: builtins.bool = False, *,
             dtype: DType | str | None = None) -> Tensor:
        """The vector p-norm over dim (all elements when None; "fro" is 2): (sum |x|^p)^(1/p), inf the
        largest |x|, -inf the smallest, 0 the count of nonzeros (torch.norm, linalg.vector_norm).

            >>> Tensor([[3.0, 4.0]]).norm().item(), Tensor([[3.0, -4.0]]).norm(1, dim=1).tolist()
            (5.0, [7.0])
        """
        x = (self.cast(dtype) if dtype is not None else self._float_like()).abs()
        p = 2 if p == "fro" else p
        if not isinstance(p, (builtins.int, builtins.float)):
            raise ValueError(f"[core] norm: p must be a number or 'fro', got {p!r}")
        if p == math.inf:
            return x.amax(dim, keepdim)
        if p == -math.inf:
            return x.amin(dim, keepdim)
        if p == 0:
            return (x != 0).sum(dim, keepdim).cast(x.dtype)
        if p == 1:
            return x.sum(dim, keepdim)
        if p == 2:
            return (x * x).sum(dim, keepdim)._sqrt_of_spread()
        return (x ** p).sum(dim, keepdim) ** (1 / p)

    def logcumsumexp(self: Tensor, dim: builtins.int) -> Tensor:
        """log(cumsum(exp(self))) along dim, each prefix shifted by its own max (no overflow or underflow).
        O(n^2) in the dim's size, as cumprod.

            >>> [round(v, 4) for v in Tensor([0.0, 0.0, 1000.0]).logcumsumexp(0).tolist()]
            [0.0, 0.6931, 1000.0]
        """
        d, x = self._last_dim(dim, "logcumsumexp")
        if x.ndim == 0 or x.shape[-1] == 0:
            return self._float_like()
        n = x.shape[-1]
        ar = index_range(n, self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)                      # [i, j]: j <= i
        out = tri.where(x._float_like().unsqueeze(-2), -math.inf).logsumexp(-1)
        out = out if d == x.ndim - 1 else out.transpose(d, -1)
        return out.reshape(self.shape)

    def kthvalue(self: Tensor, k: builtins.int, dim: builtins.int = -1,
                 keepdim: builtins.bool = False) -> ValuesIndices:
        """The k-th smallest value along dim (k from 1) and its int64 index.

            >>> values, indices = Tensor([[3.0, 1.0, 2.0]]).kthvalue(2, dim=1)
            >>> values.tolist(), indices.tolist()
            ([2.0], [2])
        """
        values, indices = self.sort(dim)
        d = self._axis(dim) if self.ndim else 0
        if not 1 <= k <= (self.shape[d] if self.ndim else 1):
            raise ValueError(f"[core] kthvalue: k={k} is out of range for dim {dim} of shape {self.shape}")
        return _select_along(values, indices, d, k - 1, keepdim)

    def median(self: Tensor, dim: builtins.int | None = None, keepdim: builtins.bool = False) -> Any:
        """The lower median (the ((n - 1) // 2)-th smallest) of all elements, or (values, indices) along dim,
        as torch.median; NaN if a NaN is there.

            >>> Tensor([1.0, 4.0, 2.0, 3.0]).median().item(), Tensor([[1, 4, 2]]).median(1).values.tolist()
            (2.0, [2])
        """
        if dim is None:
            return self.flatten().median(0).values.reshape(())
        n = self.shape[self._axis(dim)] if self.ndim else 1
        values, indices = self.kthvalue((n - 1) // 2 + 1, dim, keepdim)
        if self.dtype.is_float:
            values = self.isnan().any(dim, keepdim).where(math.nan, values)
        return ValuesIndices(values, indices)

    def nanmedian(self: Tensor, dim: builtins.int | None = None, keepdim: builtins.bool = False) -> Any:
        """median() of the elements that are not NaN (NaN where all are).

            >>> Tensor([3.0, float("nan"), 1.0, 2.0]).nanmedian().item()
            2.0
        """
        if dim is None:
            return self.flatten().nanmedian(0).values.reshape(())
        d = self._axis(dim) if self.ndim else 0
        values, indices = self.sort(dim)          # NaN sorts last
        count = self.isnan().logical_not().sum(dim, keepdim=True) if self.ndim else Tensor(1)
        pos = ((count - 1).maximum(0) // 2)
        if not self.ndim:
            return ValuesIndices(self, Tensor(0, device=self.device))
        v, i = values.gather(d, pos), indices.gather(d, pos)
        return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))

    def mode(self: Tensor, dim: builtins.int = -1, keepdim: builtins.bool = False) -> ValuesIndices:
        """The most frequent value along dim (the smallest of equally frequent ones) and the last index
        holding it, as torch.mode. O(n^2) in the dim's size.

            >>> values, indices = Tensor([[1, 3, 3, 2, 1]]).mode(1)
            >>> values.tolist(), indices.tolist()
            ([1], [4])
        """
        d, x = self._last_dim(dim, "mode")
        x = x._stored()   # each element compared with every other and with the mode: one computation
        n = x.shape[-1]
        with NoGrad():
            xd = x._detached()
            counts = (xd.unsqueeze(-1) == xd.unsqueeze(-2)).sum(-1)                    # (..., n)
            top = counts == counts.amax(-1, keepdim=True)
            big = math.inf if xd.dtype.is_float else int(max_value(xd.dtype))
            best = top.where(xd, big).amin(-1, keepdim=True)
            idx = (xd == best).where(index_range(n, self.device), -1).amax(-1, keepdim=True)
        values = x.gather(-1, idx)
        out = [t if d == x.ndim - 1 else t.transpose(d, -1) for t in (values, idx.cast(dtypes.int64))]
        if self.ndim == 0:
            return ValuesIndices(out[0].reshape(()), out[1].reshape(()))
        return ValuesIndices(*[t if keepdim else t.squeeze(d) for t in out])
    def unique(self: Tensor, sorted: builtins.bool = True,
               return_inverse: builtins.bool = False,  # noqa: A002
               return_counts: builtins.bool = False, dim: builtins.int | None = None) -> Any:
        """The distinct values, sorted (and, if asked, the index of each element's value and each value's
        count), as torch.unique of the flattened tensor. Reads the values to the host.

            >>> Tensor([3, 1, 3]).unique(return_counts=True)[1].tolist()
            [1, 2]
        """
        if dim is not None:
            raise ValueError("[core] unique: dim= is not supported; call it on the flattened tensor")
        values, inverse, counts = np.unique(self.numpy(), return_inverse=True, return_counts=True)
        out = [Tensor(values, device=self.device, dtype=self.dtype)]
        if return_inverse:
            out.append(Tensor(inverse.reshape(self.shape).astype(np.int64), device=self.device))
        if return_counts:
            out.append(Tensor(counts.astype(np.int64), device=self.device))
        return out[0] if len(out) == 1 else tuple(out)

    def unique_consecutive(self: Tensor) -> Tensor:
        """The values with each run of equal neighbours kept once (flattened). Reads them to the host.

            >>> Tensor([1, 1, 2, 1]).unique_consecutive().tolist()
            [1, 2, 1]
        """
        a = self.numpy().reshape(-1)
        keep = np.concatenate([[True], a[1:] != a[:-1]]) if a.size else np.zeros(0, bool)
        return Tensor(a[keep], device=self.device, dtype=self.dtype)

    def nonzero(self: Tensor, as_tuple: builtins.bool = False) -> Any:
        """The int64 indices of the nonzero elements, one row each (n, ndim), or one tensor per dim with
        as_tuple=True. Reads the values to the host.

            >>> Tensor([[0, 1], [1, 0]]).nonzero().tolist()
            [[0, 1], [1, 0]]
        """
        where = np.nonzero(self.numpy())
        cols = [Tensor(w.astype(np.int64), device=self.device) for w in where]
        if as_tuple:
            return tuple(cols)
        return Tensor(np.stack(where, 1).astype(np.int64).reshape(-1, self.ndim), device=self.device)

    def argwhere(self: Tensor) -> Tensor:
        """nonzero(): the indices of the nonzero elements, one row each.

            >>> Tensor([0, 3, 4]).argwhere().tolist()
            [[1], [2]]
        """
        return self.nonzero()

    def masked_select(self: Tensor, mask: Tensor) -> Tensor:
        """The elements where mask (broadcast to self) is True, as a 1-d tensor; gradients flow to them.
        Reads the mask to the host.

            >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([True, False])).tolist()
            [1, 3]
        """
        shape = broadcast_shape(self.shape, mask.shape)
        picked = np.flatnonzero(np.broadcast_to(mask.numpy(), shape))
        return self._broadcast_to(shape).reshape(-1)[Tensor(picked.astype(np.int64), device=self.device)]

    def bincount(self: Tensor, weights: Tensor | None = None, minlength: builtins.int = 0) -> Tensor:
        """How often each value 0..max occurs in this 1-d int tensor (the weights' sums if given), at
        least minlength long. Reads the largest value to the host.

            >>> Tensor([1, 1, 3]).bincount().tolist()
            [0, 2, 0, 1]
        """
        if self.ndim != 1 or self.dtype.is_float:
            raise ValueError(f"[core] bincount: expected a 1-d int tensor, got {self.dtype.name}{self.shape}")
        n = builtins.max(minlength, builtins.int(self.max().item()) + 1 if self.numel() else 0)
        hit = self.unsqueeze(-1) == index_range(n, self.device)                       # (len, n)
        return hit.sum(0) if weights is None else hit.where(weights.unsqueeze(-1), 0).sum(0)

    def histc(self: Tensor, bins: builtins.int = 100, min: builtins.float = 0,
              max: builtins.float = 0) -> Tensor:  # noqa: A002
        """A histogram of `bins` equal bins over [min, max] (the data's range when both are 0); values
        outside are left out, as torch.histc.

            >>> Tensor([1.0, 2.0, 1.0, 4.0]).histc(bins=4, min=0, max=4).tolist()
            [0.0, 2.0, 1.0, 1.0]
        """
        x = self._float_like().reshape(-1)
        lo, hi = builtins.float(min), builtins.float(max)
        if lo == hi:
            lo, hi = builtins.float(x.min().item()), builtins.float(x.max().item())
            lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)
        pos = ((x - lo) * (bins / (hi - lo))).floor().cast(dtypes.int32).minimum(bins - 1)
        pos = ((x >= lo) & (x <= hi)).where(pos, -1)
        return (pos.unsqueeze(-1) == index_range(bins, self.device)).sum(0).cast(x.dtype)

    def msort(self: Tensor) -> Tensor:
        """The values sorted along dim 0.

            >>> Tensor([[2, 1], [1, 3]]).msort().tolist()
            [[1, 1], [2, 3]]
        """
        return self.sort(0).values
