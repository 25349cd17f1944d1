"""Resident memory of a vector env and its workers, each measured in a fresh process."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vecpool._util.progress import Progress
from vecpool.bench.backends import BACKENDS
from vecpool.bench.workloads import (
    MEMORY_BACKENDS,
    MEMORY_ENV_ID,
    MEMORY_NUM_ENVS,
    MEMORY_STEPS,
    ActionPlan,
    _write,
    resolve_workload,
)

# -------------------------------------------------------------------------- memory


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
    "import sys; from vecpool.bench.memory import _memory_probe_main; "
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
