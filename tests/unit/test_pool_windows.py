"""n-step windows and sequences against a brute-force reference.

The reference keeps, per env, the list of transitions the pool should hold (oldest
first) and which of them start a stretch (the first of an episode, or the first
after a reset, an abort or a skipped row). Every observation is unique
(``[env, serial]``), so a sampled row is found in the reference by its
observation. Episode ends, skipped rows (``valid``), aborts, per-env adds
(``env_ids``), windows and clearing are drawn at random.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from vecpool import ReplayPool, ReplaySample, Sequences, Transitions
from vecpool.replay.readers import NStep
from vecpool.replay.samplers import PrioritizedSampler


@dataclass
class _Row:
    obs: tuple[float, float]
    action: int
    next_obs: tuple[float, float]
    reward: float
    terminated: bool
    truncated: bool
    start: bool


@dataclass
class _Reference:
    num_envs: int
    rows: list[list[_Row]] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.num_envs)]
        self.fresh = [True] * self.num_envs

    def add(self, env: int, row: _Row) -> None:
        row.start = self.fresh[env]
        self.rows[env].append(row)
        self.fresh[env] = row.terminated or row.truncated

    def keep(self, lengths: list[int]) -> None:
        """Keep each sub-pool's newest rows, as many as the pool says it holds."""
        for env, length in enumerate(lengths):
            self.rows[env] = self.rows[env][len(self.rows[env]) - length :]

    def find(self, obs: Any) -> tuple[int, int]:
        env = int(obs[0])
        for index, row in enumerate(self.rows[env]):
            if row.obs == (float(obs[0]), float(obs[1])):
                return env, index
        msg = f"row {obs} is not held"
        raise AssertionError(msg)

    def n_step(self, env: int, index: int, steps: int, gamma: float) -> tuple[Any, ...]:
        rows = self.rows[env]
        reward, summed, last = 0.0, 0, index
        for k in range(steps):
            j = index + k
            if j >= len(rows) or (k > 0 and rows[j].start):
                break
            reward += gamma**k * rows[j].reward if k else rows[j].reward
            summed, last = k + 1, j
            if rows[j].terminated or rows[j].truncated:
                break
        end = rows[last]
        return reward, end.next_obs, end.terminated, end.truncated, gamma**summed

    def sequence(self, env: int, index: int, length: int) -> list[bool]:
        rows, mask = self.rows[env], [True]
        for t in range(1, length):
            j = index + t
            mask.append(
                mask[-1]
                and j < len(rows)
                and not rows[j].start
                and not (rows[j - 1].terminated or rows[j - 1].truncated)
            )
        return mask


def _fill(
    pool: ReplayPool, steps: int, seed: int, *, aborts: bool = True
) -> _Reference:
    """Add ``steps`` random vector steps to ``pool`` and its reference."""
    rng = np.random.default_rng(seed)
    n = pool.num_envs
    reference = _Reference(n)
    serial = 0
    for _ in range(steps):
        kind = rng.random()
        env_ids = (
            None
            if kind < 0.6
            else np.sort(rng.choice(n, rng.integers(1, n + 1), replace=False))
        )
        ids = np.arange(n) if env_ids is None else env_ids
        count = ids.size
        obs = np.stack([ids, serial + np.arange(count)], axis=1).astype(np.float64)
        next_obs = obs + 0.5
        serial += count
        action = rng.integers(0, 3, count)
        reward = rng.normal(size=count)
        terminated = rng.random(count) < 0.08
        truncated = rng.random(count) < 0.04
        valid = None
        if env_ids is None and rng.random() < 0.3:
            valid = rng.random(count) < 0.8
        pool.add(
            obs, action, next_obs, reward, terminated, truncated, env_ids, valid=valid
        )
        for position, env in enumerate(ids.tolist()):
            if valid is not None and not valid[position]:
                continue
            reference.add(
                env,
                _Row(
                    tuple(obs[position]),
                    int(action[position]),
                    tuple(next_obs[position]),
                    float(reward[position]),
                    bool(terminated[position]),
                    bool(truncated[position]),
                    False,
                ),
            )
        if aborts and rng.random() < 0.05:
            cut = rng.choice(n, rng.integers(1, n + 1), replace=False)
            pool.abort_episodes(cut)
            for env in cut.tolist():
                reference.fresh[env] = True
    reference.keep(pool.lengths.tolist())
    return reference


