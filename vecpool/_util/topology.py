"""The CPU topology: physical cores, not logical CPUs.

Two hyperthreads of one core share its execution units, so two spinning processes
on them slow each other: vecpool's default placement (vecpool/_util/placement.py)
counts physical cores, and so does the bench's ``pufferlib-cores`` anchor (PufferLib
runs one process per hardware core). Counted the way Linux exposes them: distinct
``(physical_package_id, core_id)`` pairs in ``/sys/devices/system/cpu/cpu*/topology/``,
over the CPUs this process may run on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from vecpool._util.validation import available_cpus

__all__ = ["SYSFS_CPUS", "allowed_cpus", "physical_cores"]

SYSFS_CPUS = Path("/sys/devices/system/cpu")
"""Where Linux describes each CPU (``cpuN/topology/core_id`` ...)."""


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity mask, where known).

    Returns:
        ``sorted(os.sched_getaffinity(0))`` where available, else every CPU
        ``0 .. os.cpu_count() - 1``.
    """
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores(
    *,
    root: Path = SYSFS_CPUS,
    cpus: Iterable[int] | None = None,
    limit: int | None = None,
) -> int:
    """Physical cores among the CPUs this process may use.

    Counts the distinct ``(physical_package_id, core_id)`` pairs of ``cpus`` (two
    hyperthreads of one core count once), capped by ``limit`` (a container's CPU
    quota leaves fewer CPUs than its affinity mask shows). Where the topology
    cannot be read (not Linux, a CPU without ``topology/``), it falls back to
    ``limit``.

    Example:
        >>> physical_cores(root=Path("/nonexistent"), cpus=[0, 1], limit=2)
        2

    Args:
        root: The sysfs CPU folder (tests pass a fake one).
        cpus: Logical CPU numbers; default: :func:`allowed_cpus`.
        limit: At most this many; default:
            :func:`vecpool._util.validation.available_cpus`.

    Returns:
        At least 1.
    """
    chosen = allowed_cpus() if cpus is None else list(cpus)
    cap = available_cpus() if limit is None else limit
    cores: set[tuple[str, str]] = set()
    for cpu in chosen:
        folder = root / f"cpu{cpu}" / "topology"
        try:
            package = (folder / "physical_package_id").read_text().strip()
            core = (folder / "core_id").read_text().strip()
        except OSError:
            return max(1, cap)
        cores.add((package, core))
    return max(1, min(len(cores), cap) if cores else cap)
