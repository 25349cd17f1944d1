"""What only the in-process mode (``num_workers=0``) has, and its own faults.

Every general behaviour runs over each placement (the ``placement`` fixture of
tests/conftest.py) in the file for that behaviour; this file keeps what having no
process makes inherent: no processes to start or leak, the envs' lifetime in the
parent (closes, constructor errors, garbage collection), never pickling a step's
infos, the arguments only this mode refuses, an env's ``KeyboardInterrupt`` or
``SystemExit`` stopping a step half-way, and the comparisons of this mode with the
process engine on paths beyond ``step`` (samplers, ``step_from``, replay pools).
The first fault tests once exposed bugs (review of 7d2d268; now fixed).
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
from vecpool.errors import VecPoolError
from vecpool.testing import CountingEnv, assert_same_data, make_env_fns

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # Gymnasium's error log lines
]

MODES = [1, 0]  # the process engine, then in-process


class _InterruptedStep(CountingEnv):
    """Raises ``KeyboardInterrupt`` itself (not a signal) in its second step."""

    def step(self, action: Any) -> Any:
        if self.steps_taken == 1:
            self.steps_taken += 1
            raise KeyboardInterrupt
        return super().step(action)


class _ExitingStep(CountingEnv):
    """Raises ``SystemExit`` (``sys.exit`` in env code) in its second step."""

    def step(self, action: Any) -> Any:
        if self.steps_taken == 1:
            self.steps_taken += 1
            raise SystemExit(5)
        return super().step(action)


class _Tracked(CountingEnv):
    """Records its instances and their closes (visible: they live here)."""

    built: list[_Tracked] = []  # noqa: RUF012 - a registry for the test

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closes = 0
        type(self).built.append(self)

    def close(self) -> None:
        self.closes += 1
        super().close()


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, np.int64)


def _outcome(call: Any) -> tuple[str, str]:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - compared between the modes
        return type(exc).__name__, str(exc)
    return "ok", ""


# -- bugs ------------------------------------------------------------------------------


def test_a_keyboard_interrupt_from_env_step_is_then_named_clearly():
    env = vecpool.AsyncVectorEnv([CountingEnv, _InterruptedStep], num_workers=0)
    try:
        env.reset(seed=0)
        env.step(_zeros(2))
        with pytest.raises(KeyboardInterrupt):
            env.step(_zeros(2))
        with pytest.raises(VecPoolError) as info:  # refused: no wrong rows (good)
            env.step(_zeros(2))
        assert "second Ctrl-C" not in str(info.value)
        assert "pipe" not in str(info.value)
        assert "stopped half-way" in str(info.value)
        assert "KeyboardInterrupt" in str(info.value)
    finally:
        env.close()


def test_a_system_exit_from_env_step_leaves_no_half_done_step():
    env = vecpool.AsyncVectorEnv(
        [lambda: CountingEnv(max_steps=2, terminate_prob=0.0), _ExitingStep],
        num_workers=0,
    )
    try:
        env.reset(seed=0)
        env.step(_zeros(2))
        with pytest.raises(SystemExit):
            env.step(_zeros(2))  # env 0 truncated in it; nobody saw that
        # process mode: WorkerCrashedError from here on; in-process: the next step
        # returns env 0's autoreset row (reward 0, flags False), its episode end lost
        with pytest.raises(VecPoolError, match=r"stopped half-way.*SystemExit"):
            env.step(_zeros(2))
    finally:
        env.close()


# -- verified behaviour ----------------------------------------------------------------


def test_a_keyboard_interrupt_from_env_step_never_returns_rows_and_closes():
    _Tracked.built = []

    class Interrupted(_Tracked, _InterruptedStep):
        pass

    env = vecpool.AsyncVectorEnv([_Tracked, Interrupted], num_workers=0)
    env.reset(seed=0)
    env.step(_zeros(2))
    with pytest.raises(KeyboardInterrupt):
        env.step(_zeros(2))
    for call in (
        lambda: env.step(_zeros(2)),
        lambda: env.reset(seed=1),
        lambda: env.get_attr("steps_taken"),
    ):
        with pytest.raises(VecPoolError):
            call()
    env.close()
    env.close()
    assert [e.closes >= 1 for e in _Tracked.built] == [True] * len(_Tracked.built)
    assert len(_Tracked.built) == 3  # the dummy env for the spaces, then two


def test_a_constructor_error_closes_the_envs_already_built():
    _Tracked.built = []
    calls = {"n": 0}

    def third_breaks() -> gym.Env[Any, Any]:
        calls["n"] += 1
        if calls["n"] == 4:  # the dummy env, envs 0 and 1, then env 2
            msg = "constructor failed"
            raise RuntimeError(msg)
        return _Tracked()

    with pytest.raises(RuntimeError, match="constructor failed") as info:
        vecpool.AsyncVectorEnv([third_breaks] * 3, num_workers=0)
    assert "sub-environment 2" in "".join(getattr(info.value, "__notes__", []))
    assert len(_Tracked.built) == 3
    assert all(env.closes == 1 for env in _Tracked.built)


def test_sampler_step_from_and_render_match_the_process_engine():
    results = []
    for num_workers in MODES:
        fns = make_env_fns(3, max_steps=6, terminate_prob=0.2, render_mode="rgb_array")
        env = vecpool.AsyncVectorEnv(fns, num_workers=num_workers)
        try:
            sampler = vecpool.Sampler(
                env,
                lambda obs: np.zeros(len(obs), np.int64),
                batch_T=5,
                seed=0,
                max_decorrelation_steps=3,
            )
            batch = sampler.obtain_samples()
            env.reset(seed=3)
            moved = env.step_from(env.get_states(), np.array([0, 1, 2]), dt=3)
            results.append((batch, moved[1:], env.render()))
        finally:
            env.close()
    assert_same_data(results[0], results[1], "num_workers=1 vs 0")


def test_a_batch_send_interrupted_in_process_is_refused_after():
    env = vecpool.AsyncVectorEnv(
        [CountingEnv, CountingEnv, _InterruptedStep, CountingEnv],
        num_workers=0,
        batch_size=2,
    )
    try:
        env.reset(seed=0)
        env.send(_zeros(4))
        seen = [env.recv()[4]["env_id"], env.recv()[4]["env_id"]]
        assert sorted(np.concatenate(seen).tolist()) == [0, 1, 2, 3]
        env.send(_zeros(4))  # queued: the parent's envs step in recv's wait
        with pytest.raises(KeyboardInterrupt):
            env.recv()
        # the send's commands hold batch_size // workers envs each: the command
        # before the interrupted one completed, and its rows may come back first
        with pytest.raises(VecPoolError):  # noqa: PT012 - at most one recv returns
            for _ in range(2):
                ids = env.recv()[4]["env_id"]
                assert sorted(ids.tolist()) == [0, 1]
    finally:
        env.close()


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
