"""Find the fastest vecpool settings for your own environment: :func:`autotune`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vecpool._util.progress import Progress
from vecpool._util.topology import physical_cores
from vecpool._util.validation import WAIT_STRATEGIES
from vecpool.bench.agent import Policy, agent_runner, obs_size
from vecpool.bench.backends import run_vector
from vecpool.bench.report import median
from vecpool.bench.runner import measure_interleaved
from vecpool.bench.workloads import EnvFn
from vecpool.vector.async_env import AsyncVectorEnv

__all__ = [
    "WAIT_STRATEGIES",
    "TuneMeasurement",
    "TuneResult",
    "autotune",
    "candidate_worker_counts",
]

NOISE = 0.05
"""Relative difference below which the table calls the defaults as good as the best."""


@dataclass(frozen=True, slots=True)
class TuneMeasurement:
    """The figures of one candidate setting.

    Attributes:
        num_workers: Worker processes.
        wait_strategy: Wait strategy.
        steps_per_second: Median env-steps/s over the rounds.
        rounds: Env-steps/s of each round.
    """

    num_workers: int
    wait_strategy: str
    steps_per_second: float
    rounds: tuple[float, ...]
    parent_envs: int = 0
    is_default: bool = False

    @property
    def setting(self) -> str:
        """The setting in words: ``"2"``, or ``"1 + 4 here (defaults)"``."""
        text = str(self.num_workers)
        if self.parent_envs and self.num_workers:
            text += f" + {self.parent_envs} here"
        return text + (" (defaults)" if self.is_default else "")


@dataclass(frozen=True, slots=True)
class TuneResult:
    """What :func:`autotune` measured and recommends.

    Attributes:
        env_id: The environment (its Gymnasium id, or its class name).
        num_envs: Number of sub-environments.
        num_workers: The fastest worker count.
        wait_strategy: The fastest wait strategy.
        steps_per_second: Its median env-steps/s.
        measurements: Every candidate's figures, in the order they were tried.
        default_num_workers: What ``num_workers=None`` resolves to here.
    """

    env_id: str
    num_envs: int
    num_workers: int
    wait_strategy: str
    steps_per_second: float
    measurements: tuple[TuneMeasurement, ...]
    default_num_workers: int

    @property
    def recommendation(self) -> str:
        """The recommended constructor call, as code."""
        best = self.best
        if best is not None and best.is_default:
            return (
                "vecpool.AsyncVectorEnv(env_fns)  # the defaults: "
                f"num_workers={best.num_workers}, parent_envs={best.parent_envs}"
            )
        if self.num_workers == 0:
            return (
                "vecpool.AsyncVectorEnv(env_fns, num_workers=0)  # in this process: "
                "no isolation, see docs/performance.md"
            )
        return (
            f"vecpool.AsyncVectorEnv(env_fns, num_workers={self.num_workers}, "
            f'wait_strategy="{self.wait_strategy}")'
        )

    @property
    def best(self) -> TuneMeasurement | None:
        """The fastest measurement (the one :attr:`recommendation` names)."""
        for measurement in self.measurements:
            if measurement.steps_per_second == self.steps_per_second and (
                measurement.num_workers,
                measurement.wait_strategy,
            ) == (self.num_workers, self.wait_strategy):
                return measurement
        return None

    @property
    def default(self) -> TuneMeasurement | None:
        """The measurement of vecpool's default settings, if it was a candidate."""
        for measurement in self.measurements:
            if measurement.is_default:
                return measurement
        for measurement in self.measurements:
            if (
                measurement.num_workers == self.default_num_workers
                and measurement.wait_strategy == "auto"
            ):
                return measurement
        return None

    def format_table(self) -> list[str]:
        """The measured figures as a table, with the recommendation.

        Returns:
            Lines of text.
        """
        rounds = len(self.measurements[0].rounds) if self.measurements else 0
        header = (
            f"{'num_workers':>11}  {'wait_strategy':<14}{'env-steps/s':>12}"
            f"{'vs best':>9}"
        )
        lines = [
            f"autotune: {self.num_envs} x {self.env_id}, median of {rounds} rounds",
            header,
            "-" * len(header),
        ]
        default = self.default
        best = self.best
        for measurement in self.measurements:
            notes = []
            if measurement is default:
                notes.append("default")
            if measurement is best:
                notes.append("best")
            ratio = measurement.steps_per_second / self.steps_per_second
            lines.append(
                f"{measurement.setting:>11}  {measurement.wait_strategy:<14}"
                f"{measurement.steps_per_second:>12,.0f}{ratio:>8.2f}x"
                + (f"  ({', '.join(notes)})" if notes else "")
            )
        lines.append(f"recommended: {self.recommendation}")
        if default is not None and default.steps_per_second > 0:
            gain = self.steps_per_second / default.steps_per_second
            lines.append(f"  ({gain:.2f}x the default settings' figure)")
            if default is not best and gain < 1 + NOISE:
                lines.append(
                    f"  within {NOISE:.0%} of the defaults, which may be noise: "
                    "vecpool.AsyncVectorEnv(env_fns) is as good a choice"
                )
        return lines

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "env_id": self.env_id,
            "num_envs": self.num_envs,
            "num_workers": self.num_workers,
            "wait_strategy": self.wait_strategy,
            "steps_per_second": self.steps_per_second,
            "default_num_workers": self.default_num_workers,
            "recommendation": self.recommendation,
            "measurements": [
                {
                    "num_workers": m.num_workers,
                    "parent_envs": m.parent_envs,
                    "defaults": m.is_default,
                    "wait_strategy": m.wait_strategy,
                    "steps_per_second": m.steps_per_second,
                    "rounds": list(m.rounds),
                }
                for m in self.measurements
            ],
        }


