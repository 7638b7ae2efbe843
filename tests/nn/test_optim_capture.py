"""optimizer.step() of tg's optimizers replays a captured update once its configuration repeats
(TG_OPTIM_CAPTURE): the results must be bit for bit those of building the update every step, through
lr schedules, parameters that skip steps, option changes, reloaded state and TinyJit around it."""
import gc
import weakref

import numpy as np
import pytest

from tg import Tensor, TinyJit
from tg.core.device import GlobalCounters
from tg.nn import optim

OPTIMIZERS = {
    "sgd": lambda groups: optim.SGD(groups, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda groups: optim.Adam(groups, lr=0.01, weight_decay=0.1),
    "adamw": lambda groups: optim.AdamW(groups, lr=0.01, betas=(0.8, 0.9)),
    "rmsprop": lambda groups: optim.RMSprop(groups, lr=0.01, centered=True, momentum=0.5),
    "adagrad": lambda groups: optim.Adagrad(groups, lr=0.1, lr_decay=0.01),
    "adadelta": lambda groups: optim.Adadelta(groups, lr=1.0, weight_decay=0.05),
}


def _train(name: str, capture: bool, monkeypatch, steps: int = 7) -> list[np.ndarray]:
    """Params after `steps` steps of a two-group problem where group 1's lr follows a schedule,
    parameter 2 has no gradient on every third step and group 0's weight decay changes at step 4."""
    monkeypatch.setenv("TG_OPTIM_CAPTURE", "1" if capture else "0")
    rng = np.random.default_rng(7)
    params = [Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
              for shape in [(5, 3), (3,), (4, 2)]]
    x = Tensor(rng.standard_normal((6, 5)).astype(np.float32))
    opt = OPTIMIZERS[name]([{"params": params[:2]}, {"params": params[2:], "lr": 0.05}])
    sched = optim.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(steps):
        opt.zero_grad()
        frozen = step % 3 == 2
        loss = ((x @ params[0] + params[1]).tanh() ** 2).sum()
        if not frozen:
            loss = loss + (params[2] * params[2]).sum() * 0.5
        loss.backward()
        if step == 4 and "weight_decay" in opt.param_groups[0]:
            opt.param_groups[0]["weight_decay"] = 0.2
        opt.step()
        sched.step()
    return [p.numpy() for p in params]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_replayed_step_is_the_built_step_bit_for_bit(name, monkeypatch):
    replayed = _train(name, True, monkeypatch)
    built = _train(name, False, monkeypatch)
    for a, b in zip(replayed, built):
        np.testing.assert_array_equal(a, b)


def test_steady_steps_replay_without_scheduling_the_update(monkeypatch):
    monkeypatch.setenv("TG_OPTIM_CAPTURE", "1")
    w = Tensor(np.ones((8, 8), np.float32), requires_grad=True)
    opt = optim.Adam([w], lr=0.01)
    built = []
    for _ in range(5):
        (w * w).sum().backward()
        before = GlobalCounters.schedules_built + GlobalCounters.schedules_reused
        opt.step()
        built.append(GlobalCounters.schedules_built + GlobalCounters.schedules_reused - before)
    assert built[-2:] == [1, 1]       # only the gradients' schedule: the update is replayed
    assert opt.t.item() == 5.0


def test_reloaded_state_is_a_new_configuration(monkeypatch):
    """load_state_dict puts new memory behind the state: the replay must not keep writing the old."""
    results = []
    for capture in (True, False):
        monkeypatch.setenv("TG_OPTIM_CAPTURE", "1" if capture else "0")
        w = Tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
        opt = optim.Adam([w], lr=0.1)
        saved = None
        for step in range(6):
            (w * w * w).sum().backward()
            opt.step()
            if step == 2:
                saved = opt.state_dict()
                saved = {"state": {0: {k: Tensor(v.numpy()) for k, v in saved["state"][0].items()}},
                         "param_groups": saved["param_groups"]}
            if step == 4:
                opt.load_state_dict(saved)
        results.append(w.numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_a_subclass_is_never_replayed(monkeypatch):
    """A user's optimizer may read Python state in apply_single; its update is built every step."""
    monkeypatch.setenv("TG_OPTIM_CAPTURE", "1")

    class Scaled(optim.SGD):
        scale = 1.0

        def apply_single(self, p, g, state):
            return p - self.lr_tensor * g * self.scale

    w = Tensor(np.zeros(3, np.float32), requires_grad=True)
    opt = Scaled([w], lr=1.0)
    for step in range(5):
        Scaled.scale = float(step)
        w.grad = Tensor(np.ones(3, np.float32))
        opt.step()
    np.testing.assert_array_equal(w.numpy(), np.full(3, -(0 + 1 + 2 + 3 + 4), np.float32))


def test_gradients_are_not_kept_alive_by_the_capture(monkeypatch):
    monkeypatch.setenv("TG_OPTIM_CAPTURE", "1")
    w = Tensor(np.ones(1000, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    for _ in range(4):
        (w * w).sum().backward()
        opt.step()
        grad_memory = weakref.ref(w.grad.lazydata.base.realized)
        opt.zero_grad()
        gc.collect()
        assert grad_memory() is None


def test_a_step_inside_a_tinyjit_is_captured_by_it(monkeypatch):
    monkeypatch.setenv("TG_OPTIM_CAPTURE", "1")
    results = []
    for jit in (True, False):
        w = Tensor(np.linspace(0, 1, 5, dtype=np.float32), requires_grad=True)
        opt = optim.Adam([w], lr=0.05)

        def step(w: Tensor = w, opt: optim.Optimizer = opt) -> Tensor:
            opt.zero_grad()
            loss = (w * w).sum()
            loss.backward()
            opt.step()
            return loss.realize()
        run = TinyJit(step) if jit else step
        for _ in range(6):
            run()
        results.append(w.numpy())
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("capture", ["1", "0"])
def test_grad_after_step_is_the_gradient_the_step_used(capture, monkeypatch):
    """Accumulating without zero_grad, as torch allows: .grad read after step() is the sum of the
    gradients at the weights each backward saw, not one recomputed from the updated weights."""
    monkeypatch.setenv("TG_OPTIM_CAPTURE", capture)
    w0 = np.linspace(-1, 1, 6, dtype=np.float32)
    w = Tensor(w0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    weights, expected = w0.astype(np.float64), np.zeros(6)
    for _ in range(4):
        (w * w * w).sum().backward()
        expected += 3 * weights ** 2
        opt.step()
        np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-5)
        weights = weights - 0.1 * expected
        np.testing.assert_allclose(w.numpy(), weights, rtol=1e-5)


def _pending_reads_after_steps(capture: str, monkeypatch) -> tuple[list, list]:
    monkeypatch.setenv("TG_OPTIM_CAPTURE", capture)
    w = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    preds, inlined, expected = [], [], []
    for _ in range(5):
        expected.append([3 * v for v in w.tolist()])
        preds.append(w * 3.0)                        # pending and outside the loss
        out = w * 3.0
        inlined.append(out)                          # pending and read by the loss (inlined there)
        (w * out).sum().backward()
        opt.step()
        w.grad = None
    return expected, [p.tolist() for p in preds] + [o.tolist() for o in inlined]


@pytest.mark.parametrize("capture", ["1", "0"])
def test_pending_readers_of_the_weights_see_the_old_weights(capture, monkeypatch):
    expected, got = _pending_reads_after_steps(capture, monkeypatch)
    np.testing.assert_allclose(np.array(got), np.array(expected + expected), rtol=1e-6)


@pytest.mark.parametrize("capture", ["1", "0"])
def test_gradients_that_share_memory_on_one_step_and_not_the_next(capture, monkeypatch):
    """a + b hands both parents the same gradient; later steps give them different ones."""
    monkeypatch.setenv("TG_OPTIM_CAPTURE", capture)
    a, b = (Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2))
    x = Tensor(np.array([1.0, 2.0], np.float32))
    opt = optim.SGD([a, b], lr=1.0)
    for step in range(5):
        loss = (((a + b) if step < 2 else (3.0 * a + b)) * x).sum()
        loss.backward()
        before = a.numpy().copy()
        opt.step()
        np.testing.assert_array_equal(before - a.numpy(), [1.0, 2.0] if step < 2 else [3.0, 6.0])
        a.grad = b.grad = None


def test_a_base_read_every_step_keeps_a_bounded_reader_list():
    frozen = Tensor(np.ones(4, np.float32))
    for _ in range(300):
        (frozen * 2.0).sum()
    assert len(frozen.lazydata.base.readers.refs()) < 64
