"""Golden outputs of the replay pool: drive it with fixed seeds, record what it gives.

``tests/unit/test_pool_golden.py`` recomputes :func:`outputs` and compares it, bit
for bit, with ``tests/unit/data/replay_golden.npz``, recorded from the pool before
it was split into parts (issue 39). Every storage kind (arrays, next observations
kept apart, frames stored once), every add path (aligned, flat, masked, leaves,
routed by ``env_ids``, ``random`` routing), windows, clearing, aborts, every
sampler with every reader (uniform and prioritized; one step, n-step, sequences),
the episode statistics, ``state_dict`` / ``load_state_dict``, a file saved and
loaded, :class:`vecpool.ReplayPoolWrapper` around Gymnasium vector envs and the
classic :class:`vecpool.Pool`.

Regenerate (only when a change of output is intended, and say which in the commit):
``PYTHONPATH=. python tests/unit/replay_golden.py [NAME_PART ...]`` rewrites the
entries whose names contain a part given (all entries without one).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

import vecpool
from vecpool import ReplayPool

DATA = Path(__file__).parent / "data" / "replay_golden.npz"

Arrays = dict[str, npt.NDArray[Any]]


def flatten(prefix: str, value: Any, out: Arrays) -> None:
    """Put ``value`` (a batch, a nest of arrays, a number) in ``out`` by name."""
    if hasattr(value, "_fields"):
        for field in value._fields:
            flatten(f"{prefix}.{field}", getattr(value, field), out)
    elif isinstance(value, dict):
        for key in sorted(value):
            flatten(f"{prefix}.{key}", value[key], out)
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            flatten(f"{prefix}.{index}", item, out)
    else:
        out[prefix] = np.array(value)  # a copy: later adds must not change it


def _frames(step: npt.NDArray[np.int64], stack: int) -> npt.NDArray[np.uint8]:
    """Stacks of ``stack`` frames (``(2,)`` uint8 each) that shift by one a step."""
    index = step[:, None] + np.arange(stack)  # [envs, stack]
    frames = np.stack([index % 251, (index * 7) % 253], axis=-1)
    return frames.astype(np.uint8)


class _Driver:
    """Feeds one pool a scripted, seeded mix of every add path."""

    def __init__(self, pool: ReplayPool, kind: str, seed: int) -> None:
        self.pool, self.kind = pool, kind
        self.rng = np.random.default_rng(seed)
        self.num_envs = pool.num_envs
        self.clock = np.zeros(self.num_envs, np.int64)  # each env's step

    def _obs(self, envs: npt.NDArray[np.int64]) -> tuple[Any, Any]:
        """Observations and next observations of ``envs`` at their clocks."""
        clock = self.clock[envs]
        if self.kind == "frames":
            stack = self.pool.frame_stack or 1
            obs, next_obs = _frames(clock, stack), _frames(clock + 1, stack)
            jump = self.rng.random(envs.size) < 0.1  # a reset no stack continues
            next_obs[jump] = _frames(clock[jump] + 1000, stack)
            return obs, next_obs
        obs = np.stack([clock, clock * 0.5, -clock], axis=1).astype(np.float32)
        next_obs = obs + 1
        jump = self.rng.random(envs.size) < 0.15  # a partial reset: kept apart
        next_obs[jump] = -7.0
        if self.kind == "dict":
            return (
                {"x": obs, "k": (clock % 5).astype(np.int64)},
                {"x": next_obs, "k": ((clock + 1) % 5).astype(np.int64)},
            )
        return obs, next_obs

    def _scalars(self, count: int) -> tuple[Any, Any, Any]:
        reward = self.rng.normal(size=count).round(3)
        terminated = self.rng.random(count) < 0.12
        truncated = ~terminated & (self.rng.random(count) < 0.05)
        return reward, terminated, truncated

    def step(self, mode: str) -> None:
        """One vector step (or part of one) through the add path ``mode``."""
        n = self.num_envs
        envs = np.arange(n, dtype=np.int64)
        if mode == "routed":  # some envs, one twice, out of order
            envs = self.rng.choice(n, size=n + 1).astype(np.int64)
        obs, next_obs = self._obs(envs)
        action = self.rng.integers(0, 3, envs.size)
        reward, terminated, truncated = self._scalars(envs.size)
        if mode == "aligned":
            self.pool.add(obs, action, next_obs, reward, terminated, truncated)
        elif mode == "masked":
            valid = self.rng.random(n) < 0.6
            leaves = [obs] if not isinstance(obs, dict) else [obs["k"], obs["x"]]
            nexts = (
                [next_obs]
                if not isinstance(next_obs, dict)
                else [next_obs["k"], next_obs["x"]]
            )
            self.pool.add_leaves(
                leaves, [action], nexts, reward, terminated, truncated, valid=valid
            )
            envs = envs[valid]
        elif mode == "lists":  # not arrays: the generic walk
            # (a frame-stacked pool took list rewards to a path that failed)
            rewards = reward if self.kind == "frames" else reward.tolist()
            self.pool.add(
                obs, action.tolist(), next_obs, rewards, terminated, truncated
            )
        else:
            self.pool.add(
                obs, action, next_obs, reward, terminated, truncated, env_ids=envs
            )
        for env in envs.tolist():  # an env twice moves on twice
            self.clock[env] += 1

    def run(self, steps: int) -> None:
        """``steps`` vector steps of add paths drawn at random (runs of each)."""
        modes = ["aligned", "masked", "lists", "routed"]
        step = 0
        while step < steps:
            mode = modes[int(self.rng.integers(0, len(modes)))]
            run = int(self.rng.integers(1, 6))
            for _ in range(min(run, steps - step)):
                self.step(mode)
            step += run
            if self.rng.random() < 0.15:
                self.pool.abort_episodes(np.array([int(self.rng.integers(0, 3))]))


def _read(prefix: str, pool: ReplayPool, out: Arrays, prioritized: bool) -> None:
    """Everything the pool gives: contents, statistics, every sampler and reader."""
    flatten(f"{prefix}.pool", pool.get_pool(), out)
    flatten(f"{prefix}.lengths", pool.lengths, out)
    flatten(f"{prefix}.received", pool.received, out)
    flatten(f"{prefix}.episode_stats", pool.episode_stats, out)
    flatten(f"{prefix}.recent_3", pool.recent_episode_stats(3), out)
    flatten(f"{prefix}.recent_100", pool.recent_episode_stats(100), out)
    chunks = list(pool.iter_pool(7))
    flatten(f"{prefix}.chunk_last", chunks[-1] if chunks else (), out)
    flatten(f"{prefix}.rows", pool.get_rows(1, 0, int(pool.lengths[1])), out)
    flatten(f"{prefix}.uniform", pool.sample(9), out)
    if not pool.random:
        flatten(f"{prefix}.n_step", pool.sample(9, n_step=3, gamma=0.9), out)
        flatten(f"{prefix}.sequences", pool.sample_sequences(3, 5), out)
    if prioritized:
        batch = pool.sample(9, beta=0.4)
        flatten(f"{prefix}.priority", batch, out)
        pool.update_priorities(batch.indices, np.linspace(0.0, 2.0, 9))
        flatten(f"{prefix}.priority_after", pool.sample(9, beta=0.5), out)
        if not pool.random:
            flatten(
                f"{prefix}.priority_n",
                pool.sample(9, n_step=2, gamma=0.5, beta=0.0),
                out,
            )
    flatten(f"{prefix}.nbytes", pool.nbytes, out)


# name: (constructor arguments, driver kind)
SCENARIOS: dict[str, tuple[dict[str, Any], str]] = {
    "plain": ({"pool_size": 24, "window_size": 4}, "box"),
    "plain_clear": ({"pool_size": 30, "clearing_freq": 5, "clearing_size": 2}, "box"),
    "plain_per": ({"pool_size": 24, "alpha": 0.6}, "box"),
    "plain_random": ({"pool_size": 24, "random": True, "alpha": 0.5}, "box"),
    "apart": ({"pool_size": 24, "store_next_obs": False, "window_size": 3}, "box"),
    "apart_clear": (
        {
            "pool_size": 30,
            "store_next_obs": False,
            "clearing_freq": 4,
            "clearing_size": 3,
            "alpha": 0.7,
        },
        "box",
    ),
    "frames": ({"pool_size": 24, "frame_stack": 3}, "frames"),
    "frames_per": (
        {"pool_size": 24, "frame_stack": 3, "window_size": 5, "alpha": 0.6},
        "frames",
    ),
    "frames_clear": (
        {"pool_size": 30, "frame_stack": 4, "clearing_freq": 6, "clearing_size": 2},
        "frames",
    ),
    "dict": ({"pool_size": 24, "alpha": 0.6}, "dict"),
}


def _make(arguments: dict[str, Any], kind: str, seed: int) -> ReplayPool:
    if kind == "frames":
        stack = arguments["frame_stack"]
        obs_space: spaces.Space[Any] = spaces.Box(0, 255, (stack, 2), np.uint8)
    elif kind == "dict":
        obs_space = spaces.Dict(
            {
                "x": spaces.Box(-np.inf, np.inf, (3,), np.float32),
                "k": spaces.Discrete(5),
            }
        )
    else:
        obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    return ReplayPool(obs_space, spaces.Discrete(3), 3, seed=seed, **arguments)


def _scenario(name: str, out: Arrays, folder: Path) -> None:
    arguments, kind = SCENARIOS[name]
    prioritized = arguments.get("alpha") is not None
    pool = _make(arguments, kind, seed=5)
    driver = _Driver(pool, kind, seed=11)
    for stage in range(3):  # read between adds: the deferred work settles there
        driver.run(17)
        _read(f"{name}.{stage}", pool, out, prioritized)
    # state_dict -> load_state_dict into a fresh pool (same generator state)
    twin = _make(arguments, kind, seed=99)
    twin.load_state_dict(pool.state_dict())
    twin.generator_state = pool.generator_state
    _read(f"{name}.twin", twin, out, prioritized)
    # a file, and the pool loaded from it, driven on
    path = pool.save(folder / f"{name}.npz")
    with np.load(path, allow_pickle=False) as data:
        for member in data.files:
            out[f"{name}.file.{member}"] = data[member]
    loaded = ReplayPool.load(path)
    _read(f"{name}.loaded", loaded, out, prioritized)
    _Driver(loaded, kind, seed=12).run(9)
    _read(f"{name}.loaded_on", loaded, out, prioritized)


def _wrapper(name: str, out: Arrays) -> None:
    """ReplayPoolWrapper around Gymnasium's SyncVectorEnv (both autoreset modes)."""
    same_step = name.endswith("same_step")
    stacked = "frames" in name

    def make() -> gym.Env[Any, Any]:
        env = gym.make("CartPole-v1")
        if stacked:
            return gym.wrappers.FrameStackObservation(env, 3)
        return env

    mode = gym.vector.AutoresetMode.SAME_STEP if same_step else None
    kwargs: dict[str, Any] = {} if mode is None else {"autoreset_mode": mode}
    env = gym.vector.SyncVectorEnv([make] * 3, **kwargs)
    envs = vecpool.ReplayPoolWrapper(
        env,
        pool_size=60,
        window_size=15,
        seed=3,
        alpha=0.6,
        frame_stack=3 if stacked else None,
    )
    try:
        envs.reset(seed=7)
        envs.action_space.seed(7)
        for step in range(70):
            envs.step(envs.action_space.sample())
            if step == 40:
                envs.reset(options={"reset_mask": np.array([False, True, False])})
        _read(name, envs.pool, out, prioritized=True)
    finally:
        envs.close()


