"""The replay pool in the main job (``vecpool bench pool``'s "main job" rows).

Issue 39: recording must be cheap where it runs, in the loop that steps the envs.
Every loop steps 8 ``CartPole-v1`` envs with random actions (the vector action
space's ``sample()`` each vector step, as ``vecpool collect`` does without a
policy) for :data:`ENV_STEPS` env steps:

* ``vecpool``: :func:`vecpool.make_vec` alone (``collect``'s vector env, no pool);
* ``sync``: Gymnasium's ``SyncVectorEnv`` alone;
* ``sync+sb3``: ``SyncVectorEnv`` in ``SAME_STEP`` autoreset with Stable-Baselines3's
  ``ReplayBuffer(n_envs=8)`` filled by hand, the final observations patched in
  (cleanrl's ``real_next_obs`` loop); skipped with a note without
  stable-baselines3;
* ``sync+wrapper``: ``SyncVectorEnv`` in a :class:`vecpool.ReplayPoolWrapper`;
* ``collect``: ``vecpool collect``'s loop, :func:`vecpool.sampling.collect.collect`
  itself; in the DQN kind, :func:`vecpool.make_vec` in a
  :class:`vecpool.ReplayPoolWrapper` (``collect`` has no sampling hook).

The recording loops run in two kinds: ``job`` (the steps, then the buffer written
to a file: ``ReplayPool.save``, SB3's ``save_to_pkl``) and ``dqn-B`` (a
``sample(B)`` after every vector step from the ``B``-th on, as a DQN loop's
``learning_starts``, no file). The pool holds every transition
(:data:`ENV_STEPS`). Each figure covers the whole job, from the reset to the file
written and the envs closed (for ``collect``, from its start line, logged once its
workers are up, to its return): work deferred to a later call counts where it
lands. Env-steps per second, and CPU microseconds per env-step: this process and
its worker processes, all of them, over the same span (Linux ``/proc`` for the
workers still alive at the start; elsewhere the workers' CPU is counted from their
start).

Each (round, loop) runs in a fresh Python process (``python -c``, the result one
JSON line on standard output); rounds interleave the loops, and every figure is
the median over the rounds. The ratio is to the ``sync+sb3`` row of the same kind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from vecpool.bench.fresh import run_fresh
from vecpool.errors import VecPoolPerformanceWarning
from vecpool.replay.wrapper import ReplayPoolWrapper
from vecpool.sampling.collect import collect
from vecpool.vector.make import make_vec

if sys.platform != "win32":
    import resource

__all__ = [
    "ENV_STEPS",
    "LOOPS",
    "MainJobReport",
    "MainJobRow",
    "child_main",
    "format_main_job_report",
    "run_loop",
    "run_main_job_benchmark",
]

ENV_ID = "CartPole-v1"
NUM_ENVS = 8
ENV_STEPS = 100_000
"""Env steps of one run (``ENV_STEPS / NUM_ENVS`` vector steps)."""
BATCH_SIZES = (32, 256)
"""The ``dqn-B`` kinds: SB3's default batch size, and ``bench pool``'s."""
RESULT_PREFIX = "vecpool-main-job: "

LOOPS = {
    "vecpool": "vecpool alone",
    "sync": "Gymnasium Sync alone",
    "sync+sb3": "Sync + SB3 ReplayBuffer by hand",
    "sync+wrapper": "Sync + ReplayPoolWrapper",
    "collect": "vecpool + ReplayPoolWrapper (collect)",
}
"""Loop name: its label in the table."""
RECORDING = ("sync+sb3", "sync+wrapper", "collect")
"""The loops that keep the transitions (they run in every kind)."""
BASELINE = "sync+sb3"


@dataclass(frozen=True)
class MainJobRow:
    """The medians of one (loop, kind)."""

    loop: str
    kind: str
    steps_per_second: float | None
    cpu_us_per_step: float | None
    rounds: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class MainJobReport:
    """The main-job rows (see the module docstring)."""

    rows: tuple[MainJobRow, ...]
    env_steps: int
    rounds: int
    versions: dict[str, str] = field(default_factory=dict)

    def ratio(self, row: MainJobRow) -> float | None:
        """``row``'s env-steps per second over the ``sync+sb3`` row of its kind."""
        kind = "job" if row.kind == "steps" else row.kind
        base = [r for r in self.rows if r.loop == BASELINE and r.kind == kind]
        if not base or base[0].steps_per_second is None:
            return None
        if row.steps_per_second is None:
            return None
        return row.steps_per_second / base[0].steps_per_second

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        data = asdict(self)
        data["ratios"] = [self.ratio(row) for row in self.rows]
        return data


