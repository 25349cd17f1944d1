"""The parent's thread pools (BLAS, OpenMP, torch) and the CPUs the workers need.

A policy computed in the parent between steps runs on numpy's BLAS, OpenMP or
torch's intra-op pool, each sized to every CPU by default. Those threads spin for
a while after each call, on the cores the workers then need: on 2 CPUs, a numpy
MLP with 2 BLAS threads and 2 workers stepping Pong is slower than the same loop
on ``SyncVectorEnv`` (docs/performance.md). SB3 users meet it as "SubprocVecEnv
is slower than DummyVecEnv".

**The trigger** (:func:`measured_advice`), measured, not guessed (issue 38): the
parent's CPU seconds per wall second over windows of steps
(:class:`vecpool._engine.spinning.ThreadWatch`) exceed
:data:`~vecpool._engine.spinning.POLICY_THREADS` (1.3), so work between steps ran
on several threads at once for a good part of the loop (a BLAS or torch policy),
and that pool's threads plus the workers exceed the CPUs this process may run on
(:func:`oversubscription`). A loop without a policy runs on one thread (the
parent's own envs and waits) and never gives it, though numpy's OpenBLAS starts one
thread per CPU at import: the constructor used to warn on that alone, on every
2-CPU machine. vecpool then says once per process, as a
:class:`~vecpool.errors.VecPoolPerformanceWarning` at the user's line, what it
measured and the fix, from ``step_async`` (or ``send``) before anything is sent, so
a warning raised as an error (``-W error``) leaves the vector env as it was.

**The fix** (:class:`PolicyThreads`): ``AsyncVectorEnv(..., policy_threads="auto")``
limits every pool of the parent to ``max(1, CPUs - workers)`` threads while the
vector env is open (an int sets the number), through threadpoolctl and
``torch.set_num_threads`` when torch is imported, and restores them on ``close``.
"""

from __future__ import annotations

import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import threadpoolctl

from vecpool.errors import VecPoolPerformanceWarning

__all__ = [
    "PolicyThreads",
    "ThreadPools",
    "fit_policy_threads",
    "fitting_threads",
    "has_warned",
    "measured_advice",
    "oversubscription",
    "parent_pools",
    "warn_once",
]

_warned = False
_PACKAGE = str(Path(__file__).resolve().parents[1])  # vecpool/, for the user's line


@dataclass(frozen=True)
class ThreadPools:
    """The parent's thread pools: ``(name, threads)`` each, e.g. ``("openblas", 2)``."""

    pools: tuple[tuple[str, int], ...]

    @property
    def threads(self) -> int:
        """Threads of the largest pool (1 when there is none)."""
        return max((threads for _, threads in self.pools), default=1)

    def describe(self) -> str:
        """The pools as text, e.g. ``openblas: 2 threads, torch: 2 threads``."""
        return ", ".join(f"{name}: {threads} threads" for name, threads in self.pools)


def parent_pools() -> ThreadPools:
    """The thread pools loaded in this process (torch's only if torch is imported)."""
    with warnings.catch_warnings():  # threadpoolctl's (e.g. two OpenMPs loaded)
        warnings.simplefilter("ignore")
        info = threadpoolctl.threadpool_info()
    pools: list[tuple[str, int]] = [
        (str(pool.get("internal_api", pool.get("user_api", "?"))), pool["num_threads"])
        for pool in info
    ]
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        pools.append(("torch", int(torch.get_num_threads())))
    return ThreadPools(tuple(pools))


def fitting_threads(num_workers: int, cpus: int) -> int:
    """Threads a pool of the parent may use beside ``num_workers`` workers."""
    return max(1, cpus - num_workers)


def oversubscription(num_workers: int, pools: ThreadPools, cpus: int) -> str | None:
    """The advice to give when the parent's pools and the workers exceed the CPUs.

    Args:
        num_workers: Worker processes (0: the envs run in this process).
        pools: The parent's thread pools.
        cpus: CPUs this process may run on.

    Returns:
        The message, or ``None`` when there is no oversubscription.
    """
    threads = pools.threads
    if num_workers == 0 or threads <= 1 or num_workers + threads <= cpus:
        return None
    fit = fitting_threads(num_workers, cpus)
    return (
        f"vecpool: this process's thread pools ({pools.describe()}) and the "
        f"{num_workers} worker process{'' if num_workers == 1 else 'es'} of this "
        "AsyncVectorEnv want more CPUs than "
        f"the {cpus} available: a policy computed between steps (numpy, torch) "
        "then takes the cores the envs need, and the loop can be slower than "
        "SyncVectorEnv. Pass `policy_threads='auto'` to AsyncVectorEnv (it limits "
        f"these pools to {fit} thread(s) while the vector env is open), or set "
        f"OMP_NUM_THREADS={fit} / torch.set_num_threads({fit}) yourself; see "
        "docs/performance.md, 'Which setting for my case'. (Said once per process.)"
    )


