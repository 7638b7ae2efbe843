"""Recurrent layers with torch's parameters, names, initialisation and equations: nn.RNN, nn.LSTM, nn.GRU
and their cells (RNNCell, LSTMCell, GRUCell).

    RNN:  h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)                       (act: tanh or relu)
    LSTM: i, f, g, o = split(x W_ih^T + b_ih + h W_hh^T + b_hh, 4)          (torch's gate order)
          c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(c')  (times W_hr^T with proj_size)
    GRU:  r, z, n from x W_ih^T + b_ih and h W_hh^T + b_hh, each split in 3:
          r = sigmoid(.r + .r), z = sigmoid(.z + .z), n = tanh(x_n + r (h_n));  h' = (1 - z) n + z h

Every weight and bias starts from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)). A layer's input
projections for the whole sequence are one matmul; the recurrence runs step by step. The multi-layer
modules take (L, N, H_in) input ((N, L, H_in) with batch_first, (L, H_in) unbatched), num_layers,
bidirectional (parameters `..._reverse`), dropout between layers in training, and return
(output, h_n) ((output, (h_n, c_n)) for LSTM), output holding the last layer's h at every step.

    >>> from tg import Tensor
    >>> lstm = LSTM(input_size=3, hidden_size=4, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(Tensor.ones(2, 5, 3))
    >>> out.shape, h.shape, c.shape
    ((2, 5, 4), (2, 2, 4), (2, 2, 4))
"""
from __future__ import annotations

import itertools
import math

from tg.core import fused
from tg.core.dtype import DType, dtypes
from tg.core.tensor import Tensor, apply
from tg.nn import functional as F
from tg.nn.module import Module, Parameter
from tg.nn.utils.rnn import PackedSequence

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _uniform(shape: tuple[int, ...], bound: float, device: str | None,
             dtype: DType | str | None) -> Parameter:
    return Parameter(Tensor.uniform(*shape, low=-bound, high=bound, device=device,
                                    dtype=dtypes.float32 if dtype is None else dtype))


