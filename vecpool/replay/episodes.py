"""Complete episodes out of a replay pool (for offline-RL datasets such as Minari).

A sub-pool holds one env's transitions in time order (unless the pool routes at
random). An episode in it is **complete** when its first transition follows a reset
(the sub-pool's very first transition, or one after an episode end or after a jump
where ``next_obs`` of a row differs from the next row's ``obs``: a reset that no
flag announced) and its last transition is terminated or truncated. Everything else
is partial: the head of a sub-pool whose older transitions were dropped, an episode
cut by a jump, the episode still running at the tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from vecpool._util.spaces import make_views
from vecpool.replay.storage import flatten_stored, same_value

__all__ = ["Episode", "RecordedPool", "complete_episodes"]


class RecordedPool(Protocol):
    """What episodes are read from (:class:`~vecpool.ReplayPool` is one).

    A protocol, so this module and the Minari export read a pool without
    importing it (the pool imports them for :meth:`ReplayPool.to_minari`).
    """

    random: bool
    observation_space: Any
    action_space: Any

    @property
    def lengths(self) -> npt.NDArray[np.int64]:
        """Transitions each sub-pool holds."""
        ...

    @property
    def received(self) -> npt.NDArray[np.int64]:
        """Transitions each sub-pool has received, kept or not."""
        ...

    def get_pool(self) -> Any:
        """Every transition held, sub-pools in env order, oldest first."""
        ...


@dataclass(frozen=True)
class Episode:
    """One complete episode, as offline-RL datasets store it.

    Attributes:
        env: The sub-pool (env index) it came from.
        observations: ``T + 1`` observations (a batch, nested like the space): the
            reset observation, then each step's.
        actions: ``T`` actions.
        rewards: ``T`` rewards.
        terminations: ``T`` flags (only the last may be set).
        truncations: ``T`` flags (only the last may be set).
    """

    env: int
    observations: Any
    actions: Any
    rewards: npt.NDArray[np.float64]
    terminations: npt.NDArray[np.bool_]
    truncations: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        """Number of steps ``T``."""
        return int(self.rewards.size)


def complete_episodes(pool: RecordedPool) -> tuple[list[Episode], int]:
    """The complete episodes of every sub-pool, and how many partial ones were left.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from vecpool import ReplayPool
        >>> pool = ReplayPool(spaces.Box(0, 9, (1,)), spaces.Discrete(2), 1, 10)
        >>> for t, end in enumerate([False, True, False]):
        ...     pool.add(np.array([[t]], np.float32), np.array([0]),
        ...              np.array([[t + 1]], np.float32), np.ones(1),
        ...              np.array([end]), np.array([False]))
        >>> episodes, partial = complete_episodes(pool)
        >>> [e.observations[:, 0].tolist() for e in episodes], partial
        ([[0.0, 1.0, 2.0]], 1)

    Args:
        pool: The pool (``random=False``: each sub-pool one env, in time order).

    Returns:
        The episodes (sub-pool after sub-pool, oldest first) and the number of
        partial episodes skipped.

    Raises:
        ValueError: If the pool routes transitions at random (no time order).
    """
    if pool.random:
        msg = (
            "A pool with random=True mixes envs in its sub-pools, so it holds no "
            "episodes in order: collect with random=False to export episodes."
        )
        raise ValueError(msg)
    everything = pool.get_pool()
    lengths = pool.lengths.tolist()
    received = pool.received.tolist()
    total = int(sum(lengths))
    obs = flatten_stored(pool.observation_space, everything.obs, total, "obs")
    next_obs = flatten_stored(pool.observation_space, everything.next_obs, total, "obs")
    actions = flatten_stored(pool.action_space, everything.action, total, "action")
    ended = everything.terminated | everything.truncated
    episodes: list[Episode] = []
    partial = 0
    start = 0
    for env, (length, got) in enumerate(zip(lengths, received, strict=True)):
        stop = start + length
        # the sub-pool's first row begins an episode only if nothing was dropped
        first = start
        begins = got == length
        for row in range(start, stop):
            last_row = row == stop - 1
            jump = not last_row and not ended[row] and not _same(next_obs, obs, row)
            if not (ended[row] or jump or last_row):
                continue
            if begins and ended[row]:
                rows = np.arange(first, row + 1)
                episodes.append(
                    _episode(pool, env, rows, (obs, next_obs, actions), everything)
                )
            elif row >= first:
                partial += 1
            first, begins = row + 1, True  # after an end or a jump: a reset
        start = stop
    return episodes, partial


def _same(
    next_obs: list[npt.NDArray[Any]], obs: list[npt.NDArray[Any]], row: int
) -> bool:
    """Whether ``next_obs[row]`` is bitwise ``obs[row + 1]`` (the episode goes on).

    An ``object`` leaf (a Graph, a custom string, ...) counts as the same when it
    holds an equal value (``vecpool._util.spaces.same_value``).
    """
    for a, b in zip(next_obs, obs, strict=True):
        if a.dtype.kind == "O":
            if not same_value(a[row], b[row + 1]):
                return False
        elif (
            np.ascontiguousarray(a[row]).tobytes()
            != np.ascontiguousarray(b[row + 1]).tobytes()
        ):
            return False
    return True


def _episode(
    pool: RecordedPool,
    env: int,
    rows: npt.NDArray[np.int64],
    leaves: tuple[list[npt.NDArray[Any]], ...],
    transitions: Any,
) -> Episode:
    obs, next_obs, actions = leaves
    observations = [
        np.concatenate([o[rows], n[rows[-1:]]])
        for o, n in zip(obs, next_obs, strict=True)
    ]
    return Episode(
        env,
        make_views(pool.observation_space, observations),
        make_views(pool.action_space, [a[rows] for a in actions]),
        transitions.reward[rows],
        transitions.terminated[rows],
        transitions.truncated[rows],
    )
