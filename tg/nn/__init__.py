"""tg.nn: layers with torch.nn names, functional ops, optimizers and state dicts.

    >>> from tg import Tensor, nn
    >>> model = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 2))
    >>> opt = nn.optim.Adam(model.parameters(), lr=1e-3)
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
from tg.nn.module import Module, ModuleDict, ModuleList, Parameter

__all__ = ["functional", "optim", "state", "Module", "Parameter", "ModuleList", "ModuleDict", "Linear",
           "Conv2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "RMSNorm", "GroupNorm", "Embedding",
           "Dropout", "Sequential"]
