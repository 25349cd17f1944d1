"""A custom ``worker=``: Gymnasium's own ``AsyncVectorEnv``, under vecpool's contract.

A custom worker speaks Gymnasium's pipe protocol, one env per process, so vecpool
hands it to :class:`gymnasium.vector.AsyncVectorEnv` itself instead of running a
transport of its own for it (issue 29). :class:`GymnasiumWorkerEnv` adds what
:class:`vecpool.AsyncVectorEnv` promises on top of Gymnasium's class:

* vecpool's argument checks and messages (:mod:`vecpool.vector.arguments`), and
  ``shared_memory="auto"``: Gymnasium's shared memory for the spaces it reads back
  exactly (Box, Discrete, MultiDiscrete, MultiBinary, Dict/Tuple of them), the
  observations pickled for any other;
* an env's exception re-raised with its type, the remote traceback as
  ``__cause__`` and a note naming the env (:func:`raise_env_errors`), after
  Gymnasium's log lines;
* the caller's ``options`` left alone by ``reset_mask``, a wrong number of
  actions refused before anything is sent, ``policy_threads``;
* processes released at interpreter exit too, never closed from a forked child;
* vecpool's extra API: ``send``/``recv`` and the env-state calls refused with
  vecpool's messages, ``restarts``, ``pending_env_ids``, ``observation_transport``.

Timeouts, a worker that dies and ``close`` behave as in Gymnasium (the worker is
Gymnasium's protocol; the user chose it). :mod:`vecpool.vector.async_env` mixes
this class with :class:`vecpool.AsyncVectorEnv`, whose constructor builds it when
``worker`` is given, so ``isinstance(env, vecpool.AsyncVectorEnv)`` holds.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import gymnasium
from gymnasium import Env, Space
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import AsyncState

from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.lifecycle import LIVE_ENVS, shutdown
from vecpool._util.spaces import is_native, split_actions
from vecpool._util.threads import PolicyThreads, fit_policy_threads
from vecpool._util.validation import available_cpus
from vecpool._wire.messages import Reply
from vecpool._wire.remote_errors import ErrorRecord
from vecpool.errors import WorkerCrashedError
from vecpool.vector.arguments import check_arguments

__all__ = ["RESERVED_CALLS", "GymnasiumWorkerEnv"]

RESERVED_CALLS = ("reset", "step", "close", "_setattr", "_check_spaces")
"""Commands of Gymnasium's worker protocol: names ``call`` refuses."""


if TYPE_CHECKING:
    _GymnasiumAsync = gymnasium.vector.AsyncVectorEnv[Any, Any]
else:  # Gymnasium < 1.4 has no type parameters on AsyncVectorEnv
    _GymnasiumAsync = gymnasium.vector.AsyncVectorEnv


