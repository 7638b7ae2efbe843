"""IndexingMixin, a part of the Tensor class: `__getitem__` and `__setitem__` (the index rules are
tg/core/indexing.py), gather and scatter, index_* and the masked ops. tg/core/tensor.py builds Tensor
from the mixins and binds `Tensor` here once the class exists (see tg/core/mixin/__init__.py)."""
from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from tg.core import indexing
from tg.core.autocast import autocast_op
from tg.core.dtype import (
    dtypes,
)
from tg.core.lazy import LazyBuffer
from tg.core.mixin.base import _view_op, index_range
from tg.core.shape import broadcast_shape

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


class IndexingMixin:
    __slots__ = ()

    @_view_op
    def __getitem__(self: Tensor, index: Any) -> Tensor:
        """numpy/torch indexing: ints, slices (any step), None, ..., and integer tensors, lists or
        arrays (advanced indexing, torch's placement of the indexed dims). Basic indices make views.

            >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
            >>> x[1, ::-2].tolist(), x[:, [2, 0]].tolist(), x[None, 0].shape
            ([6, 4], [[3, 1], [6, 4]], (1, 3))
        """
        return indexing.getitem(self, index)

    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
        """Pick elements along `dim` at the positions in `index` (torch.gather): for dim=1,
        out[i][j] = self[i][index[i][j]]. The result has index's shape.

            >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
            [[1, 1], [4, 3]]
        """
        d = self._axis(dim)
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError("[core] gather: index must be an integer Tensor")
        if index.ndim != self.ndim:
            raise ValueError(f"[core] gather: index has {index.ndim} dims, input has {self.ndim}")
        for i, (a, b) in enumerate(zip(index.shape, self.shape)):
            if i != d and a > b:
                raise ValueError(
                    f"[core] gather: index shape {index.shape} exceeds input {self.shape} at dim {i}"
                )
        indexing.check_bounds(index, self.shape[d])
        x = self._shrink(tuple((0, index.shape[i]) if i != d else (0, s) for i, s in enumerate(self.shape)))
        n = self.shape[d]
        onehot = indexing.as_index(index).unsqueeze(-1) == index_range(n, self.device)   # (*index.shape, n)
        xs = x.unsqueeze(-1).transpose(d, -1)                                 # (..., 1 at d, ..., n)
        # one position is picked per output, so the sum (which widens ints to int64) casts back exactly
        return onehot.where(xs.expand(*index.shape, n), 0).sum(-1).cast(self.dtype)

    def __setitem__(self: Tensor, index: Any, value: Any) -> None:
        """x[index] = value, written in place into x's memory as a lazy assign: ints, slices (any step), None
        and ... (value broadcast to x[index]'s shape and cast to x's dtype), or one bool mask of x's leading
        dims with a scalar value. Tensors read x before the write keep the old values. As torch does for
        a leaf, a tensor that requires grad cannot be written outside no_grad(). As in torch, writing into a
        view of another tensor's memory (x = y[0]) writes y.

            >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
            >>> x[:, 0] = Tensor([7, 8])
            >>> x[x > 5] = 0
            >>> x.tolist()
            [[0, 2, 3], [0, 5, 0]]
        """
        self._check_inplace("setitem", value)
        self.assign(indexing.setitem_value(self, index, value))

    def _check_inplace(self: Tensor, name: str, value: Any = None) -> None:
        if Tensor.no_grad:
            return
        if self.requires_grad:
            raise RuntimeError(
                f"[core] {name}: in-place write into a tensor that requires grad (torch raises for a leaf "
                f"too); wrap it in `with tg.no_grad():`, or build a new tensor with where() or masked_fill()")
        if isinstance(value, Tensor) and value.requires_grad:
            raise RuntimeError(f"[core] {name}: the value requires grad, but an in-place write is not "
                               f"recorded for autograd; use where() or masked_fill() to build a new tensor")

    def copy_(self: Tensor, src: Any) -> Tensor:
        """Write src (broadcast to self's shape, cast to its dtype, moved to its device) into self's memory,
        in place; returns self. Recorded for autograd as torch records it (a leaf that requires grad raises).

            >>> x = Tensor.zeros(2, 2)
            >>> x.copy_(Tensor([1, 2])).tolist()
            [[1.0, 2.0], [1.0, 2.0]]
        """
        src = src if isinstance(src, Tensor) else Tensor(src, device=self.device, dtype=self.dtype)
        return self._write_in_place(
            "copy_", lambda old: src.to(self.device).cast(self.dtype)._broadcast_to(self.shape))

    def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
        """value where mask is true, else self (a new tensor; mask broadcasts to self's shape and value is
        cast to self's dtype, as in torch).

            >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).masked_fill(Tensor([True, False]), -1).tolist()
            [[-1.0, 2.0], [-1.0, 4.0]]
        """
        mask = mask if isinstance(mask, Tensor) else Tensor(mask, device=self.device)
        if mask.dtype != dtypes.bool:
            raise TypeError(f"[core] masked_fill: mask must be a bool tensor, got {mask.dtype.name}")
        if broadcast_shape(mask.shape, self.shape) != self.shape:
            raise ValueError(f"[core] masked_fill: mask of shape {mask.shape} does not broadcast to "
                             f"{self.shape}")
        v = value.cast(self.dtype) if isinstance(value, Tensor) else \
            Tensor(LazyBuffer.const(value, self.dtype, self.device, ()), device=self.device)
        if v.numel() != 1:
            raise ValueError(f"[core] masked_fill: value must be a scalar or a 0-d tensor, got shape "
                             f"{v.shape}")
        return mask._broadcast_to(self.shape).where(v.reshape(()), self)

    def _tri(self: Tensor, diagonal: builtins.int, lower: builtins.bool) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"[core] tril/triu: need a tensor of at least 2 dims, got shape {self.shape}")
        n, m = self.shape[-2:]
        col_minus_row = index_range(m, self.device).reshape(1, m) - index_range(n, self.device).reshape(n, 1)
        keep = (col_minus_row <= diagonal) if lower else (col_minus_row >= diagonal)
        return keep._broadcast_to(self.shape).where(self, Tensor(0, device=self.device, dtype=self.dtype))

    def tril(self: Tensor, diagonal: builtins.int = 0) -> Tensor:
        """The lower triangle of the last two dims (elements with col - row <= diagonal), zeros elsewhere.

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).tril().tolist(), Tensor([[1, 2], [3, 4]]).tril(-1).tolist()
            ([[1, 0, 0], [4, 5, 0]], [[0, 0], [3, 0]])
        """
        return self._tri(diagonal, True)

    def triu(self: Tensor, diagonal: builtins.int = 0) -> Tensor:
        """The upper triangle of the last two dims (elements with col - row >= diagonal), zeros elsewhere.

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).triu().tolist(), Tensor([[1, 2], [3, 4]]).triu(1).tolist()
            ([[1, 2, 3], [0, 5, 6]], [[0, 2], [0, 0]])
        """
        return self._tri(diagonal, False)

    @_view_op
    def diagonal(self: Tensor, offset: builtins.int = 0, dim1: builtins.int = 0,
                 dim2: builtins.int = 1) -> Tensor:
        """The diagonal of the (dim1, dim2) planes, `offset` above the main one (below when negative), as a
        new last dim (a view, as in torch).

            >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
            >>> x.diagonal().tolist(), x.diagonal(1).tolist(), x.diagonal(-1).tolist()
            ([1, 5], [2, 6], [4])
        """
        d1, d2 = self._axis(dim1), self._axis(dim2)
        if d1 == d2:
            raise ValueError(f"[core] diagonal: dim1 and dim2 are the same dim ({dim1})")
        rest = [i for i in range(self.ndim) if i not in (d1, d2)]
        x = self.permute(rest + [d1, d2])
        n, m = x.shape[-2:]
        rows, cols = (0, n), (0, m)
        rows = (min(-offset, n), n) if offset < 0 else rows
        cols = (min(offset, m), m) if offset > 0 else cols
        k = max(0, min(rows[1] - rows[0], cols[1] - cols[0]))
        lead = x.shape[:-2]
        x = x._shrink(tuple((0, s) for s in lead) + ((rows[0], rows[0] + k), (cols[0], cols[0] + k)))
        # element (i, i) of the k x k block sits at i * (k + 1) of its flattened form
        x = x.reshape(lead + (k * k,)).pad(((0, 0),) * len(lead) + ((0, k),)).reshape(lead + (k, k + 1))
        return x._shrink(tuple((0, s) for s in lead) + ((0, k), (0, 1))).reshape(lead + (k,))

    def diag(self: Tensor, diagonal: builtins.int = 0) -> Tensor:
        """torch.diag: a 1-d tensor becomes a square matrix with it on the `diagonal`-th diagonal; a 2-d
        tensor gives that diagonal.

            >>> Tensor([1, 2]).diag().tolist(), Tensor([[1, 2], [3, 4]]).diag().tolist()
            ([[1, 0], [0, 2]], [1, 4])
            >>> Tensor([5]).diag(1).tolist()
            [[0, 5], [0, 0]]
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ValueError(f"[core] diag: expected a 1-d or 2-d tensor, got shape {self.shape}")
        n, k = self.shape[0], abs(diagonal)
        # (n, 1) padded to rows of n + 1 and flattened: the values land n + 1 apart, on the diagonal
        x = self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1))._shrink(((0, n * n),)).reshape(n, n)
        return x.pad(((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k)))

    @autocast_op
    def trace(self: Tensor) -> Tensor:
        """The sum of the main diagonal of a 2-d tensor (int tensors give int64, as sum does).

            >>> Tensor([[1, 2], [3, 4]]).trace().item()
            5
        """
        if self.ndim != 2:
            raise ValueError(f"[core] trace: expected a 2-d tensor, got shape {self.shape}")
        return self.diagonal().sum()

    def index_select(self: Tensor, dim: builtins.int, index: Tensor) -> Tensor:
        """The slices along dim at the positions in the 1-d int tensor index.

            >>> Tensor([[1, 2, 3]]).index_select(1, Tensor([2, 0])).tolist()
            [[3, 1]]
        """
        if index.ndim > 1:
            raise ValueError(f"[core] index_select: index must be 0-d or 1-d, got shape {index.shape}")
        return self[(slice(None),) * self._axis(dim) + (index.reshape(-1),)]

    def take(self: Tensor, index: Tensor) -> Tensor:
        """The elements of the flattened tensor at index, in index's shape.

            >>> Tensor([[1, 2], [3, 4]]).take(Tensor([[3, 0]])).tolist()
            [[4, 1]]
        """
        return self.reshape(-1)[index]

    def take_along_dim(self: Tensor, indices: Tensor, dim: builtins.int | None = None) -> Tensor:
        """gather() with the other dims broadcast between self and indices; with dim None, of the
        flattened tensor at the flattened indices (numpy's take_along_axis).

            >>> Tensor([[10, 30, 20]]).take_along_dim(Tensor([[1], [2]]), dim=1).tolist()
            [[30], [20]]
        """
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        d = self._axis(dim)
        if indices.ndim != self.ndim:
            raise ValueError(f"[core] take_along_dim: indices have {indices.ndim} dims, input {self.ndim}")
        shape = broadcast_shape(tuple(s for i, s in enumerate(self.shape) if i != d),
                                tuple(s for i, s in enumerate(indices.shape) if i != d))
        grow = list(shape)

        def fit(t: Tensor) -> Tensor:
            return t.expand(*(grow[:d] + [t.shape[d]] + grow[d:]))
        return fit(self).gather(d, fit(indices))

    def _scattered(self: Tensor, dim: builtins.int, index: Tensor, src: Any,
                   last_wins: builtins.bool) -> tuple[Tensor, Tensor]:
        """(hit, summed): for scatter along dim, whether each position of self is written and the sum of
        the src values written there (only the last write along dim of a duplicate index with last_wins,
        torch's CPU order); both in self's shape."""
        d = self._axis(dim)
        if not isinstance(index, Tensor) or not index.dtype.is_int or index.ndim != self.ndim:
            raise TypeError(f"[core] scatter: index must be an int tensor with {self.ndim} dims")
        indexing.check_bounds(index, self.shape[d])
        n = self.shape[d]
        src = src._shrink(tuple((0, s) for s in index.shape)) if isinstance(src, Tensor) else \
            Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
        onehot = indexing.as_index(index).unsqueeze(-1) == index_range(n, self.device)    # (*index, n)
        if last_wins:
            order = index_range(index.shape[d], self.device).reshape(
                tuple(-1 if i == d else 1 for i in range(index.ndim + 1)))
            onehot = onehot & (order == onehot.where(order, -1).amax(d, keepdim=True))
        hit = onehot.any(d).unsqueeze(d).transpose(d, -1).squeeze(-1)          # index's shape, n at d
        summed = onehot.where(src.cast(self.dtype).unsqueeze(-1), 0).sum(d).unsqueeze(d).transpose(d, -1)
        summed = summed.squeeze(-1).cast(self.dtype)
        pads = tuple((0, s - hs) if i != d else (0, 0)
                     for i, (s, hs) in enumerate(zip(self.shape, hit.shape)))
        return hit.pad(pads, value=False), summed.pad(pads)

    def scatter(self: Tensor, dim: builtins.int, index: Tensor, src: Any = None, *,
                value: Any = None) -> Tensor:
        """A copy of self with src's elements (or the scalar value) written along dim at the positions in
        index: for dim=1, out[i][index[i][j]] = src[i][j] (torch.scatter; a position named twice gets the
        last of its values along dim, as torch's CPU kernel writes them in order).

            >>> Tensor.zeros(2, 3).scatter(1, Tensor([[2], [0]]), 1.0).tolist()
            [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
        """
        hit, written = self._scattered(dim, index, value if src is None else src, last_wins=True)
        return hit.where(written, self)

    @autocast_op
    def scatter_add(self: Tensor, dim: builtins.int, index: Tensor, src: Tensor) -> Tensor:
        """A copy of self with src's elements added along dim at the positions in index (repeats add up).

            >>> Tensor.zeros(3).scatter_add(0, Tensor([0, 0, 2]), Tensor([1.0, 2.0, 5.0])).tolist()
            [3.0, 0.0, 5.0]
        """
        return self + self._scattered(dim, index, src, last_wins=False)[1]

    def index_add(self: Tensor, dim: builtins.int, index: Tensor, source: Tensor, *,
                  alpha: Any = 1) -> Tensor:
        """A copy of self plus alpha * source's slices along dim at the positions in index.

            >>> Tensor([1, 1, 1]).index_add(0, Tensor([0, 0, 2]), Tensor([1, 2, 3])).tolist()
            [4, 1, 4]
        """
        return indexing.index_add(self, dim, index, source, alpha)

    def index_fill(self: Tensor, dim: builtins.int, index: Tensor, value: Any) -> Tensor:
        """A copy of self with value at the positions in index along dim.

            >>> Tensor([[1, 2, 3]]).index_fill(1, Tensor([0, 2]), -1).tolist()
            [[-1, 2, -1]]
        """
        return indexing.index_fill(self, dim, index, value)

    @autocast_op
    def index_copy(self: Tensor, dim: builtins.int, index: Tensor, source: Tensor) -> Tensor:
        """A copy of self with source's slices along dim written at the positions in index.

            >>> Tensor([0, 0, 0]).index_copy(0, Tensor([2]), Tensor([5])).tolist()
            [0, 0, 5]
        """
        return indexing.index_copy(self, dim, index, source)

    @autocast_op
    def index_put(self: Tensor, indices: Any, values: Any, accumulate: builtins.bool = False) -> Tensor:
        """A copy of self with values written at the positions `indices` names (a tuple of index
        tensors, one per leading dim; None means a whole dim); accumulate=True adds instead, and
        duplicates add up. Without accumulate, the last write of a duplicate index wins.

            >>> Tensor([0, 0, 0]).index_put((Tensor([0, 2]),), Tensor([5, 7])).tolist()
            [5, 0, 7]
        """
        return indexing.index_put(self, indices, values, accumulate)

    def index_put_(self: Tensor, indices: Any, values: Any, accumulate: builtins.bool = False) -> Tensor:
        """index_put written into self's memory (a lazy assign); returns self."""
        self._check_inplace("index_put_", values)
        return self.assign(indexing.index_put(self, indices, values, accumulate))

    def index_add_(self: Tensor, dim: builtins.int, index: Tensor, source: Tensor, *,
                   alpha: Any = 1) -> Tensor:
        """index_add written into self's memory; returns self."""
        self._check_inplace("index_add_", source)
        return self.assign(indexing.index_add(self, dim, index, source, alpha))

    def index_fill_(self: Tensor, dim: builtins.int, index: Tensor, value: Any) -> Tensor:
        """index_fill written into self's memory; returns self."""
        self._check_inplace("index_fill_", value)
        return self.assign(indexing.index_fill(self, dim, index, value))

    def index_copy_(self: Tensor, dim: builtins.int, index: Tensor, source: Tensor) -> Tensor:
        """index_copy written into self's memory; returns self."""
        self._check_inplace("index_copy_", source)
        return self.assign(indexing.index_copy(self, dim, index, source))
