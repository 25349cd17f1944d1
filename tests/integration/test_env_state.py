"""get_states / set_states / step_from on AsyncVectorEnv (planning support).

Every test runs over each placement (the ``placement`` fixture of tests/conftest.py).
"""

from __future__ import annotations

import functools
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.testing import CountingEnv, SlowEnv

pytestmark = pytest.mark.timeout(60)

FN = functools.partial(CountingEnv, obs_kind="dict", max_steps=15, info_every=2)


def _steps(envs, actions):
    return [envs.step(batch) for batch in actions]


def test_stepping_from_a_saved_state_reproduces_the_trajectory(make_placed):
    envs = make_placed([FN] * 3)
    envs.reset(seed=5)
    actions = np.random.default_rng(5).integers(0, 2, size=(25, 3))
    _steps(envs, actions[:4])
    states = envs.get_states()
    first = _steps(envs, actions[4:])
    envs.set_states(states)
    second = _steps(envs, actions[4:])
    assert data_equivalence(first, second, exact=True)


def test_step_from_matches_a_single_env_with_frameskip(make_placed):
    envs = make_placed([FN] * 4)
    envs.reset(seed=1)
    envs.step(np.ones(4, dtype=np.int64))
    states = envs.get_states()
    actions = np.array([0, 1, 1, 0])
    new_states, obs, rewards, terminations, truncations, _ = envs.step_from(
        states, actions, dt=20, indices=None
    )
    for index in range(4):
        single = FN()
        single.reset(seed=0)
        single.unwrapped.set_state(states[index].state)  # type: ignore[attr-defined]
        total, ended = 0.0, False
        for _ in range(20):
            single_obs, reward, terminated, truncated, _ = single.step(actions[index])
            total += float(reward)
            if terminated or truncated:
                ended = True
                break
        assert rewards[index] == pytest.approx(total, abs=0)
        assert bool(terminations[index] or truncations[index]) == ended
        for key, value in obs.items():
            np.testing.assert_array_equal(value[index], single_obs[key])
        assert data_equivalence(new_states[index].state, single.unwrapped.get_state())  # type: ignore[attr-defined]
    # stepping from the new states again continues from there (from states
    # whose episode goes on: an ended one is refused, see below)
    two = envs.step_from(states, actions, dt=2)
    assert not any(state.autoreset_pending for state in two[0])
    again = envs.step_from(two[0], actions, dt=1)
    three = envs.step_from(states, actions, dt=3)
    assert data_equivalence(again[1], three[1], exact=True)


def _time_limited() -> gym.Env:
    return gym.wrappers.TimeLimit(FN(), max_episode_steps=6)


def _time_limited_box() -> gym.Env:
    return gym.wrappers.TimeLimit(CountingEnv(max_steps=15), max_episode_steps=6)


def test_states_carry_the_time_limits_step_count(make_placed):
    # gym.make's TimeLimit counts an episode's steps outside `env.unwrapped`: a
    # state carries the count, so every step_from from one state truncates at the
    # same step, and a restored state truncates where the saved one would have
    # (the count went on across calls: the third call here came back truncated)
    envs = make_placed([_time_limited] * 2)
    envs.reset(seed=0)
    still = np.zeros(2, np.int64)
    envs.step(still)
    root = envs.get_states()
    calls = [envs.step_from(root, still, dt=3) for _ in range(3)]
    for call in calls[1:]:
        assert data_equivalence(call[1:], calls[0][1:], exact=True)
    assert not calls[0][4].any()
    envs.set_states(root)
    first = _steps(envs, [still] * 6)
    envs.set_states(root)
    second = _steps(envs, [still] * 6)
    assert data_equivalence(first, second, exact=True)
    assert [step[3].tolist() for step in first].index([True, True]) == 4
    # a state saved before the first reset has no count: the env's stays
    fresh = make_placed([_time_limited] * 2)
    unset = fresh.get_states()
    assert [state.elapsed_steps for state in unset] == [(None,), (None,)]
    fresh.reset(seed=0)
    fresh.set_states(unset)
    fresh.step(still)  # TimeLimit's None += 1 raised TypeError


