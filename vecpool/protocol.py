"""What the parent and its workers share: framing, commands, replies, error records.

Both sides import this module, and nothing here imports the rest of the package
beyond :mod:`vecpool.shared_memory`, so a ``spawn``/``forkserver`` worker stays light.

Protocol (one pipe per worker, length-prefixed messages, see :class:`Channel`):

* parent -> worker: ``b"s"`` + one byte, the index of the observation buffer to
  write (step every hosted env; actions are in shared memory); ``b"p"`` + ``uint16``
  local indices (step those envs: ``send``/``recv`` batches); or a pickled
  ``(Command, payload)`` tuple for everything else.
* worker -> parent: ``b""`` when a command succeeded with nothing to report (the hot
  path: every info empty, observations in shared memory), otherwise a pickled
  :class:`Reply`.

Every command gets exactly one reply, in order, so the parent numbers both sides
(see :class:`vecpool.worker_group.WorkerHandle`) and never mistakes the reply to an
interrupted or timed-out command for the reply to a later one.
"""

from __future__ import annotations

import contextlib
import enum
import os
import pickle
import select
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from gymnasium.vector import AutoresetMode

from vecpool.errors import VecPoolError
from vecpool.shared_memory import Layout, SharedBlock

__all__ = [
    "STEP",
    "STEP_SOME",
    "Channel",
    "Command",
    "EnvState",
    "ErrorRecord",
    "GapTracker",
    "ObsTransport",
    "Reply",
    "RestartStart",
    "WorkerConfig",
    "encode",
    "encode_safely",
    "pack_error",
    "rebuild_exception",
    "spin_until_ready",
]


class ObsTransport(enum.Enum):
    """How observations travel from the workers to the parent."""

    NATIVE = "native"
    """vecpool's own shared block (Box/Discrete/... leaves, Dict and Tuple of them)."""
    GYM = "gym"
    """Gymnasium's shared memory (other spaces, or a custom ``worker=``)."""
    PIPE = "pipe"
    """Pickled through the pipes (``shared_memory=False``)."""


STEP = b"s"
"""Prefix of the step command (then the observation buffer index): actions are in
shared memory."""

STEP_SOME = b"p"
"""Prefix of a step command for some envs: followed by their local indices as
``uint16`` bytes; actions are in shared memory (``send``/``recv`` batches)."""


_JOIN_BELOW = 1 << 16
"""Messages up to this size are joined with their header and read in chunks; larger
ones are written and read in place (no copies of megabytes of infos)."""


class Channel:
    """Length-prefixed messages over a pipe's file descriptor, read in bulk.

    The framing is ``multiprocessing.Connection``'s (a 4-byte big-endian length,
    then the bytes), but each side reads whatever the pipe holds in one system call
    and keeps the rest: a step costs one ``write`` and one ``read`` per side instead
    of ``Connection``'s three calls and layers of Python. Because several messages
    can arrive in one read, callers check :meth:`has_message` before polling.
    """

    __slots__ = ("buffer", "fd")

    def __init__(self, fd: int) -> None:
        """Wrap the (blocking) descriptor ``fd``."""
        self.fd = fd
        self.buffer = b""

    def send(self, payload: bytes) -> None:
        """Write one message (all of it, however the pipe splits the write).

        A small message goes in one ``write`` with its header; a large one is
        written from the payload itself, not from a copy joined to the header.
        """
        header = len(payload).to_bytes(4, "big")
        parts = (
            (header + payload,) if len(payload) <= _JOIN_BELOW else (header, payload)
        )
        for part in parts:
            data = memoryview(part)
            while data:
                data = data[os.write(self.fd, data) :]

    def has_message(self) -> bool:
        """Whether a whole message is already buffered (no system call)."""
        buffer = self.buffer
        return len(buffer) >= 4 and len(buffer) - 4 >= int.from_bytes(buffer[:4], "big")

    def recv(self) -> bytes | memoryview:
        """Read one message, blocking until it is complete.

        A large message is read in chunks sized to what is still missing and joined
        once, so reading it takes linear time.

        Raises:
            EOFError: If the other end closed the pipe.
        """
        buffer = self.buffer
        while len(buffer) < 4:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError
            buffer += chunk
        end = 4 + int.from_bytes(buffer[:4], "big")
        if len(buffer) < end:
            if end <= _JOIN_BELOW:
                parts, have = [buffer], len(buffer)
                while have < end:
                    chunk = self._read(max(1 << 16, end - have))
                    parts.append(chunk)
                    have += len(chunk)
                buffer = b"".join(parts)
            else:  # large: read straight into one buffer of its size, no joins
                whole = bytearray(end)
                whole[: len(buffer)] = buffer
                view, have = memoryview(whole), len(buffer)
                while have < end:
                    count = os.readv(self.fd, [view[have:]])
                    if not count:
                        raise EOFError
                    have += count
                self.buffer = b""
                return view[4:]  # pickle and numpy read it in place
        self.buffer = buffer[end:]
        return buffer[4:end]

    def _read(self, size: int) -> bytes:
        chunk = os.read(self.fd, size)
        if not chunk:
            raise EOFError
        return chunk


