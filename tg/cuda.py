"""torch.cuda's questions, answered for tg's CUDA devices (`import tg as torch`: `torch.cuda.is_available()`,
`device_count()`, `set_device(i)`, `synchronize()`, ...). tg opens CUDA through cuda-python (the `cuda`
extra). Where no NVIDIA GPU and driver are usable, is_available() is False and device_count() 0, so the
usual `device = "cuda" if torch.cuda.is_available() else "cpu"` picks the CPU; calls that need a GPU raise
RuntimeError saying why there is none.

    >>> import tg
    >>> tg.cuda.is_available() == (tg.cuda.device_count() > 0)
    True
"""
from __future__ import annotations

from typing import Any

from tg import config
from tg.core import random
from tg.core.device import Device, split_device


def device_count() -> int:
    """How many CUDA GPUs tg can use here (0 without a driver, a GPU or the cuda extra)."""
    return Device.count("CUDA")


def is_available() -> bool:
    """Whether at least one CUDA GPU is usable."""
    return device_count() > 0


def _name(device: Any = None) -> str:
    """The tg name of a CUDA device given torch's way (None: the current one, an int, 'cuda:N', a
    tg.device), opened (which raises, saying why, where it is not usable)."""
    if device is None:
        device = current_device()
    name = f"CUDA:{device}" if isinstance(device, int) else str(device)
    if split_device(name)[0] != "CUDA":
        raise ValueError(f"[cuda] expected a CUDA device (an index or 'cuda:N'), got {device!r}")
    return Device[name].name


def current_device() -> int:
    """The index of this process's CUDA device: the default device's when it is a CUDA one (tglaunch
    gives each rank its own; set_device changes it), else 0. Raises where no CUDA GPU is usable."""
    if not is_available():
        Device["CUDA"]            # raises, saying why
    kind, index = split_device(Device.DEFAULT)
    return (index or 0) if kind == "CUDA" else 0


def set_device(device: Any) -> None:
    """Make CUDA device `device` (an index, 'cuda:N' or a tg.device) this process's default device, as
    TG_DEVICE=CUDA:N does: tensors made without a device, and .cuda(), go there."""
    config.export("TG_DEVICE", _name(device))


def get_device_name(device: Any = None) -> str:
    """The GPU's name, as the driver reports it."""
    gpu: Any = Device[_name(device)]
    return gpu.gpu_name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """The GPU's compute capability, (major, minor)."""
    gpu: Any = Device[_name(device)]
    return gpu.capability


def is_bf16_supported() -> bool:
    """Whether the current GPU computes bfloat16 natively (compute capability 8.0 or later); False
    without a GPU."""
    return is_available() and get_device_capability() >= (8, 0)


def synchronize(device: Any = None) -> None:
    """Wait until the device has run everything queued on it."""
    Device[_name(device)].synchronize()


def empty_cache() -> None:
    """Give the memory blocks tg keeps for reuse on the current GPU back to the driver (nothing to do
    without a GPU, as in torch)."""
    if is_available():
        Device[_name()].allocator.release()


def manual_seed(seed: int) -> None:
    """Seed the random stream (tg has one for every device: the same numbers on each)."""
    random.manual_seed(seed)


manual_seed_all = manual_seed
