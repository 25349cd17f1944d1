"""Throughput benchmark: vecpool against Gymnasium's vector envs (``vecpool bench``).

Every backend steps the same workload with the same pre-drawn random actions. For
each ``(workload, num_envs)`` every backend's vector env is created once, warmed up
and sized so that one run takes about ``seconds``; then the rounds are interleaved
(round 1 runs every backend, then round 2, ...) and each figure is the median over
the rounds, in sub-environment steps per second (env-steps/s). The ``raw`` backend
steps one plain env in a loop: its figure times the number of available CPUs is the
*physical limit* no multi-process vector env can beat.

The resident memory of 32 ``CartPole-v1`` envs is measured for vecpool and
Gymnasium's ``AsyncVectorEnv``, each in a fresh Python process.

Example:
    >>> from vecpool.bench import compute_ratios
    >>> ratios = compute_ratios(
    ...     {"raw": 100.0, "gym-sync": 90.0, "gym-async": 20.0, "vecpool": 160.0},
    ...     cpus=2,
    ... )
    >>> ratios["vecpool"].vs_gym_async, ratios["vecpool"].vs_limit
    (8.0, 0.8)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import itertools
import json
import math
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat, TextIO

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

import vecpool
from vecpool.spaces import take_rows

__all__ = [
    "BACKENDS",
    "DEFAULT_NUM_ENVS",
    "DEFAULT_WORKLOADS",
    "MEMORY_NUM_ENVS",
    "ActionPlan",
    "Backend",
    "BenchReport",
    "BenchSettings",
    "BigObsEnv",
    "BusyEnv",
    "GroupResult",
    "Machine",
    "Measurement",
    "MemoryFigure",
    "MemoryReport",
    "Progress",
    "Ratios",
    "Workload",
    "available_cpus",
    "compute_ratios",
    "format_group_table",
    "format_memory",
    "machine_info",
    "measure_memory",
    "median",
    "physical_limit",
    "require_matplotlib",
    "resolve_workload",
    "run_benchmark",
    "write_json",
    "write_plot",
]

EnvFn = Callable[[], gym.Env[Any, Any]]

DEFAULT_WORKLOADS: tuple[str, ...] = ("cartpole", "busy", "bigobs")
DEFAULT_NUM_ENVS: tuple[int, ...] = (2, 8, 32)
DEFAULT_SECONDS = 1.0
"""Target duration of one backend run (one round), in seconds."""
DEFAULT_WARMUP_SECONDS = 0.3
QUICK_SECONDS = 0.05
QUICK_WARMUP_SECONDS = 0.02
MIN_ROUNDS = 3
MIN_STEPS = 2
"""Fewest vector steps a sized run takes."""
MEMORY_NUM_ENVS = 32
MEMORY_ENV_ID = "CartPole-v1"
MEMORY_BACKENDS: tuple[str, ...] = ("vecpool", "gym-async")
MEMORY_STEPS = 200
"""Vector steps the memory probe takes before it measures (steady state)."""
BUSY_STEP_SECONDS = 200e-6
_MAX_ACTION_BYTES = 64 * 2**20
_MAX_SAMPLED_ROWS = 20_000


def available_cpus() -> int:
    """CPUs this process may run on (affinity-aware on Linux).

    Returns:
        ``len(os.sched_getaffinity(0))`` where available, else ``os.cpu_count()``.
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _write(text: str = "") -> None:
    """Write one line of results to standard output."""
    sys.stdout.write(text + "\n")


# ----------------------------------------------------------------------------- envs


class BusyEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """A CPU-bound toy env: every step busy-waits about 200 microseconds.

    It stands in for a simulator whose step costs real CPU time, where vector envs
    are judged by how well they use the cores. Observations are four floats in
    ``[0, 1)``; episodes are truncated after ``max_steps`` steps and never terminate.

    Example:
        >>> env = BusyEnv()
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((4,), dtype('float32'))
    """

    def __init__(
        self, step_seconds: float = BUSY_STEP_SECONDS, max_steps: int = 500
    ) -> None:
        """Build the env.

        Args:
            step_seconds: How long each step busy-waits (``time.perf_counter``).
            max_steps: Episode length; the last step is truncated.
        """
        self.step_seconds = step_seconds
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._state = np.zeros(4, dtype=np.float32)
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """Start an episode from a random state drawn from ``self.np_random``."""
        super().reset(seed=seed, options=options)
        self._steps = 0
        self._state = self.np_random.uniform(0.0, 0.1, size=4).astype(np.float32)
        return self._state.copy(), {}

    def step(
        self, action: np.int64
    ) -> tuple[npt.NDArray[np.float32], SupportsFloat, bool, bool, dict[str, Any]]:
        """Busy-wait ``step_seconds``, then move one coordinate by the action."""
        deadline = time.perf_counter() + self.step_seconds
        while time.perf_counter() < deadline:
            pass
        self._steps += 1
        index = int(action) + 2 * (self._steps % 2)
        self._state[index] = (self._state[index] + 0.01) % 1.0
        return self._state.copy(), 1.0, False, self._steps >= self.max_steps, {}


