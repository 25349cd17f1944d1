"""TorchRL: a ``GymWrapper`` over a vecpool vector env, in a mode TorchRL accepts.

TorchRL's ``GymWrapper`` takes a Gymnasium ``VectorEnv`` whose autoreset mode is
``SAME_STEP`` or ``DISABLED`` (it resets finished envs itself, and prefers
``DISABLED``); Gymnasium's default, ``NEXT_STEP``, is refused. :func:`make_env`
builds the vecpool env in ``DISABLED`` mode and wraps it, and :func:`check_mode`
says what to change for an env built elsewhere.

Importing ``torchrl`` sets multiprocessing's start method to ``spawn``: env
functions must then be importable or picklable (vecpool pickles them with
cloudpickle, so lambdas work), and a script needs the ``if __name__ ==
"__main__":`` guard.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from gymnasium.vector import AutoresetMode

from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["check_mode", "make_env"]

INSTALL = "pip install torchrl (with a torch of your choice)"
ACCEPTED = (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)


def check_mode(vector_env: Any) -> AutoresetMode:
    """The vector env's autoreset mode, if TorchRL's ``GymWrapper`` accepts it.

    Args:
        vector_env: A Gymnasium vector env (vecpool's or Gymnasium's).

    Returns:
        Its mode (``SAME_STEP`` or ``DISABLED``).

    Raises:
        ValueError: Naming the fix, for ``NEXT_STEP`` (Gymnasium's default).
    """
    mode = vector_env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    mode = AutoresetMode(mode) if isinstance(mode, str) else mode
    if mode not in ACCEPTED:
        msg = (
            f"TorchRL's GymWrapper refuses autoreset_mode={mode}: build the vector env "
            "with autoreset_mode=AutoresetMode.DISABLED (TorchRL's preference) or "
            "SAME_STEP, e.g. AsyncVectorEnv(env_fns, "
            "autoreset_mode=AutoresetMode.DISABLED)."
        )
        raise ValueError(msg)
    return mode


def make_env(
    env_fns: Sequence[Callable[[], Any]], *, device: Any = None, **kwargs: Any
) -> Any:
    """A TorchRL env over ``vecpool.AsyncVectorEnv(env_fns, ...)``.

    Example:
        >>> # import functools, gymnasium as gym
        >>> # env = make_env([functools.partial(gym.make, "CartPole-v1")] * 4)
        >>> # rollout = env.rollout(100, break_when_any_done=False)  # [4, 100]

    Args:
        env_fns: Functions creating the envs.
        device: TorchRL's device for the tensors.
        **kwargs: Passed to :class:`vecpool.AsyncVectorEnv` (``num_workers``,
            ``autoreset_mode`` = ``DISABLED`` by default, ...).

    Returns:
        ``torchrl.envs.GymWrapper`` over the vecpool env (closing it closes both).

    Raises:
        ImportError: If torchrl is not installed.
        ValueError: For an autoreset mode TorchRL refuses.
    """
    try:
        gym_wrapper = importlib.import_module("torchrl.envs.libs.gym").GymWrapper
    except ImportError as error:
        msg = f"The TorchRL adapter needs torchrl: {INSTALL}."
        raise ImportError(msg) from error
    kwargs.setdefault("autoreset_mode", AutoresetMode.DISABLED)
    vector_env = AsyncVectorEnv(env_fns, **kwargs)
    try:
        check_mode(vector_env)
        return gym_wrapper(vector_env, device=device)
    except BaseException:
        vector_env.close()
        raise
