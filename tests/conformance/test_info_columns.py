"""Step infos through shared memory merge exactly as Gymnasium's SyncVectorEnv.

vecpool/_wire/info_columns.py carries the infos it can in shared memory and the
rest pickled; :class:`vecpool.testing.InfoKindsEnv` mixes both on every step
(numbers of every kind, arrays, casts between envs, other key orders, strings,
nested dicts, ``np.bool_``, big ints). The merged infos must equal Gymnasium's,
key order and dtypes included, in every autoreset mode and worker layout.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from vecpool._wire.info_columns import (
    INFO_ROW_BYTES,
    INFO_WIDE_MAX_BYTES,
    InfoSchema,
)
from vecpool.testing import InfoKindsEnv, assert_same_data, assert_same_partial_reset

MODES = list(AutoresetMode)
NUM_ENVS = 4


def _fns(atari: bool = False) -> list[functools.partial[InfoKindsEnv]]:
    return [
        functools.partial(InfoKindsEnv, index=i, atari=atari) for i in range(NUM_ENVS)
    ]


SAME_STEP_KEYS = {"final_obs", "_final_obs", "final_info", "_final_info"}


def _keys(infos, prefix=""):
    """Every key path of a merged info dict, in order (nested dicts included).

    SAME_STEP's ``final_*`` keys are left out: Gymnasium's Sync and Async envs put
    them in different orders (vecpool follows Async, its drop-in target).
    """
    paths = []
    for key, value in infos.items():
        if not prefix and key in SAME_STEP_KEYS:
            continue
        paths.append(prefix + key)
        if isinstance(value, dict):
            paths.extend(_keys(value, prefix + key + "."))
    return paths


def _lockstep(reference, candidate, steps, seed=0):
    assert_same_data(reference.reset(seed=seed), candidate.reset(seed=seed), "reset")
    rng = np.random.default_rng(seed)
    columned = 0
    for step in range(steps):
        actions = rng.integers(0, 2, NUM_ENVS)
        expected = reference.step(actions)
        actual = candidate.step(actions)
        assert_same_data(expected, actual, f"step {step}")
        assert _keys(expected[4]) == _keys(actual[4]), f"step {step}: key order"
        columned += int(np.count_nonzero(candidate._buffers.infos.info_ids))
        assert_same_partial_reset(reference, candidate, expected, f"step {step}")
    return columned


@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_mixed_infos_match_sync(mode, make_placed, make_sync):
    reference = make_sync(_fns(), autoreset_mode=mode)
    candidate = make_placed(_fns(), autoreset_mode=mode)
    columned = _lockstep(reference, candidate, steps=60)
    assert columned > 0  # some infos went through shared memory


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_regular_infos_go_through_shared_memory(
    mode, shared_memory, make_placed, make_sync
):
    reference = make_sync(_fns(atari=True), autoreset_mode=mode)
    candidate = make_placed(
        _fns(atari=True), autoreset_mode=mode, shared_memory=shared_memory
    )
    columned = _lockstep(reference, candidate, steps=40)
    # every step but the NEXT_STEP reset rows came through the columns
    assert columned >= 40 * NUM_ENVS // 2


def test_the_arrays_handed_out_are_fresh(make_placed):
    env = make_placed(_fns(atari=True))
    env.reset(seed=0)
    _, _, _, _, first = env.step(np.zeros(NUM_ENVS, np.int64))
    kept = {key: value.copy() for key, value in first.items()}
    for _ in range(3):
        env.step(np.ones(NUM_ENVS, np.int64))
    for key, value in kept.items():
        np.testing.assert_array_equal(first[key], value, err_msg=key)
    first["lives"][:] = -1  # the user's to change
    _, _, _, _, later = env.step(np.zeros(NUM_ENVS, np.int64))
    assert (later["lives"] >= 0).all()


def test_a_replaced_schema_is_never_mistaken_for_another(make_placed, make_sync):
    # the same keys with other types on alternate episodes: new schemas, new ids
    reference = make_sync(_fns(), autoreset_mode=AutoresetMode.SAME_STEP)
    candidate = make_placed(_fns(), autoreset_mode=AutoresetMode.SAME_STEP)
    _lockstep(reference, candidate, steps=120, seed=3)


def test_what_cannot_go_in_a_row_is_refused():
    assert InfoSchema.learn({"name": "pong"}) is None
    assert InfoSchema.learn({"episode": {"r": 1.0}}) is None
    assert InfoSchema.learn({"final_obs": np.zeros(2)}) is None
    assert InfoSchema.learn({"big": 2**63}) is None
    assert InfoSchema.learn({"flag": np.bool_(True)}) is None
    assert InfoSchema.learn({1: 2}) is None
    assert InfoSchema.learn({"objects": np.array([None])}) is None
    huge = np.broadcast_to(np.uint8(0), (INFO_WIDE_MAX_BYTES + 1,))  # no memory
    assert InfoSchema.learn({"huge": huge}) is None
    assert InfoSchema.learn({}) is None
    schema = InfoSchema.learn({"n": 2**63 - 1, "x": 0.5})
    assert schema is not None
    row = np.zeros(INFO_ROW_BYTES, np.uint8)
    assert schema.write({"n": 2**63 - 1, "x": 0.5}, row.data, 0)
    assert not schema.write({"n": 2**63, "x": 0.5}, row.data, 0)  # out of range
    assert not schema.write({"x": 0.5, "n": 1}, row.data, 0)  # another order
    assert not schema.write({"n": 1, "x": 1}, row.data, 0)  # an int, not a float


def test_merge_matches_gymnasium_add_info():
    info = {"lives": 3, "x": np.float32(0.25), "v": np.arange(3, dtype=np.int16)}
    schema = InfoSchema.learn(info)
    assert schema is not None
    rows = np.zeros((2, INFO_ROW_BYTES), np.uint8)
    for row in rows:
        assert schema.write(info, row.data, 0)
    envs = np.array([1, 3])
    merged = schema.merge(rows, envs, 4)
    sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    expected: dict[str, Any] = {}
    for env in envs.tolist():
        expected = sync._add_info(expected, info, env)
    sync.close()
    assert_same_data(expected, merged, "merged")
    assert list(expected) == list(merged)


def test_merge_of_every_env_matches_gymnasium_add_info():
    info = {"": 1.5, "x y": np.float32(0.25), "v": np.ones((2, 2), np.uint8)}
    schema = InfoSchema.learn(info)
    assert schema is not None
    rows = np.zeros((4, INFO_ROW_BYTES), np.uint8)
    for row in rows:
        assert schema.write(info, row.data, 0)
    merged = schema.merge(rows, np.arange(4), 4)
    sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    expected: dict[str, Any] = {}
    for env in range(4):
        expected = sync._add_info(expected, info, env)
    sync.close()
    assert_same_data(expected, merged, "merged")
    assert list(expected) == list(merged)
    merged["x y"][0] = 9  # fresh arrays, not views of the rows
    assert schema.decode(rows[0])["x y"] == 0.25


class _InfoEnv(gym.Env):
    """Returns ``make_info(t)`` as its step info (built in the worker)."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, make_info):
        self.make_info, self.t = make_info, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 0.0, False, False, self.make_info(self.t)


