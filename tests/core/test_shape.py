"""ShapeTracker views agree with numpy's own movement ops, and merge when they can."""
import numpy as np
import pytest

from tg.core.ops import MovementOps
from tg.core.runtime.ops_numpy import REFERENCE
from tg.core.shape import ShapeTracker


def materialize(st: ShapeTracker, flat: np.ndarray) -> np.ndarray:
    env = {v.name: g for v, g in zip(st.variables(), np.ogrid[tuple(slice(0, s) for s in st.shape)])}
    idx, valid = st.expr_idxs(st.variables())
    idx_a = np.broadcast_to(np.asarray(idx.eval(env)), st.shape)
    valid_a = np.broadcast_to(np.asarray(valid.eval(env), dtype=bool), st.shape)
    return np.where(valid_a, flat[np.where(valid_a, idx_a, 0)], 0)


def random_ops(rng, shape, n):
    ops = []
    for _ in range(n):
        kind = rng.choice(["reshape", "permute", "expand", "pad", "shrink", "flip"])
        if kind == "permute":
            arg = tuple(rng.permutation(len(shape)))
            shape = tuple(shape[i] for i in arg)
        elif kind == "reshape":
            size = int(np.prod(shape))
            arg = (
                (size,)
                if len(shape) > 1
                else next(((d, size // d) for d in (2, 3, 5, 7) if size % d == 0), (size,))
            )
            shape = arg
        elif kind == "expand":
            if 1 not in shape:
                arg = (1,) + shape
                ops.append((MovementOps.RESHAPE, arg))
                shape = arg
            arg = tuple(3 if s == 1 else s for s in shape)
            shape = arg
        elif kind == "pad":
            arg = tuple((int(rng.integers(0, 2)), int(rng.integers(0, 3))) for _ in shape)
            shape = tuple(s + a + b for s, (a, b) in zip(shape, arg))
        elif kind == "shrink":
            arg = tuple((int(rng.integers(0, max(s // 2, 1))), s) for s in shape)
            shape = tuple(hi - lo for lo, hi in arg)
        else:
            arg = tuple(bool(rng.integers(0, 2)) for _ in shape)
        ops.append((getattr(MovementOps, kind.upper()), arg))
    return ops


@pytest.mark.parametrize("seed", range(40))
def test_random_view_chains_match_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = (3, 4, 5)[: int(rng.integers(1, 4))]
    base = np.arange(int(np.prod(shape))) + 1
    st = ShapeTracker.from_shape(shape)
    ref = base.reshape(shape)
    for op, arg in random_ops(rng, shape, 5):
        st = getattr(st, op.name.lower())(arg)
        ref = REFERENCE[op](ref, arg)
    np.testing.assert_array_equal(materialize(st, base), ref)


def test_views_merge_into_one_when_affine():
    st = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
    assert len(st.views) == 2      # a transposed flatten cannot be one view
    st = ShapeTracker.from_shape((10,)).reshape((1, 10)).expand((4, 10)).reshape((40,)).shrink(((0, 33),)) \
        .reshape((3, 11)).shrink(((0, 3), (0, 8)))
    assert len(st.views) == 1 and st.views[0].strides == (1, 1)   # sliding windows: one strided view


def test_contiguous_reshape_stays_one_view():
    st = ShapeTracker.from_shape((2, 3, 4)).reshape((6, 4)).reshape((24,))
    assert st.contiguous
