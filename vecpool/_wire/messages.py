"""What the parent and its workers say to each other: commands, replies, start-up.

Both sides import this module, and nothing here imports the rest of the package
beyond the wire layer (:mod:`vecpool._wire`), so a ``spawn``/``forkserver`` worker
stays light.

Protocol (one pipe per worker, length-prefixed messages, see
:class:`vecpool._wire.channel.Channel`):

* parent -> worker: ``b"s"`` + one byte, the index of the observation buffer to
  write (step every hosted env; actions are in shared memory), sometimes followed
  by the acceptance of a wide-info area (vecpool/_wire/wide_infos.py);
  ``b"p"`` + ``uint16`` local indices (step those envs: ``send``/``recv``
  batches); or a pickled ``(Command, payload)`` tuple for everything else.
* worker -> parent: ``b""`` when a command succeeded with nothing to report (the hot
  path: every info empty, observations in shared memory), otherwise a pickled
  :class:`Reply`.

Every command gets exactly one reply, in order, so the parent numbers both sides
(see :class:`vecpool._engine.numbering.ReplyNumbers`) and never mistakes the reply
to an interrupted or timed-out command for the reply to a later one.
"""

from __future__ import annotations

import enum
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import cloudpickle
from gymnasium.vector import AutoresetMode

from vecpool._wire.remote_errors import ErrorRecord, pack_error
from vecpool._wire.shared_memory import Layout, SharedBlock
from vecpool._wire.wide_infos import WideOffer

__all__ = [
    "COLUMNS_ONLY",
    "CUT_AGAIN",
    "INFOS_IN_MEMORY",
    "STEP",
    "STEP_SOME",
    "WAKE",
    "Command",
    "EnvState",
    "ObsTransport",
    "Reply",
    "RestartStart",
    "WorkerConfig",
    "encode",
    "encode_safely",
]


class ObsTransport(enum.Enum):
    """How observations travel from the workers to the parent."""

    NATIVE = "native"
    """vecpool's own shared block (Box/Discrete/... leaves, Dict and Tuple of them)."""
    HYBRID = "hybrid"
    """A Dict/Tuple's array leaves in vecpool's shared block, its other leaves
    (Text, Graph, Sequence, OneOf, custom) pickled in the reply: one list of them
    per env of the worker, in ``Reply.observations``."""
    PIPE = "pipe"
    """Pickled through the pipes (``shared_memory=False``)."""


STEP = b"s"
"""Prefix of the step command (then the observation buffer index): actions are in
shared memory."""

STEP_SOME = b"p"
"""Prefix of a step command for some envs: followed by their local indices as
``uint16`` bytes; actions are in shared memory (``send``/``recv`` batches)."""


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


class EnvState(NamedTuple):
    """A sub-environment's state as ``AsyncVectorEnv.get_states`` captures it.

    Attributes:
        state: What the env's own ``get_state()`` returned.
        autoreset_pending: Whether, under ``NEXT_STEP`` autoreset, the env's next
            step would reset it (its episode had just ended). Restored by
            ``set_states`` so a save/restore round trip is exact.
        elapsed_steps: The step count of each Gymnasium ``TimeLimit`` wrapper
            around the env (outermost first; ``gym.make`` adds one for an env
            registered with ``max_episode_steps``): they count outside
            ``env.unwrapped``, whose ``get_state()`` does not see them, and are
            restored with the state, so the episode truncates at the same step.
    """

    state: Any
    autoreset_pending: bool
    elapsed_steps: tuple[int | None, ...] = ()


class Reply(NamedTuple):
    """What a worker sends back when there is more to say than "done".

    Attributes:
        infos: ``(env_index, info)`` for every non-empty info.
        observations: Every hosted env's observation, when observations go by pipe
            (``ObsTransport.HYBRID``: the list of its leaves that are not arrays).
        results: Per-env results of ``call`` (or of the start-up space check).
        errors: Exceptions raised by sub-environments.
        columns: Whether some of the step's infos are in shared memory (see
            vecpool/_wire/info_columns.py).
        wide_offer: A memory area for infos too large for a row, offered by the
            worker (vecpool/_wire/wide_infos.py).
    """

    infos: list[tuple[int, dict[str, Any]]] | None = None
    observations: list[Any] | None = None
    results: list[Any] | None = None
    errors: list[ErrorRecord] | None = None
    columns: bool = False
    wide_offer: WideOffer | None = None


CUT_AGAIN = b"r"
"""Ends a step or reset command's tail: a replacement worker marks its envs' cut
again, because the call that restarted it gave up before returning those rows
(``Host.cut_again``)."""

INFOS_IN_MEMORY = b"c"
"""The one-byte reply to a step with nothing else to say but that some infos are in
shared memory (a pickled reply starts with ``0x80``)."""

COLUMNS_ONLY = Reply(columns=True)
"""What :data:`INFOS_IN_MEMORY` stands for."""

WAKE = b"!"
"""Worker -> parent, never a reply (not numbered): the parent blocked on the pipe
while the worker answered a rung command on its bell alone (vecpool/_wire/bell.py)."""


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
        autoreset_mode: The autoreset mode.
        observation_mode: ``"same"``, ``"different"`` or a space tuple (space check).
        spin: Seconds to poll for the next command before blocking on the pipe.
        spin_yield: Whether to ``sched_yield`` between polls while spinning.
        spin_hint: Whether to read the byte ``layout.spin_hint`` of ``block``,
            which the parent writes with each step command (``SpinPolicy.hint``
            in vecpool/_engine/spinning.py): the worker then spins for its next
            command only while it is 1. A parent busy between steps (a policy)
            sets it to 0 and finds the worker blocked, so spinning never takes a
            core from the parent's own work.
        bell: Whether plain steps come on the worker's doorbell (its spinning
            wait watches it: vecpool/_wire/bell.py); not with restarts, whose
            replacements take everything by pipe.
        permits: The ``max_concurrency`` permits (vecpool/_wire/permits.py), or
            ``None`` when there is no limit to keep.
        restart: Set for a replacement worker (see :class:`RestartStart`).
        parent_pid: The process that owns the vector env (under ``forkserver`` the
            worker's parent is the fork server, not it); 0: the worker's parent.
        parent_start: Its start time, read by the parent itself (a worker that
            read it after the owner died could watch a process that reused the pid).
    """

    index: int
    start: int
    env_fns: Callable[[], list[Callable[[], Any]]]
    block: SharedBlock
    layout: Layout
    action_space: Any
    observation_space: Any
    obs_transport: ObsTransport
    autoreset_mode: AutoresetMode
    observation_mode: Any
    spin: float = 0.0
    spin_yield: bool = False
    spin_hint: bool = False
    bell: bool = False
    permits: Any = None
    restart: RestartStart | None = None
    parent_pid: int = 0
    parent_start: bytes | None = None


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


def encode(reply: Any) -> bytes:
    """Pickle a reply or a command (falling back to cloudpickle for local objects).

    Args:
        reply: The reply, or a ``(Command, payload)`` tuple.

    Returns:
        The bytes to send.
    """
    try:
        return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - e.g. a lambda in an info; try harder
        pass  # (cloudpickle outside the `except`: its failure has no noisy context)
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
            columns=reply.columns,
            wide_offer=reply.wide_offer,
        )
    )
