"""Step infos in shared memory: a learned schema per env, values in fixed slots.

Most envs return an info of the same shape on every step: the same keys, each a
Python or numpy number or a small numpy array (ALE's ``lives`` and frame numbers,
MuJoCo's reward terms). Pickling such an info in the worker and merging it with
Gymnasium's ``VectorEnv._add_info`` in the parent is most of what an info costs.
Here, instead:

* **The worker** learns an :class:`InfoSchema` from an env's info (keys, in order,
  each value's exact type, dtype and shape) and writes the values of every later
  info of that schema into the env's row of fixed byte slots in the shared block.
  When the schema changes, the new one is pickled into the env's schema area of
  the block under an id that hashes its content (:func:`write_schema`: equal
  schemas share it across envs, workers and replacements; different ones never
  do); the id of each env's info (0: none here) is written on every full step.
* **The parent** reads the ids after the step's replies, loads a schema only when
  an id is new to it, and rebuilds Gymnasium's merged dict from the rows.
  When every env with a columned info shares one schema and no info came pickled,
  each key is one numpy assignment (:meth:`InfoSchema.merge`); otherwise each row is
  decoded back into an info equal to the env's own (same types, same values) and
  merged in env order with the pickled ones, exactly as Gymnasium does.

What cannot go here travels pickled, as before: nested dicts (``episode``,
``final_info``), ``final_obs``, strings and other objects, non-``str`` keys,
integers beyond ``int64``, numpy scalars that are not numbers (``np.bool_``: Gymnasium
makes an object array of those), arrays of objects, and anything larger than
:data:`INFO_WIDE_MAX_BYTES`.

A schema larger than a row (:attr:`InfoSchema.wide`: a frame, a depth map) needs a
*wide* row, in a memory area its worker offers once it meets one
(vecpool/_wire/wide_infos.py): until the parent has mapped that area, such infos
travel pickled.
The merged dict is therefore the one Gymnasium builds, key order and dtypes
included; the arrays in it are new on every step.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from dataclasses import astuple, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "INFO_ROW_BYTES",
    "INFO_SCHEMA_BYTES",
    "INFO_WIDE_MAX_BYTES",
    "InfoSchema",
    "read_schema",
    "write_schema",
]

INFO_ROW_BYTES = 256
"""Bytes of values per env (32 numbers; an info needing more travels pickled)."""

INFO_WIDE_MAX_BYTES = 1 << 26
"""Bytes of values per env at most in a wide row (64 MiB): more travels pickled."""

_COPY_MIN_BYTES = 512  # arrays at least this large are copied by numpy, not bytes

INFO_SCHEMA_BYTES = 2048
"""Bytes of each env's schema area: a 4-byte length, then the pickled schema."""

