"""Atomic file writes: a file is either the old one or the whole new one."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = [
    "STALE_AGE",
    "check_output_file",
    "remove_stale_temporaries",
    "write_atomically",
]

STALE_AGE = 60.0
"""Seconds a dead writer's temporary file must have been untouched to be removed."""
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def check_output_file(
    path: str | os.PathLike[str],
    name: str,
    *,
    error: type[Exception] = ValueError,
) -> Path:
    """``path`` as a file a command will write at its end, checked at its start.

    So that a long run does not lose its result to a typo: the file must not be
    a directory, and its folder must exist and be writable.

    Args:
        path: The file.
        name: The argument, as the user wrote it (e.g. ``"--plot"``).
        error: The exception type to raise.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: (or ``error``) naming the argument and what is wrong.
    """
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        msg = f"{name}: {str(target)!r} is a directory; name a file in it."
    elif not folder.is_dir():
        msg = f"{name}: the folder {str(folder)!r} does not exist."
    elif not os.access(folder, os.W_OK):
        msg = f"{name}: the folder {str(folder)!r} is not writable."
    else:
        return target
    raise error(msg)


def write_atomically(target: Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write ``target`` through a temporary file beside it, then rename it over.

    The temporary file is flushed and synced before the rename, and the directory
    after it: ``target`` is never a partial file, and a previous file there stays
    intact if the write fails. An exception removes the hidden
    ``.NAME.HOST.PID.*.tmp`` file; a process killed mid-write leaves it, and a later
    write of ``target`` removes it (see :func:`remove_stale_temporaries`).

    Args:
        target: The file to write.
        write: Writes the contents to the open binary handle it is given.

    Returns:
        ``target``.
    """
    remove_stale_temporaries(target)
    temporary = target.with_name(
        f".{target.name}.{_HOST}.{os.getpid()}.{id(write):x}.tmp"
    )
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


def remove_stale_temporaries(target: Path, min_age: float = STALE_AGE) -> list[Path]:
    """Remove the temporary files of ``target`` whose writer process is gone.

    Only files named exactly as :func:`write_atomically` names them for ``target``,
    written on this host, by a process that no longer exists, and untouched for
    ``min_age`` seconds: a live writer's file, another target's (``NAME.7`` beside
    ``NAME``), or a writer on another machine sharing the directory is never taken.

    Args:
        target: The file that :func:`write_atomically` writes.
        min_age: Seconds since the file was last written.

    Returns:
        The files removed.
    """
    removed: list[Path] = []
    pattern = re.compile(
        rf"\.{re.escape(target.name)}\.{re.escape(_HOST)}\.(\d+)\.[0-9a-f]+\.tmp"
    )
    prefix = f".{target.name}.{_HOST}."
    try:
        candidates = list(target.parent.glob(f"{glob.escape(prefix)}*.tmp"))
    except OSError:
        return removed
    now = time.time()
    for path in candidates:
        match = pattern.fullmatch(path.name)
        if match is None or _running(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime < min_age:
                continue
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
