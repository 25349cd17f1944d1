"""Toy envs, each deterministic given its seed and actions, importable by name.

Workers started with ``spawn`` or ``forkserver`` rebuild them from their qualified
name (``vecpool.testing.envs.CountingEnv``); every one of them is also importable
from :mod:`vecpool.testing`. The envs that fail on purpose are in
:mod:`vecpool.testing.faults`.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool.testing.errors import DeliberateError

__all__ = [
    "ACTION_KINDS",
    "OBS_KINDS",
    "ActionEchoEnv",
    "CountingEnv",
    "InfoKindsEnv",
    "MissionEnv",
    "MissionSpace",
    "MixedLeavesEnv",
    "SlowEnv",
    "StepResult",
    "make_env_fns",
]

StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]

OBS_KINDS: tuple[str, ...] = ("box", "discrete", "dict", "tuple", "image")
"""Every observation kind :class:`CountingEnv` supports."""

ACTION_KINDS: tuple[str, ...] = ("discrete", "box")
"""Every action kind :class:`CountingEnv` supports."""

_BOUND = 10.0
_NUM_COUNTS = 16
_IMAGE_SHAPE = (8, 8, 3)
_IMAGE_RAMP = np.arange(192, dtype=np.int64).reshape(_IMAGE_SHAPE)


def _observation_space(obs_kind: str, bound: float = _BOUND) -> spaces.Space[Any]:
    box = spaces.Box(-bound, bound, shape=(3,), dtype=np.float32)
    if obs_kind == "box":
        return box
    if obs_kind == "discrete":
        return spaces.Discrete(_NUM_COUNTS)
    if obs_kind == "dict":
        return spaces.Dict({"position": box, "count": spaces.Discrete(_NUM_COUNTS)})
    if obs_kind == "tuple":
        return spaces.Tuple((box, spaces.Discrete(_NUM_COUNTS)))
    if obs_kind == "image":
        return spaces.Box(0, 255, shape=_IMAGE_SHAPE, dtype=np.uint8)
    msg = f"Unknown `obs_kind` {obs_kind!r}; expected one of {OBS_KINDS}."
    raise ValueError(msg)


def _action_space(action_kind: str) -> spaces.Space[Any]:
    if action_kind == "discrete":
        return spaces.Discrete(3)
    if action_kind == "box":
        return spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    msg = f"Unknown `action_kind` {action_kind!r}; expected one of {ACTION_KINDS}."
    raise ValueError(msg)


class CountingEnv(gym.Env[Any, Any]):
    """A seeded random walk whose episodes end at varying lengths.

    The state is a 3-D position and the step count of the episode. Each step moves
    the position by the action plus noise from ``self.np_random``; the reward depends
    on the action and the position; ``terminated`` is drawn with probability
    ``terminate_prob`` and ``truncated`` is set after ``max_steps`` steps.

    Step infos are ``{"step_count": int, "extra": float64 array of shape (2,)}`` on
    every ``info_every``-th step of an episode and ``{}`` otherwise. Reset infos are
    ``{"reset_count": int, "start": float64 array of shape (3,)}`` when the start
    position has a positive first coordinate (about half the resets), plus
    ``"option_keys"`` (the sorted, comma-joined keys of ``options``) whenever
    ``options`` is non-empty, and ``{}`` otherwise. So every result depends only
    on the seed and the actions, as :func:`gymnasium.utils.env_checker.check_env`
    requires (``reset_count`` counts resets since the last seeded reset).

    Attributes:
        steps_taken: Number of calls to :meth:`step` over the env's lifetime.
        resets_taken: Number of calls to :meth:`reset` over the env's lifetime.
        resets_since_seed: Resets since (and including) the last seeded one.
        episode_steps: Steps taken in the current episode.
        reward_scale: Multiplies every reward; settable through ``set_attr``.

    Example:
        >>> env = CountingEnv(obs_kind="box", max_steps=5)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((3,), dtype('float32'))
        >>> _ = env.step(2)
        >>> env.steps_taken
        1
    """

    metadata: ClassVar[dict[str, Any]] = {  # type: ignore[misc]
        "render_modes": ["rgb_array"],
        "render_fps": 30,
    }

    def __init__(
        self,
        obs_kind: str = "box",
        action_kind: str = "discrete",
        max_steps: int = 20,
        info_every: int = 3,
        reset_info: bool = True,
        terminate_prob: float = 0.05,
        render_mode: str | None = None,
        obs_bound: float = _BOUND,
    ) -> None:
        """Build the env.

        Args:
            obs_kind: One of :data:`OBS_KINDS`.
            action_kind: ``"discrete"`` (``Discrete(3)``) or ``"box"`` (float32
                ``Box(-1, 1, (2,))``).
            max_steps: Episode length at which ``truncated`` becomes True.
            info_every: Period (in episode steps) of non-empty step infos; 0
                disables them.
            reset_info: Whether some reset infos are non-empty.
            terminate_prob: Probability that a step terminates the episode.
            render_mode: ``None`` or ``"rgb_array"``.
            obs_bound: Bound of the position Box (for ``observation_mode="different"``
                tests); positions are clipped to it.

        Raises:
            ValueError: If a kind, ``max_steps`` or ``render_mode`` is invalid.
        """
        if max_steps < 1:
            msg = f"`max_steps` must be at least 1, got {max_steps}."
            raise ValueError(msg)
        if render_mode not in (None, "rgb_array"):
            msg = f"`render_mode` must be None or 'rgb_array', got {render_mode!r}."
            raise ValueError(msg)
        self.obs_kind = obs_kind
        self.action_kind = action_kind
        self.obs_bound = obs_bound
        self.observation_space = _observation_space(obs_kind, obs_bound)
        self.action_space = _action_space(action_kind)
        self.max_steps = max_steps
        self.info_every = info_every
        self.reset_info = reset_info
        self.terminate_prob = terminate_prob
        self.render_mode = render_mode
        self.reward_scale = 1.0
        self.steps_taken = 0
        self.resets_taken = 0
        self.resets_since_seed = 0
        self.episode_steps = 0
        self.position: npt.NDArray[np.float64] = np.zeros(3, dtype=np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode at a random position.

        Args:
            seed: Seeds ``self.np_random`` when given.
            options: Any mapping; its keys are echoed in the info.

        Returns:
            The first observation and the reset info.
        """
        super().reset(seed=seed)
        self.resets_taken += 1
        self.resets_since_seed = 1 if seed is not None else self.resets_since_seed + 1
        self.episode_steps = 0
        self.position = self.np_random.uniform(-1.0, 1.0, size=3)
        info: dict[str, Any] = {}
        if self.reset_info and self.position[0] > 0:
            info["reset_count"] = self.resets_since_seed
            info["start"] = self.position.copy()
        if options:
            info["option_keys"] = ",".join(sorted(options))
        return self._observe(), info

    def step(self, action: Any) -> StepResult:
        """Move by the action plus noise.

        Args:
            action: An element of :attr:`action_space`.

        Returns:
            ``(obs, reward, terminated, truncated, info)``.
        """
        self.steps_taken += 1
        self.episode_steps += 1
        push = self._action_value(action)
        noise = self.np_random.normal(0.0, 0.1, size=3)
        bound = self.obs_bound
        self.position = np.clip(self.position + 0.1 * push + noise, -bound, bound)
        reward = self.reward_scale * (
            push * float(self.position[0]) - 0.01 * self.episode_steps
        )
        terminated = bool(self.np_random.random() < self.terminate_prob)
        truncated = self.episode_steps >= self.max_steps
        info: dict[str, Any] = {}
        if self.info_every and self.episode_steps % self.info_every == 0:
            info["step_count"] = self.episode_steps
            info["extra"] = np.array([reward, push], dtype=np.float64)
        return self._observe(), float(reward), terminated, truncated, info

    def render(self) -> npt.NDArray[np.uint8] | None:
        """Return an image of the state when ``render_mode="rgb_array"``.

        Returns:
            A uint8 array of shape ``(8, 8, 3)``, or ``None`` without a render mode.
        """
        if self.render_mode is None:
            return None
        return self._image()

    def get_state(self) -> dict[str, Any]:
        """Return a deep copy of the full state, including the RNG state.

        Returns:
            A picklable dict accepted by :meth:`set_state`.
        """
        return {
            "position": self.position.copy(),
            "episode_steps": self.episode_steps,
            "steps_taken": self.steps_taken,
            "resets_taken": self.resets_taken,
            "resets_since_seed": self.resets_since_seed,
            "reward_scale": self.reward_scale,
            "rng": copy.deepcopy(self.np_random.bit_generator.state),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state returned by :meth:`get_state`.

        Args:
            state: The dict from :meth:`get_state`.
        """
        self.position = np.array(state["position"], dtype=np.float64)
        self.episode_steps = int(state["episode_steps"])
        self.steps_taken = int(state["steps_taken"])
        self.resets_taken = int(state["resets_taken"])
        self.resets_since_seed = int(state["resets_since_seed"])
        self.reward_scale = float(state["reward_scale"])
        self.np_random.bit_generator.state = copy.deepcopy(state["rng"])

    def get_pid(self) -> int:
        """Return the id of the process hosting this env (for grouping tests)."""
        return os.getpid()

    def scaled(self, value: float, *, factor: float = 2.0) -> float:
        """Return ``value * factor + steps_taken`` (for ``call`` argument tests)."""
        return value * factor + self.steps_taken

    def explode(self, message: str = "explode was called") -> None:
        """Raise :class:`DeliberateError` (for ``call`` error tests).

        Raises:
            DeliberateError: Always.
        """
        raise DeliberateError(message)

    def _action_value(self, action: Any) -> float:
        if self.action_kind == "discrete":
            return float(int(action) - 1)
        return float(np.sum(np.asarray(action, dtype=np.float64)))

    def _image(self) -> npt.NDArray[np.uint8]:
        shift = int(np.floor(np.sum(self.position) * 50.0))
        pixels = (_IMAGE_RAMP * (1 + self.episode_steps) + shift) % 256
        return pixels.astype(np.uint8)

    def _observe(self) -> Any:
        box = self.position.astype(np.float32)
        count = int(self.episode_steps % _NUM_COUNTS)
        if self.obs_kind == "box":
            return box
        if self.obs_kind == "discrete":
            return count
        if self.obs_kind == "dict":
            return {"position": box, "count": count}
        if self.obs_kind == "tuple":
            return (box, count)
        return self._image()


class SlowEnv(gym.Env[npt.NDArray[np.float32], npt.NDArray[np.float32]]):
    """An env that sleeps in every step (and optionally in reset).

    The observation is ``[episode_steps, u1, u2]`` with ``u1, u2`` drawn from
    ``self.np_random``, so results after a reset depend only on the seed. The action
    is a float32 array of shape ``(1,)`` in ``[0, 10]``: a positive value overrides
    ``step_delay`` for that step (seconds). Episodes never end.

    Attributes:
        steps_taken: Number of calls to :meth:`step` over the env's lifetime.
    """

    def __init__(self, step_delay: float = 0.0, reset_delay: float = 0.0) -> None:
        """Build the env.

        Args:
            step_delay: Seconds to sleep per step when the action is not positive.
            reset_delay: Seconds to sleep per reset.
        """
        self.step_delay = step_delay
        self.reset_delay = reset_delay
        self.observation_space = spaces.Box(-1e6, 1e6, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Box(0.0, 10.0, shape=(1,), dtype=np.float32)
        self.steps_taken = 0
        self.episode_steps = 0
        self.actions_received: list[float] = []
        self.options_seen: list[Any] = []
        self.config: dict[str, Any] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """Sleep ``reset_delay`` seconds and start an episode.

        If ``options`` has a ``"token"`` key, it is popped (mutating the dict the env
        received) and recorded in ``options_seen``.
        """
        super().reset(seed=seed, options=options)
        if options is not None:
            self.options_seen.append(options.pop("token", "MISSING"))
        time.sleep(self.reset_delay)
        self.episode_steps = 0
        return self._observe(), {}

    def step(
        self, action: npt.NDArray[np.float32]
    ) -> tuple[npt.NDArray[np.float32], SupportsFloat, bool, bool, dict[str, Any]]:
        """Sleep, then advance the step count."""
        requested = float(np.asarray(action).reshape(-1)[0])
        self.actions_received.append(requested)
        delay = requested if requested > 0 else self.step_delay
        time.sleep(delay)
        self.steps_taken += 1
        self.episode_steps += 1
        return self._observe(), delay, False, False, {}

    def remember(self, key: str, value: Any) -> dict[str, Any]:
        """Write ``value`` under ``key`` into ``self.config`` and return the dict."""
        self.config[key] = value
        return self.config

    def make_lock(self) -> threading.Lock:
        """Return an object that cannot be pickled (for ``call`` error tests)."""
        return threading.Lock()

    def sleep(self, seconds: float) -> float:
        """Sleep ``seconds`` and return it (for ``call`` timeout tests)."""
        time.sleep(seconds)
        return seconds

    def get_pid(self) -> int:
        """Return the id of the process hosting this env."""
        return os.getpid()

    def _observe(self) -> npt.NDArray[np.float32]:
        noise = self.np_random.uniform(-1.0, 1.0, size=2)
        return np.array([self.episode_steps, *noise], dtype=np.float32)


class MissionSpace(spaces.Space[str]):
    """A custom string space, as MiniGrid's: missions made by a function.

    Gymnasium cannot lay it out in shared memory (a ``CustomSpaceError``), and it
    batches it as a ``Tuple`` of copies.

    Example:
        >>> space = MissionSpace()
        >>> space.contains("get to the green goal square")
        True
    """

    def __init__(self, seed: int | None = None) -> None:
        """A space of mission strings (any ``str``)."""
        self.mission_func = _mission
        super().__init__(None, None, seed)

    def sample(
        self,
        mask: Any = None,  # noqa: ARG002 - Space.sample's signature
        probability: Any = None,  # noqa: ARG002
    ) -> str:
        """A mission of a random colour."""
        return _mission(int(self.np_random.integers(len(_COLOURS))))

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string."""
        return isinstance(x, str)

    def __eq__(self, other: object) -> bool:
        """All mission spaces are equal."""
        return isinstance(other, MissionSpace)

    def __hash__(self) -> int:
        """All mission spaces hash alike."""
        return hash(MissionSpace)


_COLOURS = ("red", "green", "blue", "purple", "yellow", "grey")


def _mission(colour: int) -> str:
    return f"get to the {_COLOURS[colour % len(_COLOURS)]} goal square"


class MissionEnv(gym.Env[dict[str, Any], np.int64]):
    """A MiniGrid-like env: a Dict of an image, a direction and a mission string.

    The mission (a :class:`MissionSpace` leaf) changes with every episode and
    every 5th step, so rows of another env or step show; the image and direction
    depend on the env, the step and the action. Episodes end after 4-9 steps
    (terminated) or at ``max_steps`` (truncated); the info holds the step.

    Example:
        >>> env = MissionEnv()
        >>> obs, _ = env.reset(seed=0)
        >>> sorted(obs), obs["image"].shape, type(obs["mission"]).__name__
        (['direction', 'image', 'mission'], (7, 7, 3), 'str')
    """

    def __init__(self, index: int = 0, max_steps: int = 7) -> None:
        """Build the env (``index`` makes its observations differ from others')."""
        self.index, self.max_steps = index, max_steps
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (7, 7, 3), np.uint8),
                "direction": spaces.Discrete(4),
                "mission": MissionSpace(),
            }
        )
        self.action_space = spaces.Discrete(3)
        self.t = 0
        self.length = 9
        self.colour = 0

    def _observe(self, action: int = 0) -> dict[str, Any]:
        image = np.full((7, 7, 3), (self.index * 17 + self.t * 5) % 256, np.uint8)
        image[0, 0, 0] = action
        return {
            "image": image,
            "direction": (self.t + action) % 4,
            "mission": _mission(self.colour + self.index + self.t // 5),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode with a new mission."""
        super().reset(seed=seed, options=options)
        self.t = 0
        self.length = int(self.np_random.integers(4, 10))
        self.colour = int(self.np_random.integers(len(_COLOURS)))
        return self._observe(), {}

    def step(self, action: np.int64) -> StepResult:
        """Move on one step."""
        self.t += 1
        terminated = self.t >= self.length
        truncated = not terminated and self.t >= self.max_steps
        return self._observe(int(action)), 1.0, terminated, truncated, {"t": self.t}


class MixedLeavesEnv(gym.Env[dict[str, Any], np.int64]):
    """A Dict observation with every kind of leaf shared memory cannot hold.

    Beside two array leaves (a ``Box`` and, nested, a ``Discrete``), it holds a
    ``Text``, a ``Graph``, a ``Sequence``, a ``OneOf`` and a ``Tuple`` of an array
    and a ``Text``. Every leaf depends on the env, the step and the action, so rows
    of another env or step show; the graphs' and sequences' sizes change with the
    step. Episodes end after 3-8 steps (terminated) or at ``max_steps``
    (truncated); the info holds the step.

    Example:
        >>> env = MixedLeavesEnv()
        >>> obs, _ = env.reset(seed=0)
        >>> sorted(obs)
        ['choice', 'graph', 'nested', 'note', 'pair', 'position', 'trail']
    """

    def __init__(self, index: int = 0, max_steps: int = 6) -> None:
        """Build the env (``index`` makes its observations differ from others')."""
        self.index, self.max_steps = index, max_steps
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-100.0, 100.0, (3,), np.float32),
                "note": spaces.Text(max_length=16),
                "graph": spaces.Graph(
                    node_space=spaces.Box(-100.0, 100.0, (2,), np.float32),
                    edge_space=spaces.Discrete(3),
                ),
                "trail": spaces.Sequence(spaces.Discrete(8)),
                "choice": spaces.OneOf(
                    (spaces.Discrete(4), spaces.Box(0.0, 1.0, (2,), np.float32))
                ),
                "pair": spaces.Tuple((spaces.Discrete(9), spaces.Text(max_length=8))),
                "nested": spaces.Dict({"count": spaces.Discrete(64)}),
            }
        )
        self.action_space = spaces.Discrete(3)
        self.t = 0
        self.length = 8

    def _observe(self, action: int = 0) -> dict[str, Any]:
        t, index = self.t, self.index
        nodes = 1 + (t + index) % 3
        node_values = np.arange(nodes * 2, dtype=np.float32).reshape(nodes, 2)
        choice: tuple[int, Any] = (
            (0, np.int64((t + action) % 4))
            if t % 2
            else (1, np.full(2, (index + 1) / 8, np.float32))
        )
        return {
            "position": np.array([index, t, action], np.float32),
            "note": f"env{index}step{t}",
            "graph": spaces.GraphInstance(
                nodes=node_values + index,
                edges=np.full(nodes - 1, t % 3, np.int64),
                edge_links=np.array(
                    [[k, k + 1] for k in range(nodes - 1)], np.int64
                ).reshape(-1, 2),
            ),
            "trail": tuple(np.int64((index + k) % 8) for k in range(t % 4)),
            "choice": choice,
            "pair": (np.int64((index + t) % 9), f"a{action}"),
            "nested": {"count": np.int64(t % 64)},
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode of a random length."""
        super().reset(seed=seed, options=options)
        self.t = 0
        self.length = int(self.np_random.integers(3, 9))
        return self._observe(), {}

    def step(self, action: np.int64) -> StepResult:
        """Move on one step."""
        self.t += 1
        terminated = self.t >= self.length
        truncated = not terminated and self.t >= self.max_steps
        return self._observe(int(action)), 1.0, terminated, truncated, {"t": self.t}


class InfoKindsEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """Step infos of every kind a vector env must merge as Gymnasium does.

    Infos are never empty for long and mix what shared memory can carry (Python and
    numpy numbers, small numeric arrays) with what it cannot (strings, nested dicts,
    ``np.bool_``, ``final_obs``), varying with the env's
    ``index`` and the step ``t``: ``atari=True`` gives ALE's regular
    ``{"lives", "episode_frame_number", "frame_number"}`` on every step instead.

    Example:
        >>> env = InfoKindsEnv(index=1)
        >>> _ = env.reset(seed=0)
        >>> sorted(env.step(0)[4])[:3]
        ['c64', 'f32', 'flag']

    Args:
        index: The env's index (it changes the mix).
        length: Steps per episode (plus ``index``).
        atari: Return ALE-like infos only.
    """

    observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int = 0, length: int = 9, atari: bool = False) -> None:
        """Build the env (no randomness but the reset seed's)."""
        self.index, self.length, self.atari = index, length + index, atari
        self.t = 0
        self.frames = 0

    def reset(
        self,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,  # noqa: ARG002 - Gymnasium's signature
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """Start an episode; odd envs report their index."""
        super().reset(seed=seed)
        self.t = 0
        info: dict[str, Any] = {"reset_index": self.index} if self.index % 2 else {}
        return self._observe(), info

    def step(self, action: np.int64) -> StepResult:
        """Step; the info's mix follows ``index`` and ``t``."""
        self.t += 1
        self.frames += 4
        t, index = self.t, self.index
        if self.atari:
            info: dict[str, Any] = {
                "lives": 3 - (t // 4) % 3,
                "episode_frame_number": 4 * t,
                "frame_number": self.frames,
            }
        else:
            info = self._mixed_info(t, index, int(action))
        return self._observe(), float(t % 3), t >= self.length, False, info

    def _mixed_info(self, t: int, index: int, action: int) -> dict[str, Any]:
        if index == 0 and t % 6 == 2:
            return {}
        info: dict[str, Any] = {
            "lives": 2.5 * t if index == 1 else 3 - t % 3,  # int, or float: cast
            "frame": np.int64(4 * t),
            "score": t / 3,
            "flag": bool((t + action) % 2),
            "f32": np.float32(t / 7),
            "u64": np.uint64(2**64 - 1 - t),
            "c64": np.complex64(t + 1j),
            "vec": np.arange(3, dtype=np.float32) * t,
            "mask": np.array([t % 2 == 0, True]),
        }
        if t % 5 == 0:
            info["name"] = f"s{t}"  # an object: pickled
        if t % 7 == 3:
            info["episode"] = {"r": float(t), "l": t}  # nested: pickled
        if index == 2 and t % 4 == 1:
            info = dict(reversed(list(info.items())))  # another key order
        if index == 3 and t % 3 == 0:
            info["big"] = 2**62 + t  # a Python int near int64's limit
        if index == 2 and t % 2:
            info["np_bool"] = np.bool_(True)  # Gymnasium: an object array
        if index == 3 and t % 4 == 2:
            info["vec"] = np.arange(3, dtype=np.float64)  # another dtype: cast
        return info

    def _observe(self) -> npt.NDArray[np.float32]:
        return np.array([self.index, self.t], dtype=np.float32)


class ActionEchoEnv(gym.Env[npt.NDArray[np.float64], Any]):
    """Each observation names the action that produced it: ``[action, step]``.

    For interrupt and concurrency tests: a row that belongs to another step (or
    another thread's actions) shows at once. The action is a float64 scalar;
    ``step`` sleeps ``delay`` seconds first; with ``info=True`` every step and
    reset returns a non-empty info (``{"action": action}``). Reset observations are
    ``[-1, 0]``. Episodes never end.
    """

    def __init__(
        self, delay: float = 0.0, info: bool = False, raise_at: int | None = None
    ) -> None:
        """Build the env.

        Args:
            delay: Seconds to sleep in each step.
            info: Whether infos are non-empty.
            raise_at: Raise ``ValueError`` in this step of the env's life (1-based;
                the step still counts), once.
        """
        self.delay = delay
        self.info = info
        self.raise_at = raise_at
        self.lifetime_steps = 0
        self.observation_space = spaces.Box(-1e12, 1e12, shape=(2,), dtype=np.float64)
        self.action_space = spaces.Box(-1e12, 1e12, shape=(), dtype=np.float64)
        self.steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float64], dict[str, Any]]:
        """Start an episode: observation ``[-1, 0]``."""
        super().reset(seed=seed, options=options)
        self.steps = 0
        return np.array([-1.0, 0.0]), ({"action": -1.0} if self.info else {})

    def step(self, action: Any) -> StepResult:
        """Echo ``action`` (after the delay) with the step count."""
        if self.delay:
            time.sleep(self.delay)
        self.steps += 1
        self.lifetime_steps += 1
        if self.lifetime_steps == self.raise_at:
            msg = f"ActionEchoEnv failed on purpose in step #{self.raise_at}"
            raise ValueError(msg)
        value = float(action)
        info = {"action": value} if self.info else {}
        return np.array([value, float(self.steps)]), 0.0, False, False, info


def make_env_fns(
    n: int, *, env_cls: Callable[..., gym.Env[Any, Any]] = CountingEnv, **kwargs: Any
) -> list[Callable[[], gym.Env[Any, Any]]]:
    """Return ``n`` picklable env fns building ``env_cls(**kwargs)``.

    Args:
        n: Number of env fns.
        env_cls: An env class (or factory) importable by name.
        **kwargs: Keyword arguments for ``env_cls``.

    Returns:
        A list of :func:`functools.partial` objects.

    Example:
        >>> fns = make_env_fns(2, obs_kind="tuple")
        >>> len(fns), type(fns[0]()).__name__
        (2, 'CountingEnv')
    """
    return [functools.partial(env_cls, **kwargs) for _ in range(n)]
