"""Linear, Embedding, Dropout, Sequential, and the initialisation and argument helpers the other layers
share."""
from __future__ import annotations

import math
import types
from typing import Callable, Iterator

from tg.core.dtype import DType
from tg.core.tensor import Tensor
from tg.nn import functional as F
from tg.nn.functional.checks import _check_p
from tg.nn.module import Module
from tg.nn.state import get_state_dict


def _describe(layer: Callable[[Tensor], Tensor]) -> str:
    return repr(layer) if isinstance(layer, Module) else getattr(layer, "__name__", repr(layer))


_STATELESS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType)


def _uniform(shape: tuple[int, ...], bound: float, device: str | None, dtype: DType | str | None) -> Tensor:
    """U(-bound, bound) with bound = 1/sqrt(fan_in): torch's kaiming_uniform_(a=sqrt(5)) for weights,
    and its rule for biases."""
    return Tensor.uniform(*shape, low=-bound, high=bound, device=device, dtype=dtype, requires_grad=True)


def _fan_in_bound(fan_in: int) -> float:
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _positive(layer: str, **sizes: int) -> None:
    for name, size in sizes.items():
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"[nn] {layer}: expected {name} to be a positive int, got {size!r}")


class Linear(Module):
    """y = x @ weight.T + bias over the last dim. weight (out_features, in_features) and bias (out_features,)
    start from U(-1/sqrt(in_features), 1/sqrt(in_features)), as torch.

        >>> layer = Linear(3, 2)
        >>> layer(Tensor.ones(5, 7, 3)).shape, layer.weight.shape, layer.bias.shape
        ((5, 7, 2), (2, 3), (2,))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        bound = _fan_in_bound(in_features)
        self.weight = _uniform((out_features, in_features), bound, device, dtype)
        self.bias = _uniform((out_features,), bound, device, dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"[nn] Linear: expected input of shape (..., {self.in_features}) (in_features), "
                             f"got {x.shape}")
        return x.linear(self.weight, self.bias)                           # (..., out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table: integer indices of any shape -> (*shape, embedding_dim). weight starts N(0, 1).

        >>> table = Embedding(10, 4)
        >>> table(Tensor([[1, 2, 3]])).shape, table.weight.shape
        ((1, 3, 4), (10, 4))
        >>> table(Tensor([7]))[0].tolist() == table.weight[7].tolist()
        True
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None,
                 dtype: DType | str | None = None):
        super().__init__()
        _positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Tensor.randn(num_embeddings, embedding_dim, device=device, dtype=dtype,
                                   requires_grad=True)

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight)


class Dropout(Module):
    """Zero each element with probability p and scale the rest by 1/(1-p) while self.training (True
    from construction, as torch's; set by train()/eval()); the identity otherwise.

        >>> Dropout(0.5).eval()(Tensor([1.0, 2.0])).tolist()
        [1.0, 2.0]
        >>> kept = set(Dropout(0.5)(Tensor.ones(100)).tolist())
        >>> kept <= {0.0, 2.0}                                            # dropped, or scaled by 1/(1-p)
        True
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        _check_p("Dropout", p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)


class Dropout2d(Module):
    """Zero whole channels of (N, C, H, W) or (C, H, W) with probability p while self.training, scaling the
    kept ones by 1/(1-p); the identity otherwise.

        >>> y = Dropout2d(0.5).train()(Tensor.ones(4, 6, 3, 3)).reshape(24, 9)
        >>> bool((y.amax(1) == y.amin(1)).all())                          # each channel kept or dropped
        True
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        _check_p("Dropout2d", p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout2d(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Sequential(Module):
    """Calls its layers in order; layers[i] is the i-th. Modules among them are submodules named by
    their index, as torch (`0.weight`); a function such as Tensor.relu takes an index but has no state.

        >>> model = Sequential(Linear(2, 3), Tensor.relu, Linear(3, 1))
        >>> model(Tensor.ones(4, 2)).shape, len(model), model[2].weight.shape
        ((4, 1), 3, (1, 3))
        >>> list(model.state_dict())
        ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    _layers: list[Callable[[Tensor], Tensor]]

    def __init__(self, *layers: Callable[[Tensor], Tensor]):
        super().__init__()
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"[nn] Sequential: expected callable layers, got a {type(layer).__name__} "
                                f"at position {i}")
            if isinstance(layer, Module):
                self.add_module(str(i), layer)
            elif not isinstance(layer, _STATELESS) and get_state_dict(layer):
                raise TypeError(f"[nn] Sequential: layer {i} (a {type(layer).__name__}) holds Tensors but is "
                                f"not an nn.Module, so parameters() and state_dict() would miss them; fix: "
                                f"make {type(layer).__name__} subclass tg.nn.Module (call super().__init__() "
                                f"first, rename __call__ to forward)")
        object.__setattr__(self, "_layers", list(layers))   # a plain list: call order, functions too

    @property
    def layers(self) -> list[Callable[[Tensor], Tensor]]:
        """The layers, functions included, in call order."""
        return list(self._layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self._layers:
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Callable[[Tensor], Tensor]:
        return self._layers[i]

    def __len__(self) -> int:
        return len(self._layers)

    def __iter__(self) -> Iterator[Callable[[Tensor], Tensor]]:
        return iter(self._layers)

    def _repr_children(self) -> list[tuple[str, str]]:
        return [(str(i), _describe(layer))
                for i, layer in enumerate(self._layers)]
