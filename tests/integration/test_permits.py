"""``max_concurrency`` permits: one interface, lock permits or the fallback.

Every test runs over both kinds (vecpool/_wire/permits.py): the lock permits the
kernel gives back when a worker dies (Linux), and the semaphore fallback used
where locks cannot be (forced here by making ``LockPermits.create`` refuse).
"""

from __future__ import annotations

import functools
import multiprocessing
import time
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecpool
from vecpool._engine import startup
from vecpool._wire import permits as permits_module
from vecpool.testing import IncarnationEnv, SlowEnv, kill_worker

KINDS = [
    pytest.param(
        "locks",
        marks=pytest.mark.skipif(
            not permits_module.LOCK_PERMITS, reason="lock permits need Linux's memfd"
        ),
    ),
    "semaphore",
]


@pytest.fixture(params=KINDS)
def permit_kind(request, monkeypatch) -> Iterator[list[Any]]:
    """The permits' kind; returns the list the permits each env got are put in."""
    if request.param == "semaphore":
        monkeypatch.setattr(permits_module.LockPermits, "create", lambda count: None)
    made: list[Any] = []
    create = permits_module.create_permits

    def spy(*args: Any) -> Any:
        made.append(create(*args))
        return made[-1]

    monkeypatch.setattr(startup, "create_permits", spy)
    expected = (
        permits_module.LockPermits
        if request.param == "locks"
        else permits_module.SemaphorePermits
    )
    yield made
    assert made, "no permits were made"
    assert all(type(permits) is expected for permits in made)


class _IntervalEnv(gym.Env):
    """Each step sleeps 20 ms and reports when it ran (a system-wide clock)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        start = time.monotonic()
        time.sleep(0.02)
        return 0, 0.0, False, False, {"start": start, "end": time.monotonic()}


@pytest.mark.parametrize("limit", [1, 2])
def test_max_concurrency_is_never_exceeded(limit, permit_kind, make_async):
    env = make_async(
        [_IntervalEnv] * 4, num_workers=4, max_concurrency=limit, context="fork"
    )
    env.reset(seed=0)
    intervals = []
    for _ in range(5):
        *_, infos = env.step(np.zeros(4, np.int64))
        intervals += list(zip(infos["start"], infos["end"], strict=True))
    # at no moment do more than `limit` steps run
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals]
    )
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert 1 <= peak <= limit


@pytest.mark.timeout(60)
def test_a_worker_dying_with_the_only_permit_does_not_starve_the_others(
    permit_kind, make_async, tmp_path
):
    marker = str(tmp_path / "crashed")
    fns = [
        functools.partial(IncarnationEnv, index=i, crash_marker=marker, crash_at=2)
        for i in range(2)
    ]
    env = make_async(fns, num_workers=2, max_concurrency=1, on_worker_crash="restart")
    env.reset(seed=0)
    env.step(np.zeros(2, np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.step(np.zeros(2, np.int64))  # one worker died holding the only permit
        for _ in range(3):  # the permit came back: no step waits for ever
            env.step(np.zeros(2, np.int64))
    assert sum(env.restarts) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("then", ["step", "recv"])
def test_a_permit_held_by_a_killed_worker_comes_back(then, permit_kind, make_async):
    env = make_async(
        [SlowEnv] * 4,
        num_workers=2,
        max_concurrency=1,
        on_worker_crash="restart",
        batch_size=None if then == "step" else 2,
        context="fork",
    )
    env.reset(seed=0)
    actions = np.zeros((4, 1), np.float32)
    actions[2:] = 1.0  # worker 1 steps 2 s holding the only permit
    env.step_async(actions)
    with pytest.raises(multiprocessing.TimeoutError):
        env.step_wait(timeout=0.3)
    kill_worker(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        if then == "step":  # worker 0 gets the permit back: nothing waits for ever
            for _ in range(2):
                env.step(np.zeros((4, 1), np.float32))
        else:  # a `send` to worker 0's envs only, after worker 1 was found dead
            env.send(np.zeros((2, 1), np.float32), [0, 1])
            _, _, _, _, infos = env.recv()
            assert sorted(infos["env_id"].tolist()) == [0, 1]


def test_no_permits_without_a_limit_to_keep(permit_kind, make_async):
    # max_concurrency >= workers, or every env in this process: nothing to limit
    make_async([_IntervalEnv] * 2, num_workers=2, max_concurrency=2).reset(seed=0)
    make_async([_IntervalEnv] * 2, num_workers=0, max_concurrency=1).reset(seed=0)
    assert not permit_kind
    permit_kind.append(  # (the fixture checks its kind)
        permits_module.create_permits(1, 2, multiprocessing.get_context("fork"))
    )
