"""Workloads of ``vecpool bench``: the toy envs, named env ids, pre-drawn actions."""

from __future__ import annotations

import functools
import importlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

from vecpool._util.spaces import take_rows

EnvFn = Callable[[], gym.Env[Any, Any]]

DEFAULT_WORKLOADS: tuple[str, ...] = ("cartpole", "busy", "bigobs")
DEFAULT_NUM_ENVS: tuple[int, ...] = (2, 8, 32)
DEFAULT_SECONDS = 1.0
"""Target duration of one backend run (one round), in seconds."""
DEFAULT_WARMUP_SECONDS = 0.3
QUICK_SECONDS = 0.05
QUICK_WARMUP_SECONDS = 0.02
MIN_ROUNDS = 3
MIN_STEPS = 2
"""Fewest vector steps a sized run takes."""
MEMORY_NUM_ENVS = 32
MEMORY_ENV_ID = "CartPole-v1"
MEMORY_BACKENDS: tuple[str, ...] = ("vecpool", "gym-async")
MEMORY_STEPS = 200
"""Vector steps the memory probe takes before it measures (steady state)."""
BUSY_STEP_SECONDS = 200e-6
ATARI_ENV_ID = "ALE/Pong-v5"
"""The Atari game of the ``atari`` workload."""
ATARI_FRAME_STACK = 4
_ATARI_MODULES: tuple[str, ...] = ("ale_py", "cv2")
_ATARI_INSTALL = (
    '`pip install "vecpool[bench]"` (or `pip install ale-py opencv-python-headless`)'
)
_MAX_ACTION_BYTES = 64 * 2**20
_MAX_SAMPLED_ROWS = 20_000


def _write(text: str = "") -> None:
    """Write one line of results to standard output."""
    sys.stdout.write(text + "\n")


# ----------------------------------------------------------------------------- envs


class BusyEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """A CPU-bound toy env: every step busy-waits about 200 microseconds.

    It stands in for a simulator whose step costs real CPU time, where vector envs
    are judged by how well they use the cores. Observations are four floats in
    ``[0, 1)``; episodes are truncated after ``max_steps`` steps and never terminate.

    Example:
        >>> env = BusyEnv()
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((4,), dtype('float32'))
    """

    def __init__(
        self, step_seconds: float = BUSY_STEP_SECONDS, max_steps: int = 500
    ) -> None:
        """Build the env.

        Args:
            step_seconds: How long each step busy-waits (``time.perf_counter``).
            max_steps: Episode length; the last step is truncated.
        """
        self.step_seconds = step_seconds
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._state = np.zeros(4, dtype=np.float32)
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """Start an episode from a random state drawn from ``self.np_random``."""
        super().reset(seed=seed, options=options)
        self._steps = 0
        self._state = self.np_random.uniform(0.0, 0.1, size=4).astype(np.float32)
        return self._state.copy(), {}

    def step(
        self, action: np.int64
    ) -> tuple[npt.NDArray[np.float32], SupportsFloat, bool, bool, dict[str, Any]]:
        """Busy-wait ``step_seconds``, then move one coordinate by the action."""
        deadline = time.perf_counter() + self.step_seconds
        while time.perf_counter() < deadline:
            pass
        self._steps += 1
        index = int(action) + 2 * (self._steps % 2)
        self._state[index] = (self._state[index] + 0.01) % 1.0
        return self._state.copy(), 1.0, False, self._steps >= self.max_steps, {}


class BigInfoEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """A cheap env whose every step returns a 1 MiB array in its info.

    Infos travel pickled through the pipes (observations go by shared memory), so
    this measures the transport of large messages: one step of 8 envs moves 8 MiB.

    Example:
        >>> env = BigInfoEnv()
        >>> _ = env.reset(seed=0)
        >>> env.step(0)[4]["frame"].nbytes
        1048576
    """

    info_bytes: ClassVar[int] = 2**20

    def __init__(self, max_steps: int = 1000) -> None:
        """Build the env.

        Args:
            max_steps: Episode length; the last step is truncated.
        """
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0, 1, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._frame = np.zeros(self.info_bytes, dtype=np.uint8)
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """Start an episode."""
        super().reset(seed=seed, options=options)
        self._steps = 0
        return np.zeros(4, np.float32), {}

    def step(
        self, action: np.int64
    ) -> tuple[npt.NDArray[np.float32], SupportsFloat, bool, bool, dict[str, Any]]:
        """Return the 1 MiB frame (one byte changed) in the info."""
        self._steps += 1
        self._frame[self._steps % self.info_bytes] = int(action)
        obs = np.full(4, self._steps % 2, np.float32)
        truncated = self._steps >= self.max_steps
        return obs, 1.0, False, truncated, {"frame": self._frame.copy()}


class AtariInfo(gym.Wrapper[Any, Any, Any, Any]):
    """Adds ALE's step info to any env: ``lives`` and the frame numbers, every step.

    With ``CartPole-v1`` it is the ``infos`` workload: a cheap env whose infos are
    never empty, as in an Atari training run, so what an info costs shows.

    Example:
        >>> env = AtariInfo(gym.make("CartPole-v1"))
        >>> _ = env.reset(seed=0)
        >>> sorted(env.step(0)[4])
        ['episode_frame_number', 'frame_number', 'lives']
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        """Wrap ``env``."""
        super().__init__(env)
        self._frames = 0
        self._episode_frames = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env and the episode's frame count."""
        self._episode_frames = 0
        return self.env.reset(seed=seed, options=options)

    def step(
        self, action: Any
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, and report lives and frame numbers (4 frames a step) in the info."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._frames += 4
        self._episode_frames += 4
        info = {
            **info,
            "lives": 3 - self._episode_frames // 400 % 3,
            "episode_frame_number": self._episode_frames,
            "frame_number": self._frames,
        }
        return obs, reward, terminated, truncated, info


def make_infos() -> gym.Env[Any, Any]:
    """``CartPole-v1`` with ALE's step info on every step (the ``infos`` workload)."""
    return AtariInfo(gym.make("CartPole-v1"))


class BigObsEnv(gym.Env[npt.NDArray[np.uint8], np.int64]):
    """A cheap env with an Atari-sized ``uint8`` observation of shape (84, 84, 4).

    It measures how a vector env moves large observations: the step itself only
    writes one row of the frame. Episodes are truncated after ``max_steps`` steps.

    Example:
        >>> env = BigObsEnv()
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((84, 84, 4), dtype('uint8'))
    """

    shape: ClassVar[tuple[int, int, int]] = (84, 84, 4)

    def __init__(self, max_steps: int = 1000) -> None:
        """Build the env.

        Args:
            max_steps: Episode length; the last step is truncated.
        """
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0, 255, shape=self.shape, dtype=np.uint8)
        self.action_space = spaces.Discrete(4)
        self._frame = np.zeros(self.shape, dtype=np.uint8)
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.uint8], dict[str, Any]]:
        """Start an episode with a random frame drawn from ``self.np_random``."""
        super().reset(seed=seed, options=options)
        self._steps = 0
        self._frame = self.np_random.integers(0, 256, size=self.shape, dtype=np.uint8)
        return self._frame.copy(), {}

    def step(
        self, action: np.int64
    ) -> tuple[npt.NDArray[np.uint8], SupportsFloat, bool, bool, dict[str, Any]]:
        """Overwrite one row of the frame with a value derived from the action."""
        self._steps += 1
        self._frame[self._steps % self.shape[0]] = (
            int(action) * 64 + self._steps
        ) % 256
        reward = float(action == 0)
        return self._frame.copy(), reward, False, self._steps >= self.max_steps, {}


