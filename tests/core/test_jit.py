"""TinyJit replays equal eager results, retrace on new shapes, and carry in-place state."""
import numpy as np
import pytest

import tg
from tg import GlobalCounters, Tensor, TinyJit


def test_replay_matches_eager_with_new_inputs():
    f = lambda x, y: ((x @ y).relu() + 1).sum(0)  # noqa: E731
    jf = TinyJit(f)
    rng = np.random.default_rng(0)
    for _ in range(6):
        a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
        np.testing.assert_allclose(
            jf(Tensor(a), Tensor(b)).numpy(), f(Tensor(a), Tensor(b)).numpy(), rtol=1e-5
        )


def test_replay_runs_no_graph_work():
    jf = TinyJit(lambda x: (x * 2).exp().sum())
    x = Tensor(np.ones(16, np.float32))
    for _ in range(3):
        jf(x)
    k = GlobalCounters.kernel_count
    out = jf(Tensor(np.full(16, 0.5, np.float32)))
    assert GlobalCounters.kernel_count == k + 1
    np.testing.assert_allclose(out.item(), 16 * np.e, rtol=1e-5)


def test_new_shape_retraces():
    jf = TinyJit(lambda x: x.sum() * 2)
    for n in (3, 3, 3, 5, 5, 5, 3):
        assert jf(Tensor(np.ones(n, np.float32))).item() == 2 * n


def test_training_step_replay_equals_eager():
    def run(jit: bool) -> list[float]:
        Tensor.manual_seed(0)
        w = Tensor.randn(4, 3, requires_grad=True)
        rng = np.random.default_rng(1)

        def step(x, y):
            loss = ((x @ w - y) ** 2).mean()
            w.grad = None
            loss.backward()
            with tg.no_grad():
                w.assign(w.detach() - 0.1 * w.grad)
            return loss.realize()
        fn = TinyJit(step) if jit else step
        return [fn(Tensor(rng.standard_normal((8, 4)).astype(np.float32)),
                   Tensor(rng.standard_normal((8, 3)).astype(np.float32))).item() for _ in range(6)]
    np.testing.assert_allclose(run(True), run(False), rtol=1e-6)


def test_dropout_style_randomness_changes_between_replays():
    jf = TinyJit(lambda x: x * (Tensor.rand(*x.shape) > 0.5))
    x = Tensor(np.ones(64, np.float32))
    masks = [jf(x).numpy().copy() for _ in range(5)]
    assert len({m.tobytes() for m in masks}) == 5


def test_debug_shows_replays(capsys, monkeypatch):
    monkeypatch.setenv("DEBUG", "1")
    jf = TinyJit(lambda x: x + 1)
    for _ in range(3):
        jf(Tensor([1.0]))
    assert "[jit] replayed" in capsys.readouterr().out


def test_nested_jit_rejected():
    inner = TinyJit(lambda x: x * 2)
    outer = TinyJit(lambda x: inner(x) + 1)
    x = Tensor([1.0])
    outer(x)
    with pytest.raises(RuntimeError, match="nested"):
        for _ in range(3):
            outer(x)
            inner(x)
            inner(x)


def test_host_data_made_inside_the_function_survives_memory_sharing():
    # the constant is read by the capture before any kernel writes it: it must not share memory
    @TinyJit
    def f(x: Tensor) -> Tensor:
        u = x.sum(axis=1).exp().sum()
        return (u.reshape(1) + Tensor([1.0, 2.0, 3.0, 4.0])).realize()
    for i in range(4):
        x = (np.arange(16, dtype=np.float32).reshape(4, 4) + i) / 16
        np.testing.assert_allclose(f(Tensor(x)).numpy(), np.exp(x.sum(1)).sum() + np.arange(1, 5), rtol=1e-5)


def test_returning_an_input_unchanged_is_refused():
    f = TinyJit(lambda x: x)
    f(Tensor([1.0]))
    with pytest.raises(ValueError, match="returns one of its inputs"):
        f(Tensor([2.0]))


