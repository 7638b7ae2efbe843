"""Parameter groups (per-group options, lr writes honoured eagerly and under TinyJit), state_dict in
torch's names, zero_grad(set_to_none=), the tg.optim paths, and RMSprop / Adagrad / Adadelta against numpy
references written from torch's documented update rules."""
from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import pytest

import tg
from tg import Tensor
from tg.core.jit import TinyJit
from tg.nn.optim import SGD, Adadelta, Adagrad, Adam, AdamW, Optimizer, RMSprop
from tg.nn.state import safe_load, safe_save
from tg.optim import lr_scheduler

TOL = {"rtol": 1e-4, "atol": 1e-5}
SHAPES = [(7,), (3, 5)]          # odd sizes
STEPS = 5


def _random(shape: tuple[int, ...], n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape).astype(np.float32),
            [rng.standard_normal(shape).astype(np.float32) for _ in range(n)])


def _lrs(lr: float | list[float], n: int) -> list[float]:
    return lr if isinstance(lr, list) else [lr] * n


# ---------------------------------------------------------------- numpy references (torch's docs, float64)
def sgd_ref(p, grads, lr, momentum=0.0, weight_decay=0.0):
    p, buf = p.astype(np.float64), None
    for g, step_lr in zip(grads, _lrs(lr, len(grads))):
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
            g = buf
        p = p - step_lr * g
    return p


