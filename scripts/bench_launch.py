"""Benchmark tglaunch's start-up, clean exit and failure handling against torchrun and mpirun.

    python scripts/bench_launch.py                 # 2, 4 and 8 processes, median of 5 runs each
    python scripts/bench_launch.py --runs 3 --nproc 2 4

For each process count it measures, from the moment the launcher is started:
  start  time until every rank runs user code (each rank writes time.time() at its first line; the
         latest of those minus the launch time)
  exit   time until the launcher has exited after every rank finished at once (a no-op script)
and, from the moment a rank fails:
  fail   time from the failing rank's last time.time() (just before os._exit(1), while the others
         sleep 60 s) until the launcher has exited.
Columns: tglaunch; torchrun (`python -m torch.distributed.run --nproc-per-node N`) when torch is
importable, with the ratio tglaunch/torchrun; mpirun (the mpiexec next to sys.executable, with
--allow-run-as-root --oversubscribe, running the same scripts directly) when present.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

NOOP = """import time, os
t = time.time()
rank = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "x"))
with open(os.path.join({out!r}, "start" + rank), "w") as f:
    f.write(repr(t))
"""

FAIL = """import os, time
rank = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
if rank == "1":
    with open(os.path.join({out!r}, "failed"), "w") as f:
        f.write(repr(time.time()))
        f.flush()
    os._exit(1)
time.sleep(60)
"""


def launchers() -> dict[str, Callable[[int, str], list[str]]]:
    """Each available launcher: a function from (nproc, script) to its command line."""
    found: dict[str, Callable[[int, str], list[str]]] = {
        "tglaunch": lambda n, s: [sys.executable, "-m", "tg.launch", "--nproc", str(n), s]}
    try:
        import torch  # noqa: F401

        found["torchrun"] = lambda n, s: [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(n),
            "--master-port",
            "0",
            s,
        ]
    except ImportError:
        pass
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if mpiexec.exists():
        found["mpirun"] = lambda n, s: [str(mpiexec), "--allow-run-as-root", "--oversubscribe", "-n", str(n),
                                        sys.executable, s]
    return found


def run_ok(cmd: list[str], out: Path, nproc: int) -> tuple[float, float]:
    """(start, exit) seconds of one clean run of the no-op script."""
    for f in out.glob("start*"):
        f.unlink()
    t0 = time.time()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    t1 = time.time()
    starts = [float((out / f"start{r}").read_text()) for r in range(nproc)]
    return max(starts) - t0, t1 - t0


def run_fail(cmd: list[str], out: Path) -> float:
    """Seconds from the failing rank's exit to the launcher's exit."""
    (out / "failed").unlink(missing_ok=True)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    t1 = time.time()
    return t1 - float((out / "failed").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    found = launchers()
    env_note = f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}, median of {args.runs} runs, seconds"
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        out = Path(tmp)
        noop, fail = out / "noop.py", out / "fail.py"
        noop.write_text(NOOP.format(out=tmp))
        fail.write_text(FAIL.format(out=tmp))
        rows = []
        for n in args.nproc:
            res: dict[str, dict[str, float]] = {}
            for name, make in found.items():
                oks = [run_ok(make(n, str(noop)), out, n) for _ in range(args.runs)]
                fails = [run_fail(make(n, str(fail)), out) for _ in range(args.runs)]
                res[name] = {"start": statistics.median(o[0] for o in oks),
                             "exit": statistics.median(o[1] for o in oks), "fail": statistics.median(fails)}
            rows.append((n, res))
    names = list(found)
    cols = [(metric, name) for metric in ("start", "exit", "fail") for name in names]
    if "torchrun" in found:
        cols += [(metric, "ratio") for metric in ("start", "exit", "fail")]
    header = ["nproc"] + [f"{metric}:{name}" for metric, name in cols]
    table = [header]
    for n, res in rows:
        line = [str(n)]
        for metric, name in cols:
            if name == "ratio":
                line.append(f"{res['tglaunch'][metric] / res['torchrun'][metric]:.2f}x")
            else:
                line.append(f"{res[name][metric]:.3f}")
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print(f"tglaunch start-up / exit / failure latency ({env_note}); ratio = tglaunch/torchrun")
    for i, r in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