def _classic(out: Arrays) -> None:
    """The classic ``vecpool.Pool`` (worker processes, ``random=True`` routing)."""
    with vecpool.Pool(
        [lambda: gym.make("CartPole-v1")] * 2,
        processes=2,
        pool_size=40,
        window_size=12,
        clearing_freq=9,
        window_size_=3,
        seed=4,
    ) as pool:
        pool.store(45, progress=False)
        flatten("classic.get_pool", pool.get_pool(), out)
        _read("classic", pool.pool, out, prioritized=False)


def outputs() -> Arrays:
    """Every golden entry, recomputed from the pool as it is now."""
    out: Arrays = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in SCENARIOS:
            _scenario(name, out, Path(folder))
    for name in ("wrapper", "wrapper_same_step", "wrapper_frames"):
        _wrapper(name, out)
    _classic(out)
    return out


def pack(entries: Arrays) -> Arrays:
    """Entries as two arrays (a JSON index and one byte blob): a small archive."""
    index, parts, offset = [], [], 0
    for name in sorted(entries):
        array = np.array(entries[name], order="C")
        raw = np.frombuffer(array.tobytes(), np.uint8)
        index.append([name, array.dtype.str, list(array.shape), offset, raw.size])
        parts.append(raw)
        offset += raw.size
    blob = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    text = np.frombuffer(json.dumps(index).encode(), np.uint8)
    return {"index": text, "blob": blob}


def load() -> Arrays:
    """The recorded golden entries, by name."""
    with np.load(DATA, allow_pickle=False) as data:
        index, blob = json.loads(data["index"].tobytes()), data["blob"]
    entries: Arrays = {}
    for name, dtype, shape, offset, size in index:
        raw = blob[offset : offset + size]
        entries[name] = np.frombuffer(raw.tobytes(), np.dtype(dtype)).reshape(
            tuple(shape)
        )
    return entries


def _main(prefixes: list[str]) -> None:
    fresh = outputs()
    if prefixes:
        kept = {
            key: value
            for key, value in load().items()
            if not any(part in key for part in prefixes)
        }
        fresh = {
            key: value
            for key, value in fresh.items()
            if any(part in key for part in prefixes)
        }
        fresh.update(kept)
    DATA.parent.mkdir(exist_ok=True)
    savez: Callable[..., None] = np.savez_compressed
    savez(DATA, **pack(fresh))


if __name__ == "__main__":
    _main(sys.argv[1:])
