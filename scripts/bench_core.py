"""Core benchmark: one table, each row with a ratio to a reference measured in the same run.

    python scripts/bench_core.py                  # CPU device, all rows
    python scripts/bench_core.py --device CPU,CL  # a device column: the same rows on each device
    python scripts/bench_core.py --quick          # smaller sizes, for a smoke run

Rows: (a) a fused elementwise chain on 16M float32 ending in a sum (a read-only kernel), GB/s read
vs np.copyto bandwidth, and the same chain writing its 16M outputs; (b) float32
matmul GFLOPS vs numpy's matmul (same thread count); (c) sum over the last axis of 4096x4096, GB/s
vs np.copyto; (d) first-call latency (trace + compile, empty cache) and cached-call latencies.
On a device other than the CPU, bandwidth rows compare with that device's own device-to-device copy
(measured in the same run), every timed call waits for the device, and a float16 matmul row is added
(against PyTorch on CUDA when it is importable, else against the float32 row).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tg import Device, Tensor, TinyJit  # noqa: E402
from tg.core.device import Buffer, split_device  # noqa: E402


def best_of(fn, repeat: int = 7, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def copy_bandwidth(n: int) -> float:
    """np.copyto GB/s (bytes read) on n float32s: the best of many runs, measured once per size."""
    if n not in _COPY:
        src, dst = np.random.rand(n).astype(np.float32), np.empty(n, np.float32)
        _COPY[n] = src.nbytes / best_of(lambda: np.copyto(dst, src), repeat=25, warmup=3) / 1e9
    return _COPY[n]


_COPY: dict[int, float] = {}


def synced(device: str, fn):
    """fn, then wait until the device has finished (GPU launches return before the work is done)."""
    dev = Device[device]

    def run() -> None:
        fn()
        dev.synchronize()
    return run


def device_copy_bandwidth(n: int, device: str) -> float:
    """GB/s (bytes read) of the device's own copy of n float32s: the reference for bandwidth rows."""
    if device in ("CPU", "NUMPY"):
        return copy_bandwidth(n)
    src, dst = Buffer(device, n, Tensor([0.0]).dtype), Buffer(device, n, Tensor([0.0]).dtype)
    alloc = Device[device].allocator
    for buf in (src, dst):     # written first: untouched host-side pages would read as one shared zero page
        buf.copyin(np.random.rand(n).astype(np.float32))
    return 4 * n / best_of(synced(device, lambda: alloc.copy(dst._buf, src._buf, 4 * n)), repeat=11) / 1e9


def eager_or_replayed(fn, x: Tensor, jit: bool):
    """A no-argument call of fn(x).realize(): eager (scheduled each call), or with jit a TinyJit replay
    (captured first, so only the launches are timed: the kernels' own speed)."""
    if not jit:
        return lambda: fn(x).realize()
    step = TinyJit(lambda t: fn(t).realize())
    for _ in range(3):
        step(x)
    return lambda: step(x)


def bench_elementwise(n: int, device: str, read_only: bool, jit: bool = False) -> tuple[float, float]:
    """A fused chain of elementwise ops; read_only ends it in a sum, so no output is written."""
    a = np.random.rand(n).astype(np.float32)
    x = Tensor(a, device=device).realize()
    chain = lambda t: (t * 2.0 + 1.0).relu() * 0.5 - 0.25  # noqa: E731
    f = eager_or_replayed((lambda t: chain(t).sum()) if read_only else chain, x, jit)
    gbs = a.nbytes / best_of(synced(device, f), repeat=11) / 1e9
    return gbs, device_copy_bandwidth(n, device)


def bench_matmul(n: int, device: str, dtype: str = "float32") -> tuple[float, float, str]:
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    x, y = Tensor(a, device=device, dtype=dtype).realize(), Tensor(b, device=device, dtype=dtype).realize()
    out = (x @ y).numpy().astype(np.float32)
    tol = 1e-3 if dtype == "float32" else 2e-2
    assert np.allclose(out, a @ b, rtol=tol, atol=tol * n), "matmul result is wrong"
    flops = 2 * n ** 3
    ours = flops / best_of(synced(device, lambda: (x @ y).realize()), repeat=11) / 1e9
    kind, index = split_device(device)
    ref, ref_name = torch_matmul_gflops(n, dtype, index or 0) if kind == "CUDA" else (None, "")
    if ref is None:
        ref, ref_name = flops / best_of(lambda: a @ b, repeat=11) / 1e9, "numpy f32"
    return ours, ref, ref_name


def torch_matmul_gflops(n: int, dtype: str, gpu: int = 0) -> tuple[float | None, str]:
    try:
        import torch
        if not torch.cuda.is_available():
            return None, ""
    except ImportError:
        return None, ""
    a = torch.rand(n, n, device=f"cuda:{gpu}", dtype=getattr(torch, dtype))
    b = torch.rand(n, n, device=f"cuda:{gpu}", dtype=getattr(torch, dtype))

    def run() -> None:
        a @ b
        torch.cuda.synchronize(gpu)
    return 2 * n ** 3 / best_of(run, repeat=11) / 1e9, f"torch {dtype}"