def plan(batch_sizes: Sequence[int] = BATCH_SIZES) -> list[tuple[str, str]]:
    """The (loop, kind) runs of one round, in order.

    The loops without a buffer run once (kind ``steps``); the recording loops run
    as ``job`` and as each ``dqn-B``.
    """
    runs = [(loop, "steps") for loop in LOOPS if loop not in RECORDING]
    kinds = ["job", *(f"dqn-{size}" for size in batch_sizes)]
    runs += [(loop, kind) for kind in kinds for loop in RECORDING]
    return runs


def _children_cpu() -> float:
    """CPU seconds of this process's descendants still alive (Linux; else 0).

    A child's own time and that of the children it reaped (``/proc/PID/stat``).
    """
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    pending = [os.getpid()]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                text = Path(f"/proc/{parent}/task/{task}/children").read_text()
            except OSError:
                continue
            for pid in text.split():
                pending.append(int(pid))
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                except OSError:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                total += sum(int(value) for value in fields[11:15]) / tick
    return total


def _cpu_seconds() -> float:
    """CPU seconds of this process, its reaped children and its live descendants."""
    own = time.process_time()
    if sys.platform == "win32":
        return own
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + usage.ru_utime + usage.ru_stime + _children_cpu()


@dataclass
class _Span:
    """The timed span of one run: wall and CPU seconds from :meth:`start`."""

    wall: float = 0.0
    cpu: float = 0.0

    def start(self, *_args: object) -> None:
        self.cpu = _cpu_seconds()
        self.wall = time.perf_counter()

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self.wall
        return {"seconds": wall, "cpu_seconds": _cpu_seconds() - self.cpu}


def _vecpool_env(mode: AutoresetMode) -> Any:
    """The vector env ``collect`` builds: :func:`vecpool.make_vec`'s placement."""
    return make_vec(ENV_ID, NUM_ENVS, vector_kwargs={"autoreset_mode": mode})


def _sync_env(mode: AutoresetMode) -> Any:
    return gym.make_vec(
        ENV_ID,
        NUM_ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
    )


def _plain(make: Callable[[AutoresetMode], Any], vector_steps: int, seed: int) -> Any:
    env = make(AutoresetMode.NEXT_STEP)
    span = _Span()
    span.start()
    env.reset(seed=seed)
    env.action_space.seed(seed)
    for _ in range(vector_steps):
        env.step(env.action_space.sample())
    env.close()
    return span.stop()


def _wrapped(
    make: Callable[[AutoresetMode], Any],
    vector_steps: int,
    seed: int,
    batch_size: int | None,
    path: Path,
) -> dict[str, float]:
    envs = ReplayPoolWrapper(
        make(AutoresetMode.NEXT_STEP), vector_steps * NUM_ENVS, seed=seed
    )
    pool = envs.pool
    span = _Span()
    span.start()
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    for step in range(vector_steps):
        envs.step(envs.action_space.sample())
        if batch_size is not None and step >= batch_size:
            pool.sample(batch_size)
    envs.close()
    if batch_size is None:
        pool.save(path)
    return span.stop()


def _collect(vector_steps: int, seed: int, path: Path) -> dict[str, float]:
    span = _Span()
    result = collect(
        ENV_ID,
        num_envs=NUM_ENVS,
        steps=vector_steps * NUM_ENVS,
        pool_size=None,
        out=path,
        seed=seed,
        log=span.start,  # said once the workers are up, just before the reset
    )
    figures = span.stop()
    if result.env_steps != vector_steps * NUM_ENVS:
        msg = f"collect took {result.env_steps} env steps"
        raise RuntimeError(msg)
    return figures


