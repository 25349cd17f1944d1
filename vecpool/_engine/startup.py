"""Starting the workers of one vector env: one handle per slice of envs.

:class:`Starter` starts every worker at construction (:meth:`Starter.start`) and,
with ``on_worker_crash="restart"``, each replacement (:meth:`Starter.spawn`). The
kind of handle follows from the settings: a vecpool worker process
(:class:`~vecpool._engine.handle.WorkerHandle`), or no process at all
(``num_workers=0``: :class:`~vecpool._engine.in_process.InProcessHandle`). A custom
Gymnasium ``worker=`` never comes here: Gymnasium's own ``AsyncVectorEnv`` runs it
(vecpool/vector/gymnasium_worker.py).

A replacement is never a fork of this process (:func:`replacement_context`): a
restart happens in the middle of training, when the user's threads (torch's
pools, a logger, a data loader) are alive, and a forked child can deadlock on a
lock one of them held (issue 38). Replacements start through Python's
``forkserver`` (a fresh interpreter started by exec), which the constructor
starts, after checking that the env functions pickle (:func:`check_env_fns_pickle`).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
from gymnasium import Env, Space
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import clear_mpi_env_vars

from vecpool._engine.buffers import StepBuffers
from vecpool._engine.group import WorkerGroup
from vecpool._engine.handle import WorkerHandle
from vecpool._engine.in_process import InProcessHandle
from vecpool._engine.lifecycle import STARTING_WORKERS
from vecpool._util.slices import split
from vecpool._wire.messages import RestartStart, WorkerConfig
from vecpool._wire.permits import Permits, create_permits
from vecpool._worker.loop import owner_start, run_worker

__all__ = [
    "EnvFns",
    "StartSpec",
    "Starter",
    "check_env_fns_pickle",
    "replacement_context",
]


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


def replacement_context(ctx: Any) -> Any:
    """The ``multiprocessing`` context replacement workers start from.

    ``ctx`` itself unless it forks this process: then ``forkserver`` where the
    platform has it, else ``spawn``. Both start a fresh interpreter by exec (no
    Python-level fork of this process), so a restart never forks a parent whose
    other threads may hold locks (issue 38).

    Args:
        ctx: The context the first workers start from.
    """
    if ctx.get_start_method() != "fork":
        return ctx
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context(
        "forkserver" if "forkserver" in methods else "spawn"
    )


def check_env_fns_pickle(env_fns: Sequence[Callable[[], Env[Any, Any]]]) -> None:
    """Check that every env function pickles (with cloudpickle), as a replacement needs.

    Under ``fork`` the first workers get them by inheritance, so without this
    check an unpicklable one would fail only at the first crash.

    Args:
        env_fns: The env constructors.

    Raises:
        ValueError: Naming the first one that does not pickle, and the fix.
    """
    checked: set[int] = set()
    for index, env_fn in enumerate(env_fns):
        if id(env_fn) in checked:  # `[make] * n`: once
            continue
        checked.add(id(env_fn))
        try:
            cloudpickle.dumps(env_fn)
        except Exception as exc:
            shown = repr(env_fn)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            msg = (
                f"`env_fns[{index}]` ({shown}) cannot be pickled "
                f'({type(exc).__name__}: {exc}), and `on_worker_crash="restart"` '
                "sends it to each replacement worker, a fresh interpreter. Make it "
                "picklable: a module-level function or a `functools.partial` of one, "
                "which creates what it needs (locks, open files, sockets, loaded "
                "models) when called instead of capturing it."
            )
            raise ValueError(msg) from exc


PRELOAD = "vecpool._worker.loop"
"""What the fork server imports once, at its start: each replacement, forked
from it, then finds the worker's modules (numpy, Gymnasium, vecpool) loaded."""


PROBE_SECONDS = 120.0
"""How long the constructor waits for the fork server's first child."""
_READY_SERVER = [0]
"""The pid of the fork server a probe went through (0: none yet)."""


