"""Observation spaces Gymnasium cannot put in shared memory, under the default.

MiniGrid's observation is a Dict with a custom string leaf (``MissionSpace``):
Gymnasium's AsyncVectorEnv refuses it with ``shared_memory=True`` (its default),
and so did vecpool. With ``shared_memory="auto"`` (vecpool's default) such an
observation travels pickled (vecpool/_engine/observations.py) and the results are
``SyncVectorEnv``'s; an explicit ``shared_memory=True`` keeps Gymnasium's error.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.check import check_vector_env
from vecpool.testing import MissionEnv, assert_same_data, assert_same_partial_reset

MODES = list(AutoresetMode)
NUM_ENVS = 3


def _fns():
    return [functools.partial(MissionEnv, index=i) for i in range(NUM_ENVS)]


@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_a_custom_string_leaf_matches_sync_by_default(mode, make_placed):
    reference = gym.vector.SyncVectorEnv(_fns(), autoreset_mode=mode)
    candidate = make_placed(_fns(), autoreset_mode=mode)
    try:
        assert candidate.shared_memory == "auto"
        assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
        rng = np.random.default_rng(0)
        for step in range(30):
            actions = rng.integers(0, 3, NUM_ENVS)
            expected, actual = reference.step(actions), candidate.step(actions)
            assert_same_data(expected, actual, f"step {step}")
            assert isinstance(actual[0]["mission"], tuple)
            assert_same_partial_reset(reference, candidate, expected, f"step {step}")
    finally:
        reference.close()


def test_explicit_shared_memory_keeps_gymnasiums_error(make_placed):
    with pytest.raises(ValueError, match="shared_memory=True"):
        make_placed(_fns(), shared_memory=True)
    with pytest.raises(ValueError, match="shared_memory=True"):
        gym.vector.AsyncVectorEnv(_fns(), shared_memory=True)


def test_the_checker_passes_on_the_default(placement):
    kwargs = placement.kwargs(NUM_ENVS)
    report = check_vector_env(lambda: vecpool.AsyncVectorEnv(_fns(), **kwargs))
    assert report.ok, report
    assert "spaces.observations" in report.passed


def test_send_recv_with_a_custom_leaf(make_placed):
    env = make_placed(_fns(), batch_size=1)
    env.reset(seed=0)
    env.send(np.zeros(NUM_ENVS, np.int64))
    for _ in range(10):
        obs, *_, infos = env.recv()
        assert isinstance(obs["mission"], tuple)
        assert len(obs["mission"]) == 1
        assert obs["mission"][0].startswith("get to the")
        env.send(np.ones(1, np.int64), infos["env_id"])


class _SequenceEnv(gym.Env):
    """A ``Sequence`` observation: Gymnasium's shared memory refuses it (TypeError)."""

    observation_space = gym.spaces.Sequence(gym.spaces.Box(0, 1, (2,), np.float32))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def _observe(self):
        count = int(self.np_random.integers(0, 4))
        return tuple(self.np_random.random(2).astype(np.float32) for _ in range(count))

    def step(self, action):
        self.t += 1
        return self._observe(), 1.0, self.t >= 5, False, {}


def test_a_sequence_observation_matches_sync_by_default(make_placed):
    # found by a review: "auto" caught CustomSpaceError only, not the TypeError
    # Gymnasium raises for dynamic spaces
    reference = gym.vector.SyncVectorEnv([_SequenceEnv] * 3)
    candidate = make_placed([_SequenceEnv] * 3)
    try:
        assert repr(reference.reset(seed=1)) == repr(candidate.reset(seed=1))
        for _ in range(8):
            actions = np.zeros(3, np.int64)
            assert repr(reference.step(actions)) == repr(candidate.step(actions))
    finally:
        reference.close()
    with pytest.raises(TypeError):
        make_placed([_SequenceEnv] * 3, shared_memory=True)
