"""The parent's step buffers: action placement, observation rotation, reading replies.

One :class:`StepBuffers` per vector env owns the shared block (see
:mod:`vecpool._wire.shared_memory`) and its numpy views. Actions that are numpy arrays
of the action space's exact shape and dtype are copied into shared memory; anything else
Gymnasium accepts travels pickled, so each env receives exactly what Gymnasium would
hand it. With ``copy=True``, observations rotate through several buffers instead of
being copied: a step writes into a buffer nobody holds any more.
"""

from __future__ import annotations

import math
import operator
import pickle
import sys
import warnings
from collections.abc import Sequence
from copy import deepcopy
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import Space
from gymnasium.error import CustomSpaceError as GymCustomSpaceError
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import (
    batch_space,
    concatenate,
    create_empty_array,
    create_shared_memory,
    iterate,
)

from vecpool._engine.env_errors import raise_env_errors
from vecpool._util.spaces import (
    IMMUTABLE,
    copy_tree,
    flatten_batch,
    foreign_leaves,
    is_hybrid,
    is_native,
    is_native_leaf,
    leaves,
    make_extractor,
    make_nester,
    make_views,
    make_writer,
    take_rows,
)
from vecpool._wire.info_columns import InfoSchema, read_schema
from vecpool._wire.messages import STEP, ObsTransport, Reply
from vecpool._wire.shared_memory import Layout, SharedBlock, cut
from vecpool.errors import CustomSpaceError, VecPoolWarning

__all__ = ["StepBuffers", "merge_infos"]

OBS_BUFFERS = 4
"""Observation buffers with ``copy=True``: 3 handed out, 1 scratch."""
OBS_BUFFERS_MAX_BYTES = 64 * 2**20
"""Bigger observation batches get one buffer, copied out."""
OBS_BUFFERS_MIN_BYTES = 16 * 2**10
"""Smaller observation batches get one buffer, copied out: copying a few KiB costs
less than the rotation's bookkeeping (cutting fresh views, reference counts)."""
_MAX_SCHEMAS = 1024
"""Info schemas the parent keeps loaded (more: it starts over)."""


