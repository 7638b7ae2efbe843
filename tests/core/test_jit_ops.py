"""Every op of the torch-op parity suite under TinyJit: it either replays right with new inputs at
every call, or raises "[jit] ..." at its first call because it reads tensor values to the host (and
would otherwise replay the first call's). Never a stale replay."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from test_op_parity_suite import CASES, Case, _compare, _inputs

import tg as torch
from tg import Tensor, TinyJit

# the cases that read tensor values on the host: a shape or a Python value depends on them (the
# random-creation cases read their own statistics with .item(); randperm sorts random keys on the host)
HOST_READING = {
    "nonzero", "nonzero as_tuple", "argwhere", "masked_select", "bool index", "unique", "unique float",
    "unique inverse counts", "unique_consecutive", "bincount", "bincount minlength",
    "repeat_interleave tensor", "item", "tolist", "allclose", "equal", "F.one_hot inferred",
    "rand", "rand tuple", "rand_like", "randint", "randperm", "tensor of tensors", "as_tensor", "from_numpy",
}


def _copied(call: Callable[..., Any]) -> Callable[..., Any]:
    """call with its tensor results made contiguous: a view of an input (flip, expand, a slice) is
    then computed by a kernel of the capture instead of being refused as an input returned unchanged."""
    def run(*xs: Tensor) -> Any:
        out = call(*xs)
        if isinstance(out, Tensor):
            return out.contiguous()
        if isinstance(out, (tuple, list)):
            items = [o.contiguous() if isinstance(o, Tensor) else o for o in out]
            return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
        return out
    return run


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_replays_right_or_refuses(case: Case) -> None:
    jf = TinyJit(_copied(case.call))
    for call in range(4):      # eager, capture, two replays: each with new inputs
        arrays = _inputs(case, seed=len(case.name) + 101 * call)
        tensors = [torch.tensor(a) for a in arrays]
        try:
            got = jf(*tensors)
        except ValueError as e:
            # refusals: a host read (from the first call), an input handed back as it is (the capture)
            assert (call, True) in ((0, "reads tensor values on the host" in str(e)),
                                    (1, "returns one of its inputs" in str(e))), f"call {call}: {e}"
            assert "returns one" in str(e) or case.name in HOST_READING, f"not a known host read: {e}"
            return
        with np.errstate(all="ignore"):
            want = case.ref(*arrays)
        _compare(got, want, case.tol, case.dtype, where=f"call {call}")
    assert case.name not in HOST_READING, "a host-reading op replayed without raising"
