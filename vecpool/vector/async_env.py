"""Parent side of vecpool's vector env: :class:`AsyncVectorEnv`.

The constructor, its checks and Gymnasium's state machine; public methods delegate to
the parent's engine (:mod:`vecpool._engine`: the worker group and its wait loop,
the step buffers, ``send``/``recv`` batches, env states), which never needs this
class. See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
from gymnasium import Env, Space, logger
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import batch_space

from vecpool._engine import guards as _guards
from vecpool._engine.batches import Batches
from vecpool._engine.buffers import StepBuffers
from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.env_states import EnvStates
from vecpool._engine.group import WorkerGroup
from vecpool._engine.guards import (
    HELD,
    HOLD,
    MAIN,
    drop_held,
    exclusive,
    raise_deferred,
)
from vecpool._engine.lifecycle import LIVE_ENVS, kill_groups, reap, shutdown
from vecpool._engine.restart import LastObservations, Restarter, RestartPolicy
from vecpool._engine.spinning import SpinPolicy
from vecpool._engine.startup import Starter, StartSpec
from vecpool._util.closing import close_all_within
from vecpool._util.placement import Placement
from vecpool._util.threads import PolicyThreads, fit_policy_threads
from vecpool._util.validation import available_cpus, check_reset_mask
from vecpool._wire.messages import ObsTransport, Reply
from vecpool.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    WorkerCrashedError,
)
from vecpool.vector.arguments import check_arguments, observation_spaces
from vecpool.vector.gymnasium_worker import RESERVED_CALLS, GymnasiumWorkerEnv

__all__ = ["AsyncState", "AsyncVectorEnv"]

_Env = TypeVar("_Env", bound="AsyncVectorEnv")
"""``typing.Self`` for ``__new__``, which Python 3.10 lacks (a TypeVar resolves at
run time too: ``typing.get_type_hints`` reads it)."""

DUMMY_CLOSE_SECONDS = 2.0
_TRANSPORT_NAMES = {
    ObsTransport.NATIVE: "shared",
    ObsTransport.HYBRID: "hybrid",
    ObsTransport.PIPE: "pickled",
}
"""How long the constructor waits for the ``close()`` of the env it builds in this
process to read the spaces (vecpool/_util/closing.py)."""

CLOSE_GRACE = 10.0
"""Seconds ``close()`` (with ``timeout=None``) gives a pending call and the envs'
own ``close`` before it terminates the workers."""

StepResult = tuple[
    Any,
    npt.NDArray[np.float64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.bool_],
    dict[str, Any],
]


class AsyncVectorEnv(VectorEnv[Any, Any, npt.NDArray[Any]]):
    """Vectorized environment that runs sub-environments in worker processes.

    A drop-in replacement for :class:`gymnasium.vector.AsyncVectorEnv`: same
    constructor, methods, errors and results. Underneath, each worker process hosts a
    contiguous slice of the sub-environments, and every per-step array (actions,
    observations, rewards, terminations, truncations) lives in one shared-memory
    block, so a step costs one tiny message per worker and no pickling unless an env
    returns a non-empty info. With a custom ``worker``, which speaks Gymnasium's
    protocol, the constructor returns Gymnasium's own machinery instead, under
    vecpool's checks and API (vecpool/vector/gymnasium_worker.py).

    Example:
        >>> import gymnasium as gym
        >>> import vecpool
        >>> envs = vecpool.AsyncVectorEnv(
        ...     [lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2
        ... )
        >>> observations, infos = envs.reset(seed=42)
        >>> observations.shape
        (4, 4)
        >>> _ = envs.action_space.seed(123)
        >>> observations, rewards, terminations, truncations, infos = envs.step(
        ...     envs.action_space.sample()
        ... )
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()
    """

    env_fns: Sequence[Callable[[], Env[Any, Any]]]
    shared_memory: bool | str
    copy: bool
    context: str | None
    daemon: bool
    worker: Callable[..., None] | None
    observation_mode: str | Space[Any] | tuple[Space[Any], Space[Any]]
    autoreset_mode: AutoresetMode
    max_concurrency: int | None
    num_workers: int
    parent_envs: int
    wait_strategy: str
    batch_size: int | None
    on_worker_crash: str
    max_restarts: int | None
    policy_threads: int | str | None
    placement: Placement
    """Where the envs step: ``num_workers``, ``parent_envs`` and the cores the
    default was chosen for (vecpool/_util/placement.py); shown by ``repr``."""
    num_envs: int
    metadata: dict[str, Any]
    render_mode: str | None
    single_action_space: Space[Any]
    action_space: Space[Any]
    single_observation_space: Space[Any]
    observation_space: Space[Any]
    processes: list[multiprocessing.process.BaseProcess]
    parent_pipes: list[Connection]

    def __new__(cls: type[_Env], *args: Any, **kwargs: Any) -> _Env:
        """A vecpool engine, or, with a custom ``worker``, Gymnasium's machinery.

        A custom worker speaks Gymnasium's pipe protocol, so Gymnasium's own
        ``AsyncVectorEnv`` runs it (vecpool/vector/gymnasium_worker.py); the object
        is still an instance of ``cls``.
        """
        worker = kwargs.get("worker", args[5] if len(args) > 5 else None)
        target = cls if worker is None else _gymnasium_worker_class(cls)
        return cast("_Env", object.__new__(target))

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env[Any, Any]]],
        shared_memory: bool | str = "auto",
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable[..., None] | None = None,
        observation_mode: str | Space[Any] | tuple[Space[Any], Space[Any]] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        num_workers: int | None = None,
        parent_envs: int | str = "auto",
        wait_strategy: str = "auto",
        batch_size: int | None = None,
        on_worker_crash: str = "raise",
        max_restarts: int | None = 3,
        policy_threads: int | str | None = None,
    ) -> None:
        """Start the workers and create the sub-environments.

        Args:
            env_fns: Functions that create the environments.
            shared_memory: ``"auto"`` (default): observations come back through
                shared memory where the space allows it (any Box, Discrete,
                MultiDiscrete, MultiBinary, Text and Dict/Tuple of those), else
                pickled through the pipes (a custom space such as MiniGrid's
                ``MissionSpace``). ``True``: through shared memory, and a space
                that cannot be raises Gymnasium's ``ValueError`` (Gymnasium's
                default). ``False``: pickled through the pipes.
            copy: If ``True``, :meth:`reset` and :meth:`step` return copies of the
                observations; if ``False``, views that the next call overwrites.
            context: ``multiprocessing`` start method (``"fork"``, ``"forkserver"``,
                ``"spawn"``); ``None`` uses the default.
            daemon: If ``True``, workers are daemonic (they cannot start children).
            worker: A custom worker with Gymnasium's 8-argument signature. It keeps
                Gymnasium's one-env-per-process protocol, run by Gymnasium's own
                ``AsyncVectorEnv`` (``num_workers`` must then be ``None`` or
                ``num_envs``; ``batch_size``, restarts and env states need vecpool's
                workers).
            observation_mode: ``"same"``, ``"different"`` or a tuple
                ``(observation_space, single_observation_space)``.
            autoreset_mode: The autoreset mode (see ``gymnasium.vector.AutoresetMode``).
            max_concurrency: At most this many sub-environments execute ``reset`` or
                ``step`` at once; ``None`` for no limit.
            num_workers: Number of worker processes; the envs are split into that many
                contiguous slices. Default: a cost model's choice for this machine
                (vecpool/_util/placement.py): the workers and the waiting parent
                never outnumber the physical cores, a worker hosts several cheap
                envs where that saves a hand-off (16 envs on 16 cores: 8 x 2), at
                most ``max_concurrency``; :attr:`placement` and ``repr`` show it.
                ``0``: every env in this process (same results; no isolation;
                see docs/performance.md).
            parent_envs: How many envs this process steps itself (the last ones),
                while the workers step the others: ``*_async`` sends the workers'
                commands and ``*_wait`` steps this share, then collects the
                replies, so no core idles while the parent waits. ``"auto"``
                (default): with ``num_workers`` left unset on 2 cores, the parent
                and one worker each step half the envs (8 envs: 4 here, one worker
                with 4); with ``num_workers`` given, a custom ``worker``,
                ``on_worker_crash="restart"``, ``batch_size`` or
                ``max_concurrency``, or on 1 or more than 2 cores (where it does not
                pay: docs/performance.md), 0. ``0`` keeps every env in a
                worker process (the earlier default). The envs of this share are
                not isolated: an env that crashes the interpreter (a segfault)
                takes this process with it, and an env that hangs here can be
                neither timed out nor interrupted (docs/reliability.md); so a
                custom ``worker`` and ``on_worker_crash="restart"`` refuse it.
            wait_strategy: How the parent and the workers wait for each other:
                ``"spin"`` polls (yielding the CPU between polls) for up to 2 ms
                before blocking, which skips the cost of waking a blocked process;
                ``"block"`` always blocks on the pipes; ``"auto"`` (default) spins
                only when there are no more workers than CPUs: the parent while the
                workers answer within about a quarter millisecond, the workers
                while the parent's own work between two steps (a policy) stays
                under that.
            batch_size: Enables EnvPool-style asynchronous batches: :meth:`send`
                steps the given envs and :meth:`recv` returns the first
                ``batch_size`` envs to finish (``1 <= batch_size <= num_envs``).
            on_worker_crash: ``"raise"``: a dead worker raises
                :class:`vecpool.WorkerCrashedError` and the vector env is unusable.
                ``"restart"``: it is replaced by a fresh process hosting the same
                envs, and the call that saw the crash returns their rows marked
                ``infos["worker_restarted"]`` (docs/reliability.md).
            max_restarts: Restarts allowed per worker (``None``: no limit); past
                it, a crash raises.
            policy_threads: The threads of this process's pools (BLAS, OpenMP,
                torch) while the vector env is open, so that a policy computed
                between steps leaves the workers their CPUs: ``"auto"`` (CPUs
                minus workers, at least 1) or a number; restored on :meth:`close`.
                ``None`` (default): unchanged; if a policy on several threads
                between steps is measured (this process's CPU seconds per second)
                and those pools and the workers exceed the CPUs, a
                :class:`vecpool.VecPoolPerformanceWarning` says so once per
                process, before a step is sent (vecpool/_util/threads.py;
                docs/performance.md).

        Raises:
            ValueError: On an invalid argument (named in the message), or a custom
                observation space with ``shared_memory=True``.
            RuntimeError: If the sub-environments' spaces do not match.
        """
        checked = check_arguments(
            env_fns,
            shared_memory,
            worker,
            max_concurrency,
            num_workers=num_workers,
            parent_envs=parent_envs,
            wait_strategy=wait_strategy,
            batch_size=batch_size,
            on_worker_crash=on_worker_crash,
            max_restarts=max_restarts,
            policy_threads=policy_threads,
        )
        self.env_fns = env_fns
        self.shared_memory = shared_memory
        self.copy = copy
        self.context = context
        self.daemon = daemon
        self.worker = worker
        self.observation_mode = observation_mode
        self.autoreset_mode = (
            autoreset_mode
            if isinstance(autoreset_mode, AutoresetMode)
            else AutoresetMode(autoreset_mode)
        )
        self.max_concurrency = checked.max_concurrency
        self.num_envs = checked.num_envs
        checked.set_options(self)
        self._policy_limits: PolicyThreads | None = None

        self._state = AsyncState.DEFAULT
        self._owner_pid = os.getpid()  # a forked child must not close our workers
        self._step_interrupted = False  # a step() cut between its two halves
        self._lock = threading.RLock()
        self.processes = []
        self.parent_pipes = []
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._group = WorkerGroup(
            SpinPolicy.from_strategy(
                self.wait_strategy,
                self.num_workers,
                self.placement.cores,
                share=bool(self.parent_envs) and bool(self.num_workers),
                batches=self.batch_size is not None and self.batch_size < self.num_envs,
            )
        )

        dummy_env = env_fns[0]()
        self.metadata = dict(dummy_env.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = dummy_env.render_mode
        self.single_action_space = dummy_env.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        try:
            self.observation_space, self.single_observation_space = observation_spaces(
                self.observation_mode, dummy_env, self.env_fns, self.num_envs
            )
        finally:
            # in this process: a close() that hangs must not hang the constructor
            close_all_within(
                [(dummy_env.close, "env_fns[0]() (built to read the spaces)")],
                DUMMY_CLOSE_SECONDS,
            )
            del dummy_env

        ctx = multiprocessing.get_context(context)
        self._buffers = StepBuffers(
            self.num_envs,
            self.single_action_space,
            self.action_space,
            self.single_observation_space,
            self.observation_space,
            shared_memory=shared_memory,
            copy=copy,
            batches=self.batch_size is not None,
            ctx=ctx,
        )
        owner = type(self).__name__
        self._env_states = EnvStates(
            self._group, self._buffers, self.single_observation_space, owner
        )
        self._restarter: Restarter | None = None
        if self.on_worker_crash == "restart":
            self._restarter = Restarter(
                RestartPolicy(self.num_workers, self.num_envs, self.max_restarts),
                LastObservations(
                    self.single_observation_space,
                    self.observation_space,
                    self.num_envs,
                ),
                owner,
            )
            self._group.restarter = self._restarter
        self._batches = (
            None
            if self.batch_size is None
            else Batches(
                self.num_envs,
                self.batch_size,
                self._group,
                self._buffers,
                owner,
                None if self._restarter is None else self._restarter.last_obs,
            )
        )
        LIVE_ENVS.add(self)
        self._holds_sigint = _guards.install()
        try:
            self._start_workers(ctx)
            self._policy_limits = fit_policy_threads(
                self.policy_threads, self.num_workers, available_cpus()
            )
            if self.policy_threads is None:  # measured while stepping (issue 38)
                self._group.spin.watch_threads(self.num_workers, available_cpus())
        except BaseException:
            self.close(terminate=True)
            raise

    # -- construction ------------------------------------------------------------------

    def _start_workers(self, ctx: Any) -> None:
        # Registered before the first start: a failure half-way still reaps everything.
        self._finalizer = weakref.finalize(
            self, shutdown, self.processes, self.parent_pipes
        )
        starter = Starter(
            StartSpec(
                env_fns=self.env_fns,
                num_workers=self.num_workers,
                parent_envs=self.parent_envs,
                daemon=self.daemon,
                name=type(self).__name__,
                buffers=self._buffers,
                autoreset_mode=self.autoreset_mode,
                observation_mode=self.observation_mode,
                observation_space=self.single_observation_space,
                action_space=self.single_action_space,
                max_concurrency=self.max_concurrency,
                restart=self._restarter is not None,
            ),
            ctx,
            self.processes,
            self.parent_pipes,
        )
        if self._restarter is not None:
            self._restarter.starter = starter
        if starter.permits is not None:  # the parent's descriptor of the lock file
            self._close_permits = weakref.finalize(self, starter.permits.close)
        starter.start(self._group)
        self._group.check_spaces(
            self.observation_mode, self.single_action_space, type(self).__name__
        )

    def __repr__(self) -> str:
        """Gymnasium's representation, plus where the envs step.

        E.g. ``AsyncVectorEnv(CartPole-v1, num_envs=8, 1 worker x 4 envs + 4 in
        this process (2 cores))``.
        """
        base = super().__repr__()
        placement: Placement | None = getattr(self, "placement", None)
        if placement is None:  # a failed construction
            return base
        return f"{base[:-1]}, {placement.describe(self.num_envs)})"

    # -- seeding -----------------------------------------------------------------------

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Returns a tuple of np_random seeds for all the wrapped envs."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # read-only, as in Gymnasium's AsyncVectorEnv
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Returns the tuple of the numpy random generators of the wrapped envs."""
        return self.get_attr("np_random")

    @property
    def observations(self) -> Any:
        """The latest observations (the shared buffers themselves)."""
        return self._buffers.obs.observations

    @observations.setter
    def observations(self, value: Any) -> None:
        self._buffers.obs.observations = value

    @property
    def observation_transport(self) -> str:
        """How observations come back from the workers (``shared_memory`` decides).

        ``"shared"``: through shared memory; ``"hybrid"``: a Dict/Tuple's array
        leaves through shared memory and its other leaves (Text, Graph, Sequence,
        OneOf, custom spaces) pickled with each reply (``shared_memory="auto"``);
        ``"pickled"``: the whole observation pickled through the pipes
        (``shared_memory=False``, or ``"auto"`` where no leaf is an array).
        ``shared_memory`` itself reports the argument given, as Gymnasium's does.
        """
        return _TRANSPORT_NAMES[self._buffers.obs.transport]

    # -- reset -------------------------------------------------------------------------

    @exclusive
    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all (or, with ``options["reset_mask"]``, some) sub-environments.

        Args:
            seed: ``None``, an int (env ``i`` gets ``seed + i``) or one seed per env.
            options: Passed to every env's ``reset``; a ``"reset_mask"`` key (a bool
                array of shape ``(num_envs,)``) resets only the masked envs. The dict
                is not modified.

        Returns:
            The batched observations and infos.
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    @exclusive
    def reset_async(
        self,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Send ``reset`` to every worker; collect the results with :meth:`reset_wait`.

        Args:
            seed: ``None``, an int (env ``i`` gets ``seed + i``) or one seed per env.
            options: Reset options; see :meth:`reset`.

        Raises:
            ClosedEnvironmentError: If the vector env was closed.
            AlreadyPendingCallError: If another call is pending.
            ValueError: If the seed list or the reset mask has the wrong length.
            TypeError: If the reset mask is not a bool numpy array.
        """
        self._assert_is_running()
        if seed is None:
            seeds: list[Any] = [None for _ in range(self.num_envs)]
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            len(seed)  # Gymnasium's check of the length: its TypeError for a non-list
            seeds = list(seed)
        if len(seeds) != self.num_envs:
            msg = (
                "If seeds are passed as a list the length must match "
                f"num_envs={self.num_envs} but got length={len(seeds)}."
            )
            raise ValueError(msg)
        self._assert_idle("reset_async", end="")
        flags = [True] * self.num_envs
        if options is not None and "reset_mask" in options:
            if not hasattr(options, "pop"):  # Gymnasium pops it: fails so
                msg = f"'{type(options).__name__}' object has no attribute 'pop'"
                raise AttributeError(msg)
            options = dict(options)  # never mutate the caller's dict
            flags = check_reset_mask(options.pop("reset_mask"), self.num_envs)
        if self._restarter is not None:  # the seeds given: none to an env left out
            self._restarter.policy.note_seeds(
                [s if flag else None for s, flag in zip(seeds, flags, strict=True)]
            )
        with HELD:
            buffer = self._buffers.obs.choose()
            group = self._group
            group.send_all(
                "reset",
                lambda handle: handle.send_reset(
                    seeds[handle.env_indices.start : handle.env_indices.stop],
                    options,
                    flags[handle.env_indices.start : handle.env_indices.stop],
                    buffer,
                ),
            )
            # kept until reset_wait returns the rows: a give-up shows them again
            self._state = AsyncState.WAITING_RESET

    @exclusive
    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for the resets sent by :meth:`reset_async`.

        Args:
            timeout: Seconds to wait; ``None`` waits as long as the workers live.

        Returns:
            The batched observations and infos.

        Raises:
            ClosedEnvironmentError: If the vector env was closed.
            NoAsyncCallError: If :meth:`reset_async` was not called first.
            multiprocessing.TimeoutError: If the timeout expired.
            WorkerCrashedError: If a worker died.
        """
        self._assert_is_running()
        if self._state != AsyncState.WAITING_RESET:
            msg = "Calling `reset_wait` without any prior call to `reset_async`."
            raise NoAsyncCallError(msg, AsyncState.WAITING_RESET.value)
        replies = self._wait_all("reset", timeout, "reset_wait")
        self._state = AsyncState.DEFAULT  # answers are kept: safe to wait again
        infos = self._buffers.merge_replies(
            self._group.handles, replies, type(self).__name__
        )
        observations = self._buffers.obs.read()
        if self._restarter is not None:  # the rows that mark a cut are returned
            self._restarter.returned(observations)
        return observations, infos

    # -- step --------------------------------------------------------------------------

    @exclusive
    def step(self, actions: Any) -> StepResult:
        """Step every sub-environment with its action.

        Args:
            actions: An element of :attr:`action_space` (one action per env).

        Returns:
            Batched ``(observations, rewards, terminations, truncations, infos)``.
        """
        cls = type(self)  # looked up each call: a half replaced later counts too
        raw = cls.step_async is _STEP_ASYNC and cls.step_wait is _STEP_WAIT
        # not overridden: skip re-entering the lock this call already holds
        (_RAW_STEP_ASYNC(self, actions) if raw else self.step_async(actions))
        try:
            result: StepResult = _RAW_STEP_WAIT(self, None) if raw else self.step_wait()
        except BaseException:
            # e.g. a Ctrl-C between the two halves: the next call says what to do
            self._step_interrupted = self._state is AsyncState.WAITING_STEP
            raise
        return result

    @exclusive
    def step_async(self, actions: Any) -> None:
        """Check the actions, place them in shared memory and wake the workers.

        Args:
            actions: An element of :attr:`action_space` (one action per env).

        Raises:
            ClosedEnvironmentError: If the vector env was closed.
            AlreadyPendingCallError: If another call is pending.
            ValueError: If the actions do not hold one action of the right shape per
                env; nothing is sent then.
            VecPoolPerformanceWarning: Where warnings are errors, the measured
                advice on ``policy_threads`` (once per process); nothing is sent.
        """
        group = self._group
        if self.closed or group.broken is not None or group.gave_up:
            self._assert_is_running()  # raises, or checks the pipes
        if self._state is not AsyncState.DEFAULT or self._batches is not None:
            self._assert_idle("step_async")
        if group.spin.advice is not None:  # said before anything is sent
            group.spin.advise()
        buffers = self._buffers
        # the shared actions stay unread while a worker whose call gave up may
        # still read them: then everything goes by pipe (one read)
        per_env = buffers.actions.place(
            actions, shared=not group.gave_up or not group.any_abandoned()
        )
        main = threading.get_ident() == MAIN
        if main:  # Ctrl-C held back: the send and the state go together
            HOLD["depth"] += 1
        try:
            group.send_step(buffers.obs.step_messages[buffers.obs.choose()], per_env)
            self._state = AsyncState.WAITING_STEP
            self._step_interrupted = False
        except BaseException:
            if main:
                drop_held()
            raise
        if main:
            HOLD["depth"] -= 1
            if HOLD["pending"] and not HOLD["depth"]:
                raise_deferred()
        # after the send, off the workers' path, one step in SpinPolicy.EVERY:
        # whether they spin for the next command (they read it after this one's
        # reply) only if we are quick; how long the parent spins
        spin = group.spin
        spin.countdown -= 1
        if spin.countdown <= 1:
            spin.sample()

    @exclusive
    def step_wait(self, timeout: float | None = None) -> StepResult:
        """Wait for the steps sent by :meth:`step_async`.

        Args:
            timeout: Seconds to wait; ``None`` waits as long as the workers live.

        Returns:
            Batched ``(observations, rewards, terminations, truncations, infos)``.

        Raises:
            ClosedEnvironmentError: If the vector env was closed.
            NoAsyncCallError: If :meth:`step_async` was not called first.
            multiprocessing.TimeoutError: If the timeout expired.
            WorkerCrashedError: If a worker died.
        """
        group = self._group
        if self.closed or group.broken is not None or group.gave_up:
            self._assert_is_running()
        if self._state is not AsyncState.WAITING_STEP:
            msg = "Calling `step_wait` without any prior call to `step_async`."
            raise NoAsyncCallError(msg, AsyncState.WAITING_STEP.value)
        if timeout is None and self._restarter is None:  # the one step path
            try:
                more = group.wait_step()
            except BaseException:
                self._state = AsyncState.DEFAULT
                group.drop_pending()
                raise
            replies: list[Reply | None] = []
            columns = False
            for handle in group.handles if more else ():
                answers = handle.numbers.answers
                reply = answers[0][1] if answers else None
                replies.append(reply)
                if reply is not None:  # infos (in shared rows, or pickled), errors
                    columns = True
        else:
            replies = self._wait_all("step", timeout, "step_wait")
            columns = True
        # No Ctrl-C section needed from here: every answer is stored, so a call
        # interrupted below can be waited for again and returns the same results.
        buffers = self._buffers
        self._state = AsyncState.DEFAULT
        infos = (
            buffers.merge_replies(
                group.handles, replies, type(self).__name__, step=True
            )
            if columns
            else {}
        )
        observations = buffers.obs.read()
        if self._restarter is not None:  # the rows that mark a cut are returned
            self._restarter.returned(observations)
        return (
            observations,
            buffers.rewards.copy(),
            buffers.terminations.copy(),
            buffers.truncations.copy(),
            infos,
        )

    # -- call / attributes -------------------------------------------------------------

    @exclusive
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call a method (or read an attribute) of every sub-environment.

        Args:
            name: Name of the method or attribute.
            *args: Positional arguments of the call.
            **kwargs: Keyword arguments of the call.

        Returns:
            One result per sub-environment.
        """
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def render(self) -> tuple[Any, ...] | None:
        """Returns a list of rendered frames from the environments."""
        return self.call("render")

    @exclusive
    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Send a method call to every sub-environment.

        Args:
            name: Name of the method or attribute.
            *args: Positional arguments of the call.
            **kwargs: Keyword arguments of the call.

        Raises:
            ClosedEnvironmentError: If the vector env was closed.
            AlreadyPendingCallError: If another call is pending.
            ValueError: If ``name`` is one of ``reset``, ``step``, ``close``.
        """
        self._assert_is_running()
        self._assert_idle("call_async")
        if name in RESERVED_CALLS:
            msg = (
                f"Trying to call function `{name}` with `call`, use `{name}` directly "
                "instead."
            )
            raise ValueError(msg)
        with HELD:
            self._group.send_all(
                "call", lambda handle: handle.send_call(name, args, kwargs)
            )
            self._state = AsyncState.WAITING_CALL

    @exclusive
    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for the calls sent by :meth:`call_async`.

        Args:
            timeout: Seconds to wait; ``None`` waits as long as the workers live.

        Returns:
            One result per sub-environment.

        Raises:
            NoAsyncCallError: If :meth:`call_async` was not called first.
            multiprocessing.TimeoutError: If the timeout expired.
        """
        self._assert_is_running()
        if self._state != AsyncState.WAITING_CALL:
            msg = "Calling `call_wait` without any prior call to `call_async`."
            raise NoAsyncCallError(msg, AsyncState.WAITING_CALL.value)
        replies = self._wait_all("call", timeout, "call_wait")
        self._state = AsyncState.DEFAULT
        raise_env_errors(replies, type(self).__name__, handles=self._group.handles)
        return tuple(
            result for reply in replies if reply for result in reply.results or []
        )

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Get an attribute from every sub-environment.

        Args:
            name: Name of the attribute.

        Returns:
            One value per sub-environment.
        """
        return self.call(name)

    @exclusive
    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        """Set an attribute of every sub-environment.

        Args:
            name: Name of the attribute.
            values: One value per env (a list or tuple of length ``num_envs``), or a
                single value for all.

        Raises:
            ValueError: If a list/tuple of values has the wrong length.
            AlreadyPendingCallError: If another call is pending.
        """
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            msg = (
                "Values must be a list or tuple with length equal to the number "
                f"of environments. Got `{len(values)}` values for {self.num_envs} "
                "environments."
            )
            raise ValueError(msg)
        self._assert_idle("set_attr")
        per_env = list(values)
        with HELD:
            self._group.send_all(
                "set_attr",
                lambda handle: handle.send_set_attr(
                    name, per_env[handle.env_indices.start : handle.env_indices.stop]
                ),
            )
        replies = self._wait_all("set_attr", None)
        raise_env_errors(replies, type(self).__name__, handles=self._group.handles)

    # -- env state (planning) ----------------------------------------------------------

    @exclusive
    def get_states(self, indices: Sequence[int] | None = None) -> list[Any]:
        """The state of each sub-environment, from its own ``get_state()``.

        The envs must implement ``get_state()`` and ``set_state(state)`` (looked up
        on ``env.unwrapped``); states must be picklable. Each state comes wrapped in
        a :class:`vecpool.EnvState` that also records whether a ``NEXT_STEP``
        autoreset was pending and the step counts of the env's ``TimeLimit``
        wrappers, so :meth:`set_states` restores exactly; its ``.state`` is the
        env's own state. Other wrappers' own state is not in it.

        Example:
            >>> import vecpool
            >>> from vecpool.testing import CountingEnv
            >>> envs = vecpool.AsyncVectorEnv([CountingEnv] * 2)
            >>> _ = envs.reset(seed=0)
            >>> states = envs.get_states()
            >>> first = envs.step(np.array([1, 0]))
            >>> envs.set_states(states)  # back to where the step started
            >>> again = envs.step(np.array([1, 0]))
            >>> bool(np.array_equal(first[0], again[0]))
            True
            >>> envs.close()

        Args:
            indices: Which sub-environments (default: all), in the order wanted.

        Returns:
            One :class:`vecpool.EnvState` per index.

        Raises:
            AttributeError: If an env lacks ``get_state``/``set_state``.
            ValueError: If an index is out of range.
        """
        self._assert_state_calls("get_states")
        return self._env_states.get_states(indices)

    @exclusive
    def set_states(
        self, states: Sequence[Any], indices: Sequence[int] | None = None
    ) -> None:
        """Restore sub-environments to states from :meth:`get_states`.

        An :class:`vecpool.EnvState` restores the pending-autoreset flag and the
        ``TimeLimit`` step counts too; a bare env state (e.g. built by hand) is
        taken as mid-episode. A state carries no observation: a later reset that
        leaves these envs out (``reset_mask``) returns the observation each last
        returned.

        Args:
            states: One state per index.
            indices: Which sub-environments (default: all); none twice.

        Raises:
            AttributeError: If an env lacks ``get_state``/``set_state``.
            ValueError: If the number of states does not match the indices, or an
                index repeats; nothing is sent then.
        """
        self._assert_state_calls("set_states")
        self._env_states.set_states(states, indices)

    @exclusive
    def step_from(
        self,
        states: Sequence[Any],
        actions: Any,
        dt: int = 1,
        indices: Sequence[int] | None = None,
    ) -> tuple[
        list[Any],
        Any,
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        """Set states, apply each action ``dt`` times, return where that led.

        For planning (tree search, MCTS): each env is set to its state, steps with
        its action ``dt`` times (frameskip), summing the rewards and stopping early
        at an episode end, and reports its new state. An episode that ends there
        is reset as this mode's ``step`` resets it: under ``NEXT_STEP`` by the
        env's next step (its new state says ``autoreset_pending``), under
        ``SAME_STEP`` at once (the observation returned is the new episode's, the
        final one in ``infos["final_obs"]``), under ``DISABLED`` not at all. The
        envs are left at their new states, as after ``set_states(new_states)``,
        with the observations returned here as their last ones: call
        :meth:`set_states` to go back (wrappers around this vector env, such as
        :class:`vecpool.ReplayPoolWrapper`, do not see these moves). A state saved
        right after an episode ended (``autoreset_pending``) is refused: its next
        step is a reset, which ``step_from`` does not take. States carry the step
        counts of the env's ``TimeLimit`` wrappers, so an episode truncates at
        the same step from the same state.

        Args:
            states: One state per index (from :meth:`get_states`).
            actions: One action per index (a batch of that many actions).
            dt: Repeats of each action (>= 1).
            indices: Which sub-environments (default: all). An index may
                repeat (children of one node): each row starts from its own
                state, in order, and the env is left at the last row's.

        Returns:
            ``(new_states, observations, rewards, terminations, truncations,
            infos)``, batched over the indices in order.

        Raises:
            AttributeError: If an env lacks ``get_state``/``set_state``.
            ValueError: If counts do not match, ``dt < 1``, ``indices`` is
                empty, or a state's next step would reset its env; nothing is
                sent then.
        """
        self._assert_state_calls("step_from")
        indices = None if indices is None else list(indices)  # read twice below
        result = self._env_states.step_from(states, actions, dt, indices)
        if self._restarter is not None:  # where a replacement starts them from
            order = range(self.num_envs) if indices is None else indices
            self._restarter.last_obs.record(result[1], np.asarray(order, np.int64))
        return result

    def _assert_state_calls(self, method: str) -> None:
        self._assert_is_running()
        self._assert_idle(method)

    # -- EnvPool-style asynchronous batches --------------------------------------------

    @exclusive
    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step the envs ``env_ids`` with ``actions``, without waiting (EnvPool style).

        Collect results with :meth:`recv`. An env can be sent again once
        :meth:`recv` has returned it. Autoreset applies per env, as in :meth:`step`.

        Example:
            >>> import gymnasium as gym, numpy as np, vecpool
            >>> envs = vecpool.AsyncVectorEnv(
            ...     [lambda: gym.make("CartPole-v1")] * 4, num_workers=2, batch_size=2
            ... )
            >>> obs, infos = envs.reset(seed=0)
            >>> envs.send(np.zeros(4, dtype=np.int64), np.arange(4))
            >>> obs, rewards, terminations, truncations, infos = envs.recv()
            >>> obs.shape, len(set(infos["env_id"].tolist()) & {0, 1, 2, 3})
            ((2, 4), 2)
            >>> envs.close()

        Args:
            actions: One action per id in ``env_ids`` (a batch of that many actions).
            env_ids: Indices of the envs to step; default: every env.

        Raises:
            ValueError: If ``batch_size`` was not set, if an id is out of range,
                repeated or still in flight, or if the actions do not match the ids.
            AlreadyPendingCallError: If a ``*_async`` call is pending.
        """
        batches = self._batches_or_raise()
        self._assert_idle("send", batches=False)
        batches.send(actions, env_ids)

    @exclusive
    def recv(self, timeout: float | None = None) -> StepResult:
        """Return the first ``batch_size`` envs to finish the steps :meth:`send` sent.

        Results are batched like :meth:`step`'s but hold only those envs;
        ``infos["env_id"]`` (an int array) names them, in the order of the rows;
        the key is reserved (an env's own ``env_id`` info is replaced, with a
        :class:`~vecpool.errors.VecPoolWarning` the first time).
        When fewer than ``batch_size`` envs are in flight, the rest is returned.

        Args:
            timeout: Seconds to wait; ``None`` waits as long as the workers live.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``.

        Raises:
            ValueError: If the vector env was created without ``batch_size``.
            NoAsyncCallError: If no env is in flight or ready.
            multiprocessing.TimeoutError: If the timeout expired (envs stay in
                flight; call :meth:`recv` again).
            WorkerCrashedError: If a worker died.
        """
        return self._batches_or_raise().recv(timeout)

    @property
    def restarts(self) -> tuple[int, ...]:
        """Restarts of each worker so far (``on_worker_crash="restart"``)."""
        restarter = self._restarter
        return (
            tuple(restarter.policy.restarts) if restarter else (0,) * self.num_workers
        )

    @property
    def pending_env_ids(self) -> list[int]:
        """Envs sent by :meth:`send` and not yet returned by :meth:`recv`, sorted."""
        return [] if self._batches is None else self._batches.pending

    def _batches_or_raise(self) -> Batches:
        self._assert_is_running()
        if self._batches is None:
            msg = (
                "`send`/`recv` need asynchronous batches: create the vector env with "
                "`batch_size=k`."
            )
            raise ValueError(msg)
        return self._batches

    # -- close -------------------------------------------------------------------------

    def close_extras(
        self, timeout: float | None = None, terminate: bool = False
    ) -> None:
        """Close the sub-environments and release the workers and shared memory.

        ``close`` always returns: a pending call, and the envs' own ``close``, get
        ``timeout`` seconds (``None``: :data:`CLOSE_GRACE` seconds, 1 second after a
        worker crashed); workers still busy after that (an env stuck in ``step``)
        are terminated, and every process is reaped.

        Args:
            timeout: Seconds to wait for a pending call and for the envs to close;
                after that the workers are terminated.
            terminate: If ``True``, terminate the workers at once.
        """
        LIVE_ENVS.discard(self)
        if getattr(self, "_owner_pid", os.getpid()) != os.getpid():
            # a forked child (its exit, or its garbage collection): the workers
            # are its parent's; nothing of theirs is touched from here
            return
        if self._restarter is not None:
            self._restarter.closing = True  # another thread must not restart
        if getattr(self, "_holds_sigint", False):
            self._holds_sigint = False
            _guards.uninstall()
        grace = CLOSE_GRACE if timeout is None else timeout
        if self._group.broken is not None:
            # a dead worker may hold the `max_concurrency` semaphore for ever
            grace = min(grace, 1.0)
        deadline = time.monotonic() + (0.0 if terminate else grace)
        # another thread inside a call: let it finish within the grace, or end it
        locked = self._lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        try:
            self._close_locked(terminate or not locked, grace, deadline)
        finally:
            if locked:
                self._lock.release()
            # the parent's thread pools get their threads back (policy_threads)
            limits, self._policy_limits = getattr(self, "_policy_limits", None), None
            if limits is not None:
                limits.restore()

    def _close_locked(self, terminate: bool, grace: float, deadline: float) -> None:
        if self._state != AsyncState.DEFAULT:
            logger.warn(
                "Calling `close` while waiting for a pending call to "
                f"`{self._state.value}` to complete."
            )
            if terminate:  # the parent's own envs do not run the pending call
                self._group.forget_queued()
            try:
                getattr(self, f"{self._state.value}_wait")(0 if terminate else grace)
            except multiprocessing.TimeoutError:
                terminate = True
            except Exception:  # noqa: BLE001 - closing anyway; the error was logged
                terminate = terminate or self._group.broken is not None
        self._state = AsyncState.DEFAULT
        if self._batches is not None:
            self._batches.clear()
        remaining = max(0.0, deadline - time.monotonic())
        if not terminate and not self._group.close(remaining):
            terminate = True
        if not terminate:
            # envs closed: let the workers exit, then kill what their envs forked
            reap(self.processes, min(deadline, time.monotonic() + 1.0))
            kill_groups(self.processes)
        if self._finalizer is not None:
            self._finalizer()  # terminates whatever is left, reaps, closes pipes
        close_permits = getattr(self, "_close_permits", None)
        if close_permits is not None:
            close_permits()
        self._buffers.release()
        self._group.spin.drop_hint()  # it points into the block
        for handle in self._group.handles:  # the workers' wide areas go now too
            handle.info_wide = handle.wide_offer = None
            handle.bell = None  # it points into the block

    # -- state checks and results ------------------------------------------------------

    def _assert_idle(
        self, method: str, *, end: str = ".", batches: bool = True
    ) -> None:
        """Refuse ``method`` while a call (or, with ``batches``, a batch) is pending.

        Gymnasium's message text; ``end`` is its final punctuation, which Gymnasium
        leaves out for ``reset_async``.
        """
        if self._state != AsyncState.DEFAULT:
            msg = (
                f"Calling `{method}` while waiting for a pending call to "
                f"`{self._state.value}` to complete{end}"
            )
            if self._step_interrupted and self._state is AsyncState.WAITING_STEP:
                msg += (
                    " (an earlier `step()` was interrupted after it had sent its "
                    "actions: call `step_wait()` to collect that step's results, "
                    "then go on)"
                )
            raise AlreadyPendingCallError(msg, str(self._state.value))
        if batches and self._batches is not None:
            self._batches.assert_none_pending(method)

    def _assert_is_running(self) -> None:
        if self.closed:
            name = type(self).__name__
            msg = f"Trying to operate on `{name}`, after a call to `close()`."
            raise ClosedEnvironmentError(msg)
        error = self._group.broken
        if error is not None:
            msg = f"{error.args[0]} (raised earlier; this vector env is unusable)"
            raise WorkerCrashedError(
                msg, error.worker, error.env_indices, error.exitcode
            )
        if self._group.gave_up:  # a call gave up earlier: check every pipe
            self._group.check_in_step()

    def __del__(self) -> None:
        """On garbage collection, terminate the workers if not closed."""
        if not getattr(self, "closed", True) and hasattr(self, "_state"):
            with contextlib.suppress(Exception):
                self.close(terminate=True)

    def _wait_all(
        self, what: str, timeout: float | None, label: str | None = None
    ) -> list[Reply | None]:
        """Wait for every worker's answer to the pending call; return the answers.

        On a timeout, a crash or a Ctrl-C the call is given up: the state goes back
        to idle and the answers still owed are dropped when they come.
        """
        group = self._group
        try:
            group.wait(what, timeout, label=label)
        except BaseException:
            self._state = AsyncState.DEFAULT
            group.drop_pending()
            raise
        return [handle.answer() for handle in group.handles]


class _GymnasiumWorkerVectorEnv(GymnasiumWorkerEnv, AsyncVectorEnv):  # type: ignore[misc]
    """A :class:`AsyncVectorEnv` with a custom ``worker``: Gymnasium's machinery.

    Gymnasium's methods come first in the MRO, then vecpool's class (for
    ``isinstance``); :class:`GymnasiumWorkerEnv` covers every public name of
    vecpool's class that would need vecpool's engine. Named ``AsyncVectorEnv``, as
    Gymnasium's messages and process names show ``type(self).__name__``.
    """


_GymnasiumWorkerVectorEnv.__name__ = "AsyncVectorEnv"
_WORKER_CLASSES: dict[type[Any], type[Any]] = {
    AsyncVectorEnv: _GymnasiumWorkerVectorEnv
}


def _gymnasium_worker_class(cls: type[Any]) -> type[Any]:
    """The class that runs a custom ``worker`` for ``cls`` (a user's subclass too).

    A subclass keeps its overrides and its name: they come before Gymnasium's.
    """
    made = _WORKER_CLASSES.get(cls)
    if made is None:
        made = (
            cls
            if issubclass(cls, GymnasiumWorkerEnv)
            else type(
                cls.__name__,
                (cls, _GymnasiumWorkerVectorEnv),
                {"__module__": cls.__module__, "__qualname__": cls.__qualname__},
            )
        )
        _WORKER_CLASSES[cls] = made
    return made


# inspect.signature(AsyncVectorEnv) reads __new__ first: show __init__'s parameters
AsyncVectorEnv.__new__.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    AsyncVectorEnv.__init__
)

_STEP_ASYNC = AsyncVectorEnv.step_async
_STEP_WAIT = AsyncVectorEnv.step_wait
_RAW_STEP_ASYNC: Callable[..., None] = getattr(_STEP_ASYNC, "__wrapped__", _STEP_ASYNC)
_RAW_STEP_WAIT: Callable[..., Any] = getattr(_STEP_WAIT, "__wrapped__", _STEP_WAIT)