def _start_fork_server() -> None:
    """Start the fork server with vecpool's worker preloaded; wait until it serves.

    The server is started by fork and exec in C (``_posixsubprocess``), which runs
    no ``os.register_at_fork`` hook and no Python code in a fork of this process.
    The preload adds to the modules already asked for (``"__main__"`` by default);
    a server already running keeps its own. Once per server, a child that does
    nothing goes through it, so the server's start-up is paid here, not in the
    call that meets the first crash, and a main module that cannot be imported
    again (a script without ``if __name__ == "__main__":``) fails now.

    Raises:
        RuntimeError: If that child fails (or takes :data:`PROBE_SECONDS`).
    """
    server = multiprocessing.forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is None:
        modules = list(getattr(server, "_preload_modules", None) or ["__main__"])
        if PRELOAD not in modules:
            multiprocessing.forkserver.set_forkserver_preload([*modules, PRELOAD])
    multiprocessing.forkserver.ensure_running()
    pid = getattr(server, "_forkserver_pid", None) or 0
    if pid == _READY_SERVER[0]:
        return
    # os.getpid: a target the child finds without importing anything
    probe = multiprocessing.get_context("forkserver").Process(
        target=os.getpid, name="vecpool fork server probe", daemon=True
    )
    probe.start()
    probe.join(PROBE_SECONDS)
    if probe.exitcode is None:
        probe.kill()
        probe.join()
    exitcode = probe.exitcode
    probe.close()
    if exitcode != 0:
        msg = (
            '`on_worker_crash="restart"` starts each replacement worker in a fresh '
            "interpreter (through Python's forkserver), which imports the main "
            "module again (as `__mp_main__`), but a process started that way "
            f"{'took too long' if exitcode is None else f'exited with code {exitcode}'}"
            " (its error is above). Guard the script's entry point with "
            '`if __name__ == "__main__":` (docs/reliability.md, "Restarts start '
            'a fresh interpreter").'
        )
        raise RuntimeError(msg)
    _READY_SERVER[0] = pid


@dataclass
class StartSpec:
    """What the workers of one vector env are started with.

    Attributes:
        env_fns: The env constructors, one per env.
        num_workers: Number of worker processes.
        parent_envs: Envs this process steps itself (the last ones).
        daemon: Whether the workers are daemonic.
        name: The vector env's class name (processes are named after it).
        buffers: The step buffers (shared block and layout).
        autoreset_mode: The autoreset mode.
        observation_mode: ``"same"``, ``"different"`` or a space tuple.
        observation_space: Single observation space.
        action_space: Single action space.
        max_concurrency: At most this many envs step at once, or ``None``.
        restart: Whether dead workers are replaced (``on_worker_crash="restart"``).
    """

    env_fns: Sequence[Callable[[], Env[Any, Any]]]
    num_workers: int
    parent_envs: int
    daemon: bool
    name: str
    buffers: StepBuffers
    autoreset_mode: AutoresetMode
    observation_mode: Any
    observation_space: Space[Any]
    action_space: Space[Any]
    max_concurrency: int | None
    restart: bool = False


