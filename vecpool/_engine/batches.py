"""EnvPool-style asynchronous batches: the bookkeeping of ``send`` and ``recv``.

``send(actions, env_ids)`` steps some envs without waiting; ``recv()`` returns the first
``batch_size`` envs to finish. Each worker that hosts some of the ids gets commands of
``batch_size // workers`` envs (so a batch gathers envs of every worker);
each reply number (see :class:`vecpool._engine.numbering.ReplyNumbers`) maps back to the
ids it stepped, so replies are matched to batches exactly, even after a timeout or a
Ctrl-C.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt

from vecpool._engine.buffers import StepBuffers
from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.group import WorkerGroup
from vecpool._engine.guards import HELD
from vecpool._engine.handle import WorkerHandle
from vecpool._engine.restart import LastObservations
from vecpool.errors import AlreadyPendingCallError, NoAsyncCallError, VecPoolWarning

__all__ = ["Batches"]


class Batches:
    """Which envs are in flight, which finished, and their infos.

    Attributes:
        batch_size: How many envs :meth:`recv` returns at most.
        in_flight: ``bool[num_envs]``: sent and not yet answered.
        ready: Envs answered and not yet returned, in finishing order.
        ready_infos: Their infos.
        returning: The batch :meth:`recv` is returning (its envs, rows and
            infos), kept until it is returned: a ``recv`` that a Ctrl-C cut short
            returns it the next time (its envs count as pending meanwhile).
    """

    def __init__(
        self,
        num_envs: int,
        batch_size: int,
        group: WorkerGroup,
        buffers: StepBuffers,
        owner: str,
        last_obs: LastObservations | None = None,
    ) -> None:
        """Bookkeeping for ``num_envs`` envs over ``group``.

        ``last_obs``: in restart mode, the observations a replacement starts from.
        """
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.group = group
        self.buffers = buffers
        self.owner = owner
        self.last_obs = last_obs
        self.in_flight = np.zeros(num_envs, dtype=np.bool_)
        self.warned_env_id = False  # an env's own `env_id` info key, replaced
        self.flying = 0  # in_flight.sum(), kept as an int (the loops test it)
        self.ready: deque[int] = deque()
        self.ready_infos: dict[int, dict[str, Any]] = {}
        self.returning: tuple[list[int], Any, dict[str, Any]] | None = None

    @property
    def pending(self) -> list[int]:
        """Envs sent and not yet returned by :meth:`recv`, sorted."""
        return sorted({*np.flatnonzero(self.in_flight).tolist(), *self._waiting()})

    def _waiting(self) -> list[int]:
        """Envs answered and not yet returned (the batch being returned too)."""
        returning = self.returning
        return [*self.ready, *returning[0]] if returning is not None else [*self.ready]

    def assert_none_pending(self, method: str) -> None:
        """Refuse ``method`` while envs are in flight or waiting to be returned.

        Raises:
            AlreadyPendingCallError: Naming the envs.
        """
        if self.flying or self.ready or self.returning is not None:
            msg = (
                f"Calling `{method}` while envs {self.pending} are in flight from "
                "`send` or waiting to be returned: `recv` them first."
            )
            raise AlreadyPendingCallError(msg, "recv")

    def _consecutive(self, env_ids: Any) -> tuple[npt.NDArray[np.int64], int] | None:
        """``env_ids`` and its first id, if it is a free run ``first, first + 1, ...``.

        The common case (a loop sending back the ``env_id`` that :meth:`recv`
        returned, or ``np.arange``) checked with a few reads instead of the full
        walk of :meth:`check_env_ids`; ``None`` sends it there.
        """
        if (
            type(env_ids) is not np.ndarray
            or env_ids.ndim != 1
            or env_ids.dtype != np.int64
            or not env_ids.size
        ):
            return None
        listed = env_ids.tolist()
        first, last = listed[0], listed[-1]
        if (
            first < 0
            or last >= self.num_envs
            or last - first + 1 != len(listed)
            or listed != list(range(first, last + 1))
            or (self.flying and self.in_flight[first : last + 1].any())
            or (self.ready and not set(self.ready).isdisjoint(listed))
            or self.returning is not None
        ):
            return None
        return env_ids, first

    def check_env_ids(self, env_ids: Any) -> npt.NDArray[np.int64]:
        """Validate ``env_ids`` for :meth:`send`.

        Raises:
            ValueError: If an id is not an int in range, repeats, or is pending.
        """
        ids = (
            np.arange(self.num_envs, dtype=np.int64)
            if env_ids is None
            else np.asarray(env_ids)
        )
        if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu":
            msg = f"`env_ids` must be a non-empty 1-D array of ints, got {env_ids!r}."
            raise ValueError(msg)
        listed = ids.tolist()  # before the cast: a uint64 above 2**63 would wrap
        if min(listed) < 0 or max(listed) >= self.num_envs:
            msg = f"`env_ids` must lie in [0, {self.num_envs}), got {listed}."
            raise ValueError(msg)
        ids = ids.astype(np.int64, copy=False)
        if len(set(listed)) != ids.size:
            msg = f"`env_ids` must not repeat an id, got {ids.tolist()}."
            raise ValueError(msg)
        if self.flying and self.in_flight[ids].any():
            busy = ids[self.in_flight[ids]]
            msg = (
                f"envs {busy.tolist()} are still in flight: `recv` them before "
                "sending them again."
            )
            raise ValueError(msg)
        waiting = sorted(set(listed) & set(self._waiting()))
        if waiting:
            msg = (
                f"envs {waiting} have finished but `recv` has not returned them yet: "
                "`recv` them before sending them again."
            )
            raise ValueError(msg)
        return ids

    @property
    def chunk(self) -> int:
        """Envs per command: ``batch_size // workers`` (at least 1).

        A batch is then gathered from every worker, whose envs step in parallel,
        instead of being one worker's envs stepping one after another: while the
        policy runs on one batch, the next one steps on every core (the overlap
        of an alternating sampler).
        """
        workers = len(self.group.handles)
        return max(1, self.batch_size // workers) if workers else self.batch_size

    def send(self, actions: Any, env_ids: Any) -> None:
        """Step ``env_ids`` with ``actions``: commands of :attr:`chunk` envs.

        Raises:
            ValueError: On bad ids or actions (nothing is sent then).
            WorkerCrashedError: If a worker's pipe is broken.
            VecPoolPerformanceWarning: Where warnings are errors, the measured
                advice on ``policy_threads`` (once per process); nothing is sent.
        """
        spin = self.group.spin
        if spin.advice is not None:  # said before anything is sent
            spin.advise()
        spin.before_send()
        run = self._consecutive(env_ids)  # the common case, checked in a few reads
        ids = run[0] if run is not None else self.check_env_ids(env_ids)
        with HELD:
            per_env = self.buffers.actions.place(
                actions, ids, shared=not self.group.any_abandoned()
            )
            listed = ids.tolist()
            order = sorted(range(len(listed)), key=listed.__getitem__)
            worker_of = self.group.handle_of
            chunk = self.chunk
            # the sorted ids, cut where the worker changes and every `chunk` envs
            lo = 0
            while lo < len(order):
                worker = worker_of[listed[order[lo]]]
                hi = lo + 1
                while (
                    hi < len(order)
                    and hi - lo < chunk
                    and worker_of[listed[order[hi]]] == worker
                ):
                    hi += 1
                self._command(
                    worker,
                    [listed[i] for i in order[lo:hi]],
                    None if per_env is None else [per_env[i] for i in order[lo:hi]],
                )
                lo = hi

    def _command(
        self, worker: int, chosen: list[int], actions: list[Any] | None
    ) -> None:
        """Send one step command for ``chosen`` (ascending ids of one worker).

        Callers hold Ctrl-C back (``with HELD``) around their commands.
        """
        handle = self.group.handles[worker]
        start = handle.env_indices.start
        local = [index - start for index in chosen]
        handle.numbers.start_batch()  # drops the last plain call's answers
        handle, number = self.group.send_to(
            handle, "send", lambda new: new.send_step_some(local, actions)
        )
        handle.numbers.expect_batch(number, chosen)
        self.in_flight[chosen] = True
        self.flying += len(chosen)

    def recv(
        self, timeout: float | None
    ) -> tuple[
        Any,
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        """Wait for and return the first ``batch_size`` envs to finish.

        Raises:
            NoAsyncCallError: If nothing is in flight or ready.
            multiprocessing.TimeoutError: If the timeout expired (envs stay in
                flight).
            WorkerCrashedError: If a worker died.
        """
        returning = self.returning
        if returning is None:  # else: a recv cut short by a Ctrl-C, returned now
            returning = self._choose(timeout)
        listed, rows, infos = returning
        with HELD:  # its envs leave `ready` (idempotent: they lead it, in order)
            ready, ready_infos = self.ready, self.ready_infos
            for index in listed:
                if ready and ready[0] == index:
                    ready.popleft()
            if ready_infos:
                for index in listed:
                    ready_infos.pop(index, None)
        buffers = self.buffers
        result = (
            buffers.obs.take(rows),
            buffers.rewards[rows].copy(),
            buffers.terminations[rows].copy(),
            buffers.truncations[rows].copy(),
            infos,
        )
        self.returning = None  # a plain store: no Ctrl-C between it and the return
        return result

    def _choose(self, timeout: float | None) -> tuple[list[int], Any, dict[str, Any]]:
        """Wait for the batch :meth:`recv` returns; keep it as :attr:`returning`.

        Nothing leaves :attr:`ready` here: a Ctrl-C anywhere before the batch is
        kept leaves it to be chosen again.

        Raises:
            NoAsyncCallError: If nothing is in flight or ready.
            multiprocessing.TimeoutError: If the timeout expired.
        """
        if not self.ready and not self.flying:
            msg = "Calling `recv` without any env in flight; call `send` first."
            raise NoAsyncCallError(msg, "recv")
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self.ready) < self.batch_size and self.flying:
            busy = self._busy()
            self._wait(timeout, busy, deadline)
        count = min(self.batch_size, len(self.ready))
        ready = self.ready
        listed = [ready[position] for position in range(count)]
        ids = np.array(listed, np.int64)
        ready_infos = self.ready_infos
        pickled = (
            [
                (row, ready_infos[index])
                for row, index in enumerate(listed)
                if index in ready_infos
            ]
            if ready_infos
            else []
        )
        infos = self.buffers.infos.merge(self.group.handles, pickled, listed)
        if "env_id" in infos:  # the envs' own key: `recv` reserves it
            infos.pop("_env_id", None)
            if not self.warned_env_id:
                self.warned_env_id = True
                warnings.warn(
                    "An env's info has the key 'env_id', which `recv` reserves for "
                    "the ids of the rows it returns (as EnvPool does): the env's "
                    "values are replaced. Rename that key in the env's info.",
                    VecPoolWarning,
                    stacklevel=5,  # _choose, recv, AsyncVectorEnv.recv, its guard
                )
        infos["env_id"] = ids
        first = listed[0] if listed else 0
        rows: slice | npt.NDArray[np.int64]
        if (
            count
            and listed[-1] - first + 1 == count
            and listed == list(range(first, first + count))
        ):  # a run of envs (one worker's batch): slices, copied
            rows = slice(first, first + count)
        else:
            rows = ids
        self.returning = (listed, rows, infos)
        return self.returning

    def _wait(
        self, timeout: float | None, busy: list[WorkerHandle], deadline: float | None
    ) -> None:
        """Wait for an answer of ``busy`` and absorb what came.

        A batch whose reply could not be decoded raised its error here: its envs
        leave flight (their rows are lost, as an env error's), so no later call
        waits for them.
        """
        try:
            self.group.wait("recv", timeout, busy, any_answer=True, deadline=deadline)
        except BaseException:
            with HELD:
                for handle in [*busy, *self.group.handles]:  # (one may be replaced)
                    while handle.numbers.lost_batches:
                        lost = handle.numbers.lost_batches.pop()
                        self.in_flight[lost] = False
                        self.flying -= len(lost)
            raise
        self._absorb(busy)

    def _busy(self) -> list[WorkerHandle]:
        """Workers with batches in flight, or answered and not yet absorbed."""
        return [handle for handle in self.group.handles if handle.numbers.has_batches]

    def _absorb(self, handles: list[WorkerHandle]) -> None:
        """Move answered batches to :attr:`ready`; raise the first env error."""
        for handle in handles:
            while handle.numbers.answers:
                with HELD:
                    # answers to a plain call made before the batch are dropped
                    popped = handle.numbers.pop_batch()
                    if popped is None:
                        continue
                    done, reply = popped
                    self.in_flight[done] = False
                    self.flying -= len(done)
                    failed: set[int] = set()
                    if reply is not None:
                        failed = {error.env_index for error in reply.errors or []}
                        self.buffers.apply_reply(
                            handle.env_indices.start, reply, only=done
                        )
                        for index, info in reply.infos or []:
                            if index not in failed:
                                self.ready_infos[index] = info
                    # the envs that stepped fine still come back from a later `recv`
                    self.ready.extend(index for index in done if index not in failed)
                    if self.last_obs is not None:
                        self._restart_rows(done, self.last_obs)
                if failed:
                    raise_env_errors([reply], self.owner)

    def _restart_rows(self, done: list[int], last_obs: LastObservations) -> None:
        """Restart mode: cut rows show the newest obs; keep a copy of the batch's.

        A replacement starts from the observations kept when it started; a row
        absorbed but not yet returned then may be newer, so a cut row takes the
        parent's copy (its obs, or its ``final_obs`` in SAME_STEP). Then the
        batch's observations are kept: what the next replacement starts from.
        """
        for index in done:
            info = self.ready_infos.get(index)
            if info is None or not info.get("worker_restarted"):
                continue
            (last,) = last_obs.rows(range(index, index + 1))
            if last is None:
                continue
            if "final_obs" in info:
                info["final_obs"] = last
            else:
                self.buffers.obs.put(index, last)
        ids = np.asarray(done, np.int64)
        last_obs.record(self.buffers.obs.take(ids), ids)

    def clear(self) -> None:
        """Forget every batch (on close: the replies will be dropped)."""
        self.in_flight[:] = False
        self.flying = 0
        self.ready.clear()
        self.ready_infos.clear()
        self.returning = None
