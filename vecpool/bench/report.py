"""Statistics, machine description and output (tables, JSON, plots) of the bench."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import platform
import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from vecpool._util.validation import available_cpus, require_matplotlib
from vecpool._version import __version__
from vecpool.bench.backends import BACKENDS, Measurement
from vecpool.bench.memory import MemoryReport
from vecpool.bench.workloads import (
    DEFAULT_NUM_ENVS,
    DEFAULT_SECONDS,
    DEFAULT_WARMUP_SECONDS,
    DEFAULT_WORKLOADS,
    MIN_ROUNDS,
)

# -------------------------------------------------------------------- statistics


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
        agent_ms: If set, the agent-in-the-loop mode: before every step the parent
            computes a policy (:class:`vecpool.bench.agent.Policy`) costing about
            this many milliseconds on a batch of ``num_envs`` observations.
        agent_latency_ms: If set, the agent in the loop is GPU-like
            (:class:`vecpool.bench.agent.LatencyPolicy`): the parent waits this many
            milliseconds per policy call without using the CPU.
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
    agent_ms: float | None = None
    agent_latency_ms: float | None = None

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
        for name in ("agent_ms", "agent_latency_ms"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1000:
                msg = f"`{name}` must be between 0 and 1000, got {value}."
                raise ValueError(msg)
        if self.agent_ms is not None and self.agent_latency_ms is not None:
            msg = (
                "Choose one agent: `agent_ms` (a policy on the CPU) or "
                "`agent_latency_ms` (a GPU-like wait), not both."
            )
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
        label: What the table shows, where it says more than the name: the
            settings that ran (``pufferlib-4w (model)``, ``envpool-8t (cpus)``).
    """

    backend: str
    steps: int
    rounds: tuple[Measurement, ...]
    label: str | None = None

    @property
    def display_name(self) -> str:
        """The label, or the backend name where there is none."""
        return self.label or self.backend

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

    @property
    def worker_cpu_per_step(self) -> float | None:
        """Median CPU seconds the worker processes burned per env-step."""
        values = [
            m.worker_cpu / m.env_steps
            for m in self.rounds
            if m.worker_cpu is not None and m.env_steps
        ]
        return median(values) if values else None

    @property
    def parent_cpu_per_step(self) -> float | None:
        """Median CPU seconds of the parent (all its threads) per env-step."""
        values = [
            m.parent_cpu / m.env_steps
            for m in self.rounds
            if m.parent_cpu is not None and m.env_steps
        ]
        return median(values) if values else None

    @property
    def cpu_per_step(self) -> float | None:
        """Median CPU seconds per env-step of the parent and the workers together."""
        values = [
            ((m.worker_cpu or 0.0) + m.parent_cpu) / m.env_steps
            for m in self.rounds
            if m.parent_cpu is not None and m.env_steps
        ]
        return median(values) if values else None


@dataclass(frozen=True)
class GroupResult:
    """Every backend's figures for one workload and one ``num_envs``.

    Attributes:
        workload: Workload name.
        env_id: What the environment is.
        num_envs: Number of sub-environments.
        cpus: CPUs available (for the physical limit).
        results: Per backend, in table order.
        policy_seconds: In the agent-in-the-loop mode, what one policy forward on
            ``num_envs`` observations cost when calibrated.
        policy_waits: Whether that policy waits without using the CPU (GPU-like).
        skipped: ``(backend, reason)`` for each chosen backend that could not run
            this ``num_envs`` (e.g. no PufferLib worker count divides it).
        steal: The share of the machine's CPU time a hypervisor gave other guests
            while the rounds ran (``None``: not measured; vecpool/bench/agent.py
            ``steal_counters``).
    """

    workload: str
    env_id: str
    num_envs: int
    cpus: int
    results: tuple[BackendResult, ...]
    policy_seconds: float | None = None
    policy_waits: bool = False
    skipped: tuple[tuple[str, str], ...] = ()
    steal: float | None = None

    @property
    def fastest(self) -> str:
        """The backend with the highest median (``raw`` excluded)."""
        candidates = [r for r in self.results if r.backend != "raw"] or list(
            self.results
        )
        return max(candidates, key=lambda r: r.median).backend

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
            "policy_seconds": self.policy_seconds,
            "policy_waits": self.policy_waits,
            "fastest": self.fastest,
            "skipped": dict(self.skipped),
            "steal": self.steal,
            "backends": {
                result.backend: {
                    "label": result.display_name,
                    "steps_per_run": result.steps,
                    "rounds": [
                        {
                            "env_steps": m.env_steps,
                            "seconds": m.seconds,
                            "steps_per_second": m.steps_per_second,
                            "worker_cpu": m.worker_cpu,
                            "parent_cpu": m.parent_cpu,
                        }
                        for m in result.rounds
                    ],
                    "median": result.median,
                    "spread": result.spread,
                    "worker_cpu_per_step": result.worker_cpu_per_step,
                    "parent_cpu_per_step": result.parent_cpu_per_step,
                    "cpu_per_step": result.cpu_per_step,
                    **dataclasses.asdict(ratios[result.backend]),
                }
                for result in self.results
            },
        }


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


