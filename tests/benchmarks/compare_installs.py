"""CPU per env-step of two (or more) vecpool installs, rounds interleaved.

For a refactoring's before/after check: each install is a Python interpreter of a
virtualenv holding one vecpool version (and ``ale-py`` for the atari workload). Each
measurement runs in a fresh process: a ``vecpool.AsyncVectorEnv`` of ``--num-envs``
envs steps pre-drawn random actions for ``--seconds``; the parent's CPU is
``time.process_time()`` and the workers' is their ``utime + stime``, read as the
parent's reaped children after ``close()``. Rounds alternate the order of the
installs; the summary is the median over rounds of each round's after/before ratio
(pairs taken in the same round, so the machine's load cancels out).

Workloads: ``cartpole``, ``infos`` (CartPole with ALE's lives and frame numbers in
every info), ``atari`` (Pong, needs ``ale-py``); ``-block`` after one of them sets
``wait_strategy="block"``.

Usage::

    python tests/benchmarks/compare_installs.py before=/tmp/a/bin/python \\
        after=.venv/bin/python --rounds 7 --workloads cartpole cartpole-block atari

Not collected by pytest (no ``test_`` prefix); no figure here is a pass/fail gate.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

KEYS = ("env_steps_per_s", "parent_us_per_es", "workers_us_per_es", "total_us_per_es")


def _policy(kind: str, milliseconds: float) -> Any:
    """What runs between steps: nothing, a CPU loop, or a GPU-like wait (no CPU)."""

    def cpu() -> None:
        end = time.perf_counter() + milliseconds / 1000
        while time.perf_counter() < end:
            pass

    def sleep() -> None:
        time.sleep(milliseconds / 1000)

    if milliseconds <= 0:
        return None
    return cpu if kind == "cpu" else sleep


def measure(
    workload: str, num_envs: int, seconds: float, policy: str = "none:0"
) -> dict[str, Any]:
    """One measurement in this process (run by the interpreter under test)."""
    import gymnasium as gym

    import vecpool
    from vecpool.bench.workloads import make_atari

    class AtariInfo(gym.Wrapper[Any, Any, Any, Any]):
        """CartPole with ALE's step info (the same env for every install)."""

        frames = 0

        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.frames += 4
            info = {**info, "lives": 3, "episode_frame_number": self.frames}
            info["frame_number"] = self.frames
            return obs, reward, terminated, truncated, info

    def cartpole() -> Any:
        return gym.make("CartPole-v1")

    def infos() -> Any:
        return AtariInfo(gym.make("CartPole-v1"))

    makers = {"cartpole": cartpole, "infos": infos, "atari": make_atari}
    make = makers[workload.removesuffix("-block")]
    strategy = "block" if workload.endswith("-block") else "auto"
    env = vecpool.AsyncVectorEnv([make] * num_envs, wait_strategy=strategy)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(256)]
    kind, _, milliseconds = policy.partition(":")
    act = _policy(kind, float(milliseconds))
    for step in range(50):  # warm-up
        env.step(actions[step % 256])
    cpu, start = time.process_time(), time.perf_counter()
    steps = 0
    while time.perf_counter() - start < seconds:
        for _ in range(16):
            if act is not None:
                act()
            env.step(actions[steps % 256])
            steps += 1
    parent = time.process_time() - cpu
    wall = time.perf_counter() - start
    env.close()  # reaps every worker: their CPU is now the children's
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers = children.ru_utime + children.ru_stime
    env_steps = steps * num_envs
    return {
        "workload": workload,
        "policy": policy,
        "num_envs": num_envs,
        "env_steps_per_s": env_steps / wall,
        "parent_us_per_es": 1e6 * parent / env_steps,
        "workers_us_per_es": 1e6 * workers / env_steps,
        "total_us_per_es": 1e6 * (parent + workers) / env_steps,
    }


def main() -> int:
    """Run the interleaved rounds and print each measurement and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("installs", nargs="*", metavar="NAME=PYTHON")
    parser.add_argument("--workloads", nargs="+", default=["cartpole", "atari"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument(
        "--policy",
        default="none:0",
        help="between steps: cpu:MS (a busy loop in the parent) or sleep:MS (a "
        "GPU-like wait that uses no CPU); default none:0",
    )
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        workload, num_envs, seconds, policy = args.measure
        print(json.dumps(measure(workload, int(num_envs), float(seconds), policy)))
        return 0
    installs = dict(item.split("=", 1) for item in args.installs)
    if len(installs) < 2:
        parser.error("name at least two installs, e.g. before=PYTHON after=PYTHON")
    names = list(installs)
    rows: list[dict[str, Any]] = []
    for workload in args.workloads:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                command = [installs[name], __file__, "--measure", workload]
                command += [str(args.num_envs), str(args.seconds), args.policy]
                # run outside the checkout, so each install imports its own vecpool
                out = subprocess.run(
                    command, capture_output=True, text=True, check=True, cwd="/"
                )
                row = {"install": name, "round": round_, **json.loads(out.stdout)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    base = names[0]
    print(
        f"\nmedian ratio to {base!r} over rounds (n={args.num_envs}, "
        f"policy {args.policy}):"
    )
    for workload in args.workloads:
        for name in names[1:]:
            ratios: dict[str, list[float]] = {key: [] for key in KEYS}
            for round_ in range(args.rounds):
                pair = {
                    row["install"]: row
                    for row in rows
                    if row["workload"] == workload and row["round"] == round_
                }
                for key in KEYS:
                    ratios[key].append(pair[name][key] / pair[base][key])
            medians = "  ".join(
                f"{key}={statistics.median(values):.3f}"
                for key, values in ratios.items()
            )
            print(f"{workload:15s} {name}: {medians}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
