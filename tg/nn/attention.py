"""nn.MultiheadAttention with torch's parameters, names, initialisation and forward semantics.

    attention(query, key, value) for query (L, N, E) (or (N, L, E) with batch_first, or (L, E) unbatched)
    q = query W_q^T + b_q, k = key W_k^T + b_k, v = value W_v^T + b_v    (W_q, W_k, W_v: in_proj_weight's
        thirds, or q_proj_weight, k_proj_weight, v_proj_weight where kdim or vdim differ from embed_dim)
    per head h (of num_heads, each head_dim = E / num_heads wide):
        weights_h = softmax(q_h k_h^T / sqrt(head_dim) + mask), dropped out with p=dropout in training
        out_h = weights_h v_h
    output = concat(out_h) out_proj.weight^T + out_proj.bias

Masks are torch's: a bool attn_mask ((L, S), or (N * num_heads, L, S)) and key_padding_mask ((N, S))
mark with True the positions a query may NOT attend to (the opposite of scaled_dot_product_attention's
bool mask); float masks are added to the scores. add_bias_kv appends the learned bias_k / bias_v as one
more key and value; add_zero_attn one of zeros after the projection. forward returns (output, weights):
the weights averaged over the heads ((N, L, S)), per head ((N, num_heads, L, S)) with
average_attn_weights=False, None with need_weights=False (then the fused attention kernel runs where
the masks allow).

    >>> from tg import Tensor
    >>> mha = MultiheadAttention(8, 2, batch_first=True)
    >>> out, w = mha(Tensor.ones(3, 5, 8), Tensor.ones(3, 4, 8), Tensor.ones(3, 4, 8))
    >>> out.shape, w.shape, [n for n, _ in mha.named_parameters()]
    ((3, 5, 8), (3, 5, 4), ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias'])
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable

from tg.core.dtype import DType, dtypes
from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn import init
from tg.nn.layers import Dropout, LayerNorm, Linear
from tg.nn.module import Module, ModuleList, Parameter


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
    add_zero_attn=False, kdim=None, vdim=None, batch_first=False); see the module docstring."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"[nn] MultiheadAttention: expected {name} a positive int, got {value!r}")
        if embed_dim % num_heads:
            raise ValueError(f"[nn] MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"[nn] MultiheadAttention: expected dropout in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim, self.batch_first = embed_dim // num_heads, batch_first
        self.add_zero_attn = add_zero_attn
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        kw: dict[str, Any] = {"device": device, "dtype": dtypes.float32 if dtype is None else dtype}

        def weight(*shape: int) -> Parameter:
            return Parameter(init.xavier_uniform_(Tensor.empty(*shape, **kw)))
        if self._qkv_same_embed_dim:
            self.in_proj_weight: Parameter | None = weight(3 * embed_dim, embed_dim)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = weight(embed_dim, embed_dim)
            self.k_proj_weight = weight(embed_dim, self.kdim)
            self.v_proj_weight = weight(embed_dim, self.vdim)
            self.in_proj_weight = None
        self.in_proj_bias = Parameter(Tensor.zeros(3 * embed_dim, **kw)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if self.out_proj.bias is not None:
            init.constant_(self.out_proj.bias, 0.0)
        self.bias_k: Parameter | None = None
        self.bias_v: Parameter | None = None
        if add_bias_kv:
            self.bias_k = Parameter(init.xavier_normal_(Tensor.empty(1, 1, embed_dim, **kw)))
            self.bias_v = Parameter(init.xavier_normal_(Tensor.empty(1, 1, embed_dim, **kw)))

    def _projections(self) -> tuple[Tensor, Tensor, Tensor]:
        if self.in_proj_weight is not None:
            e = self.embed_dim
            w = self.in_proj_weight
            return w[:e], w[e:2 * e], w[2 * e:]
        q, k, v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        assert q is not None and k is not None and v is not None
        return q, k, v

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        batched = query.ndim == 3
        query, key, value, key_padding_mask = self._seq_first(query, key, value, key_padding_mask)
        tgt, n, e = query.shape
        if e != self.embed_dim or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim or \
                key.shape[:2] != value.shape[:2] or key.shape[1] != n:
            raise ValueError(f"[nn] MultiheadAttention: expected query (L, N, {self.embed_dim}), key "
                             f"(S, N, {self.kdim}) and value (S, N, {self.vdim}) (batch first with "
                             f"batch_first=True), got {query.shape}, {key.shape}, {value.shape}")
        if is_causal and attn_mask is None:
            raise ValueError("[nn] MultiheadAttention: is_causal is a hint that attn_mask is the causal mask "
                             "(as in torch); pass the mask too, e.g. nn.Transformer.generate_square_"
                             "subsequent_mask(L)")
        wq, wk, wv = self._projections()
        bq, bk, bv = (None, None, None) if self.in_proj_bias is None else \
            (self.in_proj_bias[:e], self.in_proj_bias[e:2 * e], self.in_proj_bias[2 * e:])
        q, k, v = query.linear(wq, bq), key.linear(wk, bk), value.linear(wv, bv)   # (L|S, N, E)
        mask = self._merged_mask(attn_mask, key_padding_mask, tgt, key.shape[0], n, q.dtype)
        if self.bias_k is not None and self.bias_v is not None:
            k = k.cat(self.bias_k.expand(1, n, e), dim=0)
            v = v.cat(self.bias_v.expand(1, n, e), dim=0)
            mask = None if mask is None else mask.pad((0, 1))
        h, d = self.num_heads, self.head_dim
        # (S, N, E) -> (N, H, S, d)
        q, k, v = (t.reshape(t.shape[0], n, h, d).permute(1, 2, 0, 3) for t in (q, k, v))
        if self.add_zero_attn:
            k = k.cat(Tensor.zeros(n, h, 1, d, dtype=k.dtype, device=k.device), dim=2)
            v = v.cat(Tensor.zeros(n, h, 1, d, dtype=v.dtype, device=v.device), dim=2)
            mask = None if mask is None else mask.pad((0, 1))
        p = self.dropout if self.training else 0.0
        if not need_weights:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            weights = (scores if mask is None else scores + mask).softmax(-1)
            if p > 0:                        # the weights returned are the dropped-out ones, as torch's
                weights = F.dropout(weights, p)
            out = weights @ v
        out = out.permute(2, 0, 1, 3).reshape(tgt, n, e).linear(self.out_proj.weight, self.out_proj.bias)
        if weights is not None:
            weights = weights.mean(1) if average_attn_weights else weights
        if not batched:
            return out.squeeze(1), None if weights is None else weights.squeeze(0)
        return (out.transpose(0, 1) if self.batch_first else out), weights

    def _seq_first(self, query: Tensor, key: Tensor, value: Tensor,
                   key_padding_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The inputs as (L, N, E): unbatched (L, E) ones as a batch of one, batch-first ones transposed."""
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"[nn] MultiheadAttention: expected query, key and value all of 3 dims "
                             f"(batched) or all of 2 (unbatched), got {query.shape}, {key.shape}, "
                             f"{value.shape}")
        if query.ndim == 2:                  # (L, E): a batch of one
            mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
            return query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1), mask
        if self.batch_first:                 # (N, L, E) -> (L, N, E)
            return query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), key_padding_mask
        return query, key, value, key_padding_mask

    def _merged_mask(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, tgt: int, src: int,
                     n: int, dtype: DType) -> Tensor | None:
        """attn_mask and key_padding_mask as one float mask to add to the scores, (N, H or 1, L, S)."""
        out: Tensor | None = None
        if attn_mask is not None:
            if attn_mask.shape == (tgt, src):
                m = attn_mask.reshape(1, 1, tgt, src)
            elif attn_mask.shape == (n * self.num_heads, tgt, src):
                m = attn_mask.reshape(n, self.num_heads, tgt, src)
            else:
                raise ValueError(f"[nn] MultiheadAttention: expected attn_mask of shape ({tgt}, {src}) or "
                                 f"({n * self.num_heads}, {tgt}, {src}), got {attn_mask.shape}")
            out = _additive(m, dtype)
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, src):
                raise ValueError(f"[nn] MultiheadAttention: expected key_padding_mask of shape ({n}, {src}) "
                                 f"(N, S), got {key_padding_mask.shape}")
            pad = _additive(key_padding_mask.reshape(n, 1, 1, src), dtype)
            out = pad if out is None else out + pad
        return out

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


