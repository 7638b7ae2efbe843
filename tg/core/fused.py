"""Composites that models call on every step, each one Function built straight on LazyBuffers.

Composed from primitives, `x.linear(w, b)` is about fifteen Tensor ops, each with its Function, its
Tensor and its own backward; gelu is some forty. Built here, each is one Function: its forward
makes the lazy graph the primitives would make (so the same kernels), and its backward is the
derivative written out, a few lazy ops instead of one Function per primitive. Eager steps spend
their time in exactly this per-op bookkeeping, so this is where eager mode gets its speed back.

    >>> from tg import Tensor
    >>> x = Tensor([[1.0, 2.0]], requires_grad=True)
    >>> y = x.linear(Tensor([[1.0, 0.0], [1.0, 1.0]]), Tensor([0.5, 0.0]))
    >>> type(y._ctx).__name__, y.tolist()
    ('Linear', [[1.5, 3.0]])
"""
from __future__ import annotations

import math
from typing import TypeVar

from tg.core.dtype import DType, dtypes
from tg.core.function import Function, _const, _one_minus, join, placed
from tg.core.indexing import arange
from tg.core.lazy import LazyBuffer
from tg.core.ops import BinaryOps, CompositeOps, ReduceOps, TernaryOps, UnaryOps
from tg.core.realize import replayed
from tg.core.shape import prod


def matmul_nt(a: LazyBuffer, bt: LazyBuffer) -> LazyBuffer:
    """a (..., n, k) times the transpose of bt (..., m, k): (..., n, m), summed over k."""
    *batch, n, k = a.shape
    m = bt.shape[-2]
    full = (*batch, n, m, k)
    rows, cols = a.reshape((*batch, n, 1, k)).expand(full), bt.reshape((*batch, 1, m, k)).expand(full)
    return sum_of_products(rows, cols, (len(full) - 1,)).reshape((*batch, n, m))


def sum_of_products(x: LazyBuffer, y: LazyBuffer, axes: tuple[int, ...]) -> LazyBuffer:
    """x * y summed over axes (x and y of one shape and dtype). float16 and bfloat16 factors are
    multiplied and summed in float32 and the sum rounded once, as torch's matmul and conv accumulate:
    each product of two narrow values is exact in float32, and a narrow running sum would stop
    growing (a bfloat16 sum of ones stays at 256). The cast of each factor is fused into the reduce's
    kernel, which codegen/nests.py and codegen/bf16.py run on the low-precision units where the CPU
    has them."""
    if x.dtype not in NARROW:
        return x.e(BinaryOps.MUL, y).r(ReduceOps.SUM, axes)
    wide = x.e(UnaryOps.CAST, arg=dtypes.float32).e(BinaryOps.MUL, y.e(UnaryOps.CAST, arg=dtypes.float32))
    return wide.r(ReduceOps.SUM, axes).e(UnaryOps.CAST, arg=x.dtype)


def swap_last(x: LazyBuffer) -> LazyBuffer:
    """x with its last two dims swapped (a view)."""
    nd = len(x.shape)
    return x.permute((*range(nd - 2), nd - 1, nd - 2))


# matmul_nt's right operand is copied transposed (`packed`) for at least PACK_MIN_ROWS rows when
# the inner dim is below PACK_BELOW_K (measured: 60 -> 100 GFLOPS for 512 x 64 @ 64 x 256 on one core)
PACK_BELOW_K = 256
PACK_MIN_ROWS = 64


def packed(bt: LazyBuffer, rows: int) -> LazyBuffer:
    """bt (..., m, k) as matmul_nt's right operand. Its rows run along k, so the products would be
    summed across SIMD lanes, which a short k cannot amortize: for a short k and enough rows to
    repay it, a transposed copy (small beside the product) puts the lanes along the outputs."""
    if bt.shape[-1] < PACK_BELOW_K and rows >= PACK_MIN_ROWS:
        return swap_last(swap_last(bt).contiguous())
    return bt


class Matmul(Function):
    """x (..., n, k) @ w (..., k, m), the batch dims already equal."""

    def forward(self, x: LazyBuffer, w: LazyBuffer) -> LazyBuffer:
        self.x, self.w = x, w
        return matmul_nt(x, swap_last(w))

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        need_x, need_w = self.needs_input_grad
        return (matmul_nt(grad, self.w) if need_x else None,                         # grad @ w^T
                matmul_nt(swap_last(self.x), swap_last(grad)) if need_w else None)   # x^T @ grad


class Linear(Function):
    """x (..., k) @ weight (m, k) transposed, plus bias (m,) when given: torch's layout."""

    def forward(self, x: LazyBuffer, weight: LazyBuffer, bias: LazyBuffer | None = None) -> LazyBuffer:
        m, k = weight.shape
        self.x_shape, self.weight = x.shape, weight
        self.x2 = x.reshape((prod(x.shape[:-1]), k))
        out = matmul_nt(self.x2, packed(weight, self.x2.shape[0]))
        if bias is not None:
            out = out.e(BinaryOps.ADD, bias.reshape((1, m)).expand(out.shape))
        return out.reshape((*x.shape[:-1], m))

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        g = grad.reshape((self.x2.shape[0], self.weight.shape[0]))
        need = self.needs_input_grad
        gx = matmul_nt(g, swap_last(self.weight)).reshape(self.x_shape) if need[0] else None
        gw = matmul_nt(swap_last(g), swap_last(self.x2)) if need[1] else None
        if len(need) < 3:
            return gx, gw
        return gx, gw, g.r(ReduceOps.SUM, (0,)).reshape(g.shape[1:]) if need[2] else None


# Abramowitz-Stegun 7.1.26: erf(z) = 1 - t * P(t) * exp(-z^2), t = 1 / (1 + p z) for z >= 0,
class Gelu(Function):
    """x * Phi(x) for x and Phi(x) (the standard normal CDF, computed by the caller from erfc, so the
    negative tail keeps its digits); the gradient is Phi(x) + x * phi(x), as torch's."""

    def forward(self, x: LazyBuffer, cdf: LazyBuffer) -> LazyBuffer:
        self.x, self.cdf = x, cdf
        return x.e(BinaryOps.MUL, cdf)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer, None]:
        x = self.x
        # phi(x) = exp2(x^2 * (-log2(e) / 2)) / sqrt(2 pi)
        gauss = x.e(BinaryOps.MUL, x).e(BinaryOps.MUL, _const(x, -0.5 / math.log(2))).e(UnaryOps.EXP2)
        pdf = gauss.e(BinaryOps.MUL, _const(grad, 1 / math.sqrt(2 * math.pi)))
        return grad.e(BinaryOps.MUL, self.cdf.e(BinaryOps.ADD, x.e(BinaryOps.MUL, pdf))), None


_Maybe = TypeVar("_Maybe", LazyBuffer, None, LazyBuffer | None)


def _wide(x: _Maybe) -> _Maybe:
    """A float16 or bfloat16 operand as float32. Functions whose row statistics are stored between
    kernels (softmax's sum, layer_norm's mean and rstd, attention's weights) compute in float32 and
    round once at the end, as torch's do: stored in the narrow type, each would be rounded too."""
    return x.e(UnaryOps.CAST, arg=dtypes.float32) if x is not None and x.dtype in NARROW else x