def adam_ref(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    p = p.astype(np.float64)
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, (g, step_lr) in enumerate(zip(grads, _lrs(lr, len(grads))), start=1):
        if decoupled:
            p = p * (1 - step_lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        p = p - step_lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
    return p


def rmsprop_ref(p, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    p = p.astype(np.float64)
    square_avg, grad_avg, buf = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g, step_lr in zip(grads, _lrs(lr, len(grads))):
        g = g + weight_decay * p
        square_avg = alpha * square_avg + (1 - alpha) * g * g
        variance = square_avg
        if centered:
            grad_avg = alpha * grad_avg + (1 - alpha) * g
            variance = square_avg - grad_avg ** 2
        if momentum > 0:
            buf = momentum * buf + g / (np.sqrt(variance) + eps)
            p = p - step_lr * buf
        else:
            p = p - step_lr * g / (np.sqrt(variance) + eps)
    return p


def adagrad_ref(p, grads, lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    p = p.astype(np.float64)
    state_sum = np.full_like(p, initial_accumulator_value)
    for t, (g, step_lr) in enumerate(zip(grads, _lrs(lr, len(grads))), start=1):
        g = g + weight_decay * p
        clr = step_lr / (1 + (t - 1) * lr_decay)
        state_sum = state_sum + g * g
        p = p - clr * g / (np.sqrt(state_sum) + eps)
    return p


def adadelta_ref(p, grads, lr, rho=0.9, eps=1e-6, weight_decay=0.0):
    p = p.astype(np.float64)
    square_avg, acc_delta = np.zeros_like(p), np.zeros_like(p)
    for g, step_lr in zip(grads, _lrs(lr, len(grads))):
        g = g + weight_decay * p
        square_avg = rho * square_avg + (1 - rho) * g * g
        delta = np.sqrt(acc_delta + eps) / np.sqrt(square_avg + eps) * g
        acc_delta = rho * acc_delta + (1 - rho) * delta * delta
        p = p - step_lr * delta
    return p


# ---------------------------------------------------------------- new optimizers vs numpy
NEW_OPTIMIZERS = [
    (RMSprop, {"lr": 0.01}, rmsprop_ref),
    (RMSprop, {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.1}, rmsprop_ref),
    (RMSprop, {"lr": 0.005, "alpha": 0.8, "momentum": 0.9}, rmsprop_ref),
    (RMSprop, {"lr": 0.005, "alpha": 0.9, "momentum": 0.5, "centered": True, "eps": 1e-3}, rmsprop_ref),
    (Adagrad, {"lr": 0.1}, adagrad_ref),
    (Adagrad, {"lr": 0.1, "lr_decay": 0.3, "weight_decay": 0.2, "initial_accumulator_value": 0.5},
     adagrad_ref),
    (Adadelta, {}, adadelta_ref),
    (Adadelta, {"lr": 0.5, "rho": 0.8, "eps": 1e-3, "weight_decay": 0.1}, adadelta_ref),
]
DEFAULT_LR = {RMSprop: 0.01, Adagrad: 0.01, Adadelta: 1.0}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("opt_cls,kw,reference", NEW_OPTIMIZERS)
def test_new_optimizers_match_torch_rule(shape, opt_cls, kw, reference):
    p0, grads = _random(shape, STEPS, seed=len(kw) + len(shape))
    p = Tensor(p0, requires_grad=True)
    opt = opt_cls([p], **kw)
    for g in grads:
        p.grad = Tensor(g)
        opt.step()
    options = {k: v for k, v in kw.items() if k != "lr"}
    np.testing.assert_allclose(p.numpy(), reference(p0, grads, kw.get("lr", DEFAULT_LR[opt_cls]), **options),
                               **TOL)


@pytest.mark.parametrize("make,match", [
    (lambda p: RMSprop([p], alpha=-0.1), "alpha"),
    (lambda p: Adagrad([p], lr_decay=-1.0), "lr_decay"),
    (lambda p: Adadelta([p], rho=1.5), "rho"),
    (lambda p: SGD([{"params": [p], "lr": -0.1}]), "learning rate"),
    (lambda p: SGD([{"params": [p]}, {"params": [p]}], lr=0.1), "more than once"),
    (lambda p: SGD([{"lr": 0.1}]), "'params'"),
])
def test_bad_options_are_value_errors(make, match):
    with pytest.raises(ValueError, match=r"^\[nn\] .*" + match):
        make(Tensor([1.0]))


def test_mixed_tensors_and_groups_is_a_type_error():
    with pytest.raises(TypeError, match=r"\[nn\] .*all Tensors or all dicts"):
        SGD([Tensor([1.0]), {"params": [Tensor([2.0])]}], lr=0.1)


# ---------------------------------------------------------------- per-group options
@pytest.mark.parametrize("opt_cls,defaults,groups,reference", [
    (SGD, {"lr": 0.1, "momentum": 0.9}, [{}, {"lr": 0.03, "weight_decay": 0.2}], sgd_ref),
    (Adam, {"lr": 0.01}, [{"weight_decay": 0.1}, {"lr": 0.05, "betas": (0.8, 0.99)}], adam_ref),
    (AdamW, {"lr": 0.01, "weight_decay": 0.0}, [{}, {"lr": 0.02, "weight_decay": 0.3}],
     lambda p, g, lr, **kw: adam_ref(p, g, lr, decoupled=True, **kw)),
    (Adagrad, {"lr": 0.1}, [{"lr_decay": 0.1}, {"lr": 0.2, "initial_accumulator_value": 1.0}], adagrad_ref),
])
def test_two_groups_each_follow_their_own_options(opt_cls, defaults, groups, reference):
    shapes = [(5,), (3, 3)]
    data = [_random(shape, STEPS, seed=10 + i) for i, shape in enumerate(shapes)]
    params = [Tensor(p0, requires_grad=True) for p0, _ in data]
    opt = opt_cls([{"params": [p], **options} for p, options in zip(params, groups)], **defaults)
    for step in range(STEPS):
        for p, (_, grads) in zip(params, data):
            p.grad = Tensor(grads[step])
        opt.step()
    for p, (p0, grads), options in zip(params, data, groups):
        merged = {**defaults, **options}
        lr = merged.pop("lr")
        np.testing.assert_allclose(p.numpy(), reference(p0, grads, lr, **merged), **TOL)


def _train_two_groups(use_jit: bool,
                      opt_cls: type = Adam) -> tuple[list[np.ndarray], Optimizer, list[list[float]]]:
    """Two groups; group 1's lr is changed before steps 3 and 5 (after TinyJit captured)."""
    data = [_random((5,), STEPS + 1, seed=20), _random((3, 3), STEPS + 1, seed=21)]
    params = [Tensor(p0, requires_grad=True) for p0, _ in data]
    grads = [Tensor(np.zeros(p.shape, np.float32)).contiguous().realize() for p in params]
    opt = opt_cls([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.05}], lr=0.01)

    def step() -> None:
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    run = TinyJit(step) if use_jit else step
    lrs: list[list[float]] = [[], []]
    for i in range(STEPS + 1):
        if i == 3:
            opt.param_groups[1]["lr"] = 0.2
        if i == 5:
            opt.param_groups[1]["lr"] = 0.001
            opt.param_groups[0]["lr"] = 0.03
        for g, (_, g_np) in zip(grads, data):
            g.assign(Tensor(g_np[i])).realize()       # new gradient values, same buffers
        lrs[0].append(opt.param_groups[0]["lr"])
        lrs[1].append(opt.param_groups[1]["lr"])
        run()
    return [p.numpy() for p in params], opt, lrs


@pytest.mark.parametrize("use_jit", [False, True])
@pytest.mark.parametrize("opt_cls,reference",
                         [(Adam, adam_ref), (RMSprop, rmsprop_ref), (Adadelta, adadelta_ref)])
def test_lr_write_to_a_group_is_honoured_eagerly_and_under_tinyjit(use_jit, opt_cls, reference):
    got, opt, lrs = _train_two_groups(use_jit, opt_cls)
    data = [_random((5,), STEPS + 1, seed=20), _random((3, 3), STEPS + 1, seed=21)]
    for value, (p0, grads), group_lrs in zip(got, data, lrs):
        np.testing.assert_allclose(value, reference(p0, grads, group_lrs), **TOL)
    assert opt.t.item() == STEPS + 1
    assert lrs[1] == [0.05, 0.05, 0.05, 0.2, 0.2, 0.001]


def test_tinyjit_replays_equal_eager_steps():
    eager, _, _ = _train_two_groups(False)
    jitted, _, _ = _train_two_groups(True)
    for a, b in zip(eager, jitted):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_lr_property_sets_every_group_and_reads_the_first():
    opt = SGD([{"params": [Tensor.zeros(1)]}, {"params": [Tensor.zeros(2)], "lr": 0.5}], lr=0.1)
    assert opt.lr == pytest.approx(0.1)
    opt.lr = 0.3
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.3]
    assert [g.lr_tensor.item() for g in opt.param_groups] == pytest.approx([0.3, 0.3])


def test_group_writes_are_checked_and_params_cannot_be_replaced():
    opt = SGD([Tensor.zeros(1)], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match=r"\[nn\] learning rate"):
        opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match=r"\[nn\] SGD nesterov"):
        opt.param_groups[0].update(nesterov=True, dampening=0.5)
    opt.param_groups[0].update(nesterov=True, dampening=0.0)        # checked together: fine
    with pytest.raises(ValueError, match="'params' cannot be replaced"):
        opt.param_groups[0]["params"] = []
    assert opt.lr == pytest.approx(0.1)


def test_add_param_group_uses_defaults_and_rejects_a_parameter_held_already():
    a, b = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    opt = SGD([a], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": b, "lr": 1.0})
    assert opt.param_groups[1]["momentum"] == 0.5 and opt.params == [a, b]
    with pytest.raises(ValueError, match="more than once"):
        opt.add_param_group({"params": [a]})
    a.grad, b.grad = Tensor([1.0]), Tensor([1.0])
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(1.0)


# ---------------------------------------------------------------- schedulers: per-group bases
@pytest.mark.parametrize("make,rule", [
    (lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5), lambda s, b: b * 0.5 ** (s // 2)),
    (lambda o: lr_scheduler.LambdaLR(o, lambda s: 1 / (s + 1)), lambda s, b: b / (s + 1)),
    (lambda o: lr_scheduler.MultiStepLR(o, [2, 5], gamma=0.1), lambda s, b: b * 0.1 ** ((s >= 2) + (s >= 5))),
    (lambda o: lr_scheduler.ExponentialLR(o, gamma=0.9), lambda s, b: b * 0.9 ** s),
    (lambda o: lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=4),
     lambda s, b: b * (0.25 + 0.75 * min(s, 4) / 4)),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=0.001),
     lambda s, b: 0.001 + (b - 0.001) * (1 + math.cos(math.pi * s / 6)) / 2),
    (lambda o: lr_scheduler.CosineWithWarmup(o, warmup_steps=2, total_steps=6),
     lambda s, b: b * s / 2 if s < 2 else b * (1 + math.cos(math.pi * min(1.0, (s - 2) / 4))) / 2),
])
def test_schedulers_scale_each_group_from_its_own_base(make, rule):
    bases = [0.1, 0.02, 1.0]
    opt = Adam([{"params": [Tensor.zeros(1)], "lr": b} for b in bases])
    sched = make(opt)
    for step in range(9):
        want = [rule(step, b) for b in bases]
        assert sched.get_last_lr() == pytest.approx(want)
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(want)
        assert [g.lr_tensor.item() for g in opt.param_groups] == pytest.approx(want, rel=1e-6)
        sched.step()
    assert sched.base_lrs == bases and sched.base_lr == 0.1


