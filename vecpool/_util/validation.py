"""Argument validation shared by the package: one message format for every integer.

(Not the public conformance checker: that is :mod:`vecpool.check`.)
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import select
import sys
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np

__all__ = [
    "WAIT_STRATEGIES",
    "available_cpus",
    "check_custom_worker",
    "check_env_fns",
    "check_int",
    "check_max_concurrency",
    "check_platform",
    "check_policy_threads",
    "check_reset_mask",
    "is_int",
    "require_matplotlib",
]

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


def check_platform() -> None:
    """Refuse, with the way out, a platform vecpool's engine cannot run on.

    The engine waits on pipes and process sentinels with ``select.poll``, which
    Windows lacks (Linux is tested; macOS has it).

    Raises:
        RuntimeError: Naming the platform and the alternatives.
    """
    if not hasattr(select, "poll"):
        msg = (
            f"vecpool.AsyncVectorEnv needs select.poll, which {sys.platform} lacks "
            "(vecpool runs on Linux and macOS). Use gymnasium.vector.AsyncVectorEnv "
            "or SyncVectorEnv here, or run under WSL."
        )
        raise RuntimeError(msg)


CGROUP_ROOT = "/sys/fs/cgroup"
"""Where the kernel shows this process's control groups (a container's own)."""


def cgroup_cpu_limit(root: str | None = None) -> int | None:
    """The CPUs a control group's CPU quota allows (a container's ``--cpus``).

    Reads cgroup v2's ``cpu.max`` (``"max 100000"`` or ``"150000 100000"``), else
    cgroup v1's ``cpu/cpu.cfs_quota_us`` and ``cpu/cpu.cfs_period_us`` (quota -1:
    none). A fractional quota counts its whole CPUs, at least 1.

    Args:
        root: The control-group mount point (default: :data:`CGROUP_ROOT`).

    Returns:
        The number of CPUs, or ``None`` without a quota (or anything readable).
    """
    root = CGROUP_ROOT if root is None else root
    try:
        with open(os.path.join(root, "cpu.max")) as handle:
            quota, period = handle.read().split()[:2]
        if quota == "max":
            return None
        return max(1, int(quota) // int(period))
    except (OSError, ValueError):
        pass
    for folder in ("cpu", "cpu,cpuacct"):
        base = os.path.join(root, folder)
        try:
            with open(os.path.join(base, "cpu.cfs_quota_us")) as handle:
                quota_us = int(handle.read())
            with open(os.path.join(base, "cpu.cfs_period_us")) as handle:
                period_us = int(handle.read())
        except (OSError, ValueError):
            continue
        if quota_us <= 0 or period_us <= 0:
            return None
        return max(1, quota_us // period_us)
    return None


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask and its CPU quota, the smaller.

    Returns:
        ``len(os.sched_getaffinity(0))`` where available, else ``os.cpu_count()``,
        capped by the control group's CPU quota (:func:`cgroup_cpu_limit`: a
        container started with ``--cpus=2`` on a 64-core host has 2).
    """
    if hasattr(os, "sched_getaffinity"):
        cpus = max(1, len(os.sched_getaffinity(0)))
    else:
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return cpus if limit is None else min(cpus, limit)


def check_env_fns(env_fns: object) -> None:
    """Check ``env_fns``: a sequence of functions that each create an env.

    Gymnasium raises ``TypeError``s that do not say what to pass instead
    (``'TimeLimit' object is not callable``, ``object of type 'function' has no
    len()``); these name the argument and the fix, with the same type.

    Raises:
        TypeError: If it is a single function or env, or holds something that is
            not callable.
    """
    if callable(env_fns) or not hasattr(env_fns, "__len__"):
        if callable(env_fns):
            fix = "a single function: wrap it in a list (one entry per sub-environment)"
        elif hasattr(env_fns, "step") and hasattr(env_fns, "reset"):
            fix = (
                f"a {type(env_fns).__name__} env instance: pass a list of functions "
                "that create envs (each worker builds its own), not an env"
            )
        else:
            name = type(env_fns).__name__
            article = "an" if name[:1].lower() in "aeiou" else "a"
            fix = f"{article} {name}: pass a list of functions"
        msg = (
            "`env_fns` must be a list of functions that each create an env, e.g. "
            f"`[lambda: gym.make('CartPole-v1')] * 4`; got {fix}."
        )
        raise TypeError(msg)
    entries: Any = env_fns
    for index, env_fn in enumerate(entries):
        if not callable(env_fn):
            kind = type(env_fn).__name__
            msg = (
                f"`env_fns[{index}]` is a {kind}, not a function that creates an "
                "env: pass the function itself (e.g. `lambda: gym.make(...)` or "
                "`functools.partial(MyEnv, ...)`); each worker calls it to build "
                "its own env."
            )
            raise TypeError(msg)


