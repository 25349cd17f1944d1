"""Parent side of vecpool's vector env: :class:`AsyncVectorEnv`."""

from __future__ import annotations

import atexit
import contextlib
import inspect
import math
import multiprocessing
import os
import pickle
import select
import signal
import sys
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from copy import deepcopy
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import cloudpickle
import numpy as np
import numpy.typing as npt
from gymnasium import Env, Space, logger
from gymnasium.error import CustomSpaceError as GymCustomSpaceError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState, _async_worker
from gymnasium.vector.utils import (
    CloudpickleWrapper,
    batch_differing_spaces,
    batch_space,
    clear_mpi_env_vars,
    concatenate,
    create_empty_array,
    create_shared_memory,
    iterate,
    read_from_shared_memory,
)

from vecpool.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    RemoteTraceback,
    VecPoolError,
    VecPoolWarning,
    WorkerCrashedError,
)
from vecpool.shared_memory import Layout, SharedBlock, cut
from vecpool.spaces import (
    copy_tree,
    flatten_batch,
    is_native,
    is_native_leaf,
    leaves,
    make_views,
    take_rows,
)
from vecpool.worker import (
    STEP,
    STEP_SOME,
    Channel,
    Command,
    ErrorRecord,
    Reply,
    WorkerConfig,
    run_worker,
    spin_until_ready,
)

__all__ = ["AsyncState", "AsyncVectorEnv"]

_RESERVED_CALLS = ("reset", "step", "close", "_setattr", "_check_spaces")
_LIVE_ENVS: weakref.WeakSet[AsyncVectorEnv] = weakref.WeakSet()


class _EnvFns:
    """Picklable (by cloudpickle) list of env constructors for one worker."""

    def __init__(self, env_fns: list[Callable[[], Env[Any, Any]]]) -> None:
        self.env_fns = env_fns

    def __call__(self) -> list[Callable[[], Env[Any, Any]]]:
        return self.env_fns

    def __getstate__(self) -> bytes:
        return bytes(cloudpickle.dumps(self.env_fns))

    def __setstate__(self, state: bytes) -> None:
        self.env_fns = pickle.loads(state)


class _Link:
    """Parent-side handle of one vecpool worker process."""

    def __init__(
        self,
        index: int,
        env_indices: range,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
    ) -> None:
        self.index = index
        self.env_indices = env_indices
        self.process = process
        self.conn = conn
        self.channel = Channel(conn.fileno())
        self.sentinel: int = process.sentinel
        self.stale = 0  # replies still owed for calls that timed out
        self.batches: deque[list[int]] = deque()  # env ids of `send`s in flight

    def send_step(
        self, actions: list[Any] | None, buffer: int = 0, message: bytes = STEP
    ) -> None:
        if actions is None:
            self.channel.send(message)
        else:
            self.send(Command.STEP, (actions, None, buffer))

    def send_step_some(self, local: list[int], actions: list[Any] | None) -> None:
        if actions is None:
            self.channel.send(STEP_SOME + np.asarray(local, np.uint16).tobytes())
        else:
            self.send(Command.STEP, (actions, local, 0))

    def send_reset(
        self,
        seeds: list[Any],
        options: dict[str, Any] | None,
        flags: list[bool],
        buffer: int = 0,
    ) -> None:
        self.send(Command.RESET, (seeds, options, flags, buffer))

    def send_call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.send(Command.CALL, (name, args, kwargs))

    def send_set_attr(self, name: str, values: list[Any]) -> None:
        self.send(Command.SET_ATTR, (name, values))

    def send_close(self) -> None:
        self.send(Command.CLOSE, None)

    def send(self, command: Command, payload: Any) -> None:
        try:
            data = pickle.dumps((command, payload), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - e.g. a lambda in `call` arguments
            data = bytes(
                cloudpickle.dumps((command, payload), protocol=pickle.HIGHEST_PROTOCOL)
            )
        self.channel.send(data)

    def has_message(self) -> bool:
        return self.channel.has_message()

    def poll(self) -> bool:
        """Whether a reply (or EOF) can be read now."""
        return self.channel.has_message() or self.conn.poll()

    def recv(self) -> Reply | None:
        data = self.channel.recv()
        if not data:
            return None
        reply: Reply = pickle.loads(data)
        return reply


class _GymLink(_Link):
    """Handle of a worker that speaks Gymnasium's protocol (a custom ``worker=``)."""

    def __init__(
        self,
        index: int,
        env_indices: range,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
        error_queue: Any,
        by_pipe: bool,
    ) -> None:
        super().__init__(index, env_indices, process, conn)
        self.error_queue = error_queue
        self.by_pipe = by_pipe
        self.pending: deque[str] = deque()

    def _send_gym(self, kind: str, message: tuple[str, Any]) -> None:
        self.conn.send(message)
        self.pending.append(kind)

    def send_step(
        self,
        actions: list[Any] | None,
        buffer: int = 0,  # noqa: ARG002 - Gymnasium's workers have one buffer
        message: bytes = STEP,  # noqa: ARG002 - and speak their own protocol
    ) -> None:
        assert actions is not None
        self._send_gym("step", ("step", actions[0]))

    def send_reset(
        self,
        seeds: list[Any],
        options: dict[str, Any] | None,
        flags: list[bool],
        buffer: int = 0,  # noqa: ARG002 - Gymnasium's workers have one buffer
    ) -> None:
        if flags[0]:
            self._send_gym("reset", ("reset", {"seed": seeds[0], "options": options}))
        else:
            self._send_gym("reset", ("reset-noop", None))

    def send_call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self._send_gym("call", ("_call", (name, args, kwargs)))

    def send_set_attr(self, name: str, values: list[Any]) -> None:
        self._send_gym("none", ("_setattr", (name, values[0])))

    def send_close(self) -> None:
        self._send_gym("none", ("close", None))

    def send_check_spaces(self, data: tuple[Any, Any, Any]) -> None:
        self._send_gym("call", ("_check_spaces", data))

    def recv(self) -> Reply | None:
        kind = self.pending.popleft() if self.pending else "none"
        data, success = self.conn.recv()
        index = self.env_indices[0]
        if not success:
            env_index, exc_type, value, trace = self.error_queue.get()
            return Reply(
                errors=[ErrorRecord(env_index, None, exc_type, str(value), trace)]
            )
        if kind == "step":
            obs, reward, terminated, truncated, info = data
            return Reply(
                infos=[(index, info)] if info else None,
                observations=[obs] if self.by_pipe else None,
                step_values=[(index, reward, terminated, truncated)],
            )
        if kind == "reset":
            obs, info = data
            return Reply(
                infos=[(index, info)] if info else None,
                observations=[obs] if self.by_pipe else None,
            )
        if kind == "call":
            return Reply(results=[data])
        return None


class _BatchInfos:
    """Merges infos with Gymnasium's rules into arrays of a batch's length."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def _add_info(
        self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int
    ) -> dict[str, Any]:
        merged: dict[str, Any] = VectorEnv._add_info(
            self,  # type: ignore[arg-type]  # duck-typed: it only reads num_envs
            vector_infos,
            env_info,
            env_num,
        )
        return merged


def _poll_set(links: list[_Link]) -> tuple[select.poll, dict[int, tuple[_Link, bool]]]:
    """A poll set over the links' pipes and process sentinels."""
    poller = select.poll()
    watched: dict[int, tuple[_Link, bool]] = {}
    for link in links:
        for fd, is_sentinel in ((link.conn.fileno(), False), (link.sentinel, True)):
            watched[fd] = (link, is_sentinel)
            poller.register(fd, select.POLLIN)
    return poller, watched


def _split(num_envs: int, num_workers: int) -> list[range]:
    """Contiguous slices of ``range(num_envs)``, sizes differing by at most one."""
    base, extra = divmod(num_envs, num_workers)
    slices, start = [], 0
    for worker in range(num_workers):
        stop = start + base + (1 if worker < extra else 0)
        slices.append(range(start, stop))
        start = stop
    return slices


def _shutdown(
    processes: list[multiprocessing.process.BaseProcess], conns: list[Connection]
) -> None:
    """Terminate and reap worker processes; close pipes. Safe to call twice."""
    for process in processes:
        with contextlib.suppress(Exception):
            if process.is_alive():
                process.terminate()
    deadline = time.monotonic() + 2.0
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)
    for conn in conns:
        with contextlib.suppress(Exception):
            conn.close()


