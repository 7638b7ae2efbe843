"""Activation checkpointing: the same gradients as the plain model (dropout included), and a
clearly lower memory peak (GlobalCounters.mem_peak)."""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np
import pytest

import tg
from tg import GlobalCounters, Tensor, TinyJit, nn
from tg.nn.checkpoint import checkpoint, checkpoint_sequential
from tg.nn.state import get_parameters


def _mlp(n_linear: int, width: int = 8, dropout: float = 0.0) -> list[Callable[[Tensor], Tensor]]:
    layers: list[Callable[[Tensor], Tensor]] = []
    for _ in range(n_linear):
        layers += [nn.Linear(width, width), Tensor.relu]
        if dropout:
            layers.append(nn.Dropout(dropout))
    return layers


def _grads(layers, x: Tensor, segments: int | None, preserve_rng_state: bool = True) -> list[np.ndarray]:
    """Input and parameter gradients of a loss over the layers, plain (segments=None) or checkpointed."""
    for p in get_parameters(layers):
        p.grad = None
    x.grad = None
    if segments is None:
        out = nn.Sequential(*layers)(x)
    else:
        out = checkpoint_sequential(layers, segments, x, preserve_rng_state=preserve_rng_state)
    out.square().mean().backward()
    assert x.grad is not None
    return [x.grad.numpy()] + [p.grad.numpy() for p in get_parameters(layers)]


def _assert_all_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7, err_msg=f"gradient {i}")


def _input(shape=(6, 8), seed=0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), requires_grad=True)


@pytest.mark.parametrize("n_linear", [3, 4, 5])
@pytest.mark.parametrize("segments", [1, 2, 3])
def test_sequential_gradients_equal_plain(n_linear, segments):
    layers = _mlp(n_linear)                       # 2 * n_linear callables: odd and even chunk splits
    x = _input()
    _assert_all_close(_grads(layers, x, segments), _grads(layers, x, None))


def test_sequential_runs_every_chunk_but_the_last_checkpointed(monkeypatch):
    from tg.core import checkpoint as ckpt_mod
    calls: list[int] = []
    real = ckpt_mod.checkpoint
    monkeypatch.setattr(ckpt_mod, "checkpoint", lambda fn, layers, x, **kw: calls.append(len(layers)) or
                        real(fn, layers, x, **kw))
    layers = _mlp(7)  # 14 callables in 4 segments: 3 + 3 + 3 checkpointed, 5 plain
    checkpoint_sequential(layers, 4, _input()).sum().backward()
    assert calls == [3, 3, 3]


