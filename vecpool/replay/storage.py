"""How a replay pool stores each leaf of a space: arrays, fixed-width strings, objects.

Array leaves (Box, Discrete, MultiDiscrete, MultiBinary) are stored as their
arrays; a Text leaf as fixed-width unicode of its ``max_length``; any other leaf
(Graph, Sequence, OneOf, a custom space) as ``object`` values, deep-copied where
mutable. Values a leaf would store changed (a string too long, a trailing NUL,
a non-string in a Text leaf) are refused with the path of the value. Used by the
pool, its files and the sampler.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence

from vecpool._util.spaces import (
    IMMUTABLE,
    NATIVE_LEAVES,
    flatten_batch,
    is_foreign,
    is_native_leaf,
    leaves,
)

__all__ = [
    "check_strings",
    "flatten_stored",
    "fresh_objects",
    "integer_bounds",
    "is_storable",
    "put_value",
    "same_value",
    "storage_leaves",
]


def flatten_stored(
    space: spaces.Space[Any], batch: Any, num_envs: int, name: str
) -> list[np.ndarray[Any, Any]]:
    """:func:`vecpool._util.spaces.flatten_batch`, a leaf that is not an array stored.

    Returns:
        One value per leaf, in :func:`storage_leaves` order: arrays as given, any
        other leaf as its storage array (``<U`` or ``object``).

    Raises:
        ValueError: If the structure or a shape does not match, or a string does
            not fit its Text leaf.
    """
    return flatten_batch(space, batch, num_envs, name, foreign=_stored)


def is_storable(space: spaces.Space[Any]) -> bool:
    """Whether a replay pool or a sampler can hold values of ``space`` in arrays.

    Array leaves, Dict/Tuple nests, and leaves of any other kind in a nest or on
    their own: those are stored as :func:`storage_leaves` says.

    Args:
        space: A single-environment space.

    Returns:
        ``True`` unless a leaf is an array space without a static shape or dtype.
    """
    if isinstance(space, spaces.Dict):
        return all(is_storable(sub) for sub in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return all(is_storable(sub) for sub in space.spaces)
    return not isinstance(space, NATIVE_LEAVES) or is_native_leaf(space)


def storage_dtype(space: spaces.Space[Any]) -> np.dtype[Any]:
    """The array dtype one value of a leaf that is not an array is stored as.

    ``Text``: fixed-width unicode of its ``max_length`` (``<U{max_length}``);
    any other leaf (Graph, Sequence, OneOf, a custom space such as a mission
    string of unknown length): ``object``.
    """
    if isinstance(space, spaces.Text):
        return np.dtype(f"<U{max(1, int(space.max_length))}")
    return np.dtype(object)


def storage_leaves(
    space: spaces.Space[Any],
) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
    """:func:`leaves`, with every other leaf as one value of :func:`storage_dtype`.

    Args:
        space: A space for which :func:`is_storable` holds.

    Returns:
        One ``(dtype, shape)`` per leaf, depth first, leaves of every kind.
    """
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in storage_leaves(sub)]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in storage_leaves(sub)]
    if is_foreign(space):
        return [(storage_dtype(space), ())]
    return leaves(space)


def put_value(array: np.ndarray[Any, Any], index: Any, value: Any, path: str) -> None:
    """``array[index] = value`` for one stored value, refusing a silent change.

    A string longer than a fixed-width unicode leaf would be cut short by numpy,
    and a non-string would be turned into its text: both raise instead.

    Raises:
        ValueError: Naming ``path``, the value's length and the leaf's width.
    """
    if array.dtype.kind == "U":
        _check_strings([value], array.dtype, path)
    elif array.dtype.kind == "O" and type(value) not in IMMUTABLE:
        value = copy.deepcopy(value)  # the env may change the object it returned
    array[index] = value


def same_value(a: Any, b: Any) -> bool:
    """Whether two stored values of an ``object`` leaf are the same observation.

    The same object, or equal in value with dtypes and types alike (Gymnasium's
    ``data_equivalence(exact=True)``: a Graph's arrays, a Sequence's items).
    """
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is str:
        return bool(a == b)
    return bool(data_equivalence(a, b, exact=True))


def fresh_objects(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array`` itself, or for an ``object`` array a copy with fresh values.

    Its mutable values are deep copies: what a pool hands out or takes in must not
    be objects someone else may change.
    """
    if array.dtype.kind != "O":
        return array
    out = np.empty(array.shape, object)
    flat, source = out.reshape(-1), array.reshape(-1)
    for position, item in enumerate(source.tolist() if source.ndim else [source]):
        flat[position] = item if type(item) in IMMUTABLE else copy.deepcopy(item)
    return out


