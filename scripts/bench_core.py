"""Core benchmark: one table, each row with a ratio to a reference measured in the same run.

    python scripts/bench_core.py            # CPU device, all rows
    python scripts/bench_core.py --quick    # smaller sizes, for a smoke run

Rows: (a) a fused elementwise chain on 16M float32 ending in a sum (a read-only kernel), GB/s read
vs np.copyto bandwidth, and the same chain writing its 16M outputs; (b) float32
matmul GFLOPS vs numpy's matmul (same thread count); (c) sum over the last axis of 4096x4096, GB/s
vs np.copyto; (d) first-call latency (trace + compile, empty cache) and cached-call latencies.
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
from tg import Tensor  # noqa: E402


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


def bench_elementwise(n: int, device: str, read_only: bool) -> tuple[float, float]:
    """A fused chain of elementwise ops; read_only ends it in a sum, so no output is written."""
    a = np.random.rand(n).astype(np.float32)
    x = Tensor(a, device=device).realize()
    chain = lambda: (x * 2.0 + 1.0).relu() * 0.5 - 0.25  # noqa: E731
    f = (lambda: chain().sum().realize()) if read_only else (lambda: chain().realize())
    gbs = a.nbytes / best_of(f, repeat=11) / 1e9
    return gbs, copy_bandwidth(n)


def bench_matmul(n: int, device: str) -> tuple[float, float]:
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    x, y = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    out = (x @ y).numpy()
    assert np.allclose(out, a @ b, rtol=1e-3, atol=1e-3 * n), "matmul result is wrong"
    flops = 2 * n ** 3
    ours = flops / best_of(lambda: (x @ y).realize(), repeat=11) / 1e9
    ref = flops / best_of(lambda: a @ b, repeat=11) / 1e9
    return ours, ref


def bench_sum(n: int, device: str) -> tuple[float, float]:
    a = np.random.rand(n, n).astype(np.float32)
    x = Tensor(a, device=device).realize()
    assert np.allclose(x.sum(-1).numpy(), a.sum(-1), rtol=1e-4)
    gbs = a.nbytes / best_of(lambda: x.sum(-1).realize(), repeat=11) / 1e9
    return gbs, copy_bandwidth(n * n)


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
        cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        warm = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    imp, cold_first, hot = map(float, cold.stdout.split())
    _, disk_first, _ = map(float, warm.stdout.split())
    return imp, cold_first, disk_first, hot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not a measurement)")
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str, str]] = []
    n_elem = 1 << 20 if args.quick else 16 << 20
    ours, ref = bench_elementwise(n_elem, args.device, read_only=True)
    rows.append((f"(a) fused elementwise chain + sum, {n_elem >> 20}M f32 (read-only)", f"{ours:.1f} GB/s",
                 f"{ref:.1f} GB/s np.copyto", f"{ours / ref:.2f}x", ">= 1.5x"))
    ours, ref = bench_elementwise(n_elem, args.device, read_only=False)
    rows.append((f"    same chain, {n_elem >> 20}M f32 out (reads + writes)", f"{ours:.1f} GB/s",
                 f"{ref:.1f} GB/s np.copyto", f"{ours / ref:.2f}x", ""))
    for n in ([256] if args.quick else [512, 1024, 2048]):
        ours, ref = bench_matmul(n, args.device)
        target = ">= 0.5x" if n == 1024 else ""
        rows.append((f"(b) matmul {n} f32", f"{ours:.1f} GFLOPS", f"{ref:.1f} GFLOPS numpy",
                     f"{ours / ref:.2f}x", target))
    n = 1024 if args.quick else 4096
    ours, ref = bench_sum(n, args.device)
    rows.append((f"(c) sum(-1) of {n}x{n} f32", f"{ours:.1f} GB/s", f"{ref:.1f} GB/s np.copyto", f"{ours / ref:.2f}x",
                 ">= 1.0x"))
    imp, cold, disk, hot = bench_latency(args.device)
    rows.append(("(d) first call, empty cache", f"{cold * 1e3:.0f} ms", "0.3 s target", f"{cold / 0.3:.2f}x", "< 1.0x"))
    rows.append(("(d) first call, disk cache", f"{disk * 1e3:.1f} ms", "", "", ""))
    rows.append(("(d) repeat call, same process", f"{hot * 1e3:.2f} ms", "", "", ""))
    rows.append(("    import tg", f"{imp * 1e3:.0f} ms", "", "", ""))
    header = ("benchmark", "tg", "reference (same run)", "ratio", "target")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(5)]
    threads = os.cpu_count()
    print(f"tg bench_core  device={args.device}  cores={threads}  numpy={np.__version__}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
