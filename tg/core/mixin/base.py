"""What the Tensor class and its mixins share: applying a Function (`apply`), wrapping a lazy buffer
(`_wrap`), torch's view ops (`_view_op` and the view bookkeeping), `no_grad` and small helpers.

`Tensor` here (and in each mixin module) is the class tg/core/tensor.py builds from the mixins: it binds
the name once the class exists (`tg.core.mixin.bind`), as methods and helpers make Tensors.
"""
from __future__ import annotations

import builtins
import functools
import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np

from tg.core import function as F
from tg.core import indexing
from tg.core.lazy import LazyBuffer, Readers
from tg.core.shape import ShapeTracker, View, contiguous_strides, prod

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


def _argfix(*x: Any) -> tuple:
    if len(x) == 1 and isinstance(x[0], (tuple, list)):
        return tuple(x[0])
    return tuple(x)


class NoGrad:
    """`with tg.no_grad():` or `@tg.no_grad()`: no graph is recorded inside."""

    def __enter__(self) -> None:
        self.prev, Tensor.no_grad = Tensor.no_grad, True

    def __exit__(self, *exc: Any) -> None:
        Tensor.no_grad = self.prev

    def __call__(self, fn: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with NoGrad():
                return fn(*args, **kwargs)
        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


def apply(fn: type[F.Function], *x: Tensor, **kwargs: Any) -> Tensor:
    """Run a primitive Function forward on the tensors' lazy buffers; the result remembers the
    Function (and so its inputs) for backward when any input requires grad."""
    ctx = fn(x[0].lazydata.device, *x)
    out = ctx.forward(*[t.lazydata for t in x], **kwargs)
    if out is x[0].lazydata and fn is not F.Contiguous:
        # an op that changes nothing here (a sum over dims of size 1) still makes a new tensor, as torch's:
        # one over the input's memory that keeps its values when that memory is written (alias); torch's
        # contiguous() of a contiguous tensor is that tensor
        out = out.alias()
    if not out.dtype.is_float:
        # integer and bool values have no gradient (torch's rule): a cast to int, a comparison or an
        # index cuts the graph here, whatever its inputs need
        return _wrap(out, False)
    if Tensor.no_grad:          # as torch: a result made under no_grad() does not require grad
        return _wrap(out, False)
    ret = _wrap(out, ctx.requires_grad)
    if ctx.requires_grad:
        ret._ctx = ctx
        ctx.parents = x
        if any(t._prior for t in x):      # an input written in place before: which value it read
            ctx.versions = tuple(len(t._prior or ()) for t in x)
    return ret


def _wrap(lb: LazyBuffer, requires_grad: bool | None) -> Tensor:
    """A Tensor of a lazy buffer already on its device and of its dtype: Tensor(lb) without the
    argument checks, which every op would otherwise pay."""
    t = Tensor.__new__(Tensor)
    t.lazydata, t.requires_grad, t.grad, t._ctx, t._prior = lb, requires_grad, None, None, None
    return t


_Method = TypeVar("_Method", bound=Callable[..., Any])


# view methods that name another tensor for its shape only: replayed as the shape's own method
_AS_SHAPE = {"view_as": "reshape", "reshape_as": "reshape", "expand_as": "expand"}


# reshapes, which no strides may express over a view's memory (then torch copies)
_RESHAPES = frozenset(("reshape", "flatten", "unflatten", "view_as", "reshape_as"))


def _view_op(fn: _Method) -> _Method:
    """Mark a Tensor method as one of torch's view ops (its result, or each of its results, shares the
    tensor's memory: a write through either is seen by the other). Only calls from outside tg's core make
    views (the program's, and tg.nn's and tg.distributed's, written as programs are): the core's ops call
    the same methods for values torch computes into new memory (a sum over a dim of size 1 is a reshape),
    so their results stay what torch makes, copies."""
    name = fn.__name__

    @functools.wraps(fn)
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = fn(self, *args, **kwargs)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("tg.core."):
            return out
        if name in _AS_SHAPE:
            other = args[0] if args else next(iter(kwargs.values()))
            step_fn, args, kwargs = _VIEW_STEPS[_AS_SHAPE[name]], (other.shape,), {}
        else:
            step_fn = fn
        if isinstance(out, tuple):
            for k, o in enumerate(out):
                _link_view(o, self, (step_fn, args, kwargs, k), name in _RESHAPES)
        else:
            _link_view(out, self, (step_fn, args, kwargs, None), name in _RESHAPES)
        return out

    _VIEW_STEPS[name] = fn
    return method  # type: ignore[return-value]  # the same signature


_VIEW_STEPS: dict[str, Callable] = {}


# how each movement moves a window over memory (the tracker of a view, relative to its root's memory)
def _link(view: Tensor, parent: Tensor, step: tuple) -> None:
    """Record view (made from parent by step, over parent's memory) as a view of the tensor that owns that
    memory, so that a write through either is seen by the other, in program order, as in torch."""
    alias = getattr(parent, "_alias", None)
    root, chain = (alias[0], alias[1] + (step,)) if alias is not None else (parent, (step,))
    view._alias = (root, chain)
    views = getattr(root, "_views", None)
    if views is None:
        views = root._views = Readers()
    views.add(view)  # type: ignore[arg-type]  # Readers holds any object weakly


def _link_view(out: Any, parent: Tensor, step: tuple, reshape: builtins.bool) -> None:
    if not isinstance(out, Tensor) or out is parent or out.lazydata.base is not parent.lazydata.base:
        return      # new memory (an advanced index, a contiguous copy), or the tensor itself
    alias = getattr(parent, "_alias", None)
    if reshape and alias is not None and not _one_window(out, alias[0]) and (
            _one_window(parent, alias[0]) or _strided_window(alias[0], alias[1] + (step,)) is None):
        # no strides over its tensor's memory express it (a reshape of one window that the tracker cannot
        # merge, or one found element by element): torch's reshape copies
        return
    _link(out, parent, step)


def _one_window(out: Tensor, root: Tensor) -> builtins.bool:
    """Whether out's tracker is one strided window over a root whose tracker is its memory in row-major
    order (the common case, decided without replaying the view's calls)."""
    if not root.lazydata.st.contiguous or out.lazydata.base is not root.lazydata.base:
        return False
    st = out.lazydata.st
    view = st.views[0]
    return len(st.views) == 1 and view.mask is None and builtins.all(s >= 0 for s in view.strides)


def _replay(t: Tensor, chain: tuple, graph: builtins.bool) -> Tensor:
    """The view that chain makes of t, with a graph back to t's when `graph`, as no new view of t. A step
    is (method, args, kwargs, index): a view method's call, and which of its results (None: the one)."""
    prev, Tensor.no_grad = Tensor.no_grad, not graph
    try:
        for fn, args, kwargs, k in chain:
            t = fn(t, *args, **kwargs) if k is None else fn(t, *args, **kwargs)[k]
    finally:
        Tensor.no_grad = prev
    return t


def _window(root: Tensor, chain: tuple) -> ShapeTracker | None:
    """The tracker of the window that the view chain makes of root's memory (None if it computes)."""
    memory = _wrap(LazyBuffer.empty(root.shape, root.dtype, root.device), False)
    lb = _replay(memory, chain, graph=False).lazydata
    return lb.st if lb.base is memory.lazydata else None


def _strided_window(root: Tensor, chain: tuple) -> View | None:
    """The one strided window (without masks or negative strides) that the view chain makes of root's
    memory, or None where it is none."""
    st = _window(root, chain)
    if st is None:
        return None
    view = st.views[0] if len(st.views) == 1 else _affine_view(st)
    if view is None or view.mask is not None or builtins.any(s < 0 for s in view.strides):
        return None
    return view


# elements of a stacked view checked one by one for being one strided window (_affine_view)
AFFINE_CHECK_MAX = 1 << 22


def _affine_view(st: ShapeTracker) -> View | None:
    """The single view equal to a stack of views (which the symbolic merge could not prove, as for the
    diagonal of a non-square matrix), found by evaluating the index of every element; None if none is."""
    shape = st.shape
    n = prod(shape)
    if n == 0 or n > AFFINE_CHECK_MAX:
        return None
    pos = np.indices(shape).reshape(len(shape), n)
    idx, valid = np.zeros(n, np.int64), np.ones(n, np.bool_)
    for i, view in enumerate(reversed(st.views)):
        if i:      # an inner view: unravel the outer index over its shape
            size = prod(view.shape)
            valid &= (idx >= 0) & (idx < size)
            inner = np.unravel_index(np.clip(idx, 0, builtins.max(size - 1, 0)), view.shape)
            pos = np.array(inner, np.int64).reshape(len(view.shape), n)
        idx = view.offset + (pos * np.array(view.strides, np.int64).reshape(-1, 1)).sum(0)
        for p, (lo, hi) in zip(pos, view.mask or ()):
            valid &= (p >= lo) & (p < hi)
    # each dim's stride: the index's step from the first element to the next along that dim
    strides = [builtins.int(idx[step] - idx[0]) if size > 1 else 0
               for size, step in zip(shape, contiguous_strides(shape))]
    full = np.indices(shape).reshape(len(shape), n)
    if not valid.all() or not np.array_equal(idx, idx[0] + (full * np.array(strides).reshape(-1, 1)).sum(0)):
        return None
    return View.create(shape, strides, builtins.int(idx[0]))


def index_range(n: int, device: str) -> Tensor:
    """0..n-1 as int32, for one-hot selections: 32-bit compares keep the kernel on SIMD lanes."""
    return Tensor(indexing.arange(n, device), device=device)
