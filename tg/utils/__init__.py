"""torch.utils's place in tg: `tg.utils.data` (datasets and loaders), `tg.utils.checkpoint`
(activation checkpointing) and `tg.utils.tensorboard` (SummaryWriter), so a ported script's imports keep
their torch paths; and tg's own `tg.utils.flops` (the machine's peak, for MFU), `tg.utils.plot` (training
curves) and `tg.utils.progress` (a progress bar)."""
import importlib
from typing import Any

_SUBMODULES = ("data", "checkpoint", "tensorboard", "flops", "plot", "progress")


def __getattr__(name: str) -> Any:
    # lazy, as torch.utils.data after `import torch`: `tg.utils.data` loads on first use
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
