"""Pool files: :meth:`ReplayPool.save` and :meth:`ReplayPool.load`, without pickle.

A pool file is an ``.npz`` archive (read with ``allow_pickle=False``): one ``config``
member, JSON bytes holding the format, the constructor arguments, both spaces (as
plain dicts, :func:`space_to_dict`) and the generator state; then one array per
field of the pool. :func:`read` checks every one of them against a pool built from
that header, so a truncated, corrupted, forged or other-version file raises one
:class:`ValueError` naming the file and what is wrong, and nothing in a file can run
code. Files of format 2 (vecpool 0.1) kept the spaces as a pickle: they load only
with ``trusted=True``.

It never imports the pool: it works on any :class:`StoredPool`, through the
pool's public state (:meth:`ReplayPool.state_dict`, :meth:`ReplayPool.load_state_dict`).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.files import write_atomically
from vecpool._util.spaces import storage_leaves
from vecpool.replay.portable import portable

__all__ = [
    "COUNTERS",
    "FORMAT",
    "StoredPool",
    "per_row",
    "read",
    "space_from_dict",
    "space_to_dict",
    "write",
]


class StoredPool(Protocol):
    """What a pool file is written from and read into (:class:`ReplayPool` is one)."""

    num_envs: int
    pool_size: int
    window_size: int | None
    clearing_freq: int | None
    window_size_: int | None
    random: bool
    store_next_obs: bool
    capacity: int
    observation_space: spaces.Space[Any]
    action_space: spaces.Space[Any]
    generator_state: dict[str, Any]

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """Every array of the pool, by its name in a pool file."""
        ...

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], *, compact: bool
    ) -> None:
        """Take the (checked) arrays of a file."""
        ...

    def filled_rows(
        self, length: npt.NDArray[np.int64], end: npt.NDArray[np.int64] | None
    ) -> npt.NDArray[np.int64]:
        """The rows of every sub-pool, oldest to newest."""
        ...


FORMAT = "vecpool.ReplayPool/3"  # 3: JSON header, no pickle
_PICKLED_FORMAT = "vecpool.ReplayPool/2"
COUNTERS = (
    "reward",
    "terminated",
    "truncated",
    "end",
    "length",
    "received",
    "episode_return",
    "episode_length",
    "episodes",
)
_ARGUMENTS = (
    "num_envs",
    "pool_size",
    "window_size",
    "clearing_freq",
    "window_size_",
    "random",
    "store_next_obs",
)


class _BadFile(Exception):
    """What is wrong with a file (becomes the ValueError that names it)."""


# -- spaces as plain data --------------------------------------------------------------


def space_to_dict(space: spaces.Space[Any]) -> dict[str, Any]:
    """A JSON-able description of a space a ReplayPool can store.

    Args:
        space: Box, Discrete, MultiDiscrete, MultiBinary, Text, or a Dict/Tuple
            nest of them.

    Returns:
        A dict of plain lists, numbers and strings; :func:`space_from_dict` rebuilds
        an equal space from it.

    Raises:
        ValueError: For any other space.
    """
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": space.dtype.str,
        }
    if isinstance(space, spaces.Discrete):
        return {
            "type": "Discrete",
            "n": int(space.n),
            "start": int(space.start),
            "dtype": space.dtype.str,
        }
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": space.dtype.str,
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Text):
        return {
            "type": "Text",
            "max_length": int(space.max_length),
            "min_length": int(space.min_length),
            "charset": "".join(sorted(space.character_set)),
        }
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_dict(s) for s in space.spaces]}
    if isinstance(space, spaces.Dict):
        return {
            "type": "Dict",
            "spaces": [[key, space_to_dict(s)] for key, s in space.spaces.items()],
        }
    msg = (
        f"{space} has no pool-file form (a pool file holds array and Text spaces, "
        "and Dict/Tuple nests of them)."
    )
    raise ValueError(msg)


def space_from_dict(data: Any) -> spaces.Space[Any]:
    """Rebuild a space from :func:`space_to_dict`'s description.

    Args:
        data: The description (as read back from JSON).

    Returns:
        The space.

    Raises:
        ValueError: If ``data`` describes no space (unknown type, missing or bad
            fields).
    """
    try:
        kind = data["type"]
        if kind == "Box":
            dtype = np.dtype(data["dtype"])
            low = np.asarray(data["low"], dtype)
            high = np.asarray(data["high"], dtype)
            return spaces.Box(low, high, tuple(data["shape"]), dtype)
        if kind == "Discrete":
            dtype = np.dtype(data["dtype"])
            if dtype == np.int64:  # the default (Gymnasium 1.0 takes no dtype)
                return spaces.Discrete(int(data["n"]), start=int(data["start"]))
            return spaces.Discrete(
                int(data["n"]), start=int(data["start"]), dtype=dtype
            )
        if kind == "MultiDiscrete":
            dtype = np.dtype(data["dtype"])
            return spaces.MultiDiscrete(
                np.asarray(data["nvec"], dtype), dtype, start=np.asarray(data["start"])
            )
        if kind == "MultiBinary":
            return spaces.MultiBinary(data["n"])
        if kind == "Text":
            max_length, min_length = data["max_length"], data["min_length"]
            charset = data["charset"]
            if (
                type(max_length) is not int
                or type(min_length) is not int
                or not 0 <= min_length <= max_length <= _MAX_TEXT
                or not isinstance(charset, str)
                or not charset
            ):
                msg = "a Text space needs 0 <= min_length <= max_length and a charset"
                raise ValueError(msg)
            return spaces.Text(max_length, min_length=min_length, charset=charset)
        if kind == "Tuple":
            return spaces.Tuple([space_from_dict(s) for s in data["spaces"]])
        if kind == "Dict":  # pairs, not a mapping: Gymnasium would sort a mapping
            return spaces.Dict([(key, space_from_dict(s)) for key, s in data["spaces"]])
    except (
        KeyError,
        TypeError,
        ValueError,
        AssertionError,
        OverflowError,
        RecursionError,
        MemoryError,
    ) as exc:
        msg = f"bad space description {_short(data)}: {type(exc).__name__}: {exc}"
        raise ValueError(msg) from exc
    msg = f"unknown space type in {_short(data)}"
    raise ValueError(msg)


def _short(data: Any) -> str:
    try:
        text = repr(data)
    except RecursionError:
        return "<nested too deeply>"
    return text if len(text) <= 120 else text[:117] + "..."


# -- writing ---------------------------------------------------------------------------


def write(
    pool: StoredPool, path: str | os.PathLike[str], *, compress: bool = False
) -> Path:
    """Write ``pool`` to ``path`` atomically (see :meth:`ReplayPool.save`).

    Only the filled rows are written, each sub-pool's oldest to newest, so a file
    holds about the bytes of its transitions whatever the capacity.

    Args:
        pool: The pool.
        path: Destination file (written as given; no suffix is added).
        compress: Deflate the archive (``numpy.savez_compressed``).

    Returns:
        The path written.
    """
    state = pool.state_dict()
    rows = pool.filled_rows(state["length"], state.pop("end"))
    for name in list(state):
        if per_row(name):
            state[name] = state[name][rows]
    # string leaves as unicode under a Text space; any other object leaf refused
    # here, before anything is written (vecpool/replay/portable.py)
    observation_space = pool.observation_space
    groups = ("obs", "next_obs", "tail", "extra")
    names = [
        [f"{group}_{index}" for group in groups if f"{group}_{index}" in state]
        for index in range(len(storage_leaves(observation_space)))
    ]
    observation_space, columns = portable(
        observation_space,
        [[state[name] for name in leaf] for leaf in names],
        "a pool file",
    )
    for leaf, converted in zip(names, columns, strict=True):
        state.update(zip(leaf, converted, strict=True))
    header = {
        "format": FORMAT,
        **{name: getattr(pool, name) for name in _ARGUMENTS},
        "observation_space": space_to_dict(observation_space),
        "action_space": space_to_dict(pool.action_space),
        "rng": pool.generator_state,
    }
    arrays = {"config": np.frombuffer(json.dumps(header).encode(), np.uint8), **state}
    savez: Any = np.savez_compressed if compress else np.savez  # stubs refuse **
    return write_atomically(Path(path), lambda handle: savez(handle, **arrays))


def per_row(name: str) -> bool:
    """Whether a state array has one entry per row of the pool (vs per env)."""
    return name in ("reward", "terminated", "truncated", "own_next") or (
        name.split("_")[0] in ("obs", "action") or name.startswith("next_obs_")
    )


# -- reading ---------------------------------------------------------------------------


def read(
    cls: Callable[..., StoredPool], path: str | os.PathLike[str], trusted: bool
) -> Any:
    """Read a pool file, checking every field (see :meth:`ReplayPool.load`).

    Args:
        cls: The pool class (or any callable building a :class:`StoredPool` from
            ``(observation_space, action_space, **settings)``).
        path: The file.
        trusted: Allow the pickled spaces of a format-2 file.

    Returns:
        The pool.

    Raises:
        ValueError: If the file is not a whole, consistent pool file of a format
            this vecpool reads (the message names the file and the problem).
        OSError: If the file cannot be opened (e.g. it does not exist).
    """
    try:
        with open(path, "rb") as handle:  # OSError (missing file, ...) passes
            data = _members(handle)
        header = _header(data)
        if header["format"] == _PICKLED_FORMAT:
            if not trusted:
                msg = (
                    "it was written by vecpool 0.1 (format 2), which stores the spaces "
                    "with pickle, and unpickling can run code. Load it with "
                    "`ReplayPool.load(path, trusted=True)` only if you trust the "
                    "file, then `save()` it again to get a file without pickle"
                )
                raise _BadFile(msg)
            try:
                objects = pickle.loads(_array(data, "objects").tobytes())
                observation_space, action_space, rng = objects
            except _BadFile:
                raise
            except Exception as exc:
                msg = f"its pickled spaces do not load ({type(exc).__name__}: {exc})"
                raise _BadFile(msg) from exc
        else:
            observation_space = space_from_dict(header["observation_space"])
            action_space = space_from_dict(header["action_space"])
            rng = header["rng"]
        arguments = _arguments(header)
        compact = header["format"] == FORMAT
        _check_sizes(data, observation_space, action_space, arguments, compact)
        try:
            pool = cls(observation_space, action_space, **arguments)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            msg = f"its header holds no valid pool arguments: {exc}"
            raise _BadFile(msg) from exc
        try:
            pool.generator_state = rng
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            msg = f"its generator state is not valid: {exc!r}"
            raise _BadFile(msg) from exc
        _restore(pool, data, compact)
    except RecursionError as exc:
        msg = f"Cannot load {os.fspath(path)!r} as a vecpool.ReplayPool: its header "
        msg += "is nested too deeply to be one."
        raise ValueError(msg) from exc
    except (_BadFile, ValueError) as exc:
        msg = f"Cannot load {os.fspath(path)!r} as a vecpool.ReplayPool: {exc}."
        raise ValueError(msg) from exc
    return pool


_INT_LIMIT = 2**62  # any count beyond this is a forgery (and overflows int64 maths)
_MAX_TEXT = 2**20  # a longer Text leaf in a header is a forgery


def _arguments(header: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments of the header, each of the type it must have."""
    arguments = {name: header[name] for name in _ARGUMENTS}
    for name in (
        "num_envs",
        "pool_size",
        "window_size",
        "clearing_freq",
        "window_size_",
    ):
        value = arguments[name]
        optional = name not in ("num_envs", "pool_size")
        if value is None and optional:
            continue
        if type(value) is not int or not 1 <= value < _INT_LIMIT:
            msg = f"its header's `{name}` is {_short(value)}, not a count"
            raise _BadFile(msg)
    for name in ("random", "store_next_obs"):
        if type(arguments[name]) is not bool:
            msg = f"its header's `{name}` is {_short(arguments[name])}, not a bool"
            raise _BadFile(msg)
    return arguments