_PYTHON: dict[type, tuple[str, np.dtype[Any]]] = {
    int: ("q", np.dtype(int)),
    float: ("d", np.dtype(float)),
    bool: ("?", np.dtype(bool)),
}
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One key of a schema: where its value lives in the row and how it merges."""

    key: str
    type: type
    stored: str  # the dtype of the bytes in the row
    shape: tuple[int, ...]  # () for a number
    offset: int
    nbytes: int
    merged: str  # the dtype of Gymnasium's batched array (type(value) or the dtype)

    @property
    def is_array(self) -> bool:
        return self.type is np.ndarray


def _entry(key: Any, value: Any, offset: int) -> _Entry | None:
    """The schema entry of one info item, or ``None`` if it must travel pickled."""
    if type(key) is not str or key == "final_obs":
        return None
    kind = type(value)
    if kind in _PYTHON:
        code, dtype = _PYTHON[kind]
        if kind is int and not -(2**63) <= value < 2**63:
            return None
        size = struct.calcsize(code)
        return _Entry(key, kind, dtype.str, (), offset, size, dtype.str)
    if issubclass(kind, np.number):
        scalar = np.dtype(kind)
        # numpy's own scalar types only (a subclass would be pickled by name in the
        # schema; the value itself pickles as its numpy base)
        if scalar.kind not in "iufc" or scalar.type is not kind:  # timedelta64, ...
            return None
        return _Entry(key, kind, scalar.str, (), offset, scalar.itemsize, scalar.str)
    if (
        kind is np.ndarray
        and value.dtype.kind in "biufc"
        and all(size < 2**31 for size in value.shape)  # what a record can lay out
    ):
        stored = value.dtype.str
        return _Entry(key, kind, stored, value.shape, offset, value.nbytes, stored)
    return None


class InfoSchema:
    """The keys of an info, in order, each with its exact type, dtype and shape.

    Example:
        >>> import numpy as np
        >>> ram = np.arange(4, dtype=np.uint8)
        >>> info = {"lives": 3, "score": np.float32(1.5), "ram": ram}
        >>> schema = InfoSchema.learn(info)
        >>> row = np.zeros(INFO_ROW_BYTES, np.uint8)
        >>> schema.write(info, memoryview(row), 0)
        True
        >>> decoded = schema.decode(row)
        >>> decoded["lives"], type(decoded["score"]).__name__, decoded["ram"].tolist()
        (3, 'float32', [0, 1, 2, 3])
        >>> schema.write({"lives": 2}, memoryview(row), 0)  # another schema
        False

    Attributes:
        entries: One entry per key, in the info's order.
        nbytes: Bytes of the row the values take.
    """

    __slots__ = (
        "_keys",
        "_pack_all",
        "_packers",
        "_records",
        "_types",
        "entries",
        "nbytes",
        "wide",
    )

    def __init__(self, entries: tuple[_Entry, ...]) -> None:
        """A schema of ``entries`` (see :meth:`learn`)."""
        self.entries = entries
        self.nbytes = sum(entry.nbytes for entry in entries)
        self.wide = self.nbytes > INFO_ROW_BYTES
        self._keys = tuple(entry.key for entry in entries)
        self._types = tuple(entry.type for entry in entries)
        self._packers = tuple(
            struct.Struct("=" + _PYTHON[entry.type][0]).pack_into
            if entry.type in _PYTHON
            else None
            for entry in entries
        )
        # Python numbers only (the common case: ALE's lives and frame numbers):
        # one pack for the whole row ("=": no padding, as the offsets are laid out)
        self._pack_all = (
            struct.Struct(
                "=" + "".join(_PYTHON[entry.type][0] for entry in entries)
            ).pack_into
            if all(entry.type in _PYTHON for entry in entries)
            else None
        )
        # the row as a numpy record, by row size (a row or a wide row's stride),
        # for the parent's one-assignment-per-key merge
        self._records: dict[int, np.dtype[Any]] = {}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle the entries as plain tuples (compact; the packers are rebuilt)."""
        return (_schema_from_tuples, (tuple(astuple(entry) for entry in self.entries),))

    def __eq__(self, other: object) -> bool:
        """Schemas with the same entries are equal."""
        return isinstance(other, InfoSchema) and self.entries == other.entries

    def __hash__(self) -> int:
        """Hash of the entries."""
        return hash(self.entries)

    @classmethod
    def learn(cls, info: dict[Any, Any]) -> InfoSchema | None:
        """The schema of ``info``, or ``None`` if some item must travel pickled."""
        entries = []
        offset = 0
        for key, value in info.items():
            if f"_{key}" in info:
                # a key that is another's mask: Gymnasium's merge then reuses one
                # array for both, which only the pickled path reproduces
                return None
            entry = _entry(key, value, offset)
            if entry is None:
                return None
            entries.append(entry)
            offset += entry.nbytes
        if not entries or offset > INFO_WIDE_MAX_BYTES:
            return None
        return cls(tuple(entries))

    def _record(self, itemsize: int) -> np.dtype[Any]:
        """The numpy record of a row of ``itemsize`` bytes holding this schema."""
        record = self._records.get(itemsize)
        if record is None:
            record = self._records[itemsize] = np.dtype(
                {
                    "names": list(self._keys),
                    "formats": [(entry.stored, entry.shape) for entry in self.entries],
                    "offsets": [entry.offset for entry in self.entries],
                    "itemsize": itemsize,
                }
            )
        return record

    def write(self, info: dict[Any, Any], row: memoryview, base: int) -> bool:
        """Write ``info``'s values at ``row[base:]`` if it has this schema.

        Returns:
            Whether it had this schema (else the row holds garbage: the caller
            marks it unused).
        """
        entries = self.entries
        if len(info) != len(entries):
            return False
        pack_all = self._pack_all
        if pack_all is not None:
            values = info.values()
            if tuple(info) != self._keys or tuple(map(type, values)) != self._types:
                return False
            try:
                pack_all(row, base, *values)
            except struct.error:  # an int beyond int64
                return False
            return True
        packers = self._packers
        for (key, value), entry, pack in zip(
            info.items(), entries, packers, strict=True
        ):
            if key != entry.key or type(value) is not entry.type:
                return False
            start = base + entry.offset
            if pack is not None:
                try:
                    pack(row, start, value)
                except struct.error:  # an int beyond int64
                    return False
            else:
                number: Any = value  # a numpy scalar or array (exact type checked)
                if entry.type is np.ndarray and (
                    number.dtype.str != entry.stored or number.shape != entry.shape
                ):
                    return False
                if entry.nbytes >= _COPY_MIN_BYTES:  # one copy, no bytes object
                    target = np.frombuffer(
                        row, np.uint8, count=entry.nbytes, offset=start
                    )
                    target.view(number.dtype).reshape(entry.shape)[...] = number
                else:
                    row[start : start + entry.nbytes] = number.tobytes()
        return True

    def decode(self, row: npt.NDArray[np.uint8]) -> dict[str, Any]:
        """The info a row holds: the same keys, types and values the env returned."""
        info: dict[str, Any] = {}
        for entry in self.entries:
            raw = row[entry.offset : entry.offset + entry.nbytes]
            values = raw.view(np.dtype(entry.stored))
            if entry.is_array:
                info[entry.key] = values.reshape(entry.shape).copy()
            elif entry.type in _PYTHON:
                info[entry.key] = entry.type(values[0])
            else:  # the numpy scalar type itself (np.longlong, not np.int64)
                info[entry.key] = raw.view(np.dtype(entry.type))[0]
        return info

    def merge(
        self, rows: npt.NDArray[np.uint8], envs: npt.NDArray[np.intp], num_envs: int
    ) -> dict[str, Any]:
        """Gymnasium's merged infos when the envs ``envs`` alone have an info.

        Args:
            rows: Their rows (``[len(envs), row bytes]``).
            envs: The env indices, ascending.
            num_envs: Rows of each batched array.

        Returns:
            For each key, a new array of ``num_envs`` rows (zeros elsewhere) and its
            ``_key`` mask, in Gymnasium's order.
        """
        return self.merge_parts([(envs, rows)], num_envs)

    def records(self, rows: npt.NDArray[np.uint8]) -> Any:
        """``rows`` (``[n, row bytes]``, C-contiguous) as this schema's columns.

        Views, nothing copied: ``(key, values, merged dtype)`` per key, in order.
        """
        records = rows.view(self._record(rows.shape[1]))[:, 0]
        return [
            (entry.key, f"_{entry.key}", records[entry.key], np.dtype(entry.merged))
            for entry in self.entries
        ]

    def merge_all(self, records: Any, present: npt.NDArray[np.bool_]) -> dict[str, Any]:
        """:meth:`merge` of every env's row, where ``present`` envs have an info.

        The others' rows hold whatever an earlier step left: their values become
        zeros and their masks False, as Gymnasium merges an env without the key.

        Args:
            records: Every env's row, by key (:meth:`records`).
            present: Which envs have an info of this schema (the rest: none).
        """
        infos: dict[str, Any] = {}
        absent = None if present.all() else ~present
        for key, mask_key, values, merged in records:
            array = values.astype(merged)
            if absent is not None:
                array[absent] = 0
            infos[key] = array
            infos[mask_key] = present.copy()
        return infos

    def merge_parts(
        self,
        parts: list[tuple[npt.NDArray[np.intp] | slice, npt.NDArray[np.uint8]]],
        num_envs: int,
    ) -> dict[str, Any]:
        """:meth:`merge` of rows that lie in several places (wide rows: per worker).

        Args:
            parts: ``(envs, rows)`` pairs: env indices (ascending, or a slice) and
                their rows (``[count, row bytes]``, C-contiguous: copies or views
                of shared memory, never handed out).
            num_envs: Rows of each batched array.

        Returns:
            As :meth:`merge`.
        """
        infos: dict[str, Any] = {}
        count = sum(len(rows) for _, rows in parts)
        everyone = count == num_envs  # envs are ascending and distinct: all of them
        records = [
            (envs, rows.view(self._record(rows.shape[1]))[:, 0]) for envs, rows in parts
        ]
        for entry in self.entries:
            merged = np.dtype(entry.merged)
            if everyone and len(records) == 1:
                array = records[0][1][entry.key].astype(merged, copy=True)
                mask = np.ones(num_envs, np.bool_)
            else:
                array = (np.empty if everyone else np.zeros)(
                    (num_envs, *entry.shape), merged
                )
                mask = np.full(num_envs, everyone, np.bool_)
                for envs, values in records:
                    array[envs] = values[entry.key]
                    mask[envs] = True
            infos[entry.key] = array
            infos[f"_{entry.key}"] = mask
        return infos


