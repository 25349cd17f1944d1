"""The parent's step buffers: the shared block, its parts, and reading replies.

One :class:`StepBuffers` per vector env lays out and owns the shared block (see
:mod:`vecpool._wire.shared_memory`), decides how observations travel, and builds
one part per concern over it: action placement (:mod:`vecpool._engine.actions`),
the observation buffers (:mod:`vecpool._engine.observations`) and info merging
(:mod:`vecpool._engine.infos`). It reads the workers' replies to a step or a
reset: env errors, wide-info offers, piped observations, infos.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gymnasium import Space
from gymnasium.error import CustomSpaceError as GymCustomSpaceError
from gymnasium.vector.utils import (
    create_shared_memory,
)

from vecpool._engine.actions import ActionPlacer
from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.infos import InfoReader, merge_infos
from vecpool._engine.observations import ObservationBuffers
from vecpool._util.spaces import (
    is_hybrid,
    is_native,
    leaves,
)
from vecpool._wire.messages import COLUMNS_ONLY, ObsTransport, Reply
from vecpool._wire.shared_memory import Layout, SharedBlock
from vecpool.errors import CustomSpaceError

__all__ = ["StepBuffers", "batch_nbytes"]

OBS_BUFFERS = 4
"""Observation buffers with ``copy=True``: 3 handed out, 1 scratch."""
OBS_BUFFERS_MAX_BYTES = 64 * 2**20
"""Bigger observation batches get one buffer, copied out."""
OBS_BUFFERS_MIN_BYTES = 16 * 2**10
"""Smaller observation batches get one buffer, copied out: copying a few KiB costs
less than the rotation's bookkeeping (cutting fresh views, reference counts)."""


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
    """The shared block of one vector env, its parts, and the reading of replies.

    Attributes:
        block: The shared block.
        layout: Where each array lives in it.
        actions: Action placement (vecpool/_engine/actions.py).
        obs: The observation buffers (vecpool/_engine/observations.py).
        infos: Info merging (vecpool/_engine/infos.py).
        rewards: ``float64[num_envs]`` view.
        terminations: ``bool[num_envs]`` view.
        truncations: ``bool[num_envs]`` view.
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
        if not shared_memory:
            transport = ObsTransport.PIPE
        elif is_native(observation_space):
            transport = ObsTransport.NATIVE
        else:
            # Text, OneOf, Graph, Sequence, custom leaves: vecpool's workers never
            # use Gymnasium's shared memory for them (its reader decodes a Text or
            # OneOf leaf once, at construction: every later step would return
            # those placeholders). Array leaves go through shared memory, the
            # others pickled; an explicit True first raises what Gymnasium raises
            # for a space it cannot lay out.
            if not isinstance(shared_memory, str):
                _gymnasium_layout_or_raise(observation_space, num_envs, ctx)
            transport = (
                ObsTransport.HYBRID
                if is_hybrid(observation_space)
                else ObsTransport.PIPE
            )
        native = transport in (ObsTransport.HYBRID, ObsTransport.NATIVE)
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
        self.actions = ActionPlacer(
            num_envs, action_space, batched_action_space, self.block, self.layout
        )
        self.obs = ObservationBuffers(
            num_envs,
            observation_space,
            batched_observation_space,
            transport,
            self.block,
            self.layout,
            count,
            copy=copy,
        )
        self.infos = InfoReader(num_envs, self.block, self.layout)
        self.rewards = self.block.view(self.layout.rewards)
        self.terminations = self.block.view(self.layout.terminations)
        self.truncations = self.block.view(self.layout.truncations)

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
        columns = False
        for reply in replies:  # the hot path: "done" (and "infos in rows")
            if reply is COLUMNS_ONLY:
                columns = True
            elif reply is not None:
                break
        else:
            return self.infos.merge(handles, [], None) if step and columns else {}
        for handle, reply in zip(handles, replies, strict=True):
            # before any raise: an offer not taken now is never made again
            if reply is not None and reply.wide_offer is not None:
                handle.take_wide_offer(reply.wide_offer)  # the next step accepts
        raise_env_errors(replies, owner, handles=handles)
        items: list[tuple[int, dict[str, Any]]] = []
        for handle, reply in zip(handles, replies, strict=True):
            if reply is not None:
                self.apply_reply(handle.env_indices.start, reply)
                items.extend(reply.infos or [])
        if not (step and any(reply.columns for reply in replies if reply is not None)):
            return merge_infos(items, self.num_envs)  # nothing in shared memory
        return self.infos.merge(handles, items, None)

    def apply_reply(
        self, start: int, reply: Reply, only: list[int] | None = None
    ) -> None:
        """Store what a reply carried besides infos: piped observations.

        Args:
            start: Global index of the worker's first env.
            reply: The reply.
            only: The global indices whose piped observations to take (see
                :meth:`ObservationBuffers.store_piped`); ``None``: all.
        """
        if reply.observations is not None:
            self.obs.store_piped(start, reply.observations, only)

    def release(self) -> None:
        """Drop every view of the shared block so its memory goes now.

        Views handed out with ``copy=False`` keep their own reference, as they must.
        """
        self.obs.release()
        self.actions.release()
        self.infos.release()
        self.rewards = self.rewards.copy()
        self.terminations = self.terminations.copy()
        self.truncations = self.truncations.copy()
        self.block = None  # type: ignore[assignment]
