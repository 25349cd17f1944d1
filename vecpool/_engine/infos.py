"""The parent's info merging: pickled infos and the rows in shared memory.

Gymnasium's rules (``VectorEnv._add_info``) for ``num_envs`` rows, fed by the infos
that came pickled and by the step infos the workers wrote into their envs' rows of
the shared block (vecpool/_wire/info_columns.py) or into a worker's wide area
(vecpool/_wire/wide_infos.py).
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.vector import VectorEnv

from vecpool._wire.info_columns import InfoSchema, read_schema
from vecpool._wire.shared_memory import Layout, SharedBlock

__all__ = ["InfoReader", "merge_infos"]

_MAX_SCHEMAS = 1024
"""Info schemas the parent keeps loaded (more: it starts over)."""


class _InfoMerger:
    """Gymnasium's info merging (``VectorEnv._add_info``) for ``num_envs`` rows."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def _add_info(
        self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int
    ) -> dict[str, Any]:
        merged: dict[str, Any] = VectorEnv._add_info(
            self,  # type: ignore[arg-type]  # duck-typed: it only reads num_envs
            vector_infos,
            env_info,
            env_num,
        )
        return merged


def merge_infos(items: list[tuple[int, dict[str, Any]]], count: int) -> dict[str, Any]:
    """Merge per-env infos with Gymnasium's rules into arrays of ``count`` rows.

    Args:
        items: ``(row, info)`` pairs; empty infos are skipped.
        count: Number of rows.

    Returns:
        The batched infos (with ``_key`` masks).
    """
    infos: dict[str, Any] = {}
    merger = _InfoMerger(count)
    for row, info in items:
        if info:
            infos = merger._add_info(infos, info, row)
    return infos


class InfoReader:
    """Reads the infos of a step or a ``recv`` batch, pickled and in shared memory.

    Attributes:
        info_rows: Each env's info row.
        info_ids: Each env's info schema id (0: its info came pickled or is empty).
        info_schema_areas: Each env's schema area (a new schema is pickled there).
    """

    def __init__(self, num_envs: int, block: SharedBlock, layout: Layout) -> None:
        """Views of ``layout``'s info fields in ``block``."""
        self.num_envs = num_envs
        self.info_rows = block.view(layout.infos)
        self.info_ids = block.view(layout.info_versions)
        self.info_schema_areas = block.view(layout.info_schemas)
        self._info_schemas: dict[int, InfoSchema] = {}  # by id
        # the hot path: every env's info of one schema, read as one record array
        self._uniform: tuple[int, InfoSchema, Any] | None = None

    def merge(
        self,
        handles: Sequence[Any],
        items: list[tuple[int, dict[str, Any]]],
        ids: list[int] | None,
    ) -> dict[str, Any]:
        """Merge pickled infos with those in shared memory, as Gymnasium does.

        Args:
            handles: The worker handles (for wide rows).
            items: ``(row, info)`` of the infos that came pickled.
            ids: The envs of the result's rows: ``None`` for a full step (every
                env, whose info id says whether its info is in shared memory),
                or a ``recv`` batch's envs (each env's own row, untouched until
                it is sent again: vecpool/_wire/info_columns.py).

        Returns:
            The batched infos (``_key`` masks included).
        """
        if ids is None and not items:  # a full step: each env's row is its own
            merged = self._merge_uniform()
            if merged is not None:
                return merged
        if ids is None:
            count = self.num_envs
            envs = rows = np.flatnonzero(self.info_ids)
            schema_ids = self.info_ids[envs]
        else:
            count = len(ids)
            chosen = np.asarray(ids, np.intp)
            all_ids = self.info_ids[chosen]
            rows = np.flatnonzero(all_ids)
            envs, schema_ids = chosen[rows], all_ids[rows]
        if not envs.size:
            return merge_infos(items, count) if items else {}
        return self._merge_rows(handles, items, envs, rows, schema_ids, count)

    def _merge_rows(
        self,
        handles: Sequence[Any],
        items: list[tuple[int, dict[str, Any]]],
        envs: npt.NDArray[np.intp],
        rows: npt.NDArray[np.intp],
        schema_ids: npt.NDArray[np.int64],
        count: int,
    ) -> dict[str, Any]:
        """Merge pickled ``items`` with the infos in the shared rows of ``envs``.

        Args:
            handles: The worker handles (for wide rows).
            items: ``(row, info)`` of the infos that came pickled.
            envs: The envs whose infos are in shared memory (ascending rows).
            rows: Their rows in the result (``envs`` itself for a full step).
            schema_ids: Their schema ids.
            count: Rows of the result.

        Returns:
            Gymnasium's merged infos: one assignment per key when every env has
            one schema and nothing came pickled; else each row decoded and merged
            in row order, as Gymnasium does.
        """
        first_id = int(schema_ids[0])
        if not items and (schema_ids == first_id).all():  # one schema
            first = self._schema(first_id, int(envs[0]))
            if not first.wide:
                return first.merge(self.info_rows[envs], rows, count)
            if rows is envs:  # a full step: each worker's wide rows as one part
                return first.merge_parts(_wide_parts(handles, envs), count)
        for row, env, schema_id in zip(
            rows.tolist(), envs.tolist(), schema_ids.tolist(), strict=True
        ):
            schema = self._schema(schema_id, env)
            data = _wide_row(handles, env) if schema.wide else self.info_rows[env]
            items.append((row, schema.decode(data)))
        items.sort(key=operator.itemgetter(0))  # row order, as Gymnasium merges
        return merge_infos(items, count)

    def _merge_uniform(self) -> dict[str, Any] | None:
        """The merge when every info is in its env's row with one schema, or ``None``.

        The common step (every env returns the same keys, or an empty info on a
        reset step): the rows are read as one record array, kept per schema, and
        each key is one copy.
        """
        info_ids = self.info_ids
        first = info_ids[0] or info_ids.max()  # positive ids; 0: none in a row
        if not first:
            return None
        present = info_ids == first
        if np.count_nonzero(present) != np.count_nonzero(info_ids):
            return None  # a second schema
        cached = self._uniform
        if cached is None or cached[0] != first:
            env = int(np.argmax(present))
            schema = self._schema(int(first), env)
            if schema.wide:
                return None
            cached = self._uniform = (first, schema, schema.records(self.info_rows))
        return cached[1].merge_all(cached[2], present)

    def _schema(self, schema_id: int, env: int) -> InfoSchema:
        """The info schema ``schema_id`` (read from ``env``'s area when new)."""
        schema = self._info_schemas.get(schema_id)
        if schema is None:
            if len(self._info_schemas) >= _MAX_SCHEMAS:  # keys that change every step
                self._info_schemas.clear()
            schema = pickle.loads(read_schema(self.info_schema_areas[env]))
            self._info_schemas[schema_id] = schema
        return schema

    def release(self) -> None:
        """Drop the views of the shared block (no info is left to read)."""
        self.info_ids = np.zeros_like(self.info_ids)
        self.info_rows = self.info_schema_areas = np.zeros((0, 0), np.uint8)
        self._uniform = None  # a view of the block


