"""Run the examples in vecpool's docstrings (they are documentation that must work)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["vecpool.async_env", "vecpool.make", "vecpool.shared", "vecpool.errors"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0
