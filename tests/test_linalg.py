"""tg.linalg (tg/linalg.py) by torch.linalg's paths: `import tg.linalg`, `from tg import linalg`,
`tg.linalg.norm`."""
import subprocess
import sys

import numpy as np
import pytest

import tg


def test_linalg_is_a_module_reached_every_way():
    import tg.linalg as by_import
    from tg import linalg
    assert linalg is by_import is tg.linalg and type(linalg).__name__ == "module"
    assert {"vector_norm", "matrix_norm", "norm", "cross"} <= set(linalg.__all__)


def test_linalg_loads_lazily():
    code = ("import sys, tg\nprint('tg.linalg' in sys.modules)\ntg.linalg.norm\n"
            "print('tg.linalg' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_norms_match_numpy():
    a = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    x = tg.tensor(a)
    np.testing.assert_allclose(tg.linalg.norm(x).item(), np.linalg.norm(a), rtol=1e-5)
    np.testing.assert_allclose(tg.linalg.norm(x, dim=1).numpy(), np.linalg.norm(a, axis=1), rtol=1e-5)
    np.testing.assert_allclose(tg.linalg.matrix_norm(x).numpy(), np.linalg.norm(a, axis=(-2, -1)), rtol=1e-5)
    np.testing.assert_allclose(tg.linalg.norm(x, dim=(0, 2), keepdim=True).numpy(),
                               np.linalg.norm(a, axis=(0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(tg.linalg.vector_norm(x, ord=1, dim=-1).numpy(), np.abs(a).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(tg.linalg.vector_norm(x, float("inf")).item(), np.abs(a).max())
    b = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(tg.linalg.cross(tg.tensor(b), tg.tensor(b[::-1].copy())).numpy(),
                               np.cross(b, b[::-1]), rtol=1e-5, atol=1e-6)


def test_unsupported_matrix_norm_says_what_to_do():
    with pytest.raises(ValueError, match=r"only ord='fro' is supported, got 'nuc'; fix"):
        tg.linalg.matrix_norm(tg.zeros(2, 2), ord="nuc")