def test_step_from_may_repeat_an_index_each_row_from_its_own_state(make_placed):
    # children of one node on one env: each row sets its own state, in order, and
    # the env is left at the last row's new state
    envs = make_placed([_time_limited_box] * 2)
    envs.reset(seed=0)
    root = envs.get_states()[0]
    actions = np.array([0, 1, 1])
    together = envs.step_from([root] * 3, actions, dt=3, indices=[0, 0, 0])
    apart = [
        envs.step_from([root], actions[k : k + 1], dt=3, indices=[0]) for k in range(3)
    ]
    for k, alone in enumerate(apart):
        assert data_equivalence(together[0][k], alone[0][0])
        for field in range(1, 5):
            assert data_equivalence(together[field][k], alone[field][0], exact=True)
    assert data_equivalence(envs.get_states(indices=[0])[0], together[0][2])


def test_indices_pick_and_order_envs(make_placed):
    envs = make_placed([FN] * 5)
    envs.reset(seed=2)
    every = envs.get_states()
    some = envs.get_states(indices=[4, 0, 2])
    assert data_equivalence(some, [every[4], every[0], every[2]])
    envs.step(np.ones(5, dtype=np.int64))
    envs.set_states([every[4]], indices=[4])
    assert data_equivalence(envs.get_states(indices=[4])[0], every[4])
    assert not data_equivalence(envs.get_states(indices=[0])[0], every[0])


def test_set_states_cancels_a_pending_autoreset(make_placed):
    fn = functools.partial(CountingEnv, max_steps=3, terminate_prob=0.0)
    envs = make_placed([fn] * 2)
    envs.reset(seed=0)
    states = envs.get_states()
    for _ in range(3):
        *_, truncations, _ = envs.step(np.zeros(2, dtype=np.int64))
    assert truncations.all()  # next step would autoreset both
    envs.set_states(states)
    _, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))
    assert np.all(rewards != 0.0)  # a real step, not a reset step (reward 0)


def test_envs_without_state_methods_explain_the_fix(make_placed):
    envs = make_placed([SlowEnv] * 2)
    envs.reset(seed=0)
    with pytest.raises(AttributeError, match=re.escape("has no `get_state()`")):
        envs.get_states()
    with pytest.raises(AttributeError, match=re.escape("has no `get_state()`")):
        envs.set_states([None, None])


def test_bad_arguments_are_refused_before_sending(make_placed):
    envs = make_placed([FN] * 2)
    envs.reset(seed=0)
    states = envs.get_states()
    with pytest.raises(ValueError, match=re.escape("`dt` must be an integer >= 1")):
        envs.step_from(states, np.zeros(2, dtype=np.int64), dt=0)
    with pytest.raises(ValueError, match=re.escape("`states` must hold one entry")):
        envs.set_states(states[:1])
    with pytest.raises(
        ValueError, match=re.escape("`indices` must hold ints in [0, 2)")
    ):
        envs.get_states(indices=[2])
    with pytest.raises(ValueError, match=re.escape("`actions` must hold one entry")):
        envs.step_from(
            states, np.zeros(3, dtype=np.int64)[:1].repeat(1), indices=[0, 1]
        )
    # an env given twice: which state would win is not the caller's to guess
    # (the last one did)
    repeated = re.escape("`indices` must not repeat an index, got [1, 1]")
    with pytest.raises(ValueError, match=repeated):
        envs.set_states(states, indices=[1, 1])
    with pytest.raises(ValueError, match=re.escape("`indices` is empty")):
        envs.step_from([], np.zeros(0, dtype=np.int64), indices=[])
    # nothing was sent: the envs are where they were
    assert data_equivalence(envs.get_states(), states)


def test_gymnasium_envs_without_state_fail_cleanly(make_placed):
    envs = make_placed([functools.partial(gym.make, "CartPole-v1")] * 2)
    envs.reset(seed=0)
    with pytest.raises(AttributeError, match="CartPoleEnv"):
        envs.get_states()
    envs.step(np.zeros(2, dtype=np.int64))  # still usable


