"""Worker restart: the policy, the seeds of new incarnations, the last observations.

With ``AsyncVectorEnv(..., on_worker_crash="restart")``, a worker found dead in a
wait is replaced by a fresh process hosting the same envs (see
:meth:`Restarter.replace`, which the group's wait loop calls through its
:class:`~vecpool._engine.group.Restarting` hook). This module holds what the
parent keeps for that:

* :class:`RestartPolicy`: whether a crash may be answered by a restart
  (``max_restarts`` per worker), the restart counts, and the seeds the replaced envs
  start from: derived from (the seed last given to the env, the incarnation), so a
  run with the same crashes is reproducible, and a new incarnation never repeats
  the old one's episodes.
* :class:`LastObservations`: a copy of the observation last returned for each env,
  which a replacement hands back (NEXT_STEP, DISABLED) or reports as ``final_obs``
  (SAME_STEP) in the row that marks the cut. It costs one copy of the observation
  batch per call, paid only in restart mode.

The rows themselves are made by the replacement worker (:mod:`vecpool._worker.host`):
its envs start marked "restarted", and the first step of each returns the row the
contract describes (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import multiprocessing
import os
import signal
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import Space
from gymnasium.vector.utils import batch_space, iterate

from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.group import WorkerGroup
from vecpool._engine.guards import HELD
from vecpool._engine.handle import WorkerHandle
from vecpool._engine.lifecycle import release
from vecpool._engine.numbering import PinnedNumbers
from vecpool._engine.startup import Starter
from vecpool._util.seeding import derive_seed
from vecpool._util.spaces import flatten_batch, is_native, leaves, make_reader
from vecpool._wire.messages import STEP_SOME, Reply, RestartStart
from vecpool.errors import VecPoolWarning, WorkerCrashedError

__all__ = [
    "CRASH_POLICIES",
    "LastObservations",
    "RestartPolicy",
    "Restarter",
]

CRASH_POLICIES = ("raise", "restart")
RESENT = ("step", "reset", "recv", "send")
"""Calls whose command a replacement runs again (its envs answer with the rows
that mark the cut); any other call raises :class:`WorkerCrashedError` after the
restart, its results lost."""
NEVER_RESTARTED = ("__init__", "close")
"""A crash in these calls raises: construction and closing."""
STARTUP_DEATHS = 10
"""Replacements of one worker in a row that may die before they start (killed
by the same OOM killer, say) before the crash raises."""


class RestartPolicy:
    """Whether crashed workers are restarted, how often, and with which seeds.

    Attributes:
        max_restarts: Restarts allowed per worker; ``None``: unlimited.
        restarts: Restarts so far, per worker.
        seeds: The last seed given to each env (``None``: never seeded).
    """

    def __init__(
        self, num_workers: int, num_envs: int, max_restarts: int | None
    ) -> None:
        """Counts at zero, no seed known."""
        self.max_restarts = max_restarts
        self.restarts = [0] * num_workers
        self.seeds: list[int | None] = [None] * num_envs

    def allows(self, worker: int) -> bool:
        """Whether ``worker`` may be restarted once more."""
        return self.max_restarts is None or self.restarts[worker] < self.max_restarts

    def note_seeds(self, seeds: Sequence[Any]) -> None:
        """Remember the seeds a reset gave (``None`` keeps the earlier seed)."""
        for index, seed in enumerate(seeds):
            if isinstance(seed, (int, np.integer)) and seed >= 0:
                self.seeds[index] = int(seed)  # a bad seed fails in the env's reset

    def start_seeds(self, worker: int, env_indices: range) -> list[int | None]:
        """The first-reset seeds of the envs of ``worker``'s latest incarnation."""
        incarnation = self.restarts[worker]
        return [
            None if self.seeds[i] is None else derive_seed(self.seeds[i], incarnation)  # type: ignore[arg-type]
            for i in env_indices
        ]


