"""Complete episodes out of a replay pool: starts, ends, drops and jumps."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.replay.episodes import EpisodeScan, complete_episodes
from vecpool.testing import make_env_fns


def _pool(pool_size: int = 100, num_envs: int = 1, **kwargs) -> vecpool.ReplayPool:
    return vecpool.ReplayPool(
        spaces.Box(-100, 100, (1,)), spaces.Discrete(2), num_envs, pool_size, **kwargs
    )


def _add(pool, obs, next_obs, terminated=False, truncated=False):
    pool.add(
        np.array([[obs]], np.float32),
        np.array([1]),
        np.array([[next_obs]], np.float32),
        np.array([float(obs)]),
        np.array([terminated]),
        np.array([truncated]),
    )


def _firsts(episodes):
    return [e.observations[:, 0].tolist() for e in episodes]


def test_an_episode_runs_from_a_reset_to_its_end():
    pool = _pool()
    for t in range(3):
        _add(pool, t, t + 1, terminated=t == 2)
    _add(pool, 10, 11)  # reset, then one step of a running episode
    episodes, partial = complete_episodes(pool)
    assert _firsts(episodes) == [[0, 1, 2, 3]]
    (episode,) = episodes
    assert len(episode) == 3
    assert episode.rewards.tolist() == [0.0, 1.0, 2.0]
    assert episode.terminations.tolist() == [False, False, True]
    assert episode.truncations.tolist() == [False, False, False]
    assert partial == 1  # the running tail


def test_a_truncation_ends_an_episode_too():
    pool = _pool()
    _add(pool, 0, 1)
    _add(pool, 1, 2, truncated=True)
    episodes, partial = complete_episodes(pool)
    assert _firsts(episodes) == [[0, 1, 2]]
    assert episodes[0].truncations.tolist() == [False, True]
    assert partial == 0


def test_a_head_whose_start_was_dropped_is_partial():
    pool = _pool(pool_size=3)  # keeps the 3 newest
    for t in range(4):
        _add(pool, t, t + 1, terminated=t == 1)
    _add(pool, 20, 21, terminated=True)
    # kept: rows t=2, t=3 and 20. Rows 2-3 begin after t=1's end (dropped), but
    # the jump to 20 cuts their episode: partial
    episodes, partial = complete_episodes(pool)
    assert pool.received.tolist() == [5]
    assert _firsts(episodes) == [[20, 21]]
    assert partial == 1


def test_a_whole_episode_at_the_head_after_a_dropped_end_is_exported(tmp_path):
    # a hostile tester's finding: the row dropped before the sub-pool's oldest
    # ended an episode, so the oldest begins one; that whole episode was counted
    # partial and left out of the export (complete_episodes, to_minari)
    pool = _pool(pool_size=4)
    _add(pool, 0, 1)
    _add(pool, 1, 2, terminated=True)  # episode 0: dropped below
    for t in range(3):
        _add(pool, 10 + t, 11 + t, terminated=t == 2)  # episode 1: held whole
    _add(pool, 20, 21)  # episode 2 runs
    assert (pool.received.tolist(), pool.lengths.tolist()) == ([6], [4])
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "pool.npz"))
    for each in (pool, loaded):
        episodes, partial = complete_episodes(each)
        assert _firsts(episodes) == [[10, 11, 12, 13]]
        assert partial == 1  # the running tail only
        assert each.episode_starts(0, 0, 4).tolist() == [True, False, False, True]


@pytest.mark.parametrize("window", [None, 3])
def test_a_head_that_goes_on_with_a_dropped_start_stays_partial(window):
    # the oldest held row is the middle of an episode whose start was dropped:
    # not a whole episode, whether it was dropped as the oldest or by the window
    pool = _pool(pool_size=3, window_size=window)
    for t in range(6):
        _add(pool, t, t + 1, terminated=t == 5)
    episodes, partial = complete_episodes(pool)
    assert (episodes, partial) == ([], 1)
    assert pool.episode_starts(0, 0, 3).tolist() == [False, False, False]
    assert pool.stretch_starts(0, 0, 3).tolist() == [True, False, False]


def test_a_jump_cuts_an_episode_and_starts_the_next():
    pool = _pool()
    _add(pool, 0, 1)
    _add(pool, 1, 2)
    _add(pool, 50, 51)  # obs != previous next_obs: a reset no flag announced
    _add(pool, 51, 52, terminated=True)
    episodes, partial = complete_episodes(pool)
    assert _firsts(episodes) == [[50, 51, 52]]
    assert partial == 1


def test_sub_pools_are_separate_envs():
    pool = _pool(num_envs=2)
    for t in range(2):
        pool.add(
            np.array([[t], [100 + t]], np.float32),
            np.array([0, 1]),
            np.array([[t + 1], [101 + t]], np.float32),
            np.zeros(2),
            np.array([t == 1, False]),
            np.array([False, False]),
        )
    episodes, partial = complete_episodes(pool)
    assert [(e.env, e.observations[:, 0].tolist()) for e in episodes] == [
        (0, [0, 1, 2])
    ]
    assert partial == 1


def test_a_randomly_routed_pool_has_no_episodes():
    with pytest.raises(ValueError, match="random=True"):
        complete_episodes(_pool(random=True))


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_episodes_recorded_by_the_wrapper_are_the_envs_own(mode):
    """Each complete episode equals what a plain env does from the same reset."""
    fns = make_env_fns(3, max_steps=6, terminate_prob=0.15, obs_kind="dict")
    kwargs = {"autoreset_mode": mode}
    envs = vecpool.ReplayPoolWrapper(
        vecpool.AsyncVectorEnv(fns, num_workers=0, **kwargs), pool_size=600
    )
    try:
        envs.reset(seed=5)
        actions = np.random.default_rng(1).integers(0, 2, (40, 3))
        for batch in actions:
            if mode is AutoresetMode.DISABLED:
                _, _, term, trunc, _ = envs.step(batch)
                if (term | trunc).any():
                    envs.reset(options={"reset_mask": term | trunc})
            else:
                envs.step(batch)
        episodes, partial = complete_episodes(envs.pool)
    finally:
        envs.close()
    assert len(episodes) >= 5
    assert partial <= 3  # at most the running tail of each env
    for episode in episodes:
        ends = episode.terminations | episode.truncations
        assert ends[-1]
        assert not ends[:-1].any()
        # a dict observation batch with T + 1 rows, T actions
        for leaf in episode.observations.values():
            assert len(leaf) == len(episode) + 1
        assert len(episode.actions) == len(episode)


def test_cartpole_episodes_replay_exactly_from_their_actions():
    """Replaying an episode's actions in a fresh env from its reset state matches."""
    envs = vecpool.ReplayPoolWrapper(
        vecpool.AsyncVectorEnv(
            [lambda: gym.make("CartPole-v1").unwrapped] * 2, num_workers=0
        ),
        pool_size=4000,
    )
    try:
        envs.reset(seed=3)
        envs.action_space.seed(3)
        for _ in range(200):
            envs.step(envs.action_space.sample())
        episodes, _ = complete_episodes(envs.pool)
    finally:
        envs.close()
    assert episodes
    replay: Any = gym.make("CartPole-v1").unwrapped
    for episode in episodes[:5]:
        replay.reset()
        replay.state = episode.observations[0].astype(np.float64)
        for t, action in enumerate(episode.actions.tolist()):
            obs, reward, terminated, _, _ = replay.step(action)
            # the env steps in float64 from a float32 start: equal to float32 noise
            np.testing.assert_allclose(obs, episode.observations[t + 1], atol=1e-5)
            assert reward == episode.rewards[t]
            assert terminated == episode.terminations[t]


