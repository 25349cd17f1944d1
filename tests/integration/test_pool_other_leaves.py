"""Observations with leaves that are not arrays, recorded end to end.

A ``Text`` leaf is stored as fixed-width unicode and any other such leaf (Graph,
Sequence, OneOf, a custom string space as MiniGrid's mission) as ``object`` values
(vecpool/_util/spaces.py ``storage_leaves``), through the wrapper, the ``[T, B]``
sampler, save/load (strings only, no pickle: vecpool/replay/portable.py) and
``vecpool collect``.

``MixedLeavesEnv`` derives every leaf from ``position = [env, step, action]``, so
each stored row can be checked on its own: a row of another env or step shows.
"""

from __future__ import annotations

import functools
import json
import zipfile
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.bench.workloads import GridEnv
from vecpool.sampling.sampler import Sampler
from vecpool.testing import MissionEnv, MixedLeavesEnv, assert_same_data

MODES = list(AutoresetMode)
NUM_ENVS = 3


def _fns(cls, num_envs=NUM_ENVS):
    return [functools.partial(cls, index=i) for i in range(num_envs)]


def _check_row(obs, row, where):
    """The leaves of stored row ``row`` agree with its position leaf."""
    index, t, action = (int(x) for x in obs["position"][row])
    assert obs["note"][row] == f"env{index}step{t}", where
    assert obs["pair"][0][row] == (index + t) % 9, where
    assert obs["pair"][1][row] == f"a{action}", where
    assert obs["nested"]["count"][row] == t % 64, where
    assert obs["trail"][row] == tuple((index + k) % 8 for k in range(t % 4)), where
    graph = obs["graph"][row]
    nodes = 1 + (t + index) % 3
    expected = np.arange(nodes * 2, dtype=np.float32).reshape(nodes, 2) + index
    np.testing.assert_array_equal(graph.nodes, expected, err_msg=where)
    return index, t


def _drive(env, steps, seed=0):
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    mode = env.metadata["autoreset_mode"]
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(rng.integers(0, 3, env.num_envs))
        ended = terminated | truncated
        if mode is AutoresetMode.DISABLED and ended.any():
            env.reset(options={"reset_mask": ended})


@pytest.mark.parametrize("store_next_obs", [True, False])
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_the_wrapper_records_every_leaf(mode, store_next_obs, make_async, make_sync):
    candidate = vecpool.ReplayPoolWrapper(
        make_async(_fns(MixedLeavesEnv), autoreset_mode=mode, num_workers=2),
        10_000,
        store_next_obs=store_next_obs,
    )
    reference = vecpool.ReplayPoolWrapper(
        make_sync(_fns(MixedLeavesEnv), autoreset_mode=mode), 10_000
    )
    _drive(candidate, 40)
    _drive(reference, 40)
    got = candidate.pool.get_pool()
    # recorded through Sync (the wrapper's trusted path), the same transitions
    assert_same_data(reference.pool.get_pool(), got, "get_pool()")
    assert got.obs["note"].dtype == np.dtype("<U16")
    assert got.obs["graph"].dtype == object
    assert len(got.reward) > 80
    lengths = candidate.pool.lengths.tolist()
    first = 0
    for env, length in enumerate(lengths):
        for row in range(first, first + length):
            index, t = _check_row(got.obs, row, f"obs row {row}")
            next_index, next_t = _check_row(got.next_obs, row, f"next_obs row {row}")
            assert index == next_index == env
            assert next_t == t + 1  # a real step: never a reset row
        first += length


def test_sample_and_the_episodes_hold_the_strings(make_async):
    env = vecpool.ReplayPoolWrapper(make_async(_fns(MixedLeavesEnv)), 10_000, seed=1)
    _drive(env, 30)
    batch = env.pool.sample(64)
    for row in range(64):
        _check_row(batch.obs, row, f"sample row {row}")
    from vecpool.replay.episodes import complete_episodes

    episodes, _ = complete_episodes(env.pool)
    assert episodes
    for episode in episodes:
        steps = [
            _check_row(episode.observations, k, "episode")
            for k in range(len(episode.rewards) + 1)
        ]
        assert [t for _, t in steps] == list(range(len(steps)))  # reset, then on


