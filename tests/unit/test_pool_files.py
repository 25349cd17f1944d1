"""Pool files hold no pickle, and every bad file is one clear ValueError (issue 11)."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.wrappers import FrameStackObservation

import vecpool
from vecpool._util.files import _HOST, STALE_AGE, remove_stale_temporaries
from vecpool.replay import files as pool_files
from vecpool.replay.episodes import complete_episodes
from vecpool.testing import assert_same_data

SPACES: dict[str, spaces.Space[Any]] = {
    "box-inf": spaces.Box(-np.inf, np.inf, (3,), np.float32),
    "box-bounds": spaces.Box(
        np.array([[-1.5, 0.0], [2.0, -np.inf]]),
        np.array([[1.5, 1.0], [3.0, 7.25]]),
        dtype=np.float64,
    ),
    "box-uint8-image": spaces.Box(0, 255, (4, 5, 3), np.uint8),
    "box-int": spaces.Box(-3, 9, (2,), np.int32),
    "discrete": spaces.Discrete(5),
    "discrete-start-int32": spaces.Discrete(4, start=-2, dtype=np.int32),
    "multidiscrete-2d": spaces.MultiDiscrete(
        np.array([[2, 3], [4, 5]]), start=np.array([[0, 1], [-1, 2]])
    ),
    "multidiscrete-int8": spaces.MultiDiscrete([3, 4], dtype=np.int8),
    "multibinary": spaces.MultiBinary(4),
    "multibinary-2d": spaces.MultiBinary([2, 3]),
    "nested": spaces.Dict(
        {
            "z": spaces.Tuple((spaces.Discrete(3), spaces.Box(0, 1, (2,)))),
            "a": spaces.MultiBinary(2),
        }
    ),
}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_space_round_trip_through_json(name):
    space = SPACES[name]
    description = json.loads(json.dumps(pool_files.space_to_dict(space)))
    again = pool_files.space_from_dict(description)
    assert again == space
    assert type(again) is type(space)
    if isinstance(space, spaces.Dict):
        assert isinstance(again, spaces.Dict)
        assert list(again.spaces) == list(space.spaces)  # key order kept


@pytest.mark.parametrize(
    "description",
    [{"type": "Graph"}, {"type": "Box", "low": [0]}, {"n": 3}, ["Discrete", 3], None],
)
def test_bad_space_description_is_a_value_error(description):
    with pytest.raises(ValueError, match="space"):
        pool_files.space_from_dict(description)


def _filled(
    obs: spaces.Space[Any], act: spaces.Space[Any], store_next_obs: bool = True
) -> vecpool.ReplayPool:
    pool = vecpool.ReplayPool(
        obs, act, 3, 12, window_size=2, seed=4, store_next_obs=store_next_obs
    )
    obs.seed(0)
    act.seed(1)
    for step in range(9):
        batch = [obs.sample() for _ in range(3)]
        stacked = _stack(obs, batch)
        ended = np.array([step % 4 == 3, False, step % 3 == 2])
        next_batch = [
            obs.sample() if e else b for e, b in zip(ended, batch, strict=True)
        ]
        pool.add(
            stacked,
            _stack(act, [act.sample() for _ in range(3)]),
            _stack(obs, next_batch),
            np.arange(3) + step,
            ended,
            np.zeros(3, bool),
        )
    return pool


def _stack(space: spaces.Space[Any], items: list[Any]) -> Any:
    from gymnasium.vector.utils import concatenate, create_empty_array

    out: Any = create_empty_array(space, len(items))
    return concatenate(space, items, out)


@pytest.mark.parametrize("store_next_obs", [True, False])
@pytest.mark.parametrize("name", ["box-bounds", "multidiscrete-2d", "nested"])
def test_a_saved_pool_has_no_pickle_and_loads_equal(
    tmp_path, monkeypatch, name, store_next_obs
):
    pool = _filled(SPACES[name], SPACES["discrete-start-int32"], store_next_obs)
    path = pool.save(tmp_path / "pool.npz")
    with np.load(path, allow_pickle=False) as archive:  # an object array would fail
        assert all(archive[member].dtype != object for member in archive.files)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        msg = "load() unpickled something"
        raise AssertionError(msg)

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    loaded = vecpool.ReplayPool.load(path)
    assert loaded.observation_space == pool.observation_space
    assert loaded.action_space == pool.action_space
    assert_same_data(pool.get_pool(), loaded.get_pool(), "get_pool")
    # the generator state came through: both sample the same rows
    assert_same_data(pool.sample(7), loaded.sample(7), "sample")


def _write_archive(path: Path, members: dict[str, np.ndarray]) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **members)  # type: ignore[arg-type]
    return path


def _members(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _header(members: dict[str, np.ndarray]) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(members["config"].tobytes())
    return header


def _with_header(members: dict[str, np.ndarray], **changes: Any) -> dict[str, Any]:
    header = {**_header(members), **changes}
    return {**members, "config": np.frombuffer(json.dumps(header).encode(), np.uint8)}


@pytest.fixture
def saved(tmp_path):
    pool = _filled(SPACES["box-bounds"], SPACES["discrete"], store_next_obs=False)
    return pool.save(tmp_path / "good.npz")


def _broken(saved: Path, kind: str) -> Path:
    data = saved.read_bytes()
    members = _members(saved)
    bad = saved.with_name(f"{kind}.npz")
    if kind == "empty":
        bad.write_bytes(b"")
    elif kind == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        bad.write_bytes(os.urandom(4096))
    elif kind == "flipped-byte":  # a bit rots inside an array: the CRC catches it
        (info,) = [
            i for i in zipfile.ZipFile(saved).infolist() if i.filename == "obs_0.npy"
        ]
        start = info.header_offset
        names = int.from_bytes(data[start + 26 : start + 28], "little")
        extras = int.from_bytes(data[start + 28 : start + 30], "little")
        at = start + 30 + names + extras + info.compress_size - 1  # last data byte
        bad.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
    elif kind == "plain-npy":
        np.save(bad, np.zeros(3))
        bad = bad.with_suffix(".npz.npy")
    elif kind == "other-zip":
        with zipfile.ZipFile(bad, "w") as archive:
            archive.writestr("readme.txt", "hello")
    elif kind == "no-config":
        members.pop("config")
        _write_archive(bad, members)
    elif kind == "config-not-json":
        members["config"] = np.frombuffer(b"\xff{{", np.uint8)
        _write_archive(bad, members)
    elif kind == "future-format":
        _write_archive(bad, _with_header(members, format="vecpool.ReplayPool/99"))
    elif kind == "missing-argument":
        header = _header(members)
        header.pop("pool_size")
        members["config"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
        _write_archive(bad, members)
    elif kind == "bad-argument":
        _write_archive(bad, _with_header(members, num_envs=-2))
    elif kind == "bad-space":
        _write_archive(bad, _with_header(members, action_space={"type": "Nope"}))
    elif kind == "bad-rng":
        _write_archive(bad, _with_header(members, rng={"bit_generator": "MT19937"}))
    elif kind == "missing-array":
        members.pop("reward")
        _write_archive(bad, members)
    elif kind == "wrong-dtype":
        members["terminated"] = members["terminated"].astype(np.int64)
        _write_archive(bad, members)
    elif kind == "wrong-shape":
        members["obs_0"] = members["obs_0"][:-1]
        _write_archive(bad, members)
    elif kind == "length-over-capacity":  # consistent CRCs, lying counters
        members["length"] = members["length"] + 100
        _write_archive(bad, members)
    elif kind == "end-past-the-slots":
        members["end"] = members["end"] + 100
        _write_archive(bad, members)
    elif kind == "negative-length":
        members["length"] = members["length"] - 10
        _write_archive(bad, members)
    elif kind == "own-next-out-of-range":
        members["own_next"] = members["own_next"].copy()
        members["own_next"][0] = 10**6
        _write_archive(bad, members)
    elif kind == "free-twice":
        members["free"] = np.array([0, 0], np.int64)
        _write_archive(bad, members)
    elif kind == "action-outside-the-space":  # add() refuses it: so must load()
        members["action_0"] = members["action_0"].copy()
        members["action_0"][0] = 99
        _write_archive(bad, members)
    elif kind == "recent-negative-length":
        members["recent"] = np.array([[1.0, -3.0]])
        members["recent_count"] = np.array([1], np.int64)
        _write_archive(bad, members)
    elif kind == "received-overflowing-ids":  # env + num_envs * serial: past int64
        members["received"] = np.full_like(members["received"], 2**62)
        _write_archive(bad, members)
    else:
        raise AssertionError(kind)
    return bad


BROKEN = [
    ("empty", "not a whole numpy archive"),
    ("truncated", "not a whole numpy archive"),
    ("garbage", "not a whole numpy archive"),
    ("flipped-byte", "not a whole numpy archive"),
    ("plain-npy", "single .npy array"),
    ("other-zip", "no `config` member"),
    ("no-config", "no `config` member"),
    ("config-not-json", "not JSON"),
    ("future-format", "ReplayPool/99"),
    ("missing-argument", "lacks pool_size"),
    ("bad-argument", "num_envs"),
    ("bad-space", "space"),
    ("bad-rng", "generator state"),
    ("missing-array", "no `reward` member"),
    ("wrong-dtype", "`terminated` member is int64"),
    ("wrong-shape", "`obs_0` member has shape"),
    ("length-over-capacity", "`length` member is out of range"),
    ("negative-length", "`length` member is out of range"),
    ("end-past-the-slots", "`end` member is out of range"),
    ("own-next-out-of-range", "`own_next` member is out of range"),
    ("free-twice", "`own_next/free` member is out of range"),
    ("action-outside-the-space", "`action_0` member is out of range"),
    ("recent-negative-length", "`recent` member is out of range"),
    ("received-overflowing-ids", "`received` member is out of range"),
]


@pytest.mark.parametrize(("kind", "reason"), BROKEN, ids=[k for k, _ in BROKEN])
def test_a_bad_file_is_one_value_error_naming_file_and_reason(saved, kind, reason):
    bad = _broken(saved, kind)
    with pytest.raises(ValueError, match=re.escape(reason)) as info:
        vecpool.ReplayPool.load(bad)
    assert type(info.value) is ValueError
    assert str(bad) in str(info.value)
    vecpool.ReplayPool.load(saved)  # the good one still loads


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        vecpool.ReplayPool.load(tmp_path / "nothing.npz")


def _old_arguments(pool: vecpool.ReplayPool) -> dict[str, Any]:
    """The header's arguments as formats 2 and 3 named them (``window_size_``)."""
    return {
        pool_files._OLD_NAMES.get(name, name): getattr(pool, name)
        for name in pool_files._ARGUMENTS
    }


