"""In-place assigns give the results of eager execution in program order: a value built from a buffer
before an `.assign` to it reads the old contents, however the scheduler fuses and orders the kernels,
also when no order works (a swap, old and new contents read together) and under TinyJit replays."""
import numpy as np
import pytest
from helpers import kernel_count

from tg import Tensor, TinyJit
from tg.nn.optim import Adadelta


@pytest.fixture(params=["CPU", "NUMPY"])
def device(request):
    return request.param


def realized(values, device):
    return Tensor(np.asarray(values, dtype=np.float32), device=device).realize()


def test_reader_of_the_old_value_runs_before_the_assign_without_a_copy(device):
    a, b = realized([1, 2, 3], device), realized([10, 20, 30], device)
    upd = b + a                      # old a
    a.assign(a * 2 + 1)
    b.assign(upd)
    del upd                          # held, it would be stored on its own (see the test below)
    assert kernel_count(a, b) == 2   # ordering suffices: no snapshot of a
    Tensor.realize(a, b)
    np.testing.assert_allclose(b.numpy(), [11, 22, 33])
    np.testing.assert_allclose(a.numpy(), [3, 5, 7])


def test_a_held_reader_inlined_into_a_write_is_stored_with_the_old_value(device):
    a, b = realized([1, 2, 3], device), realized([10, 20, 30], device)
    upd = b + a                      # old a, held by the caller: computed once, then never again
    a.assign(a * 2 + 1)
    b.assign(upd)
    assert kernel_count(a, b) == 3
    Tensor.realize(a, b)
    np.testing.assert_allclose(upd.numpy(), [11, 22, 33])
    np.testing.assert_allclose(a.numpy(), [3, 5, 7])


def test_swap_is_a_cycle_broken_by_a_copy(device):
    a, b = realized([1, 2], device), realized([10, 20], device)
    new_a, new_b = b + 1, a + 1      # both from the old values
    a.assign(new_a)
    b.assign(new_b)
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), [11, 21])
    np.testing.assert_allclose(b.numpy(), [2, 3])


def test_three_assigns_in_a_ring(device):
    a, b, c = realized([1, 2], device), realized([3, 4], device), realized([5, 6], device)
    na, nb, nc = b * 1, c * 1, a * 1
    a.assign(na)
    b.assign(nb)
    c.assign(nc)
    Tensor.realize(a, b, c)
    assert [a.tolist(), b.tolist(), c.tolist()] == [[3, 4], [5, 6], [1, 2]]


def test_old_and_new_contents_read_in_one_kernel(device):
    s, b = realized([1, 2], device), realized([0, 0], device)
    old = s + 0
    s.assign(s * 3)
    b.assign(old + s)                # old s plus new s
    Tensor.realize(s, b)
    np.testing.assert_allclose(b.numpy(), [4, 8])
    np.testing.assert_allclose(s.numpy(), [3, 6])


def test_old_contents_through_views_in_a_cycle(device):
    # each update reads the other buffer's old contents reshaped, expanded, permuted and reduced
    x0, y0 = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6, 12, dtype=np.float32).reshape(3, 2)
    x, y = realized(x0, device), realized(y0, device)
    new_x = x + y.permute(1, 0) + y.sum(1).reshape(1, 3).expand(2, 3)
    new_y = y * 2 + x.reshape(3, 2) - x.max()
    x.assign(new_x)
    y.assign(new_y)
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), x0 + y0.T + y0.sum(1)[None, :])
    np.testing.assert_allclose(y.numpy(), y0 * 2 + x0.reshape(3, 2) - x0.max())


def test_contiguous_reader_in_a_cycle(device):
    a, b = realized([1, 2, 3], device), realized([10, 20, 30], device)
    shared = (a * b).contiguous()    # one intermediate read by both assigns
    new_a, new_b = b + shared, a - shared
    a.assign(new_a)
    b.assign(new_b)
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), [20, 60, 120])
    np.testing.assert_allclose(b.numpy(), [-9, -38, -87])


def test_chained_assigns_and_readers_of_each_value(device):
    a, out1, out2 = realized([1, 2], device), realized([0, 0], device), realized([0, 0], device)
    first = a * 1
    a.assign(a + 10)
    second = a * 1
    a.assign(a * 2)
    out1.assign(first + a)           # value 0 and value 2
    out2.assign(second + a)          # value 1 and value 2
    Tensor.realize(a, out1, out2)
    np.testing.assert_allclose(a.numpy(), [22, 24])
    np.testing.assert_allclose(out1.numpy(), [23, 26])
    np.testing.assert_allclose(out2.numpy(), [33, 36])


def test_swap_under_tinyjit_replays_matches_eager(device):
    a, b = realized([1, 2], device), realized([10, 20], device)

    @TinyJit
    def step(k: Tensor) -> None:
        na, nb = b + k, a * k
        a.assign(na)
        b.assign(nb)

    ra, rb = np.array([1, 2], dtype=np.float32), np.array([10, 20], dtype=np.float32)
    for i in range(5):
        k = np.array([1 + i, 2], dtype=np.float32)
        step(Tensor(k, device=device))
        ra, rb = rb + k, ra * k
        np.testing.assert_allclose(a.numpy(), ra)
        np.testing.assert_allclose(b.numpy(), rb)


def test_adadelta_with_weight_decay_reads_the_old_acc_delta(device):
    # the update reads p (weight decay) and acc_delta's old value; acc_delta's new value reads p:
    # a cycle between p's assign and acc_delta's, in the one schedule of step()
    rng = np.random.default_rng(0)
    w0, grads = rng.standard_normal(5).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    w = Tensor(w0, device=device, requires_grad=True)
    opt = Adadelta([w], lr=0.5, rho=0.8, eps=1e-3, weight_decay=0.1)
    p, sq, acc = w0.astype(np.float64), np.zeros(5), np.zeros(5)
    for g in grads:
        w.grad = Tensor(g, device=device)
        opt.step()
        g = g + 0.1 * p
        sq = 0.8 * sq + 0.2 * g * g
        delta = np.sqrt(acc + 1e-3) / np.sqrt(sq + 1e-3) * g
        acc = 0.8 * acc + 0.2 * delta * delta
        p = p - 0.5 * delta
        np.testing.assert_allclose(w.numpy(), p, rtol=1e-5, atol=1e-6)