def _scalar_subclass(t):
    class Float(np.float32):  # a local class: its type cannot be pickled by name
        pass

    return {"f": Float(t / 2)}


def _mask_named_key(t):
    return {"x": t, "_x": t + 2}


def _mask_named_key_first(t):
    return {"_x": t + 2, "x": t}


def _huge_empty_array(t):
    return {"a": np.zeros((0, 2**40), np.uint8), "b": t}


def _longlong(t):
    # an object array (np.bool_ first), so each value is kept as the env gave it
    return {"o": np.bool_(t % 2)} if t % 3 == 0 else {"o": np.longlong(t)}


def _strings(t):
    return {"name": f"s{t}", "t": t}


# found by a reviewer of the info columns: each of these differed from Gymnasium
# (or made step() raise) before its fix
@pytest.mark.parametrize(
    "make_info",
    [
        _scalar_subclass,
        _mask_named_key,
        _mask_named_key_first,
        _huge_empty_array,
        _longlong,
        _strings,
    ],
)
def test_odd_infos_match_sync(make_info, make_placed, make_sync):
    fns = [functools.partial(_InfoEnv, make_info)] * 2
    reference = make_sync(fns)
    candidate = make_placed(fns)
    assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
    for step in range(7):
        actions = np.zeros(2, np.int64)
        expected, actual = reference.step(actions), candidate.step(actions)
        assert_same_data(expected, actual, f"step {step}")
        assert _keys(expected[4]) == _keys(actual[4]), f"step {step}: key order"