def _step(mode: str, gi: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor, b_hh: Tensor | None,
          w_hr: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """One step of the recurrence from the input's projection gi (x W_ih^T + b_ih): (h', c')."""
    gh = h.linear(w_hh, b_hh)
    if mode == "LSTM":
        assert c is not None
        a = gi + gh
        if a.dtype == c.dtype and a.device == c.device and a.numel() > 0:
            hc = apply(fused.LSTMCell, a, c)      # one Function: its backward written out
            size = c.shape[1]
            h, c = hc.shrink(((0, hc.shape[0]), (0, size))), hc.shrink(((0, hc.shape[0]), (size, 2 * size)))
        else:                                   # mixed dtypes (autocast): the ops promote
            i, f, g, o = a.chunk(4, -1)
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
        return (h if w_hr is None else h.linear(w_hr)), c
    if mode == "GRU":
        if gi.dtype == gh.dtype == h.dtype and gi.device == h.device and gi.numel() > 0:
            return apply(fused.GRUCell, gi, gh, h), None     # one Function: its backward written out
        ir, iz, in_ = gi.chunk(3, -1)
        hr, hz, hn = gh.chunk(3, -1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        n = (in_ + r * hn).tanh()
        return (1 - z) * n + z * h, None
    pre = gi + gh
    return (pre.tanh() if mode == "RNN_TANH" else pre.relu()), None


class _Recurrent(Module):
    """What RNN, LSTM and GRU share: the parameters per layer and direction, and the loop."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: str | None = None, dtype: DType | str | None = None):
        super().__init__()
        name = type(self).__name__
        sizes = (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers))
        for what, value in sizes:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"[nn] {name}: expected {what} a positive int, got {value!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"[nn] {name}: expected dropout in [0, 1], got {dropout}")
        if not isinstance(proj_size, int) or proj_size < 0 or (proj_size and proj_size >= hidden_size):
            raise ValueError(f"[nn] {name}: expected proj_size an int in [0, hidden_size), got {proj_size!r}")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = dropout, bidirectional
        self.proj_size = proj_size
        out_size = proj_size or hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        gates = GATES[mode] * hidden_size
        for layer in range(num_layers):
            for suffix in ("", "_reverse")[:2 if bidirectional else 1]:
                size = input_size if layer == 0 else out_size * (2 if bidirectional else 1)
                end = f"_l{layer}{suffix}"
                setattr(self, "weight_ih" + end, _uniform((gates, size), bound, device, dtype))
                setattr(self, "weight_hh" + end, _uniform((gates, out_size), bound, device, dtype))
                if bias:
                    setattr(self, "bias_ih" + end, _uniform((gates,), bound, device, dtype))
                    setattr(self, "bias_hh" + end, _uniform((gates,), bound, device, dtype))
                if proj_size:
                    setattr(self, "weight_hr" + end, _uniform((proj_size, hidden_size), bound, device, dtype))

    def _weights(self, layer: int, suffix: str) -> tuple[Tensor, Tensor | None, Tensor, Tensor | None,
                                                         Tensor | None]:
        end = f"_l{layer}{suffix}"
        w_ih, w_hh = getattr(self, "weight_ih" + end), getattr(self, "weight_hh" + end)
        b_ih, b_hh = getattr(self, "bias_ih" + end, None), getattr(self, "bias_hh" + end, None)
        return w_ih, b_ih, w_hh, b_hh, getattr(self, "weight_hr" + end, None)

    def _run(self, data: Tensor, sizes: list[int], n: int, hx: Tensor | None,
             cx: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """data (sum(sizes), H_in): time step t's rows for the first sizes[t] of the n sequences, step
        after step (a padded batch: every size n; a PackedSequence: never growing); hx, cx (D *
        num_layers, n, H) or None (zeros). (output rows as data's, h_n, c_n): a sequence that ends
        early keeps its state from its last step, and in reverse starts from h_0 at its own last step."""
        dirs = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        zeros = lambda size: Tensor.zeros(dirs * self.num_layers, n, size, dtype=data.dtype,  # noqa: E731
                                          device=data.device)
        hx = zeros(out_size) if hx is None else hx
        if self.mode == "LSTM":
            cx = zeros(self.hidden_size) if cx is None else cx
        starts = [0, *itertools.accumulate(sizes)]
        last_h, last_c = [], []
        layer_in = data
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(("", "_reverse")[:dirs]):
                w_ih, b_ih, w_hh, b_hh, w_hr = self._weights(layer, suffix)
                gi = layer_in.linear(w_ih, b_ih)            # every step's input projection at once
                k = layer * dirs + d
                h, c = hx[k], (None if cx is None else cx[k])
                if self._whole_layer(gi, h, c, w_hh, b_hh, sizes, n):
                    assert c is not None
                    y = apply(fused.LSTMLayer, gi.reshape(len(sizes), n, gi.shape[1]), h, c, w_hh,
                              *([] if b_hh is None else [b_hh]), reverse=bool(d))
                    size, last = self.hidden_size, (0 if d else len(sizes) - 1)
                    outs.append(y.shrink(((0, len(sizes)), (0, n), (0, size))).reshape(len(sizes) * n, size))
                    last_h.append(y[last].shrink(((0, n), (0, size))))
                    last_c.append(y[last].shrink(((0, n), (size, 2 * size))))
                    continue
                steps: list[Tensor] = [None] * len(sizes)     # type: ignore[list-item]
                for t in (range(len(sizes) - 1, -1, -1) if d else range(len(sizes))):
                    b = sizes[t]
                    rows = gi.shrink(((starts[t], starts[t] + b), (0, gi.shape[1])))
                    hb, cb = _step(self.mode, rows, h if b == n else h[:b],
                                   c if c is None or b == n else c[:b], w_hh, b_hh, w_hr)
                    steps[t] = hb
                    h = hb if b == n else hb.cat(h[b:])
                    c = cb if c is None or cb is None or b == n else cb.cat(c[b:])
                outs.append(Tensor.cat(*steps) if steps else Tensor.zeros(0, out_size, dtype=data.dtype,
                                                                          device=data.device))
                last_h.append(h)
                if c is not None:
                    last_c.append(c)
            layer_in = outs[0] if dirs == 1 else outs[0].cat(outs[1], dim=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout)
        return layer_in, Tensor.stack(last_h), (Tensor.stack(last_c) if last_c else None)

    def _whole_layer(self, gi: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor, b_hh: Tensor | None,
                     sizes: list[int], n: int) -> bool:
        """Whether a layer's direction runs as one fused.LSTMLayer: an LSTM without projection over
        equal-length sequences, its state and W_hh, b_hh of the projections' dtype and device (else
        step by step, where mixed dtypes promote and each gradient keeps its parameter's dtype)."""
        same = c is not None and gi.dtype == h.dtype == c.dtype == w_hh.dtype and \
            (b_hh is None or b_hh.dtype == gi.dtype) and gi.device == h.device == c.device
        return self.mode == "LSTM" and not self.proj_size and same and n > 0 and len(sizes) > 0 \
            and all(b == n for b in sizes)

    def _check_states(self, n: int, hx: Tensor | None, cx: Tensor | None) -> None:
        dirs = 2 if self.bidirectional else 1
        for what, t, size in (("h_0", hx, self.proj_size or self.hidden_size), ("c_0", cx, self.hidden_size)):
            if t is not None and t.shape != (dirs * self.num_layers, n, size):
                want = (dirs * self.num_layers, n, size)
                raise ValueError(f"[nn] {type(self).__name__}: expected {what} of shape {want} "
                                 f"(D * num_layers, N, H), got {t.shape}")

    def _forward(self, x: Tensor | PackedSequence, hx: Tensor | None,
                 cx: Tensor | None) -> tuple[Tensor | PackedSequence, Tensor, Tensor | None]:
        name = type(self).__name__
        if isinstance(x, PackedSequence):
            return self._forward_packed(x, hx, cx)
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(f"[nn] {name}: expected input of shape (L, N, {self.input_size}) (input_size; "
                             f"(N, L, ...) with batch_first, (L, ...) unbatched), got {x.shape}")
        batched = x.ndim == 3
        if not batched:
            x = x.unsqueeze(1)
            hx, cx = (None if t is None else t.unsqueeze(1) for t in (hx, cx))
        elif self.batch_first:
            x = x.transpose(0, 1)
        seq, n = x.shape[0], x.shape[1]
        self._check_states(n, hx, cx)
        rows, h, c = self._run(x.reshape(seq * n, self.input_size), [n] * seq, n, hx, cx)
        out = rows.reshape(seq, n, rows.shape[-1])
        if not batched:
            return out.squeeze(1), h.squeeze(1), (None if c is None else c.squeeze(1))
        return (out.transpose(0, 1) if self.batch_first else out), h, c

    def _forward_packed(self, x: PackedSequence, hx: Tensor | None,
                        cx: Tensor | None) -> tuple[PackedSequence, Tensor, Tensor | None]:
        """A PackedSequence in and out; h_0 / c_0 and h_n / c_n in the caller's order (torch's)."""
        if x.data.ndim != 2 or x.data.shape[-1] != self.input_size:
            raise ValueError(f"[nn] {type(self).__name__}: expected a PackedSequence of rows of "
                             f"{self.input_size} (input_size), got data of shape {x.data.shape}")
        sizes = x.sizes()
        n = sizes[0] if sizes else 0
        self._check_states(n, hx, cx)
        if x.sorted_indices is not None:
            hx, cx = (None if t is None else t.index_select(1, x.sorted_indices) for t in (hx, cx))
        rows, h, c = self._run(x.data, sizes, n, hx, cx)
        if x.unsorted_indices is not None:
            h = h.index_select(1, x.unsorted_indices)
            c = None if c is None else c.index_select(1, x.unsorted_indices)
        return x._replace(data=rows), h, c

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}, bidirectional={self.bidirectional}")


class RNN(_Recurrent):
    """torch.nn.RNN: nonlinearity 'tanh' or 'relu'; forward(input, h_0=None) -> (output, h_n)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device: str | None = None, dtype: DType | str | None = None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"[nn] RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor | PackedSequence,  # noqa: A002
                hx: Tensor | None = None) -> tuple[Tensor | PackedSequence, Tensor]:
        out, h, _ = self._forward(input, hx, None)
        return out, h


class LSTM(_Recurrent):
    """torch.nn.LSTM (proj_size too); forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n))."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: str | None = None, dtype: DType | str | None = None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)

    def forward(self, input: Tensor | PackedSequence,  # noqa: A002
                hx: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor | PackedSequence, tuple[Tensor, Tensor]]:
        h0, c0 = (None, None) if hx is None else hx
        out, h, c = self._forward(input, h0, c0)
        assert c is not None
        return out, (h, c)