class LastObservations:
    """A copy of the observation last returned for each env.

    Native spaces (Box, Discrete, ... and Dict/Tuple of them) are copied into
    preallocated leaf arrays; other spaces are kept per env, deep-copied.
    """

    def __init__(
        self, space: Space[Any], batched_space: Space[Any], num_envs: int
    ) -> None:
        """Preallocate the copy (every env: no observation yet)."""
        self.space = space
        self.batched_space = batched_space
        self.num_envs = num_envs
        self.seen = np.zeros(num_envs, np.bool_)
        self.native = is_native(space)
        self.arrays: list[npt.NDArray[Any]] = (
            [np.zeros((num_envs, *shape), dtype) for dtype, shape in leaves(space)]
            if self.native
            else []
        )
        self.items: list[Any] = [None] * num_envs

    def record(self, batch: Any, ids: npt.NDArray[np.int64] | None = None) -> None:
        """Keep a copy of a batch: every env's, or ``recv``'s rows of ``ids``.

        Args:
            batch: The observations returned.
            ids: Row ``k`` is env ``ids[k]`` (a ``recv`` batch); ``None``: every
                env, in order (a reset's or a step's).
        """
        count = self.num_envs if ids is None else ids.size
        if not count:
            return
        rows = slice(None) if ids is None else ids
        if self.native:
            for array, leaf in zip(
                self.arrays,
                flatten_batch(self.space, batch, count, "obs"),
                strict=True,
            ):
                array[rows] = leaf
        else:
            batched = (
                self.batched_space if ids is None else batch_space(self.space, count)
            )
            indices = range(count) if ids is None else ids.tolist()
            for index, item in zip(indices, iterate(batched, batch), strict=True):
                self.items[index] = copy.deepcopy(item)
        self.seen[rows] = True

    def rows(self, env_indices: range) -> list[Any]:
        """The kept observation of each env (``None`` where none was returned)."""
        if self.native:
            read = make_reader(self.space, self.arrays)
            return [read(i) if self.seen[i] else None for i in env_indices]
        return [self.items[i] if self.seen[i] else None for i in env_indices]


@dataclasses.dataclass(frozen=True)
class Starting:
    """A replacement whose start-up reply its call did not wait for (a timeout).

    Attributes:
        handle: The replacement's handle (its start-up reply number pinned).
        old: The dead worker's handle.
        what: The call that found it dead.
        exitcode: The dead worker's exit code.
    """

    handle: WorkerHandle
    old: WorkerHandle
    what: str
    exitcode: int | None


