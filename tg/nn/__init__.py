"""tg.nn: layers with torch.nn names, functional ops, optimizers and state dicts.

    >>> from tg import Tensor, nn
    >>> model = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 2))
    >>> opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)
    >>> model(Tensor.ones(3, 4)).shape
    (3, 2)
"""
from tg.nn import functional, optim, state
from tg.nn.layers import (
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    GroupNorm,
    LayerNorm,
    Linear,
    RMSNorm,
    Sequential,
)

__all__ = ["functional", "optim", "state", "Linear", "Conv2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
           "RMSNorm", "GroupNorm", "Embedding", "Dropout", "Sequential"]