def check_policy_threads(value: object) -> int | str | None:
    """Check the ``policy_threads`` argument (vecpool/_util/threads.py).

    Returns:
        ``None``, ``"auto"`` or the number of threads.

    Raises:
        ValueError: If it is none of those.
    """
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    return check_int(
        "policy_threads",
        value,
        1,
        hint=' (threads for the thread pools of this process), "auto" or None',
    )


def check_max_concurrency(value: object) -> int | None:
    """Validate ``max_concurrency`` with Gymnasium's messages.

    Args:
        value: The value given.

    Returns:
        The value as an ``int``, or ``None``.

    Raises:
        ValueError: If it is not a positive integer or ``None``.
    """
    if value is None:
        return None
    if not isinstance(value, (int, np.integer)):
        msg = f"`max_concurrency` must be an integer or None, got {type(value)}."
        raise ValueError(msg)
    if value < 1:
        msg = f"`max_concurrency` must be a positive or None, got {value}."
        raise ValueError(msg)
    return int(value)


def _gymnasium_version() -> tuple[int, ...]:
    """The installed Gymnasium's ``major.minor`` (``(1, 4)`` if unreadable)."""
    try:
        return tuple(int(part) for part in gymnasium.__version__.split(".")[:2])
    except (AttributeError, ValueError):
        return (1, 4)


ASSERTED_RESET_MASK = _gymnasium_version() < (1, 4)
"""Gymnasium before 1.4 checks ``reset_mask`` with ``assert``s (other texts)."""


def check_reset_mask(reset_mask: Any, num_envs: int) -> list[bool]:
    """Validate ``options["reset_mask"]`` with the installed Gymnasium's messages.

    Gymnasium 1.4 raises ``TypeError`` / ``ValueError``; 1.1 to 1.3 raise
    ``AssertionError`` with other texts (``options['reset_mask': mask]``), and
    vecpool follows whichever is installed.

    Args:
        reset_mask: The mask given.
        num_envs: Number of sub-environments.

    Returns:
        One flag per env.

    Raises:
        TypeError: If it is not a bool numpy array (Gymnasium 1.4).
        ValueError: If its shape is wrong or no flag is set (Gymnasium 1.4).
        AssertionError: On any of those, with Gymnasium 1.1 to 1.3.
    """
    if ASSERTED_RESET_MASK:
        return _asserted_reset_mask(reset_mask, num_envs)
    if not isinstance(reset_mask, np.ndarray):
        msg = f"`options['reset_mask']` must be a numpy array, got {type(reset_mask)}"
        raise TypeError(msg)
    if reset_mask.shape != (num_envs,):
        msg = (
            f"`options['reset_mask']` must have shape `({num_envs},)`, got "
            f"{reset_mask.shape}"
        )
        raise ValueError(msg)
    if reset_mask.dtype != np.bool_:
        msg = (
            "`options['reset_mask']` must have `dtype=np.bool_`, got "
            f"{reset_mask.dtype}"
        )
        raise TypeError(msg)
    if not np.any(reset_mask):
        msg = (
            "`options['reset_mask']` must contain a boolean array with at least "
            f"one True value, got reset_mask={reset_mask}"
        )
        raise ValueError(msg)
    return [bool(flag) for flag in reset_mask]


def _asserted_reset_mask(reset_mask: Any, num_envs: int) -> list[bool]:
    """:func:`check_reset_mask` as Gymnasium 1.1 to 1.3 check it (their texts)."""
    name = "`options['reset_mask': mask]`"
    if not isinstance(reset_mask, np.ndarray):
        msg = f"{name} must be a numpy array, got {type(reset_mask)}"
    elif reset_mask.shape != (num_envs,):
        msg = f"{name} must have shape `({num_envs},)`, got {reset_mask.shape}"
    elif reset_mask.dtype != np.bool_:
        msg = f"{name} must have `dtype=np.bool_`, got {reset_mask.dtype}"
    elif not np.any(reset_mask):
        msg = f"{name} must contain a boolean array, got reset_mask={reset_mask}"
    else:
        return [bool(flag) for flag in reset_mask]
    raise AssertionError(msg)