class GRU(_Recurrent):
    """torch.nn.GRU; forward(input, h_0=None) -> (output, h_n)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: str | None = None, dtype: DType | str | None = None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)

    def forward(self, input: Tensor | PackedSequence,  # noqa: A002
                hx: Tensor | None = None) -> tuple[Tensor | PackedSequence, Tensor]:
        out, h, _ = self._forward(input, hx, None)
        return out, h


# ---------------------------------------------------------------- cells

class _Cell(Module):
    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool, device: str | None,
                 dtype: DType | str | None):
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bias
        bound = 1.0 / math.sqrt(hidden_size)
        gates = GATES[mode] * hidden_size
        self.weight_ih = _uniform((gates, input_size), bound, device, dtype)
        self.weight_hh = _uniform((gates, hidden_size), bound, device, dtype)
        self.bias_ih = _uniform((gates,), bound, device, dtype) if bias else None
        self.bias_hh = _uniform((gates,), bound, device, dtype) if bias else None

    def _inputs(self, x: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor, bool]:
        name = type(self).__name__
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"[nn] {name}: expected input of shape (N, {self.input_size}) or "
                             f"({self.input_size},), got {x.shape}")
        batched = x.ndim == 2
        x = x if batched else x.unsqueeze(0)
        h = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device) if state is None else \
            (state if batched else state.unsqueeze(0))
        self._check_state("hx", h, x.shape[0])
        return x, h, batched

    def _check_state(self, what: str, t: Tensor, n: int) -> None:
        if t.shape != (n, self.hidden_size):
            raise ValueError(f"[nn] {type(self).__name__}: expected {what} of shape ({n}, "
                             f"{self.hidden_size}) (N, hidden_size; unbatched: ({self.hidden_size},)), got "
                             f"{t.shape}")

    def _cell_step(self, x: Tensor, h: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor | None]:
        gi = x.linear(self.weight_ih, self.bias_ih)
        return _step(self.mode, gi, h, c, self.weight_hh, self.bias_hh, None)


class _HiddenCell(_Cell):
    """A cell whose state is h alone (RNNCell, GRUCell): forward(input, h=None) -> h'."""

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x, h, batched = self._inputs(input, hx)
        h, _ = self._cell_step(x, h, None)
        return h if batched else h.squeeze(0)


class RNNCell(_HiddenCell):
    """torch.nn.RNNCell: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: str | None = None, dtype: DType | str | None = None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"[nn] RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity


class GRUCell(_HiddenCell):
    """torch.nn.GRUCell."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)


class LSTMCell(_Cell):
    """torch.nn.LSTMCell: forward(input, (h, c)=None) -> (h', c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor,  # noqa: A002
                hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        x, h, batched = self._inputs(input, None if hx is None else hx[0])
        c = h.zeros_like() if hx is None else (hx[1] if batched else hx[1].unsqueeze(0))
        self._check_state("cx", c, x.shape[0])
        h, c2 = self._cell_step(x, h, c)
        assert c2 is not None
        return (h, c2) if batched else (h.squeeze(0), c2.squeeze(0))
