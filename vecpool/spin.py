"""How the parent and the workers wait for each other: spin, then block.

Spinning (poll + ``sched_yield``) skips the 50-150 microseconds it costs to wake a
blocked process; it pays only while replies come back quickly and no more processes
run than cores. :class:`SpinPolicy` is the parent's side; the workers' side is
:class:`vecpool.protocol.GapTracker`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["SPIN_BUDGET", "SPIN_MAX_WAIT", "WORKER_SPIN_MAX_GAP", "SpinPolicy"]

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
        """The workers' adaptive bound (:class:`~vecpool.protocol.GapTracker`).

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
