"""tg.nn: layers, optimizers and state dicts, built on tg.core's Tensor (see the autograd/nn issue)."""
