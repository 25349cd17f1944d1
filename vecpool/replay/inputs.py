"""Checks of what is added to a replay pool, before anything is written.

Leaves of the wrong shape, ``env_ids`` or ``valid`` masks that are not what they
must be, actions outside the action space, observations that their stored integer
dtype would change, flags that are not bools (or 0 and 1), rewards that are not
numbers (no silent casts) and strings longer than their ``Text`` leaf are refused
with a ``ValueError`` that names them.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import NATIVE_LEAVES, leaves
from vecpool.replay.portable import leaf_paths
from vecpool.replay.storage import (
    check_strings,
    flatten_stored,
    integer_bounds,
    storage_leaves,
)

__all__ = ["AddChecks", "split_leaves"]

SMALL_BATCH = 64  # action batches up to this size are range-checked as lists


class AddChecks:
    """The checks of a pool's adds, from its spaces.

    Args:
        observation_space: The single-env observation space.
        action_space: The single-env action space.
        num_envs: Number of envs (rows of a batch without ``env_ids``).
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        num_envs: int,
    ) -> None:
        """Derive the shapes, bounds and string leaves to check."""
        self.num_envs = num_envs
        self.action_space = action_space
        obs_leaves = storage_leaves(observation_space)
        self.obs_shapes = [shape for _, shape in obs_leaves]
        self.obs_dtypes = [dtype for dtype, _ in obs_leaves]
        self.action_shapes = [shape for _, shape in leaves(action_space)]
        # Text leaves: what is added must fit their width (never stored cut short)
        paths = leaf_paths(observation_space)
        self.text_leaves = [
            (k, paths[k], dtype)
            for k, (dtype, _) in enumerate(obs_leaves)
            if dtype.kind == "U"
        ]
        self.plain_shapes = (
            (
                (num_envs, *observation_space.shape),
                (num_envs, *action_space.shape),
                (num_envs,),
            )
            if isinstance(observation_space, NATIVE_LEAVES)
            and isinstance(action_space, NATIVE_LEAVES)
            and observation_space.shape is not None
            and action_space.shape is not None
            else None
        )
        self.action_bounds = integer_bounds(action_space)
        # a Discrete action space's bounds, checked inline on the aligned path
        self.discrete_bounds = (
            self.action_bounds[0]
            if isinstance(action_space, spaces.Discrete) and num_envs <= SMALL_BATCH
            else None
        )

    def check_leaves(
        self,
        obs: list[npt.NDArray[Any]],
        action: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        count: int,
    ) -> None:
        """Refuse leaves of the wrong shape, actions and strings out of range."""
        plain = self.plain_shapes
        if (  # one array a field, one row per env: three shape compares
            plain is not None
            and count == self.num_envs
            and len(obs) == len(action) == len(next_obs) == 1
            and type(obs[0]) is type(next_obs[0]) is type(action[0]) is np.ndarray
            and obs[0].shape == next_obs[0].shape == plain[0]
            and self.takes_as_is(obs[0].dtype, next_obs[0].dtype)
            and action[0].shape == plain[1]
        ):
            self.check_actions(action)
            return
        for name, batch, leaf_shapes in (
            ("obs", obs, self.obs_shapes),
            ("action", action, self.action_shapes),
            ("next_obs", next_obs, self.obs_shapes),
        ):
            _check_shapes(name, batch, leaf_shapes, count)
        self.check_actions(action)
        for name, batch in (("obs", obs), ("next_obs", next_obs)):
            self.check_casts(name, batch)
        for k, path, dtype in self.text_leaves:
            for name, batch in (("obs", obs), ("next_obs", next_obs)):
                check_strings(np.asarray(batch[k]), dtype, name + path)

    def takes_as_is(self, obs: np.dtype[Any], next_obs: np.dtype[Any]) -> bool:
        """Whether a plain observation of these dtypes needs no cast check.

        Its stored dtype, or any float into a float leaf (as given, e.g. float64
        into float32): the add paths' test, cheap where the dtypes are equal.
        """
        stored = self.obs_dtypes[0]
        return obs == next_obs == stored or (
            stored.kind == "f" and obs.kind == "f" and next_obs.kind == "f"
        )

    def check_casts(self, name: str, batch: list[npt.NDArray[Any]]) -> None:
        """Refuse observation leaves that their stored integer dtype would change.

        A leaf of another dtype is cast as numpy casts (300 is 44 in a ``uint8``,
        0.7 is 0): into an integer or bool leaf only values the cast keeps pass,
        checked without a copy where numpy says the cast is safe or both are
        integers (their range). Float leaves take any number, as they are (a
        float64 into float32).

        Raises:
            ValueError: Naming ``name`` and the stored dtype.
        """
        for leaf, stored in zip(batch, self.obs_dtypes, strict=True):
            array = np.asarray(leaf)
            if (
                array.dtype == stored
                or stored.kind not in "iub"
                or not array.size
                or np.can_cast(array.dtype, stored)
            ):
                continue
            if array.dtype.kind in "iu" and stored.kind in "iu":
                info = np.iinfo(stored)
                kept = info.min <= array.min() and array.max() <= info.max
            elif array.dtype.kind not in "bfO":  # strings, complex numbers
                kept = False
            else:  # floats, objects, bools into ints: the values must come back
                try:
                    with np.errstate(invalid="ignore", over="ignore"):
                        kept = bool(np.array_equal(array.astype(stored), array))
                except (TypeError, ValueError):  # strings, None
                    kept = False
            if not kept:
                msg = (
                    f"`{name}` holds values that its dtype {stored} would change "
                    f"(got dtype {array.dtype}): pass values the observation space "
                    "holds."
                )
                raise ValueError(msg)

    def check_env_ids(self, env_ids: Any) -> npt.NDArray[np.int64]:
        """``env_ids`` as 1-D int64 in range."""
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            msg = (
                f"`env_ids` must be a 1-D array of ints, got {env_ids!r} (shape "
                f"{ids.shape}, dtype {ids.dtype}): pass e.g. `np.array([0, 2])`."
            )
            raise ValueError(msg)
        # checked before the cast: a uint64 above 2**63 is named, not wrapped
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            msg = f"`env_ids` must lie in [0, {self.num_envs}), got {ids.tolist()}."
            raise ValueError(msg)
        return ids.astype(np.int64, copy=False)

    def check_valid(self, valid: Any, env_ids: Any) -> npt.NDArray[np.bool_]:
        """``valid`` as a bool mask over the rows."""
        mask = np.asarray(valid)
        rows = self.num_envs if env_ids is None else np.size(env_ids)
        if mask.dtype != np.bool_ or mask.shape != (rows,):
            msg = (
                f"`valid` must be a bool array of shape ({rows},), got dtype "
                f"{mask.dtype} and shape {mask.shape}."
            )
            raise ValueError(msg)
        return mask

    def check_actions(self, action: list[npt.NDArray[Any]]) -> None:
        """Refuse actions outside the action space (no silent casts).

        Per add, so cheap: a dtype-kind check, then the range. A small 1-D batch
        under a scalar range (Discrete: the hot case) is checked as a list, ~1 us
        for 8 envs where any numpy reduction costs 3-5 us in the add path.
        """
        for leaf, bounds in zip(action, self.action_bounds, strict=True):
            if bounds is None:
                continue  # a float Box: stored as given
            array = np.asarray(leaf)
            if array.dtype.kind not in "iub":
                self.refuse_actions(array)
            low, high = bounds
            if type(low) is int and array.ndim == 1 and array.size <= SMALL_BATCH:
                values = array.tolist()
                if not values or (low <= min(values) and max(values) < high):
                    continue
            elif not (np.count_nonzero(array < low) or np.count_nonzero(array >= high)):
                continue
            self.refuse_actions(array)

    def refuse_actions(self, array: npt.NDArray[Any]) -> NoReturn:
        """Raise the ``ValueError`` of actions outside the space."""
        if array.dtype.kind not in "iub":
            msg = (
                f"`action` must hold integers for the {self.action_space} action "
                f"space, got dtype {array.dtype}: pass e.g. `actions.astype(int)`."
            )
        else:
            msg = (
                f"`action` holds values outside the action space "
                f"{self.action_space}: got min {array.min()}, max {array.max()}."
            )
        raise ValueError(msg)


