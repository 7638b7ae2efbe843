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
import weakref
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
        unit = bf16.available(features(), Device[name].usable)  # type: ignore[attr-defined]
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

    With tg's own optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta) the verdict on infs stays on
    the device: a 0-d tensor the optimizer's every write is conditioned on (`Optimizer._skip`), the scale
    and the count of clean steps device tensors updated in place, so a whole step (scale, backward,
    step, update) is captured by TinyJit and replayed without a host sync; get_scale() and state_dict()
    read the device values. Other optimizers, and a ZeroOptimizer (whose gradients are held in shards
    and whose verdict every rank must agree on), take the verdict to the host (one read per step) and
    skip the step there, outside a TinyJit. DistributedDataParallel's gradients are the same on every
    rank already, so its verdict agrees by itself.
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
        self._tracker_on: dict[str, Any] = {}       # device -> the 0-d float32 count of clean steps
        self._found_on: Any = weakref.WeakKeyDictionary()   # optimizer -> its 0-d verdict (1.0: an inf)
        self._settings_on: dict[str, Any] = {}      # device -> [growth, backoff, interval], float32
        # once a step was decided on the device, its tensors there hold the values (a TinyJit replay
        # updates them without Python running): _scale and _growth_tracker are read back from them
        self._home: str | None = None
        self._stage: dict[int, str] = {}            # id(optimizer) -> where it is in this step
        self._found_inf: dict[int, Any] = {}        # id(optimizer) -> a bool, or its verdict tensor

    # ------------------------------------------------------------------ the step
    def _scale_tensor(self, device: str) -> Any:
        from tg.core.tensor import Tensor
        t = self._scale_on.get(device)
        if t is None:
            self._sync()
            t = self._scale_on[device] = Tensor([self._scale], device=device).reshape(()).realize()
        return t

    def _sync(self) -> None:
        """The host values from the device once steps are decided there (a read of two numbers)."""
        if self._home is not None:
            self._scale = float(self._scale_on[self._home].item())
            self._growth_tracker = int(self._tracker_on[self._home].item())

    def decides_on_device(self, optimizer: Any) -> bool:
        """Whether optimizer's steps are skipped on the device (no host sync; a whole step may be
        captured by TinyJit): one of tg's own optimizer classes (every write through Optimizer._set)
        holding its gradients itself; else the verdict is read on the host."""
        from tg.nn.optim import CAPTURABLE, gradients_of
        if type(optimizer) not in CAPTURABLE or getattr(optimizer, "combine", None) is not None:
            return False
        return not gradients_of(optimizer.params)[1]

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
        if self.decides_on_device(optimizer):
            self._found_inf[id(optimizer)] = self._unscale_on_device(optimizer)
        else:
            self._sync()
            self._found_inf[id(optimizer)] = _unscale_and_check(optimizer, 1.0 / self._scale)
        self._stage[id(optimizer)] = _UNSCALED

    def _unscale_on_device(self, optimizer: Any) -> Any:
        """The gradients divided by the scale tensor, lazily; the verdict (1.0 where any is inf or NaN) in
        the optimizer's own realized 0-d tensor, returned."""
        from tg.core.tensor import NoGrad, Tensor
        from tg.nn.optim import gradients_of
        grads = gradients_of(optimizer.params)[0]
        device = grads[0].device if grads else optimizer.device
        found = self._found_on.get(optimizer)
        if found is None or found.device != device:
            found = self._found_on[optimizer] = Tensor.zeros(device=device).contiguous().realize()
        with NoGrad():
            inv = 1.0 / self._scale_tensor(device)
            bad = Tensor.zeros(device=device)
            for g in grads:
                if g.numel():
                    bad = bad + g.detach().isfinite().logical_not().sum().cast(dtypes.float32)
            found.assign((bad > 0).cast(dtypes.float32))
            for g in grads:
                g.assign((g.detach() * inv).cast(g.dtype))
        return found

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """optimizer.step(*args, **kwargs) unless its gradients hold an inf or a NaN (then nothing);
        unscales first if unscale_ was not called. With tg's own optimizers the skip is decided on the
        device (the step runs, writing nothing where skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if self._stage.get(id(optimizer)) == _STEPPED:
            raise RuntimeError("[amp] GradScaler.step() was already called on this optimizer since the last "
                               "update()")
        if self._stage.get(id(optimizer), _READY) == _READY:
            self.unscale_(optimizer)
        found = self._found_inf[id(optimizer)]
        if isinstance(found, bool):
            out = None if found else optimizer.step(*args, **kwargs)
        else:
            optimizer._skip = found
            try:
                out = optimizer.step(*args, **kwargs)
            finally:
                optimizer._skip = None
        self._stage[id(optimizer)] = _STEPPED
        return out

    def update(self, new_scale: float | Any = None) -> None:
        """The scale for the next step: new_scale if given, else backed off after an overflow in any
        optimizer's gradients, grown after growth_interval clean steps (and only while it stays finite).
        On the device where the verdicts are (no host sync), else on the host."""
        if not self._enabled:
            return
        if new_scale is not None:
            value = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"[amp] GradScaler.update(new_scale={value}): expected a positive number")
            self._sync()
            self._scale = value
            self._write_host_values()
        elif not self._found_inf:
            raise RuntimeError("[amp] GradScaler.update(): no optimizer was unscaled or stepped since "
                               "the last update(); call scaler.step(optimizer) first")
        elif all(isinstance(f, bool) for f in self._found_inf.values()):
            self._sync()
            if any(self._found_inf.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    self._scale = grown if math.isfinite(float(_f32(grown))) else self._scale
                    self._growth_tracker = 0
            self._write_host_values()
        else:
            self._update_on_device()
        self._stage.clear()
        self._found_inf.clear()

    def _setting(self, attr: str, value: float) -> None:
        """A setting changed: on the host, and in the device tensors a captured step reads."""
        self._sync()
        setattr(self, attr, value)
        self._write_host_values()

    def _settings(self) -> list[float]:
        return [self._growth_factor, self._backoff_factor, float(self._growth_interval)]

    def _write_host_values(self) -> None:
        """Every device tensor from the host values (after a host-side update, a load, a setter)."""
        from tg.core.tensor import Tensor
        for device, t in self._scale_on.items():
            t.assign(Tensor([self._scale], device=device).reshape(())).realize()
        for device, t in self._tracker_on.items():
            t.assign(Tensor([float(self._growth_tracker)], device=device).reshape(())).realize()
        for device, t in self._settings_on.items():
            t.assign(Tensor(self._settings(), device=device)).realize()

    def _update_on_device(self) -> None:
        """torch's update of the scale and the count of clean steps, as device tensors in place."""
        from tg.core.tensor import NoGrad, Tensor
        tensors = [f for f in self._found_inf.values() if not isinstance(f, bool)]
        home = tensors[0].device
        scale = self._scale_tensor(home)
        if home not in self._tracker_on:
            self._sync()
            self._tracker_on[home] = Tensor([float(self._growth_tracker)], device=home).reshape(()).realize()
            self._settings_on[home] = Tensor(self._settings(), device=home).realize()
        if self._home is not None and self._home != home:    # the values move to this device's tensors
            self._sync()
            self._write_host_values()
        tracker, settings = self._tracker_on[home], self._settings_on[home]
        with NoGrad():
            on_host = any(f for f in self._found_inf.values() if isinstance(f, bool))
            found = Tensor.ones(device=home) if on_host else Tensor.zeros(device=home)
            for f in tensors:
                found = found.maximum(f if f.device == home else f.to(home))
            # the settings are read from the device too: a TinyJit replay follows a setter's new value
            growth, backoff, interval = settings[0], settings[1], settings[2]
            bad = found > 0
            clean = tracker + 1
            grow = clean == interval          # (as torch: a count past a lowered interval never grows)
            grown = scale * growth
            new_scale = bad.where(scale * backoff, (grow & grown.isfinite()).where(grown, scale))
            new_tracker = (bad | grow).where(0.0, clean)
            scale.assign(new_scale)
            tracker.assign(new_tracker)
            scale.realize(tracker)
            for device, t in self._scale_on.items():
                if device != home:
                    t.assign(scale.to(device)).realize()
        self._home = home

    # ------------------------------------------------------------------ settings and state
    def get_scale(self) -> float:
        """The scale (a read from the device after device-side updates)."""
        self._sync()
        return self._scale if self._enabled else 1.0

    def is_enabled(self) -> bool:
        return self._enabled

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._setting("_growth_factor", float(new_factor))

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._setting("_backoff_factor", float(new_factor))

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._setting("_growth_interval", int(new_interval))

    def state_dict(self) -> dict[str, Any]:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} when
        disabled)."""
        if not self._enabled:
            return {}
        self._sync()
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
        self._write_host_values()          # (the loaded values, over any newer device ones)
        self._stage.clear()
        self._found_inf.clear()


def _f32(value: float) -> Any:
    """value as float32 (the scale tensors' type): a grown scale past float32's range is not taken."""
    import numpy as np
    with np.errstate(over="ignore"):
        return np.float32(value)


def _unscale_and_check(optimizer: Any, inv_scale: float) -> bool:
    """Multiply every gradient optimizer steps by inv_scale in place; whether any was inf or NaN (agreed
    over the ranks for gradients a ZeroOptimizer holds in shards)."""
    from tg.core.tensor import NoGrad, Tensor
    from tg.nn.optim import gradients_of
    params = getattr(optimizer, "params", None)
    if params is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
    own, held = gradients_of(params)
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
    with NoGrad():
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
