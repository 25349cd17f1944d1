"""ReplayPool -> Minari: complete episodes only, equal after minari.load_dataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

minari = pytest.importorskip("minari")
pytest.importorskip("h5py")

import gymnasium as gym  # noqa: E402

import vecpool  # noqa: E402
from vecpool.cli import main  # noqa: E402
from vecpool.replay.episodes import complete_episodes  # noqa: E402
from vecpool.replay.minari import to_minari  # noqa: E402
from vecpool.testing import make_env_fns  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:minari")


@pytest.fixture(autouse=True)
def _datasets_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))


def _collected(fns, steps: int, pool_size: int = 4000) -> vecpool.ReplayPool:
    envs = vecpool.ReplayPoolWrapper(
        vecpool.AsyncVectorEnv(fns, num_workers=0), pool_size=pool_size, seed=0
    )
    try:
        envs.reset(seed=0)
        envs.action_space.seed(0)
        for _ in range(steps):
            envs.step(envs.action_space.sample())
        return envs.pool
    finally:
        envs.close()


def _assert_equal_tree(a, b, label):
    if isinstance(a, dict):
        assert set(a) == set(b), label
        for key in a:
            _assert_equal_tree(a[key], b[key], f"{label}.{key}")
        return
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=label)


def test_cartpole_round_trip_through_minari():
    pool = _collected([lambda: gym.make("CartPole-v1")] * 4, 300)
    episodes, partial = complete_episodes(pool)
    dataset, skipped = to_minari(
        pool, "cartpole/vecpool-v0", env="CartPole-v1", algorithm_name="random"
    )
    assert skipped == partial > 0  # the running tails were left out
    assert dataset.total_episodes == len(episodes)
    loaded = minari.load_dataset("cartpole/vecpool-v0")
    assert loaded.total_steps == sum(len(e) for e in episodes)
    for ours, theirs in zip(episodes, loaded.iterate_episodes(), strict=True):
        _assert_equal_tree(ours.observations, theirs.observations, "observations")
        _assert_equal_tree(ours.actions, theirs.actions, "actions")
        np.testing.assert_array_equal(ours.rewards, theirs.rewards)
        np.testing.assert_array_equal(ours.terminations, theirs.terminations)
        np.testing.assert_array_equal(ours.truncations, theirs.truncations)
    assert loaded.spec.env_spec.id == "CartPole-v1"


def test_dict_observations_and_no_env_round_trip():
    fns = make_env_fns(2, max_steps=5, terminate_prob=0.2, obs_kind="dict")
    pool = _collected(fns, 60)
    episodes, _ = complete_episodes(pool)
    to_minari(pool, "counting/dict-v0", algorithm_name="random")
    loaded = minari.load_dataset("counting/dict-v0")
    assert loaded.observation_space == pool.observation_space
    for ours, theirs in zip(episodes, loaded.iterate_episodes(), strict=True):
        _assert_equal_tree(ours.observations, theirs.observations, "observations")
        np.testing.assert_array_equal(ours.rewards, theirs.rewards)


def test_a_pool_without_complete_episodes_is_refused():
    pool = _collected([lambda: gym.make("CartPole-v1")], 3)  # no episode has ended
    with pytest.raises(ValueError, match="no complete episode"):
        to_minari(pool, "cartpole/none-v0", env="CartPole-v1")


def test_collect_writes_a_minari_dataset_beside_its_pool(tmp_path):
    code = main(
        [
            "collect",
            "CartPole-v1",
            "--num-envs",
            "2",
            "--steps",
            "400",
            "--num-workers",
            "0",
            "--out",
            str(tmp_path / "pool.npz"),
            "--minari",
            "cartpole/cli-v0",
            "--quiet",
        ]
    )
    assert code == 0
    pool = vecpool.ReplayPool.load(tmp_path / "pool.npz")
    episodes, _ = complete_episodes(pool)
    loaded = minari.load_dataset("cartpole/cli-v0")
    assert loaded.total_episodes == len(episodes) > 0
    assert pool.to_minari("cartpole/method-v0")[0].total_episodes == len(episodes)


def test_collect_exports_an_env_id_given_with_its_module(tmp_path):
    # `PKG:EnvId-v0` (gym.make's form, which imports PKG first): Minari takes the
    # id alone; the whole string failed after collecting, with a dataset folder
    # left behind that refused the next try
    code = main(
        [
            "collect",
            "gymnasium.envs.classic_control:CartPole-v1",
            "--num-envs",
            "2",
            "--steps",
            "400",
            "--num-workers",
            "0",
            "--quiet",
            "--out",
            str(tmp_path / "pool.npz"),
            "--minari",
            "cartpole/module-v0",
        ]
    )
    assert code == 0
    assert minari.load_dataset("cartpole/module-v0").spec.env_spec.id == "CartPole-v1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--random-routing"], "`random_routing` (--random-routing) mixes"),
        ([], "A Minari dataset with ID cartpole/taken-v0 already exists"),
        (["--minari", "cartpole"], "'cartpole' is not a Minari dataset id"),
    ],
)
def test_collect_refuses_an_export_that_would_fail_before_collecting(
    tmp_path, capsys, argv, message
):
    pool = _collected([lambda: gym.make("CartPole-v1")] * 2, 200)
    to_minari(pool, "cartpole/taken-v0")
    out = tmp_path / "pool.npz"
    code = main(
        [
            "collect",
            "CartPole-v1",
            "--num-envs",
            "2",
            "--steps",
            "40",
            "--quiet",
            "--out",
            str(out),
            "--minari",
            "cartpole/taken-v0",
            *argv,
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_mission_strings_round_trip_as_text():
    # a custom string space (MiniGrid's MissionSpace) is described to Minari as
    # Text; the strings come back as they were recorded
    from vecpool.testing import MissionEnv

    pool = _collected([MissionEnv] * 3, 60)
    episodes, _ = complete_episodes(pool)
    dataset, _ = to_minari(pool, "mission/vecpool-v0")
    assert isinstance(dataset.observation_space["mission"], gym.spaces.Text)
    loaded = minari.load_dataset("mission/vecpool-v0")
    for ours, theirs in zip(episodes, loaded.iterate_episodes(), strict=True):
        assert (
            list(theirs.observations["mission"])
            == ours.observations["mission"].tolist()
        )
        np.testing.assert_array_equal(
            theirs.observations["image"], ours.observations["image"]
        )


def test_a_leaf_minari_cannot_describe_is_refused_before_writing():
    from vecpool.testing import MixedLeavesEnv

    pool = _collected([MixedLeavesEnv] * 2, 40)
    with pytest.raises(ValueError, match="a Minari dataset cannot hold"):
        to_minari(pool, "mixed/vecpool-v0")
    assert "mixed/vecpool-v0" not in minari.list_local_datasets()


def test_frame_stacked_pool_streams_in_batches(monkeypatch):
    """A frame pool exports the same episodes as a plain one, a few at a time."""
    from gymnasium.wrappers import FrameStackObservation

    from vecpool.replay import minari as pool_minari

    def make():
        return FrameStackObservation(gym.make("CartPole-v1"), 4)

    fns = [make] * 3
    envs = vecpool.ReplayPoolWrapper(
        vecpool.ReplayPoolWrapper(
            vecpool.AsyncVectorEnv(fns, num_workers=0), 3000, frame_stack=4, seed=0
        ),
        3000,
        seed=0,
    )
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(300):
        envs.step(envs.action_space.sample())
    inner: Any = envs.env
    plain, frames = envs.pool, inner.pool
    envs.close()
    monkeypatch.setattr(pool_minari, "_BATCH_STEPS", 50)  # several update batches
    episodes, partial = complete_episodes(plain)
    assert len(episodes) > 5
    dataset, skipped = to_minari(frames, "cartpole/frames-v0", algorithm_name="random")
    assert skipped == partial
    assert dataset.total_episodes == len(episodes)
    loaded = minari.load_dataset("cartpole/frames-v0")
    for ours, theirs in zip(episodes, loaded.iterate_episodes(), strict=True):
        _assert_equal_tree(ours.observations, theirs.observations, "observations")
        _assert_equal_tree(ours.actions, theirs.actions, "actions")
        _assert_equal_tree(ours.rewards, theirs.rewards, "rewards")
