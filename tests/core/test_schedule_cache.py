"""Realize reuses a schedule (and its compiled programs) for a graph of the same structure, so a
repeated eager training step does no scheduling, lowering or compiling: counted with GlobalCounters,
never timed. A graph that differs in any way the schedule depends on (an op, a shape, a dtype, a
view, a constant, which inputs share memory) is a miss, never a wrong hit."""
import numpy as np
import pytest

import tg
from tg import GlobalCounters, Tensor, nn
from tg.core import realize as realize_mod


def _mlp_steps(steps: int, seed: int = 0) -> tuple[list[float], list[tuple[int, int, int]]]:
    """Losses of an eager MLP training step (forward, backward, Adam with weight decay, lr
    schedule), and the counters (schedules built, reused, kernels lowered) each step moved."""
    Tensor.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(13, 17), nn.GELU(), nn.Linear(17, 5))
    opt = tg.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = tg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x = Tensor(rng.standard_normal((7, 13), dtype=np.float32))
    y = Tensor(rng.integers(0, 5, 7))
    losses, counts = [], []
    def counters() -> tuple[int, int, int]:
        return GlobalCounters.schedules_built, GlobalCounters.schedules_reused, GlobalCounters.kernels_lowered
    for _ in range(steps):
        before = counters()
        loss = tg.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        counts.append(tuple(a - b for a, b in zip(counters(), before)))
    return losses, counts


def test_a_repeated_training_step_does_no_scheduling_or_lowering():
    losses, counts = _mlp_steps(6)
    for built, reused, lowered in counts[2:]:
        assert (built, lowered) == (0, 0), counts
        assert reused >= 2, counts                 # the step's graph and the loss read
    assert losses[-1] < losses[0]


def test_reused_schedules_compute_what_fresh_ones_do(monkeypatch):
    cached, _ = _mlp_steps(5, seed=3)
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    fresh, counts = _mlp_steps(5, seed=3)
    assert all(reused == 0 for _, reused, _ in counts)
    assert cached == fresh                         # the same kernels in the same order: bit for bit


def _counted(fn):
    built, reused = GlobalCounters.schedules_built, GlobalCounters.schedules_reused
    out = fn()
    return out, GlobalCounters.schedules_built - built, GlobalCounters.schedules_reused - reused


def _realized(t: Tensor) -> Tensor:
    return Tensor(t.numpy())


@pytest.mark.parametrize("make", [
    lambda a: (a * 2.0 + 1.0).sum(axis=1),
    lambda a: a.permute(1, 0).exp().sum(axis=0),
    lambda a: a.cast(tg.float16).sum(axis=0),
    lambda a: a[1:, ::2] * -1.5,
])
def test_the_same_structure_hits_and_computes_new_inputs(make):
    rng = np.random.default_rng(1)
    a1 = _realized(Tensor(rng.standard_normal((5, 6), dtype=np.float32)))
    a2 = _realized(Tensor(rng.standard_normal((5, 6), dtype=np.float32)))
    first, _, _ = _counted(lambda: make(a1).numpy())
    second, built, reused = _counted(lambda: make(a2).numpy())
    assert (built, reused) == (0, 1)
    np.testing.assert_allclose(second, make(Tensor(a2.numpy(), device="NUMPY")).numpy(), rtol=1e-3)
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("other", [
    lambda a, b: (a * 3.0 + 1.0).sum(axis=1),              # another constant
    lambda a, b: (a * 2.0 + 1.0).sum(axis=0),              # another reduce axis
    lambda a, b: (a.T * 2.0 + 1.0).sum(axis=1),            # another view
    lambda a, b: (a.cast(tg.float64) * 2.0 + 1.0).sum(axis=1),   # another dtype
    lambda a, b: (b * 2.0 + 1.0).sum(axis=1),              # another shape
])
def test_a_graph_that_differs_is_a_miss_with_the_right_values(other):
    rng = np.random.default_rng(2)
    a = _realized(Tensor(rng.standard_normal((4, 4), dtype=np.float32)))
    b = _realized(Tensor(rng.standard_normal((4, 7), dtype=np.float32)))
    (a * 2.0 + 1.0).sum(axis=1).numpy()
    got, built, _ = _counted(lambda: other(a, b).numpy())
    assert built == 1
    ref = other(Tensor(a.numpy(), device="NUMPY"), Tensor(b.numpy(), device="NUMPY")).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_minus_zero_is_another_constant_than_zero():
    a = _realized(Tensor(np.array([1.0, -2.0, 3.0], np.float32)))
    plus = (a * 0.0).reciprocal().numpy()
    minus, built, _ = _counted(lambda: (a * -0.0).reciprocal().numpy())
    assert built == 1
    np.testing.assert_array_equal(minus, -plus)     # 1 / (x * -0.0) flips every infinity