@pytest.mark.parametrize("cls", [MixedLeavesEnv, MissionEnv])
def test_the_sampler_batches_hold_every_leaf(cls, make_async):
    env = make_async(_fns(cls, 4), num_workers=2)
    pool = vecpool.ReplayPool(
        env.single_observation_space, env.single_action_space, 4, 1000
    )
    sampler = Sampler(env, None, 6, seed=0, pool=pool)
    for _ in range(3):
        batch, _ = sampler.obtain_samples()
        assert batch.obs["image" if cls is MissionEnv else "note"].shape[:2] == (6, 4)
        if cls is MixedLeavesEnv:
            for t in range(6):
                for b in range(4):
                    if batch.valid[t, b]:
                        got = {
                            key: _take(value, t, b) for key, value in batch.obs.items()
                        }
                        assert _check_row(got, 0, "sampler")[0] == b
        else:
            assert batch.obs["mission"].dtype == object
            assert all(m.startswith("get to the") for m in batch.obs["mission"].flat)
    assert len(pool) > 0


def _take(value, t, b):
    if isinstance(value, dict):
        return {key: _take(item, t, b) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_take(item, t, b) for item in value)
    return value[t : t + 1, b]  # row 0 of a 1-row batch, as stored


def test_text_leaves_save_and_load_without_pickle(tmp_path, make_async):
    fns = [functools.partial(GridEnv, mission="text")] * 3
    env = vecpool.ReplayPoolWrapper(make_async(fns), 10_000)
    _drive(env, 20)
    path = env.pool.save(tmp_path / "pool.npz")
    loaded = vecpool.ReplayPool.load(path)
    assert loaded.observation_space == env.pool.observation_space
    assert_same_data(env.pool.get_pool(), loaded.get_pool(), "loaded pool")
    with np.load(path, allow_pickle=False) as archive:  # no pickle in the file
        assert all(archive[name].dtype != object for name in archive.files)


def test_a_custom_string_space_loads_back_as_text(tmp_path, make_async):
    env = vecpool.ReplayPoolWrapper(
        make_async(_fns(MissionEnv)), 10_000, store_next_obs=False
    )
    _drive(env, 25)
    before = env.pool.get_pool()
    loaded = vecpool.ReplayPool.load(env.pool.save(tmp_path / "missions.npz"))
    space: Any = loaded.observation_space
    mission = space["mission"]
    assert isinstance(mission, spaces.Text)
    after = loaded.get_pool()
    longest = max(len(m) for m in before.obs["mission"])
    assert after.obs["mission"].dtype == np.dtype(f"<U{longest}")
    assert after.obs["mission"].tolist() == before.obs["mission"].tolist()
    assert after.next_obs["mission"].tolist() == before.next_obs["mission"].tolist()
    np.testing.assert_array_equal(after.obs["image"], before.obs["image"])
    assert all(mission.contains(m) for m in after.obs["mission"].tolist())


def test_a_leaf_a_file_cannot_hold_is_refused_before_writing(tmp_path, make_async):
    env = vecpool.ReplayPoolWrapper(make_async(_fns(MixedLeavesEnv)), 1000)
    _drive(env, 5)
    path = tmp_path / "pool.npz"
    with pytest.raises(ValueError, match=r"obs\['choice'\] \(OneOf") as error:
        env.pool.save(path)
    assert "without pickle" in str(error.value)
    assert "ObservationWrapper" in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_a_string_longer_than_its_text_space_is_refused():
    space = spaces.Dict({"a": spaces.Discrete(2), "t": spaces.Text(4)})
    pool = vecpool.ReplayPool(space, spaces.Discrete(2), 2, 10)
    obs = {"a": np.zeros(2, np.int64), "t": ("abcd", "abcde")}
    with pytest.raises(ValueError, match=r"\['t'\]` holds a string of 5 characters"):
        pool.add(obs, np.zeros(2, np.int64), obs, np.zeros(2), [False] * 2, [False] * 2)
    assert len(pool) == 0


