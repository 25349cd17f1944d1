"""The classic ``vecpool.Pool`` interface on top of ReplayPoolWrapper and workers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import vecpool
from vecpool.testing import assert_same_data, make_env_fns

pytestmark = pytest.mark.timeout(60)

NUM_ENVS = 3


@pytest.fixture
def make_pool() -> Iterator[Any]:
    """Factory building ``vecpool.Pool``; every pool is closed at teardown."""
    created: list[vecpool.Pool] = []

    def factory(*args: Any, **kwargs: Any) -> vecpool.Pool:
        pool = vecpool.Pool(*args, **kwargs)
        created.append(pool)
        return pool

    yield factory
    for pool in created:
        pool.close()


def _env_fns(**kwargs: Any) -> Any:
    kwargs = {"obs_kind": "box", "max_steps": 6, "terminate_prob": 0.1, **kwargs}
    return make_env_fns(NUM_ENVS, **kwargs)


def test_store_and_get_pool(make_pool):
    pool = make_pool(_env_fns(), 2, pool_size=600, random=False, seed=0)
    assert isinstance(pool.envs, vecpool.ReplayPoolWrapper)
    assert isinstance(pool.pool, vecpool.ReplayPool)
    assert pool.envs.pool is pool.pool
    pool.store(40, progress=False)
    result = pool.get_pool()
    assert isinstance(result, tuple)
    assert len(result) == 5
    state, action, next_state, reward, done = result
    n = len(pool.pool)
    # NEXT_STEP (the default): the reset steps after episode ends are not stored.
    assert NUM_ENVS * 40 * 0.6 < n < NUM_ENVS * 40
    assert state.shape == (n, 3)
    assert next_state.shape == (n, 3)
    assert action.shape == (n,)
    assert reward.shape == (n,)
    assert done.shape == (n,)
    assert done.dtype == bool
    underlying = pool.pool.get_pool()
    assert_same_data(underlying.obs, state, "state")
    assert_same_data(underlying.action, action, "action")
    assert_same_data(underlying.next_obs, next_state, "next_state")
    assert_same_data(underlying.reward, reward, "reward")
    np.testing.assert_array_equal(
        done, np.logical_or(underlying.terminated, underlying.truncated)
    )
    assert done.any()
    assert not underlying.terminated.all()
    # random actions when no policy
    assert len(np.unique(action)) == 3


def test_store_continues_and_windows(make_pool):
    pool = make_pool(
        _env_fns(),
        2,
        pool_size=30,
        window_size=4,
        clearing_freq=7,
        window_size_=2,
        random=False,
    )
    pool.store(5, progress=False)
    first = len(pool.pool)
    assert 0 < first <= NUM_ENVS * 5
    pool.store(40, progress=False)
    assert (pool.pool.lengths <= 10).all()
    assert len(pool.get_pool()[0]) == len(pool.pool)


def test_default_random_routing(make_pool):
    pool = make_pool(_env_fns(), 2, pool_size=3000, seed=1)
    pool.store(50, progress=False)
    state, _, _, reward, done = pool.get_pool()
    assert len(state) == len(reward) == len(done) == len(pool.pool)
    assert len(pool.pool) == int(pool.pool.lengths.sum())
    assert pool.pool.lengths.max() - pool.pool.lengths.min() <= 20


def test_policy_is_called_with_observations(make_pool):
    pool = make_pool(_env_fns(), 2, pool_size=600, random=False, seed=3)
    seen: list[np.ndarray] = []

    def policy(obs: Any) -> np.ndarray:
        seen.append(np.array(obs, copy=True))
        return np.full(NUM_ENVS, 2, dtype=np.int64)

    pool.store(25, policy=policy, progress=False)
    assert len(seen) == 25
    assert all(obs.shape == (NUM_ENVS, 3) for obs in seen)
    batch = pool.pool.get_pool()
    np.testing.assert_array_equal(batch.action, np.full(len(pool.pool), 2))
    # Every stored observation of env i was shown to the policy as env i's row.
    offsets = np.concatenate([[0], np.cumsum(pool.pool.lengths)])
    for i in range(NUM_ENVS):
        shown = {obs[i].tobytes() for obs in seen}
        for row in batch.obs[offsets[i] : offsets[i + 1]]:
            assert row.tobytes() in shown, f"env {i}: stored obs never shown"


def test_progress_bar(make_pool, capsys):
    pool = make_pool(_env_fns(), 1, pool_size=100, seed=0)
    capsys.readouterr()
    pool.store(5, progress=False)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""
    pool.store(5)  # the default shows a bar (on stderr); it must not crash
    pool.store(5, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err != ""


def test_close_releases_workers(leak_checker):
    pool = vecpool.Pool(_env_fns(), 2, pool_size=60)
    pool.store(5, progress=False)
    assert leak_checker.new_children()
    pool.close()
    pool.close()  # idempotent
    leak_checker.assert_no_leaks()


def test_context_manager(leak_checker):
    with vecpool.Pool(_env_fns(), 2, pool_size=60, seed=0) as pool:
        assert isinstance(pool, vecpool.Pool)
        pool.store(5, progress=False)
        assert len(pool.get_pool()[0]) > 0
    leak_checker.assert_no_leaks()


def test_invalid_arguments_leave_no_workers(leak_checker):
    with pytest.raises(ValueError, match=r"clearing_freq|window_size_"):
        vecpool.Pool(_env_fns(), 2, pool_size=60, clearing_freq=3)
    with pytest.raises(ValueError, match="pool_size"):
        vecpool.Pool(_env_fns(), 2, pool_size=0)
    leak_checker.assert_no_leaks()


def test_dict_observations(make_pool):
    pool = make_pool(_env_fns(obs_kind="dict"), 2, pool_size=300, seed=0)
    pool.store(10, progress=False)
    state, _, next_state, reward, _ = pool.get_pool()
    assert isinstance(state, dict)
    assert set(state) == {"position", "count"}
    assert state["position"].shape == (len(reward), 3)
    assert next_state["count"].shape == (len(reward),)


@pytest.mark.parametrize("num_steps", [-5, 2.5, "3"])
def test_store_refuses_a_step_count_that_is_not_a_count(make_pool, num_steps):
    # -5 stored nothing without a word; 2.5 raised range()'s TypeError
    pool = make_pool(_env_fns(), 1, pool_size=100, seed=0)
    with pytest.raises(ValueError, match=re.escape("`num_steps` must be an integer")):
        pool.store(num_steps, progress=False)
    pool.store(0, progress=False)
    assert len(pool.pool) == 0