def test_inputs_that_share_memory_are_not_taken_for_distinct_ones():
    """x.assign(y.T) is one kernel writing in place; when y's memory is x's own (an alias left by an
    earlier assign), the same graph shape must instead go through a fresh buffer."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 3), dtype=np.float32)
    x, y = Tensor(a).realize(), Tensor(b).realize()
    x.assign(y.T).realize()
    np.testing.assert_array_equal(x.numpy(), b.T)
    p = Tensor(a).realize()
    old = Tensor(p.lazydata)             # the same memory as p ...
    p.assign(p * 1.0).realize()          # ... through another lazy buffer once p is assigned
    _, built, _ = _counted(lambda: old.assign(p.T).realize())
    assert built >= 1
    np.testing.assert_array_equal(old.numpy(), a.T)


def test_the_cache_is_bounded_and_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "3")
    a = _realized(Tensor(np.ones((2, 2), np.float32)))
    for k in range(6):
        (a + float(k)).numpy()
    assert len(realize_mod._REUSE) <= 3
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    _, built, reused = _counted(lambda: (a + 1.0).numpy())
    assert (built, reused) == (1, 0)


def test_a_reused_schedule_frees_intermediates_after_their_last_reader():
    n = 64
    w = _realized(Tensor(np.full((n, n), 1 / n, np.float32)))
    peaks = []
    for _ in range(3):
        x = _realized(Tensor(np.ones((n, n), np.float32)))
        GlobalCounters.reset()
        base = GlobalCounters.mem_used
        y = x
        for _ in range(8):
            y = (y @ w).relu()
        y.realize()
        peaks.append(GlobalCounters.mem_peak - base)
    assert max(peaks) <= 2 * n * n * 4, peaks


@pytest.mark.parametrize("layers", [2, 5])
def test_a_step_with_batch_norms_reuses_its_schedules(layers):
    """A step whose forward leaves in-place assigns pending (BatchNorm's running statistics, flushed
    by the captured optimizer update) schedules nothing after warmup: the flush realizes them in the
    order they were made. (They were a set: its order followed the objects' addresses, the structure
    key saw a new order most steps, and DCGAN's step was scheduled afresh twice per step.)"""
    Tensor.manual_seed(layers)
    rng = np.random.default_rng(layers)
    mods = []
    for i in range(layers):
        mods += [nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
    model = nn.Sequential(*mods)
    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    x = Tensor(rng.standard_normal((2, 3, 6, 6), dtype=np.float32))
    built = []
    for _ in range(8):
        before = GlobalCounters.schedules_built
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        built.append(GlobalCounters.schedules_built - before)
    assert sum(built[3:]) == 0, built
    want = [m.running_mean.numpy() for m in model if isinstance(m, nn.BatchNorm2d)]
    assert all(np.isfinite(w).all() and np.abs(w).sum() > 0 for w in want)


@pytest.mark.parametrize("steps,shape", [(40, (5, 7)), (120, (3,)), (64, (2, 9, 4))])
def test_kept_schedules_keep_one_kernel_per_key_and_no_uops(steps, shape):
    """A kept schedule of many items of few kernels holds each kernel once, and a program keeps no UOps
    after rendering: every full garbage collection walks what they hold (a word_language_model step
    held 500,000 objects, 300 ms a collection)."""
    import gc

    from tg import Device
    from tg.core.kernel import Kernel
    realize_mod._REUSE.clear()              # only this test's schedules below
    gc.collect()
    alive = sum(type(o) is Kernel for o in gc.get_objects())
    rng = np.random.default_rng(steps)
    x0 = Tensor(rng.standard_normal(shape).astype(np.float32))
    for _ in range(2):                       # the second run reuses the schedule the first kept
        x = x0
        for i in range(steps):               # a chain of stored steps: identical kernels but the last
            x = (x * 1.5 + (i % 3)).contiguous()
        got = x.numpy()
    want = x0.numpy().astype(np.float64)
    for i in range(steps):
        want = want * 1.5 + (i % 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    gc.collect()
    for r in realize_mod._REUSE.values():
        kept = [k for _, _, k, _, _, _ in r.steps if k is not None]
        assert len({id(k) for k in kept}) == len({k.key for k in kept}) <= 3
    assert sum(type(o) is Kernel for o in gc.get_objects()) - alive < steps // 2
    assert all(not getattr(p.info, "uops", None) for p in Device[x0.device]._by_key.values())
