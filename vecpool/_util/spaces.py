"""Space-tree helpers: leaves of a Gymnasium space, nested batches, fast writers.

Pure numpy over Gymnasium spaces, no processes: what the step buffers and the
worker need, which the replay pool, the sampler and the wrappers share. How a pool
stores a leaf that is not an array lives with the pool (vecpool/replay/storage.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import iterate

__all__ = [
    "IMMUTABLE",
    "NATIVE_LEAVES",
    "Foreign",
    "copy_tree",
    "flatten_batch",
    "foreign_leaves",
    "is_foreign",
    "is_hybrid",
    "is_native",
    "is_native_leaf",
    "leaves",
    "make_extractor",
    "make_nester",
    "make_reader",
    "make_views",
    "make_writer",
    "split_actions",
    "take_rows",
]

NATIVE_LEAVES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def is_native_leaf(space: spaces.Space[Any]) -> bool:
    """Whether ``space`` is a single array leaf (Box, Discrete, MultiDiscrete, ...).

    Args:
        space: A single-environment space.

    Returns:
        ``True`` for the four array spaces with a static shape and dtype.
    """
    return (
        isinstance(space, NATIVE_LEAVES)
        and space.shape is not None
        and space.dtype is not None
    )


def is_native(space: spaces.Space[Any]) -> bool:
    """Whether ``space`` has a vecpool shared-memory layout.

    Box, Discrete, MultiDiscrete and MultiBinary, and Dict/Tuple nests of them, do.
    Other spaces (Text, OneOf, Graph, Sequence, custom) do not.

    Args:
        space: A single-environment space.

    Returns:
        ``True`` if :func:`leaves` can lay the space out.
    """
    if isinstance(space, NATIVE_LEAVES):
        return is_native_leaf(space)
    if isinstance(space, spaces.Dict):
        return all(is_native(sub) for sub in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return all(is_native(sub) for sub in space.spaces)
    return False


def is_hybrid(space: spaces.Space[Any]) -> bool:
    """Whether ``space`` is a Dict/Tuple nest of array leaves and other leaves.

    Its array leaves can go through shared memory and the others (Text, Graph,
    Sequence, OneOf, custom spaces) travel pickled: vecpool's hybrid transport.

    Args:
        space: A single-environment space.

    Returns:
        ``True`` for a Dict or Tuple with at least one array leaf and one leaf
        :func:`is_native` refuses.
    """
    if not isinstance(space, (spaces.Dict, spaces.Tuple)) or is_native(space):
        return False
    return bool(leaves(space, skip_foreign=True))


def is_foreign(space: spaces.Space[Any]) -> bool:
    """A leaf with no shared-memory layout (any space but an array, Dict or Tuple)."""
    return not isinstance(space, (spaces.Dict, spaces.Tuple)) and not is_native_leaf(
        space
    )


def leaves(
    space: spaces.Space[Any], *, skip_foreign: bool = False
) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
    """List the ``(dtype, shape)`` of each array leaf of a native space, depth first.

    Args:
        space: A space for which :func:`is_native` holds (or :func:`is_hybrid`,
            with ``skip_foreign``).
        skip_foreign: Leave out the leaves that are not arrays, instead of raising.

    Returns:
        One entry per leaf, in the order Dict keys / Tuple items are iterated.

    Raises:
        TypeError: On a leaf that is not an array, without ``skip_foreign``.
    """
    if isinstance(space, spaces.Dict):
        subs: Sequence[spaces.Space[Any]] = list(space.spaces.values())
    elif isinstance(space, spaces.Tuple):
        subs = space.spaces
    elif is_native_leaf(space):
        assert space.dtype is not None
        assert space.shape is not None
        return [(np.dtype(space.dtype), tuple(space.shape))]
    elif skip_foreign:
        return []
    else:
        msg = f"Space {space!r} has no vecpool shared-memory layout."
        raise TypeError(msg)
    return [leaf for sub in subs for leaf in leaves(sub, skip_foreign=skip_foreign)]


def foreign_leaves(space: spaces.Space[Any]) -> list[spaces.Space[Any]]:
    """The leaves of ``space`` that are not arrays, depth first.

    Args:
        space: A single-environment space.

    Returns:
        The leaf spaces (Text, Graph, Sequence, OneOf, custom), in the order Dict
        keys / Tuple items are iterated; ``[space]`` itself if it is one.
    """
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in foreign_leaves(sub)]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in foreign_leaves(sub)]
    return [space] if is_foreign(space) else []


IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})
"""Types whose values a deep copy returns as they are (never copied)."""


def make_extractor(space: spaces.Space[Any]) -> Callable[[Any], list[Any]]:
    """Compile a function that lists one value's :func:`foreign_leaves` values.

    Args:
        space: The single space of the values.

    Returns:
        ``extract(value)``: the values of the leaves that are not arrays, in
        :func:`foreign_leaves` order (as they are: not copied).
    """

    def build(sub: spaces.Space[Any]) -> Callable[[Any, list[Any]], None] | None:
        if isinstance(sub, spaces.Dict):
            items = [
                (key, part)
                for key, value in sub.spaces.items()
                if (part := build(value)) is not None
            ]
            if not items:
                return None

            def from_dict(value: Any, out: list[Any]) -> None:
                for key, part in items:
                    part(value[key], out)

            return from_dict
        if isinstance(sub, spaces.Tuple):
            positions = [
                (position, part)
                for position, value in enumerate(sub.spaces)
                if (part := build(value)) is not None
            ]
            if not positions:
                return None

            def from_tuple(value: Any, out: list[Any]) -> None:
                for position, part in positions:
                    part(value[position], out)

            return from_tuple
        if not is_foreign(sub):
            return None
        return lambda value, out: out.append(value)

    root = build(space)

    def extract(value: Any) -> list[Any]:
        out: list[Any] = []
        if root is not None:
            root(value, out)
        return out

    return extract


_LEAF_KINDS = frozenset(NATIVE_LEAVES)
"""The native leaf classes, for a lookup by exact type (subclasses go the long way)."""


def make_views(
    space: spaces.Space[Any],
    arrays: list[np.ndarray[Any, Any]],
    foreign: Sequence[Any] | None = None,
) -> Any:
    """Nest leaf arrays back into the structure Gymnasium batches ``space`` into.

    Dict spaces become ``dict``, Tuple spaces ``tuple`` and leaves arrays, exactly as
    ``gymnasium.vector.utils.read_from_shared_memory`` returns them.

    Args:
        space: The single space the leaves were laid out from.
        arrays: The leaf arrays in :func:`leaves` order (``foreign=None``: one
            per leaf of every kind, in :func:`storage_leaves` order).
        foreign: For a hybrid space (:func:`is_hybrid`), the batches of its
            other leaves, in :func:`foreign_leaves` order.

    Returns:
        The nested batch structure.
    """
    if type(space) in _LEAF_KINDS:  # before isinstance: Dict is an ABC, slow to ask
        return arrays[0]
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        leaf_arrays = iter(arrays)
        others = leaf_arrays if foreign is None else iter(foreign)
        return _nest(space, leaf_arrays, others)
    return arrays[0]


def _nest(
    space: spaces.Space[Any],
    arrays: Iterator[np.ndarray[Any, Any]],
    foreign: Iterator[Any],
) -> Any:
    # A module-level recursion: a self-referencing closure would make a reference
    # cycle, keeping the arrays (and the shared buffer under them) alive until the
    # garbage collector runs.
    if isinstance(space, spaces.Dict):
        return {
            key: _nest(value, arrays, foreign) for key, value in space.spaces.items()
        }
    if isinstance(space, spaces.Tuple):
        return tuple(_nest(value, arrays, foreign) for value in space.spaces)
    if is_foreign(space):
        return next(foreign)
    return next(arrays)


Nester = Callable[[Sequence[Any], Sequence[Any]], Any]


def make_nester(space: spaces.Space[Any]) -> Nester:
    """Compile :func:`make_views` for a hybrid space: ``nest(arrays, foreign)``.

    Built once, so a step's nesting reads each leaf by position instead of
    examining the space again (a hybrid observation is nested on every step).

    Args:
        space: A Dict or Tuple space (hybrid or native).

    Returns:
        ``nest(arrays, foreign)``: the structure :func:`make_views` returns, the
        array leaves taken from ``arrays`` in :func:`leaves` order
        (``skip_foreign``) and the others from ``foreign`` in
        :func:`foreign_leaves` order.
    """
    counts = [0, 0]  # array leaves, foreign leaves placed so far

    def place(sub: spaces.Space[Any]) -> tuple[int, int]:
        kind = 1 if is_foreign(sub) else 0
        counts[kind] += 1
        return kind, counts[kind] - 1

    def build(sub: spaces.Space[Any]) -> Nester:
        if isinstance(sub, (spaces.Dict, spaces.Tuple)):
            keys: list[str] | None = None
            if isinstance(sub, spaces.Dict):
                keys, subs = list(sub.spaces), list(sub.spaces.values())
            else:
                subs = list(sub.spaces)
            if not any(isinstance(v, (spaces.Dict, spaces.Tuple)) for v in subs):
                # a flat level (the common case): one comprehension, no calls
                where = [place(value) for value in subs]
                if keys is not None:
                    keyed = [
                        (key, kind, at)
                        for key, (kind, at) in zip(keys, where, strict=True)
                    ]
                    return lambda arrays, foreign: {
                        key: (foreign if kind else arrays)[at]
                        for key, kind, at in keyed
                    }
                return lambda arrays, foreign: tuple(
                    (foreign if kind else arrays)[at] for kind, at in where
                )
            parts = [build(value) for value in subs]
            if keys is not None:
                named = list(zip(keys, parts, strict=True))
                return lambda arrays, foreign: {
                    key: part(arrays, foreign) for key, part in named
                }
            return lambda arrays, foreign: tuple(
                part(arrays, foreign) for part in parts
            )
        kind, at = place(sub)
        return lambda arrays, foreign: (foreign if kind else arrays)[at]

    return build(space)


def take_rows(batch: Any, rows: np.ndarray[Any, Any] | slice) -> Any:
    """Rows ``rows`` of a nested batch of arrays (dict / tuple / ndarray), copied.

    Args:
        batch: A batch as returned by :func:`make_views` (or batched actions).
        rows: Integer indices along the leading dimension (copied), or a slice
            (views).

    Returns:
        The same structure holding only those rows.
    """
    if isinstance(batch, np.ndarray):
        return batch[rows]
    if isinstance(batch, dict):
        return {key: take_rows(value, rows) for key, value in batch.items()}
    return tuple(take_rows(value, rows) for value in batch)


def copy_tree(batch: Any) -> Any:
    """Copy a nested batch of arrays (dict / tuple / ndarray); other leaves as-is.

    Args:
        batch: A batch as returned by :func:`make_views`.

    Returns:
        The same structure holding fresh copies of every array.
    """
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if isinstance(batch, dict):
        return {key: copy_tree(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(copy_tree(value) for value in batch)
    return batch


Writer = Callable[[int, Any], None]
Reader = Callable[[int], Any]


def make_writer(
    space: spaces.Space[Any],
    arrays: list[np.ndarray[Any, Any]],
    *,
    store: Callable[[np.ndarray[Any, Any], int, Any, str], None] | None = None,
) -> Writer:
    """Compile a function that writes one env's value into row ``i`` of leaf arrays.

    Built once per worker, so the per-step cost is one assignment per leaf. The
    leaves of a hybrid space that are not arrays are left out (they travel
    pickled: :func:`make_extractor`), unless ``store`` is given: then ``arrays``
    hold one array for those leaves too, and ``store(array, i, value, path)``
    writes each (a replay pool: vecpool/replay/storage.py ``put_value``).

    Args:
        space: The single space of the values.
        arrays: Leaf arrays, depth first (every leaf's with ``store``).
        store: Writes a value of a leaf that is not an array.

    Returns:
        ``write(i, value)``.
    """
    # the recursion is a module-level function: a closure that calls itself is a
    # reference cycle, which would keep the arrays (and the shared block under
    # them) mapped until the garbage collector runs (issue 38)
    return _build_writer(space, iter(arrays), store)


def _build_writer(
    sub: spaces.Space[Any],
    arrays: Iterator[np.ndarray[Any, Any]],
    store: Callable[[np.ndarray[Any, Any], int, Any, str], None] | None,
) -> Writer:
    """:func:`make_writer` for ``sub``, taking its leaf arrays from ``arrays``."""
    if isinstance(sub, spaces.Dict):
        items = [
            (key, _build_writer(value, arrays, store))
            for key, value in sub.spaces.items()
        ]

        def write_dict(index: int, value: Any) -> None:
            for key, writer in items:
                writer(index, value[key])

        return write_dict
    if isinstance(sub, spaces.Tuple):
        writers = [_build_writer(value, arrays, store) for value in sub.spaces]

        def write_tuple(index: int, value: Any) -> None:
            for writer, item in zip(writers, value, strict=True):
                writer(index, item)

        return write_tuple
    if is_foreign(sub):
        if store is None:  # a hybrid space's other leaf: travels pickled
            return _write_nothing
        stored, put = next(arrays), store  # a storage_leaves array

        def write_other(index: int, value: Any) -> None:
            put(stored, index, value, "obs")

        return write_other
    array = next(arrays)
    shape, dtype = array.shape[1:], array.dtype

    def write_leaf(index: int, value: Any) -> None:
        # an array of the right shape passes on one attribute read; anything
        # else (a scalar, None, a list) must have the shape too, or numpy would
        # broadcast it silently where Gymnasium raises
        if getattr(value, "shape", None) != shape:
            _check_shape(value, shape)
        # and of a kind the leaf's dtype holds: 3.7 in an integer leaf raises,
        # as SyncVectorEnv's concatenate does, instead of being stored as 3
        if getattr(value, "dtype", None) is not dtype:
            _check_kind(value, dtype)
        array[index] = value

    return write_leaf


_SAME_KIND = {int: "iu", bool: "biu", float: "f"}
"""Python scalars a leaf of these dtype kinds takes without a check."""


def _check_kind(value: Any, dtype: np.dtype[Any]) -> None:
    """Refuse a value numpy would cast to ``dtype`` beyond ``same_kind``.

    Raises:
        TypeError: SyncVectorEnv's (numpy's) message for the same value.
    """
    if dtype.kind in _SAME_KIND.get(type(value), ""):
        return
    source = getattr(value, "dtype", None)
    if source is None:
        source = np.asarray(value).dtype
    if not np.can_cast(source, dtype, "same_kind"):
        msg = (
            f"Cannot cast array data from {source!r} to {dtype!r} according to the "
            "rule 'same_kind'"
        )
        raise TypeError(msg)


def _write_nothing(index: int, value: Any) -> None:
    """A hybrid space's leaf that is not an array: not in shared memory."""