def _narrow(x: _Maybe, dtype: DType) -> _Maybe:
    """A float32 result back in its operand's (narrow) dtype."""
    return x.e(UnaryOps.CAST, arg=dtype) if x is not None and x.dtype != dtype else x


NARROW = (dtypes.float16, dtypes.bfloat16)


def _keep(x: LazyBuffer, reduced: LazyBuffer) -> LazyBuffer:
    """A keepdim reduce result broadcast back to x's shape."""
    return reduced.expand(x.shape)


def _shifted_exp(x: LazyBuffer, axis: int) -> tuple[LazyBuffer, LazyBuffer]:
    """(x - max, exp(x - max)) along axis: the max keeps exp from overflowing."""
    shifted = x.e(BinaryOps.ADD, _keep(x, x.r(ReduceOps.MAX, (axis,))).e(UnaryOps.NEG))
    return shifted, shifted.e(BinaryOps.MUL, _const(x, 1 / math.log(2))).e(UnaryOps.EXP2)


def _softmax(x: LazyBuffer, axis: int) -> LazyBuffer:
    """exp(x - max) / sum(exp(x - max)) along axis."""
    _, e = _shifted_exp(x, axis)
    return e.e(BinaryOps.MUL, _keep(x, e.r(ReduceOps.SUM, (axis,)).e(UnaryOps.RECIP)))   # 1 / sum per row


class Softmax(Function):
    """exp(x - max) / sum(exp(x - max)) along one axis; dx = y * (g - sum(g * y))."""

    def forward(self, x: LazyBuffer, axis: int) -> LazyBuffer:
        self.axis, self.dtype = axis, x.dtype
        self.ret = _softmax(_wide(x), axis)
        return _narrow(self.ret, self.dtype)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        y, grad = self.ret, _wide(grad)
        dot = _keep(y, grad.e(BinaryOps.MUL, y).r(ReduceOps.SUM, (self.axis,)))
        return _narrow(y.e(BinaryOps.MUL, grad.e(BinaryOps.ADD, dot.e(UnaryOps.NEG))), self.dtype)


class LogSoftmax(Function):
    """x - max - log(sum(exp(x - max))) along one axis; dx = g - exp(y) * sum(g)."""

    def forward(self, x: LazyBuffer, axis: int) -> LazyBuffer:
        self.axis, self.dtype = axis, x.dtype
        x = _wide(x)
        shifted, exps = _shifted_exp(x, axis)
        total = exps.r(ReduceOps.SUM, (axis,))
        log_total = total.e(UnaryOps.LOG2).e(BinaryOps.MUL, _const(total, math.log(2)))
        self.ret = shifted.e(BinaryOps.ADD, _keep(x, log_total).e(UnaryOps.NEG))
        return _narrow(self.ret, self.dtype)

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        grad = _wide(grad)
        probs = self.ret.e(BinaryOps.MUL, _const(grad, 1 / math.log(2))).e(UnaryOps.EXP2)
        total = _keep(grad, grad.r(ReduceOps.SUM, (self.axis,)))
        return _narrow(grad.e(BinaryOps.ADD, probs.e(BinaryOps.MUL, total).e(UnaryOps.NEG)), self.dtype)


def _mean(x: LazyBuffer, axes: tuple[int, ...]) -> LazyBuffer:
    """The mean over axes (keepdim), scaled on the reduced shape: in float16 a row's sum can pass the
    largest half while its mean does not, so the sum is never stored before it is scaled."""
    total = x.r(ReduceOps.SUM, axes)
    return total.e(BinaryOps.MUL, _const(total, 1 / prod(x.shape[a] for a in axes)))


class LayerNorm(Function):
    """(x - mean) / sqrt(var + eps) over the trailing `dims` dims (biased variance), then times
    weight and plus bias (each of the normalized shape) when given. With xhat the normalized x and
    h = g * weight: dx = rstd * (h - mean(h) - xhat * mean(h * xhat)), dweight = sum(g * xhat) and
    dbias = sum(g) over the leading dims."""

    def forward(self, x: LazyBuffer, weight: LazyBuffer | None = None, bias: LazyBuffer | None = None, *,
                dims: int, eps: float, has_weight: bool) -> LazyBuffer:
        nd = len(x.shape)
        self.axes, self.lead = tuple(range(nd - dims, nd)), tuple(range(nd - dims))
        if not has_weight:                 # only a bias: it came in weight's place
            weight, bias = None, weight
        self.dtypes = [t.dtype for t in (x, weight, bias) if t is not None]
        x, weight, bias = _wide(x), _wide(weight), _wide(bias)
        mean = _keep(x, _mean(x, self.axes))
        centered = x.e(BinaryOps.ADD, mean.e(UnaryOps.NEG))
        var = _mean(centered.e(BinaryOps.MUL, centered), self.axes)
        self.rstd = _keep(x, var.e(BinaryOps.ADD, _const(var, eps)).e(UnaryOps.SQRT).e(UnaryOps.RECIP))
        self.xhat = centered.e(BinaryOps.MUL, self.rstd)
        self.weight = None if weight is None else self._broadcast(weight, x.shape)
        self.has_bias = bias is not None
        out = self.xhat if self.weight is None else self.xhat.e(BinaryOps.MUL, self.weight)
        out = out if bias is None else out.e(BinaryOps.ADD, self._broadcast(bias, x.shape))
        return _narrow(out, self.dtypes[0])

    def _broadcast(self, p: LazyBuffer, shape: tuple[int, ...]) -> LazyBuffer:
        return p.reshape((1,) * len(self.lead) + p.shape).expand(shape)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        need, grad = self.needs_input_grad, _wide(grad)
        h = grad if self.weight is None else grad.e(BinaryOps.MUL, self.weight)
        mean_h = _keep(h, _mean(h, self.axes))
        mean_hx = _keep(h, _mean(h.e(BinaryOps.MUL, self.xhat), self.axes))
        inner = h.e(BinaryOps.ADD, mean_h.e(UnaryOps.NEG))
        inner = inner.e(BinaryOps.ADD, self.xhat.e(BinaryOps.MUL, mean_hx).e(UnaryOps.NEG))
        out: list[LazyBuffer | None] = [self.rstd.e(BinaryOps.MUL, inner) if need[0] else None]
        shape = grad.shape[len(self.lead):]
        if self.weight is not None:
            out.append(grad.e(BinaryOps.MUL, self.xhat).r(ReduceOps.SUM, self.lead).reshape(shape)
                       if need[len(out)] else None)
        if self.has_bias:
            out.append(grad.r(ReduceOps.SUM, self.lead).reshape(shape) if need[len(out)] else None)
        return tuple(_narrow(g, dtype) for g, dtype in zip(out, self.dtypes))


def one_hot(idx: LazyBuffer, n: int, wrap: bool = True) -> LazyBuffer:
    """Integer indices idx (any shape S) against 0..n-1: a bool (*S, n), True where idx points.
    Negative indices count from the end when wrap, else point nowhere."""
    s, full = idx.shape, (*idx.shape, n)
    if wrap:
        negative = idx.e(BinaryOps.CMPLT, _const(idx, 0))
        idx = negative.e(TernaryOps.WHERE, idx.e(BinaryOps.ADD, _const(idx, n)), idx)
    ar = arange(n, idx.device).reshape((1,) * len(s) + (n,)).expand(full)
    return _negated(idx.reshape((*s, 1)).expand(full).e(BinaryOps.CMPNE, ar))


