"""NULL device: renders (in the dialect named by TG_NULL_DIALECT) and "compiles" every kernel,
runs nothing. It checks GPU code generation on a machine without a GPU; buffers read as zeros."""
from __future__ import annotations

import numpy as np

from tg import config
from tg.core.codegen.linearizer import linearize_for
from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
from tg.core.device import Allocator, Buffer, Compiled, Program


class NullAllocator(Allocator):
    def alloc(self, nbytes: int) -> int:
        return nbytes

    def offset(self, opaque, offset: int, nbytes: int) -> int:
        return nbytes

    def copyin(self, opaque, src: memoryview, offset: int = 0) -> None:
        pass

    def copyout(self, dest: memoryview, opaque, offset: int = 0) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = 0


class NullProgram(Program):
    def __init__(self, dev: NullDevice, name: str, binary: None, src: str, info):
        self.name, self.src, self.info = name, src, info

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        return 0.0 if wait else None


class NullDevice(Compiled):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.allocator = NullAllocator()
        self.renderer = CStyleRenderer(_dialect(config.TG_NULL_DIALECT))
        self.program = NullProgram
        self.lower_options = {"cpu_vector_bytes": 64}

    def lower(self, kernel):
        """As the device of the dialect lowers it: on CUDA a bfloat16 or float16 contraction is the
        tensor-core kernel (codegen/mma.py, for an sm_90 GPU); in C a large contraction is the CPU's
        nest by the rules of thumb (codegen/cpu.py, AVX-512 widths); else the linearizer's kernel."""
        found = self._nest(kernel, self.renderer)
        return found if found is not None else super().lower(kernel)

    def render(self, kernel, dialect: str | None = None) -> str:
        """The source of a kernel in a dialect (default TG_NULL_DIALECT), as that device would run it."""
        d = _dialect(dialect or config.TG_NULL_DIALECT)
        found = self._nest(kernel, CStyleRenderer(d))
        if found is not None:
            return found[1]
        return CStyleRenderer(d).render(linearize_for(kernel, d, **self.lower_options))

    def _nest(self, kernel, renderer: CStyleRenderer):
        from tg.core.codegen import cpu, mma
        if config.TG_NOOPT:
            return None
        if renderer.d.name == "cuda":
            return mma.lower(kernel, renderer, (9, 0))
        if renderer.d.name == "c":
            return cpu.nest_by_rule(kernel, renderer, self.lower_options["cpu_vector_bytes"])
        return None


def _dialect(name: str):
    if name.lower() not in DIALECTS:
        raise ValueError(f"[null] TG_NULL_DIALECT={name!r}; expected one of {', '.join(DIALECTS)}")
    return DIALECTS[name.lower()]
