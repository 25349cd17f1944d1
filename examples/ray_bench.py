"""Rollout-level Ray sampling against a per-step Ray loop and a local Sampler.

Three ways to collect CartPole experience with ``--envs`` envs (random actions):

* ``per-step``: one Ray actor hosts a ``vecpool.AsyncVectorEnv``; the driver calls
  ``step`` on it once per vector step (what the remote unit must never be);
* ``per-env-step``: the same with one env, one env step per call;
* ``RaySampler``: ``--actors`` actors, each returning whole ``[T, b]`` rollouts;
* ``local Sampler``: ``vecpool.Sampler`` on one ``AsyncVectorEnv`` in this process.

Usage: ``python examples/ray_bench.py --envs 8 --actors 2 --T 256 --rounds 3``
"""

from __future__ import annotations

import argparse
import sys
import time

import gymnasium as gym
import numpy as np
import ray

import vecpool
from vecpool.sampling.distributed import RaySampler


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


class _StepActor:
    def __init__(self, n: int) -> None:
        self.env = vecpool.AsyncVectorEnv([_cartpole] * n, num_workers=1)
        self.env.reset(seed=0)

    def step(self, actions: np.ndarray) -> np.ndarray:
        return self.env.step(actions)[0]


def main() -> None:
    """Run the three and print env steps per second."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--T", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--actor-workers",
        type=int,
        default=None,
        help="num_workers of each actor's AsyncVectorEnv (default: RaySampler's: "
        "0 for a 1-CPU actor, its envs in the actor itself)",
    )
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    n, steps = args.envs, args.T * 4
    actor = ray.remote(_StepActor).remote(n)
    single = ray.remote(_StepActor).remote(1)
    remote = RaySampler(
        [_cartpole] * n,
        None,
        args.T,
        num_actors=args.actors,
        seed=0,
        env_kwargs=None
        if args.actor_workers is None
        else {"num_workers": args.actor_workers},
    )
    env = vecpool.AsyncVectorEnv([_cartpole] * n, num_workers=args.actors)
    local = vecpool.Sampler(env, None, args.T, seed=0)
    remote.obtain_samples()
    local.obtain_samples()
    ray.get(actor.step.remote(np.zeros(n, np.int64)))
    ray.get(single.step.remote(np.zeros(1, np.int64)))
    rates: dict[str, list[float]] = {
        "per-env-step": [],
        "per-step": [],
        "RaySampler": [],
        "local": [],
    }
    for _ in range(args.rounds):  # interleaved rounds
        start = time.perf_counter()
        for _ in range(steps // 4):
            ray.get(single.step.remote(np.zeros(1, np.int64)))
        rates["per-env-step"].append(steps // 4 / (time.perf_counter() - start))
        start = time.perf_counter()
        for _ in range(steps // 4):
            ray.get(actor.step.remote(np.zeros(n, np.int64)))
        rates["per-step"].append(steps // 4 * n / (time.perf_counter() - start))
        start = time.perf_counter()
        for _ in range(4):
            remote.obtain_samples()
        rates["RaySampler"].append(steps * n / (time.perf_counter() - start))
        start = time.perf_counter()
        for _ in range(4):
            local.obtain_samples()
        rates["local"].append(steps * n / (time.perf_counter() - start))
    median = {name: float(np.median(values)) for name, values in rates.items()}
    out = sys.stdout
    for name, value in median.items():
        out.write(f"{name:>13}: {value:>10,.0f} env-steps/s\n")
    ray_rate = median["RaySampler"]
    out.write(
        f"RaySampler / per-env-step: {ray_rate / median['per-env-step']:.0f}x; "
        f"/ per-step: {ray_rate / median['per-step']:.1f}x; "
        f"/ local Sampler: {ray_rate / median['local']:.2f}x\n"
    )
    remote.close()
    env.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
