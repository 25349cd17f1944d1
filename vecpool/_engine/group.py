"""The group of one vector env's worker handles, and THE wait loop over them.

:meth:`WorkerGroup.wait` is the one wait loop, used by step, reset, call, the env
state calls and the ``send``/``recv`` batches: it waits on every pipe and every
process sentinel at once, spins first when the
:class:`~vecpool._engine.spinning.SpinPolicy` says so, honours one deadline, reads
replies before judging deaths, and drops stale replies (each handle's
:class:`~vecpool._engine.numbering.ReplyNumbers` tells which). A worker found dead
raises :class:`~vecpool.errors.WorkerCrashedError`, or, with
``on_worker_crash="restart"``, is handed to the group's :class:`Restarting` hook.

The group holds handles of any kind through
:class:`~vecpool._engine.handle.WorkerHandle` and never starts a process itself
(:mod:`vecpool._engine.startup` does).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from gymnasium import Space

from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.guards import HELD, HOLD, MAIN, drop_held, raise_deferred
from vecpool._engine.handle import WorkerHandle
from vecpool._engine.spinning import SpinPolicy
from vecpool._wire.bell import (
    ANSWERED,
    BUFFER,
    COMMAND,
    FRESH_LOCK,
    LISTENING,
    NUMBER_MASK,
    PIPED,
    WAITING,
)
from vecpool._wire.messages import COLUMNS_ONLY, WAKE
from vecpool.errors import OutOfStepError, WorkerCrashedError

__all__ = ["Restarting", "WorkerGroup", "poll_set"]


class Restarting(Protocol):
    """What the group asks of ``on_worker_crash="restart"`` (see restart.py).

    :class:`vecpool._engine.restart.Restarter` implements it; the group only holds
    one, so the wait loop can hand it the dead without importing it.
    """

    def allows(self, handle: WorkerHandle, what: str) -> bool:
        """Whether a crash of ``handle``'s worker in ``what`` may be restarted."""
        ...

    def replace(
        self, group: WorkerGroup, old: WorkerHandle, what: str, *, reissue: bool
    ) -> WorkerHandle:
        """Start a replacement for ``old``, put it in the group, re-send its work."""
        ...

    def give_back_permit(self, dead: WorkerHandle) -> None:
        """Release the ``max_concurrency`` permit a dead worker died holding."""
        ...

    def finish_start(
        self, group: WorkerGroup, record: Any, reply: Any, *, deferred: bool = False
    ) -> None:
        """A replacement left starting by a timed-out call has answered."""
        ...

    def lose_result(self, group: WorkerGroup, old: WorkerHandle, what: str) -> None:
        """Note in ``group.lost`` the error a call that cannot be re-sent raises."""
        ...


def _weakly(method: Callable[[], None]) -> Callable[[], None]:
    """Call ``method`` without holding its object (a handle's back-pointer).

    A handle that held its group strongly would make a reference cycle, keeping
    every pipe and mapping of a closed vector env until the garbage collector
    runs (issue 38).
    """
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call


