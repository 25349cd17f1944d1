"""Hybrid observations: array leaves in shared memory, the other leaves pickled.

With ``shared_memory="auto"`` (the default), a Dict/Tuple observation whose leaves
are partly arrays (Box, Discrete, ...) and partly spaces shared memory cannot hold
(Text, Graph, Sequence, OneOf, a custom space such as MiniGrid's mission) sends
its array leaves through shared memory and only the other leaves pickled in the
worker's reply (vecpool/_engine/observations.py, vecpool/_worker/host.py). Every
result must be ``SyncVectorEnv``'s, bit for bit, in every autoreset mode, placement
and ``copy`` setting, through ``send``/``recv`` and a worker restart.
"""

from __future__ import annotations

import copy
import functools
import os
import signal
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import iterate

from vecpool.errors import VecPoolWarning
from vecpool.testing import (
    MissionEnv,
    MixedLeavesEnv,
    assert_same_data,
    assert_same_partial_reset,
)

MODES = list(AutoresetMode)
NUM_ENVS = 3
ENVS = {"mission": MissionEnv, "mixed": MixedLeavesEnv}


def _fns(kind: str, num_envs: int = NUM_ENVS):
    return [functools.partial(ENVS[kind], index=i) for i in range(num_envs)]


@pytest.mark.parametrize("kind", sorted(ENVS))
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_hybrid_observations_match_sync(kind, mode, make_placed):
    reference = gym.vector.SyncVectorEnv(_fns(kind), autoreset_mode=mode)
    candidate = make_placed(_fns(kind), autoreset_mode=mode)
    try:
        assert candidate.observation_transport == "hybrid"
        assert_same_data(reference.reset(seed=3), candidate.reset(seed=3), "reset")
        rng = np.random.default_rng(0)
        for step in range(40):
            actions = rng.integers(0, 3, NUM_ENVS)
            expected, actual = reference.step(actions), candidate.step(actions)
            assert_same_data(expected, actual, f"step {step}")
            assert_same_partial_reset(reference, candidate, expected, f"step {step}")
    finally:
        reference.close()


class _InPlaceEnv(gym.Env):
    """Returns the same graph object every step, its arrays rewritten in place."""

    observation_space = gym.spaces.Dict(
        {
            "position": gym.spaces.Box(-9.0, 9.0, (2,), np.float32),
            "graph": gym.spaces.Graph(
                gym.spaces.Box(-9.0, 9.0, (1,), np.float32), None
            ),
        }
    )
    action_space = gym.spaces.Discrete(3)

    def __init__(self, index=0):
        self.index = index
        self.graph = gym.spaces.GraphInstance(
            np.zeros((2, 1), np.float32), None, np.zeros((0, 2), np.int64)
        )
        self.t = 0

    def _observe(self):
        nodes: Any = self.graph.nodes
        nodes[:] = self.t + self.index
        return {"position": np.full(2, self.t, np.float32), "graph": self.graph}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        self.t += 1
        return self._observe(), 0.0, self.t >= 4, False, {}


@pytest.mark.parametrize("kind", ["mixed", "in-place"])
@pytest.mark.parametrize("copy_obs", [True, False])
def test_held_observations_stay_as_sync_leaves_them(
    copy_obs, kind, placement, make_placed
):
    # copy=True: what the user holds never changes, even where the env rewrites
    # the object it returned; copy=False: the arrays are the buffers (rewritten in
    # place), as Sync's are
    fns = (
        _fns("mixed")
        if kind == "mixed"
        else [functools.partial(_InPlaceEnv, i) for i in range(NUM_ENVS)]
    )
    reference = gym.vector.SyncVectorEnv(fns, copy=copy_obs)
    candidate = make_placed(fns, copy=copy_obs)
    try:
        held_expected = [reference.reset(seed=0)[0]]
        held_actual = [candidate.reset(seed=0)[0]]
        snapshots = [copy.deepcopy(held_actual[0])]
        for step in range(12):
            actions = np.full(NUM_ENVS, step % 3)
            held_expected.append(reference.step(actions)[0])
            held_actual.append(candidate.step(actions)[0])
            snapshots.append(copy.deepcopy(held_actual[-1]))
            # copy=False: Sync hands out the env's own objects, which an env may
            # rewrite later; vecpool's come as copies wherever the env steps (as
            # from Gymnasium's AsyncVectorEnv), so only the latest step can compare
            aliased = not copy_obs and kind == "in-place"
            first = len(held_expected) - 1 if aliased else 0
            for k in range(first, len(held_expected)):
                assert_same_data(
                    held_expected[k], held_actual[k], f"observations of step {k}"
                )
        if copy_obs:
            for k, (snapshot, actual) in enumerate(
                zip(snapshots, held_actual, strict=True)
            ):
                assert_same_data(snapshot, actual, f"held observations of step {k}")
    finally:
        reference.close()


@pytest.mark.parametrize("kind", sorted(ENVS))
def test_recv_batches_hold_their_own_envs_rows(kind, make_placed):
    # every env sent once per round and a batch of all of them received: the rows
    # come in any order, each must be its own env's row of Sync's lockstep step
    reference = gym.vector.SyncVectorEnv(_fns(kind, 4))
    candidate = make_placed(_fns(kind, 4), batch_size=2)
    try:
        reference.reset(seed=1)
        candidate.reset(seed=1)
        rng = np.random.default_rng(1)
        for step in range(15):
            actions = rng.integers(0, 3, 4)
            candidate.send(actions)
            expected = reference.step(actions)
            rows = list(iterate(reference.observation_space, expected[0]))
            for _ in range(2):
                obs, rewards, terminated, truncated, infos = candidate.recv()
                batch_space = gym.vector.utils.batch_space(
                    reference.single_observation_space, len(infos["env_id"])
                )
                got = list(iterate(batch_space, obs))
                for position, env in enumerate(infos["env_id"].tolist()):
                    assert_same_data(
                        rows[env], got[position], f"step {step} env {env} obs"
                    )
                    assert rewards[position] == expected[1][env]
                    assert terminated[position] == expected[2][env]
                    assert truncated[position] == expected[3][env]
    finally:
        reference.close()


