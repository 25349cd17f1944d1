"""An exception raised in a worker, packed to cross the pipe and rebuilt in the parent.

The parent re-raises it with its original type (``concurrent.futures``' habit):
:func:`pack_error` runs in the worker's ``except`` block, :func:`rebuild_exception`
in the parent.
"""

from __future__ import annotations

import contextlib
import pickle
import traceback
from typing import Any, NamedTuple

import cloudpickle

from vecpool.errors import VecPoolError

__all__ = ["ErrorRecord", "pack_error", "rebuild_exception"]


class ErrorRecord(NamedTuple):
    """An exception raised by one sub-environment, ready to cross the pipe.

    Attributes:
        env_index: Global index of the sub-environment.
        exception: The pickled exception, or ``None`` if it does not round-trip.
        exc_type: The exception type, or ``None`` if the type itself cannot be pickled.
        message: ``str(exception)``.
        traceback: The formatted remote traceback.
        attributes: The exception's own attributes that pickle (for a class whose
            ``__init__`` cannot be called again with the message alone).
    """

    env_index: int
    exception: bytes | None
    exc_type: type[BaseException] | None
    message: str
    traceback: str
    attributes: dict[str, Any] | None = None


def pack_error(env_index: int, exc: BaseException) -> ErrorRecord:
    """Capture an exception (called inside its ``except`` block).

    Args:
        env_index: Global index of the env that raised.
        exc: The exception.

    Returns:
        A picklable record; the exception itself travels if it survives a round trip.
    """
    trace = traceback.format_exc()
    data: bytes | None = None
    # plain pickle, else cloudpickle: a class the worker got by value (defined in
    # the parent's `__main__`, under spawn or forkserver) travels back by value,
    # and cloudpickle gives the parent its own class again (the same tracker id)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        try:
            data = bytes(dumps(exc))
            pickle.loads(data)  # checks the round trip (custom __init__ args can fail)
            break
        except Exception:  # noqa: BLE001 - any pickling failure falls back to type + text
            data = None
    exc_type: type[BaseException] | None = type(exc)
    try:
        pickle.dumps(exc_type)
    except Exception:  # noqa: BLE001 - a local class: only the text can travel
        exc_type = None
    attributes: dict[str, Any] = {}
    if data is None:
        for name, value in getattr(exc, "__dict__", {}).items():
            try:
                pickle.loads(pickle.dumps(value))
            except Exception:  # noqa: BLE001 - that attribute stays behind
                continue
            attributes[name] = value
    return ErrorRecord(env_index, data, exc_type, str(exc), trace, attributes)


def rebuild_exception(error: ErrorRecord) -> BaseException:
    """Rebuild the exception a worker reported (the inverse of :func:`pack_error`).

    The original object if it travelled; else its type called with the message; else
    (an ``__init__`` that needs other arguments) the same class built without
    ``__init__``, holding the message and the attributes that pickled, so ``except
    MyEnvError`` still catches it; else a :class:`~vecpool.errors.VecPoolError`
    carrying the message.

    Args:
        error: The record.

    Returns:
        The exception to raise in the parent.
    """
    if error.exception is not None:
        with contextlib.suppress(Exception):
            exception: BaseException = pickle.loads(error.exception)
            return exception
    if error.exc_type is not None:
        with contextlib.suppress(Exception):
            return error.exc_type(error.message)
        with contextlib.suppress(Exception):
            # an __init__ that needs other arguments: the same class, built without
            # calling it, with the message as args and the attributes that travelled
            rebuilt = error.exc_type.__new__(error.exc_type, error.message)
            rebuilt.args = (error.message,)
            rebuilt.__dict__.update(error.attributes or {})
            str(rebuilt)  # a __str__ that needs what did not travel: give up
            return rebuilt
    return VecPoolError(
        f"{error.message} (raised in sub-environment {error.env_index})"
    )
