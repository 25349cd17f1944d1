"""``num_workers=0``: every env in the parent, same results as the worker processes.

The differential suite (tests/conformance/test_differential.py) runs every case
in-process as well; this file covers what only this mode has: no processes, the
envs' lifetime in the parent, and the paths beyond ``step`` (batches, env states,
wrappers) against the process engine on the same inputs.
"""

from __future__ import annotations

import gc
import os
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecpool
from vecpool.testing import CountingEnv, RaisingEnv, assert_same_data, make_env_fns

pytestmark = pytest.mark.timeout(60)


class _Closing(CountingEnv):
    """Counts its closes in the class (visible here: the envs live in this process)."""

    closed = 0

    def close(self) -> None:
        type(self).closed += 1
        super().close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def _warm() -> None:
    """Envs first: multiprocessing's heap (RawArray) opens its arenas' fds once.

    As large a vector env as the tests below: a larger block needs a new arena,
    which the heap then keeps (run alone, the tests saw its 2 fds as a leak).
    """
    vecpool.AsyncVectorEnv([CountingEnv] * 4, num_workers=0).close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_no_process_and_everything_released_on_close(leak_checker):
    fds = _open_fds()
    _Closing.closed = 0
    env = vecpool.AsyncVectorEnv([_Closing] * 3, num_workers=0)
    assert env.processes == []
    assert leak_checker.new_children() == {}
    env.reset(seed=0)
    env.step(np.zeros(3, np.int64))
    env.close()
    # the 3 envs closed (the dummy env built for the spaces closes too)
    assert _Closing.closed == 4
    assert _open_fds() == fds
    leak_checker.assert_no_leaks()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_garbage_collection_releases_it(leak_checker):
    fds = _open_fds()
    env = vecpool.AsyncVectorEnv([CountingEnv] * 2, num_workers=0)
    env.reset(seed=0)
    del env
    gc.collect()
    assert _open_fds() == fds
    leak_checker.assert_no_leaks()


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_an_env_error_comes_back_with_its_type_and_the_env_stays_usable():
    env = vecpool.AsyncVectorEnv(
        [CountingEnv, lambda: RaisingEnv(raise_on="step", at=2)], num_workers=0
    )
    try:
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match="RaisingEnv") as info:
            env.step(np.zeros(2, np.int64))
        assert "sub-environment 1" in "".join(getattr(info.value, "__notes__", []))
        assert "explode" in str(info.value.__cause__)  # the env's own traceback
        env.step(np.zeros(2, np.int64))  # later calls succeed, as in a worker
    finally:
        env.close()


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_a_constructor_error_is_raised_and_nothing_is_left(leak_checker):
    def broken() -> gym.Env[Any, Any]:
        msg = "no such env"
        raise KeyError(msg)

    calls = {"n": 0}

    def second_one_breaks() -> gym.Env[Any, Any]:
        calls["n"] += 1
        if calls["n"] > 2:  # the dummy env and env 0 build, env 1 does not
            return broken()
        return CountingEnv()

    with pytest.raises(KeyError, match="no such env"):
        vecpool.AsyncVectorEnv([second_one_breaks] * 2, num_workers=0)
    leak_checker.assert_no_leaks()


