"""Pool files: :meth:`ReplayPool.save` and :meth:`ReplayPool.load`, without pickle.

A pool file is an ``.npz`` archive (read with ``allow_pickle=False``): one ``config``
member, JSON bytes holding the format, the constructor arguments, both spaces (as
plain dicts, :func:`space_to_dict`) and the generator state; then one array per
field of the pool. :func:`read` checks every one of them against a pool built from
that header, so a truncated, corrupted, forged or other-version file raises one
:class:`ValueError` naming the file and what is wrong, and nothing in a file can run
code. Files of format 2 (the first pool files) kept the spaces as a pickle: they
load only with ``trusted=True``. Format 4 differs from format 3 only in a header
key: the constructor argument ``clearing_size`` was ``window_size_`` (issue 29),
under which formats 2 and 3 store it; both still load. Format 5 (issue 31) adds
each row's stretch mark, the recent episodes, the priorities and the frame store;
for older files the marks are derived from the episode ends
(:func:`_derived_marks`). Format 6 adds each sub-pool's ``end``, so its rows go
back to the slots they held: a prioritized pool's sum tree follows the slots, and
the loaded pool draws what the saved one would (older files load from slot 0).

It never imports the pool: it works on any :class:`StoredPool`, through the
pool's public state (:meth:`ReplayPool.state_dict`, :meth:`ReplayPool.load_state_dict`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import pickle
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn, Protocol

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.files import write_atomically
from vecpool.replay.episode_log import CUT
from vecpool.replay.frames import compact_items
from vecpool.replay.portable import portable
from vecpool.replay.settings import RECENT_EPISODES
from vecpool.replay.storage import integer_bounds, storage_leaves

__all__ = [
    "COUNTERS",
    "FORMAT",
    "StoredPool",
    "check_state",
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
    clearing_size: int | None
    random: bool
    store_next_obs: bool
    alpha: float | None
    frame_stack: int | None
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
        self, length: npt.NDArray[np.int64], end: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The rows of every sub-pool, oldest to newest."""
        ...


FORMAT = "vecpool.ReplayPool/7"  # 7: `resumed`, `resuming`: stretches that go on
_ENDS_FORMAT = "vecpool.ReplayPool/6"  # 6: `end`: rows go back to their slots
_MARKED_FORMAT = "vecpool.ReplayPool/5"  # 5: `starts`, `fresh`; prioritized pools
_CLEARING_FORMAT = "vecpool.ReplayPool/4"  # 4: `clearing_size` in the header
_RENAMED_FORMAT = "vecpool.ReplayPool/3"  # 3: JSON header, no pickle; `window_size_`
_PICKLED_FORMAT = "vecpool.ReplayPool/2"
_READ_FORMATS = (
    FORMAT,
    _ENDS_FORMAT,
    _MARKED_FORMAT,
    _CLEARING_FORMAT,
    _RENAMED_FORMAT,
    _PICKLED_FORMAT,
)
"""Every format :func:`load` reads, newest first (the last one only trusted)."""
_OLD_NAMES = {"clearing_size": "window_size_"}
"""Header keys of formats 2 and 3 that format 4 renamed (issue 29)."""
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
    "starts",
    "fresh",
    "resumed",
    "resuming",
    "recent_count",
)
_ARGUMENTS = (
    "num_envs",
    "pool_size",
    "window_size",
    "clearing_freq",
    "clearing_size",
    "random",
    "store_next_obs",
    "alpha",
    "frame_stack",
)
_NEW_IN_5 = ("alpha", "frame_stack")
"""Constructor arguments format 5 added (older files: ``None``)."""


class _BadFile(Exception):
    """What is wrong with a file (becomes the ValueError that names it)."""


# -- spaces as plain data --------------------------------------------------------------


def space_to_dict(
    space: spaces.Space[Any], members: dict[str, npt.NDArray[Any]] | None = None
) -> dict[str, Any]:
    """A JSON-able description of a space a ReplayPool can store.

    Args:
        space: Box, Discrete, MultiDiscrete, MultiBinary, Text, or a Dict/Tuple
            nest of them.
        members: Where large Box bounds that are not one number go, as arrays
            (the description names them: ``{"member": "bounds_0"}``); ``None``
            keeps every bound in the description.

    Returns:
        A dict of plain lists, numbers and strings; :func:`space_from_dict` rebuilds
        an equal space from it.

    Raises:
        ValueError: For any other space.
    """
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": _bounds(space.low, members),
            "high": _bounds(space.high, members),
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
        if space.max_length > _MAX_TEXT:
            msg = (
                f"{space} has a max_length above {_MAX_TEXT:,}, which a pool file "
                "does not hold (strings that long: keep them out of the observation)"
            )
            raise ValueError(msg)
        return {
            "type": "Text",
            "max_length": int(space.max_length),
            "min_length": int(space.min_length),
            "charset": "".join(sorted(space.character_set)),
        }
    if isinstance(space, spaces.Tuple):
        return {
            "type": "Tuple",
            "spaces": [space_to_dict(s, members) for s in space.spaces],
        }
    if isinstance(space, spaces.Dict):
        names: list[Any] = list(space.spaces)  # typed str, but any hashable works
        keys = [key for key in names if not isinstance(key, str)]
        if keys:
            msg = (
                f"{space} has keys that are not strings ({keys[0]!r}), which a pool "
                "file (JSON) cannot name: use string keys"
            )
            raise ValueError(msg)
        return {
            "type": "Dict",
            "spaces": [
                [key, space_to_dict(s, members)] for key, s in space.spaces.items()
            ],
        }
    msg = (
        f"{space} has no pool-file form (a pool file holds array and Text spaces, "
        "and Dict/Tuple nests of them)."
    )
    raise ValueError(msg)


