"""NNMixin, a part of the Tensor class: matmul and the matrix products, convolution, pooling,
softmax, the losses' building blocks and the small linear algebra (outer, kron, cross). tg/core/tensor.py
builds Tensor from the mixins and binds `Tensor` here once the class exists (see
tg/core/mixin/__init__.py)."""
from __future__ import annotations

import builtins
import itertools
from typing import TYPE_CHECKING, Any

from tg.core import fused
from tg.core.autocast import autocast_op
from tg.core.dtype import (
    min_value,
    promote_types,
)
from tg.core.mixin.base import apply
from tg.core.shape import broadcast_shape

if TYPE_CHECKING:
    from tg.core.tensor import Tensor


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(v)
    if len(t) != 2:
        raise ValueError(f"[core] expected an int or a pair, got {v!r}")
    return (int(t[0]), int(t[1]))


def _check_ndim(name: str, *operands: tuple[Tensor, int]) -> None:
    for t, n in operands:
        if t.ndim != n:
            shapes = ", ".join(str(o.shape) for o, _ in operands)
            raise ValueError(f"[core] {name}: expected operands of {', '.join(str(k) for _, k in operands)} "
                             f"dims, got shapes {shapes}")


def _scaled_sum(base: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    """beta * base + alpha * product, with torch's rule that beta=0 ignores base (even its NaNs)."""
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return product
    return (base if beta == 1 else base * beta) + product


class NNMixin:
    __slots__ = ()

    @autocast_op
    def dot(self: Tensor, w: Tensor) -> Tensor:
        """matmul() under another name (so, unlike torch.dot, not only for 1-d tensors).

            >>> Tensor([1, 2, 3]).dot(Tensor([4, 5, 6])).item()
            32
        """
        return self.matmul(w)

    @autocast_op
    def matmul(self: Tensor, w: Tensor) -> Tensor:
        """Batched matmul with torch's broadcasting: (..., n, k) @ (..., k, m) -> (..., n, m); a 1-d
        operand counts as a row (left) or column (right) vector, and its dim is dropped from the result.

            >>> Tensor([[1, 2], [3, 4]]).matmul(Tensor([[5], [6]])).tolist()
            [[17], [39]]
            >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([1, 1])).tolist()
            [3, 7]
            >>> (Tensor.ones(5, 2, 3) @ Tensor.ones(3, 4)).shape
            (5, 2, 4)
        """
        x = self
        if not isinstance(w, Tensor):
            w = self._to_tensor(w)
        if x.ndim == 0 or w.ndim == 0:
            raise ValueError(f"[core] matmul: both operands need at least 1 dim, got {x.shape} and {w.shape}")
        if x.shape[-1] != w.shape[-2 if w.ndim > 1 else -1]:
            raise ValueError(f"[core] matmul: shapes {x.shape} and {w.shape} do not align "
                             f"({x.shape[-1]} != {w.shape[-2 if w.ndim > 1 else -1]})")
        try:
            broadcast_shape(x.shape[:-2], w.shape[:-2])
        except ValueError:
            raise ValueError(
                f"[core] matmul: batch dims of {x.shape} and {w.shape} cannot broadcast"
            ) from None
        dt = promote_types(x.dtype, w.dtype)
        x, w = x.cast(dt), w.cast(dt)
        if w.ndim == 2 and x.ndim > 2:
            # (..., n, k) @ (k, m): one 2-d matmul; broadcasting w over the batch would make its
            # gradient a per-batch product followed by a second sum
            return x.reshape(-1, x.shape[-1]).matmul(w).reshape(*x.shape[:-1], w.shape[-1])
        x1, w1 = x.ndim == 1, w.ndim == 1
        if x1:
            x = x.reshape(1, -1)
        if w1:
            w = w.reshape(-1, 1)
        batch = broadcast_shape(x.shape[:-2], w.shape[:-2])
        n, k, m = x.shape[-2], x.shape[-1], w.shape[-1]
        out = apply(fused.Matmul, x._broadcast_to(batch + (n, k)), w._broadcast_to(batch + (k, m)))
        if x1:
            out = out.squeeze(-2)
        if w1:
            out = out.squeeze(-1)
        return out

    @autocast_op
    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """x @ weight.T + bias, with torch's weight layout (out_features, in_features).

            >>> w = Tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])      # 2 inputs -> 3 outputs
            >>> Tensor([[1.0, 2.0]]).linear(w, Tensor([0.0, 0.5, -1.0])).tolist()
            [[1.0, 3.5, 3.0]]
        """
        if weight.ndim != 2 or self.ndim == 0 or self.shape[-1] != weight.shape[1]:
            in_features = self.shape[-1] if self.ndim else "?"
            raise ValueError(
                f"[core] linear: input {self.shape} needs a weight of shape (out, {in_features}), "
                f"got {weight.shape}"
            )
        if self._fusable_with(weight, bias) and self.numel() > 0:
            return apply(fused.Linear, self, weight, *([bias] if bias is not None else []))
        out = self.matmul(weight.T)
        return out + bias if bias is not None else out

    def _fusable_with(self: Tensor, weight: Tensor, bias: Tensor | None) -> builtins.bool:
        """Whether a layer op (linear, conv2d) may run as its fused Function: the input a float, the
        weight (and bias, of weight.shape[:1]) of its dtype and device."""
        return (weight.dtype == self.dtype and weight.device == self.device and self.dtype.is_float
                and (bias is None or (bias.shape == weight.shape[:1] and bias.dtype == self.dtype
                                      and bias.device == self.device)))

    def sliding_windows(self: Tensor, kernel: tuple[builtins.int, ...], stride: tuple[builtins.int, ...],
                        dilation: tuple[builtins.int, ...]) -> Tensor:
        """Every window of the last len(kernel) dims, as movement ops over self (no copy):
        (..., *spatial) -> (..., *out_spatial, *kernel), as numpy's sliding_window_view with a stride
        and a dilation per dim; pooling and convolution read their windows through it.

            >>> x = Tensor.arange(5)
            >>> x.sliding_windows((2,), (2,), (1,)).tolist(), x.sliding_windows((2,), (1,), (2,)).tolist()
            ([[0, 1], [2, 3]], [[0, 2], [1, 3], [2, 4]])
        """
        nsp = len(kernel)
        spatial = self.shape[-nsp:]
        outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, stride, dilation)]
        if any(o <= 0 for o in outs):
            raise ValueError(f"[core] pooling window {kernel} (dilation {dilation}) is larger than the "
                             f"input {spatial}")
        lead = self.shape[:-nsp]
        x = self
        n = len(lead)
        if all(s >= k for k, s in zip(kernel, stride)) and all(d == 1 for d in dilation):
            # Windows that never overlap are a pad + reshape: no repeated reads, and a gradient
            # that is a reshape + shrink (no reduce) instead of a sum over repeats.
            x = x.pad(((0, 0),) * n + tuple((0, max(0, o * s - i)) for i, o, s in zip(spatial, outs, stride)))
            x = x.shrink(tuple((0, t) for t in lead) + tuple((0, o * s) for o, s in zip(outs, stride)))
            x = x.reshape(lead + tuple(v for o, s in zip(outs, stride) for v in (o, s)))
            x = x.shrink(
                tuple((0, t) for t in lead) + tuple(v for o, k in zip(outs, kernel) for v in ((0, o), (0, k)))
            )
            order = (
                tuple(range(n))
                + tuple(n + 2 * i for i in range(nsp))
                + tuple(n + 2 * i + 1 for i in range(nsp))
            )
            return x.permute(order)
        # Overlapping windows as a stack of k shifted, strided views: the gradient is then a sum
        # of shifted pads (one elementwise kernel) instead of a masked sum over repeats.
        views = []
        for offs in itertools.product(*[range(k) for k in kernel]):
            if all(s == 1 for s in stride):      # one shrink (indexing costs ~10x more to build)
                views.append(x.shrink(tuple((0, t) for t in lead) + tuple(
                    (off * d, off * d + o) for off, o, d in zip(offs, outs, dilation))))
                continue
            v = x
            for j, (off, o, s, d) in enumerate(zip(offs, outs, stride, dilation)):
                ax = n + j
                start = off * d
                idx = [slice(None)] * v.ndim
                idx[ax] = slice(start, start + (o - 1) * s + 1, s)
                v = v[tuple(idx)]
            views.append(v)
        # stacked ahead of the spatial dims so each window offset is a contiguous image
        win = Tensor.stack(views, dim=n)                                   # (..., prod(kernel), *outs)
        win = win.reshape(lead + tuple(kernel) + tuple(outs))
        return win.permute(tuple(range(n)) + tuple(n + nsp + i for i in range(nsp))
                           + tuple(n + i for i in range(nsp)))

    @autocast_op
    def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: builtins.int = 1) -> Tensor:
        """torch.nn.functional.conv2d: input (N, Cin, H, W), weight (Cout, Cin/groups, kh, kw), and
        stride, padding and dilation as ints or (h, w) pairs. As in torch, it is a cross-correlation
        (the kernel is not flipped).

            >>> x = Tensor.arange(9).reshape(1, 1, 3, 3).float()
            >>> x.conv2d(Tensor.ones(1, 1, 2, 2)).tolist()         # each output sums a 2x2 window
            [[[[8.0, 12.0], [20.0, 24.0]]]]
            >>> x.conv2d(Tensor.ones(4, 1, 3, 3), padding=1).shape
            (1, 4, 3, 3)
        """
        if self.ndim != 4 or weight.ndim != 4:
            raise ValueError(
                f"[core] conv2d: expected 4-d input and weight, got {self.shape} and {weight.shape}"
            )
        n, cin, _, _ = self.shape
        cout, cin_g, kh, kw = weight.shape
        if cin % groups or cout % groups or cin_g * groups != cin:
            raise ValueError(
                f"[core] conv2d: input has {cin} channels, weight expects {cin_g}*groups({groups}) "
                f"and {cout} outputs must divide by groups"
            )
        st, dl = _pair(stride), _pair(dilation)
        if isinstance(padding, str):
            raise ValueError("[core] conv2d: string padding is not supported; give ints")
        ph, pw = _pair(padding)
        if self._fusable_with(weight, bias) and self.numel() > 0 and weight.numel() > 0:
            hp, wp = self.shape[2] + 2 * ph, self.shape[3] + 2 * pw
            # else sliding_windows says the window is too large
            if hp > dl[0] * (kh - 1) and wp > dl[1] * (kw - 1):
                return apply(fused.Conv2d, self, weight, *([bias] if bias is not None else []), stride=st,
                             padding=(ph, pw), dilation=dl, groups=groups)
        x = self.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)))
        win = x.sliding_windows((kh, kw), st, dl)                           # (N, Cin, oh, ow, kh, kw)
        oh, ow = win.shape[2], win.shape[3]
        g, cout_g = groups, cout // groups
        win = win.reshape(n, g, 1, cin_g, oh, ow, kh, kw)
        w = weight.reshape(1, g, cout_g, cin_g, 1, 1, kh, kw)
        out = (win * w).sum((3, 6, 7), dtype=win.dtype)        # (N, G, Cout/G, 1, oh, ow, 1, 1)
        out = out.reshape(n, cout, oh, ow)
        return out + bias.reshape(1, cout, 1, 1) if bias is not None else out

    def max_pool2d(
        self: Tensor, kernel_size: Any = 2, stride: Any = None, padding: Any = 0, dilation: Any = 1
    ) -> Tensor:
        """The max over kernel_size windows of the last two dims (torch F.max_pool2d): stride defaults to
        the kernel size, and padding adds -inf (ints keep their dtype: the dtype's minimum).

            >>> Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d(2).tolist()
            [[[[5, 7], [13, 15]]]]
        """
        k = _pair(kernel_size)
        st = _pair(stride) if stride is not None else k
        ph, pw = _pair(padding)
        x = (
            self.pad(((0, 0),) * (self.ndim - 2) + ((ph, ph), (pw, pw)), value=min_value(self.dtype))
            if ph or pw
            else self
        )
        return x.sliding_windows(k, st, _pair(dilation)).amax((-2, -1))

    def avg_pool2d(self: Tensor, kernel_size: Any = 2, stride: Any = None, padding: Any = 0,
                   count_include_pad: builtins.bool = True) -> Tensor:
        """The mean over kernel_size windows of the last two dims (torch F.avg_pool2d): stride defaults to
        the kernel size; padding adds zeros, which count in the mean unless count_include_pad=False.

            >>> Tensor.arange(16).reshape(1, 1, 4, 4).float().avg_pool2d(2).tolist()
            [[[[2.5, 4.5], [10.5, 12.5]]]]
            >>> Tensor.ones(1, 2, 2).avg_pool2d(2, stride=1, padding=1).tolist()[0][0]
            [0.25, 0.5, 0.25]
        """
        k = _pair(kernel_size)
        st = _pair(stride) if stride is not None else k
        ph, pw = _pair(padding)
        pad_arg = ((0, 0),) * (self.ndim - 2) + ((ph, ph), (pw, pw))
        x = self.pad(pad_arg) if ph or pw else self
        sums = x.sliding_windows(k, st, (1, 1)).sum((-2, -1))
        if count_include_pad or not (ph or pw):
            return sums / (k[0] * k[1])
        ones = Tensor.ones(*self.shape[-2:], device=self.device).pad(((ph, ph), (pw, pw)))
        counts = ones.sliding_windows(k, st, (1, 1)).sum((-2, -1))
        return sums / counts

    def diag_embed(self: Tensor, offset: builtins.int = 0, dim1: builtins.int = -2,
                   dim2: builtins.int = -1) -> Tensor:
        """Each last-dim vector put on the `offset` diagonal of a matrix in dims (dim1, dim2) of the result.

            >>> Tensor([[1, 2]]).diag_embed().tolist()
            [[[1, 0], [0, 2]]]
        """
        n, k = self.shape[-1], abs(offset)
        out = self.unsqueeze(-1) * Tensor.eye(n, dtype=self.dtype, device=self.device)
        lead = ((0, 0),) * (self.ndim - 1)
        out = out.pad(lead + (((0, k), (k, 0)) if offset > 0 else ((k, 0), (0, k)))) if k else out
        return out.movedim((-2, -1), (dim1, dim2))

    def outer(self: Tensor, vec2: Tensor) -> Tensor:
        """The outer product of two 1-d tensors: out[i][j] = self[i] * vec2[j].

            >>> Tensor([1, 2]).outer(Tensor([1, 10])).tolist()
            [[1, 10], [2, 20]]
        """
        return self.reshape(-1, 1) * vec2.reshape(1, -1)
    ger = outer

    def kron(self: Tensor, other: Tensor) -> Tensor:
        """The Kronecker product: blocks self[i, j] * other (any number of dims).

            >>> Tensor([[1, 2]]).kron(Tensor([[1], [10]])).tolist()
            [[1, 2], [10, 20]]
        """
        n = builtins.max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + self.shape)
        b = other.reshape((1,) * (n - other.ndim) + other.shape)
        a = a.reshape(tuple(itertools.chain.from_iterable((s, 1) for s in a.shape)))
        b = b.reshape(tuple(itertools.chain.from_iterable((1, s) for s in b.shape)))
        return (a * b).reshape(tuple(x * y for x, y in zip(a.shape[::2], b.shape[1::2])))

    @autocast_op
    def cross(self: Tensor, other: Tensor, dim: builtins.int | None = None) -> Tensor:
        """The 3-d cross product along dim (the first dim of size 3 when None, as torch.cross).

            >>> Tensor([1.0, 0.0, 0.0]).cross(Tensor([0.0, 1.0, 0.0])).tolist()
            [0.0, 0.0, 1.0]
        """
        a, b = self._broadcasted(other)
        d = next((i for i, s in enumerate(a.shape) if s == 3), None) if dim is None else a._axis(dim)
        if d is None or a.shape[d] != 3:
            raise ValueError(f"[core] cross: dim {dim} of shape {a.shape} must have size 3")
        x, y = a.unbind(d), b.unbind(d)
        parts = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]
        return Tensor.stack(parts, d)
    @autocast_op
    def mm(self: Tensor, mat2: Tensor) -> Tensor:
        """The product of two 2-d tensors.

            >>> Tensor([[1, 2]]).mm(Tensor([[3], [4]])).tolist()
            [[11]]
        """
        _check_ndim("mm", (self, 2), (mat2, 2))
        return self.matmul(mat2)

    @autocast_op
    def mv(self: Tensor, vec: Tensor) -> Tensor:
        """A 2-d tensor times a 1-d one.

            >>> Tensor([[1, 2], [3, 4]]).mv(Tensor([1, 1])).tolist()
            [3, 7]
        """
        _check_ndim("mv", (self, 2), (vec, 1))
        return self.matmul(vec)

    @autocast_op
    def bmm(self: Tensor, mat2: Tensor) -> Tensor:
        """A batch of matrix products: (b, n, k) @ (b, k, m).

            >>> Tensor.ones(2, 1, 3).bmm(Tensor.ones(2, 3, 1)).tolist()
            [[[3.0]], [[3.0]]]
        """
        _check_ndim("bmm", (self, 3), (mat2, 3))
        return self.matmul(mat2)

    @autocast_op
    def addmm(self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (mat1 @ mat2), self broadcasting (beta=0 ignores self).

            >>> Tensor([1, 1]).addmm(Tensor([[1, 2]]), Tensor([[1, 0], [0, 1]])).tolist()
            [[2, 3]]
        """
        _check_ndim("addmm", (mat1, 2), (mat2, 2))
        return _scaled_sum(self, mat1.matmul(mat2), beta, alpha)

    @autocast_op
    def addmv(self: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (mat @ vec).

            >>> Tensor([1, 1]).addmv(Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
            [4, 8]
        """
        _check_ndim("addmv", (mat, 2), (vec, 1))
        return _scaled_sum(self, mat.matmul(vec), beta, alpha)

    @autocast_op
    def baddbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (batch1 @ batch2) for batches of matrices.

            >>> Tensor.zeros(1, 1, 1).baddbmm(Tensor.ones(1, 1, 2), Tensor.ones(1, 2, 1), alpha=2).tolist()
            [[[4.0]]]
        """
        _check_ndim("baddbmm", (batch1, 3), (batch2, 3))
        return _scaled_sum(self, batch1.matmul(batch2), beta, alpha)

    def inner(self: Tensor, other: Tensor) -> Tensor:
        """Sums of products over the last dims: the result has self's other dims then other's.

            >>> Tensor([[1, 2], [3, 4]]).inner(Tensor([1, 1])).tolist()
            [3, 7]
        """
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        k = self.shape[-1]
        out = self.reshape(-1, k).matmul(other.reshape(-1, k).transpose(0, 1))
        return out.reshape(self.shape[:-1] + other.shape[:-1])

    @autocast_op
    def vdot(self: Tensor, other: Tensor) -> Tensor:
        """The dot product of two 1-d tensors.

            >>> Tensor([1, 2]).vdot(Tensor([3, 4])).item()
            11
        """
        _check_ndim("vdot", (self, 1), (other, 1))
        return self.matmul(other)