def test_send_recv_matches_the_process_engine():
    env_fns = make_env_fns(4, max_steps=7, terminate_prob=0.1, info_every=2)
    results = []
    for num_workers in (2, 0):
        env = vecpool.AsyncVectorEnv(env_fns, num_workers=num_workers, batch_size=2)
        try:
            env.reset(seed=3)
            rows = []
            counts = np.zeros(4, np.int64)  # each env's own step count
            env.send(np.arange(4) % 2, np.arange(4))
            in_flight = 4
            for _ in range(60):
                obs, reward, terminated, _, info = env.recv()
                ids = info["env_id"]
                in_flight -= ids.size
                order = np.argsort(ids)  # batches may complete in another order
                rows.append((ids[order], obs[order], reward[order], terminated[order]))
                counts[ids] += 1
                env.send((ids + counts[ids]) % 2, ids)  # per env, not per batch
                in_flight += ids.size
            while in_flight:
                in_flight -= env.recv()[4]["env_id"].size
            results.append(rows)
        finally:
            env.close()
    # same env ids stepped the same number of times -> same per-env trajectories
    by_env: list[dict[int, list[Any]]] = []
    for rows in results:
        per_env: dict[int, list[Any]] = {}
        for ids, obs, reward, terminated in rows:
            for k, env_id in enumerate(ids.tolist()):
                per_env.setdefault(env_id, []).append(
                    (obs[k].tolist(), float(reward[k]), bool(terminated[k]))
                )
        by_env.append(per_env)
    processes, local = by_env
    assert set(local) == set(processes) == {0, 1, 2, 3}
    for env_id in range(4):
        length = min(len(processes[env_id]), len(local[env_id]))
        assert length >= 3  # the process engine may favour the faster worker
        assert processes[env_id][:length] == local[env_id][:length], env_id


def test_env_states_round_trip_like_the_process_engine():
    fns = make_env_fns(2, max_steps=6)
    outcomes = []
    for num_workers in (1, 0):
        env = vecpool.AsyncVectorEnv(fns, num_workers=num_workers)
        try:
            env.reset(seed=5)
            states = env.get_states()
            first = env.step(np.array([0, 1]))
            env.set_states(states)
            again = env.step(np.array([0, 1]))
            assert_same_data(first, again, f"num_workers={num_workers}")
            outcomes.append(first)
        finally:
            env.close()
    assert_same_data(outcomes[0], outcomes[1], "processes vs in-process")


def test_replay_wrapper_records_the_same_pool_in_process():
    env_fns = make_env_fns(3, max_steps=5, terminate_prob=0.2, info_every=1)
    pools = []
    for num_workers in (3, 0):
        envs = vecpool.ReplayPoolWrapper(
            vecpool.AsyncVectorEnv(env_fns, num_workers=num_workers), pool_size=60
        )
        try:
            envs.reset(seed=1)
            for step in range(25):
                envs.step(np.full(3, step % 2))
            pools.append(envs.get_pool())
        finally:
            envs.close()
    assert_same_data(pools[0], pools[1], "pool")


def test_num_workers_zero_with_a_custom_worker_is_refused():
    def worker(*args: Any) -> None:
        del args

    with pytest.raises(
        ValueError, match=re.escape("`num_workers=0` cannot be combined")
    ):
        vecpool.AsyncVectorEnv([CountingEnv] * 2, num_workers=0, worker=worker)


def test_negative_num_workers_names_the_in_process_mode():
    with pytest.raises(ValueError, match=re.escape("0 runs the envs in this process")):
        vecpool.AsyncVectorEnv([CountingEnv] * 2, num_workers=-1)


class _PickleCounter:
    """An info value that counts how often it is unpickled (in this process)."""

    unpickled = 0

    def __reduce__(self):
        return (_revive, ())


def _revive():
    _PickleCounter.unpickled += 1
    return _PickleCounter()


class _ObjectInfoEnv(CountingEnv):
    """Every step info holds an object (never a shared-memory column)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "obj": _PickleCounter()}


def test_step_infos_are_never_pickled_in_process():
    _PickleCounter.unpickled = 0
    env = vecpool.AsyncVectorEnv([_ObjectInfoEnv] * 3, num_workers=0)
    try:
        env.reset(seed=0)
        for _ in range(5):
            *_, infos = env.step(np.zeros(3, np.int64))
            assert all(type(value) is _PickleCounter for value in infos["obj"])
    finally:
        env.close()
    assert _PickleCounter.unpickled == 0
    processes = vecpool.AsyncVectorEnv([_ObjectInfoEnv] * 2, num_workers=1)
    try:
        processes.reset(seed=0)
        processes.step(np.zeros(2, np.int64))
    finally:
        processes.close()
    assert _PickleCounter.unpickled > 0  # the counter works: from a worker, it is
