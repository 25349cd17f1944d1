"""The parent's handle on one worker process, and the base of the in-process one.

A handle sends numbered commands and reads numbered replies (its
:class:`~vecpool._engine.numbering.ReplyNumbers`), over a
:class:`~vecpool._wire.channel.Channel`. The kinds:

* :class:`WorkerHandle` itself: a vecpool worker process (it runs
  :func:`vecpool._worker.loop.run_worker`);
* :class:`vecpool._engine.in_process.InProcessHandle`: ``num_workers=0`` and the
  parent's own share.

(A custom Gymnasium ``worker=`` has no handle: Gymnasium's own ``AsyncVectorEnv``
runs it, see :mod:`vecpool.vector.gymnasium_worker`.)

The group (:mod:`vecpool._engine.group`) waits on them all through this interface
and never needs to know which kind it holds. A transfer and its count happen
inside a :data:`vecpool._engine.guards.HELD` section the caller opens, so a
Ctrl-C never comes between the two.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import numpy.typing as npt

from vecpool._engine.numbering import ReplyNumbers
from vecpool._wire.bell import (
    ANSWERED,
    NUMBER_MASK,
    PIPED,
    fence,
)
from vecpool._wire.channel import Channel
from vecpool._wire.messages import (
    COLUMNS_ONLY,
    CUT_AGAIN,
    INFOS_IN_MEMORY,
    STEP_SOME,
    WAKE,
    Command,
    Reply,
    encode,
)
from vecpool._wire.wide_infos import WideOffer, acceptance, map_offer

__all__ = ["WorkerHandle", "decode_reply", "describe_exit"]


def decode_reply(data: bytes | memoryview) -> Reply | None:
    """A worker's reply from its bytes (empty: nothing to say)."""
    if not data:
        return None
    if len(data) == 1:  # INFOS_IN_MEMORY
        return COLUMNS_ONLY
    reply: Reply = pickle.loads(data)
    return reply


def describe_exit(exitcode: int | None) -> str:
    """Words for a process exit code (naming the signal of a negative one).

    Args:
        exitcode: ``Process.exitcode``.

    Returns:
        E.g. ``"exit code -9 (SIGKILL)"``.
    """
    if exitcode is None:
        return "an unknown exit code"
    if exitcode < 0:
        try:
            return f"exit code {exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"exit code {exitcode}"
    return f"exit code {exitcode}"


