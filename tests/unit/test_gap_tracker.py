"""The workers' spin budget: spin while the parent is quick, probe briefly otherwise."""

from __future__ import annotations

from vecpool._wire.spin import GapTracker

SPIN = 0.002
MAX_GAP = 0.00025


def _gaps(tracker: GapTracker, gap: float, count: int) -> list[float]:
    budgets = []
    for _ in range(count):
        budgets.append(tracker.budget(SPIN))
        tracker.replied(now=0.0)
        tracker.commanded(now=gap)
    return budgets


def test_a_quick_parent_gets_the_whole_spin_budget():
    assert set(_gaps(GapTracker(MAX_GAP), 0.00005, 100)) == {SPIN}


def test_a_busy_parent_is_probed_for_max_gap_only():
    # a policy of 3 ms between steps: the worker blocks, and each probe spins only
    # max_gap (a longer spin cannot see a shorter gap: it would only burn CPU)
    tracker = GapTracker(MAX_GAP)
    budgets = _gaps(tracker, 0.003, 320)
    blocked = budgets[30:]
    assert set(blocked) == {0.0, MAX_GAP}
    assert blocked.count(MAX_GAP) == len(blocked) // GapTracker.PROBE_EVERY


def test_spinning_resumes_when_a_probe_sees_a_quick_parent():
    tracker = GapTracker(MAX_GAP)
    _gaps(tracker, 0.003, 100)
    budgets = _gaps(tracker, 0.00005, 40)
    assert budgets[-1] == SPIN
