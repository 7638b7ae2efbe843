"""Activations with torch.nn.functional's names: thin compositions of Tensor methods, each with an
`inplace` where torch has one."""
from __future__ import annotations

from tg.core.autocast import autocast_op
from tg.core.tensor import Tensor
from tg.nn.functional.checks import _check_float


def _in_place(name: str, x: Tensor, out: Tensor, inplace: bool) -> Tensor:
    """torch's inplace=True: x takes the result and is returned, recorded for autograd as Tensor's own
    in-place ops are (Tensor._write_in_place: a leaf that requires grad raises, as in torch); computations
    still pending on x's old values keep reading them."""
    if not inplace:
        return out
    return x._write_in_place(f"{name}(inplace=True)", lambda old: out)


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0) elementwise, as torch.nn.functional.relu.

        >>> relu(Tensor([-1.0, 0.0, 2.0])).tolist()
        [0.0, 0.0, 2.0]
    """
    return _in_place("relu", x, x.relu(), inplace)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (approximate='none', with erf) or its tanh approximation ('tanh'), as torch.

        >>> [round(v, 4) for v in gelu(Tensor([-1.0, 0.0, 1.0])).tolist()]
        [-0.1587, 0.0, 0.8413]
        >>> [round(v, 4) for v in gelu(Tensor([-1.0, 0.0, 1.0]), approximate="tanh").tolist()]
        [-0.1588, 0.0, 0.8412]
    """
    return x.gelu(approximate)