def test_inputs_that_share_memory_are_their_own_signature():
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return (a * 2 + b).contiguous()
    x = Tensor([1.0, 2.0]).realize()
    for _ in range(3):
        assert f(x, x).tolist() == [3.0, 6.0]
    for _ in range(3):
        y = Tensor([10.0, 20.0]).realize()
        assert f(x, y).tolist() == [12.0, 24.0]


# Every way tg reads tensor values to the host. Under TinyJit a replay runs only the captured kernels,
# so whatever Python decided from those values (a mask's positions, a shape, a branch) would be frozen:
# each must raise "[jit] ..." at the read, on the first call already. (x float (4,), m bool (4,), i int (4,))
def _mask_set(x: Tensor, m: Tensor, i: Tensor) -> Tensor:
    y = x.clone()
    y[m] = x[:2]
    return y


HOST_READS = {
    "numpy": lambda x, m, i: Tensor(x.numpy() * 2),
    "item": lambda x, m, i: x * x.sum().item(),
    "tolist": lambda x, m, i: Tensor(x.tolist()),
    "if tensor": lambda x, m, i: x * 2 if x.sum() > 0 else x * 3,
    "bool mask getitem": lambda x, m, i: x[m] * 2,
    "bool mask setitem": _mask_set,
    "nonzero": lambda x, m, i: m.nonzero(),
    "nonzero as_tuple": lambda x, m, i: m.nonzero(as_tuple=True)[0],
    "argwhere": lambda x, m, i: m.argwhere(),
    "masked_select": lambda x, m, i: x.masked_select(m),
    "unique": lambda x, m, i: i.unique(),
    "unique_consecutive": lambda x, m, i: i.unique_consecutive(),
    "bincount": lambda x, m, i: i.abs().bincount(),
    "histc of the data's range": lambda x, m, i: x.histc(bins=3),
    "repeat_interleave by a tensor": lambda x, m, i: x.repeat_interleave(i.abs()),
    "tensor_split at a tensor": lambda x, m, i: x.tensor_split(i.abs().clip(0, 4)[:2])[0],
    "narrow from a tensor": lambda x, m, i: x.narrow(0, i.abs().min(), 1),
    "one_hot without num_classes": lambda x, m, i: tg.nn.functional.one_hot(i.abs()),
    "allclose": lambda x, m, i: x * x.allclose(x * 2),
    "equal": lambda x, m, i: x * x.equal(x * 2),
    "get_rng_state": lambda x, m, i: x + Tensor.rand(4) * sum(Tensor.get_rng_state()["counters"].values()),
}


@pytest.mark.parametrize("name", list(HOST_READS))
def test_host_read_inside_jit_raises_at_the_first_call(name):
    jf = TinyJit(HOST_READS[name])
    rng = np.random.default_rng(len(name))
    x = Tensor(rng.standard_normal(4).astype(np.float32))
    m = Tensor(np.array([True, False, False, True]))
    i = Tensor(rng.integers(-3, 4, 4).astype(np.int32))
    with pytest.raises(ValueError, match=r"\[jit\] .* reads tensor values on the host") as err:
        jf(x, m, i)
    assert "test_jit.py" in str(err.value)    # it names the line of the user's code that read
    assert "Mixin" not in str(err.value)      # and a Tensor method as Tensor's, not as its part's class
    HOST_READS[name](x, m, i)                 # and the same function runs eagerly outside the jit


def test_bool_mask_index_is_not_replayed_stale():
    jf = TinyJit(lambda x, m: x[m] * 2)
    x = Tensor(np.arange(20, 24, dtype=np.float32))
    with pytest.raises(ValueError, match=r"\[jit\] <lambda> reads tensor values .*Tensor.__getitem__"):
        jf(x, Tensor([True, True, True, False]))
    # the fix the message suggests: a mask as a product keeps the shape fixed and replays right
    jg = TinyJit(lambda x, m: m.where(x * 2, 0.0))
    for mask in ([1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 1], [1, 0, 1, 0]):
        np.testing.assert_array_equal(jg(x, Tensor(np.array(mask, bool))).numpy(),
                                      np.where(mask, np.arange(20, 24) * 2, 0))


