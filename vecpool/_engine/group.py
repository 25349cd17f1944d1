"""The parent's handles on its worker processes: start, send, THE wait, crashes, close.

Every command to a worker gets exactly one reply, in order. A :class:`WorkerHandle`
numbers both: ``sent`` counts the commands written to the pipe, ``received`` the
replies read from it, and ``expected`` holds the numbers of the replies a pending
call is waiting for. A reply that is not the next one expected belongs to a command
whose call gave up (a timeout, a Ctrl-C) and is dropped. Writing a command and
counting it, or reading a reply and storing it, happen inside a
:func:`vecpool._engine.guards.held` section, so a Ctrl-C can never come between the two.
Hence the rule: after an interrupt or a timeout, every later result is the result
of the commands its call sent, or an error; never an earlier call's rows.

:meth:`WorkerGroup.wait` is the one wait loop, used by step, reset, call, the env
state calls and the ``send``/``recv`` batches: it waits on every pipe and every
process sentinel at once, spins first when the :class:`SpinPolicy` says so, honours
one deadline, reads replies before judging deaths, and drops stale replies.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import pickle
import select
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NoReturn

import cloudpickle
import numpy as np
from gymnasium import Env, Space, logger
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import CloudpickleWrapper, clear_mpi_env_vars

from vecpool._engine.guards import HELD
from vecpool._wire.channel import Channel
from vecpool._wire.messages import (
    STEP,
    STEP_SOME,
    Command,
    ObsTransport,
    Reply,
    WorkerConfig,
)
from vecpool._wire.remote_errors import rebuild_exception
from vecpool._wire.spin import SpinPolicy, spin_until_ready
from vecpool._worker.loop import run_worker
from vecpool.errors import RemoteTraceback, VecPoolError, WorkerCrashedError

if TYPE_CHECKING:
    from vecpool._engine.buffers import StepBuffers
    from vecpool._engine.restart import Restarter

__all__ = [
    "SpinPolicy",
    "WorkerGroup",
    "WorkerHandle",
    "describe_exit",
    "raise_env_errors",
    "split",
]

STARTING_WORKERS = [0]
"""Above 0 while vecpool itself forks its workers (the fork hook skips those)."""


class EnvFns:
    """Picklable (by cloudpickle) list of env constructors for one worker."""

    def __init__(self, env_fns: list[Callable[[], Env[Any, Any]]]) -> None:
        """Keep ``env_fns``."""
        self.env_fns = env_fns

    def __call__(self) -> list[Callable[[], Env[Any, Any]]]:
        """The constructors."""
        return self.env_fns

    def __getstate__(self) -> bytes:
        """Cloudpickle the constructors (lambdas and local functions included)."""
        return bytes(cloudpickle.dumps(self.env_fns))

    def __setstate__(self, state: bytes) -> None:
        """Unpickle the constructors."""
        self.env_fns = pickle.loads(state)


def split(num_envs: int, num_workers: int) -> list[range]:
    """Contiguous slices of ``range(num_envs)``, sizes differing by at most one.

    Args:
        num_envs: Number of sub-environments.
        num_workers: Number of slices.

    Returns:
        One range per worker, in order.
    """
    base, extra = divmod(num_envs, num_workers)
    slices, start = [], 0
    for worker in range(num_workers):
        stop = start + base + (1 if worker < extra else 0)
        slices.append(range(start, stop))
        start = stop
    return slices


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


@dataclass
class StartSpec:
    """What the workers of one vector env are started with.

    Attributes:
        env_fns: The env constructors, one per env.
        num_workers: Number of worker processes.
        custom_worker: A Gymnasium-protocol worker function, or ``None``.
        daemon: Whether the workers are daemonic.
        name: The vector env's class name (processes are named after it).
        buffers: The step buffers (shared block and layout).
        autoreset_mode: The autoreset mode.
        observation_mode: ``"same"``, ``"different"`` or a space tuple.
        observation_space: Single observation space.
        action_space: Single action space.
        max_concurrency: At most this many envs step at once, or ``None``.
        error_queue: Gymnasium's error queue (custom workers only).
    """

    env_fns: Sequence[Callable[[], Env[Any, Any]]]
    num_workers: int
    custom_worker: Callable[..., None] | None
    daemon: bool
    name: str
    buffers: StepBuffers
    autoreset_mode: AutoresetMode
    observation_mode: Any
    observation_space: Space[Any]
    action_space: Space[Any]
    max_concurrency: int | None
    error_queue: Any


class OutOfStepError(VecPoolError):
    """A transfer to or from a worker was cut off half-way (a second Ctrl-C)."""


class WorkerHandle:
    """The parent's handle on one vecpool worker process.

    Attributes:
        index: Worker index.
        env_indices: The global indices of the envs it hosts.
        process: The process.
        conn: The parent's end of its pipe.
        sent: Commands written so far.
        received: Replies read so far.
        expected: Numbers of the replies a pending call waits for, oldest first.
        answers: ``(number, reply)`` of expected replies that arrived, oldest first.
        batches: Env ids of each ``send`` batch in flight, by reply number.
    """

    def __init__(
        self,
        index: int,
        env_indices: range,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
    ) -> None:
        """Wrap a started worker."""
        self.index = index
        self.env_indices = env_indices
        self.process = process
        self.conn = conn
        self.channel = Channel(conn.fileno())
        self.sentinel: int = process.sentinel
        self.sent = 0
        self.received = 0
        self.expected: deque[int] = deque()
        self.answers: deque[tuple[int, Reply | None]] = deque()
        self.batches: dict[int, list[int]] = {}
        self.out_of_step = False
        self.group: WorkerGroup | None = None
        self.last_sent = b""  # re-sent to a replacement (on_worker_crash="restart")

    # -- sending ---------------------------------------------------------------------

    def send_step(
        self, actions: list[Any] | None, buffer: int = 0, message: bytes = STEP
    ) -> int:
        """Step every hosted env; actions in shared memory when ``actions`` is None."""
        if actions is None:
            return self._write(message)
        return self.send(Command.STEP, (actions, None, buffer))

    def send_step_some(self, local: list[int], actions: list[Any] | None) -> int:
        """Step the hosted envs ``local`` (a ``send`` batch)."""
        if actions is None:
            return self._write(STEP_SOME + np.asarray(local, np.uint16).tobytes())
        return self.send(Command.STEP, (actions, local, 0))

    def send_reset(
        self,
        seeds: list[Any],
        options: dict[str, Any] | None,
        flags: list[bool],
        buffer: int = 0,
    ) -> int:
        """Reset the hosted envs whose flag is set."""
        return self.send(Command.RESET, (seeds, options, flags, buffer))

    def send_call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> int:
        """Call a method (or read an attribute) of every hosted env."""
        return self.send(Command.CALL, (name, args, kwargs))

    def send_set_attr(self, name: str, values: list[Any]) -> int:
        """Set an attribute of every hosted env (one value each)."""
        return self.send(Command.SET_ATTR, (name, values))

    def send_close(self) -> int:
        """Close the hosted envs and end the worker."""
        return self.send(Command.CLOSE, None)

    def _cut_off(self) -> None:
        """A transfer was cut off half-way: this pipe can no longer be trusted."""
        self.out_of_step = True
        if self.group is not None:
            self.group.note_give_up()

    def send_check_spaces(
        self,
        data: tuple[Any, Any, Any],  # noqa: ARG002 - Gymnasium-protocol workers use it
    ) -> int | None:
        """Ask for the start-up space check (vecpool workers send it unasked)."""
        return None

    def send(self, command: Command, payload: Any) -> int:
        """Pickle and send a command; return its number."""
        try:
            data = pickle.dumps((command, payload), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - e.g. a lambda in `call` arguments
            data = bytes(
                cloudpickle.dumps((command, payload), protocol=pickle.HIGHEST_PROTOCOL)
            )
        return self._write(data)

    def _write(self, data: bytes) -> int:
        # callers hold Ctrl-C back (held()): the write and its count go together
        try:
            self.channel.send(data)
        except KeyboardInterrupt:  # cut off mid-transfer (held() defers the 1st)
            self.out_of_step = True
            if self.group is not None:
                self.group.note_give_up()
            raise
        self.last_sent = data
        self.sent += 1
        return self.sent

    # -- receiving -------------------------------------------------------------------

    def has_message(self) -> bool:
        """Whether a whole reply is already buffered (no system call)."""
        return self.channel.has_message()

    def poll(self) -> bool:
        """Whether a reply (or EOF) can be read now."""
        return self.channel.has_message() or self.conn.poll()

    def expect(self, number: int) -> None:
        """Wait, in the next :meth:`WorkerGroup.wait`, for reply ``number`` alone."""
        if self.expected:
            self.expected.clear()
        if self.answers:
            self.answers.clear()
        self.expected.append(number)

    def receive(self) -> bool:
        """Read one reply; keep it if expected. Return whether it was expected.

        Raises:
            EOFError: If the worker closed its pipe.
            OSError: If the pipe broke.
        """
        # called inside held(): the read and its count go together
        try:
            data = self.channel.recv()
        except KeyboardInterrupt:  # cut off mid-transfer (held() defers the 1st)
            self.out_of_step = True
            if self.group is not None:
                self.group.note_give_up()
            raise
        self.received = number = self.received + 1
        expected = self.expected
        if expected and expected[0] == number:  # the hot path
            expected.popleft()
            self.answers.append((number, pickle.loads(data) if data else None))
            return True
        return self._keep(number, pickle.loads(data) if data else None)

    def _keep(self, number: int, reply: Reply | None) -> bool:
        expected = self.expected
        while expected and expected[0] < number:  # never coming: drop
            expected.popleft()
        if not expected or expected[0] != number:
            return False  # the reply to a command whose call gave up
        expected.popleft()
        self.answers.append((number, reply))
        return True

    def decode(self, data: bytes) -> Reply | None:
        """Turn a reply's bytes into a :class:`Reply` (``None``: nothing to say)."""
        if not data:
            return None
        reply: Reply = pickle.loads(data)
        return reply

    def answer(self) -> Reply | None:
        """The answer to the call that just completed (kept until the next call).

        Left in place, so a call interrupted while it read its answers can be
        waited for again and find them.
        """
        return self.answers[0][1] if self.answers else None

    def hosted(self) -> str:
        """The envs it hosts, as a message names them (``envs 0-3``)."""
        envs = self.env_indices
        if len(envs) == 1:
            return f"env {envs.start}"
        return f"envs {envs.start}-{envs.stop - 1}"

    def death(self, what: str) -> str:
        """The message of the :class:`WorkerCrashedError` raised when it dies."""
        return (
            f"Worker {self.index} (hosting {self.hosted()}) died with "
            f"{describe_exit(self.process.exitcode)} while running `{what}`. "
            "Its sub-environments are lost: call `close()` and create a new "
            "vector env."
        )

    def drop_pending(self) -> None:
        """Forget every awaited reply (they will be dropped when they come)."""
        self.expected.clear()
        self.answers.clear()
        self.batches.clear()

    @property
    def idle(self) -> bool:
        """Whether every command sent has been answered (shared memory is free)."""
        return self.received >= self.sent


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


