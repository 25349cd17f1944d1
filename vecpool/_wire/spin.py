"""How the parent and the workers wait for each other: spin, then block.

Spinning (poll + ``sched_yield``) skips the 50-150 microseconds it costs to wake a
blocked process; it pays only while replies come back quickly and no more processes
run than cores. :class:`SpinPolicy` is the parent's side. The workers spin for
their next command only while the parent's :class:`GapTracker` says its gaps are
short, through a shared byte (:attr:`SpinPolicy.hint`) they read after each reply.
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
        adaptive: Whether :meth:`before_wait` adapts ``spin``, and
            :meth:`before_send` the workers' (``wait_strategy="auto"``).
        wait_ema: Seconds a wait takes, smoothed.
        hint: With ``adaptive`` workers that spin, a shared byte (a
            ``multiprocessing`` ``RawValue``, set by :meth:`share_hint`): 1 while
            the workers should spin for their next command after replying, 0 while
            they should block (the parent computes between steps). ``None``: the
            workers spin whenever ``worker_spin`` says.
        gaps: The parent's gaps between its waits and its next commands.
    """

    worker_spin: float
    spin: float
    spin_yield: bool = True
    adaptive: bool = False
    wait_ema: float = 0.0
    hint: Any = None
    gaps: GapTracker | None = None

    def share_hint(self, ctx: Any) -> Any:
        """The shared byte the workers read (created once; ``None`` if not adaptive).

        Args:
            ctx: The ``multiprocessing`` context the workers start from.
        """
        if self.hint is None and self.adaptive and self.worker_spin:
            self.hint = ctx.RawValue("b", 1)
            self.gaps = GapTracker(WORKER_SPIN_MAX_GAP)
        return self.hint

    def before_send(self) -> None:
        """A step command goes out: tell the workers whether to spin after it.

        The gap since the last wait ended is the parent's own work between steps
        (a policy); a long one keeps the workers blocked, never spinning on the
        cores that work needs.
        """
        if self.gaps is not None:
            self.hint.value = self.gaps.commanded(time.perf_counter())

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
            now = time.perf_counter()
            self.wait_ema += 0.1 * (now - self._started - self.wait_ema)
            if self.gaps is not None:
                self.gaps.answered(now)

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
    """The parent's gap between a reply and its next command, smoothed.

    It tells the workers whether spinning for the next command can pay: spin while
    the parent sends its next command within ``max_gap`` (on average) of their
    replies, block while it computes longer (a policy between steps), so spinning
    never takes the cores the parent computes with.

    The parent measures the gap itself, from the end of its wait to its next
    command: that is the true gap. A worker could only see it with its own wake-up
    added, and a blocked worker would then have to spin now and then to find out
    that the parent got quick again; here nothing spins to measure.

    Example:
        >>> tracker = GapTracker(max_gap=0.001)
        >>> tracker.commanded(now=0.0)  # no gap seen yet: spin
        True
        >>> for _ in range(30):
        ...     tracker.answered(now=0.0)
        ...     spins = tracker.commanded(now=0.01)  # the parent computes 10 ms
        >>> spins
        False
        >>> for _ in range(30):
        ...     tracker.answered(now=0.0)
        ...     spins = tracker.commanded(now=0.0001)  # quick again
        >>> spins
        True

    Args:
        max_gap: Spin while the smoothed gap stays below this (seconds).
    """

    __slots__ = ("_answered", "average", "max_gap")

    def __init__(self, max_gap: float) -> None:
        """Start with no gap seen (spinning)."""
        self.max_gap = max_gap
        self.average = 0.0
        self._answered: float | None = None

    def answered(self, now: float) -> None:
        """The parent's wait for replies ended at ``now`` (``time.perf_counter()``)."""
        self._answered = now

    def commanded(self, now: float) -> bool:
        """A command goes out at ``now``: fold the gap in; whether workers should spin.

        A single long gap (an evaluation, a checkpoint) is clipped to four times
        ``max_gap``, so spinning resumes within a few dozen quick steps.

        Returns:
            Whether the workers should spin for the command after this one.
        """
        if self._answered is not None:
            gap = min(now - self._answered, 4.0 * self.max_gap)
            self.average += 0.125 * (gap - self.average)
            self._answered = None
        return self.average < self.max_gap
