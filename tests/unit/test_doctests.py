"""Run the examples in vecpool's docstrings (they are documentation that must work)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import vecpool

PACKAGE = Path(vecpool.__file__).resolve().parent
# every module with an example, found (not listed: a new one is never left out)
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
        ".__init__"
    )
    for path in PACKAGE.rglob("*.py")
    if ">>> " in path.read_text()
)
OPTIONAL = {"stable_baselines3", "ray", "torchrl", "tensordict", "minari", "torch"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:  # an extra's adapter, extra absent
        if error.name is None or error.name.split(".")[0] not in OPTIONAL:
            raise
        pytest.skip(f"needs {error.name}")
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)
    # (an example marked +SKIP, e.g. one needing a Minari install, is not attempted)
    assert result.failed == 0


def test_the_examples_are_found():
    assert {"vecpool.replay.pool", "vecpool._engine.numbering"} <= set(MODULES)