@atexit.register
def _close_all_at_exit() -> None:
    """Close every live vector env before ``multiprocessing`` joins its children.

    Registered after ``multiprocessing.util`` (imported above), so it runs first:
    otherwise non-daemonic workers waiting for commands would block interpreter exit.
    """
    for env in list(_LIVE_ENVS):
        with contextlib.suppress(Exception):
            env.close(terminate=True)


def _available_cpus() -> int:
    """CPUs this process may run on (affinity-aware where the OS tells)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


_OBS_BUFFERS = 4  # observation buffers with copy=True: 3 handed out, 1 scratch
_OBS_BUFFERS_MAX_BYTES = 64 * 2**20  # bigger observation batches: one buffer, copied
_SPIN_BUDGET = 0.002  # seconds to poll before blocking
_SPIN_MAX_WAIT = 0.00025  # "auto": the parent spins while steps return within this
_WAIT_STRATEGIES = ("auto", "spin", "block")


def _batch_nbytes(space: Space[Any], num_envs: int) -> int:
    """Bytes of one batch of observations of a native ``space``."""
    return num_envs * sum(
        dtype.itemsize * math.prod(shape) for dtype, shape in leaves(space)
    )


def _check_wait_strategy(value: object) -> str:
    """Validate ``wait_strategy``."""
    if value not in _WAIT_STRATEGIES:
        msg = f"`wait_strategy` must be one of {_WAIT_STRATEGIES}, got {value!r}."
        raise ValueError(msg)
    return str(value)


def _check_max_concurrency(value: object) -> int | None:
    """Validate ``max_concurrency`` with Gymnasium's messages."""
    if value is None:
        return None
    if not isinstance(value, (int, np.integer)):
        msg = f"`max_concurrency` must be an integer or None, got {type(value)}."
        raise ValueError(msg)
    if value < 1:
        msg = f"`max_concurrency` must be a positive or None, got {value}."
        raise ValueError(msg)
    return int(value)


_STARTING_WORKERS = [0]  # > 0 while vecpool itself forks its workers


def _retire_held_buffers() -> None:
    """Before a fork: take observation buffers still in use out of rotation.

    A forked child shares the shared-memory buffers instead of copying them, so an
    observation array it inherited would change when the parent reuses the buffer.
    vecpool's own workers never read those buffers, so their forks don't count.
    """
    if _STARTING_WORKERS[0]:
        return
    for env in list(_LIVE_ENVS):
        with contextlib.suppress(Exception):
            env._retire_held_obs_buffers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_retire_held_buffers)


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "an unknown exit code"
    if exitcode < 0:
        try:
            return f"exit code {exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"exit code {exitcode}"
    return f"exit code {exitcode}"


