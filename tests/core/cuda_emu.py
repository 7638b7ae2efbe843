"""Runs a generated tensor-core kernel (codegen/mma.py) on the CPU, so its whole CUDA C, not only its
fragment table, is checked on machines without a GPU: the kernel's source less the CUDA header, built as
C++ with each CUDA built-in it uses defined here, one POSIX thread per CUDA thread (128 per block, the
blocks one after another, __syncthreads a barrier), and each mma.sync replaced by an exchange among the
warp's 32 threads that places A, B and C by the PTX ISA's own statement of the m16n8k16 layouts (written
here from the ISA, not from mma.FRAGMENTS).

    got = run(src, info, dtypes, [out_bytes, *input_arrays])
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tg.core.codegen.renderer import _BF16_HELPERS, _C_TYPES, _HALF_HELPERS, DIALECTS

PRELUDE = r"""
#include <math.h>
#include <pthread.h>
#include <string.h>
#define __device__ static inline
#define __global__
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__
struct emu_dim { unsigned x; };
static thread_local emu_dim threadIdx, blockIdx;
static pthread_barrier_t emu_block, emu_warp[4];
#define __syncthreads() pthread_barrier_wait(&emu_block)
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline int tg_max(int a, int b) { return a > b ? a : b; }
static inline unsigned tg_max(unsigned a, unsigned b) { return a > b ? a : b; }
template <typename D, typename S> static inline D tg_bitcast(S s) {
  union { S s; D d; } u; u.s = s; return u.d;
}
""" + _BF16_HELPERS + _HALF_HELPERS + r"""
static int emu_f16;
static unsigned emu_a[4][32][4], emu_b[4][32][2];
static float emu_value(unsigned reg, int upper) {
  unsigned short bits = upper ? (unsigned short)(reg >> 16) : (unsigned short)(reg & 0xffffu);
  return emu_f16 ? tg_h2f(bits) : tg_bf16_to_f32(bits);
}
/* The PTX ISA, mma.m16n8k16 with .f16/.bf16 A and B, element i of a lane (two per register, the lower
   index in the lower half), g = lane / 4, t = lane % 4:
   A: row g for i in {0, 1, 4, 5}, else g + 8; column 2t + (i & 1), + 8 for i >= 4
   B: row 2t + (i & 1), + 8 for i >= 2; column g
   C: row g for i < 2, else g + 8; column 2t + (i & 1) */
static float emu_A(int w, int row, int col) {
  int g = row % 8, t = (col % 8) / 2;
  int i = (col & 1) + (row >= 8 ? 2 : 0) + (col >= 8 ? 4 : 0);
  return emu_value(emu_a[w][g * 4 + t][i / 2], i & 1);
}
static float emu_B(int w, int row, int col) {
  int g = col, t = (row % 8) / 2, i = (row & 1) + (row >= 8 ? 2 : 0);
  return emu_value(emu_b[w][g * 4 + t][i / 2], i & 1);
}
static void emu_mma(float* c, const unsigned* a, const unsigned* b) {
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int r = 0; r < 4; r++) emu_a[w][lane][r] = a[r];
  for (int r = 0; r < 2; r++) emu_b[w][lane][r] = b[r];
  pthread_barrier_wait(&emu_warp[w]);
  for (int i = 0; i < 4; i++) {
    int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; k++) acc += emu_A(w, row, k) * emu_B(w, k, col);
    c[i] = acc;
  }
  pthread_barrier_wait(&emu_warp[w]);
}
"""

LAUNCH = r"""
struct emu_arg { unsigned block, thread; void** p; };
static void* emu_thread(void* v) {
  emu_arg* a = (emu_arg*)v;
  threadIdx.x = a->thread; blockIdx.x = a->block;
  void** p = a->p;
  NAME(ARGS);
  return 0;
}
extern "C" void emu_launch(int blocks, int threads, void** p) {
  emu_f16 = F16;
  for (int blk = 0; blk < blocks; blk++) {
    pthread_barrier_init(&emu_block, 0, threads);
    for (int w = 0; w < 4; w++) pthread_barrier_init(&emu_warp[w], 0, 32);
    pthread_t th[1024]; emu_arg a[1024];
    for (int t = 0; t < threads; t++) {
      a[t].block = blk; a[t].thread = t; a[t].p = p;
      pthread_create(&th[t], 0, emu_thread, &a[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], 0);
    pthread_barrier_destroy(&emu_block);
    for (int w = 0; w < 4; w++) pthread_barrier_destroy(&emu_warp[w]);
  }
}
"""

_BUILT = Path(tempfile.gettempdir()) / "tg_cuda_emu"


def build(src: str, buf_dtypes: list) -> ctypes.CDLL:
    """The kernel `src` (as codegen/mma.render made it for the CUDA dialect) as a library on this CPU."""
    header = DIALECTS["cuda"].header
    assert src.startswith(header), "expected the CUDA dialect's header first"
    body = src[len(header):]
    name = re.search(r"__launch_bounds__\(\d+\) (\w+)\(", body)
    assert name is not None, "no kernel function in the source"
    f16 = ".f16.f16.f32" in body
    body, n = re.subn(r'asm volatile\("mma\.sync.*?\);', "emu_mma(s, a[i], b[j]);", body, flags=re.S)
    assert n >= 1 and "asm" not in body, "an instruction this emulator does not know"
    args = ", ".join(f"({'' if i == 0 else 'const '}{_C_TYPES[dt.name]}*)p[{i}]"
                     for i, dt in enumerate(buf_dtypes))
    launch = LAUNCH.replace("NAME", name[1]).replace("ARGS", args).replace("F16", str(int(f16)))
    code = PRELUDE + body + launch
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("the CUDA emulator needs g++ (the system C++ compiler): apt-get install g++")
    _BUILT.mkdir(exist_ok=True)
    lib = _BUILT / f"k_{hashlib.sha256(code.encode()).hexdigest()[:16]}.so"
    if not lib.exists():
        cpp = lib.with_suffix(".cpp")
        cpp.write_text(code)
        tmp = lib.with_suffix(".tmp.so")
        subprocess.run([gxx, "-O1", "-shared", "-fPIC", "-w", "-o", str(tmp), str(cpp), "-lpthread"],
                       check=True)
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


def run(src: str, info, buf_dtypes: list, bufs: list[np.ndarray]) -> None:
    """Runs the kernel on bufs (the output first, written in place) with the launch `info` describes."""
    lib = build(src, buf_dtypes)
    arrays = [np.ascontiguousarray(b) for b in bufs]
    assert arrays[0] is bufs[0], "the output must be a contiguous array"
    pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    lib.emu_launch(info.global_size // info.local_size, info.local_size, pointers)