class BigObsEnv(gym.Env[npt.NDArray[np.uint8], np.int64]):
    """A cheap env with an Atari-sized ``uint8`` observation of shape (84, 84, 4).

    It measures how a vector env moves large observations: the step itself only
    writes one row of the frame. Episodes are truncated after ``max_steps`` steps.

    Example:
        >>> env = BigObsEnv()
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((84, 84, 4), dtype('uint8'))
    """

    shape: ClassVar[tuple[int, int, int]] = (84, 84, 4)

    def __init__(self, max_steps: int = 1000) -> None:
        """Build the env.

        Args:
            max_steps: Episode length; the last step is truncated.
        """
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0, 255, shape=self.shape, dtype=np.uint8)
        self.action_space = spaces.Discrete(4)
        self._frame = np.zeros(self.shape, dtype=np.uint8)
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.uint8], dict[str, Any]]:
        """Start an episode with a random frame drawn from ``self.np_random``."""
        super().reset(seed=seed, options=options)
        self._steps = 0
        self._frame = self.np_random.integers(0, 256, size=self.shape, dtype=np.uint8)
        return self._frame.copy(), {}

    def step(
        self, action: np.int64
    ) -> tuple[npt.NDArray[np.uint8], SupportsFloat, bool, bool, dict[str, Any]]:
        """Overwrite one row of the frame with a value derived from the action."""
        self._steps += 1
        self._frame[self._steps % self.shape[0]] = (
            int(action) * 64 + self._steps
        ) % 256
        reward = float(action == 0)
        return self._frame.copy(), reward, False, self._steps >= self.max_steps, {}


@dataclass(frozen=True)
class Workload:
    """An environment to benchmark.

    Attributes:
        name: Name on the command line (``cartpole``, ``busy``, ``bigobs`` or an id).
        env_id: What the environment is (a Gymnasium id or a class name).
        env_fn: A picklable function that creates one environment.
    """

    name: str
    env_id: str
    env_fn: EnvFn

    @property
    def label(self) -> str:
        """``name`` and ``env_id``, e.g. ``cartpole (CartPole-v1)``."""
        return self.name if self.name == self.env_id else f"{self.name} ({self.env_id})"


_BUILTIN_WORKLOADS: dict[str, Workload] = {
    "cartpole": Workload(
        "cartpole", "CartPole-v1", functools.partial(gym.make, "CartPole-v1")
    ),
    "busy": Workload("busy", "BusyEnv", BusyEnv),
    "bigobs": Workload("bigobs", "BigObsEnv", BigObsEnv),
}


def resolve_workload(name: str) -> Workload:
    """Turn a command-line workload name into a :class:`Workload`.

    Args:
        name: ``cartpole``, ``busy``, ``bigobs`` or a registered Gymnasium env id
            (``module:Env-v0`` imports ``module`` first, as :func:`gymnasium.make`
            does).

    Returns:
        The workload.

    Raises:
        ValueError: If ``name`` is neither a built-in workload nor a registered id.
    """
    builtin = _BUILTIN_WORKLOADS.get(name)
    if builtin is not None:
        return builtin
    if ":" not in name and name not in gym.registry:
        msg = (
            f"Unknown workload {name!r}: use one of {', '.join(_BUILTIN_WORKLOADS)} "
            "or a registered Gymnasium env id (e.g. `Acrobot-v1`)."
        )
        raise ValueError(msg)
    return Workload(name, name, functools.partial(gym.make, name))


# -------------------------------------------------------------------------- actions