def test_an_episode_cut_where_the_next_one_starts_alike_is_not_joined():
    # an episode aborted (a checkpoint resumed, a worker restarted) whose last
    # next_obs equals the next episode's first obs (FrozenLake's start state): no
    # jump in the observations shows the cut, the pool's stretch marks do
    pool = vecpool.ReplayPool(spaces.Box(0, 9, (1,)), spaces.Discrete(2), 1, 10)

    def add(obs: float, ended: bool) -> None:
        pool.add(np.array([[obs]], np.float32), np.array([0]),
                 np.array([[obs + 1]], np.float32), np.ones(1),
                 np.array([ended]), np.array([False]))  # fmt: skip

    add(0, False)
    add(1, False)  # its next_obs: 2.0, and the episode is cut here
    pool.abort_episodes(np.array([0]))
    add(2, False)  # the next episode starts from 2.0
    add(3, True)
    episodes, partial = complete_episodes(pool)
    assert [e.observations[:, 0].tolist() for e in episodes] == [[2.0, 3.0, 4.0]]
    assert partial == 1


@pytest.mark.parametrize("routed", [False, True], ids=["aligned", "routed"])
@pytest.mark.parametrize("chunk_size", [1, 2, 4096])
def test_the_rest_of_an_episode_whose_start_was_lost_is_not_exported(
    chunk_size, routed, tmp_path
):
    # a step that failed (ReplayPoolWrapper: abort_episodes(resumes=True)): the
    # episode goes on, its start lost, so the rest of it is partial, as
    # episode_stats says (found by a tester: it was exported as complete)
    pool = _pool()

    def add(t: int, ended: bool = False) -> None:
        if not routed:  # the writers' two paths mark alike
            _add(pool, t, t + 1, terminated=ended)
            return
        obs, next_obs = np.array([[t]], np.float32), np.array([[t + 1]], np.float32)
        flags = (np.array([ended]), np.array([False]))
        pool.add(obs, np.array([1]), next_obs, np.array([float(t)]), *flags, [0])

    for t in range(3):
        add(t)
    pool.abort_episodes([0], resumes=True)
    for t in range(5, 8):
        add(t, t == 7)
    for t in range(9, 12):  # then a whole episode
        add(t, t == 11)
    marks = pool.resumed_starts(0, 0, 9).tolist()
    assert marks == [False] * 3 + [True] + [False] * 5
    scan = EpisodeScan(pool, chunk_size=chunk_size)
    episodes = list(scan)
    assert _firsts(episodes) == [[9.0, 10.0, 11.0, 12.0]]
    assert scan.partial == 2  # steps 0-2 (no end), steps 5-7 (no start)
    assert pool.episode_stats.count == 1
    # a pool file keeps the mark (format 7)
    again = vecpool.ReplayPool.load(pool.save(tmp_path / "resumed.npz"))
    assert again.resumed_starts(0, 0, 9).tolist() == marks
    assert _firsts(complete_episodes(again)[0]) == _firsts(episodes)


def test_an_env_wrapped_in_the_middle_of_an_episode_exports_no_fragment():
    # its first episode's start was never recorded: only the whole ones after it
    env = gym.vector.SyncVectorEnv(make_env_fns(1, max_steps=5, terminate_prob=0.0))
    env.reset(seed=0)
    env.step(np.array([1]))
    envs = vecpool.ReplayPoolWrapper(env, 100)
    for _ in range(20):
        envs.step(np.array([1]))
    episodes, partial = complete_episodes(envs.pool)
    assert len(episodes) == envs.pool.episode_stats.count >= 2
    assert all(len(e.rewards) == 5 for e in episodes)
    assert partial >= 1
    envs.close()
