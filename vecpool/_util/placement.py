"""The default placement: worker processes and the parent's share, from a cost model.

vecpool cannot time an env before the user steps it (Gymnasium only reads the
spaces of the env it builds), so the default is chosen from the machine alone, for
the case where placement matters most: a cheap env, whose step costs less than a
hand-off between processes. One vector step then costs about

    T(w, k, p) = max(k * s + h, p * s + m) + w * r (+ b where w = cores)

for ``w`` workers hosting at most ``k = ceil(hosted / w)`` envs each, ``p`` envs in
the parent, ``s`` one env step, ``h`` a worker's hand-off (its wake and reply, about
3 env steps), ``r`` the parent's own cost per worker (ringing it, taking its
answer: about a fifth of an env step), ``m`` the parent's own work while the
workers step (0, or :data:`RECORD_STEPS` where it records every step: ``vecpool
collect``) and ``b`` waking the parent (3 env steps).
Two rules bound the choice:

* **Never more spinners than CPUs.** The workers and the parent, which spins while
  it waits, each need a core to themselves, counting physical cores where SMT
  siblings would share one (vecpool/_util/topology.py); with a worker on every
  core the parent blocks instead (``b``), as the spin policy makes it
  (vecpool/_engine/spinning.py). On 16 CPUs, 16 workers plus a spinning parent
  ran CartPole at 10x the CPU of 8 workers hosting 2 envs each, and slower
  (docs/performance.md).
* **The parent's share only where it pays:** on 2 CPUs the parent and one worker
  each step about half the envs (measured 1.3x every env in workers), the parent
  fewer where it has work of its own (``m``); on more CPUs the parent, which
  serves every worker, is the slowest runner and steps none.

Within those rules the model takes the fewest workers that reach the least cost:
more workers than needed for the same ``k`` only add ``r`` each. The choice depends
on ``num_envs`` and the machine only, so it is the same every run on a machine; it
shows in the vector env's ``repr`` and ``vecpool collect``'s header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "HANDOFF_STEPS",
    "PER_WORKER_STEPS",
    "RECORD_STEPS",
    "SHARE_MAX_CPUS",
    "WAKE_STEPS",
    "Placement",
    "plan",
]

HANDOFF_STEPS = 3.0
"""A worker's hand-off (a wake and a reply, 10-18 us of CPU on a VM) in cheap env
steps (CartPole: about 5 us)."""

PER_WORKER_STEPS = 0.2
"""The parent's own cost per worker each vector step, in cheap env steps."""

WAKE_STEPS = 3.0
"""Waking the parent, blocked because every core has a worker, in cheap env steps."""

RECORD_STEPS = 5.0
"""The parent's work to record a vector step into a replay pool and tally it
(``ReplayPoolWrapper.record_step`` and ``vecpool collect``'s figures: about 45-70
us for 8 CartPole envs on a 2-CPU VM) in the model's cheap env steps. Calibrated
on that loop: shares of 3 and 2 envs ran a median 1.06x and 1.11x the share of 4,
close to each other (tests/benchmarks/paired_chunks.py, docs/performance.md)."""

SHARE_MAX_CPUS = 2
"""The parent steps a share on at most this many CPUs (measured: a share pays on 2,
costs 10-20% on 16)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the envs of a vector env step.

    Attributes:
        num_workers: Worker processes (each hosts a contiguous slice of envs).
        parent_envs: Envs the parent steps itself (the last ones).
        cores: The cores the choice was made for (physical where known).
    """

    num_workers: int
    parent_envs: int
    cores: int

    def describe(self, num_envs: int) -> str:
        """In words, e.g. ``"8 workers x 2 envs (16 cores)"``.

        Args:
            num_envs: Number of sub-environments.

        Returns:
            E.g. ``"1 worker x 4 envs + 4 in this process (2 cores)"``.
        """
        hosted = num_envs - self.parent_envs
        if not self.num_workers:
            where = f"all {num_envs} envs in this process"
        else:
            most = math.ceil(hosted / self.num_workers)
            fewest = hosted // self.num_workers
            per = f"{most}" if most == fewest else f"{fewest}-{most}"
            workers = "worker" if self.num_workers == 1 else "workers"
            envs = "env" if most == 1 else "envs"
            where = f"{self.num_workers} {workers} x {per} {envs}"
            if self.parent_envs:
                where += f" + {self.parent_envs} in this process"
        return f"{where} ({self.cores} core{'' if self.cores == 1 else 's'})"


def plan(
    num_envs: int,
    cores: int,
    *,
    share: bool = True,
    max_workers: int | None = None,
    parent_work: float = 0.0,
) -> Placement:
    """The default placement of ``num_envs`` envs on ``cores`` cores.

    Example:
        >>> plan(8, 2)  # the parent and one worker, half each
        Placement(num_workers=1, parent_envs=4, cores=2)
        >>> plan(16, 16)  # 8 workers x 2 envs: the parent keeps a core
        Placement(num_workers=8, parent_envs=0, cores=16)
        >>> plan(64, 16).num_workers, plan(8, 64).num_workers, plan(8, 2, share=False)
        (13, 8, Placement(num_workers=2, parent_envs=0, cores=2))
        >>> plan(8, 2, parent_work=RECORD_STEPS)  # it records: a smaller share
        Placement(num_workers=1, parent_envs=3, cores=2)

    Args:
        num_envs: Number of sub-environments (at least 1).
        cores: Cores this process may use (physical where SMT siblings share).
        share: Whether the parent may step a share (``parent_envs="auto"`` with
            nothing asking for isolation).
        max_workers: At most this many workers (``max_concurrency``).
        parent_work: The parent's own work each vector step while the workers
            step, in cheap env steps (``m`` above; e.g. :data:`RECORD_STEPS`).

    Returns:
        The placement.
    """
    cores = max(1, cores)
    if share and 2 <= cores <= SHARE_MAX_CPUS and num_envs >= 2:
        # the parent and cores - 1 workers each step about num_envs / cores envs,
        # the parent fewer while its own work would make it the slowest runner
        def runner(parent: int) -> float:
            hosted = math.ceil((num_envs - parent) / (cores - 1))
            return max(hosted + HANDOFF_STEPS, parent + parent_work)

        parent = min(range(num_envs // cores, -1, -1), key=runner)
        return Placement(min(cores - 1, num_envs - parent), parent, cores)
    limit = max(1, min(num_envs, cores, max_workers or num_envs))
    best, best_cost = 1, math.inf
    for workers in range(1, limit + 1):
        cost = (
            math.ceil(num_envs / workers)
            + HANDOFF_STEPS
            + PER_WORKER_STEPS * workers
            # a worker on every core: the parent blocks, and is woken each step
            + (WAKE_STEPS if workers + 1 > cores else 0.0)
        )
        if cost < best_cost - 1e-9:
            best, best_cost = workers, cost
    return Placement(best, 0, cores)