class ActionPlan:
    """Pre-drawn random actions for ``num_envs`` envs, one batch per vector step.

    Discrete and Box actions are drawn as one numpy array of the action space's dtype
    (so they take vecpool's shared-memory path); other spaces are sampled from the
    batched space, seeded. Step ``t`` uses row ``t % rows``.

    Example:
        >>> from gymnasium import spaces
        >>> plan = ActionPlan(spaces.Discrete(3), num_envs=4, rows=10, seed=0)
        >>> plan.batch(12).shape, plan.batch(12).dtype
        ((4,), dtype('int64'))
        >>> len(plan.singles)
        40
    """

    def __init__(
        self, space: spaces.Space[Any], num_envs: int, rows: int, seed: int
    ) -> None:
        """Draw the actions.

        Args:
            space: The single (one-env) action space.
            num_envs: Number of envs per batch.
            rows: Number of batches to draw.
            seed: Seed of the random generator.
        """
        self.space = space
        self.num_envs = num_envs
        self.rows = max(1, rows)
        self.batched_space = batch_space(space, num_envs)
        self.batches: npt.NDArray[Any] | list[Any] = self._draw(seed)
        self._singles: list[Any] | None = None

    def _draw(self, seed: int) -> npt.NDArray[Any] | list[Any]:
        rng = np.random.default_rng(seed)
        shape = (self.rows, self.num_envs)
        space = self.space
        if isinstance(space, spaces.Discrete):
            drawn = rng.integers(0, int(space.n), size=shape) + int(space.start)
            return drawn.astype(space.dtype)
        if isinstance(space, spaces.Box) and space.dtype is not None:
            full = (*shape, *space.shape)
            low = np.broadcast_to(space.low, full).astype(np.float64)
            high = np.broadcast_to(space.high, full).astype(np.float64)
            if np.issubdtype(space.dtype, np.integer):
                values = rng.integers(
                    np.floor(low).astype(np.int64),
                    np.ceil(high).astype(np.int64),
                    endpoint=True,
                )
                return values.astype(space.dtype)
            bounded = np.isfinite(low) & np.isfinite(high)
            uniform = rng.uniform(
                np.where(bounded, low, 0.0), np.where(bounded, high, 1.0)
            )
            normal = np.clip(rng.standard_normal(full), low, high)
            return np.where(bounded, uniform, normal).astype(space.dtype)
        self.batched_space.seed(seed)
        return [self.batched_space.sample() for _ in range(self.rows)]

    def batch(self, step: int) -> Any:
        """The batched action of vector step ``step`` (cycling through the rows)."""
        return self.batches[step % self.rows]

    def take(self, step: int, ids: npt.NDArray[np.int64]) -> Any:
        """The actions of step ``step`` for the envs ``ids`` only."""
        return take_rows(self.batch(step), ids)

    @property
    def singles(self) -> list[Any]:
        """Every action one by one (row after row), as each env receives it."""
        if self._singles is None:
            self._singles = [
                action
                for batch in self.batches
                for action in iterate(self.batched_space, batch)
            ]
        return self._singles

    @staticmethod
    def max_rows(space: spaces.Space[Any], num_envs: int) -> int:
        """How many rows a plan may hold before it cycles (a memory bound)."""
        if isinstance(space, (spaces.Discrete, spaces.Box)):
            itemsize = np.dtype(space.dtype).itemsize
            size = itemsize * max(1, math.prod(space.shape or (1,)))
            return max(256, _MAX_ACTION_BYTES // (size * num_envs))
        return _MAX_SAMPLED_ROWS


# ------------------------------------------------------------------------- backends


@dataclass(frozen=True, slots=True)
class Measurement:
    """One timed run of one backend.

    Attributes:
        env_steps: Sub-environment steps taken.
        seconds: Wall-clock seconds they took.
    """

    env_steps: int
    seconds: float

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
        env = vecpool.AsyncVectorEnv([env_fn] * num_envs)
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
        env = vecpool.AsyncVectorEnv(
            [env_fn] * num_envs, batch_size=max(1, num_envs // 2)
        )
        env.reset(seed=seed)
        return env

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Keep every env busy until ``steps * num_envs`` env-steps came back."""
        num_envs = plan.num_envs
        target = steps * num_envs
        send, recv = env.send, env.recv
        done = 0
        start = time.perf_counter()
        send(plan.batch(0), np.arange(num_envs))
        in_flight = num_envs
        step = 1
        while True:
            ids = recv()[4]["env_id"]
            in_flight -= ids.size
            done += ids.size
            if done >= target:
                break
            send(plan.take(step, ids), ids)
            in_flight += ids.size
            step += 1
        seconds = time.perf_counter() - start
        while in_flight:  # leave nothing in flight for the next round (untimed)
            in_flight -= recv()[4]["env_id"].size
        return Measurement(done, seconds)


class EnvPoolBackend(Backend):
    """EnvPool's own C++ ``CartPole-v1`` (only where ``envpool`` is installed)."""

    name = "envpool"
    description = "envpool.make_gymnasium('CartPole-v1'), its own C++ env"

    def supports(self, workload: Workload) -> bool:
        """Only the cartpole workload, and only if ``envpool`` can be imported."""
        return (
            workload.env_id == "CartPole-v1"
            and importlib.util.find_spec("envpool") is not None
        )

    def make(self, env_fn: EnvFn, num_envs: int, seed: int) -> Any:
        """Create and reset EnvPool's CartPole (``env_fn`` is not used)."""
        del env_fn
        envpool = importlib.import_module("envpool")  # optional, untyped
        with warnings.catch_warnings():
            # it builds Box spaces from float64 bounds, and Gymnasium warns each time
            warnings.simplefilter("ignore")
            env = envpool.make_gymnasium("CartPole-v1", num_envs=num_envs, seed=seed)
            env.reset()
        return env

    def run(self, env: Any, plan: ActionPlan, steps: int) -> Measurement:
        """Step EnvPool's batched env."""
        return run_vector(env, plan, steps)


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        RawBackend(),
        GymSyncBackend(),
        GymAsyncBackend(),
        VecpoolBackend(),
        VecpoolBatchBackend(),
        EnvPoolBackend(),
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


# -------------------------------------------------------------------- statistics


def median(values: Iterable[float]) -> float:
    """The median of ``values``.

    Raises:
        ValueError: If ``values`` is empty.
    """
    items = list(values)
    if not items:
        msg = "`median` needs at least one value."
        raise ValueError(msg)
    return float(statistics.median(items))


def physical_limit(raw_steps_per_second: float, cpus: int) -> float:
    """The most env-steps/s ``cpus`` cores can do: the one-env loop's rate times them.

    Args:
        raw_steps_per_second: Env-steps/s of one env stepped in a plain loop.
        cpus: Number of available CPUs.

    Returns:
        ``raw_steps_per_second * cpus``.
    """
    return raw_steps_per_second * cpus


@dataclass(frozen=True, slots=True)
class Ratios:
    """A backend's figure relative to the baselines (``None`` if one is missing).

    Attributes:
        vs_gym_async: Against ``gymnasium.vector.AsyncVectorEnv``.
        vs_gym_sync: Against ``gymnasium.vector.SyncVectorEnv``.
        vs_limit: Against the physical limit (``raw`` times the CPUs).
    """

    vs_gym_async: float | None
    vs_gym_sync: float | None
    vs_limit: float | None


def _ratio(value: float, baseline: float | None) -> float | None:
    if baseline is None or baseline <= 0:
        return None
    return value / baseline


def compute_ratios(medians: Mapping[str, float], cpus: int) -> dict[str, Ratios]:
    """Each backend's median relative to gym-async, gym-sync and the physical limit.

    Args:
        medians: Median env-steps/s per backend name (``raw``, ``gym-sync``,
            ``gym-async`` are the baselines; missing ones give ``None`` ratios).
        cpus: Number of available CPUs (for the physical limit).

    Returns:
        :class:`Ratios` per backend name.
    """
    raw = medians.get("raw")
    limit = None if raw is None else physical_limit(raw, cpus)
    return {
        name: Ratios(
            _ratio(value, medians.get("gym-async")),
            _ratio(value, medians.get("gym-sync")),
            _ratio(value, limit),
        )
        for name, value in medians.items()
    }


# ------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
            return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Machine:
    """What the benchmark ran on.

    Attributes:
        cpu_model: CPU model name (``/proc/cpuinfo`` on Linux).
        cpus: CPUs available to this process (the physical limit's multiplier).
        logical_cpus: ``os.cpu_count()``.
        system: ``platform.platform()``.
        python: Python implementation and version.
        start_method: The default ``multiprocessing`` start method.
        versions: Versions of numpy, gymnasium, vecpool (and envpool, if installed).
    """

    cpu_model: str
    cpus: int
    logical_cpus: int
    system: str
    python: str
    start_method: str
    versions: dict[str, str]

    def lines(self) -> list[str]:
        """The machine label, as printed above the tables."""
        versions = ", ".join(f"{name} {ver}" for name, ver in self.versions.items())
        return [
            f"machine: {self.cpu_model}, {self.cpus} CPUs available "
            f"({self.logical_cpus} logical), {self.system}",
            f"python {self.python}, {versions}, start method {self.start_method}",
        ]


def machine_info() -> Machine:
    """Describe this machine and the package versions.

    Returns:
        The :class:`Machine`.
    """
    versions = {"vecpool": vecpool.__version__}
    for package in ("numpy", "gymnasium", "envpool"):
        found = _version(package)
        if found is not None:
            versions[package] = found
    return Machine(
        cpu_model=_cpu_model(),
        cpus=available_cpus(),
        logical_cpus=os.cpu_count() or 1,
        system=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        start_method=multiprocessing.get_start_method(),
        versions=versions,
    )


# ------------------------------------------------------------------------ progress


class Progress:
    """Progress lines on standard error; one overwritten line on a terminal.

    Args:
        enabled: ``False`` makes every method a no-op (``--quiet``).
        stream: Where to write; default ``sys.stderr``.
    """

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        """Set up the display."""
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.overwrite = bool(isatty and isatty())
        self._pending = False

    def update(self, text: str, *, minor: bool = False) -> None:
        """Show ``text`` as the current activity.

        Args:
            text: What is running now.
            minor: Show it only on a terminal (where it overwrites the line), not
                as a line of its own in a log.
        """
        if not self.enabled or (minor and not self.overwrite):
            return
        if self.overwrite:
            self.stream.write("\r\x1b[K" + text)
            self._pending = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the overwritten line (before results are printed)."""
        if self.enabled and self._pending:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._pending = False


# -------------------------------------------------------------------------- running


@dataclass(frozen=True)
class BenchSettings:
    """The benchmark's settings (what the command line chose).

    Attributes:
        workloads: Workload names.
        num_envs: Numbers of sub-environments.
        backends: Backend names (those unavailable for a workload are skipped).
        rounds: Interleaved rounds; the figures are their medians.
        seed: Seed of the resets and the pre-drawn actions.
        seconds: Target duration of one run (ignored when ``steps`` is set).
        steps: Fixed vector steps per run, or ``None`` to size runs by ``seconds``.
        warmup_seconds: Warm-up time per backend before the rounds.
        quick: A tiny run (tests, CI smoke).
        memory: Whether to measure the memory of 32 CartPole envs.
    """

    workloads: tuple[str, ...] = DEFAULT_WORKLOADS
    num_envs: tuple[int, ...] = DEFAULT_NUM_ENVS
    backends: tuple[str, ...] = tuple(BACKENDS)
    rounds: int = MIN_ROUNDS
    seed: int = 0
    seconds: float = DEFAULT_SECONDS
    steps: int | None = None
    warmup_seconds: float = DEFAULT_WARMUP_SECONDS
    quick: bool = False
    memory: bool = True

    def __post_init__(self) -> None:
        """Check the settings.

        Raises:
            ValueError: On an unknown backend, too few rounds, or a value below 1.
        """
        unknown = [name for name in self.backends if name not in BACKENDS]
        if unknown:
            msg = f"Unknown backends {unknown}: choose from {list(BACKENDS)}."
            raise ValueError(msg)
        if self.rounds < (1 if self.quick else MIN_ROUNDS):
            msg = (
                f"`rounds` must be at least {MIN_ROUNDS} (or 1 with `quick`), got "
                f"{self.rounds}."
            )
            raise ValueError(msg)
        if not self.workloads or not self.num_envs or not self.backends:
            msg = "Choose at least one workload, one `num_envs` and one backend."
            raise ValueError(msg)
        if min(self.num_envs) < 1 or (self.steps is not None and self.steps < 1):
            msg = "`num_envs` and `steps` must be at least 1."
            raise ValueError(msg)
        if self.seconds <= 0 or self.warmup_seconds < 0:
            msg = "`seconds` must be positive and `warmup_seconds` not negative."
            raise ValueError(msg)


@dataclass(frozen=True)
class BackendResult:
    """One backend's rounds for one ``(workload, num_envs)``.

    Attributes:
        backend: Backend name.
        steps: Vector steps per run.
        rounds: The timed runs, in round order.
    """

    backend: str
    steps: int
    rounds: tuple[Measurement, ...]

    @property
    def median(self) -> float:
        """Median env-steps/s over the rounds."""
        return median(m.steps_per_second for m in self.rounds)

    @property
    def spread(self) -> float:
        """(max - min) / median of the rounds' env-steps/s."""
        rates = [m.steps_per_second for m in self.rounds]
        mid = self.median
        return (max(rates) - min(rates)) / mid if mid > 0 else 0.0


@dataclass(frozen=True)
class GroupResult:
    """Every backend's figures for one workload and one ``num_envs``.

    Attributes:
        workload: Workload name.
        env_id: What the environment is.
        num_envs: Number of sub-environments.
        cpus: CPUs available (for the physical limit).
        results: Per backend, in table order.
    """

    workload: str
    env_id: str
    num_envs: int
    cpus: int
    results: tuple[BackendResult, ...]

    @property
    def medians(self) -> dict[str, float]:
        """Median env-steps/s per backend."""
        return {result.backend: result.median for result in self.results}

    @property
    def ratios(self) -> dict[str, Ratios]:
        """Ratios per backend (see :func:`compute_ratios`)."""
        return compute_ratios(self.medians, self.cpus)

    @property
    def limit(self) -> float | None:
        """The physical limit, if ``raw`` ran."""
        raw = self.medians.get("raw")
        return None if raw is None else physical_limit(raw, self.cpus)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        ratios = self.ratios
        return {
            "workload": self.workload,
            "env_id": self.env_id,
            "num_envs": self.num_envs,
            "physical_limit": self.limit,
            "backends": {
                result.backend: {
                    "steps_per_run": result.steps,
                    "rounds": [
                        {
                            "env_steps": m.env_steps,
                            "seconds": m.seconds,
                            "steps_per_second": m.steps_per_second,
                        }
                        for m in result.rounds
                    ],
                    "median": result.median,
                    "spread": result.spread,
                    **dataclasses.asdict(ratios[result.backend]),
                }
                for result in self.results
            },
        }


@dataclass(frozen=True)
class MemoryFigure:
    """Resident memory of one vector env's processes.

    Attributes:
        backend: Backend name.
        num_envs: Number of sub-environments.
        processes: Processes counted (the probe process and all its descendants).
        rss: Sum of resident set sizes, in bytes (shared pages count once per
            process).
        pss: Sum of proportional set sizes, in bytes (shared pages split between
            the processes sharing them), or ``None`` without ``smaps_rollup``.
        parent_rss: RSS of the probe process, which holds the vector env.
        parent_pss: PSS of the probe process, or ``None``.
        baseline_rss: RSS of the probe process before it created the vector env.
    """

    backend: str
    num_envs: int
    processes: int
    rss: int
    pss: int | None
    parent_rss: int
    parent_pss: int | None
    baseline_rss: int


@dataclass(frozen=True)
class MemoryReport:
    """Memory of vecpool and Gymnasium's ``AsyncVectorEnv`` on 32 CartPole envs.

    Attributes:
        env_id: The environment.
        num_envs: Number of sub-environments.
        method: How it was measured (printed with the figures).
        figures: Per backend.
        skipped: Why nothing was measured, or ``None``.
    """

    env_id: str
    num_envs: int
    method: str
    figures: tuple[MemoryFigure, ...] = ()
    skipped: str | None = None


@dataclass(frozen=True)
class BenchReport:
    """Everything one ``vecpool bench`` run measured.

    Attributes:
        machine: What it ran on.
        settings: The settings.
        groups: Per ``(workload, num_envs)``.
        memory: The memory figures, or ``None`` if not measured.
    """

    machine: Machine
    settings: BenchSettings
    groups: tuple[GroupResult, ...]
    memory: MemoryReport | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``--json`` file)."""
        return {
            "machine": dataclasses.asdict(self.machine),
            "settings": dataclasses.asdict(self.settings),
            "results": [group.to_dict() for group in self.groups],
            "memory": None if self.memory is None else dataclasses.asdict(self.memory),
        }


def _run_group(
    workload: Workload,
    num_envs: int,
    settings: BenchSettings,
    cpus: int,
    progress: Progress,
) -> GroupResult | None:
    """Benchmark every backend on one workload and ``num_envs`` (rounds interleaved).

    Returns ``None`` when none of the chosen backends supports the workload.
    """
    tag = f"[{workload.name} n={num_envs}]"
    backends = [
        BACKENDS[name]
        for name in settings.backends
        if BACKENDS[name].supports(workload)
    ]
    if not backends:
        return None
    probe = workload.env_fn()
    action_space = probe.action_space
    probe.close()
    warmup_plan = ActionPlan(action_space, num_envs, 64, settings.seed + 1)
    envs: dict[str, Any] = {}
    progress.update(f"{tag} starting {', '.join(b.name for b in backends)}")
    try:
        for backend in backends:
            progress.update(f"{tag} starting {backend.name}", minor=True)
            envs[backend.name] = backend.make(workload.env_fn, num_envs, settings.seed)
        steps: dict[str, int] = {}
        for backend in backends:
            progress.update(f"{tag} warm-up: {backend.name}", minor=True)
            env = envs[backend.name]
            sized = calibrate(
                functools.partial(backend.run, env, warmup_plan),
                settings.warmup_seconds,
                settings.seconds,
            )
            steps[backend.name] = sized if settings.steps is None else settings.steps
        rows = min(max(steps.values()) + 1, ActionPlan.max_rows(action_space, num_envs))
        plan = ActionPlan(action_space, num_envs, rows, settings.seed)
        if any(backend.name == "raw" for backend in backends):
            _ = plan.singles  # built once, outside the timed loops
        rounds: dict[str, list[Measurement]] = {b.name: [] for b in backends}
        for round_index in range(settings.rounds):
            for backend in backends:
                progress.update(
                    f"{tag} round {round_index + 1}/{settings.rounds}: {backend.name}"
                )
                rounds[backend.name].append(
                    backend.run(envs[backend.name], plan, steps[backend.name])
                )
    finally:
        for backend in backends:
            if backend.name in envs:
                progress.update(f"{tag} closing {backend.name}", minor=True)
                backend.close(envs[backend.name])
    return GroupResult(
        workload.name,
        workload.env_id,
        num_envs,
        cpus,
        tuple(
            BackendResult(b.name, steps[b.name], tuple(rounds[b.name]))
            for b in backends
        ),
    )


def run_benchmark(
    settings: BenchSettings,
    *,
    progress: Progress | None = None,
    on_workload: Callable[[list[GroupResult]], None] | None = None,
) -> BenchReport:
    """Run the benchmark.

    Args:
        settings: What to run.
        progress: Where progress goes; default: standard error.
        on_workload: Called with a workload's groups as soon as it is finished
            (the command line prints its table then).

    Returns:
        The :class:`BenchReport`.

    Raises:
        ValueError: If a workload name is unknown.
    """
    progress = Progress() if progress is None else progress
    workloads = [resolve_workload(name) for name in settings.workloads]
    machine = machine_info()
    groups: list[GroupResult] = []
    for workload in workloads:
        done: list[GroupResult] = []
        for num_envs in settings.num_envs:
            group = _run_group(workload, num_envs, settings, machine.cpus, progress)
            if group is not None:
                done.append(group)
        groups.extend(done)
        if done and on_workload is not None:
            progress.clear()
            on_workload(done)
    memory = measure_memory(progress=progress) if settings.memory else None
    progress.clear()
    return BenchReport(machine, settings, tuple(groups), memory)


# -------------------------------------------------------------------------- memory


def _process_children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process vanished while we listed
            continue
        # "pid (comm) state ppid ..."; comm may contain spaces and parentheses
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree (Linux ``/proc``)."""
    children = _process_children()
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def read_memory(pid: int) -> tuple[int, int | None]:
    """RSS and PSS of one process, in bytes (Linux).

    Args:
        pid: The process id.

    Returns:
        ``(rss, pss)`` from ``/proc/<pid>/smaps_rollup``; ``pss`` is ``None`` when
        only ``/proc/<pid>/status`` is readable.

    Raises:
        OSError: If the process's memory cannot be read.
    """
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]) * 1024, None
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("Rss", "Pss") and parts:
            values[key] = int(parts[0]) * 1024
    return values["Rss"], values.get("Pss")


