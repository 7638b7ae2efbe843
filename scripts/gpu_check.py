"""A GPU check in one command: is tg right, and how fast is it, on this machine's GPU?

    python3 scripts/gpu_check.py                  # CUDA (GPU 0)
    python3 scripts/gpu_check.py --device CUDA:1  # another GPU; CL and CL:N check an OpenCL device
    python3 scripts/gpu_check.py --quick          # a subset of the tests and small sizes (under a minute)
    python3 scripts/gpu_check.py --no-suites      # only the training steps and benchmarks
    python3 scripts/gpu_check.py --report DIR     # also keep pytest's whole log and JUnit XML in DIR

On the device it runs, in this order:

1. the core and nn test suites (pytest in a subprocess, with `TG_DEVICE` and `TG_TEST_DEVICES` set
   to the device, as tests/core/test_gpu_suite.py runs them on CL; xdist `-n auto` when
   pytest-xdist is installed; `--workers N` caps it where many CPU cores share one GPU), counted
   from pytest's JUnit XML;
2. a TinyJit-captured training step (Linear + AdamW), run several times, its losses compared with
   the same steps on the CPU device;
3. one DistributedDataParallel step in a one-rank process group, its loss, gradients and updated
   weights compared with the CPU device's;
4. bench_core's rows on the device (scripts/bench_core.py's own functions): the fused elementwise
   chain and sum(-1) in GB/s with a ratio to the device's copy bandwidth measured in the same run,
   float32, float16 and bfloat16 matmul in GFLOPS with a ratio to bench_core's reference (on CUDA
   from sm_80 the 16-bit ones run on the tensor cores, codegen/mma.py; the row says which kernel ran).

It prints one table: the device, what it is (GPU name, driver and, for CUDA, the NVRTC version and
target architecture), then a row per check. Exit status: 0 when every check passed, 1 when one
failed (the failures are listed under the table), 2 when the device cannot be opened here; then
tg's own message says why and what to do, e.g. "[cuda] no CUDA driver or GPU found ... Fix: ...".
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bench_core  # noqa: E402

import tg.distributed as dist  # noqa: E402
from tg import Device, Tensor, TinyJit, nn  # noqa: E402
from tg.nn import functional as F  # noqa: E402
from tg.nn.state import get_parameters, get_state_dict, load_state_dict  # noqa: E402

KINDS = ("CUDA", "CL")
SUITES = ["tests/core", "tests/nn"]
QUICK_SUITES = ["tests/core/test_ops_elementwise.py", "tests/core/test_ops_reduce.py",
                "tests/core/test_ops_movement.py", "tests/nn/test_layers.py"]
# --quick: the op files whole, and of the layer tests only Linear, Embedding, Sequential and LayerNorm's
QUICK_FILTER = "not test_layers or linear or embedding or sequential or layernorm"
# tests that start whole suites of their own (on CL, or this script): not part of a device's suite
META_TESTS = ["tests/core/test_gpu_suite.py", "tests/core/test_gpu_check.py"]


@dataclass
class Row:
    """One line of the table. ok: True passed, False failed, None a measurement with no verdict."""
    check: str
    result: str
    detail: str = ""
    ok: bool | None = None
    failure: str = ""          # printed under the table when ok is False


@dataclass
class SuiteCounts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failed_names: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ the device


def device_facts(dev: Any) -> list[tuple[str, str]]:
    """What the device is, from the device object tg opened."""
    if dev.name.startswith("CUDA"):
        return [("GPU", f"{dev.gpu_name} (compute capability {dev.capability[0]}.{dev.capability[1]})"),
                ("driver", f"CUDA {dev.driver_version[0]}.{dev.driver_version[1]}"),
                ("NVRTC", f"{dev.compiler.version[0]}.{dev.compiler.version[1]}, target {dev.compiler.arch}")]
    cl_dev = dev.cl_device
    return [("GPU" if is_gpu(dev) else "OpenCL device (not a GPU)", cl_dev.name),
            ("platform", cl_dev.platform.name), ("driver", cl_dev.driver_version)]


def is_gpu(dev: Any) -> bool:
    if dev.name.startswith("CUDA"):
        return True
    import pyopencl  # present: the CL device opened
    return bool(dev.cl_device.type & pyopencl.device_type.GPU)


# ------------------------------------------------------------------------------------ 1. op suites


def parse_junit(path: Path) -> SuiteCounts:
    """Exact counts from pytest's JUnit XML: a testcase with <failure> or <error> failed (an error
    in collection is a testcase too), one with <skipped> was skipped (xfail included)."""
    counts = SuiteCounts()
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            counts.failed += 1
            counts.failed_names.append(f"{case.get('classname', '')}::{case.get('name', '')}")
        elif "skipped" in tags:
            counts.skipped += 1
        else:
            counts.passed += 1
    return counts


def check_suites(device: str, quick: bool, workers: str, report_dir: Path | None = None) -> Row:
    targets = QUICK_SUITES + ["-k", QUICK_FILTER] if quick else SUITES
    parallel = ["-n", workers] if importlib.util.find_spec("xdist") and workers != "0" else []
    env = {**os.environ, "TG_DEVICE": device, "TG_TEST_DEVICES": device}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel,
               f"--junitxml={report}", *[f"--ignore={t}" for t in META_TESTS], *targets]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        counts = parse_junit(report) if report.exists() else None
        if report_dir is not None:
            report_dir.mkdir(parents=True, exist_ok=True)
            (report_dir / "pytest.log").write_text(proc.stdout + proc.stderr)
            if report.exists():
                shutil.copyfile(report, report_dir / "junit.xml")
    name = "op suites" + (" (quick subset)" if quick else "")
    where = " ".join(["pytest", *parallel, *(QUICK_SUITES if quick else SUITES)])
    tail = (proc.stdout + proc.stderr)[-3000:]
    if counts is None or proc.returncode not in (0, 1):
        return Row(name, "FAIL", f"pytest exited {proc.returncode} ({seconds:.0f} s)", False,
                   f"{where} exited {proc.returncode}:\n{tail}")
    ok = proc.returncode == 0 and counts.failed == 0 and counts.passed > 0
    detail = f"{counts.passed} passed, {counts.failed} failed, {counts.skipped} skipped ({seconds:.0f} s)"
    shown = counts.failed_names[:20]
    more = f"\n  ... and {len(counts.failed_names) - 20} more" if len(counts.failed_names) > 20 else ""
    failure = f"{where} on {device}: failed tests:\n  " + "\n  ".join(shown) + more + f"\n{tail}"
    return Row(name, "PASS" if ok else "FAIL", detail, ok, "" if ok else failure)


# ----------------------------------------------------------------- 2, 3. training steps vs the CPU

IN, HIDDEN, CLASSES, BATCH = 32, 64, 10, 16


def small_model(device: str) -> nn.Sequential:
    """Linear-ReLU-Linear with the same numpy weights on every device (so any difference is the step's)."""
    model = nn.Sequential(nn.Linear(IN, HIDDEN, device=device), Tensor.relu,
                          nn.Linear(HIDDEN, CLASSES, device=device))
    rng = np.random.default_rng(0)
    load_state_dict(model, {name: (rng.standard_normal(t.shape) / np.sqrt(t.shape[-1])).astype(np.float32)
                            for name, t in get_state_dict(model).items()})
    return model


def batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """n batches of a learnable task (the class is the argmax of a fixed linear map), so the loss falls."""
    rng = np.random.default_rng(1)
    teacher = rng.standard_normal((IN, CLASSES)).astype(np.float32)
    xs = [rng.standard_normal((BATCH, IN)).astype(np.float32) for _ in range(n)]
    return [(x, (x @ teacher).argmax(-1)) for x in xs]


def jit_losses(device: str, steps: int) -> tuple[list[float], int]:
    """Losses of `steps` AdamW steps on device under TinyJit, and how many captures it made (1: the
    second call captured the step and every later call replayed it)."""
    model = small_model(device)
    opt = nn.optim.AdamW(get_parameters(model), lr=1e-2)

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = [train_step(Tensor(x, device=device), Tensor(y, device=device)).item()
              for x, y in batches(steps)]
    return losses, len(train_step.replays)


def check_jit(device: str, steps: int = 6) -> Row:
    got, captures = jit_losses(device, steps)
    want, _ = jit_losses("CPU", steps)
    diff = float(np.max(np.abs(np.subtract(got, want))))
    ok = captures == 1 and np.allclose(got, want, rtol=1e-4, atol=1e-5)
    detail = (f"{steps} AdamW steps ({steps - 2} replayed): loss {got[0]:.4f} -> {got[-1]:.4f}, "
              f"max |diff| vs CPU {diff:.1e}")
    why = (f"TinyJit losses on {device} {[round(v, 6) for v in got]} vs CPU {[round(v, 6) for v in want]}"
           if captures == 1 else f"TinyJit made {captures} captures of one step, expected 1")
    return Row("TinyJit training step", "PASS" if ok else "FAIL", detail, ok, "" if ok else why)


def ddp_step(device: str) -> dict[str, np.ndarray]:
    """One DDP + SGD step: the loss, every gradient after synchronisation and every weight after."""
    model = small_model(device)
    ddp = dist.DistributedDataParallel(model, bucket_mb=0.004)      # a few buckets of ~4 KiB
    opt = nn.optim.SGD(get_parameters(model), lr=0.1)
    (x, y), = batches(1)
    opt.zero_grad()
    loss = F.cross_entropy(ddp(Tensor(x, device=device)), Tensor(y, device=device))
    loss.backward()
    # at one rank backward skips the all-reduce; run it anyway, so the gradients travel the real path
    # (bucket pack, staging through host memory, all-reduce, unpack into device memory)
    ddp.sync_gradients()
    out = {"loss": loss.numpy()}
    for name, t in get_state_dict(model).items():
        assert t.grad is not None, f"{name} has no gradient after sync_gradients"
        out[f"grad {name}"] = t.grad.numpy()
    opt.step()
    out.update({f"weight {name}": t.numpy() for name, t in get_state_dict(model).items()})
    return out


def check_ddp(device: str) -> Row:
    dist.init_process_group(rank=0, world_size=1)
    try:
        world = dist.get_world_size()
        got, want = ddp_step(device), ddp_step("CPU")
    finally:
        dist.destroy_process_group()
    worst = max(want, key=lambda k: float(np.max(np.abs(got[k] - want[k]))))
    diff = float(np.max(np.abs(got[worst] - want[worst])))
    ok = world == 1 and all(np.allclose(got[k], want[k], rtol=1e-4, atol=1e-5) for k in want)
    n_params = (len(want) - 1) // 2
    detail = (f"{world} rank, SGD: loss {float(got['loss']):.4f}; loss, {n_params} gradients, "
              f"{n_params} weights: max |diff| vs CPU {diff:.1e}")
    return Row("DDP step (1-rank group)", "PASS" if ok else "FAIL", detail, ok,
               "" if ok else f"DDP on {device} vs CPU: {worst} differs by up to {diff:.3g}")


# ------------------------------------------------------------------------------- 4. bench_core rows


def bench_rows(device: str, quick: bool, gpu: bool) -> list[tuple[str, Callable[[], Row]]]:
    """bench_core's measurements: (name, a callable that measures the row), so each row fails alone."""
    n_elem = 1 << 20 if quick else 16 << 20
    n_sum = 1024 if quick else 4096
    # an OpenCL device on a CPU would take minutes at 4096 (as bench_core says)
    sizes = [256] if quick else [1024, 4096] if gpu else [512, 1024]

    def bandwidth(name: str, measure: Callable[[bool], tuple[float, float]]) -> tuple[str, Callable[[], Row]]:
        """Eager (each call scheduled in Python) and TinyJit-replayed (the kernel and its launch)."""
        def row() -> Row:
            (ours, copy), (replayed, _) = measure(False), measure(True)
            return Row(name, f"{ours:.1f} GB/s", f"{ours / copy:.2f}x device copy ({copy:.1f} GB/s); "
                                                 f"TinyJit {replayed:.1f} GB/s, {replayed / copy:.2f}x")
        return name, row

    def matmul(n: int, dtype: str) -> tuple[str, Callable[[], Row]]:
        name = f"matmul {n}x{n} {dtype}"

        def row() -> Row:
            before = set(Device[device]._by_key)
            ours, ref, ref_name = bench_core.bench_matmul(n, device, dtype)
            programs = [p for key, p in Device[device]._by_key.items() if key not in before]
            tensor_cores = any("mma" in getattr(p.info, "extra", {}) for p in programs)
            kernel = "; tensor cores (mma.sync)" if tensor_cores and dtype != "float32" else ""
            return Row(name, f"{ours:.1f} GFLOPS", f"{ours / ref:.2f}x {ref_name} ({ref:.1f} GFLOPS){kernel}")
        return name, row

    return [bandwidth(f"elementwise chain + sum, {n_elem >> 20}M f32",
                      lambda jit: bench_core.bench_elementwise(n_elem, device, True, jit)),
            bandwidth(f"elementwise chain, {n_elem >> 20}M f32 out",
                      lambda jit: bench_core.bench_elementwise(n_elem, device, False, jit)),
            bandwidth(f"sum(-1) of {n_sum}x{n_sum} f32",
                      lambda jit: bench_core.bench_sum(n_sum, device, jit)),
            *[matmul(n, "float32") for n in sizes], matmul(sizes[-1], "float16"),
            *[matmul(n, "bfloat16") for n in sizes]]


# ----------------------------------------------------------------------------------------- main


def guarded(name: str, fn: Callable[[], Row]) -> Row:
    """fn's row, or a FAIL row carrying the traceback: one broken check must not hide the others."""
    try:
        return fn()
    except Exception as e:   # a check reports every error, whatever its kind
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Row(name, "FAIL", first[:100], False, traceback.format_exc())


def print_table(device: str, facts: list[tuple[str, str]], rows: list[Row]) -> None:
    header = Row("check", "result", "detail")
    facts = [("device", device), *facts]
    width = [max(len(getattr(r, f)) for r in [header, *rows]) for f in ("check", "result")]
    width[0] = max(width[0], *(len(k) for k, _ in facts))

    def line(r: Row) -> str:
        return f"{r.check.ljust(width[0])}  {r.result.ljust(width[1])}  {r.detail}".rstrip()

    print(f"tg gpu_check  cores={os.cpu_count()}  numpy={np.__version__}")
    for key, value in facts:
        print(f"{key.ljust(width[0])}  {value}")
    print(line(header))
    print(line(Row("-" * width[0], "-" * width[1], "-" * 40)))
    for r in rows:
        print(line(r))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CUDA", help="CUDA, CUDA:N, CL or CL:N (default CUDA)")
    ap.add_argument("--quick", action="store_true", help="a subset of the op tests and small benchmark sizes")
    ap.add_argument("--workers", default="auto",
                    help="pytest-xdist workers for the op suites (default auto: one per core; each worker "
                         "opens the device, so cap it where many cores share one GPU; 0: one process)")
    ap.add_argument("--no-suites", action="store_true",
                    help="skip the op suites (run them apart, e.g. with pytest's own flags); only the "
                         "training-step checks and the benchmarks")
    ap.add_argument("--report", type=Path, default=None, metavar="DIR",
                    help="write the op suites' whole pytest log (pytest.log) and JUnit XML (junit.xml) "
                         "to DIR")
    args = ap.parse_args(argv)
    kind = args.device.partition(":")[0].upper()
    if kind not in KINDS:
        ap.error(f"--device {args.device}: expected CUDA, CUDA:N, CL or CL:N")
    try:
        dev = Device[args.device]
        facts = device_facts(dev)
    except (ImportError, RuntimeError, ValueError) as e:
        print(str(e), file=sys.stderr)
        return 2
    device = dev.name

    def say(what: str) -> None:
        print(f"[gpu_check] {what} on {device} ...", flush=True)

    rows = []
    if not args.no_suites:
        say("op suites" + (" (quick subset)" if args.quick else ""))
        rows.append(guarded("op suites", lambda: check_suites(device, args.quick, args.workers, args.report)))
    say("TinyJit training step")
    rows.append(guarded("TinyJit training step", lambda: check_jit(device)))
    say("DDP step")
    rows.append(guarded("DDP step (1-rank group)", lambda: check_ddp(device)))
    say("benchmarks")
    rows += [guarded(name, bench) for name, bench in bench_rows(device, args.quick, is_gpu(dev))]
    failed = [r for r in rows if r.ok is False]
    print()
    print_table(device, facts, rows)
    print("\nPASS: every check passed and every benchmark ran" if not failed else
          f"\nFAIL: {', '.join(r.check for r in failed)}")
    for r in failed:
        print(f"\n--- {r.check} ---\n{r.failure.rstrip()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
