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
from tg.core.codegen.renderer import C_FILE_NAMES, DIALECTS, CStyleRenderer
from tg.core.compiler import CCompiler, CompileError
from tg.core.device import Buffer, Compiled, HostAllocator, Program


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def _vector_bytes() -> int:
    return 64 if "avx512f" in features() else 32


AMX_FEATURES = frozenset({"amx_tile", "amx_bf16"})
_ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA, _SYS_ARCH_PRCTL = 0x1023, 18, 158


@functools.cache
def _amx_granted() -> bool:
    """Whether Linux lets this process use the AMX tile registers: it must ask once
    (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)) before its first tile instruction, which otherwise
    dies of SIGILL; the grant holds for every thread, and children inherit it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                            ctypes.c_long(_XFEATURE_XTILEDATA)) == 0
    except (OSError, AttributeError):
        return False


def features() -> frozenset[str]:
    """The CPU features generated kernels may use: the CPU's flags less those TG_CPU_DISABLE names,
    and the AMX ones only once Linux granted the tile state. Kernels are compiled for this CPU
    (-march=native), so every compiled kernel's cache key holds this set: a library built where AMX
    or AVX512-FP16 was used is never loaded on a machine without them."""
    off = {f.strip() for f in config.TG_CPU_DISABLE.split(",") if f.strip()}
    have = _cpu_flags() - off
    if AMX_FEATURES <= have and not _amx_granted():
        have -= AMX_FEATURES
    return frozenset(have)


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

    @property   # type: ignore[override]
    def ident(self) -> str:
        """The compiler, its flags and the CPU features kernels are built for (-march=native)."""
        return f"{self._ident} cpu:{','.join(sorted(features()))}"

    @ident.setter
    def ident(self, value: str) -> None:
        self._ident = value

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


# Scratch memory for the kernels' packed operands (codegen/nests.py, codegen/bf16.py), kept between calls
# in one library every kernel links to: a fresh allocation of a few MB is a fresh mapping, whose every
# page faults on first touch (measured: 1,100 faults, 3.3 ms, for the packs of one 1024^3 bfloat16
# matmul that computes in 2.9). A few buffers are pooled (the largest asked for stays, up to 256 MiB
# each: a kernel that large computes for long enough that its pages' faults do not matter); a take
# that finds every one busy (another thread's kernel) allocates afresh and frees on give.
SCRATCH_SOURCE = r"""
#include <pthread.h>
#include <stdlib.h>
#define SLOTS 8
#define KEEP_MAX (256L << 20)   /* a larger buffer goes back to the system when given back */
static struct { void* p; long size; int busy; } pool[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
void* tg_scratch_take(long bytes) {
  bytes = (bytes + 4095) / 4096 * 4096;
  pthread_mutex_lock(&lock);
  int best = -1, spare = -1;
  for (int i = 0; i < SLOTS; i++) {
    if (pool[i].busy) continue;
    if (pool[i].size >= bytes && (best < 0 || pool[i].size < pool[best].size)) best = i;
    if (spare < 0 || pool[i].size < pool[spare].size) spare = i;
  }
  if (best < 0 && spare >= 0) {          /* the smallest free slot grows to the size asked */
    free(pool[spare].p);
    pool[spare].p = aligned_alloc(4096, bytes);
    pool[spare].size = pool[spare].p ? bytes : 0;
    if (pool[spare].p) best = spare;
  }
  void* p = best >= 0 ? pool[best].p : NULL;
  if (best >= 0) pool[best].busy = 1;
  pthread_mutex_unlock(&lock);
  return p ? p : aligned_alloc(4096, bytes);
}
void tg_scratch_give(void* p) {
  if (!p) return;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < SLOTS; i++)
    if (pool[i].p == p && pool[i].busy) {
      pool[i].busy = 0;
      if (pool[i].size > KEEP_MAX) { free(p); pool[i].p = NULL; pool[i].size = 0; }
      pthread_mutex_unlock(&lock);
      return;
    }
  pthread_mutex_unlock(&lock);
  free(p);
}
/* a child of fork() has one thread: a lock or a slot another thread of the parent held is free there */
static void child_after_fork(void) {
  pthread_mutex_init(&lock, NULL);
  for (int i = 0; i < SLOTS; i++) pool[i].busy = 0;
}
__attribute__((constructor)) static void at_load(void) { pthread_atfork(NULL, NULL, child_after_fork); }
long tg_scratch_trim(void) {             /* frees the pooled buffers not in use; returns the bytes freed */
  long freed = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < SLOTS; i++)
    if (!pool[i].busy && pool[i].p) {
      free(pool[i].p); freed += pool[i].size; pool[i].p = NULL; pool[i].size = 0;
    }
  pthread_mutex_unlock(&lock);
  return freed;
}
"""
_SCRATCH: list[ctypes.CDLL] = []


def scratch_library() -> ctypes.CDLL:
    """The scratch pool's library, built (cached like a kernel) and loaded once with its names global,
    before any kernel that links to them."""
    if not _SCRATCH:
        path = ClangCompiler().compile(SCRATCH_SOURCE)
        _SCRATCH.append(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))
    return _SCRATCH[0]


def release_scratch() -> int:
    """Frees the kernels' pooled scratch buffers that are not in use; the bytes freed."""
    if not _SCRATCH:
        return 0
    trim = _SCRATCH[0].tg_scratch_trim
    trim.restype = ctypes.c_long
    return int(trim())


