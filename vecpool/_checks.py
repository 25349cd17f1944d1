"""Argument checks shared by the package: one message format for every integer."""

from __future__ import annotations

import os

import numpy as np

__all__ = ["WAIT_STRATEGIES", "available_cpus", "check_int", "is_int"]

WAIT_STRATEGIES: tuple[str, ...] = ("auto", "spin", "block")
"""The values ``AsyncVectorEnv(wait_strategy=...)`` accepts."""


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (numpy's included), ``bool`` excluded.

    Args:
        value: Anything.

    Returns:
        ``True`` for ``int`` and ``numpy.integer`` values that are not ``bool``.
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(
    name: str,
    value: object,
    low: int,
    high: int | None = None,
    *,
    hint: str = "",
    error: type[Exception] = ValueError,
) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[low, high]``.

    Args:
        name: The argument's name, as the user wrote it (shown in backticks).
        value: The value given.
        low: Smallest allowed value.
        high: Largest allowed value, or ``None`` for no upper bound.
        hint: Text appended to the bound, e.g. ``" (or None for the default)"``.
        error: The exception type to raise.

    Returns:
        ``int(value)``.

    Raises:
        ValueError: (or ``error``) naming the argument, the bound and the value.
    """
    number: int | None = int(value) if is_int(value) else None  # type: ignore[call-overload]
    if number is None or number < low or (high is not None and number > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        msg = f"`{name}` must be an integer {bound}{hint}, got {value!r}."
        raise error(msg)
    return number


def available_cpus() -> int:
    """CPUs this process may run on (affinity-aware where the OS tells).

    Returns:
        ``len(os.sched_getaffinity(0))`` where available, else ``os.cpu_count()``.
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
