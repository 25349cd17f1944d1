"""The agent in the loop: a policy computed in the parent between steps.

A synthetic bench steps pre-drawn actions with the parent idle; a training loop runs
a policy on every observation batch first, on the parent's cores (BLAS threads, as
torch does). :class:`Policy` is that policy: a numpy MLP whose forward on a batch of
``num_envs`` observations is calibrated to cost about ``milliseconds``. The actions
stepped are still the plan's (the same env work for every backend); the forward's
result is consumed, so it cannot be skipped.

:func:`cpu_seconds` reads what a set of processes burned (Linux ``/proc``), which
gives the CPU each worker spends per env-step beside the env's own step cost.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import leaves
from vecpool.bench.backends import Measurement, run_batches
from vecpool.bench.workloads import ActionPlan

__all__ = [
    "LatencyPolicy",
    "Policy",
    "agent_runner",
    "cpu_seconds",
    "env_pids",
    "obs_size",
]

_WIDTH = 256
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Policy:
    """A numpy MLP forward calibrated to about ``milliseconds`` per vector step.

    It computes in the parent (with numpy's BLAS threads): a policy on the CPU.

    Example:
        >>> import numpy as np
        >>> policy = Policy(obs_size=4, num_envs=8, milliseconds=0.2)
        >>> float(policy(np.zeros((8, 4), np.float32))) >= 0.0
        True

    Args:
        obs_size: Number of values in one observation.
        num_envs: Rows of the batch the cost is calibrated for.
        milliseconds: Target cost of one forward on ``num_envs`` rows.
        seed: Seed of the weights.
    """

    def __init__(
        self, obs_size: int, num_envs: int, milliseconds: float, seed: int = 0
    ) -> None:
        """Draw the weights and calibrate the depth."""
        rng = np.random.default_rng(seed)
        scale = 1.0 / math.sqrt(max(1, obs_size))
        self.first = (rng.standard_normal((obs_size, _WIDTH)) * scale).astype(
            np.float32
        )
        self.hidden = (rng.standard_normal((_WIDTH, _WIDTH)) / _WIDTH**0.5).astype(
            np.float32
        )
        self.depth = 0
        self.total = 0.0
        self.target = milliseconds / 1e3
        probe = np.zeros((num_envs, obs_size), np.float32)
        base = self._time(probe)
        # one hidden layer timed on its own, over many calls: a difference of two
        # noisy forwards could come out near zero (or below), and the depth then
        # explode (a 3 ms target once gave 200 ms forwards)
        hidden = np.ones((num_envs, _WIDTH), np.float32)
        per_layer = _median_seconds(lambda: np.tanh(hidden @ self.hidden), 64)
        self.depth = max(0, round((self.target - base) / max(per_layer, 1e-7)))
        self.seconds = self._time(probe)  # what one forward costs, as calibrated

    waits = False
    """The parent computes (it does not wait)."""

    def _time(self, probe: npt.NDArray[np.float32]) -> float:
        self(probe)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            self(probe)
            times.append(time.perf_counter() - start)
        return sorted(times)[2]

    def __call__(self, obs: Any) -> np.floating[Any]:
        """One forward over a batch of observations (any array or Dict/Tuple).

        Args:
            obs: The observation batch, one row per env.

        Returns:
            A number computed from every output (so nothing can be skipped).
        """
        rows = _flat_rows(obs, self.first.shape[0])
        hidden = np.maximum(rows @ self.first, 0.0)
        for _ in range(self.depth):
            hidden = np.tanh(hidden @ self.hidden)
        result: np.floating[Any] = hidden.sum()
        self.total += float(result)  # consumed: the forward cannot be skipped
        return result


class LatencyPolicy:
    """A GPU-like policy: each call waits ``milliseconds`` without using the CPU.

    A policy on an accelerator costs the parent a fixed latency per call, whatever
    the batch size, while its CPU is free: the workers can use every core.

    Example:
        >>> policy = LatencyPolicy(0.5)
        >>> policy.seconds, policy.waits
        (0.0005, True)

    Args:
        milliseconds: The wait of one call.
    """

    waits = True
    """The parent waits (sleeps) rather than computes."""

    def __init__(self, milliseconds: float) -> None:
        """Keep the latency."""
        self.seconds = milliseconds / 1e3

    def __call__(self, obs: Any) -> np.floating[Any]:  # noqa: ARG002 - any batch
        """Wait for the "accelerator" (a sleep: no CPU)."""
        time.sleep(self.seconds)
        nothing: np.floating[Any] = np.float32(0.0)
        return nothing


def _median_seconds(call: Callable[[], Any], repeats: int) -> float:
    """The median duration of ``call`` over ``repeats`` timed calls (after one)."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def _flat_rows(obs: Any, size: int) -> npt.NDArray[np.float32]:
    """The batch as float32 rows of ``size`` values (every numeric leaf, flattened).

    Leaves that are not numbers (a mission string, a graph) are left out, as
    :func:`obs_size` leaves them out: a policy reads them some other way.
    """
    arrays = (np.asarray(leaf) for leaf in _leaves_of(obs))
    parts = [a.reshape(len(a), -1) for a in arrays if a.dtype.kind in "biuf"]
    rows = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    return rows.reshape(rows.shape[0], size).astype(np.float32, copy=False)


def _leaves_of(obs: Any) -> list[Any]:
    if isinstance(obs, dict):
        return [leaf for value in obs.values() for leaf in _leaves_of(value)]
    if isinstance(obs, tuple):
        return [leaf for value in obs for leaf in _leaves_of(value)]
    return [obs]


def obs_size(space: spaces.Space[Any]) -> int:
    """Number of values in one observation of ``space`` (every array leaf, flattened).

    Leaves that are not arrays (Text, Graph, custom spaces) are left out.
    """
    shapes = [shape for _, shape in leaves(space, skip_foreign=True)]
    return sum(max(1, math.prod(shape)) for shape in shapes)


def _schedstat_seconds(pids: list[int]) -> float | None:
    """Nanosecond CPU time of every thread of ``pids`` (``None``: not available)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
            for task in tasks:
                with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as handle:
                    total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    return total / 1e9


def env_pids(env: Any) -> list[int]:
    """The worker process ids of a vector env (``[]`` for in-process ones)."""
    processes = getattr(getattr(env, "unwrapped", env), "processes", None) or []
    return [p.pid for p in processes if getattr(p, "pid", None)]


def cpu_seconds(pids: Iterable[int]) -> float | None:
    """CPU seconds the processes ``pids`` (every thread) burned so far.

    Read from ``/proc/<pid>/task/*/schedstat`` (nanoseconds) where the kernel
    has it; else user + system time from ``/proc/<pid>/stat``, in clock ticks
    (10 ms: too coarse for short runs).

    Args:
        pids: Process ids.

    Returns:
        The sum, or ``None`` where ``/proc`` is not readable (not Linux).
    """
    pids = list(pids)
    precise = _schedstat_seconds(pids)
    if precise is not None:
        return precise
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime (after the name)
    return total / _CLOCK_TICKS


def steal_counters(path: str = "/proc/stat") -> tuple[int, int] | None:
    """The machine's CPU time the hypervisor gave away so far, and all its CPU time.

    On a virtual machine, other guests' load takes *steal* time from this one's
    CPUs: a run during which it is high is slow for reasons outside the run.

    Args:
        path: The kernel's CPU accounting (its first line sums every CPU).

    Returns:
        ``(steal, total)`` in clock ticks, or ``None`` where it cannot be read
        (not Linux).
    """
    try:
        with open(path, "rb") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if fields[:1] != [b"cpu"] or len(fields) < 9:
        return None
    # user nice system idle iowait irq softirq steal (guest time is in user)
    ticks = [int(value) for value in fields[1:9]]
    return ticks[7], sum(ticks)


def steal_share(
    before: tuple[int, int] | None, after: tuple[int, int] | None
) -> float | None:
    """The share of the machine's CPU time stolen between two :func:`steal_counters`."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def agent_runner(
    policy: Policy | LatencyPolicy, *, batches: bool = False
) -> Callable[[Any, ActionPlan, int], Measurement]:
    """A bench runner that computes ``policy`` before every step.

    Args:
        policy: The policy.
        batches: Use ``send``/``recv`` (a vecpool env built with ``batch_size``):
            the policy runs on each received batch while the other envs step, the
            overlap an alternating sampler gets.

    Returns:
        ``run(env, plan, steps)`` timing ``steps * num_envs`` env-steps.
    """
    last: dict[int, Any] = {}  # each env's latest observation batch

    def run_vector(env: Any, plan: ActionPlan, steps: int) -> Measurement:
        step = env.step
        plan_batches, rows = plan.batches, plan.rows
        obs = last.get(id(env))
        start = time.perf_counter()
        for index in range(steps):
            if obs is not None:
                policy(obs)
            obs = step(plan_batches[index % rows])[0]
        seconds = time.perf_counter() - start
        last[id(env)] = obs
        return Measurement(steps * plan.num_envs, seconds)

    def run_policy_batches(env: Any, plan: ActionPlan, steps: int) -> Measurement:
        return run_batches(env, plan, steps, policy)

    return run_policy_batches if batches else run_vector