def _schema_from_tuples(entries: tuple[tuple[Any, ...], ...]) -> InfoSchema:
    """Rebuild a pickled :class:`InfoSchema` (see ``InfoSchema.__reduce__``)."""
    return InfoSchema(tuple(_Entry(*entry) for entry in entries))


def write_schema(schema: InfoSchema, area: memoryview) -> int:
    """Pickle ``schema`` into an env's schema area and return its id.

    The id is a 63-bit hash of the pickle: envs (and workers, and their
    replacements) with equal schemas share it, so the parent merges them as one,
    and different schemas never share one (short of a 2**-63 collision).

    Returns:
        The id (never 0), or 0 if the schema does not fit the area.
    """
    data = pickle.dumps(schema, protocol=pickle.HIGHEST_PROTOCOL)
    if _LENGTH.size + len(data) > len(area):
        return 0
    _LENGTH.pack_into(area, 0, len(data))
    area[_LENGTH.size : _LENGTH.size + len(data)] = data
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1 | 1


def read_schema(area: npt.NDArray[np.uint8]) -> bytes:
    """The pickled schema in an env's schema area (see :func:`write_schema`)."""
    (length,) = _LENGTH.unpack_from(area.data, 0)
    return bytes(area[_LENGTH.size : _LENGTH.size + length])
