"""A Ctrl-C that would land in a finalizer, delivered just after it instead.

Python runs a signal handler between two bytecodes of whatever the main thread
executes, and that may be a finalizer: an object's ``__del__`` or a weak-reference
callback (``WeakSet._remove``, ``WeakValueDictionary``'s, ``weakref.finalize``) run
by the garbage collector in the middle of any line. An exception raised there
cannot reach the code around it: Python prints it as "Exception ignored in ..."
with a traceback and drops it. A ``KeyboardInterrupt`` raised by a handler in such
a frame is lost: the Ctrl-C meant to cut a hung step does nothing, and a clean exit
prints a traceback (seen once in ``vecpool collect``'s repeated Ctrl-C test).

:func:`requeue_in_finalizer` lets a handler that is about to raise find out whether
the frame it runs in is inside a finalizer and, if so, send the same signal again
a moment later (:data:`RESEND_SECONDS`), by a short-lived thread: as if the user
pressed Ctrl-C once more, so the handler runs again, and raises once the finalizer
has returned. A signal marked pending from the handler itself
(``_thread.interrupt_main``, ``signal.raise_signal``) would not do: Python runs the
handler again at the very next check, inside the handler, and recurses until a
``RecursionError``; and a real signal, unlike a mark, also breaks a blocking call
(a hung step's wait).

Its limits:

* A finalizer that has not returned after :data:`GIVE_UP_SECONDS` of resends (one
  that hangs) gets the ``KeyboardInterrupt`` raised in it: that ends the hang,
  though Python then drops the exception.
* "Inside a finalizer" is read from the frames: a ``__del__``, or any frame of the
  standard library's ``weakref`` and ``_weakrefset`` modules, called by the garbage
  collector or not (a Ctrl-C in an explicit ``weakref.finalize`` call is raised as
  it returns). A callback of a bare ``weakref.ref`` is not recognisable and stays
  as Python leaves it.
* A handler that raises cancels the resends still to come
  (:func:`requeue_in_finalizer` returning ``False``, or :func:`cancel_resends`):
  the Ctrl-C they stood for is the one raised, not one more.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import time
from types import FrameType

__all__ = [
    "GIVE_UP_SECONDS",
    "RESEND_SECONDS",
    "cancel_resends",
    "in_finalizer",
    "requeue_in_finalizer",
]

RESEND_SECONDS = 0.005
"""How long after a signal that came inside a finalizer it is sent again."""
GIVE_UP_SECONDS = 1.0
"""How long signals are sent again while the main thread stays in finalizers."""

_FINALIZER_FILES = frozenset({"weakref.py", "_weakrefset.py"})


class _Resends:
    """Where the resends stand (class attributes: one state per process).

    ``generation`` moves on when a handler raises (older resends are dropped);
    ``since`` is when the current run of resends began (0.0: none).
    """

    generation = 0
    since = 0.0


def in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a frame that called it is a finalizer.

    Args:
        frame: The frame a signal handler was given (the one it interrupted).

    Returns:
        True when a ``__del__`` or a frame of the standard library's weak-reference
        modules is on the stack.
    """
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (
            os.path.basename(code.co_filename) in _FINALIZER_FILES
        ):
            return True
        frame = frame.f_back
    return False


def requeue_in_finalizer(signum: int, frame: FrameType | None) -> bool:
    """Send ``signum`` again shortly if ``frame`` is inside a finalizer.

    Args:
        signum: The signal being handled.
        frame: The frame the handler was given.

    Returns:
        True when the signal will be sent again: the handler must return without
        raising. False when the handler must raise here (not in a finalizer; in one
        for :data:`GIVE_UP_SECONDS` already; the interpreter shutting down, which
        starts no thread); the resends still to come are then cancelled.
    """
    if in_finalizer(frame):
        now = time.monotonic()
        since = _Resends.since or now
        if now - since < GIVE_UP_SECONDS:
            try:  # _thread, not threading: no Python lock (the code cut may hold one)
                _thread.start_new_thread(
                    _resend, (signum, _thread.get_ident(), _Resends.generation)
                )
            except RuntimeError:  # the interpreter is shutting down
                pass
            else:
                _Resends.since = since
                return True
    cancel_resends()
    return False


def cancel_resends() -> None:
    """Drop the signals still to be sent again: the handler raises now."""
    _Resends.generation += 1
    _Resends.since = 0.0


def _resend(signum: int, ident: int, generation: int) -> None:
    time.sleep(RESEND_SECONDS)
    if _Resends.generation != generation:
        return  # a Ctrl-C was raised meanwhile: the one this stood for
    with contextlib.suppress(OSError):  # the main thread is gone: nobody to tell
        if hasattr(signal, "pthread_kill"):
            signal.pthread_kill(ident, signum)
        else:  # Windows: marked pending only
            _thread.interrupt_main(signal.Signals(signum))