def installed_version(package: str) -> str | None:
    """The installed version of distribution ``package`` (``None``: not installed)."""
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
    versions = {"vecpool": __version__}
    for package in ("numpy", "gymnasium", "envpool"):
        found = installed_version(package)
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
        f"{'num_envs':>8}  {'backend':<{_NAME_WIDTH}}{'env-steps/s':>12}{'spread':>8}"
        f"{'vs gym-async':>14}{'vs gym-sync':>13}{'vs limit':>10}"
        f"{'workers us':>12}{'parent us':>11}{'total us':>10}{'over raw':>10}"
    )
    policy = first.policy_seconds
    lines = [
        f"{label}: median of {len(first.results[0].rounds)} rounds; "
        f"physical limit = raw x {first.cpus} CPUs",
        "CPU microseconds per env-step: of the worker processes, of this "
        "process (every thread), both, and both less the raw env's own "
        "(with a CPU policy, its cost is in the parent's)",
    ]
    if policy is not None and first.policy_waits:
        lines.append(
            f"agent in the loop, GPU-like: the parent waits {policy * 1e3:.2f} ms "
            "per policy call without using the CPU, before every step (raw: the "
            "env alone, its own step cost)"
        )
    elif policy is not None:
        lines.append(
            f"agent in the loop: a policy forward of {policy * 1e3:.2f} ms on "
            f"n={first.num_envs} observations before every step (raw: the env "
            "alone, its own step cost)"
        )
    lines += [header, "-" * len(header)]
    for group in groups:
        ratios = group.ratios
        raw = next((r.cpu_per_step for r in group.results if r.backend == "raw"), None)
        for result in group.results:
            ratio = ratios[result.backend]
            total = result.cpu_per_step
            over = None if total is None or raw is None else total - raw
            lines.append(
                f"{group.num_envs:>8}  {result.display_name:<{_NAME_WIDTH}}"
                f"{result.median:>12,.0f}"
                f"{result.spread:>7.0%} "
                f"{_format_ratio(ratio.vs_gym_async):>14}"
                f"{_format_ratio(ratio.vs_gym_sync):>13}"
                f"{_format_ratio(ratio.vs_limit):>10}"
                f"{_micro(result.worker_cpu_per_step):>12}"
                f"{_micro(result.parent_cpu_per_step):>11}"
                f"{_micro(total):>10}"
                f"{_micro(over if result.backend != 'raw' else None):>10}"
            )
        if group.limit is not None:
            lines.append(
                f"{group.num_envs:>8}  {'(limit)':<{_NAME_WIDTH}}{group.limit:>12,.0f}"
            )
        lines.extend(
            f"{group.num_envs:>8}  skipped {name}: {reason}"
            for name, reason in group.skipped
        )
        if group.steal is not None and group.steal >= STEAL_NOTED:
            lines.append(
                f"{group.num_envs:>8}  hypervisor steal: {group.steal:.0%} of this "
                "machine's CPU time went to other guests during these rounds: its "
                "figures are low and uneven (run again when it is quiet)"
            )
        lines.append(f"{group.num_envs:>8}  fastest here: {group.fastest}")
    return lines


STEAL_NOTED = 0.02
"""Hypervisor steal (a share of CPU time) from which a group's table says so."""


_NAME_WIDTH = 23
"""Width of the table's backend column (``pufferlib-128w (cores)`` and a space)."""


def _micro(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


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


def write_plot(report: BenchReport, path: str | os.PathLike[str]) -> None:
    """Plot env-steps/s against ``num_envs``: a line per backend, a panel per workload.

    The dashed line is the physical limit (``raw`` times the CPUs). A backend whose
    label is the same at every ``num_envs`` of a panel is named by it
    (``envpool-8t (cpus)``), else by its name (``pufferlib-model``: the table
    says which worker count ran where). Uses matplotlib's object-oriented API (no
    pyplot, no global backend).

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
            results = [
                (group.num_envs, result)
                for group in groups
                for result in group.results
                if result.backend == backend
            ]
            if results:
                labels = {result.display_name for _, result in results}
                ax.plot(
                    [num for num, _ in results],
                    [result.median for _, result in results],
                    marker="o",
                    label=labels.pop() if len(labels) == 1 else backend,
                )
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
    figure.suptitle(  # two lines: one panel is narrower than the CPU's name
        f"vecpool bench: {machine.cpu_model}\n{machine.cpus} CPUs, "
        f"Python {platform.python_version()}",
        fontsize="medium",
    )
    figure.savefig(path, dpi=120)
