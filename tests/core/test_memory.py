"""Buffers die as soon as nothing needs them: inside one schedule (after their last reader) and
after backward (the graph lets go of what its Functions saved). Measured with GlobalCounters."""
import gc
import weakref

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, TinyJit
from tg.core import realize as realize_mod

N = 64   # (N, N) float32 intermediates: N * N * 4 bytes each


def _square(value: float, device: str | None = None) -> Tensor:
    return Tensor(np.full((N, N), value, np.float32), device=device).realize()


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
@pytest.mark.parametrize("reused", [False, True], ids=["built", "reused"])
def test_run_schedule_frees_each_intermediate_after_its_last_reader(device, reused):
    w, x = _square(1 / N, device), _square(1.0, device)

    def chain() -> Tensor:
        y = x
        for _ in range(10):
            y = y @ w  # ten kernels, each reading the one before: only two are ever needed at once
        return y.realize()
    if reused:
        chain()    # the second chain takes the first's schedule (the fast path of a repeated step)
    gc.collect()       # garbage of earlier tests, freed midway, would count as this schedule's frees
    gc.disable()
    try:
        GlobalCounters.reset()
        base = GlobalCounters.mem_used
        y = chain()
        assert GlobalCounters.schedules_reused == (1 if reused else 0)
    finally:
        gc.enable()
    size = N * N * 4
    assert GlobalCounters.mem_peak - base <= 2 * size, f"peak {(GlobalCounters.mem_peak - base) / size} x N"
    assert GlobalCounters.mem_used - base == size      # the result the user holds
    np.testing.assert_allclose(y.numpy(), np.ones((N, N), np.float32), rtol=1e-5)


def test_run_schedule_consumes_its_items():
    from tg.core.schedule import create_schedule
    items = create_schedule([(_square(1.0) @ _square(2.0)).lazydata])
    realize_mod.run_schedule(items)
    assert items == []


def test_buffers_held_outside_the_schedule_stay():
    a = _square(1.0)
    b = a @ a
    c = b @ a
    c.realize()                    # b is an intermediate of c's schedule, but the user holds it
    np.testing.assert_allclose(b.numpy(), np.full((N, N), N, np.float32))


def test_jit_capture_keeps_the_buffers_it_replays():
    w = _square(0.5)
    step = TinyJit(lambda x: ((x @ w) @ w).sum())
    outs = [step(_square(float(i))).item() for i in range(1, 5)]
    np.testing.assert_allclose(outs, [N * N * N * N * i / 4 for i in range(1, 5)], rtol=1e-5)


def _mlp_loss(x: Tensor, w1: Tensor, w2: Tensor) -> tuple[Tensor, weakref.ref]:
    hidden = (x @ w1).relu()
    loss = (hidden @ w2).square().mean()
    return loss, weakref.ref(hidden.lazydata.base)


def test_backward_frees_the_graph_when_only_the_loss_is_kept():
    w1 = Tensor(
        np.random.default_rng(0).standard_normal((N, N)).astype(np.float32), requires_grad=True
    ).realize()
    w2 = Tensor(
        np.random.default_rng(1).standard_normal((N, N)).astype(np.float32), requires_grad=True
    ).realize()
    x = _square(1.0)
    base = GlobalCounters.mem_used
    loss, hidden = _mlp_loss(x, w1, w2)
    loss.backward()
    assert w1.grad is not None and w2.grad is not None
    Tensor.realize(w1.grad, w2.grad, loss)
    assert hidden() is None, "a forward activation outlived backward"
    assert GlobalCounters.mem_used - base == w1.grad.nbytes + w2.grad.nbytes + loss.nbytes


def test_retain_graph_keeps_it():
    w1 = Tensor(np.eye(N, dtype=np.float32), requires_grad=True)
    w2 = Tensor(np.eye(N, dtype=np.float32), requires_grad=True)
    loss, hidden = _mlp_loss(_square(1.0), w1, w2)
    loss.backward(retain_graph=True)
    assert w1.grad is not None and w2.grad is not None
    Tensor.realize(w1.grad, w2.grad, loss)
    assert hidden() is not None
    first = w1.grad.numpy()
    loss.backward()                                    # a second pass through the same graph
    np.testing.assert_allclose(w1.grad.numpy(), 2 * first, rtol=1e-6)


def test_a_blocks_address_never_reaches_another_object():
    """HostAllocator remembers each block's C address by the block's id. An id is reused once its object
    dies, and a block can die without the allocator's _free (a cache dropped whole, as a test's
    monkeypatch did): the address of the dead block, unmapped memory by then, was handed to the next
    object with its id, a view of other memory, and kernels wrote through it (SIGSEGV in a later test).
    For every size and many objects made after such a drop, the address is the object's own."""
    import ctypes

    from tg.core.device import HostAllocator
    alloc = HostAllocator()
    for size in (64, 4096, 1 << 20):
        blocks = [alloc.alloc(size) for _ in range(8)]
        for b in blocks:
            alloc.free(b, size)
        alloc.cache, alloc.cached_bytes = {}, 0      # dropped whole: no _free ran
        del blocks, b
        for i in range(5000):
            view = np.empty(64 + i % 7, np.uint8)[i % 5:]
            assert alloc.c_pointer(view).value == view.ctypes.data
        assert isinstance(alloc.c_pointer(alloc.alloc(size)), ctypes.c_void_p)
