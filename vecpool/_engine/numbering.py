"""The numbering of one worker's commands and replies: the engine's central invariant.

Every command to a worker gets exactly one reply, in order. :class:`ReplyNumbers`
numbers both: ``sent`` counts the commands written to the pipe, ``received`` the
replies read from it, and ``expected`` holds the numbers of the replies a pending
call waits for. A reply that is not the next one expected belongs to a command
whose call gave up (a timeout, a Ctrl-C) and is dropped. Hence the rule: after an
interrupt or a timeout, every later result is the result of the commands its call
sent, or an error; never an earlier call's rows.

Nothing else writes these counters: the handles, the group's wait loop, the
``send``/``recv`` batches and restart all go through the methods below, one per
transition (send, expect, absorb, give up, replace). The callers keep a Ctrl-C
from coming between a transfer and its transition
(:data:`vecpool._engine.guards.HELD`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["PinnedNumbers", "ReplyNumbers"]


def _as_is(raw: Any) -> Any:
    return raw


class ReplyNumbers:
    """Numbers of one worker's commands and replies, and the answers kept.

    Example:
        >>> numbers = ReplyNumbers()
        >>> numbers.expect(numbers.sent_one())  # a call sends command 1, waits
        >>> numbers.sent_one()  # a second command, whose call then gives up
        2
        >>> numbers.absorb("first")
        True
        >>> numbers.answer(), numbers.waiting
        ('first', False)
        >>> numbers.expect(numbers.sent_one())  # the next call: command 3
        >>> numbers.absorb("stale reply to 2")  # dropped, never returned
        False
        >>> numbers.absorb("third"), numbers.answer()
        (True, 'third')

    Attributes:
        sent: Commands written so far.
        received: Replies read so far.
        expected: Numbers of the replies a pending call waits for, oldest first.
        answers: ``(number, reply)`` of expected replies that arrived, oldest first.
        batches: Env ids of each ``send`` batch in flight, by reply number.
        lost_batches: Env ids of batches whose reply failed to decode (its error
            was raised); the ``send``/``recv`` bookkeeping takes them out of flight.
    """

    __slots__ = (
        "answers",
        "batches",
        "expected",
        "lost_batches",
        "received",
        "sent",
    )

    def __init__(self, sent: int = 0) -> None:
        """Start after ``sent`` commands, all answered."""
        self.sent = sent
        self.received = sent
        self.expected: deque[int] = deque()
        self.answers: deque[tuple[int, Any]] = deque()
        self.batches: dict[int, list[int]] = {}
        self.lost_batches: list[list[int]] = []

    # -- send ------------------------------------------------------------------------

    def sent_one(self) -> int:
        """A command was written: return its number."""
        self.sent += 1
        return self.sent

    # -- expect ----------------------------------------------------------------------

    def expect(self, number: int) -> None:
        """A new call waits for reply ``number`` alone (earlier answers are dropped)."""
        if self.expected:
            self.expected.clear()
        if self.answers:
            self.answers.clear()
        self.expected.append(number)

    def expect_also(self, number: int) -> None:
        """The pending call also waits for reply ``number``."""
        self.expected.append(number)

    def start_batch(self) -> None:
        """A ``send`` batch is about to go: drop the last plain call's answers."""
        if not self.batches:
            self.answers.clear()

    def expect_batch(self, number: int, env_ids: list[int]) -> None:
        """A ``send`` batch of ``env_ids`` awaits reply ``number`` (besides others)."""
        self.expected.append(number)
        self.batches[number] = env_ids

    # -- absorb ----------------------------------------------------------------------

    def absorb(self, raw: Any, decode: Callable[[Any], Any] = _as_is) -> bool:
        """A reply was read: number it, keep it if expected; return whether it was.

        The reply is counted before ``decode(raw)`` runs, so a reply that fails to
        decode (an info the parent cannot unpickle) still takes its number and the
        error propagates: later replies keep theirs.

        Args:
            raw: The reply as read.
            decode: Turns ``raw`` into the reply kept (e.g. unpickles it).
        """
        self.received = number = self.received + 1
        expected = self.expected
        try:
            if expected and expected[0] == number:  # the hot path
                expected.popleft()
                self.answers.append((number, decode(raw)))
                return True
            # decoded even when stale: a stale reply's errors are read
            reply = decode(raw)
        except BaseException:
            lost = self.batches.pop(number, None)
            if lost is not None:  # its envs are no longer in flight: nothing comes
                self.lost_batches.append(lost)
            raise
        while expected and expected[0] < number:  # never coming: drop
            expected.popleft()
        if not expected or expected[0] != number:
            return False  # the reply to a command whose call gave up
        expected.popleft()
        self.answers.append((number, reply))
        return True

    def answer(self) -> Any:
        """The answer to the call that just completed (kept until the next call).

        Left in place, so a call interrupted while it read its answers can be
        waited for again and find them.
        """
        return self.answers[0][1] if self.answers else None

    def pop_batch(self) -> tuple[list[int], Any] | None:
        """The oldest answered ``send`` batch and its reply, or ``None``.

        Answers that belong to no batch (a plain call's) are dropped on the way.
        """
        while self.answers:
            number, reply = self.answers.popleft()
            if number in self.batches:
                return self.batches.pop(number), reply
        return None

    # -- give up ---------------------------------------------------------------------

    def give_up(self) -> None:
        """Forget every awaited reply (they are dropped when they come)."""
        self.batches.clear()
        self.lost_batches.clear()
        self.expected.clear()
        self.answers.clear()

    # -- replace ---------------------------------------------------------------------

    def take_over(self, old: ReplyNumbers) -> None:
        """Go on from a dead worker's numbers (this replacement's pipe is new).

        Answers ``old`` already read keep their numbers (and their batches); its
        unanswered commands are not carried over: its :meth:`owed_batches` lists what to
        send again.
        """
        self.answers = deque(old.answers)
        answered = {number for number, _ in old.answers}
        self.batches = {n: ids for n, ids in old.batches.items() if n in answered}

    def owed_batches(self) -> list[tuple[int, list[int]]]:
        """The ``send`` batches still unanswered, oldest first."""
        answered = {number for number, _ in self.answers}
        return sorted(
            (number, ids)
            for number, ids in self.batches.items()
            if number not in answered
        )

    # -- state -----------------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """Whether a pending call still waits for a reply."""
        return bool(self.expected)

    @property
    def has_batches(self) -> bool:
        """Whether a ``send`` batch is in flight, or answered and not yet popped."""
        return bool(self.expected) or bool(self.answers and self.batches)

    @property
    def abandoned(self) -> bool:
        """Whether a command whose call gave up is still unanswered."""
        return self.sent - self.received > len(self.expected)


