"""``to_torch`` of every batch type: the same NamedTuple, tensors on the device.

Runs where torch is installed (the dev venv, ``nox -s integrations``); the default
test session has no torch, and there the import error's message is checked instead.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any
from unittest import mock

import numpy as np
import pytest
from gymnasium import spaces

from vecpool import ReplayPool, ReplaySample, Sequences, Transitions

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _pool(observation_space: spaces.Space[Any], **settings: Any) -> ReplayPool:
    pool = ReplayPool(observation_space, spaces.Discrete(3), 2, 40, seed=0, **settings)
    rng = np.random.default_rng(0)
    for step in range(12):
        obs: Any = np.stack([observation_space.sample() for _ in range(2)])
        if isinstance(observation_space, spaces.Dict):
            obs = {
                key: np.stack([observation_space.sample()[key] for _ in range(2)])
                for key in observation_space.spaces
            }
        pool.add(
            obs, rng.integers(0, 3, 2), obs, np.full(2, step),
            np.array([step % 5 == 4, False]), np.zeros(2, bool),
        )  # fmt: skip
    return pool


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(0, 255, (3, 4), np.uint8),
        spaces.Dict({"x": spaces.Box(-1, 1, (2,)), "k": spaces.Discrete(4)}),
    ],
    ids=["box", "dict"],
)
def test_every_batch_type_converts_field_by_field(space: spaces.Space[Any]) -> None:
    import torch

    pool = _pool(space, alpha=0.6)
    batches: list[Any] = [
        pool.get_pool(),
        pool.sample(16, n_step=3, gamma=0.9, beta=0.4),
        pool.sample_sequences(5, 4),
    ]
    plain = ReplayPool(spaces.Box(-1, 1, (2,)), spaces.Discrete(3), 2, 40)
    plain.add(np.zeros((2, 2), np.float32), np.zeros(2, np.int64),
              np.zeros((2, 2), np.float32), np.ones(2), np.zeros(2, bool),
              np.zeros(2, bool))  # fmt: skip
    batches.append(plain.sample(3))
    kinds: list[Any] = [Transitions, ReplaySample, Sequences, Transitions]
    for batch, kind in zip(batches, kinds, strict=True):
        assert type(batch) is kind
        tensors = batch.to_torch("cpu")
        assert type(tensors) is kind
        for array, tensor in zip(
            _leaves(tuple(batch)), _leaves(tuple(tensors)), strict=True
        ):
            assert isinstance(tensor, torch.Tensor)
            assert tensor.device.type == "cpu"
            np.testing.assert_array_equal(tensor.numpy(), np.asarray(array))
            assert tensor.dtype == torch.from_numpy(np.asarray(array)[:0].copy()).dtype


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_read_only_frame_stacks_convert_to_their_own_tensors() -> None:
    pool = ReplayPool(spaces.Box(0, 255, (3, 2), np.uint8), spaces.Discrete(3), 2, 40,
                      frame_stack=3)  # fmt: skip
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (2, 20, 2), dtype=np.uint8)
    for t in range(15):
        pool.add(frames[:, t : t + 3], np.zeros(2, np.int64), frames[:, t + 1 : t + 4],
                 np.ones(2), np.zeros(2, bool), np.zeros(2, bool))  # fmt: skip
    batch = pool.sample(8)
    tensors = batch.to_torch()
    np.testing.assert_array_equal(tensors.obs.numpy(), batch.obs)
    np.testing.assert_array_equal(tensors.next_obs.numpy(), batch.next_obs)
    tensors.obs[0] = 0  # a copy: the batch's read-only frames are untouched
    assert not np.shares_memory(tensors.obs.numpy(), batch.obs)


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_cpu_tensors_share_the_batch_memory() -> None:
    batch = _pool(spaces.Box(0, 255, (3, 4), np.uint8)).sample(8)
    tensors = batch.to_torch()
    tensors.obs[0, 0, 0] = 7  # no copy on the CPU: the batch sees it
    assert batch.obs[0, 0, 0] == 7


def test_without_torch_the_error_names_the_extra() -> None:
    batch = _pool(spaces.Box(0, 1, (2,))).sample(4)
    with (
        mock.patch.dict(sys.modules, {"torch": None}),
        pytest.raises(ImportError, match=r"vecpool\[torch\]"),
    ):
        batch.to_torch()
