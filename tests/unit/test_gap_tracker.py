"""The workers' spin for the next command: the parent tells them, and never probes."""

from __future__ import annotations

import multiprocessing
import os
import time

import gymnasium as gym
import numpy as np
import pytest

from vecpool._engine.spinning import (
    SPIN_BUDGET,
    WORKER_SPIN_MAX_GAP,
    GapTracker,
    SpinPolicy,
)
from vecpool._util.validation import available_cpus
from vecpool._wire.shared_memory import Layout, SharedBlock
from vecpool.testing import CountingEnv, assert_same_data

MAX_GAP = 0.00025


def _spins(
    tracker: GapTracker, work: float, count: int, wait: float = 0.0001
) -> list[bool]:
    """``count`` step commands, each after a wait for replies and ``work``."""
    told = []
    now = 10.0
    for _ in range(count):
        tracker.waited(wait)
        now += wait + work
        told.append(tracker.commanded(now))
    return told


def test_a_quick_parent_has_the_workers_spin():
    assert set(_spins(GapTracker(MAX_GAP), 0.00005, 100)) == {True}


def test_a_busy_parent_has_them_block_and_never_probe():
    # a policy of 3 ms between steps: after a few steps every command says "block";
    # no command now and then says "spin" to measure the gap (the parent knows it)
    told = _spins(GapTracker(MAX_GAP), 0.003, 320)
    assert told[0]
    assert set(told[30:]) == {False}


def test_long_waits_for_slow_envs_are_not_work():
    # a slow env (5 ms a step) with a quick parent: the workers may spin
    assert set(_spins(GapTracker(MAX_GAP), 0.00005, 100, wait=0.005)) == {True}


def test_spinning_resumes_when_the_parent_is_quick_again():
    tracker = GapTracker(MAX_GAP)
    _spins(tracker, 0.003, 100)
    told = _spins(tracker, 0.00005, 40)
    assert not told[0]
    assert told[-1]


def _block() -> tuple[SharedBlock, Layout]:
    layout = Layout.build(2, None, None)
    return SharedBlock(layout.size, multiprocessing.get_context()), layout


def test_only_an_adaptive_policy_whose_workers_spin_shares_a_hint():
    block, layout = _block()
    for strategy, workers in (("spin", 2), ("block", 2), ("auto", 64)):
        policy = SpinPolicy.from_strategy(strategy, workers, cpus=2)
        assert policy.share_hint(block, layout) is False, strategy
        assert policy.hint is None
        policy.before_send()  # nothing to tell
    policy = SpinPolicy.from_strategy("auto", 2, cpus=2)
    assert policy.share_hint(block, layout) is True
    assert policy.hint is not None
    assert policy.hint.value == 1
    # the byte lives in the block the workers map (no allocation of its own)
    assert block.byte(layout.spin_hint).value == 1
    hint = policy.hint
    assert policy.share_hint(block, layout) is True
    assert policy.hint is hint  # one byte for every worker and restart


def test_the_parent_sets_the_hint_from_its_own_work():
    block, layout = _block()
    policy = SpinPolicy.from_strategy("auto", 2, cpus=2)
    policy.share_hint(block, layout)
    seen = block.byte(layout.spin_hint)
    for _ in range(30):
        policy.before_send()
        policy.before_wait()
        policy.after_wait()
        time.sleep(4 * WORKER_SPIN_MAX_GAP)  # the policy (never shorter than asked)
    policy.before_send()
    assert seen.value == 0


@pytest.mark.timeout(60)
@pytest.mark.skipif(available_cpus() < 2, reason="auto spins only with a core each")
@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("cores_free", [False, True], ids=["crowded", "a-core-each"])
def test_the_parent_tells_its_workers_to_block_while_it_computes(
    make_async, context, cores_free
):
    env = make_async(
        [CountingEnv] * 2, num_workers=2, wait_strategy="auto", context=context
    )
    try:
        # both regimes on any machine: on 2 CPUs the workers and the parent share
        # them; on 16 each has a core (the one-thread rule then applies too)
        env.unwrapped._group.spin.cores_free = cores_free
        hint = env.unwrapped._group.spin.hint
        assert hint is not None
        assert hint.value == 1
        sync = gym.vector.SyncVectorEnv([CountingEnv] * 2)
        assert_same_data(sync.reset(seed=0), env.reset(seed=0), "reset")
        for step in range(30):
            actions = np.full(2, step % 2, np.int64)
            assert_same_data(sync.step(actions), env.step(actions), "step")
            # the parent works between steps, longer than a worker spins (so on any
            # number of CPUs: with a core each, workers spin through shorter work)
            time.sleep(2.5 * SPIN_BUDGET)
        assert hint.value == 0  # and the blocked workers still answered each step
        sync.close()
    finally:
        env.close()


