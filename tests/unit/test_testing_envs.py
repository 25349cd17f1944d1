"""The toy envs of vecpool.testing: valid, deterministic, picklable (no processes)."""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
import time
import warnings
from typing import Any

import cloudpickle
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from vecpool.testing import (
    ACTION_KINDS,
    OBS_KINDS,
    CountingEnv,
    CustomExceptionEnv,
    DeliberateErrorWithArgs,
    RaisingEnv,
    SlowEnv,
    UnpicklableInfoEnv,
    assert_same_data,
    assert_same_rollout,
    make_env_fns,
)


def _rollout(env, seed: int, steps: int, action_seed: int = 0) -> list[Any]:
    env.action_space.seed(action_seed)
    results = [env.reset(seed=seed)]
    for _ in range(steps):
        result = env.step(env.action_space.sample())
        results.append(result)
        if result[2] or result[3]:
            results.append(env.reset())
    return results


@pytest.mark.parametrize("action_kind", ACTION_KINDS)
@pytest.mark.parametrize("obs_kind", OBS_KINDS)
def test_counting_env_is_valid_and_deterministic(obs_kind, action_kind):
    env = CountingEnv(obs_kind=obs_kind, action_kind=action_kind, max_steps=7)
    first = _rollout(env, seed=3, steps=60)
    for result in first:
        assert env.observation_space.contains(result[0])
    again = _rollout(
        CountingEnv(obs_kind=obs_kind, action_kind=action_kind, max_steps=7), 3, 60
    )
    assert_same_data(first, again, "same seed")
    other = _rollout(
        CountingEnv(obs_kind=obs_kind, action_kind=action_kind, max_steps=7), 4, 60
    )
    assert not all(
        np.array_equal(np.asarray(a[1]), np.asarray(b[1]))
        for a, b in zip(first, other, strict=True)
    )
    assert env.steps_taken == 60


@pytest.mark.parametrize("obs_kind", OBS_KINDS)
def test_counting_env_passes_gymnasium_env_checker(obs_kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # advisory checker notes are not failures
        check_env(
            CountingEnv(obs_kind=obs_kind, render_mode="rgb_array"),
            skip_render_check=False,
        )


def test_episode_lengths_vary_and_infos_are_mixed():
    env = CountingEnv(max_steps=15, terminate_prob=0.1, info_every=3)
    env.reset(seed=0)
    lengths, infos, reset_infos = [], [], []
    for _ in range(400):
        _, _, terminated, truncated, info = env.step(1)
        infos.append(info)
        if terminated or truncated:
            lengths.append(env.episode_steps)
            reset_infos.append(env.reset()[1])
    assert len(set(lengths)) >= 4
    assert 15 in lengths  # truncation happens too
    non_empty = [info for info in infos if info]
    assert 0 < len(non_empty) < len(infos)
    assert set(non_empty[0]) == {"step_count", "extra"}
    assert non_empty[0]["extra"].shape == (2,)
    assert any(reset_infos)
    assert not all(reset_infos)
    assert (
        CountingEnv().reset(seed=0, options={"b": 1, "a": 2})[1]["option_keys"] == "a,b"
    )


def test_actions_change_rewards_and_observations():
    results = []
    for action in (0, 2):
        env = CountingEnv()
        env.reset(seed=0)
        results.append(env.step(action))
    assert results[0][1] != results[1][1]
    assert not np.array_equal(results[0][0], results[1][0])


def test_get_state_set_state_round_trip():
    env = CountingEnv(obs_kind="dict", max_steps=50)
    env.reset(seed=1)
    for _ in range(5):
        env.step(2)
    state = pickle.loads(pickle.dumps(env.get_state()))
    after = [env.step(action) for action in (0, 1, 2, 0)]
    env.set_state(state)
    replay = [env.step(action) for action in (0, 1, 2, 0)]
    assert_same_data(after, replay, "replay after set_state")
    fresh = CountingEnv(obs_kind="dict", max_steps=50)
    fresh.reset(seed=99)
    fresh.set_state(state)
    assert_same_data(after, [fresh.step(action) for action in (0, 1, 2, 0)], "fresh")


@pytest.mark.parametrize(
    "dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"]
)
def test_env_fns_are_picklable(dumps):
    env_fns: list[functools.partial[Any]] = [
        *make_env_fns(2, obs_kind="tuple"),  # type: ignore[list-item]
        functools.partial(RaisingEnv, raise_on="reset", at=2),
        functools.partial(SlowEnv, 0.1),
        functools.partial(CustomExceptionEnv, at=3),
    ]
    for env_fn in env_fns:
        rebuilt = pickle.loads(dumps(env_fn))
        env = rebuilt()
        assert type(env) is env_fn.func
        env.reset(seed=0)


