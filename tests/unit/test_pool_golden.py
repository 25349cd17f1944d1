"""The pool gives, bit for bit, what it gave before it was split (issue 39).

Bit for bit except the importance weights of prioritized draws, within 4 ulp: numpy's
SIMD sums and powers differ in their last bit between versions (2.4 and 2.5).

The outputs were recorded by ``tests/unit/replay_golden.py`` (its docstring says
what it drives and how to regenerate them) into ``tests/unit/data/replay_golden.npz``.
Where torch imports, ``to_torch`` batches hold the same arrays.
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
        if name.endswith(".weights"):
            # importance weights come from a sum of priorities and a power, whose
            # last bit is numpy's SIMD code's: numpy 2.4 and 2.5 differ by one ulp
            # (1.1e-16) after a load. The rows drawn (every other entry) still
            # match bit for bit.
            assert actual.shape == expected.shape, name
            np.testing.assert_array_max_ulp(actual, expected, maxulp=4)
            continue
        np.testing.assert_array_equal(actual, expected, err_msg=name, strict=True)


@pytest.mark.parametrize("scenario", sorted(golden.SCENARIOS))
def test_a_pool_loaded_from_its_file_gives_what_its_in_memory_twin_gives(
    scenario: str, recomputed: dict[str, Any]
) -> None:
    # both start from the saved pool's generator state: the twin took its
    # state_dict, the loaded pool its file (format 6 puts every row back in its
    # slot). Before format 6, a prioritized pool's draws differed.
    compared = 0
    for name, twin in recomputed.items():
        parts = name.split(".")
        if parts[0] != scenario or parts[1] != "twin" or parts[2] == "nbytes":
            continue  # (a file drops the frame items no row uses: fewer bytes)
        loaded = recomputed[".".join([scenario, "loaded", *parts[2:]])]
        np.testing.assert_array_equal(loaded, twin, err_msg=name, strict=True)
        compared += 1
    assert compared > 20


def test_pack_round_trip() -> None:
    entries = {"a": np.arange(3.0), "b": np.zeros((0, 2), np.int64), "c": np.True_}
    packed = golden.pack(entries)
    assert set(packed) == {"index", "blob"}


@pytest.mark.parametrize("scenario", ["plain_per", "frames", "dict"])
def test_torch_batches_hold_the_golden_arrays(
    scenario: str, recorded: dict[str, Any]
) -> None:
    torch = pytest.importorskip("torch")
    arguments, kind = golden.SCENARIOS[scenario]
    pool = golden._make(arguments, kind, seed=5)
    golden._Driver(pool, kind, seed=11).run(17)
    batch = pool.sample(9)  # the first draw of the scenario's first reading
    tensors: dict[str, Any] = {}
    _leaves(f"{scenario}.0.uniform", batch.to_torch(), tensors)
    assert tensors
    for name, tensor in tensors.items():
        assert isinstance(tensor, torch.Tensor), name
        np.testing.assert_array_equal(tensor.numpy(), recorded[name], err_msg=name)


def _leaves(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """``value``'s leaves by their golden names (as ``golden.flatten``, kept as is)."""
    if hasattr(value, "_fields"):
        for field in value._fields:
            _leaves(f"{prefix}.{field}", getattr(value, field), out)
    elif isinstance(value, dict):
        for key in sorted(value):
            _leaves(f"{prefix}.{key}", value[key], out)
    else:
        out[prefix] = value
