"""CartPole on a machine that other work keeps busy (a benchmark, not a test).

Starts ``--burners`` processes that spin in a loop (by default two: both CPUs of a
2-CPU machine taken), then interleaves rounds of ``SyncVectorEnv`` and vecpool
(its defaults, ``parent_envs=0`` and ``wait_strategy="block"``) stepping 8
CartPole envs, and prints each one's median env-steps/s and its ratio to Sync's
under the same load.

Run: ``python tests/benchmarks/busy_machine.py --burners 2 --rounds 5``.
Not collected by pytest: a benchmark, never a timed test.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import functools
import multiprocessing
import statistics
import time
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

import vecpool


def _burn(stop: Any) -> None:
    while not stop.value:
        pass


def _rate(envs: Any, num_envs: int, seconds: float) -> float:
    """Env-steps per second of ``envs`` over about ``seconds``."""
    actions = np.zeros(num_envs, dtype=np.int64)
    for _ in range(300):
        envs.step(actions)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            envs.step(actions)
        steps += 100
    return steps * num_envs / (time.perf_counter() - start)


def main() -> None:
    """Start the burners, interleave the rounds, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    warnings.simplefilter("ignore", vecpool.VecPoolPerformanceWarning)
    fns = [functools.partial(gym.make, "CartPole-v1")] * args.num_envs
    kinds = {
        "gym-sync": lambda: gym.vector.SyncVectorEnv(fns),
        "vecpool": lambda: vecpool.AsyncVectorEnv(fns),
        "vecpool-workers": lambda: vecpool.AsyncVectorEnv(fns, parent_envs=0),
        "vecpool-block": lambda: vecpool.AsyncVectorEnv(fns, wait_strategy="block"),
    }
    stop = multiprocessing.Value("b", 0)
    burners = [
        multiprocessing.Process(target=_burn, args=(stop,), daemon=True)
        for _ in range(args.burners)
    ]
    for burner in burners:
        burner.start()
    envs = {name: make() for name, make in kinds.items()}
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    try:
        for env in envs.values():
            env.reset(seed=0)
        for _ in range(args.rounds):
            for name, env in envs.items():
                rates[name].append(_rate(env, args.num_envs, args.seconds))
    finally:
        stop.value = 1
        for burner in burners:
            burner.join()
        for env in envs.values():
            env.close()
    sync = statistics.median(rates["gym-sync"])
    print(
        f"CartPole-v1, {args.num_envs} envs, {args.burners} busy loops, median of "
        f"{args.rounds} interleaved rounds"
    )
    for name in kinds:
        rate = statistics.median(rates[name])
        print(f"{name:16s} {rate:9,.0f} env-steps/s  {rate / sync:5.2f}x Sync")


if __name__ == "__main__":
    main()
