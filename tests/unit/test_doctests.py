"""Run the examples in vecpool's docstrings (they are documentation that must work)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "vecpool.vector.async_env",
    "vecpool.vector.make",
    "vecpool.replay.pool",
    "vecpool.replay.wrapper",
    "vecpool.replay.classic",
    "vecpool.bench",
    "vecpool.bench.tune",
    "vecpool.sampling.sampler",
    "vecpool.sampling.collect",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)
    assert result.attempted > 0, f"{name} has no examples to run"
    assert result.failed == 0
