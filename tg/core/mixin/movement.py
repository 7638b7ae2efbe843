"""MovementMixin, a part of the Tensor class: reshapes, permutes, expands, slices, padding,
concatenation, splits and torch's other views and rearrangements (torch's view ops are marked
`_view_op`). tg/core/tensor.py builds Tensor from the mixins and binds `Tensor` here once the class
exists (see tg/core/mixin/__init__.py)."""
from __future__ import annotations

import builtins
import itertools
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tg.core import function as F
from tg.core.autocast import autocast_op
from tg.core.dtype import (
    dtypes,
    promote_types,
)
from tg.core.mixin.base import _argfix, _view_op, apply
from tg.core.shape import prod

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


class MovementMixin:
    __slots__ = ()

    @_view_op
    def reshape(self: Tensor, *shape: Any) -> Tensor:
        """The same elements, in row-major order, in a new shape given as ints or one tuple; one size may
        be -1 to be inferred. `view` is another name for it, so unlike torch's view it also takes a
        non-contiguous tensor (a transpose, say).

            >>> Tensor.arange(6).reshape(2, 3).tolist()
            [[0, 1, 2], [3, 4, 5]]
            >>> Tensor.arange(6).view(-1, 2).shape
            (3, 2)
        """
        new = _argfix(*shape)
        if sum(1 for s in new if s == -1) > 1:
            raise ValueError(f"[core] reshape: only one dimension can be -1, got {new}")
        known = prod(s for s in new if s != -1)
        if -1 in new:
            if known == 0 or self.numel() % known:
                raise ValueError(
                    f"[core] reshape: cannot reshape {self.shape} ({self.numel()} elements) into {new}"
                )
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if any(not isinstance(s, (int, np.integer)) or s < 0 for s in new):
            raise ValueError(f"[core] reshape: sizes must be non-negative ints, got {new}")
        new = tuple(int(s) for s in new)
        if prod(new) != self.numel():
            raise ValueError(f"[core] reshape: cannot reshape {self.shape} ({self.numel()} elements) into "
                             f"{new} ({prod(new)} elements)")
        if new == self.shape:
            return self
        return apply(F.Reshape, self, shape=new)
    view = reshape

    @_view_op
    def permute(self: Tensor, *order: Any) -> Tensor:
        """The dims in a new order, as a view: dim i of the result is dim order[i] of self.

            >>> Tensor.zeros(1, 2, 3).permute(2, 0, 1).shape
            (3, 1, 2)
        """
        order = tuple(self._axis(o) for o in _argfix(*order))
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"[core] permute: {order} is not a permutation of {self.ndim} dims")
        return apply(F.Permute, self, order=order)

    @_view_op
    def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dims, as a view. Without arguments it swaps dims 0 and 1 (torch requires both).

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).transpose(0, 1).tolist()
            [[1, 4], [2, 5], [3, 6]]
        """
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @_view_op
    def t(self: Tensor) -> Tensor:
        """The transpose of a tensor of at most 2 dims (0-d and 1-d come back as they are), as torch.t.

            >>> Tensor([[1, 2, 3]]).t().shape, Tensor([1, 2]).t().shape
            ((3, 1), (2,))
        """
        if self.ndim > 2:
            raise ValueError(f"[core] t: expects a tensor of at most 2 dims, got shape {self.shape}; use "
                             f"transpose")
        return self if self.ndim < 2 else self.transpose(0, 1)

    @_view_op
    def view_as(self: Tensor, other: Tensor) -> Tensor:
        """This tensor reshaped to other's shape.

            >>> Tensor([1, 2, 3, 4]).view_as(Tensor.zeros(2, 2)).tolist()
            [[1, 2], [3, 4]]
        """
        return self.reshape(other.shape)

    @_view_op
    def expand(self: Tensor, *shape: Any) -> Tensor:
        """Broadcast dims of size 1 to a larger size without copying; -1 keeps a dim's size and new dims
        may be added in front, as in torch.

            >>> Tensor([[1], [2]]).expand(-1, 3).tolist()
            [[1, 1, 1], [2, 2, 2]]
            >>> Tensor([1, 2]).expand(2, 2).tolist()
            [[1, 2], [1, 2]]
        """
        new = _argfix(*shape)
        if len(new) < self.ndim:
            raise ValueError(f"[core] expand: target {new} has fewer dims than {self.shape}")
        old = (1,) * (len(new) - self.ndim) + self.shape
        out = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, out):
            if o != n and o != 1:
                raise ValueError(f"[core] expand: cannot expand {self.shape} to {new}: size {o} is not 1")
        return self.reshape(old)._expand(out)

    def _expand(self: Tensor, shape: tuple[int, ...]) -> Tensor:
        return self if shape == self.shape else apply(F.Expand, self, shape=shape)

    @_view_op
    def expand_as(self: Tensor, other: Tensor) -> Tensor:
        """expand() to other's shape.

            >>> Tensor([1, 2]).expand_as(Tensor.zeros(3, 2)).tolist()
            [[1, 2], [1, 2], [1, 2]]
        """
        return self.expand(other.shape)

    def pad(self: Tensor, padding: Sequence[Any], value: float = 0.0) -> Tensor:
        """Pad with `value`: pad((l, r)) pads the last dim and (l, r, t, b) the last two, in torch F.pad's
        order (last dim first); pad(((b0, a0), (b1, a1), ...)) gives (before, after) for each dim in
        order, None for a dim left alone. Negative sizes cut elements off.

            >>> Tensor([1, 2, 3]).pad((1, 2)).tolist()
            [0, 1, 2, 3, 0, 0]
            >>> Tensor([[1, 2], [3, 4]]).pad(((1, 0), (0, 1)), value=9).tolist()
            [[9, 9, 9], [1, 2, 9], [3, 4, 9]]
        """
        if padding and all(isinstance(p, (tuple, list)) or p is None for p in padding):
            if len(padding) != self.ndim:
                raise ValueError(f"[core] pad: got {len(padding)} (before, after) pairs for {self.ndim} dims")
            arg = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        else:
            flat = list(padding)
            if len(flat) % 2 or len(flat) // 2 > self.ndim:
                raise ValueError(
                    f"[core] pad: expected an even number of sizes for at most {self.ndim} dims, got {flat}"
                )
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
            arg = tuple([(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs)))
        if all(p == (0, 0) for p in arg):
            return self._fresh()
        shrink = tuple((max(0, -b), s + min(0, a)) for (b, a), s in zip(arg, self.shape))
        if any(lo > hi for lo, hi in shrink):
            raise ValueError(f"[core] pad: negative padding {arg} removes more than the shape {self.shape}")
        x = self._shrink(shrink)
        grow = tuple((max(0, b), max(0, a)) for b, a in arg)
        if all(g == (0, 0) for g in grow):
            return x
        out = apply(F.Pad, x, arg=grow)
        if value != 0:
            mask = apply(F.Pad, Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device), arg=grow)
            # as torch, the value takes the tensor's dtype (1.5 pads an int tensor with 1), never the reverse
            kind = builtins.bool if self.dtype == dtypes.bool else builtins.float if self.dtype.is_float \
                else builtins.int
            out = mask.where(out, kind(value))
        return out

    def _shrink(self: Tensor, arg: tuple[tuple[int, int], ...]) -> Tensor:
        if all(a == (0, s) for a, s in zip(arg, self.shape)):
            return self
        return apply(F.Shrink, self, arg=arg)

    def shrink(self: Tensor, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep the range [lo, hi) of each dim (None keeps the whole dim), as a view: a slice with step 1.

            >>> Tensor.arange(12).reshape(3, 4).shrink(((1, 3), None)).tolist()
            [[4, 5, 6, 7], [8, 9, 10, 11]]
        """
        full = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
        for (lo, hi), s in zip(full, self.shape):
            if not 0 <= lo <= hi <= s:
                raise ValueError(f"[core] shrink: range ({lo}, {hi}) is outside a dim of size {s}")
        return self._shrink(full)

    def flip(self: Tensor, *dims: Any) -> Tensor:
        """Reverse the order of the elements along the given dims.

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.flip(0).tolist(), x.flip(0, 1).tolist()
            ([[3, 4], [1, 2]], [[4, 3], [2, 1]])
        """
        axes = self._axes(_argfix(*dims))
        return apply(F.Flip, self, axes=tuple(i in axes for i in range(self.ndim)))

    @_view_op
    def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
        """Drop dims of size 1: all of them, or only `dim` (an int or a tuple of them); a named dim whose
        size is not 1 is left alone, as in torch.

            >>> x = Tensor.zeros(1, 3, 1)
            >>> x.squeeze().shape, x.squeeze(0).shape, x.squeeze(1).shape, x.squeeze((0, 2)).shape
            ((3,), (3, 1), (1, 3, 1), (3,))
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        if self.ndim == 0:
            return self
        drop = {d for d in self._axes(dim) if self.shape[d] == 1}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in drop))

    @_view_op
    def unsqueeze(self: Tensor, dim: int) -> Tensor:
        """Insert a dim of size 1 at position `dim` of the result (a negative dim counts from its end).

            >>> x = Tensor([1, 2, 3])
            >>> x.unsqueeze(0).shape, x.unsqueeze(-1).shape
            ((1, 3), (3, 1))
        """
        d = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    @_view_op
    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim (both included) into one; a 0-d tensor becomes shape (1,).

            >>> x = Tensor.zeros(2, 3, 4)
            >>> x.flatten().shape, x.flatten(1).shape
            ((24,), (2, 12))
        """
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    @_view_op
    def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dim `dim` into dims of the given sizes (one may be -1): the inverse of flatten.

            >>> Tensor.zeros(2, 12).unflatten(1, (3, -1)).shape
            (2, 3, 4)
        """
        d = self._axis(dim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def repeat(self: Tensor, *repeats: Any) -> Tensor:
        """Tile the tensor: dim i is repeated repeats[i] times, and extra leading repeats add dims (torch's
        repeat, numpy's tile).

            >>> Tensor([1, 2]).repeat(2, 3).tolist()
            [[1, 2, 1, 2, 1, 2], [1, 2, 1, 2, 1, 2]]
        """
        reps = _argfix(*repeats)
        if len(reps) < self.ndim:
            raise ValueError(f"[core] repeat: {len(reps)} repeats for {self.ndim} dims")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(base)
        # (.., 1, s, ..) -> (.., r, s, ..) -> (.., r*s, ..)
        expanded = x.reshape(tuple(v for s in base for v in (1, s))).expand(
            tuple(v for r, s in zip(reps, base) for v in (r, s)))
        return expanded.reshape(tuple(r * s for r, s in zip(reps, base)))

    @autocast_op
    def cat(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Join self and the others along the existing dim `dim`, promoting dtypes as torch.cat does (a
        method here: the first tensor is self).

            >>> Tensor([1, 2]).cat(Tensor([3]), Tensor([4, 5])).tolist()
            [1, 2, 3, 4, 5]
            >>> Tensor([[1, 2]]).cat(Tensor([[3, 4]]), dim=1).tolist()
            [[1, 2, 3, 4]]
        """
        tensors = [self, *others]
        d = self._axis(dim)
        for t in tensors:
            if t.ndim != self.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d
            ):
                raise ValueError(f"[core] cat: shapes {[t.shape for t in tensors]} differ outside dim {d}")
        dt = tensors[0].dtype
        for t in tensors[1:]:
            dt = promote_types(dt, t.dtype)
            if t.device != self.device:
                raise ValueError(f"[core] cat: tensors on different devices ({self.device} and {t.device}); "
                                 "move them to one with .to()")
        return apply(F.Cat, *(t.cast(dt) for t in tensors), dim=d)

    @staticmethod
    @autocast_op
    def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        """Join tensors of one shape along a new dim `dim`.

            >>> a, b = Tensor([1, 2]), Tensor([3, 4])
            >>> Tensor.stack([a, b]).tolist(), Tensor.stack([a, b], dim=1).tolist()
            ([[1, 2], [3, 4]], [[1, 3], [2, 4]])
        """
        if not tensors:
            raise ValueError("[core] stack: needs at least one tensor")
        d = tensors[0]._axis(dim, tensors[0].ndim + 1)
        parts = [t.unsqueeze(d) for t in tensors]
        return parts[0].cat(*parts[1:], dim=d)

    @_view_op
    def split(self: Tensor, split_size: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Consecutive pieces along `dim`, as views: pieces of split_size (the last may be shorter) or of
        each size in a list.

            >>> [t.tolist() for t in Tensor.arange(5).split(2)]
            [[0, 1], [2, 3], [4]]
            >>> [t.tolist() for t in Tensor.arange(5).split([1, 4])]
            [[0], [1, 2, 3, 4]]
        """
        d = self._axis(dim)
        n = self.shape[d]
        if isinstance(split_size, int):
            if split_size <= 0:
                raise ValueError(f"[core] split: split_size must be positive, got {split_size}")
            sizes = [min(split_size, n - i) for i in range(0, n, split_size)] or [0]
        else:
            sizes = list(split_size)
            if sum(sizes) != n:
                raise ValueError(f"[core] split: sizes {sizes} sum to {sum(sizes)}, dim {d} has {n}")
        out, start = [], 0
        for s in sizes:
            arg = [(0, k) for k in self.shape]
            arg[d] = (start, start + s)
            out.append(self._shrink(tuple(arg)))
            start += s
        return tuple(out)

    @_view_op
    def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into pieces of ceil(n / chunks); as in torch, that can give fewer than `chunks`.

            >>> [t.tolist() for t in Tensor.arange(6).chunk(4)]
            [[0, 1], [2, 3], [4, 5]]
        """
        if chunks <= 0:
            raise ValueError(f"[core] chunk: chunks must be positive, got {chunks}")
        n = self.shape[self._axis(dim)]
        return self.split(max(math.ceil(n / chunks), 1), dim)
    swapaxes = transpose
    swapdims = transpose
    @_view_op
    def movedim(self: Tensor, source: Any, destination: Any) -> Tensor:
        """The dims `source` (an int or a tuple) moved to positions `destination`, the others keeping their
        order (torch.movedim, numpy's moveaxis).

            >>> Tensor.zeros(2, 3, 4).movedim(0, -1).shape
            (3, 4, 2)
        """
        src = self._axes(source if isinstance(source, (tuple, list)) else (source,))
        dst = self._axes(destination if isinstance(destination, (tuple, list)) else (destination,))
        if len(src) != len(dst):
            raise ValueError(f"[core] movedim: {len(src)} source dims but {len(dst)} destinations")
        order = [i for i in range(self.ndim) if i not in src]
        for d, s in builtins.sorted(zip(dst, src)):
            order.insert(d, s)
        return self.permute(order)
    moveaxis = movedim

    @_view_op
    def reshape_as(self: Tensor, other: Tensor) -> Tensor:
        """reshape(other.shape).

            >>> Tensor.zeros(6).reshape_as(Tensor.zeros(2, 3)).shape
            (2, 3)
        """
        return self.reshape(other.shape)

    def ravel(self: Tensor) -> Tensor:
        """The elements as a 1-d tensor (reshape(-1)).

            >>> Tensor([[1, 2], [3, 4]]).ravel().tolist()
            [1, 2, 3, 4]
        """
        return self.reshape(-1)

    @property
    @_view_op
    def mT(self: Tensor) -> Tensor:  # noqa: N802  (torch's name)
        """The last two dims swapped (a batch of matrices transposed).

            >>> Tensor.zeros(5, 2, 3).mT.shape
            (5, 3, 2)
        """
        return self.transpose(-2, -1)

    @_view_op
    def broadcast_to(self: Tensor, *shape: Any) -> Tensor:
        """expand() to `shape` (torch.broadcast_to).

            >>> Tensor([1, 2]).broadcast_to((2, 2)).tolist()
            [[1, 2], [1, 2]]
        """
        return self.expand(*shape)

    def tile(self: Tensor, *dims: Any) -> Tensor:
        """repeat() whose counts may be fewer than the dims (1s are put in front) or more (the tensor gets
        leading dims of size 1), as torch.tile.

            >>> Tensor([1, 2]).tile(2).tolist(), Tensor([1, 2]).tile((2, 1)).tolist()
            ([1, 2, 1, 2], [[1, 2], [1, 2]])
        """
        reps = _argfix(*dims)
        reps = (1,) * (self.ndim - len(reps)) + tuple(reps)
        return self.reshape((1,) * (len(reps) - self.ndim) + self.shape).repeat(reps)

    def repeat_interleave(self: Tensor, repeats: Any, dim: builtins.int | None = None) -> Tensor:
        """Each element repeated `repeats` times in place along dim (the flattened tensor when None);
        repeats may be a tensor of counts, one per element (read to the host).

            >>> x = Tensor([1, 2])
            >>> x.repeat_interleave(2).tolist(), x.repeat_interleave(Tensor([0, 3])).tolist()
            ([1, 1, 2, 2], [2, 2, 2])
        """
        x, d = (self.reshape(-1), 0) if dim is None else (self, self._axis(dim))
        if isinstance(repeats, Tensor) and repeats.numel() == 1:
            repeats = builtins.int(repeats.item())
        if isinstance(repeats, Tensor):
            picks = np.repeat(np.arange(x.shape[d]), repeats.numpy().reshape(-1))
            return x.index_select(d, Tensor(picks.astype(np.int64), device=self.device))
        grown = x.unsqueeze(d + 1)
        grown = grown.expand(*grown.shape[:d + 1], repeats, *grown.shape[d + 2:])
        return grown.flatten(d, d + 1)

    def roll(self: Tensor, shifts: Any, dims: Any = None) -> Tensor:
        """Elements shifted along dims (the flattened tensor when None), wrapping around the end.

            >>> Tensor([1, 2, 3, 4]).roll(1).tolist(), Tensor([[1, 2], [3, 4]]).roll(1, 0).tolist()
            ([4, 1, 2, 3], [[3, 4], [1, 2]])
        """
        if dims is None:
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
        dims = dims if isinstance(dims, (tuple, list)) else (dims,)
        if len(shifts) != len(dims):
            raise ValueError(f"[core] roll: {len(shifts)} shifts for {len(dims)} dims")
        x = self
        for shift, dim in zip(shifts, dims):
            d = x._axis(dim)
            n = x.shape[d]
            s = shift % n if n else 0
            if s:
                x = x.narrow(d, n - s, s).cat(x.narrow(d, 0, n - s), dim=d)
        return x

    def fliplr(self: Tensor) -> Tensor:
        """flip(1): columns in reverse order.

            >>> Tensor([[1, 2]]).fliplr().tolist()
            [[2, 1]]
        """
        return self.flip(1)

    def flipud(self: Tensor) -> Tensor:
        """flip(0): rows in reverse order.

            >>> Tensor([[1], [2]]).flipud().tolist()
            [[2], [1]]
        """
        return self.flip(0)

    def rot90(self: Tensor, k: builtins.int = 1, dims: Sequence[builtins.int] = (0, 1)) -> Tensor:
        """Rotated by 90 degrees k times, from dims[0] toward dims[1] (torch.rot90, numpy's rot90).

            >>> Tensor([[1, 2], [3, 4]]).rot90().tolist()
            [[2, 4], [1, 3]]
        """
        d0, d1 = dims
        k %= 4
        if k == 0:
            return self
        if k == 2:
            return self.flip(d0, d1)
        return self.flip(d1).transpose(d0, d1) if k == 1 else self.transpose(d0, d1).flip(d1)

    @_view_op
    def tensor_split(self: Tensor, indices_or_sections: Any, dim: builtins.int = 0) -> tuple[Tensor, ...]:
        """Pieces along dim: n sections as equal as can be (the first ones one longer), or cut at the
        given indices (torch.tensor_split, numpy's array_split).

            >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).tensor_split(2)]
            [[1, 2, 3], [4, 5]]
        """
        d = self._axis(dim)
        n = self.shape[d]
        cut = indices_or_sections
        cut = cut.tolist() if isinstance(cut, Tensor) else cut
        if isinstance(cut, builtins.int):
            size, extra = divmod(n, cut)
            cut = list(itertools.accumulate(size + (i < extra) for i in range(cut - 1)))
        bounds = [0] + [builtins.min(builtins.max(c % n if c < 0 else c, 0), n) for c in cut] + [n]
        return tuple(self.narrow(d, a, builtins.max(b - a, 0)) for a, b in zip(bounds, bounds[1:]))

    @_view_op
    def unbind(self: Tensor, dim: builtins.int = 0) -> tuple[Tensor, ...]:
        """The slices along dim, each without it.

            >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind(1)]
            [[1, 3], [2, 4]]
        """
        d = self._axis(dim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    @_view_op
    def narrow(self: Tensor, dim: builtins.int, start: Any, length: builtins.int) -> Tensor:
        """The `length` elements from `start` along dim (a view).

            >>> Tensor([1, 2, 3, 4]).narrow(0, 1, 2).tolist()
            [2, 3]
        """
        d = self._axis(dim)
        n = self.shape[d]
        start = builtins.int(start.item() if isinstance(start, Tensor) else start)
        start = start + n if start < 0 else start
        if not (0 <= start <= n and 0 <= length <= n - start):
            raise ValueError(f"[core] narrow: start {start} and length {length} do not fit dim {dim} of "
                             f"size {n}")
        return self._shrink(tuple((start, start + length) if i == d else (0, s)
                                  for i, s in enumerate(self.shape)))

    @_view_op
    def select(self: Tensor, dim: builtins.int, index: builtins.int) -> Tensor:
        """The slice at `index` along dim, without that dim (x.select(1, 2) is x[:, 2]).

            >>> Tensor([[1, 2], [3, 4]]).select(1, 0).tolist()
            [1, 3]
        """
        return self[(slice(None),) * self._axis(dim) + (index,)]
