"""Process-wide hooks of the live vector envs: interpreter exit and ``os.fork``."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util  # its exit hook must be registered first (see below)
import os
import signal
import time
import weakref
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["LIVE_ENVS", "kill_groups", "reap", "release", "shutdown"]

LIVE_ENVS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every vecpool.AsyncVectorEnv not yet closed."""

STARTING_WORKERS = [0]
"""Above 0 while vecpool itself forks its workers (the fork hook skips those)."""


@atexit.register
def _close_all_at_exit() -> None:
    """Close every live vector env before ``multiprocessing`` joins its children.

    Registered after ``multiprocessing.util`` (imported above), so it runs first:
    otherwise non-daemonic workers waiting for commands would block interpreter exit.
    """
    for env in list(LIVE_ENVS):
        with contextlib.suppress(Exception):
            env.close(terminate=True)


def _retire_held_buffers() -> None:
    """Before a fork: take observation buffers still in use out of rotation.

    A forked child shares the shared-memory buffers instead of copying them, so an
    observation array it inherited would change when the parent reuses the buffer.
    vecpool's own workers never read those buffers, so their forks don't count.
    """
    if STARTING_WORKERS[0]:
        return
    for env in list(LIVE_ENVS):
        with contextlib.suppress(Exception):
            env._buffers.obs.retire_held()


def _drop_wide_areas() -> None:
    """In a forked child: drop the parent's maps of its workers' wide-info areas.

    They can be large (vecpool/_wire/wide_infos.py), and a child that kept them
    (a later worker, a replacement, any fork of the user's) would keep another
    worker's memory alive after that worker and its vector env are gone.
    """
    for env in list(LIVE_ENVS):
        with contextlib.suppress(Exception):
            for handle in env._group.handles:
                handle.info_wide = handle.wide_offer = None
        # the child does not own the parent's envs: its exit (atexit, finalizers,
        # __del__) must not close the parent's workers; nor may multiprocessing's
        # own exit hook, which terminates and joins the children it lists (a raw
        # os.fork() keeps the parent's list: a private set, hence the guard)
        with contextlib.suppress(Exception):
            if env._finalizer is not None:
                env._finalizer.detach()
        with contextlib.suppress(Exception):
            children = multiprocessing.process._children  # type: ignore[attr-defined]
            for process in env.processes:
                children.discard(process)
    LIVE_ENVS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_retire_held_buffers, after_in_child=_drop_wide_areas)


def shutdown(
    processes: list[BaseProcess],
    conns: list[Connection],
    groups: bool = True,
) -> None:
    """Terminate and reap worker processes; close pipes. Safe to call twice.

    Args:
        processes: The worker processes.
        conns: The parent's pipe ends.
        groups: The workers lead their own process groups (vecpool's workers do;
            a custom Gymnasium-protocol worker does not): kill what is left in
            them too (processes an env forked).
    """
    for process in processes:
        with contextlib.suppress(Exception):
            if process.is_alive():
                process.terminate()
    if groups:
        kill_groups(processes)  # an env's children would hold the sentinels open
    deadline = time.monotonic() + 2.0
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)
        release(process)
    for conn in conns:
        with contextlib.suppress(Exception):
            conn.close()


def release(process: BaseProcess) -> None:
    """Close the descriptors ``multiprocessing`` keeps for a reaped process.

    Its ``Popen`` holds the pipe behind ``process.sentinel`` until the process
    object is garbage-collected; ``Process.close()`` would close it too, but
    would also make ``is_alive()`` and ``exitcode`` raise, which callers of
    ``close()`` still read (Gymnasium's ``processes``). The exit code stays
    readable: it is known once the process is reaped (issue 38). A process
    still running keeps its descriptors.

    Args:
        process: A worker process (or a stand-in without a ``Popen``).
    """
    popen = getattr(process, "_popen", None)
    if popen is None or getattr(popen, "returncode", None) is None:
        return
    with contextlib.suppress(Exception):
        popen.close()


def reap(processes: list[BaseProcess], deadline: float) -> None:
    """Wait until the workers exit or ``deadline`` (``time.monotonic()``) passes.

    Polls ``exitcode`` (``waitpid``), not the process sentinels: a process an env
    forked inherits the sentinel and would hold it open long after the worker left.

    Args:
        processes: The worker processes.
        deadline: When to stop waiting.
    """
    pause = 0.0005
    while any(process.exitcode is None for process in processes):
        if time.monotonic() >= deadline:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def kill_groups(processes: list[BaseProcess]) -> None:
    """SIGKILL the process group each vecpool worker leads (what its envs forked).

    Args:
        processes: vecpool worker processes (each made itself a group leader).
    """
    for process in processes:
        pid = process.pid
        if pid is None or pid <= 0:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(pid, signal.SIGKILL)
