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
so a file never needs the rows before it, and a file holds only the items its rows
use (:func:`compact_items`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool.replay.ring import SubPoolRing

__all__ = ["FrameLayout", "FrameStore", "compact_items"]


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
    """Per row, whether two views of :meth:`FrameStore._words` hold the same bytes.

    Bytes, not values: NaNs and -0.0 are told apart.
    """
    return np.asarray((a == b).all(axis=1))


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
        # whether any of the three is set: one look per write to release them
        self.kept_apart = np.zeros(rows, np.bool_)
        frame_bytes = (
            int(np.prod(frame_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        )
        self._word = np.dtype(np.uint64 if frame_bytes % 8 == 0 else np.uint8)
        self._frame_words = frame_bytes // self._word.itemsize
        self.wholes = _Store((stack, *frame_shape), dtype)
        self.loose = _Store(frame_shape, dtype)
        # per env: its newest stack's last K - 1 frames (what the next must start
        # with), and its next stack's newest frame
        self.last_obs = np.zeros((num_envs, stack - 1, *frame_shape), dtype)
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
        *,
        every: bool = False,
        block: slice | None = None,
    ) -> None:
        """Store one transition for each of the distinct sub-pools ``env`` at ``rows``.

        ``rows`` is each sub-pool's free slot, right after its newest row;
        ``every``: ``env`` is every env in order (a vector step), so the per-env
        state is read and written by slices, not copies; ``block``: ``rows`` as a
        slice, when they are one slot of every sub-pool.
        """
        obs = np.ascontiguousarray(obs, self.frames.dtype)
        next_obs = np.ascontiguousarray(next_obs, self.frames.dtype)
        envs: Any = slice(None) if every else env
        span: Any = rows if block is None else block
        if np.count_nonzero(self.kept_apart[span]):
            self._release(rows)
        # the stacks as words, frame k at words [k * size, (k + 1) * size)
        size, top = self._frame_words, self._frame_words * (self.stack - 1)
        words, next_words = self._words(obs), self._words(next_obs)
        # the previous row's next frame: the new row's newest frame, or kept apart
        tail = self.tail[envs]
        differs = self.has_tail[envs] & ~_same(self._words(tail), words[:, top:])
        if np.count_nonzero(differs):
            which = np.flatnonzero(differs)
            previous = (rows[which] - self.num_envs) % self.rows
            self.own_next_frame[previous] = self.loose.put(tail[which])
            self.kept_apart[previous] = True
        # the stack: the previous one shifted by one, or kept whole
        chained = self.has_last[envs] & _same(
            self._words(self.last_obs[envs]), words[:, :top]
        )
        # the next stack: this one shifted by one plus a frame, or kept whole
        shifted = _same(next_words[:, :top], words[:, size:])
        if not (chained.all() and shifted.all()):
            whole = np.flatnonzero(~chained)
            if whole.size:
                self.own_obs[rows[whole]] = self.wholes.put(obs[whole])
            odd = np.flatnonzero(~shifted)
            if odd.size:
                self.own_next_whole[rows[odd]] = self.wholes.put(next_obs[odd])
            self.kept_apart[rows[~(chained & shifted)]] = True
        self.frames[span] = obs[:, -1]
        self.tail[envs] = next_obs[:, -1]
        self.has_tail[envs] = shifted
        self.last_obs[envs] = obs[:, 1:]
        self.has_last[envs] = True

    def _words(self, stacks: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Contiguous stacks (or frames) as ``(rows, words)`` of 8 bytes (or 1)."""
        flat = stacks.reshape(stacks.shape[0], -1)
        return flat.view(np.uint8).view(self._word)

    def _release(self, rows: npt.NDArray[np.int64]) -> None:
        """Free what the rows about to be overwritten kept apart."""
        self.kept_apart[rows] = False
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
        source, depth, owner = self._sources(rows)
        out = self._take(source)
        self._anchored(out, depth, owner)
        return out

    def pair(
        self,
        rows: npt.NDArray[np.int64],
        env: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_],
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """The stacks and next stacks of ``rows`` (of sub-pools ``env``).

        One gather of ``K + 1`` frames a row: the stack and the next row's newest
        frame, so ``obs`` is ``frames[:, :K]`` and ``next_obs`` is
        ``frames[:, 1:]``, two read-only views that share ``K - 1`` frames (5
        frames gathered a row instead of 8). Then the rare fix-ups: what comes from
        rows kept whole, next frames that are not the next row's (``newest``: a
        sub-pool's last row); a next stack that is not the stack shifted by one
        makes ``next_obs`` an array of its own.
        """
        source, depth, owner = self._sources(rows)
        following = (rows + self.num_envs) % self.rows
        frames = self._take(np.concatenate([source, following[:, None]], 1))
        obs, next_obs = frames[:, :-1], frames[:, 1:]
        self._anchored(obs, depth, owner)
        if np.count_nonzero(self.own_next_whole[rows] >= 0):
            next_obs = next_obs.copy()
        self._next_frames(next_obs, rows, env, newest)
        obs.flags.writeable = False  # they share frames: one written, both changed
        next_obs.flags.writeable = False
        return obs, next_obs

    def next_obs(
        self,
        rows: npt.NDArray[np.int64],
        env: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_],
    ) -> npt.NDArray[Any]:
        """The next stacks of ``rows`` of sub-pools ``env`` (``newest``: the last)."""
        out = np.empty(
            (rows.size, self.stack, *self.frames.shape[1:]), self.frames.dtype
        )
        out[:, :-1] = self.obs(rows)[:, 1:]
        following = (rows + self.num_envs) % self.rows
        np.take(self.frames, following, axis=0, out=out[:, -1], mode="clip")
        self._next_frames(out, rows, env, newest)
        return out

    def _sources(
        self, rows: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Each stack's frame rows (oldest first), depth of its anchor, owners."""
        stack, n = self.stack, self.num_envs
        back = np.arange(stack - 1, -1, -1, dtype=np.int64) * n
        source = (rows[:, None] - back) % self.rows  # [count, K]: oldest first
        owner = self.own_obs[source]
        # how far back each stack's nearest row kept whole is (K: none within K)
        depth = np.full(rows.size, stack, np.int64)
        for step in range(stack):  # the row itself is position K - 1
            found = (owner[:, stack - 1 - step] >= 0) & (depth == stack)
            depth[found] = step
        return source, depth, owner

    def _take(self, source: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The frames of ``source`` (``[count, K]`` rows) as ``count`` stacks."""
        count, stack = source.shape
        frame_shape = self.frames.shape[1:]
        out = np.empty((count, stack, *frame_shape), self.frames.dtype)
        np.take(
            self.frames,
            source.reshape(-1),
            axis=0,
            out=out.reshape(count * stack, *frame_shape),
            mode="clip",  # the rows are in range; "raise" would buffer the output
        )
        return out

    def _anchored(
        self,
        out: npt.NDArray[Any],
        depth: npt.NDArray[np.int64],
        owner: npt.NDArray[np.int64],
    ) -> None:
        """Copy each stack's part that comes from its row kept whole."""
        stack = self.stack
        for step in range(stack - 1):  # at K - 1 back it is the newest frame only
            which = np.flatnonzero(depth == step)
            if which.size:
                whole = self.wholes.items[owner[which, stack - 1 - step]]
                out[which, : stack - step] = whole[:, step:]

    def _next_frames(
        self,
        out: npt.NDArray[Any],
        rows: npt.NDArray[np.int64],
        env: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_],
    ) -> None:
        """Next stacks' last frames that are not the next row's; whole next stacks."""
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

    def anchor(self, rows: npt.NDArray[np.int64]) -> None:
        """Keep the stacks of ``rows`` whole (each sub-pool's oldest, before a save)."""
        loose = rows[self.own_obs[rows] < 0]
        if loose.size:
            self.own_obs[loose] = self.wholes.put(self.obs(loose))
            self.kept_apart[loose] = True

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
        self.kept_apart = (
            (self.own_obs >= 0)
            | (self.own_next_frame >= 0)
            | (self.own_next_whole >= 0)
        )
        for name in ("last_obs", "has_last", "tail", "has_tail"):
            setattr(self, name, state[name])
        if targets is not None:
            self.has_last[empty] = False
            self.has_tail[empty] = False


def compact_items(state: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """The frame store's arrays as a pool file holds them: only what rows use.

    ``state`` is :meth:`FrameStore.state` with its per-row arrays cut to the rows
    a file holds. The stores keep items of rows already dropped (freed only when
    the row is written over) and free items' stale frames; a file holds neither:
    each store keeps the items the rows use, renumbered in their order, and an
    empty free list.
    """
    out = dict(state)
    for store, owners in (
        ("wholes", ("own_obs", "own_next_whole")),
        ("loose", ("own_next_frame",)),
    ):
        owned = np.concatenate([state[name] for name in owners])
        used = np.unique(owned[owned >= 0])
        renumbered = np.full(state[store].shape[0], -1, np.int64)
        renumbered[used] = np.arange(used.size)
        for name in owners:
            own = state[name].copy()  # a file's own copy: the pool keeps its rows
            own[own >= 0] = renumbered[own[own >= 0]]
            out[name] = own
        out[store] = state[store][used]
        out[f"{store}_free"] = np.zeros(0, np.int64)
    return out


class FrameLayout:
    """The frame store as a pool's storage kind (vecpool/replay/layouts.py).

    Args:
        num_envs: Number of sub-pools.
        slots: Slots per sub-pool (the pool's capacity plus ``stack``).
        stack: ``K``, frames per observation.
        frame_shape: The shape of one frame.
        dtype: The observation's dtype.
    """

    hot = True
    read_newest = True

    def __init__(
        self,
        num_envs: int,
        slots: int,
        stack: int,
        frame_shape: tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> None:
        """An empty frame store."""
        self.store = FrameStore(num_envs, slots, stack, frame_shape, dtype)
        self._envs = np.arange(num_envs, dtype=np.int64)

    @classmethod
    def of_space(
        cls, space: spaces.Space[Any], stack: int, num_envs: int, slots: int
    ) -> FrameLayout:
        """The layout for observations of ``space``, stacks of ``stack`` frames.

        Raises:
            ValueError: If ``space`` is no Box of ``stack`` frames along axis 0.
        """
        shape = space.shape if isinstance(space, spaces.Box) else None
        if shape is None or len(shape) == 0 or shape[0] != stack:
            msg = (
                f"`frame_stack={stack}` needs a Box observation space whose first "
                f"axis holds the {stack} frames (what `gymnasium.wrappers."
                f"FrameStackObservation(env, {stack})` makes), got {space}. For Dict "
                "observations, store the stacked leaf in a pool of its own, or drop "
                "`frame_stack`."
            )
            raise ValueError(msg)
        return cls(num_envs, slots, stack, tuple(shape[1:]), np.dtype(space.dtype))

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        return self.store.nbytes

    def write_rows(
        self,
        row: npt.NDArray[np.intp],
        obs: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """The rows kept only: a row not ``valid`` would move the chains on."""
        if valid is None:
            self.store.write(
                self._envs, row.astype(np.int64), obs[0], next_obs[0], every=True
            )
        elif np.count_nonzero(valid):
            self.store.write(
                self._envs[valid], row[valid].astype(np.int64), obs[0][valid],
                next_obs[0][valid],
            )  # fmt: skip

    def write_block(self, block: slice, first: int, obs: Any, next_obs: Any) -> None:
        """One slot of every sub-pool."""
        self.store.write(
            self._envs, self._envs + first, obs, next_obs, every=True, block=block
        )

    def append(
        self,
        ring: SubPoolRing,  # noqa: ARG002 - the protocol's signature
        env: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        obs: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
    ) -> None:
        """A row for each of the distinct sub-pools ``env``."""
        self.store.write(env, row, obs[0], next_obs[0])

    def dropped(self, rows: npt.NDArray[np.int64]) -> None:
        """Nothing yet: a dropped row may still anchor the oldest.

        Its items are freed when the row is written over.
        """

    def read(
        self,
        env: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        next_row: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_] | None,
    ) -> tuple[list[npt.NDArray[Any]], list[npt.NDArray[Any]]]:
        """The stacks rebuilt (a shared gather when both are of the same rows)."""
        assert newest is not None  # read_newest: always given
        if next_row is row:
            stacks, next_stacks = self.store.pair(row, env, newest)
        else:
            stacks = self.store.obs(row)
            next_stacks = self.store.next_obs(next_row, env, newest)
        return [stacks], [next_stacks]

    def state_dict(self, ring: SubPoolRing) -> dict[str, npt.NDArray[Any]]:
        """The store's arrays, each sub-pool's oldest stack made whole first.

        A file holds no row before each sub-pool's oldest.
        """
        self.store.anchor(ring.oldest_rows())
        return self.store.state()

    def load_state_dict(
        self,
        state: dict[str, npt.NDArray[Any]],
        targets: npt.NDArray[np.int64] | None,
        empty_pools: npt.NDArray[np.bool_],
    ) -> None:
        """Take the arrays of :meth:`state_dict`."""
        self.store.load(state, targets, empty_pools)