def _memory_probe(backend_name: str, num_envs: int) -> dict[str, Any]:
    """Create a vector env in this (fresh) process and measure the process tree."""
    pid = os.getpid()
    baseline_rss, _ = read_memory(pid)
    workload = resolve_workload("cartpole")
    backend = BACKENDS[backend_name]
    env = backend.make(workload.env_fn, num_envs, 0)
    try:
        probe = workload.env_fn()
        plan = ActionPlan(probe.action_space, num_envs, MEMORY_STEPS, 0)
        probe.close()
        backend.run(env, plan, MEMORY_STEPS)
        parent_rss, parent_pss = read_memory(pid)
        rss, pss, count = parent_rss, parent_pss, 1
        for child in _descendants(pid):
            try:
                child_rss, child_pss = read_memory(child)
            except OSError:
                continue
            count += 1
            rss += child_rss
            pss = None if pss is None or child_pss is None else pss + child_pss
    finally:
        backend.close(env)
    figure = MemoryFigure(
        backend_name, num_envs, count, rss, pss, parent_rss, parent_pss, baseline_rss
    )
    return dataclasses.asdict(figure)


def _memory_probe_main(argv: Sequence[str]) -> int:
    """Entry point of the probe process: print one JSON line on standard output."""
    backend_name, num_envs = argv[0], int(argv[1])
    _write(json.dumps(_memory_probe(backend_name, num_envs)))
    return 0