class WorkerGroup:
    """All the worker handles of one vector env, and the one wait loop over them.

    Attributes:
        handles: One handle per worker, in order.
        handle_of: Env index -> worker index.
        spin: The spin policy.
        broken: The crash that made the group unusable, once one happened.
        gave_up: Whether a call may have given up on a reply since the last
            check (then new actions go by pipe, and pipes are checked).
    """

    def __init__(self, spin: SpinPolicy) -> None:
        """An empty group (see :meth:`add`)."""
        self.handles: list[WorkerHandle] = []
        self.handle_of: dict[int, int] = {}
        self.spin = spin
        self.broken: WorkerCrashedError | None = None
        self._poll_all: tuple[select.poll, dict[int, tuple[WorkerHandle, bool]]]
        self._poll_all_built = False
        self.gave_up = False
        self.restarter: Restarter | None = None
        self.started: tuple[Any, ...] = ()
        self.dead: list[WorkerHandle] = []
        self.lost: WorkerCrashedError | None = None

    def put(self, handle: WorkerHandle) -> None:
        """Put a replacement's handle in the place of the worker it replaces."""
        handle.group = self
        self.handles[handle.index] = handle
        self._poll_all_built = False

    def add(self, handle: WorkerHandle) -> None:
        """Add the handle of a started worker."""
        handle.group = self
        self.handles.append(handle)
        for env_index in handle.env_indices:
            self.handle_of[env_index] = handle.index
        self._poll_all_built = False

    def start(
        self,
        spec: StartSpec,
        ctx: Any,
        processes: list[multiprocessing.process.BaseProcess],
        parent_pipes: list[Connection],
    ) -> None:
        """Start one process per slice of envs and add its handle.

        Args:
            spec: What to start.
            ctx: The ``multiprocessing`` context.
            processes: Filled with the processes as they start (for the finalizer).
            parent_pipes: Filled with the parent's pipe ends.
        """
        num_envs = len(spec.env_fns)
        custom = spec.custom_worker
        semaphore = None
        if spec.max_concurrency is not None and (
            custom is not None or spec.max_concurrency < spec.num_workers
        ):
            semaphore = ctx.BoundedSemaphore(spec.max_concurrency)
        if spec.num_workers == 0:
            self._start_local(spec, parent_pipes)
            return
        holding = (
            ctx.RawArray("b", spec.num_workers)
            if semaphore is not None and custom is None
            else None
        )
        self.started = (spec, ctx, processes, parent_pipes, semaphore, holding)
        for index, env_indices in enumerate(split(num_envs, spec.num_workers)):
            self.add(self.spawn(index, env_indices))

    def spawn(
        self, index: int, env_indices: range, restart: Any = None
    ) -> WorkerHandle:
        """Start worker ``index`` hosting ``env_indices`` and return its handle.

        Its process and pipe go at position ``index`` of the lists given to
        :meth:`start` (appended at start-up, replaced on a restart).

        Args:
            index: Worker index.
            env_indices: The envs it hosts.
            restart: A :class:`vecpool._wire.messages.RestartStart` for a replacement.
        """
        spec, ctx, processes, parent_pipes, semaphore, holding = self.started
        custom = spec.custom_worker
        buffers = spec.buffers
        with clear_mpi_env_vars():
            parent_conn, child_conn = ctx.Pipe()
            if custom is not None:
                args: tuple[Any, ...] = (
                    index,
                    CloudpickleWrapper(spec.env_fns[index]),
                    child_conn,
                    parent_conn,
                    buffers.gym_obs_memory,
                    spec.error_queue,
                    spec.autoreset_mode,
                    semaphore,
                )
                target = custom
            else:
                config = _config(
                    spec,
                    index,
                    env_indices,
                    semaphore=semaphore,
                    holding=holding,
                    restart=restart,
                    spin=self.spin.worker_spin,
                    spin_yield=self.spin.spin_yield,
                    spin_max_gap=self.spin.worker_max_gap,
                )
                args, target = (child_conn, parent_conn, config), run_worker
            process = ctx.Process(
                target=target, name=f"Worker<{spec.name}>-{index}", args=args
            )
            process.daemon = spec.daemon
            if index < len(processes):  # a replacement
                processes[index] = process
                parent_pipes[index] = parent_conn
            else:
                processes.append(process)
                parent_pipes.append(parent_conn)
            STARTING_WORKERS[0] += 1
            try:
                process.start()
            finally:
                STARTING_WORKERS[0] -= 1
                child_conn.close()
            handle: WorkerHandle
            if custom is not None:
                from vecpool._engine.gym_protocol import GymWorkerHandle

                handle = GymWorkerHandle(
                    index,
                    env_indices,
                    process,
                    parent_conn,
                    spec.error_queue,
                    buffers.transport is ObsTransport.PIPE,
                )
            else:
                handle = WorkerHandle(index, env_indices, process, parent_conn)
                # a vecpool worker answers its start-up space check unasked
                handle.sent += 1
                handle.expected.append(handle.sent)
        return handle

    def _start_local(self, spec: StartSpec, closers: list[Any]) -> None:
        """``num_workers=0``: host every env in this process (see local_worker)."""
        from vecpool._engine.in_process import LocalHandle

        handle = LocalHandle(_config(spec, 0, range(len(spec.env_fns))))
        closers.append(handle)  # closed with the pipes, on every way out
        self.add(handle)

    def check_spaces(
        self,
        observation_mode: Any,
        observation_space: Space[Any],
        action_space: Space[Any],
        owner: str,
    ) -> None:
        """Collect the workers' start-up space checks (Gymnasium's messages).

        Raises:
            RuntimeError: If an env's spaces differ from the first env's.
            Exception: The error an env constructor raised, original type.
        """
        with HELD:
            for handle in self.handles:
                number = handle.send_check_spaces(
                    (observation_mode, observation_space, action_space)
                )
                if number is not None:
                    handle.expect(number)
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
        self.gave_up = any(
            handle.sent - handle.received > len(handle.expected)
            for handle in self.handles
        )
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
        self, what: str, send: Callable[[WorkerHandle], int]
    ) -> list[WorkerHandle]:
        """Send one command to every worker; each then awaits its reply.

        Args:
            what: The call's name, for a crash message.
            send: Sends the command on one handle and returns its number.

        Returns:
            The handles.

        Raises:
            WorkerCrashedError: If a worker's pipe is broken.
        """
        # callers hold Ctrl-C back around this (held()) and their state change
        for handle in self.handles:
            try:
                number = send(handle)
            except OSError:
                number = 0
            if not number:  # restart mode: a replacement gets it
                handle, number = self.send_to(handle, what, send)
            handle.expect(number)
        return self.handles

    def send_message_all(self, message: bytes) -> None:
        """:meth:`send_all` for the hot path: the same tiny message to every worker.

        Args:
            message: The framed-less message (e.g. ``b"s"`` and a buffer index).

        Raises:
            WorkerCrashedError: If a worker's pipe is broken.
        """
        for handle in self.handles:  # inside held(), as every send
            try:
                number = handle._write(message)
            except OSError:
                number = 0
            if not number:  # restart mode: a replacement gets it (see send_to)
                handle, number = self.send_to(
                    handle, "step", lambda new: new._write(message)
                )
            expected = handle.expected
            if expected:
                expected.clear()
            if handle.answers:
                handle.answers.clear()
            expected.append(number)

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

        if self._finished(handles, any_answer):
            return  # e.g. a call waited for again after an interrupt
        if deadline is None and timeout is not None:
            deadline = time.monotonic() + timeout
        spin = self.spin.before_wait()
        while True:
            # replies already read in bulk come first (no system call)
            events = [
                (handle.conn.fileno(), select.POLLIN)
                for handle in handles
                if handle.channel.buffer and handle.channel.has_message()
            ] or poller.poll(0)
            if not events and spin > 0.0:
                events = spin_until_ready(poller, spin, self.spin.spin_yield)
            if not events:
                if deadline is None:
                    events = poller.poll()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining > 0:
                        events = poller.poll(max(1, math.ceil(remaining * 1000)))
            if not events:
                name = label or what
                msg = f"The call to `{name}` has timed out after {timeout} second(s)."
                raise multiprocessing.TimeoutError(msg)
            with HELD:
                self._read_events(events, poller, watched, what)
            if self.dead:  # on_worker_crash="restart": replace, re-send, go on
                poller, watched = self._recover(what, handles, any_answer)
            if any_answer:
                if any(handle.answers for handle in handles):
                    break
            else:
                for handle in handles:
                    if handle.expected:
                        break
                else:
                    break
        self.spin.after_wait()
        if self.lost is not None and what != "restart":  # this call's results lost
            error, self.lost = self.lost, None
            raise error

    @staticmethod
    def _finished(handles: list[WorkerHandle], any_answer: bool) -> bool:
        if any_answer:
            return any(handle.answers for handle in handles)
        for handle in handles:  # noqa: SIM110 - a plain loop: the hot path, no generator
            if handle.expected:
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
                if handle.expected:
                    self.lose(handle, what)
                elif self.restarter is not None:  # gone after its last answer:
                    self.restarter.give_back_permit(self, handle)  # next command
                for gone in (fd, handle.sentinel):
                    with contextlib.suppress(KeyError, ValueError):
                        poller.unregister(gone)
                    watched.pop(gone, None)
        for fd, handle in sentinels:
            if fd not in watched or handle.poll():
                continue  # its last words come first
            if handle.expected:
                self.lose(handle, what)
            elif self.restarter is not None:  # replaced at its next command, but
                self.restarter.give_back_permit(self, handle)  # others need it now
            # it answered, then exited (e.g. after reporting an env error at
            # start-up): the next command will find out
            with contextlib.suppress(KeyError, ValueError):
                poller.unregister(fd)
            watched.pop(fd, None)

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
        if restarter is None or not restarter.allows(handle, what):
            self.crashed(handle, what)
        if handle not in self.dead:
            self.dead.append(handle)

    def send_to(
        self, handle: WorkerHandle, what: str, send: Callable[[WorkerHandle], int]
    ) -> tuple[WorkerHandle, int]:
        """Send to ``handle``, whose pipe broke, through replacements (restart mode).

        Each replacement is started outside any exception handler: a forked child
        would inherit the exception being handled.

        Returns:
            The handle that took the command, and the command's number.

        Raises:
            WorkerCrashedError: If no restart is allowed.
        """
        while True:
            handle = self.lose_at_send(handle, what)
            try:
                return handle, send(handle)
            except OSError:
                pass  # died again before its first command: replace it too

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
        new = restarter.replace(self, handle, what, reissue=bool(handle.batches))
        # a call other than step/reset/send still fails (its envs are new ones)
        restarter.lose_result(handle, what)
        self.lost, restarter.lost = self.lost or restarter.lost, None
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
        self.lost, self.restarter.lost = self.lost or self.restarter.lost, None
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
        error = WorkerCrashedError(
            msg, handle.index, tuple(envs), handle.process.exitcode
        )
        self.broken = error
        raise error

    def note_give_up(self) -> None:
        """A call gave up (or a transfer was cut): check the handles from now on."""
        self.gave_up = True

    def drop_pending(self) -> None:
        """Forget every awaited reply of every worker."""
        self.gave_up = True
        self.dead.clear()  # a dead one left is found again at its next command
        for handle in self.handles:
            handle.drop_pending()

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
                    handle.expect(handle.send_close())
            self.wait("close", timeout, live)
        except Exception:  # noqa: BLE001 - the caller terminates the workers
            return False
        return True


def _config(
    spec: StartSpec, index: int, env_indices: range, **waiting: Any
) -> WorkerConfig:
    """The configuration of the worker hosting ``env_indices``.

    ``waiting`` holds a worker process's semaphore and spin settings.
    """
    buffers = spec.buffers
    return WorkerConfig(
        index=index,
        start=env_indices.start,
        env_fns=EnvFns([spec.env_fns[i] for i in env_indices]),
        block=buffers.block,
        layout=buffers.layout,
        action_space=spec.action_space,
        observation_space=spec.observation_space,
        obs_transport=buffers.transport,
        gym_obs_memory=buffers.gym_obs_memory,
        autoreset_mode=spec.autoreset_mode,
        observation_mode=spec.observation_mode,
        check_spaces=(spec.observation_space, spec.action_space),
        **waiting,
    )


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