_SETTINGS = [
    {},
    {"window_size": 7},
    {"clearing_freq": 9, "clearing_size": 4},
    {"store_next_obs": False},
    {"alpha": 0.6},
]


def _pool(num_envs: int = 3, pool_size: int = 60, **settings: Any) -> ReplayPool:
    return ReplayPool(
        spaces.Box(-np.inf, np.inf, (2,), np.float64),
        spaces.Discrete(3),
        num_envs,
        pool_size,
        seed=1,
        **settings,
    )


@pytest.mark.parametrize("settings", _SETTINGS, ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("steps", [1, 3])
def test_n_step_matches_reference(
    settings: dict[str, Any], seed: int, steps: int
) -> None:
    pool = _pool(**settings)
    reference = _fill(pool, 90, seed)
    gamma = 0.9
    batch = pool.sample(400, n_step=steps, gamma=gamma)
    assert isinstance(batch, ReplaySample)
    for i in range(400):
        env, index = reference.find(batch.obs[i])
        reward, next_obs, terminated, truncated, discount = reference.n_step(
            env, index, steps, gamma
        )
        assert batch.reward[i] == pytest.approx(reward, rel=1e-12, abs=1e-12)
        assert tuple(batch.next_obs[i]) == next_obs
        assert batch.terminated[i] == terminated
        assert batch.truncated[i] == truncated
        assert batch.discount[i] == pytest.approx(discount)
        assert batch.action[i] == reference.rows[env][index].action


@pytest.mark.parametrize("settings", _SETTINGS, ids=str)
@pytest.mark.parametrize("seed", [3, 4])
def test_sequences_match_reference(settings: dict[str, Any], seed: int) -> None:
    pool = _pool(**settings)
    reference = _fill(pool, 90, seed)
    length = 6
    batch = pool.sample_sequences(200, length)
    assert isinstance(batch, Sequences)
    assert batch.obs.shape == (200, length, 2)
    assert batch.mask.shape == batch.reward.shape == (200, length)
    for i in range(200):
        env, index = reference.find(batch.obs[i, 0])
        expected = reference.sequence(env, index, length)
        assert batch.mask[i].tolist() == expected
        for t in range(length):
            if not expected[t]:
                break
            row = reference.rows[env][index + t]
            assert tuple(batch.obs[i, t]) == row.obs
            assert tuple(batch.next_obs[i, t]) == row.next_obs
            assert batch.reward[i, t] == row.reward
            assert batch.terminated[i, t] == row.terminated


def test_the_hot_path_and_the_per_env_path_mark_alike() -> None:
    """One env's rows added every step vs through ``env_ids``: same windows."""
    fast, slow = _pool(), _pool()
    rng = np.random.default_rng(5)
    for step in range(70):
        obs = np.stack([np.arange(3), np.full(3, step)], axis=1).astype(np.float64)
        args = (obs, rng.integers(0, 3, 3), obs + 0.5, rng.normal(size=3))
        ends = (rng.random(3) < 0.1, rng.random(3) < 0.05)
        fast.add(*args, *ends)
        slow.add(*args, *ends, env_ids=np.arange(3))
    assert list(fast.episode_stats) == pytest.approx(list(slow.episode_stats))
    a = fast.sample(300, n_step=4, gamma=0.5)
    b = slow.sample(300, n_step=4, gamma=0.5)
    np.testing.assert_array_equal(a.obs, b.obs)  # the same generator state
    np.testing.assert_allclose(a.reward, b.reward, rtol=1e-12)
    np.testing.assert_array_equal(a.next_obs, b.next_obs)


def test_plain_sample_keeps_its_six_fields() -> None:
    pool = _pool()
    _fill(pool, 10, 0)
    batch = pool.sample(5)
    assert type(batch) is Transitions
    obs, _, next_obs, *_ = batch
    assert obs.shape == next_obs.shape == (5, 2)
    one_step = pool.sample(5, n_step=1, gamma=0.5)
    assert type(one_step) is ReplaySample
    assert one_step.weights.tolist() == [1.0] * 5  # not prioritized: ones
    assert one_step.discount.tolist() == [0.5] * 5  # gamma ** 1


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_step": 3}, "`n_step` needs `gamma`"),
        ({"gamma": 0.9}, "`gamma` is used only with `n_step`"),
        ({"n_step": 0, "gamma": 0.9}, "`n_step` must be an integer >= 1"),
        ({"n_step": 2, "gamma": 1.5}, "`gamma` must be a number between 0 and 1"),
        ({"beta": 0.4}, "make it with `ReplayPool(..., alpha=0.6)`"),
    ],
)
def test_bad_sampling_options_name_the_fix(kwargs: dict[str, Any], needle: str) -> None:
    pool = _pool()
    _fill(pool, 5, 0)
    with pytest.raises(ValueError, match=re.escape(needle)):
        pool.sample(4, **kwargs)


