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
# What CI generates: every op family; in-place updates whose operand reads the target; in-place updates
# under autograd in their own kind of program (setitem under autograd raises: see tests/core/test_inplace_*)
CONFIGS = {
    "grad": Config(grad=True),
    "forward": Config(grad=False),
    "grad-inplace": Config(grad=True, inplace_in_grad=True),
    "gemm": Config(nodes=6, grad=True, gemm=True, families=("unary", "binary", "reduce", "matmul", "fused")),
}
CASES = [(name, chunk) for name in CONFIGS for chunk in range({"gemm": 2, "grad-inplace": 3}.get(name, 6))]


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
