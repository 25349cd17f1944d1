"""Contiguous slices of env indices: which worker (or Ray actor) hosts which envs."""

from __future__ import annotations

__all__ = ["split"]


def split(num_envs: int, num_workers: int) -> list[range]:
    """Contiguous slices of ``range(num_envs)``, sizes differing by at most one.

    Args:
        num_envs: Number of sub-environments.
        num_workers: Number of slices.

    Returns:
        One range per worker, in order.
    """
    base, extra = divmod(num_envs, num_workers)
    slices, start = [], 0
    for worker in range(num_workers):
        stop = start + base + (1 if worker < extra else 0)
        slices.append(range(start, stop))
        start = stop
    return slices