class AsyncVectorEnv(VectorEnv[Any, Any, npt.NDArray[Any]]):
    """Vectorized environment that runs sub-environments in worker processes.

    A drop-in replacement for :class:`gymnasium.vector.AsyncVectorEnv`: same
    constructor, methods, errors and results. Underneath, each worker process hosts a
    contiguous slice of the sub-environments, and every per-step array (actions,
    observations, rewards, terminations, truncations) lives in one shared-memory
    block, so a step costs one tiny message per worker and no pickling unless an env
    returns a non-empty info.

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
    shared_memory: bool
    copy: bool
    context: str | None
    daemon: bool
    worker: Callable[..., None] | None
    observation_mode: str | Space[Any] | tuple[Space[Any], Space[Any]]
    autoreset_mode: AutoresetMode
    max_concurrency: int | None
    num_workers: int
    wait_strategy: str
    batch_size: int | None
    num_envs: int
    metadata: dict[str, Any]
    render_mode: str | None
    single_action_space: Space[Any]
    action_space: Space[Any]
    single_observation_space: Space[Any]
    observation_space: Space[Any]
    observations: Any
    processes: list[multiprocessing.process.BaseProcess]
    parent_pipes: list[Connection]

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env[Any, Any]]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable[..., None] | None = None,
        observation_mode: str | Space[Any] | tuple[Space[Any], Space[Any]] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        num_workers: int | None = None,
        wait_strategy: str = "auto",
        batch_size: int | None = None,
    ) -> None:
        """Start the workers and create the sub-environments.

        Args:
            env_fns: Functions that create the environments.
            shared_memory: If ``True``, observations come back through shared memory;
                if ``False``, they are pickled through the pipes.
            copy: If ``True``, :meth:`reset` and :meth:`step` return copies of the
                observations; if ``False``, views that the next call overwrites.
            context: ``multiprocessing`` start method (``"fork"``, ``"forkserver"``,
                ``"spawn"``); ``None`` uses the default.
            daemon: If ``True``, workers are daemonic (they cannot start children).
            worker: A custom worker with Gymnasium's 8-argument signature. It keeps
                Gymnasium's one-env-per-process protocol (``num_workers`` must then be
                ``None`` or ``num_envs``).
            observation_mode: ``"same"``, ``"different"`` or a tuple
                ``(observation_space, single_observation_space)``.
            autoreset_mode: The autoreset mode (see ``gymnasium.vector.AutoresetMode``).
            max_concurrency: At most this many sub-environments execute ``reset`` or
                ``step`` at once; ``None`` for no limit.
            num_workers: Number of worker processes; the envs are split into that many
                contiguous slices. Default: ``min(num_envs, available CPUs,
                max_concurrency or num_envs)``.
            wait_strategy: How the parent and the workers wait for each other:
                ``"spin"`` polls (yielding the CPU between polls) for up to 2 ms
                before blocking, which skips the cost of waking a blocked process;
                ``"block"`` always blocks on the pipes; ``"auto"`` (default) spins
                only when there are no more workers than CPUs, and the parent spins
                only while steps come back within about a quarter millisecond.
            batch_size: Enables EnvPool-style asynchronous batches: :meth:`send`
                steps the given envs and :meth:`recv` returns the first
                ``batch_size`` envs to finish (``1 <= batch_size <= num_envs``).

        Raises:
            ValueError: On an invalid argument (named in the message), or a custom
                observation space with ``shared_memory=True``.
            RuntimeError: If the sub-environments' spaces do not match.
        """
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
        self.max_concurrency = _check_max_concurrency(max_concurrency)
        if worker is not None:
            try:
                inspect.signature(worker).bind(*(None,) * 8)
            except TypeError as e:
                msg = (
                    "A custom `worker` must accept 8 arguments. Got the signature "
                    f"{inspect.signature(worker)} which should match "
                    f"{inspect.signature(_async_worker)}."
                )
                raise ValueError(msg) from e

        self.num_envs = len(env_fns)
        if self.num_envs == 0:
            msg = "`env_fns` is empty: pass at least one function that creates an env."
            raise ValueError(msg)
        self.num_workers = self._resolve_num_workers(num_workers)

        self._state = AsyncState.DEFAULT
        self._broken: WorkerCrashedError | None = None
        self.processes = []
        self.parent_pipes = []
        self._links: list[_Link] = []
        self._link_of: dict[int, int] = {}  # env index -> worker index
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._warned_dtypes: set[tuple[np.dtype[Any], np.dtype[Any]]] = set()
        self._all_poll: tuple[select.poll, dict[int, tuple[_Link, bool]]] | None = None
        self.wait_strategy = _check_wait_strategy(wait_strategy)
        self.batch_size = self._check_batch_size(batch_size)
        self._in_flight = np.zeros(self.num_envs, dtype=np.bool_)
        self._ready: deque[int] = deque()
        self._ready_infos: dict[int, dict[str, Any]] = {}
        self._batch_spaces: dict[int, Space[Any]] = {}
        # Spinning (poll + sched_yield) skips the ~50-150 us it costs to wake a
        # blocked process; it pays only while no more processes run than cores.
        spins = self.wait_strategy == "spin" or (
            self.wait_strategy == "auto" and self.num_workers <= _available_cpus()
        )
        self._worker_spin = _SPIN_BUDGET if spins else 0.0
        self._spin = _SPIN_BUDGET if spins else 0.0
        self._spin_yield = True
        self._adaptive_spin = self.wait_strategy == "auto"
        self._wait_ema = 0.0  # seconds the parent waits for a step, smoothed

        dummy_env = env_fns[0]()
        self.metadata = dict(dummy_env.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = dummy_env.render_mode
        self.single_action_space = dummy_env.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        try:
            self._init_observation_spaces(dummy_env)
        finally:
            dummy_env.close()
            del dummy_env

        ctx = multiprocessing.get_context(context)
        self._setup_buffers(ctx)
        _LIVE_ENVS.add(self)
        try:
            self._start_workers(ctx)
            self._check_spaces()
        except BaseException:
            self.close(terminate=True)
            raise

    # -- construction ------------------------------------------------------------------

    def _resolve_num_workers(self, num_workers: object) -> int:
        if self.worker is not None:
            if num_workers not in (None, self.num_envs):
                msg = (
                    f"`num_workers={num_workers}` cannot be combined with a custom "
                    "`worker`, which hosts one env per process: leave `num_workers` "
                    f"unset or set it to num_envs={self.num_envs}."
                )
                raise ValueError(msg)
            return self.num_envs
        if num_workers is None:
            return max(
                1,
                min(
                    self.num_envs,
                    _available_cpus(),
                    self.max_concurrency or self.num_envs,
                ),
            )
        if (
            isinstance(num_workers, bool)
            or not isinstance(num_workers, (int, np.integer))
            or not 1 <= num_workers <= self.num_envs
        ):
            msg = (
                "`num_workers` must be an integer between 1 and "
                f"num_envs={self.num_envs} (or None for the default), "
                f"got {num_workers!r}."
            )
            raise ValueError(msg)
        return int(num_workers)

    def _init_observation_spaces(self, dummy_env: Env[Any, Any]) -> None:
        mode: object = self.observation_mode
        if isinstance(mode, tuple) and len(mode) == 2:
            if not isinstance(mode[0], Space) or not isinstance(mode[1], Space):
                msg = (
                    "Expected both elements of observation_mode to be Spaces, got "
                    f"{type(mode[0])} and {type(mode[1])}"
                )
                raise TypeError(msg)
            self.observation_space, self.single_observation_space = mode
        elif mode == "same":
            self.single_observation_space = dummy_env.observation_space
            self.observation_space = batch_space(
                self.single_observation_space, self.num_envs
            )
        elif mode == "different":
            env_spaces = []
            for env_fn in self.env_fns:
                env = env_fn()
                env_spaces.append(env.observation_space)
                env.close()
            self.single_observation_space = env_spaces[0]
            self.observation_space = batch_differing_spaces(env_spaces)
        else:
            msg = (
                "Invalid `observation_mode`, expected: 'same' or 'different' or tuple "
                f"of single and batch observation space, actual got {mode}"
            )
            raise ValueError(msg)

    def _setup_buffers(self, ctx: Any) -> None:
        space = self.single_observation_space
        self._gym_obs_memory: Any = None
        if not self.shared_memory:
            self._obs_transport = "pipe"
        elif self.worker is None and is_native(space):
            self._obs_transport = "native"
        else:
            self._obs_transport = "gym"
            try:
                self._gym_obs_memory = create_shared_memory(
                    space, n=self.num_envs, ctx=ctx
                )
            except GymCustomSpaceError as e:
                msg = (
                    "Using `AsyncVector(..., shared_memory=True)` caused an error, you "
                    "can disable this feature with `shared_memory=False` however this "
                    "is slower."
                )
                raise ValueError(msg) from e
        native_actions = self.worker is None and is_native(self.single_action_space)
        # With copy=True, observations rotate through several buffers: a step's
        # observations are handed out as views of a buffer nobody else holds any
        # more (its reference count says so) instead of being copied; the last
        # buffer is scratch space, copied out when every other one is still held.
        buffers = (
            _OBS_BUFFERS
            if self._obs_transport == "native"
            and self.copy
            and self.batch_size is None
            and _batch_nbytes(space, self.num_envs) <= _OBS_BUFFERS_MAX_BYTES
            else 1
        )
        self._layout = Layout.build(
            self.num_envs,
            self.single_action_space if native_actions else None,
            space if self._obs_transport == "native" else None,
            buffers,
        )
        self._block = SharedBlock(self._layout.size, ctx)
        self._action_views = [self._block.view(f) for f in self._layout.actions]
        self._fast_action_view: npt.NDArray[Any] | None = (
            self._action_views[0]
            if len(self._action_views) == 1 and is_native_leaf(self.single_action_space)
            else None
        )
        self._rewards = self._block.view(self._layout.rewards)
        self._terminations = self._block.view(self._layout.terminations)
        self._truncations = self._block.view(self._layout.truncations)
        self._env_obs: list[Any] = [None] * self.num_envs
        self._obs_index = self._obs_next = 0  # buffer of the latest / pending obs
        self._obs_fields: list[tuple[Any, ...]] = []
        self._obs_owners: list[npt.NDArray[np.uint8]] = []
        self._obs_retired: list[bool] = []
        self._step_messages = [STEP + bytes([0])]
        if self._obs_transport == "native":
            per_buffer = len(self._layout.observations) // buffers
            self._obs_fields = [
                self._layout.observations[start : start + per_buffer]
                for start in range(0, len(self._layout.observations), per_buffer)
            ]
            self._obs_owners = [self._block.owner(f) for f in self._obs_fields]
            self._obs_retired = [False] * len(self._obs_owners)
            # references to an owner while nothing but this list holds it
            self._obs_free_refs = sys.getrefcount(self._obs_owners[-1])
            self._step_messages = [STEP + bytes([k]) for k in range(buffers)]
            self.observations = make_views(
                space, cut(self._obs_owners[0], self._obs_fields[0])
            )
        elif self._obs_transport == "gym":
            self.observations = read_from_shared_memory(
                space, self._gym_obs_memory, n=self.num_envs
            )
        else:
            self.observations = create_empty_array(space, n=self.num_envs, fn=np.zeros)

    def _start_workers(self, ctx: Any) -> None:
        semaphore = None
        if self.max_concurrency is not None and (
            self.worker is not None or self.max_concurrency < self.num_workers
        ):
            semaphore = ctx.BoundedSemaphore(self.max_concurrency)
        error_queue = ctx.Queue() if self.worker is not None else None
        self.error_queue = error_queue
        # Registered before the first start: a failure half-way still reaps everything.
        self._finalizer = weakref.finalize(
            self, _shutdown, self.processes, self.parent_pipes
        )
        with clear_mpi_env_vars():
            for index, env_indices in enumerate(
                _split(self.num_envs, self.num_workers)
            ):
                parent_conn, child_conn = ctx.Pipe()
                if self.worker is not None:
                    args: tuple[Any, ...] = (
                        index,
                        CloudpickleWrapper(self.env_fns[index]),
                        child_conn,
                        parent_conn,
                        self._gym_obs_memory,
                        error_queue,
                        self.autoreset_mode,
                        semaphore,
                    )
                    target = self.worker
                else:
                    config = WorkerConfig(
                        index=index,
                        start=env_indices.start,
                        env_fns=_EnvFns([self.env_fns[i] for i in env_indices]),
                        block=self._block,
                        layout=self._layout,
                        action_space=self.single_action_space,
                        observation_space=self.single_observation_space,
                        obs_transport=self._obs_transport,
                        gym_obs_memory=self._gym_obs_memory,
                        autoreset_mode=self.autoreset_mode,
                        observation_mode=self.observation_mode,
                        check_spaces=(
                            self.single_observation_space,
                            self.single_action_space,
                        ),
                        semaphore=semaphore,
                        spin=self._worker_spin,
                        spin_yield=self._spin_yield,
                    )
                    args, target = (child_conn, parent_conn, config), run_worker
                process = ctx.Process(
                    target=target,
                    name=f"Worker<{type(self).__name__}>-{index}",
                    args=args,
                )
                process.daemon = self.daemon
                self.processes.append(process)
                self.parent_pipes.append(parent_conn)
                _STARTING_WORKERS[0] += 1
                try:
                    process.start()
                finally:
                    _STARTING_WORKERS[0] -= 1
                    child_conn.close()
                link: _Link
                if self.worker is not None:
                    link = _GymLink(
                        index,
                        env_indices,
                        process,
                        parent_conn,
                        error_queue,
                        self._obs_transport == "pipe",
                    )
                else:
                    link = _Link(index, env_indices, process, parent_conn)
                self._links.append(link)
                for env_index in env_indices:
                    self._link_of[env_index] = index

    def _check_spaces(self) -> None:
        for link in self._links:
            if isinstance(link, _GymLink):
                link.send_check_spaces(
                    (
                        self.observation_mode,
                        self.single_observation_space,
                        self.single_action_space,
                    )
                )
        replies = self._gather("__init__", None)
        self._raise_if_errors(replies)
        checks = [check for reply in replies if reply for check in reply.results or []]
        same_observation_spaces, same_action_spaces = zip(*checks, strict=True)
        if not all(same_observation_spaces):
            if self.observation_mode == "same":
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
                f"`{self.single_action_space}`. In order to batch actions, the action "
                "spaces from all environments must be equal."
            )
            raise RuntimeError(msg)

    # -- seeding -----------------------------------------------------------------------

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Returns a tuple of np_random seeds for all the wrapped envs."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # read-only, as in Gymnasium's AsyncVectorEnv
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Returns the tuple of the numpy random generators of the wrapped envs."""
        return self.get_attr("np_random")

    # -- reset -------------------------------------------------------------------------

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
            options = dict(options)  # never mutate the caller's dict
            flags = self._check_reset_mask(options.pop("reset_mask"))
        buffer = self._obs_next = self._choose_obs_buffer()
        self._send_all(
            "reset",
            lambda link: link.send_reset(
                seeds[link.env_indices.start : link.env_indices.stop],
                options,
                flags[link.env_indices.start : link.env_indices.stop],
                buffer,
            ),
        )
        self._state = AsyncState.WAITING_RESET

    def _check_reset_mask(self, reset_mask: Any) -> list[bool]:
        if not isinstance(reset_mask, np.ndarray):
            msg = (
                f"`options['reset_mask']` must be a numpy array, got {type(reset_mask)}"
            )
            raise TypeError(msg)
        if reset_mask.shape != (self.num_envs,):
            msg = (
                f"`options['reset_mask']` must have shape `({self.num_envs},)`, got "
                f"{reset_mask.shape}"
            )
            raise ValueError(msg)
        if reset_mask.dtype != np.bool_:
            msg = (
                "`options['reset_mask']` must have `dtype=np.bool_`, got "
                f"{reset_mask.dtype}"
            )
            raise TypeError(msg)
        if not np.any(reset_mask):
            msg = (
                "`options['reset_mask']` must contain a boolean array with at least "
                f"one True value, got reset_mask={reset_mask}"
            )
            raise ValueError(msg)
        return [bool(flag) for flag in reset_mask]

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
        replies = self._gather("reset", timeout)
        infos = self._collect(replies)
        self._state = AsyncState.DEFAULT
        self._obs_index = self._obs_next
        return self._read_observations(), infos

    # -- step --------------------------------------------------------------------------

    def step(
        self, actions: Any
    ) -> tuple[
        Any,
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        """Step every sub-environment with its action.

        Args:
            actions: An element of :attr:`action_space` (one action per env).

        Returns:
            Batched ``(observations, rewards, terminations, truncations, infos)``.
        """
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Check the actions, place them in shared memory and wake the workers.

        Args:
            actions: An element of :attr:`action_space` (one action per env).

        Raises:
            ClosedEnvironmentError: If the vector env was closed.
            AlreadyPendingCallError: If another call is pending.
            ValueError: If the actions do not hold one action of the right shape per
                env; nothing is sent then.
        """
        self._assert_is_running()
        self._assert_idle("step_async")
        view = self._fast_action_view
        if (
            view is not None
            and type(actions) is np.ndarray
            and actions.dtype == view.dtype
            and actions.shape == view.shape
            and not self._any_stale()
        ):
            # the hot path: one copy into shared memory, a 2-byte message per worker
            view[...] = actions
            per_env = None
        else:
            per_env = self._place_actions(actions)
        buffer = self._obs_next = self._choose_obs_buffer()
        message = self._step_messages[buffer]
        if per_env is None:
            self._send_all("step", lambda link: link.send_step(None, buffer, message))
        else:
            self._send_all(
                "step",
                lambda link: link.send_step(
                    per_env[link.env_indices.start : link.env_indices.stop], buffer
                ),
            )
        self._state = AsyncState.WAITING_STEP

    def _choose_obs_buffer(self) -> int:
        """A buffer for the next observations that nothing outside holds any more.

        With ``copy=True``, observations are handed out as views of one of several
        buffers in shared memory, so the next step may write only into a buffer
        whose views are all gone (its owner's reference count is back to its
        resting value). When every one is still held, the last buffer (never handed
        out) is used and copied out, as Gymnasium copies every time.
        """
        owners = self._obs_owners
        last = len(owners) - 1
        if last <= 0:
            return 0
        current, free, retired = self._obs_index, self._obs_free_refs, self._obs_retired
        for step in range(1, last + 1):
            candidate = (current + step) % last
            if (
                candidate != current
                and not retired[candidate]
                and sys.getrefcount(owners[candidate]) == free
            ):
                return candidate
        return last

    def _retire_held_obs_buffers(self) -> None:
        """Stop rotating through buffers something holds (see the fork hook)."""
        owners, free = self._obs_owners, self._obs_free_refs
        for index in range(len(owners) - 1):
            if sys.getrefcount(owners[index]) != free:
                self._obs_retired[index] = True

    def _place_actions(
        self, actions: Any, ids: npt.NDArray[np.int64] | None = None
    ) -> list[Any] | None:
        """Write actions into shared memory, or return them per env for the pipes.

        ``ids`` names the envs of a ``send`` batch (default: every env). A batch
        whose every leaf is a numpy array of exactly the batched action space's
        shape and dtype goes through shared memory (checked with a few attribute
        reads). Anything else Gymnasium accepts (lists, other dtypes, scalars
        broadcastable to the action shape) travels unchanged through the pipes, so
        each env receives exactly what Gymnasium would hand it. The count is always
        checked here, before anything is sent. After a timeout, a worker may still
        be reading the previous actions, so then everything goes by pipe.
        """
        count = self.num_envs if ids is None else ids.size
        views = self._action_views
        if views and not self._any_stale():
            if (
                ids is None
                and len(views) == 1
                and is_native_leaf(self.single_action_space)
            ):
                leaves: list[Any] | None = [actions]
            else:
                try:
                    leaves = flatten_batch(self.single_action_space, actions, count)
                except ValueError:
                    leaves = None
            if leaves is not None and all(
                type(leaf) is np.ndarray
                and leaf.dtype == view.dtype
                and leaf.shape == (count, *view.shape[1:])
                for leaf, view in zip(leaves, views, strict=True)
            ):
                for leaf, view in zip(leaves, views, strict=True):
                    if ids is None:
                        view[...] = leaf
                    else:
                        view[ids] = leaf
                return None
            if leaves is not None:
                self._warn_slow_actions(leaves, views)
        per_env = list(iterate(self._batched_action_space(count), actions))
        if len(per_env) != count:
            what = (
                f"sub-environment (num_envs={count})"
                if ids is None
                else f"id in `env_ids` ({count})"
            )
            msg = f"`actions` must hold one action per {what}, got {len(per_env)}."
            raise ValueError(msg)
        shape = getattr(self.single_action_space, "shape", None)
        if is_native_leaf(self.single_action_space) and shape is not None:
            for index, action in enumerate(per_env):
                try:
                    fits = np.broadcast_shapes(np.shape(action), shape) == shape
                except ValueError:
                    fits = False
                if not fits:
                    msg = (
                        f"`actions[{index}]` has shape {np.shape(action)}, which does "
                        f"not fit the single action space's shape {shape}."
                    )
                    raise ValueError(msg)
        return per_env

    def _batched_action_space(self, count: int) -> Space[Any]:
        """The action space batched ``count`` times (cached)."""
        if count == self.num_envs:
            return self.action_space
        space = self._batch_spaces.get(count)
        if space is None:
            space = self._batch_spaces[count] = batch_space(
                self.single_action_space, count
            )
        return space

    def _warn_slow_actions(
        self, leaves: list[Any], views: list[npt.NDArray[Any]]
    ) -> None:
        """Warn once per dtype when an action array misses the shared-memory path."""
        for leaf, view in zip(leaves, views, strict=True):
            if (
                type(leaf) is np.ndarray
                and leaf.shape == view.shape
                and leaf.dtype != view.dtype
                and (leaf.dtype, view.dtype) not in self._warned_dtypes
            ):
                self._warned_dtypes.add((leaf.dtype, view.dtype))
                warnings.warn(
                    f"`actions` of dtype {leaf.dtype} do not match the action space's "
                    f"dtype {view.dtype}, so they travel pickled through the pipes "
                    "(each env receives exactly what Gymnasium would give it). Pass "
                    f"`actions.astype(np.{view.dtype})` for the shared-memory fast "
                    "path.",
                    VecPoolWarning,
                    stacklevel=4,
                )

    def _poll_all(self) -> tuple[select.poll, dict[int, tuple[_Link, bool]]]:
        if self._all_poll is None:
            self._all_poll = _poll_set(self._links)
        return self._all_poll

    def _any_stale(self) -> bool:
        return any(link.stale for link in self._links)

    def _send_all(self, what: str, send: Callable[[_Link], None]) -> None:
        """Send one command to every worker; a dead one raises WorkerCrashedError."""
        sent: list[_Link] = []
        for link in self._links:
            try:
                send(link)
            except OSError:
                for other in sent:
                    other.stale += 1  # they will reply to a command nobody awaits
                self._crashed(link, what)
            sent.append(link)

    def step_wait(
        self, timeout: float | None = None
    ) -> tuple[
        Any,
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
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
        self._assert_is_running()
        if self._state != AsyncState.WAITING_STEP:
            msg = "Calling `step_wait` without any prior call to `step_async`."
            raise NoAsyncCallError(msg, AsyncState.WAITING_STEP.value)
        if self._adaptive_spin and self._worker_spin:
            started = time.perf_counter()
            self._spin = 0.0 if self._wait_ema > _SPIN_MAX_WAIT else _SPIN_BUDGET
            replies = self._gather("step", timeout)
            waited = time.perf_counter() - started
            self._wait_ema += 0.1 * (waited - self._wait_ema)
        else:
            replies = self._gather("step", timeout)
        infos = self._collect(replies)
        self._state = AsyncState.DEFAULT
        self._obs_index = self._obs_next
        return (
            self._read_observations(),
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

    # -- call / attributes -------------------------------------------------------------

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
        if name in _RESERVED_CALLS:
            msg = (
                f"Trying to call function `{name}` with `call`, use `{name}` directly "
                "instead."
            )
            raise ValueError(msg)
        self._send_all("call", lambda link: link.send_call(name, args, kwargs))
        self._state = AsyncState.WAITING_CALL

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
        replies = self._gather("call", timeout)
        self._raise_if_errors(replies)
        self._state = AsyncState.DEFAULT
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
                "Values must be a list or tuple with length equal to the number of "
                f"environments. Got `{len(values)}` values for {self.num_envs} "
                "environments."
            )
            raise ValueError(msg)
        self._assert_idle("set_attr")
        per_env = list(values)
        self._send_all(
            "set_attr",
            lambda link: link.send_set_attr(
                name, per_env[link.env_indices.start : link.env_indices.stop]
            ),
        )
        self._raise_if_errors(self._gather("set_attr", None))

    # -- env state (planning) ----------------------------------------------------------

    def get_states(self, indices: Sequence[int] | None = None) -> list[Any]:
        """The state of each sub-environment, from its own ``get_state()``.

        The envs must implement ``get_state()`` and ``set_state(state)`` (looked up
        on ``env.unwrapped``); states must be picklable. Each state comes wrapped in
        a :class:`vecpool.EnvState` that also records whether a ``NEXT_STEP``
        autoreset was pending, so :meth:`set_states` restores exactly; its
        ``.state`` is the env's own state.

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
        order, groups = self._group_indices(indices, "get_states")
        replies = self._state_call(
            "get_states", groups, lambda local, _: (Command.GET_STATES, local)
        )
        return self._ungroup(order, groups, replies)

    def set_states(
        self, states: Sequence[Any], indices: Sequence[int] | None = None
    ) -> None:
        """Restore sub-environments to states from :meth:`get_states`.

        An :class:`vecpool.EnvState` restores the pending-autoreset flag too; a bare
        env state (e.g. built by hand) is taken as mid-episode.

        Args:
            states: One state per index.
            indices: Which sub-environments (default: all).

        Raises:
            AttributeError: If an env lacks ``get_state``/``set_state``.
            ValueError: If the number of states does not match the indices.
        """
        order, groups = self._group_indices(indices, "set_states")
        states = self._check_count("states", states, len(order))
        self._state_call(
            "set_states",
            groups,
            lambda local, positions: (
                Command.SET_STATES,
                (local, [states[p] for p in positions]),
            ),
        )

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
        at an episode end (no autoreset), and reports its new state. The envs are
        left at their new states, as after ``set_states(new_states)``: call
        :meth:`set_states` to go back (wrappers around this vector env, such as
        :class:`vecpool.ReplayPoolWrapper`, do not see these moves).

        Args:
            states: One state per index (from :meth:`get_states`).
            actions: One action per index (a batch of that many actions).
            dt: Repeats of each action (>= 1).
            indices: Which sub-environments (default: all).

        Returns:
            ``(new_states, observations, rewards, terminations, truncations,
            infos)``, batched over the indices in order.

        Raises:
            AttributeError: If an env lacks ``get_state``/``set_state``.
            ValueError: If counts do not match or ``dt < 1``.
        """
        given: object = dt
        if (
            isinstance(given, bool)
            or not isinstance(given, (int, np.integer))
            or dt < 1
        ):
            msg = f"`dt` must be an integer >= 1, got {dt!r}."
            raise ValueError(msg)
        order, groups = self._group_indices(indices, "step_from")
        states = self._check_count("states", states, len(order))
        space = self._batched_action_space(len(order))
        per_env = self._check_count(
            "actions", list(iterate(space, actions)), len(order)
        )
        replies = self._state_call(
            "step_from",
            groups,
            lambda local, positions: (
                Command.STEP_FROM,
                (
                    local,
                    [states[p] for p in positions],
                    [per_env[p] for p in positions],
                    int(dt),
                ),
            ),
        )
        results = self._ungroup(order, groups, replies)
        infos: dict[str, Any] = {}
        merger = _BatchInfos(len(order))
        for position, (_, _, _, _, _, info) in enumerate(results):
            if info:
                infos = merger._add_info(infos, info, position)
        out: Any = create_empty_array(self.single_observation_space, n=len(order))
        observations = concatenate(
            self.single_observation_space, [result[1] for result in results], out
        )
        return (
            [result[0] for result in results],
            observations,
            np.array([result[2] for result in results], dtype=np.float64),
            np.array([result[3] for result in results], dtype=np.bool_),
            np.array([result[4] for result in results], dtype=np.bool_),
            infos,
        )

    def _check_count(self, name: str, values: Sequence[Any], count: int) -> list[Any]:
        values = list(values)
        if len(values) != count:
            msg = (
                f"`{name}` must hold one entry per index ({count}), got {len(values)}."
            )
            raise ValueError(msg)
        return values

    def _group_indices(
        self, indices: Sequence[int] | None, method: str
    ) -> tuple[list[int], dict[int, tuple[list[int], list[int]]]]:
        """Validate indices; group them by worker as (positions, local indices)."""
        self._assert_is_running()
        if self.worker is not None:
            msg = f"`{method}` is not available with a custom `worker`."
            raise ValueError(msg)
        self._assert_idle(method)
        order: list[Any] = (
            list(range(self.num_envs)) if indices is None else list(indices)
        )
        for index in order:
            if (
                isinstance(index, bool)
                or not isinstance(index, (int, np.integer))
                or not 0 <= index < self.num_envs
            ):
                msg = (
                    f"`indices` must hold ints in [0, {self.num_envs}), got {index!r}."
                )
                raise ValueError(msg)
        groups: dict[int, tuple[list[int], list[int]]] = {}
        for position, index in enumerate(order):
            link = self._link_of[int(index)]
            positions, local = groups.setdefault(link, ([], []))
            positions.append(position)
            local.append(int(index) - self._links[link].env_indices.start)
        return order, groups

    def _state_call(
        self,
        what: str,
        groups: dict[int, tuple[list[int], list[int]]],
        message: Callable[[list[int], list[int]], tuple[Command, Any]],
    ) -> list[Reply | None]:
        links = [self._links[index] for index in groups]
        for link in links:
            positions, local = groups[link.index]
            command, payload = message(local, positions)
            try:
                link.send(command, payload)
            except OSError:
                self._crashed(link, what)
        replies = self._gather(what, None, links)
        self._raise_if_errors(replies, log=False)  # not Gymnasium's API: no log lines
        return replies

    def _ungroup(
        self,
        order: list[int],
        groups: dict[int, tuple[list[int], list[int]]],
        replies: list[Reply | None],
    ) -> list[Any]:
        results: list[Any] = [None] * len(order)
        for link_index, (positions, _) in groups.items():
            reply = replies[link_index]
            values = reply.results if reply is not None and reply.results else []
            for position, value in zip(positions, values, strict=True):
                results[position] = value
        return results

    # -- close -------------------------------------------------------------------------

    def close_extras(
        self, timeout: float | None = None, terminate: bool = False
    ) -> None:
        """Close the sub-environments and release the workers and shared memory.

        Args:
            timeout: Seconds to wait for a pending call and for the envs to close;
                after that the workers are terminated. ``None`` waits.
            terminate: If ``True``, terminate the workers at once.
        """
        _LIVE_ENVS.discard(self)
        timeout = 0 if terminate else timeout
        if self._state != AsyncState.DEFAULT:
            logger.warn(
                "Calling `close` while waiting for a pending call to "
                f"`{self._state.value}` to complete."
            )
            try:
                getattr(self, f"{self._state.value}_wait")(timeout)
            except multiprocessing.TimeoutError:
                terminate = True
            except Exception:  # noqa: BLE001 - closing anyway; the error was logged
                terminate = terminate or self._broken is not None
        self._state = AsyncState.DEFAULT
        for link in self._links:  # replies to `send`s nobody will `recv`
            link.stale += len(link.batches)
            link.batches.clear()
        self._in_flight[:] = False
        self._ready.clear()
        if not terminate:
            # Workers still alive close their envs; a crashed one is simply reaped.
            live = [link for link in self._links if link.process.is_alive()]
            try:
                for link in live:
                    link.send_close()
                self._gather("close", timeout, live)
            except Exception:  # noqa: BLE001 - fall back to terminating the workers
                terminate = True
        if not terminate:
            grace = 5.0 if timeout is None else timeout
            deadline = time.monotonic() + grace
            for process in self.processes:
                process.join(max(0.0, deadline - time.monotonic()))
        if self._finalizer is not None:
            self._finalizer()  # terminates whatever is left, reaps, closes pipes
        # Drop every view of the shared block so its memory goes now, not with `self`
        # (views handed out with copy=False keep their own reference, as they must).
        if self._obs_transport == "native":
            self.observations = copy_tree(self.observations)
            self._obs_owners = []
        self._action_views = []
        self._fast_action_view = None
        self._rewards = self._rewards.copy()
        self._terminations = self._terminations.copy()
        self._truncations = self._truncations.copy()
        self._block = None  # type: ignore[assignment]

    # -- EnvPool-style asynchronous batches --------------------------------------------

    def _check_batch_size(self, batch_size: object) -> int | None:
        if batch_size is None:
            return None
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, (int, np.integer))
            or not 1 <= batch_size <= self.num_envs
        ):
            msg = (
                "`batch_size` must be an integer between 1 and "
                f"num_envs={self.num_envs} (or None), got {batch_size!r}."
            )
            raise ValueError(msg)
        if self.worker is not None:
            msg = "`batch_size` cannot be combined with a custom `worker`."
            raise ValueError(msg)
        return int(batch_size)

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
            >>> obs.shape, sorted(infos["env_id"].tolist()) in ([0, 1], [2, 3])
            ((2, 4), True)
            >>> envs.close()

        Args:
            actions: One action per id in ``env_ids`` (a batch of that many actions).
            env_ids: Indices of the envs to step; default: every env.

        Raises:
            ValueError: If ``batch_size`` was not set, if an id is out of range,
                repeated or still in flight, or if the actions do not match the ids.
            AlreadyPendingCallError: If a ``*_async`` call is pending.
        """
        self._assert_is_running()
        if self.batch_size is None:
            msg = (
                "`send`/`recv` need asynchronous batches: create the vector env with "
                "`batch_size=k`."
            )
            raise ValueError(msg)
        self._assert_idle("send", batches=False)
        ids = self._check_env_ids(env_ids)
        per_env = self._place_actions(actions, ids)
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        for link in self._links:
            lo, hi = np.searchsorted(
                sorted_ids, [link.env_indices.start, link.env_indices.stop]
            )
            if lo == hi:
                continue
            chosen = sorted_ids[lo:hi]
            local = (chosen - link.env_indices.start).tolist()
            link_actions = (
                None if per_env is None else [per_env[i] for i in order[lo:hi]]
            )
            try:
                link.send_step_some(local, link_actions)
            except OSError:
                self._crashed(link, "send")
            link.batches.append(chosen.tolist())
            self._in_flight[chosen] = True

    def _check_env_ids(self, env_ids: Any) -> npt.NDArray[np.int64]:
        ids = (
            np.arange(self.num_envs, dtype=np.int64)
            if env_ids is None
            else np.asarray(env_ids)
        )
        if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu":
            msg = f"`env_ids` must be a non-empty 1-D array of ints, got {env_ids!r}."
            raise ValueError(msg)
        ids = ids.astype(np.int64, copy=False)
        if ids.min() < 0 or ids.max() >= self.num_envs:
            msg = f"`env_ids` must lie in [0, {self.num_envs}), got {ids.tolist()}."
            raise ValueError(msg)
        if np.unique(ids).size != ids.size:
            msg = f"`env_ids` must not repeat an id, got {ids.tolist()}."
            raise ValueError(msg)
        busy = ids[self._in_flight[ids]]
        if busy.size:
            msg = (
                f"envs {busy.tolist()} are still in flight: `recv` them before "
                "sending them again."
            )
            raise ValueError(msg)
        waiting = sorted(set(ids.tolist()) & set(self._ready))
        if waiting:
            msg = (
                f"envs {waiting} have finished but `recv` has not returned them yet: "
                "`recv` them before sending them again."
            )
            raise ValueError(msg)
        return ids

    def recv(
        self, timeout: float | None = None
    ) -> tuple[
        Any,
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        """Return the first ``batch_size`` envs to finish the steps :meth:`send` sent.

        Results are batched like :meth:`step`'s but hold only those envs;
        ``infos["env_id"]`` (an int array) names them, in the order of the rows.
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
        self._assert_is_running()
        if self.batch_size is None:
            msg = (
                "`send`/`recv` need asynchronous batches: create the vector env with "
                "`batch_size=k`."
            )
            raise ValueError(msg)
        if not self._ready and not self._in_flight.any():
            msg = "Calling `recv` without any env in flight; call `send` first."
            raise NoAsyncCallError(msg, "recv")
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._ready) < self.batch_size and self._in_flight.any():
            self._receive_batches(deadline, timeout)
        count = min(self.batch_size, len(self._ready))
        ids = np.array([self._ready.popleft() for _ in range(count)], dtype=np.int64)
        infos: dict[str, Any] = {}
        merger = _BatchInfos(count)
        for position, index in enumerate(ids.tolist()):
            info = self._ready_infos.pop(index, None)
            if info:
                infos = merger._add_info(infos, info, position)
        infos["env_id"] = ids
        return (
            self._take_observations(ids),
            self._rewards[ids],
            self._terminations[ids],
            self._truncations[ids],
            infos,
        )

    def _receive_batches(self, deadline: float | None, timeout: float | None) -> None:
        """Wait until at least one worker answers a batch; record what finished."""
        busy = [link for link in self._links if link.batches]
        poller, watched = _poll_set(busy)
        events = [
            (link.conn.fileno(), select.POLLIN) for link in busy if link.has_message()
        ] or poller.poll(0)
        adaptive = self._adaptive_spin and bool(self._worker_spin)
        spin = self._spin
        if adaptive:  # as in step_wait: spin only while answers come quickly
            spin = 0.0 if self._wait_ema > _SPIN_MAX_WAIT else _SPIN_BUDGET
        started = time.perf_counter()
        if not events and spin > 0.0:
            events = spin_until_ready(poller, spin, self._spin_yield)
        if not events:
            if deadline is None:
                events = poller.poll()
            else:
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    events = poller.poll(max(1, math.ceil(remaining * 1000)))
        if not events:
            msg = f"The call to `recv` has timed out after {timeout} second(s)."
            raise multiprocessing.TimeoutError(msg)
        if adaptive:
            self._wait_ema += 0.1 * (time.perf_counter() - started - self._wait_ema)
        events.sort(key=lambda event: watched[event[0]][1])
        for fd, _ in events:
            link, is_sentinel = watched[fd]
            if is_sentinel:
                if not link.poll():
                    self._crashed(link, "recv")
                continue
            try:
                reply = link.recv()
            except (EOFError, OSError):
                self._crashed(link, "recv")
            if link.stale:
                link.stale -= 1
                continue
            done = link.batches.popleft()
            self._in_flight[done] = False
            if reply is not None and reply.errors:
                # the envs that stepped fine still come back from a later `recv`
                failed = {error.env_index for error in reply.errors}
                done = [index for index in done if index not in failed]
                for index, info in reply.infos or []:
                    if index not in failed:
                        self._ready_infos[index] = info
                self._ready.extend(done)
                self._raise_if_errors([reply])
            if reply is not None:
                if reply.observations is not None:
                    start = link.env_indices.start
                    self._env_obs[start : start + len(reply.observations)] = (
                        reply.observations
                    )
                for index, info in reply.infos or []:
                    self._ready_infos[index] = info
            self._ready.extend(done)

    def _take_observations(self, ids: npt.NDArray[np.int64]) -> Any:
        """A fresh batch holding the current observations of ``ids``."""
        if self._obs_transport == "native":
            return take_rows(self.observations, ids)
        items = (
            self._env_obs
            if self._obs_transport == "pipe"
            else list(iterate(self.observation_space, self.observations))
        )
        out: Any = create_empty_array(self.single_observation_space, n=ids.size)
        return concatenate(
            self.single_observation_space, [items[i] for i in ids.tolist()], out
        )

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
            raise AlreadyPendingCallError(msg, str(self._state.value))
        if batches and self.batch_size is not None:
            self._assert_no_batches(method)

    def _assert_no_batches(self, method: str) -> None:
        if self._in_flight.any() or self._ready:
            pending = sorted([*np.flatnonzero(self._in_flight).tolist(), *self._ready])
            msg = (
                f"Calling `{method}` while envs {pending} are in flight from `send` "
                "or waiting to be returned: `recv` them first."
            )
            raise AlreadyPendingCallError(msg, "recv")

    def _assert_is_running(self) -> None:
        if self.closed:
            name = type(self).__name__
            msg = f"Trying to operate on `{name}`, after a call to `close()`."
            raise ClosedEnvironmentError(msg)
        if self._broken is not None:
            error = self._broken
            msg = f"{error.args[0]} (raised earlier; this vector env is unusable)"
            raise WorkerCrashedError(
                msg, error.worker, error.env_indices, error.exitcode
            )

    def __del__(self) -> None:
        """On garbage collection, terminate the workers if not closed."""
        if not getattr(self, "closed", True) and hasattr(self, "_state"):
            with contextlib.suppress(Exception):
                self.close(terminate=True)

    # -- waiting and results -----------------------------------------------------------

    def _gather(
        self, what: str, timeout: float | None, links: list[_Link] | None = None
    ) -> list[Reply | None]:
        """Wait for one reply from every worker (or ``links``), on all at once.

        Dead workers are noticed through their process sentinels, and replies owed
        for earlier calls that timed out are discarded.
        """
        replies: list[Reply | None] = [None] * len(self._links)
        if links is None:
            # all workers: the poll set built once (fd -> (link, is_sentinel))
            links = self._links
            poller, watched = self._poll_all()
            persistent = True
        else:
            poller, watched = _poll_set(links)
            persistent = False
        pending = len(links)
        done = [False] * len(self._links)
        deadline = None if timeout is None else time.monotonic() + timeout
        spin = self._spin
        try:
            while pending:
                # replies already read in bulk come first (no system call)
                events = [
                    (link.conn.fileno(), select.POLLIN)
                    for link in links
                    if not done[link.index] and link.has_message()
                ] or poller.poll(0)
                if not events and spin > 0.0:
                    events = spin_until_ready(poller, spin, self._spin_yield)
                if not events:
                    if deadline is None:
                        events = poller.poll()
                    else:
                        remaining = deadline - time.monotonic()
                        if remaining > 0:
                            events = poller.poll(max(1, math.ceil(remaining * 1000)))
                if not events:
                    msg = (
                        f"The call to `{what}_wait` has timed out after {timeout} "
                        "second(s)."
                    )
                    raise multiprocessing.TimeoutError(msg)
                # read replies before judging deaths: a worker may answer, then exit
                events.sort(key=lambda event: watched[event[0]][1])
                for fd, _ in events:
                    if fd not in watched:
                        continue
                    link, is_sentinel = watched[fd]
                    if is_sentinel:
                        if done[link.index]:
                            # it answered, then exited (e.g. after reporting an env
                            # error at start-up): the next command will find out
                            poller.unregister(fd)
                            del watched[fd]
                        elif not link.poll():  # dead without an answer
                            self._crashed(link, what)
                        continue
                    if done[link.index]:
                        continue
                    try:
                        reply = link.recv()
                    except (EOFError, OSError):
                        self._crashed(link, what)
                    if link.stale:  # the answer to a call that timed out earlier
                        link.stale -= 1
                        continue
                    replies[link.index] = reply
                    done[link.index] = True
                    pending -= 1
                    if not persistent:
                        for fd_done in (link.conn.fileno(), link.sentinel):
                            poller.unregister(fd_done)
        except BaseException:
            # Timeout, crash, Ctrl-C, ...: whoever has not answered still owes a
            # reply, which the next call must discard rather than take for its own.
            for link in links:
                if not done[link.index]:
                    link.stale += 1
            self._state = AsyncState.DEFAULT
            raise
        return replies

    def _crashed(self, link: _Link, what: str) -> NoReturn:
        link.process.join(1.0)
        envs = link.env_indices
        hosted = (
            f"env {envs.start}"
            if len(envs) == 1
            else f"envs {envs.start}-{envs.stop - 1}"
        )
        msg = (
            f"Worker {link.index} (hosting {hosted}) died with "
            f"{_describe_exit(link.process.exitcode)} while running `{what}`. Its "
            "sub-environments are lost: call `close()` and create a new vector env."
        )
        error = WorkerCrashedError(msg, link.index, tuple(envs), link.process.exitcode)
        self._broken = error
        self._state = AsyncState.DEFAULT
        raise error

    def _raise_if_errors(
        self, replies: Iterable[Reply | None], *, log: bool = True
    ) -> None:
        errors = [
            error
            for reply in replies
            if reply and reply.errors
            for error in reply.errors
        ]
        if not errors:
            return
        for error in errors if log else ():
            logger.error(
                f"Received the following error from Worker-{error.env_index} - "
                "Shutting it down"
            )
            logger.error("%s", error.traceback)
        if log:  # Gymnasium's log lines, kept for its own API's errors
            logger.error("Raising the last exception back to the main process.")
        self._state = AsyncState.DEFAULT
        last = errors[-1]
        exception = _rebuild_exception(last)
        where = f"raised in sub-environment {last.env_index} of {type(self).__name__}"
        add_note = getattr(exception, "add_note", None)
        if add_note is not None:  # Python >= 3.11
            add_note(where)
        raise exception from RemoteTraceback(f"({where})\n{last.traceback}")

    def _collect(self, replies: list[Reply | None]) -> dict[str, Any]:
        """Raise env errors, then merge infos and pipe-borne values in env order."""
        if not any(replies):
            return {}  # the hot path: nothing but "done" from every worker
        self._raise_if_errors(replies)
        infos: dict[str, Any] = {}
        for link, reply in zip(self._links, replies, strict=True):
            if reply is None:
                continue
            if reply.observations is not None:
                self._env_obs[link.env_indices.start : link.env_indices.stop] = (
                    reply.observations
                )
            if reply.step_values is not None:
                for index, reward, terminated, truncated in reply.step_values:
                    self._rewards[index] = reward
                    self._terminations[index] = terminated
                    self._truncations[index] = truncated
            if reply.infos is not None:
                for index, info in reply.infos:
                    infos = self._add_info(infos, info, index)
        return infos

    def _read_observations(self) -> Any:
        if self._obs_transport == "pipe":
            self.observations = concatenate(
                self.single_observation_space, self._env_obs, self.observations
            )
            return deepcopy(self.observations) if self.copy else self.observations
        if self._obs_transport == "native":
            if not self.copy:
                return self.observations
            index = self._obs_index
            tree = make_views(
                self.single_observation_space,
                cut(self._obs_owners[index], self._obs_fields[index]),
            )
            self.observations = tree
            if index == len(self._obs_owners) - 1:  # scratch: never handed out
                return copy_tree(tree)
            return tree
        return deepcopy(self.observations) if self.copy else self.observations


def _rebuild_exception(error: ErrorRecord) -> BaseException:
    """Rebuild the exception a worker reported.

    The original object if it travelled, else its type rebuilt from the message, else
    a :class:`VecPoolError` carrying the message.
    """
    if error.exception is not None:
        with contextlib.suppress(Exception):
            exception: BaseException = pickle.loads(error.exception)
            return exception
    if error.exc_type is not None:
        with contextlib.suppress(Exception):
            return error.exc_type(error.message)
    return VecPoolError(
        f"{error.message} (raised in sub-environment {error.env_index})"
    )
