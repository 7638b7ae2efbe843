"""torch.nn.utils.rnn's packed sequences (issue 38): pack_padded_sequence / pad_packed_sequence /
pad_sequence / pack_sequence / unpack_sequence against numpy, and RNN, LSTM and GRU fed a PackedSequence
against the float64 numpy reference of test_recurrent run on each sequence alone, at its own length
(outputs, h_n and c_n in the caller's order, initial states given in that order too), over generated
configurations and length patterns; gradients equal those of the sequences run one by one."""
import itertools

import numpy as np
import pytest
from test_recurrent import reference

import tg
from tg import Tensor, nn
from tg.nn.utils.rnn import (
    PackedSequence,
    pack_padded_sequence,
    pack_sequence,
    pad_packed_sequence,
    pad_sequence,
    unpack_sequence,
)

MODES = {"tanh": lambda **k: nn.RNN(**k), "relu": lambda **k: nn.RNN(nonlinearity="relu", **k),
         "LSTM": lambda **k: nn.LSTM(**k), "GRU": lambda **k: nn.GRU(**k)}


def _lengths(rng, n, longest, sort):
    lens = rng.integers(1, longest + 1, n)
    lens[rng.integers(n)] = longest
    return sorted(lens.tolist(), reverse=True) if sort else lens.tolist()


@pytest.mark.parametrize("n,longest,sort,batch_first", [(1, 4, True, False), (5, 7, True, True),
                                                         (6, 5, False, False), (4, 1, False, True),
                                                         (7, 9, False, True)])
def test_packing_and_padding_round_trip_as_numpy(n, longest, sort, batch_first):
    rng = np.random.default_rng(n * 10 + longest)
    lens = _lengths(rng, n, longest, sort)
    x = rng.standard_normal((n, longest, 3)).astype(np.float32)
    for i, k in enumerate(lens):
        x[i, k:] = 0
    padded = x if batch_first else x.transpose(1, 0, 2)
    p = pack_padded_sequence(Tensor(padded), lens, batch_first=batch_first, enforce_sorted=sort)
    order = np.argsort(-np.array(lens), kind="stable")
    want_rows = [x[i, t] for t in range(longest) for i in order if lens[i] > t]
    np.testing.assert_array_equal(p.data.numpy(), np.array(want_rows))
    assert p.sizes() == [sum(k > t for k in lens) for t in range(longest)]
    assert (p.sorted_indices is None) == sort
    back, got_lens = pad_packed_sequence(p, batch_first=batch_first, total_length=longest + 2)
    want = np.concatenate([padded, np.zeros((n, 2, 3) if batch_first else (2, n, 3), np.float32)],
                          axis=1 if batch_first else 0)
    np.testing.assert_array_equal(back.numpy(), want)
    assert got_lens.tolist() == lens
    seqs = [Tensor(x[i, :k]) for i, k in enumerate(lens)]
    for got, s in zip(unpack_sequence(pack_sequence(seqs, enforce_sorted=False)), seqs):
        np.testing.assert_array_equal(got.numpy(), s.numpy())
    np.testing.assert_array_equal(pad_sequence(seqs, batch_first=True, padding_value=0.0).numpy(), x)
    left = pad_sequence(seqs, batch_first=True, padding_value=-1.0, padding_side="left").numpy()
    for i, k in enumerate(lens):
        np.testing.assert_array_equal(left[i, longest - k:], x[i, :k])
        assert (left[i, :longest - k] == -1).all()


CONFIGS = list(itertools.product(MODES, [1, 2], [False, True]))


@pytest.mark.parametrize("mode,layers,bidir", CONFIGS)
def test_a_packed_batch_runs_each_sequence_for_its_own_length(mode, layers, bidir):
    rng = np.random.default_rng(layers * 7 + bidir)
    kwargs = dict(input_size=3, hidden_size=4, num_layers=layers, bidirectional=bidir)
    if mode == "LSTM" and layers == 2:
        kwargs["proj_size"] = 2
    Tensor.manual_seed(layers)
    m = MODES[mode](dtype=tg.float64, **kwargs)
    n, longest = 5, 6
    lens = _lengths(rng, n, longest, sort=False)
    x = rng.standard_normal((longest, n, 3))
    dirs = 2 if bidir else 1
    out_size = kwargs.get("proj_size") or 4
    h0 = rng.standard_normal((dirs * layers, n, out_size))
    c0 = rng.standard_normal((dirs * layers, n, 4))
    packed = pack_padded_sequence(Tensor(x, dtype=tg.float64), lens, enforce_sorted=False)
    if mode == "LSTM":
        out, (hn, cn) = m(packed, (Tensor(h0), Tensor(c0)))
    else:
        out, hn = m(packed, Tensor(h0))
    assert isinstance(out, PackedSequence)
    padded, got_lens = pad_packed_sequence(out)
    assert got_lens.tolist() == lens
    for i, k in enumerate(lens):        # each sequence alone, at its own length
        want_out, want_h, want_c = reference(m, mode, x[:k, i:i + 1], h0[:, i:i + 1], c0[:, i:i + 1])
        np.testing.assert_allclose(padded.numpy()[:k, i], want_out[:, 0], rtol=1e-9, atol=1e-12)
        assert (padded.numpy()[k:, i] == 0).all()
        np.testing.assert_allclose(hn.numpy()[:, i], want_h[:, 0], rtol=1e-9, atol=1e-12)
        if mode == "LSTM":
            np.testing.assert_allclose(cn.numpy()[:, i], want_c[:, 0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_packed_gradients_are_those_of_each_sequence_alone(mode):
    rng = np.random.default_rng(3)
    Tensor.manual_seed(3)
    m = MODES[mode](input_size=2, hidden_size=3, bidirectional=True)
    lens = [4, 2, 3]
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    cot = rng.standard_normal((4, 3, 6)).astype(np.float32)

    def grads(loss):
        for p in m.parameters():
            p.grad = None
        loss.backward()
        return [p.grad.numpy().copy() for p in m.parameters()]
    out, _ = m(pack_padded_sequence(Tensor(x), lens, enforce_sorted=False))
    padded, _ = pad_packed_sequence(out)
    packed = grads((padded * Tensor(cot)).sum())
    total = None
    for i, k in enumerate(lens):
        alone, _ = m(Tensor(x[:k, i:i + 1]))
        g = grads((alone * Tensor(cot[:k, i:i + 1])).sum())
        total = g if total is None else [a + b for a, b in zip(total, g)]
    for a, b in zip(packed, total):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_refusals_say_what_to_do():
    x = Tensor.zeros(4, 3, 2)
    with pytest.raises(ValueError, match="enforce_sorted=False"):
        pack_padded_sequence(x, [2, 4, 1])
    with pytest.raises(ValueError, match="exceeds the padded length"):
        pack_padded_sequence(x, [5, 4, 1])
    with pytest.raises(ValueError, match="one positive int per sequence"):
        pack_padded_sequence(x, [4, 0, 1])
    p = pack_padded_sequence(x, [4, 2, 1])
    with pytest.raises(ValueError, match="total_length 2 is shorter"):
        pad_packed_sequence(p, total_length=2)
    with pytest.raises(ValueError, match="rows of 5"):
        nn.GRU(5, 3)(p)
    with pytest.raises(ValueError, match="h_0 of shape"):
        nn.GRU(2, 3)(p, Tensor.zeros(1, 2, 3))
