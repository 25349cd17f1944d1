"""The in-process mode (``num_workers=0``): the envs run in the parent, in turn.

On few cores, cheap envs step faster in the parent than behind a pipe: a process
switch costs more than a CartPole step. With ``num_workers=0`` the one "worker" is a
:class:`InProcessHandle` whose channel runs each command at once, through the same
:func:`vecpool._worker.host.serve` a worker process uses, on the same buffers: results,
errors, autoreset, ``send``/``recv`` and env states are those of the process engine
(hence Gymnasium's), and :meth:`WorkerGroup.wait` finds the answer already there.

There is no isolation: an env that crashes the interpreter takes the parent with
it, a step cannot time out (it has run by the time ``step_wait`` is called), and a
Ctrl-C is handled once the step in progress ends.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from vecpool._engine.handle import WorkerHandle, decode_reply
from vecpool._util.closing import close_all_within
from vecpool._wire.messages import STEP, Reply, WorkerConfig, encode
from vecpool._wire.remote_errors import pack_error
from vecpool._worker.host import open_host, serve

__all__ = ["InProcessHandle"]


class _Quiet:
    """A pipe that ``poll`` reports ready only once :meth:`ring` wrote to it.

    The wait loop registers every handle's pipe and process sentinel; an
    in-process handle gives it these: its answers come through the channel's
    buffer, and its sentinel rings when its envs stop (closed, or a command
    stopped half-way), as a worker process's does when it exits.
    """

    def __init__(self) -> None:
        self.read, self.write = os.pipe()

    def fileno(self) -> int:
        return self.read

    def poll(self, timeout: float = 0.0) -> bool:
        del timeout
        return False

    def ring(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.write, b"x")

    def close(self) -> None:
        for fd in (self.read, self.write):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.read = self.write = -1


class _LocalChannel:
    """A channel whose ``send`` queues the command; the call's wait runs it here."""

    def __init__(self, config: WorkerConfig) -> None:
        self.envs: list[Any] = []
        self.host: Any = None  # close_envs() reads it if a constructor is cut
        try:
            self.host, first = open_host(config, self.envs)
        except BaseException:
            self.close_envs()
            raise
        self.buffer: deque[bytes] = deque([first])
        self.queued: deque[bytes] = deque()  # commands sent, not run yet
        self.on_stop: Callable[[], None] | None = None  # rings the sentinel
        self.running = self.host is not None
        self.broken_by: str | None = None  # what stopped a command half-way

    def send(self, data: bytes) -> None:
        """Queue a command; :meth:`run_queued` runs it (in the call's wait)."""
        if not self.running or self.host is None:
            msg = "the in-process envs are closed"
            raise BrokenPipeError(msg)
        self.queued.append(data)

    def run_queued(self) -> None:
        """Run the queued commands, in order, and queue their replies."""
        try:
            while self.queued and self.running and self.host is not None:
                data = self.queued.popleft()
                reply, self.running = serve(self.host, data)
                if not self.running:  # CLOSE: the host closed the envs
                    self.envs.clear()
                    self.stop()
                self.buffer.append(reply)
        except BaseException as exc:
            # serve() answers every Exception; this one (SystemExit, a second
            # Ctrl-C) stopped the envs half-way, or came between a command and
            # its reply
            self.stop_half_way(exc)
            raise

    def stop_half_way(self, exc: BaseException) -> None:
        """``exc`` stopped a command half-way: the envs are lost.

        Like a worker dying: no later call may return their rows.
        """
        self.broken_by = type(exc).__name__
        self.stop()

    def stop(self) -> None:
        """The envs stopped: later waits see it as a worker's exit."""
        self.running = False
        if self.on_stop is not None:
            self.on_stop()

    def has_message(self) -> bool:
        return bool(self.buffer)

    def recv(self) -> bytes:
        if not self.buffer:
            raise EOFError
        return self.buffer.popleft()

    def close_envs(self) -> None:
        """Stop, and close the envs still open (within :data:`TERMINATE_SECONDS`)."""
        self.running = False
        self.close_envs_within(TERMINATE_SECONDS)

    def close_envs_within(self, seconds: float) -> None:
        """Close the envs still open, giving up waiting after ``seconds`` in all."""
        envs, self.envs = self.envs, []
        if self.host is not None:
            self.host.envs = []  # a CLOSE command then has nothing left to close
        close_all_within(
            [
                (env.close, f"in-process env {local} (num_workers=0)")
                for local, env in enumerate(envs)
            ],
            seconds,
        )


CLOSE_SECONDS = 10.0
"""How long ``close()`` waits for the in-process envs' ``close()`` by default."""

TERMINATE_SECONDS = 1.0
"""How long ``close(terminate=True)`` waits for the in-process envs' ``close()``."""


