"""The parent's thread pools against the workers' CPUs (vecpool/_util/threads.py)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import types
import warnings

import gymnasium as gym
import numpy as np
import pytest
import threadpoolctl

import vecpool
from vecpool._util import threads
from vecpool._util.threads import (
    PolicyThreads,
    ThreadPools,
    oversubscription,
    parent_pools,
)
from vecpool._util.validation import available_cpus


def _fns(n=2):
    return [lambda: gym.make("CartPole-v1")] * n


@pytest.mark.parametrize(
    ("num_workers", "pools", "cpus"),
    [
        (0, (("openblas", 16),), 2),  # envs in this process: nothing to share
        (2, (("openblas", 1),), 2),  # one thread: no pool to speak of
        (2, (("openblas", 2),), 4),  # fits
        (2, (), 2),  # no pool loaded
    ],
)
def test_no_advice_when_the_pools_fit(num_workers, pools, cpus):
    assert oversubscription(num_workers, ThreadPools(pools), cpus) is None


def test_advice_names_the_pools_the_cpus_and_the_fix():
    pools = ThreadPools((("openblas", 2), ("torch", 16)))
    message = oversubscription(2, pools, 16)
    assert message is not None
    assert "openblas: 2 threads, torch: 16 threads" in message
    assert "2 worker processes" in message
    assert "the 16 available" in message
    assert "policy_threads='auto'" in message
    assert "14 thread(s)" in message  # 16 CPUs - 2 workers


def test_the_advice_is_a_performance_warning_once_per_process(monkeypatch):
    monkeypatch.setattr(threads, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads.warn_once("vecpool: advice")
        threads.warn_once("vecpool: advice")
    advice = [w for w in caught if w.category is vecpool.VecPoolPerformanceWarning]
    assert len(advice) == 1
    assert str(advice[0].message) == "vecpool: advice"
    assert advice[0].filename == __file__  # the first line outside vecpool
    assert threads.has_warned()
    assert issubclass(vecpool.VecPoolPerformanceWarning, vecpool.VecPoolWarning)


def test_the_measured_advice_says_what_was_measured_then_the_fix(monkeypatch):
    monkeypatch.setattr(
        threads, "parent_pools", lambda: ThreadPools((("openblas", 2),))
    )
    message = threads.measured_advice(1, 2, 2.46, 128)
    assert message is not None
    assert message.startswith(
        "vecpool: over its last 128 steps this process ran on 2.5 threads on "
        "average (CPU seconds per wall second): a policy on several threads "
        "between steps. This process's thread pools (openblas: 2 threads) and the "
        "1 worker process of this AsyncVectorEnv want more CPUs than the 2 available"
    )
    assert "policy_threads='auto'" in message
    assert "OMP_NUM_THREADS=1" in message
    # several threads, but pools and workers fit the CPUs: nothing to fit
    assert threads.measured_advice(1, 16, 2.46, 128) is None


def test_policy_threads_limits_the_pools_while_open_and_restores_them():
    before = parent_pools()
    assert before.pools  # numpy's BLAS is loaded
    env = vecpool.AsyncVectorEnv(_fns(), num_workers=2, policy_threads=1)
    try:
        assert parent_pools().threads == 1
    finally:
        env.close()
    assert parent_pools() == before


def test_policy_threads_auto_leaves_the_workers_their_cpus():
    before = parent_pools()
    env = vecpool.AsyncVectorEnv(_fns(), num_workers=1, policy_threads="auto")
    try:
        expected = max(1, available_cpus() - 1)
        assert all(count <= expected for _, count in parent_pools().pools)
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
    finally:
        env.close()
    assert parent_pools() == before


def test_torch_pools_are_limited_and_restored(monkeypatch):
    calls = []
    state = {"threads": 8}
    fake = types.ModuleType("torch")
    fake.get_num_threads = lambda: state["threads"]  # type: ignore[attr-defined]

    def set_num_threads(n):
        calls.append(n)
        state["threads"] = n

    fake.set_num_threads = set_num_threads  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert ("torch", 8) in parent_pools().pools
    limits = PolicyThreads(3)
    assert state["threads"] == 3
    limits.restore()
    limits.restore()  # once only
    assert state["threads"] == 8
    assert calls == [3, 8]


@pytest.mark.parametrize("value", [0, -1, 1.5, "all", True, [2]])
def test_a_bad_policy_threads_is_refused_before_any_worker_starts(value):
    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="`policy_threads` must be an integer >= 1"):
        vecpool.AsyncVectorEnv(_fns(), policy_threads=value)
    assert set(multiprocessing.active_children()) == before


def test_overlapping_envs_closed_in_creation_order_restore_the_pools(monkeypatch):
    # found by a review: each limit saved the previous one's as "the original"
    state = {"threads": 8}
    fake = types.ModuleType("torch")
    fake.get_num_threads = lambda: state["threads"]  # type: ignore[attr-defined]
    fake.set_num_threads = lambda n: state.update(threads=n)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    before = parent_pools()
    first = vecpool.AsyncVectorEnv(_fns(), num_workers=1, policy_threads=1)
    second = vecpool.AsyncVectorEnv(_fns(), num_workers=1, policy_threads=2)
    try:
        assert parent_pools().threads == 1  # the smallest limit in force
        first.close()
        assert parent_pools().threads <= 2  # the second one's, still open
        assert state["threads"] == 2
    finally:
        first.close()
        second.close()
    assert parent_pools() == before
    assert state["threads"] == 8


def test_the_default_constructor_never_lets_threadpoolctl_warn(monkeypatch):
    # found by a review: threadpoolctl warns when two OpenMPs are loaded, and under
    # -W error that made the constructor raise, its workers left running
    def warn(self):
        warnings.warn(
            "Found Intel OpenMP and LLVM OpenMP loaded", RuntimeWarning, stacklevel=2
        )

    monkeypatch.setattr(
        threadpoolctl.ThreadpoolController, "_warn_if_incompatible_openmp", warn
    )
    monkeypatch.setattr(threads, "_warned", False)
    before = set(multiprocessing.active_children())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for policy_threads in (None, "auto"):  # "auto" limits the pools
            env = vecpool.AsyncVectorEnv(
                _fns(), num_workers=2, policy_threads=policy_threads
            )
            env.close()
        # the measured advice reads the pools too
        threads.measured_advice(2, 2, 2.0, 64)
    assert set(multiprocessing.active_children()) == before


def test_policy_threads_auto_without_workers_leaves_the_pools_alone():
    before = parent_pools()
    with threadpoolctl.threadpool_limits(limits=1):
        limited = parent_pools()
        env = vecpool.AsyncVectorEnv(_fns(), num_workers=0, policy_threads="auto")
        try:
            assert parent_pools() == limited  # not raised to the CPU count
        finally:
            env.close()
        assert parent_pools() == limited
    assert parent_pools() == before


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "200000 100000\n"}, 2),
        ({"cpu.max": "150000 100000\n"}, 1),  # 1.5 CPUs: one whole
        ({"cpu.max": "50000 100000\n"}, 1),  # half a CPU: at least one
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),
        (
            {
                "cpu,cpuacct/cpu.cfs_quota_us": "300000\n",
                "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            },
            3,
        ),
        ({}, None),  # no control group files: no quota
    ],
)
def test_the_cgroup_cpu_quota_is_read_in_v1_and_v2(tmp_path, files, expected):
    from vecpool._util import validation

    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert validation.cgroup_cpu_limit(str(tmp_path)) == expected


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity"), reason="needs the affinity mask"
)
def test_available_cpus_is_capped_by_the_cpu_quota(tmp_path, monkeypatch):
    from vecpool._util import validation

    (tmp_path / "cpu.max").write_text("100000 100000\n")
    monkeypatch.setattr(validation, "CGROUP_ROOT", str(tmp_path))
    assert validation.available_cpus() == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert validation.available_cpus() == max(1, len(os.sched_getaffinity(0)))


def test_advice_counts_one_worker_in_the_singular():
    # the 2-CPU default: one worker beside the parent's share
    message = oversubscription(1, ThreadPools((("openblas", 2),)), 2)
    assert message is not None
    assert "the 1 worker process of this AsyncVectorEnv want" in message
    assert "worker processes" not in message


def test_torchs_threads_come_back_when_they_are_its_openmp_pool(monkeypatch):
    # torch's count is its OpenMP pool's: a limit on the pools changes what torch
    # reports, so torch's own count must be read before the limit, or the limit
    # itself is what `restore` gives back (seen on a 16-core host, torch 2.11)
    state = {"omp": 4}

    class Limits:
        def __init__(self, limits: int) -> None:
            self.saved = state["omp"]
            state["omp"] = limits

        def restore_original_limits(self) -> None:
            state["omp"] = self.saved

    fake = types.ModuleType("torch")
    fake.get_num_threads = lambda: state["omp"]  # type: ignore[attr-defined]
    fake.set_num_threads = lambda n: state.update(omp=n)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(
        threadpoolctl, "threadpool_limits", lambda limits: Limits(limits)
    )
    limits = PolicyThreads(1)
    assert state["omp"] == 1
    limits.restore()
    assert state["omp"] == 4
