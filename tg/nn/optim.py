"""Optimizers written per parameter, in parameter groups; learning-rate schedules and gradient clipping.

Each optimizer only says how ONE parameter moves: `init_single(p)` allocates that parameter's state
buffers and `apply_single(p, g, state)` returns the new value of `p` as a lazy expression (writing the
new state in place with `.assign`), reading its options from `self.param_group`, the parameter group
being stepped. `step()` runs that for every parameter with a gradient and realizes every updated parameter
and state buffer in one schedule, so the whole update is one batch of kernels and every buffer keeps its
memory from step to step (what a captured/JIT-replayed step needs). ZeRO-2 calls the same `apply(...)`
on flat 1-d shards of parameters and gradients.

Parameters come as a list of Tensors (one group) or, as in torch, a list of dicts, each with its
"params" and the options that differ from the constructor's: `opt.param_groups[i]` is that group.
Values that change during training — each group's learning rate and the step count `t` — live on the
device as 0-d float32 tensors updated in place, so a replayed step sees a new lr from a scheduler.

    >>> from tg import Tensor
    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.1)
    >>> _ = (w * w).sum().backward()   # grad = 2w
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.8, 1.6]
"""
from __future__ import annotations

import bisect
import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tg import config
from tg.core import trace
from tg.core.capture import active as active_capture
from tg.core.capture import host_step
from tg.core.dtype import dtypes
from tg.core.jit import TinyJit
from tg.core.realize import flush_assigns, realize_readers
from tg.core.tensor import NoGrad, Tensor

__all__ = [
    "Optimizer", "ParamGroup", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta",
    "LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "LinearLR", "CosineAnnealingLR",
    "CosineWithWarmup", "clip_grad_norm_", "clip_grad_value_", "hold_gradients", "gradients_of", "CAPTURABLE",
]


def _scalar(value: float, device: str) -> Tensor:
    """A realized 0-d float32 tensor: one stable buffer that `.assign` rewrites in place."""
    return Tensor(np.array(value, dtype=np.float32), device=device)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"[nn] {message}")


def _host(value: Any) -> np.ndarray:
    """A saved value (Tensor, numpy array or Python number/list) as a numpy array."""
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def _option_array(value: Any) -> np.ndarray | None:
    """A numeric option as the float32 array state_dict() saves (None for options that are not numbers)."""
    if isinstance(value, (bool, int, float)):
        return np.array(value, dtype=np.float32)
    if isinstance(value, (tuple, list)) and all(isinstance(v, (bool, int, float)) for v in value):
        return np.array(value, dtype=np.float32)
    return None


def _option_value(saved: Any, current: Any) -> Any:
    """A saved option back in the type the option has now: a Python value (torch's nested form) as it
    is; a float32-stored float as the shortest decimal that rounds to it (1e-08, not 9.99999993922529e-09)."""
    if isinstance(saved, (bool, int, float)) and not isinstance(current, (tuple, list)):
        return type(current)(saved)
    if isinstance(saved, (tuple, list)) and all(isinstance(v, (bool, int, float)) for v in saved):
        return type(current)(float(v) for v in saved) if isinstance(current, (tuple, list)) else saved
    arr = _host(saved).astype(np.float32)
    if isinstance(current, bool):
        return bool(arr.reshape(()))
    if isinstance(current, int):
        return int(arr.reshape(()))
    if isinstance(current, (tuple, list)):
        return type(current)(float(str(x)) for x in arr.reshape(-1))
    return float(str(arr.reshape(())))


