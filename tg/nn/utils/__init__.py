"""tg.nn.utils: torch.nn.utils's helpers (clip_grad_norm_ and clip_grad_value_, written in tg.nn.optim;
rnn: packed sequences for the recurrent layers).

    >>> from tg import Tensor
    >>> from tg.nn.utils import clip_grad_norm_
    >>> w = Tensor([0.0, 0.0]); w.grad = Tensor([6.0, 8.0])
    >>> clip_grad_norm_(w, max_norm=5.0).item(), [round(x, 3) for x in w.grad.tolist()]
    (10.0, [3.0, 4.0])
"""
from tg.nn.optim import clip_grad_norm_, clip_grad_value_
from tg.nn.utils import rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "rnn"]
