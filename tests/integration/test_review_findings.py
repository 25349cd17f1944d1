"""Findings of the review of issue 29's engine refactor (one test per finding).

Each test is self-contained (no fixture of tests/conftest.py), so it also runs
against the pre-refactor tree.
"""

from __future__ import annotations

import functools
import multiprocessing
import time

import numpy as np
import pytest
from gymnasium.vector.async_vector_env import _async_worker

import vecpool
from vecpool.testing import ActionEchoEnv, SlowEnv, kill_worker


@pytest.mark.timeout(20)
def test_custom_worker_call_after_a_timeout_does_not_wait_for_the_stuck_env():
    """A custom ``worker=``: after a step times out on a stuck env, the next call
    must not block until that env's late reply comes (it ignores the new call's
    own timeout, and hangs for good on an env that never returns).

    Before issue 29 the late reply was dropped by its number: ``step_async``
    returned at once and ``step_wait(timeout=...)`` timed out again.
    """
    env = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, delay=60.0)] * 2, worker=_async_worker
    )
    try:
        env.reset(seed=0)
        env.step_async(np.array([1.0, 1.0]))
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.1)
        env.step_async(np.array([2.0, 3.0]))  # blocked 60 s in GymnasiumWorkerEnv
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.1)
    finally:
        env.close(terminate=True)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::vecpool.VecPoolWarning")
def test_a_result_lost_by_a_call_that_timed_out_is_not_raised_by_the_next_step():
    """A worker dies during ``call``, is restarted, and the call then times out.

    The call's "result of `call` is lost" error belonged to the call that gave up;
    it must not be raised by the next ``step``, which would throw away that step's
    rows, the replacement's cut rows among them: the cut would then never be
    marked (``infos["worker_restarted"]``). Pre-existing (the same before issue 29).
    """
    env = vecpool.AsyncVectorEnv(
        [SlowEnv] * 4, num_workers=2, on_worker_crash="restart"
    )
    try:
        env.reset(seed=0)
        env.call_async("sleep", 4.0)  # both workers busy
        time.sleep(0.3)
        kill_worker(env, 1)  # restarted within the call's wait
        with pytest.raises(multiprocessing.TimeoutError):
            env.call_wait(timeout=2.0)  # worker 0 still sleeps: the call gives up
        _, _, _, truncated, infos = env.step(np.zeros((4, 1), np.float32))
        assert truncated.tolist() == [False, False, True, True]
        assert infos["worker_restarted"].tolist() == [False, False, True, True]
    finally:
        env.close(terminate=True)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::vecpool.VecPoolWarning")
@pytest.mark.xfail(
    strict=True,
    reason="known limit (docs/reliability.md): the Restarter tracks unseen cuts "
    "per worker, and only for a restart during step or reset",
)
def test_the_cut_of_a_restart_during_a_call_survives_a_step_that_gives_up():
    """A worker restarted during ``call``: "the replaced envs report the cut at
    their next step" (docs/reliability.md). If that step gives up (a timeout while
    another worker is slow), its rows that marked the cut were never returned, so
    the step after must mark it again, as it does after a restart in a step or a
    reset (``CUT_AGAIN``). Only step/reset restarts join ``Restarter.unseen_cuts``,
    so the cut is never shown. Pre-existing (the same before issue 29).
    """
    env = vecpool.AsyncVectorEnv(
        [SlowEnv] * 4, num_workers=2, on_worker_crash="restart"
    )
    try:
        env.reset(seed=0)
        env.call_async("sleep", 1.0)
        time.sleep(0.3)
        kill_worker(env, 1)
        with pytest.raises(vecpool.WorkerCrashedError, match="result of `call`"):
            env.call_wait()
        # worker 0 sleeps 2 s; worker 1 (the replacement) answers with its cut rows
        env.step_async(np.array([[2.0], [2.0], [0.0], [0.0]], np.float32))
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.5)
        time.sleep(2.0)
        _, _, _, truncated, infos = env.step(np.zeros((4, 1), np.float32))
        assert truncated.tolist() == [False, False, True, True]
        assert infos["worker_restarted"].tolist() == [False, False, True, True]
    finally:
        env.close(terminate=True)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::vecpool.VecPoolWarning")
@pytest.mark.xfail(
    strict=True,
    reason="known limit (docs/reliability.md): a reset that returns clears its "
    "worker's unseen cut, also for the envs its reset_mask left out",
)
def test_the_cut_of_an_env_left_out_of_a_reset_survives_a_step_that_gives_up():
    """Same root cause as the test above: a reset restarts worker 1; env 3, left out
    by ``reset_mask``, "reports the cut at its next step" (docs/reliability.md).
    ``reset_wait`` returning clears the replacement from ``Restarter.unseen_cuts``
    although env 3's cut is still to come, so when that next step gives up, the
    cut is never shown. Pre-existing (the same before issue 29).
    """
    env = vecpool.AsyncVectorEnv(
        [SlowEnv] * 4, num_workers=2, on_worker_crash="restart"
    )
    try:
        env.reset(seed=0)
        env.step(np.zeros((4, 1), np.float32))
        kill_worker(env, 1)
        _, infos = env.reset(
            options={"reset_mask": np.array([True, True, True, False])}
        )
        assert infos["worker_restarted"].tolist() == [False, False, True, False]
        env.step_async(np.array([[2.0], [2.0], [0.0], [0.0]], np.float32))
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.5)
        time.sleep(2.0)
        _, _, _, truncated, infos = env.step(np.zeros((4, 1), np.float32))
        assert truncated.tolist() == [False, False, False, True]
        assert infos["worker_restarted"].tolist() == [False, False, False, True]
    finally:
        env.close(terminate=True)
