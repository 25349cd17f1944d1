"""Env exceptions reported in worker replies, raised in the parent as Gymnasium does."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from gymnasium import logger

from vecpool._engine.handle import WorkerHandle
from vecpool._util.notes import add_note
from vecpool._wire.messages import Reply
from vecpool._wire.remote_errors import ErrorRecord, rebuild_exception
from vecpool.errors import RemoteTraceback

__all__ = ["raise_env_errors"]


def raise_env_errors(
    replies: Iterable[Reply | None],
    owner: str,
    *,
    log: bool = True,
    handles: Sequence[WorkerHandle] | None = None,
) -> None:
    """Raise the last env exception in ``replies`` (if any), as Gymnasium does.

    Gymnasium's log lines say "Worker-i" for env ``i`` (it has one env a worker)
    and "Shutting it down", and its own test suite matches and counts them, so
    they stay word for word. The exception carries the truth instead, in notes
    (:func:`_truth`): which envs raised, which processes step them, and that
    nothing was shut down. Its message stays the env's, as Gymnasium's does. The
    notes are the exception's ``__notes__`` on every Python, written as
    ``add_note`` would (but also on an exception whose ``__setattr__`` refuses,
    such as a frozen dataclass); Python 3.10's own traceback does not print notes
    (the ``exceptiongroup`` backport, where imported, does), so there the chained
    remote traceback's text starts with them too.

    Args:
        replies: Worker replies.
        owner: The vector env's class name, for the note.
        log: Whether to write Gymnasium's log lines (its own API's errors only).
        handles: The handles that sent ``replies`` (to name the processes).

    Raises:
        BaseException: The env's exception, original type, with the remote
            traceback as ``__cause__`` and a note naming the env.
    """
    errors = [
        error for reply in replies if reply and reply.errors for error in reply.errors
    ]
    if not errors:
        return
    for error in errors if log else ():
        logger.error(
            f"Received the following error from Worker-{error.env_index} - "
            "Shutting it down"
        )
        logger.error("%s", error.traceback)
    if log:
        logger.error("Raising the last exception back to the main process.")
    last = errors[-1]
    exception = rebuild_exception(last)
    where = f"raised in sub-environment {last.env_index} of {owner}"
    notes = [where]
    if log and handles is not None:
        notes.append(_truth(errors, handles))
    for note in notes:
        add_note(exception, note)
    heading = f"({where})"
    if sys.version_info < (3, 11):  # 3.10 prints no notes: the cause says them
        heading = "\n".join([heading, *notes[1:]])
    raise exception from RemoteTraceback(f"{heading}\n{last.traceback}")


def _truth(errors: Sequence[ErrorRecord], handles: Sequence[WorkerHandle]) -> str:
    """What Gymnasium's log lines do not say: the envs, the processes, no shutdown."""
    raised = sorted({error.env_index for error in errors})
    places = []
    for handle in handles:
        envs = [index for index in raised if index in handle.env_indices]
        if envs:
            who = (
                "the parent process"
                if handle.runs_here
                else (f"worker process {handle.index}")
            )
            places.append(f"{_envs(envs)} in {who}")
    count = f"{len(raised)} sub-environment{'s' if len(raised) > 1 else ''}"
    return (
        f"vecpool: the log lines above name sub-environment i 'Worker-i', as "
        f"Gymnasium (one env a worker) does; {count} raised: "
        f"{'; '.join(places)}. Nothing was shut down: every env and worker process "
        "stays usable (reset the envs that raised, or all, and go on)."
    )


def _envs(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"env {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"envs {indices[0]}-{indices[-1]}"
    return "envs " + ", ".join(map(str, indices))
