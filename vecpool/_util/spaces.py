"""Space-tree helpers: leaves of a Gymnasium space, nested batches, fast writers.

Pure numpy over Gymnasium spaces, no processes: used by the step buffers, the
worker, the replay pool, the sampler and the wrappers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector.utils import batch_differing_spaces, batch_space, iterate

__all__ = [
    "IMMUTABLE",
    "NATIVE_LEAVES",
    "check_strings",
    "copy_tree",
    "flatten_batch",
    "foreign_leaves",
    "fresh_objects",
    "integer_bounds",
    "is_hybrid",
    "is_native",
    "is_native_leaf",
    "is_storable",
    "leaves",
    "make_extractor",
    "make_nester",
    "make_reader",
    "make_views",
    "make_writer",
    "observation_spaces",
    "put_value",
    "same_value",
    "split_actions",
    "storage_leaves",
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


def _is_foreign(space: spaces.Space[Any]) -> bool:
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
    return [space] if _is_foreign(space) else []


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
    if _is_foreign(space):
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
                "Give the space a max_length that fits every value."
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
        if not _is_foreign(sub):
            return None
        return lambda value, out: out.append(value)

    root = build(space)

    def extract(value: Any) -> list[Any]:
        out: list[Any] = []
        if root is not None:
            root(value, out)
        return out

    return extract


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
    if _is_foreign(space):
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
        kind = 1 if _is_foreign(sub) else 0
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
    every_leaf: bool = False,
) -> Writer:
    """Compile a function that writes one env's value into row ``i`` of leaf arrays.

    Built once per worker, so the per-step cost is one assignment per leaf. The
    leaves of a hybrid space that are not arrays are left out (they travel
    pickled: :func:`make_extractor`), unless ``every_leaf``: then ``arrays`` are
    in :func:`storage_leaves` order and those leaves are stored too.

    Args:
        space: The single space of the values.
        arrays: Leaf arrays in :func:`leaves` order.
        every_leaf: Whether ``arrays`` hold every leaf (a replay store).

    Returns:
        ``write(i, value)``.
    """
    iterator = iter(arrays)

    def build(sub: spaces.Space[Any]) -> Writer:
        if isinstance(sub, spaces.Dict):
            items = [(key, build(value)) for key, value in sub.spaces.items()]

            def write_dict(index: int, value: Any) -> None:
                for key, writer in items:
                    writer(index, value[key])

            return write_dict
        if isinstance(sub, spaces.Tuple):
            writers = [build(value) for value in sub.spaces]

            def write_tuple(index: int, value: Any) -> None:
                for writer, item in zip(writers, value, strict=True):
                    writer(index, item)

            return write_tuple
        if _is_foreign(sub):
            if not every_leaf:  # a hybrid space's other leaf: travels pickled
                return _write_nothing
            stored = next(iterator)  # a storage_leaves array

            def write_other(index: int, value: Any) -> None:
                put_value(stored, index, value, "obs")

            return write_other
        array = next(iterator)
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

    return build(space)


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
    iterator = iter(arrays)

    def build(sub: spaces.Space[Any]) -> Reader:
        if isinstance(sub, spaces.Dict):
            items = [(key, build(value)) for key, value in sub.spaces.items()]
            return lambda index: {key: reader(index) for key, reader in items}
        if isinstance(sub, spaces.Tuple):
            readers = [build(value) for value in sub.spaces]
            return lambda index: tuple(reader(index) for reader in readers)
        array = next(iterator)
        if array.ndim == 1:
            return array.__getitem__
        return lambda index: array[index].copy()

    return build(space)


def flatten_batch(
    space: spaces.Space[Any], batch: Any, num_envs: int, name: str = "actions"
) -> list[np.ndarray[Any, Any]]:
    """Split a batch (as Gymnasium batches ``space``) into leaf arrays, checking shapes.

    Args:
        space: The single space.
        batch: The batched value (arrays, lists, dicts, tuples).
        num_envs: The expected leading dimension.
        name: What to call the batch in error messages.

    Returns:
        One value per leaf, in :func:`leaves` order, as given (not converted), each
        of shape ``(num_envs, *leaf_shape)``; a leaf that is not an array (Text,
        Graph, ...) as its :func:`storage_leaves` array (``<U`` or ``object``), in
        :func:`storage_leaves` order.

    Raises:
        ValueError: If the structure or a shape does not match, naming the expected
            one, or a string does not fit its Text leaf.
    """
    out: list[Any] = []
    _walk(space, batch, name, num_envs, out)
    return out


def _walk(
    sub: spaces.Space[Any], value: Any, path: str, num_envs: int, out: list[Any]
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
            _walk(item, value[key], f"{path}[{key!r}]", num_envs, out)
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
            _walk(item, value[index], f"{path}[{index}]", num_envs, out)
        return
    if _is_foreign(sub):  # a Text, Graph, ... leaf: its storage array
        out.append(_stored(sub, value, path, num_envs))
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


def observation_spaces(
    observation_mode: Any,
    dummy_env: Any,
    env_fns: Sequence[Callable[[], Any]],
    num_envs: int,
) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """The batched and single observation spaces of a vector env, as Gymnasium's.

    Args:
        observation_mode: ``"same"``, ``"different"`` or a tuple
            ``(observation_space, single_observation_space)``.
        dummy_env: The first env (already built).
        env_fns: Every env's constructor (``"different"`` builds them all).
        num_envs: Number of sub-environments.

    Returns:
        ``(observation_space, single_observation_space)``.

    Raises:
        TypeError: If a tuple does not hold two spaces.
        ValueError: On an unknown mode.
    """
    mode: object = observation_mode
    if isinstance(mode, tuple) and len(mode) == 2:
        if not isinstance(mode[0], spaces.Space) or not isinstance(
            mode[1], spaces.Space
        ):
            msg = (
                "Expected both elements of observation_mode to be Spaces, got "
                f"{type(mode[0])} and {type(mode[1])}"
            )
            raise TypeError(msg)
        return mode[0], mode[1]
    if mode == "same":
        single = dummy_env.observation_space
        return batch_space(single, num_envs), single
    if mode == "different":
        env_spaces = []
        for env_fn in env_fns:
            env = env_fn()
            env_spaces.append(env.observation_space)
            env.close()
        return batch_differing_spaces(env_spaces), env_spaces[0]
    msg = (
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple "
        f"of single and batch observation space, actual got {mode}"
    )
    raise ValueError(msg)


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


def split_actions(
    batched_space: spaces.Space[Any],
    single_space: spaces.Space[Any],
    actions: Any,
    num_envs: int,
    what: str = "",
) -> list[Any]:
    """One action per env from a batch, checked before anything is sent.

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
    per_env = list(iterate(batched_space, actions))
    if len(per_env) != num_envs:
        what = what or f"sub-environment (num_envs={num_envs})"
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