def _pickled_format_file(pool: vecpool.ReplayPool, path: Path) -> Path:
    """A file as vecpool 0.1 wrote it: format 2, spaces and generator pickled."""
    config = {"format": "vecpool.ReplayPool/2", **_old_arguments(pool)}
    blob = pickle.dumps(
        (pool.observation_space, pool.action_space, pool.generator_state)
    )
    members = {
        "config": np.frombuffer(json.dumps(config).encode(), np.uint8),
        "objects": np.frombuffer(blob, np.uint8),
        **pool.state_dict(),
    }
    return _write_archive(path, members)


def test_an_old_pickled_file_loads_only_when_trusted(tmp_path):
    pool = _filled(SPACES["nested"], SPACES["multibinary"])
    old = _pickled_format_file(pool, tmp_path / "old.npz")
    with pytest.raises(ValueError, match=re.escape("trusted=True")):
        vecpool.ReplayPool.load(old)
    loaded = vecpool.ReplayPool.load(old, trusted=True)
    assert_same_data(pool.get_pool(), loaded.get_pool(), "trusted old file")
    # saved again, it is a pickle-free file that loads untrusted
    again = vecpool.ReplayPool.load(loaded.save(tmp_path / "new.npz"))
    assert_same_data(pool.get_pool(), again.get_pool(), "re-saved")


