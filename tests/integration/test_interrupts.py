"""Ctrl-C, timeouts and a second thread never yield wrong rows nor hang (issue 11).

Every observation of :class:`vecpool.testing.ActionEchoEnv` is ``[action, step]``,
so a row that belongs to another step (or to another thread's actions) shows at
once. Interrupts are real SIGINTs raised in the main thread: an ``ITIMER_REAL``
timer (20 µs to 3 ms, microsecond precision) fires SIGALRM, whose handler sends
SIGINT to this process, so whatever SIGINT handler the engine installs is the
one that runs, exactly as with a Ctrl-C. The user's recovery is to go on: finish a
pending call with its ``*_wait(timeout=5)`` when told ``AlreadyPendingCallError``,
then call again; every later result must be the result of the actions sent.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import random
import re
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.errors import AlreadyPendingCallError, NoAsyncCallError
from vecpool.testing import ActionEchoEnv

pytestmark = [
    pytest.mark.usefixtures("python_sigint_handler"),
    # "thread": pytest-timeout's default method owns SIGALRM, which these tests use
    pytest.mark.timeout(60, method="thread"),
    # a SIGINT that lands in a destructor is "ignored" (printed) by Python itself
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NUM_ENVS = 4


WAIT = 5.0  # seconds any recovery wait may take before the test calls it a hang
STARTS = [
    method
    for method in ("forkserver", "spawn")
    if method in multiprocessing.get_all_start_methods()
]


@pytest.fixture
def arm() -> Iterator[Callable[[float], None]]:
    """``arm(t)``: a SIGINT reaches the main thread ``t`` seconds later."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal tests need the main thread")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("SIGINT tests need a plain pytest run (not pytest-xdist)")

    def on_alarm(signum: int, frame: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        yield lambda delay: signal.setitimer(signal.ITIMER_REAL, delay)  # type: ignore[misc]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _interrupted(arm: Callable[[float], None], rng: random.Random, body) -> bool:
    """Run ``body`` with a SIGINT due 20 µs to 3 ms in; return whether it landed.

    Wrong rows are recorded by the body before it raises, so an ``AssertionError``
    overtaken by a late ``KeyboardInterrupt`` is not lost.
    """
    try:
        try:
            arm(rng.uniform(2e-5, 3e-3))
            body()
            time.sleep(0.004)  # a late signal lands here, outside the env
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:
        return True
    return False


def _expect(obs: Any, value: float, wrong: list[Any], steps: Any = None) -> None:
    ok = bool(np.all(obs[:, 0] == value))
    if steps is not None:
        ok = ok and bool(np.all(obs[:, 1] == steps))
    if not ok:
        wrong.append({"sent": value, "steps": steps, "got": obs.tolist()})
        pytest.fail(f"rows of another call: sent {value}, got {obs.tolist()}")


class _Run:
    """Action values never used before, and the rows that were wrong."""

    def __init__(self, envs: vecpool.AsyncVectorEnv) -> None:
        self.envs = envs
        self.value = 0.0
        self.sent = 0.0
        self.wrong: list[Any] = []
        self.checked = 0

    def raw_step(self) -> Any:
        """Step with a new value; ``sent`` is the value of the step now pending."""
        self.value += 1.0
        previous, self.sent = self.sent, self.value
        try:
            obs, *_ = self.envs.step(np.full(NUM_ENVS, self.value))
        except AlreadyPendingCallError:
            self.sent = previous  # the pending call is an older one
            raise
        return obs

    def step(self) -> Any:
        obs = self.raw_step()
        _expect(obs, self.value, self.wrong)
        self.checked += 1
        return obs

    def finish_pending(self) -> None:
        """What a user does on ``AlreadyPendingCallError``: collect the results."""
        for wait in (self.envs.step_wait, self.envs.reset_wait, self.envs.call_wait):
            try:
                result = wait(timeout=WAIT)
            except NoAsyncCallError:
                continue
            if wait == self.envs.step_wait:
                _expect(result[0], self.sent, self.wrong)
            elif wait == self.envs.reset_wait:
                _expect(result[0], -1.0, self.wrong, steps=0.0)
            return

    def recover(self, check: Callable[[], None]) -> None:
        for _ in range(3):
            try:
                check()
                return
            except AlreadyPendingCallError:
                self.finish_pending()
        pytest.fail("the vector env did not recover from an interrupt")


def _close_promptly(envs: vecpool.AsyncVectorEnv) -> None:
    with warnings.catch_warnings():  # Gymnasium's "close while a call is pending"
        warnings.simplefilter("ignore")
        envs.close()  # a hang fails through the module's timeout
    assert envs.closed
    assert not any(process.is_alive() for process in envs.processes)
    assert not set(envs.processes) & set(multiprocessing.active_children())


def _echo_envs(delay: float = 0.0, **kwargs: Any) -> vecpool.AsyncVectorEnv:
    return vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, delay)] * NUM_ENVS, num_workers=2, **kwargs
    )