def _sb3(
    vector_steps: int, seed: int, batch_size: int | None, path: Path
) -> dict[str, float]:
    # an optional peer: imported only where its row runs
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.save_util import save_to_pkl

    env = _sync_env(AutoresetMode.SAME_STEP)
    buffer = ReplayBuffer(
        vector_steps * NUM_ENVS,
        env.single_observation_space,
        env.single_action_space,
        device="cpu",
        n_envs=NUM_ENVS,
        handle_timeout_termination=False,
    )
    infos_list: list[dict[str, Any]] = [{} for _ in range(NUM_ENVS)]
    span = _Span()
    span.start()
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    for step in range(vector_steps):
        actions = env.action_space.sample()
        next_obs, rewards, terminations, truncations, infos = env.step(actions)
        real_next_obs = next_obs
        ended = np.flatnonzero(np.logical_or(terminations, truncations))
        if ended.size:  # cleanrl's real_next_obs: the final observations patched in
            real_next_obs = next_obs.copy()
            for index in ended.tolist():
                real_next_obs[index] = infos["final_obs"][index]
        buffer.add(obs, real_next_obs, actions, rewards, terminations, infos_list)
        obs = next_obs
        if batch_size is not None and step >= batch_size:
            buffer.sample(batch_size)
    env.close()
    if batch_size is None:
        save_to_pkl(path, buffer)
    return span.stop()


def run_loop(
    loop: str, kind: str, *, env_steps: int = ENV_STEPS, seed: int = 0
) -> dict[str, float]:
    """Run one (loop, kind) in this process (see the module docstring).

    Args:
        loop: A name of :data:`LOOPS`.
        kind: ``steps`` (the loops without a buffer), ``job`` or ``dqn-B``.
        env_steps: Env steps, rounded up to whole vector steps.
        seed: Seed of the resets, the actions and the pool.

    Returns:
        ``env_steps``, ``seconds`` and ``cpu_seconds`` of the timed span.

    Raises:
        ValueError: On an unknown loop or kind.
    """
    vector_steps = math.ceil(env_steps / NUM_ENVS)
    batch_size = int(kind[4:]) if kind.startswith("dqn-") else None
    if loop not in LOOPS or (kind == "steps") != (loop not in RECORDING):
        msg = f"Unknown main-job run {loop!r} ({kind!r})."
        raise ValueError(msg)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pool.npz"
        if loop == "vecpool":
            figures = _plain(_vecpool_env, vector_steps, seed)
        elif loop == "sync":
            figures = _plain(_sync_env, vector_steps, seed)
        elif loop == "sync+sb3":
            figures = _sb3(vector_steps, seed, batch_size, path.with_suffix(".pkl"))
        elif loop == "sync+wrapper":
            figures = _wrapped(_sync_env, vector_steps, seed, batch_size, path)
        elif batch_size is None:
            figures = _collect(vector_steps, seed, path)
        else:
            figures = _wrapped(_vecpool_env, vector_steps, seed, batch_size, path)
    return {"env_steps": float(vector_steps * NUM_ENVS), **figures}


def child_main(argv: Sequence[str]) -> int:
    """Entry point of a measuring process: print its figures as one JSON line.

    Args:
        argv: One argument, the JSON spec (loop, kind, env_steps, seed).

    Returns:
        The exit status.
    """
    spec = json.loads(argv[0])
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=VecPoolPerformanceWarning)
        figures = run_loop(
            spec["loop"], spec["kind"], env_steps=spec["env_steps"], seed=spec["seed"]
        )
    out.write(RESULT_PREFIX + json.dumps(figures) + "\n")
    out.flush()
    return 0


