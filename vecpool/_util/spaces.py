"""Space-tree helpers: leaves of a Gymnasium space, nested batches, fast writers.

Pure numpy over Gymnasium spaces, no processes: used by the step buffers, the
worker, the replay pool, the sampler and the wrappers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_differing_spaces, batch_space

__all__ = [
    "NATIVE_LEAVES",
    "copy_tree",
    "flatten_batch",
    "integer_bounds",
    "is_native",
    "is_native_leaf",
    "leaves",
    "make_reader",
    "make_views",
    "make_writer",
    "observation_spaces",
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


def leaves(space: spaces.Space[Any]) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
    """List the ``(dtype, shape)`` of each array leaf of a native space, depth first.

    Args:
        space: A space for which :func:`is_native` holds.

    Returns:
        One entry per leaf, in the order Dict keys / Tuple items are iterated.
    """
    if isinstance(space, NATIVE_LEAVES):
        assert space.dtype is not None
        assert space.shape is not None
        return [(np.dtype(space.dtype), tuple(space.shape))]
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in leaves(sub)]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in leaves(sub)]
    msg = f"Space {space!r} has no vecpool shared-memory layout."
    raise TypeError(msg)


def make_views(space: spaces.Space[Any], arrays: list[np.ndarray[Any, Any]]) -> Any:
    """Nest leaf arrays back into the structure Gymnasium batches ``space`` into.

    Dict spaces become ``dict``, Tuple spaces ``tuple`` and leaves arrays, exactly as
    ``gymnasium.vector.utils.read_from_shared_memory`` returns them.

    Args:
        space: The single space the leaves were laid out from.
        arrays: The leaf arrays in :func:`leaves` order.

    Returns:
        The nested batch structure.
    """
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return _nest(space, iter(arrays))
    return arrays[0]


def _nest(space: spaces.Space[Any], arrays: Iterator[np.ndarray[Any, Any]]) -> Any:
    # A module-level recursion: a self-referencing closure would make a reference
    # cycle, keeping the arrays (and the shared buffer under them) alive until the
    # garbage collector runs.
    if isinstance(space, spaces.Dict):
        return {key: _nest(value, arrays) for key, value in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_nest(value, arrays) for value in space.spaces)
    return next(arrays)


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


def make_writer(space: spaces.Space[Any], arrays: list[np.ndarray[Any, Any]]) -> Writer:
    """Compile a function that writes one env's value into row ``i`` of leaf arrays.

    Built once per worker, so the per-step cost is one assignment per leaf.

    Args:
        space: The single space of the values.
        arrays: Leaf arrays in :func:`leaves` order.

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
        array = next(iterator)
        shape = array.shape[1:]

        def write_leaf(index: int, value: Any) -> None:
            # an array of the right shape passes on one attribute read; anything
            # else (a scalar, None, a list) must have the shape too, or numpy would
            # broadcast it silently where Gymnasium raises
            if getattr(value, "shape", None) != shape:
                _check_shape(value, shape)
            array[index] = value

        return write_leaf

    return build(space)


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
        of shape ``(num_envs, *leaf_shape)``.

    Raises:
        ValueError: If the structure or a shape does not match, naming the expected one.
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
