"""Env exceptions reported in worker replies, raised in the parent as Gymnasium does."""

from __future__ import annotations

from collections.abc import Iterable

from gymnasium import logger

from vecpool._wire.messages import Reply
from vecpool._wire.remote_errors import rebuild_exception
from vecpool.errors import RemoteTraceback

__all__ = ["raise_env_errors"]


def raise_env_errors(
    replies: Iterable[Reply | None], owner: str, *, log: bool = True
) -> None:
    """Raise the last env exception in ``replies`` (if any), as Gymnasium does.

    Args:
        replies: Worker replies.
        owner: The vector env's class name, for the note.
        log: Whether to write Gymnasium's log lines (its own API's errors only).

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
    add_note = getattr(exception, "add_note", None)
    if add_note is not None:  # Python >= 3.11
        add_note(where)
    raise exception from RemoteTraceback(f"({where})\n{last.traceback}")