@pytest.mark.parametrize(
    ("context", "shared_memory", "autoreset_mode"),
    [
        pytest.param(STARTS[-1], True, AutoresetMode.NEXT_STEP, id="spawn-shm-next"),
        pytest.param(STARTS[-1], False, AutoresetMode.SAME_STEP, id="spawn-pipe-same"),
        pytest.param(STARTS[0], True, AutoresetMode.DISABLED, id="fsrv-shm-disabled"),
        pytest.param(STARTS[0], False, AutoresetMode.NEXT_STEP, id="fsrv-pipe-next"),
    ],
)
def test_sigint_in_a_step_loop_never_returns_older_rows(
    arm, context, shared_memory, autoreset_mode
):
    envs = _echo_envs(
        context=context, shared_memory=shared_memory, autoreset_mode=autoreset_mode
    )
    run, rng, landed = _Run(envs), random.Random(11), 0
    try:
        envs.reset(seed=0)

        def body() -> None:
            for _ in range(30):
                run.step()

        for _ in range(80):
            landed += _interrupted(arm, rng, body)
            run.recover(run.step)
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert landed >= 60  # the signals did land
    assert run.checked > 80


def test_sigint_in_reset_always_starts_fresh_episodes(arm):
    envs = _echo_envs(context=STARTS[-1])
    run, rng, landed = _Run(envs), random.Random(12), 0

    def reset_then_step(seed: int) -> None:
        obs, _ = envs.reset(seed=seed)
        _expect(obs, -1.0, run.wrong, steps=0.0)
        obs = run.raw_step()
        _expect(obs, run.value, run.wrong, steps=1.0)  # the step right after reset
        run.checked += 1

    try:
        envs.reset(seed=0)
        for trial in range(100):

            def body(trial: int = trial) -> None:
                for k in range(6):
                    reset_then_step(10 * trial + k)
                    run.step()

            landed += _interrupted(arm, rng, body)
            seed = 1000 + trial
            run.recover(functools.partial(reset_then_step, seed))
            assert envs.np_random_seed == tuple(seed + i for i in range(NUM_ENVS))
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert landed >= 60


def test_sigint_in_call_get_attr_and_set_attr(arm):
    envs = _echo_envs(context=STARTS[-1], shared_memory=False)
    run, rng, landed = _Run(envs), random.Random(13), 0

    def set_step_and_read(base: float) -> None:
        envs.set_attr("steps", base)
        obs = run.raw_step()
        _expect(obs, run.value, run.wrong, steps=base + 1)
        run.checked += 1
        for got in (envs.get_attr("steps"), envs.call("get_wrapper_attr", "steps")):
            if got != (base + 1,) * NUM_ENVS:
                run.wrong.append({"call": base + 1, "got": got})
                pytest.fail(f"call results of another call: {got}")

    try:
        envs.reset(seed=0)
        for trial in range(120):
            base = 10.0 * trial
            landed += _interrupted(arm, rng, functools.partial(set_step_and_read, base))
            run.recover(functools.partial(set_step_and_read, base + 5))
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert landed >= 60


def test_sigint_in_send_and_recv_batches(arm):
    envs = _echo_envs(context=STARTS[-1], batch_size=2)
    rng, landed, wrong = random.Random(14), 0, []
    sent = dict.fromkeys(range(NUM_ENVS), -1.0)
    value = 0.0

    def drain() -> list[int]:
        seen = []
        while envs.pending_env_ids:
            obs, *_, infos = envs.recv(timeout=WAIT)
            for row, env_id in zip(obs, infos["env_id"], strict=True):
                if row[0] != sent[int(env_id)]:
                    wrong.append({"env": int(env_id), "sent": sent[int(env_id)]})
                    pytest.fail(f"env {env_id}: sent {sent[int(env_id)]}, got {row}")
            seen += infos["env_id"].tolist()
        return seen

    def round_trip() -> None:
        nonlocal value
        drain()
        value += 1.0
        sent.update(dict.fromkeys(range(NUM_ENVS), value))
        envs.send(np.full(NUM_ENVS, value), np.arange(NUM_ENVS))
        assert sorted(drain()) == list(range(NUM_ENVS))

    try:
        envs.reset(seed=0)
        for _ in range(120):
            landed += _interrupted(arm, rng, round_trip)
            for _ in range(3):
                try:
                    round_trip()
                    break
                except AlreadyPendingCallError:
                    drain()
            else:
                pytest.fail("send/recv did not recover from an interrupt")
    finally:
        _close_promptly(envs)
    assert wrong == []
    assert landed >= 60


