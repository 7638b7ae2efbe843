"""Activation layers, softmax, similarities and reshapes (Flatten, Unflatten)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.module import Module


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments, as torch.

        >>> Identity(54, unused="x")(Tensor([1.0])).tolist()
        [1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class _Elementwise(Module):
    """A layer without parameters or options whose forward is `fn` of the input."""
    fn: Callable[[Tensor], Tensor]

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


class _ElementwiseInplace(_Elementwise):
    """An _Elementwise layer whose torch constructor takes `inplace`: accepted and ignored (the layer
    returns its result; F's functions take inplace=)."""

    def __init__(self, inplace: bool = False):
        super().__init__()


class ReLU(_ElementwiseInplace):
    """max(x, 0) elementwise (inplace is accepted and ignored: tg tensors are values).

        >>> ReLU()(Tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """

    fn = staticmethod(F.relu)


class LeakyReLU(Module):
    """x where positive, else negative_slope * x.

        >>> LeakyReLU(0.5)(Tensor([-1.0, 2.0])).tolist()
        [-0.5, 2.0]
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """x where positive, else alpha * (exp(x) - 1).

        >>> [round(v, 4) for v in ELU()(Tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class GELU(Module):
    """x * Phi(x) with erf (approximate='none') or torch's tanh approximation ('tanh').

        >>> [round(v, 4) for v in GELU(approximate="tanh")(Tensor([1.0])).tolist()]
        [0.8412]
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"[nn] GELU: expected approximate 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(_ElementwiseInplace):
    """x * sigmoid(x).

        >>> [round(v, 4) for v in SiLU()(Tensor([1.0])).tolist()]
        [0.7311]
    """

    fn = staticmethod(F.silu)


class Tanh(_Elementwise):
    """tanh(x) elementwise.

        >>> Tanh()(Tensor([0.0])).tolist()
        [0.0]
    """

    fn = staticmethod(F.tanh)


class Sigmoid(_Elementwise):
    """1 / (1 + exp(-x)) elementwise.

        >>> Sigmoid()(Tensor([0.0])).tolist()
        [0.5]
    """

    fn = staticmethod(F.sigmoid)


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, and x where beta * x > threshold.

        >>> [round(v, 4) for v in Softplus()(Tensor([0.0])).tolist()]
        [0.6931]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class ReLU6(_ElementwiseInplace):
    """min(max(x, 0), 6) elementwise (inplace is accepted and ignored, as ReLU).

        >>> ReLU6()(Tensor([-1.0, 3.0, 8.0])).tolist()
        [0.0, 3.0, 6.0]
    """

    fn = staticmethod(F.relu6)


class Hardtanh(Module):
    """x clamped to [min_val, max_val] (min_val > max_val is refused at the call, by F.hardtanh).

        >>> Hardtanh(-1.0, 2.0)(Tensor([-2.0, 0.5, 3.0])).tolist()
        [-1.0, 0.5, 2.0]
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Hardsigmoid(_ElementwiseInplace):
    """clamp(x / 6 + 1/2, 0, 1) elementwise.

        >>> Hardsigmoid()(Tensor([-4.0, 0.0, 4.0])).tolist()
        [0.0, 0.5, 1.0]
    """

    fn = staticmethod(F.hardsigmoid)


class Hardswish(_ElementwiseInplace):
    """x * hardsigmoid(x) elementwise.

        >>> Hardswish()(Tensor([-4.0, 1.0, 4.0])).tolist()
        [-0.0, 0.6666666865348816, 4.0]
    """

    fn = staticmethod(F.hardswish)


class SELU(_ElementwiseInplace):
    """scale * elu(x, alpha) with torch's fixed constants (alpha 1.6733, scale 1.0507).

        >>> [round(v, 4) for v in SELU()(Tensor([-1.0, 2.0])).tolist()]
        [-1.1113, 2.1014]
    """

    fn = staticmethod(F.selu)


class CELU(Module):
    """x where positive, else alpha * (exp(x / alpha) - 1).

        >>> [round(v, 4) for v in CELU(alpha=2.0)(Tensor([-1.0, 2.0])).tolist()]
        [-0.7869, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.celu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Mish(_ElementwiseInplace):
    """x * tanh(softplus(x)) elementwise.

        >>> [round(v, 4) for v in Mish()(Tensor([-1.0, 2.0])).tolist()]
        [-0.3034, 1.944]
    """

    fn = staticmethod(F.mish)


class LogSigmoid(_Elementwise):
    """log(sigmoid(x)) elementwise, stable for large |x|.

        >>> [round(v, 4) for v in LogSigmoid()(Tensor([-200.0, 0.0])).tolist()]
        [-200.0, -0.6931]
    """

    fn = staticmethod(F.logsigmoid)


class Softsign(_Elementwise):
    """x / (1 + |x|) elementwise.

        >>> Softsign()(Tensor([-3.0, 1.0])).tolist()
        [-0.75, 0.5]
    """

    fn = staticmethod(F.softsign)


class Tanhshrink(_Elementwise):
    """x - tanh(x) elementwise.

        >>> [round(v, 4) for v in Tanhshrink()(Tensor([0.0, 1.0])).tolist()]
        [0.0, 0.2384]
    """

    fn = staticmethod(F.tanhshrink)


class GLU(Module):
    """a * sigmoid(b), where a and b are the two halves of the input along dim (its size there must be even).

        >>> GLU()(Tensor([[1.0, 2.0, 0.0, 0.0]])).tolist()
        [[0.5, 1.0]]
    """

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def _softmax_dim(dim: int | None, x: Tensor) -> int:
    """torch's implicit dim for dim=None (deprecated there): 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is not None:
        return dim
    return 0 if x.ndim in (0, 1, 3) else 1


class Softmax(Module):
    """exp(x) / sum(exp(x)) along dim. Give dim: dim=None takes torch's legacy rule (0 for 0-, 1- and 3-d
    inputs, else 1), which is rarely the class dim you mean.

        >>> [round(v, 4) for v in Softmax(dim=-1)(Tensor([[0.0, 1.0]]))[0].tolist()]
        [0.2689, 0.7311]
    """

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, _softmax_dim(self.dim, x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """x - logsumexp(x) along dim (dim=None: torch's legacy rule, as Softmax).

        >>> [round(v, 4) for v in LogSoftmax(dim=1)(Tensor([[0.0, 0.0]]))[0].tolist()]
        [-0.6931, -0.6931]
    """

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, _softmax_dim(self.dim, x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class CosineSimilarity(Module):
    """The cosine of the angle between x1 and x2 along dim, each norm clamped to at least eps.

        >>> CosineSimilarity()(Tensor([[1.0, 0.0]]), Tensor([[2.0, 0.0]])).tolist()
        [1.0]
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"


class PairwiseDistance(Module):
    """The p-norm of x1 - x2 + eps over the last dim.

        >>> [round(v, 4) for v in PairwiseDistance()(Tensor([[0.0, 0.0]]), Tensor([[3.0, 4.0]])).tolist()]
        [5.0]
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim     # torch's attribute name for p

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)

    def extra_repr(self) -> str:
        return f"p={self.norm}, eps={self.eps}, keepdim={self.keepdim}"


class Flatten(Module):
    """Merge dims start_dim..end_dim into one (by default all but the batch dim).

        >>> Flatten()(Tensor.ones(2, 3, 4, 5)).shape
        (2, 60)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim into unflattened_size (one entry may be -1).

        >>> Unflatten(1, (3, 4))(Tensor.ones(2, 12)).shape
        (2, 3, 4)
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
