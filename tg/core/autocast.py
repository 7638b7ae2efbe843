"""Autocast's state and its op tables: which ops run in the low dtype (bfloat16 / float16), which are
forced to float32 and which promote to their widest input, per device kind, as torch documents them
(torch.amp, "Autocast Op Reference"). The user's side is tg.amp.autocast; this module is what the ops
consult.

Every op named in a table is marked where it is defined with `@autocast_op`, so the policy holds however
the op is reached (a method, `tg.nn.functional`, the torch namespace, a name imported early). At a call
the wrapper:
- does nothing unless an autocast region is enabled on this thread for the device of the op's first
  tensor (one global counter makes the common case one comparison);
- does nothing inside another marked op, nor when tg's own op code calls it (a module in INTERNAL):
  torch's autocast acts once per op, at the user's call; a loss that calls log_softmax is cast at the
  loss, an op in no list on this device (mv on the CPU, a mean, a sigmoid built from exp) runs in its
  inputs' dtype all through; and for a call given an explicit `dtype=` (or `out=`);
- casts the floating tensor arguments (in lists and tuples too): "lower" ones that are float32 to the
  region's dtype, "float32" ones that are float16 / bfloat16 to float32, "promote" ones to the widest
  floating dtype among them. float64 is never lowered.

Casts are recorded by autograd like any op, so gradients come back in each parameter's own dtype. Each
use casts afresh (torch caches a parameter's cast per region; a lazy cast costs nothing until fused into
its reader, and a cached one would go stale under an in-place update).
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any, Callable, Iterator

from tg.core.dtype import dtypes, promote_types

# ---------------------------------------------------------------------------- the tables (data)
# torch's CPU lists (bfloat16 or float16); ops that are composites there (einsum goes through bmm) are
# listed under what torch's result shows
_CPU_LOWER = ("matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear",
              "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "prelu", "scaled_dot_product_attention", "einsum")
_CPU_FLOAT32 = ("avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "binary_cross_entropy", "prod", "cdist",
                "trace", "mse_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss",
                "poisson_nll_loss", "smooth_l1_loss", "cross_entropy", "l1_loss", "huber_loss",
                "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
                "kl_div", "multilabel_margin_loss", "binary_cross_entropy_with_logits",
                "multilabel_soft_margin_loss", "gaussian_nll_loss")
_CPU_PROMOTE = ("cat", "stack", "index_copy")
# torch's CUDA lists (float16 and bfloat16 alike); tg uses them for every GPU device (CUDA, OpenCL)
_GPU_LOWER = ("matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv",
              "addr", "mv", "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "prelu", "scaled_dot_product_attention", "einsum")
_GPU_FLOAT32 = ("__pow__", "__rpow__", "__rtruediv__", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "exp",
                "expm1", "log", "log10", "log1p", "log2", "pow", "prod", "reciprocal", "rsqrt", "sum",
                "cumsum", "cumprod", "norm", "normalize", "cdist", "pdist", "dist", "renorm",
                "cosine_similarity", "softmax", "log_softmax", "softmin", "softplus", "layer_norm",
                "group_norm", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "cross_entropy",
                "hinge_embedding_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss",
                "multilabel_margin_loss", "multi_margin_loss", "nll_loss", "poisson_nll_loss",
                "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss", "huber_loss", "logsumexp",
                "interpolate")
_GPU_PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sample", "index_put",
                "scatter_add", "tensordot", "cat", "stack", "index_copy")


# modules whose calls of a marked op are an op's insides, not a user's call: torch has one kernel where tg
# composes (sigmoid from exp, batch_norm from rsqrt and sum), and its autocast sees only the outer call
# (tg.core.* counts too). Layers (tg.nn.layers), the namespace and user code call ops as a user does.
# (a package counts with its modules: tg.nn.functional.loss calling logsigmoid is an op's insides)
INTERNAL = frozenset({"tg.nn.functional", "tg.core"})
_INSIDE = tuple(m + "." for m in INTERNAL)


def _table(lower: tuple, float32: tuple, promote: tuple) -> dict[str, str]:
    table = {name: "promote" for name in promote}
    table.update({name: "float32" for name in float32})
    table.update({name: "lower" for name in lower})
    return table


# device kind -> op name -> "lower" | "float32" | "promote"
TABLES: dict[str, dict[str, str]] = {
    "cpu": _table(_CPU_LOWER, _CPU_FLOAT32, _CPU_PROMOTE),
    "cuda": _table(_GPU_LOWER, _GPU_FLOAT32, _GPU_PROMOTE),
}
TABLES["cl"] = TABLES["cuda"]
# tg device name (its prefix) -> autocast device kind
KINDS = {"CPU": "cpu", "CUDA": "cuda", "CL": "cl", "GPU": "cl"}

# ---------------------------------------------------------------------------- the state


class _State(threading.local):
    def __init__(self) -> None:
        self.regions: dict[str, list[tuple[bool, Any]]] = {}     # kind -> stack of (enabled, dtype)
        self.inside = 0                                           # autocast ops running on this thread


STATE = _State()
_enabled_regions = 0      # enabled regions on every thread: 0 makes every autocast op a plain call
_lock = threading.Lock()
MARKED: set[str] = set()  # every name marked with autocast_op (a test checks the tables against it)


def current(kind: str) -> Any:
    """The dtype autocast casts to on this thread for device kind, or None when it is off."""
    stack = STATE.regions.get(kind)
    if not stack or not stack[-1][0]:
        return None
    return stack[-1][1]


def enter(kind: str, enabled: bool, dtype: Any) -> None:
    global _enabled_regions
    STATE.regions.setdefault(kind, []).append((enabled, dtype))
    if enabled:
        with _lock:
            _enabled_regions += 1


def leave(kind: str) -> None:
    global _enabled_regions
    enabled, _ = STATE.regions[kind].pop()
    if enabled:
        with _lock:
            _enabled_regions -= 1


def saved() -> dict[str, tuple[bool, Any]]:
    """What autocast does on this thread now, per device kind: to run something later as it would have
    run now (checkpoint's recompute)."""
    return {kind: stack[-1] for kind, stack in STATE.regions.items() if stack}


@contextlib.contextmanager
def restored(state: dict[str, tuple[bool, Any]]) -> Iterator[None]:
    """Autocast as it was when `saved()` returned state (off for the kinds it had no region for)."""
    for kind in TABLES:
        enter(kind, *state.get(kind, (False, None)))
    try:
        yield
    finally:
        for kind in TABLES:
            leave(kind)


def _device_kind(device: str) -> str:
    return KINDS.get(device.split(":")[0], "cpu")


def _is_tensor(a: Any) -> bool:
    # (tensor.py imports this module: a Tensor is known by what it has)
    return hasattr(a, "lazydata") and hasattr(a, "cast")


def _first_tensor(args: tuple, kwargs: dict) -> Any:
    for a in (*args, *kwargs.values()):
        if _is_tensor(a):
            return a
        if isinstance(a, (list, tuple)):
            for b in a:
                if _is_tensor(b):
                    return b
    return None


def _cast(t: Any, dtype: Any) -> Any:
    # (no cache of parameter casts, as torch keeps: a cast is one lazy node, fused into its reader, and a
    # cached one went stale after an in-place update or a backward that freed its graph)
    return t if t.dtype == dtype else t.cast(dtype)


def _map(args: tuple, kwargs: dict, change: Callable[[Any], Any]) -> tuple[tuple, dict]:
    def one(a: Any) -> Any:
        if _is_tensor(a):
            return change(a)
        if isinstance(a, (list, tuple)) and any(_is_tensor(b) for b in a):
            return type(a)(change(b) if _is_tensor(b) else b for b in a)
        return a
    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _apply(policy: str, low: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    lowered = (dtypes.float16, dtypes.bfloat16)
    if policy == "lower":
        return _map(args, kwargs, lambda t: _cast(t, low) if t.dtype == dtypes.float32 else t)
    if policy == "float32":
        return _map(args, kwargs, lambda t: _cast(t, dtypes.float32) if t.dtype in lowered else t)
    floats: list[Any] = []
    _map(args, kwargs, lambda t: floats.append(t.dtype) if t.dtype.is_float else None)
    if len(set(floats)) < 2:
        return args, kwargs
    widest = functools.reduce(promote_types, floats)       # float16 with bfloat16: float32, as torch
    return _map(args, kwargs, lambda t: _cast(t, widest) if t.dtype.is_float else t)


def autocast_op(fn: Callable) -> Callable:
    """Mark fn (a Tensor method or a functional op named in a table) as subject to autocast."""
    name = fn.__name__
    MARKED.add(name)

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        if not _enabled_regions or STATE.inside:
            return fn(*args, **kwargs)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller in INTERNAL or caller.startswith(_INSIDE):
            return fn(*args, **kwargs)
        first = _first_tensor(args, kwargs)
        kind = _device_kind(first.device) if first is not None else "cpu"
        low = current(kind) if first is not None else None
        if low is None:
            return fn(*args, **kwargs)
        policy = TABLES[kind].get(name)
        if policy is not None and kwargs.get("dtype") is None and kwargs.get("out") is None:
            args, kwargs = _apply(policy, low, args, kwargs)
        STATE.inside += 1           # what the op calls inside is not cast, whatever it did itself
        try:
            return fn(*args, **kwargs)
        finally:
            STATE.inside -= 1
    return op
