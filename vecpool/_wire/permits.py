"""``max_concurrency`` permits the kernel gives back when a worker dies.

A permit is a POSIX record lock (``fcntl.lockf``) on one byte of an anonymous
``memfd`` of ``max_concurrency`` bytes: at most that many workers hold one at a
time, and a worker that dies holding one, even SIGKILLed between taking it and
anything else, loses it to the kernel, which releases every lock of a process
that exits. (A semaphore plus a "holding" mark could lose a permit to a kill
between the two: with ``max_concurrency=1`` the other workers then waited for
ever.)

The parent creates the file; each worker opens it through
``/proc/<parent pid>/fd/<fd>`` (any start method: the lock belongs to the
worker's own process, not to a descriptor it inherited). A worker first tries
every byte without waiting, from its own (``index % count``). When all are taken,
the waiters queue on one more byte (the turnstile): its holder polls every permit
byte, sleeping 20 us to 1 ms between tries, so a freed permit goes to a waiter
within about a millisecond whichever it is. The count is never exceeded, and a
worker never waits while holding a permit, so no two can wait for each other.
Limits: POSIX record locks belong to the process, so an env that closes a
descriptor of this file (one inherited under ``fork``) drops its worker's permit;
a parent that is not dumpable hides its descriptors, and the semaphore is used.
Where there is no ``memfd`` or ``/proc`` (not Linux), :meth:`LockPermits.create`
returns ``None`` and :func:`create_permits` falls back to
:class:`SemaphorePermits`: a semaphore plus a byte per worker that marks it as
holding one, so the parent can give back the permit of a worker that died holding
it (a worker killed between taking the semaphore and marking it, a few
instructions, takes the permit with it; docs/reliability.md). Workers and the
parent see one interface (:class:`Permits`), whichever it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

if sys.platform != "win32":
    import fcntl  # POSIX record locks; LOCK_PERMITS is False where there are none

__all__ = [
    "LOCK_PERMITS",
    "LockPermits",
    "Permits",
    "SemaphorePermits",
    "create_permits",
]

LOCK_PERMITS = hasattr(os, "memfd_create") and sys.platform.startswith("linux")
"""Whether lock permits are possible here (Linux, with ``memfd_create``)."""

_TAKEN = (errno.EAGAIN, errno.EACCES)
_FIRST_DELAY, _LAST_DELAY = 2e-5, 1e-3
"""The polling waiter's sleeps between tries (doubling): a freed permit is taken
within about a millisecond, at a few percent of one core."""
_PR_GET_DUMPABLE = 3


def _dumpable() -> bool:
    """Whether workers may open this process's ``/proc/<pid>/fd`` (it is dumpable).

    A process made non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, a setuid start)
    hides its descriptors from others of the same user: then the semaphore is used.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 1)
    except (OSError, AttributeError):
        return False


class Permits(Protocol):
    """``max_concurrency`` permits, as a worker and the parent use them."""

    def open(self) -> None:
        """Prepare this worker's use (before the first :meth:`acquire`)."""
        ...

    def acquire(self, index: int) -> None:
        """Take a permit for worker ``index`` (waiting while none is free)."""
        ...

    def release(self) -> None:
        """Give back the permit this worker holds (nothing if none)."""
        ...

    def give_back(self, index: int) -> None:
        """In the parent: free the permit dead worker ``index`` may have held."""
        ...

    def close(self) -> None:
        """Let go of this process's resources."""
        ...


def create_permits(count: int, num_workers: int, ctx: Any) -> Permits:
    """``count`` permits for ``num_workers`` workers: locks where possible.

    Args:
        count: ``max_concurrency``.
        num_workers: The worker processes that take them.
        ctx: The ``multiprocessing`` context (for the fallback's semaphore).

    Returns:
        :class:`LockPermits`, or the fallback :class:`SemaphorePermits` where
        locks cannot be used (not Linux; a parent that is not dumpable).
    """
    permits = LockPermits.create(count)
    if permits is not None:
        return permits
    return SemaphorePermits(ctx.BoundedSemaphore(count), ctx.RawArray("b", num_workers))


