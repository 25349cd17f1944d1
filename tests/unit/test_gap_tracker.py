"""The workers' spin for the next command: the parent tells them, and never probes."""

from __future__ import annotations

import multiprocessing
import time

import gymnasium as gym
import numpy as np
import pytest

from vecpool._wire.spin import WORKER_SPIN_MAX_GAP, GapTracker, SpinPolicy
from vecpool.testing import CountingEnv, assert_same_data

MAX_GAP = 0.00025


def _spins(tracker: GapTracker, gap: float, count: int) -> list[bool]:
    told = []
    for _ in range(count):
        tracker.answered(now=0.0)
        told.append(tracker.commanded(now=gap))
    return told


def test_a_quick_parent_has_the_workers_spin():
    assert set(_spins(GapTracker(MAX_GAP), 0.00005, 100)) == {True}


def test_a_busy_parent_has_them_block_and_never_probe():
    # a policy of 3 ms between steps: after a few steps every command says "block";
    # no command now and then says "spin" to measure the gap (the parent knows it)
    told = _spins(GapTracker(MAX_GAP), 0.003, 320)
    assert told[0]
    assert set(told[30:]) == {False}


def test_spinning_resumes_when_the_parent_is_quick_again():
    tracker = GapTracker(MAX_GAP)
    _spins(tracker, 0.003, 100)
    told = _spins(tracker, 0.00005, 40)
    assert not told[0]
    assert told[-1]


def test_a_command_without_a_wait_before_it_keeps_the_average():
    tracker = GapTracker(MAX_GAP)
    _spins(tracker, 0.003, 100)
    average = tracker.average
    assert tracker.commanded(now=5.0) is False  # e.g. a second send: no gap to fold
    assert tracker.average == average


def test_only_an_adaptive_policy_whose_workers_spin_shares_a_hint():
    ctx = multiprocessing.get_context()
    for strategy, workers in (("spin", 2), ("block", 2), ("auto", 64)):
        policy = SpinPolicy.from_strategy(strategy, workers, cpus=2)
        assert policy.share_hint(ctx) is None, strategy
        policy.before_send()  # nothing to tell
    policy = SpinPolicy.from_strategy("auto", 2, cpus=2)
    hint = policy.share_hint(ctx)
    assert hint is not None
    assert hint.value == 1
    assert policy.share_hint(ctx) is hint  # one byte for every worker and restart


def test_the_parent_sets_the_hint_from_its_own_gaps():
    policy = SpinPolicy.from_strategy("auto", 2, cpus=2)
    hint = policy.share_hint(multiprocessing.get_context())
    for _ in range(30):
        policy.before_wait()
        policy.after_wait()
        time.sleep(4 * WORKER_SPIN_MAX_GAP)  # the policy (never shorter than asked)
        policy.before_send()
    assert hint.value == 0


@pytest.mark.timeout(60)
def test_the_parent_tells_its_workers_to_block_while_it_computes(make_async):
    env = make_async([CountingEnv] * 2, num_workers=2, wait_strategy="auto")
    try:
        hint = env.unwrapped._group.spin.hint
        assert hint is not None
        assert hint.value == 1
        sync = gym.vector.SyncVectorEnv([CountingEnv] * 2)
        assert_same_data(sync.reset(seed=0), env.reset(seed=0), "reset")
        for step in range(30):
            actions = np.full(2, step % 2, np.int64)
            assert_same_data(sync.step(actions), env.step(actions), "step")
            time.sleep(0.002)  # the parent computes between steps
        assert hint.value == 0  # and the blocked workers still answered each step
        sync.close()
    finally:
        env.close()
