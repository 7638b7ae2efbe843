"""CPU device: kernels rendered as C, compiled by the system C compiler into shared libraries
(cached on disk by source hash), loaded with ctypes and run with OpenMP across cores."""
from __future__ import annotations

import _ctypes
import ctypes
import functools
import subprocess
import time
import weakref
from pathlib import Path
from typing import cast

from tg import config
from tg.core.compiler import CCompiler, CompileError
from tg.core.device import Buffer, Compiled, HostAllocator, Program
from tg.core.renderer import C_FILE_NAMES, DIALECTS, CStyleRenderer


@functools.cache
def _vector_bytes() -> int:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 32
    return 64 if " avx512f" in flags else 32


class ClangCompiler(CCompiler):
    parallel = True      # each build is its own compiler process

    def __init__(self) -> None:
        # -fno-tree-loop-vectorize: the kernels are vectorized by tg's own codegen; GCC 12's loop
        # vectorizer also miscompiles nested reductions over negative-stride views (a flipped sum
        # came out wrong; tests/core/test_view_fuzz.py pins it).
        super().__init__(["-shared", "-fPIC", "-O3", "-fno-tree-loop-vectorize", "-march=native",
                          "-fopenmp", "-fwrapv", "-fno-math-errno", "-ffp-contract=fast",
                          "-fno-strict-aliasing", "-x", "c", "-"], "[cpu] a generated kernel")

    batches = True

    def compile_many_to(self, srcs: list[str], out: Path) -> None:
        """One library from several kernel sources in one translation unit: each kernel's file-level
        helpers (vector typedefs, static functions) are renamed for its stretch by macros, so the
        same helper in two kernels never clashes; the kernels keep their (distinct) names."""
        parts = []
        for i, src in enumerate(srcs):
            parts += [f"#define {n} {n}_k{i}" for n in C_FILE_NAMES]
            parts += [src] + [f"#undef {n}" for n in C_FILE_NAMES]
        proc = subprocess.run([self.cc, *self.flags, "-o", str(out)], input="\n".join(parts) + "\n",
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"[cpu] the C compiler failed on a batch of kernels:\n{proc.stderr.strip()}")


def _pointer(b: Buffer) -> ctypes.c_void_p:
    """b's address as a C argument, taken once per buffer (numpy's .ctypes costs microseconds)."""
    ptr = b._c_pointer
    if ptr is None:
        ptr = b._c_pointer = cast(HostAllocator, b.allocator).c_pointer(b._buf)
    return ptr


_RUNTIMES: dict[str, ctypes.CDLL] = {}
# the runtimes' own file names (libgomp.so.1.0.0, ...), not copies that wheels bundle under hashed names
# (libgomp-855c301a.so): the kernels link the system's by its soname
_RUNTIME_NAMES = ("libgomp.so", "libomp.so", "libiomp5.so")


def _hold_thread_runtime() -> None:
    """Loads once more, for good, the OpenMP runtime the kernel libraries link: it is their dependency,
    so unmapping the last of them unmapped it too while its worker threads waited inside it, and the
    process died of SIGSEGV (at a later kernel, or at exit). Looked up in this process's mappings
    until one is found (a kernel without a parallel loop may not link it)."""
    if _RUNTIMES:
        return
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if line.count(" ") >= 5}
    except OSError:
        return
    for path in paths:
        if Path(path).name.startswith(_RUNTIME_NAMES):
            _RUNTIMES[path] = ctypes.CDLL(path)


class CPUProgram(Program):
    def __init__(self, dev: CPUDevice, name: str, lib_path: Path, src: str, info):
        self.name, self.src, self.info = name, src, info
        self.lib = ctypes.CDLL(str(lib_path))
        # the library is unmapped when this program is let go of (a long process loads kernels without
        # end, and Linux caps a process's mappings): ctypes' function objects are cyclic garbage, which
        # only the collector would free, so the program's own lifetime decides (a replay holds it)
        # (not at exit: the process's mappings go with it, and the time is better spent elsewhere)
        _hold_thread_runtime()
        weakref.finalize(self, _ctypes.dlclose, self.lib._handle).atexit = False
        self.fxn = self.lib[name]
        self.fxn.restype = None

    def replay_fn(self, bufs: list[Buffer]):
        """A no-argument call with the buffer addresses bound once (used by TinyJit replays); it holds
        this program, so the library stays mapped while the replay may run."""
        call = functools.partial(self.fxn, *[_pointer(b) for b in bufs])
        call.program = self  # type: ignore[attr-defined]
        return call

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        args = [_pointer(b) for b in bufs]
        if not wait:
            self.fxn(*args)
            return None
        start = time.perf_counter()
        self.fxn(*args)
        return time.perf_counter() - start


class CPUDevice(Compiled):
    default_preference = 1      # after a usable GPU

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.allocator = HostAllocator()
        self.compiler = ClangCompiler()
        self.renderer = CStyleRenderer(DIALECTS["c"], threads=config.TG_CPU_THREADS)
        self.program = CPUProgram
        self.lower_options = {"cpu_vector_bytes": _vector_bytes()}

    def fuse_rows(self, items: list, outs: list) -> list:
        """The schedule with its row groups of this device's kernels as one item each (codegen/rows.py)."""
        from tg.core.codegen import gemm, rows
        if config.TG_NOOPT:
            return items
        lanes = _vector_bytes() // 4
        return rows.fuse(items, outs, self.name, lambda k: gemm.find(k, lanes) is None, config.TG_CPU_THREADS)

    def lower(self, kernel):
        """A row group (codegen/rows.py) becomes one function running its kernels block by block. A large
        contraction (matmul in any layout, batched) becomes a blocked, packed loop nest
        (codegen/gemm.py) where the rule or the search (codegen/search.py) says it pays; every other
        kernel the one-pass loop nest of the linearizer."""
        from tg.core.codegen import gemm, rows, search
        from tg.core.renderer import linearize_for
        if isinstance(kernel, rows.RowGroup):
            return rows.render(kernel, self.renderer, _vector_bytes())
        lanes = _vector_bytes() // 4
        c = None if config.TG_NOOPT else gemm.find(kernel, lanes)
        if c is not None:
            def one_pass(name: str) -> str:
                lin = linearize_for(kernel, self.renderer.d, **self.lower_options)
                return self.renderer.render(lin, name)
            p = search.choose(c, gemm.name(c), lanes, self.renderer, self.compiler, one_pass)
            if p is not None:
                return gemm.lower(c, p, self.renderer, lanes)
        return super().lower(kernel)