def measured_advice(
    num_workers: int, cpus: int, threads: float, steps: int
) -> str | None:
    """The advice, when a measured multi-threaded policy competes with the workers.

    Args:
        num_workers: The vector env's worker processes.
        cpus: CPUs this process may run on.
        threads: The parent's CPU seconds per wall second over the last steps.
        steps: How many steps that measurement spans.

    Returns:
        The message (what was measured, then :func:`oversubscription`'s advice),
        or ``None`` when the parent's pools and the workers fit the CPUs (the
        several threads are not a pool's, or there are cores enough).
    """
    advice = oversubscription(num_workers, parent_pools(), cpus)
    if advice is None:
        return None
    advice = advice.removeprefix("vecpool: ")
    return (
        f"vecpool: over its last {steps} steps this process ran on {threads:.1f} "
        "threads on average (CPU seconds per wall second): a policy on several "
        f"threads between steps. {advice[0].upper()}{advice[1:]}"
    )


def has_warned() -> bool:
    """Whether this process was given the advice already (it is said once)."""
    return _warned


def warn_once(message: str) -> None:
    """Give ``message`` as a :class:`~vecpool.errors.VecPoolPerformanceWarning`, once.

    A warning, so it reaches the user (the ``vecpool`` logger has a
    ``NullHandler``: a log record would not print), once per process, at the
    first line outside vecpool on the stack (the user's ``step`` or their
    sampler's).
    """
    global _warned  # once per process
    if _warned:
        return
    _warned = True
    frame = sys._getframe()
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, VecPoolPerformanceWarning, stacklevel=level)


def fit_policy_threads(
    policy_threads: int | str | None, num_workers: int, cpus: int
) -> PolicyThreads | None:
    """Apply ``AsyncVectorEnv(policy_threads=...)``.

    Args:
        policy_threads: ``None`` (unchanged; the advice is measured while
            stepping), ``"auto"`` or a number of threads.
        num_workers: The vector env's worker processes.
        cpus: CPUs this process may run on.

    Returns:
        The limits in force (restore them on ``close``), or ``None``.
    """
    if policy_threads is None:
        return None
    if policy_threads == "auto":
        # no workers (num_workers=0): nothing to fit beside
        return (
            PolicyThreads(fitting_threads(num_workers, cpus)) if num_workers else None
        )
    return PolicyThreads(int(policy_threads))


class PolicyThreads:
    """The parent's pools limited to some threads, until :meth:`restore`.

    Vector envs may be open at once and closed in any order: the pools' own
    sizes are saved by the first limit of the process and given back when the
    last one is restored; in between, the pools keep the smallest limit of the
    vector envs still open.

    Example:
        >>> import numpy  # noqa: F401 - loads a BLAS pool
        >>> limits = PolicyThreads(1)
        >>> parent_pools().threads
        1
        >>> limits.restore()
    """

    def __init__(self, threads: int) -> None:
        """Limit every pool of this process (torch too, if imported) to ``threads``."""
        self.threads = threads
        with _LOCK:
            if not _ACTIVE:  # the pools' own sizes: given back by the last restore
                # torch's first: its count is its OpenMP pool's, which the limit
                # below changes (read after it, the limit itself was saved)
                torch = sys.modules.get("torch")
                if torch is not None and hasattr(torch, "set_num_threads"):
                    _SAVED[1] = (torch, int(torch.get_num_threads()))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _SAVED[0] = threadpoolctl.threadpool_limits(limits=threads)
            _ACTIVE.append(self)
            _apply(min(limits.threads for limits in _ACTIVE))

    def restore(self) -> None:
        """Give the pools back (once; later calls do nothing).

        To their own sizes when no other limit is in force, else to the smallest
        limit still in force.
        """
        with _LOCK:
            if self not in _ACTIVE:
                return
            _ACTIVE.remove(self)
            if _ACTIVE:
                _apply(min(limits.threads for limits in _ACTIVE))
                return
            limiter, torch_saved = _SAVED
            _SAVED[:] = [None, None]
            if limiter is not None:
                limiter.restore_original_limits()
            if torch_saved is not None:
                torch, threads = torch_saved
                torch.set_num_threads(threads)


_LOCK = threading.Lock()
_ACTIVE: list[PolicyThreads] = []  # the limits in force, oldest first
_SAVED: list[Any] = [None, None]  # the first limiter (the pools' own sizes), torch's


def _apply(threads: int) -> None:
    """Set every pool (torch's too, if imported) to ``threads``."""
    with warnings.catch_warnings():  # threadpoolctl's (e.g. two OpenMPs loaded)
        warnings.simplefilter("ignore")
        threadpoolctl.threadpool_limits(limits=threads)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(threads)
