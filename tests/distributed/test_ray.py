"""RaySampler on a local Ray: same batches as a local Sampler, and lost actors.

Skipped when Ray is absent (the default ``tests`` session); ``nox -s ray`` runs them.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import vecpool
from vecpool.replay.episodes import complete_episodes
from vecpool.testing import CountingEnv, IncarnationEnv

ray = pytest.importorskip("ray")
from vecpool.sampling.distributed import RaySampler  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]
PID = 1  # IncarnationEnv's observation: [env index, worker pid, step]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def samplers() -> Iterator[list[RaySampler]]:
    made: list[RaySampler] = []
    yield made
    for sampler in made:
        sampler.close()


def _incarnation_fns(n: int) -> list[Any]:
    return [functools.partial(IncarnationEnv, index=i) for i in range(n)]


def _fields(batch: vecpool.SampleBatch) -> dict[str, Any]:
    return {
        name: getattr(batch, name)
        for name in (
            "obs",
            "action",
            "reward",
            "next_obs",
            "terminated",
            "truncated",
            "valid",
        )
    }


def test_one_actor_gives_the_local_samplers_batches(samplers):
    fns = [functools.partial(CountingEnv, max_steps=7) for _ in range(4)]
    remote = RaySampler(
        fns, None, 20, num_actors=1, seed=3, env_kwargs={"num_workers": 2}
    )
    samplers.append(remote)
    local_env = vecpool.AsyncVectorEnv(fns, num_workers=2)
    local = vecpool.Sampler(local_env, None, 20, seed=3)
    try:
        for _ in range(2):
            got, got_episodes = remote.obtain_samples()
            expected, expected_episodes = local.obtain_samples()
            for name, value in _fields(expected).items():
                np.testing.assert_array_equal(_fields(got)[name], value, err_msg=name)
            assert got_episodes == expected_episodes
    finally:
        local_env.close()


def test_columns_are_global_envs_in_order(samplers):
    remote = RaySampler(
        _incarnation_fns(5),
        None,
        12,
        num_actors=2,
        seed=0,
        env_kwargs={"num_workers": 1},
    )
    samplers.append(remote)
    batch, episodes = remote.obtain_samples()
    assert batch.obs.shape == (12, 5, 3)
    np.testing.assert_array_equal(batch.obs[:, :, 0], np.tile(np.arange(5), (12, 1)))
    for record in episodes:
        assert 0 <= record.env_index < 5
    assert [s.start for s in remote.slices] == [0, 3]


def _check_pool(pool: vecpool.ReplayPool, accepted_valid: int) -> None:
    t = pool.get_pool()
    assert len(pool) == accepted_valid
    np.testing.assert_array_equal(t.next_obs[:, 0], t.obs[:, 0])
    np.testing.assert_array_equal(t.next_obs[:, PID], t.obs[:, PID])
    np.testing.assert_array_equal(t.next_obs[:, 2], t.obs[:, 2] + 1)
    # no episode spans two incarnations; cut episodes are never counted as done
    assert pool.episode_stats.count == int(t.terminated.sum())


def _killer(remote: RaySampler, actor: int, delay: float) -> threading.Thread:
    pid = ray.get(remote.actors[actor].pid.remote())

    def kill() -> None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def _slow_policy(obs: Any) -> Any:
    time.sleep(0.002)  # a rollout of 100 steps takes ~0.2 s: a kill lands inside
    return np.zeros(len(obs), np.int64)


@pytest.mark.timeout(180)  # six rollouts that resume after a kill, not a hang
def test_a_killed_actor_is_restarted_reseeded_and_nothing_is_duplicated(samplers):
    fns = _incarnation_fns(6)
    env = fns[0]()
    pool = vecpool.ReplayPool(env.observation_space, env.action_space, 6, 6 * 5000)
    remote = RaySampler(
        fns,
        _slow_policy,
        100,
        num_actors=2,
        seed=0,
        pool=pool,
        env_kwargs={"num_workers": 1},
    )
    samplers.append(remote)
    accepted = 0
    pids_before: set[Any] = set()
    for call in range(6):
        thread = _killer(remote, 1, 0.1) if call in (2, 4) else None
        batch, _ = remote.obtain_samples()  # resumes (a hang fails on the timeout)
        if thread is not None:
            thread.join()
        accepted += int(batch.valid.sum())
        pids = set(batch.obs[:, 3:, PID].ravel().tolist())
        if call == 1:
            pids_before = pids
        if call == 3:  # a new incarnation: new worker processes
            assert not pids & pids_before
    assert remote.restarts == [0, 2]
    assert remote.lost_env_steps == 2 * 100 * 3
    assert remote.incarnations == [0, 2]
    _check_pool(pool, accepted)


def test_continue_marks_a_lost_actors_columns_invalid(samplers):
    remote = RaySampler(
        _incarnation_fns(4),
        _slow_policy,
        100,
        num_actors=2,
        seed=0,
        on_actor_failure="continue",
        env_kwargs={"num_workers": 1},
    )
    samplers.append(remote)
    remote.obtain_samples()
    thread = _killer(remote, 0, 0.1)
    batch, _ = remote.obtain_samples()
    thread.join()
    assert not batch.valid[:, :2].any()
    assert batch.valid[:, 2:].any()
    assert remote.restarts == [1, 0]
    batch, _ = remote.obtain_samples()  # the restarted actor is back
    assert batch.valid[:, :2].any()


def test_raise_lets_the_actor_error_through(samplers):
    remote = RaySampler(
        _incarnation_fns(2),
        _slow_policy,
        100,
        num_actors=2,
        on_actor_failure="raise",
        env_kwargs={"num_workers": 1},
    )
    samplers.append(remote)
    remote.obtain_samples()
    thread = _killer(remote, 1, 0.1)
    with pytest.raises(ray.exceptions.RayActorError):
        remote.obtain_samples()
    thread.join()


def _constant_one(obs: Any) -> Any:
    return np.ones(len(obs), np.int64)


def _factory() -> Any:
    return _constant_one


def test_set_policy_reaches_every_actor_and_factories_are_built_there(samplers):
    remote = RaySampler(
        _incarnation_fns(4), None, 10, num_actors=2, env_kwargs={"num_workers": 1}
    )
    samplers.append(remote)
    remote.set_policy(_constant_one)
    batch, _ = remote.obtain_samples()
    assert (batch.action == 1).all()
    remote.set_weights(_factory)
    batch, _ = remote.obtain_samples()
    assert (batch.action == 1).all()
    records = remote.evaluate(max_episodes=1)
    assert records
    assert all(0 <= r.env_index < 4 for r in records)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="`on_actor_failure` must be one of"):
        RaySampler(_incarnation_fns(2), None, 5, num_actors=1, on_actor_failure="x")
    with pytest.raises(ValueError, match="`num_actors` must be an integer between 1"):
        RaySampler(_incarnation_fns(2), None, 5, num_actors=3)


def test_iter_blocks_yields_each_actors_rollouts_in_order(samplers):
    fns = _incarnation_fns(4)
    env = fns[0]()
    pool = vecpool.ReplayPool(env.observation_space, env.action_space, 4, 4 * 1000)
    remote = RaySampler(
        fns, None, 10, num_actors=2, seed=0, pool=pool, env_kwargs={"num_workers": 1}
    )
    samplers.append(remote)
    batch, _ = remote.obtain_samples()  # both actors up and running
    valid = int(batch.valid.sum())
    seen: dict[int, int] = {0: 0, 2: 0}
    last_step: dict[int, Any] = {}
    for ids, batch, episodes in remote.iter_blocks(max_blocks=8):
        assert ids.tolist() in ([0, 1], [2, 3])
        np.testing.assert_array_equal(batch.obs[:, :, 0], np.tile(ids, (10, 1)))
        # blocks of one actor follow each other: its envs go on where they were
        first = int(ids[0])
        if first in last_step:
            np.testing.assert_array_equal(batch.obs[0], last_step[first])
        last_step[first] = batch.next_obs[-1].copy()
        if batch.terminated[-1].any() or not batch.valid[-1].all():
            last_step.pop(first)  # an episode ended at the block's edge
        seen[first] += 1
        valid += int(batch.valid.sum())
        assert all(int(r.env_index) in ids.tolist() for r in episodes)
    assert sum(seen.values()) == 8
    assert min(seen.values()) >= 1  # both actors served: first-ready, not one
    _check_pool(pool, valid)
    batch, _ = remote.obtain_samples()  # the next call carries on, nothing stale
    assert batch.obs.shape == (10, 4, 3)


def test_step_from_runs_planning_on_the_actors(samplers):
    fns = [functools.partial(CountingEnv, max_steps=50) for _ in range(4)]
    remote = RaySampler(
        fns, None, 5, num_actors=2, seed=1, env_kwargs={"num_workers": 1}
    )
    samplers.append(remote)
    remote.obtain_samples()
    states = remote.get_states()
    assert len(states) == 4
    actions = np.array([0, 1, 2, 1])
    first = remote.step_from(states, actions, dt=3)
    again = remote.step_from(states, actions, dt=3)  # same states: same outcome
    for a, b in zip(first[1:5], again[1:5], strict=True):
        np.testing.assert_array_equal(a, b)
    assert first[1].shape == (4, 3)
    assert len(first[0]) == 4
    with pytest.raises(ValueError, match="one state per env"):
        remote.step_from(states[:3], actions)


def test_a_vector_env_that_loses_a_worker_for_good_is_rebuilt_in_the_actor(
    samplers, tmp_path
):
    marker = str(tmp_path / "crashed")
    fns = _incarnation_fns(4)
    fns[3] = functools.partial(
        IncarnationEnv, index=3, crash_marker=marker, crash_at=30
    )
    remote = RaySampler(
        fns,
        None,
        20,
        num_actors=2,
        seed=0,
        env_kwargs={"num_workers": 1, "on_worker_crash": "raise"},
    )
    samplers.append(remote)
    remote.obtain_samples()  # env 3 at step 20
    batch, _ = remote.obtain_samples()  # its worker dies at step 30: rebuilt, again
    assert os.path.exists(marker)
    assert remote.lost_env_steps == 20 * 2  # the partial rollout of actor 1
    assert remote.restarts == [0, 0]  # the actor itself lived
    assert batch.obs.shape == (20, 4, 3)
    assert batch.valid[:, 2:].any()


def test_the_central_pool_never_counts_an_episode_decorrelation_began(samplers):
    # the pool never sees the actors' decorrelation steps: an episode they began
    # is not one of its episodes (it counted and exported its tail as a whole one)
    fns = [
        functools.partial(IncarnationEnv, index=i, min_len=10, max_len=10)
        for i in range(4)
    ]
    pool = vecpool.ReplayPool(
        IncarnationEnv(index=0).observation_space,
        IncarnationEnv(index=0).action_space,
        4,
        1000,
    )
    remote = RaySampler(
        fns,
        None,
        30,
        num_actors=2,
        seed=0,
        pool=pool,
        max_decorrelation_steps=8,
        env_kwargs={"num_workers": 0},
    )
    samplers.append(remote)
    _, records = remote.obtain_samples()
    assert {record.length for record in records} == {10}
    stats = pool.episode_stats
    assert stats.mean_length == 10.0
    assert 0 < stats.count < len(records)  # some began in the decorrelation steps
    episodes, _ = complete_episodes(pool)
    assert [int(episode.observations[0, 2]) for episode in episodes] == [0] * len(
        episodes
    )
    assert {len(episode) for episode in episodes} == {10}


def test_the_central_pool_ends_the_episodes_an_evaluate_cut(samplers):
    # evaluate() on the actors' own envs resets them: the episodes in progress end
    # there, unfinished (they were joined to the next ones)
    fns = [
        functools.partial(IncarnationEnv, index=i, min_len=10, max_len=10)
        for i in range(4)
    ]
    space = IncarnationEnv(index=0)
    pool = vecpool.ReplayPool(space.observation_space, space.action_space, 4, 1000)
    remote = RaySampler(
        fns, None, 15, num_actors=2, seed=0, pool=pool, env_kwargs={"num_workers": 0}
    )
    samplers.append(remote)
    remote.obtain_samples()
    remote.evaluate(max_episodes=3)
    remote.obtain_samples()
    remote.obtain_samples()
    assert pool.episode_stats.count > 0
    assert pool.episode_stats.mean_length == 10.0


def test_step_from_refuses_an_ended_state_before_any_actor_steps(samplers):
    fns = [functools.partial(CountingEnv, max_steps=2) for _ in range(4)]
    remote = RaySampler(fns, None, 2, num_actors=2, seed=0)
    samplers.append(remote)
    remote.obtain_samples()  # 2 steps of 2-step episodes: every state ended
    states = remote.get_states()
    assert all(state.autoreset_pending for state in states)
    going = [state._replace(autoreset_pending=False) for state in states]
    with pytest.raises(ValueError, match=r"`states\[3\]` was saved right after"):
        remote.step_from([*going[:3], states[3]], np.zeros(4, np.int64))
    assert data_equivalence(remote.get_states(), states)  # no actor stepped
