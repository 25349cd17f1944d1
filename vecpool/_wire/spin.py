"""Spinning: poll for an event without blocking, yielding the CPU between polls.

Spinning (poll + ``sched_yield``) skips the 50-150 microseconds it costs to wake a
blocked process; it pays only while replies come back quickly and no more processes
run than cores. A worker spins on its doorbell (vecpool/_wire/bell.py), or,
without one (restarts), with :func:`spin_until_ready` on its pipe; the parent
spins in its wait (vecpool/_engine/group.py) when its policy says so
(vecpool/_engine/spinning.py: its ``SpinPolicy``).
"""

from __future__ import annotations

import os
import select
import time
from typing import Any

__all__ = ["sleep_zero", "spin_until_ready"]


def sleep_zero() -> None:
    """Yield the CPU where there is no ``os.sched_yield`` (macOS)."""
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
    sched_yield = getattr(os, "sched_yield", sleep_zero) if spin_yield else None
    while True:
        events = poll(0)
        if events:
            return events
        if sched_yield is not None:
            sched_yield()
        if time.perf_counter() >= deadline:
            return []
