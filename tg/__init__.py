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

_LAZY = {"Tensor": "tg.core.tensor", "TinyJit": "tg.core.jit", "dtypes": "tg.core.dtype",
         "Device": "tg.core.device", "GlobalCounters": "tg.core.device", "save": "tg.serialization",
         "load": "tg.serialization"}
# torch's dtype names (tg.long is int64, tg.float is float32, ...): tg name -> attribute of dtypes
_DTYPES = {"bool": "bool", "int8": "int8", "uint8": "uint8", "int16": "int16", "short": "int16",
           "uint16": "uint16", "int32": "int32", "int": "int32", "uint32": "uint32", "int64": "int64",
           "long": "int64", "uint64": "uint64", "float16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "float32": "float32", "float": "float32", "float64": "float64",
           "double": "float64"}
# the rest of the torch namespace (tg.zeros, tg.cat, tg.device, tg.Generator, tg.exp, ...): tg.namespace's
# __all__, written out here so that looking a name up needs no import (a test keeps the two equal)
_NAMESPACE_NAMES = frozenset({"Generator", "dtype", "einsum", "multinomial", "randperm", "abs", "add", "all",
                              "amax", "amin", "any",
                              "arange", "argmax", "argmin", "cat", "ceil", "chunk", "clamp", "clone",
                              "concat", "cos", "cumsum", "detach", "device", "div", "dot", "empty", "eq",
                              "exp", "expand", "eye", "flatten", "flip", "floor", "from_numpy", "full",
                              "full_like", "gather", "ge", "get_rng_state", "gt", "initial_seed",
                              "is_tensor", "isinf", "isnan", "le", "lerp", "linspace", "log",
                              "log_softmax", "logsumexp", "lt", "manual_seed", "matmul", "max", "maximum",
                              "mean", "min", "minimum", "mul", "ne", "neg", "numel", "ones", "ones_like",
                              "pad", "permute", "pow", "prod", "rand", "rand_like", "randint", "randn",
                              "randn_like", "relu", "repeat", "reshape", "round", "rsqrt", "seed",
                              "set_rng_state", "sigmoid", "sign", "sin", "softmax", "split", "sqrt",
                              "square", "squeeze", "stack", "std", "sub", "sum", "tanh", "tensor",
                              "transpose", "unflatten", "unsqueeze", "var", "where", "zeros", "zeros_like",
                              "atan", "asinh", "sinh", "cosh", "asin", "acos", "atanh", "acosh", "tril",
                              "triu", "diag", "diagonal", "trace", "argsort", "sort", "bitwise_not", "t",
                              "hardtanh", "hardsigmoid", "hardswish", "celu", "selu", "mish", "atan2",
                              "copysign", "bitwise_and", "bitwise_or", "bitwise_xor", "topk", "cumprod",
                              "cummax", "cummin", "masked_fill"})

# torch's subpackage paths: tg.nn, tg.optim, tg.utils (data, checkpoint), tg.distributed
_SUBPACKAGES = ("nn", "optim", "utils", "distributed")

if TYPE_CHECKING:
    from tg import nn
    from tg.core.device import Device, GlobalCounters
    from tg.core.dtype import dtypes
    from tg.core.jit import TinyJit
    from tg.core.tensor import Tensor


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _DTYPES:
        value = getattr(importlib.import_module("tg.core.dtype").dtypes, _DTYPES[name])
    elif name in _NAMESPACE_NAMES:
        value = getattr(importlib.import_module("tg.namespace"), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"tg.{name}")
    else:
        raise AttributeError(f"module 'tg' has no attribute {name!r}")
    globals()[name] = value
    return value


def no_grad() -> Any:
    """Context manager and decorator: no autograd graph is recorded inside."""
    from tg.core.tensor import _NoGrad
    return _NoGrad()


__all__ = ["Tensor", "TinyJit", "dtypes", "Device", "GlobalCounters", "no_grad", "nn", "optim", "save",
           "load"]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_DTYPES, *_NAMESPACE_NAMES, *_SUBPACKAGES})
