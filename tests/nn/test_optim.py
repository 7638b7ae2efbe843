"""Optimizers, lr schedules and gradient clipping against hand-written numpy references (torch's rules)."""
from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from tg import Tensor, nn
from tg.core.capture import watch_schedules
from tg.nn import optim
from tg.nn.optim import SGD, Adam, AdamW, CosineWithWarmup, LambdaLR, StepLR, clip_grad_norm_

SHAPES = [(7,), (3, 5), ()]
STEPS = 4
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _random(shape: tuple[int, ...], n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    p0 = rng.standard_normal(shape).astype(np.float32)
    return p0, [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _run(opt_cls: type, p0: np.ndarray, grads: list[np.ndarray], **kw) -> np.ndarray:
    p = Tensor(p0, requires_grad=True)
    opt = opt_cls([p], **kw)
    for g in grads:
        p.grad = Tensor(g)
        opt.step()
    return p.numpy()


def sgd_reference(p: np.ndarray, grads: list[np.ndarray], lr: float | list[float], momentum: float = 0.0,
                  dampening: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
                  maximize: bool = False) -> np.ndarray:
    """torch.optim.SGD, step by step, in float64."""
    p, buf = p.astype(np.float64), None
    lrs = lr if isinstance(lr, list) else [lr] * len(grads)
    for g, step_lr in zip(grads, lrs):
        g = -g.astype(np.float64) if maximize else g.astype(np.float64)
        if weight_decay:
            g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - step_lr * g
    return p


def adam_reference(p: np.ndarray, grads: list[np.ndarray], lr: float | list[float], betas=(0.9, 0.999),
                   eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False) -> np.ndarray:
    """torch.optim.Adam / AdamW, step by step, in float64."""
    p = p.astype(np.float64)
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1, b2 = betas
    lrs = lr if isinstance(lr, list) else [lr] * len(grads)
    for t, (g, step_lr) in enumerate(zip(grads, lrs), start=1):
        g = g.astype(np.float64)
        if weight_decay and decoupled:
            p = p * (1 - step_lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - step_lr / (1 - b1 ** t) * m / (np.sqrt(v) / math.sqrt(1 - b2 ** t) + eps)
    return p


# ---------------------------------------------------------------- SGD
SGD_OPTIONS = [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "dampening": 0.3},
    {"momentum": 0.8, "nesterov": True},
    {"weight_decay": 0.1},
    {"maximize": True},
    {"momentum": 0.7, "dampening": 0.5, "weight_decay": 0.05, "maximize": True},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("options", SGD_OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_sgd_matches_torch_rule(shape, options):
    p0, grads = _random(shape, STEPS, seed=1)
    got = _run(SGD, p0, grads, lr=0.05, **options)
    np.testing.assert_allclose(got, sgd_reference(p0, grads, 0.05, **options), **TOL)


# ---------------------------------------------------------------- Adam / AdamW
ADAM_OPTIONS = [
    {},
    {"weight_decay": 0.1},
    {"betas": (0.8, 0.99), "eps": 1e-6},
    {"betas": (0.0, 0.9)},
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_adam_matches_torch_rule(shape, options):
    p0, grads = _random(shape, STEPS, seed=2)
    got = _run(Adam, p0, grads, lr=0.01, **options)
    np.testing.assert_allclose(got, adam_reference(p0, grads, 0.01, **options), **TOL)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("weight_decay", [0.0, 0.3])
def test_adamw_matches_torch_rule(shape, weight_decay):
    p0, grads = _random(shape, STEPS, seed=3)
    got = _run(AdamW, p0, grads, lr=0.01, weight_decay=weight_decay)
    want = adam_reference(p0, grads, 0.01, weight_decay=weight_decay, decoupled=True)
    np.testing.assert_allclose(got, want, **TOL)


def test_adamw_default_weight_decay_is_decoupled():
    p0, grads = _random((5,), 3, seed=4)
    got = _run(AdamW, p0, grads, lr=0.1)
    np.testing.assert_allclose(got, adam_reference(p0, grads, 0.1, weight_decay=1e-2, decoupled=True), **TOL)
    coupled = adam_reference(p0, grads, 0.1, weight_decay=1e-2)
    assert not np.allclose(got, coupled, rtol=0, atol=1e-7)


def test_several_params_each_follow_their_own_rule():
    shapes = [(7,), (3, 5), ()]
    data = [_random(s, STEPS, seed=10 + i) for i, s in enumerate(shapes)]
    params = [Tensor(p0, requires_grad=True) for p0, _ in data]
    opt = Adam(params, lr=0.02, weight_decay=0.01)
    for k in range(STEPS):
        for p, (_, grads) in zip(params, data):
            p.grad = Tensor(grads[k])
        opt.step()
    for p, (p0, grads) in zip(params, data):
        np.testing.assert_allclose(p.numpy(), adam_reference(p0, grads, 0.02, weight_decay=0.01), **TOL)


# ---------------------------------------------------------------- per-parameter API on shards
@pytest.mark.parametrize("opt_cls,kw,reference", [
    (Adam, {"lr": 0.01, "weight_decay": 0.1}, lambda p, g: adam_reference(p, g, 0.01, weight_decay=0.1)),
    (SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.2},
     lambda p, g: sgd_reference(p, g, 0.1, momentum=0.9, dampening=0.2)),
])
def test_init_single_apply_on_a_flat_shard(opt_cls, kw, reference):
    # a ZeRO-style use: the optimizer is built over the full params, but steps a 1-d shard it never saw
    full = Tensor.zeros(4, 6)
    opt = opt_cls([full], **kw)
    p0, grads = _random((11,), 3, seed=5)
    shard = Tensor(p0)
    state = opt.init_single(shard)
    assert all(s.shape == (11,) for s in state.values())
    for g in grads:
        written = opt.apply([(shard, Tensor(g), state)])
        assert any(w is shard for w in written)
        written[0].realize(*written[1:])
    np.testing.assert_allclose(shard.numpy(), reference(p0, grads), **TOL)
    np.testing.assert_array_equal(full.numpy(), np.zeros((4, 6), np.float32))   # no grad: untouched


def test_apply_single_returns_lazy_value_and_writes_state_in_place():
    opt = Adam([Tensor.zeros(3)], lr=0.1)
    p = Tensor([1.0, 2.0, 3.0])
    state = opt.init_single(p)
    buffers = {k: v.lazydata.base.realized for k, v in state.items()}
    opt.t.assign(opt.t + 1)
    new = opt.apply_single(p, Tensor([1.0, 1.0, 1.0]), state)
    assert new.lazydata.realized is None   # nothing ran yet
    new.realize(*state.values())
    np.testing.assert_allclose(new.numpy(), [0.9, 1.9, 2.9], **TOL)
    np.testing.assert_allclose(state["exp_avg"].numpy(), [0.1] * 3, **TOL)
    assert all(state[k].lazydata.base.realized is buffers[k] for k in state)


# ---------------------------------------------------------------- step(): skipping, zero_grad, one schedule
def test_params_without_grad_are_skipped():
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([5.0], requires_grad=False)
    opt = SGD([a, b], lr=0.5, momentum=0.9)
    a.grad = Tensor([1.0, 1.0])
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.5, 1.5])
    np.testing.assert_allclose(b.numpy(), [5.0])
    assert opt.state[1] is None   # no state allocated for a parameter that never had a gradient


def test_step_without_any_grad_does_nothing():
    p = Tensor([1.0])
    opt = Adam([p])
    opt.step()
    assert opt.t.item() == 0
    assert p.item() == 1.0


def test_zero_grad_sets_none():
    params = [Tensor([1.0], requires_grad=True), Tensor([2.0, 3.0], requires_grad=True)]
    (params[0].sum() * params[1].sum()).backward()
    assert all(p.grad is not None for p in params)
    opt = SGD(params, lr=0.1)
    opt.zero_grad()
    assert all(p.grad is None for p in params)


def test_step_is_one_schedule_with_stable_buffers_and_no_host_reads(monkeypatch):
    params = [Tensor.randn(3, 5, requires_grad=True), Tensor.randn(7, requires_grad=True)]
    opt = Adam(params, lr=0.01, weight_decay=0.1)
    x = Tensor.randn(4, 3)

    def backward() -> None:
        opt.zero_grad()
        ((x @ params[0]).sum() * params[1].sum()).backward()

    backward()
    opt.step()   # first step: allocates state
    buffers = [t.lazydata.base.realized for t in [*params, opt.t, opt.lr_tensor]]
    buffers += [s.lazydata.base.realized for st in opt.state if st for s in st.values()]

    schedules: list[int] = []

    def no_host_read(*_):
        raise AssertionError("step() read a value back to the host")

    counts = []
    for _ in range(4):
        backward()
        schedules.clear()
        with monkeypatch.context() as m, watch_schedules(lambda items: schedules.append(1)):
            m.setattr(Tensor, "numpy", no_host_read)
            m.setattr(Tensor, "item", no_host_read)
            opt.step()
        counts.append(len(schedules))
    # the gradients first, then the update: built (step 1, above), captured (step 2), then replayed
    # with no schedule at all
    assert counts == [2, 1, 1, 1]
    after = [t.lazydata.base.realized for t in [*params, opt.t, opt.lr_tensor]]
    after += [s.lazydata.base.realized for st in opt.state if st for s in st.values()]
    assert all(a is b for a, b in zip(after, buffers))
    assert opt.t.item() == 5


# ---------------------------------------------------------------- learning rate
def test_lr_property_and_change_takes_effect():
    p0, grads = _random((6,), 4, seed=6)
    p = Tensor(p0)
    opt = SGD([p], lr=0.1, momentum=0.5)
    buffer = opt.lr_tensor.lazydata.base.realized
    lrs = [0.1, 0.1, 0.02, 0.3]
    for g, lr in zip(grads, lrs):
        opt.lr = lr
        assert opt.lr == pytest.approx(lr)
        p.grad = Tensor(g)
        opt.step()
    np.testing.assert_allclose(p.numpy(), sgd_reference(p0, grads, lrs, momentum=0.5), **TOL)
    assert opt.lr_tensor.lazydata.base.realized is buffer
    assert opt.lr_tensor.shape == () and opt.lr_tensor.dtype.name == "float32"


def test_step_lr_sequence():
    opt = SGD([Tensor.zeros(1)], lr=0.8)
    sched = StepLR(opt, step_size=3, gamma=0.5)
    got = [sched.get_last_lr()[0]]
    for _ in range(9):
        sched.step()
        got.append(sched.get_last_lr()[0])
        assert opt.lr == pytest.approx(got[-1])
    np.testing.assert_allclose(got, [0.8 * 0.5 ** (s // 3) for s in range(10)])


def test_lambda_lr_sequence():
    opt = Adam([Tensor.zeros(1)], lr=0.2)
    sched = LambdaLR(opt, lambda s: 1 / (1 + s))
    got = [opt.lr]
    for _ in range(5):
        sched.step()
        got.append(opt.lr)
    np.testing.assert_allclose(got, [0.2 / (1 + s) for s in range(6)], rtol=1e-6)


@pytest.mark.parametrize("warmup,total,min_lr", [(3, 10, 0.0), (0, 5, 0.01), (4, 4, 0.0)])
def test_cosine_with_warmup_sequence(warmup, total, min_lr):
    base = 0.5
    opt = SGD([Tensor.zeros(1)], lr=base)
    sched = CosineWithWarmup(opt, warmup_steps=warmup, total_steps=total, min_lr=min_lr)
    got = [opt.lr]
    for _ in range(total + 2):
        sched.step()
        got.append(opt.lr)

    def want(s: int) -> float:
        if s < warmup:
            return base * s / warmup
        progress = min(1.0, (s - warmup) / max(1, total - warmup))
        return min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))

    np.testing.assert_allclose(got, [want(s) for s in range(total + 3)], rtol=1e-6, atol=1e-7)
    assert got[0] == 0.0 or warmup == 0
    assert got[-1] == pytest.approx(min_lr)


def test_schedule_drives_adam():
    p0, grads = _random((5,), 6, seed=7)
    p = Tensor(p0)
    opt = Adam([p], lr=0.05)
    sched = CosineWithWarmup(opt, warmup_steps=2, total_steps=6, min_lr=0.001)
    lrs = []
    for g in grads:
        sched.step()   # this loop steps the schedule before the optimizer
        lrs.append(sched.get_last_lr()[0])
        p.grad = Tensor(g)
        opt.step()
    np.testing.assert_allclose(p.numpy(), adam_reference(p0, grads, lrs), **TOL)


# ---------------------------------------------------------------- gradient clipping
def _torch_clip(grads: list[np.ndarray], max_norm: float, norm_type: float) -> tuple[float, list[np.ndarray]]:
    g64 = [g.astype(np.float64) for g in grads]
    if norm_type == math.inf:
        total = max(np.abs(g).max() for g in g64)
    else:
        total = sum((np.abs(g) ** norm_type).sum() for g in g64) ** (1 / norm_type)
    coef = min(1.0, max_norm / (total + 1e-6))
    return total, [g * coef for g in g64]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch_rule(norm_type, max_norm):
    rng = np.random.default_rng(8)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(7,), (3, 5), ()]]
    params = [Tensor(np.zeros(g.shape, np.float32)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = Tensor(g)
    no_grad = Tensor([1.0])
    total = clip_grad_norm_([*params, no_grad], max_norm, norm_type=norm_type)
    want_total, want_grads = _torch_clip(grads, max_norm, norm_type)
    assert total.shape == ()
    np.testing.assert_allclose(total.numpy(), want_total, rtol=1e-5)
    for p, want in zip(params, want_grads):
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-5, atol=1e-7)
    assert no_grad.grad is None


def test_clip_then_step_is_lazy_and_correct():
    p0, (g,) = _random((9,), 1, seed=9)
    p = Tensor(p0)
    p.grad = Tensor(g * 10)
    opt = SGD([p], lr=0.1)
    clip_grad_norm_(p, max_norm=1.0)
    assert p.grad.lazydata.base.realized is None   # nothing computed yet
    opt.step()
    _, (clipped,) = _torch_clip([g * 10], 1.0, 2.0)
    np.testing.assert_allclose(p.numpy(), p0 - 0.1 * clipped, **TOL)


def test_clip_grad_norm_without_grads_is_zero():
    assert clip_grad_norm_([Tensor([1.0])], 1.0).item() == 0.0


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("make,match", [
    (lambda p: SGD([], lr=0.1), "empty parameter list"),
    (lambda p: SGD([p, p], lr=0.1), "more than once"),
    (lambda p: SGD([p], lr=-1.0), "learning rate"),
    (lambda p: SGD([p], lr=0.1, nesterov=True), "nesterov"),
    (lambda p: SGD([p], lr=0.1, momentum=-0.5), "momentum"),
    (lambda p: Adam([p], betas=(0.9, 1.0)), "betas"),
    (lambda p: AdamW([p], eps=-1.0), "eps"),
    (lambda p: StepLR(SGD([p]), step_size=0), "step_size"),
    (lambda p: CosineWithWarmup(SGD([p]), warmup_steps=5, total_steps=2), "warmup_steps"),
    (lambda p: clip_grad_norm_([p], 1.0, norm_type=0.0), "norm_type"),
])
def test_user_errors_are_value_errors(make, match):
    with pytest.raises(ValueError, match=r"^\[nn\] .*" + match):
        make(Tensor([1.0]))


def test_non_tensor_param_and_bad_grad_shape():
    with pytest.raises(TypeError, match=r"\[nn\] .*Tensors"):
        SGD([np.zeros(3)], lr=0.1)
    p = Tensor([1.0, 2.0])
    p.grad = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"\[nn\] gradient of shape \(3,\)"):
        SGD([p], lr=0.1).step()


# ---------------------------------------------------------------- end to end
def test_adam_fits_linear_regression():
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((64, 4)).astype(np.float32)
    w_true = np.array([[1.5], [-2.0], [0.5], [3.0]], np.float32)
    x, y = Tensor(x_np), Tensor(x_np @ w_true)
    w = Tensor.zeros(4, 1, requires_grad=True).contiguous().detach().requires_grad_()
    opt = Adam([w], lr=0.1)
    first = None
    for _ in range(150):
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert first > 1.0
    assert loss.item() < 1e-3
    np.testing.assert_allclose(w.numpy(), w_true, atol=0.05)


def test_docstring_examples():
    result = doctest.testmod(optim)
    assert result.attempted > 0 and result.failed == 0


def test_jit_replayed_step_sees_new_lr_and_step_count():
    import tg.core.jit as jit
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((16, 3)).astype(np.float32)
    y_np = x_np @ np.array([[1.0], [-2.0], [0.5]], np.float32)

    def train(use_jit: bool) -> tuple[list[float], np.ndarray]:
        w = Tensor.zeros(3, 1).contiguous().detach().requires_grad_()
        opt = Adam([w], lr=0.1)
        sched = StepLR(opt, step_size=2, gamma=0.5)

        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = ((x @ w - y) ** 2).mean()
            loss.backward()
            clip_grad_norm_([w], 2.0)
            opt.step()
            return loss.realize()

        run = jit.TinyJit(step) if use_jit else step
        losses = []
        for _ in range(6):
            losses.append(run(Tensor(x_np), Tensor(y_np)).item())
            sched.step()
        assert opt.t.item() == 6
        return losses, w.numpy()

    eager, jitted = train(False), train(True)
    np.testing.assert_allclose(jitted[0], eager[0], rtol=1e-6)
    np.testing.assert_allclose(jitted[1], eager[1], rtol=1e-6)


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: optim.Adam(ps, lr=1e-3),
    lambda ps: optim.AdamW(ps, lr=1e-3, weight_decay=0.1), lambda ps: optim.RMSprop(ps, lr=1e-3),
    lambda ps: optim.Adagrad(ps, lr=0.1), lambda ps: optim.Adadelta(ps, lr=1.0),
], ids=["sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta"])
def test_a_half_gradient_updates_a_float32_parameter_as_its_float32_value(make):
    """A float16 gradient of a float32 parameter (ZeRO's masters) is used as the float32 number it is: the
    update's arithmetic is the parameter's (tiny gradients squared underflow in float16)."""
    from tg import dtypes
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(37).astype(np.float32)
    grads = [(rng.standard_normal(37) * 10.0 ** rng.uniform(-5, -1, 37)).astype(np.float16) for _ in range(3)]
    a, b = Tensor(w0.copy()), Tensor(w0.copy())
    opt_a, opt_b = make([a]), make([b])
    for g in grads:
        a.grad = Tensor(g).cast(dtypes.float16)
        b.grad = Tensor(g.astype(np.float32))
        opt_a.step()
        opt_b.step()
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("seed", range(4))
def test_clip_grad_value_clamps_every_gradient_as_torch(seed):
    """torch.nn.utils.clip_grad_value_: each element into [-v, v], in place; parameters without a
    gradient are skipped. Random shapes, values and limits against numpy."""
    rng = np.random.default_rng(seed)
    shapes = [tuple(rng.integers(1, 6, size=rng.integers(1, 3))) for _ in range(3)]
    grads = [rng.normal(scale=3, size=s).astype(np.float32) for s in shapes]
    params = [Tensor.zeros(*s) for s in shapes]
    for p, g in zip(params, grads):
        p.grad = Tensor(g)
    held = [p.grad for p in params]
    limit = float(rng.uniform(0.1, 2.0))
    nn.utils.clip_grad_value_([*params, Tensor.zeros(2)], limit)
    for p, g, h in zip(params, grads, held):
        assert p.grad is h
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -limit, limit))
