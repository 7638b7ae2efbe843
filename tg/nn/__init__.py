"""tg.nn: layers with torch.nn names, functional ops, optimizers and state dicts.

    >>> from tg import Tensor, nn
    >>> model = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 2))
    >>> opt = nn.optim.Adam(model.parameters(), lr=1e-3)
    >>> model(Tensor.ones(3, 4)).shape
    (3, 2)
"""
from tg.nn import functional, init, optim, state, utils
from tg.nn.layers import (
    ELU,
    GELU,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    BatchNorm1d,
    BatchNorm2d,
    BCELoss,
    BCEWithLogitsLoss,
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    CrossEntropyLoss,
    Dropout,
    Dropout2d,
    Embedding,
    Flatten,
    GroupNorm,
    HuberLoss,
    Identity,
    L1Loss,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    MSELoss,
    NLLLoss,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReLU,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    RMSNorm,
    Sequential,
    Sigmoid,
    SiLU,
    SmoothL1Loss,
    Softmax,
    Softplus,
    Tanh,
    Unflatten,
    Upsample,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from tg.nn.module import Module, ModuleDict, ModuleList, Parameter

__all__ = ["functional", "init", "optim", "state", "utils", "Module", "Parameter", "ModuleList",
           "ModuleDict", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d",
           "LayerNorm", "RMSNorm", "GroupNorm", "Embedding",
           "Dropout", "Dropout2d", "Sequential", "Identity", "ReLU", "LeakyReLU", "ELU", "GELU", "SiLU",
           "Tanh", "Sigmoid", "Softplus", "Softmax", "LogSoftmax", "Flatten", "Unflatten", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Upsample", "Conv3d", "ConvTranspose1d", "ConvTranspose3d",
           "MaxPool1d", "MaxPool3d", "AvgPool1d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ZeroPad1d", "ZeroPad2d",
           "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
           "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss", "NLLLoss",
           "CrossEntropyLoss"]


def __getattr__(name: str) -> object:
    """tg.nn.parallel loads on first use: it sits on tg.distributed, which tg.nn does not import."""
    if name == "parallel":
        import importlib
        return importlib.import_module("tg.nn.parallel")
    raise AttributeError(f"module 'tg.nn' has no attribute {name!r}")
