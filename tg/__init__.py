"""tg: a small deep-learning framework with its own kernel compiler and a distributed layer.

    >>> import tg
    >>> (tg.Tensor([1.0, 2.0]) * 3).tolist()
    [3.0, 6.0]
"""
from tg.core.device import Device, GlobalCounters
from tg.core.dtype import dtypes
from tg.core.jit import TinyJit
from tg.core.tensor import Tensor, _NoGrad

# isort: split
from tg import nn  # noqa: E402  (nn builds on Tensor)

__version__ = "0.1.0"


def no_grad() -> _NoGrad:
    """Context manager and decorator: no autograd graph is recorded inside."""
    return _NoGrad()


__all__ = ["Tensor", "TinyJit", "dtypes", "Device", "GlobalCounters", "no_grad", "nn"]
