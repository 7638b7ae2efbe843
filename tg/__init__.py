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
         "load": "tg.serialization", "autocast": "tg.amp"}
# torch's dtype names (tg.long is int64, tg.float is float32, ...): tg name -> attribute of dtypes
_DTYPES = {"bool": "bool", "int8": "int8", "uint8": "uint8", "int16": "int16", "short": "int16",
           "uint16": "uint16", "int32": "int32", "int": "int32", "uint32": "uint32", "int64": "int64",
           "long": "int64", "uint64": "uint64", "float16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "float32": "float32", "float": "float32", "float64": "float64",
           "double": "float64"}
# the rest of the torch namespace (tg.zeros, tg.cat, tg.device, tg.Generator, tg.exp, ...): tg.namespace's
# __all__, written out here so that looking a name up needs no import (a test keeps the two equal)
_NAMESPACE_NAMES = frozenset({"Generator", "abs", "absolute", "acos", "acosh", "add", "addcdiv", "addcmul",
                              "addmm", "addmv", "all", "allclose", "amax", "amin", "aminmax", "any", "arange",
                              "arcsinh", "arctan", "arctan2", "argmax", "argmin", "argsort", "argwhere",
                              "as_tensor", "asin", "asinh", "atan", "atan2", "atanh", "baddbmm", "bincount",
                              "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "bmm",
                              "broadcast_tensors", "broadcast_to", "bucketize", "can_cast", "cat", "cdist",
                              "ceil", "celu", "chunk", "clamp", "clip", "clone", "column_stack", "concat",
                              "concatenate", "copysign", "cos", "cosh", "count_nonzero", "cross", "cummax",
                              "cummin", "cumprod", "cumsum", "deg2rad", "detach", "device", "diag",
                              "diag_embed", "diagonal", "div", "divide", "dot", "dstack", "dtype", "einsum",
                              "empty", "empty_like", "eq", "equal", "erf", "erfc", "exp", "exp2", "expand",
                              "expm1", "eye", "finfo", "fix", "flatten", "flip", "fliplr", "flipud",
                              "float_power", "floor", "floor_divide", "fmax", "fmin", "fmod", "frac",
                              "from_numpy", "full", "full_like", "gather", "ge", "ger", "get_rng_state",
                              "greater", "greater_equal", "gt", "hardsigmoid", "hardswish", "hardtanh",
                              "enable_grad", "histc", "hstack", "hypot", "iinfo", "index_add",
                              "index_select", "inference_mode", "is_grad_enabled", "set_grad_enabled",
                              "initial_seed", "inner", "is_complex", "is_floating_point", "is_tensor",
                              "isclose", "isfinite", "isinf", "isnan", "isneginf", "isposinf", "kron",
                              "kthvalue", "le", "lerp", "less", "less_equal", "linspace", "log",
                              "log10", "log1p", "log2", "log_softmax", "logaddexp", "logaddexp2",
                              "logcumsumexp", "logical_and", "logical_not", "logical_or", "logical_xor",
                              "logspace", "logsumexp", "lt", "manual_seed", "masked_fill", "masked_select",
                              "matmul", "max", "maximum", "mean", "median", "meshgrid", "min", "minimum",
                              "mish", "mm", "mode", "moveaxis", "movedim", "msort", "mul", "multinomial",
                              "multiply", "mv", "nan_to_num", "nanmean", "nanmedian", "nansum", "narrow",
                              "ne", "neg", "negative", "nonzero", "norm", "not_equal", "numel", "ones",
                              "ones_like", "outer", "pad", "permute", "pow", "prod", "promote_types",
                              "rad2deg", "rand", "rand_like", "randint", "randn", "randn_like", "randperm",
                              "ravel", "reciprocal", "relu", "remainder", "repeat", "repeat_interleave",
                              "reshape", "result_type", "roll", "rot90", "round", "row_stack", "rsqrt",
                              "scatter", "scatter_add", "searchsorted", "seed", "select", "selu",
                              "set_rng_state", "sgn", "sigmoid", "sign", "signbit", "sin", "sinh", "softmax",
                              "sort", "split", "sqrt", "square", "squeeze", "stack", "std", "std_mean", "sub",
                              "subtract", "sum", "swapaxes", "swapdims", "t", "take", "take_along_dim",
                              "tanh", "tensor", "tensor_split", "tensordot", "tile", "topk", "trace",
                              "transpose", "tril", "tril_indices", "triu", "triu_indices", "true_divide",
                              "trunc", "unbind", "unflatten", "unique", "unique_consecutive", "unsqueeze",
                              "var", "var_mean", "vdot", "vstack", "where", "xlogy", "zeros", "zeros_like"})

# torch's subpackage paths: tg.nn, tg.optim, tg.utils (data, checkpoint), tg.distributed, tg.linalg
_SUBPACKAGES = ("nn", "optim", "utils", "distributed", "linalg", "amp", "profiler", "cuda", "accelerator",
                "backends", "multiprocessing")

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


def _profile_if_asked() -> None:
    """TG_PROFILE=DIR (tglaunch --profile): profile the whole process from its import of tg."""
    from tg import config
    if config.TG_PROFILE:
        importlib.import_module("tg.profiler").profile_process(config.TG_PROFILE)


_profile_if_asked()


def no_grad() -> Any:
    """Context manager and decorator: no autograd graph is recorded inside."""
    from tg.core.tensor import NoGrad
    return NoGrad()


__all__ = ["Tensor", "TinyJit", "dtypes", "Device", "GlobalCounters", "no_grad", "nn", "optim", "save",
           "load"]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_DTYPES, *_NAMESPACE_NAMES, *_SUBPACKAGES})
