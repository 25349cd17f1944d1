"""Ctrl-C at any point of a call, and calls from two threads, never shift data.

Every observation of :class:`vecpool.testing.ActionEchoEnv` names the action that
produced it, so a row that belongs to another step shows at once. Real SIGINTs are
sent from a timer thread at random moments (2 µs to 4 ms into a run of calls), so
they land everywhere: between two workers' sends, right after a reply was read,
after every reply was gathered, inside the state change. Against vecpool 0.1 these
runs returned older steps' rows (sent 504, observed 501) or hung in the next call.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
import time

import numpy as np
import pytest

import vecpool
from vecpool.errors import AlreadyPendingCallError, ConcurrentUseError
from vecpool.testing import ActionEchoEnv

pytestmark = [
    pytest.mark.usefixtures("python_sigint_handler"),
    pytest.mark.timeout(90),  # a hang fails the test instead of stalling CI
    # a SIGINT that lands in a destructor is "ignored" (printed) by Python itself
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NUM_ENVS = 4


def _interrupt_later(rng: random.Random) -> threading.Timer:
    """A timer that sends SIGINT; start it inside the ``try`` that catches it."""
    return threading.Timer(
        rng.uniform(2e-6, 0.004), os.kill, (os.getpid(), signal.SIGINT)
    )


def _settle(timer: threading.Timer) -> bool:
    """Let a late SIGINT land here; return whether one did."""
    try:
        if timer.ident is not None:  # started
            timer.join()
        time.sleep(0.002)
    except KeyboardInterrupt:
        return True
    return False


class _Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def next(self) -> float:
        self.value += 1.0
        return self.value


def _checked_step(envs, counter, rows):
    value = counter.next()
    obs, *_, infos = envs.step(np.full(NUM_ENVS, value))
    np.testing.assert_array_equal(obs[:, 0], value)
    rows.append(value)
    if "action" in infos:
        np.testing.assert_array_equal(infos["action"], value)


def _recover(envs, counter, rows):
    """After an interrupt: finish what is pending, then one checked step."""
    for _ in range(3):
        try:
            _checked_step(envs, counter, rows)
            return
        except AlreadyPendingCallError:
            # the interrupt came after the commands went out: their results
            # are still to be collected
            for wait in (envs.step_wait, envs.reset_wait, envs.call_wait):
                try:
                    wait(timeout=10)
                    break
                except vecpool.errors.NoAsyncCallError:
                    continue
        except KeyboardInterrupt:
            continue
    pytest.fail("the vector env did not recover from an interrupt")


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("info", [False, True])
def test_random_interrupts_in_step_never_return_older_rows(shared_memory, info):
    envs = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, 0.0, info)] * NUM_ENVS,
        num_workers=2,
        shared_memory=shared_memory,
    )
    rng, counter, rows, interrupts = random.Random(0), _Counter(), [], 0  # type: ignore[var-annotated]
    try:
        envs.reset(seed=0)
        for _ in range(120):
            timer = _interrupt_later(rng)
            try:
                timer.start()
                for _ in range(40):
                    _checked_step(envs, counter, rows)
                interrupts += _settle(timer)
            except KeyboardInterrupt:
                interrupts += 1
                interrupts += _settle(timer)
            except BaseException:
                timer.cancel()
                _settle(timer)
                raise
            _recover(envs, counter, rows)
    finally:
        envs.close()  # a hang fails through the module's timeout
    assert not any(process.is_alive() for process in envs.processes)
    assert interrupts >= 100  # the signals did land
    assert len(rows) > 120


def test_random_interrupts_in_reset_call_and_batches():
    envs = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, 0.0, True)] * NUM_ENVS,
        num_workers=2,
        batch_size=2,
    )
    rng, counter = random.Random(1), _Counter()
    interrupts = 0
    try:
        envs.reset(seed=0)
        for trial in range(150):
            timer = _interrupt_later(rng)
            try:
                timer.start()
                kind = trial % 3
                if kind == 0:
                    obs, infos = envs.reset(seed=trial)
                    np.testing.assert_array_equal(obs[:, 0], -1.0)
                elif kind == 1:
                    value = counter.next()
                    envs.set_attr("steps", value)
                    assert envs.get_attr("steps") == (value,) * NUM_ENVS
                else:
                    while envs.pending_env_ids:  # an interrupted batch
                        envs.recv(timeout=10)
                    value = counter.next()
                    envs.send(np.full(NUM_ENVS, value), np.arange(NUM_ENVS))
                    seen = []  # type: ignore[var-annotated]
                    while len(seen) < NUM_ENVS:
                        obs, *_, infos = envs.recv(timeout=10)
                        np.testing.assert_array_equal(obs[:, 0], value)
                        seen += infos["env_id"].tolist()
                    assert sorted(seen) == list(range(NUM_ENVS))
                interrupts += _settle(timer)
            except KeyboardInterrupt:
                interrupts += 1
                interrupts += _settle(timer)
            except BaseException:
                timer.cancel()
                _settle(timer)
                raise
            # recover: drain batches, finish pending calls, then check one reset
            for _ in range(3):
                try:
                    while envs.pending_env_ids:
                        envs.recv(timeout=10)
                    obs, _ = envs.reset(seed=7)
                    np.testing.assert_array_equal(obs[:, 0], -1.0)
                    break
                except AlreadyPendingCallError:
                    for wait in (envs.reset_wait, envs.call_wait):
                        try:
                            wait(timeout=10)
                            break
                        except vecpool.errors.NoAsyncCallError:
                            continue
                except KeyboardInterrupt:
                    continue
    finally:
        envs.close()  # a hang fails through the module's timeout
    assert not any(process.is_alive() for process in envs.processes)
    assert interrupts >= 100


def test_a_second_thread_is_refused_and_never_gets_other_rows():
    envs = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, 0.0005)] * NUM_ENVS, num_workers=2
    )
    envs.reset(seed=0)
    refused = []
    wrong = []

    def run(base: float) -> None:
        for step in range(200):
            value = base + step
            try:
                obs, *_ = envs.step(np.full(NUM_ENVS, value))
            except ConcurrentUseError as error:
                refused.append(str(error))
                continue
            except AlreadyPendingCallError:
                continue  # the other thread's step_async went first
            if not np.all(obs[:, 0] == value):
                wrong.append((value, obs[:, 0].tolist()))

    threads = [threading.Thread(target=run, args=(base,)) for base in (1e3, 1e6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        envs.close()
    assert wrong == []
    assert refused, "concurrent calls were never detected"
    assert "not thread-safe" in refused[0]


def test_close_returns_after_an_interrupted_wait():
    envs = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, 0.5)] * NUM_ENVS, num_workers=2
    )
    envs.reset(seed=0)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        envs.step(np.zeros(NUM_ENVS))
    timer.join()
    envs.close()  # a hang fails through the module's timeout
    assert envs.closed
    assert not any(process.is_alive() for process in envs.processes)
