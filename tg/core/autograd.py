"""The backward engine: the chain rule over the graph of Functions that tensors keep in `_ctx`.

Tensor.backward() and Tensor.gradient() (tensor.py) call `backprop` and wrap what it returns; the
per-op rules are the Functions' backward methods (function.py). Tensors are only read here (their
`_ctx`, `requires_grad`, `lazydata`), so this module sits below tensor.py.

    >>> from tg import Tensor
    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> [(t is x, to_numpy(g).tolist()) for t, g in backprop(y, y.ones_like().lazydata, None, False)]
    [(True, [2.0, 4.0])]
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from tg.core import function as F
from tg.core.lazy import LazyBuffer
from tg.core.ops import BinaryOps
from tg.core.realize import realize, to_numpy  # noqa: F401 - to_numpy: the example above

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


def parents(ctx: F.Function) -> tuple[Tensor, ...]:
    """ctx's inputs as the values it read: a parent written in place since (Tensor._prior) stands for
    its later value, so the one ctx read takes its place (resolved in ctx itself, and pinned)."""
    if any(p._prior for p in ctx.parents):
        read = ctx.versions or (0,) * len(ctx.parents)
        ctx.parents = tuple(p if v == len(p._prior or ()) else p._prior[v]  # type: ignore[index]
                            for p, v in zip(ctx.parents, read))
        ctx.versions = tuple(len(p._prior or ()) for p in ctx.parents)
    return ctx.parents


def toposort(root: Tensor) -> list[Tensor]:
    """Every tensor root depends on through Functions, inputs before the tensors made from them."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t._ctx is not None:
            for p in parents(t._ctx):
                if id(p) not in seen:
                    stack.append((p, False))
    return order


def backprop(root: Tensor, gradient: LazyBuffer, targets: set[int] | None,  # noqa: C901 - one pass of the
             retain_graph: bool) -> list[tuple[Tensor, LazyBuffer]]:     # chain rule over shared bookkeeping
    """The chain rule from root (whose gradient is `gradient`): the gradient reaching each tensor
    whose id is in `targets`, or each leaf that requires grad when targets is None. Only the part
    of the graph between root and the targets is walked; unless retain_graph, each Function is
    dropped once used, and so are the engine's own references to tensors it is done with.

    Tensors go consumers first, in depth-first order, except that a Function which runs a
    computation of its own in backward (Function.runs_in_backward: a checkpoint's recompute)
    waits until nothing else is ready. Before it runs, the root and the gradients pending for
    leaves are realized, so the activations they read are freed before its computation starts."""
    def wanted(t: Tensor) -> bool:
        return id(t) in targets if targets is not None else t._ctx is None and bool(t.requires_grad)
    order: list[Tensor | None] = list(toposort(root))
    index = {id(t): i for i, t in enumerate(order)}
    waiting = [0] * len(order)        # consumers of each tensor not processed yet
    leads_to: set[int] = set()        # tensors on a path from root to a target
    for t in order:
        assert t is not None
        ctx = t._ctx
        for p in ctx.parents if ctx is not None else ():
            waiting[index[id(p)]] += 1
        # a consumed graph (F.FREED) may have led anywhere: walking into it raises below
        if wanted(t) or ctx is F.FREED or (ctx is not None and any(id(p) in leads_to for p in ctx.parents)):
            leads_to.add(id(t))
    grads: dict[int, LazyBuffer] = {id(root): gradient}
    found: list[tuple[Tensor, LazyBuffer]] = []
    ready = [(False, -(len(order) - 1))]   # (deferred, -position): root is last in depth-first order
    while ready:
        i = -heapq.heappop(ready)[1]
        t, order[i] = order[i], None
        assert t is not None
        ctx = t._ctx
        for p in ctx.parents if ctx is not None else ():
            j = index[id(p)]
            waiting[j] -= 1
            if waiting[j] == 0:
                pctx = p._ctx
                heapq.heappush(ready, (pctx is not None and pctx.runs_in_backward, -j))
        g = grads.pop(id(t), None)
        if g is None or id(t) not in leads_to:
            continue
        if wanted(t):
            found.append((t, g))
        if ctx is F.FREED and not wanted(t):
            ctx.backward(g)           # raises: this graph was freed by an earlier backward
        if ctx is None or not any(id(p) in leads_to for p in ctx.parents):
            continue
        if ctx.runs_in_backward:
            realize([*(pg for pid, pg in grads.items() if order[index[pid]]._ctx is None),  # type: ignore[union-attr]
                     *(leaf_grad for _, leaf_grad in found), root.lazydata])
        parent_grads = ctx.backward(g)
        if not isinstance(parent_grads, tuple):
            parent_grads = (parent_grads,)
        for p, pg in zip(ctx.parents, parent_grads):
            if pg is None or id(p) not in leads_to or not p.requires_grad:
                continue
            assert pg.shape == p.shape, f"grad shape {pg.shape} != {p.shape} in {type(ctx).__name__}"
            grads[id(p)] = pg if id(p) not in grads else grads[id(p)].e(BinaryOps.ADD, pg)
        if not retain_graph:
            t._ctx = F.FREED
        del t, ctx, g, parent_grads   # nothing of a done tensor outlives its turn
    return found

