"""``frame_stack``: frames stored once, every stack rebuilt bit for bit.

Differential: one env runs under ``FrameStackObservation`` and two
``ReplayPoolWrapper``s record it, one with ``frame_stack`` and one plain (each
stack stored whole); everything read back must be identical, in every autoreset
mode, with both paddings, windows, clearing, wrap-around, save/load, n-step
windows and sequences.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import FrameStackObservation

from vecpool import ReplayPool, ReplayPoolWrapper
from vecpool.testing import assert_same_data

STACK = 4


class _FramesEnv(gym.Env[npt.NDArray[Any], np.int64]):
    """Random frames, episodes of random length; float frames hold NaN and -0.0."""

    def __init__(self, dtype: str = "uint8", seed: int = 0) -> None:
        self.dtype = np.dtype(dtype)
        self.observation_space = spaces.Box(0, 255, (3, 2), self.dtype)
        self.action_space = spaces.Discrete(3)
        self._rng = np.random.default_rng(seed)
        self._left = 0

    def _frame(self) -> npt.NDArray[Any]:
        frame = self._rng.integers(0, 4, (3, 2)).astype(self.dtype)
        if self.dtype.kind == "f":
            frame[0, 0] = [np.nan, -0.0, 0.0, 1.0][self._rng.integers(4)]
        return frame

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[Any], dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._left = int(self._rng.integers(1, 9))
        return self._frame(), {}

    def step(
        self, action: np.int64
    ) -> tuple[npt.NDArray[Any], float, bool, bool, dict[str, Any]]:
        self._left -= 1
        ended = self._left <= 0
        return self._frame(), float(action), ended and bool(action % 2), ended, {}


def _make(dtype: str, padding: str) -> gym.Env[Any, Any]:
    env: gym.Env[Any, Any] = _FramesEnv(dtype)
    if padding == "zero":
        return FrameStackObservation(env, STACK, padding_type=np.zeros((3, 2), dtype))
    return FrameStackObservation(env, STACK, padding_type=padding)


def _record(
    mode: AutoresetMode,
    steps: int,
    *,
    dtype: str = "uint8",
    padding: str = "reset",
    seed: int = 0,
    **settings: Any,
) -> tuple[ReplayPool, ReplayPool]:
    """The frame pool and the plain pool that recorded the same steps."""
    envs = SyncVectorEnv(
        [functools.partial(_make, dtype, padding)] * 3, autoreset_mode=mode
    )
    frames = ReplayPoolWrapper(envs, 60, frame_stack=STACK, seed=seed, **settings)
    plain = ReplayPoolWrapper(frames, 60, seed=seed, **settings)
    rng = np.random.default_rng(seed)
    plain.reset(seed=seed)
    ended = np.zeros(3, bool)
    for _ in range(steps):
        if mode is AutoresetMode.DISABLED and ended.any():
            plain.reset(options={"reset_mask": ended})
        _, _, terminated, truncated, _ = plain.step(rng.integers(0, 3, 3))
        ended = terminated | truncated
    plain.close()
    return frames.pool, plain.pool


def _same_pools(frames: ReplayPool, plain: ReplayPool) -> None:
    assert frames.lengths.tolist() == plain.lengths.tolist()
    assert_same_data(plain.get_pool(), frames.get_pool(), "get_pool")
    expected = plain.sample(200, n_step=3, gamma=0.5)._asdict()
    got = frames.sample(200, n_step=3, gamma=0.5)._asdict()
    del expected["indices"], got["indices"]  # rows: the frame ring has more slots
    for name, value in expected.items():
        np.testing.assert_array_equal(value, got[name], err_msg=name)
    a, b = plain.sample_sequences(40, 5), frames.sample_sequences(40, 5)
    for one, other in zip(a, b, strict=True):
        np.testing.assert_array_equal(one, other)


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
@pytest.mark.parametrize("padding", ["reset", "zero"])
def test_stacks_are_rebuilt_bit_for_bit(mode: AutoresetMode, padding: str) -> None:
    frames, plain = _record(mode, 70, padding=padding)  # 20 a sub-pool: wraps
    _same_pools(frames, plain)


@pytest.mark.parametrize(
    "settings",
    [{"window_size": 6}, {"clearing_freq": 7, "clearing_size": 5}, {"alpha": 0.6}],
    ids=str,
)
def test_windows_clearing_and_priorities(settings: dict[str, Any]) -> None:
    frames, plain = _record(AutoresetMode.NEXT_STEP, 90, seed=2, **settings)
    assert frames.lengths.tolist() == plain.lengths.tolist()
    assert_same_data(plain.get_pool(), frames.get_pool(), "get_pool")


def test_float_frames_keep_nan_and_signed_zeros() -> None:
    frames, plain = _record(AutoresetMode.SAME_STEP, 50, dtype="float32", seed=1)
    stored, rebuilt = plain.get_pool(), frames.get_pool()
    for name in ("obs", "next_obs"):
        expected = getattr(stored, name).view(np.uint32)
        np.testing.assert_array_equal(getattr(rebuilt, name).view(np.uint32), expected)


def test_save_and_load_keep_frames_once(tmp_path: Any) -> None:
    frames, plain = _record(AutoresetMode.NEXT_STEP, 70, seed=3)
    path = frames.save(tmp_path / "frames.npz")
    loaded = ReplayPool.load(path)
    assert loaded.frame_stack == STACK
    assert_same_data(plain.get_pool(), loaded.get_pool(), "loaded")
    # it goes on recording where it left off
    rng = np.random.default_rng(0)
    for pool in (plain, loaded):
        rng = np.random.default_rng(0)
        for _ in range(25):
            obs = rng.integers(0, 4, (3, STACK, 3, 2)).astype(np.uint8)
            pool.add(obs, rng.integers(0, 3, 3), obs, np.ones(3),
                     np.zeros(3, bool), np.zeros(3, bool))  # fmt: skip
    assert_same_data(plain.get_pool(), loaded.get_pool(), "after loading")


def test_a_file_keeps_each_frame_once(tmp_path: Any) -> None:
    space = spaces.Box(0, 255, (STACK, 32, 32), np.uint8)
    sizes = {}
    for stack in (None, STACK):
        pool = ReplayPool(space, spaces.Discrete(2), 2, 400, frame_stack=stack)
        rng = np.random.default_rng(0)
        frames = rng.integers(0, 255, (2, 200 + STACK, 32, 32), dtype=np.uint8)
        for t in range(200):
            obs, following = frames[:, t : t + STACK], frames[:, t + 1 : t + 1 + STACK]
            pool.add(obs, np.zeros(2, np.int64), following, np.ones(2),
                     np.zeros(2, bool), np.zeros(2, bool))  # fmt: skip
        sizes[stack] = pool.save(tmp_path / f"{stack}.npz").stat().st_size
    # obs and next_obs whole: 2 * 4 frames a row; stored once: 1 frame a row
    assert sizes[STACK] < sizes[None] / 6, sizes


def test_unshifted_stacks_are_stored_whole() -> None:
    """Stacks that do not overlap their previous one: never a wrong stack."""
    space = spaces.Box(0, 255, (STACK, 2), np.uint8)
    frames = ReplayPool(space, spaces.Discrete(2), 2, 30, frame_stack=STACK)
    plain = ReplayPool(space, spaces.Discrete(2), 2, 30)
    rng = np.random.default_rng(4)
    previous = rng.integers(0, 3, (2, STACK, 2)).astype(np.uint8)
    for _ in range(40):
        obs = np.concatenate([previous[:, 1:], rng.integers(0, 3, (2, 1, 2))], axis=1)
        if rng.random() < 0.3:  # a jump: not the previous stack shifted
            obs = rng.integers(0, 3, (2, STACK, 2))
        obs = obs.astype(np.uint8)
        following = np.concatenate([obs[:, 1:], rng.integers(0, 3, (2, 1, 2))], axis=1)
        if rng.random() < 0.3:
            following = rng.integers(0, 3, (2, STACK, 2))
        following = following.astype(np.uint8)
        args = (obs, rng.integers(0, 2, 2), following, np.ones(2),
                rng.random(2) < 0.2, np.zeros(2, bool))  # fmt: skip
        frames.add(*args)
        plain.add(*args)
        previous = following if rng.random() < 0.7 else obs
    assert_same_data(plain.get_pool(), frames.get_pool(), "get_pool")


def test_a_million_atari_transitions_fit_in_8_gib() -> None:
    pool = ReplayPool(
        spaces.Box(0, 255, (4, 84, 84), np.uint8),
        spaces.Discrete(6),
        8,
        1_000_000,
        frame_stack=4,
    )
    assert pool.nbytes <= 8 * 2**30, pool.nbytes / 2**30
    plain_bytes = 1_000_000 * 2 * 4 * 84 * 84
    assert pool.nbytes < plain_bytes / 7


@pytest.mark.parametrize(
    ("space", "settings", "needle"),
    [
        (spaces.Box(0, 1, (3, 2)), {}, "first axis holds the 4 frames"),
        (spaces.Dict({"x": spaces.Box(0, 1, (4, 2))}), {}, "For Dict observations"),
        (spaces.Box(0, 1, (4, 2)), {"random": True}, "`random=True`"),
    ],
)
def test_bad_frame_stack_names_the_fix(
    space: spaces.Space[Any], settings: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        ReplayPool(space, spaces.Discrete(2), 2, 10, frame_stack=4, **settings)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_iter_pool_gives_get_pool_in_chunks(chunk: int) -> None:
    frames, plain = _record(AutoresetMode.NEXT_STEP, 40, seed=5)
    parts = list(frames.iter_pool(chunk))
    assert all(part.reward.size <= chunk for part in parts)
    joined = [np.concatenate(column) for column in zip(*parts, strict=True)]
    assert_same_data(tuple(plain.get_pool()), tuple(joined), "iter_pool")


def test_get_rows_reads_one_sub_pool() -> None:
    frames, plain = _record(AutoresetMode.SAME_STEP, 40, seed=6)
    length = int(plain.lengths[1])
    assert_same_data(
        plain.get_rows(1, 2, length), frames.get_rows(1, 2, length), "rows"
    )
    whole = plain.get_pool()
    first = int(plain.lengths[0])
    np.testing.assert_array_equal(
        plain.get_rows(1, 0, length).obs, whole.obs[first : first + length]
    )
    with pytest.raises(ValueError, match="`stop` must be an integer between 3 and"):
        frames.get_rows(1, 3, length + 1)
    with pytest.raises(ValueError, match="`env` must be an integer between 0 and 2"):
        frames.get_rows(3, 0, 1)


def test_sampled_stacks_are_read_only_views_that_share_frames() -> None:
    frames, plain = _record(AutoresetMode.NEXT_STEP, 40, seed=7)
    batch = frames.sample(64)
    assert not batch.obs.flags.writeable
    assert not batch.next_obs.flags.writeable
    assert np.shares_memory(batch.obs, batch.next_obs)  # K - 1 frames gathered once
    with pytest.raises(ValueError, match="read-only"):
        batch.obs[0, 0, 0, 0] = 1
    mutable = batch.obs.copy()  # what to do to change them
    mutable[0] = 0
    expected = plain.sample(64)  # the same draws: the same generator state
    np.testing.assert_array_equal(batch.next_obs, expected.next_obs)


def _jumps(rng: np.random.Generator, count: int) -> npt.NDArray[np.uint8]:
    return rng.integers(0, 255, (count, 3, 2), dtype=np.uint8)


def _used(data: Any, owners: tuple[str, ...]) -> int:
    owned = np.concatenate([data[name][data[name] >= 0] for name in owners])
    return int(np.unique(owned).size)


def test_a_file_holds_only_frames_of_rows_held(tmp_path: Path) -> None:
    """The frame store's items of rows already dropped stay out of a file (issue 39).

    The store frees an item when its row is written over, not when it is dropped.
    """
    space = spaces.Box(0, 255, (3, 2), np.uint8)
    pool = ReplayPool(space, spaces.Discrete(2), 2, 12, window_size=3, frame_stack=3,
                      seed=2)  # fmt: skip
    rng = np.random.default_rng(5)
    for step in range(40):  # every stack a jump, every next stack odd: kept whole
        done = np.array([step % 5 == 4, False])
        pool.add(_jumps(rng, 2), np.zeros(2, np.int64), _jumps(rng, 2),
                 np.ones(2), done, np.zeros(2, bool))  # fmt: skip
    path = pool.save(tmp_path / "pool.npz")
    with np.load(path) as data:
        assert data["wholes"].shape[0] == _used(data, ("own_obs", "own_next_whole"))
        assert data["loose"].shape[0] == _used(data, ("own_next_frame",))
        assert data["wholes_free"].size == data["loose_free"].size == 0
    loaded = ReplayPool.load(path)
    for mine, theirs in zip(pool.get_pool(), loaded.get_pool(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    for mine, theirs in zip(pool.sample(16), loaded.sample(16), strict=True):
        np.testing.assert_array_equal(mine, theirs)
