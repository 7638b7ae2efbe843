"""Optimizers written per parameter, learning-rate schedules and gradient clipping.

Each optimizer only says how ONE parameter moves: `init_single(p)` allocates that parameter's state
buffers and `apply_single(p, g, state)` returns the new value of `p` as a lazy expression (writing the
new state in place with `.assign`). `step()` runs that for every parameter with a gradient and realizes
every updated parameter and state buffer in one schedule, so the whole update is one batch of kernels
and every buffer keeps its memory from step to step (what a captured/JIT-replayed step needs).
ZeRO-2 calls the same `apply(...)` on flat 1-d shards of parameters and gradients.

Values that change during training — the learning rate and the step count `t` — live on the device
as 0-d float32 tensors that are updated in place, so a replayed step sees a new lr from a scheduler.

    >>> from tg import Tensor
    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.1)
    >>> _ = (w * w).sum().backward()   # grad = 2w
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.8, 1.6]
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tg.core.dtype import dtypes
from tg.core.tensor import Tensor, _NoGrad


def _scalar(value: float, device: str) -> Tensor:
    """A realized 0-d float32 tensor: one stable buffer that `.assign` rewrites in place."""
    return Tensor(np.array(value, dtype=np.float32), device=device)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"[nn] {message}")


class Optimizer:
    """Base class: subclasses write `init_single` and `apply_single`; `step()` does the rest.

    `lr` reads and writes the device learning-rate tensor `lr_tensor` (0-d float32); `t` is the
    step count on the device, advanced once per `step()` before any parameter is updated. One `t`
    serves every parameter (torch counts per parameter), so a parameter whose first gradient comes
    at step k gets step k's Adam bias corrections; with a gradient every step the two agree.

        >>> from tg import Tensor
        >>> opt = SGD([Tensor.zeros(3)], lr=0.5)
        >>> opt.lr = 0.25
        >>> opt.lr
        0.25

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

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params: list[Tensor] = list(params)
        _check(len(self.params) > 0, "optimizer got an empty parameter list; expected at least one Tensor. "
                                     "Fix: pass model parameters, e.g. SGD(model.parameters(), lr=0.1)")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"[nn] optimizer parameters must be Tensors, got {type(p).__name__} "
                                f"at index {i}. Fix: pass a list of Tensors")
        _check(len({id(p) for p in self.params}) == len(self.params),
               "a parameter appears more than once in the optimizer's list; it would be updated twice. "
               "Fix: pass each Tensor once")
        devices = sorted({p.device for p in self.params})
        _check(len(devices) == 1, f"optimizer parameters must all be on one device, got {devices}. "
                                  f"Fix: move them with .to(device), or use one optimizer per device")
        _check(lr >= 0, f"learning rate must be >= 0, got {lr}")
        self.device: str = devices[0]
        self.lr_tensor: Tensor = _scalar(lr, self.device)
        self.t: Tensor = _scalar(0, self.device)
        # state of self.params[i], made by init_single the first time that parameter has a gradient
        self.state: list[dict[str, Tensor] | None] = [None] * len(self.params)

    @property
    def lr(self) -> float:
        return float(self.lr_tensor.item())

    @lr.setter
    def lr(self, value: float) -> None:
        _check(value >= 0, f"learning rate must be >= 0, got {value}")
        self.lr_tensor.assign(_scalar(value, self.device)).realize()

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (`.grad = None`, like torch's set_to_none=True).

            >>> from tg import Tensor
            >>> w = Tensor([1.0], requires_grad=True)
            >>> w.grad = Tensor([2.0])
            >>> SGD([w], lr=0.1).zero_grad()
            >>> w.grad is None
            True
        """
        for p in self.params:
            p.grad = None

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        """Allocate (and realize) the state buffers of one parameter; override in subclasses."""
        return {}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        """The new value of `p` given its gradient `g` (lazy); assigns new state values in place."""
        raise NotImplementedError(
            f"{type(self).__name__} must define apply_single (the per-parameter update)"
        )

    def step(self) -> None:
        """Update every parameter that has a `.grad`, in one schedule (no host sync).

        The loss most recently differentiated, if still pending, is computed in the same schedule:
        it reads the old weights, and computing it now avoids keeping a copy of them. Parameters
        whose `.grad` is None are left alone, as in torch.

            >>> from tg import Tensor
            >>> w, frozen = Tensor([1.0, 2.0], requires_grad=True), Tensor([5.0], requires_grad=True)
            >>> opt = SGD([w, frozen], lr=0.5)
            >>> w.grad = Tensor([2.0, -2.0])
            >>> opt.step()
            >>> w.tolist(), frozen.tolist(), opt.t.item()
            ([0.0, 3.0], [5.0], 1.0)
        """
        items = []
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            items.append((p, p.grad, self._state(i)))
        written = self.apply(items)
        root = Tensor.last_backward_root()
        if root is not None and root.lazydata.base.realized is None:
            written.append(root)
        if written:
            written[0].realize(*written[1:])

    def _state(self, i: int) -> dict[str, Tensor]:
        state = self.state[i]
        if state is None:
            state = self.state[i] = self.init_single(self.params[i])
        return state

    def state_dict(self) -> dict[str, Tensor]:
        """The step count, learning rate and every parameter's state, by torch-like names (a flat dict of
        Tensors, ready for safe_save; torch nests it under 'state' and 'param_groups').

            >>> from tg import Tensor
            >>> list(Adam([Tensor.zeros(2)], lr=0.01).state_dict())
            ['t', 'lr', 'state.0.exp_avg', 'state.0.exp_avg_sq']
        """
        out = {"t": self.t, "lr": self.lr_tensor}
        for i in range(len(self.params)):
            out.update({f"state.{i}.{k}": v for k, v in self._state(i).items()})
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what state_dict() returned (strict: every key must match), in place.

            >>> from tg import Tensor
            >>> saved = SGD([Tensor.zeros(1)], lr=0.5, momentum=0.9).state_dict()
            >>> opt = SGD([Tensor.zeros(1)], lr=0.1, momentum=0.9)
            >>> opt.load_state_dict(saved)
            >>> opt.lr
            0.5
        """
        from tg.nn.state import load_state_dict
        load_state_dict(self.state_dict(), state_dict)

    def apply(self, items: Sequence[tuple[Tensor, Tensor, dict[str, Tensor]]]) -> list[Tensor]:
        """Lazily write one step into each (param, grad, state); returns every tensor written.

        Advances `t` once. Nothing runs until the returned tensors are realized (together)."""
        if not items:
            return []
        with _NoGrad():
            self.t.assign(self.t + 1)
            written = [self.t]
            for p, g, state in items:
                _check(g.shape == p.shape, f"gradient of shape {g.shape} for a parameter of shape {p.shape}; "
                                           f"expected equal shapes. Fix: give .grad the parameter's shape")
                p.assign(self.apply_single(p, g.detach(), state))
                written += [p, *state.values()]
        return written


