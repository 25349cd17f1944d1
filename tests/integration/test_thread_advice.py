"""The advice on ``policy_threads`` is measured while stepping (issue 38, item 4).

numpy's OpenBLAS starts one thread per CPU at import, so a check of the pools at
construction warned on every 2-CPU machine, policy or not. The advice now needs a
measurement: the parent's CPU seconds per wall second between steps
(:class:`vecpool._engine.spinning.ThreadWatch`). Each test fakes the CPUs (2) and
the pools (OpenBLAS with a thread per CPU), so it shows the same on any machine;
the multi-threaded policy fakes the process's CPU clock (2.5 CPU seconds per
second), so no assert depends on how busy the machine is.
"""

from __future__ import annotations

import time
import warnings

import gymnasium as gym
import numpy as np
import pytest

import vecpool
from vecpool._engine.spinning import POLICY_THREADS, ThreadWatch
from vecpool._util import threads
from vecpool._util.threads import ThreadPools
from vecpool.testing import CountingEnv, assert_same_data
from vecpool.vector import async_env

NUM_ENVS = 4
STEPS = 1000  # 15 windows of ThreadWatch.EVERY commands


@pytest.fixture
def two_cpus(monkeypatch):
    """A 2-CPU machine whose OpenBLAS has a thread per CPU, not yet advised."""
    monkeypatch.setattr(async_env, "available_cpus", lambda: 2)
    monkeypatch.setattr(
        threads, "parent_pools", lambda: ThreadPools((("openblas", 2),))
    )
    monkeypatch.setattr(threads, "_warned", False)
    # every EVERY commands is a window: no wait for a quarter second of steps
    monkeypatch.setattr(ThreadWatch, "WINDOW", 0.0)


def _multi_threaded(env):
    """Fake a policy on 2.5 threads: the parent's CPU clock runs 2.5x the wall's."""
    watch = env.unwrapped._group.spin.watch
    assert watch is not None
    watch.cpu_clock = lambda: 2.5 * time.perf_counter()
    return watch


def _advice(caught):
    return [w for w in caught if w.category is vecpool.VecPoolPerformanceWarning]


def test_a_loop_without_a_policy_never_warns(two_cpus, make_async):
    # what `vecpool collect`, Gymnasium's tests and a first script do: the
    # constructor used to warn here, from the pools alone
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs = make_async([CountingEnv] * NUM_ENVS, num_workers=1)
        envs.reset(seed=0)
        for _ in range(STEPS):
            envs.step(envs.action_space.sample())
        watch = envs._group.spin.watch
    assert _advice(caught) == []
    assert watch is not None  # still watching: a policy may start later
    assert watch.threads is not None  # measured, and one thread at most
    assert watch.threads <= POLICY_THREADS


def test_a_policy_on_several_threads_warns_once_with_what_was_measured(
    two_cpus, make_async
):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs = make_async([CountingEnv] * NUM_ENVS, num_workers=1)
        _multi_threaded(envs)
        envs.reset(seed=0)
        for _ in range(STEPS):
            envs.step(envs.action_space.sample())  # the user's line
    (advice,) = _advice(caught)
    message = str(advice.message)
    assert message.startswith("vecpool: over its last 64 steps this process ran on ")
    assert "2.5 threads on average (CPU seconds per wall second)" in message
    assert "openblas: 2 threads" in message
    assert "the 1 worker process of this AsyncVectorEnv" in message
    assert "the 2 available" in message
    assert "policy_threads='auto'" in message
    assert "OMP_NUM_THREADS=1" in message
    assert advice.filename == __file__
    assert envs._group.spin.watch is None  # measured once: no more cost a step


def test_the_advice_raised_as_an_error_leaves_the_env_stepping(two_cpus, make_async):
    # the suite (and `-W error`) turn warnings into errors: nothing was sent then,
    # and the next step goes on with the same actions and results as Sync
    envs = make_async([CountingEnv] * NUM_ENVS, num_workers=1)
    _multi_threaded(envs)
    sync = gym.vector.SyncVectorEnv([CountingEnv] * NUM_ENVS)
    assert_same_data(sync.reset(seed=0), envs.reset(seed=0), "reset")
    raised = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", vecpool.VecPoolPerformanceWarning)
        for step in range(STEPS):
            actions = np.full(NUM_ENVS, step % 3, np.int64)
            try:
                result = envs.step(actions)
            except vecpool.VecPoolPerformanceWarning:
                raised += 1
                result = envs.step(actions)  # the same step, sent this time
            assert_same_data(sync.step(actions), result, f"step {step}")
    sync.close()
    assert raised == 1


def test_send_gives_the_advice_before_anything_is_sent(two_cpus, make_async):
    envs = make_async([CountingEnv] * NUM_ENVS, num_workers=1, batch_size=NUM_ENVS)
    _multi_threaded(envs)
    envs.reset(seed=0)
    actions = np.zeros(NUM_ENVS, np.int64)
    ids = np.arange(NUM_ENVS)
    raised = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", vecpool.VecPoolPerformanceWarning)
        for _ in range(STEPS):
            try:
                envs.send(actions, ids)
            except vecpool.VecPoolPerformanceWarning as warning:
                raised.append(str(warning))
                assert envs.pending_env_ids == []  # nothing in flight
                envs.send(actions, ids)
            assert len(envs.recv()[0]) == NUM_ENVS
    assert len(raised) == 1
    assert "policy_threads='auto'" in raised[0]


def test_several_threads_that_fit_beside_the_workers_are_not_advised(
    monkeypatch, two_cpus, make_async
):
    monkeypatch.setattr(async_env, "available_cpus", lambda: 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs = make_async([CountingEnv] * NUM_ENVS, num_workers=1)
        watch = _multi_threaded(envs)
        envs.reset(seed=0)
        for _ in range(STEPS):
            envs.step(envs.action_space.sample())
    assert _advice(caught) == []
    assert watch.threads is not None
    assert watch.threads > POLICY_THREADS  # measured, then judged: pools fit
    assert envs._group.spin.watch is None  # the verdict is final


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 0},  # no worker to compete with
        {"num_workers": 1, "policy_threads": "auto"},  # the fix is in force
        {"num_workers": 1, "policy_threads": 1},
    ],
)
def test_nothing_is_watched_where_there_is_nothing_to_advise(
    two_cpus, make_async, kwargs
):
    envs = make_async([CountingEnv] * NUM_ENVS, **kwargs)
    assert envs._group.spin.watch is None


def test_nothing_is_watched_once_this_process_was_advised(
    monkeypatch, two_cpus, make_async
):
    monkeypatch.setattr(threads, "_warned", True)
    envs = make_async([CountingEnv] * NUM_ENVS, num_workers=1)
    assert envs._group.spin.watch is None


def test_a_short_burst_of_threads_is_not_a_policy():
    # one window above the threshold (a checkpoint, an evaluation) is not enough
    wall = cpu = 0.0

    def step(threads_now: float) -> bool:
        nonlocal wall, cpu
        wall += 0.01
        cpu += 0.01 * threads_now
        watch.countdown -= 1
        return not watch.countdown and watch.measured()

    watch = ThreadWatch(1, 2, clock=lambda: wall, cpu_clock=lambda: cpu)
    # EVERY commands of 10 ms each outlast WINDOW: each read ends a window
    pattern = [1.0] * ThreadWatch.EVERY + [3.0] * ThreadWatch.EVERY
    assert not any(step(threads_now) for threads_now in pattern * 20)
    assert watch.above <= 1