def test_states_round_trip_across_an_episode_end(make_placed):
    """A state captured right after an episode ended restores the pending reset."""
    fn = functools.partial(CountingEnv, max_steps=2, terminate_prob=0.0)
    envs = make_placed([fn] * 2)
    envs.reset(seed=0)
    for _ in range(2):
        *_, truncations, _ = envs.step(np.zeros(2, dtype=np.int64))
    assert truncations.all()
    states = envs.get_states()
    assert all(isinstance(state, vecpool.EnvState) for state in states)
    assert all(state.autoreset_pending for state in states)
    first = envs.step(np.zeros(2, dtype=np.int64))  # the reset step: reward 0
    envs.set_states(states)
    again = envs.step(np.zeros(2, dtype=np.int64))
    assert data_equivalence(first, again, exact=True)
    assert np.all(again[1] == 0.0)
    # a bare env state (no EnvState wrapper) is taken as mid-episode
    envs.set_states([state.state for state in states])
    *_, truncations, _ = envs.step(np.zeros(2, dtype=np.int64))
    assert truncations.all()  # stepped past the end, not reset


def test_a_masked_reset_after_step_from_returns_where_step_from_left_the_envs(
    make_placed,
):
    # a reset that leaves an env out returns its last observation: after
    # step_from, the one step_from returned (it returned the one from before)
    envs = make_placed([FN] * 3, autoreset_mode=AutoresetMode.DISABLED)
    envs.reset(seed=3)
    envs.step(np.ones(3, dtype=np.int64))
    indices = [2, 0]
    states = envs.get_states(indices=indices)
    _, moved, *_ = envs.step_from(states, np.array([1, 0]), dt=3, indices=indices)
    obs, _ = envs.reset(options={"reset_mask": np.array([False, True, False])})
    for key, value in obs.items():
        np.testing.assert_array_equal(value[indices], moved[key])


def test_step_from_refuses_a_state_whose_next_step_resets_before_sending(
    make_placed,
):
    # NEXT_STEP: a state saved right after an episode ended steps into a reset
    # (set_states then step); step_from never resets, and stepped past the end
    envs = make_placed([functools.partial(CountingEnv, max_steps=2)] * 2)
    envs.reset(seed=0)
    envs.step(np.zeros(2, dtype=np.int64))
    envs.step(np.zeros(2, dtype=np.int64))
    states = envs.get_states()
    assert [state.autoreset_pending for state in states] == [True, True]
    msg = (
        "`states[1]` was saved right after its episode ended: its next step resets "
        "the env (`autoreset_pending=True`), a step `step_from` does not take. Call "
        "`set_states(states)` then `step(actions)` to take that reset step, or "
        "leave ended states out of `step_from`."
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        envs.step_from([states[0]._replace(autoreset_pending=False), states[1]], [0, 0])
    # nothing was sent: the envs take their reset step, as planned
    _, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))
    assert rewards.tolist() == [0.0, 0.0]


def test_same_step_step_from_resets_an_ended_episode_as_step_does(make_placed):
    # SAME_STEP: an episode that ends in step_from is reset at once, as a step of
    # that mode resets it (the new episode's observation returned, the final one
    # in the infos); the next step steps the new episode, as Sync's does. (The
    # ended episode used to be stepped again: a transition past its end.)
    make = functools.partial(CountingEnv, max_steps=4)
    mode = AutoresetMode.SAME_STEP
    envs = make_placed([make] * 2, autoreset_mode=mode)
    reference = gym.vector.SyncVectorEnv([make] * 2, autoreset_mode=mode)
    try:
        envs.reset(seed=3)
        reference.reset(seed=3)
        still = np.zeros(2, np.int64)
        new_states, obs, rewards, _, truncations, infos = envs.step_from(
            envs.get_states(), still, dt=10
        )
        total = np.zeros(2)
        for _ in range(4):
            expected = reference.step(still)
            total += expected[1]
        assert data_equivalence(obs, expected[0], exact=True)
        np.testing.assert_array_equal(rewards, total)
        np.testing.assert_array_equal(truncations, expected[3])
        assert truncations.all()
        assert data_equivalence(infos["final_obs"], expected[4]["final_obs"])
        assert not any(state.autoreset_pending for state in new_states)
        assert data_equivalence(envs.step(still), reference.step(still), exact=True)
    finally:
        reference.close()
