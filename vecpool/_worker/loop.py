"""Child side: the entry point of a worker process and its command loop.

The loop waits for a command (spinning on its doorbell while the parent says its
gaps are short: a byte of the shared block, see vecpool/_engine/spinning.py and
vecpool/_wire/bell.py), takes it from the bell or reads it from the channel, has
:func:`vecpool._worker.host.serve` run it and sends the reply. This is what
``spawn``/``forkserver`` children import: it imports only the wire layer and the
host, never the parent's engine, the pool, the sampler or the bench.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from vecpool._wire.bell import (
    ANSWERED,
    BUFFER,
    COLUMNS,
    COMMAND,
    PIPED,
    WAITING,
    fence,
    wait_for_command,
)
from vecpool._wire.channel import Channel
from vecpool._wire.messages import INFOS_IN_MEMORY, STEP, WAKE, WorkerConfig
from vecpool._wire.spin import spin_until_ready
from vecpool._worker.host import IN_WORKER, open_host, serve

__all__ = ["WAITS", "WaitCounts", "run_worker", "wait_counts"]


def _ignore_signal(signum: int, frame: Any) -> None:
    """Swallow SIGINT in workers (the parent handles Ctrl-C and closes them)."""


PARENT_WATCH_SECONDS = 0.2
"""How often a worker checks that the process that started it still lives."""


_UNKNOWN = b"?"
"""What :func:`_started` says when it cannot tell (e.g. EMFILE, EACCES)."""


def _started(pid: int) -> bytes | None:
    """The start time of process ``pid`` (``None``: gone or a zombie).

    :data:`_UNKNOWN` when ``/proc`` cannot be read now (no /proc, a full fd
    table, a sandbox): never taken for a death.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return _UNKNOWN
    return None if fields[0] == b"Z" else fields[19]


def owner_start() -> bytes | None:
    """This process's start time (``None`` where ``/proc`` cannot tell)."""
    started = _started(os.getpid())
    return None if started == _UNKNOWN else started


def _watch_parent(parent: int, parent_start: bytes | None = None) -> None:
    """End this worker (and what its envs forked) when the vector env's owner dies.

    A worker waiting for a command notices a dead parent by its pipe; one stuck in
    an env's step does not. A daemon thread checks every
    :data:`PARENT_WATCH_SECONDS` that the process owning the vector env (``parent``;
    under ``forkserver`` not this worker's parent) still lives, by its pid and
    start time (a pid reused since is not it); where there is no ``/proc``, that
    this worker's parent is unchanged. Once it is gone (SIGKILL, a crash), the
    worker kills the process group it leads, itself included, so no orphan is left.
    (An env stuck in C code that holds the GIL stops the check too.)
    """
    started = parent_start or _started(parent)
    ppid = os.getppid()

    def alive() -> bool:
        if started is not None and started != _UNKNOWN:
            now = _started(parent)
            return now in (_UNKNOWN, started)
        return os.getppid() == ppid

    def watch() -> None:
        while alive():
            time.sleep(PARENT_WATCH_SECONDS)
        with contextlib.suppress(OSError):
            if os.getpgid(0) == os.getpid():  # a group of its own: env children too
                os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="vecpool parent watch", daemon=True).start()


class WaitCounts:
    """How this worker process waited for its commands, counted since it started.

    One per process (:data:`WAITS`); the command loop adds one per command it waits
    for, before reading it. The counts show whether the workers spin while the
    parent computes (the point of ``wait_strategy="auto"``) without timing CPU
    seconds: a test reads them in the worker through :func:`wait_counts`.

    Attributes:
        spinning: Commands it waited for with spinning allowed (a spin budget, and
            the parent's hint, if it reads one, said spin); it spun unless the
            command was already there.
        blocking: Commands it waited for blocked (no spin budget, or the hint said
            block: the parent computes between steps).
    """

    __slots__ = ("blocking", "spinning")

    def __init__(self) -> None:
        """Start at zero."""
        self.spinning = 0
        self.blocking = 0


WAITS = WaitCounts()
"""This process's :class:`WaitCounts` (zero outside a worker process)."""


