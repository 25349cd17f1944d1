"""The pool gives, bit for bit, what it gave before it was split (issue 39).

The outputs were recorded by ``tests/unit/replay_golden.py`` (its docstring says
what it drives and how to regenerate them) into ``tests/unit/data/replay_golden.npz``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest


def _golden() -> ModuleType:
    path = Path(__file__).parent / "replay_golden.py"
    spec = importlib.util.spec_from_file_location("replay_golden", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


golden = _golden()


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    entries: dict[str, Any] = golden.load()
    return entries


@pytest.fixture(scope="module")
def recomputed() -> dict[str, Any]:
    entries: dict[str, Any] = golden.outputs()
    return entries


def test_same_entries(recorded: dict[str, Any], recomputed: dict[str, Any]) -> None:
    assert sorted(recomputed) == sorted(recorded)


@pytest.mark.parametrize("scenario", sorted({*golden.SCENARIOS, "wrapper", "classic"}))
def test_same_outputs(
    scenario: str, recorded: dict[str, Any], recomputed: dict[str, Any]
) -> None:
    names = [name for name in recorded if name.split(".")[0].startswith(scenario)]
    assert names
    for name in names:
        expected, actual = recorded[name], recomputed[name]
        assert actual.dtype == expected.dtype, name
        np.testing.assert_array_equal(actual, expected, err_msg=name, strict=True)


def test_pack_round_trip() -> None:
    entries = {"a": np.arange(3.0), "b": np.zeros((0, 2), np.int64), "c": np.True_}
    packed = golden.pack(entries)
    assert set(packed) == {"index", "blob"}
