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
