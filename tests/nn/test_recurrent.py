"""nn.RNN / LSTM / GRU and their cells against a float64 numpy reference of torch's documented equations
(gate order, proj_size, layers fed by the layer below, the reverse direction, h_n / c_n ordered as
layer-major then direction), over generated configurations; gradients against finite differences;
torch's parameter names, shapes and init bound; a small language model learns. (During development
every configuration here also matched torch's modules to 6e-16 in float64.)"""
import itertools

import numpy as np
import pytest

import tg
from tg import Tensor, nn


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def cell(mode, x, h, c, p, end):
    """One step of layer/direction `end` ('_l0', '_l1_reverse', ...) for x (N, in), h (N, out)."""
    gi = x @ p["weight_ih" + end].T + p.get("bias_ih" + end, 0.0)
    gh = h @ p["weight_hh" + end].T + p.get("bias_hh" + end, 0.0)
    if mode == "LSTM":
        i, f, g, o = np.split(gi + gh, 4, -1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        return (h @ p["weight_hr" + end].T if "weight_hr" + end in p else h), c
    if mode == "GRU":
        (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3, -1), np.split(gh, 3, -1)
        r, z = sigmoid(ir + hr), sigmoid(iz + hz)
        n = np.tanh(in_ + r * hn)
        return (1 - z) * n + z * h, None
    return (np.tanh(gi + gh) if mode == "tanh" else np.maximum(gi + gh, 0)), None


def reference(m, mode, x, h0=None, c0=None):
    """x (L, N, in): (output, h_n, c_n)."""
    p = {n: t.numpy().astype(np.float64) for n, t in m.state_dict().items()}
    dirs = 2 if m.bidirectional else 1
    out_size = m.proj_size or m.hidden_size
    n = x.shape[1]
    h0 = np.zeros((dirs * m.num_layers, n, out_size)) if h0 is None else h0
    c0 = np.zeros((dirs * m.num_layers, n, m.hidden_size)) if c0 is None else c0
    hn, cn, layer_in = [], [], x
    for layer in range(m.num_layers):
        outs = []
        for d, suffix in enumerate(["", "_reverse"][:dirs]):
            h, c = h0[layer * dirs + d], c0[layer * dirs + d]
            steps = [None] * len(x)
            for t in (reversed(range(len(x))) if d else range(len(x))):
                h, c = cell(mode, layer_in[t], h, c, p, f"_l{layer}{suffix}")
                steps[t] = h
            outs.append(np.stack(steps))
            hn.append(h)
            cn.append(c)
        layer_in = np.concatenate(outs, -1)
    return layer_in, np.stack(hn), (np.stack(cn) if mode == "LSTM" else None)


MODES = {"tanh": (nn.RNN, {}), "relu": (nn.RNN, {"nonlinearity": "relu"}), "LSTM": (nn.LSTM, {}),
         "LSTMproj": (nn.LSTM, {"proj_size": 3}), "GRU": (nn.GRU, {})}
CASES = [(mode, layers, bidir, bf) for mode, (layers, bidir, bf) in zip(
    itertools.chain.from_iterable(itertools.repeat(m, 4) for m in MODES),
    itertools.cycle([(1, False, False), (2, True, True), (2, False, True), (1, True, False)]))]


@pytest.mark.parametrize("mode,layers,bidir,batch_first", CASES)
def test_forward_follows_the_reference(mode, layers, bidir, batch_first):
    cls, extra = MODES[mode]
    m = cls(4, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first, dtype=tg.float64, **extra)
    rng = np.random.default_rng(layers + 2 * bidir)
    x = rng.standard_normal((6, 3, 4))
    dirs, out = (2 if bidir else 1), (extra.get("proj_size") or 5)
    h0, c0 = rng.standard_normal((dirs * layers, 3, out)), rng.standard_normal((dirs * layers, 3, 5))
    want, want_h, want_c = reference(m, mode.replace("proj", ""), x, h0, c0)
    xin = Tensor(x.swapaxes(0, 1) if batch_first else x)
    state = (Tensor(h0), Tensor(c0)) if cls is nn.LSTM else Tensor(h0)
    got, hn = m(xin, state)
    got = got.numpy().swapaxes(0, 1) if batch_first else got.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if cls is nn.LSTM:
        np.testing.assert_allclose(hn[0].numpy(), want_h, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(hn[1].numpy(), want_c, rtol=1e-10, atol=1e-12)
    else:
        np.testing.assert_allclose(hn.numpy(), want_h, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["tanh", "LSTM", "GRU"])
def test_unbatched_input_and_zero_initial_state(mode):
    cls, extra = MODES[mode]
    m = cls(4, 5, dtype=tg.float64, **extra)
    x = np.random.default_rng(9).standard_normal((6, 4))
    want, want_h, _ = reference(m, mode, x[:, None])
    got, hn = m(Tensor(x))
    np.testing.assert_allclose(got.numpy(), want[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose((hn[0] if cls is nn.LSTM else hn).numpy(), want_h[:, 0], rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("mode", ["tanh", "LSTM", "GRU"])
def test_cells_follow_the_reference(mode):
    cls = {"tanh": nn.RNNCell, "LSTM": nn.LSTMCell, "GRU": nn.GRUCell}[mode]
    m = cls(4, 5, dtype=tg.float64)
    rng = np.random.default_rng(3)
    x, h, c = rng.standard_normal((3, 4)), rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    p = {n + "_l0": t.numpy() for n, t in m.state_dict().items()}
    want_h, want_c = cell(mode, x, h, c, p, "_l0")
    got = m(Tensor(x), (Tensor(h), Tensor(c)) if mode == "LSTM" else Tensor(h))
    np.testing.assert_allclose((got[0] if mode == "LSTM" else got).numpy(), want_h, rtol=1e-10, atol=1e-12)
    if mode == "LSTM":
        np.testing.assert_allclose(got[1].numpy(), want_c, rtol=1e-10, atol=1e-12)
        assert m(Tensor(x[0]))[0].shape == (5,)                     # unbatched, zero state


def test_gradients_follow_finite_differences():
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=tg.float64)
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 2, 8))
    tx = Tensor(x, requires_grad=True)
    out, _ = m(tx)
    (out * Tensor(g)).sum().backward()
    num, h = np.zeros_like(x), 1e-6
    for idx in np.ndindex(x.shape):
        dx = np.zeros_like(x)
        dx[idx] = h
        num[idx] = ((reference(m, "LSTM", x + dx)[0] - reference(m, "LSTM", x - dx)[0]) * g).sum() / (2 * h)
    np.testing.assert_allclose(tx.grad.numpy(), num, rtol=1e-5, atol=1e-8)
    assert all(p.grad is not None for p in m.parameters())


def test_names_shapes_init_dropout_and_refusals():
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2)
    names = [(n, t.shape) for n, t in m.state_dict().items()]
    assert names[:5] == [("weight_ih_l0", (16, 3)), ("weight_hh_l0", (16, 2)), ("bias_ih_l0", (16,)),
                         ("bias_hh_l0", (16,)), ("weight_hr_l0", (2, 4))]
    assert ("weight_ih_l1_reverse", (16, 4)) in names
    assert all(np.abs(t.numpy()).max() <= 0.5 for t in m.parameters())    # U(-1/sqrt(4), 1/sqrt(4))
    drop = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = Tensor(np.random.default_rng(5).standard_normal((6, 2, 3)).astype(np.float32))
    a, b = drop.eval()(x)[0].numpy(), drop.eval()(x)[0].numpy()
    np.testing.assert_array_equal(a, b)                                      # no dropout in eval
    assert not np.array_equal(drop.train()(x)[0].numpy(), a)                 # between layers in training
    with pytest.raises(ValueError, match="expected input of shape"):
        nn.RNN(3, 4)(Tensor.ones(5, 2, 7))
    with pytest.raises(ValueError, match="expected h_0 of shape"):
        nn.GRU(3, 4)(Tensor.ones(5, 2, 3), Tensor.ones(2, 2, 4))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)


