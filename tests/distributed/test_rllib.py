"""The zero-code path: RLlib's env runner builds its envs with ``gym.make_vec``.

With an env id registered with ``vector_entry_point="vecpool:vector_entry_point"``
and ``gym_env_vectorize_mode=VECTOR_ENTRY_POINT``, RLlib's ``SingleAgentEnvRunner``
runs on :class:`vecpool.AsyncVectorEnv`. Skipped without RLlib (and torch).
"""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import pytest

import vecpool

pytest.importorskip("ray.rllib")
pytest.importorskip("torch")
import ray
from ray.rllib.algorithms.ppo import PPOConfig

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
ENV_ID = "VecpoolCartPole-v1"


@pytest.fixture
def local_ray() -> Iterator[None]:
    gym.register(
        ENV_ID,
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        max_episode_steps=500,
        vector_entry_point="vecpool:vector_entry_point",
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    del gym.registry[ENV_ID]


def test_rllibs_local_env_runner_trains_on_vecpool(local_ray):
    config = (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=4,
            gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT,
        )
        .training(train_batch_size_per_learner=512, minibatch_size=128, num_epochs=1)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        env = algo.env_runner.env.unwrapped
        assert isinstance(env, vecpool.AsyncVectorEnv)
        assert env.num_envs == 4
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 512
    finally:
        algo.stop()