class GymnasiumWorkerEnv(_GymnasiumAsync):
    """Gymnasium's ``AsyncVectorEnv`` with vecpool's checks, errors and extra API.

    Built by :class:`vecpool.AsyncVectorEnv` for a custom ``worker``; see the module
    docstring for what differs from Gymnasium's class.
    """

    _shared_memory: bool | None
    observations: Any = None
    """Gymnasium's batch (a plain attribute, not :class:`vecpool.AsyncVectorEnv`'s
    property over vecpool's buffers)."""
    num_workers: int
    parent_envs: int
    wait_strategy: str
    batch_size: int | None
    on_worker_crash: str
    max_restarts: int | None
    policy_threads: int | str | None

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
        """Check vecpool's arguments, then start Gymnasium's workers.

        Args: as :class:`vecpool.AsyncVectorEnv`'s.

        Raises:
            ValueError: On an invalid argument (vecpool's messages), or a space that
                Gymnasium's shared memory cannot hold with ``shared_memory=True``.
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
        checked.set_options(self)
        self._policy_limits: PolicyThreads | None = None
        self._owner_pid = os.getpid()  # a forked child must not close our workers
        # replies each pipe still owes to calls that gave up (a timeout): read and
        # dropped before that pipe's next reply is taken
        self._owed = [0] * len(env_fns)
        try:
            super().__init__(
                env_fns,
                shared_memory,  # type: ignore[arg-type]  # "auto": the property below
                copy,
                context,
                daemon,
                worker,
                observation_mode,  # type: ignore[arg-type]  # a tuple of spaces too
                autoreset_mode,
                checked.max_concurrency,
            )
        except BaseException:
            # Gymnasium leaves what it started to its __del__, which needs `_state`
            shutdown(
                getattr(self, "processes", []),
                getattr(self, "parent_pipes", []),
                groups=False,  # Gymnasium's workers lead no process group
            )
            self.closed = True
            raise
        LIVE_ENVS.add(self)  # closed at interpreter exit (vecpool._engine.lifecycle)
        self._policy_limits = fit_policy_threads(
            self.policy_threads, self.num_workers, available_cpus()
        )

    @property
    def shared_memory(self) -> bool:
        """Whether observations come through Gymnasium's shared memory.

        ``"auto"`` resolves on the first read, which Gymnasium's constructor makes
        once it knows the observation space.
        """
        if self._shared_memory is None:
            self._shared_memory = is_native(self.single_observation_space)
        return self._shared_memory

    @shared_memory.setter
    def shared_memory(self, value: bool | str) -> None:
        self._shared_memory = None if value == "auto" else bool(value)

    @property
    def observation_transport(self) -> str:
        """``"shared"`` (Gymnasium's shared memory) or ``"pickled"``."""
        return "shared" if self.shared_memory else "pickled"

    @property
    def restarts(self) -> tuple[int, ...]:
        """Restarts of each worker: none (restart needs vecpool's own worker)."""
        return (0,) * self.num_workers

    @property
    def pending_env_ids(self) -> list[int]:
        """Envs sent by ``send`` and not yet received: none (no ``batch_size``)."""
        return []

    def reset_async(
        self,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Gymnasium's, on a copy of ``options`` (it pops ``reset_mask`` from it)."""
        self._before_send()
        super().reset_async(
            seed=seed, options=None if options is None else dict(options)
        )

    def step_async(self, actions: Any) -> None:
        """Gymnasium's, once the actions hold one action of the right shape per env.

        Raises:
            ValueError: If they do not; nothing is sent then (Gymnasium would
                send the first ones, and the next call would read their replies).
        """
        if not self.closed and self._state is AsyncState.DEFAULT:
            split_actions(
                self.action_space, self.single_action_space, actions, self.num_envs
            )
        self._before_send()
        super().step_async(actions)

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Gymnasium's, refusing a protocol command here, as vecpool does.

        Raises:
            ValueError: For ``reset``, ``step``, ``close`` and the protocol's own
                commands (Gymnasium's worker raises it and ends; the env stays
                usable here).
        """
        if name in RESERVED_CALLS and not self.closed:
            msg = (
                f"Trying to call function `{name}` with `call`, use `{name}` directly "
                "instead."
            )
            raise ValueError(msg)
        self._before_send()
        super().call_async(name, *args, **kwargs)

    def set_attr(self, name: str, values: list[Any] | tuple[Any] | object) -> None:
        """Gymnasium's, after the replies a timed-out call left (see below)."""
        self._before_send(block=True)  # Gymnasium reads its replies without a poll
        super().set_attr(name, values)

    def _poll_pipe_envs(self, timeout: float | None = None) -> bool:
        """Gymnasium's, reading and dropping first what calls that gave up left.

        Gymnasium would hand the replies of a call that timed out to the next
        call: a step after a timed-out step would return the earlier step's rows,
        and every later step too. Each pipe's late replies are counted
        (``_owed``) and dropped here, within this call's own deadline; when it
        gives up too, each pipe owes one reply more.

        Raises:
            Exception: An env's error in a late reply (that worker ends).
        """
        self._assert_is_running()
        deadline = None if timeout is None else time.perf_counter() + timeout
        pipes: list[Any] = self.parent_pipes  # Gymnasium sets an ended one's to None
        for index, pipe in enumerate(pipes):
            while pipe is not None and not pipe.closed:
                if not self._owed[index]:
                    break  # what comes next is this call's reply
                if deadline is not None and not pipe.poll(
                    max(deadline - time.perf_counter(), 0.0)
                ):
                    break  # gives up below
                self._drop_late(index)
            if pipe is None or pipe.closed:
                return self._gave_up()
            if deadline is not None and (
                self._owed[index]
                or not pipe.poll(max(deadline - time.perf_counter(), 0.0))
            ):
                return self._gave_up()
        return True

    def _gave_up(self) -> bool:
        """This call gives up: every pipe owes it one reply more."""
        self._owed = [owed + 1 for owed in self._owed]
        return False

    def _drop_late(self, index: int) -> None:
        """Read pipe ``index``'s oldest late reply and drop it (raise its error)."""
        _, success = self.parent_pipes[index].recv()
        self._owed[index] -= 1
        self._raise_if_errors(
            [success if i == index else True for i in range(self.num_envs)]
        )

    def _before_send(self, *, block: bool = False) -> None:
        """Before a new call: drop the late replies that came, refuse a lost env.

        Args:
            block: Wait for every late reply (a call that then reads its replies
                without a poll).

        Raises:
            WorkerCrashedError: If a worker has ended (as vecpool's own say).
            Exception: An env's error in the late replies (that worker ends).
        """
        if self.closed or self._state is not AsyncState.DEFAULT:
            return  # Gymnasium's checks raise
        pipes: list[Any] = self.parent_pipes  # Gymnasium sets an ended one's to None
        for index, pipe in enumerate(pipes):
            while (
                self._owed[index]
                and pipe is not None
                and not pipe.closed
                and (block or pipe.poll(0))
            ):
                self._drop_late(index)
                pipe = pipes[index]
        if None in pipes:
            index = pipes.index(None)
            exitcode = self.processes[index].exitcode
            msg = (
                f"Worker {index} (hosting env {index}) was shut down after its env "
                "raised (Gymnasium's protocol, which a custom `worker` speaks): call "
                "`close()` and create a new vector env."
            )
            raise WorkerCrashedError(msg, index, (index,), exitcode)

    def _raise_if_errors(self, successes: Iterable[bool]) -> None:
        """Gymnasium's, raising as vecpool does: see :func:`raise_env_errors`."""
        failures = [index for index, success in enumerate(successes) if not success]
        if not failures:
            return
        errors = []
        for _ in failures:
            index, exc_type, value, trace = self.error_queue.get()
            errors.append(ErrorRecord(index, None, exc_type, str(value), trace))
            self.parent_pipes[index].close()  # that worker has ended
            self.parent_pipes[index] = None  # type: ignore[call-overload]  # Gymnasium's mark
        self._state = AsyncState.DEFAULT
        raise_env_errors([Reply(errors=errors)], type(self).__name__)

    def close_extras(
        self, timeout: float | None = None, terminate: bool = False
    ) -> None:
        """Gymnasium's close; a worker found dead ends the others at once.

        Args:
            timeout: Seconds to wait for a pending call and the envs' ``close``.
            terminate: Terminate the workers at once.
        """
        LIVE_ENVS.discard(self)
        if self._owner_pid != os.getpid():
            return  # a forked child: the workers are its parent's
        # A worker that died (not one that reported an env error: its pipe is
        # None) would leave Gymnasium waiting for ever on the others' pipes.
        pipes: list[Any] = self.parent_pipes  # Gymnasium sets an ended one's to None
        crashed = any(
            pipe is not None and _ended(process)
            for process, pipe in zip(self.processes, pipes, strict=True)
        )
        try:
            try:
                super().close_extras(timeout=timeout, terminate=terminate or crashed)
            except (OSError, EOFError):  # a worker that died meanwhile
                super().close_extras(terminate=True)
        finally:
            limits, self._policy_limits = self._policy_limits, None
            if limits is not None:
                limits.restore()

    def __del__(self) -> None:
        """On garbage collection, terminate the workers if not closed."""
        if not getattr(self, "closed", True) and hasattr(self, "_state"):
            with contextlib.suppress(Exception):  # as vecpool's; Gymnasium's raises
                self.close(terminate=True)

    # -- vecpool's API that needs vecpool's own workers ------------------------------

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Refused: ``send``/``recv`` need ``batch_size``, which a custom worker lacks.

        Raises:
            ValueError: Always.
        """
        del actions, env_ids
        self._refuse_batches()

    def recv(self, timeout: float | None = None) -> NoReturn:
        """Refused, as :meth:`send`.

        Raises:
            ValueError: Always.
        """
        del timeout
        self._refuse_batches()

    def get_states(self, indices: Sequence[int] | None = None) -> NoReturn:
        """Refused: env states need vecpool's own workers.

        Raises:
            ValueError: Always.
        """
        del indices
        self._refuse("get_states")

    def set_states(
        self, states: Sequence[Any], indices: Sequence[int] | None = None
    ) -> NoReturn:
        """Refused, as :meth:`get_states`.

        Raises:
            ValueError: Always.
        """
        del states, indices
        self._refuse("set_states")

    def step_from(
        self,
        states: Sequence[Any],
        actions: Any,
        dt: int = 1,
        indices: Sequence[int] | None = None,
    ) -> NoReturn:
        """Refused, as :meth:`get_states`.

        Raises:
            ValueError: Always.
        """
        del states, actions, dt, indices
        self._refuse("step_from")

    def _refuse_batches(self) -> NoReturn:
        self._assert_is_running()
        msg = (
            "`send`/`recv` need asynchronous batches: create the vector env with "
            "`batch_size=k`."
        )
        raise ValueError(msg)

    def _refuse(self, method: str) -> NoReturn:
        self._assert_is_running()
        msg = f"`{method}` is not available with a custom `worker`."
        raise ValueError(msg)


def _ended(process: Any) -> bool:
    """Whether ``process`` has ended, its exit status reaped or not.

    Its sentinel is readable once its descriptors are closed, the moment its pipe
    gives EOF; ``is_alive()`` waits for the exit status, which can come a little
    later (then a close would wait for ever on the live workers' pipes).
    """
    if not process.is_alive():
        return True
    return bool(multiprocessing.connection.wait([process.sentinel], timeout=0))