class GridEnv(gym.Env[dict[str, Any], np.int64]):
    """A cheap MiniGrid-like env: a Dict of an image, a direction and a mission.

    With ``mission="text"`` the mission is a string (a ``Text`` leaf, as
    MiniGrid's ``MissionSpace``: the ``mission`` workload, a hybrid observation);
    with ``mission="array"`` the same 32 characters come as ``uint8`` codes (the
    ``mission-array`` workload, all arrays, the same size). Comparing the two
    measures what the string leaf costs. Episodes are truncated after
    ``max_steps`` steps; the mission changes with every episode.

    Example:
        >>> obs, _ = GridEnv().reset(seed=0)
        >>> sorted(obs), type(obs["mission"]).__name__
        (['direction', 'image', 'mission'], 'str')
    """

    MISSION_LENGTH: ClassVar[int] = 32

    def __init__(self, mission: str = "text", max_steps: int = 100) -> None:
        """Build the env (``mission``: ``"text"`` or ``"array"``)."""
        if mission not in ("text", "array"):
            msg = f'`mission` must be "text" or "array", got {mission!r}.'
            raise ValueError(msg)
        self.text, self.max_steps = mission == "text", max_steps
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (7, 7, 3), np.uint8),
                "direction": spaces.Discrete(4),
                "mission": (
                    spaces.Text(
                        max_length=self.MISSION_LENGTH,
                        charset="abcdefghijklmnopqrstuvwxyz0123456789 ",
                    )
                    if self.text
                    else spaces.Box(0, 255, (self.MISSION_LENGTH,), np.uint8)
                ),
            }
        )
        self.action_space = spaces.Discrete(3)
        self._image = np.zeros((7, 7, 3), np.uint8)
        self._mission = ""
        self._steps = 0

    def _observe(self, action: int) -> dict[str, Any]:
        self._image[self._steps % 7, 0, 0] = action
        mission: Any = self._mission
        if not self.text:
            mission = np.frombuffer(mission.encode(), np.uint8).copy()
        return {
            "image": self._image.copy(),
            "direction": np.int64((self._steps + action) % 4),
            "mission": mission,
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode with a new mission."""
        super().reset(seed=seed, options=options)
        self._steps = 0
        colour = int(self.np_random.integers(100))
        self._mission = f"go to the door of colour {colour:03d}  ".ljust(
            self.MISSION_LENGTH
        )[: self.MISSION_LENGTH]
        return self._observe(0), {}

    def step(
        self, action: np.int64
    ) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """Move on one step."""
        self._steps += 1
        truncated = self._steps >= self.max_steps
        return self._observe(int(action)), 0.0, False, truncated, {}


def make_atari(env_id: str = ATARI_ENV_ID) -> gym.Env[Any, Any]:
    """Create one Atari env preprocessed as in DQN/PPO training (``atari`` workload).

    The game runs with ``frameskip=1`` inside Gymnasium's ``AtariPreprocessing``
    (default settings: up to 30 no-ops on reset, 4 frames skipped and max-pooled,
    84x84 grayscale ``uint8`` frames), then ``FrameStackObservation`` stacks the last
    4 frames and ``RecordEpisodeStatistics`` adds episode statistics (so every step's
    info is non-empty). It registers the ``ale_py`` envs itself, so a worker process
    started with ``spawn`` or ``forkserver`` can call it; it is picklable as a
    module-level function. Needs ``ale-py`` and ``opencv-python-headless``
    (``pip install "vecpool[bench]"``).

    Args:
        env_id: An ALE env id (``ALE/<Game>-v5``).

    Returns:
        The wrapped env; its observations have shape (4, 84, 84) and dtype ``uint8``.
    """
    import ale_py  # optional dependency: imported where it is used

    gym.register_envs(ale_py)
    env: gym.Env[Any, Any] = gym.make(env_id, frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env)
    env = gym.wrappers.FrameStackObservation(env, ATARI_FRAME_STACK)
    return gym.wrappers.RecordEpisodeStatistics(env)


def _check_atari() -> None:
    """Raise a ValueError saying what to install if ``ale_py`` or ``cv2`` is missing."""
    for module in _ATARI_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            msg = (
                f"The atari workload needs {module!r}, which is not importable "
                f"({exc}); install it with {_ATARI_INSTALL}."
            )
            raise ValueError(msg) from exc


def _check_mujoco() -> None:
    """Raise a ValueError saying what to install if ``mujoco`` is missing."""
    try:
        importlib.import_module("mujoco")
    except ImportError as exc:
        msg = (
            f"The MuJoCo workloads need 'mujoco', which is not importable ({exc}); "
            'install it with pip install "vecpool[mujoco]" (Gymnasium\'s '
            "gymnasium[mujoco], from wheels)."
        )
        raise ValueError(msg) from exc


@dataclass(frozen=True)
class Workload:
    """An environment to benchmark.

    Attributes:
        name: Name on the command line (``cartpole``, ``busy``, ``bigobs``,
            ``atari`` or an id).
        env_id: What the environment is (a Gymnasium id or a class name).
        env_fn: A picklable function that creates one environment.
    """

    name: str
    env_id: str
    env_fn: EnvFn

    @property
    def label(self) -> str:
        """``name`` and ``env_id``, e.g. ``cartpole (CartPole-v1)``."""
        return self.name if self.name == self.env_id else f"{self.name} ({self.env_id})"


_BUILTIN_WORKLOADS: dict[str, Workload] = {
    "cartpole": Workload(
        "cartpole", "CartPole-v1", functools.partial(gym.make, "CartPole-v1")
    ),
    "busy": Workload("busy", "BusyEnv", BusyEnv),
    "bigobs": Workload("bigobs", "BigObsEnv", BigObsEnv),
    "biginfo": Workload("biginfo", "BigInfoEnv", BigInfoEnv),
    "infos": Workload("infos", "CartPole-v1 + ALE infos", make_infos),
    # MiniGrid-like: a Dict with a string leaf (hybrid transport) and its all-array
    # twin of the same size, for what the string leaf costs
    "mission": Workload("mission", "GridEnv (text mission)", GridEnv),
    "mission-array": Workload(
        "mission-array",
        "GridEnv (uint8 mission)",
        functools.partial(GridEnv, mission="array"),
    ),
    "atari": Workload("atari", ATARI_ENV_ID, make_atari),
    # MuJoCo: physics steps of 40-50 us whose infos hold 4-6 floats every step
    "halfcheetah": Workload(
        "halfcheetah", "HalfCheetah-v5", functools.partial(gym.make, "HalfCheetah-v5")
    ),
    "mujoco": Workload("mujoco", "Hopper-v5", functools.partial(gym.make, "Hopper-v5")),
}
_WORKLOAD_CHECKS: dict[str, Callable[[], None]] = {
    "atari": _check_atari,
    "halfcheetah": _check_mujoco,
    "mujoco": _check_mujoco,
}
"""Checks of the optional dependencies of built-in workloads (run on resolve)."""


def resolve_workload(name: str) -> Workload:
    """Turn a command-line workload name into a :class:`Workload`.

    Args:
        name: A built-in workload (``cartpole``, ``busy``, ``bigobs``, ``infos``,
            ``biginfo``, ``mission``, ``mission-array``, ``halfcheetah`` and
            ``mujoco``, which need ``vecpool[mujoco]``, ``atari``: ``ALE/Pong-v5``
            preprocessed, see :func:`make_atari`, needs ``vecpool[bench]``) or a
            registered Gymnasium env id (``module:Env-v0`` imports ``module`` first,
            as :func:`gymnasium.make` does).

    Returns:
        The workload.

    Raises:
        ValueError: If ``name`` is neither a built-in workload nor a registered id,
            or if a built-in workload's optional dependencies are missing (the
            message says what to install).
    """
    builtin = _BUILTIN_WORKLOADS.get(name)
    if builtin is not None:
        check = _WORKLOAD_CHECKS.get(name)
        if check is not None:
            check()
        return builtin
    if ":" not in name and name not in gym.registry:
        msg = (
            f"Unknown workload {name!r}: use one of {', '.join(_BUILTIN_WORKLOADS)} "
            "or a registered Gymnasium env id (e.g. `Acrobot-v1`)."
        )
        raise ValueError(msg)
    return Workload(name, name, functools.partial(gym.make, name))


# -------------------------------------------------------------------------- actions


class ActionPlan:
    """Pre-drawn random actions for ``num_envs`` envs, one batch per vector step.

    Discrete and Box actions are drawn as one numpy array of the action space's dtype
    (so they take vecpool's shared-memory path); other spaces are sampled from the
    batched space, seeded. Step ``t`` uses row ``t % rows``.

    Example:
        >>> from gymnasium import spaces
        >>> plan = ActionPlan(spaces.Discrete(3), num_envs=4, rows=10, seed=0)
        >>> plan.batch(12).shape, plan.batch(12).dtype
        ((4,), dtype('int64'))
        >>> len(plan.singles)
        40
    """

    def __init__(
        self, space: spaces.Space[Any], num_envs: int, rows: int, seed: int
    ) -> None:
        """Draw the actions.

        Args:
            space: The single (one-env) action space.
            num_envs: Number of envs per batch.
            rows: Number of batches to draw.
            seed: Seed of the random generator.
        """
        self.space = space
        self.num_envs = num_envs
        self.rows = max(1, rows)
        self.batched_space = batch_space(space, num_envs)
        self.batches: npt.NDArray[Any] | list[Any] = self._draw(seed)
        self._singles: list[Any] | None = None

    def _draw(self, seed: int) -> npt.NDArray[Any] | list[Any]:
        rng = np.random.default_rng(seed)
        shape = (self.rows, self.num_envs)
        space = self.space
        if isinstance(space, spaces.Discrete):
            drawn = rng.integers(0, int(space.n), size=shape) + int(space.start)
            return drawn.astype(space.dtype)
        if isinstance(space, spaces.Box) and space.dtype is not None:
            full = (*shape, *space.shape)
            low = np.broadcast_to(space.low, full).astype(np.float64)
            high = np.broadcast_to(space.high, full).astype(np.float64)
            if np.issubdtype(space.dtype, np.integer):
                values = rng.integers(
                    np.floor(low).astype(np.int64),
                    np.ceil(high).astype(np.int64),
                    endpoint=True,
                )
                return values.astype(space.dtype)
            bounded = np.isfinite(low) & np.isfinite(high)
            uniform = rng.uniform(
                np.where(bounded, low, 0.0), np.where(bounded, high, 1.0)
            )
            normal = np.clip(rng.standard_normal(full), low, high)
            return np.where(bounded, uniform, normal).astype(space.dtype)
        self.batched_space.seed(seed)
        return [self.batched_space.sample() for _ in range(self.rows)]

    def batch(self, step: int) -> Any:
        """The batched action of vector step ``step`` (cycling through the rows)."""
        return self.batches[step % self.rows]

    def take(self, step: int, ids: npt.NDArray[np.int64]) -> Any:
        """The actions of step ``step`` for the envs ``ids`` only."""
        return take_rows(self.batch(step), ids)

    @property
    def singles(self) -> list[Any]:
        """Every action one by one (row after row), as each env receives it."""
        if self._singles is None:
            self._singles = [
                action
                for batch in self.batches
                for action in iterate(self.batched_space, batch)
            ]
        return self._singles

    @staticmethod
    def max_rows(space: spaces.Space[Any], num_envs: int) -> int:
        """How many rows a plan may hold before it cycles (a memory bound)."""
        if isinstance(space, (spaces.Discrete, spaces.Box)):
            itemsize = np.dtype(space.dtype).itemsize
            size = itemsize * max(1, math.prod(space.shape or (1,)))
            return max(256, _MAX_ACTION_BYTES // (size * num_envs))
        return _MAX_SAMPLED_ROWS
