"""Prioritized replay: draw frequencies, importance weights, eviction, errors."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from vecpool import ReplayPool, ReplaySample

# chi-square critical values at p = 0.001 (upper tail), from the standard
# table (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.4)
_CHI2_999 = {15: 37.697, 23: 49.728}


def _pool(num_envs: int = 2, pool_size: int = 16, **settings: Any) -> ReplayPool:
    return ReplayPool(
        spaces.Box(-np.inf, np.inf, (1,), np.float64),
        spaces.Discrete(2),
        num_envs,
        pool_size,
        seed=3,
        **settings,
    )


def _add(pool: ReplayPool, steps: int, first: int = 0) -> None:
    n = pool.num_envs
    for step in range(first, first + steps):
        obs = (step * n + np.arange(n, dtype=np.float64))[:, None]
        pool.add(
            obs,
            np.zeros(n, np.int64),
            obs,
            np.ones(n),
            np.zeros(n, bool),
            np.zeros(n, bool),
        )


def _priorities_by_obs(pool: ReplayPool, alpha: float) -> dict[float, float]:
    """Set row i's priority to 1 + (obs mod 5); return priority ** alpha by obs."""
    seen: dict[float, tuple[int, float]] = {}
    for _ in range(30):  # until every held row was drawn once
        batch = pool.sample(256)
        for index, obs in zip(
            batch.indices.tolist(), batch.obs[:, 0].tolist(), strict=True
        ):
            seen[obs] = (index, 1.0 + obs % 5)
    assert len(seen) == len(pool)
    indices = np.array([index for index, _ in seen.values()])
    pool.update_priorities(indices, np.array([p for _, p in seen.values()]))
    return {obs: p**alpha for obs, (_, p) in seen.items()}


