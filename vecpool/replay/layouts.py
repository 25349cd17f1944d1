"""The storage kinds of a replay pool: where it keeps observations, chosen once.

A pool keeps each observation in one of three layouts, all behind
:class:`ObservationLayout`, so no pool method asks which one it has:

* :class:`ArrayLayout`: ``obs`` and ``next_obs`` whole, one array per leaf each;
* :class:`ApartLayout` (``store_next_obs=False``): each observation once;
  ``next_obs`` is the following row's ``obs`` wherever it equals it, and kept apart
  otherwise (episode ends, partial resets, random routing);
* :class:`~vecpool.replay.frames.FrameLayout` (``frame_stack=K``): each frame of
  ``K``-frame stacks once (vecpool/replay/frames.py).

The other fields (actions, rewards, the flags) are the same in every layout:
:class:`Columns`. Rows are the ring's (vecpool/replay/ring.py); each part saves and
loads its own arrays, under their names in a pool file (vecpool/replay/files.py).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import leaves
from vecpool.replay.frames import FrameLayout
from vecpool.replay.ring import SubPoolRing
from vecpool.replay.storage import same_value, storage_leaves

__all__ = [
    "ApartLayout",
    "ArrayLayout",
    "Columns",
    "ObservationLayout",
    "empty",
    "make_layout",
]

Leaves = list[npt.NDArray[Any]]


def empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Fresh storage: zeros, or empty strings for an ``object`` leaf.

    A slot never written then reads as a string, which a pool file can hold.
    """
    if dtype.kind == "O":
        return np.full(shape, "", object)
    return np.zeros(shape, dtype)


class ObservationLayout(Protocol):
    """Where a pool keeps ``obs`` and ``next_obs`` (one of the storage kinds)."""

    hot: bool
    """Whether the flat hot path may write it (one row per env, any row order)."""
    read_newest: bool
    """Whether :meth:`read` needs to know which next rows are their sub-pool's
    newest (the others are given ``None``: a plain draw then skips finding them)."""

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        ...

    def write_rows(
        self,
        row: npt.NDArray[np.intp],
        obs: Leaves,
        next_obs: Leaves,
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """The hot path: one row per env, in env order (``valid``: those kept)."""
        ...

    def write_block(self, block: slice, first: int, obs: Any, next_obs: Any) -> None:
        """The aligned path: one row per env, rows ``block`` (from row ``first``)."""
        ...

    def append(
        self,
        ring: SubPoolRing,
        env: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        obs: Leaves,
        next_obs: Leaves,
    ) -> None:
        """The routed path: a row for each of the distinct sub-pools ``env``.

        ``row``: each one's free slot; ``ring`` is as it was before the append.
        """
        ...

    def dropped(self, rows: npt.NDArray[np.int64]) -> None:
        """The ring no longer holds ``rows`` (clearing, the overflow rule)."""
        ...

    def read(
        self,
        env: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        next_row: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_] | None,
    ) -> tuple[Leaves, Leaves]:
        """``obs`` of ``row`` and ``next_obs`` of ``next_row``, as leaves.

        ``newest``: the sub-pool's newest row is ``next_row`` (``None`` where the
        layout does not :attr:`read_newest`); ``next_row is row`` when both are of
        the same rows.
        """
        ...

    def state_dict(self, ring: SubPoolRing) -> dict[str, npt.NDArray[Any]]:
        """Its arrays, by their names in a pool file."""
        ...

    def load_state_dict(
        self,
        state: dict[str, npt.NDArray[Any]],
        targets: npt.NDArray[np.int64] | None,
        empty_pools: npt.NDArray[np.bool_],
    ) -> None:
        """Take the arrays of :meth:`state_dict`.

        Per-row ones go to rows ``targets`` (``None``: they are whole).
        """
        ...


