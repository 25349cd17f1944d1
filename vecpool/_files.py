"""Atomic file writes: a file is either the old one or the whole new one."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["remove_stale_temporaries", "write_atomically"]


def write_atomically(target: Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write ``target`` through a temporary file beside it, then rename it over.

    The temporary file is flushed and synced before the rename, and the directory
    after it: ``target`` is never a partial file, and a previous file there stays
    intact if the write fails. An exception removes the hidden ``.NAME.PID.*.tmp``
    file; a process killed mid-write leaves it, and the next write of ``target``
    removes the temporary files of writers that are no longer running.

    Args:
        target: The file to write.
        write: Writes the contents to the open binary handle it is given.

    Returns:
        ``target``.
    """
    remove_stale_temporaries(target)
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


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove the temporary files of ``target`` whose writer process is gone.

    Args:
        target: The file that :func:`write_atomically` writes.

    Returns:
        The files removed.
    """
    removed: list[Path] = []
    prefix = f".{target.name}."
    try:
        candidates = list(target.parent.glob(f"{glob.escape(prefix)}*.tmp"))
    except OSError:
        return removed
    for path in candidates:
        pid_text = path.name[len(prefix) :].split(".", 1)[0]
        if not pid_text.isdigit() or _running(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or not a pid): leave its file alone
    return True
