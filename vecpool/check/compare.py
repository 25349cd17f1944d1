"""Exact comparison of nested results that names the first difference and its env."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Difference", "Located", "describe", "first_difference", "without_keys"]

_MAX_TEXT = 160


class Located:
    """Mixin for a finding with a place: ``fields()`` for a ``CheckFailure``."""

    env_index: int | None
    where: str | None
    expected: str | None
    got: str | None

    def fields(self) -> dict[str, Any]:
        """The place and values, as :class:`~vecpool.check.CheckFailure` fields."""
        return {
            "env_index": self.env_index,
            "where": self.where,
            "expected": self.expected,
            "got": self.got,
        }


@dataclasses.dataclass(frozen=True)
class Difference(Located):
    """Where two results first differ.

    Attributes:
        where: The path of the differing value, e.g. ``"observations[3]"``.
        kind: ``"value"``, ``"dtype"``, ``"shape"``, ``"type"``, ``"keys"`` or
            ``"length"``.
        expected: The expected value there, as short text.
        got: The value under test there, as short text.
        env_index: The sub-environment (the batch row), where there is one.
    """

    where: str
    kind: str
    expected: str
    got: str
    env_index: int | None


def describe(value: Any) -> str:
    """Short text for ``value``: arrays with dtype, long text cut."""
    if isinstance(value, np.ndarray):
        body = np.array2string(
            value, threshold=12, edgeitems=3, max_line_width=_MAX_TEXT
        )
        text = f"array({body}, dtype={value.dtype})"
    elif isinstance(value, np.generic):
        text = (
            f"{value.dtype}({value.item()!r})"
            if value.dtype.kind != "O"
            else repr(value)
        )
    else:
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def first_difference(
    expected: Any, got: Any, where: str, num_envs: int, env_index: int | None = None
) -> Difference | None:
    """Compare ``got`` with ``expected`` exactly (types, dtypes, shapes, NaN == NaN).

    The batch axis is axis 0 of every array whose first dimension is ``num_envs``;
    the row where such an array first differs names the env.

    Args:
        expected: The reference value (dicts, tuples, lists, arrays, scalars).
        got: The value under test.
        where: The path of ``expected``, for the report.
        num_envs: The batch size.
        env_index: The env already named by an enclosing value, if any.

    Returns:
        The first difference found, or ``None`` if the values are equal.
    """

    def differ(
        kind: str, left: Any, right: Any, index: int | None = env_index
    ) -> Difference:
        return Difference(where, kind, describe(left), describe(right), index)

    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return differ("type", type(expected).__name__, type(got).__name__)
        if set(expected) != set(got):
            return differ("keys", sorted(map(str, expected)), sorted(map(str, got)))
        for key in expected:
            found = first_difference(
                expected[key], got[key], f"{where}[{key!r}]", num_envs, env_index
            )
            if found is not None:
                return found
        return None
    if isinstance(expected, (tuple, list)):
        if type(got) is not type(expected):
            return differ("type", type(expected).__name__, type(got).__name__)
        if len(expected) != len(got):
            return differ("length", len(expected), len(got))
        for index, (left, right) in enumerate(zip(expected, got, strict=True)):
            found = first_difference(
                left, right, f"{where}[{index}]", num_envs, env_index
            )
            if found is not None:
                return found
        return None
    if isinstance(expected, np.ndarray):
        return _array_difference(expected, got, where, num_envs, env_index)
    if type(expected) is not type(got):
        return differ(
            "type",
            f"{describe(expected)} ({type(expected).__name__})",
            f"{describe(got)} ({type(got).__name__})",
        )
    if not _scalars_equal(expected, got):
        return differ("value", expected, got)
    return None


def _scalars_equal(left: Any, right: Any) -> bool:
    try:
        equal = left == right
        if isinstance(equal, np.ndarray):
            return bool(equal.all())
        if bool(equal):
            return True
    except Exception:  # noqa: BLE001 - an object without a usable == is compared by identity
        return left is right
    try:
        return bool(np.isnan(left) and np.isnan(right))
    except (TypeError, ValueError):
        return False


def _array_difference(
    expected: np.ndarray[Any, Any],
    got: Any,
    where: str,
    num_envs: int,
    env_index: int | None,
) -> Difference | None:
    def differ(
        kind: str, left: Any, right: Any, index: int | None = env_index
    ) -> Difference:
        return Difference(where, kind, describe(left), describe(right), index)

    if not isinstance(got, np.ndarray):
        return differ("type", f"ndarray of {expected.dtype}", type(got).__name__)
    if expected.dtype != got.dtype:
        return differ("dtype", expected.dtype, got.dtype)
    if expected.shape != got.shape:
        return differ("shape", expected.shape, got.shape)
    batched = env_index is None and expected.ndim >= 1 and expected.shape[0] == num_envs
    if expected.dtype.kind == "O":
        for flat, (left, right) in enumerate(zip(expected.flat, got.flat, strict=True)):
            position = np.unravel_index(flat, expected.shape)
            row = int(position[0]) if batched else env_index
            found = first_difference(
                left, right, f"{where}[{', '.join(map(str, position))}]", num_envs, row
            )
            if found is not None:
                return found
        return None
    equal = expected == got
    if expected.dtype.kind in "fc":
        equal |= np.isnan(expected) & np.isnan(got)
    if bool(np.all(equal)):
        return None
    if expected.ndim == 0:
        return differ("value", expected, got)
    rows = ~np.reshape(equal, (expected.shape[0], -1)).all(axis=1)
    row = int(np.argmax(rows))
    return Difference(
        f"{where}[{row}]",
        "value",
        describe(expected[row]),
        describe(got[row]),
        row if batched else env_index,
    )


def without_keys(infos: Any, paths: tuple[str, ...]) -> Any:
    """``infos`` without the dotted ``paths`` (e.g. ``"episode.t"``) and their masks.

    The dicts on the way are copied; ``infos`` itself is left as it was.
    """
    if not paths or not isinstance(infos, dict):
        return infos
    stripped = dict(infos)
    for path in paths:
        head, _, rest = path.partition(".")
        if head not in stripped:
            continue
        if rest:
            stripped[head] = without_keys(stripped[head], (rest,))
        else:
            del stripped[head]
            stripped.pop(f"_{head}", None)
    return stripped
