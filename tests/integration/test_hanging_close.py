"""An env whose own ``close()`` hangs never hangs vecpool (issue 22, items 2 and 3).

Each case runs in a child interpreter under a watchdog (``timeout=``): a hang fails
the test instead of hanging the suite. Nothing here asserts a speed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

_ENV = """
import os, sys, time, warnings
import gymnasium as gym
import numpy as np
import vecpool

PARENT = os.getpid()

class HangingClose(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    def __init__(self, only_in_parent=False):
        self.only_in_parent = only_in_parent
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}
    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}
    def close(self):
        if not self.only_in_parent or os.getpid() == PARENT:
            time.sleep(3600)
"""


def _run(body: str, placed: dict[str, int]) -> subprocess.CompletedProcess[str]:
    script = f"PLACED = {placed!r}\n" + textwrap.dedent(_ENV) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,  # the watchdog: a hang fails here
        check=False,
    )


def test_close_returns_when_an_env_close_hangs(placement):
    done = _run(
        """
        env = vecpool.AsyncVectorEnv(
            [lambda: HangingClose(only_in_parent=False)] * 2, **PLACED
        )
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env.close(timeout=1.0)
        print("closed", env.closed)
        print("warned", any("close()" in str(w.message) for w in caught))
        """,
        placement.kwargs(2),
    )
    assert done.returncode == 0, done.stderr
    assert "closed True" in done.stdout
    # in-process, the env is left behind in a daemon thread and the user is told;
    # a worker's env goes with its worker, terminated after the timeout
    expected = "warned False" if placement.isolated else "warned True"
    assert expected in done.stdout


def test_the_constructor_returns_when_the_throwaway_env_close_hangs(placement):
    done = _run(
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = vecpool.AsyncVectorEnv(
                [lambda: HangingClose(only_in_parent=True)] * 2, **PLACED
            )
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # in-process, these closes hang too
            env.close(timeout=1.0)
        print("built and closed", env.closed)
        print("warned", any("close()" in str(w.message) for w in caught))
        """,
        placement.kwargs(2),
    )
    assert done.returncode == 0, done.stderr
    assert "built and closed True" in done.stdout
    assert "warned True" in done.stdout
