"""The FLOP rate the machine really has, for model FLOPs utilisation (MFU): on the CPU measured, once per
machine (kept in TG_CACHE_DIR/peak.json), by loops of independent vector FMAs, or of the bfloat16 units'
dot products (AMX tiles, AVX512_BF16) when there are any; on a GPU the datasheet's dense peak.

    >>> gflops, what = peak_gflops("CPU", "float32", threads=1)
    >>> gflops > 0.5, "FMA" in what
    (True, True)
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
from typing import Any

import numpy as np

from tg import config
from tg.nn.state import write_atomic

__all__ = ["peak_gflops", "cpu_peak_gflops", "gpu_peak_gflops", "mfu"]

# 16 independent chains of vector FMAs on every core (num_threads): only throughput bounds them
FMA_LOOP = """
#include <omp.h>
#include <time.h>
typedef float vf __attribute__((vector_size(BYTES)));
CPU_CLOCK
double tg_fma_seconds(long iters, float mul, float add, float* out, int threads, double* cpu) {
  double start = omp_get_wtime();
  #pragma omp parallel num_threads(threads)
  {
    double t0 = tg_cpu_seconds();
    vf m = (vf){} + mul, c = (vf){} + add;
    vf a0 = (vf){} + 1, a1 = a0 + 1, a2 = a1 + 1, a3 = a2 + 1, a4 = a3 + 1, a5 = a4 + 1, a6 = a5 + 1;
    vf a7 = a6 + 1, a8 = a7 + 1, a9 = a8 + 1, a10 = a9 + 1, a11 = a10 + 1, a12 = a11 + 1, a13 = a12 + 1;
    vf a14 = a13 + 1, a15 = a14 + 1;
    for (long i = 0; i < iters; i++) {
      a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c; a4 = a4 * m + c; a5 = a5 * m + c;
      a6 = a6 * m + c; a7 = a7 * m + c; a8 = a8 * m + c; a9 = a9 * m + c; a10 = a10 * m + c;
      a11 = a11 * m + c; a12 = a12 * m + c; a13 = a13 * m + c; a14 = a14 * m + c; a15 = a15 * m + c;
    }
    vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + a12 + a13 + a14 + a15;
    float all = 0;
    for (int i = 0; i < BYTES / 4; i++) all += s[i];     /* every lane is used: none can be dropped */
    out[omp_get_thread_num()] = all;
    cpu[omp_get_thread_num()] = tg_cpu_seconds() - t0;
  }
  return omp_get_wtime() - start;
}
"""
# AMX: four 16x16 float32 tiles each += a 16x32 by 32x16 bfloat16 product (TDPBF16PS, 16384 flops)
AMX_LOOP = """
#include <immintrin.h>
#include <omp.h>
#include <string.h>
#include <time.h>
typedef struct { unsigned char palette, start; unsigned char zero[14]; unsigned short colsb[16];
                 unsigned char rows[16]; } tg_cfg;
