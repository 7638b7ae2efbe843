"""Core benchmark: tables with ratios to references measured in the same run.

    python scripts/bench_core.py                  # CPU device, all rows
    python scripts/bench_core.py --device CPU,CL  # a device column: the same rows on each device
    python scripts/bench_core.py --quick          # smaller sizes, for a smoke run

Table 1, per device: (a) a fused elementwise chain on 16M float32 ending in a sum (a read-only kernel),
GB/s read vs np.copyto bandwidth, and the same chain writing its 16M outputs; (b) float32 matmul GFLOPS
vs numpy's matmul on devices other than the CPU; (c) sum over the last axis of 4096x4096, GB/s vs
np.copyto; (d) first-call latency (trace + compile, empty cache) and cached-call latencies. On a device
other than the CPU, bandwidth rows compare with that device's own device-to-device copy (measured in
the same run), every timed call waits for the device, and a float16 matmul row is added (against
PyTorch on CUDA when it is importable, else against the float32 row).

Table 2, the CPU's compute kernels against the libraries a user would otherwise call: matmul in the
layouts training produces (A B, A^T B, A B^T, batched) against numpy's OpenBLAS with its native kernel
and torch (MKL / oneDNN); conv2d forward and both backward kernels against torch; row-wise softmax,
log_softmax, layer_norm and cross_entropy against numpy and torch. Each row also gives tg's fraction
of the machine's limit measured in the same run: the FMA peak of all cores (a generated loop of 16
independent vector FMAs per core) for compute; for a row reduction, np.copyto of the same bytes, timed
in the same rounds as the contenders (the memory bandwidth of a shared VM moves by 2x in minutes). The
contenders take turns (three rounds; a cell is the best time of any round). tg runs eagerly, as a
user's script would (its scheduling included), with an empty search cache for none of it: kernels
are built and searched (TG_BEAM) before timing.

Table 3, bfloat16 matmul and conv (float32 sums, rounded once) against torch's bfloat16 (oneDNN) and
tg's float32, with the bfloat16 unit's measured peak as the limit. Table 4, float16 and bfloat16 in
memory-bound kernels (an elementwise chain; a row softmax, float32 inside) against the same kernel in
tg float32 (twice the bytes) and torch at both dtypes.

This process unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE before numpy loads, so OpenBLAS picks its
kernel for this CPU (an environment forcing Haswell's on an AVX-512 CPU halves its speed); the line
above table 2 says which kernel threadpoolctl reports. Nothing else (tests, CI) changes them.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):     # before numpy loads OpenBLAS: its native kernel
    os.environ.pop(_name, None)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tg import Device, Tensor, TinyJit  # noqa: E402
from tg.core.device import Buffer, split_device  # noqa: E402
from tg.utils.flops import cpu_peak_gflops  # noqa: E402


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
    sizes = [] if not gpu else [256] if quick else {"CUDA": [1024, 2048, 4096]}.get(split_device(device)[0],
                                                                                      [512, 1024])
    for n in sizes:     # the CPU's matmul is in table 2, against the libraries
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


# ---------------------------------------------------------------------------- table 2: CPU vs libraries

def fma_peak() -> float:
    """GFLOPS of 16 independent chains of vector FMAs on every core (tg.utils.flops), measured now."""
    return cpu_peak_gflops("float32", fresh=True)[0]


def bf16_peak() -> tuple[float, str]:
    """(GFLOPS, unit) of the CPU's bfloat16 unit on every core: AMX's tiles where the process may use
    them, else AVX512_BF16's dot products, else the float32 FMA peak (the conversion path); measured now."""
    return cpu_peak_gflops("bfloat16", fresh=True)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        return "?"