@pytest.mark.needs_worker_process
def test_a_restart_shows_the_last_observations_leaves_included(make_placed):
    env = make_placed(_fns("mixed", 4), on_worker_crash="restart")
    assert len(env.processes) == 2  # the first worker holds envs 0 and 1
    env.reset(seed=0)
    before, *_ = env.step(np.ones(4, np.int64))
    before_rows = list(iterate(env.observation_space, copy.deepcopy(before)))
    os.kill(env.processes[0].pid, signal.SIGKILL)
    env.processes[0].join(10)
    with pytest.warns(VecPoolWarning, match="restarted it"):
        after, _, _, truncated, infos = env.step(np.ones(4, np.int64))
    after_rows = list(iterate(env.observation_space, after))
    cut = np.flatnonzero(infos.get("_worker_restarted", np.zeros(4, bool)))
    assert cut.tolist() == [0, 1]
    assert truncated[cut].all()
    for row in cut.tolist():  # a cut row shows the observation it restarted from
        assert_same_data(before_rows[row], after_rows[row], f"cut row {row}")
    for row in (2, 3):  # the other worker stepped on
        assert after_rows[row]["note"] == f"env{row}step2"


@pytest.mark.parametrize(
    ("fns", "transport"),
    [
        (_fns("mission"), "hybrid"),
        ([functools.partial(gym.make, "CartPole-v1")] * 2, "shared"),
    ],
    ids=["hybrid", "arrays"],
)
def test_the_transport_is_reported(fns, transport, make_placed):
    assert make_placed(fns).observation_transport == transport
    assert make_placed(fns, shared_memory=False).observation_transport == "pickled"


@pytest.mark.parametrize("copy_obs", [True, False])
def test_close_releases_the_shared_block_of_a_hybrid_env(
    copy_obs, placement, make_placed
):
    import gc
    import weakref

    env = make_placed(_fns("mixed"), copy=copy_obs)
    env.reset(seed=0)
    held, *_ = env.step(np.zeros(NUM_ENVS, np.int64))
    block = weakref.ref(env._buffers.block.raw)
    env.close()
    gc.collect()
    if copy_obs:  # what the user holds is theirs: it keeps nothing alive
        assert block() is None
    assert env.observations["note"] == held["note"]  # still readable after close


class _StringsEnv(gym.Env):
    """Observations that are all Text/OneOf leaves, different at every step."""

    def __init__(self, kind="text", index=0):
        self.kind, self.index = kind, index
        text = gym.spaces.Text(12)
        one_of = gym.spaces.OneOf((gym.spaces.Discrete(5), gym.spaces.Discrete(7)))
        self.observation_space = {
            "text": text,
            "one_of": one_of,
            "dict": gym.spaces.Dict({"a": text, "b": one_of}),
            "dict-with-array": gym.spaces.Dict(
                {"n": gym.spaces.Discrete(9), "a": text}
            ),
        }[kind]
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _observe(self):
        text = f"e{self.index}t{self.t}"
        one_of = (self.t % 2, np.int64(self.t % 5))
        return {
            "text": text,
            "one_of": one_of,
            "dict": {"a": text, "b": one_of},
            "dict-with-array": {"n": np.int64(self.t % 9), "a": text},
        }[self.kind]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        self.t += 1
        return self._observe(), 0.0, self.t >= 4, False, {}


@pytest.mark.parametrize("shared_memory", ["auto", True])
@pytest.mark.parametrize("kind", ["text", "one_of", "dict", "dict-with-array"])
def test_text_and_one_of_leaves_are_never_placeholders(
    kind, shared_memory, make_placed
):
    # found by a tester: Gymnasium's shared memory decodes a Text or OneOf leaf
    # once, at construction, so every step returned '00000' or (0, 0)
    fns = [functools.partial(_StringsEnv, kind, i) for i in range(3)]
    reference = gym.vector.SyncVectorEnv(fns)
    candidate = make_placed(fns, shared_memory=shared_memory)
    try:
        expected = "hybrid" if kind == "dict-with-array" else "pickled"
        assert candidate.observation_transport == expected
        assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
        for step in range(9):
            actions = np.zeros(3, np.int64)
            assert_same_data(
                reference.step(actions), candidate.step(actions), f"{step}"
            )
    finally:
        reference.close()


class _FloatInIntEnv(gym.Env):
    """An integer leaf given a float: Sync raises numpy's TypeError."""

    observation_space = gym.spaces.Dict(
        {"n": gym.spaces.Discrete(5), "b": gym.spaces.Box(0, 9, (2,), np.int64)}
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"n": 3, "b": np.array([1, 2])}, {}

    def step(self, action):
        return {"n": 3.7, "b": np.array([1, 2])}, 0.0, False, False, {}


def test_a_float_in_an_integer_leaf_raises_as_in_sync(make_placed):
    # found by a tester: it was stored as 3 (silently), where Sync raises
    reference = gym.vector.SyncVectorEnv([_FloatInIntEnv] * 2)
    candidate = make_placed([_FloatInIntEnv] * 2)
    try:
        assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
        with pytest.raises(TypeError) as expected:
            reference.step(np.zeros(2, np.int64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium's log of a worker's error
            with pytest.raises(TypeError) as actual:
                candidate.step(np.zeros(2, np.int64))
        assert str(actual.value) == str(expected.value)
    finally:
        reference.close()
