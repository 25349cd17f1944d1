"""Faults: env exceptions, dead workers, timeouts and bad actions.

Every test runs over each placement (the ``placement`` fixture of tests/conftest.py);
a dead worker or a timeout needs a worker process and skips in-process, with why.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import signal
import time
import warnings
from typing import Any

import numpy as np
import pytest

import vecpool
import vecpool.errors
from vecpool._wire.bell import ANSWERED, NUMBER_MASK
from vecpool.testing import (
    ActionEchoEnv,
    CountingEnv,
    CustomExceptionEnv,
    DeliberateError,
    ExitingEnv,
    RaisingEnv,
    SlowEnv,
    UnpicklableInfoEnv,
    assert_same_data,
    make_env_fns,
)

# An env failure makes the vector env log three lines through gymnasium.logger.error.
ERROR_LOG_LINES = 3

# A hung worker must fail fast, not eat the global 120 s timeout.
pytestmark = pytest.mark.timeout(30)

NO_TIMEOUT = (
    "needs a worker process: an env that steps in this process can be neither "
    "timed out nor interrupted"
)


# Infos depend on lifetime step/reset counts; without them, results after a
# `reset(seed=...)` depend on the seed only, so a fresh SyncVectorEnv is a reference.
NO_INFOS: dict[str, Any] = {"info_every": 0, "reset_info": False}


def _raising(index: int, num_envs: int, **kwargs: Any) -> list[Any]:
    """Env fns where env ``index`` is a RaisingEnv; no infos anywhere."""
    plain = {
        key: value
        for key, value in kwargs.items()
        if key in ("max_steps", "terminate_prob")
    }
    return [
        functools.partial(RaisingEnv, **NO_INFOS, **kwargs)
        if i == index
        else functools.partial(CountingEnv, **NO_INFOS, **plain)
        for i in range(num_envs)
    ]


def _run_recording_warnings(func):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            func()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            return exc, [str(w.message) for w in record]
    return None, [str(w.message) for w in record]


def _slow_action(num_envs: int, seconds: float | list[float]) -> np.ndarray:
    actions: np.ndarray = np.broadcast_to(
        np.asarray(seconds, dtype=np.float32).reshape(-1, 1), (num_envs, 1)
    ).copy()
    return actions


def _worker_of_env(env, env_index: int) -> int:
    pid = env.call("get_pid")[env_index]
    return [process.pid for process in env.processes].index(pid)


# ------------------------------------------------------------------ env exceptions


@pytest.mark.parametrize(
    "exc_type", [ValueError, RuntimeError, KeyError, ZeroDivisionError, DeliberateError]
)
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_step_exception_keeps_type_message_and_remote_traceback(
    exc_type, shared_memory, make_placed, make_sync
):
    num_envs = 4
    env_fns = _raising(2, num_envs, raise_on="step", at=3, exc_type=exc_type)
    env = make_placed(env_fns, shared_memory=shared_memory)
    env.reset(seed=0)
    action = np.ones(num_envs, dtype=np.int64)
    env.step(action)
    env.step(action)
    exc, logs = _run_recording_warnings(lambda: env.step(action))
    original = exc_type(RaisingEnv.message_for("step", 3))
    assert type(exc) is exc_type
    assert str(exc) == str(original)
    cause = exc.__cause__
    assert isinstance(cause, vecpool.errors.RemoteTraceback)
    assert "explode" in str(cause)
    assert exc_type.__name__ in str(cause)
    assert len(logs) == ERROR_LOG_LINES
    assert "Received the following error from Worker-2 - Shutting it down" in logs[0]
    assert "explode" in logs[1]
    assert "Raising the last exception back to the main process." in logs[2]

    # Still usable: a reset brings every env back, and stepping matches Sync.
    reference = make_sync(make_env_fns(num_envs, **NO_INFOS))
    assert_same_data(reference.reset(seed=5), env.reset(seed=5), "reset after error")
    for step_index in range(5):
        assert_same_data(reference.step(action), env.step(action), f"step {step_index}")


@pytest.mark.needs_worker_process(
    reason="a KeyboardInterrupt in the parent's own envs is the user's Ctrl-C"
)
@pytest.mark.parametrize("raise_on", ["step", "reset"])
def test_an_envs_own_keyboard_interrupt_in_a_worker_comes_back_as_its_error(
    raise_on, make_placed, make_sync
):
    # Gymnasium's worker reports an env's KeyboardInterrupt like any exception; a
    # worker ignores SIGINT, so one raised there is the env's own, not a Ctrl-C:
    # it must not kill the worker (and the envs beside it)
    num_envs = 4
    env_fns = _raising(1, num_envs, raise_on=raise_on, at=2, exc_type=KeyboardInterrupt)
    env = make_placed(env_fns)
    action = np.ones(num_envs, dtype=np.int64)
    env.reset(seed=0)
    if raise_on == "step":
        env.step(action)
    call = env.step if raise_on == "step" else env.reset
    exc, logs = _run_recording_warnings(
        lambda: call(action) if raise_on == "step" else call(seed=0)
    )
    assert type(exc) is KeyboardInterrupt
    assert str(exc) == RaisingEnv.message_for(raise_on, 2)
    assert isinstance(exc.__cause__, vecpool.errors.RemoteTraceback)
    assert "explode" in str(exc.__cause__)
    assert len(logs) == ERROR_LOG_LINES
    assert "Worker-1" in logs[0]
    reference = make_sync(make_env_fns(num_envs, **NO_INFOS))
    assert_same_data(reference.reset(seed=5), env.reset(seed=5), "reset after error")
    assert_same_data(reference.step(action), env.step(action), "step after error")


class _CloseMarkingEnv(CountingEnv):
    """Writes ``path`` when closed; raises ``KeyboardInterrupt`` first if asked."""

    def __init__(self, path: str, interrupt: bool = False) -> None:
        super().__init__(**NO_INFOS)
        self.path, self.interrupt = path, interrupt

    def close(self) -> None:
        if self.interrupt:
            msg = "the env's own, in close"
            raise KeyboardInterrupt(msg)
        with open(self.path, "w") as marker:
            marker.write("closed")


def test_an_env_whose_close_raises_keyboard_interrupt_lets_the_others_close(
    tmp_path, make_async, leak_checker
):
    # the worker takes it as the env's error, as in its other calls: the env
    # after it in the same worker is still closed
    marker = tmp_path / "closed"
    env = make_async(
        [
            functools.partial(_CloseMarkingEnv, str(tmp_path / "unused"), True),
            functools.partial(_CloseMarkingEnv, str(marker)),
        ],
        num_workers=1,
        parent_envs=0,
    )
    env.reset(seed=0)
    env.close()
    assert marker.read_text() == "closed"
    leak_checker.assert_no_leaks()


# a class of the user's script: cloudpickle sends it to a spawned worker by value
MainScriptError: type[Exception] = type(
    "MainScriptError", (Exception,), {"__module__": "__main__"}
)


@pytest.mark.needs_worker_process(reason="the class must reach a spawned process")
def test_an_exception_class_of_the_main_script_keeps_its_type_under_spawn(
    placement, leak_checker
):
    # under spawn (and forkserver, Python 3.14's default) the worker holds its own
    # copy of the class, which plain pickle cannot send back: the parent must get
    # its own class again, so that `except MainScriptError` catches it
    env_fns = _raising(1, 2, raise_on="step", at=1, exc_type=MainScriptError)
    env = vecpool.AsyncVectorEnv(env_fns, context="spawn", **placement.kwargs(2))
    try:
        env.reset(seed=0)
        exc, _ = _run_recording_warnings(lambda: env.step(np.ones(2, np.int64)))
        assert type(exc) is MainScriptError
        assert isinstance(exc, MainScriptError)
        assert str(exc) == RaisingEnv.message_for("step", 1)
        assert isinstance(exc.__cause__, vecpool.errors.RemoteTraceback)
    finally:
        env.close()
    leak_checker.assert_no_leaks()


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_an_env_error_names_its_env_and_the_env_stays_usable(make_placed):
    env = make_placed([CountingEnv, lambda: RaisingEnv(raise_on="step", at=2)])
    env.reset(seed=0)
    env.step(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="RaisingEnv") as info:
        env.step(np.zeros(2, np.int64))
    assert "sub-environment 1" in "".join(getattr(info.value, "__notes__", []))
    assert "explode" in str(info.value.__cause__)  # the env's own traceback
    env.step(np.zeros(2, np.int64))  # later calls succeed


def test_reset_exception_is_reraised_and_env_recovers(make_placed, make_sync):
    env_fns = _raising(0, 3, raise_on="reset", at=2)
    env = make_placed(env_fns)
    env.reset(seed=0)
    exc, logs = _run_recording_warnings(lambda: env.reset(seed=1))
    assert type(exc) is ValueError
    assert str(exc) == RaisingEnv.message_for("reset", 2)
    assert isinstance(exc.__cause__, vecpool.errors.RemoteTraceback)
    assert "explode" in str(exc.__cause__)
    assert "Worker-0" in logs[0]
    reference = make_sync(make_env_fns(3, **NO_INFOS))
    assert_same_data(reference.reset(seed=2), env.reset(seed=2), "reset after error")


def test_exception_in_autoreset_during_step_is_reraised(make_placed):
    # max_steps=1: step 1 ends the episode, step 2 autoresets -> reset #2 raises.
    env_fns = _raising(1, 2, raise_on="reset", at=2, max_steps=1, terminate_prob=0.0)
    env = make_placed(env_fns)
    env.reset(seed=0)
    action = np.array([1, 1])
    assert env.step(action)[3].all()
    exc, logs = _run_recording_warnings(lambda: env.step(action))
    assert type(exc) is ValueError
    assert str(exc) == RaisingEnv.message_for("reset", 2)
    assert "Worker-1" in logs[0]
    env.reset(seed=0)
    env.step(action)


def test_exception_in_call_is_reraised(make_placed):
    env = make_placed(make_env_fns(3))
    env.reset(seed=0)
    exc, logs = _run_recording_warnings(lambda: env.call("explode", "custom text"))
    assert type(exc) is DeliberateError
    assert str(exc) == "custom text"
    assert isinstance(exc.__cause__, vecpool.errors.RemoteTraceback)
    assert "explode" in str(exc.__cause__)
    # Gymnasium logs two lines per failed env, then one final line.
    assert len(logs) == 2 * 3 + 1
    for index in range(3):
        assert sum(f"from Worker-{index} " in line for line in logs) == 1
    assert "Raising the last exception back to the main process." in logs[-1]
    assert env.get_attr("steps_taken") == (0, 0, 0)


def test_missing_attribute_in_get_attr_is_reraised(make_placed):
    env = make_placed(make_env_fns(2))
    exc, _ = _run_recording_warnings(lambda: env.get_attr("no_such_attribute"))
    assert isinstance(exc, AttributeError)
    assert "no_such_attribute" in str(exc)
    assert env.get_attr("steps_taken") == (0, 0)


@pytest.mark.timeout(10)  # a lost error would hang the step
def test_exception_needing_extra_init_args_is_reported(make_placed):
    """DeliberateErrorWithArgs cannot be unpickled; the failure must still surface."""
    env_fns = [functools.partial(CustomExceptionEnv, at=2), *make_env_fns(1)]
    env = make_placed(env_fns)
    env.reset(seed=0)
    action = np.array([1, 1])
    env.step(action)
    exc, _ = _run_recording_warnings(lambda: env.step(action))
    assert exc is not None
    assert not isinstance(exc, vecpool.errors.WorkerCrashedError)
    text = f"{exc}\n{exc.__cause__}"
    assert CustomExceptionEnv.MESSAGE in text
    assert "DeliberateErrorWithArgs" in text
    env.reset(seed=0)
    env.step(action)


@pytest.mark.timeout(10)  # a lost error would hang the step
def test_unpicklable_info_is_reported(make_placed):
    env_fns = [*make_env_fns(1), functools.partial(UnpicklableInfoEnv, at=2)]
    env = make_placed(env_fns)
    env.reset(seed=0)
    action = np.array([1, 1])
    env.step(action)
    exc, _ = _run_recording_warnings(lambda: env.step(action))
    assert isinstance(exc, Exception)
    assert not isinstance(exc, vecpool.errors.WorkerCrashedError)
    assert "pickle" in f"{exc}\n{exc.__cause__}"
    env.reset(seed=0)
    env.step(action)


# ------------------------------------------------------------------ dead workers


@pytest.mark.needs_worker_process
def test_worker_killed_mid_step_raises_worker_crashed(
    start_method, make_placed, leak_checker
):
    num_envs = 4
    env = make_placed([functools.partial(SlowEnv)] * num_envs, context=start_method)
    env.reset(seed=0)
    worker = _worker_of_env(env, 3)
    env_indices = tuple(
        index
        for index, pid in enumerate(env.call("get_pid"))
        if pid == env.processes[worker].pid
    )
    assert len(env_indices) >= 2  # the placement puts several envs in a worker
    # Each worker steps its envs one after the other: ~2 s per step.
    env.step_async(_slow_action(num_envs, 1.0))
    time.sleep(0.2)
    os.kill(env.processes[worker].pid, signal.SIGKILL)
    with pytest.raises(vecpool.errors.WorkerCrashedError) as info:
        env.step_wait()  # a hang fails through the module's timeout
    error = info.value
    assert isinstance(error, vecpool.errors.VecPoolError)
    assert error.worker == worker
    assert tuple(error.env_indices) == env_indices
    assert error.exitcode == -signal.SIGKILL
    message = str(error)
    assert str(worker) in message
    assert str(-signal.SIGKILL) in message or "SIGKILL" in message
    for index in env_indices:
        assert str(index) in message

    # Every further call fails the same way, except close().
    for call in (
        lambda: env.step(_slow_action(num_envs, 0.0)),
        lambda: env.reset(),
        lambda: env.get_attr("steps_taken"),
    ):
        with pytest.raises(vecpool.errors.WorkerCrashedError):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # closing a broken env may warn
        env.close()
    assert env.closed
    leak_checker.assert_no_leaks()


@pytest.mark.timeout(10)  # a hang guard, not a speed claim
@pytest.mark.needs_worker_process
def test_worker_killed_while_idle_raises_on_next_step(make_placed, leak_checker):
    env = make_placed(make_env_fns(3))
    env.reset(seed=0)
    victim = env.processes[1]
    its_envs = tuple(
        index for index, pid in enumerate(env.call("get_pid")) if pid == victim.pid
    )
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    with pytest.raises(vecpool.errors.WorkerCrashedError) as info:
        env.step(np.array([1, 1, 1]))
    assert info.value.worker == 1
    assert tuple(info.value.env_indices) == its_envs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.close()
    leak_checker.assert_no_leaks()


@pytest.mark.timeout(20)  # a hang guard, not a speed claim
@pytest.mark.parametrize("wait_strategy", ["auto", "spin", "block"])
def test_a_worker_killed_after_it_answered_raises_at_the_next_step(
    wait_strategy, leak_checker
):
    # worker 0 answers a step at once and dies while the step still waits for
    # worker 1 (100 ms): the wait sees its end with nothing awaited from it, and
    # the next step, which only rings its bell (no write that could fail), must
    # raise; found: it waited forever (a timeout raised TimeoutError instead)
    env = vecpool.AsyncVectorEnv(
        [
            functools.partial(ActionEchoEnv, 0.0),
            functools.partial(ActionEchoEnv, 0.1),
        ],
        num_workers=2,
        parent_envs=0,
        wait_strategy=wait_strategy,
    )
    try:
        env.reset(seed=0)
        env.step(np.array([1.0, 1.0]))
        env.step_async(np.array([2.0, 2.0]))
        first = env._group.handles[0]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (  # its answer, on the bell or piped
            first.bell[ANSWERED] != first.rung & NUMBER_MASK
            if first.rung
            else not first.conn.poll()
        ):
            time.sleep(0.001)
        victim = env.processes[0]
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        observations = env.step_wait()[0]
        np.testing.assert_array_equal(observations, [[2.0, 2.0], [2.0, 2.0]])
        with pytest.raises(vecpool.errors.WorkerCrashedError) as info:
            # the send (a pipe write) or the wait finds it dead, never a timeout
            env.step(np.array([3.0, 3.0]))
        assert info.value.worker == 0
        assert "Worker 0" in str(info.value)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env.close()
    leak_checker.assert_no_leaks()


@pytest.mark.timeout(10)  # a hang guard, not a speed claim
@pytest.mark.needs_worker_process(
    reason="needs a worker process: os._exit in-process would end the test run"
)
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_os_exit_in_step_raises_worker_crashed(
    shared_memory, make_placed, leak_checker
):
    env_fns = [*make_env_fns(2), functools.partial(ExitingEnv, at_step=3, code=3)]
    env = make_placed(env_fns, shared_memory=shared_memory)
    env.reset(seed=0)
    worker = _worker_of_env(env, 2)
    action = np.array([0, 1, 2])
    env.step(action)
    env.step(action)
    with pytest.raises(vecpool.errors.WorkerCrashedError) as info:
        env.step(action)
    assert info.value.worker == worker
    assert 2 in info.value.env_indices
    assert info.value.exitcode == 3
    assert "3" in str(info.value)
    with pytest.raises(vecpool.errors.WorkerCrashedError):
        env.step(action)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.close()
    env.close()
    leak_checker.assert_no_leaks()


# ---------------------------------------------------------------------- timeouts


@pytest.mark.timeout(10)  # a hang guard, not a speed claim
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_step_timeout_then_fresh_results(shared_memory, make_placed, make_sync):
    num_envs = 3
    env_fns = [functools.partial(SlowEnv)] * num_envs
    reference = make_sync(env_fns)
    env = make_placed(env_fns, shared_memory=shared_memory)
    env.reset(seed=0)
    env.step_async(_slow_action(num_envs, [0.0, 0.8, 0.0]))
    # a worker's slow step is not waited for; in this process, the call raises
    # once its share is done, past the deadline (as Gymnasium's suite expects)
    with pytest.raises(
        multiprocessing.TimeoutError,
        match=re.escape("The call to `step_wait` has timed out after 0.1 second(s)."),
    ):
        env.step_wait(timeout=0.1)
    # The late reply of the slow env must be discarded: fresh results only.
    assert_same_data(reference.reset(seed=7), env.reset(seed=7), "reset after timeout")
    fast = _slow_action(num_envs, 0.0)
    for step_index in range(3):
        assert_same_data(reference.step(fast), env.step(fast), f"step {step_index}")


def test_a_zero_timeout_returns_results_that_are_ready(make_placed, make_sync):
    # Gymnasium's `step_wait(timeout=0)` asks whether the results are ready; the
    # parent's own envs, stepped in the wait, count from `step_async` as a
    # worker's do (they used to time out always: their stepping takes > 0 s)
    num_envs = 4
    env_fns = make_env_fns(num_envs, **NO_INFOS)
    reference = make_sync(env_fns)
    env = make_placed(env_fns)
    env.reset_async(seed=3)
    time.sleep(0.5)
    assert_same_data(reference.reset(seed=3), env.reset_wait(timeout=0), "reset")
    action = np.ones(num_envs, dtype=np.int64)
    for step_index in range(3):
        env.step_async(action)
        time.sleep(0.5)  # ample for every env's step, on a busy machine too
        expected = reference.step(action)
        assert_same_data(expected, env.step_wait(timeout=0), f"step {step_index}")
    env.call_async("get_pid")
    time.sleep(0.5)
    assert len(env.call_wait(timeout=0)) == num_envs


def test_step_timeout_then_step_gives_fresh_results(make_placed):
    num_envs = 2
    env = make_placed([functools.partial(SlowEnv)] * num_envs)
    env.reset(seed=0)
    env.step_async(_slow_action(num_envs, [0.5, 0.0]))
    with pytest.raises(multiprocessing.TimeoutError):
        env.step_wait(timeout=0.05)
    obs, rewards, _, _, _ = env.step(_slow_action(num_envs, [0.0, 0.01]))
    # Each env has now done exactly two steps; the rewards are this step's delays.
    np.testing.assert_array_equal(obs[:, 0], [2.0, 2.0])
    np.testing.assert_allclose(rewards, [0.0, 0.01], rtol=1e-6)
    assert env.get_attr("steps_taken") == (2, 2)


def test_reset_and_call_timeouts(make_placed, make_sync):
    env_fns = [functools.partial(SlowEnv, reset_delay=0.0)] * 2
    env = make_placed(env_fns)
    env.set_attr("reset_delay", [0.0, 0.6])
    env.reset_async(seed=0)
    with pytest.raises(
        multiprocessing.TimeoutError,
        match=re.escape("The call to `reset_wait` has timed out after 0.1 second(s)."),
    ):
        env.reset_wait(timeout=0.1)
    env.call_async("sleep", 0.6)
    with pytest.raises(
        multiprocessing.TimeoutError,
        match=re.escape("The call to `call_wait` has timed out after 0.1 second(s)."),
    ):
        env.call_wait(timeout=0.1)
    env.set_attr("reset_delay", 0.0)
    reference = make_sync(env_fns)
    assert_same_data(reference.reset(seed=3), env.reset(seed=3), "reset after timeouts")
    assert env.call("sleep", 0.0) == (0.0, 0.0)


# ------------------------------------------------------------------- bad actions


@pytest.mark.parametrize(
    ("action_kind", "bad_action"),
    [
        ("discrete", np.array([1, 1, 1, 1])),  # one too many
        ("discrete", np.array([1, 1])),  # one too few
        ("discrete", np.ones((3, 2), dtype=np.int64)),  # wrong shape
        ("discrete", [1, 1]),  # a list of the wrong length
        ("box", np.zeros((3, 3), dtype=np.float32)),  # wrong per-env shape
        ("box", np.zeros((4, 2), dtype=np.float32)),  # wrong count
        ("box", np.zeros(2, dtype=np.float32)),  # not batched
    ],
    ids=[
        "disc-more",
        "disc-fewer",
        "disc-2d",
        "disc-list",
        "box-shape",
        "box-count",
        "box-flat",
    ],
)
def test_bad_actions_raise_value_error_before_sending(
    action_kind, bad_action, make_placed, make_sync
):
    env_fns = make_env_fns(3, action_kind=action_kind)
    reference = make_sync(env_fns)
    env = make_placed(env_fns)
    assert_same_data(reference.reset(seed=0), env.reset(seed=0), "reset")
    good = reference.action_space.sample()
    assert_same_data(reference.step(good), env.step(good), "first step")
    with pytest.raises(ValueError):  # noqa: PT011 - the message is not specified
        env.step(bad_action)
    with pytest.raises(ValueError):  # noqa: PT011 - and again through step_async
        env.step_async(bad_action)
    # Nothing reached the envs, and the vector env is not left waiting.
    assert env.get_attr("steps_taken") == (1, 1, 1)
    assert_same_data(reference.step(good), env.step(good), "step after bad actions")
    assert env.get_attr("steps_taken") == (2, 2, 2)


# a hang guard (far above the 1 s grace), not a speed claim; waiting the 30 s step
# out would exceed it
@pytest.mark.timeout(20)
@pytest.mark.needs_worker_process(reason=NO_TIMEOUT)
def test_close_returns_when_an_env_is_stuck_after_a_timeout(
    make_placed, leak_checker, monkeypatch
):
    # a step timed out and the env is still sleeping in it: close() (default
    # timeout) must give up after the grace, terminate and reap
    monkeypatch.setattr(vecpool.vector.async_env, "CLOSE_GRACE", 1.0)
    envs = make_placed([functools.partial(SlowEnv)] * 2)
    envs.reset(seed=0)
    envs.step_async(np.full((2, 1), 30.0, dtype=np.float32))
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.2)
    envs.close()
    assert not any(process.is_alive() for process in envs.processes)
    leak_checker.assert_no_leaks()


# a hang guard (far above the 1 s grace after a crash), not a speed claim; waiting
# the 60 s CLOSE_GRACE would exceed it
@pytest.mark.timeout(30)
@pytest.mark.needs_worker_process
def test_close_returns_when_a_crashed_worker_held_the_concurrency_slot(
    make_placed, leak_checker, monkeypatch
):
    # max_concurrency=1 < num_workers: the worker killed mid-step never releases
    # the semaphore, so the survivor can never step (nor read CLOSE); after a crash
    # close() waits 1 s, not CLOSE_GRACE (made long here so the two differ widely)
    monkeypatch.setattr(vecpool.vector.async_env, "CLOSE_GRACE", 60.0)
    envs = make_placed([functools.partial(SlowEnv)] * 2, max_concurrency=1)
    envs.reset(seed=0)
    envs.step_async(np.full((2, 1), 2.0, dtype=np.float32))
    time.sleep(0.3)
    for process in envs.processes:
        os.kill(process.pid, signal.SIGKILL)
        break
    with pytest.raises(vecpool.errors.WorkerCrashedError):
        envs.step_wait(timeout=10)
    envs.close()
    assert not any(process.is_alive() for process in envs.processes)
    leak_checker.assert_no_leaks()


def test_a_share_sent_before_a_later_batch_is_timed_from_its_own_send():
    # the parent's share (envs 2 and 3) is stepped in the wait, timed as if it had
    # started at its own send, not at the later send of the workers' batch (it
    # used to be timed from the last send of any batch, and timed out here)
    env_fns = [functools.partial(SlowEnv)] * 4
    env = vecpool.AsyncVectorEnv(env_fns, num_workers=1, parent_envs=2, batch_size=2)
    try:
        env.reset(seed=0)
        env.send(_slow_action(2, 0.3), np.array([2, 3]))
        time.sleep(1.0)  # the share, started at its send, would have finished
        env.send(_slow_action(2, 0.0), np.array([0, 1]))
        seen = []
        for _ in range(2):
            obs, _, _, _, infos = env.recv(timeout=0.25)
            seen += infos["env_id"].tolist()
            np.testing.assert_array_equal(obs[:, 0], [1.0, 1.0])
        assert sorted(seen) == [0, 1, 2, 3]
        assert env.get_attr("steps_taken") == (1, 1, 1, 1)
    finally:
        env.close()


def test_a_slow_share_times_out_after_earlier_plain_steps():
    # the plain step path (step(), step_wait() with no timeout) runs the share
    # directly: it must clear the share's send stamp as the queued path does, or
    # every later wait times the share from that first step, and never times out
    env_fns = [functools.partial(SlowEnv)] * 2
    env = vecpool.AsyncVectorEnv(env_fns, num_workers=1, parent_envs=1)
    try:
        env.reset(seed=0)
        env.step(_slow_action(2, 0.0))
        time.sleep(1.0)
        env.step_async(_slow_action(2, [0.0, 0.6]))  # env 1 is the parent's
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.2)
    finally:
        env.close()
