"""The parent's observations: buffer rotation, reading, and rows put or taken.

With ``copy=True``, observations rotate through several buffers of the shared block
instead of being copied: a step writes into a buffer nobody holds any more (its
owner's reference count says so), and the views handed out stay as they were, as
Gymnasium's copies do. Observations that travel by pipe (``shared_memory=False``,
a space with no array leaf, or the non-array leaves of a hybrid space) are
concatenated here as ``SyncVectorEnv`` does.
"""

from __future__ import annotations

import sys
from copy import deepcopy
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import Space
from gymnasium.vector.utils import concatenate, create_empty_array

from vecpool._util.spaces import (
    IMMUTABLE,
    copy_tree,
    flatten_batch,
    foreign_leaves,
    make_extractor,
    make_nester,
    make_views,
    make_writer,
    take_rows,
)
from vecpool._wire.messages import STEP, ObsTransport
from vecpool._wire.shared_memory import Layout, SharedBlock, cut

__all__ = ["ObservationBuffers"]


class ObservationBuffers:
    """The observation buffers of one vector env and what reads and writes them.

    Attributes:
        transport: How observations travel.
        observations: The latest observations (views or a batch).
        env_obs: Observations that came by pipe, per env (hybrid: each env's
            leaves that are not arrays, see ``vecpool._util.spaces.make_extractor``).
        step_messages: The hot-path step message for each buffer.
        obs_index: The buffer of the latest observations.
        obs_next: The buffer the pending call writes.
    """

    def __init__(
        self,
        num_envs: int,
        observation_space: Space[Any],
        batched_observation_space: Space[Any],
        transport: ObsTransport,
        block: SharedBlock,
        layout: Layout,
        count: int,
        *,
        copy: bool,
    ) -> None:
        """Cut ``count`` buffers from ``layout``'s observation fields in ``block``."""
        self.num_envs = num_envs
        self.copy = copy
        self.observation_space = observation_space
        self.batched_observation_space = batched_observation_space
        self.transport = transport
        hybrid = transport is ObsTransport.HYBRID
        native = hybrid or transport is ObsTransport.NATIVE
        self.env_obs: list[Any] = [None] * num_envs
        self._foreign_spaces = foreign_leaves(observation_space) if hybrid else []
        self._foreign_empty = [
            create_empty_array(leaf, n=num_envs) for leaf in self._foreign_spaces
        ]
        self._foreign: list[Any] = list(self._foreign_empty)  # the latest batches
        self._extract = make_extractor(observation_space) if hybrid else None
        self._nest = make_nester(observation_space) if hybrid else None
        self._obs_arrays: list[npt.NDArray[Any]] = []  # the latest's array leaves
        self.obs_index = self.obs_next = 0  # buffer of the latest / pending obs
        self._obs_fields: list[tuple[Any, ...]] = []
        self._obs_owners: list[npt.NDArray[np.uint8]] = []
        self._obs_retired: list[bool] = []
        self._obs_free_refs = 0
        self.step_messages = [STEP + bytes([0])]
        if native:
            per_buffer = len(layout.observations) // count
            self._obs_fields = [
                layout.observations[start : start + per_buffer]
                for start in range(0, len(layout.observations), per_buffer)
            ]
            self._obs_owners = [block.owner(f) for f in self._obs_fields]
            self._obs_retired = [False] * len(self._obs_owners)
            # references to an owner while nothing but this list holds it
            self._obs_free_refs = sys.getrefcount(self._obs_owners[-1])
            self.step_messages = [STEP + bytes([k]) for k in range(count)]
            self._obs_arrays = cut(self._obs_owners[0], self._obs_fields[0])
            self.observations: Any = make_views(
                observation_space, self._obs_arrays, self._foreign
            )
        else:
            self.observations = create_empty_array(
                observation_space, n=num_envs, fn=np.zeros
            )

    def choose(self) -> int:
        """Pick (and remember) a buffer for the next observations nobody holds.

        With ``copy=True``, observations are handed out as views of one of several
        buffers in shared memory, so the next step may write only into a buffer
        whose views are all gone (its owner's reference count is back to its
        resting value). When every one is still held, the last buffer (never handed
        out) is used and copied out, as Gymnasium copies every time.

        Returns:
            The buffer index, also kept as :attr:`obs_next`.
        """
        owners = self._obs_owners
        last = len(owners) - 1
        if last <= 0:
            self.obs_next = 0
            return 0
        current, free, retired = self.obs_index, self._obs_free_refs, self._obs_retired
        for step in range(1, last + 1):
            candidate = (current + step) % last
            if (
                candidate != current
                and not retired[candidate]
                and sys.getrefcount(owners[candidate]) == free
            ):
                self.obs_next = candidate
                return candidate
        self.obs_next = last
        return last

    def retire_held(self) -> None:
        """Stop rotating through buffers something holds (before a user's fork)."""
        owners, free = self._obs_owners, self._obs_free_refs
        for index in range(len(owners) - 1):
            if sys.getrefcount(owners[index]) != free:
                self._obs_retired[index] = True

    def store_piped(
        self, start: int, observations: list[Any], only: list[int] | None = None
    ) -> None:
        """Keep the observations a worker's reply carried (by pipe).

        Args:
            start: Global index of the worker's first env.
            observations: One per hosted env.
            only: The global indices to take (a ``send`` batch's envs; the others'
                rows may be newer here than the worker's copy, after a restart);
                ``None``: all.
        """
        if only is None:
            self.env_obs[start : start + len(observations)] = observations
        else:
            for index in only:
                self.env_obs[index] = observations[index - start]

    def read(self) -> Any:
        """The observations of the call just finished, copied or not per ``copy``."""
        self.obs_index = self.obs_next
        if self.transport is ObsTransport.PIPE:
            self.observations = concatenate(
                self.observation_space, self.env_obs, self.observations
            )
            return deepcopy(self.observations) if self.copy else self.observations
        if self.transport is ObsTransport.HYBRID:
            return self._read_hybrid()
        if not self.copy:  # NATIVE
            return self.observations
        index = self.obs_index
        if len(self._obs_owners) == 1:  # one buffer: its standing views, copied
            observations = self.observations
            if type(observations) is np.ndarray:  # one array: copied inline
                return observations.copy()
            return copy_tree(observations)
        tree = make_views(
            self.observation_space,
            cut(self._obs_owners[index], self._obs_fields[index]),
        )
        self.observations = tree
        if index == len(self._obs_owners) - 1:  # scratch: never handed out
            return copy_tree(tree)
        return tree

    def _foreign_batches(self, rows: list[int] | None = None) -> list[Any]:
        """Batch the leaves that are not arrays of every env (or of ``rows``).

        As ``SyncVectorEnv`` does (Gymnasium's ``concatenate``: a tuple of the
        envs' values), deep-copied with ``copy=True``.
        """
        env_obs = self.env_obs
        chosen = env_obs if rows is None else [env_obs[row] for row in rows]
        batches = []
        for k, leaf in enumerate(self._foreign_spaces):
            out: Any = (
                self._foreign_empty[k]
                if rows is None
                else create_empty_array(leaf, n=len(chosen))
            )
            values = [None if obs is None else obs[k] for obs in chosen]
            batch = concatenate(leaf, values, out)
            # copy=True: deep-copied as Gymnasium does, but for what cannot change
            if self.copy and not (
                type(batch) is tuple
                and all(type(value) in IMMUTABLE for value in batch)
            ):
                batch = deepcopy(batch)
            batches.append(batch)
        return batches

    def _read_hybrid(self) -> Any:
        """The latest observations of a hybrid space: array views and batches."""
        self._foreign = foreign = self._foreign_batches()
        owners, index = self._obs_owners, self.obs_index
        if len(owners) > 1:  # copy=True: buffers in rotation
            self._obs_arrays = cut(owners[index], self._obs_fields[index])
        arrays, nest = self._obs_arrays, self._nest
        assert nest is not None
        self.observations = nest(arrays, foreign)
        if not self.copy or (len(owners) > 1 and index < len(owners) - 1):
            return self.observations  # the buffers themselves, as Sync's
        return nest([array.copy() for array in arrays], foreign)

    def put(self, index: int, value: Any) -> None:
        """Overwrite env ``index``'s row of the current observations with ``value``."""
        if self.transport is ObsTransport.PIPE:
            self.env_obs[index] = value
        elif self.transport is ObsTransport.HYBRID:
            assert self._extract is not None
            make_writer(self.observation_space, self._obs_arrays)(index, value)
            self.env_obs[index] = self._extract(value)
            self._foreign = self._foreign_batches()
            self.observations = make_views(
                self.observation_space, self._obs_arrays, self._foreign
            )
        else:
            leaves_ = flatten_batch(
                self.observation_space, self.observations, self.num_envs, "obs"
            )
            make_writer(self.observation_space, leaves_)(index, value)

    def take(self, ids: npt.NDArray[np.int64] | slice) -> Any:
        """A fresh batch holding the current observations of ``ids`` (or a slice)."""
        if isinstance(ids, slice):
            if self.transport is ObsTransport.NATIVE:  # views of a slice: copied
                return copy_tree(take_rows(self.observations, ids))
            ids = np.arange(ids.start, ids.stop, dtype=np.int64)
        if self.transport is ObsTransport.NATIVE:
            return take_rows(self.observations, ids)
        if self.transport is ObsTransport.HYBRID:
            return make_views(
                self.observation_space,
                [array[ids] for array in self._obs_arrays],
                self._foreign_batches(ids.tolist()),
            )
        out: Any = create_empty_array(self.observation_space, n=ids.size)
        return concatenate(
            self.observation_space, [self.env_obs[i] for i in ids.tolist()], out
        )

    def release(self) -> None:
        """Drop every view of the shared block so its memory goes now.

        Views handed out with ``copy=False`` keep their own reference, as they must.
        """
        if self.transport is ObsTransport.NATIVE:
            self.observations = copy_tree(self.observations)
            self._obs_owners = []
            self._obs_arrays = []
        elif self.transport is ObsTransport.HYBRID:
            self._obs_arrays = [array.copy() for array in self._obs_arrays]
            self.observations = make_views(
                self.observation_space, self._obs_arrays, self._foreign
            )
            self._obs_owners = []
