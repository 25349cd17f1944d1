"""The bench's measuring loop: interleaved rounds and medians."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vecpool._progress import Progress
from vecpool.bench.backends import BACKENDS, Measurement, calibrate
from vecpool.bench.memory import measure_memory
from vecpool.bench.report import (
    BackendResult,
    BenchReport,
    BenchSettings,
    GroupResult,
    machine_info,
)
from vecpool.bench.workloads import ActionPlan, Workload, resolve_workload

EnvFn = Callable[[], gym.Env[Any, Any]]

# -------------------------------------------------------------------------- running


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
