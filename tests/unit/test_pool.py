"""ReplayPool against a pure-Python model of DESIGN.md §5 (no processes).

The model keeps one plain list per sub-pool and applies, on every transition a
sub-pool receives: append; clearing (every ``clearing_freq``-th transition received,
drop the ``clearing_size`` oldest); overflow (keep the ``window_size`` most recent,
else drop the single oldest). Random transitions are fed to both and compared after
every add.
"""

from __future__ import annotations

import copy
import math
import pathlib
import re
from collections import Counter
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import (
    batch_space,
    concatenate,
    create_empty_array,
    iterate,
)

import vecpool
from vecpool.testing import CountingEnv, assert_same_data

# ------------------------------------------------------------------- model


def _stack(space: spaces.Space[Any], items: list[Any]) -> Any:
    """Batch single-space items the way Gymnasium batches observations."""
    out = create_empty_array(space, len(items))
    if items:
        out = concatenate(space, items, out)  # type: ignore[arg-type]
    return out


def _rows(space: spaces.Space[Any], batch: Any, n: int) -> list[Any]:
    """Split a batch into deep-copied single-space rows."""
    return [copy.deepcopy(x) for x in iterate(batch_space(space, n), batch)]


class ModelPool:
    """Lists per sub-pool, following DESIGN.md §5 to the letter (random=False)."""

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        num_envs: int,
        pool_size: int,
        window_size: int | None = None,
        clearing_freq: int | None = None,
        clearing_size: int | None = None,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_envs = num_envs
        self.capacity = math.ceil(pool_size / num_envs)
        self.window_size = window_size
        self.clearing_freq = clearing_freq
        self.clearing_size = clearing_size
        self.subs: list[list[tuple[Any, ...]]] = [[] for _ in range(num_envs)]
        self.received = [0] * num_envs
        self.running = [[0.0, 0] for _ in range(num_envs)]  # return, length per env
        self.episodes: list[tuple[float, int]] = []

    def add_row(self, j: int, row: tuple[Any, ...]) -> None:
        sub = self.subs[j]
        sub.append(row)
        if self.clearing_freq is not None:
            self.received[j] += 1
            if self.received[j] % self.clearing_freq == 0:
                del sub[: self.clearing_size]
        if len(sub) > self.capacity:
            if self.window_size is not None:
                del sub[: len(sub) - self.window_size]
            else:
                del sub[0]

    def add(
        self,
        obs: Any,
        action: Any,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        env_ids: Any = None,
    ) -> None:
        ids = (
            list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
        )
        n = len(ids)
        obs_rows = _rows(self.observation_space, obs, n)
        next_rows = _rows(self.observation_space, next_obs, n)
        act_rows = _rows(self.action_space, action, n)
        for k, i in enumerate(ids):
            row = (
                obs_rows[k],
                act_rows[k],
                next_rows[k],
                float(reward[k]),
                bool(terminated[k]),
                bool(truncated[k]),
            )
            self.add_row(i, row)
            run = self.running[i]
            run[0] += float(reward[k])
            run[1] += 1
            if row[4] or row[5]:
                self.episodes.append((run[0], run[1]))  # type: ignore[arg-type]
                self.running[i] = [0.0, 0]

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.subs], dtype=np.int64)

    def __len__(self) -> int:
        return sum(len(s) for s in self.subs)

    def get_pool(self) -> vecpool.Transitions:
        rows = [r for sub in self.subs for r in sub]
        return vecpool.Transitions(
            obs=_stack(self.observation_space, [r[0] for r in rows]),
            action=_stack(self.action_space, [r[1] for r in rows]),
            next_obs=_stack(self.observation_space, [r[2] for r in rows]),
            reward=np.array([r[3] for r in rows], dtype=np.float64),
            terminated=np.array([r[4] for r in rows], dtype=bool),
            truncated=np.array([r[5] for r in rows], dtype=bool),
        )


# ------------------------------------------------------------------- data


def _spaces(kind: str) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    if kind == "box-discrete":
        env = CountingEnv(obs_kind="box", action_kind="discrete")
        return env.observation_space, env.action_space
    if kind == "dict-box":
        env = CountingEnv(obs_kind="dict", action_kind="box")
        return env.observation_space, env.action_space
    if kind == "tuple-multidiscrete":
        env = CountingEnv(obs_kind="tuple")
        return env.observation_space, spaces.MultiDiscrete([3, 4])
    if kind == "image-multibinary":
        env = CountingEnv(obs_kind="image")
        return env.observation_space, spaces.MultiBinary(2)
    raise AssertionError(kind)


SPACE_KINDS = ["box-discrete", "dict-box", "tuple-multidiscrete", "image-multibinary"]