def _negated(mask: LazyBuffer) -> LazyBuffer:
    """not mask (a bool compared unequal to True)."""
    return mask.e(BinaryOps.CMPNE, LazyBuffer.const(True, dtypes.bool, mask.device, mask.shape))


class Embedding(Function):
    """Rows of weight (V, D) picked by int32 indices of any shape S: (*S, D), one masked reduce over
    V; the weight's gradient is the output gradient summed into the rows it was read from."""

    def forward(self, weight: LazyBuffer, idx: LazyBuffer) -> LazyBuffer:
        (v, d), s = weight.shape, idx.shape
        full = (*s, v, d)
        self.mask = one_hot(idx, v).reshape((*s, v, 1)).expand(full)
        rows = weight.reshape((1,) * len(s) + (v, d)).expand(full)
        picked = self.mask.e(TernaryOps.WHERE, rows, _const(rows, 0)).r(ReduceOps.SUM, (len(s),))
        return picked.reshape((*s, d))

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, None]:
        *s, v, d = self.mask.shape
        tokens = prod(s)
        spread = grad.reshape((tokens, 1, d)).expand((tokens, v, d))
        mask = self.mask.reshape((tokens, v, d))
        summed = mask.e(TernaryOps.WHERE, spread, _const(spread, 0))
        return summed.r(ReduceOps.SUM, (0,)).reshape((v, d)), None


class ClassNll(Function):
    """-logp[..., target] for log-probabilities logp (..., C) and int32 class indices target (...),
    0 where target is ignore_index; reduced by "mean" (over the targets not ignored), "sum" or
    "none". The gradient is -1 (over the count, for the mean) at each target's class, 0 elsewhere."""

    def forward(self, logp: LazyBuffer, target: LazyBuffer, *, ignore_index: int,
                reduction: str) -> LazyBuffer:
        classes, nd = logp.shape[-1], len(target.shape)
        valid = target.e(BinaryOps.CMPNE, _const(target, ignore_index))
        # a class index outside 0..C-1 (torch raises; lazily it cannot be seen) picks nothing
        self.mask = one_hot(target, classes, wrap=False).e(BinaryOps.AND,
                                               valid.reshape((*target.shape, 1)).expand(logp.shape))
        self.reduction, self.scale = reduction, None
        picked = self.mask.e(TernaryOps.WHERE, logp, _const(logp, 0)).r(ReduceOps.SUM, (nd,))
        loss = picked.reshape(target.shape).e(UnaryOps.NEG)
        if reduction == "none":
            return loss
        total = loss.r(ReduceOps.SUM, tuple(range(nd))).reshape(())
        if reduction == "sum":
            return total
        count = valid.e(UnaryOps.CAST, arg=logp.dtype).r(ReduceOps.SUM, tuple(range(nd))).reshape(())
        self.scale = count.e(UnaryOps.RECIP)
        return total.e(BinaryOps.MUL, self.scale)

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, None]:
        shape = self.mask.shape
        if self.reduction == "none":
            spread = grad.reshape((*shape[:-1], 1)).expand(shape)
        else:
            g = grad if self.scale is None else grad.e(BinaryOps.MUL, self.scale)
            spread = g.reshape((1,) * len(shape)).expand(shape)
        return self.mask.e(TernaryOps.WHERE, spread.e(UnaryOps.NEG), _const(spread, 0)), None


def _halves(x: LazyBuffer) -> tuple[LazyBuffer, LazyBuffer]:
    """x (N, 2H) as its two (N, H) halves."""
    n, h = x.shape[0], x.shape[1] // 2
    return x.shrink(((0, n), (0, h))), x.shrink(((0, n), (h, 2 * h)))


class LSTMCell(Function):
    """One LSTM step from its gates' pre-activations a (N, 4H: i, f, g, o in torch's order,
    x W_ih^T + b_ih + h W_hh^T + b_hh) and the cell state c (N, H) -> (N, 2H), h' and then c':

        c' = sigmoid(f) c + sigmoid(i) tanh(g),   h' = sigmoid(o) tanh(c'),

    and its derivative written out (dc' + dh' o (1 - tanh(c')^2) carried into each gate and into c):
    a dozen lazy ops where the primitives' autograd made about sixty."""

    def forward(self, a: LazyBuffer, c: LazyBuffer) -> LazyBuffer:
        n, h = c.shape
        self.c = c
        i, f, g, o = (a.shrink(((0, n), (k * h, (k + 1) * h))) for k in range(4))
        self.i, self.f, self.o = (x.e(CompositeOps.SIGMOID) for x in (i, f, o))
        self.g = g.e(CompositeOps.TANH)
        c2 = self.f.e(BinaryOps.MUL, c).e(BinaryOps.ADD, self.i.e(BinaryOps.MUL, self.g))
        self.tc = c2.e(CompositeOps.TANH)
        return join((self.o.e(BinaryOps.MUL, self.tc), c2), 1)[0]

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        dh, dc = _halves(grad)
        i, f, g, o, tc = self.i, self.f, self.g, self.o, self.tc
        tanh_slope = _one_minus(tc.e(BinaryOps.MUL, tc))
        dct = dc.e(BinaryOps.ADD, dh.e(BinaryOps.MUL, o).e(BinaryOps.MUL, tanh_slope))
        sig = lambda s: s.e(BinaryOps.MUL, _one_minus(s))  # noqa: E731  (sigmoid's slope from its value)
        parts = (dct.e(BinaryOps.MUL, g).e(BinaryOps.MUL, sig(i)),
                 dct.e(BinaryOps.MUL, self.c).e(BinaryOps.MUL, sig(f)),
                 dct.e(BinaryOps.MUL, i).e(BinaryOps.MUL, _one_minus(g.e(BinaryOps.MUL, g))),
                 dh.e(BinaryOps.MUL, tc).e(BinaryOps.MUL, sig(o)))
        need_a, need_c = self.needs_input_grad
        return (join(parts, 1)[0] if need_a else None), (dct.e(BinaryOps.MUL, f) if need_c else None)


