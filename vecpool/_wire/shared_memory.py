"""The shared block: one per vector env, laid out from the spaces, viewed as numpy.

The parent allocates a single :class:`SharedBlock` (a ``multiprocessing`` heap buffer,
backed by an already-unlinked file, so no name in ``/dev/shm`` can outlive the
processes). Every per-step array lives in it as a numpy view: actions, observations
(one view per leaf of a Dict/Tuple space), rewards, terminations and truncations.
Workers receive the block and its :class:`Layout` once, at start, and rebuild the same
views. Nothing here is allocated per step. The space-tree helpers that lay the
leaves out live in :mod:`vecpool._util.spaces`.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces

from vecpool._util.spaces import leaves
from vecpool._wire.info_columns import INFO_ROW_BYTES, INFO_SCHEMA_BYTES

__all__ = ["Field", "Layout", "SharedBlock", "cut"]

_ALIGN = 64  # one cache line: keeps every array aligned and away from its neighbour


@dataclass(frozen=True)
class Field:
    """One array in the block: byte offset, dtype and full shape (leading ``n``)."""

    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Size of the array in bytes."""
        return int(np.dtype(self.dtype).itemsize * math.prod(self.shape))


@dataclass(frozen=True)
class Layout:
    """Where each per-step array lives in a :class:`SharedBlock`.

    Attributes:
        actions: One field per action leaf (empty when actions travel by pipe).
        observations: One field per observation leaf (empty when observations
            travel by pipe or by Gymnasium's own shared memory).
        rewards: ``float64[n]``.
        terminations: ``bool[n]``.
        truncations: ``bool[n]``.
        infos: ``uint8[n, INFO_ROW_BYTES]``: each env's step info values (see
            :mod:`vecpool._wire.info_columns`).
        info_versions: ``int64[n]``: the schema id of each env's info in ``infos``
            on the last full step (0: none there).
        info_schemas: ``uint8[n, INFO_SCHEMA_BYTES]``: each env's pickled schema.
        spin_hint: ``int8[1]``: whether the workers should spin for their next
            command (written by the parent, ``SpinPolicy`` in
            vecpool/_engine/spinning.py).
        bells: ``uint32[n, 16]``: one cache line per env; the row of a worker's
            first env is its doorbell (vecpool/_wire/bell.py).
        size: Total bytes.
    """

    actions: tuple[Field, ...]
    observations: tuple[Field, ...]
    rewards: Field
    terminations: Field
    truncations: Field
    infos: Field
    info_versions: Field
    info_schemas: Field
    spin_hint: Field
    bells: Field
    size: int

    @classmethod
    def build(
        cls,
        num_envs: int,
        action_space: spaces.Space[Any] | None,
        observation_space: spaces.Space[Any] | None,
        obs_buffers: int = 1,
    ) -> Layout:
        """Lay out the block for ``num_envs`` envs.

        Args:
            num_envs: Number of sub-environments.
            action_space: Single action space to place in shared memory, or ``None``.
            observation_space: Single observation space whose array leaves to
                place (a hybrid space's other leaves are not placed), or ``None``.
            obs_buffers: Number of observation buffers (fields are buffer-major).

        Returns:
            The layout, every field aligned to 64 bytes.
        """
        offset = 0

        def place(dtype: np.dtype[Any], shape: tuple[int, ...]) -> Field:
            nonlocal offset
            field = Field(offset, dtype.str, (num_envs, *shape))
            offset += -(-max(field.nbytes, 1) // _ALIGN) * _ALIGN
            return field

        actions = tuple(
            place(dtype, shape)
            for dtype, shape in (leaves(action_space) if action_space else [])
        )
        observations = tuple(
            place(dtype, shape)
            for _ in range(obs_buffers)
            for dtype, shape in (
                leaves(observation_space, skip_foreign=True)
                if observation_space
                else []
            )
        )
        rewards = place(np.dtype(np.float64), ())
        terminations = place(np.dtype(np.bool_), ())
        truncations = place(np.dtype(np.bool_), ())
        infos = place(np.dtype(np.uint8), (INFO_ROW_BYTES,))
        info_versions = place(np.dtype(np.int64), ())
        info_schemas = place(np.dtype(np.uint8), (INFO_SCHEMA_BYTES,))
        spin_hint = Field(offset, np.dtype(np.int8).str, (1,))
        offset += _ALIGN
        bells = place(np.dtype(np.uint32), (_ALIGN // 4,))
        return cls(
            actions,
            observations,
            rewards,
            terminations,
            truncations,
            infos,
            info_versions,
            info_schemas,
            spin_hint,
            bells,
            offset,
        )


class SharedBlock:
    """A block of shared memory holding every per-step array of one vector env.

    It is a ``multiprocessing`` heap buffer: an anonymous, already-unlinked file
    mapping, inherited by (or passed to) worker processes at start. It is released
    when the last process holding it drops it; there is no name to unlink.
    """

    def __init__(self, size: int, ctx: ModuleType | Any) -> None:
        """Allocate ``size`` bytes (at least one) from ``ctx``'s shared heap.

        Args:
            size: Number of bytes.
            ctx: A ``multiprocessing`` context (or the module).
        """
        self.size = max(size, 1)
        self.raw = ctx.RawArray(ctypes.c_uint8, self.size + _ALIGN)
        # Heap blocks are only 8-byte aligned; start the layout on a cache line. The
        # mapping is page-aligned in every process, so the same base works in all.
        self.base = (-ctypes.addressof(self.raw)) % _ALIGN

    def owner(self, fields: tuple[Field, ...]) -> np.ndarray[Any, Any]:
        """One flat ``uint8`` array spanning ``fields`` (consecutive in the layout).

        Views cut from it (see :func:`cut`) keep it as their ``base``, so its
        reference count tells whether anything still uses them.

        Args:
            fields: Consecutive fields of this block's layout.

        Returns:
            The array.
        """
        start = fields[0].offset
        stop = fields[-1].offset + fields[-1].nbytes
        return np.frombuffer(
            self.raw, dtype=np.uint8, count=stop - start, offset=self.base + start
        )

    def byte(self, field: Field) -> ctypes.c_int8:
        """The first byte of ``field`` as a ``ctypes`` value (cheap to read and set).

        Args:
            field: A field of this block's layout.
        """
        return ctypes.c_int8.from_buffer(self.raw, self.base + field.offset)

    def words(self, field: Field, row: int) -> Any:
        """Row ``row`` of a ``uint32[n, 16]`` field as a ``ctypes`` array.

        Reading and writing one of its words costs a fraction of a numpy
        element access: what a spinning loop needs (vecpool/_wire/bell.py).
        """
        words = field.shape[-1]
        return (ctypes.c_uint32 * words).from_buffer(
            self.raw, self.base + field.offset + row * words * 4
        )

    def view(self, field: Field) -> np.ndarray[Any, Any]:
        """A numpy view of one field of the block.

        Args:
            field: A field of this block's layout.

        Returns:
            A writable array of ``field.shape`` and ``field.dtype`` sharing the block.
        """
        count = math.prod(field.shape)
        array = np.frombuffer(
            self.raw,
            dtype=np.dtype(field.dtype),
            count=count,
            offset=self.base + field.offset,
        )
        return array.reshape(field.shape)


def cut(
    owner: np.ndarray[Any, Any], fields: tuple[Field, ...]
) -> list[np.ndarray[Any, Any]]:
    """Fresh views of ``fields`` cut from ``owner`` (see :meth:`SharedBlock.owner`).

    Args:
        owner: The flat array spanning the fields.
        fields: The fields, consecutive in the layout.

    Returns:
        One view per field, each with ``owner`` as its base.
    """
    start = fields[0].offset
    return [
        owner[field.offset - start : field.offset - start + field.nbytes]
        .view(np.dtype(field.dtype))
        .reshape(field.shape)
        for field in fields
    ]
