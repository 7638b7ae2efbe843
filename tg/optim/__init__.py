"""tg.optim: the optimizers, torch's module path (they are written in tg.nn.optim, which stays).

    >>> import tg.optim
    >>> from tg import Tensor
    >>> w, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    >>> opt = tg.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    >>> sched = tg.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    >>> sched.step(); [g["lr"] for g in opt.param_groups]
    [0.05, 0.25]
"""
from tg.nn.lbfgs import LBFGS
from tg.nn.optim import SGD, Adadelta, Adagrad, Adam, AdamW, Optimizer, ParamGroup, RMSprop, clip_grad_norm_
from tg.optim import lr_scheduler

__all__ = ["Optimizer", "ParamGroup", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "LBFGS",
           "clip_grad_norm_", "lr_scheduler"]
