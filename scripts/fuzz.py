"""Run many of the differential fuzzer's programs (tests/fuzz_programs.py) and print each failing seed
with its smallest failing slice.

    python scripts/fuzz.py --count 2000                       # seeds 0..1999, CI's program kinds
    python scripts/fuzz.py --config forward --seed 1 --nodes 30   # one seed, a longer program

The program kinds are CI's (tests/core/test_fuzz.py's CONFIGS). Exit status 1 when a program failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "core"))

from fuzz_programs import Config, check, generate, minimize  # noqa: E402
from test_fuzz import CONFIGS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=sorted(CONFIGS), action="append", help="program kinds (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--count", type=int, default=1, help="programs per config")
    ap.add_argument("--nodes", type=int, default=0, help="nodes per program (default: the config's)")
    args = ap.parse_args()
    failed = 0
    start = time.perf_counter()
    for name in args.config or sorted(CONFIGS):
        cfg = _widened(CONFIGS[name], args)
        for seed in range(args.seed, args.seed + args.count):
            errors = check(seed, cfg)
            if errors:
                failed += 1
                _report(name, seed, cfg, errors)
    total = args.count * len(args.config or CONFIGS)
    print(f"{total} programs, {failed} failed, {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


def _widened(cfg: Config, args: argparse.Namespace) -> Config:
    if args.nodes:
        cfg = dataclasses.replace(cfg, nodes=args.nodes)
    return cfg


def _report(name: str, seed: int, cfg: Config, errors: list[str]) -> None:
    print(f"FAIL seed {seed} ({name}):")
    for e in errors[:6]:
        print("   ", e)
    small = minimize(generate(seed, cfg), ("eager", "jit"))
    if small is not None:
        print("  smallest failing slice (eager or TinyJit, same data seed):")
        print("    " + small.describe().replace("\n", "\n    "))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
