"""The parent's action placement: shared memory for exact arrays, else the pipes.

One :class:`ActionPlacer` per vector env holds the action views of the shared block
(:mod:`vecpool._wire.shared_memory`). Actions that are numpy arrays of the action
space's exact shape and dtype (or an integer dtype that fits it exactly) are copied
into shared memory; anything else Gymnasium accepts travels pickled, so each env
receives exactly what Gymnasium would hand it. The count is always checked here,
before anything is sent.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import Space
from gymnasium.vector.utils import batch_space

from vecpool._util.spaces import flatten_batch, is_native_leaf, split_actions
from vecpool._wire.shared_memory import Layout, SharedBlock
from vecpool.errors import VecPoolWarning

__all__ = ["ActionPlacer"]


def _lossless(source: np.dtype[Any], target: np.dtype[Any]) -> bool:
    """Whether integer actions of ``source`` fit ``target`` exactly (int32 -> int64).

    Such actions take the shared-memory path: each env receives the same value (as
    the action space's own integer type). Floats never do: float64 -> float32
    rounds, so those travel as given. Nor do bools: Gymnasium's ``Discrete``
    refuses ``np.True_`` (CartPole asserts it), which an ``int64`` would pass.
    """
    return (
        source.kind in "iu"
        and target.kind in "iu"
        and np.can_cast(source, target, "safe")
    )


class ActionPlacer:
    """Writes each step's actions into shared memory, or hands them back per env.

    Attributes:
        action_space: The single action space.
        num_envs: Number of sub-environments.
        action_views: The shared views of the action leaves (empty when the space
            is not native: every action then travels pickled).
        fast_action_view: The one view of a single-leaf space (the hot path).
    """

    def __init__(
        self,
        num_envs: int,
        action_space: Space[Any],
        batched_action_space: Space[Any],
        block: SharedBlock,
        layout: Layout,
    ) -> None:
        """Views of ``layout``'s action fields in ``block``."""
        self.num_envs = num_envs
        self.action_space = action_space
        self._batch_spaces: dict[int, Space[Any]] = {num_envs: batched_action_space}
        self._warned_dtypes: set[tuple[np.dtype[Any], np.dtype[Any]]] = set()
        self.action_views = [block.view(f) for f in layout.actions]
        self.fast_action_view: npt.NDArray[Any] | None = (
            self.action_views[0]
            if len(self.action_views) == 1 and is_native_leaf(action_space)
            else None
        )

    def place(
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
        what = "" if ids is None else f"id in `env_ids` ({count})"
        return split_actions(
            self.batched_space(count), self.action_space, actions, count, what
        )

    def batched_space(self, count: int) -> Space[Any]:
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

    def release(self) -> None:
        """Drop the views of the shared block."""
        self.action_views = []
        self.fast_action_view = None
