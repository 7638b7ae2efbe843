"""Which CPU kernels run on OpenMP's threads: those with enough work, counted as elements or as ALU
ops (heuristics.PARALLEL_OPS to an element), whichever is more; so a small kernel of transcendentals
(an LSTM step's gates: 10,240 sigmoids and tanhs) is shared among the threads, while an add of as
many elements runs on one."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import kernels_of

from tg import Tensor
from tg.core.codegen import heuristics
from tg.core.codegen.linearizer import linearize
from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
from tg.core.runtime.ops_cpu import _vector_bytes

THRESHOLD = 1 << 15
OPS = {"add": lambda x: x + 1.0, "mul_add": lambda x: x * 2.0 + x, "tanh": Tensor.tanh,
       "sigmoid": Tensor.sigmoid, "erf": Tensor.erf, "gelu": lambda x: x.gelu()}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("n", [640, 10240, 40000, 300000])
def test_parallel_when_elements_or_ops_are_enough(op, n):
    x = Tensor(np.random.default_rng(n).normal(size=n).astype(np.float32))
    (kernel,) = kernels_of(OPS[op](x))
    lin = linearize(kernel, _vector_bytes())
    src = CStyleRenderer(DIALECTS["c"], parallel_threshold=THRESHOLD, threads=2).render(lin, "k")
    work = max(lin.work, lin.flops // heuristics.PARALLEL_OPS)
    assert ("omp parallel" in src) == (work >= THRESHOLD and lin.work > lin.lanes), src[-600:]
    if n >= THRESHOLD:            # enough elements: every kernel
        assert "omp parallel" in src
    if op in ("tanh", "sigmoid", "erf") and n >= 10240:   # enough ops
        assert "omp parallel" in src
    if op == "add" and n < THRESHOLD:
        assert "omp parallel" not in src