def check_custom_worker(worker: Callable[..., None] | None) -> None:
    """Check that a custom ``worker`` takes Gymnasium's 8 arguments.

    Args:
        worker: The ``worker=`` argument, or ``None``.

    Raises:
        ValueError: With Gymnasium's message, if its signature does not fit.
    """
    if worker is None:
        return
    from gymnasium.vector.async_vector_env import _async_worker

    try:
        inspect.signature(worker).bind(*(None,) * 8)
    except TypeError as e:
        msg = (
            "A custom `worker` must accept 8 arguments. Got the signature "
            f"{inspect.signature(worker)} which should match "
            f"{inspect.signature(_async_worker)}."
        )
        raise ValueError(msg) from e


def require_matplotlib() -> None:
    """Check that matplotlib can be imported (before a long run that plots).

    Raises:
        ImportError: If it cannot, saying to install ``vecpool[plot]``.
    """
    if importlib.util.find_spec("matplotlib") is None:
        msg = (
            "--plot needs matplotlib: install vecpool[plot] "
            "(pip install 'vecpool[plot]')."
        )
        raise ImportError(msg)


def check_restart(
    on_worker_crash: object,
    max_restarts: object,
    worker: Callable[..., None] | None,
    num_workers: int,
) -> int | None:
    """Check ``on_worker_crash`` and ``max_restarts``; return ``max_restarts``.

    Args:
        on_worker_crash: ``"raise"`` or ``"restart"``.
        max_restarts: Restarts allowed per worker, or ``None`` for no limit.
        worker: The ``worker=`` argument (restart needs vecpool's own worker).
        num_workers: The resolved number of worker processes.

    Raises:
        ValueError: Naming the argument and the fix.
    """
    if on_worker_crash not in ("raise", "restart"):
        msg = (
            "`on_worker_crash` must be 'raise' (a dead worker raises "
            "WorkerCrashedError) or 'restart' (it is replaced), got "
            f"{on_worker_crash!r}."
        )
        raise ValueError(msg)
    limit = (
        None
        if max_restarts is None
        else check_int("max_restarts", max_restarts, 0, hint=" (or None: no limit)")
    )
    if on_worker_crash == "restart":
        if worker is not None:
            msg = (
                "`on_worker_crash='restart'` needs vecpool's own worker, which "
                "rebuilds the envs of a dead worker: drop `worker=` or use "
                "`on_worker_crash='raise'`."
            )
            raise ValueError(msg)
        if num_workers == 0:
            msg = (
                "`on_worker_crash='restart'` needs worker processes, and "
                "`num_workers=0` runs the envs in this process: set `num_workers` "
                ">= 1 or use `on_worker_crash='raise'`."
            )
            raise ValueError(msg)
    return limit


def check_wait_strategy(wait_strategy: object) -> str:
    """Check the ``wait_strategy`` argument.

    Raises:
        ValueError: If it is not one of :data:`WAIT_STRATEGIES`.
    """
    if wait_strategy not in WAIT_STRATEGIES:
        msg = (
            f"`wait_strategy` must be one of {WAIT_STRATEGIES}, got {wait_strategy!r}."
        )
        raise ValueError(msg)
    return str(wait_strategy)