class Command(enum.IntEnum):
    """Commands the parent sends as ``(Command, payload)``."""

    STEP = 1  # payload: (per-env actions or None, local indices or None, obs buffer)
    RESET = 2  # payload: (seeds, options, reset flags, obs buffer)
    CALL = 3  # payload: (name, args, kwargs)
    SET_ATTR = 4  # payload: (name, list of per-env values)
    CLOSE = 5  # payload: None
    GET_STATES = 6  # payload: local indices
    SET_STATES = 7  # payload: (local indices, states)
    STEP_FROM = 8  # payload: (local indices, states, actions, dt)


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


class EnvState(NamedTuple):
    """A sub-environment's state as ``AsyncVectorEnv.get_states`` captures it.

    Attributes:
        state: What the env's own ``get_state()`` returned.
        autoreset_pending: Whether, under ``NEXT_STEP`` autoreset, the env's next
            step would reset it (its episode had just ended). Restored by
            ``set_states`` so a save/restore round trip is exact.
    """

    state: Any
    autoreset_pending: bool


class Reply(NamedTuple):
    """What a worker sends back when there is more to say than "done".

    Attributes:
        infos: ``(env_index, info)`` for every non-empty info.
        observations: Every hosted env's observation, when observations go by pipe.
        results: Per-env results of ``call`` (or of the start-up space check).
        errors: Exceptions raised by sub-environments.
        step_values: ``(env_index, reward, terminated, truncated)``; only used by
            Gymnasium-protocol workers (custom ``worker=``), whose values come by
            pipe.
    """

    infos: list[tuple[int, dict[str, Any]]] | None = None
    observations: list[Any] | None = None
    results: list[Any] | None = None
    errors: list[ErrorRecord] | None = None
    step_values: list[tuple[int, Any, Any, Any]] | None = None


@dataclass
class WorkerConfig:
    """Everything a worker needs, handed over once at process start.

    Attributes:
        index: Worker index.
        start: Global index of the first hosted env.
        env_fns: A picklable callable returning the list of env constructors.
        block: The shared block (rewards, flags, and native actions/observations).
        layout: Where each array lives in ``block``.
        action_space: Single action space (to read actions from shared memory).
        observation_space: Single observation space (to write observations).
        obs_transport: How observations travel (see :class:`ObsTransport`).
        gym_obs_memory: Gymnasium shared-memory object with ``ObsTransport.GYM``.
        autoreset_mode: The autoreset mode.
        observation_mode: ``"same"``, ``"different"`` or a space tuple (space check).
        check_spaces: ``(single_observation_space, single_action_space)`` to check.
        semaphore: Optional semaphore limiting concurrent env execution.
        spin: Seconds to poll for the next command before blocking on the pipe.
        spin_yield: Whether to ``sched_yield`` between polls while spinning.
        spin_max_gap: If above 0, the worker spins only while the parent's gaps
            between a reply and the next command stay (on average) below this many
            seconds; a parent busy longer (a policy between steps) finds it blocked,
            so spinning never takes a core from the parent's own work.
        holding: With a semaphore, a shared byte array in which each worker marks
            that it holds the semaphore (so the parent can give back the permit of a
            worker that died holding it).
        restart: Set for a replacement worker (see :class:`RestartStart`).
    """

    index: int
    start: int
    env_fns: Callable[[], list[Callable[[], Any]]]
    block: SharedBlock
    layout: Layout
    action_space: Any
    observation_space: Any
    obs_transport: ObsTransport
    gym_obs_memory: Any
    autoreset_mode: AutoresetMode
    observation_mode: Any
    check_spaces: tuple[Any, Any]
    semaphore: Any = None
    spin: float = 0.0
    spin_yield: bool = False
    spin_max_gap: float = 0.0
    holding: Any = None
    restart: RestartStart | None = None


@dataclass
class RestartStart:
    """How a replacement worker's envs start (``on_worker_crash="restart"``).

    Every env starts marked "restarted": its first step returns the row that marks
    the cut (``truncated``, reward 0, ``infos["worker_restarted"]``), and its first
    reset reports ``worker_restarted`` in its info.

    Attributes:
        last_obs: The observation last returned for each hosted env (``None``: none).
        seeds: The seed of each env's first reset when the call gives none
            (``None``: unseeded).
    """

    last_obs: list[Any]
    seeds: list[int | None]


def pack_error(env_index: int, exc: BaseException) -> ErrorRecord:
    """Capture an exception (called inside its ``except`` block).

    Args:
        env_index: Global index of the env that raised.
        exc: The exception.

    Returns:
        A picklable record; the exception itself travels if it survives a round trip.
    """
    trace = traceback.format_exc()
    data: bytes | None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)  # checks the round trip (custom __init__ args can fail)
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