class Feed:
    """Random batched transitions with unique rewards (the transition id).

    Each env's next row starts from the previous ``next_obs`` unless its episode
    ended (then a fresh "reset" obs) or, with probability ``p_jump``, at random
    (a reset that no flag announces, like a user ``reset()``).
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        num_envs: int,
        seed: int = 0,
        p_end: float = 0.2,
        p_jump: float = 0.0,
    ) -> None:
        self.observation_space = copy.deepcopy(observation_space)
        self.action_space = copy.deepcopy(action_space)
        self.observation_space.seed(seed)
        self.action_space.seed(seed + 1)
        self.num_envs = num_envs
        self.rng = np.random.default_rng(seed)
        self.p_end = p_end
        self.p_jump = p_jump
        self.current = [self.observation_space.sample() for _ in range(num_envs)]
        self.next_id = 0

    def batch(self, env_ids: Any = None) -> dict[str, Any]:
        ids = (
            list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
        )
        n = len(ids)
        obs = _stack(self.observation_space, [self.current[i] for i in ids])
        next_items = [self.observation_space.sample() for _ in range(n)]
        next_obs = _stack(self.observation_space, next_items)
        action = _stack(
            self.action_space, [self.action_space.sample() for _ in range(n)]
        )
        reward = np.arange(self.next_id, self.next_id + n, dtype=np.float64) + 0.25
        self.next_id += n
        terminated = self.rng.random(n) < self.p_end / 2
        truncated = self.rng.random(n) < self.p_end / 2
        for k, i in enumerate(ids):
            if terminated[k] or truncated[k] or self.rng.random() < self.p_jump:
                self.current[i] = self.observation_space.sample()
            else:
                self.current[i] = copy.deepcopy(next_items[k])
        data = {
            "obs": obs,
            "action": action,
            "next_obs": next_obs,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
        }
        if env_ids is not None:
            data["env_ids"] = np.asarray(ids, dtype=np.int64)
        return data


def _random_ids(rng: np.random.Generator, num_envs: int) -> np.ndarray:
    size = int(rng.integers(1, num_envs + 1))
    return rng.permutation(num_envs)[:size].astype(np.int64)


def _make(
    obs_space: spaces.Space[Any],
    act_space: spaces.Space[Any],
    num_envs: int,
    pool_size: int,
    **kwargs: Any,
) -> vecpool.ReplayPool:
    return vecpool.ReplayPool(obs_space, act_space, num_envs, pool_size, **kwargs)


def _assert_matches(model: ModelPool, pool: vecpool.ReplayPool, label: str) -> None:
    assert_same_data(model.get_pool(), pool.get_pool(), f"{label}: get_pool()")
    lengths = pool.lengths
    assert isinstance(lengths, np.ndarray), label
    assert lengths.dtype == np.int64, label
    np.testing.assert_array_equal(lengths, model.lengths, err_msg=f"{label}: lengths")
    assert len(pool) == len(model), f"{label}: len"


# (num_envs, pool_size, window_size, clearing_freq, clearing_size)
CONFIGS = [
    (1, 1, None, None, None),  # capacity 1
    (1, 1, 1, None, None),  # capacity 1, window == capacity
    (4, 3, None, None, None),  # pool_size < num_envs: capacity 1
    (3, 10, None, None, None),  # not divisible: capacity 4
    (3, 10, 4, None, None),  # window_size == capacity
    (3, 10, 2, None, None),
    (3, 10, 1, None, None),
    (3, 12, 1, 5, 2),
    (3, 12, None, 3, 10),  # clearing_size larger than the sub-pool
    (3, 12, 3, 1, 1),  # clearing every transition
    (2, 20, 5, 4, 4),
    (2, 7, None, 2, 1),
    (2, 9, 2, 7, 3),
    (4, 100, None, None, None),  # never overflows
    (4, 100, None, 5, 3),  # clearing only
    (2, 6, 3, 1, 100),  # cleared to empty on every add
]


def _config_id(config: tuple[Any, ...]) -> str:
    n, size, win, freq, win_ = config
    return f"n{n}-size{size}-win{win}-freq{freq}-drop{win_}"


def _kwargs(config: tuple[Any, ...]) -> dict[str, Any]:
    _, _, win, freq, win_ = config
    return {"window_size": win, "clearing_freq": freq, "clearing_size": win_}


# ------------------------------------------------------------------- add


@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
@pytest.mark.parametrize("space_kind", SPACE_KINDS)
def test_add_matches_model(space_kind, config):
    obs_space, act_space = _spaces(space_kind)
    num_envs, pool_size = config[:2]
    pool = _make(obs_space, act_space, num_envs, pool_size, **_kwargs(config))
    model = ModelPool(obs_space, act_space, num_envs, pool_size, **_kwargs(config))
    assert pool.capacity == model.capacity == math.ceil(pool_size / num_envs)
    assert pool.num_envs == num_envs
    _assert_matches(model, pool, "empty")
    feed = Feed(obs_space, act_space, num_envs, seed=sum(x or 0 for x in config))
    for step in range(25):
        data = feed.batch()
        pool.add(**data)
        model.add(**data)
        _assert_matches(model, pool, f"after add {step}")


@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
@pytest.mark.parametrize("space_kind", ["box-discrete", "dict-box"])
def test_add_with_env_ids_matches_model(space_kind, config):
    obs_space, act_space = _spaces(space_kind)
    num_envs, pool_size = config[:2]
    pool = _make(obs_space, act_space, num_envs, pool_size, **_kwargs(config))
    model = ModelPool(obs_space, act_space, num_envs, pool_size, **_kwargs(config))
    feed = Feed(obs_space, act_space, num_envs, seed=7)
    rng = np.random.default_rng(3)
    for step in range(40):
        # Mix full batches (env_ids=None) with subsets, as the wrapper does.
        ids = None if rng.random() < 0.3 else _random_ids(rng, num_envs)
        data = feed.batch(env_ids=ids)
        pool.add(**data)
        model.add(**data)
        _assert_matches(model, pool, f"after add {step} (env_ids={ids})")


def test_env_ids_route_to_their_sub_pool():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 4, 40)
    feed = Feed(obs_space, act_space, 4)
    pool.add(**feed.batch(env_ids=[2]))
    pool.add(**feed.batch(env_ids=[3, 0]))
    np.testing.assert_array_equal(pool.lengths, [1, 0, 1, 1])
    # sub-pools in env order: env 0's row (id 2) first, then env 2 (id 0), env 3 (id 1)
    np.testing.assert_array_equal(pool.get_pool().reward, [2.25, 0.25, 1.25])


def test_add_copies_its_inputs():
    obs_space, act_space = _spaces("dict-box")
    pool = _make(obs_space, act_space, 2, 10)
    model = ModelPool(obs_space, act_space, 2, 10)
    feed = Feed(obs_space, act_space, 2)
    for _ in range(3):
        data = feed.batch()
        pool.add(**data)
        model.add(**data)
        for value in (data["obs"], data["next_obs"]):
            for leaf in value.values():
                leaf[...] = 0
        data["action"][...] = 0
        data["reward"][...] = -1
        data["terminated"][...] = True
        data["truncated"][...] = True
    _assert_matches(model, pool, "after mutating the inputs")


def test_get_pool_is_a_snapshot():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 4)
    feed = Feed(obs_space, act_space, 2)
    for _ in range(3):
        pool.add(**feed.batch())
    before = pool.get_pool()
    expected = copy.deepcopy(before)
    for _ in range(3):
        pool.add(**feed.batch())
    assert_same_data(expected, before, "get_pool() result after later adds")


def test_lengths_is_a_copy():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 10)
    pool.add(**Feed(obs_space, act_space, 2).batch())
    lengths = pool.lengths
    lengths[:] = 99
    np.testing.assert_array_equal(pool.lengths, [1, 1])


def test_get_pool_field_types():
    obs_space, act_space = _spaces("dict-box")
    pool = _make(obs_space, act_space, 3, 30)
    pool.add(**Feed(obs_space, act_space, 3).batch())
    result = pool.get_pool()
    assert type(result) is vecpool.Transitions
    assert result._fields == (
        "obs",
        "action",
        "next_obs",
        "reward",
        "terminated",
        "truncated",
    )
    assert result.reward.dtype == np.float64
    assert result.reward.shape == (3,)
    assert result.terminated.dtype == bool
    assert result.truncated.dtype == bool
    assert isinstance(result.obs, dict)
    assert set(result.obs) == {"position", "count"}
    assert result.obs["position"].shape == (3, 3)
    assert result.obs["position"].dtype == np.float32
    assert result.action.shape == (3, 2)
    assert result.action.dtype == np.float32


# ------------------------------------------------------------------- episode stats


def _assert_stats(model: ModelPool, pool: vecpool.ReplayPool, label: str) -> None:
    stats = pool.episode_stats
    assert type(stats) is vecpool.EpisodeStats, label
    assert stats.count == len(model.episodes), label
    if not model.episodes:
        assert math.isnan(stats.mean_return), label
        assert math.isnan(stats.mean_length), label
        return
    returns = [r for r, _ in model.episodes]
    lengths = [n for _, n in model.episodes]
    assert stats.mean_return == pytest.approx(np.mean(returns), rel=1e-9), label
    assert stats.mean_length == pytest.approx(np.mean(lengths), rel=1e-12), label


@pytest.mark.parametrize("use_env_ids", [False, True])
def test_episode_stats_match_model(use_env_ids):
    obs_space, act_space = _spaces("box-discrete")
    # A tiny pool with clearing: statistics cover what was recorded, not what is kept.
    config = (3, 6, 1, 2, 1)
    pool = _make(obs_space, act_space, 3, 6, **_kwargs(config))
    model = ModelPool(obs_space, act_space, 3, 6, **_kwargs(config))
    _assert_stats(model, pool, "empty")
    feed = Feed(obs_space, act_space, 3, seed=11, p_end=0.25)
    rng = np.random.default_rng(0)
    for step in range(60):
        data = feed.batch(env_ids=_random_ids(rng, 3) if use_env_ids else None)
        pool.add(**data)
        model.add(**data)
        _assert_stats(model, pool, f"after add {step}")
    assert len(model.episodes) >= 5


# ------------------------------------------------------------------- sample


def _filled(seed: int = 0, **kwargs: Any) -> tuple[vecpool.ReplayPool, Feed]:
    obs_space, act_space = _spaces("dict-box")
    pool = _make(obs_space, act_space, 3, 300, seed=seed, **kwargs)
    feed = Feed(obs_space, act_space, 3, seed=5)
    for _ in range(10):
        pool.add(**feed.batch())
    return pool, feed


def _row(transitions: vecpool.Transitions, i: int) -> Any:
    def pick(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: pick(v) for k, v in x.items()}
        if isinstance(x, tuple):
            return tuple(pick(v) for v in x)
        return x[i : i + 1]

    return vecpool.Transitions(*(pick(f) for f in transitions))


def test_sample_shape_and_membership():
    pool, _ = _filled()
    stored = pool.get_pool()
    by_id = {float(r): i for i, r in enumerate(stored.reward)}
    batch = pool.sample(17)
    assert type(batch) is vecpool.Transitions
    assert batch.obs["position"].shape == (17, 3)
    assert batch.obs["count"].shape == (17,)
    assert batch.next_obs["position"].shape == (17, 3)
    assert batch.action.shape == (17, 2)
    assert batch.reward.shape == (17,)
    assert batch.reward.dtype == np.float64
    assert batch.terminated.shape == (17,)
    assert batch.terminated.dtype == bool
    assert batch.truncated.shape == (17,)
    assert batch.truncated.dtype == bool
    for k in range(17):
        rid = float(batch.reward[k])
        assert rid in by_id, f"sampled reward {rid} is not a stored transition"
        assert_same_data(_row(stored, by_id[rid]), _row(batch, k), f"sampled row {k}")


def test_sample_is_uniform_over_transitions():
    """Uniform over transitions, not over sub-pools (the sub-pools are uneven)."""
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 3, 90, seed=1)
    feed = Feed(obs_space, act_space, 3)
    for _ in range(20):
        pool.add(**feed.batch(env_ids=[0]))
    pool.add(**feed.batch(env_ids=[1]))
    for _ in range(5):
        pool.add(**feed.batch(env_ids=[2]))
    np.testing.assert_array_equal(pool.lengths, [20, 1, 5])
    draws = 26 * 1000
    rewards = np.concatenate([pool.sample(1000).reward for _ in range(26)])
    counts = Counter(rewards.tolist())
    assert set(counts) == set(pool.get_pool().reward.tolist())
    expected = draws / 26
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    # 25 degrees of freedom: mean 25, sd ~7; 80 is far beyond any plausible fluke.
    assert chi2 < 80, f"chi2={chi2:.1f}, counts={sorted(counts.values())}"


def test_sample_empty_raises():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 10)
    with pytest.raises(ValueError):  # noqa: PT011 (message not specified)
        pool.sample(4)


def test_sample_empty_after_clearing_raises():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 10, clearing_freq=1, clearing_size=1)
    pool.add(**Feed(obs_space, act_space, 2).batch())
    assert len(pool) == 0
    with pytest.raises(ValueError):  # noqa: PT011 (message not specified)
        pool.sample(1)


def test_sample_reproducible_with_seed():
    first, _ = _filled(seed=42)
    second, _ = _filled(seed=42)
    other, _ = _filled(seed=43)
    a = [first.sample(50) for _ in range(3)]
    b = [second.sample(50) for _ in range(3)]
    c = [other.sample(50) for _ in range(3)]
    assert_same_data(a, b, "samples with the same seed")
    assert not all(
        np.array_equal(x.reward, y.reward) for x, y in zip(a, c, strict=True)
    ), "different seeds gave the same samples"


# ------------------------------------------------------------------- random routing


def test_random_routing_conserves_and_balances():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 4, 4000, random=True, seed=0)
    feed = Feed(obs_space, act_space, 4)
    added = []
    for _ in range(200):  # everything comes from env 0
        data = feed.batch(env_ids=[0])
        added.append(data)
        pool.add(**data)
    assert len(pool) == 200 == int(pool.lengths.sum())
    # p ~ 1/(len+1) keeps sub-pools close (max spread ~21 over 2000 simulated seeds).
    assert pool.lengths.max() - pool.lengths.min() <= 30, pool.lengths
    assert pool.lengths.min() >= 30, pool.lengths
    stored = pool.get_pool()
    ids = stored.reward.tolist()
    assert sorted(ids) == [k + 0.25 for k in range(200)], "lost or duplicated rows"
    # Every stored row is exactly one that was added (rows are not mixed up).
    by_id = {float(d["reward"][0]): d for d in added}
    for k, rid in enumerate(ids):
        d = by_id[rid]
        want = vecpool.Transitions(
            d["obs"],
            d["action"],
            d["next_obs"],
            d["reward"],
            d["terminated"],
            d["truncated"],
        )
        assert_same_data(want, _row(stored, k), f"stored row {k}")


@pytest.mark.parametrize("batched", [False, True], ids=["two-adds", "one-batch"])
def test_random_routing_probability(batched):
    """From two empty sub-pools, the second transition joins the other one w.p. 2/3.

    (1/(0+1)) / (1/(0+1) + 1/(1+1)) = 2/3; uniform routing would give 1/2, and a
    batch whose lengths were not updated after each row would also give 1/2.
    """
    obs_space, act_space = _spaces("box-discrete")
    trials = 1000
    apart = 0
    first_in_zero = 0
    for seed in range(trials):
        pool = _make(obs_space, act_space, 2, 100, random=True, seed=seed)
        feed = Feed(obs_space, act_space, 2)
        if batched:
            pool.add(**feed.batch())
        else:
            pool.add(**feed.batch(env_ids=[0]))
            first_in_zero += int(pool.lengths[0])
            pool.add(**feed.batch(env_ids=[1]))
        apart += int(np.array_equal(pool.lengths, [1, 1]))
    assert 0.60 < apart / trials < 0.73, apart / trials
    if not batched:
        assert 0.43 < first_in_zero / trials < 0.57, first_in_zero / trials


def test_random_routing_respects_capacity_and_seed():
    obs_space, act_space = _spaces("box-discrete")

    def run(seed: int) -> vecpool.ReplayPool:
        pool = _make(obs_space, act_space, 3, 9, random=True, seed=seed, window_size=2)
        feed = Feed(obs_space, act_space, 3)
        for _ in range(20):
            pool.add(**feed.batch())
            assert (pool.lengths <= 3).all()
            assert len(pool) == int(pool.lengths.sum())
        return pool

    a, b = run(5), run(5)
    assert_same_data(a.get_pool(), b.get_pool(), "same seed")
    np.testing.assert_array_equal(a.lengths, b.lengths)
    ids = a.get_pool().reward.tolist()
    assert len(set(ids)) == len(ids)
    assert set(ids) <= {k + 0.25 for k in range(60)}


def test_random_false_keeps_env_order():
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 100)
    feed = Feed(obs_space, act_space, 2)
    for _ in range(4):
        pool.add(**feed.batch())
    np.testing.assert_array_equal(
        pool.get_pool().reward, [0.25, 2.25, 4.25, 6.25, 1.25, 3.25, 5.25, 7.25]
    )


# ------------------------------------------------------------------- save/load


def _assert_same_pool(a: vecpool.ReplayPool, b: vecpool.ReplayPool, label: str) -> None:
    assert_same_data(a.get_pool(), b.get_pool(), f"{label}: get_pool()")
    np.testing.assert_array_equal(a.lengths, b.lengths, err_msg=label)
    assert len(a) == len(b), label
    assert a.capacity == b.capacity, label
    assert a.num_envs == b.num_envs, label


SAVE_CASES = [
    ("box-discrete", (3, 10, None, None, None), True),
    ("dict-box", (3, 12, 2, 5, 2), True),
    ("tuple-multidiscrete", (2, 9, 2, 7, 3), True),
    ("image-multibinary", (2, 10, 3, 4, 2), False),
    ("dict-box", (3, 12, 2, 5, 2), False),
]


@pytest.mark.parametrize(
    ("space_kind", "config", "store_next_obs"),
    SAVE_CASES,
    ids=[f"{s}-{_config_id(c)}-next{n}" for s, c, n in SAVE_CASES],
)
def test_save_load_round_trip_and_continue(
    tmp_path, space_kind, config, store_next_obs
):
    obs_space, act_space = _spaces(space_kind)
    num_envs, pool_size = config[:2]
    kwargs = {**_kwargs(config), "store_next_obs": store_next_obs}
    pool = _make(obs_space, act_space, num_envs, pool_size, **kwargs)
    never_saved = _make(obs_space, act_space, num_envs, pool_size, **kwargs)
    feed = Feed(obs_space, act_space, num_envs, seed=2, p_jump=0.1)
    batches = [feed.batch() for _ in range(40)]
    for data in batches[:13]:
        pool.add(**data)
        never_saved.add(**data)
    written = pool.save(tmp_path / "pool")
    assert isinstance(written, pathlib.Path)
    assert written.exists()
    loaded = vecpool.ReplayPool.load(written)
    assert type(loaded) is vecpool.ReplayPool
    _assert_same_pool(pool, loaded, "loaded")
    # The loaded pool continues (ring positions, clearing counters) like the original.
    for step, data in enumerate(batches[13:]):
        loaded.add(**data)
        never_saved.add(**data)
        _assert_same_pool(never_saved, loaded, f"add {step} after load")


def test_save_load_empty_and_str_path(tmp_path):
    obs_space, act_space = _spaces("dict-box")
    pool = _make(obs_space, act_space, 2, 8, window_size=2)
    written = pool.save(str(tmp_path / "empty"))
    loaded = vecpool.ReplayPool.load(str(written))
    _assert_same_pool(pool, loaded, "empty")
    assert len(loaded) == 0


def test_save_load_keeps_episode_stats(tmp_path):
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 6, window_size=2)
    feed = Feed(obs_space, act_space, 2, p_end=0.3)
    for _ in range(20):
        pool.add(**feed.batch())
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "stats"))
    want, got = pool.episode_stats, loaded.episode_stats
    assert want.count > 0
    assert (got.count, got.mean_return, got.mean_length) == (
        want.count,
        want.mean_return,
        want.mean_length,
    )


def test_episode_stats_is_a_named_tuple():
    """The API says ``class EpisodeStats(NamedTuple)``: unpackable, with _fields."""
    obs_space, act_space = _spaces("box-discrete")
    pool = _make(obs_space, act_space, 2, 6)
    stats = pool.episode_stats
    assert isinstance(stats, tuple)
    assert stats._fields == ("count", "mean_return", "mean_length")
    count, mean_return, _ = stats
    assert count == 0
    assert math.isnan(mean_return)


def test_save_load_continue_with_random_routing(tmp_path):
    """The routing generator is part of the saved state: continuing matches."""
    obs_space, act_space = _spaces("box-discrete")
    kwargs = {"random": True, "seed": 9, "window_size": 2}
    pool = _make(obs_space, act_space, 3, 12, **kwargs)
    never_saved = _make(obs_space, act_space, 3, 12, **kwargs)
    feed = Feed(obs_space, act_space, 3, seed=1)
    batches = [feed.batch() for _ in range(30)]
    for data in batches[:10]:
        pool.add(**data)
        never_saved.add(**data)
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "rng"))
    for step, data in enumerate(batches[10:]):
        loaded.add(**data)
        never_saved.add(**data)
        _assert_same_pool(never_saved, loaded, f"add {step} after load")


class _Crash(Exception):
    """Injected in the middle of a save."""


def test_save_is_atomic(tmp_path, monkeypatch):
    """A save that dies half-way leaves the previous file intact and no temp file."""
    obs_space, act_space = _spaces("image-multibinary")
    old = _make(obs_space, act_space, 2, 20)
    new = _make(obs_space, act_space, 2, 20)
    feed = Feed(obs_space, act_space, 2)
    for _ in range(3):
        old.add(**feed.batch())
    for _ in range(8):
        new.add(**feed.batch())
    directory = tmp_path / "pools"
    directory.mkdir()
    written = old.save(directory / "pool")
    before = written.read_bytes()
    listing = sorted(p.name for p in directory.iterdir())

    _inject_crash(monkeypatch, new, tmp_path / "probe")
    with pytest.raises(BaseException) as info:  # noqa: PT011 (any error, as long as it is ours)
        new.save(directory / "pool")
    chain: list[BaseException] = []
    exc: BaseException | None = info.value
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, _Crash) for e in chain), repr(info.value)
    monkeypatch.undo()

    assert written.read_bytes() == before, "the previous file was modified"
    assert sorted(p.name for p in directory.iterdir()) == listing, "temp file left"
    _assert_same_pool(old, vecpool.ReplayPool.load(written), "previous file")
    # And a save that succeeds replaces it.
    _assert_same_pool(new, vecpool.ReplayPool.load(new.save(directory / "pool")), "new")


def _inject_crash(
    monkeypatch: pytest.MonkeyPatch, pool: Any, probe: pathlib.Path
) -> None:
    """Make the next save of ``pool`` write about half its data, then raise _Crash.

    The writer is whichever of the usual ones a probe save goes through:
    ``numpy.lib.format.write_array`` (np.save/np.savez) or ``pickle.dump``.
    """
    import pickle

    import numpy.lib.format as npformat

    original_write_array = npformat.write_array
    original_pickle_dump = pickle.dump
    calls = {"write_array": 0, "pickle": 0}

    def count_write_array(*args: Any, **kwargs: Any) -> Any:
        calls["write_array"] += 1
        return original_write_array(*args, **kwargs)

    def count_pickle(*args: Any, **kwargs: Any) -> Any:
        calls["pickle"] += 1
        return original_pickle_dump(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(npformat, "write_array", count_write_array)
        m.setattr(pickle, "dump", count_pickle)
        pool.save(probe)
    assert calls["write_array"] or calls["pickle"], (
        "save() used neither numpy.lib.format.write_array nor pickle.dump; "
        "adapt _inject_crash to the writer it uses"
    )
    if calls["write_array"]:
        crash_at = max(1, calls["write_array"] // 2)
        seen = {"n": 0}

        def crashing_write_array(fp: Any, array: Any, *args: Any, **kwargs: Any) -> Any:
            seen["n"] += 1
            if seen["n"] == crash_at:
                data = np.ascontiguousarray(array).tobytes()
                fp.write(data[: max(1, len(data) // 2)])
                msg = "crash in the middle of save"
                raise _Crash(msg)
            return original_write_array(fp, array, *args, **kwargs)

        monkeypatch.setattr(npformat, "write_array", crashing_write_array)
    else:

        def crashing_dump(obj: Any, file: Any, *args: Any, **kwargs: Any) -> None:
            data = pickle.dumps(obj, *args, **kwargs)
            file.write(data[: max(1, len(data) // 2)])
            msg = "crash in the middle of save"
            raise _Crash(msg)

        monkeypatch.setattr(pickle, "dump", crashing_dump)


# ------------------------------------------------------------------- arguments

INVALID = [
    ({"pool_size": 0}, "pool_size"),
    ({"pool_size": -3}, "pool_size"),
    ({"window_size": 0}, "window_size"),
    ({"window_size": -1}, "window_size"),
    ({"window_size": 5}, "window_size"),  # capacity is ceil(10 / 3) = 4
    ({"clearing_freq": 3}, "clearing_freq|clearing_size"),
    ({"clearing_size": 3}, "clearing_freq|clearing_size"),
    ({"clearing_freq": 0, "clearing_size": 2}, "clearing_freq"),
    ({"clearing_freq": -1, "clearing_size": 2}, "clearing_freq"),
    ({"clearing_freq": 2, "clearing_size": 0}, re.escape("clearing_size")),
    ({"clearing_freq": 2, "clearing_size": -2}, re.escape("clearing_size")),
    # "no" is truthy: it turned random routing on
    ({"random": "no"}, re.escape("`random` must be True or False, got 'no'")),
    ({"store_next_obs": 0}, re.escape("`store_next_obs` must be True or False")),
]


@pytest.mark.parametrize(("kwargs", "name"), INVALID, ids=[str(k) for k, _ in INVALID])
def test_invalid_arguments_raise(kwargs, name):
    obs_space, act_space = _spaces("box-discrete")
    args: dict[str, Any] = {"pool_size": 10, **kwargs}
    pool_size = args.pop("pool_size")
    with pytest.raises(ValueError, match=name):
        vecpool.ReplayPool(obs_space, act_space, 3, pool_size, **args)


def test_a_space_that_is_not_a_space_is_refused():
    # an array was taken as the observation space, and failed later
    obs_space, act_space = _spaces("box-discrete")
    with pytest.raises(ValueError, match=re.escape("`observation_space` must be a")):
        vecpool.ReplayPool(np.zeros(3), act_space, 3, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("`action_space` must be a")):
        vecpool.ReplayPool(obs_space, [0, 1], 3, 10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pool_size": 1},
        {"pool_size": 10, "window_size": 4},
        {"pool_size": 10, "window_size": 1},
        {"pool_size": 10, "clearing_freq": 1, "clearing_size": 1},
        {"pool_size": 10, "clearing_freq": 50, "clearing_size": 50},
    ],
)
def test_boundary_arguments_are_valid(kwargs):
    obs_space, act_space = _spaces("box-discrete")
    kwargs = dict(kwargs)
    vecpool.ReplayPool(obs_space, act_space, 3, kwargs.pop("pool_size"), **kwargs)


def test_window_size__is_a_deprecated_name_of_clearing_size():
    # issue 29: `clearing_size` was `window_size_` (the original Pool's name)
    obs_space, act_space = _spaces("box-discrete")
    with pytest.warns(
        DeprecationWarning,
        match=re.escape("`ReplayPool(window_size_=...)` is deprecated"),
    ) as record:
        pool = vecpool.ReplayPool(
            obs_space, act_space, 2, 10, clearing_freq=3, window_size_=2
        )
    assert "pass `clearing_size=2`" in str(record[0].message)
    assert record[0].filename == __file__  # points at the caller
    assert pool.clearing_size == 2
    assert pool.settings.clearing_size == 2
    with pytest.warns(DeprecationWarning, match=re.escape("read `pool.clearing_size`")):
        assert pool.window_size_ == 2
    # the seventh positional argument keeps its meaning, under its new name
    positional = vecpool.ReplayPool(obs_space, act_space, 2, 10, None, 3, 2)
    assert positional.clearing_size == 2


def test_clearing_size_and_window_size__together_raise():
    obs_space, act_space = _spaces("box-discrete")
    msg = "`ReplayPool` got both `clearing_size=2` and `window_size_=3`"
    with pytest.raises(TypeError, match=re.escape(msg)):
        vecpool.ReplayPool(
            obs_space, act_space, 2, 10, clearing_freq=3, clearing_size=2,
            window_size_=3,
        )  # fmt: skip


# ------------------------------------------------------------------- memory


def _raw_bytes(space: spaces.Space[Any]) -> int:
    sample = create_empty_array(space, 1)

    def size(x: Any) -> int:
        if isinstance(x, dict):
            return sum(size(v) for v in x.values())
        if isinstance(x, tuple):
            return sum(size(v) for v in x)
        return int(x.nbytes)

    return size(sample)


@pytest.mark.parametrize(
    "space_kind", ["box-discrete", "dict-box", "image-multibinary"]
)
def test_nbytes_plain_layout(space_kind):
    obs_space, act_space = _spaces(space_kind)
    num_envs, pool_size = 4, 2000
    pool = _make(obs_space, act_space, num_envs, pool_size)
    feed = Feed(obs_space, act_space, num_envs)
    for _ in range(pool.capacity + 3):
        pool.add(**feed.batch())
    # reward, terminated, truncated, and the mark of a stretch start (n-step, sequences)
    per_transition = 2 * _raw_bytes(obs_space) + _raw_bytes(act_space) + 8 + 1 + 1 + 1
    raw = per_transition * pool.capacity * num_envs
    assert abs(pool.nbytes - raw) <= 0.1 * raw, (pool.nbytes, raw)


# ------------------------------------------------------------------- compact layout

COMPACT_CONFIGS = [
    (1, 1, None, None, None),
    (3, 10, None, None, None),
    (3, 10, 4, None, None),
    (3, 10, 2, None, None),
    (3, 12, 1, 5, 2),
    (3, 12, None, 3, 10),
    (2, 20, 5, 4, 4),
    (2, 9, 2, 7, 3),
    (4, 100, None, None, None),
    (2, 6, 3, 1, 100),
]


@pytest.mark.parametrize(
    "p_jump", [0.0, 0.15], ids=["flagged-resets", "unflagged-resets"]
)
@pytest.mark.parametrize("use_env_ids", [False, True], ids=["all-envs", "env-ids"])
@pytest.mark.parametrize("config", COMPACT_CONFIGS, ids=_config_id)
@pytest.mark.parametrize(
    "space_kind", ["box-discrete", "dict-box", "image-multibinary"]
)
def test_compact_layout_matches_plain(space_kind, config, use_env_ids, p_jump):
    obs_space, act_space = _spaces(space_kind)
    num_envs, pool_size = config[:2]
    kwargs = {**_kwargs(config), "seed": 0}
    plain = _make(obs_space, act_space, num_envs, pool_size, **kwargs)
    compact = _make(
        obs_space, act_space, num_envs, pool_size, store_next_obs=False, **kwargs
    )
    model = ModelPool(obs_space, act_space, num_envs, pool_size, **_kwargs(config))
    feed = Feed(obs_space, act_space, num_envs, seed=4, p_end=0.15, p_jump=p_jump)
    rng = np.random.default_rng(1)
    for step in range(40):
        data = feed.batch(env_ids=_random_ids(rng, num_envs) if use_env_ids else None)
        plain.add(**data)
        compact.add(**data)
        model.add(**data)
        _assert_matches(model, plain, f"plain, add {step}")
        _assert_matches(model, compact, f"compact, add {step}")
        if len(plain):  # same seed, same draws: sample() derives next_obs alike
            assert_same_data(plain.sample(8), compact.sample(8), f"sample {step}")


def test_compact_layout_random_routing_matches_plain():
    obs_space, act_space = _spaces("dict-box")
    kwargs = {"random": True, "seed": 3, "window_size": 3}
    plain = _make(obs_space, act_space, 3, 15, **kwargs)
    compact = _make(obs_space, act_space, 3, 15, store_next_obs=False, **kwargs)
    feed = Feed(obs_space, act_space, 3, p_end=0.15, p_jump=0.05)
    for step in range(40):
        data = feed.batch()
        plain.add(**data)
        compact.add(**data)
        _assert_same_pool(plain, compact, f"add {step}")
    assert_same_data(plain.sample(30), compact.sample(30), "sample")


def test_compact_layout_halves_image_memory():
    obs_space = spaces.Box(0, 255, shape=(84, 84, 4), dtype=np.uint8)
    act_space = spaces.Discrete(4)
    num_envs, pool_size = 2, 400
    plain = _make(obs_space, act_space, num_envs, pool_size)
    compact = _make(obs_space, act_space, num_envs, pool_size, store_next_obs=False)
    rng = np.random.default_rng(0)
    current = rng.integers(0, 256, size=(num_envs, 84, 84, 4), dtype=np.uint8)
    for step in range(300):  # episodes of 25 steps (truncated)
        next_obs = rng.integers(0, 256, size=(num_envs, 84, 84, 4), dtype=np.uint8)
        truncated = np.full(num_envs, (step + 1) % 25 == 0)
        data = {
            "obs": current,
            "action": rng.integers(0, 4, size=num_envs),
            "next_obs": next_obs,
            "reward": np.full(num_envs, float(step)),
            "terminated": np.zeros(num_envs, dtype=bool),
            "truncated": truncated,
        }
        plain.add(**data)
        compact.add(**data)
        current = next_obs.copy()
        if truncated[0]:
            current = rng.integers(0, 256, size=(num_envs, 84, 84, 4), dtype=np.uint8)
    assert_same_data(plain.get_pool(), compact.get_pool(), "compact vs plain")
    assert compact.nbytes <= 0.6 * plain.nbytes, (compact.nbytes, plain.nbytes)


@pytest.mark.parametrize(
    "settings",
    [
        {"clearing_freq": 50, "clearing_size": 1},
        {"store_next_obs": False, "alpha": 0.6},
        {"frame_stack": 2, "window_size": 4},
    ],
    ids=["arrays", "apart-prioritized", "frames"],
)
def test_a_pool_loaded_from_a_state_dict_owns_its_arrays(settings):
    # state_dict() returns the live arrays; load_state_dict used to take them as
    # they were, so the copy changed with the pool it came from (found by the
    # issue 39 review): lengths, rows, priorities and marks of another pool
    space = spaces.Box(-1, 1, (2, 3), np.float32)

    def make() -> vecpool.ReplayPool:
        return vecpool.ReplayPool(space, spaces.Discrete(3), 2, 16, seed=0, **settings)

    def add(pool: vecpool.ReplayPool, step: int) -> None:
        obs = np.full((2, 2, 3), step, np.float32)
        ended = np.array([step % 3 == 2, False])
        pool.add(obs, np.array([0, 1]), obs, np.full(2, step), ended, ended & False)

    pool = make()
    for step in range(5):
        add(pool, step)
    twin = make()
    twin.load_state_dict(pool.state_dict())
    twin.generator_state = pool.generator_state
    held = twin.get_pool()
    for step in range(5, 30):  # the source goes on, round its ring
        add(pool, step)
    assert twin.lengths.tolist() == [5, 5]
    assert_same_data(held, twin.get_pool(), "the twin's rows")
    fresh = make()  # the twin is the pool as it was: driven alike, alike
    for step in range(5):
        add(fresh, step)
    fresh.generator_state = twin.generator_state
    for step in range(30, 34):
        add(fresh, step)
        add(twin, step)
    assert_same_data(fresh.state_dict(), twin.state_dict(), "state_dict")
    assert_same_data(fresh.sample(8), twin.sample(8), "sample")


@pytest.mark.parametrize("kind", ["hot", "routed", "random", "env_ids"])
def test_the_episode_history_is_every_episode_the_pool_counted_in_order(kind):
    """``take_ended_episodes``: each episode's env, return and length, as they
    ended (a step's rows in order), without those cut or aborted; what
    ``episode_stats`` counts, one by one, on every writer path."""
    num_envs = 3
    options: dict[str, Any] = {"seed": 0}
    if kind == "routed":  # clearing takes the routed writer
        options.update(clearing_freq=1_000, clearing_size=1)
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (2,), np.float32),
        spaces.Discrete(2),
        num_envs,
        40,
        random=kind == "random",
        **options,
    )
    assert pool.take_ended_episodes().env_ids.size == 0  # not kept: none
    pool.keep_episode_history()
    rng = np.random.default_rng(1)
    returns, lengths = np.zeros(num_envs), np.zeros(num_envs, np.int64)
    cut = np.zeros(num_envs, np.bool_)  # the episode's start was lost
    expected: list[tuple[int, float, int]] = []
    taken: list[tuple[int, float, int]] = []
    for step in range(120):
        env_ids = (
            np.array([0, 0, 2]) if kind == "env_ids" and step % 3 else None
        )  # env 0 twice: two of its steps in one batch
        rows = np.arange(num_envs) if env_ids is None else env_ids
        reward = rng.normal(size=rows.size)
        terminated = rng.random(rows.size) < 0.2
        obs = np.zeros((rows.size, 2), np.float32)
        pool.add(
            obs, np.zeros(rows.size, int), obs, reward, terminated,
            np.zeros(rows.size, bool), env_ids=env_ids,
        )  # fmt: skip
        for env, value, done in zip(rows.tolist(), reward, terminated, strict=True):
            returns[env] += value
            lengths[env] += 1
            if done:
                if not cut[env]:
                    expected.append((env, float(returns[env]), int(lengths[env])))
                returns[env], lengths[env], cut[env] = 0.0, 0, False
        if step == 50:  # env 1 goes on with its start lost: never counted
            pool.abort_episodes(np.array([1]), resumes=True)
            cut[1] = True
        if step % 17 == 0:
            ended = pool.take_ended_episodes()
            taken += zip(
                ended.env_ids.tolist(),
                ended.returns.tolist(),
                ended.lengths.tolist(),
                strict=True,
            )
    ended = pool.take_ended_episodes()
    taken += zip(
        ended.env_ids.tolist(), ended.returns.tolist(), ended.lengths.tolist(),
        strict=True,
    )  # fmt: skip
    assert len(expected) > 30
    assert [(env, length) for env, _, length in taken] == [
        (env, length) for env, _, length in expected
    ]
    assert [value for _, value, _ in taken] == pytest.approx(
        [value for _, value, _ in expected], rel=1e-12
    )
    assert pool.episode_stats.count == len(expected)
