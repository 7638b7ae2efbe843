"""torch.utils.checkpoint's surface, on tg.core.checkpoint (activation checkpointing).

    from tg.utils.checkpoint import checkpoint, checkpoint_sequential
    y = checkpoint(block, x, use_reentrant=False)      # torch's arguments are accepted

tg has one implementation, which behaves like torch's non-reentrant one, so `use_reentrant` changes
nothing and, unlike torch, leaving it out is not warned about. See tg/core/checkpoint.py for the contract.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tg.core import checkpoint as _core
from tg.core.tensor import Tensor
from tg.utils.warn import warn_once


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               preserve_rng_state: bool = True, context_fn: Callable[[], Any] | None = None,
               determinism_check: str = "default", debug: bool = False, **kwargs: Any) -> Any:
    """torch.utils.checkpoint.checkpoint: function(*args, **kwargs) with its activations recomputed in
    backward. `use_reentrant` (either value), `determinism_check` and `debug` change nothing in tg;
    `context_fn` (torch's selective checkpointing) is accepted and ignored, with a warning once.

    >>> from tg import Tensor
    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> y = checkpoint(lambda t: (t * t).sum(), x, use_reentrant=False)
    >>> _ = y.backward()
    >>> y.item(), x.grad.tolist()
    (5.0, [2.0, 4.0])
    """
    if context_fn is not None:
        warn_once("checkpoint-context-fn", "[nn] checkpoint: context_fn (selective checkpointing) has no "
                  "effect in tg: every activation of the function is recomputed")
    if debug:
        warn_once("checkpoint-debug", "[nn] checkpoint: debug=True has no effect in tg; DEBUG=3 prints the "
                  "schedules, the recompute's included")
    return _core.checkpoint(function, *args, preserve_rng_state=preserve_rng_state, **kwargs)


def checkpoint_sequential(functions: Sequence[Callable[[Tensor], Tensor]], segments: int, input: Tensor,
                          use_reentrant: bool | None = None, **kwargs: Any) -> Tensor:
    """torch.utils.checkpoint.checkpoint_sequential: run `functions` (a list or nn.Sequential) in
    order on input as `segments` chunks, every chunk but the last checkpointed. `preserve_rng_state`
    may be given; `use_reentrant` changes nothing (see checkpoint).

    >>> from tg import Tensor, nn
    >>> layers = [nn.Linear(3, 3), Tensor.relu, nn.Linear(3, 1)]
    >>> y = checkpoint_sequential(layers, 2, Tensor.ones(2, 3), use_reentrant=False)
    >>> _ = y.sum().backward()
    >>> y.shape, layers[0].weight.grad.shape
    ((2, 1), (3, 3))
    """
    return _core.checkpoint_sequential(functions, segments, input, **kwargs)
