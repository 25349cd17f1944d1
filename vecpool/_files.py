"""Atomic file writes: a file is either the old one or the whole new one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomically"]


def write_atomically(target: Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write ``target`` through a temporary file beside it, then rename it over.

    The temporary file is flushed and synced before the rename, and the directory
    after it: ``target`` is never a partial file, and a previous file there stays
    intact if the write fails. (A process killed mid-write may leave the hidden
    ``.NAME.*.tmp`` file beside it; an exception removes it.)

    Args:
        target: The file to write.
        write: Writes the contents to the open binary handle it is given.

    Returns:
        ``target``.
    """
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{id(write):x}.tmp")
    # os.open with 0o666 honours the umask, as a plain open() would
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return target
