"""Functional nn ops with torch.nn.functional names, one module per concern: activation.py, basic.py
(linear, einsum, dropout, distances, one_hot, embedding, attention), conv.py (padding, convolutions),
pool.py (pooling, resizing), norm.py, loss.py; checks.py holds the argument checks they share.

Every op is a composition of Tensor methods, so autograd differentiates it with no gradient
written here. Inputs are checked at the call, before any kernel is built.

    >>> from tg import Tensor
    >>> import tg.nn.functional as F
    >>> F.mse_loss(Tensor([1.0, 2.0]), Tensor([1.0, 4.0])).item()
    2.0
    >>> round(F.cross_entropy(Tensor([[0.0, 0.0]]), Tensor([1])).item(), 4)     # log 2
    0.6931
"""
# ruff: noqa: F401  (the names below are this package's public surface, re-exported)
from tg.nn.functional.activation import (
    celu,
    elu,
    gelu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softplus,
    softsign,
    tanh,
    tanhshrink,
)
from tg.nn.functional.basic import (
    cosine_similarity,
    dropout,
    dropout2d,
    einsum,
    embedding,
    linear,
    normalize,
    one_hot,
    pairwise_distance,
    scaled_dot_product_attention,
)
from tg.nn.functional.checks import REDUCTIONS, finfo_eps
from tg.nn.functional.conv import (
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    pad,
)
from tg.nn.functional.loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cross_entropy,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from tg.nn.functional.norm import batch_norm, group_norm, layer_norm, rms_norm
from tg.nn.functional.pool import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    interpolate,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    pixel_shuffle,
    pixel_unshuffle,
)

