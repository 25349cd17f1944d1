"""How a pool's leaves that are not arrays leave the process: files and Minari.

A replay pool holds a ``Text`` leaf as fixed-width unicode and any other leaf that
is not an array (a custom string space such as MiniGrid's ``MissionSpace``, Graph,
Sequence, OneOf) as ``object`` values (vecpool/_util/spaces.py ``storage_leaves``).
A pool file holds no pickle and a Minari dataset needs spaces it can describe, so
before either is written, :func:`portable` turns every ``object`` leaf that holds
only strings into unicode under a ``Text`` space wide enough for them (a custom
string space's own class and functions cannot be rebuilt from a file: it loads
back as ``Text``), and refuses any other ``object`` leaf, naming it, before
anything is written.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy.typing as npt
from gymnasium import spaces

from vecpool.replay.storage import storage_leaves

__all__ = ["leaf_paths", "portable", "records"]

_DEFAULT_CHARSET = frozenset(string.ascii_letters + string.digits)


def leaf_paths(space: spaces.Space[Any], path: str = "") -> list[str]:
    """Each leaf's place in ``space``, in ``storage_leaves`` order (``['mission']``).

    Args:
        space: A single-env space.
        path: The prefix (for recursion).

    Returns:
        One path per leaf, as a user indexes an observation.
    """
    if isinstance(space, spaces.Dict):
        return [
            leaf
            for key, sub in space.spaces.items()
            for leaf in leaf_paths(sub, f"{path}[{key!r}]")
        ]
    if isinstance(space, spaces.Tuple):
        return [
            leaf
            for index, sub in enumerate(space.spaces)
            for leaf in leaf_paths(sub, f"{path}[{index}]")
        ]
    return [path]


def portable(
    space: spaces.Space[Any],
    columns: Sequence[Sequence[npt.NDArray[Any]]],
    what: str,
) -> tuple[spaces.Space[Any], list[list[npt.NDArray[Any]]]]:
    """The space and leaf arrays to write, without pickle.

    Args:
        space: The pool's observation space.
        columns: For each leaf (``storage_leaves`` order), every array holding its
            values (observations, next observations, kept tails, ...).
        what: What is being written, for the error (``"a pool file"``).

    Returns:
        The space with each string ``object`` leaf replaced by a ``Text`` that
        holds every stored string, and the columns with those leaves as
        ``<U{max_length}`` arrays (other leaves unchanged, not copied).

    Raises:
        ValueError: If an ``object`` leaf holds anything but strings, naming the
            leaf, its space and the ways out.
    """
    stored = storage_leaves(space)
    paths = leaf_paths(space)
    replaced: dict[int, spaces.Space[Any]] = {}
    converted = [list(arrays) for arrays in columns]
    for index, ((dtype, _), arrays) in enumerate(zip(stored, columns, strict=True)):
        if dtype.kind != "O":
            continue
        values = [value for array in arrays for value in array.tolist()]
        wrong = next((value for value in values if not isinstance(value, str)), None)
        if wrong is not None:
            leaf = _leaf(space, index)
            msg = (
                f"The observation leaf obs{paths[index]} ({leaf}) holds "
                f"{type(wrong).__name__} values, which {what} cannot hold without "
                "pickle (it holds arrays and strings only). Keep the pool in memory, "
                "pickle it yourself if you trust the reader, or turn that leaf into "
                "arrays before recording (a gymnasium.ObservationWrapper)."
            )
            raise ValueError(msg)
        nul = next((value for value in values if value.endswith("\0")), None)
        if nul is not None:
            msg = (
                f"The observation leaf obs{paths[index]} holds a string ending in a "
                f"NUL character ({nul[-12:]!r}), which {what} would store without "
                "it (fixed-width unicode drops trailing NULs). Strip them before "
                "recording."
            )
            raise ValueError(msg)
        width = max((len(value) for value in values), default=1) or 1
        charset = _DEFAULT_CHARSET.union(*(set(value) for value in values))
        replaced[index] = spaces.Text(width, min_length=0, charset=frozenset(charset))
        converted[index] = [array.astype(f"<U{width}") for array in arrays]
    if not replaced:
        return space, converted
    return _replace(space, replaced, [0]), converted


def records(stored: spaces.Space[Any], live: spaces.Space[Any]) -> bool:
    """Whether a pool of observation space ``stored`` can record ``live``'s.

    Equal spaces with their leaves in the same order can (a ``Dict`` with the same
    keys in another order is an equal space, but its leaves would be stored under
    each other's names); so can a space loaded from a pool file where a custom
    string leaf (MiniGrid's ``MissionSpace``) came back as ``Text``
    (:func:`portable`): the same leaves, each equal, or a ``Text`` where ``live``
    stores ``object`` values (its strings are checked against the ``Text`` as
    they are recorded).

    Example:
        >>> class Mission(spaces.Space[str]):  # a custom string space
        ...     def contains(self, x): return isinstance(x, str)
        >>> image = spaces.Discrete(3)
        >>> live = spaces.Dict({"image": image, "mission": Mission()})
        >>> stored = spaces.Dict({"image": image, "mission": spaces.Text(9)})
        >>> records(stored, live), records(stored, spaces.Discrete(3))
        (True, False)
    """
    if leaf_paths(stored) != leaf_paths(live):
        return False  # a Dict's keys in another order are equal spaces, not leaves
    if stored == live:
        return True
    kinds = [dtype.kind for dtype, _ in storage_leaves(live)]
    return all(
        mine == theirs or (isinstance(mine, spaces.Text) and kind == "O")
        for mine, theirs, kind in zip(
            _leaves(stored), _leaves(live), kinds, strict=True
        )
    )


def _leaves(space: spaces.Space[Any]) -> list[spaces.Space[Any]]:
    """The leaf spaces of ``space``, in ``storage_leaves`` order."""
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in _leaves(sub)]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in _leaves(sub)]
    return [space]


def _leaf(space: spaces.Space[Any], index: int) -> spaces.Space[Any]:
    """Leaf ``index`` of ``space`` (``storage_leaves`` order)."""
    return _leaves(space)[index]


def _replace(
    space: spaces.Space[Any],
    replaced: dict[int, spaces.Space[Any]],
    counter: list[int],
) -> spaces.Space[Any]:
    """``space`` with leaf ``k`` (depth first) swapped for ``replaced[k]``."""
    if isinstance(space, spaces.Dict):
        return spaces.Dict(
            [(key, _replace(sub, replaced, counter)) for key, sub in space.items()]
        )
    if isinstance(space, spaces.Tuple):
        return spaces.Tuple([_replace(sub, replaced, counter) for sub in space.spaces])
    index = counter[0]
    counter[0] += 1
    return replaced.get(index, space)