def _check_shape(value: Any, shape: tuple[int, ...]) -> None:
    """Refuse a value that does not have ``shape`` (it would be broadcast).

    Raises:
        ValueError: Naming the value, its shape and the space's.
    """
    if value is None or np.shape(value) != shape:
        text = repr(value)
        text = text if len(text) <= 60 else text[:57] + "..."
        msg = (
            f"The env returned {text} (shape {np.shape(value)}), not an observation "
            f"of its space's shape {shape} (vecpool does not broadcast it)."
        )
        raise ValueError(msg)


def make_reader(space: spaces.Space[Any], arrays: list[np.ndarray[Any, Any]]) -> Reader:
    """Compile a function that reads env ``i``'s value out of leaf arrays.

    Array leaves are copied (an env may keep its action); scalar leaves come out as
    numpy scalars, as ``gymnasium.vector.utils.iterate`` yields them.

    Args:
        space: The single space of the values.
        arrays: Leaf arrays in :func:`leaves` order.

    Returns:
        ``read(i)``.
    """
    return _build_reader(space, iter(arrays))  # module-level: see make_writer


def _build_reader(
    sub: spaces.Space[Any], arrays: Iterator[np.ndarray[Any, Any]]
) -> Reader:
    """:func:`make_reader` for ``sub``, taking its leaf arrays from ``arrays``."""
    if isinstance(sub, spaces.Dict):
        items = [
            (key, _build_reader(value, arrays)) for key, value in sub.spaces.items()
        ]
        return lambda index: {key: reader(index) for key, reader in items}
    if isinstance(sub, spaces.Tuple):
        readers = [_build_reader(value, arrays) for value in sub.spaces]
        return lambda index: tuple(reader(index) for reader in readers)
    array = next(arrays)
    if array.ndim == 1:
        return array.__getitem__
    return lambda index: array[index].copy()