def _clearing_pool() -> vecpool.ReplayPool:
    pool = vecpool.ReplayPool(
        SPACES["box-bounds"], SPACES["discrete"], 2, 20, clearing_freq=4,
        clearing_size=3, seed=1,
    )  # fmt: skip
    for _ in range(5):
        pool.add(**_rows_of(pool))
    return pool


def _rows_of(pool: vecpool.ReplayPool) -> dict[str, Any]:
    obs = _stack(pool.observation_space, [pool.observation_space.sample()] * 2)
    action = _stack(pool.action_space, [pool.action_space.sample()] * 2)
    flags = np.zeros(2, bool)
    return {
        "obs": obs, "action": action, "next_obs": obs, "reward": np.ones(2),
        "terminated": flags, "truncated": flags,
    }  # fmt: skip


def test_a_file_of_format_3_loads_its_window_size__as_clearing_size(tmp_path):
    # issue 29: format 3 (before `window_size_` became `clearing_size`) stored the
    # setting under the old name; formats 4 on store the new one, and all load
    pool = _clearing_pool()
    members = _members(pool.save(tmp_path / "new.npz"))
    header = _header(members)
    assert header["format"] == pool_files.FORMAT == "vecpool.ReplayPool/7"
    assert header["clearing_size"] == 3
    assert "window_size_" not in header
    old_header = {key: value for key, value in header.items() if key != "clearing_size"}
    old_header.update(format="vecpool.ReplayPool/3", window_size_=3)
    old = _write_archive(
        tmp_path / "old.npz",
        {**members, "config": np.frombuffer(json.dumps(old_header).encode(), np.uint8)},
    )
    loaded = vecpool.ReplayPool.load(old)
    assert (loaded.clearing_freq, loaded.clearing_size) == (4, 3)
    assert_same_data(pool.get_pool(), loaded.get_pool(), "format 3")
    # it keeps clearing as the pool that wrote it: 3 oldest every 4th transition
    rows = _rows_of(pool)
    for each in (pool, loaded):
        for _ in range(3):
            each.add(**rows)
    assert_same_data(pool.get_pool(), loaded.get_pool(), "after clearing")
    assert loaded.lengths.tolist() == pool.lengths.tolist()
    # each format under its own key only: a format-3 header naming the new key
    # lacks the old one
    mixed = _with_header(members, format="vecpool.ReplayPool/3")
    with pytest.raises(ValueError, match=re.escape("its header lacks window_size_")):
        vecpool.ReplayPool.load(_write_archive(tmp_path / "mixed.npz", mixed))