def wait_counts() -> dict[str, int]:
    """This process's :data:`WAITS` as ``{"spinning": ..., "blocking": ...}``.

    A module-level function, so it pickles by name: a test sets it as an env
    attribute (``envs.set_attr("wait_counts", wait_counts)``) and calls it in every
    worker (``envs.call("wait_counts")``), whatever the envs.
    """
    return {"spinning": WAITS.spinning, "blocking": WAITS.blocking}


def run_worker(
    conn: Connection, parent_conn: Connection | None, config: WorkerConfig
) -> None:
    """Entry point of a worker process.

    Creates the hosted envs, reports the space check (or the construction error),
    then serves commands until ``CLOSE`` or until the parent goes away.

    Args:
        conn: This worker's end of the pipe.
        parent_conn: The parent's end, closed here so a dead parent is noticed.
        config: The worker configuration.
    """
    # Ctrl-C goes to the whole process group; the parent decides how to shut down.
    # A no-op handler rather than SIG_IGN: programs an env execs get the default back.
    signal.signal(signal.SIGINT, _ignore_signal)
    # lead a process group of its own: on close the parent kills the group, so
    # processes an env forked do not outlive it (nor hold its sentinel open)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    _watch_parent(config.parent_pid or os.getppid(), config.parent_start)
    if parent_conn is not None:
        parent_conn.close()
    envs: list[Any] = []
    channel = Channel(conn.fileno())
    try:
        host, first = open_host(config, envs, IN_WORKER)
        spin, spin_yield = config.spin, config.spin_yield
        # a doorbell (vecpool/_wire/bell.py): plain steps come through shared memory
        # (a worker that never spins blocks on its pipe: it needs no bell). What it
        # holds is read before the start-up reply: the parent may ring right after.
        bell: Any = None
        if spin and config.bell and host is not None:
            bell = config.block.words(config.layout.bells, config.start)
        seen = bell[COMMAND] if bell is not None else 0
        channel.send(first)
        if host is None:
            return  # an env constructor raised: reported, nothing to serve
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        hint = config.block.byte(config.layout.spin_hint) if config.spin_hint else None
        running = True
        waited: bool | None = None  # how it waits for this command (a wake: again)
        while running:
            # the parent says (a shared byte) whether it computes between steps
            spins = spin > 0.0 and (hint is None or bool(hint.value))
            if waited is None:
                waited = spins
            rung = False
            if bell is not None:
                rung = wait_for_command(
                    bell, seen, channel, poller, spin if spins else 0.0, spin_yield
                )
            elif spins and not channel.has_message() and not poller.poll(0):
                spin_until_ready(poller, spin, spin_yield)  # restarts: no bell
            if rung:
                seen = bell[COMMAND]
                data: bytes | memoryview = bytes((STEP[0], bell[BUFFER]))
            else:
                try:
                    data = channel.recv()
                except (EOFError, OSError):
                    break  # the parent is gone: nothing left to serve
                if not data:
                    continue  # a wake: the command is on the bell
            if waited:
                WAITS.spinning += 1
            else:
                WAITS.blocking += 1
            waited = None
            reply, running = serve(host, data)
            if rung and (not reply or reply == INFOS_IN_MEMORY):
                # nothing to say but "infos in their rows": the bell alone answers
                bell[PIPED] = COLUMNS if reply else 0
                fence()  # the step's rows, then the flag, before the number
                bell[ANSWERED] = seen
                fence()  # the number before the look at WAITING (bell.py)
                if bell[WAITING]:  # the parent blocks on the pipe: wake it
                    try:
                        channel.send(WAKE)
                    except OSError:
                        break
                continue
            if rung:
                bell[PIPED] = 1
            try:
                channel.send(reply)
            except OSError:
                break
            if rung:  # its reply is in the pipe: the parent may read it unpolled
                fence()
                bell[ANSWERED] = seen
    finally:
        for env in envs:
            with contextlib.suppress(*IN_WORKER):
                env.close()
        with contextlib.suppress(Exception):
            conn.close()
        sys.stdout.flush()