def check_strings(array: np.ndarray[Any, Any], dtype: np.dtype[Any], path: str) -> None:
    """Refuse values a ``<U{n}`` leaf of ``dtype`` would store changed.

    Raises:
        ValueError: As :func:`put_value`.
    """
    if array.dtype.kind == "U" and array.dtype.itemsize <= dtype.itemsize:
        return  # numpy strings fit (and hold no trailing NUL: numpy drops them)
    _check_strings(array.reshape(-1).tolist(), dtype, path)


def _check_strings(values: Sequence[Any], dtype: np.dtype[Any], path: str) -> None:
    """Refuse values a ``<U{n}`` leaf would store changed (see :func:`put_value`)."""
    width = dtype.itemsize // 4
    for value in values:
        if not isinstance(value, str):
            msg = (
                f"`{path}` holds {type(value).__name__} {_short(value)}, not a "
                "string, for a Text space: a replay pool stores its strings as given."
            )
            raise ValueError(msg)
        if len(value) > width:
            msg = (
                f"`{path}` holds a string of {len(value)} characters, longer than its "
                f"Text space's max_length {width}: it would be stored cut short. "
                "Give the space a max_length that fits every value (a pool saved "
                "from a custom string space comes back with a Text as long as the "
                "longest string it held: record longer ones into a new pool)."
            )
            raise ValueError(msg)
        if value.endswith("\0"):
            msg = (
                f"`{path}` holds a string ending in a NUL character ({_short(value)}), "
                "which a fixed-width unicode array drops: it would read back "
                "changed. Strip the NULs, or use a custom string space (stored as "
                "objects)."
            )
            raise ValueError(msg)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _stored(
    sub: spaces.Space[Any], value: Any, path: str, num_envs: int
) -> np.ndarray[Any, Any]:
    """A batch of a leaf that is not an array, as its :func:`storage_leaves` array.

    Accepts Gymnasium's batch of it (a tuple of values) or such an array already.
    ``object`` leaves hold deep copies of mutable values: an env may change the
    object it returned later (strings and numbers are kept as they are).
    """
    dtype = storage_dtype(sub)
    if (
        isinstance(value, np.ndarray)
        and value.dtype == dtype
        and value.shape == (num_envs,)
    ):  # already a storage array: strings checked, objects copied
        if dtype.kind == "U":
            check_strings(value, dtype, path)
            return value
        return fresh_objects(value)
    if not isinstance(value, (tuple, list, np.ndarray)) or len(value) != num_envs:
        length = f" of length {len(value)}" if hasattr(value, "__len__") else ""
        msg = (
            f"`{path}` must be a batch of {num_envs} values of {sub} (a tuple, as "
            f"Gymnasium batches it), got {type(value).__name__}{length}."
        )
        raise ValueError(msg)
    items = list(value)
    if dtype.kind == "U":
        _check_strings(items, dtype, path)
        return np.array(items, dtype)
    out = np.empty(num_envs, object)
    for position, item in enumerate(items):
        out[position] = item if type(item) in IMMUTABLE else copy.deepcopy(item)
    return out


def integer_bounds(space: spaces.Space[Any]) -> list[tuple[Any, Any] | None]:
    """Per leaf (in :func:`leaves` order): ``(low, high_exclusive)`` of an integer leaf.

    Args:
        space: A native space.

    Returns:
        One entry per leaf: the bounds of a Discrete, MultiDiscrete, MultiBinary or
        integer Box leaf, ``None`` for a float leaf.
    """
    if isinstance(space, spaces.Dict):
        return [bound for sub in space.spaces.values() for bound in integer_bounds(sub)]
    if isinstance(space, spaces.Tuple):
        return [bound for sub in space.spaces for bound in integer_bounds(sub)]
    if isinstance(space, spaces.Discrete):
        return [(int(space.start), int(space.start + space.n))]
    if isinstance(space, spaces.MultiDiscrete):
        return [(space.start, space.start + space.nvec)]
    if isinstance(space, spaces.MultiBinary):
        return [(0, 2)]
    if isinstance(space, spaces.Box) and np.dtype(space.dtype).kind in "iu":
        return [(space.low, space.high + 1)]
    return [None]
