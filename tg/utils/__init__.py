"""torch.utils's place in tg: `tg.utils.data` (datasets and loaders) and `tg.utils.checkpoint`
(activation checkpointing), so a ported script's imports keep their torch paths."""
import importlib
from typing import Any

_SUBMODULES = ("data", "checkpoint")


def __getattr__(name: str) -> Any:
    # lazy, as torch.utils.data after `import torch`: `tg.utils.data` loads on first use
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
