"""The differential fuzzer in CI: seeded random programs (tests/fuzz_programs.py) run in tg eagerly, again
with new data and constants (the schedule kept for their structure), at other sizes and under TinyJit,
each compared with a float64 numpy interpreter of the same program that bounds float32 rounding, and
(for programs with a loss) every float input's gradient against central differences.

A fixed set of seeds runs here, split into cases so xdist spreads them. More: TG_TEST_FUZZ_PROGRAMS=N
runs N programs a case, from TG_TEST_FUZZ_SEED (a test-only knob, read here as TG_TEST_DEVICES is);
scripts/fuzz.py runs thousands and minimizes a failure.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from fuzz_programs import Config, check, draw, evaluate, generate, make_data

PROGRAMS = int(os.environ.get("TG_TEST_FUZZ_PROGRAMS") or 2)
FIRST = int(os.environ.get("TG_TEST_FUZZ_SEED") or 0)
# What CI generates. Left out until their fixes land (issue 34), then widen here:
#   "extreme", "argreduce": max/min(dim) values and argmax after a transcendental op are wrong (item 1;
#       seeds 7 and 12 of Config() hit it: F.gelu(x - c).min(1) gives 0 for some rows);
#   inplace_reads_target: `x -= f(x)` recomputes f from the new x (item 3; seed 1 of Config(grad=False));
#   inplace_in_grad: in-place writes are refused under autograd (item 4).
_KNOWN = ("extreme", "argreduce")
_FAMILIES = tuple(f for f in Config().families if f not in _KNOWN)
CONFIGS = {
    "grad": Config(grad=True, families=_FAMILIES),
    "forward": Config(grad=False, families=_FAMILIES, inplace_reads_target=False),
    "gemm": Config(nodes=6, grad=True, gemm=True, families=("unary", "binary", "reduce", "matmul", "fused")),
}
CASES = [(name, chunk) for name in CONFIGS for chunk in range(6 if name != "gemm" else 2)]


@pytest.mark.parametrize("name,chunk", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_programs_match_the_reference(name: str, chunk: int) -> None:
    cfg = CONFIGS[name]
    failures = []
    for k in range(PROGRAMS):
        seed = FIRST + chunk * PROGRAMS + k
        failures += [f"seed {seed} ({name}): {e}" for e in check(seed, cfg)]
    assert not failures, (
        "\n".join(failures) + "\nrepro: python scripts/fuzz.py --config " + name + " --seed N"
    )


def test_generator_is_deterministic_and_covers_every_family():
    seen = set()
    for seed in range(60):
        a, b = generate(seed, CONFIGS["forward"]), generate(seed, CONFIGS["forward"])
        assert a.describe() == b.describe()
        seen |= {n.op for n in a.nodes}
    assert seen >= {
        "unary",
        "domain",
        "binary",
        "const",
        "where",
        "mask",
        "sum",
        "matmul",
        "linear",
        "conv",
        "move",
        "index",
        "setitem",
        "inplace",
        "softmax",
        "layernorm",
        "gelu",
    }


def test_reference_bounds_hold_for_float32_evaluation():
    # the reference's error bounds cover a numpy float32 evaluation of the same programs' elementwise
    # ops: a check of the bounds themselves, independent of tg
    rng = np.random.default_rng(0)
    cfg = Config(grad=False, families=("unary", "binary", "reduce", "movement"))
    for seed in range(30):
        prog = generate(seed, cfg)
        d = draw(prog, rng)
        if d is None:
            continue
        f32 = evaluate(prog, [x.astype(np.float32) for x in d.data])
        for o in prog.outputs:
            assert np.all(np.abs(f32.values[o] - d.ref.values[o]) <= d.ref.errors[o] + 1e-300)
    assert make_data(generate(0, cfg), rng)