def test_scheduler_drives_zero_optimizer_groups():
    import tg.distributed as dist
    w = Tensor([1.0, -1.0], requires_grad=True)
    opt = dist.ZeroOptimizer([w], SGD, lr=0.5)
    assert opt.param_groups is opt.optimizer.param_groups
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()                                            # lr 0.25
    (w * w).sum().backward()                                # grad 2w
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.5, -0.5])
    v, b = Tensor([1.0, -1.0], requires_grad=True), Tensor([2.0], requires_grad=True)   # torch's groups
    grouped = dist.ZeroOptimizer([{"params": [v]}, {"params": [b], "lr": 0.1}], SGD, lr=0.5)
    lr_scheduler.StepLR(grouped, step_size=1, gamma=0.5).step()  # 0.25 and 0.05
    ((v * v).sum() + b.sum()).backward()
    grouped.step()
    np.testing.assert_allclose(v.numpy(), [0.5, -0.5])
    np.testing.assert_allclose(b.numpy(), [1.95], rtol=1e-6)


# ---------------------------------------------------------------- zero_grad
def test_zero_grad_set_to_none_false_gives_zeros_true_gives_none():
    a, b, c = Tensor([1.0, 2.0], requires_grad=True), Tensor.ones(2, 3, requires_grad=True), Tensor([3.0])
    (a.sum() * b.sum()).backward()
    opt = SGD([{"params": [a]}, {"params": [b, c]}], lr=0.1)
    opt.zero_grad(set_to_none=False)
    assert a.grad is not None and b.grad is not None and c.grad is None
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros(2, np.float32))
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros((2, 3), np.float32))
    opt.step()                                             # a zero gradient moves nothing (no momentum)
    np.testing.assert_allclose(a.numpy(), [1.0, 2.0])
    opt.zero_grad(set_to_none=True)
    assert a.grad is None and b.grad is None


