"""Replay-pool benchmark (``vecpool bench pool``): add, sample, wrapper cost, memory.

Figures, each the median of interleaved rounds:

* ``add``: transitions per second of ``ReplayPool.add`` fed 8-env ``CartPole-v1``
  batches (pre-drawn, cycled), into a pool of one million transitions;
* ``sample``: transitions per second of ``ReplayPool.sample(256)``;
* ``wrapper``: env-steps per second of ``vecpool.AsyncVectorEnv`` with 8
  ``CartPole-v1`` envs, with and without :class:`vecpool.ReplayPoolWrapper`, and
  the fraction of throughput the wrapper costs;
* ``memory``: ``pool.nbytes`` against the raw bytes of the stored fields, and the
  compact layout (``store_next_obs=False``) against the plain one for
  ``(84, 84, 4)`` ``uint8`` observations.

Beside these, ``vecpool bench pool`` measures ``ReplayPool`` against the replay
buffers of SB3, cpprb, Tianshou and TorchRL where one is installed (``--peers``):
:mod:`vecpool.bench.pool_peers`.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from vecpool.bench.workloads import BigObsEnv
from vecpool.replay.pool import ReplayPool
from vecpool.replay.wrapper import ReplayPoolWrapper
from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["PoolBenchReport", "format_pool_report", "run_pool_benchmark"]

NUM_ENVS = 8
SAMPLE_SIZE = 256


@dataclass(frozen=True)
class PoolBenchReport:
    """Medians of the replay-pool benchmark (see the module docstring)."""

    add_per_second: float
    sample_per_second: float
    plain_steps_per_second: float
    wrapped_steps_per_second: float
    wrapper_cost: float
    nbytes: int
    raw_bytes: int
    image_plain_nbytes: int
    image_compact_nbytes: int
    rounds: int

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return asdict(self)


def _cartpole_batches(count: int, seed: int) -> list[tuple[Any, ...]]:
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    shape = tuple(env.observation_space.shape or ())
    env.close()
    batches = []
    for _ in range(count):
        obs = rng.uniform(-1, 1, (NUM_ENVS, *shape)).astype(np.float32)
        batches.append(
            (
                obs,
                rng.integers(0, 2, NUM_ENVS),
                obs + np.float32(0.01),
                np.ones(NUM_ENVS),
                rng.random(NUM_ENVS) < 0.05,
                np.zeros(NUM_ENVS, np.bool_),
            )
        )
    return batches


def _time_adds(pool: ReplayPool, batches: list[Any], seconds: float) -> float:
    added, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for batch in batches:
            pool.add(*batch)
        added += len(batches) * NUM_ENVS
    return added / (time.perf_counter() - started)


def _time_samples(pool: ReplayPool, seconds: float) -> float:
    drawn, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(100):
            pool.sample(SAMPLE_SIZE)
        drawn += 100 * SAMPLE_SIZE
    return drawn / (time.perf_counter() - started)


def _time_steps(env: Any, actions: np.ndarray[Any, Any]) -> float:
    started = time.perf_counter()
    for batch in actions:
        env.step(batch)
    return actions.size / (time.perf_counter() - started)


def _image_nbytes(store_next_obs: bool, steps: int) -> int:
    env = gym.vector.SyncVectorEnv([functools.partial(BigObsEnv, 100)] * 2)
    wrapper = ReplayPoolWrapper(env, 4_000, store_next_obs=store_next_obs)
    wrapper.reset(seed=0)
    for _ in range(steps):
        wrapper.step(np.zeros(2, np.int64))
    nbytes = wrapper.pool.nbytes
    wrapper.close()
    return nbytes


def run_pool_benchmark(
    seconds: float = 0.5, rounds: int = 3, seed: int = 0
) -> PoolBenchReport:
    """Measure the replay pool (see the module docstring).

    Args:
        seconds: Duration of one measurement.
        rounds: Number of interleaved rounds (the figures are medians).
        seed: Seed of the pre-drawn data.

    Returns:
        The medians.
    """
    batches = _cartpole_batches(512, seed)
    probe = gym.make("CartPole-v1")
    obs_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    pool = ReplayPool(obs_space, action_space, NUM_ENVS, 1_000_000, seed=seed)
    for batch in batches:
        pool.add(*batch)

    env_fns = [functools.partial(gym.make, "CartPole-v1")] * NUM_ENVS
    plain = AsyncVectorEnv(env_fns)
    wrapped = ReplayPoolWrapper(AsyncVectorEnv(env_fns), 1_000_000)
    actions = np.random.default_rng(seed).integers(0, 2, (2_000, NUM_ENVS))
    adds, samples, plains, wraps = [], [], [], []
    try:
        for env in (plain, wrapped):
            env.reset(seed=seed)
            _time_steps(env, actions[:200])
        for _ in range(rounds):
            adds.append(_time_adds(pool, batches, seconds))
            samples.append(_time_samples(pool, seconds))
            plains.append(_time_steps(plain, actions))
            wraps.append(_time_steps(wrapped, actions))
    finally:
        plain.close()
        wrapped.close()
    plain_sps, wrapped_sps = statistics.median(plains), statistics.median(wraps)
    row = 8 + 1 + 1  # reward, terminated, truncated
    for space in (obs_space, action_space, obs_space):
        size = math.prod(space.shape or ())
        row += size * np.dtype(space.dtype).itemsize
    return PoolBenchReport(
        add_per_second=statistics.median(adds),
        sample_per_second=statistics.median(samples),
        plain_steps_per_second=plain_sps,
        wrapped_steps_per_second=wrapped_sps,
        wrapper_cost=1.0 - wrapped_sps / plain_sps,
        nbytes=pool.nbytes,
        raw_bytes=row * pool.capacity * NUM_ENVS,
        image_plain_nbytes=_image_nbytes(True, 1_200),
        image_compact_nbytes=_image_nbytes(False, 1_200),
        rounds=rounds,
    )


def format_pool_report(report: PoolBenchReport) -> list[str]:
    """The report as terminal lines."""
    return [
        f"replay pool: {NUM_ENVS}-env CartPole-v1 batches, median of {report.rounds} "
        "rounds",
        f"  pool.add            {report.add_per_second:>14,.0f} transitions/s",
        f"  pool.sample({SAMPLE_SIZE})    {report.sample_per_second:>14,.0f} "
        "transitions/s",
        f"  vecpool step        {report.plain_steps_per_second:>14,.0f} env-steps/s",
        f"  + ReplayPoolWrapper {report.wrapped_steps_per_second:>14,.0f} env-steps/s"
        f"  (costs {report.wrapper_cost:.1%} of the step rate)",
        f"  nbytes              {report.nbytes:>14,} bytes for "
        f"{report.raw_bytes:,} raw bytes of fields "
        f"({report.nbytes / report.raw_bytes - 1:+.1%})",
        f"  (84,84,4) uint8 obs: compact layout {report.image_compact_nbytes:,} bytes "
        f"vs plain {report.image_plain_nbytes:,} "
        f"({report.image_compact_nbytes / report.image_plain_nbytes:.0%})",
    ]