def _loadavg(path, runnable: int) -> None:
    path.write_text(f"0.50 0.40 0.30 {runnable}/321 4567\n")


@pytest.fixture
def two_cpu_host(monkeypatch):
    """A 2-CPU machine, whatever this one has: the load is judged against the host's
    CPUs (``os.cpu_count``), and 5 runnable processes are a crowd on 2, not on 16."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def test_a_crowded_machine_has_nobody_spin_and_a_free_one_spin_again(
    tmp_path, two_cpu_host
):
    # more runnable processes than CPUs: spinners would take the time slices the
    # working processes need, so the workers' hint and the parent's spin go to 0
    path = tmp_path / "loadavg"
    _loadavg(path, 2)
    policy = SpinPolicy.from_strategy("auto", 1, 2)
    assert policy.crowd is not None
    policy.crowd.path = str(path)
    block = SharedBlock(Layout.build(2, None, None).size, multiprocessing)
    assert policy.share_hint(block, Layout.build(2, None, None))
    commands = 4 * policy.crowd.EVERY
    for _ in range(commands):
        policy.before_send()
    assert policy.hint.value == 1
    assert policy.before_wait() > 0.0
    _loadavg(path, 5)  # two CPUs, three busy loops besides the parent and worker
    for _ in range(commands):
        policy.before_send()
    assert policy.hint.value == 0
    assert policy.before_wait() == 0.0
    _loadavg(path, 2)  # the load went away
    for _ in range(commands * 4):
        policy.before_send()
    assert policy.hint.value == 1
    assert policy.before_wait() > 0.0
    policy.drop_hint()


def test_an_unreadable_load_never_says_crowded(tmp_path):
    from vecpool._engine.spinning import CrowdWatch

    watch = CrowdWatch(2, path=str(tmp_path / "missing"))
    assert not any(watch.crowded() for _ in range(4 * CrowdWatch.EVERY))
    (tmp_path / "garbled").write_text("nonsense\n")
    watch.path = str(tmp_path / "garbled")
    assert not any(watch.crowded() for _ in range(4 * CrowdWatch.EVERY))
    runnable = CrowdWatch(2).runnable()  # this process at least, where /proc is
    assert runnable is None or runnable >= 1


def test_block_and_spin_strategies_never_watch_the_load():
    assert SpinPolicy.from_strategy("block", 1, 2).crowd is None
    assert SpinPolicy.from_strategy("spin", 1, 2).crowd is None
    assert SpinPolicy.from_strategy("auto", 3, 2).crowd is None  # no spinning at all


def test_in_a_container_only_a_machine_wide_crowd_counts(monkeypatch):
    # /proc/loadavg counts the whole machine: with a 2-CPU quota on a 64-CPU host,
    # the host's own load must not stop every spinner for good
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    policy = SpinPolicy.from_strategy("auto", 1, 2)
    assert policy.crowd is not None
    assert policy.crowd.cpus == 64
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    crowd = SpinPolicy.from_strategy("auto", 1, 2).crowd
    assert crowd is not None
    assert crowd.cpus == 2
    assert SpinPolicy.from_strategy("auto", 3, 2).crowd is None


def test_the_load_is_watched_while_the_parent_computes_too(tmp_path, two_cpu_host):
    # a long policy between steps already says "block"; the load must still be
    # read, so the verdict is fresh once the policy gets quick again
    path = tmp_path / "loadavg"
    _loadavg(path, 9)
    policy = SpinPolicy.from_strategy("auto", 1, 2)
    crowd = policy.crowd
    assert crowd is not None
    crowd.path = str(path)
    block = SharedBlock(Layout.build(2, None, None).size, multiprocessing)
    policy.share_hint(block, Layout.build(2, None, None))

    class Busy(GapTracker):
        def commanded(self, now: float, weight: float = 0.125) -> bool:
            return False  # a parent that computes long between steps

    policy.gaps = Busy(MAX_GAP)
    policy.cores_free = False
    for _ in range(8 * crowd.EVERY):
        policy.before_send()
    assert policy.hint.value == 0
    assert crowd.is_crowded
    policy.drop_hint()


def test_batch_workers_spin_only_where_the_parent_keeps_a_core():
    # with send/recv batches a worker steps while the parent works on another's
    # batch: workers on every core would spin on the parent's core (measured: half
    # the env-steps/s of blocking on 2 CPUs)
    assert SpinPolicy.from_strategy("auto", 2, 2, batches=True).worker_spin == 0.0
    assert SpinPolicy.from_strategy("auto", 1, 2, batches=True).worker_spin > 0.0
    assert SpinPolicy.from_strategy("auto", 2, 2).worker_spin > 0.0  # plain steps
    assert SpinPolicy.from_strategy("spin", 2, 2, batches=True).worker_spin > 0.0