Foreign = Callable[[spaces.Space[Any], Any, str, int], Any]
"""Turns a batch of a leaf that is not an array into what :func:`flatten_batch`
returns for it: ``(leaf space, batch, path for messages, num_envs) -> value``."""


def flatten_batch(
    space: spaces.Space[Any],
    batch: Any,
    num_envs: int,
    name: str = "actions",
    foreign: Foreign | None = None,
) -> list[np.ndarray[Any, Any]]:
    """Split a batch (as Gymnasium batches ``space``) into leaf arrays, checking shapes.

    Args:
        space: The single space.
        batch: The batched value (arrays, lists, dicts, tuples).
        num_envs: The expected leading dimension.
        name: What to call the batch in error messages.
        foreign: What to make of a leaf that is not an array (Text, Graph, ...;
            the replay pool stores it: vecpool/replay/storage.py); ``None``: such
            a leaf raises.

    Returns:
        One value per leaf, as given (not converted), each of shape
        ``(num_envs, *leaf_shape)``; a leaf that is not an array as ``foreign``
        makes it.

    Raises:
        ValueError: If the structure or a shape does not match, naming the expected
            one, or ``foreign`` refuses a value.
    """
    out: list[Any] = []
    _walk(space, batch, name, num_envs, out, foreign)
    return out