class _LocalProcess:
    """Stands in for the worker process: alive while the envs are open."""

    pid = None
    name = "in-process"

    def __init__(self, channel: _LocalChannel) -> None:
        self._channel = channel
        self._sentinel = _Quiet()
        self.sentinel = self._sentinel.read
        channel.on_stop = self._sentinel.ring

    def is_alive(self) -> bool:
        return self._channel.running

    @property
    def exitcode(self) -> int | None:
        if self._channel.running:
            return None
        return 0 if self._channel.broken_by is None else 1

    def join(self, timeout: float | None = None) -> None:
        del timeout

    def terminate(self) -> None:
        self._channel.close_envs()

    kill = terminate

    def close(self) -> None:
        self._channel.close_envs()
        self._channel.host = None  # it holds the shared block: let it go now
        self._sentinel.close()


class InProcessHandle(WorkerHandle):
    """The handle of the envs the parent steps itself, in the call's wait.

    Commands are queued when sent and run when the call waits
    (:meth:`WorkerGroup.wait` runs :meth:`run_queued` first), so the parent's envs
    step while the worker processes step theirs, and a policy run between
    ``step_async`` and ``step_wait`` overlaps the workers.

    Args:
        config: What a worker process would be given (its index and envs).
    """

    def __init__(self, config: WorkerConfig) -> None:
        """Create the envs (a constructor's error becomes the first answer)."""
        channel = _LocalChannel(config)
        self.local_channel = channel
        self.quiet = _Quiet()
        self.local_process = _LocalProcess(channel)
        super().__init__(
            config.index,
            range(config.start, config.start + len(config.env_fns())),
            self.local_process,  # type: ignore[arg-type]
            self.quiet,  # type: ignore[arg-type]
        )
        self.channel = channel  # type: ignore[assignment]

    runs_here = True

    direct: int | None = None
    """The observation buffer of a plain step sent and not run yet (the one step
    path: :meth:`WorkerGroup.send_step` sets it instead of queueing a message, and
    :meth:`step_here` runs it), or ``None``."""

    pending_since: float | None = None
    """When the oldest command not run yet was sent (``time.monotonic()``), or
    ``None``: the wait times this share from then, as a worker's envs
    (:meth:`WorkerGroup.wait`)."""

    def step_here(self) -> None:
        """Run the plain step sent (:attr:`direct`) and take its answer at once.

        The host's step called directly: no message, queue or reply object. The
        caller holds Ctrl-C back around it (the share completes first).

        Raises:
            BaseException: What stopped the step half-way (not an env's
                exception: that is answered); the envs are then lost.
        """
        try:  # a second Ctrl-C anywhere here stops the share half-way
            buffer, self.direct, self.pending_since = self.direct, None, None
            host = self.local_channel.host
            try:
                reply = host.step(None, None, buffer)
            except Exception as exc:  # noqa: BLE001 - as serve(): answered
                reply = encode(Reply(errors=[pack_error(host.start, exc)]))
            numbers = self.numbers
            expected = numbers.expected
            if not reply and expected and expected[0] == numbers.received + 1:
                # nothing to say, the answer awaited: counted, not kept
                numbers.received += 1
                expected.popleft()
                return
            numbers.absorb(reply, decode_reply)
        except Exception:  # not an env's (answered above): as before, no death
            raise
        except BaseException as exc:  # a worker's death, in this process: the
            self.local_channel.stop_half_way(exc)  # step or its answer may be lost
            raise

    def write(self, data: bytes) -> int:
        """Queue a command, after the plain step sent before it (if not run yet)."""
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        if self.direct is not None:
            self.local_channel.queued.append(STEP + bytes((self.direct,)))
            self.direct = None
        return super().write(data)

    def run_queued(self) -> None:
        """Run the commands sent since the last wait (the group's wait calls it).

        Raises:
            BaseException: What stopped a command half-way (not an env's
                exception: that is answered); the envs are then lost.
        """
        self.pending_since = None
        if self.direct is not None:
            self.step_here()
        self.local_channel.run_queued()

    def forget_queued(self) -> None:
        """Drop the commands not run yet (``close(terminate=True)``)."""
        self.direct = None
        self.pending_since = None
        self.local_channel.queued.clear()

    def send_close(self, timeout: float | None = None) -> int:
        """Close the envs here, within ``timeout`` seconds, then answer CLOSE.

        An env's ``close()`` that hangs is left in a daemon thread with a warning
        (vecpool/_util/closing.py): a worker's would be terminated after the same
        grace.
        """
        channel = self.local_channel
        if channel.running:
            channel.close_envs_within(CLOSE_SECONDS if timeout is None else timeout)
        return super().send_close()

    def death(self, what: str) -> str:
        """Why the envs are lost: a command stopped half-way, or they were closed."""
        broken_by = self.local_channel.broken_by
        if broken_by is None:
            return super().death(what)
        return (
            f"The in-process sub-environments ({self.hosted()}) were stopped half-way "
            f"through a command by {broken_by}, so their state is unknown: call "
            "`close()` and create a new vector env."
        )

    def close(self) -> None:
        """Close the envs (if still open) and the stand-in descriptors."""
        self.local_process.close()
        self.quiet.close()