def _check_sizes(
    data: dict[str, npt.NDArray[Any]],
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    arguments: dict[str, Any],
    compact: bool,
) -> None:
    """Refuse sizes the arrays do not have, or a pool this machine cannot hold.

    Checked before the pool is built, so a forged header allocates nothing.
    """
    num_envs, pool_size = arguments["num_envs"], arguments["pool_size"]
    capacity = -(-pool_size // num_envs)
    slots_rows = num_envs * (capacity + 1)
    if compact:
        length = _array(data, "length")
        if length.dtype != np.int64 or length.shape != (num_envs,):
            msg = f"its `length` member is not int64[{num_envs}] (num_envs)"
            raise _BadFile(msg)
        if ((length < 0) | (length > capacity)).any():
            msg = (
                "its `length` member is out of range (each value must be between 0 "
                f"and the capacity {capacity})"
            )
            raise _BadFile(msg)
        rows = int(length.sum())
    else:
        rows = slots_rows
    try:
        shapes = {
            group: [shape for _, shape in storage_leaves(space)]
            for group, space in (("obs", observation_space), ("action", action_space))
        }
        row_bytes = sum(
            dtype.itemsize * math.prod(shape)
            for space in (observation_space, action_space)
            for dtype, shape in storage_leaves(space)
        )
    except (TypeError, ValueError) as exc:
        msg = f"its spaces have no array layout ({exc})"
        raise _BadFile(msg) from exc
    needed = slots_rows * (2 * row_bytes + 20)
    if needed > _memory_bytes():
        msg = (
            f"its header describes a pool of about {needed / 2**30:,.1f} GiB "
            f"(num_envs={num_envs}, pool_size={pool_size}), more than this machine's "
            "memory"
        )
        raise _BadFile(msg)
    reward = _array(data, "reward")
    if reward.shape != (rows,):
        msg = (
            f"its header and `length` describe {rows} rows but `reward` has shape "
            f"{reward.shape}"
        )
        raise _BadFile(msg)
    for group, group_shapes in shapes.items():
        for index, shape in enumerate(group_shapes):
            array = _array(data, f"{group}_{index}")
            if array.shape != (rows, *shape):
                msg = (
                    f"its `{group}_{index}` member has shape {array.shape}, but the "
                    f"header describes {(rows, *shape)}"
                )
                raise _BadFile(msg)


def _memory_bytes() -> int:
    """This machine's physical memory (a bound no pool file may exceed)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 2**40


def _members(handle: Any) -> dict[str, npt.NDArray[Any]]:
    """Every array in the archive, read now, without pickle."""
    try:
        archive = np.load(handle, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            msg = "it is a single .npy array, not a pool archive"
            raise _BadFile(msg)
        with archive:
            return {name: archive[name] for name in archive.files}
    except _BadFile:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, KeyError) as exc:
        # np.load: truncated zip, bad CRC, not a numpy file, object arrays
        msg = f"it is not a whole numpy archive ({type(exc).__name__}: {exc})"
        raise _BadFile(msg) from exc


def _header(data: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
    config = data.get("config")
    if config is None:
        msg = "it has no `config` member, so it was not written by ReplayPool.save"
        raise _BadFile(msg)
    try:
        header = json.loads(config.tobytes())
    except (UnicodeDecodeError, ValueError) as exc:
        msg = f"its `config` member is not JSON ({exc})"
        raise _BadFile(msg) from exc
    if not isinstance(header, dict) or "format" not in header:
        msg = "its `config` member names no format, so it was not written by save()"
        raise _BadFile(msg)
    if header["format"] not in (FORMAT, _PICKLED_FORMAT):
        msg = (
            f"its format is {header['format']!r}; this vecpool reads {FORMAT!r} "
            f"(and {_PICKLED_FORMAT!r} with trusted=True)"
        )
        raise _BadFile(msg)
    missing = [name for name in _ARGUMENTS if name not in header]
    if header["format"] == FORMAT:
        missing += [
            name
            for name in ("observation_space", "action_space", "rng")
            if name not in header
        ]
    if missing:
        msg = f"its header lacks {', '.join(missing)}"
        raise _BadFile(msg)
    return header


def _array(data: dict[str, npt.NDArray[Any]], name: str) -> npt.NDArray[Any]:
    try:
        return data[name]
    except KeyError:
        msg = f"it has no `{name}` member"
        raise _BadFile(msg) from None


def _restore(
    pool: StoredPool, data: dict[str, npt.NDArray[Any]], compact: bool
) -> None:
    """Copy the file's arrays into ``pool``, each checked against the fresh one.

    A compact file (format 3) holds each sub-pool's filled rows, oldest first: they
    go to slots ``0..length-1`` (the ring starts over; what the pool holds, returns
    and samples is unchanged). A format-2 file holds every row as it lay.
    """
    fresh = pool.state_dict()
    if compact:
        fresh.pop("end")
    # the store of kept next observations grows; its free list with it
    growable = {name for name in fresh if name.startswith("extra_")} | {"free"}
    rows = int(_array(data, "length").sum()) if compact else 0
    loaded: dict[str, npt.NDArray[Any]] = {}
    for name, like in fresh.items():
        array = _array(data, name)
        if array.dtype != like.dtype or array.ndim != like.ndim:
            msg = (
                f"its `{name}` member is {array.dtype}[{array.ndim}-D], "
                f"expected {like.dtype}[{like.ndim}-D]"
            )
            raise _BadFile(msg)
        expected = like.shape
        if compact and per_row(name):
            expected = (rows, *like.shape[1:])
        if name in growable:
            same = array.shape[1:] == like.shape[1:]
        else:
            same = array.shape == expected
        if not same:
            msg = f"its `{name}` member has shape {array.shape}, expected {expected}"
            raise _BadFile(msg)
        loaded[name] = array
    if compact:
        loaded["end"] = loaded["length"].copy()
    _check_counters(pool, loaded)
    pool.load_state_dict(loaded, compact=compact)


def _check_counters(pool: StoredPool, data: dict[str, npt.NDArray[Any]]) -> None:
    """Refuse counters that would make the pool read rows it never wrote."""

    def refuse(name: str, rule: str) -> None:
        msg = f"its `{name}` member is out of range (each value must be {rule})"
        raise _BadFile(msg)

    if ((data["length"] < 0) | (data["length"] > pool.capacity)).any():
        refuse("length", f"between 0 and the capacity {pool.capacity}")
    if ((data["end"] < 0) | (data["end"] > pool.capacity)).any():
        refuse("end", f"between 0 and {pool.capacity}")
    if (data["received"] < data["length"]).any():
        refuse("received", "at least the sub-pool's length")
    if (data["episode_length"] < 0).any():
        refuse("episode_length", ">= 0")
    count, returns, lengths = data["episodes"].tolist()
    if not (
        np.isfinite([count, returns, lengths]).all()
        and count >= 0
        and lengths >= 0
        and count == int(count)
    ):
        refuse("episodes", "finite: a whole count >= 0, a return sum, a length sum")
    if pool.store_next_obs:
        return
    extra = data["extra_0"].shape[0] if "extra_0" in data else 0
    if any(
        data[f"extra_{i}"].shape[0] != extra
        for i in range(sum(name.startswith("extra_") for name in data))
    ):
        refuse("extra_*", "one size for every leaf")
    own, free = data["own_next"], data["free"]
    used = own[own >= 0]
    if ((own < -1) | (own >= extra)).any():
        refuse("own_next", f"-1 or an index below {extra}")
    if ((free < 0) | (free >= extra)).any():
        refuse("free", f"an index below {extra}")
    if np.unique(np.concatenate([used, free])).size != used.size + free.size:
        refuse("own_next/free", "used once: no slot both owned and free, or twice")