class Starter:
    """Starts the workers of one vector env, and later their replacements.

    Attributes:
        spec: What to start.
        permits: The ``max_concurrency`` permits the workers share
            (vecpool/_wire/permits.py), or ``None`` when there is no limit to keep.
        replacement_ctx: The context replacements start from
            (:func:`replacement_context`; ``ctx`` itself without restarts).
    """

    def __init__(
        self,
        spec: StartSpec,
        ctx: Any,
        processes: list[Any],
        parent_pipes: list[Any],
    ) -> None:
        """Prepare to start ``spec``'s workers.

        With restarts, once the env functions are known to pickle, the fork
        server replacements start from is started now (its start-up is paid
        here, once per process, not inside the call that meets a crash).

        Args:
            spec: What to start.
            ctx: The ``multiprocessing`` context.
            processes: Filled with the processes as they start (for the finalizer);
                a replacement takes its predecessor's place.
            parent_pipes: Filled with the parent's pipe ends likewise (and the
                in-process handle, closed with them on every way out).

        Raises:
            ValueError: With restarts, if an env function does not pickle.
            RuntimeError: With restarts, if the fork server cannot start a
                process from this main module.
        """
        self.spec = spec
        self.ctx = ctx
        self.replacement_ctx = ctx
        if spec.restart:
            check_env_fns_pickle(spec.env_fns)
            self.replacement_ctx = replacement_context(ctx)
            if self.replacement_ctx.get_start_method() == "forkserver":
                _start_fork_server()
        self.processes = processes
        self.parent_pipes = parent_pipes
        # locks the kernel gives back when a worker dies, where the platform
        # allows (else the documented fallback): vecpool/_wire/permits.py
        # who steps envs at the same time: the workers, and this process's share
        # beside them (alone, it steps its envs one after another: nothing to keep)
        runners = spec.num_workers + (1 if spec.num_workers and spec.parent_envs else 0)
        self.permits: Permits | None = None
        if spec.max_concurrency is not None and spec.max_concurrency < runners:
            # (the fallback's semaphore must reach replacements too)
            self.permits = create_permits(
                spec.max_concurrency, runners, self.replacement_ctx
            )

    def start(self, group: WorkerGroup) -> None:
        """Start one worker per slice of envs, then this process's share (if any).

        Args:
            group: Receives the handles, in order.
        """
        spec = self.spec
        num_envs = len(spec.env_fns)
        hosted = num_envs - spec.parent_envs  # the workers' envs come first
        if spec.num_workers:
            for index, env_indices in enumerate(split(hosted, spec.num_workers)):
                group.add(self.spawn(group, index, env_indices))
        if spec.parent_envs:  # this process's share: one more handle, the last
            config = self._config(group, spec.num_workers, range(hosted, num_envs))
            handle = InProcessHandle(config)
            self.parent_pipes.append(handle)  # closed with the pipes
            group.add(handle)

    def spawn(
        self,
        group: WorkerGroup,
        index: int,
        env_indices: range,
        restart: RestartStart | None = None,
        after: int = 0,
    ) -> WorkerHandle:
        """Start worker ``index`` hosting ``env_indices`` and return its handle.

        Its process and pipe go at position ``index`` of the lists given to the
        constructor (appended at start-up, replaced on a restart).

        Args:
            group: The group (its spin policy configures the worker).
            index: Worker index.
            env_indices: The envs it hosts.
            restart: How a replacement's envs start.
            after: Commands sent to the worker it replaces (its numbers go on).
        """
        spec = self.spec
        # a replacement never forks this process (its threads may hold locks)
        ctx = self.ctx if restart is None else self.replacement_ctx
        with clear_mpi_env_vars():
            parent_conn, child_conn = ctx.Pipe()
            config = self._config(group, index, env_indices, restart=restart)
            process = ctx.Process(
                target=run_worker,
                name=f"Worker<{spec.name}>-{index}",
                args=(child_conn, parent_conn, config),
            )
            process.daemon = spec.daemon
            if index < len(self.processes):  # a replacement
                self.processes[index] = process
                self.parent_pipes[index] = parent_conn
            else:
                self.processes.append(process)
                self.parent_pipes.append(parent_conn)
            STARTING_WORKERS[0] += 1
            try:
                process.start()
            finally:
                STARTING_WORKERS[0] -= 1
                child_conn.close()
        handle = WorkerHandle(index, env_indices, process, parent_conn, after)
        if config.bell:  # it spins for its commands on its doorbell
            handle.bell = spec.buffers.block.words(
                spec.buffers.layout.bells, env_indices.start
            )
        return handle

    def _config(
        self,
        group: WorkerGroup,
        index: int,
        env_indices: range,
        restart: RestartStart | None = None,
    ) -> WorkerConfig:
        """The configuration of the worker hosting ``env_indices``."""
        spec = self.spec
        buffers = spec.buffers
        waiting: dict[str, Any] = {"permits": self.permits}
        if index < spec.num_workers:  # a worker process: its spin settings too
            waiting = {
                "permits": self.permits,
                "restart": restart,
                "spin": group.spin.worker_spin,
                "spin_yield": group.spin.spin_yield,
                "spin_hint": group.spin.share_hint(buffers.block, buffers.layout),
                "bell": bool(group.spin.worker_spin) and group.restarter is None,
            }
        return WorkerConfig(
            index=index,
            start=env_indices.start,
            env_fns=EnvFns([spec.env_fns[i] for i in env_indices]),
            block=buffers.block,
            layout=buffers.layout,
            action_space=spec.action_space,
            observation_space=spec.observation_space,
            obs_transport=buffers.obs.transport,
            autoreset_mode=spec.autoreset_mode,
            observation_mode=spec.observation_mode,
            parent_pid=os.getpid(),
            parent_start=owner_start(),
            **waiting,
        )
