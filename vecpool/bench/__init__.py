"""Throughput benchmark: vecpool against Gymnasium's vector envs (``vecpool bench``).

Every backend steps the same workload with the same pre-drawn random actions. For
each ``(workload, num_envs)`` every backend's vector env is created once, warmed up
and sized so that one run takes about ``seconds``; then the rounds are interleaved
(round 1 runs every backend, then round 2, ..., each round in a new seeded order)
and each figure is the median over the rounds, in sub-environment steps per second
(env-steps/s). The ``raw`` backend
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

from vecpool._util.progress import Progress
from vecpool._util.validation import available_cpus, require_matplotlib
from vecpool.bench.backends import (
    BACKENDS,
    Backend,
    Measurement,
    calibrate,
    run_vector,
)
from vecpool.bench.memory import (
    MemoryFigure,
    MemoryReport,
    _memory_probe_main,
    measure_memory,
    read_memory,
)
from vecpool.bench.report import (
    BackendResult,
    BenchReport,
    BenchSettings,
    GroupResult,
    Machine,
    Ratios,
    compute_ratios,
    format_group_table,
    format_memory,
    machine_info,
    median,
    physical_limit,
    write_json,
    write_plot,
)
from vecpool.bench.runner import run_benchmark
from vecpool.bench.workloads import (
    DEFAULT_NUM_ENVS,
    DEFAULT_SECONDS,
    DEFAULT_WARMUP_SECONDS,
    DEFAULT_WORKLOADS,
    MEMORY_ENV_ID,
    MEMORY_NUM_ENVS,
    MIN_ROUNDS,
    QUICK_SECONDS,
    QUICK_WARMUP_SECONDS,
    ActionPlan,
    BigInfoEnv,
    BigObsEnv,
    BusyEnv,
    Workload,
    resolve_workload,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_NUM_ENVS",
    "DEFAULT_SECONDS",
    "DEFAULT_WARMUP_SECONDS",
    "DEFAULT_WORKLOADS",
    "MEMORY_ENV_ID",
    "MEMORY_NUM_ENVS",
    "MIN_ROUNDS",
    "QUICK_SECONDS",
    "QUICK_WARMUP_SECONDS",
    "ActionPlan",
    "Backend",
    "BackendResult",
    "BenchReport",
    "BenchSettings",
    "BigInfoEnv",
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
    "_memory_probe_main",
    "available_cpus",
    "calibrate",
    "compute_ratios",
    "format_group_table",
    "format_memory",
    "machine_info",
    "measure_memory",
    "median",
    "physical_limit",
    "read_memory",
    "require_matplotlib",
    "resolve_workload",
    "run_benchmark",
    "run_vector",
    "write_json",
    "write_plot",
]