class WorkerGroup:
    """All the worker handles of one vector env, and the one wait loop over them.

    Attributes:
        handles: One handle per worker, in order.
        handle_of: Env index -> worker index.
        spin: The spin policy.
        broken: The crash that made the group unusable, once one happened.
        gave_up: Whether a call may have given up on a reply since the last
            check (then new actions go by pipe, and pipes are checked).
        all_rung: Whether the last step rang every worker (or stepped it here).
        more: Whether a bell wait since the last step was sent took an answer
            that says more than "the rows are written" (infos, errors, a reply
            in the pipe) or blocked; kept until the next step, so a step's
            answers waited for again (after an interrupted ``step_wait``) are
            read again.
    """

    def __init__(self, spin: SpinPolicy) -> None:
        """An empty group (see :meth:`add`)."""
        self.handles: list[WorkerHandle] = []
        self.local: list[WorkerHandle] = []  # handles whose envs step here
        self.remote: list[WorkerHandle] = []  # the others: worker processes
        self.handle_of: dict[int, int] = {}
        self.spin = spin
        self.broken: WorkerCrashedError | None = None
        self._poll_all: tuple[select.poll, dict[int, tuple[WorkerHandle, bool]]]
        self._poll_all_built = False
        self.gave_up = False
        self.restarter: Restarting | None = None
        self.dead: list[WorkerHandle] = []
        self.lost: WorkerCrashedError | None = None
        # the wait in progress: (timeout, name, deadline), for a replacement's
        # start-up wait nested in it (it keeps the call's deadline)
        self.waiting: tuple[float | None, str, float | None] = (None, "", None)
        # replacements whose start-up reply a timed-out call left unread: each
        # later wait reads it first, then the restart is finished (restart.py)
        self.starting: list[Any] = []
        # the last step: whether every worker was rung (or stepped here), and
        # whether a bell's answer said more than "the rows are written"
        self.all_rung = False
        self.more = False

    def put(self, handle: WorkerHandle) -> None:
        """Put a replacement's handle in the place of the worker it replaces."""
        handle.on_cut = _weakly(self.note_give_up)  # no cycle (issue 38)
        old = self.handles[handle.index]
        self.handles[handle.index] = handle
        for kind in (self.local, self.remote):
            if old in kind:
                kind[kind.index(old)] = handle
        self._poll_all_built = False

    def add(self, handle: WorkerHandle) -> None:
        """Add the handle of a started worker."""
        handle.on_cut = _weakly(self.note_give_up)  # no cycle (issue 38)
        self.handles.append(handle)
        (self.local if handle.runs_here else self.remote).append(handle)
        for env_index in handle.env_indices:
            self.handle_of[env_index] = handle.index
        self._poll_all_built = False

    def check_spaces(
        self,
        observation_mode: Any,
        action_space: Space[Any],
        owner: str,
    ) -> None:
        """Collect the workers' start-up space checks (Gymnasium's messages).

        The workers send them unasked, once their envs are built.

        Raises:
            RuntimeError: If an env's spaces differ from the first env's.
            Exception: The error an env constructor raised, original type.
        """
        self.wait("__init__", None)
        replies = [handle.answer() for handle in self.handles]
        raise_env_errors(replies, owner)
        checks = [check for reply in replies if reply for check in reply.results or []]
        same_observation_spaces, same_action_spaces = zip(*checks, strict=True)
        if not all(same_observation_spaces):
            if observation_mode == "same":
                msg = (
                    "AsyncVectorEnv(..., observation_mode='same') however some of "
                    "the sub-environments observation spaces are not equivalent. If "
                    "this is intentional, use `observation_mode='different'` instead."
                )
            else:
                msg = (
                    "AsyncVectorEnv(..., observation_mode='different' or custom space) "
                    "however the sub-environment's observation spaces do not share a "
                    "common shape and dtype."
                )
            raise RuntimeError(msg)
        if not all(same_action_spaces):
            msg = (
                "Some environments have an action space different from "
                f"`{action_space}`. In order to batch actions, the action "
                "spaces from all environments must be equal."
            )
            raise RuntimeError(msg)

    def any_abandoned(self) -> bool:
        """Whether a worker still runs a command whose call gave up.

        Such a worker may still read the shared actions, so new actions then go
        by pipe. (Callers check :attr:`gave_up` first: the hot path is one read.)
        """
        self.gave_up = any(handle.numbers.abandoned for handle in self.handles)
        return self.gave_up

    def check_in_step(self) -> None:
        """Raise if a cut-off transfer left a pipe out of step.

        Raises:
            OutOfStepError: Naming the worker and the fix.
        """
        for handle in self.handles if self.gave_up else ():
            if handle.out_of_step:
                msg = (
                    f"A second Ctrl-C cut off a transfer to or from worker "
                    f"{handle.index} half-way, so its pipe is out of step: call "
                    "`close()` and create a new vector env."
                )
                raise OutOfStepError(msg)

    def send_all(
        self,
        what: str,
        send: Callable[[WorkerHandle], int],
        handles: list[WorkerHandle] | None = None,
    ) -> list[WorkerHandle]:
        """Send one command to every worker (or ``handles``); each awaits its reply.

        Args:
            what: The call's name, for a crash message.
            send: Sends the command on one handle and returns its number.
            handles: The workers to send it to (default: all).

        Returns:
            The handles that took it (a replacement in a dead worker's place).

        Raises:
            WorkerCrashedError: If a worker's pipe is broken.
        """
        # callers hold Ctrl-C back around this (``with HELD``) and their state change
        took = []
        for handle in self.handles if handles is None else handles:
            handle, number = self.send_to(handle, what, send)
            handle.expect(number)
            took.append(handle)
        return took

    def send_step(self, message: bytes, per_env: list[Any] | None) -> None:
        """Send one step command to every worker: the one step path's send.

        A worker with a bell that has answered everything is rung (the command's
        number and the observation buffer in its bell; vecpool/_wire/bell.py), and
        the parent's own share is marked to step in the wait
        (``InProcessHandle.direct``): no message, no system call but a wake for a
        worker not watching its bell. Every bell is rung before any is counted or
        woken, so the last worker starts about as early as the first (its ring is
        two word writes after the one before, not a whole worker's bookkeeping).
        Anything else (actions by pipe, a tail, a worker a given-up call left busy)
        goes through :meth:`WorkerHandle.send_step`. The caller holds Ctrl-C back;
        a second Ctrl-C while the bells are rung, counted and the blocked workers
        woken cuts those workers off (:class:`~vecpool.errors.OutOfStepError` at
        the next call), as one in the middle of a pipe write does.

        Args:
            message: The hot-path step message (``STEP`` and a buffer index).
            per_env: One action per env, when they travel pickled; ``None`` when
                they are in shared memory.

        Raises:
            WorkerCrashedError: If a worker's pipe is broken.
        """
        buffer = message[1]
        bells: list[WorkerHandle] = []  # rung: workers that spin on their bells
        here: list[WorkerHandle] = []  # the parent's share, stepped in the wait
        piped: list[WorkerHandle] = []
        self.more = False  # set by the bell wait when an answer says more
        try:
            if per_env is None:
                # idle: every command answered (none awaited), nothing to carry
                for handle in self.remote:  # first: the workers wait for this
                    numbers = handle.numbers
                    bell = handle.bell
                    if (
                        bell is not None
                        and numbers.received == numbers.sent
                        and not handle.tail
                    ):
                        bell[BUFFER] = buffer
                        bells.append(handle)
                    else:
                        piped.append(handle)
                if bells:
                    FRESH_LOCK().acquire(False)  # fence(): actions and buffers first
                    for handle in bells:
                        handle.rung = number = handle.numbers.sent + 1
                        handle.bell[COMMAND] = number & NUMBER_MASK
                    FRESH_LOCK().acquire(False)  # fence(): COMMAND before LISTENING
                for handle in self.local:
                    numbers = handle.numbers
                    if numbers.received == numbers.sent and not handle.tail:
                        here.append(handle)
                    else:
                        piped.append(handle)
            else:
                piped = self.handles
            self.all_rung = not piped
            for handle in bells:  # counted: numbers.sent_one() and expect()
                numbers = handle.numbers
                numbers.sent = number = handle.rung
                if numbers.answers:  # the last call's (kept until this one)
                    numbers.answers.clear()
                numbers.expected.append(number)
                if not handle.bell[LISTENING]:
                    # it blocks on its pipe: a wake (an empty message, inline);
                    # a broken pipe is a death, found by the wait's sentinels
                    with contextlib.suppress(OSError):
                        os.write(handle.channel.fd, _EMPTY_MESSAGE)
            for handle in here:
                numbers = handle.numbers
                numbers.sent = number = numbers.sent + 1
                if numbers.answers:
                    numbers.answers.clear()
                numbers.expected.append(number)
                handle.direct = buffer  # type: ignore[attr-defined]
                if handle.pending_since is None:  # type: ignore[attr-defined]
                    handle.pending_since = time.monotonic()  # type: ignore[attr-defined]
                handle.last_sent = message  # a restart sends it again
        except BaseException:  # a second Ctrl-C: rings, counts and wakes may differ
            for handle in bells + here:
                handle.cut_off()
            raise
        if piped:
            self.send_all(
                "step",
                lambda handle: handle.send_step(
                    message,
                    None
                    if per_env is None
                    else per_env[handle.env_indices.start : handle.env_indices.stop],
                ),
                piped,
            )

    def wait_step(self) -> bool:
        """Wait for a step sent by :meth:`send_step`: the one step path's wait.

        The parent steps its own share by a direct call (Ctrl-C held back until it
        completes), then spins on each rung worker's ``ANSWERED`` word and takes a
        bell's answer there, within the spin budget: the one wait's hot head.
        Whatever is left (a reply in the pipe, a worker not rung, a spin past its
        budget) goes on in :meth:`wait`, which blocks with the bells raised, reads
        the pipes and watches the sentinels.

        Returns:
            Whether an answer says more than "the rows are written" (infos, in
            shared rows or pickled; errors): only then does the caller read each
            worker's answer.

        Raises:
            WorkerCrashedError: If a worker died without answering.
        """
        spin = self.spin
        measuring = spin.measuring  # one step in SpinPolicy.EVERY (SpinPolicy.sample)
        started = time.perf_counter() if measuring else 0.0
        more = False
        if self.local:
            main = threading.get_ident() == MAIN
            if main:
                HOLD["depth"] += 1
            try:
                for handle in self.local:
                    if handle.direct is not None:  # type: ignore[attr-defined]
                        handle.step_here()  # type: ignore[attr-defined]
                    numbers = handle.numbers
                    if numbers.answers or numbers.expected:  # said more, or piped
                        more = True
            except BaseException:
                if main:
                    drop_held()
                raise
            if main:
                HOLD["depth"] -= 1
                if HOLD["pending"] and not HOLD["depth"]:
                    raise_deferred()  # the share is stepped and answered
        shared = time.perf_counter() if measuring else 0.0
        if self.remote:
            if not self._poll_all_built:
                self._all_poll()
            # every worker answered on its bell, nothing more: no look at each
            answered = self._wait_bells(self.remote, spin.spin)
            more = more or not answered or self.more
        if more or not self.all_rung:
            # a reply in a pipe (a worker not rung): its answer is read, also when
            # it came in a wait that a Ctrl-C cut short and this is the wait again
            more = True
            for handle in self.handles:
                if handle.numbers.expected:
                    self.wait("step", None, label="step_wait")
                    break
        if measuring:
            now = time.perf_counter()
            spin.wait_ema += 0.1 * (now - shared - spin.wait_ema)
            spin.waited(now - started)  # stepping envs is not the parent's work
        return more

    def _wait_bells(self, handles: list[WorkerHandle], budget: float) -> bool:
        """Wait until every rung worker among ``handles`` answers on its bell.

        The hot head of the one wait (vecpool/_wire/bell.py): it looks at each rung
        worker's ``ANSWERED`` word for up to ``budget`` seconds and takes an answer
        given on the bell alone there, then blocks as :meth:`wait` does
        (:meth:`_block`) and reads the wakes off. A rung worker whose answer is
        piped is left for the pipe reading that follows.

        Args:
            handles: The workers to look at (those not rung are skipped).
            budget: Seconds to spin before blocking (0: block at once).

        Returns:
            ``True`` once every rung worker answered; ``False`` when a sentinel, a
            reply or a broken pipe is there for :meth:`wait` to read or judge.
        """
        until = 0.0  # the spin's end, timed from the first look that waits
        looks = 0
        while True:
            waiting = False
            for handle in handles:
                rung = handle.rung
                if not rung:
                    continue
                bell = handle.bell
                if bell[ANSWERED] != rung & NUMBER_MASK:
                    waiting = True
                    continue
                piped = bell[PIPED]
                if piped:
                    self.more = True  # an answer says more than "rows written"
                    if piped == 1:  # its reply is in the pipe: read by the caller
                        continue
                FRESH_LOCK().acquire(False)  # fence(): the number before the rows
                numbers = handle.numbers
                if numbers.received < rung:  # as WorkerHandle.settle
                    numbers.received = rung
                    expected = numbers.expected
                    if expected and expected[0] == rung:
                        expected.popleft()
                        if piped:  # an answer of nothing to say is not kept
                            numbers.answers.append((rung, COLUMNS_ONLY))
                handle.rung = 0
            if not waiting:
                return True
            if not looks:
                until = time.perf_counter() + budget
            looks += 1
            if not budget or (not looks & 63 and time.perf_counter() >= until):
                budget = 0.0  # spun out: block until each answers
                # a piped reply may be read now or in the wait that follows: this
                # step's answers are read, also if a Ctrl-C cuts it and it is
                # waited for again
                self.more = True
                if self._block(handles, self._poll_all, None) is not None:
                    return False  # a reply, a death: the wait's to read or judge

    def wait(
        self,
        what: str,
        timeout: float | None,
        handles: list[WorkerHandle] | None = None,
        *,
        any_answer: bool = False,
        label: str | None = None,
        deadline: float | None = None,
    ) -> None:
        """Wait until every handle (or, with ``any_answer``, one) has its answers.

        Args:
            what: The call's name, for the crash message.
            timeout: Seconds to wait; ``None`` waits as long as the workers live.
            handles: The workers to wait for (default: all).
            any_answer: Return as soon as any handle holds an answer.
            label: The name the timeout message gives (default: ``what``).
            deadline: A ``time.monotonic()`` deadline replacing ``timeout``'s (which
                the message still shows).

        Raises:
            multiprocessing.TimeoutError: If the deadline passed.
            WorkerCrashedError: If a worker died without answering.
        """
        if handles is None:
            handles = self.handles
            poller, watched = self._all_poll()
        elif any_answer:
            # recv: the standing poll set (workers not waited on are idle: silent),
            # not a new one per call
            poller, watched = self._all_poll()
        else:
            poller, watched = poll_set(handles)

        if deadline is None and timeout is not None:
            deadline = time.monotonic() + timeout
        if self.local:  # the parent's own envs step now, while the workers step
            started = time.monotonic()
            sent = self._run_local(what, any_answer=any_answer)
            # timed as a worker's envs: from when its oldest command went out, so
            # a share stepped before the deadline would have passed is in time
            # (Gymnasium's `timeout=0` after `step_async`: "are the results
            # ready?"); a share with nothing to run takes no time
            if (
                deadline is not None
                and sent is not None
                and sent + time.monotonic() - started > deadline
            ):
                msg = (
                    f"The call to `{label or what}` has timed out after {timeout} "
                    "second(s)."
                )
                raise multiprocessing.TimeoutError(msg)
        if not self._finished(handles, any_answer):  # else: e.g. waited for again
            outer = self.waiting
            if what != "restart":  # a replacement's start-up keeps the call's deadline
                self.waiting = (timeout, label or what, deadline)
            try:
                self._wait_loop(what, handles, poller, watched, any_answer, deadline)
            finally:
                self.waiting = outer
        if self.restarter is not None:  # restart's own bookkeeping (restart.py)
            if self.starting:
                self._finish_starts(what)
            if self.lost is not None and what != "restart":  # this call's results
                error, self.lost = self.lost, None
                raise error

    def _wait_loop(
        self,
        what: str,
        handles: list[WorkerHandle],
        poller: select.poll,
        watched: dict[int, tuple[WorkerHandle, bool]],
        any_answer: bool,
        deadline: float | None,
    ) -> None:
        """:meth:`wait`'s loop: read replies until the handles have their answers.

        Answers at hand come first, with no system call: a rung command's answer
        on its bell alone (vecpool/_wire/bell.py), replies already read in bulk.
        Then the parent spins within its budget: it looks at the bells every turn,
        and polls the pipes and sentinels every turn while a reply can come only
        by pipe, else every 64th (a death is seen within the spin). Past the
        budget it blocks on them all (:meth:`_block`), each unanswered bell's
        ``WAITING`` raised so that its worker wakes it, until ``deadline``.
        """
        timeout, name, _ = self.waiting
        budget = self.spin.before_wait()
        if deadline is not None:  # never spins past it (`timeout=0`: one look)
            budget = min(budget, max(0.0, deadline - time.monotonic()))
        until = time.perf_counter() + budget
        give = getattr(os, "sched_yield", None) if self.spin.spin_yield else None
        looks = 0
        while True:
            events: list[Any] | None = [
                (handle.conn.fileno(), select.POLLIN)
                for handle in handles
                if (handle.channel.buffer and handle.channel.has_message())
                or (handle.rung and handle.settle())
            ]
            if not events and self._finished(handles, any_answer):
                break
            if not events:
                looks += 1
                spinning = time.perf_counter() < until
                if (
                    not spinning
                    or not looks & 63
                    or looks == 1
                    or any(not h.rung and h.numbers.expected for h in handles)
                ):
                    events = poller.poll(0)
                if not events and spinning:
                    if give is not None:
                        give()
                    continue
            if not events:
                events = self._block(handles, (poller, watched), deadline)
                if events is None:  # a bell answered as its WAITING went up
                    continue
            if not events:
                msg = f"The call to `{name}` has timed out after {timeout} second(s)."
                raise multiprocessing.TimeoutError(msg)
            with HELD:
                self._read_events(events, poller, watched, what)
            if self.dead:  # on_worker_crash="restart": replace, re-send, go on
                poller, watched = self._recover(what, handles, any_answer)
            if self._finished(handles, any_answer):
                break
        self.spin.after_wait()

    @staticmethod
    def _block(
        handles: list[WorkerHandle],
        polled: tuple[select.poll, dict[int, tuple[WorkerHandle, bool]]],
        deadline: float | None,
    ) -> list[Any] | None:
        """Block on the pipes and sentinels until an event or ``deadline``.

        ``WAITING`` goes up on every rung bell not answered yet, so a worker that
        answers on its bell alone writes a wake (vecpool/_wire/bell.py); wakes are
        read off here. A bell whose answer is in the pipe (``PIPED`` 1) needs no
        wake: the poll sees its reply. Anything else read from a pipe (a reply, a
        part of one, its end) stays in the channel's buffer, for
        :meth:`_read_events`. A read and its keeping go together: Ctrl-C is held
        back (inline :data:`HOLD`).

        Returns:
            The events to read or judge (``[]``: the deadline passed), or ``None``
            when a bell answered (since the last look, or as its ``WAITING`` went
            up) or only wakes came: look again.
        """
        raised = []
        for handle in handles:
            rung = handle.rung
            if rung:
                bell = handle.bell
                if bell[ANSWERED] == rung & NUMBER_MASK:
                    if bell[PIPED] == 1:  # its reply is in the pipe: polled
                        continue
                    return None  # answered since the last look
                bell[WAITING] = 1
                raised.append(handle)
        poller, watched = polled
        try:
            FRESH_LOCK().acquire(False)  # fence(): WAITING before the look at ANSWERED
            for handle in raised:
                if handle.bell[ANSWERED] == handle.rung & NUMBER_MASK:
                    return None
            if deadline is None:
                events = poller.poll()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                events = poller.poll(max(1, math.ceil(remaining * 1000)))
        finally:
            for handle in raised:
                handle.bell[WAITING] = 0
        kept = []
        main = threading.get_ident() == MAIN
        for event in events:
            entry = watched.get(event[0])
            if entry is None or entry[1] or entry[0].runs_here:
                kept.append(event)  # a sentinel; the parent's share's answers
                continue
            channel = entry[0].channel
            if main:
                HOLD["depth"] += 1
            try:
                chunk = os.read(event[0], 1 << 16)
                if chunk != _WAKE_MESSAGE or channel.buffer:  # not a wake alone
                    channel.buffer += chunk
                    kept.append(event)
            except OSError:  # a broken pipe: judged by the reader
                kept.append(event)
            except BaseException as exc:
                if main:
                    drop_held()
                if isinstance(exc, KeyboardInterrupt):  # a second Ctrl-C: what
                    entry[0].cut_off()  # was read may be lost, the pipe out of step
                raise
            if main:
                HOLD["depth"] -= 1
                if HOLD["pending"] and not HOLD["depth"]:
                    raise_deferred()
        return kept or (None if events else [])

    def _run_local(self, what: str, *, any_answer: bool) -> float | None:
        """Step the parent's own envs: run the commands their handles queued.

        Their answers are read at once (no system call). With ``any_answer``
        (``recv``) they are left for the loop, and the workers' replies that came
        meanwhile are read first with one ``poll``, so the parent's envs, always
        done first, do not always win.

        Returns:
            When the oldest command run was sent (``time.monotonic()``), or
            ``None`` if none was waiting.
        """
        sent: float | None = None
        with HELD:
            started = time.perf_counter()
            for handle in self.local:
                since = handle.pending_since  # type: ignore[attr-defined]
                if since is not None and (sent is None or since < sent):
                    sent = since
                handle.run_queued()
                while not any_answer and handle.channel.has_message():
                    handle.receive()
            # stepping envs is not the parent's own work between steps (a policy):
            # it must not stop the workers spinning (vecpool/_engine/spinning.py)
            self.spin.waited(time.perf_counter() - started)
            if any_answer:
                poller, watched = self._all_poll()
                events = poller.poll(0)
                if events:
                    self._read_events(events, poller, watched, what)
        return sent

    def _finish_starts(self, what: str) -> None:
        """Finish the restarts whose replacement's start-up reply has come now.

        Raises:
            Exception: What an env constructor raised in such a replacement.
        """
        assert self.restarter is not None  # only restarts leave replacements starting
        for record in list(self.starting):
            came, reply = record.handle.numbers.take_pinned()
            if came:
                self.starting.remove(record)
                if what != "close":
                    self.restarter.finish_start(self, record, reply, deferred=True)

    @staticmethod
    def _finished(handles: list[WorkerHandle], any_answer: bool) -> bool:
        if any_answer:
            return any(handle.numbers.answers for handle in handles)
        for handle in handles:  # noqa: SIM110 - a plain loop: the hot path, no generator
            if handle.numbers.expected:
                return False
        return True

    def _read_events(
        self,
        events: list[tuple[int, int]],
        poller: select.poll,
        watched: dict[int, tuple[WorkerHandle, bool]],
        what: str,
    ) -> None:
        """Read every reply ``events`` announce, then judge the sentinels."""
        sentinels = []
        for fd, _ in events:
            entry = watched.get(fd)
            if entry is None:
                continue
            handle, is_sentinel = entry
            if is_sentinel:  # judged after the replies: a worker may answer, then exit
                sentinels.append((fd, handle))
                continue
            try:
                handle.receive()
                while handle.channel.has_message():
                    handle.receive()
            except (EOFError, OSError):
                if handle.numbers.expected:
                    self.lose(handle, what)
                else:
                    self._gone(handle)
                for gone in (fd, handle.sentinel):
                    with contextlib.suppress(KeyError, ValueError):
                        poller.unregister(gone)
                    watched.pop(gone, None)
        for fd, handle in sentinels:
            if fd not in watched or handle.poll():
                continue  # its last words come first
            if handle.numbers.expected:
                self.lose(handle, what)
            else:
                self._gone(handle)
            with contextlib.suppress(KeyError, ValueError):
                poller.unregister(fd)
            watched.pop(fd, None)

    def _gone(self, handle: WorkerHandle) -> None:
        """A worker exited while nothing was awaited from it: mark it gone.

        E.g. after reporting an env error at start-up, or killed after its last
        answer while the call waited for others. No poll watches it from now on,
        so its next command must not count on one: it loses its bell (a ring
        cannot fail) and :meth:`send_to` judges the death (a
        :class:`~vecpool.errors.WorkerCrashedError`, or a restart). Its
        ``max_concurrency`` permit is given back now: the others need it.
        """
        handle.gone = True
        handle.bell = None
        if self.restarter is not None:
            self.restarter.give_back_permit(handle)

    def _all_poll(self) -> tuple[select.poll, dict[int, tuple[WorkerHandle, bool]]]:
        if not self._poll_all_built:
            self._poll_all = poll_set(self.handles)
            self._poll_all_built = True
        poller, watched = self._poll_all
        return poller, watched

    def lose(self, handle: WorkerHandle, what: str) -> None:
        """A worker died while a call waited for it: raise, or note it for a restart.

        Raises:
            WorkerCrashedError: Unless ``on_worker_crash="restart"`` allows one more
                restart of this worker in this call.
        """
        restarter = self.restarter
        if self.starting and any(r.handle is handle for r in self.starting):
            # a replacement left starting: what it said at start-up comes first
            # (an env constructor's error, raised here, explains its exit)
            self._finish_starts(what)
        if restarter is None or not restarter.allows(handle, what):
            self.crashed(handle, what)
        if handle not in self.dead:
            self.dead.append(handle)

    def send_to(
        self, handle: WorkerHandle, what: str, send: Callable[[WorkerHandle], int]
    ) -> tuple[WorkerHandle, int]:
        """Send to ``handle``; if its pipe is broken, through replacements (restart).

        Each replacement is started outside any exception handler: a forked child
        would inherit the exception being handled.

        Returns:
            The handle that took the command, and the command's number.

        Raises:
            WorkerCrashedError: If a pipe is broken and no restart is allowed.
        """
        while True:
            if not handle.gone:
                try:
                    return handle, send(handle)
                except OSError:
                    pass  # dead (a replacement may die before its first command too)
            handle = self.lose_at_send(handle, what)

    def lose_at_send(self, handle: WorkerHandle, what: str) -> WorkerHandle:
        """A worker's pipe broke as a command was sent: replace it, or raise.

        Nothing was lost (the command did not reach it): the caller sends the
        command to the returned replacement.

        Raises:
            WorkerCrashedError: Unless a restart is allowed.
        """
        restarter = self.restarter
        if restarter is None or not restarter.allows(handle, what):
            self.crashed(handle, what)
        # `send` batches still in flight on it are sent again; the command being
        # sent now goes to the replacement (the caller sends it)
        new = restarter.replace(
            self, handle, what, reissue=bool(handle.numbers.batches)
        )
        # a call other than step/reset/send still fails (its envs are new ones)
        restarter.lose_result(self, handle, what)
        return new

    def _recover(
        self, what: str, handles: list[WorkerHandle], any_answer: bool
    ) -> tuple[select.poll, dict[int, tuple[WorkerHandle, bool]]]:
        """Replace the dead workers noted by :meth:`lose`; return the new poll set."""
        assert self.restarter is not None  # lose() notes the dead only then
        while True:
            # only this wait's own dead: a replacement's start-up wait (nested in
            # an outer _recover) leaves the outer call's dead to the outer one
            mine = [old for old in self.dead if any(old is h for h in handles)]
            if not mine:
                break
            old = mine[0]
            self.dead.remove(old)
            new = self.restarter.replace(self, old, what, reissue=True)
            for position, handle in enumerate(handles):
                if handle is old:
                    handles[position] = new
        if handles is self.handles or any_answer:
            return self._all_poll()
        return poll_set(handles)

    def crashed(self, handle: WorkerHandle, what: str) -> NoReturn:
        """Record and raise the death of ``handle``'s worker.

        Raises:
            WorkerCrashedError: Naming the worker, its envs and its exit code.
        """
        handle.process.join(1.0)
        envs = handle.env_indices
        msg = handle.death(what)
        method = getattr(getattr(handle.process, "_popen", None), "method", None)
        if what == "__init__" and method in ("spawn", "forkserver"):
            msg += (
                f" With the {method!r} start method each worker imports the main "
                "script again: if its traceback above says that a new process was "
                "started before the current one finished its bootstrapping phase, "
                "put the code that creates the vector env under "
                '`if __name__ == "__main__":`.'
            )
        exitcode = handle.process.exitcode
        # the group keeps a twin: the raised error's traceback holds this call's
        # frames, a cycle that kept the shared block mapped after close (issue 38)
        self.broken = WorkerCrashedError(msg, handle.index, tuple(envs), exitcode)
        raise WorkerCrashedError(msg, handle.index, tuple(envs), exitcode)

    def watch_all_again(self) -> None:
        """Rebuild the standing poll set: a worker taken out of it is watched again.

        Restart (vecpool/_engine/restart.py) calls it when a second Ctrl-C stopped
        a replacement's start: the dead worker stays in place, and its next wait
        must see its death again.
        """
        self._poll_all_built = False

    def note_give_up(self) -> None:
        """A call gave up (or a transfer was cut): check the handles from now on."""
        self.gave_up = True

    def forget_queued(self) -> None:
        """Drop the commands the parent's own envs have not run yet."""
        for handle in self.local:
            handle.forget_queued()

    def drop_pending(self) -> None:
        """Forget every awaited reply of every worker (the call gave up)."""
        self.gave_up = True
        self.dead.clear()  # a dead one left is found again at its next command
        # a result the given-up call lost to a restart goes with it: a later call
        # must not raise it (and drop its own rows, a replacement's cut among them)
        self.lost = None
        for handle in self.handles:
            handle.numbers.give_up()

    def close(self, timeout: float | None) -> bool:
        """Ask live workers to close their envs; return whether all answered.

        Args:
            timeout: Seconds to wait for the answers.
        """
        self.drop_pending()
        live = [
            handle
            for handle in self.handles
            if handle.process.is_alive() and not handle.out_of_step
        ]
        try:
            with HELD:
                for handle in live:
                    handle.expect(handle.send_close(timeout))
            self.wait("close", timeout, live)
        except Exception:  # noqa: BLE001 - the caller terminates the workers
            return False
        return True


_EMPTY_MESSAGE = bytes(4)
"""An empty message as :class:`~vecpool._wire.channel.Channel` frames it: a wake."""

_WAKE_MESSAGE = len(WAKE).to_bytes(4, "big") + WAKE
"""A worker's :data:`~vecpool._wire.messages.WAKE` as it comes through the pipe."""


def poll_set(
    handles: list[WorkerHandle],
) -> tuple[select.poll, dict[int, tuple[WorkerHandle, bool]]]:
    """A poll set over the handles' pipes and process sentinels.

    Args:
        handles: Worker handles.

    Returns:
        The poll object and a map fd -> (handle, whether it is the sentinel).
    """
    poller = select.poll()
    watched: dict[int, tuple[WorkerHandle, bool]] = {}
    for handle in handles:
        for fd, is_sentinel in ((handle.conn.fileno(), False), (handle.sentinel, True)):
            watched[fd] = (handle, is_sentinel)
            poller.register(fd, select.POLLIN)
    return poller, watched
