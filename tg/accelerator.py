"""torch.accelerator (torch 2.6+): the machine's accelerator, whatever its kind, for device-agnostic
scripts (`device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else
"cpu"`). tg's accelerators are its GPU devices: CUDA where an NVIDIA GPU is usable, else OpenCL (CL)
where OpenCL finds a GPU. OpenCL on a CPU (PoCL) is not one: without a GPU there is no accelerator, as
in torch.

    >>> import tg
    >>> tg.accelerator.is_available() == (tg.accelerator.current_accelerator() is not None)
    True
"""
from __future__ import annotations

from typing import Any

from tg import config
from tg.core.device import Device, split_device
from tg.namespace import device


def _kind() -> str | None:
    """CUDA when usable, else CL when its devices are GPUs, else None."""
    if Device.count("CUDA") > 0:
        return "CUDA"
    if Device.count("CL") > 0 and Device["CL"].is_gpu:
        return "CL"
    return None


def current_accelerator(check_available: bool = False) -> device | None:
    """The accelerator's device type (tg.device("cuda") or tg.device("cl")), or None where there is
    none. `check_available` is accepted for torch's signature (an accelerator found here is usable)."""
    kind = _kind()
    return None if kind is None else device(kind.lower())


def is_available() -> bool:
    """Whether the machine has an accelerator tg can use."""
    return _kind() is not None


def device_count() -> int:
    """How many devices the accelerator has (0 without one)."""
    kind = _kind()
    return 0 if kind is None else Device.count(kind)


def current_device_index() -> int:
    """The index of this process's accelerator device: the default device's when it is of the
    accelerator's kind (tglaunch gives each rank its own), else 0."""
    kind, index = split_device(Device.DEFAULT)
    return (index or 0) if kind == _kind() else 0


def set_device_index(index: Any) -> None:
    """Make accelerator device `index` this process's default device (as TG_DEVICE=KIND:N)."""
    kind = _kind()
    if kind is None:
        raise RuntimeError("[accelerator] set_device_index: this machine has no accelerator (no usable "
                           "CUDA GPU, no OpenCL GPU); run on the CPU")
    config.export("TG_DEVICE", Device[f"{kind}:{int(index)}"].name)


def synchronize(device_index: Any = None) -> None:
    """Wait until the accelerator device has run everything queued on it (nothing to wait for without
    one)."""
    kind = _kind()
    if kind is not None:
        index = current_device_index() if device_index is None else int(device_index)
        Device[f"{kind}:{index}"].synchronize()
