"""Backends of ``vecpool bench``: how each vector env is built and stepped."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from vecpool.bench.workloads import MIN_STEPS, ActionPlan, EnvFn, Workload
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
    """EnvPool's own C++ env (CartPole, Pong), an anchor; only where installed."""

    name = "envpool"
    description = "envpool.make_gymnasium(...), its own C++ CartPole / Pong"

    def supports(self, workload: Workload) -> bool:
        """The cartpole and atari workloads, and only if ``envpool`` imports.

        The runner asks just before :meth:`make`, which builds this workload's task.
        """
        self.env_id = workload.env_id
        return (
            workload.env_id in ENVPOOL_TASKS
            and importlib.util.find_spec("envpool") is not None
        )

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset EnvPool's env (``env_fn`` only names the task)."""
        envpool = importlib.import_module("envpool")  # optional, untyped
        task = ENVPOOL_TASKS[self.env_id]
        with warnings.catch_warnings():
            # it builds Box spaces from float64 bounds, and Gymnasium warns each time
            warnings.simplefilter("ignore")
            env = envpool.make_gymnasium(task, num_envs=num_envs, seed=seed)
            env.reset()
        del env_fn
        return env

    env_id = "CartPole-v1"
    """The env id of the workload last asked about (:meth:`supports`)."""

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Step EnvPool's batched env."""
        return run_vector(env, plan, steps)


class PufferLibBackend(GymSyncBackend):
    """PufferLib's ``Multiprocessing`` vectorization, an anchor; only where installed.

    ``pufferlib.vector.make(GymnasiumPufferEnv, backend=Multiprocessing,
    num_workers=W)``: its workers busy-wait on shared flags (no pipes), the
    design vecpool's spinning workers follow; ``pufferlib-core`` installs it
    from a wheel.
    """

    workers: ClassVar[int] = 1
    name = "pufferlib-1w"
    description = "pufferlib.vector.Multiprocessing, 1 worker"

    def supports(self, workload: Workload) -> bool:
        """Any workload, if ``pufferlib`` imports."""
        del workload
        return importlib.util.find_spec("pufferlib") is not None

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset the vector env (``num_envs`` split over the workers)."""
        vector = importlib.import_module("pufferlib.vector")  # optional, untyped
        emulation = importlib.import_module("pufferlib.emulation")
        creator = functools.partial(emulation.GymnasiumPufferEnv, env_creator=env_fn)
        env = vector.make(
            creator,
            backend=vector.Multiprocessing,
            num_envs=num_envs,
            num_workers=min(self.workers, num_envs),
            batch_size=num_envs,
        )
        env.reset(seed=seed)
        return env


class PufferLibTwoBackend(PufferLibBackend):
    """PufferLib's ``Multiprocessing`` with 2 workers."""

    workers = 2
    name = "pufferlib-2w"
    description = "pufferlib.vector.Multiprocessing, 2 workers"


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