def _set_where(x: Tensor, m: Tensor, value: float) -> Tensor:
    y = x.clone()
    y[m] = value       # one value: a lazy where over the mask, no host read
    return y


def test_checks_that_read_known_values_do_not_freeze_into_a_capture():
    # tg checks index bounds, targets and int exponents on the host when their values are already
    # known; inside a TinyJit each call brings new values, so those reads must not happen there
    # (they would raise, or fix the capture to the first call's values)
    rng = np.random.default_rng(3)
    jset = TinyJit(lambda x, m: _set_where(x, m, -1.0))
    jpow = TinyJit(lambda a, e: (a ** e).contiguous())
    jidx = TinyJit(lambda x, i: x[i] * 2)
    jce = TinyJit(lambda z, t: tg.nn.functional.cross_entropy(z, t))
    for step in range(5):
        e = rng.integers(0, 2 + 3 * step, 6).astype(np.int32)
        a = rng.integers(-3, 4, 6).astype(np.int32)
        np.testing.assert_array_equal(jpow(Tensor(a), Tensor(e)).numpy(), a ** e)
        x, m = rng.standard_normal(6).astype(np.float32), rng.random(6) < 0.5
        np.testing.assert_array_equal(jset(Tensor(x), Tensor(m)).numpy(), np.where(m, -1.0, x))
        x, i = rng.standard_normal(7).astype(np.float32), rng.integers(-7, 7, 5)
        np.testing.assert_array_equal(jidx(Tensor(x), Tensor(i)).numpy(), x[i] * 2)
        z, t = rng.standard_normal((5, 3)).astype(np.float32), rng.integers(0, 3, 5)
        logp = z - np.log(np.exp(z.astype(np.float64)).sum(1, keepdims=True))
        np.testing.assert_allclose(jce(Tensor(z), Tensor(t)).item(), -logp[np.arange(5), t].mean(), rtol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_kernels_writing_views_of_kept_memory_are_not_remapped(seed):
    """A kernel that writes a Buffer.view of memory the caller keeps (made afresh inside the function
    each call, so nothing but the capture holds the view) writes that memory in every replay: the
    memory planner shares only buffers of their own, never a view, even beside same-sized
    intermediates it could map it onto. Generated view layouts; a host step reads the memory."""
    from tg.core.capture import host_step
    from tg.core.device import Buffer, Device
    from tg.core.dtype import dtypes
    from tg.core.host import HostView, view_tensor
    rng = np.random.default_rng(seed)
    device = Tensor([0.0]).device                   # the default device (CPU, CL, ...)
    n = int(rng.integers(2, 5))
    size = max(Device[device].allocator.view_align // 4, 16) * int(rng.integers(1, 4))   # views' alignment
    kept = Buffer(device, n * size, dtypes.float32)
    whole = HostView(view_tensor(kept, 0, (n * size,)))
    seen: list[np.ndarray] = []

    def step(x: Tensor) -> Tensor:
        tmp = (x * 3).contiguous().realize()             # a same-sized intermediate to share with
        for i in range(n):
            view_tensor(kept, i * size, (size,)).assign(tmp + i).realize()
        host_step(lambda: seen.append(whole.read().copy()))
        return (tmp * 2).sum()

    jit = TinyJit(step)
    for call in range(5):
        x = rng.standard_normal(size).astype(np.float32)
        jit(Tensor(x))
        want = np.concatenate([x * 3 + i for i in range(n)])
        np.testing.assert_allclose(seen[-1], want, rtol=1e-6, err_msg=f"call {call}")