_INLINE_BOUNDS = 4096
"""Box bounds of more entries (not all one number) go in an array member."""


def _bounds(
    array: npt.NDArray[Any], members: dict[str, npt.NDArray[Any]] | None
) -> Any:
    """A Box bound as JSON: one number when every entry is the same (bitwise).

    A large bound of several values goes into ``members``, named in the JSON.
    """
    flat = array.reshape(-1)
    if (
        flat.size
        and (
            flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)
        ).all()
    ):
        return flat[0].item()
    if members is not None and flat.size > _INLINE_BOUNDS:
        name = f"bounds_{len(members)}"
        members[name] = np.ascontiguousarray(array)
        return {"member": name}
    return array.tolist()


def space_from_dict(
    data: Any, members: Mapping[str, npt.NDArray[Any]] | None = None
) -> spaces.Space[Any]:
    """Rebuild a space from :func:`space_to_dict`'s description.

    Args:
        data: The description (as read back from JSON).
        members: The arrays that large Box bounds name (a pool file's members).

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
            shape = tuple(data["shape"])
            low, high = (_bound(data[n], dtype, members) for n in ("low", "high"))
            for bound in (low, high):  # one number, or every entry
                if bound.shape not in ((), shape):
                    msg = f"a Box bound of shape {bound.shape}, not {shape}"
                    raise ValueError(msg)
            # (sizes checked before: `_check_described`)
            low, high = (np.broadcast_to(b, shape).copy() for b in (low, high))
            return spaces.Box(low, high, shape, dtype)
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
                or not 0 < len(charset) <= _MAX_CHARSET
            ):
                msg = (
                    "a Text space needs 0 <= min_length <= max_length and a charset "
                    f"of 1 to {_MAX_CHARSET:,} characters"
                )
                raise ValueError(msg)
            return spaces.Text(max_length, min_length=min_length, charset=charset)
        if kind == "Tuple":
            return spaces.Tuple([space_from_dict(s, members) for s in data["spaces"]])
        if kind == "Dict":  # pairs, not a mapping: Gymnasium would sort a mapping
            return spaces.Dict(
                [(key, space_from_dict(s, members)) for key, s in data["spaces"]]
            )
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


def _bound(
    value: Any, dtype: np.dtype[Any], members: Mapping[str, npt.NDArray[Any]] | None
) -> npt.NDArray[Any]:
    """A Box bound: a number, a list, or the array member a description names."""
    if isinstance(value, dict):
        name = value.get("member")
        if members is None or not isinstance(name, str) or name not in members:
            msg = f"a Box bound names no member of the file ({_short(value)})"
            raise ValueError(msg)
        array = members[name]
        if array.dtype != dtype:
            msg = f"the Box bound member `{name}` is {array.dtype}, not {dtype}"
            raise ValueError(msg)
        return array
    return np.asarray(value, dtype)


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
    rows = pool.filled_rows(state["length"], state["end"])
    for name in list(state):
        if per_row(name):
            state[name] = state[name][rows]
    if "wholes" in state:  # a frame store: the items of the rows held only
        state = compact_items(state)
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
    bounds: dict[str, npt.NDArray[Any]] = {}  # large Box bounds, as members
    header = {
        "format": FORMAT,
        **{name: getattr(pool, name) for name in _ARGUMENTS},
        "observation_space": space_to_dict(observation_space, bounds),
        "action_space": space_to_dict(pool.action_space, bounds),
        "rng": pool.generator_state,
    }
    arrays = {
        "config": np.frombuffer(json.dumps(header).encode(), np.uint8),
        **state,
        **bounds,
    }
    savez: Any = np.savez_compressed if compress else np.savez  # stubs refuse **
    return write_atomically(Path(path), lambda handle: savez(handle, **arrays))


def per_row(name: str) -> bool:
    """Whether a state array has one entry per row of the pool (vs per env)."""
    return name in (
        "reward",
        "terminated",
        "truncated",
        "own_next",
        "starts",
        "resumed",
        "priority",
        "frames",
        "own_obs",
        "own_next_frame",
        "own_next_whole",
    ) or (name.split("_")[0] in ("obs", "action") or name.startswith("next_obs_"))


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
        mode = os.stat(path).st_mode  # OSError (missing file, ...) passes
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):  # /dev/zero never ends, a FIFO blocks
            msg = "it is not a regular file"
            raise _BadFile(msg)
        with open(path, "rb") as handle:
            return _read(cls, handle, trusted)
    except MemoryError as exc:  # within the bounds, yet not available now
        msg = (
            f"Cannot load {os.fspath(path)!r} as a vecpool.ReplayPool: this process "
            "cannot allocate the pool its header describes (MemoryError)."
        )
        raise ValueError(msg) from exc
    except RecursionError as exc:
        msg = f"Cannot load {os.fspath(path)!r} as a vecpool.ReplayPool: its header "
        msg += "is nested too deeply to be one."
        raise ValueError(msg) from exc
    except (_BadFile, ValueError) as exc:
        msg = f"Cannot load {os.fspath(path)!r} as a vecpool.ReplayPool: {exc}."
        raise ValueError(msg) from exc


def _read(cls: Callable[..., StoredPool], handle: Any, trusted: bool) -> Any:
    """:func:`read` on an open file: members are read only once checked.

    Raises:
        _BadFile: What is wrong with the file.
    """
    data = _Archive(handle)
    header = _header(data)
    if header["format"] == _PICKLED_FORMAT:
        if not trusted:
            msg = (
                "it is a format-2 file (the first pool files), which store the spaces "
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
        # what the described spaces and pool take, before any space is built (a
        # Box of one bound and a huge shape would allocate its bounds)
        data.allowance += _check_described(header)
        observation_space = space_from_dict(header["observation_space"], data)
        action_space = space_from_dict(header["action_space"], data)
        rng = header["rng"]
    arguments = _arguments(header)
    compact = header["format"] != _PICKLED_FORMAT
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
    _restore(pool, data, header["format"])
    return pool


_INT_LIMIT = 2**62  # any count beyond this is a forgery (and overflows int64 maths)
_MAX_TEXT = 2**20  # a longer Text leaf in a header is a forgery
_MAX_CHARSET = 2**16
_MAX_TOKENS = 2**20
"""JSON values a header may hold (commas, brackets, braces): what parsing it
builds in Python objects stays within ~100 MB whatever it holds."""


def _stored_name(name: str, file_format: str) -> str:
    """The header key under which a file of ``file_format`` stores argument ``name``."""
    if file_format in (FORMAT, _ENDS_FORMAT, _MARKED_FORMAT, _CLEARING_FORMAT):
        return name
    return _OLD_NAMES.get(name, name)


def _arguments(header: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments of the header, each of the type it must have."""
    stored = {name: _stored_name(name, header["format"]) for name in _ARGUMENTS}
    arguments = {
        name: header.get(stored[name]) if name in _NEW_IN_5 else header[stored[name]]
        for name in _ARGUMENTS
    }
    alpha = arguments["alpha"]
    if alpha is not None and (
        type(alpha) not in (int, float) or not math.isfinite(alpha) or alpha < 0
    ):
        msg = f"its header's `alpha` is {_short(alpha)}, not a number >= 0"
        raise _BadFile(msg)
    for name in (
        "num_envs",
        "pool_size",
        "window_size",
        "clearing_freq",
        "clearing_size",
    ):
        value = arguments[name]
        optional = name not in ("num_envs", "pool_size")
        if value is None and optional:
            continue
        if type(value) is not int or not 1 <= value < _INT_LIMIT:
            msg = f"its header's `{stored[name]}` is {_short(value)}, not a count"
            raise _BadFile(msg)
    for name in ("random", "store_next_obs"):
        if type(arguments[name]) is not bool:
            msg = f"its header's `{name}` is {_short(arguments[name])}, not a bool"
            raise _BadFile(msg)
    stack = arguments["frame_stack"]
    if stack is not None and (type(stack) is not int or not 1 <= stack < 2**16):
        msg = f"its header's `frame_stack` is {_short(stack)}, not a frame count"
        raise _BadFile(msg)
    return arguments


