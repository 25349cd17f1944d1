"""Guards of the parent's bookkeeping: Ctrl-C held back, one thread at a time.

**Ctrl-C.**
A ``KeyboardInterrupt`` can surface right after any call returns: after ``os.write``
handed a command to a worker but before the parent noted it, or after ``os.read``
took a reply off the pipe but before it was stored. Either way the parent's count of
commands and replies would no longer match the pipe's, and every later step would
return another step's rows. Swapping the SIGINT handler around each transfer costs
about 10 microseconds, a tenth of a cheap vector step, so instead a deferring
handler is installed once, while vecpool envs are alive, and only if SIGINT still has
Python's default handler (a program with its own handler keeps it). Inside a
``with HELD`` section it records the signal; the section's end raises the
``KeyboardInterrupt``. A second Ctrl-C inside the same section raises at once, so a
transfer stuck on a hung worker can still be broken off (the caller then treats that
pipe as out of step). A Ctrl-C about to be raised inside a finalizer (a ``__del__``
or a weak-reference callback, which would print and drop it), by the handler or at
a section's end, is raised as that returns instead (:mod:`vecpool._util.interrupts`).
Only while this handler is installed: the last vector env to close uninstalls it
first, so in that env's own ``__del__`` Python's handler drops it, as without
vecpool.

Signals are handled only in the main thread, so sections count only there.

**Threads.** :func:`exclusive` makes a vector env's public methods refuse a call
from a second thread while one is running (a vector env is not thread-safe), with
a :class:`~vecpool.errors.ConcurrentUseError` instead of mixed-up rows.
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from vecpool._util.interrupts import cancel_resends, requeue_in_finalizer
from vecpool.errors import ConcurrentUseError, ForcedInterrupt

__all__ = [
    "HELD",
    "HOLD",
    "MAIN",
    "drop_held",
    "exclusive",
    "install",
    "raise_deferred",
    "uninstall",
]

_MAIN = threading.main_thread().ident
_state = {"depth": 0, "pending": 0, "users": 0}


def _deferring_handler(signum: int, frame: FrameType | None) -> None:
    if (not _state["depth"] or _state["pending"]) and requeue_in_finalizer(
        signum, frame
    ):
        return  # about to raise inside a finalizer, which would drop it: after it
    if not _state["depth"]:
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt
    if _state["pending"]:
        _state["pending"] = 0
        raise ForcedInterrupt
    _state["pending"] = 1


def install() -> bool:
    """Hold Ctrl-C in sections from now on (one call per live vector env).

    Returns:
        Whether this call counted (made in the main thread): pass it to
        :func:`uninstall`.
    """
    if threading.get_ident() != _MAIN:
        return False
    _state["users"] += 1
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _deferring_handler)
    return True


def uninstall() -> None:
    """Undo one counted :func:`install`; the last one puts Python's handler back.

    From another thread the count drops but the handler stays (only the main
    thread may set it); the next main-thread :func:`install` or
    :func:`uninstall` settles it.
    """
    if _state["users"] <= 0:
        return
    _state["users"] -= 1
    if (
        not _state["users"]
        and threading.get_ident() == _MAIN
        and signal.getsignal(signal.SIGINT) is _deferring_handler
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Held:
    """Context manager of :data:`HELD` (one shared instance: no allocation)."""

    __slots__ = ()

    def __enter__(self) -> None:
        if threading.get_ident() == _MAIN:
            _state["depth"] += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if threading.get_ident() != _MAIN:
            return
        _state["depth"] -= 1
        if not _state["depth"] and _state["pending"]:
            _state["pending"] = 0
            if exc is None:
                _raise_interrupt(sys._getframe(1))
            else:  # the exception on its way out stands for the Ctrl-C
                cancel_resends()


HELD = _Held()
"""The held section: ``with HELD:`` a Ctrl-C waits until the section ends."""

HOLD = _state
""":data:`HELD`'s counters, for the one step path, which holds Ctrl-C back without
a call: in the main thread (:data:`MAIN`), ``HOLD["depth"] += 1`` opens a section,
``HOLD["depth"] -= 1`` closes it, and then, if ``HOLD["pending"]`` and no section
is open, :func:`raise_deferred` raises the Ctrl-C that came inside; an exception
leaving the section closes it with :func:`drop_held` instead."""

MAIN = _MAIN
"""The main thread's ident: only there are sections counted."""


def drop_held() -> None:
    """Close a section opened by ``HOLD["depth"] += 1`` as an exception leaves it.

    A Ctrl-C deferred inside is dropped when the outermost section closes (the
    exception on its way out stands for it), as :data:`HELD` does.
    """
    _state["depth"] -= 1
    if not _state["depth"] and _state["pending"]:
        _state["pending"] = 0
        cancel_resends()


def raise_deferred() -> None:
    """Raise the Ctrl-C deferred by a section that :data:`HOLD` opened.

    Raises:
        KeyboardInterrupt: Unless called inside a finalizer, where it would be
            dropped: the signal is then sent again, to be raised after it.
    """
    _state["pending"] = 0
    _raise_interrupt(sys._getframe(1))


def _raise_interrupt(frame: FrameType) -> None:
    """Raise a held Ctrl-C at a section's end, or after the finalizer it is in."""
    if not requeue_in_finalizer(signal.SIGINT, frame):
        raise KeyboardInterrupt


_P = ParamSpec("_P")
_R = TypeVar("_R")


def exclusive(
    method: Callable[Concatenate[Any, _P], _R],
) -> Callable[Concatenate[Any, _P], _R]:
    """Run ``method`` holding ``self._lock``; refuse a call from a second thread.

    The lock is re-entrant, so ``step`` holds it across its ``step_async`` and
    ``step_wait``, and no other thread's call can come between them.

    Args:
        method: A method of an object with a ``threading.RLock`` in ``_lock``.

    Returns:
        The guarded method.
    """
    name = method.__name__

    def guarded(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        lock = self._lock
        if not lock.acquire(blocking=False):
            msg = (
                f"`{name}` was called from thread "
                f"{threading.current_thread().name!r} while another thread is inside "
                "a call on the same vector env. A vector env is not thread-safe: "
                "give each thread its own, or hold a lock around every call."
            )
            raise ConcurrentUseError(msg)
        try:
            return method(self, *args, **kwargs)
        finally:
            lock.release()

    functools.update_wrapper(guarded, method)
    return guarded