def _zeros_state(p: Tensor) -> Tensor:
    """A zero buffer shaped like p, filled from host memory (a copy, no kernel to compile)."""
    return Tensor(np.zeros(p.shape, dtype=p.dtype.np_value), dtype=p.dtype, device=p.device)


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

    def __init__(self, params: Iterable[Tensor], lr: float = 0.001, momentum: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
                 maximize: bool = False):
        super().__init__(params, lr)
        _check(momentum >= 0, f"SGD momentum must be >= 0, got {momentum}")
        _check(weight_decay >= 0, f"SGD weight_decay must be >= 0, got {weight_decay}")
        _check(not nesterov or (momentum > 0 and dampening == 0),
               f"SGD nesterov=True needs momentum > 0 and dampening == 0, got momentum={momentum} "
               f"dampening={dampening}")
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov
        self.weight_decay, self.maximize = weight_decay, maximize

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": _zeros_state(p)} if self.momentum else {}

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        if self.maximize:
            g = -g
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = state["momentum_buffer"]
            # torch starts the buffer at the first gradient: on step 1 the gradient is not dampened
            # (the buffer is zero then, so only the gradient's scale differs)
            scale = (self.t == 1).where(1.0, 1.0 - self.dampening) if self.dampening else 1.0
            buf.assign(self.momentum * buf + scale * g)
            g = g + self.momentum * buf if self.nesterov else buf
        return p - self.lr_tensor * g


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

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr)
        _check(len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas),
               f"{type(self).__name__} betas must be two numbers in [0, 1), got {betas}")
        _check(eps >= 0, f"{type(self).__name__} eps must be >= 0, got {eps}")
        _check(weight_decay >= 0, f"{type(self).__name__} weight_decay must be >= 0, got {weight_decay}")
        self.betas, self.eps, self.weight_decay = (float(betas[0]), float(betas[1])), eps, weight_decay

    def init_single(self, p: Tensor) -> dict[str, Tensor]:
        return {"exp_avg": _zeros_state(p), "exp_avg_sq": _zeros_state(p)}

    def _power(self, beta: float) -> Tensor:
        """beta ** t on the device (0 when beta is 0)."""
        return (self.t * math.log2(beta)).exp2() if beta > 0 else self.t * 0.0

    def apply_single(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
        b1, b2 = self.betas
        if self.weight_decay and self.decoupled_weight_decay:
            p = p * (1.0 - self.lr_tensor * self.weight_decay)
        elif self.weight_decay:
            g = g + self.weight_decay * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.assign(b1 * m + (1.0 - b1) * g)
        v.assign(b2 * v + (1.0 - b2) * (g * g))
        step_size = self.lr_tensor / (1.0 - self._power(b1))
        denom = v.sqrt() / (1.0 - self._power(b2)).sqrt() + self.eps
        return p - step_size * m / denom


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

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


# ---------------------------------------------------------------- learning-rate schedules
class LRScheduler:
    """Base class of the schedules: a subclass writes `lr_at(step)`, the lr at a step; `step()` advances
    `last_epoch` and writes that lr into the optimizer's lr tensor. Construction applies step 0 (like
    torch), so create it before training. `base_lr` is the optimizer's lr at construction. Unlike torch's,
    the rule is a pure function of the step (no chained, in-place updates of the last lr).

        >>> from tg import Tensor
        >>> class Halving(LRScheduler):
        ...     def lr_at(self, step):
        ...         return self.base_lr / 2 ** step
        >>> opt = SGD([Tensor.zeros(1)], lr=1.0)
        >>> sched = Halving(opt)
        >>> sched.step()
        >>> sched.last_epoch, opt.lr, sched.get_last_lr()
        (1, 0.5, [0.5])
    """

    def __init__(self, optimizer: Optimizer):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"[nn] {type(self).__name__} expected an Optimizer, "
                            f"got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr: float = optimizer.lr
        self.last_epoch = 0
        self._last_lr = self._apply()

    def lr_at(self, step: int) -> float:
        raise NotImplementedError(
            f"{type(self).__name__} must define lr_at(step), the learning rate at a step"
        )

    def _apply(self) -> float:
        lr = float(self.lr_at(self.last_epoch))
        self.optimizer.lr = lr
        return lr

    def step(self) -> None:
        """Advance one step and set the optimizer's lr."""
        self.last_epoch += 1
        self._last_lr = self._apply()

    def get_last_lr(self) -> list[float]:
        """The lr last written, as a one-element list (torch returns one per parameter group)."""
        return [self._last_lr]


class LambdaLR(LRScheduler):
    """lr = base_lr * fn(step), torch.optim.lr_scheduler.LambdaLR's rule.

        >>> from tg import Tensor
        >>> sched = LambdaLR(SGD([Tensor.zeros(1)], lr=1.0), lambda s: 0.5 ** s)
        >>> sched.step(); sched.step(); sched.get_last_lr()
        [0.25]
    """

    def __init__(self, optimizer: Optimizer, fn: Callable[[int], float]):
        self.fn = fn
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        return self.base_lr * self.fn(step)


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

    def lr_at(self, step: int) -> float:
        return self.base_lr * self.gamma ** (step // self.step_size)


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

    def lr_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.base_lr * step / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.min_lr + (self.base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# ---------------------------------------------------------------- gradient clipping
def clip_grad_norm_(params: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale all gradients together so their total `norm_type`-norm is at most `max_norm`; returns the
    total norm (before clipping) as a 0-d tensor. torch's rule: grads *= min(1, max_norm / (norm + 1e-6)).

    Lazy: each `.grad` is replaced by the scaled expression, so the norm, the scaling and the optimizer
    step that follows all run in one schedule — nothing is read back to the host.

        >>> from tg import Tensor
        >>> w = Tensor([0.0, 0.0]); w.grad = Tensor([3.0, 4.0])
        >>> clip_grad_norm_([w], max_norm=1.0).item()
        5.0
        >>> [round(x, 4) for x in w.grad.tolist()]
        [0.6, 0.8]
    """
    params = [params] if isinstance(params, Tensor) else list(params)
    norm_type = float(norm_type)
    _check(norm_type > 0, f"clip_grad_norm_ norm_type must be > 0 or inf, got {norm_type}")
    with_grad = [p for p in params if p.grad is not None]
    if not with_grad:
        return Tensor.zeros()
    with _NoGrad():
        # torch accumulates the norm of half-precision grads in float32; wider grads keep their dtype
        grads = [g if g.dtype.itemsize >= 4 else g.cast(dtypes.float32)
                 for g in (p.grad.detach() for p in with_grad if p.grad is not None) if g.numel()]
        total = Tensor.zeros(device=with_grad[0].device)
        if norm_type == math.inf:
            for g in grads:
                total = total.maximum(g.abs().max())
        else:
            for g in grads:
                total = total + (g * g if norm_type == 2.0 else g.abs() ** norm_type).sum()
            total = total.sqrt() if norm_type == 2.0 else total ** (1.0 / norm_type)
        coef = (max_norm / (total + 1e-6)).minimum(1.0)
        for p in with_grad:
            assert p.grad is not None
            p.grad = (p.grad.detach() * coef).cast(p.grad.dtype)
    return total