class PinnedNumbers(ReplyNumbers):
    """A replacement's numbers whose start-up reply a timed-out call left unread.

    Restart only (vecpool/_engine/restart.py): the reply numbered :attr:`pinned`
    survives :meth:`expect`, :meth:`start_batch` and :meth:`give_up`, so every
    later call waits for it first, until :meth:`take_pinned` hands it over.

    Attributes:
        pinned: The start-up reply's number, ``None`` once taken.
    """

    __slots__ = ("pinned",)

    def __init__(self, numbers: ReplyNumbers, pinned: int) -> None:
        """Go on from ``numbers`` (its state moves here), pinning reply ``pinned``."""
        super().__init__()
        for name in ReplyNumbers.__slots__:
            setattr(self, name, getattr(numbers, name))
        self.pinned: int | None = pinned

    def expect(self, number: int) -> None:
        """A new call waits for reply ``number`` (after the pinned one, if unread)."""
        self._clear_but_pinned()
        self.expected.append(number)

    def start_batch(self) -> None:
        """A ``send`` batch is about to go: drop all answers but the pinned one."""
        if not self.batches:
            pinned = self._pinned_answer()
            self.answers.clear()
            self.answers.extend(pinned)

    def give_up(self) -> None:
        """Forget every awaited reply but the pinned one."""
        self.batches.clear()
        self.lost_batches.clear()
        self._clear_but_pinned()

    def _pinned_answer(self) -> list[tuple[int, Any]]:
        """The pinned reply's answer, if it came (a list of 0 or 1)."""
        return [item for item in self.answers if item[0] == self.pinned]

    def _clear_but_pinned(self) -> None:
        """Clear the awaited replies and answers, but the pinned reply's."""
        kept = self._pinned_answer() if self.pinned is not None else []
        self.expected.clear()
        self.answers.clear()
        self.answers.extend(kept)
        if self.pinned is not None and self.received < self.pinned:
            self.expected.append(self.pinned)  # not read yet: wait for it first

    def take_pinned(self) -> tuple[bool, Any]:
        """``(True, reply)`` once the pinned reply came (then unpinned).

        Returns:
            ``(False, None)`` while it has not come.
        """
        if self.pinned is None or not self.answers or self.answers[0][0] != self.pinned:
            return False, None
        self.pinned = None
        return True, self.answers.popleft()[1]
