"""What the example smoke tests share: importing an example script as a module."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


def _load(name: str) -> ModuleType:
    """``examples/<name>.py`` imported as a module (its ``__main__`` block not run).

    The scripts cap BLAS threads through ``os.environ`` on import; that stays local.
    """
    spec = importlib.util.spec_from_file_location(
        f"{name}_example", EXAMPLES / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(os.environ):
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_example() -> Callable[[str], ModuleType]:
    """Import ``examples/<name>.py`` as a module: ``load_example("dqn")``."""
    return _load