class GRUCell(Function):
    """One GRU step from gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh (N, 3H each: r, z, n in torch's
    order) and h (N, H):

        r = sigmoid(gi_r + gh_r),  z = sigmoid(gi_z + gh_z),  n = tanh(gi_n + r gh_n),
        h' = (1 - z) n + z h,

    with its derivative written out."""

    def forward(self, gi: LazyBuffer, gh: LazyBuffer, h: LazyBuffer) -> LazyBuffer:
        rows, size = h.shape
        part = lambda x, k: x.shrink(((0, rows), (k * size, (k + 1) * size)))  # noqa: E731
        self.h, self.gh_n = h, part(gh, 2)
        self.r, self.z = (part(gi, k).e(BinaryOps.ADD, part(gh, k)).e(CompositeOps.SIGMOID) for k in range(2))
        self.n = part(gi, 2).e(BinaryOps.ADD, self.r.e(BinaryOps.MUL, self.gh_n)).e(CompositeOps.TANH)
        return _one_minus(self.z).e(BinaryOps.MUL, self.n).e(BinaryOps.ADD, self.z.e(BinaryOps.MUL, h))

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        r, z, n = self.r, self.z, self.n
        sig = lambda s: s.e(BinaryOps.MUL, _one_minus(s))  # noqa: E731  (sigmoid's slope from its value)
        d_n = grad.e(BinaryOps.MUL, _one_minus(z)).e(BinaryOps.MUL, _one_minus(n.e(BinaryOps.MUL, n)))
        d_z = grad.e(BinaryOps.MUL, self.h.e(BinaryOps.ADD, n.e(UnaryOps.NEG))).e(BinaryOps.MUL, sig(z))
        d_r = d_n.e(BinaryOps.MUL, self.gh_n).e(BinaryOps.MUL, sig(r))
        need_gi, need_gh, need_h = self.needs_input_grad
        return (join((d_r, d_z, d_n), 1)[0] if need_gi else None,
                join((d_r, d_z, d_n.e(BinaryOps.MUL, r)), 1)[0] if need_gh else None,
                grad.e(BinaryOps.MUL, z) if need_h else None)


def _gate(n: int, size: int, k: int, device: str) -> LazyBuffer:
    """True at gate k of an (n, 4, size) space of an LSTM's four gates."""
    return LazyBuffer.const(True, dtypes.bool, device, (n, 1, size)).pad(((0, 0), (k, 3 - k), (0, 0)))


class LSTMLayer(Function):
    """A whole LSTM layer in one direction: gi (T, N, 4H), every step's input projection with b_ih;
    h0, c0 (N, H); w_hh (4H, H) and b_hh (4H,) when given -> (T, N, 2H), each step's h and c (step t
    runs after step t - 1, or after t + 1 with reverse). As one Function the recurrence costs no
    autograd bookkeeping per step, and its backward is backpropagation through time written out.

    Forward and backward each run as a realize.replayed computation: their graphs (thousands of nodes
    for a sequence of 35) are built and scheduled once for inputs of one kind, then their schedules
    rerun on each call's inputs, which costs the launches only (building, walking and collecting the
    graphs cost twice the kernels' time in word_language_model's eager step).

    Kernels are planned here, not left to the fusion rules (a value read through a padded view, as a
    join's parts, is stored first, each part a kernel): a step's gate pre-activations are the matmul's
    output, stored; its four activations are one (N, 4, H) kernel, stored once (its gates picked by
    where: sigmoid, and tanh on g), read by the step's other kernels and by backward; a backward step
    computes its four gate gradients in one kernel over the same space from broadcast reads, then dc
    and the next dh (a matmul). The output joins every step's stored h and c in one kernel; W_hh's
    and b_hh's gradients are one matmul and one sum over all T N rows."""

    def forward(self, gi: LazyBuffer, h0: LazyBuffer, c0: LazyBuffer, w_hh: LazyBuffer,
                b_hh: LazyBuffer | None = None, reverse: bool = False) -> LazyBuffer:
        self.h0, self.c0, self.w_hh, self.reverse, self.has_bias = h0, c0, w_hh, reverse, b_hh is not None
        ins = [gi, h0, c0, w_hh, *([] if b_hh is None else [b_hh])]
        self.out, *self.acts = replayed(("LSTMLayer", reverse), ins,
                                        lambda *x: _lstm_forward(*x, reverse=reverse))
        return self.out

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        need = tuple(self.needs_input_grad[:5 if self.has_bias else 4])
        ins = [grad, self.out, self.h0, self.c0, self.w_hh, *self.acts]
        made = iter(replayed(("LSTMLayer.backward", self.reverse, need), ins,
                             lambda *x: _lstm_backward(*x, reverse=self.reverse, need=need)))
        steps, n, width = grad.shape
        grads = [next(made) if wanted else None for wanted in need]
        if grads[0] is not None:
            grads[0] = grads[0].reshape((steps, n, 2 * width))
        if len(grads) > 4 and grads[4] is not None:
            grads[4] = grads[4].reshape((2 * width,))
        return tuple(grads)


def _lstm_forward(gi: LazyBuffer, h0: LazyBuffer, c0: LazyBuffer, w_hh: LazyBuffer,
                  b_hh: LazyBuffer | None = None, *, reverse: bool) -> list[LazyBuffer]:
    """LSTMLayer's forward graph: [the output (T, N, 2H), then each step's activations (N, 4, H)]."""
    steps, n, gates = gi.shape
    size = gates // 4
    bias = None if b_hh is None else b_hh.reshape((1, gates)).expand((n, gates))
    w = packed(w_hh, steps * n)     # read by every step
    is_g = _gate(n, size, 2, gi.device)
    h, c = h0, c0
    acts: list[LazyBuffer] = [None] * steps     # type: ignore[list-item]
    hcs: list[tuple[LazyBuffer, LazyBuffer]] = [None] * steps     # type: ignore[list-item]
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        a = gi.shrink(((t, t + 1), (0, n), (0, gates))).reshape((n, gates))
        a = a.e(BinaryOps.ADD, matmul_nt(h, w))
        a = a if bias is None else a.e(BinaryOps.ADD, bias)
        # stored: the activations after the matmul as its epilogue would run unvectorised (15x slower)
        a = LazyBuffer.empty(a.shape, a.dtype, a.device).assign(a).reshape((n, 4, size))
        act = is_g.e(TernaryOps.WHERE, a.e(CompositeOps.TANH), a.e(CompositeOps.SIGMOID))
        act = acts[t] = LazyBuffer.empty(act.shape, act.dtype, act.device).assign(act)
        i, f, g, o = (_gate_of(act, k) for k in range(4))
        c = f.e(BinaryOps.MUL, c).e(BinaryOps.ADD, i.e(BinaryOps.MUL, g))
        h = o.e(BinaryOps.MUL, c.e(CompositeOps.TANH))
        hcs[t] = (h, c)
    parts = [x.reshape((1, n, size)) for hc in hcs for x in hc]
    return [_placed_rows(parts, steps, n, size), *acts]


