"""The ring of per-env sub-pools: slots, lengths, windows, clearing, stretch marks.

Each of ``num_envs`` sub-pools is a ring of ``slots`` slots (the capacity plus one
spare slot, so a sub-pool can hold the appended transition before the overflow rule
trims it; with ``frame_stack=K``, ``K`` spare slots, vecpool/replay/frames.py).
Slot ``k`` of sub-pool ``j`` is row ``k * num_envs + j`` of every per-row array:
sub-pools fill at about the same pace, so one vector step writes neighbouring rows,
and a row is one flat index. Sub-pool ``j`` holds slots ``[end - length, end)``
modulo ``slots``. The order of operations on each add (docs/replay-pool.md): append;
then periodic clearing; then the overflow rule (keep the ``window_size`` newest, or
drop the oldest).

The ring also keeps the marks of where episodes continue: ``starts[row]`` says the
row is *not* its env's episode's next step after the sub-pool's previous row (an
episode start, a reset, an abort, a restart), what n-step windows and sequences
stop at; ``fresh[env]``: the env's next row will be one. ``resumed[row]`` says such
a row goes on with an episode whose start was not recorded (a step that failed,
an env first seen in the middle of an episode), so it begins no episode;
``resuming[env]``: the env's next row will be one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["SubPoolRing"]


class SubPoolRing:
    """Where every sub-pool's transitions lie, and the rule that trims them.

    Args:
        num_envs: Number of sub-pools.
        capacity: Transitions a sub-pool holds at most.
        spare: Slots beyond the capacity (1, or ``K`` for ``frame_stack=K``).
        window_size: On overflow keep this many newest (``None``: drop the oldest).
        clearing_freq: Every ``clearing_freq`` transitions a sub-pool receives ...
        clearing_size: ... drop its ``clearing_size`` oldest.
    """

    num_envs: int
    capacity: int
    slots: int
    window_size: int | None
    clearing_freq: int | None
    clearing_size: int | None
    base: npt.NDArray[np.int64]
    envs: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    received: npt.NDArray[np.int64]
    starts: npt.NDArray[np.bool_]
    fresh: npt.NDArray[np.bool_]
    resumed: npt.NDArray[np.bool_]
    resuming: npt.NDArray[np.bool_]
    next_row: npt.NDArray[Any]
    row: npt.NDArray[Any]
    aligned: bool
    slot: int
    even: bool

    def __init__(
        self,
        num_envs: int,
        capacity: int,
        spare: int,
        window_size: int | None,
        clearing_freq: int | None,
        clearing_size: int | None,
    ) -> None:
        """Empty sub-pools."""
        self.num_envs, self.capacity = num_envs, capacity
        self.slots = capacity + spare
        self.window_size = window_size
        self.clearing_freq, self.clearing_size = clearing_freq, clearing_size
        self.rows = num_envs * self.slots
        self.base = np.arange(num_envs, dtype=np.int64)
        self.envs = np.arange(num_envs, dtype=np.int64)
        self.end = np.zeros(num_envs, np.int64)
        self.length = np.zeros(num_envs, np.int64)
        self.received = np.zeros(num_envs, np.int64)
        self.starts = np.ones(self.rows, np.bool_)
        self.fresh = np.ones(num_envs, np.bool_)
        self.resumed = np.zeros(self.rows, np.bool_)
        self.resuming = np.zeros(num_envs, np.bool_)
        # the row one slot on, same sub-pool: one lookup steps a row (int32 keeps
        # the index small)
        index = np.arange(self.rows, dtype=np.int64)
        following = index % num_envs + ((index // num_envs + 1) % self.slots) * num_envs
        self.next_row = following.astype(np.int32 if self.rows < 2**31 else np.int64)
        # The writers' cursor: `row`, each sub-pool's free row (= base + end * n,
        # ahead of `end` while the hot path defers its counting). While `aligned`,
        # every sub-pool's free slot is `slot` (one vector step is a contiguous block
        # of rows) and `row` is brought up to date only when that ends; `even`:
        # every sub-pool holds as many rows (read while aligned).
        self.row = self.base.copy()
        self.aligned = False
        self.slot = 0
        self.even = True

    # -- where rows are ----------------------------------------------------------------

    def row_of(
        self, env: npt.NDArray[np.int64], offset: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The row of each sub-pool's ``offset``-th held transition (0: oldest)."""
        slot = (self.end[env] - self.length[env] + offset) % self.slots
        row: npt.NDArray[np.int64] = self.base[env] + slot * self.num_envs
        return row

    def rows_from(
        self,
        env: npt.NDArray[np.int64],
        begin: npt.NDArray[np.int64],
        count: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """The rows of ``count[i]`` slots from slot ``begin[i]`` of ``env[i]``."""
        first = np.repeat(np.cumsum(count) - count, count)
        step = np.arange(first.size, dtype=np.int64) - first
        slot = (np.repeat(begin, count) + step) % self.slots
        picked: npt.NDArray[np.int64] = np.repeat(self.base[env], count)
        return picked + slot * self.num_envs

    def held(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Sub-pool and offset of every held row (env order, oldest first)."""
        counts = self.length
        env = np.repeat(self.envs, counts)
        offset = np.arange(env.size, dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        return env, offset

    def offset_of(
        self, row: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The sub-pool and offset (0: oldest) of each held ``row``."""
        env = row % self.num_envs
        offset = (row // self.num_envs - self.end[env] + self.length[env]) % self.slots
        return env, offset

    def oldest_rows(self) -> npt.NDArray[np.int64]:
        """The oldest row of each sub-pool that holds any."""
        held = self.length > 0
        oldest = (self.end - self.length) % self.slots
        rows: npt.NDArray[np.int64] = (self.base + oldest * self.num_envs)[held]
        return rows

    def filled_rows(
        self, length: npt.NDArray[np.int64], end: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The rows of every sub-pool, oldest to newest, sub-pool after sub-pool.

        Sub-pool ``j``'s ``length[j]`` rows end before slot ``end[j]``.
        """
        env = np.repeat(self.envs, length)
        offset = np.arange(env.size, dtype=np.int64) - np.repeat(
            np.cumsum(length) - length, length
        )
        slot = (end[env] - length[env] + offset) % self.slots
        rows: npt.NDArray[np.int64] = env + slot * self.num_envs
        return rows

    # -- the trimming rule -------------------------------------------------------------

    def wrapped(self, total: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Lengths after appending to sub-pools up to ``total`` (no clearing)."""
        if self.window_size is None:
            return np.minimum(total, self.capacity)
        # past capacity a sub-pool cycles through window_size..capacity
        period = self.capacity + 1 - self.window_size
        wrapped = self.window_size + (total - self.capacity - 1) % period
        return np.where(total > self.capacity, wrapped, total)

    def trimmed(
        self, length: npt.NDArray[np.int64], received: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """What one append each drops: by clearing, then by the overflow rule.

        ``length`` counts the appended row, ``received`` too.
        """
        dropped = np.zeros_like(length)
        if self.clearing_freq is not None and self.clearing_size is not None:
            hit = received % self.clearing_freq == 0
            dropped = np.where(hit, np.minimum(self.clearing_size, length), 0)
        length = length - dropped
        over = length > self.capacity
        if self.window_size is not None:
            trim = np.where(over, length - self.window_size, 0)
        else:
            trim = over.astype(np.int64)
        return dropped, trim

    def length_after_one(self, length: int, received: int) -> int:
        """A sub-pool's length after one append (``received`` counts it)."""
        length += 1
        if self.clearing_freq and received % self.clearing_freq == 0:
            length -= min(self.clearing_size or 0, length)
        if length > self.capacity:
            length = self.window_size if self.window_size else length - 1
        return length

    # -- its state ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """Its arrays, by their names in a pool file (live, not copies)."""
        return {
            "end": self.end,
            "length": self.length,
            "received": self.received,
            "starts": self.starts,
            "fresh": self.fresh,
            "resumed": self.resumed,
            "resuming": self.resuming,
        }

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], targets: npt.NDArray[np.int64] | None
    ) -> None:
        """Take the arrays of :meth:`state_dict`.

        ``starts`` and ``resumed`` go to rows ``targets`` (``None``: they are
        whole). A state without ``resumed`` and ``resuming`` (a ``state_dict``
        kept from before they existed) marks no stretch as going on.
        """
        self.end, self.length = state["end"], state["length"]
        self.received, self.fresh = state["received"], state["fresh"]
        starts = state["starts"]
        resumed = state.get("resumed", np.zeros(starts.shape, np.bool_))
        self.resuming = state.get("resuming", np.zeros(self.num_envs, np.bool_))
        if targets is None:
            self.starts, self.resumed = starts, resumed
        else:
            self.starts[targets] = starts
            self.resumed[targets] = resumed
        self.row = self.base + self.end * self.num_envs
        self.slot = int(self.end[0])
        self.even = bool((self.length == self.length[0]).all())