def _loaded_as_format_4(pool: vecpool.ReplayPool, tmp_path: Path) -> vecpool.ReplayPool:
    """``pool`` saved, rewritten as a format-4 file (no marks, no ends), loaded."""
    members = _members(pool.save(tmp_path / "new.npz"))
    header = {key: value for key, value in _header(members).items() if key != "alpha"}
    header["format"] = "vecpool.ReplayPool/4"
    old_members = {
        name: array
        for name, array in members.items()
        if name not in ("starts", "fresh", "end")
    }
    old_members["config"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    return vecpool.ReplayPool.load(_write_archive(tmp_path / "old.npz", old_members))


def test_a_file_of_format_4_loads_with_marks_from_its_episode_ends(tmp_path):
    # issue 31: format 5 added the `starts` / `fresh` marks that n-step windows and
    # sequences stop at; a format-4 file has none, and they come from its ends
    pool = vecpool.ReplayPool(SPACES["box-bounds"], SPACES["discrete"], 2, 40, seed=1)
    rows = _rows_of(pool)
    for step in range(12):
        ended = np.array([step % 4 == 3, step % 5 == 4])
        pool.add(**{**rows, "reward": np.full(2, step + 1.0), "terminated": ended})
    loaded = _loaded_as_format_4(pool, tmp_path)
    assert loaded.alpha is None
    assert_same_data(pool.get_pool(), loaded.get_pool(), "format 4")
    # no window crosses an episode end, in the loaded pool as in the saved one
    for each in (pool, loaded):
        batch = each.sample(400, n_step=6, gamma=1.0)
        assert batch.discount.tolist() == [1.0] * 400
        for reward in batch.reward.tolist():  # consecutive rewards of one episode
            assert reward in _window_sums(), reward
    # the next row after loading starts a new stretch (what a format-4 file lost)
    loaded.add(**{**rows, "reward": np.full(2, 100.0)})
    sums = set(loaded.sample(400, n_step=2, gamma=1.0).reward.tolist())
    assert 100.0 in sums
    assert 112.0 not in sums


def test_a_file_of_format_4_exports_no_head_whose_start_it_cannot_know(tmp_path):
    # format 4 kept no marks: whether the row dropped before a sub-pool's oldest
    # ended an episode is lost, so the head is partial there (a later format
    # exports it whole where it began after a dropped end)
    pool = vecpool.ReplayPool(spaces.Box(-9, 99, (1,)), spaces.Discrete(2), 1, 3)
    for t in range(6):  # one episode of 6 steps: the oldest kept is its 4th
        value = np.array([[t]], np.float32)
        pool.add(
            value, np.array([0]), value + 1, np.ones(1), np.array([t == 5]),
            np.array([False]),
        )  # fmt: skip
    loaded = _loaded_as_format_4(pool, tmp_path)
    assert loaded.received.tolist() == [6]
    assert complete_episodes(loaded) == ([], 1)
    assert loaded.episode_starts(0, 0, 3).tolist() == [False, False, False]
    assert loaded.stretch_starts(0, 0, 3).tolist() == [True, False, False]


def _window_sums() -> set[float]:
    """Sums of up to six consecutive rewards 1..12 within episodes of env 0 or 1."""
    sums: set[float] = set()
    for period in (4, 5):
        episodes = [
            list(range(s + 1, min(s + period, 12) + 1)) for s in range(0, 12, period)
        ]
        for rewards in episodes:
            for i in range(len(rewards)):
                sums |= {float(sum(rewards[i : i + k])) for k in range(1, 7)}
    return sums


def test_a_crafted_pickle_never_runs_untrusted(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> Any:
            return (Path.touch, (marker,))

    pool = _filled(SPACES["discrete"], SPACES["discrete"])
    members = {
        **_members(_pickled_format_file(pool, tmp_path / "p.npz")),
        "objects": np.frombuffer(pickle.dumps(Payload()), np.uint8),
    }
    crafted = _write_archive(tmp_path / "crafted.npz", members)
    with pytest.raises(ValueError, match="trusted"):
        vecpool.ReplayPool.load(crafted)
    assert not marker.exists()


def test_temporary_files_of_killed_writers_are_removed_by_the_next_save(tmp_path):
    pool = _filled(SPACES["box-int"], SPACES["discrete"])
    target = tmp_path / "pool.npz"
    # a writer killed mid-save: its pid is gone, its temp file stays
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    long_ago = time.time() - 2 * STALE_AGE

    def temp(name: str, host: str, pid: int, age: float = long_ago) -> Path:
        path: Path = tmp_path / f".{name}.{host}.{pid}.7f00.tmp"
        path.write_bytes(b"x" * 100)
        os.utime(path, (age, age))
        return path

    stale = temp("pool.npz", _HOST, dead_pid)
    live = temp("pool.npz", _HOST, os.getppid())  # a running process
    fresh = temp("pool.npz", _HOST, dead_pid + 1, age=time.time())  # just written
    other_host = temp("pool.npz", "elsewhere", dead_pid)  # a shared directory
    other_target = temp("pool.npz.7", _HOST, dead_pid)  # "pool.npz.7", not ours
    pool.save(target)
    assert not stale.exists()
    for kept in (live, fresh, other_host, other_target):
        assert kept.exists(), kept.name
    assert remove_stale_temporaries(tmp_path / "pool.npz.7") == [other_target]


def _transition_bytes(pool: vecpool.ReplayPool) -> int:
    def size(tree: Any) -> int:
        if isinstance(tree, dict):
            return sum(size(value) for value in tree.values())
        if isinstance(tree, tuple):
            return sum(size(value) for value in tree)
        return int(np.asarray(tree).nbytes)

    return sum(size(field) for field in pool.get_pool())


@pytest.mark.parametrize("store_next_obs", [True, False])
def test_a_tenth_filled_pool_writes_only_its_transitions(tmp_path, store_next_obs):
    obs_space = spaces.Box(-1, 1, (4,), np.float32)
    pool = vecpool.ReplayPool(
        obs_space, spaces.Discrete(2), 8, 100_000, store_next_obs=store_next_obs
    )
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
    for step in range(1250):  # 10,000 transitions: a tenth of the capacity
        next_obs = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
        ended = rng.random(8) < 0.05
        pool.add(
            obs,
            rng.integers(0, 2, 8),
            next_obs,
            rng.random(8),
            ended,
            ~ended & (step % 97 == 0),
        )
        obs = np.where(ended[:, None], rng.uniform(-1, 1, (8, 4)), next_obs).astype(
            np.float32
        )
    assert len(pool) == 10_000
    path = pool.save(tmp_path / "tenth.npz")
    held = _transition_bytes(pool)
    assert path.stat().st_size <= 1.2 * held, (path.stat().st_size, held)
    assert path.stat().st_size < 0.2 * pool.nbytes  # the capacity is not written
    loaded = vecpool.ReplayPool.load(path)
    assert loaded.capacity == pool.capacity
    assert_same_data(pool.get_pool(), loaded.get_pool(), "tenth")
    assert_same_data(pool.sample(50), loaded.sample(50), "sample")


def test_compress_makes_a_smaller_file_with_the_same_contents(tmp_path):
    pool = _filled(SPACES["box-uint8-image"], SPACES["discrete"])
    plain = pool.save(tmp_path / "plain.npz")
    packed = pool.save(tmp_path / "packed.npz", compress=True)
    assert packed.stat().st_size < plain.stat().st_size
    for path in (plain, packed):
        assert_same_data(
            pool.get_pool(), vecpool.ReplayPool.load(path).get_pool(), path.name
        )


def _prioritized(layout: str, ring: str) -> vecpool.ReplayPool:
    """A prioritized pool of 3 frame-stacked CartPole envs whose sub-pools wrapped."""

    def make() -> Any:
        return FrameStackObservation(gym.make("CartPole-v1"), 3)

    settings: dict[str, Any] = {
        "window": {"window_size": 12},
        "clearing": {"clearing_freq": 5, "clearing_size": 2},
        "plain": {},
    }[ring]
    envs = vecpool.ReplayPoolWrapper(
        SyncVectorEnv([make] * 3),
        48,  # 16 rows a sub-pool: 70 steps go round about four times
        seed=3,
        alpha=0.6,
        store_next_obs=layout != "apart",
        frame_stack=3 if layout == "frames" else None,
        **settings,
    )
    envs.reset(seed=0)
    envs.action_space.seed(0)
    rng = np.random.default_rng(1)
    for _ in range(70):
        envs.step(envs.action_space.sample())
        if rng.random() < 0.3:  # priorities set now and then, as a learner does
            batch = envs.pool.sample(8, beta=0.4)
            envs.pool.update_priorities(batch.indices, rng.random(8) + 1e-3)
    envs.close()
    return envs.pool


@pytest.mark.parametrize("ring", ["plain", "window", "clearing"])
@pytest.mark.parametrize("layout", ["arrays", "apart", "frames"])
def test_a_loaded_prioritized_pool_draws_as_the_saved_one(tmp_path, layout, ring):
    # a file keeps each sub-pool's end (format 6), so its rows go back to the slots
    # they held, which the sum tree follows: the same draws for the same generator
    # state (format 5 put them at slots 0.. and the draws differed)
    pool = _prioritized(layout, ring)
    assert (pool.received > pool.lengths).all()  # every sub-pool wrapped
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "pool.npz"))
    assert_same_data(pool.get_pool(), loaded.get_pool(), "get_pool")
    if layout != "frames":  # a frame store's items are renumbered in a file
        before, after = pool.state_dict(), loaded.state_dict()
        assert sorted(before) == sorted(after)
        held = pool.filled_rows(before["length"], before["end"])
        for name in before:  # each held row where it was; the slots not held are
            # stale in the saved pool, but their priority is 0 in both
            if pool_files.per_row(name) and name != "priority":
                assert_same_data(before[name][held], after[name][held], name)
            else:
                assert_same_data(before[name], after[name], name)
    rng = np.random.default_rng(2)
    for draw in range(6):
        kwargs: dict[str, Any] = {"beta": 0.4}
        if draw % 2:
            kwargs.update(n_step=3, gamma=0.9)
        drawn = pool.sample(32, **kwargs)
        assert_same_data(drawn, loaded.sample(32, **kwargs), f"draw {draw}")
        priorities = rng.random(32) + 1e-3
        pool.update_priorities(drawn.indices, priorities)
        loaded.update_priorities(drawn.indices, priorities)


