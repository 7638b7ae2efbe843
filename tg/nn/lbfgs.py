"""L-BFGS (torch.optim.LBFGS): a quasi-Newton method for small full-batch problems (a curve fit, style
transfer, a time-series model trained on all its data). Each `step(closure)` runs up to `max_iter`
iterations: the closure recomputes the loss and its gradients, the direction comes from the last
`history_size` steps and gradient changes (the two-loop recursion), and the step length is `lr` (the
first iteration's scaled by 1 / |g|_1) or, with line_search_fn="strong_wolfe", one that satisfies the
strong Wolfe conditions (c1 = 1e-4, c2 = 0.9), found by bracketing and cubic interpolation (Nocedal and
Wright, Numerical Optimization, algorithms 3.5 and 3.6).

The parameters and gradients are gathered into one vector on the host and the method's arithmetic runs
there in float64 (the vectors are as long as the model, and the method reads scalars from them at every
iteration); each closure call runs on the parameters' device. torch does the same arithmetic in the
parameters' dtype on their device, so the two agree to float32 rounding.

    >>> from tg import Tensor
    >>> x = Tensor([-1.5, 2.0], requires_grad=True)
    >>> opt = LBFGS([x], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2      # Rosenbrock's function
    ...     loss.backward()
    ...     return loss
    >>> for _ in range(5):
    ...     _ = opt.step(closure)
    >>> [round(v, 4) for v in x.tolist()]
    [1.0, 1.0]
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from tg.core.tensor import NoGrad, Tensor
from tg.nn.optim import Optimizer

C1, C2 = 1e-4, 0.9     # the strong Wolfe conditions' constants: sufficient decrease, curvature
MAX_LS = 25            # closure calls one line search may make
_Point = tuple[float, float, np.ndarray, float]     # (t, loss, gradient, gradient . direction) at x + t d


class LBFGS(Optimizer):
    """torch.optim.LBFGS's arguments and semantics (one parameter group, as torch's); `step(closure)`
    returns the loss the closure gave first."""

    def __init__(self, params: Iterable[Any], lr: float = 1.0, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None):
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"[nn] LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                             f"{line_search_fn!r}")
        for name, value in (("max_iter", max_iter), ("history_size", history_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"[nn] LBFGS: {name} must be an int >= 1, got {value!r}")
        super().__init__(params, lr, max_iter=max_iter,
                         max_eval=max_eval if max_eval is not None else max_iter * 5 // 4,
                         tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                         history_size=history_size, line_search_fn=line_search_fn)
        if len(self.param_groups) != 1:
            raise ValueError("[nn] LBFGS takes one parameter group (torch's rule: it has no per-parameter "
                             "options); pass the parameters as one list")
        self._memory: dict[str, Any] = {"func_evals": 0, "n_iter": 0}

    # ------------------------------------------------------------ the flat vector on the host
    def _gather(self) -> np.ndarray:
        return np.concatenate([p.grad.numpy().astype(np.float64).reshape(-1) if p.grad is not None
                               else np.zeros(p.numel()) for p in self.params])

    def _values(self) -> np.ndarray:
        return np.concatenate([p.numpy().astype(np.float64).reshape(-1) for p in self.params])

    def _put(self, flat: np.ndarray) -> None:
        with NoGrad():
            at = 0
            for p in self.params:
                n = p.numel()
                p.assign(Tensor(flat[at:at + n].reshape(p.shape), dtype=p.dtype, device=p.device)).realize()
                at += n

    def _evaluate(self, closure: Callable[[], Any], x: np.ndarray, t: float,
                  d: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and gradient at x + t d (the parameters are put back to x after)."""
        self._put(x + t * d)
        loss = float(_value(closure()))
        grad = self._gather()
        self._put(x)
        return loss, grad

    # ------------------------------------------------------------ the method
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        if closure is None:
            raise ValueError("[nn] LBFGS.step needs a closure that zeroes the gradients, computes the loss, "
                             "calls backward() and returns the loss (it is called several times a step)")
        group, mem = self.param_groups[0], self._memory
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        first_loss = closure()
        loss = float(_value(first_loss))
        evals = 1
        mem["func_evals"] += 1
        g = self._gather()
        if np.abs(g).max(initial=0.0) <= tol_grad:
            return first_loss
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            mem["n_iter"] += 1
            d = self._direction(g)
            mem["prev_flat_grad"], mem["prev_loss"] = g.copy(), loss
            t = min(1.0, 1.0 / np.abs(g).sum()) * lr if mem["n_iter"] == 1 else lr
            mem["d"], mem["t"] = d, t
            gtd = float(g @ d)
            if gtd > -tol_change:           # not a descent direction (to rounding): stop
                break
            ls_evals = 0
            x = self._values()
            if group["line_search_fn"] == "strong_wolfe":
                loss, g, t, ls_evals = self._strong_wolfe(closure, x, t, d, loss, g, gtd, tol_change)
                self._put(x + t * d)
            else:
                self._put(x + t * d)
                if n_iter != max_iter:      # the loss and gradient at the new point, for the next iteration
                    loss = float(_value(closure()))
                    g = self._gather()
                    ls_evals = 1
            mem["t"] = t
            evals += ls_evals
            mem["func_evals"] += ls_evals
            moved = np.abs(d * t).max(initial=0.0)
            if n_iter == max_iter or evals >= max_eval or np.abs(g).max(initial=0.0) <= tol_grad or \
                    moved <= tol_change or abs(loss - mem["prev_loss"]) < tol_change:
                break
        return first_loss

    def _direction(self, g: np.ndarray) -> np.ndarray:
        """The next search direction, -H g: the first iteration's is -g; later ones keep the newest
        curvature pair (the last step s and the gradient's change y, where y.s > 0), at most
        history_size of them, and apply them by the two-loop recursion."""
        mem, history = self._memory, self.param_groups[0]["history_size"]
        dirs, steps, ro = (mem.setdefault(k, []) for k in ("old_dirs", "old_stps", "ro"))
        if mem["n_iter"] == 1:
            dirs.clear(), steps.clear(), ro.clear()
            mem["H_diag"] = 1.0
            return -g
        y, s = g - mem["prev_flat_grad"], mem["d"] * mem["t"]
        ys = float(y @ s)
        if ys > 1e-10:
            if len(dirs) == history:
                dirs.pop(0), steps.pop(0), ro.pop(0)
            dirs.append(y), steps.append(s), ro.append(1.0 / ys)
            mem["H_diag"] = ys / float(y @ y)
        q = -g
        alphas = [0.0] * len(dirs)
        for i in reversed(range(len(dirs))):
            alphas[i] = float(steps[i] @ q) * ro[i]
            q = q - alphas[i] * dirs[i]
        r = q * mem["H_diag"]
        for i in range(len(dirs)):
            beta = float(dirs[i] @ r) * ro[i]
            r = r + steps[i] * (alphas[i] - beta)
        return r

    def _strong_wolfe(self, closure: Callable[[], Any], x: np.ndarray, t: float, d: np.ndarray, f0: float,
                      g0: np.ndarray, gtd0: float, tol_change: float) -> tuple[float, np.ndarray, float, int]:
        """A step t along d meeting f(x + t d) <= f0 + C1 t g0.d and |g(x + t d).d| <= C2 |g0.d|:
        (loss, gradient, t, closure calls). Bracketing (t grows by cubic extrapolation until an interval
        holds such a point), then zoom (the interval shrinks by cubic interpolation)."""
        f, g = self._evaluate(closure, x, t, d)
        calls, gtd = 1, float(g @ d)
        prev: _Point = (0.0, f0, g0, gtd0)
        bracket: list[_Point] | None = None
        while calls <= MAX_LS:
            if f > f0 + C1 * t * gtd0 or (calls > 2 and f >= prev[1]):
                bracket = [prev, (t, f, g, gtd)]
                break
            if abs(gtd) <= -C2 * gtd0:
                return f, g, t, calls
            if gtd >= 0:
                bracket = [prev, (t, f, g, gtd)]
                break
            new_t = _cubic_min(prev[0], prev[1], prev[3], t, f, gtd, t + 0.01 * (t - prev[0]), t * 10)
            prev, t = (t, f, g, gtd), new_t
            f, g = self._evaluate(closure, x, t, d)
            calls, gtd = calls + 1, float(g @ d)
        if bracket is None:                  # out of tries: between the start and what was reached
            bracket = [(0.0, f0, g0, gtd0), (t, f, g, gtd)]
        return self._zoom(closure, x, d, f0, gtd0, tol_change, bracket, calls)

    def _zoom(self, closure: Callable[[], Any], x: np.ndarray, d: np.ndarray, f0: float, gtd0: float,
              tol_change: float, bracket: list[_Point], calls: int) -> tuple[float, np.ndarray, float, int]:
        """Shrink the bracket, its low end the best point so far, until a point meets both conditions
        (or the bracket is narrower than tolerance_change along d, or the calls run out)."""
        d_norm, stuck = float(np.abs(d).max()), False
        low = 0 if bracket[0][1] <= bracket[1][1] else 1
        while calls <= MAX_LS:
            a, b = sorted((bracket[0][0], bracket[1][0]))
            if (b - a) * d_norm < tol_change:
                break
            (t1, f1, _, s1), (t2, f2, _, s2) = bracket
            t = _cubic_min(t1, f1, s1, t2, f2, s2, a, b)
            eps = 0.1 * (b - a)
            if min(b - t, t - a) < eps:          # too near an end: step inside, at the second time in a row
                move = stuck or t >= b or t <= a
                if move:
                    t = b - eps if abs(t - b) < abs(t - a) else a + eps
                stuck = not move
            else:
                stuck = False
            f, g = self._evaluate(closure, x, t, d)
            calls += 1
            point: _Point = (t, f, g, float(g @ d))
            if f > f0 + C1 * t * gtd0 or f >= bracket[low][1]:
                bracket[1 - low] = point
                low = 0 if bracket[0][1] <= bracket[1][1] else 1
                continue
            if abs(point[3]) <= -C2 * gtd0:
                bracket[low] = point
                break
            if point[3] * (bracket[1 - low][0] - bracket[low][0]) >= 0:
                bracket[1 - low] = bracket[low]
            bracket[low] = point
        t, f, g, _ = bracket[low]
        return f, g, t, calls

    def state_dict(self) -> dict[str, Any]:
        """The options and the method's memory (the history as lists of floats): JSON-able, no pickle."""
        def plain(v: Any) -> Any:
            return v.tolist() if isinstance(v, np.ndarray) else [plain(a) for a in v] if isinstance(v, list) \
                else float(v) if isinstance(v, np.floating) else v
        mem = {k: plain(v) for k, v in self._memory.items()}
        options = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": mem, "param_groups": [{**options, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        mem = dict(state_dict["state"])
        for key in ("d", "prev_flat_grad"):
            if mem.get(key) is not None:
                mem[key] = np.asarray(mem[key], np.float64)
        for key in ("old_dirs", "old_stps"):
            mem[key] = [np.asarray(v, np.float64) for v in mem.get(key, [])]
        self._memory = mem
        for k, v in state_dict["param_groups"][0].items():
            if k != "params":
                self.param_groups[0][k] = v


def _value(loss: Any) -> float:
    return loss.item() if isinstance(loss, Tensor) else float(loss)


def _cubic_min(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float, lo: float,
               hi: float) -> float:
    """The minimizer in [lo, hi] of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2
    (Nocedal and Wright, eq. 3.59); the middle of [lo, hi] where the cubic has no minimum."""
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    square = d1 * d1 - g1 * g2
    if square < 0:
        return (lo + hi) / 2
    d2 = math.sqrt(square)
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)
