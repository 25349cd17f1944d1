"""The constructor arguments of :class:`vecpool.AsyncVectorEnv`, checked in one place.

Both kinds of vector env check them alike before anything starts, with the same
messages: vecpool's engine (:mod:`vecpool.vector.async_env`) and Gymnasium's own
machinery under a custom ``worker`` (:mod:`vecpool.vector.gymnasium_worker`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gymnasium import spaces
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from vecpool._util.placement import Placement, plan
from vecpool._util.topology import physical_cores
from vecpool._util.validation import (
    check_batch_size,
    check_custom_worker,
    check_env_fns,
    check_max_concurrency,
    check_platform,
    check_policy_threads,
    check_restart,
    check_wait_strategy,
    resolve_num_workers,
    resolve_parent_envs,
)

__all__ = ["Arguments", "check_arguments", "observation_spaces"]


@dataclass(frozen=True, slots=True)
class Arguments:
    """The checked arguments (the others are kept as given).

    Attributes:
        num_envs: Number of sub-environments.
        max_concurrency: ``max_concurrency`` as an ``int``, or ``None``.
        num_workers: Worker processes (the default resolved).
        parent_envs: Envs the parent steps itself (``num_envs`` with
            ``num_workers=0``).
        wait_strategy: ``"auto"``, ``"spin"`` or ``"block"``.
        batch_size: ``send``/``recv`` batch size, or ``None``.
        on_worker_crash: ``"raise"`` or ``"restart"``.
        max_restarts: Restarts allowed per worker, or ``None``.
        policy_threads: ``None``, ``"auto"`` or a number of threads.
        cores: The cores the placement was chosen for (physical where known).
    """

    num_envs: int
    max_concurrency: int | None
    num_workers: int
    parent_envs: int
    wait_strategy: str
    batch_size: int | None
    on_worker_crash: str
    max_restarts: int | None
    policy_threads: int | str | None
    cores: int = 1

    def set_options(self, env: Any) -> None:
        """Set vecpool's keyword-only options, as checked, on the vector env."""
        for name in (
            "num_workers",
            "parent_envs",
            "wait_strategy",
            "batch_size",
            "on_worker_crash",
            "max_restarts",
            "policy_threads",
        ):
            setattr(env, name, getattr(self, name))
        env.placement = Placement(self.num_workers, self.parent_envs, self.cores)


def check_arguments(
    env_fns: object,
    shared_memory: object,
    worker: Callable[..., None] | None,
    max_concurrency: object,
    *,
    num_workers: object,
    parent_envs: object = "auto",
    wait_strategy: object,
    batch_size: object,
    on_worker_crash: object,
    max_restarts: object,
    policy_threads: object,
) -> Arguments:
    """Check the arguments of :class:`vecpool.AsyncVectorEnv` (see its docstring).

    Returns:
        The checked values.

    Raises:
        ValueError: On an invalid argument, named in the message.
        TypeError: If ``env_fns`` is not a list of functions.
        RuntimeError: On a platform without ``select.poll``.
    """
    if isinstance(shared_memory, str) and shared_memory != "auto":
        msg = f'`shared_memory` must be True, False or "auto", got {shared_memory!r}.'
        raise ValueError(msg)
    check_platform()
    concurrency = check_max_concurrency(max_concurrency)
    check_custom_worker(worker)
    check_env_fns(env_fns)
    num_envs = len(env_fns)  # type: ignore[arg-type]  # check_env_fns: a sequence
    if num_envs == 0:
        msg = "`env_fns` is empty: pass at least one function that creates an env."
        raise ValueError(msg)
    cores = physical_cores()
    default = plan(num_envs, cores, max_workers=concurrency)
    share = resolve_parent_envs(
        parent_envs,
        num_workers,
        num_envs,
        worker,
        on_worker_crash,
        batch_size=batch_size,
        max_concurrency=max_concurrency,
        default_share=default.parent_envs,
    )
    if share != default.parent_envs:  # the workers host the others, on the rest
        default = (
            plan(
                num_envs - share,
                cores - (1 if share else 0),
                share=False,
                max_workers=concurrency,
            )
            if share < num_envs
            else Placement(0, share, cores)
        )
    workers = resolve_num_workers(
        num_workers, num_envs, worker, share, default.num_workers
    )
    return Arguments(
        num_envs=num_envs,
        max_concurrency=concurrency,
        num_workers=workers,
        parent_envs=share,
        wait_strategy=check_wait_strategy(wait_strategy),
        batch_size=check_batch_size(batch_size, num_envs, worker),
        max_restarts=check_restart(on_worker_crash, max_restarts, worker, workers),
        on_worker_crash=str(on_worker_crash),
        policy_threads=check_policy_threads(policy_threads),
        cores=cores,
    )


def observation_spaces(
    observation_mode: Any,
    dummy_env: Any,
    env_fns: Sequence[Callable[[], Any]],
    num_envs: int,
) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """The batched and single observation spaces of a vector env, as Gymnasium's.

    Args:
        observation_mode: ``"same"``, ``"different"`` or a tuple
            ``(observation_space, single_observation_space)``.
        dummy_env: The first env (already built).
        env_fns: Every env's constructor (``"different"`` builds them all).
        num_envs: Number of sub-environments.

    Returns:
        ``(observation_space, single_observation_space)``.

    Raises:
        TypeError: If a tuple does not hold two spaces.
        ValueError: On an unknown mode.
    """
    mode: object = observation_mode
    if isinstance(mode, tuple) and len(mode) == 2:
        if not isinstance(mode[0], spaces.Space) or not isinstance(
            mode[1], spaces.Space
        ):
            msg = (
                "Expected both elements of observation_mode to be Spaces, got "
                f"{type(mode[0])} and {type(mode[1])}"
            )
            raise TypeError(msg)
        return mode[0], mode[1]
    if mode == "same":
        single = dummy_env.observation_space
        return batch_space(single, num_envs), single
    if mode == "different":
        env_spaces = []
        for env_fn in env_fns:
            env = env_fn()
            env_spaces.append(env.observation_space)
            env.close()
        return batch_differing_spaces(env_spaces), env_spaces[0]
    msg = (
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple "
        f"of single and batch observation space, actual got {mode}"
    )
    raise ValueError(msg)
