"""Shared pytest setup: every test process starts from the same RNG seed."""
import pytest

import tg


@pytest.fixture(autouse=True)
def _seed():
    tg.Tensor.manual_seed(0)
    yield
