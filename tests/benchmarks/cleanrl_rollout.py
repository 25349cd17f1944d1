"""CleanRL's PPO rollout loop with a torch policy, on each vector env (a benchmark).

The loop of CleanRL's ``ppo.py`` (``Agent.get_action_and_value`` on the batched
observations, ``envs.step(action.cpu().numpy())``, the rollout buffers filled),
without the update, so the figure is the rollout's env-steps per second as a
training run sees it: the torch policy takes most of each step. Rounds are
interleaved over ``SyncVectorEnv``, Gymnasium's ``AsyncVectorEnv`` and vecpool's
default (and vecpool with ``parent_envs=0``); each line is the median of the
rounds.

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


def main() -> None:
    """Interleave the vector envs and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore", vecpool.VecPoolPerformanceWarning)
    torch.manual_seed(1)
    make = functools.partial(gym.make, "CartPole-v1")
    fns = [make] * args.num_envs
    kinds = {
        "gym-sync": lambda: gym.vector.SyncVectorEnv(fns),
        "gym-async": lambda: gym.vector.AsyncVectorEnv(fns),
        "vecpool": lambda: vecpool.AsyncVectorEnv(fns),
        "vecpool-workers": lambda: vecpool.AsyncVectorEnv(fns, parent_envs=0),
    }
    agent = Agent(4, 2)
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    envs = {name: make_envs() for name, make_envs in kinds.items()}
    try:
        for _ in range(args.rounds):
            for name, env in envs.items():
                rates[name].append(rollout(env, agent, args.num_steps, args.num_envs))
    finally:
        for env in envs.values():
            env.close()
    sync = statistics.median(rates["gym-sync"])
    print(
        f"CleanRL PPO rollout, CartPole-v1, {args.num_envs} envs, "
        f"{args.num_steps} steps, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), {os.cpu_count()} CPUs; "
        f"median of {args.rounds} interleaved rounds"
    )
    for name in kinds:
        rate = statistics.median(rates[name])
        print(f"{name:16s} {rate:9,.0f} env-steps/s  {rate / sync:5.2f}x Sync")


if __name__ == "__main__":
    main()
