"""Ctrl-C held back while the parent's bookkeeping must be all or nothing.

A ``KeyboardInterrupt`` can surface right after any call returns: after ``os.write``
handed a command to a worker but before the parent noted it, or after ``os.read``
took a reply off the pipe but before it was stored. Either way the parent's count of
commands and replies would no longer match the pipe's, and every later step would
return another step's rows. Swapping the SIGINT handler around each transfer costs
about 10 microseconds, a tenth of a cheap vector step, so instead a deferring
handler is installed once, while vecpool envs are alive, and only if SIGINT still has
Python's default handler (a program with its own handler keeps it). Inside a
:func:`held` section it records the signal; the section's end raises the
``KeyboardInterrupt``. A second Ctrl-C inside the same section raises at once, so a
transfer stuck on a hung worker can still be broken off (the caller then treats that
pipe as out of step).

Signals are handled only in the main thread, so sections count only there.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

__all__ = ["ForcedInterrupt", "held", "install", "uninstall"]

_MAIN = threading.main_thread().ident
_state = {"depth": 0, "pending": 0, "users": 0}


class ForcedInterrupt(KeyboardInterrupt):
    """A second Ctrl-C that broke off a held section (its transfer may be cut)."""


def _deferring_handler(signum: int, frame: FrameType | None) -> None:
    if not _state["depth"]:
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt
    if _state["pending"]:
        _state["pending"] = 0
        raise ForcedInterrupt
    _state["pending"] = 1


def install() -> None:
    """Hold Ctrl-C in sections from now on (one call per live vector env)."""
    if threading.get_ident() != _MAIN:
        return
    _state["users"] += 1
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _deferring_handler)


def uninstall() -> None:
    """Undo one :func:`install`; the last one puts Python's handler back."""
    if threading.get_ident() != _MAIN or _state["users"] <= 0:
        return
    _state["users"] -= 1
    if not _state["users"] and signal.getsignal(signal.SIGINT) is _deferring_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Held:
    """Context manager for :func:`held` (one shared instance: no allocation)."""

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
                raise KeyboardInterrupt


_HELD = _Held()


def held() -> _Held:
    """A section in which a Ctrl-C waits until the section ends.

    Returns:
        A reusable context manager.
    """
    return _HELD
