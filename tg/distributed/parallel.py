"""torch.nn.parallel's DistributedDataParallel: torch's arguments on tg.distributed.DistributedDataParallel
(tg/distributed/ddp.py). `tg.nn.parallel` is its torch path, loaded on first use.

    from tg.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    model.module.state_dict()          # the wrapped model, as in torch
"""
from __future__ import annotations

from typing import Any

from tg.distributed import ddp as _ddp
from tg.nn.state import get_state_dict
from tg.utils.warn import warn_once


def _index(device: Any) -> str | None:
    """The device number in an id torch scripts pass: 0, "cuda:0", "0", a torch.device-like object."""
    if device is None:
        return None
    index = getattr(device, "index", device)
    text = str(index if index is not None else device)
    return text.rpartition(":")[2] if ":" in text else text


def _on(device: str, wanted: Any) -> bool:
    """Whether the module's device (tg's name, e.g. "CUDA:1", "CPU") is the device id `wanted`."""
    name, _, number = device.upper().partition(":")
    if name in ("CPU", "NUMPY", "CLANG", "NULL"):     # host devices: a device id never names them
        return False
    return _index(wanted) == (number or "0")


class DistributedDataParallel(_ddp.DistributedDataParallel):
    """torch.nn.parallel.DistributedDataParallel's signature over tg's DistributedDataParallel.

    What the arguments do in tg:
    - `device_ids`, `output_device`: accepted. tg puts each rank on its device by LOCAL_RANK
      (TG_DEVICE), and the module's tensors decide where it runs; when they name another device a
      warning says so once.
    - `broadcast_buffers`: as torch: rank 0's buffers (BatchNorm statistics) are copied to every rank
      before each forward outside tg.no_grad().
    - `process_group`, `bucket_cap_mb` (default 25): tg's `group`, `bucket_mb`.
    - `find_unused_parameters`, `gradient_as_bucket_view`, `static_graph`: tg always behaves so (a
      parameter without a gradient gets the mean of the others'; averages are written into the
      gradients' own memory), so they change nothing.
    - `dim`, `check_reduction`, `mixed_precision`, `device_mesh` and the rest: accepted, no effect
      (a warning says so once when set).

    >>> from tg import Tensor, nn
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> model = DistributedDataParallel(nn.Linear(3, 1), device_ids=None)
    >>> _ = model(Tensor.ones(4, 3)).sum().backward()
    >>> model.module.weight.grad.tolist()
    [[4.0, 4.0, 4.0]]
    >>> dist.destroy_process_group()
    """

    def __init__(self, module: Any, device_ids: list[Any] | None = None, output_device: Any = None,
                 dim: int = 0, broadcast_buffers: bool = True, process_group: Any = None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False, **unused: Any):
        bucket_mb = 25.0 if bucket_cap_mb is None else bucket_cap_mb
        super().__init__(module, bucket_mb=bucket_mb, group=process_group)
        device = str(self.params[0].device)
        asked = [*(device_ids or []), *([] if output_device is None else [output_device])]
        if any(not _on(device, d) for d in asked):
            warn_once("ddp-device-ids", f"[distributed] DistributedDataParallel: device_ids="
                           f"{device_ids}, output_device={output_device} are ignored; the module's tensors "
                           f"are on {device}. tg puts each rank on its device by LOCAL_RANK (TG_DEVICE) and "
                           "runs the module where its tensors are. Fix: leave them out, or move the module "
                           "first")
        ignored = {"dim": dim != 0, "check_reduction": check_reduction,
                   **{k: v is not None and v is not False for k, v in unused.items()}}
        for name in [k for k, used in ignored.items() if used]:
            warn_once(f"ddp-{name}", f"[distributed] DistributedDataParallel: {name} is accepted and "
                           "has no effect in tg")
        trained = {id(p) for p in self.params}     # the rest (buffers, frozen weights) follows rank 0
        self.buffers = [t for t in get_state_dict(module).values() if id(t) not in trained]
        self.broadcast_buffers = broadcast_buffers

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tg.core.tensor import Tensor
        if self.broadcast_buffers and self.buffers and self.world_size > 1 and not Tensor.no_grad:
            import tg.distributed as dist
            for t in self.buffers:
                dist.broadcast(t, 0, self.group)
        return self.module(*args, **kwargs)