def test_a_file_of_format_6_loads_with_no_stretch_marked_as_going_on(tmp_path):
    # format 7 added `resumed` and `resuming`; a format-6 file has neither: a cut
    # episode that already ended cannot be told from a whole one (one still in
    # progress is marked from the episode log: the test below)
    pool = _clearing_pool()
    pool.abort_episodes([0], resumes=True)
    for ended in (False, True):
        rows = _rows_of(pool)
        pool.add(**{**rows, "terminated": np.full(2, ended)})
    members = _members(pool.save(tmp_path / "new.npz"))
    assert members["resumed"].any()
    old = {k: v for k, v in members.items() if k not in ("resumed", "resuming")}
    old = _with_header(old, format="vecpool.ReplayPool/6")
    loaded = vecpool.ReplayPool.load(_write_archive(tmp_path / "old.npz", old))
    state = loaded.state_dict()
    assert not state["resumed"].any()
    assert not state["resuming"].any()
    assert_same_data(pool.get_pool(), loaded.get_pool(), "format 6")
    again = vecpool.ReplayPool.load(tmp_path / "new.npz")  # format 7 keeps them
    for env, length in enumerate(pool.lengths.tolist()):
        marks = pool.resumed_starts(env, 0, length).tolist()
        assert again.resumed_starts(env, 0, length).tolist() == marks
    assert pool.resumed_starts(0, 0, int(pool.lengths[0])).any()