def _put(
    arrays: Leaves,
    state: dict[str, npt.NDArray[Any]],
    group: str,
    targets: npt.NDArray[np.int64] | None,
) -> None:
    """Load per-row leaves ``group_0, group_1, ...`` into ``arrays``."""
    for index in range(len(arrays)):
        if targets is None:
            arrays[index] = state[f"{group}_{index}"]
        else:
            arrays[index][targets] = state[f"{group}_{index}"]


class ArrayLayout:
    """``obs`` and ``next_obs`` whole: one array per leaf, one row per slot."""

    hot = True
    read_newest = False

    def __init__(self, space: spaces.Space[Any], rows: int) -> None:
        """Preallocate both."""
        self.obs = [empty((rows, *s), d) for d, s in storage_leaves(space)]
        self.next_obs = [empty(array.shape, array.dtype) for array in self.obs]

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        return int(sum(array.nbytes for array in [*self.obs, *self.next_obs]))

    def write_rows(
        self,
        row: npt.NDArray[np.intp],
        obs: Leaves,
        next_obs: Leaves,
        valid: npt.NDArray[np.bool_] | None,  # noqa: ARG002 - the protocol's signature
    ) -> None:
        """Write every row (one not ``valid`` is not held: it is written over)."""
        for store, leaf in zip(self.obs, obs, strict=True):
            store[row] = leaf
        for store, leaf in zip(self.next_obs, next_obs, strict=True):
            store[row] = leaf

    def write_block(self, block: slice, first: int, obs: Any, next_obs: Any) -> None:  # noqa: ARG002 - the protocol's signature
        """Two slice writes."""
        self.obs[0][block] = obs
        self.next_obs[0][block] = next_obs

    def append(
        self,
        ring: SubPoolRing,  # noqa: ARG002 - the protocol's signature
        env: npt.NDArray[np.int64],  # noqa: ARG002 - the protocol's signature
        row: npt.NDArray[np.int64],
        obs: Leaves,
        next_obs: Leaves,
    ) -> None:
        """Write the rows."""
        for store, leaf in zip(self.obs, obs, strict=True):
            store[row] = leaf
        for store, leaf in zip(self.next_obs, next_obs, strict=True):
            store[row] = leaf

    def dropped(self, rows: npt.NDArray[np.int64]) -> None:
        """Nothing to free."""

    def read(
        self,
        env: npt.NDArray[np.int64],  # noqa: ARG002 - the protocol's signature
        row: npt.NDArray[np.int64],
        next_row: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_] | None,  # noqa: ARG002 - the protocol's signature
    ) -> tuple[Leaves, Leaves]:
        """Two gathers."""
        obs = [array.take(row, axis=0) for array in self.obs]
        return obs, [array.take(next_row, axis=0) for array in self.next_obs]

    def state_dict(self, ring: SubPoolRing) -> dict[str, npt.NDArray[Any]]:  # noqa: ARG002 - the protocol's signature
        """``obs_i`` and ``next_obs_i``."""
        state = {f"obs_{i}": array for i, array in enumerate(self.obs)}
        state.update({f"next_obs_{i}": array for i, array in enumerate(self.next_obs)})
        return state

    def load_state_dict(
        self,
        state: dict[str, npt.NDArray[Any]],
        targets: npt.NDArray[np.int64] | None,
        empty_pools: npt.NDArray[np.bool_],  # noqa: ARG002 - the protocol's signature
    ) -> None:
        """Take ``obs_i`` and ``next_obs_i``."""
        _put(self.obs, state, "obs", targets)
        _put(self.next_obs, state, "next_obs", targets)


