"""Mixed precision, torch's way (torch.amp): `autocast` runs the ops that gain from it (matmul, linear,
convolutions, attention) in bfloat16 or float16 and keeps the ones that need range or precision in
float32, per torch's op lists (tg/core/autocast.py holds them as tables); `GradScaler` scales a float16
loss so that small gradients do not flush to zero, and skips a step whose gradients overflowed.

    >>> import tg
    >>> from tg import Tensor
    >>> x, w = Tensor.ones(2, 3), Tensor.ones(3, 4, requires_grad=True)
    >>> with tg.autocast("cpu"):                    # bfloat16 on the CPU, as torch's default
    ...     y = x @ w
    ...     loss = tg.nn.functional.mse_loss(y, Tensor.zeros(2, 4))   # a loss: float32
    >>> y.dtype, loss.dtype
    (dtypes.bfloat16, dtypes.float32)
    >>> _ = loss.backward()
    >>> w.grad.dtype                                # each parameter's gradient in its own dtype
    dtypes.float32

Rules, as torch's: a region applies to tensors on its device kind ("cpu", "cuda", or tg's "cl" for
OpenCL devices, which use the CUDA lists); regions nest, and `enabled=False` turns autocast off inside;
an op given an explicit `dtype=` and in-place ops are left alone; only float32 tensors are lowered (never
float64); ops called inside an autocast op are not cast again. The state is per thread. Under TinyJit
the captured kernels keep the dtypes of the call they were captured from; a checkpointed function is
recomputed under the autocast state of its forward.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

from tg.core import autocast as _state
from tg.core.dtype import DType, dtypes

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype", "bf16_units"]

_DEFAULT_DTYPE = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16, "cl": dtypes.float16}


def _kind(device_type: Any) -> str:
    kind = str(getattr(device_type, "type", device_type)).split(":")[0].lower()
    kind = {"gpu": "cl", "opencl": "cl"}.get(kind, kind)
    if kind not in _DEFAULT_DTYPE:
        raise ValueError(f"[amp] autocast(device_type={device_type!r}): expected 'cpu', 'cuda' or 'cl' (tg's "
                         f"OpenCL devices)")
    return kind


def _low_dtype(dtype: Any, kind: str) -> DType:
    if dtype is None:
        return _DEFAULT_DTYPE[kind]
    got = getattr(dtypes, dtype) if isinstance(dtype, str) and hasattr(dtypes, dtype) else dtype
    if got not in (dtypes.bfloat16, dtypes.float16):
        raise ValueError(f"[amp] autocast(dtype={dtype!r}): expected tg.bfloat16 or tg.float16, the dtypes "
                         f"autocast lowers to")
    return got


class autocast:
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None; the last has nothing to
    turn off in tg, see core/autocast.py): a context manager (and
    a decorator) under which the ops in torch's lists run in `dtype` (bfloat16 on the CPU, float16 on
    GPUs by default), the ones that need float32 in float32, and the rest in their inputs' dtype.

        >>> import tg
        >>> from tg import Tensor
        >>> @tg.autocast("cpu", dtype=tg.bfloat16)
        ... def forward(a, b):
        ...     return a @ b
        >>> forward(Tensor.ones(2, 2), Tensor.ones(2, 2)).dtype
        dtypes.bfloat16
        >>> with tg.autocast("cpu"), tg.autocast("cpu", enabled=False):    # off inside
        ...     (Tensor.ones(2, 2) @ Tensor.ones(2, 2)).dtype
        dtypes.float32
    """

    def __init__(self, device_type: Any, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        self.device = self.kind = _kind(device_type)
        self.fast_dtype = _low_dtype(dtype, self.kind)
        self.enabled = bool(enabled)
        self.cache_enabled = cache_enabled

    def __enter__(self) -> autocast:
        _state.enter(self.kind, self.enabled, self.fast_dtype)
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.leave(self.kind)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def under_autocast(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.kind, self.fast_dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)
        return under_autocast


def is_autocast_enabled(device_type: Any = "cpu") -> bool:
    """Whether an enabled autocast region is in force on this thread for device_type."""
    return _state.current(_kind(device_type)) is not None


def get_autocast_dtype(device_type: Any = "cpu") -> DType:
    """The dtype autocast lowers to for device_type here (its default outside any region)."""
    kind = _kind(device_type)
    return _state.current(kind) or _DEFAULT_DTYPE[kind]


def bf16_units(device: Any = None) -> str | None:
    """The hardware a device computes bfloat16 products on, named ("AMX", "AVX512_BF16", "tensor
    cores"), or None where bfloat16 would only be converted to float32 and back (no faster than
    float32; on a CPU also where its AVX512_BF16 measures slower than its float32 FMAs, as on Sapphire
    Rapids without AMX): what a training script asks before it turns bfloat16 autocast on by itself.

        >>> import tg
        >>> tg.amp.bf16_units("CPU") in (None, "AMX", "AVX512_BF16")
        True
    """
    from tg.core.device import Device
    name = str(device or Device.DEFAULT).upper()
    if name.startswith("CPU"):
        from tg.core.codegen import bf16
        from tg.core.runtime.ops_cpu import features
        dev, have = Device[name], features()
        unit = next((u for u in bf16.UNITS if u.features <= have and dev.usable(u)),  # type: ignore[attr-defined]
                    None)
        return None if unit is None else {"amx": "AMX", "dpbf16": "AVX512_BF16"}[unit.name]
    if name.startswith("CUDA"):
        major = getattr(Device[name], "capability", (0, 0))[0]     # Ampere (8.0) and later
        return "tensor cores" if major >= 8 else None
    return None


# ---------------------------------------------------------------------------- loss scaling
_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """torch.amp.GradScaler: multiplies the loss by a scale before backward (float16 gradients keep
    their small values), divides the gradients by it before the step, skips a step whose gradients hold
    an inf or a NaN, and adapts the scale: times `backoff_factor` after such a step, times
    `growth_factor` after `growth_interval` clean steps in a row.

        >>> from tg import Tensor, nn
        >>> from tg.amp import GradScaler
        >>> w = Tensor([1.0], requires_grad=True)
        >>> opt = nn.optim.SGD([w], lr=0.5)
        >>> scaler = GradScaler(init_scale=4.0, growth_interval=1)
        >>> _ = scaler.scale((w * 3.0).sum()).backward()
        >>> w.grad.item()                           # scaled
        12.0
        >>> scaler.step(opt); scaler.update()       # unscaled to 3, stepped: 1 - 0.5 * 3
        >>> w.item(), scaler.get_scale()            # a clean step at growth_interval=1: the scale grows
        (-0.5, 8.0)

    The verdict on infs needs the gradients' values on the host (one read per step), so step() runs
    outside a TinyJit; the scale itself is a device tensor, so scale(loss) may be captured. Gradients
    a ZeroOptimizer holds in shards are checked there, and the verdict is agreed by every rank (one
    rank's overflow skips the step everywhere, with the same scale after it); DistributedDataParallel's
    gradients are the same on every rank already.
    """

    def __init__(self, device: Any = "cpu", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if not growth_factor > 1.0:
            raise ValueError(f"[amp] GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"[amp] GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if not (isinstance(growth_interval, int) and growth_interval > 0):
            raise ValueError(f"[amp] GradScaler: growth_interval must be a positive int, got "
                             f"{growth_interval!r}")
        if not (math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"[amp] GradScaler: init_scale must be a positive number, got {init_scale}")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._init_scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._scale_on: dict[str, Any] = {}         # device -> the 0-d float32 scale tensor there
        self._stage: dict[int, str] = {}            # id(optimizer) -> where it is in this step
        self._found_inf: dict[int, bool] = {}

    # ------------------------------------------------------------------ the step
    def _scale_tensor(self, device: str) -> Any:
        from tg.core.tensor import Tensor
        t = self._scale_on.get(device)
        if t is None:
            t = self._scale_on[device] = Tensor([self._scale], device=device).reshape(()).realize()
        return t

    def scale(self, outputs: Any) -> Any:
        """outputs (a Tensor, or lists / tuples of them) times the scale."""
        from tg.core.tensor import Tensor
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale_tensor(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TypeError(f"[amp] GradScaler.scale: expected a Tensor or a list / tuple of them, got "
                        f"{type(outputs).__name__}")

    def unscale_(self, optimizer: Any) -> None:
        """Divide optimizer's gradients by the scale, in place, and note whether any is inf or NaN (a
        clip_grad_norm_ between backward and step goes after this)."""
        if not self._enabled:
            return
        stage = self._stage.get(id(optimizer), _READY)
        if stage == _UNSCALED:
            raise RuntimeError("[amp] GradScaler.unscale_() was already called on this optimizer since the "
                               "last update(); call it once per step")
        if stage == _STEPPED:
            raise RuntimeError("[amp] GradScaler.unscale_() was called after step(); call it before step(), "
                               "or not at all (step() unscales)")
        self._found_inf[id(optimizer)] = _unscale_and_check(optimizer, 1.0 / self._scale)
        self._stage[id(optimizer)] = _UNSCALED

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """optimizer.step(*args, **kwargs) unless its gradients hold an inf or a NaN (then nothing);
        unscales first if unscale_ was not called."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if self._stage.get(id(optimizer)) == _STEPPED:
            raise RuntimeError("[amp] GradScaler.step() was already called on this optimizer since the last "
                               "update()")
        if self._stage.get(id(optimizer), _READY) == _READY:
            self.unscale_(optimizer)
        out = None if self._found_inf[id(optimizer)] else optimizer.step(*args, **kwargs)
        self._stage[id(optimizer)] = _STEPPED
        return out

    def update(self, new_scale: float | Any = None) -> None:
        """The scale for the next step: new_scale if given, else backed off after an overflow in any
        optimizer's gradients, grown after growth_interval clean steps."""
        if not self._enabled:
            return
        if new_scale is not None:
            value = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"[amp] GradScaler.update(new_scale={value}): expected a positive number")
            self._scale = value
        else:
            if not self._found_inf:
                raise RuntimeError("[amp] GradScaler.update(): no optimizer was unscaled or stepped since "
                                   "the last update(); call scaler.step(optimizer) first")
            if any(self._found_inf.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._stage.clear()
        self._found_inf.clear()
        from tg.core.tensor import Tensor
        for device, t in self._scale_on.items():
            t.assign(Tensor([self._scale], device=device).reshape(())).realize()

    # ------------------------------------------------------------------ settings and state
    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def is_enabled(self) -> bool:
        return self._enabled

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict[str, Any]:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} when
        disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("[amp] GradScaler.load_state_dict: the state is empty (it came from a "
                               "disabled scaler)")
        keys = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
        missing = keys - set(state_dict)
        if missing:
            raise KeyError(f"[amp] GradScaler.load_state_dict: missing {sorted(missing)}")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
        self.update(self._scale)


def _unscale_and_check(optimizer: Any, inv_scale: float) -> bool:
    """Multiply every gradient optimizer steps by inv_scale in place; whether any was inf or NaN (agreed
    over the ranks for gradients a ZeroOptimizer holds in shards)."""
    from tg.core.tensor import Tensor, _NoGrad
    from tg.nn.optim import _gradients
    params = getattr(optimizer, "params", None)
    if params is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
    own, held = _gradients(params)
    grads = [*own, *(g for _, gs in held for g in gs)]
    if not grads:
        return False
    device = grads[0].device

    def nonfinite(gs: list[Tensor]) -> Tensor:
        count = Tensor.zeros(device=device)
        for g in gs:
            if g.numel():
                count = count + g.detach().isfinite().logical_not().sum().cast(dtypes.float32)
        return count
    with _NoGrad():
        bad = nonfinite(own)
        for holder, gs in held:
            bad = bad + holder.combine(nonfinite(gs), "max")
        combine = getattr(optimizer, "combine", None)
        if combine is not None:
            # a ZeroOptimizer's verdict is the group's: at stage 1 each rank's .grad is still its own
            # (reduced in step), and a rank that skipped alone would leave the others in step's collectives
            bad = combine(bad, "max")
        found = bad.item() > 0
        for g in grads:
            g.assign((g.detach() * inv_scale).cast(g.dtype))
    return found
