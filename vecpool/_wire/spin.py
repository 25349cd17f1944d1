"""How the parent and the workers wait for each other: spin, then block.

Spinning (poll + ``sched_yield``) skips the 50-150 microseconds it costs to wake a
blocked process; it pays only while replies come back quickly and no more processes
run than cores. :class:`SpinPolicy` is the parent's side; the workers' side is
:class:`GapTracker`.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SPIN_BUDGET",
    "SPIN_MAX_WAIT",
    "WORKER_SPIN_MAX_GAP",
    "GapTracker",
    "SpinPolicy",
    "spin_until_ready",
]

SPIN_BUDGET = 0.002
"""Seconds to poll before blocking."""
SPIN_MAX_WAIT = 0.00025
"""With ``"auto"``, the parent spins while replies come back within this."""
WORKER_SPIN_MAX_GAP = 0.00025
"""With ``"auto"``, workers spin while the parent sends the next command within this
(on average) after their reply; a parent that computes longer (a policy) finds them
blocked, so their spinning never takes its cores."""


@dataclass
class SpinPolicy:
    """How long the parent polls before blocking, adapted to the gap between steps.

    Spinning (poll + ``sched_yield``) skips the 50-150 microseconds it costs to wake
    a blocked process; it pays only while replies come back quickly and no more
    processes run than cores.

    Attributes:
        worker_spin: The workers' spin budget (0: they block).
        spin: The parent's current spin budget.
        spin_yield: Whether spinners yield the CPU between polls.
        adaptive: Whether :meth:`before_wait` adapts ``spin``, and the workers
            theirs (``wait_strategy="auto"``).
        wait_ema: Seconds a wait takes, smoothed.
    """

    worker_spin: float
    spin: float
    spin_yield: bool = True
    adaptive: bool = False
    wait_ema: float = 0.0

    @property
    def worker_max_gap(self) -> float:
        """The workers' adaptive bound (:class:`~vecpool._wire.spin.GapTracker`).

        0 (spin whenever ``worker_spin`` says) unless adaptive.
        """
        return WORKER_SPIN_MAX_GAP if self.adaptive and self.worker_spin else 0.0

    @classmethod
    def from_strategy(
        cls, wait_strategy: str, num_workers: int, cpus: int
    ) -> SpinPolicy:
        """The policy for ``wait_strategy`` with ``num_workers`` on ``cpus`` CPUs."""
        spins = wait_strategy == "spin" or (
            wait_strategy == "auto" and num_workers <= cpus
        )
        budget = SPIN_BUDGET if spins else 0.0
        return cls(budget, budget, True, wait_strategy == "auto")

    def before_wait(self) -> float:
        """The spin budget for the next wait (and start timing it)."""
        if self.adaptive and self.worker_spin:
            self.spin = 0.0 if self.wait_ema > SPIN_MAX_WAIT else SPIN_BUDGET
            self._started = time.perf_counter()
        return self.spin

    def after_wait(self) -> None:
        """Fold the wait just finished into the average."""
        if self.adaptive and self.worker_spin:
            waited = time.perf_counter() - self._started
            self.wait_ema += 0.1 * (waited - self.wait_ema)

    _started: float = 0.0


def _sleep_zero() -> None:
    time.sleep(0)


def spin_until_ready(
    poller: select.poll, seconds: float, spin_yield: bool
) -> list[Any]:
    """Poll without blocking for up to ``seconds``; return the events seen (if any).

    Spinning skips the 50-150 microseconds it costs to wake a blocked process, which
    is most of a cheap env's step; ``sched_yield`` between polls hands the core to any
    other runnable process, so spinning never starves the processes doing the work.

    Args:
        poller: A ``select.poll`` object with the descriptors to watch.
        seconds: The spin budget.
        spin_yield: Whether to yield the CPU between polls.

    Returns:
        The events of the first non-empty poll, or ``[]`` when the budget ran out.
    """
    deadline = time.perf_counter() + seconds
    poll = poller.poll
    # macOS has no sched_yield: a zero sleep yields the CPU there
    sched_yield = getattr(os, "sched_yield", _sleep_zero) if spin_yield else None
    while True:
        events = poll(0)
        if events:
            return events
        if sched_yield is not None:
            sched_yield()
        if time.perf_counter() >= deadline:
            return []


class GapTracker:
    """How long the parent takes between a worker's reply and its next command.

    Smoothed; it tells the worker whether spinning for the next command can pay.

    Example:
        >>> tracker = GapTracker(max_gap=0.001)
        >>> tracker.budget(0.002)  # no gap seen yet: spin the whole budget
        0.002
        >>> for _ in range(30):
        ...     tracker.replied(now=0.0)
        ...     tracker.commanded(now=0.01)  # the parent computes 10 ms each time
        >>> tracker.budget(0.002)  # block: spinning would take the parent's CPU
        0.0
        >>> probes = [tracker.budget(0.002) for _ in range(31)]
        >>> probes[-1]  # every 32nd command is awaited spinning, for max_gap only
        0.001
        >>> tracker.replied(now=0.0)
        >>> tracker.commanded(now=0.0001)  # the probe saw the parent fast again
        >>> tracker.budget(0.002)
        0.002

    Args:
        max_gap: Spin while the smoothed gap stays below this (seconds).
    """

    __slots__ = ("_blocked", "_probing", "_replied", "average", "max_gap")

    PROBE_EVERY = 32
    """While blocking, spin once every this many commands to measure the true gap
    (a blocked worker's gaps include its own wake-up, so they alone could keep it
    blocked for good after the parent sped up)."""

    def __init__(self, max_gap: float) -> None:
        """Start with no gap seen (spinning)."""
        self.max_gap = max_gap
        self.average = 0.0
        self._replied: float | None = None
        self._blocked = 0
        self._probing = False

    def budget(self, spin: float) -> float:
        """Seconds to spin before blocking for the next command (0: block at once).

        The whole ``spin`` while the parent's gaps are short; none while they are
        long, but every :attr:`PROBE_EVERY` commands a probe spins ``max_gap`` (not
        the whole budget: a gap longer than ``max_gap`` keeps the worker blocked
        anyway, so spinning longer would only burn the CPU the parent computes
        with).
        """
        if self.average < self.max_gap:
            return spin
        self._blocked += 1
        if self._blocked >= self.PROBE_EVERY:
            self._blocked = 0
            self._probing = True  # this gap is measured without a wake-up in it
            return min(spin, self.max_gap)
        return 0.0

    def replied(self, now: float) -> None:
        """A reply went out at ``now`` (``time.perf_counter()``)."""
        self._replied = now

    def commanded(self, now: float) -> None:
        """The next command came in at ``now``: fold the gap into the average.

        A single long gap (an evaluation, a checkpoint) is clipped to four times
        ``max_gap``, so spinning resumes within a few dozen fast steps.
        """
        if self._replied is not None:
            gap = min(now - self._replied, 4.0 * self.max_gap)
            if self._probing:  # the true gap: it replaces the blocked estimates
                self.average = gap
            else:
                self.average += 0.125 * (gap - self.average)
            self._replied = None
        self._probing = False
