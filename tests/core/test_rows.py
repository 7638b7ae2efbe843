"""Row groups (tg/core/codegen/rows.py): consecutive CPU kernels that work row by row run block by block in
one function, with the per-row results between them on each thread's stack. Every case forces groups on
small, odd shapes (heuristics.ROW_GROUP_MIN_BYTES = 0), checks that the group formed (or not, where it
must not) and compares the values with float64 numpy."""
import numpy as np
import pytest

from tg import Device, Tensor, TinyJit
from tg.core import realize
from tg.core.capture import watch_schedules
from tg.core.codegen import heuristics, rows
from tg.core.runtime.ops_cpu import _vector_bytes
from tg.core.schedule import create_schedule
from tg.nn import functional as F


@pytest.fixture(autouse=True)
def _forced(monkeypatch):
    monkeypatch.setattr(heuristics, "ROW_GROUP_MIN_BYTES", 0)
    # a group needs 4 rows a thread: pin the threads, or a 16-core machine makes no group of 37 rows
    monkeypatch.setenv("TG_CPU_THREADS", "2")
    realize._REUSE.clear()        # schedules kept from other tests were made without groups
    yield
    realize._REUSE.clear()


def cpu(a: np.ndarray, requires_grad: bool = False) -> Tensor:
    return Tensor(a, device="CPU", requires_grad=requires_grad)