def bf16_matmul_case(n: int, torch) -> tuple[float, dict]:
    """(flops, contenders) of an n x n bfloat16 matmul, and its float32 twin on each side."""
    import tg
    rng = np.random.default_rng(n)
    a_np, b_np = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    ah, bh = a.cast(tg.bfloat16).realize(), b.cast(tg.bfloat16).realize()
    got = (ah @ bh).float().numpy()
    ref = ah.float().numpy().astype(np.float64) @ bh.float().numpy()
    assert np.abs(got - ref).max() <= 2 ** -7 * np.abs(ref).max(), f"tg bf16 matmul {n} is wrong"
    contenders = {"tg bf16": lambda: (ah @ bh).realize(), "tg f32": lambda: (a @ b).realize()}
    if torch is not None:
        ta, tb = torch.from_numpy(a_np).bfloat16(), torch.from_numpy(b_np).bfloat16()
        fa, fb = torch.from_numpy(a_np), torch.from_numpy(b_np)
        contenders.update({"torch bf16": lambda: ta @ tb, "torch f32": lambda: fa @ fb})
    return 2 * n ** 3, contenders


def bf16_conv_case(bsz: int, cin: int, cout: int, hw: int, pad: int, torch) -> tuple[float, dict]:
    """(flops, contenders) of a bfloat16 3x3 conv2d forward, and its float32 twin on each side."""
    import tg
    rng = np.random.default_rng(cin)
    x_np = rng.standard_normal((bsz, cin, hw, hw), np.float32)
    w_np = rng.standard_normal((cout, cin, 3, 3), np.float32)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    xh, wh = x.cast(tg.bfloat16).realize(), w.cast(tg.bfloat16).realize()
    contenders = {"tg bf16": lambda: xh.conv2d(wh, padding=pad).realize(),
                  "tg f32": lambda: x.conv2d(w, padding=pad).realize()}
    if torch is not None:
        F = torch.nn.functional
        tx, tw = torch.from_numpy(x_np), torch.from_numpy(w_np)
        txh, twh = tx.bfloat16(), tw.bfloat16()
        contenders.update({"torch bf16": lambda: F.conv2d(txh, twh, padding=pad),
                           "torch f32": lambda: F.conv2d(tx, tw, padding=pad)})
    out_hw = hw + 2 * pad - 2
    return 2 * bsz * cout * cin * 9 * out_hw * out_hw, contenders


def low_precision_rows(quick: bool) -> tuple[list[tuple[str, ...]], str]:
    """Table 3: bfloat16 matmul and conv (float32 sums, rounded once) against torch's bfloat16 (oneDNN)
    and tg's own float32, in turns; the limit is the bfloat16 unit's measured peak."""
    torch = load_torch()
    peak, unit = bf16_peak()
    rows: list[tuple[str, ...]] = []
    for n in [256] if quick else [1024, 2048, 4096]:
        flops, c = bf16_matmul_case(n, torch)
        rows.append(_low_row(f"(h) matmul {n} bf16", flops, c, peak, unit, 5 if n < 4096 else 2))
    convs = [(2, 16, 16, 16, 1)] if quick else [(16, 64, 64, 56, 1), (128, 32, 64, 26, 0)]
    for bsz, cin, cout, hw, pad in convs:
        flops, c = bf16_conv_case(bsz, cin, cout, hw, pad, torch)
        rows.append(_low_row(f"(h) conv 3x3 {cin}->{cout} {hw}x{hw} b{bsz} bf16", flops, c, peak, unit, 5))
    head = f"limit (same run): {unit} peak {peak:.0f} GFLOPS on {os.cpu_count()} cores ({cpu_model()})"
    return rows, head


# the targets by the unit the CPU computes bfloat16 products on: (torch bf16, tg f32) ratios
LOW_TARGETS = {"AMX TDPBF16PS": (1.0, 3.0), "VDPBF16PS": (None, 1.2)}