def test_draw_frequencies_match_priorities() -> None:
    pool = _pool(alpha=0.7)
    _add(pool, 8)
    weights = _priorities_by_obs(pool, 0.7)
    draws = 200_000
    counts: dict[float, int] = dict.fromkeys(weights, 0)
    for _ in range(draws // 1000):
        for obs in pool.sample(1000).obs[:, 0].tolist():
            counts[obs] += 1
    total = sum(weights.values())
    expected = np.array([draws * weights[obs] / total for obs in weights])
    observed = np.array([counts[obs] for obs in weights])
    statistic = float(((observed - expected) ** 2 / expected).sum())
    assert statistic < _CHI2_999[len(weights) - 1]


def test_frequencies_are_not_uniform() -> None:
    """The test above can fail: a uniform draw is far off."""
    pool = _pool(alpha=1.0)
    _add(pool, 8)
    weights = _priorities_by_obs(pool, 1.0)
    low = min(weights, key=weights.__getitem__)
    high = max(weights, key=weights.__getitem__)
    obs = pool.sample(50_000).obs[:, 0]
    assert np.count_nonzero(obs == high) > 3 * np.count_nonzero(obs == low)


def test_weights_follow_their_formula() -> None:
    pool = _pool(alpha=0.6)
    _add(pool, 8)
    weights = _priorities_by_obs(pool, 0.6)
    total = sum(weights.values())
    batch = pool.sample(500, beta=0.4)
    assert isinstance(batch, ReplaySample)
    expected = np.array(
        [(len(pool) * weights[obs] / total) ** -0.4 for obs in batch.obs[:, 0]]
    )
    np.testing.assert_allclose(batch.weights, expected / expected.max(), rtol=1e-9)
    assert batch.discount.tolist() == [1.0] * 500  # no n_step: ones


def test_new_rows_get_the_largest_priority() -> None:
    pool = _pool(alpha=1.0)
    _add(pool, 2)
    batch = pool.sample(64)
    pool.update_priorities(batch.indices, np.full(64, 0.5))
    pool.update_priorities(batch.indices[:1], np.array([9.0]))
    _add(pool, 1, first=2)
    drawn = pool.sample(20_000, beta=1.0)
    new = drawn.obs[:, 0] >= 4
    # the two new rows have priority 9, as the largest given; old rows 0.5 or 9
    assert np.all(drawn.weights[new] == drawn.weights[new].min())
    assert new.mean() > 0.3


@pytest.mark.parametrize(
    "settings",
    [{}, {"window_size": 3}, {"clearing_freq": 5, "clearing_size": 3}],
    ids=str,
)
def test_evicted_rows_are_never_drawn(settings: dict[str, Any]) -> None:
    pool = _pool(alpha=0.6, pool_size=12, **settings)
    for round_ in range(6):
        _add(pool, 7, first=7 * round_)
        batch = pool.sample(64)
        pool.update_priorities(batch.indices, np.abs(np.sin(batch.obs[:, 0])) + 1.0)
        held = set(pool.get_pool().obs[:, 0].tolist())
        drawn = set(pool.sample(4_000).obs[:, 0].tolist())
        assert drawn <= held
        assert len(drawn) == len(held)  # every held row has a chance


def test_stale_indices_are_left_out() -> None:
    pool = _pool(alpha=1.0, pool_size=4)
    _add(pool, 2)
    stale = pool.sample(8)
    _add(pool, 2, first=2)  # evicts every row drawn above ... and reuses its slots
    _add(pool, 1, first=4)  # ... then one more moves the ring on
    pool.update_priorities(stale.indices, np.full(8, 100.0))
    held = set(pool.get_pool().obs[:, 0].tolist())
    assert set(pool.sample(2_000).obs[:, 0].tolist()) <= held


@pytest.mark.parametrize(
    ("indices", "priorities", "needle"),
    [
        (np.array([0]), np.array([-1.0]), "`priorities` must be finite and >= 0"),
        (np.array([0]), np.array([np.nan]), "`priorities` must be finite and >= 0"),
        (np.array([0, 1]), np.array([1.0]), "one value per index"),
        (np.array([0.5]), np.array([1.0]), "`indices` must be a 1-D array of ints"),
        (np.array([10_000]), np.array([1.0]), "it never gave out"),
        (np.array([-1]), np.array([1.0]), "it never gave out"),
    ],
)
def test_bad_updates_name_the_fix(indices: Any, priorities: Any, needle: str) -> None:
    pool = _pool(alpha=0.6)
    _add(pool, 3)
    with pytest.raises(ValueError, match=re.escape(needle)):
        pool.update_priorities(indices, priorities)


def test_priorities_whose_power_overflows_are_refused_and_change_nothing() -> None:
    # 1e200 is finite, but 1e200 ** 2 is not: refused before any state changes,
    # so the rows added after it are drawn as before (they were given priority 0,
    # and from the second add on each add raised OverflowError, keeping its rows)
    pool = _pool(alpha=2.0)
    _add(pool, 3)
    drawn = pool.sample(4)
    with pytest.raises(ValueError, match=re.escape("`priorities` ** alpha overflows")):
        pool.update_priorities(drawn.indices, np.full(4, 1e200))
    _add(pool, 3, first=3)
    assert len(pool) == 12
    assert set(pool.sample(2_000).obs[:, 0].tolist()) == set(range(12))
    # 1e154 ** 2 is finite, but the sum tree's total over the rows is not (every
    # draw failed, and the rows added after took that priority too)
    with pytest.raises(ValueError, match=re.escape("`priorities` ** alpha overflows")):
        pool.update_priorities(drawn.indices, np.full(4, 1e154))
    _add(pool, 2, first=6)
    assert pool.sample(8).indices.shape == (8,)


def test_uniform_pool_refuses_priorities() -> None:
    pool = _pool()
    _add(pool, 2)
    with pytest.raises(ValueError, match=r"ReplayPool\(\.\.\., alpha=0\.6\)"):
        pool.update_priorities(np.array([0]), np.array([1.0]))


@pytest.mark.parametrize("alpha", [-0.1, float("nan"), "0.5", True])
def test_bad_alpha_is_refused(alpha: Any) -> None:
    with pytest.raises(ValueError, match="`alpha` must be a finite number >= 0"):
        _pool(alpha=alpha)


def test_prioritized_n_step_combine() -> None:
    pool = _pool(alpha=0.6)
    _add(pool, 6)
    batch = pool.sample(32, n_step=3, gamma=0.5, beta=0.4)
    # every reward is 1 and no episode ends: 1 + 0.5 + 0.25 unless near the newest
    assert set(np.round(batch.reward, 6).tolist()) <= {1.75, 1.5, 1.0}
    assert batch.weights.max() == 1.0
    pool.update_priorities(batch.indices, np.ones(32))


def test_numpy_numbers_are_accepted_and_all_zero_priorities_say_so() -> None:
    pool = _pool(alpha=np.float32(0.6))
    _add(pool, 1)
    gamma: Any = np.int64(1)  # numpy numbers, as a user's config may hold them
    batch = pool.sample(4, n_step=2, gamma=gamma, beta=np.float64(0.5))
    pool.update_priorities(batch.indices, np.zeros(4))
    with pytest.raises(ValueError, match="every transition held has priority 0"):
        pool.sample(4)


def test_indices_name_transitions_across_save_and_load(tmp_path: Any) -> None:
    pool = _pool(alpha=1.0)
    _add(pool, 5)
    batch = pool.sample(64)
    loaded = ReplayPool.load(pool.save(tmp_path / "pool.npz"))
    # the same ids give the same transitions their priority in both pools
    for each in (pool, loaded):
        each.update_priorities(batch.indices[:1], np.array([1000.0]))
    target = batch.obs[0, 0]
    for each in (pool, loaded):
        drawn = each.sample(2_000).obs[:, 0]
        assert np.mean(drawn == target) > 0.9