@dataclass
class SemaphorePermits:
    """The fallback: a semaphore, and a byte per worker marking it held.

    Attributes:
        semaphore: The ``multiprocessing`` semaphore of ``max_concurrency``.
        holding: One byte per worker: 1 while it holds a permit.
    """

    semaphore: Any
    holding: Any
    _index: int = field(default=-1, repr=False)  # this worker's, while held

    def open(self) -> None:
        """Nothing to open: the semaphore came with the configuration."""

    def acquire(self, index: int) -> None:
        """Take the semaphore, then mark this worker as holding it."""
        self.semaphore.acquire()
        self.holding[index] = 1  # a death from here on: the parent gives it back
        self._index = index

    def release(self) -> None:
        """Unmark, then release the semaphore (nothing if not held)."""
        if self._index >= 0:
            self.holding[self._index] = 0
            self._index = -1
            self.semaphore.release()

    def give_back(self, index: int) -> None:
        """Release the permit dead worker ``index`` held, if it held one."""
        if self.holding[index]:
            self.holding[index] = 0
            with contextlib.suppress(ValueError):
                self.semaphore.release()

    def close(self) -> None:
        """Nothing to close (the semaphore goes with its last user)."""


@dataclass
class LockPermits:
    """``count`` permits as locks on the bytes of a ``memfd`` (see the module).

    Pickled into each worker's configuration; :meth:`open` there.

    Attributes:
        count: Number of permits (``max_concurrency``).
        pid: The parent's process id.
        fd: The ``memfd`` in the parent.
    """

    count: int
    pid: int
    fd: int
    _own: int = field(default=-1, repr=False)  # this process's descriptor
    _held: int = field(default=-1, repr=False)  # the byte locked, or -1

    @classmethod
    def create(cls, count: int) -> LockPermits | None:
        """A new set of ``count`` permits, or ``None`` where locks cannot be used."""
        if not LOCK_PERMITS or not _dumpable():
            return None
        try:
            fd = os.memfd_create("vecpool-permits", os.MFD_CLOEXEC)
            os.ftruncate(fd, count + 1)  # the permits, then the turnstile
        except OSError:
            return None
        return cls(count, os.getpid(), fd, fd)

    def __getstate__(self) -> dict[str, int]:
        """What a worker needs: not this process's descriptor or lock."""
        return {"count": self.count, "pid": self.pid, "fd": self.fd}

    def __setstate__(self, state: dict[str, int]) -> None:
        """Rebuilt in a worker: :meth:`open` before the first :meth:`acquire`."""
        self.count, self.pid, self.fd = state["count"], state["pid"], state["fd"]
        self._own = self._held = -1

    def open(self) -> None:
        """Open the parent's file in this worker.

        Raises:
            OSError: If the parent's file cannot be opened (the parent gone).
        """
        if self._own < 0:
            self._own = os.open(f"/proc/{self.pid}/fd/{self.fd}", os.O_RDWR)

    def acquire(self, index: int) -> None:
        """Take a permit: any free one at once, else queue on the turnstile."""
        if self._own < 0:
            self.open()
        first = index % self.count
        if self._take_free(first):
            return
        # every permit taken: one waiter at a time (the holder of the turnstile
        # byte, after the permits) polls them all; the others wait in the kernel
        turnstile = self.count
        fcntl.lockf(self._own, fcntl.LOCK_EX, 1, turnstile, os.SEEK_SET)
        try:
            delay = _FIRST_DELAY
            while not self._take_free(first):
                time.sleep(delay)
                delay = min(2 * delay, _LAST_DELAY)
        finally:
            fcntl.lockf(self._own, fcntl.LOCK_UN, 1, turnstile, os.SEEK_SET)

    def _take_free(self, first: int) -> bool:
        """Lock the first free permit byte from ``first`` on; whether one was."""
        count, own = self.count, self._own
        for step in range(count):
            byte = (first + step) % count
            try:
                fcntl.lockf(own, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, byte, os.SEEK_SET)
            except OSError as exc:
                if exc.errno in _TAKEN:
                    continue
                raise
            self._held = byte
            return True
        return False

    def release(self) -> None:
        """Give back the permit held (nothing if none)."""
        if self._held >= 0:
            fcntl.lockf(self._own, fcntl.LOCK_UN, 1, self._held, os.SEEK_SET)
            self._held = -1

    def give_back(self, index: int) -> None:
        """Nothing to do: the kernel released a dead worker's locks."""
        del index

    def close(self) -> None:
        """Close this process's descriptor (the parent's: the file goes with it)."""
        if self._own >= 0:
            with contextlib.suppress(OSError):
                os.close(self._own)
            self._own = self._held = -1