def _low_row(name: str, flops: float, contenders: dict, peak: float, unit: str,
             repeat: int) -> tuple[str, ...]:
    rate = {k: flops / t / 1e9 for k, t in race(contenders, repeat).items()}
    cell = lambda k: f"{rate[k]:.0f}" if k in rate else "-"   # noqa: E731
    vs_torch = rate["tg bf16"] / rate["torch bf16"] if "torch bf16" in rate else None
    vs_f32 = rate["tg bf16"] / rate["tg f32"]
    want_torch, want_f32 = LOW_TARGETS.get(unit, (None, None))
    target = ", ".join([f">= {want_torch}x torch bf16"] * (want_torch is not None)
                       + [f">= {want_f32}x tg f32"] * (want_f32 is not None)) or "- (no bfloat16 unit)"
    ok = (want_torch is None or vs_torch is None or vs_torch >= want_torch) \
        and (want_f32 is None or vs_f32 >= want_f32)
    return (name, f"{cell('tg bf16')} GFLOPS", cell("tg f32"), cell("torch bf16"), cell("torch f32"),
            f"{vs_torch:.2f}x" if vs_torch else "-", f"{vs_f32:.2f}x", f"{rate['tg bf16'] / peak:.2f}",
            target, "ok" if ok else "MISS")


NARROW_OPS = ("chain", "softmax")


def narrow_case(op: str, dtype: str, n: int, torch) -> dict:
    """Contenders of a memory-bound kernel over an n x n float16 or bfloat16 tensor (an elementwise
    chain, or a row softmax: float32 inside, rounded once), and its float32 twin on each side."""
    import tg
    x_np = np.random.default_rng(n).standard_normal((n, n), np.float32)
    x = Tensor(x_np).realize()
    xn = x.cast(getattr(tg, dtype)).realize()
    ours = {"chain": lambda t: (t * 2 + 1).relu(), "softmax": lambda t: t.softmax(-1)}[op]
    got, want = ours(xn).float().numpy(), ours(Tensor(xn.float().numpy())).numpy()
    assert np.abs(got - want).max() <= 2 ** -7 * max(np.abs(want).max(), 1e-30), f"tg {dtype} {op} is wrong"
    contenders = {"tg narrow": lambda: ours(xn).realize(), "tg f32": lambda: ours(x).realize()}
    if torch is not None:
        tx = torch.from_numpy(x_np)
        txn = tx.to(getattr(torch, dtype))
        theirs = {"chain": lambda t: torch.relu(t * 2 + 1), "softmax": lambda t: torch.softmax(t, -1)}[op]
        contenders.update({"torch narrow": lambda: theirs(txn), "torch f32": lambda: theirs(tx)})
    return contenders


def narrow_rows(quick: bool) -> list[tuple[str, ...]]:
    """Table 4: float16 and bfloat16 in memory-bound kernels (SIMD lanes: the 16-bit words widened and
    narrowed 16 at a time) against tg's float32 (the same kernel on twice the bytes) and torch."""
    torch = load_torch()
    n = 512 if quick else 4096
    rows: list[tuple[str, ...]] = []
    for dtype in ("bfloat16", "float16"):
        for op in NARROW_OPS:
            best = race(narrow_case(op, dtype, n, torch), 5)
            ms = {k: f"{best[k] * 1e3:.2f}" if k in best else "-"
                  for k in ("tg narrow", "tg f32", "torch narrow", "torch f32")}
            vs_torch = best["torch narrow"] / best["tg narrow"] if "torch narrow" in best else None
            vs_f32 = best["tg f32"] / best["tg narrow"]
            rows.append((f"(i) {op} {n}x{n} {dtype}", f"{ms['tg narrow']} ms", ms["tg f32"],
                         ms["torch narrow"], ms["torch f32"], f"{vs_torch:.2f}x" if vs_torch else "-",
                         f"{vs_f32:.2f}x", ">= 1.0x tg f32", "ok" if vs_f32 >= 1.0 else "MISS"))
    return rows


def blas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "numpy's BLAS kernel unknown (pip install threadpoolctl)"
    found = [f"{i.get('internal_api')} {i.get('version')} kernel {i.get('architecture')}, "
             f"{i.get('num_threads')} threads" for i in threadpool_info() if i.get("user_api") == "blas"]
    return "numpy's BLAS: " + ("; ".join(found) or "none found")