def bench_sum(n: int, device: str, jit: bool = False) -> tuple[float, float]:
    a = np.random.rand(n, n).astype(np.float32)
    x = Tensor(a, device=device).realize()
    assert np.allclose(x.sum(-1).numpy(), a.sum(-1), rtol=1e-4)
    gbs = a.nbytes / best_of(synced(device, eager_or_replayed(lambda t: t.sum(-1), x, jit)), repeat=11) / 1e9
    return gbs, device_copy_bandwidth(n * n, device)


LATENCY_CHILD = """
import time, sys
t0 = time.perf_counter()
import numpy as np
from tg import Tensor
t1 = time.perf_counter()
x = Tensor(np.arange(1000, dtype=np.float32))
v = ((x * {k} + 1).relu().exp2() / 7).sum().item()
t2 = time.perf_counter()
w = ((x * {k} + 1).relu().exp2() / 7).sum().item()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def bench_latency(device: str) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TG_CACHE_DIR": cache, "TG_DEVICE": device}
        code = textwrap.dedent(LATENCY_CHILD.format(k=3.25))
        cold = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        warm = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
    imp, cold_first, hot = map(float, cold.stdout.split())
    _, disk_first, _ = map(float, warm.stdout.split())
    return imp, cold_first, disk_first, hot


def device_rows(device: str, quick: bool) -> list[tuple[str, ...]]:
    gpu = device not in ("CPU", "NUMPY")
    copy_name = "device copy" if gpu else "np.copyto"
    rows: list[tuple[str, ...]] = []
    n_elem = 1 << 20 if quick else 16 << 20
    ours, ref = bench_elementwise(n_elem, device, read_only=True)
    rows.append(
        (
            device,
            f"(a) fused elementwise chain + sum, {n_elem >> 20}M f32 (read-only)",
            f"{ours:.1f} GB/s",
            f"{ref:.1f} GB/s {copy_name}",
            f"{ours / ref:.2f}x",
            ">= 0.7x" if gpu else ">= 1.5x",
        )
    )
    ours, ref = bench_elementwise(n_elem, device, read_only=False)
    rows.append((device, f"    same chain, {n_elem >> 20}M f32 out (reads + writes)", f"{ours:.1f} GB/s",
                 f"{ref:.1f} GB/s {copy_name}", f"{ours / ref:.2f}x", ""))
    # 4096 is the size the CUDA targets name; an OpenCL device on a CPU would take minutes there
    sizes = [256] if quick else {"CUDA": [1024, 2048, 4096], "CL": [512, 1024]}.get(split_device(device)[0],
                                                                                   [512, 1024, 2048])
    for n in sizes:
        ours, ref, ref_name = bench_matmul(n, device)
        target = ">= 0.5x" if n == 1024 and not gpu else (">= 0.3x" if n == 4096 and gpu else "")
        rows.append((device, f"(b) matmul {n} f32", f"{ours:.1f} GFLOPS", f"{ref:.1f} GFLOPS {ref_name}",
                     f"{ours / ref:.2f}x", target))
    if gpu:
        n = 256 if quick else sizes[-1]
        ours, ref, ref_name = bench_matmul(n, device, "float16")
        rows.append((device, f"(b) matmul {n} f16", f"{ours:.1f} GFLOPS", f"{ref:.1f} GFLOPS {ref_name}",
                     f"{ours / ref:.2f}x", ">= 0.3x" if ref_name.startswith("torch") else ""))
    n = 1024 if quick else 4096
    ours, ref = bench_sum(n, device)
    rows.append((device, f"(c) sum(-1) of {n}x{n} f32", f"{ours:.1f} GB/s", f"{ref:.1f} GB/s {copy_name}",
                 f"{ours / ref:.2f}x", ">= 1.0x" if not gpu else ""))
    imp, cold, disk, hot = bench_latency(device)
    rows.append(
        (
            device,
            "(d) first call, empty cache",
            f"{cold * 1e3:.0f} ms",
            "0.3 s target",
            f"{cold / 0.3:.2f}x",
            "< 1.0x",
        )
    )
    rows.append((device, "(d) first call, disk cache", f"{disk * 1e3:.1f} ms", "", "", ""))
    rows.append((device, "(d) repeat call, same process", f"{hot * 1e3:.2f} ms", "", "", ""))
    rows.append((device, "    import tg", f"{imp * 1e3:.0f} ms", "", "", ""))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU", help="a device or a comma-separated list (CPU,CL,CUDA)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not a measurement)")
    args = ap.parse_args()
    devices = [d.strip().upper() for d in args.device.split(",") if d.strip()]
    rows = [row for device in devices for row in device_rows(device, args.quick)]
    header = ("device", "benchmark", "tg", "reference (same run)", "ratio", "target")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    names = {d: Device[d].hardware for d in devices}
    print(f"tg bench_core  devices={', '.join(f'{d} ({n})' if n != d else d for d, n in names.items())}  "
          f"cores={os.cpu_count()}  numpy={np.__version__}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
