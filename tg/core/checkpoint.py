"""Activation checkpointing: trade compute for memory by recomputing a function's activations in
backward instead of keeping them from the forward.

`checkpoint(fn, *args)` returns what fn returns, but the autograd graph keeps only fn's inputs
(and its outputs): in backward, fn runs again on the saved inputs and the gradients flow through
that recomputation. The recompute and its backward are realized right there, as a schedule of
their own, so the recomputed activations live only while that one segment is differentiated.

    >>> from tg import Tensor, nn
    >>> layer = nn.Linear(4, 4)
    >>> x = Tensor.ones(2, 4, requires_grad=True)
    >>> _ = checkpoint(lambda t: layer(t).relu(), x).sum().backward()
    >>> layer.weight.grad.shape, x.grad.shape
    ((4, 4), (2, 4))

Contract:
- Gradients equal the plain function's. Parameters fn reads (leaf tensors that require grad, such
  as a layer's weights) get their .grad even when no input requires grad (token ids into an
  Embedding). A computed tensor that requires grad and that fn reads from outside (a closure)
  must be passed as an argument instead: the graph is cut at the inputs and the leaves.
- With preserve_rng_state (the default) the recompute draws the same random numbers as the
  forward did (dropout masks match), and the generator is put back where it was afterwards. The
  state is saved and restored by kernels on the devices, so this also holds inside a TinyJit.
- The recompute runs with `Tensor.training` and autocast (tg.amp) as they were in the forward.
  Like torch's, it runs fn twice, so side effects happen twice: a BatchNorm inside updates its
  running statistics in the forward and again in the recompute (keep BatchNorm outside
  checkpointed segments).
- Under `tg.no_grad()`, or when nothing fn reads requires grad, fn just runs.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from tg.core import autocast
from tg.core.autograd import parents
from tg.core.dtype import dtypes
from tg.core.function import Function
from tg.core.lazy import LazyBuffer
from tg.core.tensor import Tensor


def checkpoint(fn: Callable[..., Any], *args: Any, preserve_rng_state: bool = True,
               use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), with its activations recomputed in backward instead of kept.

    fn returns a Tensor or a tuple / list of them (other values pass through untouched); the same
    structure comes back. See the module docstring for the contract. `use_reentrant` is torch's
    choice between two implementations; tg has one (it behaves like torch's non-reentrant one), so
    every value gives the same result.

        >>> from tg import Tensor
        >>> w = Tensor([[2.0]], requires_grad=True)
        >>> y = checkpoint(lambda x: (x @ w).relu(), Tensor([[3.0]]))    # the input needs no grad
        >>> _ = y.sum().backward()
        >>> y.tolist(), w.grad.tolist()
        ([[6.0]], [[3.0]])
    """
    if Tensor.no_grad:
        return fn(*args, **kwargs)
    rng = Tensor.get_rng_state(on_device=True) if preserve_rng_state else None
    result = fn(*args, **kwargs)
    outs = _tensors_out(result)
    inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
    parents = _inputs_and_leaves(outs, inputs)
    if not parents or not any(o.requires_grad for o in outs):
        return result
    node = _Checkpoint(parents[0].device, *parents)
    node.parents, node.fn, node.args, node.kwargs, node.rng = tuple(parents), fn, args, kwargs, rng
    node.training = Tensor.training
    node.autocast = autocast.saved()
    node.output_grads = [None] * len(outs)
    # The outputs hang off one node, so backward reaches it after every output's gradient is in.
    anchor = Tensor(LazyBuffer.const(0.0, dtypes.float32, outs[0].device, ()), requires_grad=True)
    anchor._ctx = node
    wrapped = [_wrap(o, i, node, anchor) for i, o in enumerate(outs)]
    # fn's own graph (and what its Functions saved) goes with `result` when this returns
    if isinstance(result, Tensor):
        return wrapped[0]
    next_wrapped = iter(wrapped)
    items = [next(next_wrapped) if isinstance(r, Tensor) else r for r in result]
    return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)


def checkpoint_sequential(layers: Sequence[Callable[[Tensor], Tensor]], segments: int, x: Tensor,
                          preserve_rng_state: bool = True, use_reentrant: bool | None = None) -> Tensor:
    """Run callables in order on x as `segments` chunks (torch's contract): every chunk but the
    last is checkpointed; the last runs normally (its activations are needed first in backward).
    Chunks hold len(layers) // segments layers; the last also takes the remainder. `layers` may be
    an nn.Sequential; `use_reentrant` as in checkpoint().

        >>> from tg import Tensor, nn
        >>> layers = [nn.Linear(3, 3), Tensor.relu, nn.Linear(3, 1)]
        >>> y = checkpoint_sequential(layers, 2, Tensor.ones(2, 3))    # chunks [Linear], [relu, Linear]
        >>> _ = y.sum().backward()
        >>> y.shape, layers[0].weight.grad.shape, layers[2].weight.grad.shape
        ((2, 1), (3, 3), (1, 3))
    """
    layers = list(layers)
    if not 1 <= segments <= len(layers):
        raise ValueError(f"[nn] checkpoint_sequential: segments must be in 1..{len(layers)} (the number of "
                         f"layers), got {segments}")
    size = len(layers) // segments
    for start in range(0, size * (segments - 1), size):
        x = checkpoint(_run_layers, layers[start:start + size], x, preserve_rng_state=preserve_rng_state)
    return _run_layers(layers[size * (segments - 1):], x)


