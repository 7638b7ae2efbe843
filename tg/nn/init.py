"""tg.nn.init: torch.nn.init's initialisers. Each writes new values into the tensor it is given with
Tensor.assign (the same object, so a Module and an optimizer keep holding it) and returns that tensor.
Random ones draw from tg's generator (Tensor.manual_seed), on the tensor's device, in its dtype; no
gradient is recorded.

Fans follow torch: for a weight (out, in, *kernel), fan_in = in * prod(kernel), fan_out = out * prod(kernel).

    >>> from tg import Tensor
    >>> from tg.nn import Linear, init
    >>> layer = Linear(3, 2)
    >>> w = layer.weight
    >>> init.zeros_(layer.weight) is w, layer.weight.tolist()
    (True, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
"""
from __future__ import annotations

import math

import numpy as np

from tg.core.tensor import NoGrad, Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "zeros_", "ones_", "eye_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_"]

_LINEAR_GAINS = ("linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                 "conv_transpose2d", "conv_transpose3d")


def _check_tensor(op: str, tensor: Tensor) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"[nn] init.{op}: expected a Tensor to fill in place, got {type(tensor).__name__}")


def _write(tensor: Tensor, value: Tensor | float) -> Tensor:
    """Write value (broadcast to tensor's shape) into tensor's memory, outside autograd; return tensor."""
    with NoGrad():
        if not isinstance(value, Tensor):
            value = Tensor.full(tensor.shape, value, device=tensor.device, dtype=tensor.dtype)
        tensor.assign(value.detach().expand(tensor.shape))
    return tensor