class ParamGroup(dict):
    """One parameter group: a dict holding "params" (a list of Tensors) and the optimizer's options.

    The learning rate also lives on the device (`lr_tensor`, 0-d float32): writing `group["lr"]` writes
    that buffer in place at once, so the next step uses the new lr, also when the step is a TinyJit
    replay. The other options are read when a step is built: a change takes effect at the next eager
    step, while a TinyJit replay keeps the values it captured. Every write is checked by the optimizer.

        >>> from tg import Tensor
        >>> opt = SGD([{"params": [Tensor.zeros(2)]}, {"params": [Tensor.zeros(1)], "lr": 0.5}], lr=0.1)
        >>> opt.param_groups[1]["lr"] = 0.25
        >>> opt.param_groups[1]["lr"], opt.param_groups[1].lr_tensor.item(), opt.param_groups[0]["lr"]
        (0.25, 0.25, 0.1)
    """

    def __init__(self, options: Mapping[str, Any], device: str,
                 validate: Callable[[Mapping[str, Any]], None]):
        validate(options)
        super().__init__(options)
        self._validate = validate
        self.lr_tensor: Tensor = _scalar(float(self["lr"]), device)

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Set several options at once, checked together (e.g. momentum and nesterov)."""
        new = dict(*args, **kwargs)
        if "params" in new:
            raise ValueError("[nn] a parameter group's 'params' cannot be replaced; got a new 'params' "
                             "entry. Fix: add parameters with optimizer.add_param_group({'params': [...]})")
        self._validate({**self, **new})
        for key, value in new.items():
            if key == "lr":
                value = float(value)
                self.lr_tensor.assign(_scalar(value, self.lr_tensor.device)).realize()
            super().__setitem__(key, value)


class Optimizer:
    """Base class: subclasses write `init_single` and `apply_single`; `step()` does the rest.

    `params` is a list of Tensors or of dicts `{"params": [...], option: value}` (a group each; options
    not given come from the constructor's arguments). `param_groups` lists the groups, `params` every
    parameter in order. `lr` reads the first group's learning rate; setting it sets every group's. `t`
    is the step count on the device, advanced once per `step()` before any parameter is updated. One
    `t` serves every parameter (torch counts per parameter), so a parameter whose first gradient comes
    at step k gets step k's Adam bias corrections; with a gradient every step the two agree.

        >>> from tg import Tensor
        >>> opt = SGD([Tensor.zeros(3)], lr=0.5)
        >>> opt.lr = 0.25
        >>> opt.lr, opt.param_groups[0]["lr"]
        (0.25, 0.25)

    A new optimizer only says how one parameter moves (here the sign of its gradient, times lr):

        >>> class SignSGD(Optimizer):
        ...     def apply_single(self, p, g, state):
        ...         return p - self.lr_tensor * g.sign()
        >>> w = Tensor([1.0, 1.0], requires_grad=True)
        >>> opt = SignSGD([w], lr=0.1)
        >>> w.grad = Tensor([3.0, -0.5])
        >>> opt.step()
        >>> [round(x, 4) for x in w.tolist()]
        [0.9, 1.1]
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 1e-3,
                 **defaults: Any):
        given = list(params)
        _check(len(given) > 0, "optimizer got an empty parameter list; expected at least one Tensor. "
                               "Fix: pass model parameters, e.g. SGD(model.parameters(), lr=0.1)")
        groups = [dict(g) if isinstance(g, Mapping) else None for g in given]
        if all(g is None for g in groups):
            groups = [{"params": given}]
        elif any(g is None for g in groups):
            raise TypeError("[nn] optimizer parameters must be all Tensors or all dicts (param groups), got "
                            "a mix. Fix: put every Tensor in a group, e.g. [{'params': a}, {'params': b}]")
        everything: list[Any] = []
        for g in groups:
            assert g is not None
            _check("params" in g, f"a parameter group must have a 'params' entry, got keys {sorted(g)}. "
                                  f"Fix: pass {{'params': [tensors], 'lr': ...}}")
            g["params"] = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
            everything += g["params"]
        _check(len(everything) > 0, "optimizer got param groups without parameters; expected at least one "
                                    "Tensor. Fix: put model parameters in 'params'")
        self._check_params(everything, [])
        # scalars shared by every parameter of a group within one step (see Adam._scalars)
        self._per_step: dict[tuple[int, str], Any] = {}
        self._capture: tuple[tuple, TinyJit] | None = None    # (configuration, the captured update)
        # a realized 0-d tensor: where nonzero, step() changes nothing (no parameter, state or step
        # count), decided on the device (amp.GradScaler's verdict on infs, without a host sync)
        self._skip: Tensor | None = None
        self.device: str = everything[0].device
        self.defaults: dict[str, Any] = {"lr": lr, **defaults}
        self.param_groups: list[ParamGroup] = []
        self.params: list[Tensor] = []
        # state of self.params[i], made by init_single the first time that parameter has a gradient
        self.state: list[dict[str, Tensor] | None] = []
        self._group_of: dict[int, ParamGroup] = {}
        self._current: ParamGroup | None = None
        self.t: Tensor = _scalar(0, self.device)
        for g in groups:
            assert g is not None
            self.add_param_group(g)

    @staticmethod
    def _check_params(new: list[Any], held: list[Tensor]) -> None:
        for i, p in enumerate(new):
            if not isinstance(p, Tensor):
                raise TypeError(f"[nn] optimizer parameters must be Tensors, got {type(p).__name__} "
                                f"at index {i}. Fix: pass a list of Tensors")
        _check(len({id(p) for p in held + new}) == len(held) + len(new),
               "a parameter appears more than once in the optimizer's list; it would be updated twice. "
               "Fix: pass each Tensor once, in one group")
        devices = sorted({p.device for p in held + new})
        _check(len(devices) <= 1, f"optimizer parameters must all be on one device, got {devices}. "
                                  f"Fix: move them with .to(device), or use one optimizer per device")

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add a group of parameters with its own options (those not given come from the constructor).

            >>> from tg import Tensor
            >>> opt = Adam([Tensor.zeros(2)], lr=0.01)
            >>> opt.add_param_group({"params": [Tensor.zeros(3)], "lr": 0.1, "weight_decay": 0.5})
            >>> [(g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups]
            [(0.01, 0.0, 1), (0.1, 0.5, 1)]
        """
        if not isinstance(group, Mapping) or "params" not in group:
            raise TypeError(f"[nn] add_param_group expected a dict with a 'params' entry, got "
                            f"{type(group).__name__}. Fix: pass {{'params': [tensors], 'lr': ...}}")
        params = [group["params"]] if isinstance(group["params"], Tensor) else list(group["params"])
        self._check_params(params, self.params)
        _check(not params or params[0].device == self.device,
               f"optimizer parameters must all be on one device, got {params[0].device if params else ''} "
               f"and {self.device}. Fix: move them with .to(device), or use one optimizer per device")
        new = ParamGroup({**self.defaults, **group, "params": params}, self.device, self._check_group)
        self.param_groups.append(new)
        self.params += params
        self.state += [None] * len(params)
        self._group_of.update((id(p), new) for p in params)

    def _check_group(self, group: Mapping[str, Any]) -> None:
        """Raise ValueError for an option out of range; subclasses check their own options too."""
        lr = group.get("lr")
        _check(isinstance(lr, (int, float)) and lr >= 0, f"learning rate must be a number >= 0, got {lr!r}")

    @property
    def param_group(self) -> ParamGroup:
        """The parameter group being stepped (the first group outside a step): `apply_single` reads its
        options here."""
        return self._current if self._current is not None else self.param_groups[0]

    @property
    def lr_tensor(self) -> Tensor:
        """The device learning rate (0-d float32) of `self.param_group`."""
        return self.param_group.lr_tensor

    @property
    def lr(self) -> float:
        return float(self.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.param_groups:
            group["lr"] = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (`.grad = None`), or with set_to_none=False make it zeros.

            >>> from tg import Tensor
            >>> w = Tensor([1.0], requires_grad=True)
            >>> w.grad = Tensor([2.0])
            >>> opt = SGD([w], lr=0.1)
            >>> opt.zero_grad(set_to_none=False); w.grad.tolist()
            [0.0]
            >>> opt.zero_grad(); w.grad is None
            True
        """
        for p in self.params:
            p.grad = None if set_to_none or p.grad is None else _zeros_state(p.grad)

    def _set(self, t: Tensor, value: Tensor) -> Tensor:
        """t.assign(value), or t left as it is where `_skip` says this step is skipped: every write of a
        step goes through here (tg's optimizers' apply_single too), so a skipped step changes nothing."""
        return t.assign(value if self._skip is None else (self._skip != 0).where(t, value))

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        """Allocate (and realize) the state buffers of one parameter; override in subclasses."""
        return {}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        """The new value of `p` given its gradient `g` (lazy); assigns new state values in place."""
        raise NotImplementedError(
            f"{type(self).__name__} must define apply_single (the per-parameter update)"
        )

    def step(self) -> None:
        """Update every parameter that has a `.grad` (no host sync). The gradients and the loss most
        recently differentiated, if still pending, are computed first, in one schedule (both read the
        old weights); then every other pending reader of the weights; then the update, replayed
        without a schedule once captured (see `_captured_update`). Parameters whose `.grad` is None
        are left alone, as in torch.

            >>> from tg import Tensor
            >>> w, frozen = Tensor([1.0, 2.0], requires_grad=True), Tensor([5.0], requires_grad=True)
            >>> opt = SGD([w, frozen], lr=0.5)
            >>> w.grad = Tensor([2.0, -2.0])
            >>> opt.step()
            >>> w.tolist(), frozen.tolist(), opt.t.item()
            ([0.0, 3.0], [5.0], 1.0)
        """
        with_grad = [i for i, p in enumerate(self.params) if p.grad is not None]
        root = Tensor.last_backward_root()
        pending_root = [root] if root is not None and root.lazydata.base.realized is None else []
        params = [self.params[i] for i in with_grad]
        grads = [g for g in (p.grad for p in params) if g is not None]
        states = [self.state_of(i) for i in with_grad]
        held = [*params, *(t for st in states for t in st.values()), self.t,
                *(g.lr_tensor for g in self.param_groups), *([] if self._skip is None else [self._skip])]
        # First the gradients (stored: left inlined in the update, `.grad` would later be computed from
        # the new weights) and the pending loss, in one schedule; then every other pending computation
        # that reads the old weights or state; then the update, which writes them in place.
        for g in grads:
            if not g.lazydata.is_base:     # a gradient that is a view: its own memory
                g.lazydata = g.lazydata.contiguous()
        unrealized = [t for t in [*held, *grads] if t.lazydata.base.realized is None]
        if unrealized or pending_root:
            with trace.region(f"{type(self).__name__}.step: gradients", "optimizer"):
                Tensor.realize(*unrealized, *pending_root)
        if not with_grad:
            return
        host_step(trace.optimizer_phase)    # at this point of every TinyJit replay too
        with trace.region(f"{type(self).__name__}.step: update", "optimizer"):
            realize_readers([t.lazydata for t in held])
            if self._capturable():
                self._captured_update(with_grad, params, grads, states, held)
                return
            written = self.apply(list(zip(params, grads, states)))
            written[0].realize(*written[1:])

    def _capturable(self) -> bool:
        """Whether step() may replay a captured update: one of tg's own optimizer classes (whose update
        reads nothing but the tensors and options keyed below), no TinyJit capturing around it (it must
        see every launch), and the knob on."""
        return type(self) in CAPTURABLE and config.TG_OPTIM_CAPTURE > 0 and active_capture() is None

    def _captured_update(self, with_grad: list[int], params: list[Tensor], grads: list[Tensor],
                         states: list[dict[str, Tensor]], held: list[Tensor]) -> None:
        """The update as a TinyJit of the gradients: built and run eagerly on the first step of a
        configuration, captured on the second, and from then on replayed (no graph, no schedule, no
        Python per op). The configuration is everything the kernels depend on besides the gradients'
        values: which parameters step, which gradients share memory, the memory of every parameter,
        state buffer, step count, lr and skip flag (`_skip`, if any), and every group option but lr (lr
        is read from its device tensor); a change is a new capture, and the old one is dropped."""
        first: dict[int, int] = {}
        shared = tuple(first.setdefault(id(g.lazydata.base.realized), i) for i, g in enumerate(grads))
        key = (tuple(with_grad), shared, tuple(id(t.lazydata.base.realized) for t in held),
               self._skip is None,
               tuple(repr(sorted((k, v) for k, v in g.items() if k not in ("params", "lr")))
                     for g in self.param_groups))
        if self._capture is None or self._capture[0] != key:
            def update(*gs: Tensor) -> None:
                self.apply([(p, g, st) for p, g, st in zip(params, gs, states)])
                flush_assigns()
            self._capture = (key, TinyJit(update, keep_inputs=False))
        self._capture[1](*grads)

    def _group_for(self, p: Tensor) -> ParamGroup:
        # a tensor this optimizer does not hold (a ZeRO shard) steps with the first group's options
        return self._group_of.get(id(p), self.param_groups[0])

    def state_of(self, i: int) -> dict[str, Tensor]:
        """Parameter i's state tensors by name (Adam's `exp_avg`, `exp_avg_sq`, ...), made on first use:
        what state_dict() saves for it, and what a sharded optimizer reads and writes in place.

            >>> from tg import Tensor, nn
            >>> opt = nn.optim.Adam([Tensor.zeros(3, requires_grad=True)])
            >>> sorted(opt.state_of(0))
            ['exp_avg', 'exp_avg_sq']
        """
        state = self.state[i]
        if state is None:
            self._current = self._group_for(self.params[i])
            try:
                state = self.state[i] = self.init_single(self.params[i])
            finally:
                self._current = None
        return state

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state in torch's shape: `{"state": {i: {buffer: Tensor, ..., "step": Tensor}},
        "param_groups": [{option: value, ..., "params": [i, ...]}]}`, parameters numbered in order across
        the groups. The buffers are the live ones (as in torch, not copies); "step" is the optimizer's
        step count `t` (0-d float32), the same Tensor for every parameter as tg counts steps per
        optimizer. The options are the groups' Python values. `tg.save` writes it as it is; for one flat
        dict of tensors (safe_save) use `flat_state_dict()`.

            >>> from tg import Tensor
            >>> sd = Adam([Tensor.zeros(2)], lr=0.01).state_dict()
            >>> list(sd["state"][0]), sd["state"][0]["step"].item()
            (['exp_avg', 'exp_avg_sq', 'step'], 0.0)
            >>> sd["param_groups"]
            [{'lr': 0.01, 'betas': (0.9, 0.999), 'eps': 1e-08, 'weight_decay': 0.0, 'params': [0]}]
        """
        state = {i: {**self.state_of(i), "step": self.t} for i in range(len(self.params))}
        groups: list[dict[str, Any]] = []
        first = 0
        for group in self.param_groups:
            options = {k: v for k, v in group.items() if k != "params"}
            groups.append({**options, "params": list(range(first, first + len(group["params"])))})
            first += len(group["params"])
        return {"state": state, "param_groups": groups}

    def flat_state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """The same state as one flat dict of tensors by torch's dotted names (ready for safe_save):
        `state.<i>.<buffer>` for parameter i, `param_groups.<g>.<option>` for each numeric option of
        group g and `param_groups.<g>.params` (the indices of its parameters). The step count is one
        entry, `step`, as tg counts steps per optimizer (torch keeps `state.<i>.step` per parameter).

            >>> from tg import Tensor
            >>> list(Adam([Tensor.zeros(2)], lr=0.01).flat_state_dict())   # doctest: +NORMALIZE_WHITESPACE
            ['step', 'state.0.exp_avg', 'state.0.exp_avg_sq', 'param_groups.0.lr', 'param_groups.0.betas',
             'param_groups.0.eps', 'param_groups.0.weight_decay', 'param_groups.0.params']
        """
        out: dict[str, Tensor | np.ndarray] = {"step": self.t}
        for i in range(len(self.params)):
            out.update({f"state.{i}.{k}": v for k, v in self.state_of(i).items()})
        first = 0
        for g, group in enumerate(self.param_groups):
            for key, value in group.items():
                saved = group.lr_tensor if key == "lr" else None if key == "params" else _option_array(value)
                if saved is not None:
                    out[f"param_groups.{g}.{key}"] = saved
            out[f"param_groups.{g}.params"] = np.arange(first, first + len(group["params"]), dtype=np.int32)
            first += len(group["params"])
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state_dict() in place: torch's nested form ({"state": {i: {...}}, "param_groups":
        [{...}]}, what state_dict() returns), the flat one of flat_state_dict() or tg's older one ("t",
        "lr", "state.<i>.<buffer>"). Every parameter's buffers must be there (strict); group options are
        set from the saved ones that this optimizer has.

            >>> from tg import Tensor
            >>> saved = SGD([Tensor.zeros(1)], lr=0.5, momentum=0.9).state_dict()
            >>> opt = SGD([Tensor.zeros(1)], lr=0.1, momentum=0.9)
            >>> opt.load_state_dict(saved)
            >>> opt.lr, opt.param_groups[0]["momentum"]
            (0.5, 0.9)
        """
        from tg.nn.state import load_state_dict
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"[nn] {type(self).__name__}.load_state_dict expected a dict (what state_dict() "
                            f"returns, or safe_load's result), got {type(state_dict).__name__}")
        flat = dict(state_dict)
        if isinstance(flat.get("state"), Mapping) or isinstance(flat.get("param_groups"), list):   # torch's
            flat = {f"state.{i}.{k}": v for i, st in state_dict.get("state", {}).items()
                    for k, v in st.items()}
            groups = enumerate(state_dict.get("param_groups", []))
            flat.update({f"param_groups.{g}.{k}": v for g, group in groups for k, v in group.items()})
        elif "t" in flat and "lr" in flat:     # tg's format before param groups: one step count, one lr
            flat["step"] = flat.pop("t")
            lr = flat.pop("lr")
            flat.update({f"param_groups.{g}.lr": lr for g in range(len(self.param_groups))})
        steps = [k for k in flat if k.startswith("state.") and k.endswith(".step")]   # torch: one per param
        if steps and "step" not in flat:
            unique = {id(flat[k]): flat[k] for k in steps}.values()    # tg's state_dict: one t, many times
            flat["step"] = np.array(max(float(_host(v)) for v in unique), np.float32)
        for k in steps:
            del flat[k]
        mine = self.flat_state_dict()
        wanted = [k for k in mine if not k.startswith("param_groups.")]
        missing = [k for k in wanted if k not in flat]
        unexpected = [k for k in flat if k not in mine and not k.startswith("param_groups.")]
        indices = [f"param_groups.{g}.params" for g in range(len(self.param_groups))]
        moved = [k for k in indices
                 if k in flat and not np.array_equal(_host(flat[k]).reshape(-1), _host(mine[k]))]
        if missing or unexpected or moved:
            raise ValueError(f"[nn] {type(self).__name__}.load_state_dict: the state does not fit this "
                             f"optimizer: missing {missing[:6]}, unexpected {unexpected[:6]}, other "
                             f"parameters in {moved[:6]}. It was saved from an optimizer with other "
                             f"parameters, groups or class. Fix: build the optimizer as it was when saved "
                             f"(same parameters in the same order and groups, same class)")
        tensors = {k: v if isinstance(v, Tensor) else _host(v) for k, v in flat.items() if k in wanted}
        load_state_dict({k: mine[k] for k in wanted}, tensors)
        for g, group in enumerate(self.param_groups):
            saved = {k: flat[f"param_groups.{g}.{k}"] for k in group if k != "params"
                     and f"param_groups.{g}.{k}" in flat and _option_array(group[k]) is not None}
            group.update({k: _option_value(v, group[k]) for k, v in saved.items()})

    def apply(self, items: Sequence[tuple[Any, ...]]) -> list[Tensor]:
        """Lazily write one step into each (param, grad, state) or (param, grad, state, group: the
        ParamGroup whose options step it, for a tensor this optimizer does not hold, as a piece of a ZeRO
        shard); returns every tensor written.

        Advances `t` once. Nothing runs until the returned tensors are realized (together)."""
        if not items:
            return []
        self._per_step = {}
        try:
            with NoGrad():
                self._set(self.t, self.t + 1)
                written = [self.t]
                for p, g, state, *group in items:
                    _check(g.shape == p.shape, f"gradient of shape {g.shape} for a parameter of shape "
                                               f"{p.shape}; expected equal shapes. Fix: give .grad the "
                                               f"parameter's shape")
                    self._current = group[0] if group else self._group_for(p)
                    try:
                        # a gradient of another dtype than its parameter (ZeRO's float16 gradient of a
                        # float32 master) is used in the parameter's: the update's arithmetic is not
                        # rounded to the gradient's type (0.001 * g * g underflows in float16)
                        g = g.detach() if g.dtype == p.dtype else g.detach().cast(p.dtype)
                        self._set(p, self.apply_single(p, g, state))
                    finally:
                        self._current = None
                    written += [p, *state.values()]
        finally:
            self._per_step = {}
        return written


def _zeros_state(p: Tensor, fill: float = 0.0) -> Tensor:
    """A buffer shaped like p filled with `fill`, from host memory (a copy, no kernel to compile)."""
    return Tensor(np.full(p.shape, fill, dtype=p.dtype.np_value), dtype=p.dtype, device=p.device)


def _nonneg(group: Mapping[str, Any], cls: str, *names: str) -> None:
    for name in names:
        value = group.get(name)
        _check(isinstance(value, (int, float)) and value >= 0,
               f"{cls} {name} must be a number >= 0, got {value!r}")


class SGD(Optimizer):
    """Stochastic gradient descent with torch.optim.SGD's semantics (momentum, dampening, nesterov,
    L2 weight decay added to the gradient, maximize). The momentum buffer starts as the first gradient.

        >>> from tg import Tensor
        >>> w = Tensor([1.0], requires_grad=True)
        >>> opt = SGD([w], lr=0.1, momentum=0.9)
        >>> w.grad = Tensor([1.0]); opt.step(); w.grad = Tensor([1.0]); opt.step()
        >>> round(w.item(), 4)   # 1 - 0.1*1 - 0.1*(0.9*1 + 1)
        0.71
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 0.001,
                 momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, maximize: bool = False):
        super().__init__(params, lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                         weight_decay=weight_decay, maximize=maximize)

    def _check_group(self, group: Mapping[str, Any]) -> None:
        super()._check_group(group)
        _nonneg(group, "SGD", "momentum", "weight_decay")
        momentum, dampening = group["momentum"], group["dampening"]
        _check(not group["nesterov"] or (momentum > 0 and dampening == 0),
               f"SGD nesterov=True needs momentum > 0 and dampening == 0, got momentum={momentum} "
               f"dampening={dampening}")

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": _zeros_state(p)} if self.param_group["momentum"] else {}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        group = self.param_group
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        if group["momentum"]:
            momentum, dampening = group["momentum"], group["dampening"]
            if "momentum_buffer" not in state:     # momentum turned on after this parameter's first step
                state["momentum_buffer"] = _zeros_state(p)
            buf = state["momentum_buffer"]
            # torch starts the buffer at the first gradient: on step 1 the gradient is not dampened
            # (the buffer is zero then, so only the gradient's scale differs)
            scale = (self.t == 1).where(1.0, 1.0 - dampening) if dampening else 1.0
            self._set(buf, momentum * buf + scale * g)
            g = g + momentum * buf if group["nesterov"] else buf
        return p - self.lr_tensor * g


def _power(t: Tensor, beta: float) -> Tensor:
    """beta ** t on the device (0 when beta is 0)."""
    return (t * math.log2(beta)).exp2() if beta > 0 else t * 0.0


class Adam(Optimizer):
    """Adam with torch.optim.Adam's semantics: L2 weight decay added to the gradient, bias corrections
    computed on the device from the step count `t`.

        >>> from tg import Tensor
        >>> w = Tensor([1.0, -1.0], requires_grad=True)
        >>> opt = Adam([w], lr=0.1)
        >>> w.grad = Tensor([3.0, -0.5]); opt.step()
        >>> [round(x, 4) for x in w.tolist()]   # the first step moves each weight by lr
        [0.9, -0.9]
    """
    decoupled_weight_decay = False

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr, betas=betas, eps=eps, weight_decay=weight_decay)

    def _check_group(self, group: Mapping[str, Any]) -> None:
        super()._check_group(group)
        name, betas = type(self).__name__, group.get("betas")
        _check(isinstance(betas, (tuple, list)) and len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas),
               f"{name} betas must be two numbers in [0, 1), got {betas}")
        _nonneg(group, name, "eps", "weight_decay")

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        return {"exp_avg": _zeros_state(p), "exp_avg_sq": _zeros_state(p)}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        group = self.param_group
        b1, b2 = (float(b) for b in group["betas"])
        weight_decay = group["weight_decay"]
        decay, step_size, correction2 = self._scalars()
        if weight_decay and self.decoupled_weight_decay:
            p = p * decay
        elif weight_decay:
            g = g + weight_decay * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        self._set(m, b1 * m + (1.0 - b1) * g)
        self._set(v, b2 * v + (1.0 - b2) * (g * g))
        denom = v.sqrt() / correction2 + group["eps"]
        return p - step_size * m / denom

    def _scalars(self) -> tuple[Tensor, Tensor, Tensor]:
        """(1 - lr * weight_decay, lr / (1 - beta1^t), sqrt(1 - beta2^t)) of the group being stepped:
        built once per group and step, not once per parameter (the kernels are the same: scalars
        inline into each parameter's update)."""
        group = self.param_group
        key = (id(group), "adam")
        found = self._per_step.get(key)
        if found is None:
            b1, b2 = (float(b) for b in group["betas"])
            found = self._per_step[key] = (1.0 - self.lr_tensor * group["weight_decay"],
                                           self.lr_tensor / (1.0 - _power(self.t, b1)),
                                           (1.0 - _power(self.t, b2)).sqrt())
        return found


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW): `p *= 1 - lr * weight_decay` each step.

        >>> from tg import Tensor
        >>> w = Tensor([1.0], requires_grad=True)
        >>> opt = AdamW([w], lr=0.1, weight_decay=0.5)
        >>> w.grad = Tensor([0.0]); opt.step()
        >>> round(w.item(), 4)   # decay only: 1 * (1 - 0.1 * 0.5)
        0.95
    """
    decoupled_weight_decay = True

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    """RMSprop with torch.optim.RMSprop's semantics: a running mean of squared gradients (`alpha`),
    optionally centered (minus the squared running mean of gradients), momentum, L2 weight decay.

        >>> from tg import Tensor
        >>> w = Tensor([1.0, -1.0], requires_grad=True)
        >>> opt = RMSprop([w], lr=0.01, alpha=0.75)
        >>> w.grad = Tensor([2.0, -2.0]); opt.step()
        >>> [round(x, 4) for x in w.tolist()]   # g / sqrt((1 - alpha) g^2) = 2 per unit of lr
        [0.98, -0.98]
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 0.01,
                 alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 centered: bool = False):
        super().__init__(params, lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                         centered=centered)

    def _check_group(self, group: Mapping[str, Any]) -> None:
        super()._check_group(group)
        _nonneg(group, "RMSprop", "alpha", "eps", "weight_decay", "momentum")

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        state = {"square_avg": _zeros_state(p)}
        if self.param_group["momentum"]:
            state["momentum_buffer"] = _zeros_state(p)
        if self.param_group["centered"]:
            state["grad_avg"] = _zeros_state(p)
        return state

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        group = self.param_group
        alpha, momentum = group["alpha"], group["momentum"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        square_avg = state["square_avg"]
        self._set(square_avg, alpha * square_avg + (1.0 - alpha) * (g * g))
        variance: Tensor = square_avg
        if group["centered"]:
            grad_avg = state.setdefault("grad_avg", _zeros_state(p))
            self._set(grad_avg, alpha * grad_avg + (1.0 - alpha) * g)
            variance = square_avg - grad_avg * grad_avg
        update = g / (variance.sqrt() + group["eps"])
        if momentum:
            buf = state.setdefault("momentum_buffer", _zeros_state(p))
            update = self._set(buf, momentum * buf + update)
        return p - self.lr_tensor * update


class Adagrad(Optimizer):
    """Adagrad with torch.optim.Adagrad's semantics: the step is lr / (1 + (t - 1) lr_decay), divided by
    the root of each element's sum of squared gradients (which starts at initial_accumulator_value).

        >>> from tg import Tensor
        >>> w = Tensor([1.0, -1.0], requires_grad=True)
        >>> opt = Adagrad([w], lr=0.5)
        >>> w.grad = Tensor([3.0, -0.5]); opt.step()
        >>> [round(x, 4) for x in w.tolist()]   # the first step moves each weight by lr
        [0.5, -0.5]
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 0.01,
                 lr_decay: float = 0.0, weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10):
        super().__init__(params, lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps)

    def _check_group(self, group: Mapping[str, Any]) -> None:
        super()._check_group(group)
        _nonneg(group, "Adagrad", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        return {"sum": _zeros_state(p, self.param_group["initial_accumulator_value"])}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        group = self.param_group
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step_size = self.lr_tensor / (1.0 + (self.t - 1.0) * group["lr_decay"]) if group["lr_decay"] \
            else self.lr_tensor
        total = state["sum"]
        self._set(total, total + g * g)
        return p - step_size * g / (total.sqrt() + group["eps"])


class Adadelta(Optimizer):
    """Adadelta with torch.optim.Adadelta's semantics: running means of squared gradients and of squared
    updates (`rho`); each update is g * sqrt(mean update^2 + eps) / sqrt(mean g^2 + eps), times lr.

        >>> from tg import Tensor
        >>> w = Tensor([1.0], requires_grad=True)
        >>> opt = Adadelta([w], rho=0.75, eps=1.0)
        >>> w.grad = Tensor([2.0]); opt.step()
        >>> round(w.item(), 4)   # 1 - 2 * sqrt(0 + 1) / sqrt(0.25 * 4 + 1)
        -0.4142
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float = 1.0,
                 rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, lr, rho=rho, eps=eps, weight_decay=weight_decay)

    def _check_group(self, group: Mapping[str, Any]) -> None:
        super()._check_group(group)
        _nonneg(group, "Adadelta", "eps", "weight_decay")
        rho = group.get("rho")
        _check(isinstance(rho, (int, float)) and 0.0 <= rho <= 1.0,
               f"Adadelta rho must be in [0, 1], got {rho!r}")

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        return {"square_avg": _zeros_state(p), "acc_delta": _zeros_state(p)}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        group = self.param_group
        rho, eps = group["rho"], group["eps"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        self._set(square_avg, rho * square_avg + (1.0 - rho) * (g * g))
        # the update reads the OLD acc_delta: the scheduler runs its readers before the assign below
        delta = (acc_delta + eps).sqrt() / (square_avg + eps).sqrt() * g
        self._set(acc_delta, rho * acc_delta + (1.0 - rho) * (delta * delta))
        return p - self.lr_tensor * delta


# Optimizers whose step() may be captured (Optimizer._capturable, and GradScaler's verdict on the device):
# their updates read only tensors and group options. A subclass is not in it (its apply_single may read
# Python state that changes).
CAPTURABLE = {SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta}


# ---------------------------------------------------------------- learning-rate schedules
class LRScheduler:
    """Base class of the schedules: a subclass writes `lr_at(step, base_lr)`, the lr at a step for a group
    whose lr was base_lr; `step()` advances `last_epoch` and writes each group's lr (its device tensor).
    Construction applies step 0 (like torch), so create it before training. `base_lrs` are the groups'
    lrs at construction (`base_lr` the first). Unlike torch's, the rule is a pure function of the step
    (no chained, in-place updates of the last lr), so a resumed run sets `last_epoch` and calls step().

        >>> from tg import Tensor
        >>> class Halving(LRScheduler):
        ...     def lr_at(self, step, base_lr):
        ...         return base_lr / 2 ** step
        >>> opt = SGD([{"params": [Tensor.zeros(1)]}, {"params": [Tensor.zeros(1)], "lr": 0.1}], lr=1.0)
        >>> sched = Halving(opt)
        >>> sched.step()
        >>> sched.last_epoch, opt.lr, sched.get_last_lr()
        (1, 0.5, [0.5, 0.05])
    """

    def __init__(self, optimizer: Optimizer):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"[nn] {type(self).__name__} expected an Optimizer, "
                            f"got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lrs: list[float] = [float(group["lr"]) for group in optimizer.param_groups]
        self.last_epoch = 0
        self._last_lrs = self._apply()

    @property
    def base_lr(self) -> float:
        """The first group's lr at construction."""
        return self.base_lrs[0]

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError(
            f"{type(self).__name__} must define lr_at(step, base_lr), the learning rate at a step"
        )

    def _apply(self) -> list[float]:
        lrs = [float(self.lr_at(self.last_epoch, base)) for base in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        return lrs

    def step(self) -> None:
        """Advance one step and set every group's lr."""
        self.last_epoch += 1
        self._last_lrs = self._apply()

    def get_last_lr(self) -> list[float]:
        """The lrs last written, one per parameter group (as torch's)."""
        return list(self._last_lrs)


class LambdaLR(LRScheduler):
    """lr = base_lr * fn(step), torch.optim.lr_scheduler.LambdaLR's rule (one fn for every group).

        >>> from tg import Tensor
        >>> sched = LambdaLR(SGD([Tensor.zeros(1)], lr=1.0), lambda s: 0.5 ** s)
        >>> sched.step(); sched.step(); sched.get_last_lr()
        [0.25]
    """

    def __init__(self, optimizer: Optimizer, fn: Callable[[int], float]):
        self.fn = fn
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.fn(step)


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (step // step_size), torch.optim.lr_scheduler.StepLR's rule.

        >>> from tg import Tensor
        >>> sched = StepLR(SGD([Tensor.zeros(1)], lr=1.0), step_size=2, gamma=0.5)
        >>> [sched.step() or sched.get_last_lr()[0] for _ in range(4)]
        [1.0, 0.5, 0.5, 0.25]
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        _check(isinstance(step_size, int) and step_size > 0, f"StepLR step_size must be a positive int, "
                                                             f"got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** (step // self.step_size)


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (number of milestones <= step), torch's MultiStepLR rule.

        >>> from tg import Tensor
        >>> sched = MultiStepLR(SGD([Tensor.zeros(1)], lr=1.0), milestones=[1, 3], gamma=0.5)
        >>> [sched.step() or sched.get_last_lr()[0] for _ in range(4)]
        [0.5, 0.5, 0.25, 0.25]
    """

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1):
        self.milestones = sorted(milestones)
        _check(all(isinstance(m, int) and m >= 0 for m in self.milestones),
               f"MultiStepLR milestones must be ints >= 0, got {self.milestones}")
        self.gamma = gamma
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, step)


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** step, torch's ExponentialLR rule.

        >>> from tg import Tensor
        >>> sched = ExponentialLR(SGD([Tensor.zeros(1)], lr=1.0), gamma=0.5)
        >>> [sched.step() or sched.get_last_lr()[0] for _ in range(3)]
        [0.5, 0.25, 0.125]
    """

    def __init__(self, optimizer: Optimizer, gamma: float):
        self.gamma = gamma
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** step


class LinearLR(LRScheduler):
    """lr = base_lr * factor, the factor going linearly from start_factor to end_factor over total_iters
    steps and staying there: torch's LinearLR rule.

        >>> from tg import Tensor
        >>> sched = LinearLR(SGD([Tensor.zeros(1)], lr=1.0), start_factor=0.5, total_iters=2)
        >>> sched.get_last_lr() + [sched.step() or sched.get_last_lr()[0] for _ in range(3)]
        [0.5, 0.75, 1.0, 1.0]
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5):
        _check(0 < start_factor <= 1 and 0 <= end_factor <= 1,
               f"LinearLR needs 0 < start_factor <= 1 and 0 <= end_factor <= 1, got start_factor="
               f"{start_factor} end_factor={end_factor}")
        _check(isinstance(total_iters, int) and total_iters > 0,
               f"LinearLR total_iters must be a positive int, got {total_iters!r}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        done = min(step, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2, torch's CosineAnnealingLR
    (its closed form: after T_max steps the cosine goes on, back up).

        >>> from tg import Tensor
        >>> sched = CosineAnnealingLR(SGD([Tensor.zeros(1)], lr=1.0), T_max=2)
        >>> [round(sched.step() or sched.get_last_lr()[0], 4) for _ in range(3)]
        [0.5, 0.0, 0.5]
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N803 (torch's name)
        _check(isinstance(T_max, int) and T_max > 0, f"CosineAnnealingLR T_max must be a positive int, "
                                                     f"got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        return self.eta_min + (base_lr - self.eta_min) * 0.5 * (1.0 + math.cos(math.pi * step / self.T_max))


class CosineWithWarmup(LRScheduler):
    """Linear warm-up from 0 to base_lr over `warmup_steps`, then cosine decay to `min_lr` at
    `total_steps` (and `min_lr` after): torch's LinearLR then CosineAnnealingLR, as one schedule.

        >>> from tg import Tensor
        >>> sched = CosineWithWarmup(SGD([Tensor.zeros(1)], lr=1.0), warmup_steps=2, total_steps=4)
        >>> [round(sched.step() or sched.get_last_lr()[0], 4) for _ in range(5)]
        [0.5, 1.0, 0.5, 0.0, 0.0]
    """

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0):
        _check(0 <= warmup_steps <= total_steps, f"CosineWithWarmup needs 0 <= warmup_steps <= total_steps, "
                                                 f"got warmup_steps={warmup_steps} total_steps={total_steps}")
        _check(min_lr >= 0, f"CosineWithWarmup min_lr must be >= 0, got {min_lr}")
        self.warmup_steps, self.total_steps, self.min_lr = warmup_steps, total_steps, min_lr
        super().__init__(optimizer)

    def lr_at(self, step: int, base_lr: float) -> float:
        if step < self.warmup_steps:
            return base_lr * step / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.min_lr + (base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# ---------------------------------------------------------------- gradient clipping
# id(parameter) -> what holds its gradient while its .grad is None: a ZeroOptimizer (ZeRO-2) keeps only
# this rank's part of the reduced gradients, not a .grad per parameter. Clipping reads and scales the
# gradients there, and the holder combines the ranks' partial norms, so the result is unsharded training's.
_HOLDERS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def hold_gradients(params: Iterable[Tensor], holder: Any) -> None:
    """Register `holder` as keeping the gradients of params (while their .grad is None; always, when
    the holder's `shards` is true: the parameters are shards whose .grad is this rank's part, FSDP's).
    It has `held_gradients(params) -> list[Tensor]`: this rank's tensors of those gradients, written in
    place by clipping ([] when it holds none), and `combine(partial, op) -> Tensor`: a 0-d float32
    partial ("sum" of powers or "max") over its ranks, the same bits on every rank."""
    for p in params:
        _HOLDERS[id(p)] = holder


def gradients_of(params: Tensor | Iterable[Tensor]) -> tuple[list[Tensor], list[tuple[Any, list[Tensor]]]]:
    """The .grad of each parameter that has one, and per holder (hold_gradients) the tensors it keeps
    for the others: what clipping and a GradScaler read and scale."""
    params = [params] if isinstance(params, Tensor) else list(params)
    own: list[Tensor] = []
    held: dict[int, tuple[Any, list[Tensor]]] = {}
    for p in params:
        holder = _HOLDERS.get(id(p))
        if holder is not None and (p.grad is None or getattr(holder, "shards", False)):
            held.setdefault(id(holder), (holder, []))[1].append(p)
        elif p.grad is not None:
            own.append(p.grad)
    return own, [(h, h.held_gradients(ps)) for h, ps in held.values()]


def _partial_norm(grads: list[Tensor], norm_type: float, device: str) -> Tensor:
    """sum(|g| ** norm_type) over grads (max |g| for inf), a 0-d float32 tensor."""
    total = Tensor.zeros(device=device)
    for g in grads:
        if not g.numel():
            continue
        # torch accumulates the norm of half-precision grads in float32; wider grads keep their dtype
        g = g.detach() if g.dtype.itemsize >= 4 else g.detach().cast(dtypes.float32)
        if norm_type == math.inf:
            total = total.maximum(g.abs().max())
        else:
            total = total + (g * g if norm_type == 2.0 else g.abs() ** norm_type).sum()
    return total


def clip_grad_norm_(params: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale all gradients together so their total `norm_type`-norm is at most `max_norm`; returns the
    total norm (before clipping) as a 0-d tensor. torch's rule: grads *= min(1, max_norm / (norm + 1e-6)).
    `max_norm=float("inf")` only measures (a grad-norm log).

    In place, as torch's: each `.grad` stays the same Tensor and is assigned the scaled value (so a
    DistributedDataParallel / ZeroRedundancyOptimizer still sees the gradients it averaged). The
    gradients a ZeroOptimizer holds in shards are measured and scaled there, and the norm is the
    whole model's (the ranks' partial norms combined). Lazy: the norm, the scaling and the optimizer
    step that follows run in one schedule; nothing is read back to the host but a sharded norm's
    partial, which the ranks exchange.

        >>> from tg import Tensor
        >>> w = Tensor([0.0, 0.0]); w.grad = Tensor([3.0, 4.0])
        >>> clip_grad_norm_([w], max_norm=1.0).item()
        5.0
        >>> [round(x, 4) for x in w.grad.tolist()]
        [0.6, 0.8]
    """
    norm_type = float(norm_type)
    _check(norm_type > 0, f"clip_grad_norm_ norm_type must be > 0 or inf, got {norm_type}")
    own, held = gradients_of(params)
    if not own and not any(grads for _, grads in held):
        return Tensor.zeros()
    device = (own or [g for _, grads in held for g in grads])[0].device
    with NoGrad():
        total = _partial_norm(own, norm_type, device)
        for holder, grads in held:
            part = holder.combine(_partial_norm(grads, norm_type, device), "max" if norm_type == math.inf
                                  else "sum")
            total = total.maximum(part) if norm_type == math.inf else total + part
        if norm_type != math.inf:
            total = total.sqrt() if norm_type == 2.0 else total ** (1.0 / norm_type)
        coef = (max_norm / (total + 1e-6)).minimum(1.0)
        for g in [*own, *(g for _, grads in held for g in grads)]:
            g.assign((g.detach() * coef).cast(g.dtype))
    return total


def clip_grad_value_(params: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient element into [-clip_value, clip_value], in place (torch's
    clip_grad_value_); also the gradients a ZeroOptimizer holds in shards.

        >>> from tg import Tensor
        >>> w = Tensor([0.0, 0.0]); w.grad = Tensor([3.0, -0.5])
        >>> clip_grad_value_([w], 1.0); w.grad.tolist()
        [1.0, -0.5]
    """
    _check(clip_value >= 0, f"clip_grad_value_ clip_value must be >= 0, got {clip_value}")
    own, held = gradients_of(params)
    with NoGrad():
        for g in [*own, *(g for _, grads in held for g in grads)]:
            g.assign(g.detach().clamp(-clip_value, clip_value))
