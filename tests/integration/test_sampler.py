"""vecpool.Sampler: batches, autoreset modes, episodes, pool, evaluation.

References are built independently, by stepping a ``gymnasium.vector.SyncVectorEnv``
with the same seeds and the actions the sampler recorded.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.replay.episodes import complete_episodes
from vecpool.sampling.sampler import EpisodeRecord, SampleBatch, Sampler
from vecpool.testing import CountingEnv, RaisingEnv, SlowEnv

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
KINDS = ["sync", "vecpool", "vecpool-batch"]


def counting_fns(num_envs: int, **kwargs: Any) -> list[Any]:
    params = {"max_steps": 6, "terminate_prob": 0.1, "info_every": 1}
    params.update(kwargs)
    return [functools.partial(CountingEnv, **params) for _ in range(num_envs)]  # type: ignore[arg-type]


@pytest.fixture
def make_env(make_sync, make_async):
    """Build a vector env of kind sync / vecpool / vecpool-batch."""

    def factory(kind: str, env_fns: list[Any], **kwargs: Any) -> Any:
        if kind == "sync":
            return make_sync(env_fns, **kwargs)
        if kind == "vecpool":
            return make_async(env_fns, num_workers=2, **kwargs)
        if kind == "vecpool-batch":
            return make_async(env_fns, num_workers=len(env_fns), batch_size=2, **kwargs)
        raise AssertionError(kind)

    return factory


def leaves(tree: Any) -> list[np.ndarray]:
    """Leaf arrays of a (nested) batch, in a fixed order."""
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in leaves(tree[key])]
    if isinstance(tree, tuple):
        return [leaf for item in tree for leaf in leaves(item)]
    return [np.asarray(tree)]


def first_leaf(tree: Any) -> np.ndarray:
    return leaves(tree)[0]


def obs_policy(obs: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Deterministic in the observation, so per-env results ignore grouping."""
    position = obs["position"] if isinstance(obs, dict) else obs
    position = np.asarray(position, dtype=np.float64).reshape(len(position), -1)
    actions = (np.floor(np.abs(position[:, 0]) * 1000) % 3).astype(np.int64)
    return actions, {"score": position.sum(axis=1), "twice": np.stack([actions] * 2, 1)}


def reference_rollout(env_fns, mode, seed, actions):
    """Step a SyncVectorEnv with ``actions`` ([N, B]); rows as the sampler defines."""
    env = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=mode)
    try:
        obs, _ = env.reset(seed=seed)
        count = env.num_envs
        autoreset = np.zeros(count, bool)
        needs_reset = np.zeros(count, bool)
        returns = np.zeros(count)
        lengths = np.zeros(count, int)
        rows, episodes = [], []
        for action in actions:
            if needs_reset.any():
                obs, _ = env.reset(options={"reset_mask": needs_reset.copy()})
            next_obs, rewards, terms, truncs, infos = env.step(action)
            ended = terms | truncs
            true_next = [leaf.copy() for leaf in leaves(next_obs)]
            if mode is AutoresetMode.SAME_STEP:
                for i in np.flatnonzero(ended):
                    for leaf, value in zip(
                        true_next, leaves(infos["final_obs"][i]), strict=True
                    ):
                        leaf[i] = value
            valid = (
                ~autoreset if mode is AutoresetMode.NEXT_STEP else np.ones(count, bool)
            )
            rows.append(
                {
                    "obs": [leaf.copy() for leaf in leaves(obs)],
                    "next_obs": true_next,
                    "reward": rewards.copy(),
                    "terminated": terms.copy(),
                    "truncated": truncs.copy(),
                    "valid": valid,
                }
            )
            returns[valid] += rewards[valid]
            lengths[valid] += 1
            for i in np.flatnonzero(ended & valid):
                episodes.append((float(returns[i]), int(lengths[i]), int(i)))
                returns[i], lengths[i] = 0.0, 0
            autoreset = ended if mode is AutoresetMode.NEXT_STEP else autoreset
            needs_reset = ended if mode is AutoresetMode.DISABLED else needs_reset
            obs = next_obs
        return rows, episodes
    finally:
        env.close()


def assert_batch_matches(batches, rows):
    """Concatenated sampler batches equal the reference rows."""
    flat = [(batch, t) for batch in batches for t in range(batch.reward.shape[0])]
    assert len(flat) == len(rows)
    for step, ((batch, t), want) in enumerate(zip(flat, rows, strict=True)):
        for name in ("reward", "terminated", "truncated", "valid"):
            np.testing.assert_array_equal(
                getattr(batch, name)[t], want[name], err_msg=f"row {step}: {name}"
            )
        for name in ("obs", "next_obs"):
            for got, expected in zip(
                leaves(getattr(batch, name)), want[name], strict=True
            ):
                np.testing.assert_array_equal(
                    got[t], expected, err_msg=f"row {step}: {name}"
                )