def _wide_area(handle: Any) -> npt.NDArray[np.uint8]:
    """``handle``'s wide info rows (an id naming a wide schema implies them)."""
    if handle.info_wide is None:
        msg = (
            f"Worker {handle.index} wrote a wide info without an accepted area; "
            "please report this as a bug in vecpool."
        )
        raise RuntimeError(msg)
    return handle.info_wide  # type: ignore[no-any-return]


def _wide_row(handles: Sequence[Any], env: int) -> npt.NDArray[np.uint8]:
    """Env ``env``'s wide info row (a view of its worker's area)."""
    for handle in handles:
        if env in handle.env_indices:
            row: npt.NDArray[np.uint8] = _wide_area(handle)[
                env - handle.env_indices.start
            ]
            return row
    msg = f"No worker hosts env {env}."
    raise RuntimeError(msg)


def _wide_parts(
    handles: Sequence[Any], envs: npt.NDArray[np.intp]
) -> list[tuple[npt.NDArray[np.intp] | slice, npt.NDArray[np.uint8]]]:
    """The wide rows of ``envs`` (ascending), one part per worker hosting some.

    A worker's envs that are consecutive come as a slice and a view of its area
    (no copy here: the merge copies once, into the arrays it hands out).
    """
    parts: list[tuple[npt.NDArray[np.intp] | slice, npt.NDArray[np.uint8]]] = []
    for handle in handles:
        start, stop = handle.env_indices.start, handle.env_indices.stop
        low, high = np.searchsorted(envs, (start, stop))
        if low == high:
            continue
        area = _wide_area(handle)
        mine = envs[low:high]
        first, last = int(mine[0]), int(mine[-1])
        if last - first + 1 == len(mine):
            rows = area[first - start : last + 1 - start]
            parts.append((slice(first, last + 1), rows))
        else:
            parts.append((mine, area[mine - start]))
    return parts
