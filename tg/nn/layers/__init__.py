"""Layers with torch.nn names and default initialisations: nn.Modules whose parameters are Tensors with
requires_grad=True and whose buffers are running statistics.

The math lives in tg.nn.functional; a layer holds state, checks its input and calls it. One module per
concern: basic.py (Linear, Embedding, Dropout, Sequential), conv.py (convolutions, padding), norm.py,
activation.py, pool.py (pooling, resizing), loss.py.

    >>> from tg import Tensor
    >>> model = Sequential(Linear(3, 4), Tensor.relu, Linear(4, 2))
    >>> model(Tensor.ones(5, 3)).shape
    (5, 2)
"""
# ruff: noqa: F401  (the names below are this package's public surface, re-exported)
from tg.nn.layers.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    CosineSimilarity,
    Flatten,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    Identity,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PairwiseDistance,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Softsign,
    Tanh,
    Tanhshrink,
    Unflatten,
)
from tg.nn.layers.basic import Dropout, Dropout2d, Embedding, Linear, Sequential
from tg.nn.layers.conv import (
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
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from tg.nn.layers.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    MultiLabelSoftMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    TripletMarginLoss,
)
from tg.nn.layers.norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from tg.nn.layers.pool import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    PixelShuffle,
    PixelUnshuffle,
    Upsample,
)