@pytest.mark.parametrize("rows_since", [0, 2])
def test_a_cut_in_progress_in_a_format_6_file_is_marked_when_loaded(
    tmp_path, rows_since
):
    # the episode log of a format-6 file knows a cut episode in progress: its
    # rest must not be exported after loading, as episode_stats does not count it
    # (found by a review of format 7)
    pool = vecpool.ReplayPool(spaces.Box(0, 99, (1,)), spaces.Discrete(2), 1, 50)

    def add(t: int, ended: bool = False) -> None:
        obs, next_obs = np.array([[t]], np.float32), np.array([[t + 1]], np.float32)
        flags = (np.array([ended]), np.array([False]))
        pool.add(obs, np.array([0]), next_obs, np.ones(1), *flags)

    for t in range(3):
        add(t)
    pool.abort_episodes([0], resumes=True)
    for t in range(5, 5 + rows_since):
        add(t)
    members = _members(pool.save(tmp_path / "new.npz"))
    old = {k: v for k, v in members.items() if k not in ("resumed", "resuming")}
    old = _with_header(old, format="vecpool.ReplayPool/6")
    for loaded in (
        vecpool.ReplayPool.load(_write_archive(tmp_path / "old.npz", old)),
        vecpool.ReplayPool.load(tmp_path / "new.npz"),
    ):
        pool = loaded
        going = 5 + rows_since  # the cut episode goes on, then ends
        for t in range(going, going + 3):
            add(t, t == going + 2)
        assert loaded.episode_stats.count == 0
        assert complete_episodes(loaded)[0] == []
        for t in range(20, 23):  # a whole one
            add(t, t == 22)
        assert loaded.episode_stats.count == 1
        assert len(complete_episodes(loaded)[0]) == 1


