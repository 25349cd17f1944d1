"""Processes an env under check leaves running after ``close()`` (Linux).

A worker's children (a simulator, a ``sleep`` an env started) outlive it when the
worker exits without ending them; they are then reparented to init and nobody
sees them. During a check, the checking process becomes a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``), so such orphans are reparented to it instead:
after the vector envs are closed, :meth:`Orphans.collect` finds every descendant
that did not exist before the check (other than ``multiprocessing``'s own workers
and helpers, judged elsewhere), terminates it, reaps it and names it for the
report. The previous subreaper setting is restored afterwards. Where ``prctl`` or
``/proc`` is missing, nothing is found.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["Orphans"]

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return getattr(libc, "prctl", None)


def _process_table() -> dict[int, tuple[int, str, str]]:
    """``pid -> (ppid, state, command line)`` of every process, from ``/proc``."""
    table: dict[int, tuple[int, str, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:  # gone while we listed
            continue
        fields = text[text.rindex(")") + 2 :].split()
        name = command.replace(b"\0", b" ").decode(errors="replace").strip()
        table[int(stat.parent.name)] = (int(fields[1]), fields[0], name or "?")
    return table


def _descendants(roots: set[int] | None = None) -> dict[int, tuple[str, str]]:
    """Descendants of this process: ``pid -> (state, command line)``.

    Args:
        roots: Only the subtrees of these direct children (``None``: all).
    """
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, tuple[str, str]] = {}
    me = os.getpid()
    stack = [pid for pid in children.get(me, []) if roots is None or pid in roots]
    for pid in stack:
        found[pid] = table[pid][1:]
    while stack:
        for pid in children.get(stack.pop(), []):
            found[pid] = table[pid][1:]
            stack.append(pid)
    return found


def _multiprocessing_pids() -> set[int]:
    """Workers ``multiprocessing`` knows and its long-lived helpers."""
    pids = {child.pid for child in multiprocessing.active_children() if child.pid}
    forkserver: Any = multiprocessing.forkserver
    tracker_module: Any = multiprocessing.resource_tracker
    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    tracker = getattr(tracker_module._resource_tracker, "_pid", None)
    return pids | {pid for pid in (server, tracker) if pid}


class Orphans:
    """Catch, for the length of a ``with`` block, the processes envs leave running.

    Example:
        >>> with Orphans() as orphans:
        ...     pass  # create, use and close vector envs
        >>> orphans.collect()
        []
    """

    def __init__(self) -> None:
        """Nothing is done before ``__enter__``."""
        self._prctl = _prctl()
        self._before: set[int] = set()
        self._previous: int | None = None

    def __enter__(self) -> Orphans:
        """Become a child subreaper and note the descendants there are now."""
        self._before = set(_descendants()) if self._prctl is not None else set()
        # (processes here before the check, and all their later children, are
        # never counted: only what becomes a new child of this process)
        if self._prctl is not None:
            value = ctypes.c_int(0)
            if self._prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0:
                self._previous = value.value
                self._prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return self

    def __exit__(self, *exc: object) -> None:
        """Restore the subreaper setting."""
        if self._prctl is not None and self._previous is not None:
            self._prctl(_PR_SET_CHILD_SUBREAPER, self._previous, 0, 0, 0)
            self._previous = None

    def collect(self, grace: float = 1.0) -> list[str]:
        """End the new descendants still running; return ``"command (pid N)"`` each.

        Args:
            grace: Seconds given to each after SIGTERM before SIGKILL.
        """
        if self._prctl is None:
            return []
        skip = self._before | _multiprocessing_pids()
        # this process's new direct children (orphans reparented here among them)
        # and their subtrees: not new children of processes that were here before
        me = os.getpid()
        roots = {
            pid
            for pid, (ppid, _, _) in _process_table().items()
            if ppid == me and pid not in skip
        }
        found: dict[int, str] = {}
        for pid, (state, name) in _descendants(roots).items():
            if pid in skip:
                continue
            if state == "Z":  # it ended: reap it if it is ours, report nothing
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
                continue
            found[pid] = name
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        left = set(found)
        while left and time.monotonic() < deadline:
            for pid in list(left):
                if not _alive(pid):
                    left.discard(pid)
            time.sleep(0.02)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in found:  # our children now (reparented here): reap them
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0 if pid in left else os.WNOHANG)
        return [f"{name} (pid {pid})" for pid, name in sorted(found.items())]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; our own child is reaped here)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"