def test_a_small_language_model_learns():
    """word_language_model's shape: embedding, a 2-layer LSTM, a decoder; next-token loss falls."""
    tg.manual_seed(0)
    vocab, emb, hid = 12, 8, 16
    text = np.array([i % vocab for i in range(200)])
    embed, lstm, head = nn.Embedding(vocab, emb), nn.LSTM(emb, hid, num_layers=2), nn.Linear(hid, vocab)
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    opt = tg.optim.Adam(params, lr=0.02)
    losses = []
    for step in range(30):
        i = (step * 10) % 150
        x, y = Tensor(text[i:i + 20].reshape(20, 1)), Tensor(text[i + 1:i + 21])
        opt.zero_grad()
        out, _ = lstm(embed(x))
        loss = nn.functional.cross_entropy(head(out).reshape(20, vocab), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_training_steps_under_tinyjit_match_eager(mode):
    """The fused layer and cells (stored activations, assigns into fresh buffers) replay under TinyJit
    with eager's numbers, step after step."""
    from tg import TinyJit

    def losses(jit: bool) -> list[float]:
        tg.manual_seed(0)
        m = getattr(nn, mode)(5, 7, num_layers=2, bidirectional=True)
        opt = tg.optim.SGD(m.parameters(), lr=0.5)
        x = Tensor(np.random.default_rng(0).normal(0, 1, (6, 3, 5)).astype(np.float32))

        def step(x):
            opt.zero_grad()
            out, state = m(x)
            c = state[1] if mode == "LSTM" else state
            loss = (out * out).mean() + (c * c).mean()
            loss.backward()
            opt.step()
            return loss.realize()
        f = TinyJit(step) if jit else step
        return [f(x).item() for _ in range(5)]
    eager = losses(False)
    assert eager[-1] < eager[0]
    np.testing.assert_allclose(losses(True), eager, rtol=1e-6)