class _InfoMerger:
    """Gymnasium's info merging (``VectorEnv._add_info``) for ``num_envs`` rows."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def _add_info(
        self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int
    ) -> dict[str, Any]:
        merged: dict[str, Any] = VectorEnv._add_info(
            self,  # type: ignore[arg-type]  # duck-typed: it only reads num_envs
            vector_infos,
            env_info,
            env_num,
        )
        return merged


def merge_infos(items: list[tuple[int, dict[str, Any]]], count: int) -> dict[str, Any]:
    """Merge per-env infos with Gymnasium's rules into arrays of ``count`` rows.

    Args:
        items: ``(row, info)`` pairs; empty infos are skipped.
        count: Number of rows.

    Returns:
        The batched infos (with ``_key`` masks).
    """
    infos: dict[str, Any] = {}
    merger = _InfoMerger(count)
    for row, info in items:
        if info:
            infos = merger._add_info(infos, info, row)
    return infos


def _lossless(source: np.dtype[Any], target: np.dtype[Any]) -> bool:
    """Whether integer actions of ``source`` fit ``target`` exactly (int32 -> int64).

    Such actions take the shared-memory path: each env receives the same value (as
    the action space's own integer type). Floats never do: float64 -> float32
    rounds, so those travel as given.
    """
    return (
        source.kind in "iub"
        and target.kind in "iu"
        and np.can_cast(source, target, "safe")
    )


def batch_nbytes(space: Space[Any], num_envs: int) -> int:
    """Bytes of one batch of the array leaves of a native or hybrid ``space``."""
    return num_envs * sum(
        dtype.itemsize * math.prod(shape)
        for dtype, shape in leaves(space, skip_foreign=True)
    )


def _gymnasium_layout_or_raise(space: Space[Any], num_envs: int, ctx: Any) -> None:
    """Raise what Gymnasium's ``AsyncVectorEnv(shared_memory=True)`` raises.

    Its ``ValueError`` for a custom space, its ``TypeError`` for a dynamic one
    (Sequence, Graph). The layout itself is not kept.

    Raises:
        ValueError: For a space Gymnasium's shared memory refuses as custom.
        TypeError: Gymnasium's, for Sequence and Graph leaves.
    """
    try:
        create_shared_memory(space, n=num_envs, ctx=ctx)
    except GymCustomSpaceError as e:
        msg = (
            "Using `AsyncVector(..., shared_memory=True)` caused an error, "
            "you can disable this feature with `shared_memory=False` "
            "however this is slower."
        )
        raise ValueError(msg) from CustomSpaceError(str(e))


class StepBuffers:
    """The per-step arrays of one vector env and the logic that fills and reads them.

    Attributes:
        transport: How observations travel.
        block: The shared block.
        layout: Where each array lives in it.
        rewards: ``float64[num_envs]`` view.
        terminations: ``bool[num_envs]`` view.
        truncations: ``bool[num_envs]`` view.
        observations: The latest observations (views or a Gymnasium batch).
        step_messages: The hot-path step message for each observation buffer.
    """

    def __init__(
        self,
        num_envs: int,
        action_space: Space[Any],
        batched_action_space: Space[Any],
        observation_space: Space[Any],
        batched_observation_space: Space[Any],
        *,
        shared_memory: bool | str,
        copy: bool,
        batches: bool,
        ctx: Any,
    ) -> None:
        """Allocate the block and build the views.

        Args:
            num_envs: Number of sub-environments.
            action_space: Single action space.
            batched_action_space: The action space batched ``num_envs`` times.
            observation_space: Single observation space.
            batched_observation_space: The vector env's observation space.
            shared_memory: Whether observations come back through shared memory;
                ``"auto"``: where they can, else pickled through the pipes.
            copy: Whether observations handed out must stay unchanged.
            batches: Whether ``send``/``recv`` batches are enabled.
            ctx: The ``multiprocessing`` context.

        Raises:
            ValueError: If Gymnasium cannot lay out a custom observation space in
                shared memory.
        """
        self.num_envs = num_envs
        self.action_space = action_space
        self.copy = copy
        self.observation_space = observation_space
        self.batched_observation_space = batched_observation_space
        self._batch_spaces: dict[int, Space[Any]] = {num_envs: batched_action_space}
        self._warned_dtypes: set[tuple[np.dtype[Any], np.dtype[Any]]] = set()
        if not shared_memory:
            self.transport = ObsTransport.PIPE
        elif is_native(observation_space):
            self.transport = ObsTransport.NATIVE
        else:
            # Text, OneOf, Graph, Sequence, custom leaves: vecpool's workers never
            # use Gymnasium's shared memory for them (its reader decodes a Text or
            # OneOf leaf once, at construction: every later step would return
            # those placeholders). Array leaves go through shared memory, the
            # others pickled; an explicit True first raises what Gymnasium raises
            # for a space it cannot lay out.
            if not isinstance(shared_memory, str):
                _gymnasium_layout_or_raise(observation_space, num_envs, ctx)
            self.transport = (
                ObsTransport.HYBRID
                if is_hybrid(observation_space)
                else ObsTransport.PIPE
            )
        hybrid = self.transport is ObsTransport.HYBRID
        native = hybrid or self.transport is ObsTransport.NATIVE
        native_actions = is_native(action_space)
        # With copy=True, observations rotate through several buffers: a step's
        # observations are handed out as views of a buffer nobody else holds any
        # more (its reference count says so) instead of being copied; the last
        # buffer is scratch space, copied out when every other one is still held.
        count = (
            OBS_BUFFERS
            if native
            and copy
            and not batches
            and OBS_BUFFERS_MIN_BYTES
            <= batch_nbytes(observation_space, num_envs)
            <= OBS_BUFFERS_MAX_BYTES
            else 1
        )
        self.layout = Layout.build(
            num_envs,
            action_space if native_actions else None,
            observation_space if native else None,
            count,
        )
        self.block = SharedBlock(self.layout.size, ctx)
        self.action_views = [self.block.view(f) for f in self.layout.actions]
        self.fast_action_view: npt.NDArray[Any] | None = (
            self.action_views[0]
            if len(self.action_views) == 1 and is_native_leaf(action_space)
            else None
        )
        self.rewards = self.block.view(self.layout.rewards)
        self.terminations = self.block.view(self.layout.terminations)
        self.truncations = self.block.view(self.layout.truncations)
        # step infos in shared memory (see vecpool/_wire/info_columns.py)
        self.info_rows = self.block.view(self.layout.infos)
        self.info_ids = self.block.view(self.layout.info_versions)
        self.info_schema_areas = self.block.view(self.layout.info_schemas)
        self._info_schemas: dict[int, InfoSchema] = {}  # by id
        # observations that came by pipe (HYBRID: each env's leaves that are not
        # arrays, see vecpool._util.spaces.make_extractor)
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
            per_buffer = len(self.layout.observations) // count
            self._obs_fields = [
                self.layout.observations[start : start + per_buffer]
                for start in range(0, len(self.layout.observations), per_buffer)
            ]
            self._obs_owners = [self.block.owner(f) for f in self._obs_fields]
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

    # -- observation rotation ----------------------------------------------------------

    def choose_obs_buffer(self) -> int:
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

    def retire_held_obs_buffers(self) -> None:
        """Stop rotating through buffers something holds (before a user's fork)."""
        owners, free = self._obs_owners, self._obs_free_refs
        for index in range(len(owners) - 1):
            if sys.getrefcount(owners[index]) != free:
                self._obs_retired[index] = True

    # -- actions -----------------------------------------------------------------------

    def place_actions(
        self,
        actions: Any,
        ids: npt.NDArray[np.int64] | None = None,
        *,
        shared: bool = True,
    ) -> list[Any] | None:
        """Write actions into shared memory, or return them per env for the pipes.

        ``ids`` names the envs of a ``send`` batch (default: every env). A batch
        whose every leaf is a numpy array of exactly the batched action space's
        shape and dtype goes through shared memory (checked with a few attribute
        reads). Anything else Gymnasium accepts (lists, other dtypes, scalars
        broadcastable to the action shape) travels unchanged through the pipes, so
        each env receives exactly what Gymnasium would hand it. The count is always
        checked here, before anything is sent.

        Args:
            actions: The batch of actions.
            ids: The envs they are for (default: all, in order).
            shared: ``False`` while a worker may still read the previous actions
                (a call gave up on it): then everything goes by pipe.

        Returns:
            ``None`` when the actions are in shared memory, else one per env.

        Raises:
            ValueError: If the count or a single action's shape is wrong.
        """
        view = self.fast_action_view
        if (  # the hot path: one array of the exact shape, for every env
            shared
            and ids is None
            and view is not None
            and type(actions) is np.ndarray
            and actions.shape == view.shape
            and (actions.dtype == view.dtype or _lossless(actions.dtype, view.dtype))
        ):
            view[...] = actions
            return None
        count = self.num_envs if ids is None else ids.size
        views = self.action_views
        if views and shared:
            if self.fast_action_view is not None:  # one array leaf: no walk
                batch_leaves: list[Any] | None = [actions]
            else:
                try:
                    batch_leaves = flatten_batch(self.action_space, actions, count)
                except ValueError:
                    batch_leaves = None
            if batch_leaves is not None and all(
                type(leaf) is np.ndarray
                and (leaf.dtype == view.dtype or _lossless(leaf.dtype, view.dtype))
                and leaf.shape == (count, *view.shape[1:])
                for leaf, view in zip(batch_leaves, views, strict=True)
            ):
                for leaf, view in zip(batch_leaves, views, strict=True):
                    if ids is None:
                        view[...] = leaf
                    else:
                        view[ids] = leaf
                return None
            if batch_leaves is not None:
                self._warn_slow_actions(batch_leaves, views)
        per_env = list(iterate(self.batched_action_space(count), actions))
        if len(per_env) != count:
            what = (
                f"sub-environment (num_envs={count})"
                if ids is None
                else f"id in `env_ids` ({count})"
            )
            msg = f"`actions` must hold one action per {what}, got {len(per_env)}."
            raise ValueError(msg)
        shape = getattr(self.action_space, "shape", None)
        if is_native_leaf(self.action_space) and shape is not None:
            for index, action in enumerate(per_env):
                try:
                    fits = np.broadcast_shapes(np.shape(action), shape) == shape
                except ValueError:
                    fits = False
                if not fits:
                    msg = (
                        f"`actions[{index}]` has shape {np.shape(action)}, which does "
                        f"not fit the single action space's shape {shape}."
                    )
                    raise ValueError(msg)
        return per_env

    def batched_action_space(self, count: int) -> Space[Any]:
        """The action space batched ``count`` times (cached)."""
        space = self._batch_spaces.get(count)
        if space is None:
            space = self._batch_spaces[count] = batch_space(self.action_space, count)
        return space

    def _warn_slow_actions(
        self, batch_leaves: list[Any], views: list[npt.NDArray[Any]]
    ) -> None:
        """Warn once per dtype when an action array misses the shared-memory path."""
        for leaf, view in zip(batch_leaves, views, strict=True):
            if (
                type(leaf) is np.ndarray
                and leaf.shape == view.shape
                and leaf.dtype != view.dtype
                and (leaf.dtype, view.dtype) not in self._warned_dtypes
            ):
                self._warned_dtypes.add((leaf.dtype, view.dtype))
                warnings.warn(
                    f"`actions` of dtype {leaf.dtype} do not match the action space's "
                    f"dtype {view.dtype}, so they travel pickled through the pipes "
                    "(each env receives exactly what Gymnasium would give it). Pass "
                    f"`actions.astype(np.{view.dtype})` for the shared-memory fast "
                    "path.",
                    VecPoolWarning,
                    stacklevel=5,
                )

    # -- replies and observations ------------------------------------------------------

    def apply_reply(
        self, start: int, reply: Reply, only: list[int] | None = None
    ) -> None:
        """Store what a reply carried besides infos: piped observations.

        Args:
            start: Global index of the worker's first env.
            reply: The reply.
            only: The global indices whose piped observations to take (a ``send``
                batch's envs; the others' rows may be newer here than the worker's
                copy, after a restart); ``None``: all.
        """
        if reply.observations is not None:
            if only is None:
                self.env_obs[start : start + len(reply.observations)] = (
                    reply.observations
                )
            else:
                for index in only:
                    self.env_obs[index] = reply.observations[index - start]

    def merge_replies(
        self,
        handles: Sequence[Any],
        replies: list[Reply | None],
        owner: str,
        *,
        step: bool = False,
    ) -> dict[str, Any]:
        """Raise env errors, then store piped values and merge infos in env order.

        Args:
            handles: The worker handles, in order (for each one's first env).
            replies: Their answers (``None``: nothing to say).
            owner: The vector env's class name, for error notes.
            step: Whether they answer a full step, whose infos may be in shared
                memory (vecpool/_wire/info_columns.py).

        Returns:
            The batched infos, as Gymnasium merges them.
        """
        if not any(replies):
            return {}  # the hot path: nothing but "done" from every worker
        for handle, reply in zip(handles, replies, strict=True):
            # before any raise: an offer not taken now is never made again
            if reply is not None and reply.wide_offer is not None:
                handle.take_wide_offer(reply.wide_offer)  # the next step accepts
        raise_env_errors(replies, owner)
        items: list[tuple[int, dict[str, Any]]] = []
        for handle, reply in zip(handles, replies, strict=True):
            if reply is not None:
                self.apply_reply(handle.env_indices.start, reply)
                items.extend(reply.infos or [])
        if not (step and any(reply.columns for reply in replies if reply is not None)):
            return merge_infos(items, self.num_envs)  # nothing in shared memory
        return self.merge_with_rows(handles, items, None)

    def merge_with_rows(
        self,
        handles: Sequence[Any],
        items: list[tuple[int, dict[str, Any]]],
        ids: list[int] | None,
    ) -> dict[str, Any]:
        """Merge pickled infos with those in shared memory, as Gymnasium does.

        Args:
            handles: The worker handles (for wide rows).
            items: ``(row, info)`` of the infos that came pickled.
            ids: The envs of the result's rows: ``None`` for a full step (every
                env, whose info id says whether its info is in shared memory),
                or a ``recv`` batch's envs (each env's own row, untouched until
                it is sent again: vecpool/_wire/info_columns.py).

        Returns:
            The batched infos (``_key`` masks included).
        """
        if ids is None:  # a full step: each env's row is its own
            count = self.num_envs
            envs = rows = np.flatnonzero(self.info_ids)
            schema_ids = self.info_ids[envs]
        else:
            count = len(ids)
            chosen = np.asarray(ids, np.intp)
            all_ids = self.info_ids[chosen]
            rows = np.flatnonzero(all_ids)
            envs, schema_ids = chosen[rows], all_ids[rows]
        if not envs.size:
            return merge_infos(items, count) if items else {}
        return self._merge_rows(handles, items, envs, rows, schema_ids, count)

    def _merge_rows(
        self,
        handles: Sequence[Any],
        items: list[tuple[int, dict[str, Any]]],
        envs: npt.NDArray[np.intp],
        rows: npt.NDArray[np.intp],
        schema_ids: npt.NDArray[np.int64],
        count: int,
    ) -> dict[str, Any]:
        """Merge pickled ``items`` with the infos in the shared rows of ``envs``.

        Args:
            handles: The worker handles (for wide rows).
            items: ``(row, info)`` of the infos that came pickled.
            envs: The envs whose infos are in shared memory (ascending rows).
            rows: Their rows in the result (``envs`` itself for a full step).
            schema_ids: Their schema ids.
            count: Rows of the result.

        Returns:
            Gymnasium's merged infos: one assignment per key when every env has
            one schema and nothing came pickled; else each row decoded and merged
            in row order, as Gymnasium does.
        """
        first_id = int(schema_ids[0])
        if not items and (schema_ids == first_id).all():  # one schema
            first = self._schema(first_id, int(envs[0]))
            if not first.wide:
                return first.merge(self.info_rows[envs], rows, count)
            if rows is envs:  # a full step: each worker's wide rows as one part
                return first.merge_parts(_wide_parts(handles, envs), count)
        for row, env, schema_id in zip(
            rows.tolist(), envs.tolist(), schema_ids.tolist(), strict=True
        ):
            schema = self._schema(schema_id, env)
            data = _wide_row(handles, env) if schema.wide else self.info_rows[env]
            items.append((row, schema.decode(data)))
        items.sort(key=operator.itemgetter(0))  # row order, as Gymnasium merges
        return merge_infos(items, count)

    def _schema(self, schema_id: int, env: int) -> InfoSchema:
        """The info schema ``schema_id`` (read from ``env``'s area when new)."""
        schema = self._info_schemas.get(schema_id)
        if schema is None:
            if len(self._info_schemas) >= _MAX_SCHEMAS:  # keys that change every step
                self._info_schemas.clear()
            schema = pickle.loads(read_schema(self.info_schema_areas[env]))
            self._info_schemas[schema_id] = schema
        return schema

    def read_observations(self) -> Any:
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
            return copy_tree(self.observations)
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

    def put_observation(self, index: int, value: Any) -> None:
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

    def take_observations(self, ids: npt.NDArray[np.int64] | slice) -> Any:
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
        self.action_views = []
        self.fast_action_view = None
        self.rewards = self.rewards.copy()
        self.terminations = self.terminations.copy()
        self.truncations = self.truncations.copy()
        self.info_ids = np.zeros_like(self.info_ids)  # no info left to read
        self.info_rows = self.info_schema_areas = np.zeros((0, 0), np.uint8)
        self.block = None  # type: ignore[assignment]


def _wide_area(handle: Any) -> npt.NDArray[np.uint8]:
    """``handle``'s wide info rows (an id naming a wide schema implies them)."""
    if handle.info_wide is None:
        msg = (
            f"Worker {handle.index} wrote a wide info without an accepted area; "
            "please report this as a bug in vecpool."
        )
        raise RuntimeError(msg)
    return handle.info_wide  # type: ignore[no-any-return]


def _wide_row(handles: Sequence[Any], env: int) -> npt.NDArray[np.uint8]:
    """Env ``env``'s wide info row (a view of its worker's area)."""
    for handle in handles:
        if env in handle.env_indices:
            row: npt.NDArray[np.uint8] = _wide_area(handle)[
                env - handle.env_indices.start
            ]
            return row
    msg = f"No worker hosts env {env}."
    raise RuntimeError(msg)


def _wide_parts(
    handles: Sequence[Any], envs: npt.NDArray[np.intp]
) -> list[tuple[npt.NDArray[np.intp] | slice, npt.NDArray[np.uint8]]]:
    """The wide rows of ``envs`` (ascending), one part per worker hosting some.

    A worker's envs that are consecutive come as a slice and a view of its area
    (no copy here: the merge copies once, into the arrays it hands out).
    """
    parts: list[tuple[npt.NDArray[np.intp] | slice, npt.NDArray[np.uint8]]] = []
    for handle in handles:
        start, stop = handle.env_indices.start, handle.env_indices.stop
        low, high = np.searchsorted(envs, (start, stop))
        if low == high:
            continue
        area = _wide_area(handle)
        mine = envs[low:high]
        first, last = int(mine[0]), int(mine[-1])
        if last - first + 1 == len(mine):
            rows = area[first - start : last + 1 - start]
            parts.append((slice(first, last + 1), rows))
        else:
            parts.append((mine, area[mine - start]))
    return parts
