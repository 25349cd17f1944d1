"""CleanRL's PPO rollout loop with a torch policy, on each vector env (a benchmark).

The loop of CleanRL's ``ppo.py`` (``Agent.get_action_and_value`` on the batched
observations, ``envs.step(action.cpu().numpy())``, the rollout buffers filled),
without the update, so the figure is the rollout's env-steps per second as a
training run sees it: the torch policy takes most of each step. Rounds are
interleaved over ``SyncVectorEnv``, Gymnasium's ``AsyncVectorEnv`` and vecpool's
default (and vecpool with ``parent_envs=0``, and with ``policy_threads="auto"``),
each run in a fresh process; each line is the median of the rounds.

Run: ``python tests/benchmarks/cleanrl_rollout.py --rounds 5`` (needs torch).
Not collected by pytest: a benchmark, never a timed test.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import vecpool


def _layer(inputs: int, outputs: int, std: float = float(np.sqrt(2))) -> nn.Linear:
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class Agent(nn.Module):
    """CleanRL's ``Agent`` for CartPole: 64-64 tanh actor and critic."""

    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            _layer(obs_dim, 64),
            nn.Tanh(),
            _layer(64, 64),
            nn.Tanh(),
            _layer(64, 1, 1.0),
        )
        self.actor = nn.Sequential(
            _layer(obs_dim, 64),
            nn.Tanh(),
            _layer(64, 64),
            nn.Tanh(),
            _layer(64, n_actions, 0.01),
        )

    def get_action_and_value(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Sample an action; its log-probability, the entropy and the value."""
        logits = self.actor(x)
        probs = torch.distributions.Categorical(logits=logits)
        action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def rollout(envs: Any, agent: Agent, num_steps: int, num_envs: int) -> float:
    """One CleanRL rollout of ``num_steps``; return its env-steps per second."""
    obs_buf = torch.zeros((num_steps, num_envs, 4))
    actions = torch.zeros((num_steps, num_envs))
    logprobs = torch.zeros((num_steps, num_envs))
    rewards = torch.zeros((num_steps, num_envs))
    dones = torch.zeros((num_steps, num_envs))
    values = torch.zeros((num_steps, num_envs))
    next_obs, _ = envs.reset(seed=1)
    next_obs = torch.Tensor(next_obs)
    next_done = torch.zeros(num_envs)
    start = time.perf_counter()
    for step in range(num_steps):
        obs_buf[step] = next_obs
        dones[step] = next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob
        next_obs, reward, terminations, truncations, _ = envs.step(action.cpu().numpy())
        next_done = torch.Tensor(np.logical_or(terminations, truncations))
        rewards[step] = torch.tensor(reward).view(-1)
        next_obs = torch.Tensor(next_obs)
    return num_steps * num_envs / (time.perf_counter() - start)


KINDS = {
    "gym-sync": lambda fns: gym.vector.SyncVectorEnv(fns),
    "gym-async": lambda fns: gym.vector.AsyncVectorEnv(fns),
    "vecpool": lambda fns: vecpool.AsyncVectorEnv(fns),
    "vecpool-workers": lambda fns: vecpool.AsyncVectorEnv(fns, parent_envs=0),
    "vecpool-pt": lambda fns: vecpool.AsyncVectorEnv(fns, policy_threads="auto"),
}
"""The vector envs measured (``vecpool-pt``: torch limited to the CPUs the workers
leave, as vecpool's ``VecPoolPerformanceWarning`` advises)."""


def measure(kind: str, num_envs: int, num_steps: int) -> float:
    """One rollout's env-steps per second on ``kind``, after a warm-up rollout."""
    warnings.simplefilter("ignore", vecpool.VecPoolPerformanceWarning)
    torch.manual_seed(1)
    envs = KINDS[kind]([functools.partial(gym.make, "CartPole-v1")] * num_envs)
    try:
        agent = Agent(4, 2)
        rollout(envs, agent, num_steps // 4, num_envs)
        return rollout(envs, agent, num_steps, num_envs)
    finally:
        envs.close()


def main() -> None:
    """Interleave the vector envs, each run in a fresh process; print the medians.

    A fresh process per run: ``policy_threads`` changes the process's torch
    threads, which must not reach the other vector envs' runs.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(measure(args.one, args.num_envs, args.num_steps))
        return
    rates: dict[str, list[float]] = {kind: [] for kind in args.kinds}
    for _ in range(args.rounds):
        for kind in args.kinds:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    kind,
                    "--num-envs",
                    str(args.num_envs),
                    "--num-steps",
                    str(args.num_steps),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rates[kind].append(float(out.split()[-1]))
    sync = statistics.median(rates["gym-sync"]) if "gym-sync" in rates else None
    print(
        f"CleanRL PPO rollout, CartPole-v1, {args.num_envs} envs, "
        f"{args.num_steps} steps, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), {os.cpu_count()} CPUs; "
        f"median of {args.rounds} interleaved rounds, a fresh process each"
    )
    for kind in args.kinds:
        rate = statistics.median(rates[kind])
        ratio = f"{rate / sync:5.2f}x Sync" if sync else ""
        print(f"{kind:16s} {rate:9,.0f} env-steps/s  {ratio}")


if __name__ == "__main__":
    main()