def _walk(
    sub: spaces.Space[Any],
    value: Any,
    path: str,
    num_envs: int,
    out: list[Any],
    foreign: Foreign | None,
) -> None:
    """Collect the leaves of ``value`` into ``out`` (see :func:`flatten_batch`)."""
    if isinstance(sub, spaces.Dict):
        if not isinstance(value, Mapping) or set(value) != set(sub.spaces):
            keys = list(value) if isinstance(value, Mapping) else type(value)
            msg = (
                f"`{path}` must be a dict with keys {list(sub.spaces)} "
                f"(one batch per key), got {keys}."
            )
            raise ValueError(msg)
        for key, item in sub.spaces.items():
            _walk(item, value[key], f"{path}[{key!r}]", num_envs, out, foreign)
        return
    if isinstance(sub, spaces.Tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(sub.spaces):
            length = f" of length {len(value)}" if hasattr(value, "__len__") else ""
            msg = (
                f"`{path}` must be a tuple of {len(sub.spaces)} batches, "
                f"got {type(value).__name__}{length}."
            )
            raise ValueError(msg)
        for index, item in enumerate(sub.spaces):
            _walk(item, value[index], f"{path}[{index}]", num_envs, out, foreign)
        return
    if is_foreign(sub):  # a Text, Graph, ... leaf: what `foreign` makes of it
        if foreign is None:
            msg = f"`{path}` is a batch of {sub}, which is not an array space."
            raise ValueError(msg)
        out.append(foreign(sub, value, path, num_envs))
        return
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    shape = tuple(sub.shape or ())
    expected = (num_envs, *shape)
    if array.shape != expected:
        msg = (
            f"`{path}` must have shape {expected} ({num_envs} rows, then the "
            f"single space's shape {shape}), got {array.shape}."
        )
        raise ValueError(msg)
    out.append(value)


def split_actions(
    batched_space: spaces.Space[Any],
    single_space: spaces.Space[Any],
    actions: Any,
    num_envs: int,
    what: str = "",
) -> list[Any]:
    """One action per env from a batch, checked before anything is sent.

    (A scalar or other non-batch gets Gymnasium's ``TypeError`` with the fix added.)

    Each action is what Gymnasium's ``iterate`` hands that env; checking them all
    first means a bad batch never reaches some envs and not the others.

    Args:
        batched_space: The vector env's action space.
        single_space: One env's action space.
        actions: The batch.
        num_envs: Number of sub-environments (or of ``send``'s ids).
        what: What each action is for, as the count error names it (default:
            ``"sub-environment (num_envs=N)"``).

    Returns:
        The actions, one per env.

    Raises:
        ValueError: If the batch does not hold one action per env, or (an array
            space) an action's shape does not fit the single action space's.
    """
    what = what or f"sub-environment (num_envs={num_envs})"
    try:
        per_env = list(iterate(batched_space, actions))
    except TypeError as exc:  # Gymnasium's type, with the fix added to its text
        shape = getattr(batched_space, "shape", None)
        example = "" if shape is None else f" (shape {shape})"
        msg = (
            f"{exc}. `actions` must hold one action per {what}, e.g. "
            f"`envs.action_space.sample()`{example}, not one env's action: got "
            f"{_short_repr(actions)}."
        )
        raise TypeError(msg) from exc
    if len(per_env) != num_envs:
        msg = f"`actions` must hold one action per {what}, got {len(per_env)}."
        raise ValueError(msg)
    shape = getattr(single_space, "shape", None)
    if is_native_leaf(single_space) and shape is not None:
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


def _short_repr(value: Any) -> str:
    """``repr(value)``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
