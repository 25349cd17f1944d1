"""Readers of a replay pool: the batch read from drawn rows.

A reader takes rows drawn by any sampler (vecpool/replay/samplers.py: their
sub-pools, offsets and rows) and reads them out of the pool's parts
(:class:`Stored`): :func:`read_rows` the six fields of one step each,
:class:`NStep` an n-step window from each, :class:`SequenceReader` a sequence of
consecutive steps from each. Windows and sequences follow one sub-pool and stop at
its stretch marks (vecpool/replay/ring.py), so they need each env's rows in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import make_views
from vecpool.replay.batches import Sequences
from vecpool.replay.layouts import Columns, ObservationLayout
from vecpool.replay.ring import SubPoolRing
from vecpool.replay.storage import fresh_objects

__all__ = ["NStep", "SequenceReader", "Stored", "read_rows"]


@dataclass(frozen=True)
class Stored:
    """The parts a batch is read from."""

    ring: SubPoolRing
    layout: ObservationLayout
    columns: Columns
    observation_space: spaces.Space[Any]
    action_space: spaces.Space[Any]


def read_rows(
    stored: Stored,
    env: npt.NDArray[np.int64],
    offset: npt.NDArray[np.int64],
    next_offset: npt.NDArray[np.int64] | None = None,
    row: npt.NDArray[np.int64] | None = None,
) -> tuple[Any, ...]:
    """The six fields of the rows at ``offset`` of sub-pools ``env``.

    ``next_obs`` comes from the rows at ``next_offset`` (default: the same).
    ``row``: the rows at ``offset``, when the caller has them already.
    """
    ring, columns = stored.ring, stored.columns
    if row is None:
        row = ring.row_of(env, offset)
    if next_offset is None:
        next_row, next_offset = row, offset
    else:
        next_row = ring.row_of(env, next_offset)
    layout = stored.layout
    newest = next_offset == ring.length[env] - 1 if layout.read_newest else None
    obs, next_obs = layout.read(env, row, next_row, newest)
    # object leaves: copies, never the pool's own objects
    return (
        make_views(stored.observation_space, [fresh_objects(a) for a in obs]),
        make_views(stored.action_space, [a.take(row, axis=0) for a in columns.action]),
        make_views(stored.observation_space, [fresh_objects(a) for a in next_obs]),
        columns.reward.take(row),
        columns.terminated.take(row),
        columns.truncated.take(row),
    )


@dataclass(frozen=True)
class NStep:
    """Up to ``steps`` steps of one env and episode from each drawn row.

    The window stops after an episode end, before a row that starts a new stretch,
    and past the newest row of the sub-pool.
    """

    steps: int
    gamma: float

    def window(
        self,
        stored: Stored,
        env: npt.NDArray[np.int64],
        offset: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[Any], ...]:
        """Each window's last offset, reward sum, end flags and discount."""
        ring, columns, gamma = stored.ring, stored.columns, self.gamma
        reward = columns.reward[row].copy()
        terminated = columns.terminated[row].copy()
        truncated = columns.truncated[row].copy()
        going = ~(terminated | truncated)
        last = offset.copy()
        summed = np.ones(offset.shape, np.int64)
        held = ring.length[env]
        for k in range(1, self.steps):
            ahead = offset + k
            going &= ahead < held
            if not going.any():
                break
            following = ring.row_of(env, np.minimum(ahead, held - 1))
            going &= ~ring.starts[following]
            picked = following[going]
            reward[going] += gamma**k * columns.reward[picked]
            terminated[going] = columns.terminated[picked]
            truncated[going] = columns.truncated[picked]
            last[going] = ahead[going]
            summed += going
            going &= ~(terminated | truncated)
        discount = np.power(gamma, summed.astype(np.float64))
        return last, reward, terminated, truncated, discount

    def read(
        self,
        stored: Stored,
        env: npt.NDArray[np.int64],
        offset: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
    ) -> tuple[Any, ...]:
        """The seven fields of an n-step batch.

        ``obs``, ``action``, the window's ``next_obs``, its reward sum, end flags
        and ``discount``.
        """
        last, reward, terminated, truncated, discount = self.window(
            stored, env, offset, row
        )
        obs, action, next_obs, *_ = read_rows(stored, env, offset, last, row)
        return obs, action, next_obs, reward, terminated, truncated, discount


@dataclass(frozen=True)
class SequenceReader:
    """``length`` consecutive steps of one sub-pool from each drawn row.

    ``mask`` is ``False`` from the first step that is not the same episode's next
    step (an episode end, a reset or restart, a window or clearing cut, past the
    newest row).
    """

    length: int

    def read(
        self,
        stored: Stored,
        env: npt.NDArray[np.int64],
        start: npt.NDArray[np.int64],
    ) -> Sequences:
        """The sequences from offsets ``start`` of sub-pools ``env``."""
        ring, columns = stored.ring, stored.columns
        offset = start[:, None] + np.arange(self.length, dtype=np.int64)  # [B, L]
        held = ring.length[env][:, None]
        inside = offset < held
        offset = np.minimum(offset, held - 1)
        env_2d = np.broadcast_to(env[:, None], offset.shape)
        row = ring.row_of(env_2d, offset)
        done = columns.terminated[row] | columns.truncated[row]
        follows = np.ones(offset.shape, np.bool_)
        follows[:, 1:] = inside[:, 1:] & ~ring.starts[row[:, 1:]] & ~done[:, :-1]
        mask = np.logical_and.accumulate(follows, axis=1)
        obs, action, next_obs, reward, terminated, truncated = read_rows(
            stored, env_2d.reshape(-1), offset.reshape(-1)
        )
        shape = offset.shape

        def fold(batch: Any) -> Any:
            if isinstance(batch, dict):
                return {key: fold(value) for key, value in batch.items()}
            if isinstance(batch, tuple):
                return tuple(fold(value) for value in batch)
            return batch.reshape(*shape, *batch.shape[1:])

        return Sequences(
            fold(obs),
            fold(action),
            fold(next_obs),
            reward.reshape(shape),
            terminated.reshape(shape),
            truncated.reshape(shape),
            mask,
        )