def _run_layers(layers: list[Callable[[Tensor], Tensor]], x: Tensor) -> Tensor:
    for layer in layers:
        x = layer(x)
    return x


class _Checkpoint(Function):
    """The node standing for one checkpointed call: its parents are fn's inputs that require grad
    and the leaves fn reads; backward recomputes fn and differentiates the recomputation."""
    runs_in_backward = True
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    rng: dict[str, Any] | None
    training: bool | None      # the global Tensor.training in the forward (None: never set)
    autocast: dict[str, tuple[bool, Any]]
    output_grads: list[LazyBuffer | None]

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        prev_no_grad, Tensor.no_grad = Tensor.no_grad, False   # backward() may be called under no_grad
        try:
            return self._backward()
        finally:
            Tensor.no_grad = prev_no_grad
            self.output_grads = [None] * len(self.output_grads)   # a retained graph starts afresh

    def _backward(self) -> tuple[LazyBuffer | None, ...]:
        # fn runs on new leaves holding the inputs' values, so the recomputed graph stops there
        fresh = {id(a): Tensor(a.lazydata, device=a.device, requires_grad=a.requires_grad)
                 for a in (*self.args, *self.kwargs.values()) if isinstance(a, Tensor)}
        args = [fresh.get(id(a), a) if isinstance(a, Tensor) else a for a in self.args]
        kwargs = {k: fresh.get(id(a), a) if isinstance(a, Tensor) else a for k, a in self.kwargs.items()}
        outs = _tensors_out(self._recompute(args, kwargs))
        terms = [(o * Tensor(g, device=g.device)).sum() for o, g in zip(outs, self.output_grads)
                 if g is not None and o.requires_grad]
        if not terms:
            return (None,) * len(self.parents)
        root = terms[0]
        for term in terms[1:]:
            root = root + term
        del outs, terms
        grads = root.gradient(*[fresh.get(id(p), p) for p in self.parents])
        del root
        # One schedule for the recompute and its backward (backprop computed everything else that
        # was pending just before, see Function.runs_in_backward); the inputs are stored with it.
        todo = [g for g in grads if g is not None] + list(fresh.values())
        todo[0].realize(*todo[1:])
        return tuple(g.lazydata if g is not None else None for g in grads)

    def _recompute(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """fn again, in the forward's mode: Tensor.training (unset, None, included) and autocast as they
        were then, the same random numbers."""
        prev_training, Tensor.training = Tensor.training, self.training
        now = Tensor.get_rng_state(on_device=True) if self.rng is not None else None
        try:
            if self.rng is not None:
                Tensor.set_rng_state(self.rng)
            with autocast.restored(self.autocast):
                return self.fn(*args, **kwargs)
        finally:
            if now is not None:
                Tensor.set_rng_state(now)
            Tensor.training = prev_training


class _Output(Function):
    """One output of a checkpointed call: hands its gradient to the call's node."""
    node: _Checkpoint
    index: int

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        self.node.output_grads[self.index] = grad
        return LazyBuffer.const(0.0, dtypes.float32, grad.device, ())   # the anchor's (unused) gradient


def _wrap(out: Tensor, index: int, node: _Checkpoint, anchor: Tensor) -> Tensor:
    if not out.requires_grad:
        return out
    ret = Tensor(out.lazydata, device=out.device, requires_grad=True)
    ctx = _Output(out.device, anchor)
    ctx.parents, ctx.node, ctx.index = (anchor,), node, index
    ret._ctx = ctx
    return ret


def _tensors_out(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and any(isinstance(r, Tensor) for r in result):
        return [r for r in result if isinstance(r, Tensor)]
    raise TypeError(f"[nn] checkpoint: fn must return a Tensor or a tuple / list holding Tensors, got "
                    f"{type(result).__name__}; wrap other results in a tuple with a Tensor")


def _inputs_and_leaves(outs: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
    """fn's inputs that require grad, then every leaf requiring grad that the outputs' graph
    reaches without passing through an input (fn's parameters), each once."""
    boundary = {id(t) for t in inputs}
    found = {id(t): t for t in inputs if t.requires_grad}
    seen: set[int] = set()
    stack = list(outs)
    while stack:
        t = stack.pop()
        if id(t) in seen or id(t) in boundary:
            continue
        seen.add(id(t))
        if t._ctx is None:
            if t.requires_grad:
                found.setdefault(id(t), t)
            continue
        stack.extend(parents(t._ctx))
    return list(found.values())