class Restarter:
    """Replaces dead workers of one :class:`~vecpool._engine.group.WorkerGroup`.

    Attributes:
        policy: The restart policy.
        last_obs: The observations last returned (what a replacement starts from).
        owner: The vector env's class name, for messages.
    """

    def __init__(
        self, policy: RestartPolicy, last_obs: LastObservations, owner: str
    ) -> None:
        """Restart with ``policy``, starting envs from ``last_obs``."""
        self.policy = policy
        self.last_obs = last_obs
        self.owner = owner
        self.startup_deaths = [0] * len(policy.restarts)
        self.closing = False
        self.starter: Starter | None = None  # set when the workers are started
        # replacements whose rows that mark the cut have not been returned by a
        # step or reset: their next step or reset marks the cut again (CUT_AGAIN),
        # for the call that read them may have given up (a timeout, a Ctrl-C, an
        # env error)
        self.unseen_cuts: list[WorkerHandle] = []

    def returned(self, observations: Any) -> None:
        """A step or reset returned its rows: the cuts are seen; keep the obs.

        Args:
            observations: The observations the call returns (a replacement
                starts its envs from them).
        """
        for handle in self.unseen_cuts:
            handle.mark_cut(again=False)
        self.unseen_cuts.clear()
        self.last_obs.record(observations)

    def _mark_unseen(self, handle: WorkerHandle) -> None:
        if not any(handle is h for h in self.unseen_cuts):
            self.unseen_cuts.append(handle)
            handle.mark_cut(again=True)

    def allows(self, handle: WorkerHandle, what: str) -> bool:
        """Whether a crash of ``handle``'s worker in ``what`` may be restarted."""
        if self.closing:  # close() ends the workers: never start new ones
            return False
        if what == "restart":  # a replacement died before it started
            return (
                self.policy.allows(handle.index)
                and self.startup_deaths[handle.index] < STARTUP_DEATHS
            )
        return what not in NEVER_RESTARTED and self.policy.allows(handle.index)

    def replace(
        self, group: WorkerGroup, old: WorkerHandle, what: str, *, reissue: bool
    ) -> WorkerHandle:
        """Start a replacement for ``old``'s dead worker and re-send its work.

        The replacement hosts the same envs, built from the same constructors, each
        starting from the observation last returned for it and marked "restarted" (see
        :class:`vecpool._wire.messages.RestartStart`). With ``reissue``, the commands
        ``old`` still owed replies to are sent again: a step, a reset or ``send``
        batches (their envs then answer with the rows that mark the cut); for any other
        call, ``group.lost`` holds the error to raise once the call's other workers have
        answered.

        Args:
            group: The group ``old`` belongs to.
            old: The handle of the dead worker.
            what: The call that found it dead.
            reissue: Whether commands were in flight (``False``: found at a send,
                whose caller sends its command to the replacement).

        Returns:
            The replacement's handle, in ``old``'s place in ``group.handles``.

        Raises:
            Exception: What an env constructor raised in the replacement (the
                vector env is then unusable).
            WorkerCrashedError: If the replacement died before it started.
        """
        index, envs = old.index, old.env_indices
        with contextlib.suppress(EOFError, OSError), HELD:
            while old.poll():  # its last words: replies written before it died
                old.receive()
        exitcode = _bury(old)
        self.give_back_permit(old)
        self.policy.restarts[index] += 1
        if what == "restart":
            self.startup_deaths[index] += 1
        start = RestartStart(
            last_obs=self.last_obs.rows(envs),
            seeds=self.policy.start_seeds(index, envs),
        )
        assert self.starter is not None  # set once the workers started
        try:
            with HELD:  # a Ctrl-C meanwhile is raised once it is in place
                # numbers go on from the old pipe's: answers already read keep theirs
                new = self.starter.spawn(group, index, envs, start, old.numbers.sent)
                startup = new.numbers.sent  # the number of its start-up reply
                group.put(new)
            # within the deadline of the call that found the crash
            group.wait("restart", None, [new], deadline=group.waiting[2])
        except (multiprocessing.TimeoutError, KeyboardInterrupt):
            # the call gives up (a timeout, a Ctrl-C); later waits read the
            # start-up reply first. The replacement now starting (this one, or
            # one a nested restart started when this one died) takes over `old`'s
            # work at once: the `send` batches still owed, queued in its pipe (a
            # later `recv` collects them). A step or reset whose call gave up is
            # not sent again: its cut rows answer the next call.
            current = group.handles[index]
            if current is old:  # a second Ctrl-C stopped the start: none runs
                group.watch_all_again()  # it is found dead (and replaced) again
                raise
            nested = next((r for r in group.starting if r.handle is current), None)
            with HELD:
                if current is new:
                    new.numbers = PinnedNumbers(new.numbers, startup)
                    group.starting.append(Starting(new, old, what, exitcode))
                elif nested is not None:  # it reports this call's crash
                    position = group.starting.index(nested)
                    group.starting[position] = Starting(current, old, what, exitcode)
                else:
                    raise
                self._hand_over(
                    group,
                    old,
                    current,
                    what,
                    resend=reissue and bool(old.numbers.batches) and what in RESENT,
                )
            raise
        new = group.handles[index]  # a replacement of the replacement, maybe
        self.finish_start(group, Starting(new, old, what, exitcode), new.answer())
        with HELD:
            self._hand_over(
                group, old, new, what, resend=reissue and bool(old.numbers.waiting)
            )
        return new

    def _hand_over(
        self,
        group: WorkerGroup,
        old: WorkerHandle,
        new: WorkerHandle,
        what: str,
        *,
        resend: bool,
    ) -> None:
        """``new`` takes over ``old``'s replies, wide rows and (``resend``) work.

        Its first rows of a step or reset mark the cut: shown again if the call
        that reads them gives up. Rows answered before the crash and not yet
        returned by ``recv`` may be wide: they stay readable in the old area
        (mapped here) until the replacement's own area is accepted.
        """
        if what in ("step", "reset"):
            self._mark_unseen(new)
        new.numbers.take_over(old.numbers)
        new.info_wide = old.info_wide
        if resend:
            self._reissue(group, old, new, what)

    def finish_start(
        self,
        group: WorkerGroup,
        record: Starting,
        first: Reply | None,
        *,
        deferred: bool = False,
    ) -> None:
        """The replacement answered its start-up check with ``first``.

        ``deferred``: a later call read it (the call that restarted it timed out).

        Raises:
            Exception: What an env constructor raised in the replacement (the
                vector env is then unusable).
        """
        old, what, index = record.old, record.what, record.old.index
        self.startup_deaths[index] = 0
        if first is not None and first.errors:
            group.broken = WorkerCrashedError(
                f"{old.died(what)}, and its replacement could not start: an env "
                "constructor raised (above). Call `close()` and create a new vector "
                "env.",
                index,
                tuple(old.env_indices),
                record.exitcode,
            )
            raise_env_errors([first], self.owner)
        self._warn(old, what)
        if deferred:
            # its first rows may answer the call now waiting, which may give up
            self._mark_unseen(record.handle)

    def give_back_permit(self, dead: WorkerHandle) -> None:
        """Release the ``max_concurrency`` permit a dead worker died holding."""
        if self.starter is None:
            return
        permits = self.starter.permits
        if permits is not None and dead.process.exitcode is not None:
            # (a worker whose pipe broke, yet lives, may still release it itself)
            permits.give_back(dead.index)

    def lose_result(self, group: WorkerGroup, old: WorkerHandle, what: str) -> None:
        """Note in ``group.lost`` the error a call that cannot be re-sent raises.

        The group raises it once the call's other workers have answered (the
        first such error of the call, if several workers were restarted).
        """
        if what not in RESENT and group.lost is None:
            group.lost = WorkerCrashedError(
                f"{old.died(what)}; it was restarted, but the result of `{what}` "
                "is lost: call it again.",
                old.index,
                tuple(old.env_indices),
                old.process.exitcode,
            )

    def _reissue(
        self, group: WorkerGroup, old: WorkerHandle, new: WorkerHandle, what: str
    ) -> None:
        if what == "restart":
            return  # it only owed its start-up check; the replacement sends its own
        if what not in RESENT:
            self.lose_result(group, old, what)
            return
        if old.numbers.batches:  # `send` batches: each one still owed, in order
            start = old.env_indices.start
            for _, ids in old.numbers.owed_batches():
                local = np.asarray([i - start for i in ids], np.uint16).tobytes()
                new.numbers.expect_batch(
                    self._resend(group, new, STEP_SOME + local), ids
                )
            return
        new.expect(self._resend(group, new, old.last_sent))  # the same bytes again

    @staticmethod
    def _resend(group: WorkerGroup, new: WorkerHandle, data: bytes) -> int:
        """Write ``data`` to ``new``; if it died already, as if written.

        A replacement dead before this write is noted dead with the command
        owed, so its own replacement is sent the command again.
        """
        try:
            return new.write(data)
        except OSError:
            new.last_sent = data
            if new not in group.dead:
                group.dead.append(new)
            return new.numbers.sent_one()

    def _warn(self, old: WorkerHandle, what: str) -> None:
        count = self.policy.restarts[old.index]
        limit = self.policy.max_restarts
        of = "" if limit is None else f" of {limit}"
        warnings.warn(
            f"{old.died(what)}; restarted it (restart {count}{of}). Its envs start "
            "over: their rows of this call are marked "
            "`infos['worker_restarted']`.",
            VecPoolWarning,
            stacklevel=2,
        )


def _bury(handle: WorkerHandle) -> int | None:
    """Reap a dead worker, kill what its envs forked, close its pipe."""
    process = handle.process
    process.join(1.0)
    if process.exitcode is None:  # its pipe broke, yet it lives: end it
        process.kill()
        process.join(1.0)
    with contextlib.suppress(OSError, TypeError):
        os.killpg(process.pid, signal.SIGKILL)  # type: ignore[arg-type]
    with contextlib.suppress(OSError):
        handle.conn.close()
    release(process)  # its sentinel's pipe
    return process.exitcode
