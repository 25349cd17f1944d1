"""The bench's measuring loop: interleaved rounds and medians."""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from vecpool._util.progress import Progress
from vecpool.bench.agent import (
    LatencyPolicy,
    Policy,
    agent_runner,
    cpu_seconds,
    env_pids,
    obs_size,
    steal_counters,
    steal_share,
)
from vecpool.bench.backends import (
    BACKENDS,
    Backend,
    Measurement,
    VecpoolBatchBackend,
    calibrate,
)
from vecpool.bench.memory import measure_memory
from vecpool.bench.report import (
    BackendResult,
    BenchReport,
    BenchSettings,
    GroupResult,
    machine_info,
)
from vecpool.bench.workloads import ActionPlan, Workload, resolve_workload

# -------------------------------------------------------------------------- running


Runner = Callable[[Any, ActionPlan, int], Measurement]
"""Steps a vector env with a plan's actions for a number of vector steps."""


def measure_interleaved(
    runs: Mapping[str, tuple[Any, Runner]],
    action_space: Any,
    num_envs: int,
    *,
    seed: int,
    seconds: float,
    warmup_seconds: float,
    rounds: int,
    fixed_steps: int | None = None,
    singles: bool = False,
    progress: Progress,
    tag: str,
) -> tuple[dict[str, int], dict[str, list[Measurement]]]:
    """THE measuring loop of the bench and of ``autotune``: size, then interleave.

    Each entry is warmed up and sized (by :func:`calibrate`) so that one run takes
    about ``seconds``, on the same pre-drawn actions; then ``rounds`` rounds run
    every entry once each, so machine noise hits all of them alike. Each round
    takes them in a new order (shuffled, seeded by ``seed``): an entry that leaves
    the machine busy for a moment (processes exiting, caches to refill) would
    otherwise always burden, or spare, the same next one. On 16 cores the default
    vector env run right after Sync each round made 0.81-0.87x the same placement
    named explicitly; 0.95x with the order shuffled (docs/performance.md).

    Args:
        runs: Name -> (vector env, how to run it).
        action_space: The vector env's batched action space.
        num_envs: Number of sub-environments.
        seed: Seed of the action plans.
        seconds: Target seconds per run.
        warmup_seconds: Seconds of warm-up while sizing.
        rounds: Number of interleaved rounds.
        fixed_steps: Vector steps per run instead of sizing by time.
        singles: Build the plan's per-env actions (for one-env loops) up front.
        progress: Where to show what runs.
        tag: Prefix of the progress lines.

    Returns:
        Vector steps per run, and each entry's measurements in round order.
    """
    warmup_plan = ActionPlan(action_space, num_envs, 64, seed + 1)
    steps: dict[str, int] = {}
    for name, (env, run) in runs.items():
        progress.update(f"{tag} warm-up: {name}", minor=True)
        sized = calibrate(
            functools.partial(run, env, warmup_plan), warmup_seconds, seconds
        )
        steps[name] = sized if fixed_steps is None else fixed_steps
    rows = min(max(steps.values()) + 1, ActionPlan.max_rows(action_space, num_envs))
    plan = ActionPlan(action_space, num_envs, rows, seed)
    if singles:
        _ = plan.singles  # built once, outside the timed loops
    results: dict[str, list[Measurement]] = {name: [] for name in runs}
    order = random.Random(seed)
    names = list(runs)
    for round_index in range(rounds):
        order.shuffle(names)
        for name in names:
            env, run = runs[name]
            progress.update(f"{tag} round {round_index + 1}/{rounds}: {name}")
            results[name].append(run(env, plan, steps[name]))
    return steps, results


def _run_group(
    workload: Workload,
    num_envs: int,
    settings: BenchSettings,
    cpus: int,
    progress: Progress,
) -> GroupResult | None:
    """Benchmark every backend on one workload and ``num_envs`` (rounds interleaved).

    A backend that cannot run ``num_envs`` envs (:meth:`Backend.skip_reason`) is
    left out with its reason. Returns ``None`` when none of the chosen backends
    supports the workload or can run.
    """
    tag = f"[{workload.name} n={num_envs}]"
    supported = [
        BACKENDS[name]
        for name in settings.backends
        if BACKENDS[name].supports(workload)
    ]
    reasons = {b.name: b.skip_reason(workload.env_fn, num_envs) for b in supported}
    skipped = tuple(
        (name, reason) for name, reason in reasons.items() if reason is not None
    )
    backends = [b for b in supported if reasons[b.name] is None]
    if not backends:
        return None
    probe = workload.env_fn()
    action_space = probe.action_space
    observation_space = probe.observation_space
    probe.close()
    policy: Policy | LatencyPolicy | None = None
    if settings.agent_ms is not None:
        policy = Policy(obs_size(observation_space), num_envs, settings.agent_ms)
    elif settings.agent_latency_ms is not None:
        policy = LatencyPolicy(settings.agent_latency_ms)
    envs: dict[str, Any] = {}
    progress.update(f"{tag} starting {', '.join(b.name for b in backends)}")
    try:
        for backend in backends:
            progress.update(f"{tag} starting {backend.name}", minor=True)
            envs[backend.name] = backend.make(workload.env_fn, num_envs, settings.seed)
        stolen = steal_counters()
        steps, rounds = measure_interleaved(
            {b.name: (envs[b.name], _runner(b, policy)) for b in backends},
            action_space,
            num_envs,
            seed=settings.seed,
            seconds=settings.seconds,
            warmup_seconds=settings.warmup_seconds,
            rounds=settings.rounds,
            fixed_steps=settings.steps,
            singles="raw" in envs,
            progress=progress,
            tag=tag,
        )
        steal = steal_share(stolen, steal_counters())
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
            BackendResult(
                b.name,
                steps[b.name],
                tuple(rounds[b.name]),
                label=b.label(workload.env_fn, num_envs),
            )
            for b in backends
        ),
        policy_seconds=None if policy is None else policy.seconds,
        policy_waits=policy is not None and policy.waits,
        skipped=skipped,
        steal=steal,
    )


def _runner(backend: Backend, policy: Policy | LatencyPolicy | None) -> Runner:
    """How the bench runs ``backend``, with its CPU seconds measured.

    With a policy, every backend but the raw one-env loop (the env's own reference)
    computes it before each step.
    """
    run: Runner = backend.run
    if policy is not None and backend.name != "raw":
        run = agent_runner(policy, batches=isinstance(backend, VecpoolBatchBackend))

    def measured(env: Any, plan: ActionPlan, steps: int) -> Measurement:
        pids = env_pids(env)
        workers = cpu_seconds(pids) if pids else None
        parent = time.process_time()
        measurement = run(env, plan, steps)
        parent = time.process_time() - parent
        if workers is not None:
            after = cpu_seconds(pids)
            workers = None if after is None else after - workers
        return dataclasses.replace(measurement, worker_cpu=workers, parent_cpu=parent)

    return measured


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