_PROBE_CODE = (
    "import sys; from vecpool.bench import _memory_probe_main; "
    "sys.exit(_memory_probe_main(sys.argv[1:]))"
)


def measure_memory(
    backends: Sequence[str] = MEMORY_BACKENDS,
    num_envs: int = MEMORY_NUM_ENVS,
    *,
    progress: Progress | None = None,
    timeout: float = 300.0,
) -> MemoryReport:
    """Measure the resident memory of ``num_envs`` CartPole envs per backend.

    Each backend runs in a fresh Python process (so this process's own allocations
    do not mix in), which creates the vector env, takes :data:`MEMORY_STEPS` steps,
    then sums RSS and PSS over itself and all its descendant processes.

    Args:
        backends: Backend names to measure.
        num_envs: Number of sub-environments.
        progress: Where progress goes.
        timeout: Seconds to wait for each probe process.

    Returns:
        The :class:`MemoryReport` (``skipped`` says why if it could not measure).
    """
    progress = Progress(enabled=False) if progress is None else progress
    method = (
        f"each backend in a fresh Python process that creates {num_envs} x "
        f"{MEMORY_ENV_ID}, resets and takes {MEMORY_STEPS} steps; sums over that "
        "process and all its descendants (workers, multiprocessing helpers). RSS "
        "counts shared pages once per process; PSS splits them between the processes "
        "sharing them."
    )
    if not Path("/proc/self/status").exists():
        return MemoryReport(
            MEMORY_ENV_ID, num_envs, method, skipped="needs Linux /proc (not found)"
        )
    figures: list[MemoryFigure] = []
    for name in backends:
        progress.update(f"[memory] {name}: {num_envs} x {MEMORY_ENV_ID}")
        completed = subprocess.run(
            [sys.executable, "-c", _PROBE_CODE, name, str(num_envs)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        lines = completed.stdout.strip().splitlines()
        if completed.returncode != 0 or not lines:
            tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
            return MemoryReport(
                MEMORY_ENV_ID,
                num_envs,
                method,
                tuple(figures),
                skipped=f"the {name} probe failed: {tail[0]}",
            )
        figures.append(MemoryFigure(**json.loads(lines[-1])))
    return MemoryReport(MEMORY_ENV_ID, num_envs, method, tuple(figures))


# -------------------------------------------------------------------------- output


def _format_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_group_table(groups: Sequence[GroupResult]) -> list[str]:
    """The table of one workload: a row per backend and ``num_envs``.

    Args:
        groups: The workload's groups (one per ``num_envs``).

    Returns:
        Lines of text.
    """
    first = groups[0]
    label = (
        first.workload
        if first.workload == first.env_id
        else f"{first.workload} ({first.env_id})"
    )
    header = (
        f"{'num_envs':>8}  {'backend':<14}{'env-steps/s':>12}{'spread':>8}"
        f"{'vs gym-async':>14}{'vs gym-sync':>13}{'vs limit':>10}"
    )
    lines = [
        f"{label}: median of {len(first.results[0].rounds)} rounds; "
        f"physical limit = raw x {first.cpus} CPUs",
        header,
        "-" * len(header),
    ]
    for group in groups:
        ratios = group.ratios
        for result in group.results:
            ratio = ratios[result.backend]
            lines.append(
                f"{group.num_envs:>8}  {result.backend:<14}{result.median:>12,.0f}"
                f"{result.spread:>7.0%} "
                f"{_format_ratio(ratio.vs_gym_async):>14}"
                f"{_format_ratio(ratio.vs_gym_sync):>13}"
                f"{_format_ratio(ratio.vs_limit):>10}"
            )
        if group.limit is not None:
            lines.append(f"{group.num_envs:>8}  {'(limit)':<14}{group.limit:>12,.0f}")
    return lines


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def format_memory(report: MemoryReport) -> list[str]:
    """The memory table.

    Args:
        report: The memory report.

    Returns:
        Lines of text.
    """
    lines = [f"memory: {report.num_envs} x {report.env_id}"]
    if report.skipped is not None:
        return [*lines, f"  skipped: {report.skipped}"]
    header = (
        f"{'backend':<12}{'processes':>10}{'RSS total':>12}{'PSS total':>12}"
        f"{'parent RSS':>12}{'parent PSS':>12}{'baseline':>10}"
    )
    lines += [header, "-" * len(header)]
    for figure in report.figures:
        lines.append(
            f"{figure.backend:<12}{figure.processes:>10}{_mib(figure.rss):>12}"
            f"{_mib(figure.pss):>12}{_mib(figure.parent_rss):>12}"
            f"{_mib(figure.parent_pss):>12}{_mib(figure.baseline_rss):>10}"
        )
    by_name = {figure.backend: figure for figure in report.figures}
    ours, theirs = by_name.get("vecpool"), by_name.get("gym-async")
    if ours is not None and theirs is not None:
        pss = (
            f", PSS {theirs.pss / ours.pss:.1f}x"
            if theirs.pss is not None and ours.pss
            else ""
        )
        lines.append(
            f"gym-async / vecpool: RSS {theirs.rss / max(ours.rss, 1):.1f}x{pss}"
        )
    lines.append(
        "(baseline: RSS of the fresh process before it created the vector env)"
    )
    lines += textwrap.wrap(f"method: {report.method}", width=88)
    return lines


def write_json(data: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``data`` as indented JSON.

    Args:
        data: JSON-ready data (e.g. :meth:`BenchReport.to_dict`).
        path: Output file.
    """
    Path(path).write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")


def require_matplotlib() -> None:
    """Check that matplotlib can be imported (before a long run).

    Raises:
        ImportError: If it cannot, saying to install ``vecpool[plot]``.
    """
    if importlib.util.find_spec("matplotlib") is None:
        msg = (
            "--plot needs matplotlib: install vecpool[plot] "
            "(pip install 'vecpool[plot]')."
        )
        raise ImportError(msg)


def write_plot(report: BenchReport, path: str | os.PathLike[str]) -> None:
    """Plot env-steps/s against ``num_envs``: a line per backend, a panel per workload.

    The dashed line is the physical limit (``raw`` times the CPUs). Uses matplotlib's
    object-oriented API (no pyplot, no global backend).

    Args:
        report: The report.
        path: Output image (PNG).

    Raises:
        ImportError: If matplotlib is missing (install ``vecpool[plot]``).
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    by_workload: dict[str, list[GroupResult]] = {}
    for group in report.groups:
        by_workload.setdefault(group.workload, []).append(group)
    figure = Figure(figsize=(5.0 * len(by_workload), 4.2), layout="constrained")
    axes = figure.subplots(1, len(by_workload), squeeze=False)[0]
    for ax, (name, groups) in zip(axes, by_workload.items(), strict=True):
        num_envs = [group.num_envs for group in groups]
        for backend in BACKENDS:
            points = [
                (group.num_envs, group.medians[backend])
                for group in groups
                if backend in group.medians
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=backend)
        limits = [(g.num_envs, g.limit) for g in groups if g.limit is not None]
        if limits:
            xs, ys = zip(*limits, strict=True)
            ax.plot(xs, ys, "k--", linewidth=1, label="physical limit")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(num_envs, labels=[str(n) for n in num_envs])
        ax.set_title(f"{name} ({groups[0].env_id})")
        ax.set_xlabel("num_envs")
        ax.set_ylabel("env-steps/s (median)")
        ax.grid(visible=True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    machine = report.machine
    figure.suptitle(
        f"vecpool bench: {machine.cpu_model}, {machine.cpus} CPUs, "
        f"Python {platform.python_version()}",
        fontsize="medium",
    )
    figure.savefig(path, dpi=120)