# --------------------------------------------------------------------- shapes


@pytest.mark.parametrize("kind", ["sync", "vecpool-batch"])
@pytest.mark.parametrize(
    ("obs_kind", "action_kind"),
    [("box", "discrete"), ("dict", "box"), ("tuple", "discrete"), ("image", "box")],
)
def test_batch_shapes_and_dtypes(make_env, kind, obs_kind, action_kind):
    env = make_env(kind, counting_fns(4, obs_kind=obs_kind, action_kind=action_kind))
    sampler = Sampler(env, None, batch_T=5, seed=0)
    batch, episodes = sampler.obtain_samples()
    assert isinstance(batch, SampleBatch)
    assert all(isinstance(record, EpisodeRecord) for record in episodes)
    example = env.observation_space.sample()
    for field in (batch.obs, batch.next_obs):
        assert type(field) is type(example)
        for got, space_leaf in zip(leaves(field), leaves(example), strict=True):
            assert got.shape == (5, *space_leaf.shape)
            assert got.dtype == space_leaf.dtype
    action_example = np.asarray(env.action_space.sample())
    assert batch.action.shape == (5, *action_example.shape)
    assert batch.action.dtype == action_example.dtype
    assert batch.reward.shape == (5, 4)
    assert batch.reward.dtype == np.float64
    for flags in (batch.terminated, batch.truncated, batch.valid):
        assert flags.shape == (5, 4)
        assert flags.dtype == np.bool_
    assert batch.agent_info == {}


def test_agent_info_is_stacked(make_env):
    env = make_env("sync", counting_fns(3))
    batch, _ = Sampler(env, obs_policy, batch_T=4, seed=0).obtain_samples()
    assert set(batch.agent_info) == {"score", "twice"}
    assert batch.agent_info["score"].shape == (4, 3)
    assert batch.agent_info["score"].dtype == np.float64
    assert batch.agent_info["twice"].shape == (4, 3, 2)
    np.testing.assert_array_equal(batch.agent_info["twice"][..., 0], batch.action)
    np.testing.assert_allclose(
        batch.agent_info["score"], batch.obs.astype(np.float64).sum(axis=-1)
    )


# ------------------------------------------------------------ modes vs reference


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_rows_match_sync_reference(make_env, kind, mode, obs_kind):
    env_fns = counting_fns(4, obs_kind=obs_kind)
    env = make_env(kind, env_fns, autoreset_mode=mode)
    sampler = Sampler(env, obs_policy, batch_T=7, seed=11)
    batches, records = [], []
    for _ in range(3):
        batch, episodes = sampler.obtain_samples()
        batches.append(batch)
        records += episodes
    actions = np.concatenate([batch.action for batch in batches])
    rows, expected_episodes = reference_rollout(env_fns, mode, 11, actions)
    assert_batch_matches(batches, rows)
    if mode is AutoresetMode.NEXT_STEP:
        assert not all(row["valid"].all() for row in rows), "no reset row was tested"
    else:
        assert all(row["valid"].all() for row in rows)
    got = [(r.return_, r.length, r.env_index) for r in records]
    if kind == "vecpool-batch":  # groups finish in any order; rows do not
        got, expected_episodes = sorted(got), sorted(expected_episodes)
    assert len(got) == len(expected_episodes) > 0
    for (ret, length, index), (want_ret, want_length, want_index) in zip(
        got, expected_episodes, strict=True
    ):
        assert (length, index) == (want_length, want_index)
        assert ret == pytest.approx(want_ret, abs=1e-9)


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_gymnasium_async_env(make_gym_async, mode):
    env_fns = counting_fns(3)
    env = make_gym_async(env_fns, autoreset_mode=mode)
    sampler = Sampler(env, obs_policy, batch_T=8, seed=5)
    batches = [sampler.obtain_samples()[0] for _ in range(2)]
    actions = np.concatenate([batch.action for batch in batches])
    rows, _ = reference_rollout(env_fns, mode, 5, actions)
    assert_batch_matches(batches, rows)


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize("kind", KINDS)
def test_consecutive_calls_continue(make_env, kind, mode):
    env = make_env(kind, counting_fns(4, obs_kind="dict"), autoreset_mode=mode)
    sampler = Sampler(env, obs_policy, batch_T=5, seed=2)
    previous, _ = sampler.obtain_samples()
    checked = 0
    for _ in range(3):
        batch, _ = sampler.obtain_samples()
        for env_index in range(4):
            ended = (
                previous.terminated[-1, env_index] or previous.truncated[-1, env_index]
            )
            if ended and mode is not AutoresetMode.NEXT_STEP:
                continue  # reset in between: row 0 starts the next episode
            checked += 1
            for now, before in zip(
                leaves(batch.obs), leaves(previous.next_obs), strict=True
            ):
                np.testing.assert_array_equal(now[0, env_index], before[-1, env_index])
        previous = batch
    assert checked > 0


