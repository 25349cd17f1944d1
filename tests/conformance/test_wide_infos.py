"""Large info arrays through shared memory merge exactly as Gymnasium's Sync.

An info too large for its env's row in the shared block (a frame, a depth map,
``BigInfoEnv``'s 1 MiB array) goes pickled on its first steps; the worker then
offers a memory area of its own for such infos (vecpool/_wire/wide_infos.py), and
once the parent has mapped it, later steps come through it. The results must be
Gymnasium's in every autoreset mode and placement, through the switch, when the
arrays grow, when only some envs have the key, and across a worker restart; the
arrays handed out must be fresh.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from vecpool._wire.info_columns import INFO_ROW_BYTES, InfoSchema
from vecpool._wire.wide_infos import WIDE_INFOS, WideArea
from vecpool.testing import assert_same_data, assert_same_partial_reset

MODES = list(AutoresetMode)
NUM_ENVS = 4

needs_wide = pytest.mark.skipif(
    not WIDE_INFOS, reason="no memfd here: large infos stay pickled"
)


class WideInfoEnv(gym.Env):
    """Step infos with a large array: a larger one from step 12, odd envs skip it.

    The larger array comes under another key (``frame8192``, not ``frame4096``):
    envs reach step 12 at different vector steps (resets), and Gymnasium cannot
    merge arrays of two shapes under one key.

    Values depend on the env, the step and the action, so rows of another env or
    step show. Episodes end at random (terminated) or after 17 steps (truncated).
    """

    observation_space = gym.spaces.Box(0, 255, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, index: int, size: int = 4096, grow_at: int = 12) -> None:
        self.index, self.size, self.grow_at = index, size, grow_at
        self.t = self.total = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"start": self.index}

    def step(self, action):
        self.t += 1
        self.total += 1
        size = self.size * (2 if self.total >= self.grow_at else 1)
        value = (self.index * 31 + self.t * 7 + int(action)) % 256
        frame = np.full(size, value, np.uint8)
        frame[self.t % size] = 255
        info: dict[str, Any] = {"steps": self.total, "t": self.t}
        if self.index % 2 == 0 or self.t % 2 == 0:
            info[f"frame{size}"] = frame
            info["depth"] = frame[:64].astype(np.float32).reshape(8, 8) / 3
        terminated = bool(self.np_random.random() < 0.05)
        obs = np.array([self.t, self.index], np.float32)
        return obs, float(self.t), terminated, self.t >= 17, info


def _fns(**kwargs):
    return [functools.partial(WideInfoEnv, index=i, **kwargs) for i in range(NUM_ENVS)]


def _wide_in_use(env) -> bool:
    return any(handle.info_wide is not None for handle in env._group.handles)


SAME_STEP_KEYS = {"final_obs", "_final_obs", "final_info", "_final_info"}


def _keys(infos):
    """Top-level keys in order, less SAME_STEP's ``final_*`` (Sync and Async put
    them in different orders; vecpool follows Async, its drop-in target)."""
    return [key for key in infos if key not in SAME_STEP_KEYS]


def _lockstep(reference, candidate, steps, seed=0):
    assert_same_data(reference.reset(seed=seed), candidate.reset(seed=seed), "reset")
    rng = np.random.default_rng(seed)
    wide_steps = 0
    for step in range(steps):
        actions = rng.integers(0, 3, NUM_ENVS)
        expected = reference.step(actions)
        actual = candidate.step(actions)
        assert_same_data(expected, actual, f"step {step}")
        assert _keys(expected[4]) == _keys(actual[4]), f"step {step}: key order"
        wide_steps += int(_wide_in_use(candidate))
        assert_same_partial_reset(reference, candidate, expected, f"step {step}")
    return wide_steps


def test_a_large_array_makes_a_wide_schema():
    info = {"n": 1, "frame": np.zeros(INFO_ROW_BYTES * 10, np.uint8)}
    schema = InfoSchema.learn(info)
    assert schema is not None
    assert schema.nbytes == 8 + INFO_ROW_BYTES * 10
    assert schema.wide


@needs_wide
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_wide_infos_match_sync(mode, make_placed, make_sync):
    reference = make_sync(_fns(), autoreset_mode=mode)
    candidate = make_placed(_fns(), autoreset_mode=mode)
    wide_steps = _lockstep(reference, candidate, steps=40)
    assert wide_steps > 20  # the areas were offered, mapped and used


@needs_wide
def test_wide_infos_without_shared_observations(make_placed, make_sync):
    reference = make_sync(_fns())
    candidate = make_placed(_fns(), shared_memory=False)
    assert _lockstep(reference, candidate, steps=30) > 10


@needs_wide
def test_the_wide_arrays_handed_out_are_fresh(make_placed):
    env = make_placed(_fns(size=1 << 16, grow_at=10**9))
    env.reset(seed=0)
    for _ in range(4):  # past the offer: the frames come through the wide rows
        _, _, _, _, infos = env.step(np.zeros(NUM_ENVS, np.int64))
    assert _wide_in_use(env)
    key = f"frame{1 << 16}"
    kept = infos[key].copy()
    for _ in range(3):
        env.step(np.full(NUM_ENVS, 2, np.int64))
    np.testing.assert_array_equal(infos[key], kept)
    infos[key][:] = 0  # the user's to change
    _, _, _, _, later = env.step(np.ones(NUM_ENVS, np.int64))
    assert later[key][later[f"_{key}"]].any()


@needs_wide
@pytest.mark.needs_worker_process
def test_wide_infos_after_a_worker_restart(make_placed):
    env = make_placed(_fns(grow_at=10**9), on_worker_crash="restart")
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.zeros(NUM_ENVS, np.int64))
    assert _wide_in_use(env)
    os.kill(env._group.handles[0].process.pid, signal.SIGKILL)
    with pytest.warns(UserWarning, match="restart"):
        steps = [env.step(np.ones(NUM_ENVS, np.int64)) for _ in range(20)]
    checked = 0
    for step, (_, _, _, _, infos) in enumerate(steps):
        mask = infos.get("_frame4096", np.zeros(NUM_ENVS, bool))
        for i in np.flatnonzero(mask):
            t = int(infos["t"][i])
            expected = np.full(4096, (i * 31 + t * 7 + 1) % 256, np.uint8)
            expected[t % 4096] = 255
            np.testing.assert_array_equal(infos["frame4096"][i], expected, f"{step}")
            checked += 1
    assert checked > 20
    assert _wide_in_use(env)  # the replacement offered its own area


# -- found by a review of the wide rows: each failed (or leaked) before its fix -------


def _frame(index: int, t: int, size: int) -> np.ndarray:
    frame = np.full(size, (index * 31 + t * 7) % 251 + 1, np.uint8)
    frame[t % size] = 255
    return frame


class ScriptEnv(gym.Env):
    """Step infos of the size ``script(index, t)`` says; ``t`` in ``fail_at`` raises."""

    observation_space = gym.spaces.Box(0, 255, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, index, sizes, fail_at=(), slow_at=()):
        self.index, self.sizes, self.t = index, sizes, 0
        self.fail_at, self.slow_at = fail_at, slow_at

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if (self.index, self.t) in self.slow_at:
            time.sleep(0.5)
        if (self.index, self.t) in self.fail_at:
            msg = f"boom {self.index} {self.t}"
            raise RuntimeError(msg)
        size = self.sizes(self.index, self.t)
        info: dict[str, Any] = {
            "t": self.t,
            f"f{size}": _frame(self.index, self.t, size),
        }
        return np.array([self.t, self.index], np.float32), 0.0, False, False, info


def _check_frames(infos) -> int:
    """Check every frame against its env's (``env_id`` names a batch's rows)."""
    env_of = infos.get("env_id", np.arange(NUM_ENVS))
    checked = 0
    for key in infos:
        if key.startswith("f") and key[1:].isdigit():
            for i in np.flatnonzero(infos[f"_{key}"]):
                t = int(infos["t"][i])
                env = int(env_of[i])
                np.testing.assert_array_equal(
                    infos[key][i], _frame(env, t, int(key[1:])), f"{key} env {env}"
                )
                checked += 1
    return checked


def _growing(index, t):
    # env 0 grows twice (two offers); env 1 stays small
    if index == 0:
        return 4096 if t < 5 else 8192 if t == 5 else 16384
    return 4096


# Not over placements (nor the next two): each is about a worker's own area, offered
# in a reply that another env of the same worker loses (an error, a timeout), or
# mapped in a forked worker.
@needs_wide
def test_an_offer_lost_to_an_env_error_never_shows_stale_rows(make_async):
    fns = [
        functools.partial(ScriptEnv, i, _growing, fail_at={(1, 6)}) for i in range(2)
    ]
    env = make_async(fns, num_workers=1)
    env.reset(seed=0)
    checked = 0
    for step in range(1, 16):
        # step 6's actions go by pipe (a list), and env 1 raises in it
        if step == 6:
            with (
                pytest.warns(UserWarning, match="ERROR"),
                pytest.raises(RuntimeError, match="boom 1 6"),
            ):
                env.step([0, 0])
            continue
        *_, infos = env.step(np.zeros(2, np.int64))
        checked += _check_frames(infos)
    assert checked > 20
    assert _wide_in_use(env)  # offered again, and accepted


@needs_wide
def test_an_offer_lost_to_a_timeout_never_shows_stale_rows(make_async):
    fns = [
        functools.partial(ScriptEnv, i, _growing, slow_at={(0, 6)}) for i in range(2)
    ]
    env = make_async(fns, num_workers=1)
    env.reset(seed=0)
    checked = 0
    for step in range(1, 16):
        env.step_async([0, 0] if step in (5, 6) else np.zeros(2, np.int64))
        try:
            *_, infos = env.step_wait(timeout=0.2 if step == 6 else None)
        except multiprocessing.TimeoutError:
            assert step == 6
            time.sleep(0.6)  # the given-up reply (with its offer) comes, unread
            continue
        checked += _check_frames(infos)
    assert checked > 15
    assert _wide_in_use(env)


@needs_wide
def test_actions_by_pipe_accept_offers_too(make_placed):
    env = make_placed(_fns(grow_at=10**9))
    env.reset(seed=0)
    for _ in range(4):
        env.step([0] * NUM_ENVS)  # a list: the actions travel pickled
    assert _wide_in_use(env)


def _maps_of(pid: int | str = "self") -> int:
    """Bytes of wide-info areas mapped in process ``pid``."""
    with open(f"/proc/{pid}/maps") as maps:
        spans = [line.split()[0] for line in maps if "vecpool-infos" in line]
    return sum(int(b, 16) - int(a, 16) for a, b in (s.split("-") for s in spans))


@needs_wide
def test_close_unmaps_the_wide_areas(make_placed):
    env = make_placed(_fns(size=1 << 20, grow_at=10**9))
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.zeros(NUM_ENVS, np.int64))
    assert _maps_of() >= NUM_ENVS << 20
    env.close()
    gc.collect()
    assert _maps_of() == 0  # the env object itself is still alive


@needs_wide
def test_a_forked_worker_does_not_keep_other_workers_areas(make_async):
    first = make_async(_fns(size=1 << 20, grow_at=10**9), num_workers=2, context="fork")
    first.reset(seed=0)
    for _ in range(3):
        first.step(np.zeros(NUM_ENVS, np.int64))
    assert _wide_in_use(first)
    second = make_async(_fns(size=16, grow_at=10**9), num_workers=2, context="fork")
    for handle in second._group.handles:
        assert _maps_of(handle.process.pid) == 0


def test_an_info_that_grows_every_step_gets_few_offers():
    area = WideArea(2)
    offers = 0
    for nbytes in range(8 * 41, 8 * 441, 8):  # a float64 more on every step
        if not area.want(nbytes):
            offer = area.offer()
            if offer is not None:
                offers += 1
                area.accept(offer.serial)
    assert area.stride >= 8 * 440
    assert offers <= 8


def test_one_oversized_info_does_not_stop_later_offers():
    area = WideArea(32)
    assert not area.want(40 << 20)  # 32 x 40 MiB: more than any area holds
    assert area.offer() is None
    assert not area.want(8192)
    offer = area.offer()
    assert offer is not None
    assert offer.stride >= 8192


@needs_wide
def test_send_recv_batches_read_wide_rows(make_placed):
    fns = [functools.partial(ScriptEnv, i, lambda index, t: 4096) for i in range(4)]
    env = make_placed(fns, batch_size=2)
    env.reset(seed=0)
    for _ in range(3):  # full steps: the areas are offered and accepted
        env.step(np.zeros(4, np.int64))
    assert _wide_in_use(env)
    env.send(np.zeros(4, np.int64))
    checked = 0
    for _ in range(30):
        *_, infos = env.recv()
        checked += _check_frames(infos)
        env.send(np.zeros(len(infos["env_id"]), np.int64), infos["env_id"])
    assert checked == 60