class ApartLayout:
    """Each observation once; ``next_obs`` kept apart only where it differs.

    ``tail``: each sub-pool's newest row's next observation; ``own_next[row]``: an
    item of ``extra`` (a growable store with a free list) holding the row's next
    observation when it is not the following row's ``obs``, else -1.
    """

    hot = False  # the newest row's next observation moves on every append
    read_newest = True

    def __init__(self, space: spaces.Space[Any], rows: int, num_envs: int) -> None:
        """Preallocate the observations and tails; the store starts empty."""
        stored = storage_leaves(space)
        self.obs = [empty((rows, *s), d) for d, s in stored]
        self.tail = [empty((num_envs, *s), d) for d, s in stored]
        self.own_next = np.full(rows, -1, np.int64)
        self.extra = [empty((0, *s), d) for d, s in stored]
        self.free: list[int] = []
        self.next_row: npt.NDArray[Any] = np.zeros(0, np.int64)  # set by the pool

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        arrays = [*self.obs, *self.tail, self.own_next, *self.extra]
        return int(sum(array.nbytes for array in arrays))

    def write_rows(
        self,
        row: npt.NDArray[np.intp],
        obs: Leaves,
        next_obs: Leaves,
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """Not on the hot path (:attr:`hot` is false)."""
        msg = "the next observations kept apart are written by `append` only"
        raise NotImplementedError(msg)

    def write_block(self, block: slice, first: int, obs: Any, next_obs: Any) -> None:
        """Not on the aligned path (:attr:`hot` is false)."""
        msg = "the next observations kept apart are written by `append` only"
        raise NotImplementedError(msg)

    def append(
        self,
        ring: SubPoolRing,
        env: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        obs: Leaves,
        next_obs: Leaves,
    ) -> None:
        """Keep the tails the new rows do not repeat, write the rows, new tails."""
        self._settle_tails(ring, env, obs)
        for store, leaf in zip(self.obs, obs, strict=True):
            store[row] = leaf
        for tail, leaf in zip(self.tail, next_obs, strict=True):
            tail[env] = leaf
        self.own_next[row] = -1

    def _settle_tails(
        self, ring: SubPoolRing, env: npt.NDArray[np.int64], obs: Leaves
    ) -> None:
        """Keep the newest rows' next observations that the new rows do not repeat."""
        has_newest = ring.length[env] > 0
        same = has_newest.copy()
        for tail, leaf in zip(self.tail, obs, strict=True):
            if tail.dtype == object:  # the same object, or an equal string
                same &= [
                    same_value(a, b)
                    for a, b in zip(tail[env].tolist(), leaf.tolist(), strict=True)
                ]
                continue
            # bitwise, so -0.0 vs 0.0 or NaNs are never taken for one another
            flat_tail = np.ascontiguousarray(tail[env]).view(np.uint8)
            flat_leaf = np.ascontiguousarray(leaf, dtype=tail.dtype).view(np.uint8)
            same &= np.all(
                flat_tail.reshape(env.size, -1) == flat_leaf.reshape(env.size, -1),
                axis=1,
            )
        keep = np.flatnonzero(has_newest & ~same)
        if keep.size == 0:
            return
        index = self._allocate(keep.size)
        for extra, tail in zip(self.extra, self.tail, strict=True):
            extra[index] = tail[env[keep]]
        kept = env[keep]
        newest = ring.base[kept] + (ring.end[kept] - 1) % ring.slots * ring.num_envs
        self.own_next[newest] = index

    def _allocate(self, count: int) -> npt.NDArray[np.int64]:
        while len(self.free) < count:
            size = self.extra[0].shape[0] if self.extra else 0
            grown = max(16, size * 2)
            self.extra = [
                np.concatenate(
                    [extra, empty((grown - size, *extra.shape[1:]), extra.dtype)]
                )
                for extra in self.extra
            ]
            self.free.extend(range(grown - 1, size - 1, -1))
        return np.array([self.free.pop() for _ in range(count)], np.int64)

    def dropped(self, rows: npt.NDArray[np.int64]) -> None:
        """Free the kept next observations of the rows dropped."""
        own = self.own_next[rows]
        self.free.extend(own[own >= 0].tolist())
        self.own_next[rows] = -1

    def read(
        self,
        env: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        next_row: npt.NDArray[np.int64],
        newest: npt.NDArray[np.bool_] | None,
    ) -> tuple[Leaves, Leaves]:
        """``next_obs``: the following row's, the tail, or the one kept apart."""
        assert newest is not None  # read_newest: always given
        obs = [np.take(array, row, axis=0) for array in self.obs]
        own = self.own_next[next_row]
        following = self.next_row[next_row].astype(np.intp)
        kept = own >= 0
        next_obs = []
        for store, tail, extra in zip(self.obs, self.tail, self.extra, strict=True):
            values = np.take(store, following, axis=0)
            values[newest] = tail[env[newest]]
            values[kept] = extra[own[kept]]
            next_obs.append(values)
        return obs, next_obs

    def state_dict(self, ring: SubPoolRing) -> dict[str, npt.NDArray[Any]]:  # noqa: ARG002 - the protocol's signature
        """``own_next``, ``free``, ``obs_i``, ``tail_i``, ``extra_i``."""
        state = {"own_next": self.own_next, "free": np.asarray(self.free, np.int64)}
        for group in ("obs", "tail", "extra"):
            arrays: Leaves = getattr(self, group)
            state.update({f"{group}_{i}": array for i, array in enumerate(arrays)})
        return state

    def load_state_dict(
        self,
        state: dict[str, npt.NDArray[Any]],
        targets: npt.NDArray[np.int64] | None,
        empty_pools: npt.NDArray[np.bool_],  # noqa: ARG002 - the protocol's signature
    ) -> None:
        """Take the arrays of :meth:`state_dict`."""
        _put(self.obs, state, "obs", targets)
        _put(self.tail, state, "tail", None)
        _put(self.extra, state, "extra", None)
        if targets is None:
            self.own_next = state["own_next"]
        else:
            self.own_next[targets] = state["own_next"]
        self.free = state["free"].tolist()


def make_layout(
    space: spaces.Space[Any],
    ring: SubPoolRing,
    store_next_obs: bool,
    frame_stack: int | None,
) -> ObservationLayout:
    """The one layout a pool keeps its observations in (the storage kind).

    Raises:
        ValueError: If ``frame_stack`` is set and ``space`` is no Box of
            ``frame_stack`` frames along axis 0.
    """
    if frame_stack is not None:
        return FrameLayout.of_space(space, frame_stack, ring.num_envs, ring.slots)
    if store_next_obs:
        return ArrayLayout(space, ring.rows)
    layout = ApartLayout(space, ring.rows, ring.num_envs)
    layout.next_row = ring.next_row
    return layout


class Columns:
    """The fields every layout keeps alike: actions, rewards, the two flags."""

    def __init__(self, space: spaces.Space[Any], rows: int) -> None:
        """Preallocate them."""
        self.action = [np.zeros((rows, *s), d) for d, s in leaves(space)]
        self.reward = np.zeros(rows, np.float64)
        self.terminated = np.zeros(rows, np.bool_)
        self.truncated = np.zeros(rows, np.bool_)

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        arrays = [*self.action, self.reward, self.terminated, self.truncated]
        return int(sum(array.nbytes for array in arrays))

    def write(
        self,
        row: Any,
        action: Leaves,
        reward: Any,
        terminated: Any,
        truncated: Any,
    ) -> None:
        """Write the rows ``row`` (an index array or a slice)."""
        for store, leaf in zip(self.action, action, strict=True):
            store[row] = leaf
        self.reward[row] = reward
        self.terminated[row] = terminated
        self.truncated[row] = truncated

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """Its arrays, by their names in a pool file."""
        state = {
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
        }
        state.update({f"action_{i}": array for i, array in enumerate(self.action)})
        return state

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], targets: npt.NDArray[np.int64] | None
    ) -> None:
        """Take the arrays of :meth:`state_dict`."""
        for name in ("reward", "terminated", "truncated"):
            if targets is None:
                setattr(self, name, state[name])
            else:
                getattr(self, name)[targets] = state[name]
        _put(self.action, state, "action", targets)
