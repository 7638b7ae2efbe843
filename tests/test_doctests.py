"""Every example in tg's docstrings runs and prints what it says (each module's doctests, imported
as the package imports it)."""
import doctest
import importlib
import pkgutil

import pytest

import tg

MODULES = sorted(m.name for m in pkgutil.walk_packages(tg.__path__, "tg.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples in {name} failed (output above)"
    )