def _additive(mask: Tensor, dtype: DType) -> Tensor:
    """A mask as values to add to the scores: True (not allowed) -> -inf, False -> 0; a float mask as is."""
    if mask.dtype == dtypes.bool:
        return mask.where(float("-inf"), 0.0).cast(dtype)
    if not mask.dtype.is_float:
        raise TypeError(f"[nn] MultiheadAttention: expected a bool or floating-point mask, got "
                        f"{mask.dtype.name} (an integer mask would be added to the scores, masking nothing); "
                        f"fix: mask.bool()")
    return mask.cast(dtype)


# ---------------------------------------------------------------- transformers (torch.nn.Transformer*)

def _activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise ValueError(f"[nn] Transformer: activation should be 'relu', 'gelu' or a callable, got "
                     f"{activation!r}")


class _Block(Module):
    """What the encoder and decoder layers share: their parts, in torch's order (self_attn, the decoder's
    multihead_attn, linear1, dropout, linear2, norm1.., dropout1..), and the feed-forward block."""

    def _parts(self, d_model: int, nhead: int, cross: bool, dim_feedforward: int, dropout: float,
               activation: Any, layer_norm_eps: float, batch_first: bool, norm_first: bool, bias: bool,
               kw: dict[str, Any]) -> None:
        def attention() -> MultiheadAttention:
            return MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                      **kw)
        self.self_attn = attention()
        if cross:
            self.multihead_attn = attention()
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.act = _activation(activation)
        self.norm_first = norm_first
        blocks = 3 if cross else 2
        for i in range(1, blocks + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for i in range(1, blocks + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.dropout_ff = getattr(self, f"dropout{blocks}")      # the feed-forward block's

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.dropout_ff(self.linear2(self.dropout(self.act(self.linear1(x)))))


class TransformerEncoderLayer(_Block):
    """torch.nn.TransformerEncoderLayer: self-attention then a feed-forward block (linear1, activation,
    dropout, linear2), each added to its input and layer-normalised after (or before, norm_first).

        >>> layer = TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
        >>> layer(Tensor.ones(3, 5, 8)).shape
        (3, 5, 8)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        self._parts(d_model, nhead, False, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                    norm_first, bias, {"device": device, "dtype": dtype})

    def _self_attention(self, x: Tensor, mask: Tensor | None, padding: Tensor | None,
                        is_causal: bool) -> Tensor:
        out = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
                             is_causal=is_causal)[0]
        return self.dropout1(out)

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._self_attention(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._feed_forward(x))


class TransformerDecoderLayer(_Block):
    """torch.nn.TransformerDecoderLayer: self-attention, attention over the encoder's output (memory),
    then the feed-forward block; each added to its input and layer-normalised (after, or before with
    norm_first)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        self._parts(d_model, nhead, True, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                    norm_first, bias, {"device": device, "dtype": dtype})

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        def self_attention(x: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask,
                                                key_padding_mask=tgt_key_padding_mask, need_weights=False,
                                                is_causal=tgt_is_causal)[0])

        def cross_attention(x: Tensor) -> Tensor:
            return self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=memory_mask,
                                                     key_padding_mask=memory_key_padding_mask,
                                                     need_weights=False, is_causal=memory_is_causal)[0])
        x = tgt
        if self.norm_first:
            x = x + self_attention(self.norm1(x))
            x = x + cross_attention(self.norm2(x))
            return x + self._feed_forward(self.norm3(x))
        x = self.norm1(x + self_attention(x))
        x = self.norm2(x + cross_attention(x))
        return self.norm3(x + self._feed_forward(x))


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: num_layers copies of encoder_layer (deep copies: their own parameters,
    named layers.0, layers.1, ...), then `norm` if given."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return out if self.norm is None else self.norm(out)


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder: num_layers copies of decoder_layer, then `norm` if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                        memory_is_causal=memory_is_causal)
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """torch.nn.Transformer: an encoder and a decoder of the layers above, each ending in a LayerNorm;
    every parameter of more than one dim starts from xavier_uniform_, as torch's.

        >>> model = Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
        ...                     dim_feedforward=16, batch_first=True)
        >>> mask = Transformer.generate_square_subsequent_mask(4)
        >>> model(Tensor.ones(2, 6, 8), Tensor.ones(2, 4, 8), tgt_mask=mask).shape
        (2, 4, 8)
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        options = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                       layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first,
                       bias=bias, **kw)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **options), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **options), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise ValueError(f"[nn] Transformer: the batch of src and tgt must be equal, got {src.shape} and "
                             f"{tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(f"[nn] Transformer: the feature size of src and tgt must be d_model "
                             f"({self.d_model}), got {src.shape} and {tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: str | None = None,
                                        dtype: DType | str | None = None) -> Tensor:
        """(sz, sz): 0 on and below the diagonal, -inf above (a query may not attend to later positions).

            >>> Transformer.generate_square_subsequent_mask(3).tolist()
            [[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]]
        """
        return Tensor.full((sz, sz), float("-inf"), device=device,
                           dtype=dtypes.float32 if dtype is None else dtype).triu(1)
