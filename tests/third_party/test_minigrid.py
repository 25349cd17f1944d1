"""MiniGrid (a Dict observation with a custom ``MissionSpace`` string leaf), as a new
user meets it: ``vecpool.AsyncVectorEnv`` with its defaults and ``vecpool check`` by
id. ``nox -s integrations`` installs ``minigrid``; elsewhere this file skips.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecpool
from vecpool.cli import main
from vecpool.testing import assert_same_data

pytest.importorskip("minigrid")

ENV_ID = "MiniGrid-Empty-5x5-v0"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_minigrid_matches_sync_with_the_defaults(num_workers):
    import minigrid  # noqa: F401 - registers the envs

    fns = [lambda: gym.make(ENV_ID)] * 4
    reference = gym.vector.SyncVectorEnv(fns)
    candidate = vecpool.AsyncVectorEnv(fns, num_workers=num_workers)
    try:
        assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
        rng = np.random.default_rng(0)
        for step in range(200):
            actions = rng.integers(0, 3, 4)
            assert_same_data(
                reference.step(actions), candidate.step(actions), f"{step}"
            )
    finally:
        reference.close()
        candidate.close()


def test_vecpool_check_by_module_and_id(capsys):
    assert main(["check", f"minigrid:{ENV_ID}", "--num-envs", "4"]) == 0
    assert "check_vector_env: ok" in capsys.readouterr().out


def test_vecpool_collect_records_the_missions(tmp_path, capsys):
    out = tmp_path / "minigrid.npz"
    argv = ["collect", f"minigrid:{ENV_ID}", "--steps", "400", "--num-envs", "4"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    pool = vecpool.ReplayPool.load(out)
    stored = pool.get_pool()
    assert len(stored.reward) >= 300
    assert set(stored.obs["mission"].tolist()) == {"get to the green goal square"}
    space: Any = pool.observation_space
    assert isinstance(space["mission"], gym.spaces.Text)
    assert stored.obs["image"].shape[1:] == (7, 7, 3)