CPU_CLOCK
double tg_amx_seconds(long iters, float* out, int threads, double* cpu) {
  double start = omp_get_wtime();
  #pragma omp parallel num_threads(threads)
  {
    double t0 = tg_cpu_seconds();
    tg_cfg cfg; memset(&cfg, 0, sizeof cfg); cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    _tile_loadconfig(&cfg);
    unsigned short ones[512]; float c[256];
    for (int i = 0; i < 512; i++) ones[i] = 0x3f80;
    _tile_loadd(4, ones, 64); _tile_loadd(5, ones, 64); _tile_loadd(6, ones, 64); _tile_loadd(7, ones, 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (long i = 0; i < iters; i++) {
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    out[omp_get_thread_num()] = c[0];
    _tile_release();
    cpu[omp_get_thread_num()] = tg_cpu_seconds() - t0;
  }
  return omp_get_wtime() - start;
}
"""
# AVX512_BF16: 16 independent VDPBF16PS (a 16-lane float32 vector += 32 bfloat16 products, 64 flops)
DPBF16_LOOP = """
#include <immintrin.h>
#include <omp.h>
#include <time.h>
CPU_CLOCK
double tg_dpbf16_seconds(long iters, float seed, float* out, int threads, double* cpu) {
  double start = omp_get_wtime();
  #pragma omp parallel num_threads(threads)
  {
    double t0 = tg_cpu_seconds();
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
    /* distinct values: equal chains would be merged into one by the compiler */
    __m512 c0 = _mm512_set1_ps(seed), c1 = c0 + 1, c2 = c1 + 1, c3 = c2 + 1, c4 = c3 + 1, c5 = c4 + 1;
    __m512 c6 = c5 + 1, c7 = c6 + 1, c8 = c7 + 1, c9 = c8 + 1, c10 = c9 + 1, c11 = c10 + 1, c12 = c11 + 1;
    __m512 c13 = c12 + 1, c14 = c13 + 1, c15 = c14 + 1;
    for (long i = 0; i < iters; i++) {
      c0 = _mm512_dpbf16_ps(c0, a, b); c1 = _mm512_dpbf16_ps(c1, a, b); c2 = _mm512_dpbf16_ps(c2, a, b);
      c3 = _mm512_dpbf16_ps(c3, a, b); c4 = _mm512_dpbf16_ps(c4, a, b); c5 = _mm512_dpbf16_ps(c5, a, b);
      c6 = _mm512_dpbf16_ps(c6, a, b); c7 = _mm512_dpbf16_ps(c7, a, b); c8 = _mm512_dpbf16_ps(c8, a, b);
      c9 = _mm512_dpbf16_ps(c9, a, b); c10 = _mm512_dpbf16_ps(c10, a, b); c11 = _mm512_dpbf16_ps(c11, a, b);
      c12 = _mm512_dpbf16_ps(c12, a, b); c13 = _mm512_dpbf16_ps(c13, a, b);
      c14 = _mm512_dpbf16_ps(c14, a, b); c15 = _mm512_dpbf16_ps(c15, a, b);
    }
    __m512 s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11 + c12 + c13 + c14 + c15;
    out[omp_get_thread_num()] = _mm512_reduce_add_ps(s);
    cpu[omp_get_thread_num()] = tg_cpu_seconds() - t0;
  }
  return omp_get_wtime() - start;
}
"""

# NVIDIA's datasheets' dense peaks, TFLOPS: (float32 without tensor cores, bfloat16/float16 on them)
GPU_PEAKS = {"H200": (66.9, 989.4), "H100 SXM": (66.9, 989.4), "H100 NVL": (60.0, 835.0),
             "H100 PCIe": (51.2, 756.0), "H100": (66.9, 989.4), "A100": (19.5, 312.0), "L40S": (91.6, 362.0),
             "L4": (30.3, 121.0)}


# each thread's own CPU time: a loop time-sliced with another process's still measures its core's rate
CPU_CLOCK = """static double tg_cpu_seconds(void) {
  struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}"""


def _loop(src: str, name: str) -> ctypes.CDLL:
    from tg.core.runtime.ops_cpu import ClangCompiler
    lib = ctypes.CDLL(str(ClangCompiler().compile(src.replace("CPU_CLOCK", CPU_CLOCK))))
    getattr(lib, name).restype = ctypes.c_double
    return lib


def _measure(kind: str, threads: int) -> tuple[float, str]:
    """(GFLOPS of `threads` threads, the unit measured): each thread's FLOPs over its own CPU time (so
    another process sharing the cores does not lower it), summed; the best of a few runs."""
    from tg.core.runtime.ops_cpu import features
    have = features()
    out, cpu = np.zeros(threads, np.float32), np.zeros(threads, np.float64)
    args = (ctypes.c_void_p(out.ctypes.data), ctypes.c_int(threads), ctypes.c_void_p(cpu.ctypes.data))

    def best(run: Any, flops_per_thread: float, reps: int) -> float:
        rates = []
        for _ in range(reps):
            run()
            rates.append(sum(flops_per_thread / max(float(c), 1e-9) for c in cpu))
        return max(rates) / 1e9
    if kind == "bfloat16" and {"amx_tile", "amx_bf16"} <= have:
        lib, iters = _loop(AMX_LOOP, "tg_amx_seconds"), 2_000_000
        return best(lambda: lib.tg_amx_seconds(ctypes.c_long(iters), *args), iters * 4 * 16384, 3), \
            "AMX TDPBF16PS"
    if kind == "bfloat16" and "avx512_bf16" in have:
        lib, iters = _loop(DPBF16_LOOP, "tg_dpbf16_seconds"), 10_000_000
        return best(lambda: lib.tg_dpbf16_seconds(ctypes.c_long(iters), ctypes.c_float(1e-3), *args),
                    iters * 16 * 64, 3), "VDPBF16PS"
    width = 64 if "avx512f" in have else 32
    lib, iters = _loop(FMA_LOOP.replace("BYTES", str(width)), "tg_fma_seconds"), 20_000_000
    mul, add = ctypes.c_float(0.9999), ctypes.c_float(1e-6)       # unknown to the compiler
    unit = f"float32 FMA ({width * 8}-bit vectors)" + (" (no bfloat16 unit)" if kind == "bfloat16" else "")
    return best(lambda: lib.tg_fma_seconds(ctypes.c_long(iters), mul, add, *args),
                iters * 16 * (width // 4) * 2, 5), unit


def _cpu_key(kind: str, threads: int) -> str:
    from tg.core.runtime.ops_cpu import features
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    return f"{model}|{os.cpu_count()}|{threads}|{kind}|{','.join(sorted(features()))}|cpu-time"


def cpu_peak_gflops(kind: str = "float32", threads: int | None = None,
                    fresh: bool = False) -> tuple[float, str]:
    """(GFLOPS, unit) of `threads` cores (all by default) computing `kind` (float32, or bfloat16 on its
    units): measured the first time on a machine (or when `fresh`), under a lock so that ranks starting
    together measure once, on an otherwise idle CPU; then read from TG_CACHE_DIR/peak.json."""
    if kind not in ("float32", "bfloat16"):
        raise ValueError(f"[utils] cpu_peak_gflops: kind float32 or bfloat16 expected, got {kind!r}")
    threads = threads or os.cpu_count() or 1
    folder = config.TG_CACHE_DIR
    os.makedirs(folder, exist_ok=True)
    path, key = os.path.join(folder, "peak.json"), _cpu_key(kind, threads)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                known = json.load(f)
        except (OSError, ValueError):
            known = {}
        if fresh or key not in known:
            known[key] = list(_measure(kind, threads))
            write_atomic(path, json.dumps(known, indent=1).encode())
    gflops, unit = known[key]
    return float(gflops), str(unit)


def peak_gflops(device: str | None = None, dtype: str = "float32",
                threads: int | None = None) -> tuple[float, str]:
    """(GFLOPS, where the number comes from) the device computes `dtype` at: the CPU's measured peak
    over the threads a kernel uses (TG_CPU_THREADS, else every core), or a GPU's datasheet peak
    (bfloat16/float16 on tensor cores). ValueError for a GPU the table does not know."""
    from tg.core.device import Device
    dev = Device[device or Device.DEFAULT]
    kind = "bfloat16" if dtype in ("bfloat16", "float16", "bf16", "fp16") else "float32"
    if not dev.is_gpu:
        return cpu_peak_gflops(kind, threads or config.TG_CPU_THREADS or None)
    return gpu_peak_gflops(dev.hardware, kind)


def gpu_peak_gflops(name: str, kind: str = "float32") -> tuple[float, str]:
    """(GFLOPS, source) of the GPU whose name contains a model of GPU_PEAKS (the first that matches, most
    specific first): its dense float32 peak, or bfloat16/float16 on tensor cores.

        >>> gpu_peak_gflops("NVIDIA H100 80GB HBM3", "bfloat16")
        (989400.0, 'H100 datasheet (tensor cores)')
    """
    for model, (fp32, low) in GPU_PEAKS.items():
        if model in name:
            tflops = low if kind == "bfloat16" else fp32
            return tflops * 1e3, f"{model} datasheet ({'tensor cores' if kind == 'bfloat16' else 'fp32'})"
    raise ValueError(f"[utils] peak_gflops: no datasheet peak for {name!r}; known: {', '.join(GPU_PEAKS)}. "
                     f"Fix: pass MFU's peak yourself")


def mfu(flops: float, seconds: float, peak_gflops: float) -> float:
    """Model FLOPs utilisation: flops done in seconds over the peak's worth (NaN when either is unknown).

        >>> mfu(2e9, 1.0, 4.0)
        0.5
    """
    return flops / seconds / (peak_gflops * 1e9) if seconds > 0 and peak_gflops > 0 else float("nan")
