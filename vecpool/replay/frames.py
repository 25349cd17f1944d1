"""Stacked frames stored once: the observation store of ``ReplayPool(frame_stack=K)``.

An observation of ``FrameStackObservation`` is a stack of ``K`` frames along axis 0,
and the next step's stack is the same frames shifted by one plus a new frame. So a
row keeps only its observation's newest frame (``frames[row]``), and the rest is
rebuilt from the rows before it in its sub-pool, one slot apart (``row - num_envs``):

* ``obs[row][K-1] = frames[row]``; going back ``i`` rows, ``obs[row][K-1-i]`` is the
  newest frame of the row ``i`` slots back, until a row is reached whose stack is
  kept whole (``own_obs[row] >= 0``): the rest of the stack comes from it. A row is
  kept whole when its stack's first ``K - 1`` frames are not, bit for bit, the last
  ``K - 1`` of the previous row's stack (an episode start with its padding, a reset,
  a sub-pool's first row, any jump). So a rebuilt stack is always bit-identical to
  the one added: a mismatch is stored, never guessed.
* ``next_obs[row]`` is ``obs[row]`` shifted by one plus one frame: the next row's
  newest frame, unless that is not it (``own_next_frame[row] >= 0``: the final frame
  of an episode, kept apart) or the row is its sub-pool's newest (the frame waits
  in ``tail``). A next stack that is not the stack shifted by one is kept whole
  (``own_next_whole[row] >= 0``).

Invariants the pool keeps: a sub-pool's rows are consecutive slots, and the ring
has ``K - 1`` slots more than it holds (``capacity + K``), so the ``K - 1`` rows
before the oldest row held are still there for it to be rebuilt from. Whole stacks
and loose frames live in growable stores (:class:`_Store`), freed when their row is
overwritten, not when it is dropped (a dropped row may still anchor the oldest).
Before a save, each sub-pool's oldest row is made whole (:meth:`FrameStore.anchor`),
so a file never needs the rows before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["FrameStore"]


class _Store:
    """A growable array of items (whole stacks or single frames) with a free list."""

    def __init__(self, item_shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.items = np.zeros((0, *item_shape), dtype)
        self.free: list[int] = []

    def put(self, values: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Store ``values`` (one item per row); their indices."""
        count = values.shape[0]
        while len(self.free) < count:
            size = self.items.shape[0]
            grown = max(16, 2 * size)
            extra = np.zeros((grown - size, *self.items.shape[1:]), self.items.dtype)
            self.items = np.concatenate([self.items, extra])
            self.free.extend(range(grown - 1, size - 1, -1))
        index = np.array([self.free.pop() for _ in range(count)], np.int64)
        self.items[index] = values
        return index

    def release(self, index: npt.NDArray[np.int64]) -> None:
        """Give the items at ``index`` (``-1`` entries ignored) back."""
        self.free.extend(index[index >= 0].tolist())