def test_a_forged_text_length_is_refused(tmp_path, make_async):
    fns = [functools.partial(GridEnv, mission="text")] * 2
    env = vecpool.ReplayPoolWrapper(make_async(fns), 100)
    _drive(env, 5)
    path = env.pool.save(tmp_path / "pool.npz")
    with np.load(path, allow_pickle=False) as archive:
        members = {name: archive[name] for name in archive.files}
    header = json.loads(members["config"].tobytes())
    header["observation_space"]["spaces"][2][1]["max_length"] = 10**15
    members["config"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    forged = tmp_path / "forged.npz"
    np.savez(forged, **members)
    with pytest.raises(ValueError, match=r"more than this machine's memory"):
        vecpool.ReplayPool.load(forged)
    assert zipfile.is_zipfile(forged)


def test_collect_records_the_missions(tmp_path, monkeypatch):
    from vecpool.cli import main

    out = tmp_path / "missions.npz"
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mission_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('MissionGrid-v0', entry_point='vecpool.testing:MissionEnv')\n"
    )
    argv = ["collect", "mission_envs:MissionGrid-v0", "--steps", "200"]
    assert main([*argv, "--num-envs", "4", "--out", str(out), "--quiet"]) == 0
    pool = vecpool.ReplayPool.load(out)
    missions = pool.get_pool().obs["mission"].tolist()
    assert len(missions) >= 150
    assert all(m.startswith("get to the") for m in missions)
    space: Any = pool.observation_space
    assert isinstance(space["mission"], spaces.Text)
    gym.registry.pop("MissionGrid-v0", None)


@pytest.mark.parametrize("leaf", ["object", "text"])
def test_store_next_obs_false_tells_strings_apart(leaf):
    # the arrays of an episode's final observation equal the reset's: only the
    # string tells them apart, so next_obs must not be taken from the next row
    from vecpool.testing import MissionSpace

    text = MissionSpace() if leaf == "object" else spaces.Text(8)
    space = spaces.Dict({"a": spaces.Discrete(2), "m": text})
    pools = [
        vecpool.ReplayPool(space, spaces.Discrete(2), 1, 100, store_next_obs=keep)
        for keep in (True, False)
    ]
    rows = [("go", "go", False), ("go", "end", True), ("new", "new", False)]
    for obs_m, next_m, done in rows:
        obs = {"a": np.zeros(1, np.int64), "m": (obs_m,)}
        next_obs = {"a": np.zeros(1, np.int64), "m": (next_m,)}
        for pool in pools:
            pool.add(obs, np.zeros(1, np.int64), next_obs, [0.0], [done], [False])
    expected, actual = (pool.get_pool() for pool in pools)
    assert actual.next_obs["m"].tolist() == ["go", "end", "new"]
    assert_same_data(expected, actual, "store_next_obs=False")


# -- found by a cold review of the object and Text leaves -----------------------------


class _GraphEnv(gym.Env):
    """A Graph leaf whose object the env rewrites in place after returning it."""

    observation_space = spaces.Dict(
        a=spaces.Box(0, 100, (1,), np.float32),
        g=spaces.Graph(spaces.Box(0, 100, (1,), np.float32), None),
    )
    action_space = spaces.Discrete(3)

    def __init__(self):
        self.graph = spaces.GraphInstance(
            np.zeros((2, 1), np.float32), None, np.zeros((0, 2), np.int64)
        )

    def _obs(self):
        nodes: Any = self.graph.nodes
        nodes[:] = self.t  # the same object, rewritten
        return {"a": np.array([self.t], np.float32), "g": self.graph}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= 3, False, {}


@pytest.mark.parametrize("store_next_obs", [True, False])
def test_episodes_of_object_leaves_added_by_hand(store_next_obs):
    # pool.add(obs, ..., next_obs); obs = next_obs: the copies of one graph were
    # compared by identity, so every row looked like a jump and no episode was whole
    from vecpool.replay.episodes import complete_episodes

    env = gym.vector.SyncVectorEnv([_GraphEnv], autoreset_mode=AutoresetMode.SAME_STEP)
    pool = vecpool.ReplayPool(
        env.single_observation_space,
        env.single_action_space,
        1,
        100,
        store_next_obs=store_next_obs,
    )
    obs, _ = env.reset(seed=0)
    for _ in range(9):
        act = np.zeros(1, np.int64)
        nxt, rew, term, trunc, info = env.step(act)
        real = nxt
        if term[0] or trunc[0]:
            final = info["final_obs"][0]
            real = {"a": final["a"][None], "g": (final["g"],)}
        pool.add(obs, act, real, rew, term, trunc)
        obs = nxt
    episodes, partial = complete_episodes(pool)
    assert [len(e) for e in episodes] == [3, 3, 3]
    assert partial == 0
    firsts = [e.observations["g"][0].nodes[0, 0] for e in episodes]
    assert firsts == [0.0, 0.0, 0.0]  # each from its reset