@pytest.mark.parametrize("call", ["n_step", "sequences"])
def test_random_routing_refuses_ordered_sampling(call: str) -> None:
    pool = _pool(random=True)
    _fill(pool, 5, 0, aborts=False)

    def draw() -> Any:
        if call == "n_step":
            return pool.sample(4, n_step=2, gamma=0.9)
        return pool.sample_sequences(4, 3)

    with pytest.raises(ValueError, match="random=True"):
        draw()


@pytest.mark.parametrize("settings", [{}, {"alpha": 0.5}], ids=str)
def test_save_and_load_keep_windows(settings: dict[str, Any], tmp_path: Any) -> None:
    pool = _pool(**settings)
    _fill(pool, 80, 7)
    if "alpha" in settings:
        drawn = pool.sample(64, beta=0.5)
        pool.update_priorities(drawn.indices, np.arange(64.0) + 0.25)
    loaded = ReplayPool.load(pool.save(tmp_path / "pool.npz"))
    # every held row: the same windows, the same priority
    offsets = [np.arange(length) for length in pool.lengths.tolist()]
    env = np.repeat(np.arange(pool.num_envs), pool.lengths)
    offset = np.concatenate(offsets)
    for one, other in ((pool, loaded), (loaded, pool)):
        assert one.lengths.tolist() == other.lengths.tolist()
    rows = pool._ring.row_of(env, offset), loaded._ring.row_of(env, offset)
    window = NStep(3, 0.8)
    for mine, theirs in zip(
        window.window(pool._stored, env, offset, rows[0]),
        window.window(loaded._stored, env, offset, rows[1]),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, theirs)
    if "alpha" in settings:
        assert isinstance(pool._sampler, PrioritizedSampler)
        assert isinstance(loaded._sampler, PrioritizedSampler)
        trees = pool._sampler.tree, loaded._sampler.tree
        np.testing.assert_array_equal(trees[0].get(rows[0]), trees[1].get(rows[1]))
        assert trees[1].total == pytest.approx(trees[0].total)
    if "alpha" not in settings:  # the same generator state, the same draws
        s, t = pool.sample_sequences(50, 5), loaded.sample_sequences(50, 5)
        np.testing.assert_array_equal(s.mask, t.mask)
        np.testing.assert_array_equal(s.obs, t.obs)