def test_the_package_keeps_every_name_and_old_pickles_load():
    # issue 29: vecpool/testing.py became a package by concern; every name still
    # imports from `vecpool.testing`, and a pickle made when the classes lived
    # there (protocol 0 names the module in plain text) still loads
    import vecpool.testing

    for name in vecpool.testing.__all__:
        assert getattr(vecpool.testing, name) is not None, name
    assert CountingEnv.__module__ == "vecpool.testing.envs"
    assert RaisingEnv.__module__ == "vecpool.testing.faults"
    new = pickle.dumps(functools.partial(RaisingEnv, at=2), protocol=0)
    old = new.replace(b"vecpool.testing.faults\n", b"vecpool.testing\n")
    assert old != new
    env = pickle.loads(old)()
    assert type(env) is RaisingEnv
    env.reset(seed=0)


def test_the_toy_envs_load_without_the_checker():
    # what a spawn or forkserver worker imports to rebuild an env fn
    code = (
        "import sys, vecpool.testing.faults; "
        "assert 'vecpool.check' not in sys.modules, 'the checker was loaded'; "
        "from vecpool.testing import BROKEN_ENVS, assert_vector_env_conforms; "
        "assert 'vecpool.check' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_raising_env_raises_once():
    env = RaisingEnv(raise_on="step", at=2, exc_type=KeyError)
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(KeyError, match="step #2"):
        env.step(0)
    env.step(0)
    assert env.steps_taken == 3
    env = RaisingEnv(raise_on="reset", at=1)
    with pytest.raises(ValueError, match=r"reset #1"):
        env.reset(seed=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="`raise_on`"):
        RaisingEnv(raise_on="close")


def test_custom_exception_cannot_be_unpickled():
    env = CustomExceptionEnv(at=1)
    env.reset(seed=0)
    with pytest.raises(DeliberateErrorWithArgs) as info:
        env.step(0)
    assert (info.value.code, info.value.detail) == (7, "extra detail")
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(info.value))


def test_unpicklable_info_env():
    env = UnpicklableInfoEnv(at=2)
    env.reset(seed=0)
    pickle.dumps(env.step(0)[4])
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(env.step(0)[4])


def test_slow_env_sleeps_and_action_overrides_delay(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # what SlowEnv sleeps, not when
    env = SlowEnv(step_delay=0.05)
    obs, _ = env.reset(seed=0)
    assert obs[0] == 0
    assert slept == [0.0]  # reset_delay
    _, reward, _, _, _ = env.step(np.array([0.0], dtype=np.float32))
    assert slept[1:] == [0.05]  # step_delay
    assert reward == 0.05
    _, reward, _, _, _ = env.step(np.array([0.01], dtype=np.float32))
    assert slept[2:] == [pytest.approx(0.01)]  # the action overrides it
    assert reward == pytest.approx(0.01)
    assert env.steps_taken == 2
    assert env.sleep(0.0) == 0.0


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="obs_kind"):
        CountingEnv(obs_kind="bogus")
    with pytest.raises(ValueError, match="action_kind"):
        CountingEnv(action_kind="bogus")
    with pytest.raises(ValueError, match="max_steps"):
        CountingEnv(max_steps=0)


def test_assert_same_data_reports_differences():
    assert_same_data({"a": np.zeros(2)}, {"a": np.zeros(2)})
    with pytest.raises(AssertionError, match="obs differs"):
        assert_same_data(np.zeros(2), np.ones(2), "obs")
    with pytest.raises(AssertionError):
        assert_same_data(np.zeros(2, np.float32), np.zeros(2, np.float64))
    with pytest.raises(AssertionError):
        assert_same_data({"a": 1}, {"a": 1, "_a": True})


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.value)
def test_assert_same_rollout_passes_on_equal_and_fails_on_different(mode):
    env_fns = make_env_fns(3, max_steps=5)
    actions = [np.array([0, 1, 2])] * 30
    same = assert_same_rollout(
        SyncVectorEnv(env_fns, autoreset_mode=mode),
        SyncVectorEnv(env_fns, autoreset_mode=mode),
        actions,
        seed=1,
        check_options_unchanged=False,  # SyncVectorEnv pops `reset_mask`
    )
    assert same > 0
    different = make_env_fns(3, max_steps=6)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_rollout(
            SyncVectorEnv(env_fns, autoreset_mode=mode),
            SyncVectorEnv(different, autoreset_mode=mode),
            actions,
            seed=1,
            check_options_unchanged=False,
        )
    if mode == AutoresetMode.DISABLED:
        with pytest.raises(AssertionError, match="options after reset"):
            assert_same_rollout(
                SyncVectorEnv(env_fns, autoreset_mode=mode),
                SyncVectorEnv(env_fns, autoreset_mode=mode),
                actions,
                seed=1,
            )