def encode(reply: Reply) -> bytes:
    """Pickle a reply (falling back to cloudpickle for locally defined objects).

    Args:
        reply: The reply.

    Returns:
        The bytes to send.
    """
    try:
        return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - e.g. a lambda in an info; try harder
        pass
    import cloudpickle  # outside the `except`: a failure here has no noisy context

    return bytes(cloudpickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def encode_safely(reply: Reply, start: int) -> bytes:
    """Encode a reply; turn whatever part cannot be pickled into per-env errors.

    An unpicklable info, observation (``shared_memory=False``) or call result then
    raises in the parent with its original type (as in Gymnasium), and the worker and
    its other envs live on.

    Args:
        reply: The reply.
        start: Global index of the worker's first env.

    Returns:
        The bytes to send.
    """
    try:
        return encode(reply)
    except Exception:  # noqa: BLE001 - find the culprits below
        pass
    errors = list(reply.errors or [])
    infos = []
    for index, info in reply.infos or []:
        try:
            encode(Reply(infos=[(index, info)]))
            infos.append((index, info))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.append(pack_error(index, exc))
    parts: dict[str, list[Any] | None] = {}
    for name in ("observations", "results"):
        values = getattr(reply, name)
        parts[name] = values
        for local, value in enumerate(values or []):
            try:
                encode(Reply(results=[value]))
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                errors.append(pack_error(start + local, exc))
                parts[name] = None
    return encode(
        Reply(
            infos=infos or None,
            observations=parts["observations"],
            results=parts["results"],
            errors=errors,
            step_values=reply.step_values,
        )
    )


def _sleep_zero() -> None:
    time.sleep(0)


def spin_until_ready(
    poller: select.poll, seconds: float, spin_yield: bool
) -> list[Any]:
    """Poll without blocking for up to ``seconds``; return the events seen (if any).

    Spinning skips the 50-150 microseconds it costs to wake a blocked process, which
    is most of a cheap env's step; ``sched_yield`` between polls hands the core to any
    other runnable process, so spinning never starves the processes doing the work.

    Args:
        poller: A ``select.poll`` object with the descriptors to watch.
        seconds: The spin budget.
        spin_yield: Whether to yield the CPU between polls.

    Returns:
        The events of the first non-empty poll, or ``[]`` when the budget ran out.
    """
    deadline = time.perf_counter() + seconds
    poll = poller.poll
    # macOS has no sched_yield: a zero sleep yields the CPU there
    sched_yield = getattr(os, "sched_yield", _sleep_zero) if spin_yield else None
    while True:
        events = poll(0)
        if events:
            return events
        if sched_yield is not None:
            sched_yield()
        if time.perf_counter() >= deadline:
            return []


class GapTracker:
    """How long the parent takes between a worker's reply and its next command.

    Smoothed; it tells the worker whether spinning for the next command can pay.

    Example:
        >>> tracker = GapTracker(max_gap=0.001)
        >>> tracker.spins()
        True
        >>> for _ in range(30):
        ...     tracker.replied(now=0.0)
        ...     tracker.commanded(now=0.01)  # the parent computes 10 ms each time
        >>> tracker.spins()
        False
        >>> for _ in range(31):  # blocked; the 32nd command is awaited spinning
        ...     blocked = tracker.spins()
        >>> tracker.replied(now=0.0)
        >>> tracker.commanded(now=0.0001)  # the parent is fast again
        >>> tracker.spins()
        True

    Args:
        max_gap: Spin while the smoothed gap stays below this (seconds).
    """

    __slots__ = ("_blocked", "_probing", "_replied", "average", "max_gap")

    PROBE_EVERY = 32
    """While blocking, spin once every this many commands to measure the true gap
    (a blocked worker's gaps include its own wake-up, so they alone could keep it
    blocked for good after the parent sped up)."""

    def __init__(self, max_gap: float) -> None:
        """Start with no gap seen (spinning)."""
        self.max_gap = max_gap
        self.average = 0.0
        self._replied: float | None = None
        self._blocked = 0
        self._probing = False

    def spins(self) -> bool:
        """Whether to spin before blocking for the next command."""
        if self.average < self.max_gap:
            return True
        self._blocked += 1
        if self._blocked >= self.PROBE_EVERY:
            self._blocked = 0
            self._probing = True  # this gap is measured without a wake-up in it
            return True
        return False

    def replied(self, now: float) -> None:
        """A reply went out at ``now`` (``time.perf_counter()``)."""
        self._replied = now

    def commanded(self, now: float) -> None:
        """The next command came in at ``now``: fold the gap into the average.

        A single long gap (an evaluation, a checkpoint) is clipped to four times
        ``max_gap``, so spinning resumes within a few dozen fast steps.
        """
        if self._replied is not None:
            gap = min(now - self._replied, 4.0 * self.max_gap)
            if self._probing:  # the true gap: it replaces the blocked estimates
                self.average = gap
            else:
                self.average += 0.125 * (gap - self.average)
            self._replied = None
        self._probing = False


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
