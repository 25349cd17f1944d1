"""Backends of ``vecpool bench``: how each vector env is built and stepped."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import itertools
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from vecpool._util.topology import physical_cores
from vecpool._util.validation import available_cpus
from vecpool.bench.workloads import MIN_STEPS, ActionPlan, EnvFn, Workload
from vecpool.vector.arguments import check_arguments
from vecpool.vector.async_env import AsyncVectorEnv

# ------------------------------------------------------------------------- backends


@dataclass(frozen=True, slots=True)
class Measurement:
    """One timed run of one backend.

    Attributes:
        env_steps: Sub-environment steps taken.
        seconds: Wall-clock seconds they took.
        worker_cpu: CPU seconds the backend's worker processes burned meanwhile
            (``None``: not measured, or no worker processes).
        parent_cpu: CPU seconds of this process meanwhile, every thread (the
            stepping loop, the policy, its BLAS threads).
    """

    env_steps: int
    seconds: float
    worker_cpu: float | None = None
    parent_cpu: float | None = None

    @property
    def steps_per_second(self) -> float:
        """Sub-environment steps per second."""
        return self.env_steps / self.seconds if self.seconds > 0 else math.inf


class Backend:
    """A way of stepping ``num_envs`` copies of an env: one row of the table.

    Subclasses set :attr:`name` and :attr:`description` and implement
    :meth:`make` and :meth:`run`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    by_default: ClassVar[bool] = True  # run when --backends is not given

    def supports(self, workload: Workload) -> bool:
        """Whether this backend can run ``workload`` on this machine."""
        del workload
        return True

    def skip_reason(self, env_fn: EnvFn, num_envs: int) -> str | None:
        """Why this backend cannot run ``num_envs`` envs (``None``: it can).

        The runner asks before :meth:`make` and notes the reason under the table.

        Args:
            env_fn: Creates one environment.
            num_envs: Number of sub-environments.
        """
        del env_fn, num_envs
        return None

    def label(self, env_fn: EnvFn, num_envs: int) -> str:
        """The row's label for ``num_envs`` envs: :attr:`name`, or what ran.

        Args:
            env_fn: Creates one environment.
            num_envs: Number of sub-environments.
        """
        del env_fn, num_envs
        return self.name

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create (and reset) whatever :meth:`run` steps.

        Args:
            env_fn: Creates one environment.
            num_envs: Number of sub-environments.
            seed: Reset seed.
        """
        raise NotImplementedError

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Take ``steps`` vector steps (``steps * num_envs`` env-steps) and time them.

        Args:
            env: What :meth:`make` returned.
            plan: The pre-drawn actions.
            steps: Number of vector steps.
        """
        raise NotImplementedError

    def close(self, env: Any) -> None:
        """Release what :meth:`make` created."""
        env.close()


def run_vector(env: Any, plan: ActionPlan, steps: int) -> Measurement:
    """Step a vector env (anything with Gymnasium's ``step``) through ``plan``.

    Args:
        env: The vector env.
        plan: The pre-drawn actions; its ``num_envs`` must match the env's.
        steps: Number of vector steps.

    Returns:
        The timed run.
    """
    step = env.step
    batches = plan.batches
    rows = plan.rows
    start = time.perf_counter()
    for index in range(steps):
        step(batches[index % rows])
    seconds = time.perf_counter() - start
    return Measurement(steps * plan.num_envs, seconds)


class RawBackend(Backend):
    """One plain env stepping ``num_envs * steps`` actions, resetting on episode end."""

    name = "raw"
    description = "one env in a plain loop (the physical reference)"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset one env (``num_envs`` only sizes the runs)."""
        del num_envs
        env = env_fn()
        env.reset(seed=seed)
        return env

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Step the env ``steps * num_envs`` times."""
        total = steps * plan.num_envs
        actions = itertools.islice(itertools.cycle(plan.singles), total)
        step, reset = env.step, env.reset
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = step(action)
            if terminated or truncated:
                reset()
        seconds = time.perf_counter() - start
        return Measurement(total, seconds)