def candidate_worker_counts(num_envs: int, cpus: int | None = None) -> tuple[int, ...]:
    """The worker counts :func:`autotune` tries by default.

    0 (every env in this process), 1, 2, one per core less the parent's, one per
    core, twice the core count (capped at ``num_envs``), and ``num_envs`` itself
    (one env per process) when it is small. (:func:`autotune` also measures the
    defaults, the cost model's placement, beside them.)

    Args:
        num_envs: Number of sub-environments.
        cpus: Cores; default: this process's physical cores.

    Returns:
        Sorted distinct counts between 0 and ``num_envs``.

    Example:
        >>> candidate_worker_counts(32, cpus=4)
        (0, 1, 2, 3, 4, 8)
        >>> candidate_worker_counts(6, cpus=2)
        (0, 1, 2, 4, 6)
    """
    cpus = physical_cores() if cpus is None else cpus
    counts = {0, 1, 2, max(1, cpus - 1), cpus, min(2 * cpus, num_envs)}
    if num_envs <= max(8, 2 * cpus):
        counts.add(num_envs)
    return tuple(sorted(count for count in counts if 0 <= count <= num_envs))


def _check_arguments(
    num_envs: int,
    worker_counts: Sequence[int],
    wait_strategies: Sequence[str],
    seconds: float,
    rounds: int,
) -> None:
    if num_envs < 1:
        msg = f"`num_envs` must be at least 1, got {num_envs}."
        raise ValueError(msg)
    bad_counts = [n for n in worker_counts if not 0 <= n <= num_envs]
    if not worker_counts or bad_counts:
        msg = (
            f"`worker_counts` must hold integers between 0 (in-process) and "
            f"num_envs={num_envs}, got {list(worker_counts)}."
        )
        raise ValueError(msg)
    bad_strategies = [s for s in wait_strategies if s not in WAIT_STRATEGIES]
    if not wait_strategies or bad_strategies:
        msg = (
            f"`wait_strategies` must be drawn from {WAIT_STRATEGIES}, got "
            f"{list(wait_strategies)}."
        )
        raise ValueError(msg)
    if seconds <= 0 or rounds < 1:
        msg = (
            "`seconds` must be positive and `rounds` at least 1, got "
            f"seconds={seconds}, rounds={rounds}."
        )
        raise ValueError(msg)


