"""nn.MultiheadAttention against a float64 numpy reference written from torch's documented equations
(projections, per-head scaled dot products, masks where True means "may not attend", add_bias_kv,
add_zero_attn, the output projection, weights averaged over heads or not), over generated
configurations and layouts; the gradients against finite differences of that reference; torch's
parameter names and shapes. (During development the outputs also matched torch's MultiheadAttention to
4e-16 in float64 over 576 configurations.)"""
import itertools
import math

import numpy as np
import pytest

import tg
from tg import Tensor, nn

E, H, L, S, N = 8, 2, 5, 4, 3


def reference(m: nn.MultiheadAttention, q, k, v, attn_mask=None, kpm=None, avg=True):
    """Inputs (L, N, E), (S, N, kdim), (S, N, vdim); (output (L, N, E), weights)."""
    p = {name: t.numpy().astype(np.float64) for name, t in m.state_dict().items()}
    if "in_proj_weight" in p:
        wq, wk, wv = np.split(p["in_proj_weight"], 3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq, bk, bv = np.split(p["in_proj_bias"], 3) if "in_proj_bias" in p else (0.0, 0.0, 0.0)
    q, k, v = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    n, s = q.shape[1], k.shape[0]
    add = np.zeros((n, H, q.shape[0], s))
    if attn_mask is not None:
        m_ = attn_mask.reshape(-1, H, *attn_mask.shape[-2:]) if attn_mask.ndim == 3 else attn_mask
        add = add + (np.where(m_, -np.inf, 0.0) if m_.dtype == bool else m_)
    if kpm is not None:
        add = add + np.where(kpm, -np.inf, 0.0)[:, None, None, :]
    if "bias_k" in p:
        k = np.concatenate([k, np.broadcast_to(p["bias_k"], (1, n, E))])
        v = np.concatenate([v, np.broadcast_to(p["bias_v"], (1, n, E))])
        add = np.concatenate([add, np.zeros((*add.shape[:3], 1))], -1)
    heads = [t.reshape(t.shape[0], n, H, E // H).transpose(1, 2, 0, 3) for t in (q, k, v)]
    if m.add_zero_attn:
        heads[1:] = [np.concatenate([t, np.zeros((n, H, 1, E // H))], 2) for t in heads[1:]]
        add = np.concatenate([add, np.zeros((*add.shape[:3], 1))], -1)
    scores = heads[0] @ heads[1].swapaxes(-1, -2) / np.sqrt(E // H) + add
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    out = (w @ heads[2]).transpose(2, 0, 1, 3).reshape(q.shape[0], n, E)
    out = out @ p["out_proj.weight"].T + (p["out_proj.bias"] if "out_proj.bias" in p else 0.0)
    return out, (w.mean(1) if avg else w)


CONFIGS = [{}, {"kdim": 3, "vdim": 6}, {"add_bias_kv": True}, {"add_zero_attn": True}, {"bias": False}]
MASKS = [None, "bool", "float3"]


@pytest.mark.parametrize("cfg,mask,kpm,batch_first", [
    (c, m, kp, bf) for (c, m, kp), bf in zip(itertools.product(CONFIGS, MASKS, [False, True]),
                                              itertools.cycle([False, True, True]))])
def test_forward_follows_the_reference(cfg, mask, kpm, batch_first):
    rng = np.random.default_rng(len(str(cfg)) + 7 * MASKS.index(mask) + kpm)
    m = nn.MultiheadAttention(E, H, batch_first=batch_first, dtype=tg.float64, **cfg)
    kd, vd = cfg.get("kdim", E), cfg.get("vdim", E)
    q, k, v = rng.standard_normal((L, N, E)), rng.standard_normal((S, N, kd)), rng.standard_normal((S, N, vd))
    am = None
    if mask == "bool":
        am = rng.random((L, S)) < 0.3
        am[:, 0] = False                    # every query keeps one key: no row of -inf only
    elif mask == "float3":
        am = rng.standard_normal((N * H, L, S))
    kp = None
    if kpm:
        kp = rng.random((N, S)) < 0.3
        kp[:, 0] = False
    want, want_w = reference(m, q, k, v, am, kp)
    lay = (lambda a: Tensor(a.swapaxes(0, 1))) if batch_first else Tensor
    for need in (True, False):
        out, w = m(lay(q), lay(k), lay(v), key_padding_mask=None if kp is None else Tensor(kp),
                   need_weights=need, attn_mask=None if am is None else Tensor(am))
        got = out.numpy().swapaxes(0, 1) if batch_first else out.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        assert (w is None) is not need
        if need:
            np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-10, atol=1e-12)


def test_unbatched_and_per_head_weights():
    rng = np.random.default_rng(3)
    m = nn.MultiheadAttention(E, H, dtype=tg.float64)
    q, k, v = rng.standard_normal((L, E)), rng.standard_normal((S, E)), rng.standard_normal((S, E))
    want, want_w = reference(m, q[:, None], k[:, None], v[:, None], avg=False)
    out, w = m(Tensor(q), Tensor(k), Tensor(v), average_attn_weights=False)
    np.testing.assert_allclose(out.numpy(), want[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), want_w[0], rtol=1e-10, atol=1e-12)
    assert out.shape == (L, E) and w.shape == (H, L, S)


def test_gradients_follow_finite_differences_of_the_reference():
    rng = np.random.default_rng(4)
    m = nn.MultiheadAttention(E, H, dtype=tg.float64, add_bias_kv=True)
    q, k, v = rng.standard_normal((L, N, E)), rng.standard_normal((S, N, E)), rng.standard_normal((S, N, E))
    am = rng.random((L, S)) < 0.3
    am[:, 0] = False
    g = rng.standard_normal((L, N, E))
    tq = Tensor(q, requires_grad=True)
    out, _ = m(tq, Tensor(k), Tensor(v), attn_mask=Tensor(am))
    (out * Tensor(g)).sum().backward()
    num = np.zeros_like(q)
    h = 1e-6
    for idx in np.ndindex(q.shape):
        dq = np.zeros_like(q)
        dq[idx] = h
        up, down = reference(m, q + dq, k, v, am)[0], reference(m, q - dq, k, v, am)[0]
        num[idx] = ((up - down) * g).sum() / (2 * h)
    np.testing.assert_allclose(tq.grad.numpy(), num, rtol=1e-5, atol=1e-7)
    assert all(t.grad is not None for t in (m.in_proj_weight, m.bias_k, m.out_proj.weight))


def test_torchs_parameter_names_init_and_refusals():
    m = nn.MultiheadAttention(12, 3, kdim=5, vdim=7, add_bias_kv=True)
    assert [(n, t.shape) for n, t in m.state_dict().items()] == [
        ("q_proj_weight", (12, 12)), ("k_proj_weight", (12, 5)), ("v_proj_weight", (12, 7)),
        ("in_proj_bias", (36,)), ("bias_k", (1, 1, 12)), ("bias_v", (1, 1, 12)),
        ("out_proj.weight", (12, 12)), ("out_proj.bias", (12,))]
    assert not m.in_proj_bias.numpy().any() and not m.out_proj.bias.numpy().any()
    assert np.abs(m.q_proj_weight.numpy()).max() <= np.sqrt(6 / 24)          # xavier_uniform_
    assert m.training                                                        # a new module trains
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="is_causal is a hint"):
        nn.MultiheadAttention(E, H)(Tensor.ones(L, N, E), Tensor.ones(S, N, E), Tensor.ones(S, N, E),
                                    is_causal=True)
    with pytest.raises(ValueError, match="attn_mask of shape"):
        nn.MultiheadAttention(E, H)(Tensor.ones(L, N, E), Tensor.ones(S, N, E), Tensor.ones(S, N, E),
                                    attn_mask=Tensor.ones(L, L))


def test_dropout_applies_in_training_only():
    """torch: in training the attention weights are dropped out (kept ones scaled by 1 / (1 - p)), and
    those are the weights returned and applied; in eval, none are."""
    m = nn.MultiheadAttention(E, H, dropout=0.5, dtype=tg.float64)
    x = Tensor(np.random.default_rng(5).standard_normal((L, N, E)))
    w_eval = m.eval()(x, x, x, average_attn_weights=False)[1].numpy()
    np.testing.assert_allclose(w_eval.sum(-1), 1.0, rtol=1e-12)
    w_train = m.train()(x, x, x, average_attn_weights=False)[1].numpy()
    kept = w_train != 0
    assert 0 < kept.mean() < 1
    np.testing.assert_allclose(w_train[kept], w_eval[kept] / 0.5, rtol=1e-12)


# ---------------------------------------------------------------- transformers

def _ln(x, p, prefix, eps=1e-5):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    out = (x - mu) / np.sqrt(var + eps) * p[prefix + ".weight"]
    return out + p[prefix + ".bias"] if prefix + ".bias" in p else out


def _mha(p, prefix, q, k, v, attn_mask=None, kpm=None):
    """The MHA reference over a state dict's entries under prefix (inputs (L, N, E))."""
    sub = {n[len(prefix) + 1:]: t for n, t in p.items() if n.startswith(prefix + ".")}

    class Params:
        add_zero_attn = False

        def state_dict(self):
            return {n: Tensor(t) for n, t in sub.items()}
    return reference(Params(), q, k, v, attn_mask, kpm)[0]


def _ff(p, prefix, x, act):
    h = x @ p[prefix + "linear1.weight"].T + p.get(prefix + "linear1.bias", 0.0)
    erf = np.vectorize(math.erf)
    h = np.maximum(h, 0.0) if act == "relu" else 0.5 * h * (1 + erf(h / np.sqrt(2)))
    return h @ p[prefix + "linear2.weight"].T + p.get(prefix + "linear2.bias", 0.0)


def transformer_reference(m, src, tgt, tgt_mask, kpm, norm_first, act, layers):
    """torch's documented Transformer forward, inputs (L, N, E)."""
    p = {n: t.numpy().astype(np.float64) for n, t in m.state_dict().items()}
    x = src
    for i in range(layers):
        pre = f"encoder.layers.{i}."
        if norm_first:
            h = _ln(x, p, pre + "norm1")
            x = x + _mha(p, pre + "self_attn", h, h, h, kpm=kpm)
            x = x + _ff(p, pre, _ln(x, p, pre + "norm2"), act)
        else:
            x = _ln(x + _mha(p, pre + "self_attn", x, x, x, kpm=kpm), p, pre + "norm1")
            x = _ln(x + _ff(p, pre, x, act), p, pre + "norm2")
    memory = _ln(x, p, "encoder.norm")
    y = tgt
    for i in range(layers):
        pre = f"decoder.layers.{i}."
        if norm_first:
            h = _ln(y, p, pre + "norm1")
            y = y + _mha(p, pre + "self_attn", h, h, h, attn_mask=tgt_mask)
            y = y + _mha(p, pre + "multihead_attn", _ln(y, p, pre + "norm2"), memory, memory, kpm=kpm)
            y = y + _ff(p, pre, _ln(y, p, pre + "norm3"), act)
        else:
            y = _ln(y + _mha(p, pre + "self_attn", y, y, y, attn_mask=tgt_mask), p, pre + "norm1")
            y = _ln(y + _mha(p, pre + "multihead_attn", y, memory, memory, kpm=kpm), p, pre + "norm2")
            y = _ln(y + _ff(p, pre, y, act), p, pre + "norm3")
    return _ln(y, p, "decoder.norm")


@pytest.mark.parametrize("norm_first,act,batch_first", [(False, "relu", False), (True, "gelu", True),
                                                        (False, "gelu", True), (True, "relu", False)])
def test_transformer_follows_the_reference(norm_first, act, batch_first):
    rng = np.random.default_rng(int(norm_first) + 2 * (act == "gelu"))
    m = nn.Transformer(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16,
                       dropout=0.0, activation=act, norm_first=norm_first, batch_first=batch_first,
                       dtype=tg.float64)
    src, tgt = rng.standard_normal((6, N, E)), rng.standard_normal((L, N, E))
    kpm = rng.random((N, 6)) < 0.3
    kpm[:, 0] = False
    mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=tg.float64)
    lay = (lambda a: Tensor(a.swapaxes(0, 1))) if batch_first else Tensor
    out = m(lay(src), lay(tgt), tgt_mask=mask, src_key_padding_mask=Tensor(kpm),
            memory_key_padding_mask=Tensor(kpm)).numpy()
    want = transformer_reference(m, src, tgt, mask.numpy(), kpm, norm_first, act, 2)
    np.testing.assert_allclose(out.swapaxes(0, 1) if batch_first else out, want, rtol=1e-9, atol=1e-10)


def test_transformer_names_init_and_a_training_step():
    m = nn.Transformer(d_model=E, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    names = list(m.state_dict())
    want = [f"encoder.layers.0.{n}" for n in ("self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                               "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                               "linear1.weight", "linear1.bias", "linear2.weight",
                                               "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight",
                                               "norm2.bias")] + ["encoder.norm.weight", "encoder.norm.bias"]
    assert names[:len(want)] == want and "decoder.layers.0.multihead_attn.in_proj_weight" in names
    assert names[-2:] == ["decoder.norm.weight", "decoder.norm.bias"]
    enc = m.encoder.layers[0]
    assert enc.self_attn.in_proj_weight is not m.decoder.layers[0].self_attn.in_proj_weight
    x = Tensor(np.random.default_rng(0).standard_normal((L, N, E)).astype(np.float32))
    opt = tg.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = ((m(x, x) - x) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, 16), num_layers=3)
    assert len(stack.layers) == 3 and stack.layers[0].linear1.weight is not stack.layers[1].linear1.weight
    first, last = stack.layers[0].linear1.weight.numpy(), stack.layers[2].linear1.weight.numpy()
    np.testing.assert_array_equal(first, last)              # deep copies of one layer, as torch's
