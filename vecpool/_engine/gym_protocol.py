"""The parent's handle on a worker that speaks Gymnasium's protocol (``worker=``).

A custom ``worker`` keeps Gymnasium's one-env-per-process, pickled-pipe protocol;
this handle translates it into vecpool's numbered :class:`~vecpool._wire.messages.Reply`
objects so the one wait loop in :mod:`vecpool._engine.group` serves it too.
Started by :mod:`vecpool._engine.startup`.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from vecpool._engine.handle import WorkerHandle
from vecpool._wire.messages import Reply
from vecpool._wire.remote_errors import ErrorRecord

__all__ = ["GymProtocolHandle"]


class GymProtocolHandle(WorkerHandle):
    """Handle of a worker that speaks Gymnasium's protocol (a custom ``worker=``)."""

    def __init__(
        self,
        index: int,
        env_indices: range,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
        error_queue: Any,
        by_pipe: bool,
    ) -> None:
        """Wrap a started Gymnasium-protocol worker."""
        super().__init__(index, env_indices, process, conn)
        self.error_queue = error_queue
        self.by_pipe = by_pipe
        self.kinds: deque[str] = deque()

    def _send_gym(self, kind: str, message: tuple[str, Any]) -> int:
        try:
            self.conn.send(message)  # inside ``with HELD``, as every send
        except KeyboardInterrupt:
            self.cut_off()
            raise
        self.kinds.append(kind)
        return self.numbers.sent_one()

    def send_step(
        self,
        message: bytes,  # noqa: ARG002 - Gymnasium's workers speak their own protocol
        actions: list[Any] | None,
    ) -> int:
        """Step the env with its action (always by pipe)."""
        assert actions is not None
        return self._send_gym("step", ("step", actions[0]))

    def send_reset(
        self,
        seeds: list[Any],
        options: dict[str, Any] | None,
        flags: list[bool],
        buffer: int = 0,  # noqa: ARG002 - Gymnasium's workers have one buffer
    ) -> int:
        """Reset the env (or leave it, outside a ``reset_mask``)."""
        if flags[0]:
            return self._send_gym(
                "reset", ("reset", {"seed": seeds[0], "options": options})
            )
        return self._send_gym("reset", ("reset-noop", None))

    def send_call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> int:
        """Call a method of the env."""
        return self._send_gym("call", ("_call", (name, args, kwargs)))

    def send_set_attr(self, name: str, values: list[Any]) -> int:
        """Set an attribute of the env."""
        return self._send_gym("none", ("_setattr", (name, values[0])))

    def send_close(self, timeout: float | None = None) -> int:  # noqa: ARG002
        """Close the env and end the worker."""
        return self._send_gym("none", ("close", None))

    def send_check_spaces(self, data: tuple[Any, Any, Any]) -> int:
        """Ask for Gymnasium's start-up space check."""
        return self._send_gym("call", ("_check_spaces", data))

    def has_message(self) -> bool:
        """Gymnasium's ``Connection`` buffers nothing of its own."""
        return False

    def poll(self) -> bool:
        """Whether a reply (or EOF) can be read now."""
        return self.conn.poll()

    def receive(self) -> bool:
        """Read one reply in Gymnasium's protocol (see :meth:`WorkerHandle.receive`)."""
        try:
            data, success = self.conn.recv()  # inside ``with HELD``, as every receive
        except KeyboardInterrupt:
            self.cut_off()
            raise
        kind = self.kinds.popleft() if self.kinds else "none"
        return self.numbers.absorb((kind, data, success), self._translate)

    def _translate(self, message: tuple[str, Any, bool]) -> Reply | None:
        kind, data, success = message
        index = self.env_indices[0]
        if not success:
            env_index, exc_type, value, trace = self.error_queue.get()
            return Reply(
                errors=[ErrorRecord(env_index, None, exc_type, str(value), trace)]
            )
        if kind == "step":
            obs, reward, terminated, truncated, info = data
            return Reply(
                infos=[(index, info)] if info else None,
                observations=[obs] if self.by_pipe else None,
                step_values=[(index, reward, terminated, truncated)],
            )
        if kind == "reset":
            obs, info = data
            return Reply(
                infos=[(index, info)] if info else None,
                observations=[obs] if self.by_pipe else None,
            )
        if kind == "call":
            return Reply(results=[data])
        return None
