"""torch.nn.parallel's path in tg: `DistributedDataParallel` with torch's arguments, which lives in the
distributed layer (tg/distributed/parallel.py) and loads on first use, so that tg.nn loads none of it.

    from tg.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    model.module.state_dict()          # the wrapped model, as in torch
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "DistributedDataParallel":
        from tg.distributed.parallel import DistributedDataParallel
        return DistributedDataParallel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