# ---------------------------------------------------------------- state_dict
def test_state_dict_has_torch_shape_per_group():
    a, b, c = Tensor.zeros(3), Tensor.zeros(2), Tensor.zeros(4)
    opt = Adam([{"params": [a, b], "weight_decay": 0.1}, {"params": [c], "lr": 0.5, "name": "head"}], lr=0.01)
    sd = opt.state_dict()
    assert list(sd) == ["state", "param_groups"] and list(sd["state"]) == [0, 1, 2]
    assert all(list(st) == ["exp_avg", "exp_avg_sq", "step"] for st in sd["state"].values())
    assert sd["state"][0]["step"] is opt.t and sd["state"][2]["exp_avg"].shape == (4,)
    assert sd["state"][1]["exp_avg_sq"] is opt.state[1]["exp_avg_sq"]       # type: ignore[index]
    assert sd["param_groups"] == [
        {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1, "params": [0, 1]},
        {"lr": 0.5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "name": "head", "params": [2]}]


def test_flat_state_dict_has_torch_names_per_group():
    a, b, c = Tensor.zeros(3), Tensor.zeros(2), Tensor.zeros(4)
    opt = Adam([{"params": [a, b], "weight_decay": 0.1}, {"params": [c], "lr": 0.5, "name": "head"}], lr=0.01)
    sd = opt.flat_state_dict()
    assert list(sd) == ["step", *[f"state.{i}.{k}" for i in range(3) for k in ("exp_avg", "exp_avg_sq")],
                        *[f"param_groups.0.{k}" for k in ("lr", "betas", "eps", "weight_decay", "params")],
                        *[f"param_groups.1.{k}" for k in ("lr", "betas", "eps", "weight_decay", "params")]]
    assert sd["step"] is opt.t and sd["param_groups.1.lr"] is opt.param_groups[1].lr_tensor
    assert sd["param_groups.0.params"].tolist() == [0, 1] and sd["param_groups.1.params"].tolist() == [2]
    np.testing.assert_allclose(sd["param_groups.1.betas"], [0.9, 0.999])
    assert sd["state.2.exp_avg"].shape == (4,)


