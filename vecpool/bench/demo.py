"""``vecpool demo``: vecpool against Gymnasium's vector envs on the same actions."""

# Printing results is this module's job, so the print rule is off for the whole file:
# ruff: noqa: T201

from __future__ import annotations

import argparse
import functools
import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from vecpool._util.arguments import (
    Handler,
    Subparsers,
    num_workers_arg,
    positive_int,
    seed_arg,
)
from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["add_demo_parser"]

DEMO_ENV_ID = "CartPole-v1"
DEMO_CHECK_STEPS = 20
"""How many leading steps the demo compares between vecpool and ``SyncVectorEnv``."""


class _Trace(NamedTuple):
    """Everything one vector env returned on one step (or on reset)."""

    observations: npt.NDArray[Any]
    rewards: npt.NDArray[Any]
    terminations: npt.NDArray[Any]
    truncations: npt.NDArray[Any]


class _Run(NamedTuple):
    """Outcome of stepping one vector env through the demo's actions."""

    name: str
    seconds: float
    env_steps: int
    traces: list[_Trace]

    @property
    def env_steps_per_second(self) -> float:
        """Throughput in sub-environment steps per second."""
        return self.env_steps / self.seconds if self.seconds > 0 else float("inf")


def _run_vector_env(
    name: str,
    envs: gym.vector.VectorEnv[Any, Any, Any],
    actions: npt.NDArray[Any],
    seed: int,
    check_steps: int,
) -> _Run:
    """Reset ``envs`` with ``seed``, step it through ``actions`` and time the steps.

    The first ``check_steps`` results (after the reset's) are copied for comparison.
    The vector env is closed afterwards.
    """
    try:
        observations, _ = envs.reset(seed=seed)
        zeros = np.zeros(envs.num_envs)
        flags = np.zeros(envs.num_envs, dtype=np.bool_)
        traces = [_Trace(np.array(observations), zeros, flags, flags)]
        start = time.perf_counter()
        for step, action in enumerate(actions):
            observations, rewards, terminations, truncations, _ = envs.step(action)
            if step < check_steps:
                traces.append(
                    _Trace(
                        np.array(observations),
                        np.array(rewards),
                        np.array(terminations),
                        np.array(truncations),
                    )
                )
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    return _Run(name, seconds, actions.shape[0] * envs.num_envs, traces)


def _traces_equal(first: Sequence[_Trace], second: Sequence[_Trace]) -> bool:
    """Whether two runs returned bitwise-identical arrays at every compared step."""
    return len(first) == len(second) and all(
        np.array_equal(left, right)
        for first_trace, second_trace in zip(first, second, strict=True)
        for left, right in zip(first_trace, second_trace, strict=True)
    )


def _demo(args: argparse.Namespace) -> int:
    """Run the ``demo`` command: vecpool versus Gymnasium's vector envs on CartPole.

    Returns:
        0 if vecpool's results equal ``SyncVectorEnv``'s, else 1.
    """
    num_envs: int = args.num_envs
    steps: int = args.steps
    seed: int = args.seed
    check_steps = min(steps, DEMO_CHECK_STEPS)
    env_fns = [functools.partial(gym.make, DEMO_ENV_ID) for _ in range(num_envs)]

    # one pre-drawn action sequence, replayed through every vector env
    probe = gym.make(DEMO_ENV_ID)
    action_space = gym.vector.utils.batch_space(probe.action_space, num_envs)
    probe.close()
    action_space.seed(seed)
    actions = np.stack([action_space.sample() for _ in range(steps)])

    print(
        f"vecpool demo: {DEMO_ENV_ID}, {num_envs} envs x {steps} steps "
        f"= {num_envs * steps:,} env-steps, seed {seed}"
    )
    factories: list[tuple[str, Callable[[], gym.vector.VectorEnv[Any, Any, Any]]]] = [
        (
            "vecpool.AsyncVectorEnv",
            lambda: AsyncVectorEnv(
                env_fns, context=args.context, num_workers=args.num_workers
            ),
        ),
        (
            "gymnasium.vector.AsyncVectorEnv",
            lambda: gym.vector.AsyncVectorEnv(env_fns, context=args.context),
        ),
        ("gymnasium.vector.SyncVectorEnv", lambda: gym.vector.SyncVectorEnv(env_fns)),
    ]
    if args.num_workers is None:  # the in-process mode too, when it is not the first
        factories.insert(
            1,
            (
                "vecpool.AsyncVectorEnv(num_workers=0)",
                lambda: AsyncVectorEnv(env_fns, num_workers=0),
            ),
        )
    runs: list[_Run] = []
    for name, factory in factories:
        print(f"  running {name} ...", flush=True)
        runs.append(_run_vector_env(name, factory(), actions, seed, check_steps))

    ours, *others = runs
    print()
    print(f"{'vector env':<38}{'env-steps/s':>14}{'vecpool speed-up':>20}")
    print(f"{ours.name:<38}{ours.env_steps_per_second:>14,.0f}{'-':>20}")
    for run in others:
        ratio = ours.env_steps_per_second / run.env_steps_per_second
        print(f"{run.name:<38}{run.env_steps_per_second:>14,.0f}{ratio:>19.2f}x")
    fastest = max(runs, key=lambda run: run.env_steps_per_second)
    print(
        f"fastest here: {fastest.name} (one run, random actions, no policy; "
        "`vecpool bench tune --agent 1` measures your loop's way, with a policy "
        "of about 1 ms a step between steps: give your policy's milliseconds)"
    )
    print()

    identical = _traces_equal(ours.traces, runs[-1].traces)
    print(
        f"results identical: {'yes' if identical else 'no'} "
        f"(vecpool vs SyncVectorEnv: reset and first {check_steps} steps)"
    )
    return 0 if identical else 1


def add_demo_parser(
    subparsers: Subparsers[argparse.ArgumentParser],
) -> None:
    """Register the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help=f"compare vecpool with Gymnasium's vector envs on {DEMO_ENV_ID}",
        description=(
            f"Step {DEMO_ENV_ID} with the same pre-drawn random actions through "
            "vecpool.AsyncVectorEnv, gymnasium.vector.AsyncVectorEnv and "
            "gymnasium.vector.SyncVectorEnv; print each one's env-steps per second "
            "and check that vecpool's results equal SyncVectorEnv's."
        ),
    )
    parser.add_argument(
        "--num-envs",
        type=positive_int,
        default=8,
        help="sub-environments (default: %(default)s)",
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=2000,
        help="vector steps per run (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=seed_arg,
        default=0,
        help="reset and action seed (default: %(default)s)",
    )
    parser.add_argument(
        "--num-workers",
        type=num_workers_arg,
        default=None,
        help="vecpool worker processes; 0 steps the envs in this process "
        "(default: vecpool's own choice)",
    )
    parser.add_argument(
        "--context",
        choices=multiprocessing.get_all_start_methods(),
        default=None,
        help="multiprocessing start method of both async envs (default: platform's)",
    )
    handler: Handler = _demo
    parser.set_defaults(handler=handler)
