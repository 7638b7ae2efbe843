"""torch.backends' switches that scripts set: `torch.backends.cudnn.benchmark = True`, `.deterministic`,
`torch.backends.cuda.matmul.allow_tf32`, `torch.backends.mps.is_available()`. tg has no cuDNN, no TF32 and
no MPS: the switches are kept as set and change nothing (tg picks its kernels by its own rules and search,
codegen/heuristics.py and TG_BEAM; its float32 matmul is float32), so scripts that set them run as
written.

    >>> import tg
    >>> tg.backends.cudnn.benchmark = True
    >>> tg.backends.cudnn.benchmark, tg.backends.cudnn.is_available(), tg.backends.mps.is_available()
    (True, False, False)
"""
from __future__ import annotations

from types import SimpleNamespace


def _never() -> bool:
    return False


cudnn = SimpleNamespace(benchmark=False, deterministic=False, enabled=True, allow_tf32=False,
                        is_available=_never, version=lambda: None)
cuda = SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=False,
                                              allow_bf16_reduced_precision_reduction=False),
                       is_built=_never)
mps = SimpleNamespace(is_available=_never, is_built=_never)
