"""vecpool.make_vec and the vector entry points, against gym.make_vec.

The placement's keywords (the ``placement`` fixture of tests/conftest.py) travel as
``vector_kwargs`` or the entry point's own keywords.
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import TimeAwareObservation

import vecpool


def _rollout(envs, steps=60, seed=3):
    obs, info = envs.reset(seed=seed)
    results = [(obs, info)]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        actions = rng.integers(0, 2, envs.num_envs)
        results.append(envs.step(actions))
    return results


def test_make_vec_builds_vecpool_env_with_gymnasium_spec(placement):
    placed = placement.kwargs(3)
    envs = vecpool.make_vec(
        "CartPole-v1",
        num_envs=3,
        vector_kwargs=placed,
        sutton_barto_reward=True,
    )
    try:
        assert isinstance(envs, vecpool.AsyncVectorEnv)
        assert envs.num_workers == placed["num_workers"]
        # Gymnasium's text, then where the envs step (the placement)
        assert repr(envs) == (
            f"AsyncVectorEnv(CartPole-v1, num_envs=3, {envs.placement.describe(3)})"
        )
        assert f"{envs.num_workers} worker" in repr(envs) or envs.num_workers == 0
        assert envs.spec is not None
        assert envs.spec.id == "CartPole-v1"
        assert envs.spec.kwargs == {
            "sutton_barto_reward": True,
            "num_envs": 3,
            "vectorization_mode": "async",
            "vector_kwargs": placed,
        }
        assert envs.get_attr("_sutton_barto_reward") == (True, True, True)
    finally:
        envs.close()


def test_make_vec_equals_gym_make_vec_results(placement):
    ours = vecpool.make_vec(
        "CartPole-v1",
        num_envs=4,
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP} | placement.kwargs(4),
    )
    theirs = gym.make_vec(
        "CartPole-v1",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    try:
        assert ours.spec.kwargs["vector_kwargs"] == (  # type: ignore[union-attr]
            theirs.spec.kwargs["vector_kwargs"] | placement.kwargs(4)  # type: ignore[union-attr]
        )
        for mine, reference in zip(_rollout(ours), _rollout(theirs), strict=True):
            assert data_equivalence(mine, reference, exact=True)
    finally:
        ours.close()
        theirs.close()


def test_make_vec_applies_wrappers_and_accepts_a_spec(placement):
    envs = vecpool.make_vec(
        gym.spec("CartPole-v1"),
        num_envs=2,
        wrappers=[TimeAwareObservation],
        vector_kwargs=placement.kwargs(2),
    )
    try:
        assert envs.single_observation_space.shape == (5,)
        assert envs.spec.kwargs["wrappers"] == [TimeAwareObservation]  # type: ignore[union-attr]
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 5)
    finally:
        envs.close()


def test_make_vec_rejects_bad_id_type():
    with pytest.raises(
        gym.error.Error, match=re.escape("Invalid id type: <class 'int'>")
    ):
        vecpool.make_vec(123)  # type: ignore[arg-type]


def test_vector_entry_point_object_via_gym_make_vec(placement):
    env_id = "VecpoolTestCartPoleObj-v1"
    placed = placement.kwargs(4)
    gym.register(
        env_id,
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        vector_entry_point=vecpool.VectorEntryPoint(  # type: ignore[arg-type]
            "gymnasium.envs.classic_control.cartpole:CartPoleEnv", **placed
        ),
        max_episode_steps=20,
    )
    try:
        envs = gym.make_vec(env_id, num_envs=4)
        try:
            assert isinstance(envs, vecpool.AsyncVectorEnv)
            assert envs.num_workers == placed["num_workers"]
            assert envs.spec.id == env_id  # type: ignore[union-attr]
            assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
            # max_episode_steps from the spec is honoured: every env truncates at 20
            envs.reset(seed=0)
            truncated_at = None
            for step in range(1, 25):
                _, _, terminations, truncations, _ = envs.step(
                    np.zeros(4, dtype=np.int64)
                )
                if truncations.any() or terminations.any():
                    truncated_at = step
                    break
            assert truncated_at is not None
            assert truncated_at <= 20
        finally:
            envs.close()
    finally:
        del gym.registry[env_id]


# Not over placements: the string entry point passes every keyword to the env (and
# gym.make_vec refuses vector_kwargs for it), so it always builds the default.
def test_vector_entry_point_string_via_gym_make_vec():
    env_id = "VecpoolTestCartPoleStr-v1"
    gym.register(
        env_id,
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        vector_entry_point="vecpool:vector_entry_point",
        max_episode_steps=500,
    )
    try:
        ours = gym.make_vec(env_id, num_envs=3)
        reference = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        try:
            assert isinstance(ours, vecpool.AsyncVectorEnv)
            assert ours.spec.id == env_id  # type: ignore[union-attr]
            for mine, theirs in zip(_rollout(ours), _rollout(reference), strict=True):
                assert data_equivalence(mine, theirs, exact=True)
        finally:
            ours.close()
            reference.close()
    finally:
        del gym.registry[env_id]


def test_vector_entry_point_string_called_directly_explains_itself():
    with pytest.raises(TypeError, match=re.escape("must be called by `gym.make_vec`")):
        vecpool.vector_entry_point(num_envs=2)
