"""Shared pytest setup: every test starts from the same RNG seeds (tg's and numpy's global one),
whatever order xdist runs it in."""
import numpy as np
import pytest

import tg


@pytest.fixture(autouse=True)
def _seed():
    tg.Tensor.manual_seed(0)
    np.random.seed(0)
    yield
