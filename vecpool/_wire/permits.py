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
returns ``None`` and the vector env keeps its semaphore.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import time
from dataclasses import dataclass, field

if sys.platform != "win32":
    import fcntl  # POSIX record locks; LOCK_PERMITS is False where there are none

__all__ = ["LOCK_PERMITS", "LockPermits"]

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

    def close(self) -> None:
        """Close this process's descriptor (the parent's: the file goes with it)."""
        if self._own >= 0:
            with contextlib.suppress(OSError):
                os.close(self._own)
            self._own = self._held = -1