# ------------------------------------------------------------------ decorrelation


@pytest.mark.parametrize("kind", ["sync", "vecpool-batch"])
def test_decorrelation_spreads_envs_deterministically(make_env, kind):
    def build(seed):
        env = make_env(
            kind, counting_fns(6, obs_kind="dict", terminate_prob=0.0, max_steps=50)
        )
        sampler = Sampler(
            env, obs_policy, batch_T=3, seed=seed, max_decorrelation_steps=12
        )
        return env, sampler, sampler.obtain_samples()[0]

    env, sampler, batch = build(seed=4)
    draws = sampler.decorrelation_steps
    assert draws is not None
    assert draws.shape == (6,)
    assert ((draws >= 0) & (draws <= 12)).all()
    assert len(set(draws.tolist())) > 1, "envs still in lockstep"
    # env i starts sampling n_i steps into its episode
    np.testing.assert_array_equal(batch.obs["count"][0], draws)
    np.testing.assert_array_equal(env.get_attr("episode_steps"), draws + 3)

    _, again, same = build(seed=4)
    np.testing.assert_array_equal(again.decorrelation_steps, draws)
    for got, want in zip(leaves(same), leaves(batch), strict=True):
        np.testing.assert_array_equal(got, want)
    _, other, _ = build(seed=5)
    assert not np.array_equal(other.decorrelation_steps, draws)


def test_no_decorrelation_by_default(make_env):
    env = make_env("sync", counting_fns(3, obs_kind="dict", terminate_prob=0.0))
    sampler = Sampler(env, None, batch_T=2, seed=0)
    batch, _ = sampler.obtain_samples()
    np.testing.assert_array_equal(sampler.decorrelation_steps, [0, 0, 0])
    np.testing.assert_array_equal(batch.obs["count"][0], [0, 0, 0])


# ---------------------------------------------------------------------- wait_reset


@pytest.mark.parametrize("kind", ["sync", "vecpool", "vecpool-batch"])
def test_wait_reset_masks_rows_and_resets_at_batch_end(make_env, kind):
    env = make_env(
        kind,
        counting_fns(3, obs_kind="dict", terminate_prob=0.0, max_steps=4),
        autoreset_mode=AutoresetMode.DISABLED,
    )
    sampler = Sampler(
        env, obs_policy, batch_T=6, seed=3, wait_reset=True, max_decorrelation_steps=3
    )
    batch, episodes = sampler.obtain_samples()
    draws = sampler.decorrelation_steps
    assert len(set(draws.tolist())) > 1  # type: ignore[union-attr]
    for env_index in range(3):
        end = 4 - int(draws[env_index]) - 1  # type: ignore[index]  # the row of the episode's last step
        column = batch.valid[:, env_index]
        assert column[: end + 1].all()
        assert not column[end + 1 :].any()
        assert batch.truncated[end, env_index]
        final = [leaf[end, env_index] for leaf in leaves(batch.next_obs)]
        for t in range(end + 1, 6):  # padding: the final obs, zero action/reward
            for field in (batch.obs, batch.next_obs):
                for leaf, want in zip(leaves(field), final, strict=True):
                    np.testing.assert_array_equal(leaf[t, env_index], want)
            assert batch.action[t, env_index] == 0
            assert batch.reward[t, env_index] == 0.0
            assert not batch.terminated[t, env_index]
            assert not batch.truncated[t, env_index]
            assert (batch.agent_info["twice"][t, env_index] == 0).all()
    assert sorted((r.env_index, r.length) for r in episodes) == [(0, 4), (1, 4), (2, 4)]

    # reset together at the batch end: every env starts the next batch fresh
    batch, episodes = sampler.obtain_samples()
    np.testing.assert_array_equal(batch.obs["count"][0], [0, 0, 0])
    np.testing.assert_array_equal(batch.valid[:4], True)
    np.testing.assert_array_equal(batch.valid[4:], False)
    assert sorted((r.env_index, r.length) for r in episodes) == [(0, 4), (1, 4), (2, 4)]
    if kind != "vecpool-batch":  # stepped with the others (hidden), until all wait
        steps = 3 + (4 - draws.min()) + 4  # type: ignore[union-attr]
        np.testing.assert_array_equal(env.get_attr("steps_taken"), [steps] * 3)
    else:  # envs that wait are not stepped at all
        # 3 decorrelation steps (restarted n_i steps before their end), then the
        # rest of the first episode and one full episode
        np.testing.assert_array_equal(env.get_attr("steps_taken"), 3 + (4 - draws) + 4)  # type: ignore[operator]
        restarted = (draws < 3).astype(int)  # type: ignore[union-attr, operator]
        np.testing.assert_array_equal(env.get_attr("resets_taken"), 1 + restarted + 2)


