"""``close()`` releases pipes and shared memory at once, not at a garbage collection.

Issue 38, item 1: a long run builds and closes vector envs again and again
(evaluation envs, a sweep in one process). Each cycle here builds an env, resets,
steps and closes it with the cyclic garbage collector off; after one warm-up env
(first-use costs: the resource tracker, the fork server, multiprocessing's shared
heap), the process's open descriptors and its ``/dev/shm`` mappings must be back
where they were, within 2. A mapping may outlive ``close()`` only while the user
holds an array the env returned (``copy=False``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import vecpool
from vecpool.testing import (
    DeliberateError,
    IncarnationEnv,
    RaisingEnv,
    kill_worker,
    make_env_fns,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads /proc/self (Linux)"
    ),
]

CYCLES = 8
SLACK = 2  # "back where they were, within 2"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shm_mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum("/dev/shm" in line for line in maps)


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The cyclic garbage collector off for the test body (restored after)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()


def _assert_released(cycle: Callable[[], Any], cycles: int = CYCLES) -> None:
    """Run ``cycle`` once to warm up, then ``cycles`` times: nothing may pile up."""
    cycle()
    fds, mappings = _open_fds(), _shm_mappings()
    for _ in range(cycles):
        cycle()
    assert _open_fds() - fds <= SLACK, (
        f"open descriptors {fds} -> {_open_fds()} after {cycles} closed envs"
    )
    assert _shm_mappings() - mappings <= SLACK, (
        f"/dev/shm mappings {mappings} -> {_shm_mappings()} after {cycles} closed envs"
    )


def _run(envs: vecpool.AsyncVectorEnv, steps: int = 20) -> None:
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(steps):
        envs.step(envs.action_space.sample())


def test_close_releases_pipes_and_mappings_at_once(placement, collector_off):
    def cycle() -> None:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(make_env_fns(4, max_steps=7), **placement.kwargs(4))
        ) as envs:
            _run(envs)

    _assert_released(cycle)


def test_a_closed_env_still_referenced_holds_no_pipe_or_mapping(
    placement, collector_off
):
    held: list[vecpool.AsyncVectorEnv] = []  # the user keeps the closed objects

    def cycle() -> None:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(make_env_fns(4, max_steps=7), **placement.kwargs(4))
        ) as envs:
            _run(envs)
        held.append(envs)

    _assert_released(cycle)
    assert all(envs.closed for envs in held)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"batch_size": 2}, {"shared_memory": False}, {"max_concurrency": 1}],
    ids=["plain", "batches", "pickled_obs", "permits"],
)
def test_close_releases_everything_in_restart_mode(kwargs, collector_off):
    def cycle() -> None:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(
                make_env_fns(4, max_steps=7),
                num_workers=2,
                on_worker_crash="restart",
                **kwargs,
            )
        ) as envs:
            _run(envs, steps=5)

    _assert_released(cycle)


def test_a_restart_releases_the_dead_worker_and_close_the_rest(collector_off):
    fns = [functools.partial(IncarnationEnv, index=i) for i in range(4)]

    def cycle() -> None:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(fns, num_workers=2, on_worker_crash="restart")
        ) as envs:
            _run(envs, steps=3)
            kill_worker(envs, 1)
            with pytest.warns(vecpool.VecPoolWarning, match="restarted it"):
                envs.step(np.zeros(4, np.int64))
            _run(envs, steps=3)

    _assert_released(cycle, cycles=3)


# -- error paths ---------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_a_constructor_error_in_a_worker_releases_everything(
    placement, collector_off, tmp_path
):
    marker = tmp_path / "refuse"
    marker.touch()
    # env 0 builds (the parent reads the spaces from it); the last one refuses
    fns = [functools.partial(IncarnationEnv, index=i) for i in range(3)]
    fns.append(functools.partial(IncarnationEnv, index=3, fail_marker=str(marker)))

    def cycle() -> None:
        with pytest.raises(DeliberateError):
            vecpool.AsyncVectorEnv(fns, **placement.kwargs(4))

    _assert_released(cycle)


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_an_env_error_then_close_releases_everything(placement, collector_off):
    fns = make_env_fns(4, env_cls=RaisingEnv, raise_on="step", at=3)

    def cycle() -> None:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(fns, **placement.kwargs(4))
        ) as envs:
            envs.reset(seed=0)
            envs.step(np.zeros(4, np.int64))
            envs.step(np.zeros(4, np.int64))
            with pytest.raises(ValueError, match="failed on purpose"):
                envs.step(np.zeros(4, np.int64))

    _assert_released(cycle)


def test_a_crash_then_close_releases_everything(placement, collector_off):
    placement.skip_unless_isolated()

    def cycle() -> None:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(make_env_fns(4, max_steps=7), **placement.kwargs(4))
        ) as envs:
            _run(envs, steps=2)
            kill_worker(envs, 0)
            with pytest.raises(vecpool.WorkerCrashedError):
                envs.step(envs.action_space.sample())

    _assert_released(cycle)


def test_garbage_collected_without_close_releases_everything(placement, collector_off):
    def cycle() -> None:
        envs = vecpool.AsyncVectorEnv(
            make_env_fns(4, max_steps=7), **placement.kwargs(4)
        )
        _run(envs, steps=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium's note on an unclosed env
            del envs

    _assert_released(cycle)


# -- zero-copy observations ----------------------------------------------------------


def test_an_observation_held_after_close_stays_readable(placement, collector_off):
    def cycle() -> Any:
        with contextlib.closing(
            vecpool.AsyncVectorEnv(
                make_env_fns(4, obs_kind="box", max_steps=7),
                copy=False,
                **placement.kwargs(4),
            )
        ) as envs:
            obs, _ = envs.reset(seed=0)
            saved = obs.copy()
        return obs, saved

    obs, saved = cycle()
    gc.collect()
    obs[...] = obs  # still mapped: reading and writing it is safe
    np.testing.assert_array_equal(obs, saved)
    del obs
    _assert_released(cycle)


def test_no_thread_of_vecpool_outlives_construction_or_close(placement):
    before = set(threading.enumerate())
    envs = vecpool.AsyncVectorEnv(make_env_fns(4), **placement.kwargs(4))
    try:
        assert set(threading.enumerate()) == before
        _run(envs, steps=3)
    finally:
        envs.close()
    assert set(threading.enumerate()) == before
