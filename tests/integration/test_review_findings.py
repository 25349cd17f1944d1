"""Findings of the review of issue 29's engine refactor (one test per finding).

Each test is self-contained (no fixture of tests/conftest.py), so it also runs
against the pre-refactor tree.
"""

from __future__ import annotations

import functools
import multiprocessing

import numpy as np
import pytest
from gymnasium.vector.async_vector_env import _async_worker

import vecpool
from vecpool.testing import ActionEchoEnv


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
