"""Exception and warning hierarchy of vecpool (all pickle-safe)."""

from __future__ import annotations

from typing import Any

import gymnasium.error

__all__ = [
    "AlreadyPendingCallError",
    "ClosedEnvironmentError",
    "CollectArgumentError",
    "CollectSaveError",
    "ConcurrentUseError",
    "CustomSpaceError",
    "ForcedInterrupt",
    "NoAsyncCallError",
    "OutOfStepError",
    "ReferenceFailedError",
    "RemoteTraceback",
    "VecPoolError",
    "VecPoolPerformanceWarning",
    "VecPoolWarning",
    "VectorEnvCheckError",
    "WorkerCrashedError",
]


class VecPoolError(Exception):
    """Base class of every error vecpool raises itself."""


class VecPoolWarning(UserWarning):
    """Warning for user-fixable misuse of vecpool."""


class VecPoolPerformanceWarning(VecPoolWarning):
    """A setting the user can change to go faster, said once per process.

    E.g. the parent's thread pools (BLAS, torch) plus the workers exceed the CPUs:
    ``policy_threads="auto"`` fits them (vecpool/_util/threads.py). Filter it with
    ``warnings.filterwarnings("ignore", category=vecpool.VecPoolPerformanceWarning)``.
    """


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


class OutOfStepError(VecPoolError):
    """A transfer to or from a worker was cut off half-way (a second Ctrl-C).

    The pipe can no longer be trusted: the next call raises this, naming the worker;
    ``close()`` and a new vector env are the fix.
    """


class ForcedInterrupt(KeyboardInterrupt):
    """A second Ctrl-C that broke off a held section (its transfer may be cut).

    A ``KeyboardInterrupt``, so ``except KeyboardInterrupt`` still catches it.
    """


class CollectArgumentError(VecPoolError, ValueError):
    """An argument of ``vecpool.sampling.collect.collect`` is invalid.

    ``vecpool collect`` then exits with status 2.
    """


class CollectSaveError(VecPoolError, OSError):
    """The collection ran but its file could not be written (exit status 2).

    Attributes:
        pool: The :class:`~vecpool.ReplayPool` collected, to save elsewhere
            (``pool.save(other_path)``), or ``None``.
    """

    pool: Any = None


class VectorEnvCheckError(VecPoolError, AssertionError):
    """A vector env failed :func:`vecpool.check_vector_env`.

    Attributes:
        report: The full :class:`~vecpool.check.CheckReport`.
    """

    def __init__(self, report: Any) -> None:
        """Keep ``report``; the message is its text."""
        super().__init__(str(report))
        self.report = report

    def __reduce__(self) -> tuple[type, tuple[Any]]:
        """Pickle with the report."""
        return (type(self), (self.report,))


class ReferenceFailedError(VecPoolError):
    """The checker's reference env raised (internal to ``vecpool.check``).

    The trajectory stops there and the env under test is not blamed; the report
    lists the reference's error and says NOT FINISHED.
    """