def test_what_the_pool_hands_out_is_not_its_own_objects():
    env = vecpool.ReplayPoolWrapper(gym.vector.SyncVectorEnv([_GraphEnv] * 2), 100)
    _drive(env, 6)
    before = [g.nodes.tolist() for g in env.pool.get_pool().obs["g"]]
    for graph in env.pool.sample(16).obs["g"]:
        graph.nodes[:] = -1  # the user's copy
    assert [g.nodes.tolist() for g in env.pool.get_pool().obs["g"]] == before


def test_a_loaded_text_leaf_refuses_longer_strings_instead_of_cutting_them(tmp_path):
    env = vecpool.ReplayPoolWrapper(gym.vector.SyncVectorEnv(_fns(MissionEnv)), 100)
    _drive(env, 5)
    loaded = vecpool.ReplayPool.load(env.pool.save(tmp_path / "m.npz"))
    space: Any = loaded.observation_space
    width = space["mission"].max_length
    obs = env.pool.get_pool()
    rows = {key: value[:NUM_ENVS] for key, value in obs.obs.items()}  # one row per env
    rows["mission"] = np.array(["x" * (width + 1)] * NUM_ENVS, object)
    with pytest.raises(ValueError, match=r"`obs\['mission'\]` holds a string of"):
        loaded.add_leaves(
            [rows["direction"], rows["image"], rows["mission"]],
            [np.zeros(NUM_ENVS, np.int64)],
            [rows["direction"], rows["image"], rows["mission"]],
            np.zeros(NUM_ENVS),
            np.zeros(NUM_ENVS, bool),
            np.zeros(NUM_ENVS, bool),
        )


def test_a_string_ending_in_nul_is_refused_not_changed():
    space = spaces.Dict({"a": spaces.Discrete(2), "t": spaces.Text(4)})
    pool = vecpool.ReplayPool(space, spaces.Discrete(2), 1, 10)
    obs = {"a": np.zeros(1, np.int64), "t": ("ab\0",)}
    with pytest.raises(ValueError, match="NUL"):
        pool.add(obs, np.zeros(1, np.int64), obs, [0.0], [False], [False])


class _TooLongOnceEnv(gym.Env):
    """Step 2 returns a string longer than its Text space allows."""

    observation_space = spaces.Dict({"t": spaces.Discrete(100), "s": spaces.Text(4)})
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"t": 0, "s": "ok"}, {}

    def step(self, action):
        self.t += 1
        text = "much too long" if self.t == 2 else f"s{self.t}"
        return {"t": self.t, "s": text}, float(self.t), False, False, {}


def test_a_step_the_wrapper_cannot_record_links_nothing():
    # found by a tester: after a refused step, the next transition started from the
    # observation before it (t=1 -> t=3)
    env = vecpool.ReplayPoolWrapper(gym.vector.SyncVectorEnv([_TooLongOnceEnv]), 100)
    env.reset(seed=0)
    for step in range(4):
        if step == 1:
            with pytest.raises(ValueError, match="max_length 4"):
                env.step(np.ones(1, np.int64))
        else:
            env.step(np.ones(1, np.int64))
    stored = env.get_pool()
    pairs = list(
        zip(stored.obs["t"].tolist(), stored.next_obs["t"].tolist(), strict=True)
    )
    assert pairs == [(0, 1), (3, 4)]


@pytest.mark.parametrize("batch_size", [None, 2])
def test_wait_reset_padding_repeats_object_leaves_whole(batch_size, make_async):
    # found by a tester: the padding of parked envs broadcast a tuple (a Sequence,
    # Graph or OneOf value) across rows: "could not broadcast" or its items spread
    kwargs = {} if batch_size is None else {"batch_size": batch_size}
    env = make_async(
        _fns(MixedLeavesEnv, 4),
        num_workers=2,
        autoreset_mode=AutoresetMode.DISABLED,
        **kwargs,
    )
    sampler = Sampler(env, None, 12, seed=0, wait_reset=True)
    batch, _ = sampler.obtain_samples()
    padded = np.argwhere(~batch.valid)
    assert padded.size  # episodes of 3-8 steps in 12 rows: some envs wait
    for t, b in padded.tolist():
        row = {key: _take(value, t, b) for key, value in batch.obs.items()}
        _check_row(row, 0, f"padding row {t}, env {b}")  # a whole observation