def load_torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    return torch


def race(contenders: dict, repeat: int, rounds: int = 3) -> dict:
    """The best time of each contender (name -> no-argument call, or None), taking turns in rounds with
    a pause between (OpenMP's and OpenBLAS's threads spin a while after a call: not on the next one)."""
    best = {name: float("inf") for name, fn in contenders.items() if fn is not None}
    for _ in range(rounds):
        for name in best:
            best[name] = min(best[name], best_of(contenders[name], repeat=repeat, warmup=1))
            time.sleep(0.2)
    return best


def matmul_case(shape: str, torch) -> tuple[float, dict]:
    """(flops, contenders) of one matmul layout: 'n' or 'b<batch>' then a size, '^T' marks a transposed
    operand (A^T B: a stored as (k, m))."""
    layout, n = shape.split()
    n = int(n)
    batch = int(layout[1:]) if layout.startswith("b") else 0
    rng = np.random.default_rng(0)
    a_np = rng.random((batch, n, n) if batch else (n, n), dtype=np.float32)
    b_np = rng.random((batch, n, n) if batch else (n, n), dtype=np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    if layout == "AtB":
        a, a_np = a.T, a_np.T
    if layout == "ABt":
        b, b_np = b.T, b_np.T
    got = (a @ b).numpy()
    assert np.allclose(got, a_np @ b_np, rtol=1e-3, atol=1e-3 * n), f"tg matmul {shape} is wrong"
    contenders = {"tg": lambda: (a @ b).realize(), "numpy": lambda: a_np @ b_np, "torch": None}
    if torch is not None:
        ta, tb = torch.from_numpy(np.ascontiguousarray(a_np.swapaxes(-1, -2))).swapaxes(-1, -2) \
            if layout == "AtB" else torch.from_numpy(a_np), \
            torch.from_numpy(np.ascontiguousarray(b_np.swapaxes(-1, -2))).swapaxes(-1, -2) \
            if layout == "ABt" else torch.from_numpy(b_np)
        contenders["torch"] = lambda: ta @ tb
    return 2 * max(batch, 1) * n ** 3, contenders


def conv_case(b: int, cin: int, cout: int, hw: int, pad: int, which: str, torch) -> tuple[float, dict]:
    """(flops, contenders) of a 3x3 conv2d: the forward, or the gradient of its input or weight."""
    rng = np.random.default_rng(0)
    x_np = rng.random((b, cin, hw, hw), dtype=np.float32)
    w_np = rng.random((cout, cin, 3, 3), dtype=np.float32) - 0.5
    out_hw = hw + 2 * pad - 2
    g_np = rng.random((b, cout, out_hw, out_hw), dtype=np.float32)
    flops = 2 * b * cout * cin * 9 * out_hw * out_hw
    x, w, g = Tensor(x_np).realize(), Tensor(w_np).realize(), Tensor(g_np).realize()

    def tg_run() -> None:
        xx = Tensor(x.lazydata, requires_grad=which == "input grad") if which == "input grad" else x
        ww = Tensor(w.lazydata, requires_grad=which == "weight grad") if which == "weight grad" else w
        y = xx.conv2d(ww, padding=pad)
        if which == "forward":
            y.realize()
            return
        (y * g).sum().backward()
        (xx if which == "input grad" else ww).grad.realize()
    contenders = {"tg": tg_run, "numpy": None, "torch": None}
    if torch is not None:
        tx, tw, tgr = torch.from_numpy(x_np), torch.from_numpy(w_np), torch.from_numpy(g_np)
        F = torch.nn.functional

        def torch_run() -> None:
            xx = tx.requires_grad_(which == "input grad")
            ww = tw.requires_grad_(which == "weight grad")
            with torch.set_grad_enabled(which != "forward"):
                y = F.conv2d(xx, ww, padding=pad)
                if which != "forward":
                    torch.autograd.grad(y, xx if which == "input grad" else ww, tgr)
        contenders["torch"] = torch_run
    return flops, contenders


def rows_case(op: str, n: int, torch) -> tuple[float, dict]:
    """(bytes read, contenders) of a row-wise op on an n x n float32 matrix."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((n, n), dtype=np.float32)
    y_np = rng.integers(0, n, n)
    x, y = Tensor(x_np).realize(), Tensor(y_np).realize()
    from tg.nn import functional as tgF

    def np_softmax(v: np.ndarray) -> np.ndarray:
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def np_log_softmax(v: np.ndarray) -> np.ndarray:
        s = v - v.max(axis=-1, keepdims=True)
        return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))
    ours = {"softmax": lambda: x.softmax(-1).realize(), "log_softmax": lambda: x.log_softmax(-1).realize(),
            "layer_norm": lambda: tgF.layer_norm(x, n).realize(),
            "cross_entropy": lambda: tgF.cross_entropy(x, y).realize()}[op]
    theirs = {"softmax": lambda: np_softmax(x_np), "log_softmax": lambda: np_log_softmax(x_np),
              "layer_norm": lambda: (x_np - x_np.mean(-1, keepdims=True))
              / np.sqrt(x_np.var(-1, keepdims=True) + 1e-5),
              "cross_entropy": lambda: -np_log_softmax(x_np)[np.arange(n), y_np].mean()}[op]
    contenders = {"tg": ours, "numpy": theirs, "torch": None}
    if torch is not None:
        tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)
        F = torch.nn.functional
        contenders["torch"] = {"softmax": lambda: torch.softmax(tx, -1),
                               "log_softmax": lambda: torch.log_softmax(tx, -1),
                               "layer_norm": lambda: F.layer_norm(tx, (n,)),
                               "cross_entropy": lambda: F.cross_entropy(tx, ty)}[op]
    return x_np.nbytes, contenders


def cpu_library_rows(quick: bool) -> tuple[list[tuple[str, ...]], str]:
    torch = load_torch()
    peak = fma_peak()
    copies: list[float] = []
    rows: list[tuple[str, ...]] = []

    def add(name: str, work: float, contenders: dict, unit: str, limit: float | None, target_ref: str,
            target: float, repeat: int) -> None:
        """A row; limit None: np.copyto of the work's bytes takes turns with the contenders, and its
        bandwidth (this VM's memory bandwidth swings by 2x from minute to minute) is the limit."""
        if limit is None:
            src = np.ones(int(work) // 4, np.float32)
            dst = np.empty_like(src)
            contenders = {**contenders, "copy": lambda: np.copyto(dst, src)}
        times = race(contenders, repeat)
        rate = {k: work / t / 1e9 for k, t in times.items()}
        if limit is None:
            limit = rate.pop("copy")
            copies.append(limit)
        ref = rate.get(target_ref) if target_ref != "limit" else None
        ratio = rate["tg"] / ref if ref else rate["tg"] / limit
        cell = lambda k: f"{rate[k]:.1f}" if k in rate else "-"   # noqa: E731
        best_lib = max((v for k, v in rate.items() if k != "tg"), default=None)
        rows.append((name, f"{cell('tg')} {unit}", cell("numpy"), cell("torch"),
                     f"{rate['tg'] / best_lib:.2f}x" if best_lib else "-", f"{rate['tg'] / limit:.2f}",
                     f">= {target:.1f}x {target_ref}", "ok" if ratio >= target else "MISS"))

    sizes = [256] if quick else [1024, 2048, 4096]
    for n in sizes:
        flops, c = matmul_case(f"n {n}", torch)
        # 5 runs a round below 4096: the first calls after the pause run slow (tg's 1024: 6.4-7.0 ms, then
        # 5.1-5.9), and best of 3 was as often a warm-up as not
        add(f"(e) matmul {n} f32", flops, c, "GFLOPS", peak, "numpy", 0.8, 5 if n < 4096 else 1)
    for layout in ("AtB", "ABt", "b8"):
        n = 256 if quick else (1024 if layout == "b8" else 2048)
        flops, c = matmul_case(f"{layout} {n}", torch)
        label = {"AtB": "A^T B", "ABt": "A B^T", "b8": "batched 8 x"}[layout]
        add(f"(e) matmul {label} {n} f32", flops, c, "GFLOPS", peak, "numpy", 0.8, 5)
    convs = [(2, 16, 16, 16, 1)] if quick else \
        [(16, 64, 64, 56, 1), (128, 32, 64, 26, 0), (128, 1, 32, 28, 0)]     # the issue's, bench_train's CNN
    for b, cin, cout, hw, pad in convs:
        for which in ("forward", "input grad", "weight grad"):
            if cin == 1 and which == "input grad":
                continue              # the first layer of the CNN has no input gradient
            flops, c = conv_case(b, cin, cout, hw, pad, which, torch)
            # 5 runs a round: after the pause, the first runs of a sub-millisecond conv (1->32) take
            # 1.5-2.5x as long (2.0, 1.6, 1.3 ms for tg's 0.83 ms), so best of 2 measured the warm-up
            add(f"(f) conv 3x3 {cin}->{cout} {hw}x{hw} b{b} {which}", flops, c, "GFLOPS", peak,
                "torch", 1.0, 5)
    n = 1024 if quick else 4096
    for op in ("softmax", "log_softmax", "layer_norm", "cross_entropy"):
        nbytes, c = rows_case(op, n, torch)
        add(f"(g) {op} rows of {n}x{n} f32 (GB/s in)", nbytes, c, "GB/s", None, "limit", 0.6, 3)
    head = (f"limits (same run): FMA peak {peak:.0f} GFLOPS on {os.cpu_count()} cores, np.copyto "
            f"{min(copies):.1f}-{max(copies):.1f} GB/s (in each (g) row's rounds); {blas_kernel()}; "
            f"torch {torch.__version__ if torch is not None else 'not installed'}")
    return rows, head


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU", help="a device or a comma-separated list (CPU,CL,CUDA)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not a measurement)")
    args = ap.parse_args()
    devices = [d.strip().upper() for d in args.device.split(",") if d.strip()]
    rows = [row for device in devices for row in device_rows(device, args.quick)]
    names = {d: Device[d].hardware for d in devices}
    print(f"tg bench_core  devices={', '.join(f'{d} ({n})' if n != d else d for d, n in names.items())}  "
          f"cores={os.cpu_count()}  numpy={np.__version__}")
    print_table(("device", "benchmark", "tg", "reference (same run)", "ratio", "target"), rows)
    if "CPU" in devices:
        lib_rows, head = cpu_library_rows(args.quick)
        print()
        print("CPU kernels against libraries (best of 3 interleaved rounds; tg eager)")
        print(head)
        print_table(("benchmark", "tg", "numpy", "torch", "tg/best", "of limit", "target", ""), lib_rows)
        low_rows, head = low_precision_rows(args.quick)
        print()
        print("bfloat16 kernels (float32 sums, rounded once) against torch bfloat16 and tg float32 "
              "(best of 3 interleaved rounds; tg eager)")
        print(head)
        print_table(("benchmark", "tg bf16", "tg f32", "torch bf16", "torch f32", "vs torch bf16",
                     "vs tg f32", "of limit", "target", ""), low_rows)
        print()
        print("float16 / bfloat16 memory-bound kernels against tg float32 and torch (times; best of 3 "
              "interleaved rounds; tg eager)")
        print_table(("benchmark", "tg", "tg f32", "torch", "torch f32", "vs torch", "vs tg f32", "target",
                     ""), narrow_rows(args.quick))


if __name__ == "__main__":
    main()
