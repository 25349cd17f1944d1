"""Complete episodes out of a replay pool (for offline-RL datasets such as Minari).

A sub-pool holds one env's transitions in time order (unless the pool routes at
random). An episode in it is **complete** when its first transition follows a reset
(the sub-pool's very first transition, or one after an episode end or after a jump
where ``next_obs`` of a row differs from the next row's ``obs``: a reset that no
flag announced) and its last transition is terminated or truncated. Everything else
is partial: the head of a sub-pool whose start was dropped with older transitions
(an episode whose first transition is the oldest held is complete when the one
dropped before it ended the previous episode: ``ReplayPool.episode_starts``), an
episode cut by a jump, the rest of an episode whose start was not recorded (a
stretch the pool marks as going on: ``ReplayPool.resumed_starts``), the episode
still running at the tail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from vecpool._util.spaces import make_views
from vecpool.replay.storage import flatten_stored, same_value

__all__ = ["Episode", "EpisodeScan", "RecordedPool", "complete_episodes"]


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

    def get_rows(self, env: int, start: int, stop: int) -> Any:
        """Transitions ``start:stop`` of sub-pool ``env``, oldest first."""
        ...

    def stretch_starts(self, env: int, start: int, stop: int) -> npt.NDArray[np.bool_]:
        """Whether each of those transitions begins a stretch (after a cut)."""
        ...

    def resumed_starts(self, env: int, start: int, stop: int) -> npt.NDArray[np.bool_]:
        """Whether each begins a stretch that goes on with an unrecorded start."""
        ...

    def episode_starts(self, env: int, start: int, stop: int) -> npt.NDArray[np.bool_]:
        """Whether each follows an episode end or a cut (not the oldest as such)."""
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

    Holds every episode in memory; :class:`EpisodeScan` yields them one at a time.

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
    scan = EpisodeScan(pool)
    episodes = list(scan)
    return episodes, scan.partial


class EpisodeScan:
    """The complete episodes of a pool, one at a time, in bounded memory.

    Reads each sub-pool ``chunk_size`` rows at a time to find where episodes end,
    then each complete episode's rows: what it holds at once is a chunk and one
    episode, never the whole pool (a frame-stacked pool rebuilds ``2 * K``
    frames a row). :attr:`partial` counts the partial episodes passed so far.

    Args:
        pool: The pool (``random=False``: each sub-pool one env, in time order).
        chunk_size: Rows read at a time to find the episodes.

    Raises:
        ValueError: If the pool routes transitions at random (no time order).
    """

    def __init__(self, pool: RecordedPool, chunk_size: int = 4096) -> None:
        """Check the pool; nothing is read until iterated."""
        if pool.random:
            msg = (
                "A pool with random=True mixes envs in its sub-pools, so it holds "
                "no episodes in order: collect with random=False to export "
                "episodes."
            )
            raise ValueError(msg)
        self.pool = pool
        self.chunk_size = chunk_size
        self.partial = 0

    def __iter__(self) -> Iterator[Episode]:
        """Each complete episode, sub-pool after sub-pool, oldest first."""
        pool = self.pool
        lengths = pool.lengths.tolist()
        received = pool.received.tolist()
        for env, (length, got) in enumerate(zip(lengths, received, strict=True)):
            # the sub-pool's first row begins an episode if nothing was dropped, or
            # the row dropped before it ended one (or a cut came between them); not
            # if it goes on with an episode whose start was not recorded
            begins = got == length or (
                length > 0 and bool(pool.episode_starts(env, 0, 1)[0])
            )
            first = 0
            for start in range(0, length, self.chunk_size):
                stop = min(start + self.chunk_size, length)
                # one row more: whether the last row's next_obs is the next obs
                chunk = pool.get_rows(env, start, min(stop + 1, length))
                obs, next_obs, ended = self._leaves(chunk)
                # a row after a cut (a reset, an abort, a restart) starts a stretch;
                # one that goes on with an unrecorded start begins no episode
                cuts = pool.stretch_starts(env, start, min(stop + 1, length))
                resumed = pool.resumed_starts(env, start, min(stop + 1, length))
                if start == 0 and length:
                    begins = begins and not resumed[0]
                for row in range(start, stop):
                    here = row - start
                    last_row = row == length - 1
                    jump = (
                        not last_row
                        and not ended[here]
                        and (cuts[here + 1] or not _same(next_obs, obs, here))
                    )
                    if not (ended[here] or jump or last_row):
                        continue
                    if begins and ended[here]:
                        yield self._episode(env, first, row + 1)
                    elif row >= first:
                        self.partial += 1
                    # after an end or a jump: a reset, unless the next row goes on
                    first = row + 1
                    begins = last_row or not resumed[here + 1]

    def _leaves(
        self, chunk: Any
    ) -> tuple[list[npt.NDArray[Any]], list[npt.NDArray[Any]], npt.NDArray[np.bool_]]:
        space, count = self.pool.observation_space, chunk.reward.size
        obs = flatten_stored(space, chunk.obs, count, "obs")
        next_obs = flatten_stored(space, chunk.next_obs, count, "obs")
        return obs, next_obs, chunk.terminated | chunk.truncated

    def _episode(self, env: int, start: int, stop: int) -> Episode:
        pool = self.pool
        rows = pool.get_rows(env, start, stop)
        count = stop - start
        obs = flatten_stored(pool.observation_space, rows.obs, count, "obs")
        next_obs = flatten_stored(pool.observation_space, rows.next_obs, count, "obs")
        actions = flatten_stored(pool.action_space, rows.action, count, "action")
        observations = [
            np.concatenate([o, n[-1:]]) for o, n in zip(obs, next_obs, strict=True)
        ]
        return Episode(
            env,
            make_views(pool.observation_space, observations),
            make_views(pool.action_space, actions),
            rows.reward,
            rows.terminated,
            rows.truncated,
        )


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