@pytest.mark.parametrize("path", ["aligned", "env_ids"])
def test_recent_episode_stats_cover_the_last_k_episodes(
    path: str, tmp_path: Any
) -> None:
    pool = _pool()
    rng = np.random.default_rng(8)
    ended: list[tuple[float, float]] = []  # (return, length), in the order they ended
    running = [[0.0, 0.0] for _ in range(3)]
    for step in range(200):
        obs = np.stack([np.arange(3), np.full(3, step)], axis=1).astype(np.float64)
        reward = rng.integers(0, 5, 3).astype(np.float64)
        done = rng.random(3) < 0.15
        env_ids = None if path == "aligned" else np.arange(3)
        pool.add(
            obs, np.zeros(3, np.int64), obs, reward, done, np.zeros(3, bool), env_ids
        )
        for env in range(3):
            running[env][0] += reward[env]
            running[env][1] += 1
            if done[env]:
                ended.append((running[env][0], running[env][1]))
                running[env] = [0.0, 0.0]
        if step % 37 == 0:  # reads in between: the deferred adds settle in runs
            pool.sample(3)
    for k in (1, 5, 100):
        last = ended[-k:]
        stats = pool.recent_episode_stats(k)
        assert stats.count == len(last)
        assert stats.mean_return == pytest.approx(np.mean([r for r, _ in last]))
        assert stats.mean_length == pytest.approx(np.mean([n for _, n in last]))
    loaded = ReplayPool.load(pool.save(tmp_path / "pool.npz"))
    assert loaded.recent_episode_stats(7) == pool.recent_episode_stats(7)
    assert pool.recent_episode_stats(10_000).count == len(ended)
    with pytest.raises(ValueError, match="`k` must be an integer between 1 and 10000"):
        pool.recent_episode_stats(10_001)


def test_adds_past_the_ring_between_reads_mixing_the_aligned_and_masked_paths() -> None:
    """The deferred bookkeeping settles before any row is written twice."""
    fast, slow = _pool(pool_size=15), _pool(pool_size=15)  # 5 a sub-pool, 6 slots
    rng = np.random.default_rng(9)
    for step in range(60):  # no read in between: only the adds decide when to settle
        obs = np.stack([np.arange(3), np.full(3, step)], axis=1).astype(np.float64)
        args = (obs, np.zeros(3, np.int64), obs + 0.5, rng.normal(size=3))
        ends = (rng.random(3) < 0.2, np.zeros(3, bool))
        valid = None if step < 4 or step % 7 else rng.random(3) < 0.6
        fast.add(*args, *ends, valid=valid)
        keep = np.arange(3) if valid is None else np.flatnonzero(valid)
        if keep.size:
            obs_, action, next_obs, reward = (a[keep] for a in args)
            terminated, truncated = (e[keep] for e in ends)
            slow.add(obs_, action, next_obs, reward, terminated, truncated, keep)
    assert list(fast.episode_stats) == pytest.approx(list(slow.episode_stats))
    assert fast.lengths.tolist() == slow.lengths.tolist()
    a, b = fast.get_pool(), slow.get_pool()
    np.testing.assert_array_equal(a.obs, b.obs)
    fast_marks = fast._ring.starts[fast._ring.row_of(*_held(fast))]
    slow_marks = slow._ring.starts[slow._ring.row_of(*_held(slow))]
    np.testing.assert_array_equal(fast_marks, slow_marks)


def _held(pool: ReplayPool) -> tuple[np.ndarray, np.ndarray]:
    env = np.repeat(np.arange(pool.num_envs), pool.lengths)
    offset = np.concatenate([np.arange(n) for n in pool.lengths.tolist()])
    return env, offset


def test_stretch_starts_marks_the_oldest_after_older_rows_were_dropped() -> None:
    # the docstring's first rule, also after an overflow (found by a tester: the
    # oldest row kept the mark it was written with); a file of format 3 or 4
    # derives True there, so a live pool and a loaded one now agree
    space = spaces.Box(0.0, 99.0, (1,), np.float32)
    pool = ReplayPool(space, spaces.Discrete(2), 1, 4)
    ended = False
    for t in range(7):
        ended = t == 5
        obs = np.array([[t]], np.float32)
        pool.add(
            obs,
            np.array([0]),
            obs + 1,
            np.ones(1),
            np.array([ended]),
            np.zeros(1, bool),
        )
    assert pool.lengths.tolist() == [4]
    # offsets 0-3 hold steps 3-6; step 6 follows the end at step 5
    assert pool.stretch_starts(0, 0, 4).tolist() == [True, False, False, True]
    assert pool.stretch_starts(0, 1, 4).tolist() == [False, False, True]
    marks = pool.stretch_starts(0, 0, 4)
    marks[:] = False  # a copy: the pool's marks are not changed
    assert pool.stretch_starts(0, 0, 1).tolist() == [True]