def check_scalars(
    reward: Any, terminated: Any, truncated: Any, count: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Rewards and flags as flat arrays of ``count`` values each.

    Raises:
        ValueError: On rewards that are not numbers, flags that are not bools or
            0 and 1 (``"False"`` would be stored ``True``), or the wrong counts.
    """
    rewards = np.asarray(reward)
    if rewards.dtype.kind not in "biuf":
        msg = f"`reward` must hold numbers, got dtype {rewards.dtype}."
        raise ValueError(msg)
    reward_arr = rewards.astype(np.float64, copy=False).reshape(-1)
    terminated_arr = _flags("terminated", terminated)
    truncated_arr = _flags("truncated", truncated)
    if not (reward_arr.size == terminated_arr.size == truncated_arr.size == count):
        msg = (
            f"`reward`, `terminated` and `truncated` must hold {count} values each,"
            f" got {reward_arr.size}, {terminated_arr.size}, {truncated_arr.size}."
        )
        raise ValueError(msg)
    return reward_arr, terminated_arr, truncated_arr


def _flags(name: str, flags: Any) -> npt.NDArray[np.bool_]:
    """``flags`` as a flat bool array: bools, or numbers that are 0 or 1."""
    array = np.asarray(flags)
    if array.dtype.kind != "b" and (
        array.dtype.kind not in "iuf" or ((array != 0) & (array != 1)).any()
    ):
        msg = (
            f"`{name}` must hold bools (or 0 and 1), got dtype {array.dtype}: pass "
            "the env's flags as it returned them."
        )
        raise ValueError(msg)
    return array.astype(np.bool_, copy=False).reshape(-1)


def _check_shapes(
    name: str,
    batch: list[npt.NDArray[Any]],
    shapes: list[tuple[int, ...]],
    count: int,
) -> None:
    """Refuse leaves of the wrong shape, before anything is written."""
    if len(batch) != len(shapes):
        msg = f"`{name}` must hold {len(shapes)} leaves, got {len(batch)}."
        raise ValueError(msg)
    for leaf, shape in zip(batch, shapes, strict=True):
        if np.shape(leaf) != (count, *shape):
            msg = (
                f"`{name}` must hold {count} rows of shape {shape} (one per env "
                f"or id), got shape {np.shape(leaf)}."
            )
            raise ValueError(msg)


def split_leaves(
    space: spaces.Space[Any], batch: Any, count: int, name: str
) -> list[npt.NDArray[Any]]:
    """The leaf arrays of a batch, each with ``count`` rows."""
    if (
        type(batch) is np.ndarray
        and isinstance(space, NATIVE_LEAVES)
        and batch.shape == (count, *(space.shape or ()))
    ):
        return [batch]  # the common case, without the generic walk
    return [np.asarray(leaf) for leaf in flatten_stored(space, batch, count, name)]