class CPUProgram(Program):
    synchronous = True

    def __init__(self, dev: CPUDevice, name: str, lib_path: Path, src: str, info):
        self.name, self.src, self.info = name, src, info
        scratch_library()
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
        scratch_library()         # before any kernel library, which links to it
        self.renderer = CStyleRenderer(DIALECTS["c"], threads=config.TG_CPU_THREADS)
        self.program = CPUProgram
        self.lower_options = {"cpu_vector_bytes": _vector_bytes()}
        self._usable: dict[str, bool] = {}

    def usable(self, unit) -> bool:
        """Whether a bfloat16 unit (codegen/bf16.UNITS) is used here: TG_CC builds its probe (a compiler
        older than the CPU may lack its intrinsics), and where the feature alone does not make it fast
        (VDPBF16PS: twice the FMAs' rate on Zen 4/5, half on Sapphire Rapids) its measured speedup over
        the float32 FMAs is at least heuristics.UNIT_PAYS. Decided once per process (the builds are
        cached like kernels; the measurement takes about a millisecond)."""
        from tg.core.codegen.heuristics import UNIT_PAYS
        if unit.name not in self._usable:
            try:
                self.compiler.compile(unit.probe)
                ok = True
                if unit.speedup is not None:
                    lib = ctypes.CDLL(str(self.compiler.compile(unit.speedup)))
                    lib.tg_speedup.restype = ctypes.c_double
                    ok = lib.tg_speedup() >= UNIT_PAYS
            except CompileError:
                ok = False
            self._usable[unit.name] = ok
        return self._usable[unit.name]

    @property
    def features(self) -> frozenset[str]:
        """The CPU features kernels may use now (`features`: TG_CPU_DISABLE is read each time)."""
        return features()

    @property
    def vector_bytes(self) -> int:
        """The SIMD width kernels are written for: 64 bytes with AVX-512, else 32."""
        return _vector_bytes()

    def fuse_rows(self, items: list, outs: list) -> list:
        """The schedule's CPU row groups as one item each: codegen/cpu.py decides."""
        from tg.core.codegen import cpu
        return cpu.fuse_rows(self, items, outs)

    def lower(self, kernel):
        """A kernel or row group as codegen/cpu.py's `choose` decides: a row-group function, a packed
        bfloat16 or float32 contraction nest, or the one-pass loop nest."""
        from tg.core.codegen import cpu
        return cpu.lower(self, kernel)