def test_a_file_of_format_5_loads_each_sub_pool_from_its_first_slot(tmp_path):
    # format 6 added `end`; a format-5 file has none: its rows go to slots 0.., so
    # what the pool holds and returns, and its uniform draws, are the saved pool's
    pool = _clearing_pool()
    for _ in range(4):  # round the ring, so that slot 0 is not the oldest row
        pool.add(**_rows_of(pool))
    members = _members(pool.save(tmp_path / "new.npz"))
    assert members["end"].tolist() != members["length"].tolist()
    old = {name: array for name, array in members.items() if name != "end"}
    old = _with_header(old, format="vecpool.ReplayPool/5")
    loaded = vecpool.ReplayPool.load(_write_archive(tmp_path / "old.npz", old))
    assert loaded.state_dict()["end"].tolist() == pool.lengths.tolist()
    assert_same_data(pool.get_pool(), loaded.get_pool(), "format 5")
    assert_same_data(pool.sample(9), loaded.sample(9), "uniform draws")


def _state_pool(num_envs: int = 2, pool_size: int = 100, **settings: Any):
    return vecpool.ReplayPool(
        SPACES["box-bounds"], SPACES["discrete"], num_envs, pool_size, **settings
    )


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ({"pool_size": 10}, "`state['reward']` is float64[102], this pool's is"),
        ({"num_envs": 3}, "`state['reward']` is float64[102], this pool's is"),
        ({"alpha": 0.6}, "it lacks ['max_priority', 'priority']"),
        ({"reward": "str"}, "`state['reward']` is <U32[102]"),
        ({"length": 60}, "its `length` member is out of range"),
    ],
    ids=["capacity", "num-envs", "prioritized", "reward-strings", "length"],
)
def test_load_state_dict_refuses_a_state_that_does_not_fit(target, needle):
    # it took them silently (lengths above the capacity, the wrong number of
    # sub-pools, strings for rewards) or failed after writing part of the pool
    source = _state_pool()
    for _ in range(20):
        source.add(**_rows_of(source))
    state = dict(source.state_dict())
    settings = {k: v for k, v in target.items() if k in ("pool_size", "num_envs")}
    settings |= {k: v for k, v in target.items() if k == "alpha"}
    if "reward" in target:
        state["reward"] = state["reward"].astype(str)
    if "length" in target:
        state["length"] = np.full_like(state["length"], target["length"])
    pool = _state_pool(**settings)
    if pool.num_envs == 2:
        for _ in range(3):
            pool.add(**_rows_of(pool))
    before = pool.get_pool()
    with pytest.raises(ValueError, match=re.escape(needle)):
        pool.load_state_dict(state)
    assert_same_data(before, pool.get_pool(), "nothing changed")