def _lstm_backward(grad: LazyBuffer, out: LazyBuffer, h0: LazyBuffer, c0: LazyBuffer, w_hh: LazyBuffer,
                   *acts: LazyBuffer, reverse: bool, need: tuple[bool, ...]) -> list[LazyBuffer]:
    """LSTMLayer's backward graph from the output's gradient and forward's output and activations:
    the gradients wanted (need: of gi as (T, N 4H), h0, c0, W_hh, b_hh as (1, 4H))."""
    steps, n, width = grad.shape
    size = width // 2
    dev = grad.device
    spread = lambda x: x.reshape((n, 1, size)).expand((n, 4, size))  # noqa: E731  (to every gate)
    half = lambda x, t, k: x.shrink(((t, t + 1), (0, n), (k * size, (k + 1) * size))).reshape((n, size))  # noqa: E731,E501
    masks = [_gate(n, size, k, dev) for k in range(4)]
    dh = dc = None
    grads: list[LazyBuffer] = [None] * steps          # type: ignore[list-item]
    for t in (range(steps) if reverse else range(steps - 1, -1, -1)):
        dh_t, dc_t, act = half(grad, t, 0), half(grad, t, 1), acts[t]
        first = t == (steps - 1 if reverse else 0)
        c, c2 = (c0 if first else half(out, t + 1 if reverse else t - 1, 1)), half(out, t, 1)
        # over all four gates, from broadcast reads (every gate's copy of dct is the same value)
        dh_x = spread(dh_t) if dh is None else spread(dh_t).e(BinaryOps.ADD, spread(dh))
        dc_x = spread(dc_t) if dc is None else spread(dc_t).e(BinaryOps.ADD, spread(dc))
        tc_x = spread(c2).e(CompositeOps.TANH)
        dct_x = dc_x.e(BinaryOps.ADD, dh_x.e(BinaryOps.MUL, spread(_gate_of(act, 3))).e(
            BinaryOps.MUL, _one_minus(tc_x.e(BinaryOps.MUL, tc_x))))
        i, f, g = (spread(_gate_of(act, k)) for k in range(3))
        partner = masks[0].e(TernaryOps.WHERE, g.e(BinaryOps.MUL, dct_x), masks[1].e(
            TernaryOps.WHERE, spread(c).e(BinaryOps.MUL, dct_x), masks[2].e(
                TernaryOps.WHERE, i.e(BinaryOps.MUL, dct_x), tc_x.e(BinaryOps.MUL, dh_x))))
        slope = masks[2].e(TernaryOps.WHERE, _one_minus(act.e(BinaryOps.MUL, act)),
                           act.e(BinaryOps.MUL, _one_minus(act)))
        grads[t] = slope.e(BinaryOps.MUL, partner).reshape((n, 4 * size))
        dc = _gate_of(dct_x, 1).e(BinaryOps.MUL, _gate_of(act, 1))
        dh = matmul_nt(grads[t], swap_last(w_hh))
    assert dh is not None and dc is not None
    da = join([g.reshape((1, n, g.shape[1])) for g in grads], 0)[0]
    rows = da.reshape((steps * n, da.shape[2]))
    gw = None
    if need[3]:
        # each step's h before it: h0, then the output's h one step back (forward: t - 1)
        before = h0.reshape((1, n, size))
        if steps > 1:
            span = (1, steps) if reverse else (0, steps - 1)
            hs = out.shrink((span, (0, n), (0, size)))
            before = join((hs, before) if reverse else (before, hs), 0)[0]
        gw = matmul_nt(swap_last(rows), swap_last(before.reshape((steps * n, size))))
    made = [da, dh, dc, gw, *([rows.r(ReduceOps.SUM, (0,))] if len(need) > 4 else [])]
    return [x for x, wanted in zip(made, need) if wanted and x is not None]


def _gate_of(act: LazyBuffer, k: int) -> LazyBuffer:
    """Gate k (n, size) of a step's stored activations (n, 4, size)."""
    n, _, size = act.shape
    return act.shrink(((0, n), (k, k + 1), (0, size))).reshape((n, size))


def _placed_rows(parts: list[LazyBuffer], steps: int, n: int, size: int) -> LazyBuffer:
    """(steps, n, 2 size) from parts (1, n, size): step t's h then c, each picked where it lies."""
    return placed([(x, ((t, steps - t - 1), (0, 0), (half * size, (1 - half) * size)))
                   for x, (t, half) in zip(parts, (divmod(i, 2) for i in range(len(parts))))])