def _snapshot(sd: dict) -> dict:
    """The nested state dict with every tensor copied to numpy (what the optimizer holds now)."""
    return {"state": {i: {k: v.numpy() for k, v in st.items()} for i, st in sd["state"].items()},
            "param_groups": [dict(g) for g in sd["param_groups"]]}


def _make(opt_cls: type, kw: dict, groups: list[dict], params: list[Tensor]) -> Optimizer:
    return opt_cls([{"params": [p], **g} for p, g in zip(params, groups)], **kw)


ROUND_TRIP = [
    (SGD, {"lr": 0.1, "momentum": 0.9}, [{}, {"lr": 0.05, "weight_decay": 0.1, "nesterov": True}]),
    (Adam, {"lr": 0.01}, [{"eps": 1e-6}, {"lr": 0.03, "betas": (0.8, 0.95)}]),
    (AdamW, {"lr": 0.01}, [{}, {"weight_decay": 0.2}]),
    (RMSprop, {"lr": 0.01, "alpha": 0.9}, [{"momentum": 0.5, "centered": True}, {"lr": 0.02}]),
    (Adagrad, {"lr": 0.1, "lr_decay": 0.1}, [{}, {"initial_accumulator_value": 0.3}]),
    (Adadelta, {"rho": 0.8}, [{}, {"lr": 0.5, "weight_decay": 0.1}]),
]