def autotune(
    env_fn: EnvFn,
    num_envs: int,
    *,
    worker_counts: Sequence[int] | None = None,
    wait_strategies: Sequence[str] = WAIT_STRATEGIES,
    seconds: float = 0.5,
    rounds: int = 3,
    verbose: bool = True,
    seed: int = 0,
    agent_ms: float | None = None,
) -> TuneResult:
    """Measure vecpool's throughput on your env over worker counts and wait strategies.

    The candidates include ``num_workers=0`` (every env in this process), which
    wins for cheap envs on few cores.

    For each worker count, one :class:`vecpool.AsyncVectorEnv` per wait strategy is
    created and warmed up; then ``rounds`` interleaved runs of about ``seconds`` each
    step them with the same pre-drawn random actions, and the median env-steps/s of
    each setting is compared.

    Example:
        >>> import functools, gymnasium as gym
        >>> from vecpool.bench.tune import autotune
        >>> result = autotune(
        ...     functools.partial(gym.make, "CartPole-v1"), 4,
        ...     worker_counts=[1, 2], wait_strategies=["block"],
        ...     seconds=0.02, rounds=1, verbose=False,
        ... )
        >>> result.num_workers in (1, 2), result.wait_strategy
        (True, 'block')

    Args:
        env_fn: Creates one environment (picklable, as for ``AsyncVectorEnv``).
        num_envs: Number of sub-environments.
        worker_counts: Worker counts to try; default: :func:`candidate_worker_counts`.
        wait_strategies: Wait strategies to try.
        seconds: Duration of one timed run.
        rounds: Timed runs per setting; the median counts.
        verbose: Show progress on standard error and print the table.
        seed: Seed of the resets and the actions.
        agent_ms: Measure your training loop's way: a policy costing about this
            many milliseconds per batch runs in this process before every step
            (see :class:`vecpool.bench.agent.Policy`).

    Returns:
        The :class:`TuneResult`, whose ``recommendation`` is the fastest setting.

    Raises:
        ValueError: On an invalid argument.
    """
    counts = (
        candidate_worker_counts(num_envs)
        if worker_counts is None
        else tuple(dict.fromkeys(int(n) for n in worker_counts))
    )
    # the defaults (the cost model's placement) beside the candidates, unless the
    # caller names the counts to try
    strategies = tuple(dict.fromkeys(wait_strategies))
    _check_arguments(num_envs, counts, strategies, seconds, rounds)
    result = _measure(
        env_fn,
        num_envs,
        counts,
        strategies,
        seconds,
        rounds,
        seed,
        Progress(enabled=verbose),
        agent_ms,
        with_defaults=worker_counts is None,
    )
    if verbose:
        sys.stdout.write("\n".join(result.format_table()) + "\n")
    return result


def _measure(
    env_fn: EnvFn,
    num_envs: int,
    worker_counts: Sequence[int],
    wait_strategies: Sequence[str],
    seconds: float,
    rounds: int,
    seed: int,
    progress: Progress,
    agent_ms: float | None = None,
    *,
    with_defaults: bool = False,
) -> TuneResult:
    """Run the measurements (validated arguments) and pick the fastest setting."""
    probe = env_fn()
    action_space = probe.action_space
    observation_space = probe.observation_space
    env_id = probe.spec.id if probe.spec is not None else type(probe.unwrapped).__name__
    probe.close()
    measurements: list[TuneMeasurement] = []
    run = (
        run_vector
        if agent_ms is None
        else agent_runner(Policy(obs_size(observation_space), num_envs, agent_ms, seed))
    )
    default = AsyncVectorEnv([env_fn] * num_envs)  # its placement: no env stepped
    placed = (default.num_workers, default.parent_envs)
    default.close()
    settings: list[int | None] = [None] if with_defaults else []
    for workers in (*settings, *worker_counts):
        envs: dict[str, AsyncVectorEnv] = {}
        # in-process, no one waits: one strategy stands for all (defaults: auto)
        if workers is None:
            tried: Sequence[str] = ("auto",)
        else:
            tried = wait_strategies[:1] if workers == 0 else wait_strategies
        try:
            for strategy in tried:
                progress.update(
                    f"[autotune n={num_envs}] starting "
                    f"{'the defaults' if workers is None else workers} workers, "
                    f"{strategy}"
                )
                env = (
                    AsyncVectorEnv([env_fn] * num_envs)
                    if workers is None
                    else AsyncVectorEnv(
                        [env_fn] * num_envs, num_workers=workers, wait_strategy=strategy
                    )
                )
                envs[strategy] = env
                env.reset(seed=seed)
            _, runs = measure_interleaved(
                {strategy: (env, run) for strategy, env in envs.items()},
                action_space,
                num_envs,
                seed=seed,
                seconds=seconds,
                warmup_seconds=min(0.3, seconds / 2),
                rounds=rounds,
                progress=progress,
                tag=f"[autotune n={num_envs}, {workers} workers]",
            )
        finally:
            for env in envs.values():
                env.close()
        for strategy in tried:
            rates = tuple(m.steps_per_second for m in runs[strategy])
            if workers is None:
                measurements.append(
                    TuneMeasurement(
                        placed[0], strategy, median(rates), rates, placed[1], True
                    )
                )
            else:
                measurements.append(
                    TuneMeasurement(workers, strategy, median(rates), rates)
                )
    progress.clear()
    best = max(measurements, key=lambda m: m.steps_per_second)
    return TuneResult(
        env_id=env_id,
        num_envs=num_envs,
        num_workers=best.num_workers,
        wait_strategy=best.wait_strategy,
        steps_per_second=best.steps_per_second,
        measurements=tuple(measurements),
        default_num_workers=placed[0],
    )
