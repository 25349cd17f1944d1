"""A restart never forks the user's process (issue 38, item 2).

A restart happens in the middle of training, when the user's threads (torch's
pools, a logger, a data loader) are alive; a forked child can deadlock on a lock
one of them held, and Python 3.12 warns about it. Replacements start through
Python's fork server (a fresh interpreter), which the constructor starts after
checking that the env functions pickle. ``os.register_at_fork`` sees every
Python-level fork of this process: none may happen during a restart.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.forkserver
import os
import re
import threading
import warnings
from typing import Any

import numpy as np
import pytest

import vecpool
from vecpool.testing import CountingEnv, IncarnationEnv, kill_worker

pytestmark = pytest.mark.timeout(60)

PID = 1  # IncarnationEnv's observation: [env index, pid, step in episode]

FORKS: list[str] = []
"""The threads that forked this process while :data:`RECORDING` is set."""
RECORDING = threading.Event()


def _note_fork() -> None:
    if RECORDING.is_set():
        FORKS.append(threading.current_thread().name)


os.register_at_fork(before=_note_fork)  # cannot be unregistered: gated instead


@pytest.fixture
def user_thread():
    """A thread of the user's, alive until the test ends (a logger, a loader)."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="user's thread", daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join()


@pytest.fixture
def forks():
    """The forks of this process while the test body records them."""
    FORKS.clear()
    yield FORKS
    RECORDING.clear()
    FORKS.clear()


def _fns(n: int) -> list[functools.partial[IncarnationEnv]]:
    return [
        functools.partial(IncarnationEnv, index=i, min_len=50, max_len=60)
        for i in range(n)
    ]


@pytest.mark.parametrize("context", [None, "fork", "spawn"])
def test_a_restart_forks_nothing_while_a_thread_runs(
    make_async, user_thread, forks, context
):
    if context is not None and context not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {context} here")
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart", context=context)
    actions = np.array([1, 0, 1, 0])
    obs, _ = env.reset(seed=3)
    for _ in range(3):
        obs, *_ = env.step(actions)
    last = obs.copy()
    assert user_thread.is_alive()
    RECORDING.set()
    kill_worker(env, 1)
    with pytest.warns(vecpool.VecPoolWarning, match="restarted it"):
        obs, rewards, terminated, truncated, infos = env.step(actions)
    RECORDING.clear()
    assert forks == [], f"the restart forked this process (threads: {forks})"
    assert user_thread.is_alive()
    # the rows a restart promises: the cut, then the new incarnation
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    np.testing.assert_array_equal(terminated, [False] * 4)
    np.testing.assert_array_equal(rewards[2:], [0.0, 0.0])
    np.testing.assert_array_equal(infos["worker_restarted"], [False, False, True, True])
    np.testing.assert_array_equal(obs[2:], last[2:])
    np.testing.assert_array_equal(obs[:2, 2], [4, 4])  # the others stepped on
    new_pid = env.call("get_pid")[2]
    assert new_pid != int(last[2, PID])
    obs, *_ = env.step(actions)  # NextStep: the reset row of the cut episode
    np.testing.assert_array_equal(obs[2:, PID], [new_pid, new_pid])
    np.testing.assert_array_equal(obs[2:, 2], [0, 0])
    np.testing.assert_array_equal(obs[:2, 2], [5, 5])


def _fork_server_pid() -> int | None:
    return getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)


def test_the_fork_server_is_started_by_the_constructor(make_async, forks):
    env = make_async(_fns(2), num_workers=2, on_worker_crash="restart")
    server = _fork_server_pid()
    assert server is not None
    env.reset(seed=0)
    RECORDING.set()
    kill_worker(env, 0)
    with pytest.warns(vecpool.VecPoolWarning, match="restarted it"):
        env.step(np.zeros(2, np.int64))
    RECORDING.clear()
    assert forks == []
    assert _fork_server_pid() == server


def _make_with(lock: threading.Lock) -> CountingEnv:
    with lock:
        return CountingEnv()


def test_env_fns_that_do_not_pickle_are_refused_at_construction(leak_checker):
    lock = threading.Lock()  # a lock cannot be pickled
    fns: list[Any] = [CountingEnv, functools.partial(_make_with, lock), CountingEnv]
    message = "`env_fns[1]` (functools.partial(<function _make_with at 0x"
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        vecpool.AsyncVectorEnv(fns, num_workers=2, on_worker_crash="restart")
    text = str(raised.value)
    assert 'and `on_worker_crash="restart"` sends it to each replacement' in text
    assert "Make it picklable: a module-level function" in text
    assert isinstance(raised.value.__cause__, TypeError)
    leak_checker.assert_no_leaks()


def test_env_fns_need_not_pickle_without_restarts(make_async):
    lock = threading.Lock()
    fns = [functools.partial(_make_with, lock)] * 2
    # under fork the workers inherit them; in this process nothing is pickled
    env = make_async(fns, num_workers=0)
    env.reset(seed=0)


def test_no_thread_of_vecpool_runs_in_the_parent_with_restarts(make_async):
    before = set(threading.enumerate())
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    assert set(threading.enumerate()) == before
    kill_worker(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.step(np.zeros(4, np.int64))
    assert set(threading.enumerate()) == before
    env.close()
    assert set(threading.enumerate()) == before
