"""Faults in pool files (review of 123f2a2): forged headers, lying arrays, races.

Every bad file must be one ValueError naming the file (vecpool.replay.files.read);
Each test once exposed a bug (now fixed) or pins down verified behaviour.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
from gymnasium import spaces

import vecpool
from vecpool._util.files import write_atomically
from vecpool.testing import assert_same_data


def _pool(
    obs: spaces.Space[Any] | None = None, store_next_obs: bool = True
) -> vecpool.ReplayPool:
    obs = obs if obs is not None else spaces.Box(0, 1, (2,), np.float32)
    pool = vecpool.ReplayPool(
        obs, spaces.Discrete(3), 2, 8, seed=0, store_next_obs=store_next_obs
    )
    obs.seed(0)
    for step in range(6):
        batch = [obs.sample() for _ in range(2)]
        stacked = _stack(obs, batch)
        ended = np.array([step % 3 == 2, False])
        nxt = _stack(
            obs, [obs.sample() if e else b for e, b in zip(ended, batch, strict=True)]
        )
        pool.add(
            stacked,
            np.array([1, 2]),
            nxt,
            np.ones(2),
            ended,
            np.zeros(2, bool),
        )
    return pool


def _stack(space: spaces.Space[Any], items: list[Any]) -> Any:
    from gymnasium.vector.utils import concatenate, create_empty_array

    out: Any = create_empty_array(space, len(items))
    return concatenate(space, items, out)


def _members(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _write(path: Path, members: dict[str, np.ndarray]) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **members)  # type: ignore[arg-type]
    return path


def _config(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def _with_header(members: dict[str, np.ndarray], **changes: Any) -> dict[str, Any]:
    header = {**json.loads(members["config"].tobytes()), **changes}
    return {**members, "config": _config(json.dumps(header).encode())}


@pytest.fixture
def good(tmp_path: Path) -> dict[str, np.ndarray]:
    return _members(_pool().save(tmp_path / "good.npz"))


def _refused(path: Path, trusted: bool = False) -> str:
    """Assert that loading ``path`` is a ValueError naming it; return its message."""
    with pytest.raises(ValueError, match="Cannot load") as info:
        vecpool.ReplayPool.load(path, trusted=trusted)
    assert os.fspath(path) in str(info.value)
    return str(info.value)


# -- bugs ------------------------------------------------------------------------------


def test_an_unsorted_dict_space_loads_with_each_key_own_data(tmp_path):
    obs = spaces.Dict(
        [
            ("b", spaces.Box(0, 1, (2,), np.float32)),
            ("a", spaces.Box(0, 1, (2,), np.float32)),
        ]
    )
    pool = vecpool.ReplayPool(obs, spaces.Discrete(2), 1, 4)
    batch = {
        "b": np.full((1, 2), 0.25, np.float32),
        "a": np.full((1, 2), 0.75, np.float32),
    }
    pool.add(batch, np.array([1]), batch, np.zeros(1), *np.zeros((2, 1), bool))
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "dict.npz"))
    assert isinstance(loaded.observation_space, spaces.Dict)
    assert list(loaded.observation_space.spaces) == ["b", "a"]
    assert_same_data(pool.get_pool(), loaded.get_pool(), "get_pool")


def test_a_save_never_deletes_the_live_temporary_of_another_target(tmp_path):
    other = tmp_path / "ckpt.2000000000"  # a name ending in digits (a step count)

    def write(handle: IO[bytes]) -> None:
        handle.write(b"x")
        _pool().save(tmp_path / "ckpt")  # another save, meanwhile, beside it

    write_atomically(other, write)  # FileNotFoundError: its temp file was deleted
    assert other.read_bytes() == b"x"


_HUGE = 10**30


@pytest.mark.parametrize(
    "changes",
    [
        {"action_space": {"type": "Discrete", "n": _HUGE, "start": 0, "dtype": "<i8"}},
        {
            "action_space": {
                "type": "MultiDiscrete",
                "nvec": [_HUGE],
                "start": [0],
                "dtype": "<i8",
            }
        },
        {
            "observation_space": {
                "type": "Box",
                "low": [_HUGE, 0],
                "high": [1, 1],
                "shape": [2],
                "dtype": "<i8",
            }
        },
        {"rng": "negative-state"},
        {"rng": "huge-state"},
    ],
    ids=["discrete-n", "multidiscrete-nvec", "box-low", "rng-negative", "rng-huge"],
)
def test_huge_ints_in_the_header_are_a_value_error(tmp_path, good, changes):
    if "rng" in changes:
        rng = json.loads(good["config"].tobytes())["rng"]
        value = -1 if changes["rng"] == "negative-state" else 10**60
        changes = {"rng": {**rng, "state": {"state": value, "inc": 1}}}
    _refused(_write(tmp_path / "huge.npz", _with_header(good, **changes)))


@pytest.mark.parametrize("kind", ["json", "tuple"])
def test_a_deeply_nested_header_is_a_value_error(tmp_path, good, kind):
    if kind == "json":
        members = {**good, "config": _config(b"[" * 100_000 + b"]" * 100_000)}
    else:
        header = json.loads(good["config"].tobytes())
        header.pop("action_space")
        leaf = '{"type": "Discrete", "n": 2, "start": 0, "dtype": "<i8"}'
        nested = '{"type": "Tuple", "spaces": [' * 5000 + leaf + "]}" * 5000
        text = json.dumps(header)[:-1] + ', "action_space": ' + nested + "}"
        members = {**good, "config": _config(text.encode())}
    _refused(_write(tmp_path / "deep.npz", members))


def test_a_header_far_larger_than_its_arrays_is_a_value_error(tmp_path, good):
    # 2**47 envs: 1 PiB of row indices, more than any address space
    members = _with_header(good, num_envs=2**47, pool_size=2**47)
    _refused(_write(tmp_path / "big.npz", members))


@pytest.mark.parametrize(
    "blob",
    [pickle.dumps(5), b"\x80\x04garbage", b""],
    ids=["not-iterable", "garbage", "empty"],
)
def test_a_bad_trusted_pickle_is_a_value_error(tmp_path, good, blob):
    members = _with_header(good, format="vecpool.ReplayPool/2")
    members["objects"] = np.frombuffer(blob, np.uint8)
    _refused(_write(tmp_path / "old.npz", members), trusted=True)


@pytest.mark.parametrize("count", [np.nan, np.inf, -5.0])
def test_episode_counters_that_lie_are_refused(tmp_path, good, count):
    members = {**good, "episodes": np.array([count, 1.0, 1.0])}
    path = _write(tmp_path / "episodes.npz", members)
    message = _refused(path)
    assert "its `episodes` member is out of range" in message


def test_a_header_clearing_freq_beyond_int64_is_refused(tmp_path, good):
    path = _write(
        tmp_path / "cf.npz", _with_header(good, clearing_freq=_HUGE, clearing_size=1)
    )
    message = _refused(path)
    assert f"its header's `clearing_freq` is {_HUGE}, not a count" in message


# -- verified behaviour ----------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [b"[1, 2]", b'"text"', b"null", b'{"format": {"a": 1}}', b"\xff\xfe"],
    ids=["list", "string", "null", "format-dict", "not-utf8"],
)
def test_a_header_that_is_not_an_object_is_a_value_error(tmp_path, good, config):
    _refused(_write(tmp_path / "hdr.npz", {**good, "config": _config(config)}))


@pytest.mark.parametrize(
    "changes",
    [
        {"num_envs": -1},
        {"num_envs": True},
        {"num_envs": "2"},
        {"pool_size": 2.0},
        {"window_size": _HUGE},
        {"pool_size": 2**62},
        {
            "observation_space": {
                "type": "Box",
                "low": [float("nan"), 0],
                "high": [1, 1],
                "shape": [2],
                "dtype": "<f4",
            }
        },
        {
            "observation_space": {
                "type": "Box",
                "low": 0,
                "high": 1,
                "shape": [-2],
                "dtype": "<f4",
            }
        },
        {"rng": {"bit_generator": "MT19937", "state": {"key": [0], "pos": 0}}},
        {"rng": [1]},
    ],
)
def test_bad_header_values_are_a_value_error(tmp_path, good, changes):
    _refused(_write(tmp_path / "bad.npz", _with_header(good, **changes)))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("received", np.array([-1, -1])),
        ("episode_length", np.array([-1, 0])),
        ("length", np.array([9, 0])),
        ("length", np.array([0, -1])),  # (files hold no `end`: rows start at 0)
    ],
)
def test_counters_that_lie_are_a_value_error(tmp_path, good, name, value):
    _refused(_write(tmp_path / "lie.npz", {**good, name: value}))


def test_a_wrong_tuple_shape_in_a_trusted_pickle_is_a_value_error(tmp_path, good):
    members = _with_header(good, format="vecpool.ReplayPool/2")
    members["objects"] = np.frombuffer(pickle.dumps((1, 2)), np.uint8)
    _refused(_write(tmp_path / "old.npz", members), trusted=True)


def test_extra_members_of_the_wrong_size_are_a_value_error(tmp_path):
    obs = spaces.Dict(
        {"a": spaces.Box(0, 1, (2,), np.float32), "b": spaces.Discrete(4)}
    )
    pool = _pool(obs, store_next_obs=False)
    path = pool.save(tmp_path / "sno.npz")
    members = _members(path)
    assert members["extra_0"].shape[0] > 0  # episode ends were kept apart
    assert_same_data(pool.get_pool(), vecpool.ReplayPool.load(path).get_pool(), "ok")
    # one leaf's store shorter than the other's
    shorter = {**members, "extra_0": members["extra_0"][:1]}
    _refused(_write(tmp_path / "short0.npz", shorter))
    # both shorter than the slots own_next points at
    both = {
        **members,
        "extra_0": members["extra_0"][:0],
        "extra_1": members["extra_1"][:0],
    }
    _refused(_write(tmp_path / "short.npz", both))


def test_a_directory_is_an_os_error_and_saving_over_one_leaves_nothing(tmp_path):
    with pytest.raises(IsADirectoryError):
        vecpool.ReplayPool.load(tmp_path)
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError):
        _pool().save(tmp_path / "adir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]
    assert list((tmp_path / "adir").iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only dirs")
def test_saving_into_a_read_only_directory_is_a_permission_error(tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        with pytest.raises(PermissionError):
            _pool().save(directory / "pool.npz")
    finally:
        directory.chmod(0o755)


def test_concurrent_saves_to_one_target_all_succeed(tmp_path):
    """Two processes saving one target: no writer loses its temporary file."""
    target = tmp_path / "shared.npz"
    script = textwrap.dedent(
        f"""
        import numpy as np
        from gymnasium import spaces
        import vecpool
        pool = vecpool.ReplayPool(
            spaces.Box(0, 1, (64,), np.float32), spaces.Discrete(2), 2, 2000
        )
        for _ in range(25):
            pool.save({os.fspath(target)!r})
        """
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors = [writer.communicate(timeout=100)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], errors
    assert len(vecpool.ReplayPool.load(target)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.npz"]