def test_wait_reset_alternating_matches_single_group(make_async):
    def run(batch_size):
        env = make_async(
            counting_fns(4, obs_kind="dict", max_steps=5),
            num_workers=4,
            batch_size=batch_size,
            autoreset_mode=AutoresetMode.DISABLED,
        )
        sampler = Sampler(env, obs_policy, batch_T=6, seed=8, wait_reset=True)
        return [sampler.obtain_samples()[0] for _ in range(3)]

    for alternating, single in zip(run(2), run(4), strict=True):
        for got, want in zip(leaves(alternating), leaves(single), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_wait_reset_needs_disabled_mode(make_sync, mode):
    env = make_sync(counting_fns(2), autoreset_mode=mode)
    msg = (
        f"`wait_reset=True` needs an env in DISABLED autoreset mode, got {mode.name}: "
        "create the env with autoreset_mode=AutoresetMode.DISABLED."
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        Sampler(env, None, 4, wait_reset=True)


# --------------------------------------------------------------------------- pool


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize("kind", ["sync", "vecpool-batch"])
def test_pool_receives_exactly_the_valid_transitions(make_env, kind, mode):
    env = make_env(kind, counting_fns(3, obs_kind="dict"), autoreset_mode=mode)
    pool = vecpool.ReplayPool(
        env.single_observation_space, env.single_action_space, 3, 300
    )
    sampler = Sampler(
        env,
        obs_policy,
        batch_T=6,
        seed=1,
        pool=pool,
        max_decorrelation_steps=4,
        wait_reset=mode is AutoresetMode.DISABLED,
    )
    batches = [sampler.obtain_samples()[0] for _ in range(3)]
    valid = np.concatenate([b.valid for b in batches])
    if mode is AutoresetMode.SAME_STEP:
        assert valid.all()
    else:
        assert not valid.all()

    def expected(arrays):
        """[N, B, ...] -> the valid rows, env by env, each in time order."""
        stacked = np.concatenate(arrays)
        return np.concatenate([stacked[valid[:, i], i] for i in range(3)])

    stored = pool.get_pool()
    assert len(pool) == int(valid.sum())
    for name in ("obs", "next_obs"):
        columns = zip(*(leaves(getattr(b, name)) for b in batches), strict=True)
        for got, arrays in zip(leaves(getattr(stored, name)), columns, strict=True):
            np.testing.assert_array_equal(got, expected(arrays))
    for name in ("action", "reward", "terminated", "truncated"):
        want = expected([getattr(b, name) for b in batches])
        np.testing.assert_array_equal(getattr(stored, name), want)


class _TenSteps(gym.Env[Any, Any]):
    """Every episode: 10 steps of reward 1; the observation is the step count."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        del action
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t == 10, False, {}


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_pool_never_counts_an_episode_decorrelation_steps_began(
    mode: AutoresetMode,
) -> None:
    # the pool never sees the decorrelation steps: an env left in the middle of an
    # episode goes on with it, so that episode is not one of the pool's (it counted
    # its tail as a whole episode, and exported it)
    env = gym.vector.SyncVectorEnv([_TenSteps, _TenSteps], autoreset_mode=mode)
    pool = vecpool.ReplayPool(
        env.single_observation_space, env.single_action_space, 2, 1000
    )
    sampler = Sampler(
        env,
        None,
        batch_T=30,
        max_decorrelation_steps=8,
        seed=0,
        pool=pool,
    )
    _, records = sampler.obtain_samples()
    steps = sampler.decorrelation_steps
    assert steps is not None
    assert steps.any()  # else the test shows nothing
    assert {(r.return_, r.length) for r in records} == {(10.0, 10)}
    stats = pool.episode_stats
    assert (stats.mean_return, stats.mean_length) == (10.0, 10.0)
    begun_before = int(np.count_nonzero(steps))
    assert stats.count == len(records) - begun_before
    episodes, _ = complete_episodes(pool)
    assert [float(e.observations[0, 0]) for e in episodes] == [0.0] * stats.count
    assert {len(e) for e in episodes} == {10}
    env.close()


def test_resumed_says_which_batch_follows_a_reset() -> None:
    env = gym.vector.SyncVectorEnv([_TenSteps, _TenSteps])
    sampler = Sampler(env, None, batch_T=4, max_decorrelation_steps=8, seed=0)
    assert _resumed(sampler) is None
    sampler.reset()  # by hand: the next batch is the one that follows it
    sampler.obtain_samples()
    steps = sampler.decorrelation_steps
    assert steps is not None
    assert _resumed(sampler).tolist() == np.flatnonzero(steps).tolist()
    sampler.obtain_samples()
    assert _resumed(sampler) is None  # went on from the batch before
    env.close()


def _resumed(sampler: Sampler) -> Any:
    return sampler.resumed  # read afresh (not narrowed by an earlier assert)


def test_pool_must_have_one_sub_pool_per_env(make_sync):
    env = make_sync(counting_fns(3))
    pool = vecpool.ReplayPool(
        env.single_observation_space, env.single_action_space, 2, 10
    )
    msg = (
        "`pool` has 2 sub-pools but the env has 3 sub-environments: create the "
        "ReplayPool with num_envs=3."
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        Sampler(env, None, 4, pool=pool)


# ----------------------------------------------------------------------- episodes


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize("kind", ["sync", "vecpool-batch"])
def test_track_info_keys(make_env, kind, mode):
    # info_every=1: the info of every step holds the episode step count
    env = make_env(kind, counting_fns(3, info_every=1), autoreset_mode=mode)
    sampler = Sampler(
        env, obs_policy, batch_T=10, seed=6, track_info_keys=("step_count", "missing")
    )
    _, episodes = sampler.obtain_samples()
    assert len(episodes) > 2
    for record in episodes:
        assert record.info["step_count"] == record.length
        assert record.info["missing"] is None
        fields = record._asdict()
        assert fields["return"] == record.return_
        assert fields["length"] == record.length
        assert fields["env_index"] == record.env_index
        assert fields["step_count"] == record.length


# Gymnasium's RecordEpisodeStatistics treats DISABLED like NEXT_STEP (it skips the
# step after a reset_mask reset), so its lengths are one short there: not compared.
@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name
)
def test_wrapped_env_and_nested_info(make_sync, mode):
    env = gym.wrappers.vector.RecordEpisodeStatistics(
        make_sync(counting_fns(3), autoreset_mode=mode)
    )
    sampler = Sampler(env, obs_policy, batch_T=12, seed=9, track_info_keys=("episode",))
    _, episodes = sampler.obtain_samples()
    assert episodes
    for record in episodes:
        stats = record.info["episode"]
        assert stats["l"] == record.length
        assert stats["r"] == pytest.approx(record.return_)


def test_episodes_span_calls_and_decorrelation(make_sync):
    env = make_sync(counting_fns(2, terminate_prob=0.0, max_steps=5))
    sampler = Sampler(env, None, batch_T=2, seed=0, max_decorrelation_steps=3)
    lengths = []
    for _ in range(6):
        lengths += [record.length for record in sampler.obtain_samples()[1]]
    # episodes that started during decorrelation count their random steps too
    assert lengths
    assert set(lengths) == {5}


# ----------------------------------------------------------------------- evaluate


def eval_sampler(make_sync, mode=AutoresetMode.NEXT_STEP, **kwargs):
    fns = counting_fns(3, terminate_prob=0.2, max_steps=8)
    env = make_sync(fns, autoreset_mode=mode)
    eval_env = make_sync(fns, autoreset_mode=mode)
    return Sampler(env, obs_policy, 4, seed=21, eval_env=eval_env, **kwargs)


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_evaluate_exact_max_episodes(make_sync, mode):
    everything = eval_sampler(make_sync, mode).evaluate(max_steps=60)
    assert len(everything) > 7
    for count in (1, 5, 7):
        records = eval_sampler(make_sync, mode).evaluate(max_episodes=count)
        assert records == everything[:count]
    # whichever bound comes first
    assert (
        eval_sampler(make_sync, mode).evaluate(max_steps=60, max_episodes=4)
        == (everything[:4])
    )


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_evaluate_max_steps_never_counts_cut_episodes(make_sync, mode):
    def sampler():
        env = make_sync(
            counting_fns(3, terminate_prob=0.0, max_steps=10), autoreset_mode=mode
        )
        return Sampler(env, None, 4, seed=0)

    assert sampler().evaluate(max_steps=9) == []
    records = sampler().evaluate(max_steps=10)
    assert [(r.env_index, r.length) for r in records] == [(0, 10), (1, 10), (2, 10)]
    # the second episodes are cut by the bound: dropped
    records = sampler().evaluate(max_steps=18, max_episodes=100)
    assert [(r.env_index, r.length) for r in records] == [(0, 10), (1, 10), (2, 10)]


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_on_own_env_restarts_sampling(make_env, kind):
    env = make_env(
        kind, counting_fns(3, obs_kind="dict", terminate_prob=0.0, max_steps=30)
    )
    sampler = Sampler(env, obs_policy, batch_T=4, seed=0)
    sampler.obtain_samples()
    records = sampler.evaluate(max_steps=3)
    assert records == []
    batch, _ = sampler.obtain_samples()
    np.testing.assert_array_equal(batch.obs["count"][0], [0, 0, 0])  # fresh resets
    np.testing.assert_array_equal(env.get_attr("resets_taken"), [3, 3, 3])


def test_evaluate_on_eval_env_leaves_sampling_alone(make_sync):
    sampler = eval_sampler(make_sync)
    first, _ = sampler.obtain_samples()
    resets = sampler.env.get_attr("resets_taken")
    assert len(sampler.evaluate(max_episodes=2)) == 2
    assert sampler.env.get_attr("resets_taken") == resets
    second, _ = sampler.obtain_samples()
    for now, before in zip(leaves(second.obs), leaves(first.next_obs), strict=True):
        np.testing.assert_array_equal(now[0], before[-1])


def test_evaluate_with_random_policy_and_given_policy(make_sync):
    sampler = eval_sampler(make_sync)
    constant = sampler.evaluate(
        lambda obs: np.zeros(len(obs), np.int64), max_episodes=3
    )
    assert len(constant) == 3
    sampler = Sampler(sampler.env, None, 4, seed=0)
    assert len(sampler.evaluate(max_episodes=2)) == 2


# ------------------------------------------------------------ async alternation


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_alternating_equals_sync_run(make_async, make_sync, mode):
    env_fns = counting_fns(6, obs_kind="dict")

    def run(env):
        sampler = Sampler(
            env, obs_policy, batch_T=9, seed=13, max_decorrelation_steps=5
        )
        calls = [sampler.obtain_samples() for _ in range(3)]
        return [batch for batch, _ in calls], [episodes for _, episodes in calls]

    alternating = make_async(env_fns, num_workers=3, batch_size=2, autoreset_mode=mode)
    reference = make_sync(env_fns, autoreset_mode=mode)
    got_batches, got_episodes = run(alternating)
    want_batches, want_episodes = run(reference)
    for got, want in zip(got_batches, want_batches, strict=True):
        for name in SampleBatch._fields:
            for got_leaf, want_leaf in zip(
                leaves(getattr(got, name)), leaves(getattr(want, name)), strict=True
            ):
                np.testing.assert_array_equal(got_leaf, want_leaf, err_msg=name)
    for got, want in zip(got_episodes, want_episodes, strict=True):

        def key(record):
            return (record.env_index, record.length, record.return_)

        assert sorted(got, key=key) == sorted(want, key=key)


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
def test_alternating_sampler_is_usable_after_several_envs_raise_at_once(
    make_async, mode
):
    # every env raises once, in its 4th step: each raising `recv` returns one
    # env's error, and the sampler must drain them all, not stop at the first,
    # or every later call fails (its reset finds envs still in flight)
    fns = [
        functools.partial(RaisingEnv, raise_on="step", at=4, max_steps=6)
        for _ in range(4)
    ]
    env = make_async(fns, num_workers=4, batch_size=2, autoreset_mode=mode)
    sampler = Sampler(env, obs_policy, batch_T=8, seed=3)
    raised = []
    for _ in range(4):  # each call raises an env's own error until none is left
        try:
            sampler.obtain_samples()
        except ValueError as exc:
            raised.append(str(exc))
        assert env.pending_env_ids == []
    assert raised
    assert set(raised) == {RaisingEnv.message_for("step", 4)}
    for _ in range(2):  # then whole batches again
        got, _ = sampler.obtain_samples()
        assert first_leaf(got.obs).shape[:2] == (8, 4)
        assert got.valid.shape == (8, 4)


def overlap_run(make_async, delay, batch_size):
    env = make_async(
        [functools.partial(SlowEnv, step_delay=delay) for _ in range(4)],
        num_workers=4,
        batch_size=batch_size,
    )
    sends, calls = [], []
    send = env.send

    def timed_send(actions, env_ids=None):
        sends.append((time.perf_counter(), np.asarray(env_ids).tolist()))
        send(actions, env_ids)

    env.send = timed_send

    def slow_policy(obs):
        start = time.perf_counter()
        time.sleep(delay)
        calls.append((start, time.perf_counter()))
        return np.zeros((len(obs), 1), np.float32)

    # positive actions would override the delay; zeros keep `step_delay`
    sampler = Sampler(env, slow_policy, batch_T=8, seed=0)
    sampler.obtain_samples()  # warm-up (and the first reset)
    sends.clear()
    calls.clear()
    batch, _ = sampler.obtain_samples()
    assert batch.valid.all()
    return sends, calls


def test_alternating_sends_one_group_per_policy_call(make_async):
    sends, calls = overlap_run(make_async, 0.01, batch_size=2)
    # one policy call per send; 8 rows x 4 envs in groups of (usually) 2; that the
    # other group is in flight meanwhile is checked by order, below (no clock)
    assert len(sends) == len(calls) >= 16
    assert sum(len(ids) for _, ids in sends) == 32
    assert all(
        start <= sent for (start, _), (sent, _) in zip(calls, sends, strict=True)
    )


def test_alternating_policy_runs_while_other_group_is_in_flight(make_async):
    """While the policy acts for one group, the other group's step is already sent.

    Checked by the order of events, not by wall time: ``send``/``recv`` are logged
    and the policy records ``pending_env_ids`` (sent, not yet received). A sampler
    that steps the groups in turn (policy, send, recv, next group) has nothing in
    flight during a policy call, and fails.
    """
    num_envs, batch_t = 4, 8
    env = make_async(
        [functools.partial(SlowEnv, step_delay=0.005) for _ in range(num_envs)],
        num_workers=num_envs,
        batch_size=2,
    )
    events: list[tuple[str, tuple[int, ...]]] = []
    logged: set[int] = set()  # in flight according to the logged send/recv calls
    send, recv = env.send, env.recv

    def logged_send(actions, env_ids=None):
        send(actions, env_ids)
        ids = tuple(int(i) for i in np.asarray(env_ids))
        logged.update(ids)
        events.append(("send", ids))

    def logged_recv(timeout=None):
        result = recv(timeout)
        ids = tuple(int(i) for i in result[-1]["env_id"])
        logged.difference_update(ids)
        events.append(("recv", ids))
        return result

    env.send = logged_send
    env.recv = logged_recv

    def policy(obs):
        pending = tuple(env.pending_env_ids)
        events.append(("policy", pending))
        events.append(("logged", tuple(sorted(logged))))
        return np.zeros((len(obs), 1), np.float32)

    sampler = Sampler(env, policy, batch_T=batch_t, seed=0)
    sampler.obtain_samples()  # warm-up (and the first reset)
    events.clear()
    batch, _ = sampler.obtain_samples()
    assert batch.valid.all()

    # (envs in flight, envs served) per policy call, with the steps sent so far
    calls: list[tuple[set[int], set[int], list[int]]] = []
    sent = [0] * num_envs
    for index, (kind, ids) in enumerate(events):
        if kind == "send":
            for i in ids:
                sent[i] += 1
        if kind != "policy":
            continue
        assert events[index + 1] == ("logged", ids)  # the env agrees with the log
        follow_kind, sent_ids = events[index + 2]
        assert follow_kind == "send"  # the policy's actions are sent at once
        assert len(sent_ids) <= 2
        calls.append((set(ids), set(sent_ids), sent.copy()))
    assert sent == [batch_t] * num_envs
    assert len(calls) == sum(kind == "send" for kind, _ in events) >= 16

    # the batch starts with nothing in flight; the second call (the second group of
    # the first dispatch) runs while the first group steps
    assert calls[0][0] == set()
    assert calls[1][0] == calls[0][1]
    for number, (in_flight, served, sent_before) in enumerate(calls[1:], 1):
        assert not in_flight & served
        # every other env that still owes steps is in flight, none waits idle
        idle = {
            i
            for i in range(num_envs)
            if i not in served and i not in in_flight and sent_before[i] < batch_t
        }
        assert not idle, f"policy call {number}: envs {idle} were not sent"


# ---------------------------------------------------------------------- copies


def test_copy_semantics(make_sync):
    env = make_sync(counting_fns(2))
    copying = Sampler(env, obs_policy, 3, seed=0)
    first, _ = copying.obtain_samples()
    kept = first.obs.copy()
    second, _ = copying.obtain_samples()
    np.testing.assert_array_equal(first.obs, kept)
    assert not np.shares_memory(first.obs, second.obs)

    env = make_sync(counting_fns(2))
    sharing = Sampler(env, obs_policy, 3, seed=0, copy=False)
    first, _ = sharing.obtain_samples()
    second, _ = sharing.obtain_samples()
    assert first.obs is second.obs
    assert first.agent_info["score"] is second.agent_info["score"]


# ----------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"batch_T": 0}, "`batch_T` must be an integer >= 1, got 0."),
        ({"batch_T": 2.0}, "`batch_T` must be an integer >= 1, got 2.0."),
        (
            {"max_decorrelation_steps": -1},
            "`max_decorrelation_steps` must be an integer >= 0, got -1.",
        ),
        ({"seed": -3}, "`seed` must be an integer >= 0, got -3."),
        (
            {"track_info_keys": "episode"},
            "`track_info_keys` must be a sequence of keys, got the string 'episode'; "
            "write ('episode',).",
        ),
        (
            {"track_info_keys": ("length",)},
            "`track_info_keys` must hold strings other than ('return', 'return_', "
            "'length', 'env_index', 'info'), got 'length'.",
        ),
    ],
)
def test_argument_errors(make_sync, kwargs, msg):
    env = make_sync(counting_fns(2))
    arguments = {"batch_T": 4, **kwargs}
    with pytest.raises(ValueError, match=re.escape(msg)):
        Sampler(env, None, **arguments)


def test_policy_must_be_callable(make_sync):
    env = make_sync(counting_fns(2))
    msg = (
        "`policy` must be a callable (obs_batch -> actions) or None for random "
        "actions, got int."
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        Sampler(env, 3, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({}, "`evaluate` needs a bound: pass `max_steps`, `max_episodes` or both."),
        ({"max_steps": 0}, "`max_steps` must be an integer >= 1, got 0."),
        ({"max_episodes": 0}, "`max_episodes` must be an integer >= 1, got 0."),
        (
            {"max_steps": 5, "max_episodes": -1},
            "`max_episodes` must be an integer >= 1, got -1.",
        ),
    ],
)
def test_evaluate_errors(make_sync, kwargs, msg):
    sampler = Sampler(make_sync(counting_fns(2)), None, 4)
    with pytest.raises(ValueError, match=re.escape(msg)):
        sampler.evaluate(**kwargs)


def test_policy_output_errors(make_sync):
    env = make_sync(counting_fns(2))
    wrong_rows = Sampler(env, lambda obs: np.zeros(3, np.int64), 4, seed=0)
    with pytest.raises(ValueError, match=re.escape("`actions` must have shape (2,)")):
        wrong_rows.obtain_samples()

    def info_rows(obs):
        return np.zeros(len(obs), np.int64), {"value": np.zeros(5)}

    msg = "`agent_info['value']` must have one row per observation (2), got shape (5,)."
    with pytest.raises(ValueError, match=re.escape(msg)):
        Sampler(env, info_rows, 4, seed=0).obtain_samples()

    calls = []

    def changing_keys(obs):
        calls.append(1)
        key = "a" if len(calls) == 1 else "b"
        return np.zeros(len(obs), np.int64), {key: np.zeros(len(obs))}

    msg = (
        "The policy returned agent_info keys ('b',), but earlier ('a',): return the "
        "same keys on every call."
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        Sampler(env, changing_keys, 4, seed=0).obtain_samples()


def test_unsupported_space(make_sync):
    # Text observations are stored (tests/integration/test_pool_other_leaves.py);
    # actions must be arrays
    class TextActionEnv(gym.Env):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Text(5)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return 0, {}

        def step(self, action):
            return 0, 0.0, False, False, {}

    env = make_sync([TextActionEnv, TextActionEnv])
    with pytest.raises(ValueError, match=re.escape("single action space Text(")):
        Sampler(env, None, 4)


def test_sampler_leaves_no_processes(make_async, leak_checker):
    env = make_async(counting_fns(4), num_workers=2, batch_size=2)
    sampler = Sampler(env, None, 5, seed=0, max_decorrelation_steps=3)
    sampler.obtain_samples()
    sampler.evaluate(max_episodes=2)
    sampler.obtain_samples()
    env.close()
    leak_checker.assert_no_leaks()


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_alternating_with_spawned_workers(make_async, make_sync, context):
    env_fns = counting_fns(4, obs_kind="dict")
    env = make_async(env_fns, num_workers=2, batch_size=2, context=context)
    got, _ = Sampler(env, obs_policy, batch_T=5, seed=3).obtain_samples()
    want, _ = Sampler(
        make_sync(env_fns), obs_policy, batch_T=5, seed=3
    ).obtain_samples()
    for got_leaf, want_leaf in zip(leaves(got), leaves(want), strict=True):
        np.testing.assert_array_equal(got_leaf, want_leaf)