def run_child(
    loop: str,
    kind: str,
    *,
    env_steps: int = ENV_STEPS,
    seed: int = 0,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
) -> dict[str, float] | str:
    """Run one (loop, kind) in a fresh process: its figures, or why there are none.

    Args:
        loop: A name of :data:`LOOPS`.
        kind: As :func:`run_loop`.
        env_steps: Env steps of the run.
        seed: Seed of the run.
        timeout: Seconds the process may take.
        env: The process's environment (default: this one's).

    Returns:
        The figures of :func:`run_loop`, or a one-line reason.
    """
    spec = {"loop": loop, "kind": kind, "env_steps": env_steps, "seed": seed}
    result: dict[str, float] | str = run_fresh(
        __name__, spec, RESULT_PREFIX, timeout=timeout, env=env
    )
    return result


def _has_sb3() -> bool:
    try:
        metadata.version("stable-baselines3")
    except metadata.PackageNotFoundError:
        return False
    return True


def _median_row(
    loop: str, kind: str, results: list[dict[str, float] | str]
) -> MainJobRow:
    good = [r for r in results if not isinstance(r, str)]
    notes = tuple(sorted({f"failed: {r}" for r in results if isinstance(r, str)}))
    if not good:
        return MainJobRow(loop, kind, None, None, 0, notes)
    rates = [r["env_steps"] / r["seconds"] for r in good]
    cpu = [1e6 * r["cpu_seconds"] / r["env_steps"] for r in good]
    return MainJobRow(
        loop, kind, statistics.median(rates), statistics.median(cpu), len(good), notes
    )


def run_main_job_benchmark(
    *,
    rounds: int = 3,
    env_steps: int = ENV_STEPS,
    seed: int = 0,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    progress: Callable[[str], None] | None = None,
    has_sb3: Callable[[], bool] = _has_sb3,
) -> MainJobReport:
    """Measure the main-job loops (see the module docstring).

    Args:
        rounds: Interleaved rounds; each figure is the median over them.
        env_steps: Env steps of each run.
        seed: Seed of every run.
        batch_sizes: The ``dqn-B`` kinds.
        progress: Called with a line before each process starts.
        has_sb3: Whether stable-baselines3 is installed (tests pass a fake).

    Returns:
        One row per (loop, kind), in :func:`plan`'s order.
    """
    runs = plan(batch_sizes)
    sb3 = has_sb3()
    results: dict[tuple[str, str], list[dict[str, float] | str]] = {
        run: [] for run in runs
    }
    for index in range(rounds):
        for loop, kind in runs:
            if loop == "sync+sb3" and not sb3:
                continue
            if progress is not None:
                progress(f"[main job] round {index + 1}/{rounds}: {loop} {kind}")
            results[loop, kind].append(
                run_child(loop, kind, env_steps=env_steps, seed=seed)
            )
    rows = []
    for loop, kind in runs:
        if loop == "sync+sb3" and not sb3:
            note = "skipped: stable-baselines3 is not installed"
            rows.append(MainJobRow(loop, kind, None, None, 0, (note,)))
        else:
            rows.append(_median_row(loop, kind, results[loop, kind]))
    versions = {}
    for name in ("gymnasium", "numpy", "stable-baselines3", "torch"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return MainJobReport(tuple(rows), env_steps, rounds, versions)


def format_main_job_report(report: MainJobReport) -> list[str]:
    """The report as terminal lines."""
    lines = [
        f"main job: {NUM_ENVS} x {ENV_ID}, random actions, {report.env_steps:,} env "
        f"steps, each loop in a fresh process, median of {report.rounds} rounds; "
        f"job = steps + save(), dqn-B = sample(B) every vector step; "
        f"ratio to {LOOPS[BASELINE]} of the same kind",
        f"  {'loop':<40} {'kind':<8} {'env-steps/s':>12} {'CPU us/step':>12} "
        f"{'ratio':>6}",
    ]
    for row in report.rows:
        rate = "-" if row.steps_per_second is None else f"{row.steps_per_second:,.0f}"
        cpu = "-" if row.cpu_us_per_step is None else f"{row.cpu_us_per_step:.1f}"
        ratio = report.ratio(row)
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        note = f"  ({'; '.join(row.notes)})" if row.notes else ""
        lines.append(
            f"  {LOOPS[row.loop]:<40} {row.kind:<8} {rate:>12} {cpu:>12} "
            f"{shown:>6}{note}"
        )
    return lines
