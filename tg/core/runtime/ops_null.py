"""NULL device: renders (in the dialect named by TG_NULL_DIALECT) and "compiles" every kernel,
runs nothing. It checks GPU code generation on a machine without a GPU; buffers read as zeros."""
from __future__ import annotations

import numpy as np

from tg import config
from tg.core.device import Allocator, Buffer, Compiled, Program
from tg.core.renderer import DIALECTS, CStyleRenderer, linearize_for


class NullAllocator(Allocator):
    def alloc(self, nbytes: int) -> int:
        return nbytes

    def copyin(self, opaque, src: memoryview) -> None:
        pass

    def copyout(self, dest: memoryview, opaque) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = 0


class NullProgram(Program):
    def __init__(self, name: str, src: str, info):
        self.name, self.src, self.info = name, src, info

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        return 0.0 if wait else None


class NullDevice(Compiled):
    def __init__(self) -> None:
        self.allocator = NullAllocator()

    def render(self, kernel, dialect: str | None = None) -> str:
        name = (dialect or config.TG_NULL_DIALECT).lower()
        if name not in DIALECTS:
            raise ValueError(f"[null] TG_NULL_DIALECT={name!r}; expected one of {', '.join(DIALECTS)}")
        return CStyleRenderer(DIALECTS[name]).render(linearize_for(kernel, DIALECTS[name], 64))

    def compile_kernel(self, kernel) -> Program:
        src = self.render(kernel)
        lin = linearize_for(kernel, DIALECTS[config.TG_NULL_DIALECT.lower()], 64)
        return NullProgram(lin.name, src, lin)