class GymSyncBackend(Backend):
    """``gymnasium.vector.SyncVectorEnv``: every env in this process, in turn."""

    name = "gym-sync"
    description = "gymnasium.vector.SyncVectorEnv"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = gym.vector.SyncVectorEnv([env_fn] * num_envs)
        env.reset(seed=seed)
        return env

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Step the vector env."""
        return run_vector(env, plan, steps)


class GymAsyncBackend(GymSyncBackend):
    """``gymnasium.vector.AsyncVectorEnv``: one process per env (the baseline)."""

    name = "gym-async"
    description = "gymnasium.vector.AsyncVectorEnv"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = gym.vector.AsyncVectorEnv([env_fn] * num_envs)
        env.reset(seed=seed)
        return env


class VecpoolBackend(GymSyncBackend):
    """``vecpool.AsyncVectorEnv`` with its default settings."""

    name = "vecpool"
    description = "vecpool.AsyncVectorEnv(env_fns), default settings"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = AsyncVectorEnv([env_fn] * num_envs)
        env.reset(seed=seed)
        return env


class VecpoolInProcessBackend(GymSyncBackend):
    """``vecpool.AsyncVectorEnv(num_workers=0)``: every env in this process."""

    name = "vecpool-inproc"
    description = "vecpool.AsyncVectorEnv(env_fns, num_workers=0), no processes"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = AsyncVectorEnv([env_fn] * num_envs, num_workers=0)
        env.reset(seed=seed)
        return env


class VecpoolWorkersBackend(GymSyncBackend):
    """vecpool with every env in a worker process (``parent_envs=0``).

    The default before ``parent_envs="auto"``, and what a caller who needs every
    env isolated gets: the parent only waits.
    """

    name = "vecpool-workers"
    description = "vecpool.AsyncVectorEnv(env_fns, parent_envs=0), all in workers"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = AsyncVectorEnv([env_fn] * num_envs, parent_envs=0)
        env.reset(seed=seed)
        return env


class VecpoolBatchBackend(Backend):
    """vecpool's EnvPool-style async batches: ``batch_size = num_envs // 2``.

    The loop sends every env once, then repeatedly receives the first batch to finish
    and sends it its next actions; the figure counts the env-steps returned.
    """

    name = "vecpool-batch"
    description = "vecpool send/recv, batch_size=num_envs//2"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = AsyncVectorEnv([env_fn] * num_envs, batch_size=max(1, num_envs // 2))
        env.reset(seed=seed)
        return env

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Keep every env busy until ``steps * num_envs`` env-steps came back."""
        return run_batches(env, plan, steps)


class VecpoolThreadsBackend(GymSyncBackend):
    """``vecpool.AsyncVectorEnv(policy_threads="auto")``: the parent's pools fitted.

    Only run when named (``--backends``): it shows what the one setting does to a
    loop with a policy between steps (vecpool/_util/threads.py).
    """

    name = "vecpool-pt"
    description = 'vecpool.AsyncVectorEnv(env_fns, policy_threads="auto")'
    by_default = False

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = AsyncVectorEnv([env_fn] * num_envs, policy_threads="auto")
        env.reset(seed=seed)
        return env