def _random_kw(tensor: Tensor) -> dict:
    return {"device": tensor.device, "dtype": tensor.dtype}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity, as torch: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2)
    for relu, sqrt(2 / (1 + a^2)) for leaky_relu with negative slope a (param, default 0.01), 3/4 for selu.

        >>> calculate_gain("relu") == math.sqrt(2), calculate_gain("tanh")
        (True, 1.6666666666666667)
        >>> round(calculate_gain("leaky_relu", math.sqrt(5)), 4)          # nn.Linear's default init
        0.5774
    """
    if nonlinearity in _LINEAR_GAINS:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "selu":
        return 3.0 / 4
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"[nn] init.calculate_gain: expected a number as leaky_relu's negative slope, "
                             f"got {slope!r}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"[nn] init.calculate_gain: expected one of {', '.join(_LINEAR_GAINS)}, tanh, relu, "
                     f"leaky_relu or selu, got {nonlinearity!r}")


def _fans(op: str, tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight (out, in, *kernel), as torch's _calculate_fan_in_and_fan_out."""
    _check_tensor(op, tensor)
    if tensor.ndim < 2:
        raise ValueError(f"[nn] init.{op}: expected a tensor of at least 2 dims (out, in, *kernel) to "
                         f"compute fan in and fan out, got shape {tensor.shape}; fix: use uniform_ or "
                         f"normal_")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with U(a, b) samples in place; returns tensor.

        >>> w = uniform_(Tensor.zeros(1000), -2.0, 2.0)
        >>> bool(((w >= -2) & (w < 2)).all())
        True
    """
    _check_tensor("uniform_", tensor)
    if not a <= b:
        raise ValueError(f"[nn] init.uniform_: expected a <= b, got a={a}, b={b}")
    return _write(tensor, Tensor.uniform(*tensor.shape, low=a, high=b, **_random_kw(tensor)))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with N(mean, std^2) samples in place; returns tensor.

        >>> Tensor.manual_seed(0)
        >>> w = normal_(Tensor.zeros(10000), 3.0, 0.5)
        >>> abs(w.mean().item() - 3.0) < 0.05, abs(w.std().item() - 0.5) < 0.05
        (True, True)
    """
    _check_tensor("normal_", tensor)
    if std < 0:
        raise ValueError(f"[nn] init.normal_: expected a non-negative std, got {std}")
    return _write(tensor, Tensor.normal(*tensor.shape, mean=mean, std=std, **_random_kw(tensor)))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0) -> Tensor:
    """Fill with N(mean, std^2) samples truncated to [a, b] (absolute bounds, as torch): values outside are
    drawn again until none is left, at most 16 times, and any left then (only for a window far in the
    tails) are clamped.

        >>> w = trunc_normal_(Tensor.zeros(1000), std=1.0, a=-0.5, b=0.5)
        >>> bool(((w >= -0.5) & (w <= 0.5)).all())
        True
    """
    _check_tensor("trunc_normal_", tensor)
    if not a < b or std < 0:
        raise ValueError(f"[nn] init.trunc_normal_: expected a < b and std >= 0, got a={a}, b={b}, std={std}")
    kw = _random_kw(tensor)
    with NoGrad():
        values = Tensor.normal(*tensor.shape, mean=mean, std=std, **kw).realize()
        for _ in range(16):
            outside = ((values < a) | (values > b)).realize()
            if not outside.any().item():
                break
            # realized each round: values is read twice, so an unrealized chain would double per round
            values = outside.where(Tensor.normal(*tensor.shape, mean=mean, std=std, **kw), values).realize()
        values = values.clamp(a, b)
    return _write(tensor, values)


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with val in place; returns tensor.

        >>> constant_(Tensor.zeros(2), 0.5).tolist()
        [0.5, 0.5]
    """
    _check_tensor("constant_", tensor)
    return _write(tensor, val)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0 in place; returns tensor.

        >>> zeros_(Tensor.ones(2)).tolist()
        [0.0, 0.0]
    """
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1 in place; returns tensor.

        >>> ones_(Tensor.zeros(2)).tolist()
        [1.0, 1.0]
    """
    return constant_(tensor, 1.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-d tensor with the identity (ones on the diagonal, also when not square); returns tensor.

        >>> eye_(Tensor.zeros(2, 3)).tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    _check_tensor("eye_", tensor)
    if tensor.ndim != 2:
        raise ValueError(f"[nn] init.eye_: expected a 2-d tensor, got shape {tensor.shape}")
    return _write(tensor, Tensor.eye(tensor.shape[0], tensor.shape[1], **_random_kw(tensor)))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot init: U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out)), in place.

        >>> w = xavier_uniform_(Tensor.zeros(30, 20))                     # bound sqrt(6 / 50) = 0.3464
        >>> bool((w.abs() <= math.sqrt(6 / 50)).all())
        True
    """
    fan_in, fan_out = _fans("xavier_uniform_", tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot init: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)), in place.

        >>> xavier_normal_(Tensor.zeros(30, 20, 3)).shape
        (30, 20, 3)
    """
    fan_in, fan_out = _fans("xavier_normal_", tensor)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return normal_(tensor, 0.0, std)


def _kaiming_std(op: str, tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    """gain / sqrt(fan), gain = calculate_gain(nonlinearity, a), fan per mode ('fan_in' or 'fan_out')."""
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"[nn] init.{op}: expected mode 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(op, tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu") -> Tensor:
    """He init: U(-bound, bound) with bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a),
    in place. a=sqrt(5) gives nn.Linear's default bound 1/sqrt(fan_in).

        >>> w = kaiming_uniform_(Tensor.zeros(4, 9), a=math.sqrt(5))       # bound 1/3
        >>> bool((w.abs() <= 1 / 3).all())
        True
    """
    std = _kaiming_std("kaiming_uniform_", tensor, a, mode, nonlinearity)
    return uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu") -> Tensor:
    """He init: N(0, std^2) with std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a), in place.

        >>> kaiming_normal_(Tensor.zeros(8, 4, 3, 3), mode="fan_out", nonlinearity="relu").shape
        (8, 4, 3, 3)
    """
    std = _kaiming_std("kaiming_normal_", tensor, a, mode, nonlinearity)
    return normal_(tensor, 0.0, std)


def orthogonal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """A (semi-)orthogonal matrix times gain, in place: the tensor viewed as (rows, numel / rows) has
    orthonormal rows or columns, whichever are fewer. From the QR of a Gaussian matrix drawn by tg's
    generator (the QR itself runs on the host, in numpy).

        >>> w = orthogonal_(Tensor.zeros(3, 5))
        >>> np.allclose(w.numpy() @ w.numpy().T, np.eye(3), atol=1e-5)
        True
    """
    _check_tensor("orthogonal_", tensor)
    if tensor.ndim < 2:
        raise ValueError(f"[nn] init.orthogonal_: expected a tensor of at least 2 dims, "
                         f"got shape {tensor.shape}")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    if tensor.numel() == 0:
        return tensor
    gaussian = Tensor.randn(rows, cols, device=tensor.device).numpy().astype(np.float64)
    tall = gaussian.T if rows < cols else gaussian                       # (max, min)
    q, r = np.linalg.qr(tall)
    q = q * np.sign(np.diag(r))                                           # unique: R's diagonal positive
    q = q.T if rows < cols else q
    value = Tensor((gain * q).reshape(tensor.shape).astype(np.float32), device=tensor.device)
    return _write(tensor, value)