class WorkerHandle:
    """The parent's handle on one worker: numbered commands and replies.

    Attributes:
        index: Worker index.
        env_indices: The global indices of the envs it hosts.
        process: The process (or a stand-in with the same methods).
        conn: The parent's end of its pipe.
        channel: The framing over ``conn``.
        sentinel: The process sentinel the wait loop watches.
        numbers: The numbering of its commands and replies.
        out_of_step: Whether a transfer was cut off half-way (a second Ctrl-C).
        gone: Whether its worker was found gone (its pipe's end, its process'
            exit) while nothing was awaited from it: no poll watches it any more,
            so its next command does not reach it (:meth:`WorkerGroup.send_to`
            judges the death then).
        on_cut: Called when a transfer is cut off (the group then checks pipes).
        last_sent: The last command's bytes (re-sent to a replacement on a restart).
        info_wide: The worker's wide info rows (``[hosted envs, stride]``) the
            parent reads, once accepted (vecpool/_wire/wide_infos.py).
        wide_offer: An offered area, mapped, that the next step accepts.
        tail: What the next full step command carries besides the step itself:
            empty on the hot path; the acceptance of a wide-info area
            (:meth:`take_wide_offer`) and/or ``CUT_AGAIN`` (:meth:`mark_cut`, set
            and cleared by the Restarter), in that order (``Host.take_tail``).
        cut: The ``CUT_AGAIN`` part of :attr:`tail`, which a reset carries too.
    """

    runs_here = False
    """Whether its envs step in this process, in the call's wait (see
    :meth:`run_queued`); a worker process's step in their own process."""

    def __init__(
        self,
        index: int,
        env_indices: range,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
        after: int = 0,
    ) -> None:
        """Wrap a started worker, awaiting its start-up check.

        A worker answers its start-up space check unasked, so that answer is
        awaited from the start: as command 1, or, for a replacement
        (``on_worker_crash="restart"``), as the command after the ``after``
        commands of the pipe it replaces (answers already read keep their numbers).
        """
        self.index = index
        self.env_indices = env_indices
        self.process = process
        self.conn = conn
        self.channel = Channel(conn.fileno())
        self.sentinel: int = process.sentinel
        self.numbers = ReplyNumbers(sent=after)
        self.numbers.expect_also(self.numbers.sent_one())  # sent unasked
        self.out_of_step = False
        self.gone = False
        self.on_cut: Callable[[], None] | None = None
        self.last_sent = b""
        self.info_wide: npt.NDArray[np.uint8] | None = None
        self.wide_offer: tuple[WideOffer, npt.NDArray[np.uint8]] | None = None
        self.tail = self.cut = b""
        # the worker's doorbell (vecpool/_wire/bell.py), where it spins for commands
        self.bell: Any = None
        self.rung = 0  # the rung command whose answer is not taken yet (0: none)

    # -- sending ---------------------------------------------------------------------

    def send_step(self, message: bytes, actions: list[Any] | None) -> int:
        """Step every hosted env: actions in shared memory when ``actions`` is None.

        Args:
            message: The hot-path step message (``STEP`` and the buffer index).
            actions: One action per hosted env, pickled with the command, or
                ``None`` (they are in shared memory).

        Returns:
            The command's number.
        """
        tail = self.tail
        if actions is None and not tail:  # a 2-byte message (WorkerGroup rings)
            return self.write(message)
        if self.wide_offer is not None:  # the tail carries its acceptance
            self.info_wide, self.wide_offer = self.wide_offer[1], None
            self.tail = self.cut
        if actions is None:
            return self.write(message + tail)
        return self.send(Command.STEP, (actions, None, message[-1], tail))

    def settle(self) -> bool:
        """Take the rung command's answer if the bell alone gives it.

        A worker answers a rung command with nothing to say on its bell only
        (vecpool/_wire/bell.py, ``PIPED``): that answer is numbered here, before
        any reply in the pipe, which can only be a later command's.

        Returns:
            Whether the rung command's reply waits in the pipe (read it unpolled).
        """
        bell = self.bell
        if bell[ANSWERED] != self.rung & NUMBER_MASK:
            return False
        if bell[PIPED] == 1:
            return True
        fence()  # the number before the rows it announces
        numbers = self.numbers
        # counted once, even when a Ctrl-C cut a look at it short: the count first,
        # the mark last, so a look again finds it counted (or does it)
        if numbers.received < self.rung:
            numbers.absorb(INFOS_IN_MEMORY if bell[PIPED] else b"", decode_reply)
        self.rung = 0
        return False

    def take_wide_offer(self, offer: WideOffer) -> None:
        """Map the wide-info area this worker offers; the next step accepts it.

        From that step on, this worker's wide infos are read from the new area.
        An area that cannot be mapped is not accepted (the infos stay pickled).
        """
        self.wide_offer = None  # an older offer is void once a newer one came
        view = map_offer(offer)
        if view is not None:
            self.wide_offer = (offer, view)
        accept = b"" if view is None else acceptance(offer)
        self.tail = accept + self.cut

    def mark_cut(self, again: bool) -> None:
        """Whether the next step or reset asks the worker to mark its cut again.

        Set by the Restarter (vecpool/_engine/restart.py) while a replacement's
        rows that mark the cut have not been returned to the user.
        """
        self.cut = CUT_AGAIN if again else b""
        accept = b"" if self.wide_offer is None else acceptance(self.wide_offer[0])
        self.tail = accept + self.cut

    def send_step_some(self, local: list[int], actions: list[Any] | None) -> int:
        """Step the hosted envs ``local`` (a ``send`` batch)."""
        if actions is None:
            return self.write(STEP_SOME + np.asarray(local, np.uint16).tobytes())
        return self.send(Command.STEP, (actions, local, 0))

    def send_reset(
        self,
        seeds: list[Any],
        options: dict[str, Any] | None,
        flags: list[bool],
        buffer: int = 0,
    ) -> int:
        """Reset the hosted envs whose flag is set (with :attr:`cut` as its tail)."""
        return self.send(Command.RESET, (seeds, options, flags, buffer, self.cut))

    def send_call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> int:
        """Call a method (or read an attribute) of every hosted env."""
        return self.send(Command.CALL, (name, args, kwargs))

    def send_set_attr(self, name: str, values: list[Any]) -> int:
        """Set an attribute of every hosted env (one value each)."""
        return self.send(Command.SET_ATTR, (name, values))

    def send_close(self, timeout: float | None = None) -> int:  # noqa: ARG002
        """Close the hosted envs and end the worker.

        ``timeout``: the grace of ``close()`` (a worker that overruns it is
        terminated; the in-process handle bounds each env's ``close`` with it).
        """
        return self.send(Command.CLOSE, None)

    def send(self, command: Command, payload: Any) -> int:
        """Pickle and send a command; return its number."""
        return self.write(encode((command, payload)))  # a lambda in `call`: cloudpickle

    def write(self, data: bytes) -> int:
        """Write one framed command; return its number.

        Raises:
            OSError: If the pipe is broken (the worker died).
        """
        # callers hold Ctrl-C back (``with HELD``): the write and its count go together
        try:
            self.channel.send(data)
            self.last_sent = data
            return self.numbers.sent_one()
        except KeyboardInterrupt:  # cut off mid-transfer or before its count (HELD
            self.cut_off()  # defers the 1st): the pipe is out of step
            raise

    def cut_off(self) -> None:
        """A transfer was cut off half-way: this pipe can no longer be trusted."""
        self.out_of_step = True
        if self.on_cut is not None:
            self.on_cut()

    def run_queued(self) -> None:
        """Run the commands sent (a handle whose envs step here); else nothing."""

    def forget_queued(self) -> None:
        """Drop the commands not run yet (a handle whose envs step here)."""

    # -- receiving -------------------------------------------------------------------

    def poll(self) -> bool:
        """Whether a reply (or EOF) can be read now."""
        return self.channel.has_message() or self.conn.poll()

    def expect(self, number: int) -> None:
        """Wait, in the group's next wait, for reply ``number`` alone."""
        self.numbers.expect(number)

    def receive(self) -> bool:
        """Read one reply; keep it if expected. Return whether it was expected.

        Raises:
            EOFError: If the worker closed its pipe.
            OSError: If the pipe broke.
        """
        # called inside ``with HELD``: the read and its count go together
        try:
            data = self.channel.recv()
            if data == WAKE:  # not a reply (vecpool/_wire/bell.py)
                return False
            if self.rung:
                self.settle()  # an answer on the bell alone comes before this reply
                self.rung = 0  # else this reply is the rung command's own
            return self.numbers.absorb(data, decode_reply)
        except KeyboardInterrupt:  # cut off mid-transfer or before its count (HELD
            self.cut_off()  # defers the 1st): the pipe is out of step
            raise

    def answer(self) -> Reply | None:
        """The answer to the call that just completed (kept until the next call)."""
        reply: Reply | None = self.numbers.answer()
        return reply

    # -- words -----------------------------------------------------------------------

    def hosted(self) -> str:
        """The envs it hosts, as a message names them (``envs 0-3``)."""
        envs = self.env_indices
        if len(envs) == 1:
            return f"env {envs.start}"
        return f"envs {envs.start}-{envs.stop - 1}"

    def died(self, what: str) -> str:
        """Why it is gone: ``Worker i (hosting envs a-b) died with exit code c ...``."""
        return (
            f"Worker {self.index} (hosting {self.hosted()}) died with "
            f"{describe_exit(self.process.exitcode)} while running `{what}`"
        )

    def death(self, what: str) -> str:
        """The message of the :class:`~vecpool.errors.WorkerCrashedError` it raises."""
        return (
            f"{self.died(what)}. Its sub-environments are lost: call `close()` and "
            "create a new vector env."
        )