def test_two_inputs_two_outputs():
    lin = nn.Linear(8, 8)
    a, b = _input(seed=1), _input(seed=2)

    def fn(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        h = lin(x * y).tanh()
        return h * x, (h + y).exp()

    def grads(use_checkpoint: bool) -> list[np.ndarray]:
        for t in (a, b, lin.weight, lin.bias):
            t.grad = None
        u, v = checkpoint(fn, a, b) if use_checkpoint else fn(a, b)
        (u.sum() * 2 + (v * v).mean()).backward()
        return [t.grad.numpy() for t in (a, b, lin.weight, lin.bias)]   # type: ignore[union-attr]
    _assert_all_close(grads(True), grads(False))


def test_an_output_without_a_gradient_and_a_keyword_input():
    lin = nn.Linear(8, 8)
    x, scale = _input(seed=1), _input(seed=2)

    def fn(t: Tensor, scale: Tensor) -> tuple[Tensor, str, Tensor]:
        return lin(t) * scale, "tag", t.sum()

    out, tag, unused = checkpoint(fn, x, scale=scale)
    assert tag == "tag" and unused.shape == ()
    out.sum().backward()
    assert x.grad is not None and scale.grad is not None and lin.weight.grad is not None
    want_scale = lin(x).detach().numpy()
    np.testing.assert_allclose(scale.grad.numpy(), want_scale, rtol=1e-5)


def test_dropout_masks_match_with_preserve_rng_state():
    layers = _mlp(4, dropout=0.5)
    x = _input()
    tg.Tensor.training = True
    try:
        Tensor.manual_seed(3)
        want = _grads(layers, x, None)
        after_plain = Tensor.rand(4).numpy()
        Tensor.manual_seed(3)
        got = _grads(layers, x, 2)
        after_checkpointed = Tensor.rand(4).numpy()
        Tensor.manual_seed(3)
        different = _grads(layers, x, 2, preserve_rng_state=False)
    finally:
        tg.Tensor.training = False
    _assert_all_close(got, want)
    # the generator is left where the plain run leaves it: the recompute's draws are undone
    np.testing.assert_array_equal(after_checkpointed, after_plain)
    # without preserve_rng_state the recompute draws new masks: the gradients generally differ
    assert any(not np.allclose(g, w) for g, w in zip(different, want))


def test_parameters_get_gradients_when_the_input_needs_none():
    emb = nn.Embedding(10, 8)
    layers = [emb, nn.Linear(8, 8), Tensor.relu, nn.Linear(8, 1)]
    ids = Tensor(np.array([[1, 2, 3], [4, 5, 1]], np.int32))       # token ids: no gradient

    def grads(segments: int | None) -> list[np.ndarray]:
        for p in get_parameters(layers):
            p.grad = None
        out = (
            nn.Sequential(*layers)(ids) if segments is None else checkpoint_sequential(layers, segments, ids)
        )
        out.sum().backward()
        return [p.grad.numpy() for p in get_parameters(layers)]   # type: ignore[union-attr]
    plain = grads(None)
    _assert_all_close(grads(2), plain)
    _assert_all_close(grads(4), plain)
    assert emb.weight.grad is not None and np.abs(emb.weight.grad.numpy()).sum() > 0


def test_the_forward_graph_is_not_kept():
    lin = nn.Linear(8, 8)
    inner: list[weakref.ref] = []

    def fn(t: Tensor) -> Tensor:
        hidden = lin(t).relu()
        inner.append(weakref.ref(hidden))
        return hidden * 2
    out = checkpoint(fn, _input())
    assert inner[0]() is None                     # only the inputs (and the output) are kept
    out.sum().backward()
    assert lin.weight.grad is not None


def test_a_parameter_used_inside_and_outside():
    lin = nn.Linear(8, 8)
    x = _input()

    def grads(use_checkpoint: bool) -> list[np.ndarray]:
        lin.weight.grad = lin.bias.grad = x.grad = None
        h = lin(x)
        h = checkpoint(lambda t: lin(t).relu(), h) if use_checkpoint else lin(h).relu()
        lin(h).sum().backward()
        return [t.grad.numpy() for t in (x, lin.weight, lin.bias)]   # type: ignore[union-attr]
    _assert_all_close(grads(True), grads(False))


def test_jit_training_steps_match_plain():
    def train(use_checkpoint: bool, jit: bool) -> list[np.ndarray]:
        Tensor.manual_seed(0)
        layers = _mlp(3, dropout=0.25)
        params = get_parameters(layers)
        opt = nn.optim.SGD(params, lr=0.1)
        rng = np.random.default_rng(1)

        def step(x: Tensor) -> Tensor:
            opt.zero_grad()
            out = checkpoint_sequential(layers, 3, x) if use_checkpoint else nn.Sequential(*layers)(x)
            loss = out.square().mean()
            loss.backward()
            opt.step()
            return loss.realize()
        run = TinyJit(step) if jit else step
        Tensor.training = True
        try:
            for _ in range(3):
                run(Tensor(rng.standard_normal((5, 8)).astype(np.float32)))
        finally:
            Tensor.training = False
        return [p.numpy() for p in params]
    plain = train(False, False)
    _assert_all_close(train(True, True), plain)
    _assert_all_close(train(True, False), plain)


def test_no_grad_and_nothing_to_differentiate_just_run():
    lin = nn.Linear(8, 8)
    x = _input()
    with tg.no_grad():
        out = checkpoint(lin, x)
    assert out._ctx is None
    frozen = Tensor.ones(2, 2)
    assert checkpoint(lambda t: t * 2, frozen).tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_bad_uses_raise():
    with pytest.raises(TypeError, match=r"\[nn\] checkpoint: fn must return a Tensor"):
        checkpoint(lambda t: 3, _input())
    with pytest.raises(ValueError, match=r"\[nn\] checkpoint_sequential: segments must be in 1..2"):
        checkpoint_sequential([Tensor.relu, Tensor.tanh], 3, _input())


# ---------------------------------------------------------------------------- memory

def _peak_of_one_step(segments: int | None, batch: int = 1024, width: int = 256) -> int:
    """Bytes allocated at peak by forward + backward + realizing every gradient (and the loss)."""
    Tensor.manual_seed(0)
    layers = _mlp(8, width)
    params = get_parameters(layers)
    x = Tensor(np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32))
    Tensor.realize(x, *params)
    GlobalCounters.reset()
    base = GlobalCounters.mem_used
    model = (
        nn.Sequential(*layers) if segments is None else (lambda t: checkpoint_sequential(layers, segments, t))
    )
    loss = model(x).square().mean()                     # only the loss is kept, as in a training loop
    loss.backward()
    Tensor.realize(loss, *[p.grad for p in params if p.grad is not None])
    return GlobalCounters.mem_peak - base


def test_checkpointing_lowers_the_memory_peak():
    plain, checkpointed = _peak_of_one_step(None), _peak_of_one_step(4)
    activation = 1024 * 256 * 4
    assert checkpointed <= 0.6 * plain, (
        f"peak {checkpointed / activation:.1f} vs {plain / activation:.1f} activations"
    )


def test_a_retained_graph_differentiated_again_uses_fresh_output_gradients():
    w = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    a, b = checkpoint(lambda t: (t * w, t * w * 3), Tensor([1.0, 1.0]))
    assert (a.sum() + b.sum()).gradient(w, retain_graph=True)[0].tolist() == [4.0, 4.0]
    assert a.sum().gradient(w)[0].tolist() == [1.0, 1.0]      # only the first output this time


def test_recompute_runs_in_the_forward_mode_and_under_no_grad():
    def run(use_checkpoint: bool) -> list:
        Tensor.manual_seed(0)
        w = Tensor(np.ones(8, np.float32), requires_grad=True)
        drop = nn.Dropout(0.5)
        Tensor.training = True
        out = checkpoint(lambda t: drop(t * w), Tensor(np.arange(1, 9, dtype=np.float32))) if use_checkpoint \
            else drop(Tensor(np.arange(1, 9, dtype=np.float32)) * w)
        loss = out.sum()
        Tensor.training = False          # switched off before backward: the recompute still drops out
        with tg.no_grad():               # and backward works under no_grad, as a plain one does
            loss.backward()
        return w.grad.tolist()
    assert run(True) == run(False)


def test_named_tuple_results_keep_their_type():
    from collections import namedtuple
    Pair = namedtuple("Pair", "a b")
    w = Tensor([2.0], requires_grad=True)
    out = checkpoint(lambda t: Pair(t * w, t + w), Tensor([3.0]))
    assert isinstance(out, Pair)
    (out.a + out.b).sum().backward()
    assert w.grad.tolist() == [4.0]