def resolve_num_workers(
    num_workers: object,
    num_envs: int,
    worker: Callable[..., None] | None,
    parent_envs: int,
    default_workers: int,
) -> int:
    """The number of worker processes for ``num_workers`` (``None``: the default).

    Args:
        num_workers: As given.
        num_envs: Number of sub-environments.
        worker: The ``worker=`` argument.
        parent_envs: The envs the parent steps itself (the workers host the rest).
        default_workers: The default placement's (vecpool/_util/placement.py).

    Raises:
        ValueError: If it is out of range, or set with a custom ``worker``.
    """
    if worker is not None:
        if num_workers not in (None, num_envs):
            msg = (
                f"`num_workers={num_workers}` cannot be combined with a custom "
                "`worker`, which hosts one env per process: leave `num_workers` "
                f"unset or set it to num_envs={num_envs}."
            )
            raise ValueError(msg)
        return num_envs
    hosted = num_envs - parent_envs  # the envs the workers host
    if num_workers is None:
        return default_workers
    if parent_envs and num_workers == 0:
        return 0  # every env in this process
    if parent_envs:
        return check_int(
            "num_workers",
            num_workers,
            1,
            hosted,
            hint=f" (the {hosted} envs not in this process, parent_envs="
            f"{parent_envs}; or None for the default)",
        )
    return check_int(
        "num_workers",
        num_workers,
        0,
        num_envs,
        hint=f" (num_envs={num_envs}; 0 runs the envs in this process; "
        "or None for the default)",
    )


def resolve_parent_envs(
    parent_envs: object,
    num_workers: object,
    num_envs: int,
    worker: Callable[..., None] | None,
    on_worker_crash: object,
    *,
    batch_size: object = None,
    max_concurrency: object = None,
    default_share: int = 0,
) -> int:
    """How many envs the parent steps itself (``parent_envs``; see the class docs).

    ``num_workers=0`` puts every env in the parent (``parent_envs`` is then
    ``num_envs``); a share of them needs vecpool's own workers for the rest, and
    keeps them out of worker isolation, so a custom ``worker`` and
    ``on_worker_crash="restart"`` refuse one. ``"auto"`` is ``default_share`` (the
    default placement's: vecpool/_util/placement.py) when nothing asks for
    isolation or a fixed placement, else 0: with
    ``num_workers`` given, a custom ``worker``, ``on_worker_crash="restart"``,
    ``batch_size`` (``send``/``recv``: the workers' replies come in any order; the
    parent's share would step only when ``recv`` waits) or ``max_concurrency`` (the
    parent would wait for the workers' permits with no timeout).

    Raises:
        ValueError: Naming the argument and the fix.
    """
    if parent_envs == "auto":
        if num_workers == 0:
            return num_envs  # every env in this process
        if (
            num_workers is not None
            or worker is not None
            or on_worker_crash == "restart"
            or batch_size is not None
            or max_concurrency is not None
        ):
            return 0  # a placement chosen, or isolation asked for: all in workers
        return default_share
    share = check_int(
        "parent_envs",
        parent_envs,
        0,
        num_envs,
        hint=f' (num_envs={num_envs}; 0 keeps every env in a worker process; "auto" '
        "sizes a share from the CPUs)",
    )
    if share and worker is not None:
        msg = (
            f"`parent_envs={share}` cannot be combined with a custom `worker`, which "
            "hosts every env in a process of its own: leave `parent_envs` at 0."
        )
        raise ValueError(msg)
    if share and on_worker_crash == "restart":
        msg = (
            f"`parent_envs={share}` cannot be combined with "
            "`on_worker_crash='restart'`, which keeps every env in a worker process "
            "(an env's crash in this process cannot be survived): set "
            "`parent_envs=0`."
        )
        raise ValueError(msg)
    if num_workers == 0:
        if share not in (0, num_envs):
            msg = (
                f"`num_workers=0` steps every env in this process, so `parent_envs` "
                f"must be 0 or num_envs={num_envs}, got {share}."
            )
            raise ValueError(msg)
        return num_envs
    if share == num_envs and num_workers is not None:
        msg = (
            f"`parent_envs={share}` leaves no env for the {num_workers} worker "
            "process(es): set `num_workers=0` (or leave it unset), or host fewer "
            "envs in this process."
        )
        raise ValueError(msg)
    return share


def check_batch_size(
    batch_size: object, num_envs: int, worker: Callable[..., None] | None
) -> int | None:
    """Check the ``batch_size`` argument (``None``: no ``send``/``recv``).

    Raises:
        ValueError: If it is out of range, or set with a custom ``worker``.
    """
    if batch_size is None:
        return None
    size = check_int(
        "batch_size", batch_size, 1, num_envs, hint=f" (num_envs={num_envs}; or None)"
    )
    if worker is not None:
        msg = "`batch_size` cannot be combined with a custom `worker`."
        raise ValueError(msg)
    return size