class Attention(Function):
    """softmax(q @ k^T * scale, masked to key <= query when causal) @ v for q (..., L, E), k (..., S, E)
    and v (..., S, Ev) of equal batch dims. With p the weights and g the output's gradient:
    dv = p^T g, ds = p * (g v^T - rowsum(p * g v^T)) * scale, dq = ds k, dk = ds^T q."""

    def forward(self, q: LazyBuffer, k: LazyBuffer, v: LazyBuffer, *, scale: float,
                causal: bool) -> LazyBuffer:
        self.dtypes = (q.dtype, k.dtype, v.dtype)
        q, k, v = _wide(q), _wide(k), _wide(v)
        self.q, self.k, self.v, self.scale = q, k, v, scale
        scores = matmul_nt(q, packed(k, q.shape[-2]))
        scores = scores.e(BinaryOps.MUL, _const(scores, scale))
        if causal:
            *batch, n_q, n_k = scores.shape
            lead = (1,) * len(batch)
            rows = arange(n_q, q.device).reshape((*lead, n_q, 1)).expand(scores.shape)
            cols = arange(n_k, q.device).reshape((*lead, 1, n_k)).expand(scores.shape)
            self_or_before = _negated(rows.e(BinaryOps.CMPLT, cols))
            scores = self_or_before.e(TernaryOps.WHERE, scores, _const(scores, -math.inf))
        p = _softmax(scores, len(scores.shape) - 1)
        # the output from float32 weights (rounded once); backward's copy of the weights in the inputs'
        # type where that is narrow (half the bytes kept from forward to backward, as torch's autocast
        # keeps its bfloat16 softmax output; the gradients are rounded to that type anyway)
        self.p = _wide(_narrow(p, self.dtypes[0]).stored()) if self.dtypes[0] in NARROW else p
        return _narrow(matmul_nt(p, swap_last(v)), self.dtypes[0])

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        grads = self._grads(_wide(grad))
        return tuple(_narrow(g, dtype) for g, dtype in zip(grads, self.dtypes))

    def _grads(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        need_q, need_k, need_v = self.needs_input_grad
        p = self.p
        dv = matmul_nt(swap_last(p), swap_last(grad)) if need_v else None
        if not (need_q or need_k):
            return None, None, dv
        dp = matmul_nt(grad, packed(self.v, grad.shape[-2]))
        rowsum = _keep(dp, dp.e(BinaryOps.MUL, p).r(ReduceOps.SUM, (len(p.shape) - 1,)))
        centered = dp.e(BinaryOps.ADD, rowsum.e(UnaryOps.NEG))
        ds = p.e(BinaryOps.MUL, centered).e(BinaryOps.MUL, _const(p, self.scale))
        dq = matmul_nt(ds, swap_last(self.k)) if need_q else None
        dk = matmul_nt(swap_last(ds), swap_last(self.q)) if need_k else None
        return dq, dk, dv


def windows(x: LazyBuffer, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
            outs: tuple[int, ...]) -> LazyBuffer:
    """The sliding windows of x's trailing len(kernel) dims as a view, (*lead, *outs, *kernel): no
    copy and no mask. Each spatial dim is repeated and re-read in rows of length L = i + d (+ a
    multiple of i, which changes nothing mod i): row r, column c is then x[c + r*d], so window
    position k of output o sits at row k, column o*s, an index affine in both."""
    nsp = len(kernel)
    lead, spatial = x.shape[:-nsp], x.shape[-nsp:]
    rows = [i + d + max(0, math.ceil((o * s - i - d) / i)) * i
            for i, d, o, s in zip(spatial, dilation, outs, stride)]
    reps = [math.ceil(k * L / i) for k, i, L in zip(kernel, spatial, rows)]
    keep = tuple((0, s) for s in lead)
    x = x.reshape(lead + tuple(v for i in spatial for v in (1, i)))
    x = x.expand(lead + tuple(v for r, i in zip(reps, spatial) for v in (r, i)))
    x = x.reshape(lead + tuple(r * i for r, i in zip(reps, spatial)))
    x = x.shrink(keep + tuple((0, k * L) for k, L in zip(kernel, rows)))
    x = x.reshape(lead + tuple(v for k, L in zip(kernel, rows) for v in (k, L)))
    x = x.shrink(keep + tuple(v for k, o, s in zip(kernel, outs, stride) for v in ((0, k), (0, o * s))))
    x = x.reshape(lead + tuple(v for k, o, s in zip(kernel, outs, stride) for v in (k, o, s)))
    x = x.shrink(keep + tuple(v for k, o in zip(kernel, outs) for v in ((0, k), (0, o), (0, 1))))
    x = x.reshape(lead + tuple(v for k, o in zip(kernel, outs) for v in (k, o)))
    n = len(lead)
    return x.permute(tuple(range(n)) + tuple(n + 2 * i + 1 for i in range(nsp))
                     + tuple(n + 2 * i for i in range(nsp)))


def _placed(g: LazyBuffer, axis: int, start: int, stride: int, size: int) -> LazyBuffer:
    """g's entries t along axis moved to start + t * stride of a dim of `size`, zeros between: the
    adjoint of reading that strided slice."""
    shape, o = g.shape, g.shape[axis]
    if stride > 1:
        g = g.reshape(shape[:axis] + (o, 1) + shape[axis + 1:])
        g = g.pad(tuple((0, stride - 1) if a == axis + 1 else (0, 0) for a in range(len(g.shape))))
        g = g.reshape(shape[:axis] + (o * stride,) + shape[axis + 1:])
    span = min(o * stride, size - start)
    if span < g.shape[axis]:
        g = g.shrink(tuple((0, span) if a == axis else (0, s) for a, s in enumerate(g.shape)))
    return g.pad(tuple((start, size - start - span) if a == axis else (0, 0) for a in range(len(g.shape))))


def _out_size(size: int, pad: int, k: int, stride: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _window_copy(x: LazyBuffer, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int], groups: int, cout: int) -> LazyBuffer:
    """The windows of the padded x copied out once, laid out (N, Cin, kh, kw, oh, ow), seen expanded
    to (N, G, Cout/G, Cin/G, oh, ow, kh, kw): the weight gradient's reduce over N, oh and ow reads the
    copy ~8x faster than the view."""
    n, cin, h, wd = x.shape
    (kh, kw), (ph, pw), (sh, sw), (dh, dw) = kernel, padding, stride, dilation
    xp = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    oh, ow = _out_size(h, ph, kh, sh, dh), _out_size(wd, pw, kw, sw, dw)
    view = windows(xp, (kh, kw), stride, dilation, (oh, ow))
    win = view.permute((0, 1, 4, 5, 2, 3)).contiguous().permute((0, 1, 4, 5, 2, 3))
    full = (n, groups, cout // groups, cin // groups, oh, ow, kh, kw)
    return win.reshape((n, groups, 1, cin // groups, oh, ow, kh, kw)).expand(full)


def _correlate(x: LazyBuffer, w: LazyBuffer, stride: tuple[int, int], padding: tuple[int, int],
               dilation: tuple[int, int], groups: int) -> tuple[LazyBuffer, LazyBuffer | None]:
    """conv2d's forward, (out (N, Cout, oh, ow), the window copy or None): at stride 1 over the
    padded rows (_correlate_rows, no window copy), else one reduce over the window copy."""
    if stride == (1, 1):
        return _correlate_rows(x, w, padding, dilation, groups), None
    cout, cin_g, kh, kw = w.shape
    win = _window_copy(x, (kh, kw), stride, padding, dilation, groups, cout)
    n, g, cout_g, _, oh, ow, _, _ = win.shape
    wide = w.reshape((1, g, cout_g, cin_g, 1, 1, kh, kw)).expand(win.shape)
    order = (0, 1, 2, 4, 5, 3, 6, 7)            # the reduce dims last and adjacent: Cin/G, kh and kw merge
    out = sum_of_products(win.permute(order), wide.permute(order), (5, 6, 7))
    return out.reshape((n, cout, oh, ow)), win


def _row_windows(x: LazyBuffer, kernel: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int]) -> tuple[LazyBuffer, int, int, int]:
    """(view (N, Cin, oh * W2, kh, kw), oh, ow, W2): the windows of x at stride 1 over its padded rows.
    Each image plane is padded (and copied) once into rows of width W2 (the padded width), and window
    offset (i, j) of output position p = r * W2 + c is plane[p + i * dh * W2 + j * dw]: affine in p
    with unit stride and no mask, so output rows run as long vectors over consecutive rows. The W2 - ow
    positions past each output row (2 of 58 at 56x56, padding 1) read neighbouring values: their
    results are cut off. dh extra zero rows at the bottom keep the last row's reads inside the plane.
    Where rows carry columns to cut anyway, W2 grows (by at most a seventh) to make oh * W2 whole 16-float
    vectors where it can: each plane of the output then starts 64-byte aligned, and a large output
    streams past the cache (26 x 28 -> 26 x 32 for a 28 x 28 input: the 1->32 conv's 11 MB output in
    201 us instead of 273). A 1 x 1 kernel, whose rows need no cut, keeps its width."""
    n, cin, h, wd = x.shape
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    oh, ow = _out_size(h, ph, kh, 1, dh), _out_size(wd, pw, kw, 1, dw)
    w2 = max(wd + 2 * pw, kw * dw)             # a row holds every column offset j * dw
    # planes of whole 16-float vectors (64-byte aligned, so the outputs can stream past the cache), where
    # that costs at most a seventh more columns: 26 x 28 -> 26 x 32
    if w2 != ow:        # rows that already carry columns to cut: a few more make whole vectors a plane
        w2 = next((v for v in range(w2, w2 + w2 // 7 + 1) if oh * v % 16 == 0), w2)
    rows = h + 2 * ph + dh
    xp = x.pad(((0, 0), (0, 0), (ph, ph + dh), (pw, w2 - wd - pw))).contiguous()
    span = oh * w2
    view = windows(xp.reshape((n, cin, rows * w2)), (kh * dh * w2,), (1,), (1,), (span,))
    view = view.reshape((n, cin, span, kh, dh, w2))
    view = view.shrink(((0, n), (0, cin), (0, span), (0, kh), (0, 1), (0, kw * dw)))
    view = view.reshape((n, cin, span, kh, kw, dw))
    view = view.shrink(((0, n), (0, cin), (0, span), (0, kh), (0, kw), (0, 1)))
    return view.reshape((n, cin, span, kh, kw)), oh, ow, w2


def _correlate_rows(x: LazyBuffer, w: LazyBuffer, padding: tuple[int, int], dilation: tuple[int, int],
                    groups: int) -> LazyBuffer:
    """conv2d at stride 1 as one reduce over the padded input rows where they lie (_row_windows): no
    window copy; the outputs past each row's end are cut off."""
    n, cin, _, _ = x.shape
    cout, cin_g, kh, kw = w.shape
    view, oh, ow, w2 = _row_windows(x, (kh, kw), padding, dilation)
    g, cout_g, span = groups, cout // groups, oh * w2
    full = (n, g, cout_g, span, cin_g, kh, kw)
    win = view.reshape((n, g, 1, cin_g, span, kh, kw)).permute((0, 1, 2, 4, 3, 5, 6)).expand(full)
    wide = w.reshape((1, g, cout_g, 1, cin_g, kh, kw)).expand(full)
    out = sum_of_products(win, wide, (4, 5, 6)).reshape((n, cout, oh, w2))
    return out.shrink(((0, n), (0, cout), (0, oh), (0, ow))) if w2 != ow else out


def _windows_back(dwin: LazyBuffer, x_shape: tuple[int, ...], full: tuple[int, ...], padding: tuple[int, int],
                  stride: tuple[int, int], dilation: tuple[int, int]) -> LazyBuffer:
    """A conv2d's input (shape x_shape) from values at each of its windows' positions (N, G, 1, Cin/G,
    oh, ow, kh, kw; `full` the conv's (N, G, Cout/G, Cin/G, oh, ow, kh, kw)): each of the kh * kw
    window positions added back where the conv read it from (shifted, strided), the padding cut off."""
    n, cin, h, wd = x_shape
    _, _, _, _, oh, ow, kh, kw = full
    (ph, pw), (sh, sw), (dh, dw) = padding, stride, dilation
    dwin = dwin.reshape((n, cin, oh, ow, kh, kw))
    total: LazyBuffer | None = None
    for i in range(kh):
        for j in range(kw):
            tap = dwin.shrink(((0, n), (0, cin), (0, oh), (0, ow), (i, i + 1), (j, j + 1)))
            tap = _placed(tap.reshape((n, cin, oh, ow)), 2, i * dh, sh, h + 2 * ph)
            tap = _placed(tap, 3, j * dw, sw, wd + 2 * pw)
            total = tap if total is None else total.e(BinaryOps.ADD, tap)
    assert total is not None
    return total.shrink(((0, n), (0, cin), (ph, ph + h), (pw, pw + wd))) if ph or pw else total


# a stored transposed conv is taken per phase (_input_grad_by_phases) while its one conv computes at most this
# many times the positions it keeps: its phases' reach (M - 1 more rows, 2 (M - 1) more columns) beyond
# the input's size. Measured on DCGAN's stride-2 4x4 layers (batch 64, Zen 4, 2 threads): at 4x4 inputs
# (1.9x) 3.3-3.7 ms against 2.4-2.9 ms the other way; at 8x8 (1.4x) 2.6-3.3 against 2.6-3.7 ms; at 16x16
# (1.2x) 0.8 against 1.1-1.7 ms.
PHASE_MAX_WASTE = 1.5


def _by_phases(w_shape: tuple[int, ...], stride: tuple[int, int], dilation: tuple[int, int],
               y_shape: tuple[int, ...] | None = None) -> bool:
    """Whether a conv2d's input gradient is taken per output phase (_input_grad_by_phases): strided, no
    dilation, each kernel dim a whole number of strides (DCGAN's 4x4 taps at stride 2); with y_shape (the
    conv's output, for a stored result) only while the phases' conv wastes at most PHASE_MAX_WASTE."""
    kh, kw = w_shape[2:]
    if stride == (1, 1) or dilation != (1, 1) or kh % stride[0] or kw % stride[1]:
        return False
    if y_shape is None:
        return True
    (oh, ow), mh, mw = y_shape[2:], kh // stride[0], kw // stride[1]
    return (oh + mh - 1) * (ow + 2 * (mw - 1)) <= PHASE_MAX_WASTE * oh * ow


def _input_grad_by_phases(y: LazyBuffer, w: LazyBuffer, x_shape: tuple[int, ...], padding: tuple[int, int],
                          stride: tuple[int, int], groups: int) -> LazyBuffer:
    """The input-shaped (x_shape) adjoint of a strided conv2d (weight w, kernel k = M s per dim) at
    output-shaped y, as one stride-1 conv. Along a dim, the padded input position z = s t + r (phase r)
    was read by taps r, r + s, ..., r + (M - 1) s at outputs t, t - 1, ..., t - M + 1: dx[s t + r] =
    sum_m y[t - m] w[m s + r], a correlation of y padded by M - 1 with those M taps reversed. All s^2
    phases are that one conv with s^2 times the output channels (its weight w's taps regrouped, a view),
    so every multiply is one the result needs and each input position is read from exactly one place:
    the phases interleave as a view, cut by the padding (zeros past the reach). Summing the window
    gradients instead (_windows_back) makes every reader gather kh kw masked positions a lane."""
    n, cin, h, wd = x_shape
    cout, cin_g, kh, kw = w.shape
    (sh, sw), (ph, pw), g = stride, padding, groups
    mh, mw = kh // sh, kw // sw
    # the taps of phase (rh, rw), reversed, as the output channels (g, Cin/G, rh, rw) of one conv
    sub = w.reshape((g, cout // g, cin_g, mh, sh, mw, sw)).flip((False,) * 3 + (True, False, True, False))
    sub = sub.permute((0, 2, 4, 6, 1, 3, 5)).reshape((g * cin_g * sh * sw, cout // g, mh, mw))
    out = _correlate_rows(y, sub, (mh - 1, mw - 1), (1, 1), g)
    th, tw = out.shape[2:]
    full = (th * sh, tw * sw)           # the padded input's positions the conv reaches
    out = out.reshape((n, cin, sh, sw, th, tw)).permute((0, 1, 4, 2, 5, 3)).reshape((n, cin, *full))
    end = (min(ph + h, full[0]), min(pw + wd, full[1]))
    out = out.shrink(((0, n), (0, cin), (ph, end[0]), (pw, end[1])))
    return out.pad(((0, 0), (0, 0), (0, ph + h - end[0]), (0, pw + wd - end[1])))


def _spread(y: LazyBuffer, full: tuple[int, ...]) -> LazyBuffer:
    """A conv2d's output-shaped y (N, Cout, oh, ow) seen over the conv's full space."""
    n, g, cout_g, _, oh, ow, _, _ = full
    return y.reshape((n, g, cout_g, 1, oh, ow, 1, 1)).expand(full)


def _input_grad(y: LazyBuffer, w: LazyBuffer, x_shape: tuple[int, ...], full: tuple[int, ...],
                padding: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> LazyBuffer:
    """The input-shaped (x_shape) adjoint of a conv2d with weight w at output-shaped y: y times w summed
    over Cout/G (every multiply one the result needs), each window position added back (_windows_back)."""
    _, g, cout_g, cin_g, _, _, kh, kw = full
    wide = w.reshape((1, g, cout_g, cin_g, 1, 1, kh, kw)).expand(full)
    dwin = sum_of_products(_spread(y, full), wide, (2,))
    return _windows_back(dwin, x_shape, full, padding, stride, dilation)


def _weight_grad(y: LazyBuffer, win: LazyBuffer, full: tuple[int, ...],
                 w_shape: tuple[int, ...]) -> LazyBuffer:
    """A conv2d's weight gradient: its output's gradient y times the input's windows (win), summed over
    N, oh and ow."""
    return sum_of_products(_spread(y, full), win, (0, 4, 5)).reshape(w_shape)


class ConvTranspose2d(Function):
    """torch's conv_transpose2d of x (N, Cin, H, W) with weight (Cin, Cout/G, kh, kw) (+ bias (Cout,)),
    output (N, Cout, OH, OW), as the adjoint of conv2d it is: the gradient of a conv2d of an (N, Cout,
    OH, OW) input with this weight (its Cout being Cin, its Cin/G Cout/G) taken at x. Forward is that
    conv's input gradient, stored: per output phase (_input_grad_by_phases, one stride-1 conv) where the
    kernel is whole strides and its conv wastes little (PHASE_MAX_WASTE), else _input_grad (a contraction
    over Cin/G, then the window positions added back); either way every multiply is one the result
    needs, not the zeros between strided inputs. Backward: dx is the conv2d of the output's gradient
    (strided: a window copy and one contraction), dweight that conv's weight gradient (x times the
    gradient's windows summed over N, H and W)."""

    def forward(self, x: LazyBuffer, w: LazyBuffer, bias: LazyBuffer | None = None, *,
                stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int], groups: int,
                out_size: tuple[int, int]) -> LazyBuffer:
        n, cin, h, wd = x.shape
        _, cout_g, kh, kw = w.shape
        self.has_bias, self.w_shape = bias is not None, w.shape
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        # the conv2d whose input gradient this is: input (n, cout, *out_size), output x, weight w
        self.full = (n, groups, cin // groups, cout_g, h, wd, kh, kw)
        # stored: its readers (a norm's statistics, its normalization) would each add the kh * kw
        # placed window positions again, or gather from the interleaved phases
        x_shape = (n, cout_g * groups, *out_size)
        if _by_phases(w.shape, stride, dilation, x.shape):
            out = _input_grad_by_phases(x, w, x_shape, padding, stride, groups)
        else:
            out = _input_grad(x, w, x_shape, self.full, padding, stride, dilation)
        out = LazyBuffer.empty(out.shape, out.dtype, out.device).assign(out)
        need_x, need_w = self.needs_input_grad[:2]
        self.x, self.weight = (x if need_w else None), (w if need_x else None)
        if bias is not None:
            out = out.e(BinaryOps.ADD, bias.reshape((1, out.shape[1], 1, 1)).expand(out.shape))
        return out

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        need = self.needs_input_grad
        dx = dw = win = None
        if self.weight is not None:     # (strided, the conv's window copy serves dweight too)
            dx, win = _correlate(grad, self.weight, self.stride, self.padding, self.dilation, self.groups)
        if self.x is not None:
            _, g, cin_g, _, _, _, kh, kw = self.full
            if win is None:
                win = _window_copy(grad, (kh, kw), self.stride, self.padding, self.dilation, g, g * cin_g)
            dw = _weight_grad(self.x, win, self.full, self.w_shape)
        if not self.has_bias:
            return dx, dw
        return dx, dw, grad.r(ReduceOps.SUM, (0, 2, 3)).reshape((grad.shape[1],)) if need[2] else None


class Conv2d(Function):
    """torch's conv2d of x (N, Cin, H, W) with weight (Cout, Cin/G, kh, kw) (+ bias (Cout,)), the
    composite Tensor.conv2d builds as one Function. At stride 1 one reduce reads the input's padded
    rows where they lie (_correlate_rows); at other strides the windows of the padded input are copied
    out once (N, Cin, kh, kw, oh, ow) and one reduce multiplies them with the weight, summing over
    Cin/G, kh and kw. Backward: dweight sums g times the window copy over N, oh and ow (at stride 1 the
    copy is made then, from the kept input). dx is at stride 1 itself a conv (see _as_conv) of g padded
    by the window's reach less the padding, with the weight flipped and its channel dims swapped per
    group; at strides the kernel spans whole, one stride-1 conv over the output phases
    (_input_grad_by_phases: its readers, a norm's backward, read each element from one place);
    otherwise g times the weight summed over Cout/G into window gradients, each of the kh * kw window
    positions then added back where it was read from (shifted, strided), and the padding cut off."""

    def forward(self, x: LazyBuffer, w: LazyBuffer, bias: LazyBuffer | None = None, *,
                stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
                groups: int) -> LazyBuffer:
        self.x_shape, self.w_shape, self.has_bias = x.shape, w.shape, bias is not None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        out, win = _correlate(x, w, stride, padding, dilation, groups)
        cout, cin_g, kh, kw = w.shape
        oh, ow = out.shape[2:]
        self.full = (x.shape[0], groups, cout // groups, cin_g, oh, ow, kh, kw)
        # backward keeps only what its gradients read: for dweight the window copy (kh*kw times the
        # input) where the forward made one, else the input, whose windows backward copies out
        self.win = win if self.needs_input_grad[1] else None
        self.x = x if self.needs_input_grad[1] and win is None else None
        self.weight = w if self.needs_input_grad[0] else None
        if bias is not None:
            out = out.e(BinaryOps.ADD, bias.reshape((1, cout, 1, 1)).expand(out.shape))
        return out

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        need = self.needs_input_grad
        _, g, cout_g, _, _, _, kh, kw = self.full
        win = self.win if self.x is None else \
            _window_copy(self.x, (kh, kw), self.stride, self.padding, self.dilation, g, g * cout_g)
        dw = _weight_grad(grad, win, self.full, self.w_shape) if win is not None else None
        dx = None
        if self.weight is not None and self._as_conv():
            dx = self._dx_as_conv(self.weight, grad)
        elif self.weight is not None and _by_phases(self.w_shape, self.stride, self.dilation):
            dx = _input_grad_by_phases(grad, self.weight, self.x_shape, self.padding, self.stride,
                                       self.groups)
        elif self.weight is not None:
            dx = _input_grad(grad, self.weight, self.x_shape, self.full, self.padding, self.stride,
                             self.dilation)
        if not self.has_bias:
            return dx, dw
        return dx, dw, grad.r(ReduceOps.SUM, (0, 2, 3)).reshape((self.w_shape[0],)) if need[2] else None

    def _as_conv(self) -> bool:
        """Whether dx is taken as a conv of the gradient: at stride 1, with padding within the window's
        reach (the gradient is then padded, never cut). That conv reads the padded gradient's rows where
        they lie (_correlate_rows): no window copy, no col2im pass. Measured (min of 5): 64->64 channels
        at 56x56, padding 1: 9.3 ms against 22-23 ms the other way; 32->64 at 26x26 (batch 128), no
        padding, whose gradient is padded by 2: 11.6 ms against 17.5 ms."""
        _, _, kh, kw = self.w_shape
        (ph, pw), (dh, dw) = self.padding, self.dilation
        return self.stride == (1, 1) and ph <= dh * (kh - 1) and pw <= dw * (kw - 1)

    def _dx_as_conv(self, weight: LazyBuffer, grad: LazyBuffer) -> LazyBuffer:
        """dx at stride 1: the gradient correlated with the weight flipped in both spatial dims, Cin/G
        and Cout/G swapped within each group, padded by (k - 1) * dilation - padding."""
        cout, cin_g, kh, kw = self.w_shape
        g = self.groups
        (ph, pw), (dh, dw) = self.padding, self.dilation
        flipped = weight.flip((False, False, True, True)).reshape((g, cout // g, cin_g, kh, kw))
        swapped = flipped.permute((0, 2, 1, 3, 4)).reshape((g * cin_g, cout // g, kh, kw))
        pad = (dh * (kh - 1) - ph, dw * (kw - 1) - pw)
        return _correlate_rows(grad, swapped, pad, self.dilation, g)