class VecpoolBatchThreadsBackend(VecpoolBatchBackend):
    """``vecpool-batch`` with ``policy_threads="auto"`` (run only when named)."""

    name = "vecpool-batch-pt"
    description = 'vecpool send/recv, batch_size=num_envs//2, policy_threads="auto"'
    by_default = False

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env."""
        env = AsyncVectorEnv(
            [env_fn] * num_envs,
            batch_size=max(1, num_envs // 2),
            policy_threads="auto",
        )
        env.reset(seed=seed)
        return env


def run_batches(
    env: Any,
    plan: ActionPlan,
    steps: int,
    policy: Callable[[Any], Any] | None = None,
) -> Measurement:
    """EnvPool-style async batches: send every env, then recv a batch, send it.

    Args:
        env: A vecpool env built with ``batch_size``.
        plan: The actions stepped.
        steps: Vector steps' worth of env-steps (``steps * num_envs``).
        policy: Run on each received batch's observations before its next send
            (the other envs step meanwhile); ``None`` for none.

    Returns:
        The env-steps ``recv`` returned and their seconds (nothing is left in
        flight afterwards; the draining is not timed).
    """
    num_envs = plan.num_envs
    target = steps * num_envs
    send, recv = env.send, env.recv
    done = 0
    start = time.perf_counter()
    send(plan.batch(0), np.arange(num_envs))
    in_flight, index = num_envs, 1
    while True:
        obs, _, _, _, info = recv()
        ids = info["env_id"]
        in_flight -= ids.size
        done += ids.size
        if done >= target:
            break
        if policy is not None:
            policy(obs)
        send(plan.take(index, ids), ids)
        in_flight += ids.size
        index += 1
    seconds = time.perf_counter() - start
    while in_flight:  # leave nothing in flight for the next round (untimed)
        in_flight -= recv()[4]["env_id"].size
    return Measurement(done, seconds)


ENVPOOL_TASKS = {"CartPole-v1": "CartPole-v1", "ALE/Pong-v5": "Pong-v5"}
"""EnvPool's own C++ task for each workload env id it has (its Pong does the
DQN preprocessing itself: 84x84 grey, 4 stacked frames, frame skip 4)."""


class EnvPoolBackend(Backend):
    """EnvPool's own C++ env (CartPole, Pong), an anchor; only where installed.

    At its best: one thread per available CPU (``num_threads``, stated in the
    row's label, e.g. ``envpool-8t (cpus)``), not EnvPool's default.
    """

    name = "envpool"
    description = (
        "envpool.make_gymnasium(...), its own C++ CartPole / Pong, "
        "num_threads = available CPUs"
    )

    def supports(self, workload: Workload) -> bool:
        """The cartpole and atari workloads, if ``envpool`` is installed.

        The runner asks just before :meth:`make`, which builds this workload's task;
        an EnvPool that is installed but does not import is skipped with the reason
        (:meth:`skip_reason`).
        """
        self.env_id = workload.env_id
        return (
            workload.env_id in ENVPOOL_TASKS
            and importlib.util.find_spec("envpool") is not None
        )

    def skip_reason(self, env_fn: EnvFn, num_envs: int) -> str | None:
        """Why EnvPool cannot run here: it does not import (``None``: it does)."""
        del env_fn, num_envs
        return import_failure("envpool")

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset EnvPool's env (``env_fn`` only names the task)."""
        envpool = importlib.import_module("envpool")  # optional, untyped
        task = ENVPOOL_TASKS[self.env_id]
        with warnings.catch_warnings():
            # it builds Box spaces from float64 bounds, and Gymnasium warns each time
            warnings.simplefilter("ignore")
            env = envpool.make_gymnasium(
                task, num_envs=num_envs, seed=seed, num_threads=self.num_threads()
            )
            env.reset()
        del env_fn
        return env

    def num_threads(self) -> int:
        """EnvPool's threads: one per CPU this process may use."""
        return available_cpus()

    def label(self, env_fn: EnvFn, num_envs: int) -> str:
        """``envpool-<threads>t (cpus)``."""
        del env_fn, num_envs
        return f"envpool-{self.num_threads()}t (cpus)"

    env_id = "CartPole-v1"
    """The env id of the workload last asked about (:meth:`supports`)."""

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Step EnvPool's batched env."""
        return run_vector(env, plan, steps)


@functools.cache
def import_failure(module: str) -> str | None:
    """Why an installed anchor's package does not import (``None``: it does).

    An installed package can still fail on import (EnvPool's wheel without its
    data files raises ``FileNotFoundError``): the anchor is then skipped with this
    reason under the table, rather than ending the whole benchmark.

    Example:
        >>> import_failure("numpy") is None, import_failure("no_such_module") is None
        (True, True)

    Args:
        module: The top-level module name; one not installed has nothing to say
            (``supports`` leaves its anchor out).
    """
    if importlib.util.find_spec(module) is None:
        return None
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure: said, skipped
        return f"{module} is installed but does not import: {type(exc).__name__}: {exc}"
    return None


def default_num_workers(env_fn: EnvFn, num_envs: int) -> int:
    """The worker processes ``vecpool.AsyncVectorEnv([env_fn] * num_envs)`` starts.

    Read from vecpool itself, not re-derived: the constructor's own argument check
    (:func:`vecpool.vector.arguments.check_arguments`, which starts nothing) run on
    the constructor's default arguments, so the figure follows vecpool's placement
    (``parent_envs="auto"`` included) whatever it becomes.

    Args:
        env_fn: Creates one environment (not called).
        num_envs: Number of sub-environments.

    Returns:
        vecpool's default ``num_workers`` on this machine.
    """
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(
            AsyncVectorEnv.__init__
        ).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    accepted = inspect.signature(check_arguments).parameters
    checked = check_arguments(
        [env_fn] * num_envs,
        **{name: value for name, value in defaults.items() if name in accepted},
    )
    return checked.num_workers


def fitting_workers(num_envs: int, target: int) -> int | None:
    """The most PufferLib workers, at most ``target``, that divide ``num_envs``.

    ``pufferlib.vector.make`` refuses a ``num_workers`` that does not divide
    ``num_envs``, so the anchor runs the nearest valid count not above the one
    asked for.

    Example:
        >>> fitting_workers(8, 3), fitting_workers(12, 5), fitting_workers(7, 4)
        (2, 4, 1)
        >>> fitting_workers(2, 16), fitting_workers(4, 0) is None
        (2, True)

    Args:
        num_envs: Number of sub-environments.
        target: Workers asked for.

    Returns:
        The count, or ``None`` where none exists (``target`` below 1).
    """
    for workers in range(min(target, num_envs), 0, -1):
        if num_envs % workers == 0:
            return workers
    return None


class PufferLibBackend(GymSyncBackend):
    """PufferLib's ``Multiprocessing`` vectorization, an anchor; only where installed.

    ``pufferlib.vector.make(GymnasiumPufferEnv, backend=Multiprocessing,
    num_workers=W)``: its workers busy-wait on shared flags (no pipes), the
    design vecpool's spinning workers follow; ``pufferlib-core`` installs it
    from a wheel. ``W`` is :meth:`target_workers` lowered to the nearest count
    that divides ``num_envs`` (:func:`fitting_workers`), and the row's label says
    which ran (``pufferlib-4w (model)``). ``overwork=True`` lets it run more
    workers than PufferLib counts hardware cores, as asked.
    """

    workers: ClassVar[int] = 1
    basis: ClassVar[str | None] = None
    """Where :meth:`target_workers` comes from, shown in the label (``None``: a
    fixed count, the label is just ``pufferlib-<W>w``)."""
    target_source: ClassVar[str] = "the count asked for"
    """What :meth:`target_workers` is, in a skipped backend's note."""
    name = "pufferlib-1w"
    description = "pufferlib.vector.Multiprocessing, 1 worker"
    by_default = False  # pufferlib-model and pufferlib-cores run by default

    def supports(self, workload: Workload) -> bool:
        """Any workload, if ``pufferlib`` is installed."""
        del workload
        return importlib.util.find_spec("pufferlib") is not None

    def target_workers(self, env_fn: EnvFn, num_envs: int) -> int:
        """The workers asked for, before PufferLib's divisibility rule.

        Args:
            env_fn: Creates one environment.
            num_envs: Number of sub-environments.
        """
        del env_fn, num_envs
        return self.workers

    def num_workers(self, env_fn: EnvFn, num_envs: int) -> int | None:
        """The workers that run: :func:`fitting_workers` of the target."""
        return fitting_workers(num_envs, self.target_workers(env_fn, num_envs))

    def skip_reason(self, env_fn: EnvFn, num_envs: int) -> str | None:
        """Why it cannot run: no import, or no worker count fits (``None``: it can)."""
        failure = import_failure("pufferlib")
        if failure is not None:
            return failure
        target = self.target_workers(env_fn, num_envs)
        if fitting_workers(num_envs, target) is not None:
            return None
        return (
            f"no valid worker count: PufferLib needs one that divides "
            f"num_envs={num_envs}, from 1 to {target} ({self.target_source})"
        )

    def label(self, env_fn: EnvFn, num_envs: int) -> str:
        """``pufferlib-<W>w``, with the basis if any (``pufferlib-8w (cores)``)."""
        workers = self.num_workers(env_fn, num_envs)
        if workers is None:
            return self.name
        label = f"pufferlib-{workers}w"
        return label if self.basis is None else f"{label} ({self.basis})"

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env (``num_envs`` split over the workers).

        Raises:
            ValueError: If no worker count fits (:meth:`skip_reason` says why).
        """
        workers = self.num_workers(env_fn, num_envs)
        if workers is None:
            msg = f"`{self.name}`: {self.skip_reason(env_fn, num_envs)}."
            raise ValueError(msg)
        vector = importlib.import_module("pufferlib.vector")  # optional, untyped
        emulation = importlib.import_module("pufferlib.emulation")
        creator = functools.partial(emulation.GymnasiumPufferEnv, env_creator=env_fn)
        env = vector.make(
            creator,
            backend=vector.Multiprocessing,
            num_envs=num_envs,
            num_workers=workers,
            batch_size=num_envs,
            overwork=True,
        )
        env.reset(seed=seed)
        return env


class PufferLibTwoBackend(PufferLibBackend):
    """PufferLib's ``Multiprocessing`` with 2 workers (run only when named)."""

    workers = 2
    name = "pufferlib-2w"
    description = "pufferlib.vector.Multiprocessing, 2 workers"


class PufferLibModelBackend(PufferLibBackend):
    """PufferLib with the worker count vecpool's default placement picks.

    The same number of worker processes as the ``vecpool`` row
    (:func:`default_num_workers`), so the two compare like for like.
    """

    basis = "model"
    target_source = "vecpool's default num_workers"
    name = "pufferlib-model"
    description = (
        "pufferlib.vector.Multiprocessing, as many workers as vecpool's default"
    )
    by_default = True

    def target_workers(self, env_fn: EnvFn, num_envs: int) -> int:
        """The default ``num_workers`` of ``vecpool.AsyncVectorEnv`` for these envs."""
        return default_num_workers(env_fn, num_envs)


class PufferLibCoresBackend(PufferLibBackend):
    """PufferLib as its authors run it: one worker per physical core.

    Physical cores: :func:`vecpool.bench.topology.physical_cores` (distinct
    ``(package, core)`` pairs of the CPUs in this process's affinity mask).
    """

    basis = "cores"
    target_source = "the physical cores"
    name = "pufferlib-cores"
    description = "pufferlib.vector.Multiprocessing, one worker per physical core"
    by_default = True

    def target_workers(self, env_fn: EnvFn, num_envs: int) -> int:
        """This machine's physical cores (those this process may use)."""
        del env_fn, num_envs
        return physical_cores()


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        RawBackend(),
        GymSyncBackend(),
        GymAsyncBackend(),
        VecpoolBackend(),
        VecpoolInProcessBackend(),
        VecpoolWorkersBackend(),
        VecpoolBatchBackend(),
        VecpoolThreadsBackend(),
        VecpoolBatchThreadsBackend(),
        EnvPoolBackend(),
        PufferLibModelBackend(),
        PufferLibCoresBackend(),
        PufferLibBackend(),
        PufferLibTwoBackend(),
    )
}
"""Every backend by name, in table order."""


def calibrate(
    run: Callable[[int], Measurement], warmup_seconds: float, target_seconds: float
) -> int:
    """Warm a backend up and size its runs.

    Runs 1, 2, 4, ... vector steps until ``warmup_seconds`` have been spent, then
    extrapolates from the last (longest) run.

    Args:
        run: Runs the backend for a number of vector steps.
        warmup_seconds: Time to spend warming up.
        target_seconds: How long one sized run should take.

    Returns:
        The number of vector steps (at least :data:`MIN_STEPS`) of one run.
    """
    steps, spent = 1, 0.0
    while True:
        measurement = run(steps)
        spent += measurement.seconds
        if spent >= warmup_seconds:
            break
        steps *= 2
    rate = steps / max(measurement.seconds, 1e-9)
    return max(MIN_STEPS, round(rate * target_seconds))
