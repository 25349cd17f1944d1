"""The cut of a restart is shown once, even when the calls around it give up.

Found by a review of the CUT_AGAIN replay (vecpool/_wire/messages.py): each case
failed before its fix. Env 2 and 3 live on worker 1; envs 0 and 1 are slow, so a
``*_wait(timeout=0.3)`` gives up while worker 1 is restarted.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.testing import IncarnationEnv

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::vecpool.VecPoolWarning"),
]
PID = 1  # IncarnationEnv's observation: [env index, pid, step in episode]


class _Slow(IncarnationEnv):
    def __init__(self, step_delay: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.step_delay = step_delay

    def step(self, action):
        time.sleep(self.step_delay)
        return super().step(action)

    def reset(self, *, seed=None, options=None):
        time.sleep(self.step_delay)
        return super().reset(seed=seed, options=options)


def _make(make_async, mode=AutoresetMode.NEXT_STEP, **kwargs):
    fns = [
        functools.partial(
            _Slow, index=i, step_delay=0.6 if i < 2 else 0.0, min_len=50, max_len=50
        )
        for i in range(4)
    ]
    return make_async(
        fns, num_workers=2, on_worker_crash="restart", autoreset_mode=mode, **kwargs
    )


def _kill(env, worker):
    process = env.processes[worker]
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)


def _marks(infos):
    return infos.get("worker_restarted", np.zeros(4, bool)).tolist()


def _give_up(call):
    with pytest.raises(multiprocessing.TimeoutError):
        call()


@pytest.mark.parametrize("actions", ["ndarray", "list"])
def test_a_restart_at_send_then_a_timeout_still_marks_the_cut(make_async, actions):
    env = _make(make_async)
    last, _ = env.reset(seed=0)
    _kill(env, 1)  # found dead when the next command goes out
    env.step_async(np.zeros(4, np.int64) if actions == "ndarray" else [0, 0, 0, 0])
    _give_up(lambda: env.step_wait(timeout=0.3))
    time.sleep(1.5)
    obs, _, _, _, infos = env.step(np.zeros(4, np.int64))
    assert _marks(infos) == [False, False, True, True]
    np.testing.assert_array_equal(obs[2:], last[2:])


def test_a_reset_restart_at_send_then_a_timeout_marks_the_next_reset(make_async):
    env = _make(make_async)
    env.reset(seed=0)
    _kill(env, 1)
    env.reset_async(seed=1)
    _give_up(lambda: env.reset_wait(timeout=0.3))
    time.sleep(1.5)
    _, infos = env.reset(seed=2)
    assert _marks(infos) == [False, False, True, True]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_two_give_ups_in_a_row_still_mark_the_cut(make_async, mode):
    env = _make(make_async, mode)
    env.reset(seed=0)
    env.step_async(np.zeros(4, np.int64))
    _kill(env, 1)
    _give_up(lambda: env.step_wait(timeout=0.3))
    env.step_async(np.zeros(4, np.int64))
    _give_up(lambda: env.step_wait(timeout=0.3))
    time.sleep(3.0)
    _, _, _, truncated, infos = env.step(np.zeros(4, np.int64))
    assert _marks(infos) == [False, False, True, True]
    assert truncated[2:].all()


def test_no_stale_cut_after_batches_stepped_the_new_incarnation(make_async):
    env = _make(make_async, batch_size=2)
    env.reset(seed=0)
    env.step_async(np.zeros(4, np.int64))
    _kill(env, 1)
    _give_up(lambda: env.step_wait(timeout=0.3))
    time.sleep(1.5)
    for _ in range(3):
        env.send(np.zeros(2, np.int64), [2, 3])
        seen = env.recv()[0]
    obs, _, _, truncated, infos = env.step(np.zeros(4, np.int64))
    assert not truncated[2:].any()
    assert _marks(infos)[2:] == [False, False]
    assert (obs[2:, PID] == seen[:, PID]).all()


def test_same_step_masked_reset_after_a_give_up_keeps_the_unreset_row(make_async):
    env = _make(make_async, AutoresetMode.SAME_STEP)
    last, _ = env.reset(seed=0)
    env.step_async(np.zeros(4, np.int64))
    _kill(env, 1)
    _give_up(lambda: env.step_wait(timeout=0.3))
    time.sleep(1.5)
    mask = np.array([False, False, True, False])
    obs, _ = env.reset(seed=5, options={"reset_mask": mask})
    np.testing.assert_array_equal(obs[3], last[3])


def test_an_in_process_constructor_interrupted_keeps_the_interrupt():
    calls = [0]

    def make():
        calls[0] += 1
        if calls[0] == 2:  # the first call builds the throw-away env
            raise KeyboardInterrupt
        import gymnasium as gym

        return gym.make("CartPole-v1")

    with pytest.raises(KeyboardInterrupt):
        vecpool.AsyncVectorEnv([make, make], num_workers=0)