def _described_bytes(data: Any) -> int:
    """Bytes of one value of the space ``data`` describes, and of a Box's bounds.

    Raises:
        ValueError: If ``data`` is not a description of a space.
    """
    try:
        kind = data["type"]
        if kind in ("Dict", "Tuple"):
            items = data["spaces"]
            subs = [item[1] for item in items] if kind == "Dict" else items
            return sum(_described_bytes(sub) for sub in subs)
        if kind == "Box":
            count = math.prod(int(n) for n in data["shape"])
            return 3 * count * int(np.dtype(data["dtype"]).itemsize)  # value, bounds
        if kind == "Discrete":
            return int(np.dtype(data["dtype"]).itemsize)
        if kind == "MultiDiscrete":
            return 2 * len(data["nvec"]) * int(np.dtype(data["dtype"]).itemsize)
        if kind == "MultiBinary":
            return int(math.prod(np.asarray(data["n"]).reshape(-1).tolist()))
        if kind == "Text":
            return 4 * int(data["max_length"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        msg = f"bad space description {_short(data)}: {type(exc).__name__}: {exc}"
        raise ValueError(msg) from exc
    msg = f"unknown space type in {_short(data)}"
    raise ValueError(msg)


def _check_described(header: dict[str, Any]) -> int:
    """Refuse a header whose spaces and pool this machine cannot hold.

    Returns:
        The bytes they take (what reading the file may allocate).
    """
    arguments = _arguments(header)
    obs_bytes = _described_bytes(header["observation_space"])
    action_bytes = _described_bytes(header["action_space"])
    num_envs, pool_size = arguments["num_envs"], arguments["pool_size"]
    stack = arguments["frame_stack"]
    slots_rows = num_envs * (-(-pool_size // num_envs) + (stack or 1))
    if stack is None:
        needed = int(slots_rows * (2 * (obs_bytes + action_bytes) + 20))
    else:  # one frame a row (a Box's value is a third of what it describes)
        frame = obs_bytes // 3 // stack
        needed = int(slots_rows * (frame + 2 * action_bytes + 60) + 2 * obs_bytes)
    _refuse_oversized(needed, num_envs, pool_size)
    return needed


def _refuse_oversized(needed: int, num_envs: int, pool_size: int) -> None:
    """Refuse a pool of ``needed`` bytes this machine cannot hold now."""
    if needed > _memory_bytes():
        msg = (
            f"its header describes a pool of about {needed / 2**30:,.1f} GiB "
            f"(num_envs={num_envs}, pool_size={pool_size}), more than this machine's "
            "memory"
        )
        raise _BadFile(msg)


def _check_sizes(
    data: _Archive,
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
    stack = arguments["frame_stack"]
    slots_rows = num_envs * (capacity + (stack or 1))
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
    if stack is None:
        needed = slots_rows * (2 * row_bytes + 20)
    else:  # the frame store: one frame a row, the stacks it keeps whole
        frame = row_bytes // stack
        needed = slots_rows * (frame + 60) + 2 * row_bytes
        shapes["obs"] = []  # no obs_* members: `frames` holds one frame a row
        found = _shape(data, "frames")
        frame_shape = tuple(observation_space.shape or ())[1:]
        if found != (rows, *frame_shape):
            msg = (
                f"its `frames` member has shape {found}, but the header describes "
                f"{(rows, *frame_shape)}"
            )
            raise _BadFile(msg)
    _refuse_oversized(needed, num_envs, pool_size)
    reward = _shape(data, "reward")
    if reward != (rows,):
        msg = (
            f"its header and `length` describe {rows} rows but `reward` has shape "
            f"{reward}"
        )
        raise _BadFile(msg)
    for group, group_shapes in shapes.items():
        for index, shape in enumerate(group_shapes):
            found = _shape(data, f"{group}_{index}")
            if found != (rows, *shape):
                msg = (
                    f"its `{group}_{index}` member has shape {found}, but the "
                    f"header describes {(rows, *shape)}"
                )
                raise _BadFile(msg)
    if not compact:  # format 2: the spaces were pickled, not described
        data.allowance += needed


def _memory_bytes() -> int:
    """The memory a load may take.

    The least of this machine's physical memory, what it has available now, and
    this process's address-space limit.
    """
    bounds: list[int] = []
    with contextlib.suppress(AttributeError, OSError, ValueError):
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        bounds.append(int(pages) * int(size))
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/meminfo") as meminfo,
    ):
        bounds += [
            int(line.split()[1]) * 1024
            for line in meminfo
            if line.startswith("MemAvailable:")
        ]
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            bounds.append(int(limit))
    return min(bounds, default=2**40)


_CONFIG_BYTES = 4 * 2**20
"""What the members read before the header is checked (``config``, ``length``, a
format-2 ``objects``) may take together."""
_NPY_HEADER_BYTES = 2**16


_READ_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,  # corrupt deflate data
    NotImplementedError,  # zipfile: an unsupported feature
    RuntimeError,  # zipfile: an encrypted member
)


_READ_OR_VALUE_ERRORS: tuple[type[BaseException], ...] = (*_READ_ERRORS, ValueError)


def _npy_header(member: Any) -> tuple[tuple[int, ...], np.dtype[Any], bool, int]:
    """Read a ``.npy`` header of at most :data:`_NPY_HEADER_BYTES` from ``member``.

    numpy's own readers read the declared header length in full (up to 4 GiB)
    before they check it; here the length is checked first.

    Returns:
        ``(shape, fortran_order, dtype, offset of the data)``.

    Raises:
        ValueError: If it is not a ``.npy`` header, or an oversized one.
    """
    magic = member.read(8)
    if len(magic) != 8 or magic[:6] != b"\x93NUMPY" or magic[6] not in (1, 2, 3):
        msg = "no .npy magic string"
        raise ValueError(msg)
    size_bytes = member.read(2 if magic[6] == 1 else 4)
    length = int.from_bytes(size_bytes, "little")
    if length > _NPY_HEADER_BYTES:
        msg = f"a .npy header of {length:,} bytes"
        raise ValueError(msg)
    header = member.read(length)
    if len(header) != length:
        msg = "a .npy header cut short"
        raise ValueError(msg)
    buffer = io.BytesIO(magic + size_bytes + header)
    version = np.lib.format.read_magic(buffer)
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    try:
        shape, fortran, dtype = read(buffer, max_header_size=_NPY_HEADER_BYTES)
    except ValueError:
        msg = "a .npy header numpy cannot read"  # (its text suggests allow_pickle)
        raise ValueError(msg) from None
    return tuple(shape), dtype, bool(fortran), 8 + len(size_bytes) + length


class _Archive(Mapping[str, npt.NDArray[Any]]):
    """The members of a pool file, each read only after its declared size is checked.

    A member's ``.npy`` header (its shape and dtype, a few hundred bytes) is read
    first; its data is decompressed only if the zip entry holds exactly that many
    bytes and they fit what is left of :attr:`allowance`, which starts at
    :data:`_CONFIG_BYTES` and grows to the size of the pool the checked header
    describes (:func:`_check_sizes`). So loading any file, a zip bomb included,
    takes at most that much memory (plus a 1 MiB read buffer), and a forged shape is
    refused before anything is allocated. Object arrays (pickle) are refused.

    Raises:
        _BadFile: On a file that is not such an archive.
    """

    def __init__(self, handle: Any) -> None:
        try:
            if handle.read(6) == b"\x93NUMPY":
                msg = "it is a single .npy array, not a pool archive"
                raise _BadFile(msg)
            handle.seek(0)
            self._zip = zipfile.ZipFile(handle)
            entries = self._zip.infolist()
        except _READ_OR_VALUE_ERRORS as exc:  # e.g. a version zipfile refuses
            msg = f"it is not a whole numpy archive ({type(exc).__name__}: {exc})"
            raise _BadFile(msg) from exc
        # the arrays (other members, never read, are not the pool's)
        self._entries = {
            entry.filename[: -len(".npy")]: entry
            for entry in entries
            if entry.filename.endswith(".npy")
        }
        for name, entry in self._entries.items():
            # bz2 and lzma output is not bounded per read: numpy writes neither
            if entry.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                msg = (
                    f"its `{name}` member uses zip compression method "
                    f"{entry.compress_type}; pool files are stored or deflated"
                )
                raise _BadFile(msg)
            if entry.flag_bits & 0x1:
                msg = f"its `{name}` member is encrypted"
                raise _BadFile(msg)
        declared = sum(entry.file_size for entry in self._entries.values())
        if declared > _memory_bytes():
            msg = (
                f"its members declare {declared / 2**30:,.1f} GiB of data, more than "
                "this machine's memory"
            )
            raise _BadFile(msg)
        self.allowance = _CONFIG_BYTES
        self._headers: dict[str, tuple[tuple[int, ...], np.dtype[Any], bool, int]] = {}
        self._arrays: dict[str, npt.NDArray[Any]] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def describe(self, name: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Member ``name``'s shape and dtype, from its ``.npy`` header only.

        Raises:
            KeyError: If there is no such member.
            _BadFile: If its header is not a numpy one, declares objects, or
                declares another size than the zip entry holds.
        """
        if name not in self._headers:
            entry = self._entries[name]
            try:
                with self._zip.open(entry) as member:
                    shape, dtype, fortran, offset = _npy_header(member)
            except _READ_ERRORS as exc:
                msg = (
                    f"it is not a whole numpy archive: its `{name}` member does not "
                    f"read back ({type(exc).__name__}: {exc})"
                )
                raise _BadFile(msg) from exc
            except ValueError as exc:  # no magic, a bad or oversized header
                msg = f"its `{name}` member is not a numpy array ({exc})"
                raise _BadFile(msg) from exc
            if dtype.hasobject:
                msg = (
                    f"its `{name}` member holds Python objects, which a pool file "
                    "never does (they would need pickle)"
                )
                raise _BadFile(msg)
            nbytes = math.prod(shape) * dtype.itemsize
            if offset + nbytes != entry.file_size:
                msg = (
                    f"its `{name}` member declares {nbytes:,} bytes of data "
                    f"{tuple(shape)} {dtype}, but its zip entry holds "
                    f"{entry.file_size - offset:,}"
                )
                raise _BadFile(msg)
            self._headers[name] = (shape, dtype, fortran, offset)
        shape, dtype, _, _ = self._headers[name]
        return shape, dtype

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        """Member ``name``'s array, read (once) if it fits the allowance."""
        if name in self._arrays:
            return self._arrays[name]
        shape, dtype = self.describe(name)
        _, _, fortran, offset = self._headers[name]
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.allowance:
            msg = (
                f"its `{name}` member declares {nbytes:,} bytes, more than the "
                f"{self.allowance:,} left to read (a pool file's header is small "
                "and its arrays hold the pool its header describes)"
            )
            raise _BadFile(msg)
        self.allowance -= nbytes
        array = np.empty(shape, dtype, order="F" if fortran else "C")
        view = array.reshape(-1, order="A").view(np.uint8)  # the same memory
        try:
            with self._zip.open(self._entries[name]) as member:
                member.read(offset)
                done = 0
                while done < nbytes:
                    chunk = member.read(min(2**20, nbytes - done))
                    if not chunk:
                        break
                    view[done : done + len(chunk)] = np.frombuffer(chunk, np.uint8)
                    done += len(chunk)
        except _READ_OR_VALUE_ERRORS as exc:
            msg = (
                f"it is not a whole numpy archive: its `{name}` member does not read "
                f"back ({type(exc).__name__}: {exc})"
            )
            raise _BadFile(msg) from exc
        if done != nbytes:
            msg = f"its `{name}` member is cut short ({done:,} of {nbytes:,} bytes)"
            raise _BadFile(msg)
        self._arrays[name] = array
        return array


def _header(data: _Archive) -> dict[str, Any]:
    if "config" not in data:
        msg = "it has no `config` member, so it was not written by ReplayPool.save"
        raise _BadFile(msg)
    config = data["config"].tobytes()
    tokens = config.count(b",") + config.count(b"[") + config.count(b"{")
    if tokens > _MAX_TOKENS:
        msg = f"its header holds {tokens:,} JSON values, more than a pool's spaces need"
        raise _BadFile(msg)
    try:
        header = json.loads(config)
    except (UnicodeDecodeError, ValueError) as exc:
        msg = f"its `config` member is not JSON ({exc})"
        raise _BadFile(msg) from exc
    if not isinstance(header, dict) or "format" not in header:
        msg = "its `config` member names no format, so it was not written by save()"
        raise _BadFile(msg)
    if header["format"] not in _READ_FORMATS:
        readable = ", ".join(repr(name) for name in _READ_FORMATS[:-1])
        msg = (
            f"its format is {header['format']!r}; this vecpool reads {readable} "
            f"(and {_PICKLED_FORMAT!r} with trusted=True)"
        )
        raise _BadFile(msg)
    stored = [
        _stored_name(name, header["format"])
        for name in _ARGUMENTS
        if name not in _NEW_IN_5
    ]
    missing = [name for name in stored if name not in header]
    if header["format"] != _PICKLED_FORMAT:
        missing += [
            name
            for name in ("observation_space", "action_space", "rng")
            if name not in header
        ]
    if missing:
        msg = f"its header lacks {', '.join(missing)}"
        raise _BadFile(msg)
    return header


def _array(data: _Archive, name: str) -> npt.NDArray[Any]:
    if name not in data:
        msg = f"it has no `{name}` member"
        raise _BadFile(msg)
    return data[name]


def _shape(data: _Archive, name: str) -> tuple[int, ...]:
    """Member ``name``'s shape, its data not read."""
    if name not in data:
        msg = f"it has no `{name}` member"
        raise _BadFile(msg)
    return data.describe(name)[0]


def _restore(pool: StoredPool, data: _Archive, file_format: str) -> None:
    """Copy the file's arrays into ``pool``, each checked against the fresh one.

    A compact file (format 3 on) holds each sub-pool's filled rows, oldest first.
    Format 6 keeps each sub-pool's ``end``: the rows go back to the slots they
    held. Formats 3 to 5 have none: they go to slots ``0..length-1`` (the ring
    starts over; what the pool holds and returns, and its uniform draws, are
    unchanged, a prioritized pool's draws are not). A format-2 file holds every
    row as it lay. Files before format 5 have no ``starts`` and ``fresh`` marks:
    they are derived from the episode ends (:func:`_derived_marks`). Files before
    format 7 have no ``resumed`` and ``resuming`` marks: the pool rebuilds those of
    an episode cut and still in progress from its episode log
    (``ReplayPool.load_state_dict``).
    """
    compact = file_format != _PICKLED_FORMAT
    old = file_format not in (FORMAT, _ENDS_FORMAT, _MARKED_FORMAT)
    fresh = pool.state_dict()
    slots = fresh["starts"].shape[0] // pool.num_envs
    if compact and file_format not in (FORMAT, _ENDS_FORMAT):
        fresh.pop("end")
    if file_format != FORMAT:  # no `resumed`, `resuming`: the pool rebuilds them
        for name in ("resumed", "resuming"):
            fresh.pop(name)
    if old:
        for name in ("starts", "fresh", "recent", "recent_count"):
            fresh.pop(name)
    growable = _growable(fresh)
    rows = int(_array(data, "length").sum()) if compact else 0
    loaded: dict[str, npt.NDArray[Any]] = {}
    for name, like in fresh.items():
        shape = _shape(data, name)  # checked before its data is read
        dtype = data.describe(name)[1]
        if dtype != like.dtype or len(shape) != like.ndim:
            msg = (
                f"its `{name}` member is {dtype}[{len(shape)}-D], "
                f"expected {like.dtype}[{like.ndim}-D]"
            )
            raise _BadFile(msg)
        expected = like.shape
        if compact and per_row(name):
            expected = (rows, *like.shape[1:])
        same = shape[1:] == like.shape[1:] if name in growable else shape == expected
        if not same:
            msg = f"its `{name}` member has shape {shape}, expected {expected}"
            raise _BadFile(msg)
        loaded[name] = data[name]
    if "end" not in loaded:  # formats 3 to 5: each sub-pool from its first slot
        loaded["end"] = loaded["length"].copy()
    if old:
        _derived_marks(pool, loaded, compact)
    _check_counters(pool, loaded, slots, compact)
    pool.load_state_dict(loaded, compact=compact)


def _growable(fresh: Mapping[str, Any]) -> set[str]:
    """The arrays whose first dimension is not the pool's to fix."""
    # the store of kept next observations grows; its free list with it
    growable = {name for name in fresh if name.startswith("extra_")} | {"free"}
    growable |= {"wholes", "wholes_free", "loose", "loose_free"}  # frame stores
    growable.add("recent")  # the ring's entries
    return growable


def check_state(pool: StoredPool, state: Mapping[str, Any]) -> None:
    """Refuse a state (``ReplayPool.state_dict``'s) that does not fit ``pool``.

    The checks of a file (the arrays' names, dtypes and shapes against the pool's
    own state, then :func:`_check_counters` on the rows held), made before
    anything is written.

    Raises:
        ValueError: Naming the array and what differs.
    """
    fresh = pool.state_dict()
    optional = {"resumed", "resuming"}  # state from before format 7 has none
    missing = sorted(set(fresh) - set(state) - optional)
    unknown = sorted(set(state) - set(fresh))
    if missing or unknown:
        differs = [f"it lacks {missing}"] if missing else []
        differs += [f"it has {unknown}, which this pool has not"] if unknown else []
        msg = (
            f"`state` does not fit this pool: {' and '.join(differs)}. Pass the "
            "state_dict of a pool made with the same settings and spaces."
        )
        raise ValueError(msg)
    growable = _growable(fresh)
    arrays = {name: np.asarray(array) for name, array in state.items()}
    for name, array in arrays.items():
        like = fresh[name]
        shaped = (
            array.ndim == like.ndim and array.shape[1:] == like.shape[1:]
            if name in growable
            else array.shape == like.shape
        )
        if array.dtype != like.dtype or not shaped:
            msg = (
                f"`state['{name}']` is {array.dtype}{list(array.shape)}, this pool's "
                f"is {like.dtype}{list(like.shape)}: pass the state_dict of a pool "
                "made with the same settings and spaces."
            )
            raise ValueError(msg)
    slots = fresh["starts"].shape[0] // pool.num_envs
    try:
        _check_ring(pool, arrays, slots)
        # the rows held, oldest first, as a file holds them (the other slots are
        # stale), of the per-row arrays the checks read (not the observations:
        # no copy of those): then the checks of a file's
        held = pool.filled_rows(arrays["length"], arrays["end"])
        read = ("action_", "own_", "priority")
        view = {
            name: a[held] if per_row(name) and name.startswith(read) else a
            for name, a in arrays.items()
        }
        _check_counters(pool, view, slots, compact=True)
    except _BadFile as error:
        msg = f"`state` does not fit this pool: {error}."
        raise ValueError(msg) from None


def _derived_marks(
    pool: StoredPool, loaded: dict[str, npt.NDArray[Any]], compact: bool
) -> None:
    """The ``starts`` and ``fresh`` marks of a file written before format 5.

    A row starts a stretch when it follows an episode end, or is the oldest of a
    sub-pool that dropped nothing. Resets, aborts and restarts were not recorded
    then, so windows and sequences may cross them in such a file; the next row
    added after loading starts a new stretch.
    """
    length = loaded["length"]
    order = (
        np.arange(int(length.sum()), dtype=np.int64)
        if compact
        else pool.filled_rows(length, loaded["end"])
    )
    done = (loaded["terminated"] | loaded["truncated"])[order]
    marks = np.empty(done.size, np.bool_)
    marks[1:] = done[:-1]
    # each sub-pool's oldest: marked where nothing was dropped before it (what was
    # dropped is not known; ReplayPool.stretch_starts marks the oldest anyway)
    oldest = (np.cumsum(length) - length)[length > 0]
    marks[oldest] = (loaded["received"] == length)[length > 0]
    starts = np.ones(loaded["terminated"].shape, np.bool_)
    starts[order] = marks
    loaded["starts"] = starts
    loaded["fresh"] = np.ones(length.shape, np.bool_)
    # nor the returns of recent episodes: none are known
    loaded["recent"] = np.zeros((0, 2), np.float64)
    loaded["recent_count"] = np.zeros(1, np.int64)


def _check_frame_store(
    data: Mapping[str, npt.NDArray[Any]], refuse: Callable[[str, str], None]
) -> None:
    """Refuse indices into the frame store's stores that are not theirs."""
    for store, owners in (
        ("wholes", ("own_obs", "own_next_whole")),
        ("loose", ("own_next_frame",)),
    ):
        size = data[store].shape[0]
        used = [data[name][data[name] >= 0] for name in owners]
        free = data[f"{store}_free"]
        for name in owners:
            if ((data[name] < -1) | (data[name] >= size)).any():
                refuse(name, f"-1 or an index below {size}")
        if ((free < 0) | (free >= size)).any():
            refuse(f"{store}_free", f"an index below {size}")
        taken = np.concatenate([*used, free])
        if np.unique(taken).size != taken.size:
            refuse(f"{store}_free", "used once: no slot both owned and free, or twice")


def _refuse(name: str, rule: str) -> NoReturn:
    """Raise a file's error: member ``name`` is out of range (``rule`` says why)."""
    msg = f"its `{name}` member is out of range (each value must be {rule})"
    raise _BadFile(msg)


def _check_ring(
    pool: StoredPool, data: Mapping[str, npt.NDArray[Any]], slots: int
) -> None:
    """Refuse sub-pool lengths, ends and counts out of range."""
    refuse = _refuse
    if ((data["length"] < 0) | (data["length"] > pool.capacity)).any():
        refuse("length", f"between 0 and the capacity {pool.capacity}")
    if ((data["end"] < 0) | (data["end"] >= slots)).any():
        refuse("end", f"between 0 and {slots - 1}")
    if (data["received"] < data["length"]).any():
        refuse("received", "at least the sub-pool's length")
    most = np.iinfo(np.int64).max // (2 * pool.num_envs)  # ids: env + n * serial
    if (data["received"] > most).any():
        refuse("received", f"at most {most:,}, so that every id fits an int64")


def _check_counters(
    pool: StoredPool, data: Mapping[str, npt.NDArray[Any]], slots: int, compact: bool
) -> None:
    """Refuse counters that would make the pool read rows it never wrote.

    Also what :meth:`ReplayPool.add` would have refused: actions outside the
    action space (in a compact file, whose rows are all held), episode lengths
    below 0, transition counts whose ids would not fit an int64.

    ``slots``: the slots of each sub-pool (vecpool/replay/ring.py).
    """
    refuse = _refuse
    _check_ring(pool, data, slots)
    length = data["episode_length"]
    if ((length < 0) & (length >= CUT // 2)).any():  # below: a cut episode's
        refuse("episode_length", f">= 0 (or below {CUT // 2}: an episode cut short)")
    count, returns, lengths = data["episodes"].tolist()
    if not (
        np.isfinite([count, returns, lengths]).all()
        and count >= 0
        and lengths >= 0
        and count == int(count)
    ):
        refuse("episodes", "finite: a whole count >= 0, a return sum, a length sum")
    recent, recent_count = data["recent"], data["recent_count"]
    if recent_count[0] < 0 or recent.shape[0] != min(recent_count[0], RECENT_EPISODES):
        refuse(
            "recent_count",
            f">= 0, and the `recent` entries as many, up to {RECENT_EPISODES:,}",
        )
    if recent.shape[1:] != (2,):
        refuse("recent", "(return, length) pairs")
    recent_lengths = recent[:, 1]
    if not (np.isfinite(recent_lengths) & (recent_lengths >= 0)).all():
        refuse("recent", "(return, length) pairs with a finite length >= 0")
    if compact:  # every row held (a format-2 file keeps the unused slots too)
        for index, bounds in enumerate(integer_bounds(pool.action_space)):
            column = data[f"action_{index}"]
            if bounds is not None and column.size:
                low, high = bounds
                if ((column < low) | (column >= high)).any():
                    refuse(
                        f"action_{index}", f"in the action space {pool.action_space}"
                    )
    if "priority" in data:
        priority, top = data["priority"], data["max_priority"]
        if not (np.isfinite(priority).all() and (priority >= 0).all()):
            refuse("priority", "finite and >= 0")
        if top.shape != (1,) or not (np.isfinite(top).all() and top[0] >= 1):
            refuse("max_priority", "one finite number >= 1 (it starts at 1)")
    if "frames" in data:
        _check_frame_store(data, refuse)
        length = data["length"]
        oldest = (np.cumsum(length) - length)[length > 0]
        if (data["own_obs"][oldest] < 0).any():
            refuse("own_obs", "an item for each sub-pool's oldest row (kept whole)")
        return
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
