"""Views: movement ops never copy. A ShapeTracker is a stack of Views; the last view is what the
user sees, and each view addresses the contiguous layout of the view before it. Turning an output
index into a buffer index (and a validity condition, for padding) is done symbolically:

    >>> st = ShapeTracker.from_shape((4, 6)).permute((1, 0)).shrink(((1, 3), (0, 4)))
    >>> idx, valid = st.expr_idxs([Var("a", 0, 1), Var("b", 0, 3)])
    >>> idx.render(), valid.render()
    ('(a+(b*6)+1)', '1')
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

from tg.core.symbolic import Ge, Lt, Node, Var, affine_coeffs, ands, cached_property, ge, lt, num

Shape = tuple[int, ...]


def prod(xs) -> int:
    return math.prod(xs)


# movement results kept (ShapeTracker._made): a few training steps' worth; the table is emptied when full
MOVE_MEMO = 4096
_MOVES: dict[tuple, tuple[ShapeTracker, ShapeTracker]] = {}


@functools.lru_cache(maxsize=1 << 14)
def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(strides))


@dataclass(frozen=True)
class View:
    shape: Shape
    strides: tuple[int, ...]
    offset: int = 0
    mask: tuple[tuple[int, int], ...] | None = None

    @staticmethod
    def create(shape: Shape, strides: Sequence[int] | None = None, offset: int = 0,
               mask: tuple[tuple[int, int], ...] | None = None) -> View:
        shape = tuple(map(int, shape))
        if strides is None:
            strides = contiguous_strides(shape)
        else:
            strides = tuple([0 if s == 1 else int(st) for s, st in zip(shape, strides)])
        if mask is not None:
            if any(lo >= hi for lo, hi in mask):  # nothing valid: a view of zeros
                return View(shape, (0,) * len(shape), 0, tuple((0, 0) for _ in shape))
            if all(lo == 0 and hi == s for (lo, hi), s in zip(mask, shape)):
                mask = None
        return View(shape, strides, int(offset), mask)

    @cached_property
    def contiguous(self) -> bool:
        return self.offset == 0 and self.mask is None and self.strides == contiguous_strides(self.shape)

    def expr(self, idxs: Sequence[Node]) -> tuple[Node, Node]:
        idx: Node = num(self.offset)
        for i, st in zip(idxs, self.strides):
            if st:
                idx = idx + i * st
        conds: list[Node] = []
        if self.mask is not None:
            for i, (lo, hi), s in zip(idxs, self.mask, self.shape):
                if lo > 0:
                    conds.append(ge(i, lo))
                if hi < s:
                    conds.append(lt(i, hi))
        return idx, ands(conds)

    # ---- movement, each returning a View (reshape may fail and return None)
    def permute(self, order: tuple[int, ...]) -> View:
        mask = tuple(self.mask[o] for o in order) if self.mask else None
        return View.create(tuple(self.shape[o] for o in order), tuple(self.strides[o] for o in order),
                           self.offset, mask)

    def expand(self, shape: Shape) -> View:
        mask = None
        if self.mask:
            mask = tuple(m if s == ns else ((0, ns) if m != (0, 0) else (0, 0))
                         for m, s, ns in zip(self.mask, self.shape, shape))
        return View.create(shape, self.strides, self.offset, mask)

    def pad(self, arg: tuple[tuple[int, int], ...]) -> View:
        shape = tuple(s + b + a for s, (b, a) in zip(self.shape, arg))
        offset = self.offset - sum(b * st for (b, _), st in zip(arg, self.strides))
        old = self.mask or tuple((0, s) for s in self.shape)
        mask = tuple((lo + b, hi + b) for (lo, hi), (b, _) in zip(old, arg))
        return View.create(shape, self.strides, offset, mask)

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> View:
        offset = self.offset + sum(lo * st for (lo, _), st in zip(arg, self.strides))
        mask = None
        if self.mask:
            mask = tuple(
                (max(0, mlo - lo), min(hi - lo, mhi - lo)) for (mlo, mhi), (lo, hi) in zip(self.mask, arg)
            )
            mask = tuple((lo, max(lo, hi)) for lo, hi in mask)
        return View.create(tuple(hi - lo for lo, hi in arg), self.strides, offset, mask)

    def flip(self, axes: tuple[bool, ...]) -> View:
        offset = self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, axes) if f)
        strides = tuple(-st if f else st for st, f in zip(self.strides, axes))
        mask = None
        if self.mask:
            mask = tuple(
                (s - hi, s - lo) if f else (lo, hi) for (lo, hi), s, f in zip(self.mask, self.shape, axes)
            )
        return View.create(self.shape, strides, offset, mask)

    def reshape(self, new_shape: Shape) -> View | None:
        if self.shape == new_shape:
            return self
        if prod(self.shape) == 0:
            return View.create(new_shape)
        if self.contiguous:
            return View.create(new_shape)
        if self.mask is not None:
            # Only adding or removing size-1 dims keeps a mask expressible.
            if tuple(s for s in self.shape if s != 1) != tuple(s for s in new_shape if s != 1):
                return None
            kept = [(m, st) for s, m, st in zip(self.shape, self.mask, self.strides) if s != 1]
            if any(m != (0, 1) for s, m in zip(self.shape, self.mask) if s == 1):
                return None
            it = iter(kept)
            mask, strides = [], []
            for s in new_shape:
                if s == 1:
                    mask.append((0, 1))
                    strides.append(0)
                else:
                    m, st = next(it)
                    mask.append(m)
                    strides.append(st)
            return View.create(new_shape, tuple(strides), self.offset, tuple(mask))
        new_strides = _reshape_strides(self.shape, self.strides, new_shape)
        return None if new_strides is None else View.create(new_shape, new_strides, self.offset)


def _reshape_strides(old_shape: Shape, old_strides: tuple[int, ...], new_shape: Shape) -> list[int] | None:
    """Strides that give new_shape over the same memory without a copy, or None (numpy's rule)."""
    olds = [(s, st) for s, st in zip(old_shape, old_strides) if s != 1]
    news = list(new_shape)
    out: list[int] = []
    oi = ni = 0
    while ni < len(news):
        if news[ni] == 1:
            out.append(0)
            ni += 1
            continue
        n_prod, nj = news[ni], ni + 1
        o_prod, oj = olds[oi][0], oi + 1
        while n_prod != o_prod:
            if n_prod < o_prod:
                n_prod *= news[nj]
                nj += 1
            else:
                o_prod *= olds[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if olds[k][1] != olds[k + 1][1] * olds[k + 1][0]:
                return None
        st, group = olds[oj - 1][1], []
        for k in range(nj - 1, ni - 1, -1):
            group.append(st if news[k] != 1 else 0)
            st *= news[k]
        out.extend(reversed(group))
        ni, oi = nj, oj
    return out


@functools.lru_cache(maxsize=8192)
def _compose(inner: ShapeTracker, outer: ShapeTracker) -> ShapeTracker:
    return ShapeTracker(inner.views + outer.views).simplify()


def unravel(shape: Shape, linear: Node) -> list[Node]:
    idxs, acc = [], 1
    for s in reversed(shape):
        idxs.append((linear // acc) % s)
        acc *= s
    return list(reversed(idxs))


@dataclass(frozen=True)
class ShapeTracker:
    views: tuple[View, ...]

    @staticmethod
    def from_shape(shape: Shape) -> ShapeTracker:
        return _from_shape(shape if type(shape) is tuple else tuple(shape))

    @property
    def shape(self) -> Shape:
        return self.views[-1].shape

    @property
    def size(self) -> int:
        return prod(self.shape)

    @cached_property
    def contiguous(self) -> bool:
        return len(self.views) == 1 and self.views[0].contiguous

    @cached_property
    def key(self) -> tuple:
        return tuple((v.shape, v.strides, v.offset, v.mask) for v in self.views)

    def expr_idxs(self, idxs: Sequence[Node]) -> tuple[Node, Node]:
        """(buffer index, validity) for the multi-index idxs of this tracker's shape."""
        idx, valid = self.views[-1].expr(idxs)
        for view in reversed(self.views[:-1]):
            inner_idx, inner_valid = view.expr(unravel(view.shape, idx))
            idx, valid = inner_idx, ands([valid, inner_valid])
        return idx, valid

    def variables(self) -> list[Var]:
        return [Var(f"x{d}", 0, max(s - 1, 0)) for d, s in enumerate(self.shape)]

    def __add__(self, outer: ShapeTracker) -> ShapeTracker:
        """Compose: `outer` maps its shape into this tracker's shape (as contiguous memory)."""
        if outer.contiguous and outer.shape == self.shape:
            return self
        if self.contiguous:
            return outer
        return _compose(self, outer)

    def simplify(self) -> ShapeTracker:
        """Fold the last two views into one when their composition is affine."""
        st = self
        while len(st.views) >= 2:
            merged = ShapeTracker(st.views[-2:])._as_single_view()
            if merged is None:
                break
            st = ShapeTracker(st.views[:-2] + (merged,))
        return st

    def _as_single_view(self) -> View | None:
        shape = self.shape
        if prod(shape) == 0:
            return View.create(shape)
        variables = self.variables()
        idx, valid = self.expr_idxs(list(variables))
        mask = [(0, s) for s in shape]
        if valid.is_const:
            if valid.min == 0:
                if not shape:
                    return None     # a 0-d view cannot say "nothing valid": keep the views stacked
                return View.create(shape, mask=tuple((0, 0) for _ in shape))
        else:
            for cond in (valid.nodes if hasattr(valid, "nodes") else (valid,)):
                if not isinstance(cond, (Lt, Ge)) or not isinstance(cond.a, Var):
                    return None
                d = variables.index(cond.a)
                lo, hi = mask[d]
                mask[d] = (max(lo, cond.b), hi) if isinstance(cond, Ge) else (lo, min(hi, cond.b))
        aff = affine_coeffs(idx, variables)
        if aff is None:
            return None
        strides, offset = aff
        return View.create(shape, tuple(strides), offset, tuple(mask))

    def __hash__(self) -> int:   # computed once: trackers key the scheduler's memo and sit in kernel ASTs
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self.views)
        return h

    # ---- movement ops (validated by the Tensor layer; here they only transform)
    # Trackers never change, and from_shape hands out one object per shape, so a training step asks
    # the same tracker for the same move every time: the results are kept in one bounded table, keyed
    # by the tracker's identity (no Python __hash__ on this hot path). Each entry holds the tracker
    # too, so its id cannot be reused while the entry is kept. Each method looks up the table itself
    # (one call less a hit).
    def _made(self, kind: str, arg: tuple) -> ShapeTracker:
        """A movement's result, computed and kept (the table missed)."""
        made = self._reshape(arg) if kind == "reshape" else self._on_last(getattr(self.views[-1], kind)(arg))
        if len(_MOVES) >= MOVE_MEMO:
            _MOVES.clear()
        _MOVES[(id(self), kind, arg)] = (self, made)
        return made

    def _on_last(self, view: View) -> ShapeTracker:
        st = ShapeTracker(self.views[:-1] + (view,))
        return st.simplify() if len(st.views) > 1 else st

    def permute(self, order: tuple[int, ...]) -> ShapeTracker:
        order = tuple(order)
        found = _MOVES.get((id(self), "permute", order))
        return found[1] if found is not None else self._made("permute", order)

    def expand(self, shape: Shape) -> ShapeTracker:
        shape = tuple(shape)
        found = _MOVES.get((id(self), "expand", shape))
        return found[1] if found is not None else self._made("expand", shape)

    def pad(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
        arg = tuple(map(tuple, arg))  # type: ignore[arg-type]
        found = _MOVES.get((id(self), "pad", arg))
        return found[1] if found is not None else self._made("pad", arg)

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
        arg = tuple(map(tuple, arg))  # type: ignore[arg-type]
        found = _MOVES.get((id(self), "shrink", arg))
        return found[1] if found is not None else self._made("shrink", arg)

    def flip(self, axes: tuple[bool, ...]) -> ShapeTracker:
        axes = tuple(axes)
        found = _MOVES.get((id(self), "flip", axes))
        return found[1] if found is not None else self._made("flip", axes)

    def reshape(self, shape: Shape) -> ShapeTracker:
        shape = tuple(shape)
        found = _MOVES.get((id(self), "reshape", shape))
        return found[1] if found is not None else self._made("reshape", shape)

    def _reshape(self, shape: Shape) -> ShapeTracker:
        new = self.views[-1].reshape(shape)
        if new is not None:
            return self._on_last(new)
        return ShapeTracker(self.views + (View.create(shape),)).simplify()


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of two shapes.

        >>> broadcast_shape((3, 1), (4,))
        (3, 4)
    """
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"[core] shapes {a} and {b} cannot broadcast: {x} vs {y}")
        out.append(y if x == 1 else x)
    return tuple(out)


@functools.lru_cache(maxsize=1 << 14)
def _from_shape(shape: Shape) -> ShapeTracker:
    # Trackers are immutable, so every base of one shape shares one (and its cached key).
    return ShapeTracker((View.create(shape),))
