"""The classic ``Pool`` interface, rebuilt on AsyncVectorEnv and ReplayPoolWrapper."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import Env

from vecpool._util.progress import Progress
from vecpool._util.validation import check_int
from vecpool.replay.pool import ReplayPool
from vecpool.replay.settings import PoolSettings
from vecpool.replay.wrapper import ReplayPoolWrapper
from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["Pool"]


class Pool:
    """Collect ``(state, action, next_state, reward, done)`` from parallel envs.

    The interface of the original ``Pool`` (per-env sub-pools, a total
    ``pool_size``, windowing, periodic clearing, inverse-length balancing), now
    backed by :class:`vecpool.AsyncVectorEnv` and :class:`vecpool.ReplayPoolWrapper`:
    transitions are stored in preallocated arrays (not re-read and re-written shared
    lists), ``terminated`` and ``truncated`` are kept apart underneath, and
    autoreset steps are never recorded as transitions.

    How the parameters map:

    * ``env_fns`` (the original took env instances, one per process): functions
      that create the envs; there may be more envs than processes.
    * ``processes`` -> ``AsyncVectorEnv(num_workers=processes)``.
    * ``pool_size``, ``window_size``, ``clearing_freq``, ``random`` ->
      :class:`ReplayPoolWrapper` (one sub-pool per env); ``window_size_`` -> its
      ``clearing_size`` (this class keeps the original name).
    * ``done`` in :meth:`get_pool` is ``terminated | truncated``; the two flags are
      on :attr:`pool` (``pool.get_pool().terminated`` / ``.truncated``).

    Example:
        >>> import gymnasium as gym, vecpool
        >>> with vecpool.Pool([lambda: gym.make("CartPole-v1")] * 2, processes=2,
        ...                   pool_size=1000, seed=0) as pool:
        ...     pool.store(50, progress=False)
        ...     state, action, next_state, reward, done = pool.get_pool()
        >>> state.shape[1], len(state) == len(done) <= 100  # resets aren't transitions
        (4, True)

    Args:
        env_fns: Functions that create the envs.
        processes: Number of worker processes.
        pool_size: Total capacity of the pool.
        window_size: See :class:`ReplayPool`.
        clearing_freq: See :class:`ReplayPool`.
        window_size_: :class:`ReplayPool`'s ``clearing_size``: how many of a
            sub-pool's oldest transitions every ``clearing_freq``-th drops.
        random: Route transitions to sub-pools with probability ``~ 1/(len + 1)``
            (the original's default).
        seed: Seeds the env resets, the random actions and the pool's generator.

    Raises:
        ValueError: On an invalid argument (named in the message, ``window_size_``
            included).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env[Any, Any]]],
        processes: int,
        pool_size: int,
        window_size: int | None = None,
        clearing_freq: int | None = None,
        window_size_: int | None = None,
        random: bool = True,
        seed: int | None = None,
    ) -> None:
        """Start the workers and create the pool."""
        # this class keeps the original name: its messages say `window_size_`
        if (clearing_freq is None) != (window_size_ is None):
            msg = (
                "`clearing_freq` and `window_size_` go together: set both or "
                f"neither, got clearing_freq={clearing_freq!r}, "
                f"window_size_={window_size_!r}."
            )
            raise ValueError(msg)
        if window_size_ is not None:
            window_size_ = check_int("window_size_", window_size_, 1)
        self.seed = seed
        vector_env = AsyncVectorEnv(env_fns, num_workers=processes)
        try:
            settings = PoolSettings(
                pool_size, window_size, clearing_freq, window_size_, random, seed
            )
            self.envs = ReplayPoolWrapper(vector_env, **dataclasses.asdict(settings))
        except BaseException:
            vector_env.close()
            raise
        self.pool: ReplayPool = self.envs.pool
        self._obs: Any = None

    def store(
        self,
        num_steps: int,
        policy: Callable[[Any], Any] | None = None,
        progress: bool = True,
    ) -> None:
        """Step every env ``num_steps`` times and record the transitions.

        Args:
            num_steps: Number of vector steps (each steps every env once).
            policy: ``policy(observations) -> actions`` for the batch; random
                actions when ``None``.
            progress: Show a progress bar on standard error.

        Raises:
            ValueError: If ``num_steps`` is not an integer >= 0.
        """
        num_steps = check_int("num_steps", num_steps, 0)
        if self._obs is None:
            self._obs, _ = self.envs.reset(seed=self.seed)
            self.envs.action_space.seed(self.seed)
        display = Progress(enabled=progress)
        for step in range(num_steps):
            if policy is None:
                actions = self.envs.action_space.sample()
            else:
                actions = policy(self._obs)
            self._obs, *_ = self.envs.step(actions)
            if progress:  # counted in env steps, as everywhere
                display.count(
                    (step + 1) * self.envs.num_envs,
                    num_steps * self.envs.num_envs,
                    extra=f"{len(self.pool):,} transitions",
                )

    def get_pool(
        self,
    ) -> tuple[Any, Any, Any, npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """Every stored transition as ``(state, action, next_state, reward, done)``.

        Returns:
            Arrays (or dicts/tuples of arrays for Dict/Tuple spaces) with one row per
            transition, sub-pools in env order; ``done = terminated | truncated``.
        """
        batch = self.pool.get_pool()
        done = np.logical_or(batch.terminated, batch.truncated)
        return batch.obs, batch.action, batch.next_obs, batch.reward, done

    def close(self) -> None:
        """Close the envs and their worker processes."""
        self.envs.close()

    def __enter__(self) -> Pool:
        """Use the pool in a ``with`` block; it is closed on exit."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the pool."""
        self.close()