def silu(x: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (swish), as torch.nn.functional.silu.

        >>> [round(v, 4) for v in silu(Tensor([-1.0, 0.0, 1.0])).tolist()]
        [-0.2689, 0.0, 0.7311]
    """
    return _in_place("silu", x, x.silu(), inplace)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where positive, else x * negative_slope, as torch.nn.functional.leaky_relu.

        >>> leaky_relu(Tensor([-2.0, 3.0]), 0.5).tolist()
        [-1.0, 3.0]
    """
    return _in_place("leaky_relu", x, x.leaky_relu(negative_slope), inplace)


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where positive, else alpha * (exp(x) - 1), as torch.nn.functional.elu.

        >>> [round(v, 4) for v in elu(Tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """
    return _in_place("elu", x, x.elu(alpha), inplace)


@autocast_op
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as torch.

        >>> [round(v, 4) for v in softplus(Tensor([0.0, 30.0])).tolist()]
        [0.6931, 30.0]
    """
    return x.softplus(beta, threshold)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) elementwise, as torch.sigmoid.

        >>> sigmoid(Tensor([0.0])).tolist()
        [0.5]
    """
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent elementwise, as torch.tanh.

        >>> tanh(Tensor([0.0])).tolist()
        [0.0]
    """
    return x.tanh()


@autocast_op
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along dim (default the last; torch has no default).

        >>> [round(v, 4) for v in softmax(Tensor([0.0, 1.0, 2.0])).tolist()]
        [0.09, 0.2447, 0.6652]
        >>> [round(v, 4) for v in softmax(Tensor([[0.0, 0.0], [1.0, 1.0]]), dim=0)[:, 0].tolist()]
        [0.2689, 0.7311]
    """
    return x.softmax(dim)


@autocast_op
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along dim (default the last), computed stably.

        >>> [round(v, 4) for v in log_softmax(Tensor([0.0, 0.0])).tolist()]          # log(1/2)
        [-0.6931, -0.6931]
        >>> log_softmax(Tensor([0.0, 1000.0])).tolist()                            # no overflow
        [-1000.0, 0.0]
    """
    return x.log_softmax(dim)


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6) elementwise, as torch.nn.functional.relu6.

        >>> relu6(Tensor([-1.0, 3.0, 8.0])).tolist()
        [0.0, 3.0, 6.0]
    """
    return _in_place("relu6", x, x.hardtanh(0.0, 6.0), inplace)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val], as torch.nn.functional.hardtanh.

        >>> hardtanh(Tensor([-2.0, 0.5, 3.0]), -1.0, 2.0).tolist()
        [-1.0, 0.5, 2.0]
    """
    if min_val > max_val:
        raise ValueError(f"[nn] hardtanh: expected min_val <= max_val, got min_val={min_val}, "
                         f"max_val={max_val}")
    return _in_place("hardtanh", x, x.hardtanh(min_val, max_val), inplace)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """clamp(x / 6 + 1/2, 0, 1) elementwise, as torch.nn.functional.hardsigmoid.

        >>> hardsigmoid(Tensor([-4.0, 0.0, 4.0])).tolist()
        [0.0, 0.5, 1.0]
    """
    return _in_place("hardsigmoid", x, x.hardsigmoid(), inplace)


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """x * hardsigmoid(x) elementwise, as torch.nn.functional.hardswish.

        >>> hardswish(Tensor([-4.0, 0.0, 4.0])).tolist()
        [-0.0, 0.0, 4.0]
    """
    return _in_place("hardswish", x, x.hardswish(), inplace)


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with torch's constants (alpha 1.6733, scale 1.0507).

        >>> [round(v, 4) for v in selu(Tensor([-1.0, 2.0])).tolist()]
        [-1.1113, 2.1014]
    """
    return _in_place("selu", x, x.selu(), inplace)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where positive, else alpha * (exp(x / alpha) - 1), as torch.nn.functional.celu.

        >>> [round(v, 4) for v in celu(Tensor([-1.0, 2.0]), alpha=2.0).tolist()]
        [-0.7869, 2.0]
    """
    if alpha == 0:
        raise ValueError("[nn] celu: expected a nonzero alpha (it divides x), got 0")
    return _in_place("celu", x, x.celu(alpha), inplace)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x)) elementwise, as torch.nn.functional.mish.

        >>> [round(v, 4) for v in mish(Tensor([-1.0, 2.0])).tolist()]
        [-0.3034, 1.944]
    """
    return _in_place("mish", x, x.mish(), inplace)


def logsigmoid(x: Tensor) -> Tensor:
    """log(sigmoid(x)) elementwise, computed as min(x, 0) - log1p(exp(-|x|)) so that neither large
    positive nor large negative x loses precision (torch.nn.functional.logsigmoid).

        >>> [round(v, 4) for v in logsigmoid(Tensor([-200.0, 0.0, 30.0])).tolist()]
        [-200.0, -0.6931, -0.0]
    """
    _check_float("logsigmoid", x)
    return x.minimum(0.0) - (-x.abs()).exp().log1p()


def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|) elementwise, as torch.nn.functional.softsign.

        >>> softsign(Tensor([-3.0, 0.0, 1.0])).tolist()
        [-0.75, 0.0, 0.5]
    """
    return x / (1 + x.abs())


def tanhshrink(x: Tensor) -> Tensor:
    """x - tanh(x) elementwise, as torch.nn.functional.tanhshrink.

        >>> tanhshrink(Tensor([0.0])).tolist()
        [0.0]
    """
    return x - x.tanh()


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """The gated linear unit: a * sigmoid(b), where a and b are the two halves of x along dim.

        >>> glu(Tensor([[1.0, 2.0, 0.0, 0.0]])).tolist()
        [[0.5, 1.0]]
    """
    if x.ndim == 0:
        raise ValueError("[nn] glu: expected a tensor with at least one dim to halve, got a 0-d tensor")
    d = dim % x.ndim if -x.ndim <= dim < x.ndim else dim
    if not 0 <= d < x.ndim:
        raise IndexError(f"[nn] glu: dim {dim} is out of range for a tensor of shape {x.shape}")
    if x.shape[d] % 2:
        raise ValueError(f"[nn] glu: expected an even size along dim {dim} (it is halved), got shape "
                         f"{x.shape}")
    a, b = x.chunk(2, d)
    return a * b.sigmoid()
