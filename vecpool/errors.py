"""Exception and warning hierarchy of vecpool (all pickle-safe)."""

from __future__ import annotations

import gymnasium.error

__all__ = [
    "AlreadyPendingCallError",
    "ClosedEnvironmentError",
    "ConcurrentUseError",
    "CustomSpaceError",
    "NoAsyncCallError",
    "RemoteTraceback",
    "VecPoolError",
    "VecPoolWarning",
    "WorkerCrashedError",
]


class VecPoolError(Exception):
    """Base class of every error vecpool raises itself."""


class VecPoolWarning(UserWarning):
    """Warning for user-fixable misuse of vecpool."""


class ClosedEnvironmentError(VecPoolError, gymnasium.error.ClosedEnvironmentError):
    """An operation was attempted on a vector env after ``close()``."""


class AlreadyPendingCallError(VecPoolError, gymnasium.error.AlreadyPendingCallError):
    """An ``*_async`` call was made while another call is still pending."""

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        """Pickle with both constructor arguments."""
        return (type(self), (str(self.args[0]), self.name))


class NoAsyncCallError(VecPoolError, gymnasium.error.NoAsyncCallError):
    """A ``*_wait`` call was made without the matching ``*_async`` call."""

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        """Pickle with both constructor arguments."""
        return (type(self), (str(self.args[0]), self.name))


class CustomSpaceError(VecPoolError, gymnasium.error.CustomSpaceError):
    """A space has no shared-memory layout (the cause of the `ValueError` then)."""


class ConcurrentUseError(VecPoolError, RuntimeError):
    """A vector env was called from a second thread while a call was running.

    A vector env is not thread-safe: each thread needs its own, or the callers
    must hold a lock around every call.
    """


class WorkerCrashedError(VecPoolError):
    """A worker process died without reporting (segfault, OOM kill, ``os._exit``).

    Attributes:
        worker: Index of the worker process.
        env_indices: Indices of the sub-environments that worker hosted.
        exitcode: The process exit code (negative: killed by that signal).
    """

    def __init__(
        self,
        message: str,
        worker: int,
        env_indices: tuple[int, ...],
        exitcode: int | None,
    ) -> None:
        """Build the error; ``message`` is the full human-readable text."""
        super().__init__(message)
        self.worker = worker
        self.env_indices = env_indices
        self.exitcode = exitcode

    def __reduce__(
        self,
    ) -> tuple[type, tuple[str, int, tuple[int, ...], int | None]]:
        """Pickle with every constructor argument."""
        return (
            type(self),
            (str(self.args[0]), self.worker, self.env_indices, self.exitcode),
        )


class RemoteTraceback(Exception):
    """Carries the formatted traceback of an exception raised in a worker.

    It is attached as ``__cause__`` of the re-raised exception, so the remote
    frames show up under "The above exception was the direct cause of ...".
    """

    def __init__(self, traceback_text: str) -> None:
        """Store the formatted remote traceback."""
        super().__init__(traceback_text)
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        """Show the remote traceback verbatim."""
        return f'\n"""\n{self.traceback_text}"""'
