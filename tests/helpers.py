"""Test helpers shared by every test folder."""
from __future__ import annotations

from tg import Tensor
from tg.core.schedule import create_schedule


def kernel_count(*outs: Tensor) -> int:
    """How many kernels realizing these tensors compiles to (buffer allocations not counted)."""
    items = create_schedule([t.lazydata for t in outs])
    return sum(1 for it in items if it.kind == "kernel")


def assert_kernels(out: Tensor | tuple[Tensor, ...], n: int) -> None:
    outs = out if isinstance(out, tuple) else (out,)
    got = kernel_count(*outs)
    assert got == n, f"expected {n} kernels, the schedule has {got}"
