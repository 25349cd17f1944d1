"""The replay pool records no transition that did not happen (issue 11 items 8, 12)."""

from __future__ import annotations

import functools
import re
import warnings

import numpy as np
import pytest
from gymnasium import spaces

import vecpool
from vecpool.testing import ActionEchoEnv


def test_no_transition_spans_a_failed_step(make_async):
    # env 1 raises in its 3rd step; env 0 took that step in the worker anyway
    fns = [ActionEchoEnv, functools.partial(ActionEchoEnv, raise_at=3)]
    envs = vecpool.ReplayPoolWrapper(make_async(fns, num_workers=1), pool_size=100)
    envs.reset(seed=0)
    for step in range(1, 7):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Gymnasium's worker-error log lines
                envs.step(np.full(2, float(step)))
        except ValueError:
            assert step == 3
    pool = envs.get_pool()
    # obs = [action, step in episode]: every kept row is exactly one step
    np.testing.assert_array_equal(pool.next_obs[:, 1] - pool.obs[:, 1], 1.0)
    np.testing.assert_array_equal(pool.next_obs[:, 0], pool.action)
    # steps 1-2 (from reset) and 5-6: the step after the failure has no
    # trustworthy predecessor, so 4 transitions per env
    assert envs.pool.lengths.tolist() == [4, 4]


def test_abort_episodes_neither_counts_nor_merges():
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(2), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)

    def add(done):
        pool.add(
            obs,
            np.zeros(2, np.int64),
            obs,
            np.ones(2),
            np.array(done),
            np.zeros(2, bool),
        )

    add([False, False])
    add([False, False])
    pool.abort_episodes([0])  # env 0's episode was cut: 2 steps lost to the stats
    add([True, True])
    stats = pool.episode_stats
    assert stats.count == 2
    # env 0's episode restarted at the abort: 1 step; env 1's: 3 steps
    assert stats.mean_length == 2.0
    assert len(pool) == 6  # the transitions themselves stay


@pytest.mark.parametrize(
    ("env_ids", "match"),
    [
        (np.array([0.0, 1.0]), "1-D array of ints"),
        (np.array([[0, 1]]), "1-D array of ints"),
        (np.array([0, 5]), re.escape("must lie in [0, 2)")),
    ],
)
def test_add_refuses_bad_env_ids(env_ids, match):
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(3), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match=match):
        pool.add(
            obs,
            np.zeros(2, np.int64),
            obs,
            np.ones(2),
            np.zeros(2, bool),
            np.zeros(2, bool),
            env_ids=env_ids,
        )
    assert len(pool) == 0


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (np.array([0.5, 1.0]), "must hold integers"),
        (np.array([0, 3]), "outside the action space"),
        (np.array([-1, 0]), "outside the action space"),
    ],
)
def test_add_refuses_actions_outside_a_discrete_space(action, match):
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(3), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match=match):
        pool.add(obs, action, obs, np.ones(2), np.zeros(2, bool), np.zeros(2, bool))
    assert len(pool) == 0


def test_lossless_integer_actions_are_accepted():
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(3), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pool.add(
            obs,
            np.array([2, 0], np.int32),
            obs,
            np.ones(2),
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    assert pool.get_pool().action.tolist() == [2, 0]


@pytest.mark.parametrize("num_envs", [2, 100])  # the list check and the numpy one
@pytest.mark.parametrize(
    ("space", "good", "bad"),
    [
        (spaces.Discrete(3), [0, 2], [-1, 0]),
        (spaces.Discrete(3), [0, 2], [3, 0]),
        (spaces.Discrete(3, start=-1), [-1, 1], [-2, 0]),
        (spaces.Discrete(3, start=-1), [-1, 1], [2, 0]),
        (spaces.MultiDiscrete([2, 3]), [[1, 2], [0, 0]], [[0, 3], [0, 0]]),
        (spaces.MultiDiscrete([2, 3]), [[1, 2], [0, 0]], [[-1, 0], [0, 0]]),
        (spaces.MultiBinary(2), [[1, 0], [0, 1]], [[2, 0], [0, 0]]),
        (spaces.Box(0, 5, (2,), np.int64), [[5, 0], [0, 0]], [[6, 0], [0, 0]]),
    ],
)
@pytest.mark.parametrize("dtype", [np.int8, np.int64])
def test_add_checks_the_range_of_every_integer_space(num_envs, space, good, bad, dtype):
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), space, num_envs=num_envs, pool_size=4 * num_envs
    )
    obs = np.zeros((num_envs, 1), np.float32)
    flags = np.zeros(num_envs, bool)

    def batch(rows):  # the two given rows, then copies of the first
        return np.array(rows + [rows[0]] * (num_envs - 2), dtype)

    pool.add(obs, batch(good), obs, np.ones(num_envs), flags, flags)
    with pytest.raises(ValueError, match="outside the action space"):
        pool.add(obs, batch(bad), obs, np.ones(num_envs), flags, flags)
    assert len(pool) == num_envs