@pytest.mark.parametrize("through", ["memory", "tg.save", "safetensors"])
@pytest.mark.parametrize("opt_cls,kw,groups", ROUND_TRIP)
def test_state_dict_round_trip_gives_the_same_next_step(opt_cls, kw, groups, through):
    data = [_random((7,), 4, seed=30), _random((2, 3), 4, seed=31)]
    params = [Tensor(p0, requires_grad=True) for p0, _ in data]
    opt = _make(opt_cls, kw, groups, params)
    for step in range(3):
        for p, (_, grads) in zip(params, data):
            p.grad = Tensor(grads[step])
        opt.step()
    opt.param_groups[1]["lr"] = 0.007                     # a changed lr is part of the state
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optim.safetensors")
        if through == "tg.save":                          # torch's shape, int keys and Python options
            tg.save(opt.state_dict(), path)
            saved = tg.load(path)
            assert list(saved["state"]) == [0, 1] and isinstance(saved["param_groups"][0]["lr"], float)
        elif through == "safetensors":                    # the flat form, for safe_save
            safe_save(opt.flat_state_dict(), path)
            saved = safe_load(path)
        else:
            saved = _snapshot(opt.state_dict())
    copies = [Tensor(p.numpy(), requires_grad=True) for p in params]
    fresh = _make(opt_cls, {**kw, "lr": 0.5}, [{k: v for k, v in g.items() if k != "lr"} for g in groups],
                  copies)
    fresh.load_state_dict(saved)
    assert [g["lr"] for g in fresh.param_groups] == [opt.param_groups[0]["lr"], 0.007]
    options = [[dict(g, params=None) for g in o.param_groups] for o in (opt, fresh)]
    assert options[0] == options[1]
    assert fresh.t.item() == 3 and fresh.state_dict()["state"][1]["step"].item() == 3
    for o in (opt, fresh):
        for p, (_, grads) in zip(o.params, data):
            p.grad = Tensor(grads[3])
        o.step()
    for p, q in zip(params, copies):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_load_state_dict_takes_torch_nested_form_and_the_older_flat_form():
    params = [Tensor([1.0, 2.0]), Tensor([3.0])]
    opt = SGD([{"params": [params[0]]}, {"params": [params[1]]}], lr=0.1, momentum=0.9)
    nested = {"state": {0: {"step": 4.0, "momentum_buffer": np.array([0.5, 0.25], np.float32)},
                        1: {"step": 4.0, "momentum_buffer": np.array([1.0], np.float32)}},
              "param_groups": [{"lr": 0.2, "momentum": 0.8, "params": [0], "foreach": None},
                               {"lr": 0.3, "momentum": 0.7, "params": [1]}]}
    opt.load_state_dict(nested)
    assert opt.t.item() == 4 and [g["lr"] for g in opt.param_groups] == [0.2, 0.3]
    assert [g["momentum"] for g in opt.param_groups] == [0.8, 0.7]
    np.testing.assert_array_equal(opt.state[0]["momentum_buffer"].numpy(), [0.5, 0.25])   # type: ignore[index]
    older = {"t": np.array(7.0, np.float32), "lr": np.array(0.05, np.float32),
             "state.0.momentum_buffer": np.zeros(2, np.float32),
             "state.1.momentum_buffer": np.ones(1, np.float32)}
    opt.load_state_dict(older)
    assert opt.t.item() == 7 and [g["lr"] for g in opt.param_groups] == [0.05, 0.05]
    np.testing.assert_array_equal(opt.state[1]["momentum_buffer"].numpy(), [1.0])          # type: ignore[index]


def test_load_state_dict_for_other_params_says_what_differs():
    saved = Adam([Tensor.zeros(3), Tensor.zeros(2)]).state_dict()
    with pytest.raises(ValueError, match=r"\[nn\] Adam.load_state_dict: .*missing.*Fix: build the optimizer"):
        Adam([Tensor.zeros(3), Tensor.zeros(2), Tensor.zeros(1)]).load_state_dict(saved)
    with pytest.raises(ValueError, match=r"other parameters in \['param_groups.0.params'\]"):
        Adam([{"params": [Tensor.zeros(3)]}, {"params": [Tensor.zeros(2)]}]).load_state_dict(saved)


# ---------------------------------------------------------------- module paths
def test_tg_optim_and_nn_utils_paths():
    import tg.nn.optim
    import tg.nn.utils
    import tg.optim
    assert tg.optim.AdamW is tg.nn.optim.AdamW and tg.optim.RMSprop is RMSprop
    assert tg.optim.lr_scheduler.CosineAnnealingLR is tg.nn.optim.CosineAnnealingLR
    assert tg.nn.utils.clip_grad_norm_ is tg.nn.optim.clip_grad_norm_