def groups_of(*ts: Tensor) -> list:
    """The row groups realizing ts makes."""
    outs = [t.lazydata for t in ts]
    items = realize._fuse_rows(create_schedule(outs), outs)
    return [it.kernel for it in items if isinstance(it.kernel, rows.RowGroup)]


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("shape", [(37, 45), (64, 300), (9, 16), (3, 5, 7, 33)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_rows_as_one_group(shape, op):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 4
    t = getattr(cpu(x), op)(-1)
    (g,) = groups_of(t)
    assert len(g.members) == 3 and g.rows == int(np.prod(shape[:-1])) and g.rows % g.block == 0
    ref = np_softmax(x.astype(np.float64))
    np.testing.assert_allclose(t.numpy(), ref if op == "softmax" else np.log(ref), rtol=2e-6, atol=2e-6)


def test_layer_norm_and_cross_entropy_rows():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((41, 130)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal(130).astype(np.float32), rng.standard_normal(130).astype(np.float32)
    out = F.layer_norm(cpu(x), 130, cpu(w), cpu(b))
    assert groups_of(out)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    logits, labels = rng.standard_normal((50, 77)).astype(np.float32), rng.integers(0, 77, 50)
    loss = F.cross_entropy(cpu(logits), Tensor(labels, device="CPU"))
    # max, sum of exp, each row's loss; the count of the targets, scheduled between them, runs first
    assert [len(g.members) for g in groups_of(loss)] == [3]
    logp = np.log(np_softmax(logits.astype(np.float64)))
    np.testing.assert_allclose(loss.item(), -logp[np.arange(50), labels].mean(), rtol=1e-6)


def test_internal_results_stay_lazy_and_are_computed_when_asked():
    x = np.random.default_rng(3).standard_normal((24, 70)).astype(np.float32)
    t = cpu(x)
    m = t.amax(1, keepdim=True)
    e = (t - m).exp()
    s = e.sum(1, keepdim=True)
    z = e / s
    (g,) = groups_of(z)
    assert len(g.members) == 3
    z.realize()
    assert m.lazydata.base.realized is None and s.lazydata.base.realized is None
    np.testing.assert_allclose(z.numpy(), np_softmax(x.astype(np.float64)), rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(m.numpy(), x.max(1, keepdims=True))
    sums = np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
    np.testing.assert_allclose(s.numpy(), sums, rtol=1e-6)


def test_asked_for_or_read_later_results_are_not_internal():
    x = np.random.default_rng(4).standard_normal((16, 40)).astype(np.float32)
    t = cpu(x)
    m = t.amax(1, keepdim=True)
    z = (t - m).exp()
    assert len(groups_of(z)) == 1
    assert groups_of(z, m) == []            # m asked for too: it is stored, so nothing groups with it
    z.realize(m)
    np.testing.assert_array_equal(m.numpy(), x.max(1, keepdims=True))
    np.testing.assert_allclose(z.numpy(), np.exp(x - x.max(1, keepdims=True)), rtol=1e-6)


def test_a_result_assigned_into_is_not_internal():
    x = np.random.default_rng(10).standard_normal((64, 300)).astype(np.float32)
    t = cpu(x)
    m = t.amax(1, keepdim=True)
    y = (t - m).exp().sum(1, keepdim=True)
    m.assign(m + 1)             # writes into m's memory: m must be allocated, so it is no internal buffer
    Tensor.realize(y, m)
    np.testing.assert_allclose(m.numpy(), x.max(1, keepdims=True) + 1, rtol=1e-6)
    sums = np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), sums, rtol=1e-5)


def test_a_read_of_other_rows_makes_no_group():
    x = np.random.default_rng(5).standard_normal((20, 36)).astype(np.float32)
    t = cpu(x)
    # row r reads the max of row 19 - r: a block's rows never wrote it
    z = t - t.amax(1, keepdim=True).flip(0)
    assert groups_of(z) == []
    np.testing.assert_allclose(z.numpy(), x - x.max(1, keepdims=True)[::-1], rtol=1e-6)


def test_too_few_rows_for_the_threads_make_no_group():
    assert groups_of(cpu(np.ones((2, 4000), np.float32)).softmax(-1)) == []


@pytest.mark.parametrize("shape", [(1024, 1040), (1030, 1028)])
def test_streaming_output_only_at_aligned_blocks(shape):
    """Outputs of 4 MiB or more stream past the cache, where each block's start is 64-byte aligned."""
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    t = cpu(x).softmax(-1)
    (g,) = groups_of(t)
    src = Device["CPU"].get_program(g).src
    aligned = shape[1] * g.block % 16 == 0
    assert ("_mm512_stream_ps" in src) == (aligned and _vector_bytes() == 64)
    assert f"+{shape[1] * g.block}, 0, 3);" in src     # the next block of x asked for ahead
    np.testing.assert_allclose(t.numpy(), np_softmax(x.astype(np.float64)), rtol=2e-6, atol=1e-8)


def test_mixed_dtypes_and_argmax():
    x = np.random.default_rng(7).standard_normal((33, 29)).astype(np.float32)
    x[5, 3] = x[5].max()          # a tie: the first index wins
    t = cpu(x)
    above = (t > t.mean(1, keepdim=True)).sum(1)
    assert groups_of(above)
    np.testing.assert_array_equal(above.numpy(), (x > x.mean(1, keepdims=True)).sum(1))
    np.testing.assert_array_equal(t.argmax(1).numpy(), x.argmax(1))
    h = cpu(x).half().softmax(-1)
    np.testing.assert_allclose(h.float().numpy(), np_softmax(x.astype(np.float64)), rtol=2e-3, atol=2e-3)


def test_softmax_backward_groups_and_matches():
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((30, 52)).astype(np.float32), rng.standard_normal((30, 52)).astype(np.float32)
    t = cpu(x, requires_grad=True)
    y = t.softmax(-1)
    y.realize()
    seen: list = []
    with watch_schedules(lambda items: seen.extend(it.kernel for it in items)):
        (y * cpu(w)).sum().backward()
        t.grad.realize()
    assert any(isinstance(k, rows.RowGroup) for k in seen)
    y64 = np_softmax(x.astype(np.float64))
    np.testing.assert_allclose(t.grad.numpy(), y64 * (w - (w * y64).sum(1, keepdims=True)), rtol=1e-5,
                               atol=1e-6)


def test_repeated_steps_and_jit_replay():
    rng = np.random.default_rng(9)
    step = TinyJit(lambda a: a.log_softmax(-1).realize())
    for _ in range(4):
        x = rng.standard_normal((19, 63)).astype(np.float32)
        ref = np.log(np_softmax(x.astype(np.float64)))
        np.testing.assert_allclose(cpu(x).log_softmax(-1).numpy(), ref, rtol=2e-6, atol=2e-6)   # reused
        np.testing.assert_allclose(step(cpu(x)).numpy(), ref, rtol=2e-6, atol=2e-6)              # replayed
