"""The parent's handle on a vecpool worker process (the default kind).

The process runs :func:`vecpool._worker.loop.run_worker`; commands and replies
travel over its pipe (:class:`~vecpool._wire.channel.Channel`), the per-step arrays
through the shared block. Started by :mod:`vecpool._engine.startup`.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection

from vecpool._engine.handle import WorkerHandle
from vecpool._engine.numbering import ReplyNumbers

__all__ = ["ProcessHandle"]


class ProcessHandle(WorkerHandle):
    """Handle of a started vecpool worker process.

    A vecpool worker answers its start-up space check unasked, so that answer is
    awaited from the start: as command 1, or, for a replacement
    (``on_worker_crash="restart"``), as the command after the ``after`` commands of
    the pipe it replaces (answers already read keep their numbers).

    Args:
        index: Worker index.
        env_indices: The envs it hosts.
        process: The started process.
        conn: The parent's end of its pipe.
        after: Commands sent to the worker it replaces (0 for a first start).
    """

    def __init__(
        self,
        index: int,
        env_indices: range,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
        after: int = 0,
    ) -> None:
        """Wrap a started worker process, awaiting its start-up check."""
        numbers = ReplyNumbers(sent=after)
        numbers.expect_also(numbers.sent_one())  # the start-up check, sent unasked
        super().__init__(index, env_indices, process, conn, numbers)
