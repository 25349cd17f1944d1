"""Gymnasium's vector wrappers work on top of vecpool.AsyncVectorEnv, in every
placement (the ``placement`` fixture of tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.vector import (
    ClipReward,
    NormalizeObservation,
    NormalizeReward,
    RecordEpisodeStatistics,
)

import vecpool
from vecpool.testing import assert_same_data, make_env_fns

# A hung worker must fail fast, not eat the global 120 s timeout.
pytestmark = pytest.mark.timeout(30)


def _actions(single_space, num_envs: int, steps: int) -> list[Any]:
    space = batch_space(single_space, num_envs)
    space.seed(0)
    return [space.sample() for _ in range(steps)]


def _without_time(infos: dict[str, Any]) -> dict[str, Any]:
    """Drop the wall-clock fields of RecordEpisodeStatistics."""
    infos = dict(infos)
    if "episode" in infos:
        infos["episode"] = {k: v for k, v in infos["episode"].items() if k != "t"}
    return infos


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value
)
def test_record_episode_statistics(mode, make_placed, make_sync):
    num_envs = 4
    env_fns = make_env_fns(num_envs, max_steps=8, terminate_prob=0.1)
    reference = RecordEpisodeStatistics(make_sync(env_fns, autoreset_mode=mode))
    candidate = RecordEpisodeStatistics(make_placed(env_fns, autoreset_mode=mode))
    assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
    episodes = 0
    for step_index, action in enumerate(
        _actions(reference.single_action_space, num_envs, 60)
    ):
        expected = reference.step(action)
        actual = candidate.step(action)
        assert_same_data(expected[:4], actual[:4], f"step {step_index}")
        assert_same_data(_without_time(expected[4]), _without_time(actual[4]), "infos")
        episodes += int(actual[4].get("_episode", np.zeros(1, bool)).sum())
    assert episodes >= num_envs
    assert list(candidate.return_queue) == list(reference.return_queue)
    assert list(candidate.length_queue) == list(reference.length_queue)


def test_observation_and_reward_wrappers(make_placed, make_sync):
    num_envs = 3
    env_fns = make_env_fns(num_envs, obs_kind="box", action_kind="box", max_steps=10)

    def wrap(env):
        return ClipReward(NormalizeReward(NormalizeObservation(env)), -0.5, 0.5)

    reference = wrap(make_sync(env_fns))
    candidate = wrap(make_placed(env_fns, shared_memory=False))
    assert_same_data(reference.reset(seed=1), candidate.reset(seed=1), "reset")
    for step_index, action in enumerate(
        _actions(reference.single_action_space, num_envs, 50)
    ):
        assert_same_data(
            reference.step(action), candidate.step(action), f"step {step_index}"
        )
    np.testing.assert_array_equal(
        candidate.env.env.obs_rms.mean, reference.env.env.obs_rms.mean
    )
    assert candidate.unwrapped.num_envs == num_envs
    candidate.close()
    assert candidate.unwrapped.closed


def test_step_runs_an_override_of_either_half(make_sync):
    # step() skips its halves' guards only where neither half is overridden,
    # also where one is replaced on the class after it was made (a mock)
    calls: list[str] = []

    class AsyncLogged(vecpool.AsyncVectorEnv):
        def step_async(self, actions: Any) -> None:
            calls.append("step_async")
            super().step_async(actions)

    class WaitLogged(vecpool.AsyncVectorEnv):
        def step_wait(self, timeout: float | None = None) -> Any:
            calls.append("step_wait")
            return super().step_wait(timeout)

    class PatchedLater(vecpool.AsyncVectorEnv):
        pass

    def logged_wait(self: Any, timeout: float | None = None) -> Any:
        calls.append("patched")
        return vecpool.AsyncVectorEnv.step_wait(self, timeout)

    env_fns = make_env_fns(2)
    reference = make_sync(env_fns)
    cases = ((AsyncLogged, "step_async"), (WaitLogged, "step_wait"))
    for cls, name in (*cases, (PatchedLater, "patched")):
        candidate = cls(env_fns, num_workers=1)
        if cls is PatchedLater:
            PatchedLater.step_wait = logged_wait  # type: ignore[method-assign]
        try:
            assert_same_data(reference.reset(seed=0), candidate.reset(seed=0))
            calls.clear()
            action = np.zeros(2, np.int64)
            assert_same_data(candidate.step(action)[:4], reference.step(action)[:4])
            assert calls == [name]
        finally:
            candidate.close()
