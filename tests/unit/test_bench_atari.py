"""The optional ``atari`` workload of ``vecpool bench`` (needs ``vecpool[bench]``)."""

from __future__ import annotations

import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecpool
from vecpool import bench
from vecpool.testing import assert_same_data

ATARI_SPACE = spaces.Box(0, 255, shape=(4, 84, 84), dtype=np.uint8)


def _require_atari() -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")


@pytest.mark.parametrize("module", ["ale_py", "cv2"])
def test_atari_without_extra_says_what_to_install(monkeypatch, module):
    if module == "cv2":
        pytest.importorskip("ale_py")  # else the message names ale_py, checked first
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ValueError, match=r"vecpool\[bench\]") as excinfo:
        bench.resolve_workload("atari")
    assert module in str(excinfo.value)
    assert "ale-py opencv-python-headless" in str(excinfo.value)


def test_atari_is_listed_but_not_a_default():
    with pytest.raises(ValueError, match="atari"):
        bench.resolve_workload("nope")
    assert "atari" not in bench.DEFAULT_WORKLOADS


def test_atari_env_fn_builds_preprocessed_pong():
    _require_atari()
    workload = bench.resolve_workload("atari")
    assert (workload.name, workload.env_id) == ("atari", "ALE/Pong-v5")
    env_fn = pickle.loads(pickle.dumps(workload.env_fn))
    env = env_fn()
    try:
        assert env.observation_space == ATARI_SPACE
        assert isinstance(env.action_space, spaces.Discrete)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84)
        assert obs.dtype == np.uint8
        obs, _, _, _, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert info
    finally:
        env.close()


def test_atari_vecpool_matches_sync():
    _require_atari()
    workload = bench.resolve_workload("atari")
    env_fns = [workload.env_fn] * 2
    reference = gym.vector.SyncVectorEnv(env_fns)
    candidate = vecpool.AsyncVectorEnv(env_fns, num_workers=2)
    try:
        assert candidate.single_observation_space == ATARI_SPACE
        assert_same_data(
            reference.reset(seed=3), candidate.reset(seed=3), label="reset"
        )
        rng = np.random.default_rng(0)
        for step in range(3):
            actions = rng.integers(0, 6, size=2)
            expected = reference.step(actions)
            assert_same_data(expected, candidate.step(actions), label=f"step {step}")
            assert expected[4]  # infos are non-empty on every step
    finally:
        candidate.close()
        reference.close()