def _same(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Per row, whether two ``(rows, bytes)`` uint8 views hold the same bytes.

    Bytes, not values: NaNs and -0.0 are told apart. Compared as 8-byte words when
    the views allow it (an 84x84 frame is 882 of them).
    """
    # (an unaligned start only makes numpy take its slower unaligned loop)
    if a.shape[1] % 8 == 0 and a.strides[0] % 8 == 0 and b.strides[0] % 8 == 0:
        a, b = a.view(np.uint64), b.view(np.uint64)
    return np.asarray((a == b).all(axis=1))


def _frame_bytes(
    stacks: npt.NDArray[Any], first: int, stop: int
) -> npt.NDArray[np.uint8]:
    """Frames ``first:stop`` of each stack, as a ``(rows, bytes)`` uint8 view."""
    flat = stacks.reshape(stacks.shape[0], -1).view(np.uint8)
    size = flat.shape[1] // stacks.shape[1]
    return flat[:, first * size : stop * size]


class FrameStore:
    """The observations of a frame-stacked pool, each frame stored once.

    See the module docstring for the layout. Rows are the pool's rows
    (``env + slot * num_envs``); the pool says where each transition goes.

    Args:
        num_envs: Number of sub-pools.
        slots: Slots per sub-pool (the pool's capacity plus ``stack``).
        stack: ``K``, frames per observation.
        frame_shape: The shape of one frame (the observation's shape without axis 0).
        dtype: The observation's dtype.
    """

    def __init__(
        self,
        num_envs: int,
        slots: int,
        stack: int,
        frame_shape: tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> None:
        """Preallocate one frame per row; the stores start empty."""
        rows = num_envs * slots
        self.num_envs, self.rows, self.stack = num_envs, rows, stack
        self.frames = np.zeros((rows, *frame_shape), dtype)
        self.own_obs = np.full(rows, -1, np.int64)
        self.own_next_frame = np.full(rows, -1, np.int64)
        self.own_next_whole = np.full(rows, -1, np.int64)
        self.wholes = _Store((stack, *frame_shape), dtype)
        self.loose = _Store(frame_shape, dtype)
        # per env: the stack of its newest row, and its next stack's newest frame
        self.last_obs = np.zeros((num_envs, stack, *frame_shape), dtype)
        self.has_last = np.zeros(num_envs, np.bool_)
        self.tail = np.zeros((num_envs, *frame_shape), dtype)
        self.has_tail = np.zeros(num_envs, np.bool_)

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        arrays = [self.frames, self.own_obs, self.own_next_frame, self.own_next_whole]
        arrays += [self.wholes.items, self.loose.items, self.last_obs, self.tail]
        return int(sum(array.nbytes for array in arrays))

    def write(
        self,
        env: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64],
        obs: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
    ) -> None:
        """Store one transition for each of the distinct sub-pools ``env`` at ``rows``.

        ``rows`` is each sub-pool's free slot, right after its newest row.
        """
        stack = self.stack
        obs = np.ascontiguousarray(obs, self.frames.dtype)
        next_obs = np.ascontiguousarray(next_obs, self.frames.dtype)
        # every env in order (the usual vector step): slices, not copies
        every: Any = (
            slice(None)
            if env.size == self.num_envs and np.array_equal(env, np.arange(env.size))
            else env
        )
        self._release(rows)
        # the previous row's next frame: the new row's newest frame, or kept apart
        tail = self.tail[every]
        differs = self.has_tail[every] & ~_same(
            _frame_bytes(tail[:, None], 0, 1), _frame_bytes(obs, stack - 1, stack)
        )
        if np.count_nonzero(differs):
            which = np.flatnonzero(differs)
            previous = (rows[which] - self.num_envs) % self.rows
            self.own_next_frame[previous] = self.loose.put(tail[which])
        # the stack: the previous one shifted by one, or kept whole
        chained = self.has_last[every].copy()
        if stack > 1 and np.count_nonzero(chained):
            chained &= _same(
                _frame_bytes(self.last_obs[every], 1, stack),
                _frame_bytes(obs, 0, stack - 1),
            )
        whole = np.flatnonzero(~chained)
        if whole.size:
            self.own_obs[rows[whole]] = self.wholes.put(obs[whole])
        self.frames[rows] = obs[:, -1]
        # the next stack: this one shifted by one plus a frame, or kept whole
        if stack > 1:
            shifted = _same(
                _frame_bytes(next_obs, 0, stack - 1), _frame_bytes(obs, 1, stack)
            )
        else:
            shifted = np.ones(env.size, np.bool_)
        odd = np.flatnonzero(~shifted)
        if odd.size:
            self.own_next_whole[rows[odd]] = self.wholes.put(next_obs[odd])
        self.tail[every] = next_obs[:, -1]
        self.has_tail[every] = shifted
        self.last_obs[every] = obs
        self.has_last[every] = True

    def _release(self, rows: npt.NDArray[np.int64]) -> None:
        """Free what the rows about to be overwritten kept apart."""
        for own, store in (
            (self.own_obs, self.wholes),
            (self.own_next_whole, self.wholes),
            (self.own_next_frame, self.loose),
        ):
            kept = own[rows]
            if np.count_nonzero(kept >= 0):
                store.release(kept)
                own[rows] = -1

    def obs(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The stacks of ``rows``, rebuilt (fresh arrays).

        One gather of ``K`` frames a row (the rows ``K - 1 .. 0`` slots back), then
        the part of each stack that comes from a row kept whole is copied over.
        """
        stack, n, count = self.stack, self.num_envs, rows.size
        frame_shape = self.frames.shape[1:]
        back = np.arange(stack - 1, -1, -1, dtype=np.int64) * n
        source = (rows[:, None] - back) % self.rows  # [count, K]: oldest first
        owner = self.own_obs[source]
        # how far back each stack's nearest row kept whole is (K: none within K)
        depth = np.full(count, stack, np.int64)
        for step in range(stack):  # the row itself is position K - 1
            found = (owner[:, stack - 1 - step] >= 0) & (depth == stack)
            depth[found] = step
        out = np.empty((count, stack, *frame_shape), self.frames.dtype)
        np.take(
            self.frames,
            source.reshape(-1),
            axis=0,
            out=out.reshape(count * stack, *frame_shape),
            mode="clip",  # the rows are in range; "raise" would buffer the output
        )
        for step in range(stack):
            which = np.flatnonzero(depth == step)
            if which.size:
                whole = self.wholes.items[owner[which, stack - 1 - step]]
                out[which, : stack - step] = whole[:, step:]
        return out

    def next_obs(
        self,
        rows: npt.NDArray[np.int64],
        env: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_],
        obs: npt.NDArray[Any] | None = None,
    ) -> npt.NDArray[Any]:
        """The next stacks of ``rows`` of sub-pools ``env`` (``newest``: the last).

        ``obs``: the stacks of ``rows`` when the caller has rebuilt them already.
        """
        out = np.empty(
            (rows.size, self.stack, *self.frames.shape[1:]), self.frames.dtype
        )
        out[:, :-1] = (self.obs(rows) if obs is None else obs)[:, 1:]
        following = (rows + self.num_envs) % self.rows
        np.take(self.frames, following, axis=0, out=out[:, -1], mode="clip")
        if np.count_nonzero(newest):
            out[newest, -1] = self.tail[env[newest]]
        loose = self.own_next_frame[rows]
        kept = loose >= 0
        if np.count_nonzero(kept):
            out[kept, -1] = self.loose.items[loose[kept]]
        whole = self.own_next_whole[rows]
        odd = whole >= 0
        if np.count_nonzero(odd):
            out[odd] = self.wholes.items[whole[odd]]
        return out

    def anchor(self, rows: npt.NDArray[np.int64]) -> None:
        """Keep the stacks of ``rows`` whole (each sub-pool's oldest, before a save)."""
        loose = rows[self.own_obs[rows] < 0]
        if loose.size:
            self.own_obs[loose] = self.wholes.put(self.obs(loose))

    def state(self) -> dict[str, npt.NDArray[Any]]:
        """The arrays of a pool file (per-row arrays are whole; the pool compacts)."""
        return {
            "frames": self.frames,
            "own_obs": self.own_obs,
            "own_next_frame": self.own_next_frame,
            "own_next_whole": self.own_next_whole,
            "wholes": self.wholes.items,
            "wholes_free": np.asarray(self.wholes.free, np.int64),
            "loose": self.loose.items,
            "loose_free": np.asarray(self.loose.free, np.int64),
            "last_obs": self.last_obs,
            "has_last": self.has_last,
            "tail": self.tail,
            "has_tail": self.has_tail,
        }

    def load(
        self,
        state: dict[str, npt.NDArray[Any]],
        targets: npt.NDArray[np.int64] | None,
        empty: npt.NDArray[np.bool_],
    ) -> None:
        """Take the arrays of :meth:`state` (checked by the file reader).

        ``targets``: where the per-row arrays' rows go (a compact file), or
        ``None`` when they are whole. ``empty``: the sub-pools that hold no row; a
        compact file has none of their rows before, so their next stack is kept
        whole.
        """
        for name in ("frames", "own_obs", "own_next_frame", "own_next_whole"):
            if targets is None:
                setattr(self, name, state[name])
            else:
                getattr(self, name)[targets] = state[name]
        self.wholes.items, self.loose.items = state["wholes"], state["loose"]
        # free: every item no row uses (a file's items of rows not held included)
        for store, owners in (
            (self.wholes, (self.own_obs, self.own_next_whole)),
            (self.loose, (self.own_next_frame,)),
        ):
            used = np.zeros(store.items.shape[0], np.bool_)
            for own in owners:
                used[own[own >= 0]] = True
            store.free = np.flatnonzero(~used)[::-1].tolist()
        for name in ("last_obs", "has_last", "tail", "has_tail"):
            setattr(self, name, state[name])
        if targets is not None:
            self.has_last[empty] = False
            self.has_tail[empty] = False
