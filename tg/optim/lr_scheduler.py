"""tg.optim.lr_scheduler: the learning-rate schedules, torch's module path (written in tg.nn.optim).
Each sets every parameter group's lr from that group's own base lr.

    >>> from tg import Tensor
    >>> from tg.optim import SGD
    >>> opt = SGD([{"params": [Tensor.zeros(1)]}, {"params": [Tensor.zeros(1)], "lr": 0.1}], lr=1.0)
    >>> sched = ExponentialLR(opt, gamma=0.5)
    >>> sched.step(); sched.get_last_lr()
    [0.5, 0.05]
"""
from tg.nn.optim import (
    CosineAnnealingLR,
    CosineWithWarmup,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiStepLR,
    StepLR,
)

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "LinearLR",
           "CosineAnnealingLR", "CosineWithWarmup"]