def _step_for_3_s(envs: vecpool.AsyncVectorEnv, rng: random.Random) -> None:
    for _ in range(10):
        envs.step(np.full(NUM_ENVS, rng.random()))


@pytest.mark.parametrize("context", STARTS)
def test_close_after_a_sigint_is_prompt_and_leaves_no_child(arm, context):
    rng = random.Random(15)
    for delay in (1e-4, 0.05, 0.4):
        envs = _echo_envs(0.3, context=context)
        try:
            envs.reset(seed=0)
            arm(delay)
            with pytest.raises(KeyboardInterrupt):
                _step_for_3_s(envs, rng)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _close_promptly(envs)


@pytest.mark.parametrize("shared_memory", [True, False])
def test_step_wait_timeout_then_later_steps_are_right(shared_memory):
    envs = _echo_envs(0.05, context=STARTS[-1], shared_memory=shared_memory)
    run = _Run(envs)
    try:
        envs.reset(seed=0)
        for _ in range(8):
            run.value += 1.0
            run.sent = run.value
            envs.step_async(np.full(NUM_ENVS, run.value))
            with pytest.raises(multiprocessing.TimeoutError):
                envs.step_wait(timeout=0.001)
            run.recover(run.step)
            run.recover(run.step)
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert run.checked == 16


@pytest.mark.parametrize("shared_memory", [True, False])
def test_two_threads_get_a_clear_error_never_other_rows(shared_memory):
    envs = _echo_envs(0.0005, context=STARTS[-1], shared_memory=shared_memory)
    refused: list[str] = []
    wrong: list[Any] = []

    def loop(base: float) -> None:
        for step in range(150):
            value = base + step
            try:
                obs, *_ = envs.step(np.full(NUM_ENVS, value))
            except RuntimeError as error:  # vecpool's ConcurrentUseError
                refused.append(str(error))
                continue
            except AlreadyPendingCallError:
                continue  # the other thread's step_async went first
            if not np.all(obs[:, 0] == value):
                wrong.append((value, obs[:, 0].tolist()))

    envs.reset(seed=0)
    threads = [threading.Thread(target=loop, args=(b,)) for b in (1e3, 1e6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(40)
        assert not any(thread.is_alive() for thread in threads), "a thread hung"
        assert wrong == [], "a thread got rows of the other thread's step"
        assert refused, "concurrent use of one vector env was never reported"
        assert all(re.search("thread|concurren", msg, re.I) for msg in refused)
        # the env still works for one thread afterwards
        run = _Run(envs)
        run.recover(run.step)
        assert run.wrong == []
    finally:
        _close_promptly(envs)


def test_a_step_cut_between_its_halves_says_how_to_recover(monkeypatch):
    # issue 22, item 8: a Ctrl-C inside step() after the actions went out left a
    # pending step the user never called `step_async` for
    import gymnasium as gym

    import vecpool.vector.async_env as async_env

    env = vecpool.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
    try:
        env.reset(seed=0)

        def interrupted(self, timeout):
            raise KeyboardInterrupt

        with monkeypatch.context() as patch:
            patch.setattr(async_env, "_RAW_STEP_WAIT", interrupted)
            with pytest.raises(KeyboardInterrupt):
                env.step(np.zeros(2, np.int64))
        with pytest.raises(AlreadyPendingCallError) as raised:
            env.step(np.zeros(2, np.int64))
        message = str(raised.value)
        # Gymnasium's sentence first (its suite matches it), then the way out
        gymnasiums = "Calling `step_async` while waiting for a pending call to `step`"
        assert message.startswith(gymnasiums)
        assert "call `step_wait()`" in message
        env.step_wait()
        env.step(np.zeros(2, np.int64))  # back to normal
        env.step_async(np.zeros(2, np.int64))
        with pytest.raises(AlreadyPendingCallError) as again:
            env.step_async(np.zeros(2, np.int64))
        assert "interrupted" not in str(again.value)  # not a step() cut this time
        env.step_wait()
    finally:
        env.close()
