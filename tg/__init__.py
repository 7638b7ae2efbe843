"""tg: a small deep-learning framework with its own kernel compiler and a distributed layer.

    >>> import tg
    >>> (tg.Tensor([1.0, 2.0]) * 3).tolist()
    [3.0, 6.0]

The names below load on first use, so `tglaunch` and `tg.config` start without numpy or the core.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {"Tensor": "tg.core.tensor", "TinyJit": "tg.core.jit", "dtypes": "tg.core.dtype", "Device": "tg.core.device",
         "GlobalCounters": "tg.core.device"}

if TYPE_CHECKING:
    from tg import nn
    from tg.core.device import Device, GlobalCounters
    from tg.core.dtype import dtypes
    from tg.core.jit import TinyJit
    from tg.core.tensor import Tensor


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "nn":
        value = importlib.import_module("tg.nn")
    else:
        raise AttributeError(f"module 'tg' has no attribute {name!r}")
    globals()[name] = value
    return value


def no_grad() -> Any:
    """Context manager and decorator: no autograd graph is recorded inside."""
    from tg.core.tensor import _NoGrad
    return _NoGrad()


__all__ = ["Tensor", "TinyJit", "dtypes", "Device", "GlobalCounters", "no_grad", "nn"]
