"""A probe, not vecpool: the 2-CPU share's step written flat (a benchmark).

What a step of the default placement on 2 CPUs (the parent steps half the envs, one
worker the other half) costs without the engine's layers: the same shared buffers,
the same ``Host.step`` in the parent and the same worker on its doorbell, the
command rung and its reply read straight back by the handle, with no group, wait
loop, Ctrl-C section, spin policy or info merge. It shows what a flat step path
would give (docs/performance.md, "Where the rest goes"); it keeps none of the
guarantees those layers carry, so it must never be used for anything else.
Interleaved with vecpool's own step and ``SyncVectorEnv``; results are not checked.

Run: ``python tests/benchmarks/flat_step_probe.py --num-envs 8``.
Not collected by pytest: a benchmark, never a timed test.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import os
import select
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import vecpool


def _make() -> Any:
    return gym.make("CartPole-v1")


def main() -> None:
    """Interleave the flat probe, vecpool's step and Sync; print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    n = args.num_envs
    warnings.simplefilter("ignore", vecpool.VecPoolPerformanceWarning)
    envs = vecpool.AsyncVectorEnv([_make] * n, num_workers=1, parent_envs=n // 2)
    probe_envs = vecpool.AsyncVectorEnv([_make] * n, num_workers=1, parent_envs=n // 2)
    sync = gym.vector.SyncVectorEnv([_make] * n)
    for env in (envs, probe_envs, sync):
        env.reset(seed=0)
    buffers, group = probe_envs._buffers, probe_envs._group
    worker, local = group.handles
    host = local.local_channel.host  # type: ignore[attr-defined]
    poller = select.poll()
    poller.register(worker.conn.fileno(), select.POLLIN)

    def flat(actions: Any) -> Any:
        buffers.actions.place(actions, shared=True)
        buffer = buffers.obs.choose()
        # rung on the worker's doorbell (or written), numbered as the engine does
        worker.numbers.expect(worker.post_step(buffers.obs.step_messages[buffer]))
        host.step(None, None, buffer)
        while not worker.answered() and not poller.poll(0):
            os.sched_yield()
        worker.receive()
        observations = buffers.obs.read()
        return observations, buffers.rewards.copy(), buffers.terminations.copy()

    actions = np.random.default_rng(0).integers(0, 2, size=(args.steps, n))
    steppers: dict[str, Callable[[Any], Any]] = {
        "flat probe": flat,
        "vecpool": envs.step,
        "gym-sync": sync.step,
    }
    rates: dict[str, list[float]] = {name: [] for name in steppers}
    try:
        for _ in range(args.rounds):
            for name, step in steppers.items():
                for index in range(500):
                    step(actions[index])
                start = time.perf_counter()
                for row in actions:
                    step(row)
                rates[name].append(args.steps * n / (time.perf_counter() - start))
    finally:
        envs.close()
        probe_envs.close(terminate=True)  # its group never saw these steps
        sync.close()
    base = statistics.median(rates["gym-sync"])
    print(f"CartPole-v1, {n} envs, {n // 2} in the parent; median of {args.rounds}")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"{name:12s} {rate:9,.0f} env-steps/s  {rate / base:5.2f}x Sync")


if __name__ == "__main__":
    main()
