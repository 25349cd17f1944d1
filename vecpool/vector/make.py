"""Construction like Gymnasium's: ``make_vec`` and ``vector_entry_point`` factories."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import gymnasium as gym
from gymnasium import Env, Wrapper, error
from gymnasium.envs.registration import EnvSpec, VectorizeMode
from gymnasium.vector import AutoresetMode

from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["VectorEntryPoint", "make_vec", "vector_entry_point"]


def _find_spec(env_id: str) -> EnvSpec:
    """Look ``env_id`` up like ``gym.make_vec`` does (``"module:Env-v0"`` imports)."""
    from gymnasium.envs import registration

    finder = getattr(registration, "_find_spec", None)
    if finder is not None:
        spec: EnvSpec = finder(env_id)
        return spec
    return gym.spec(env_id)  # pragma: no cover - older gymnasium


class _SingleEnvFactory:
    """Picklable ``() -> Env``: ``gym.make(spec, **kwargs)`` then the given wrappers."""

    def __init__(
        self,
        spec: EnvSpec,
        kwargs: dict[str, Any],
        wrappers: Sequence[Callable[[Env[Any, Any]], Wrapper[Any, Any, Any, Any]]],
    ) -> None:
        self.spec = spec
        self.kwargs = kwargs
        self.wrappers = list(wrappers)

    def __call__(self) -> Env[Any, Any]:
        env = gym.make(self.spec, **copy.copy(self.kwargs))
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: str | VectorizeMode | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[Env[Any, Any]], Wrapper[Any, Any, Any, Any]]]
    | None = None,
    **kwargs: Any,
) -> AsyncVectorEnv:
    """Create a :class:`vecpool.AsyncVectorEnv` from a registered env id.

    Mirrors ``gym.make_vec(id, num_envs, vectorization_mode="async", ...)`` and sets
    ``env.spec`` the same way (so ``env.spec.kwargs`` records ``num_envs``,
    ``vector_kwargs`` and ``wrappers``).

    Example:
        >>> import vecpool
        >>> envs = vecpool.make_vec(
        ...     "CartPole-v1", num_envs=4, vector_kwargs={"num_workers": 2}
        ... )
        >>> envs.spec.id, envs.num_envs, envs.num_workers
        ('CartPole-v1', 4, 2)
        >>> envs  # doctest: +ELLIPSIS
        AsyncVectorEnv(CartPole-v1, num_envs=4, 2 workers x 2 envs (...))
        >>> envs.close()

    Args:
        id: A registered env id (optionally ``"module:Env-v0"``) or an ``EnvSpec``.
        num_envs: Number of sub-environments.
        vectorization_mode: Accepted for signature compatibility with
            ``gym.make_vec``: only ``None`` or ``"async"`` (what vecpool builds).
        vector_kwargs: Keyword arguments of :class:`vecpool.AsyncVectorEnv`
            (e.g. ``num_workers``, ``shared_memory``, ``autoreset_mode``).
        wrappers: Wrapper functions applied to each sub-environment.
        **kwargs: Keyword arguments of each sub-environment's constructor.

    Returns:
        The vector env.

    Raises:
        gymnasium.error.Error: If the id is of the wrong type, or the spec has no
            entry point.
        ValueError: If ``vectorization_mode`` is neither ``None`` nor ``"async"``.
    """
    if vectorization_mode is not None and vectorization_mode not in (
        VectorizeMode.ASYNC,
        VectorizeMode.ASYNC.value,
    ):
        msg = (
            "`vecpool.make_vec` builds a vecpool.AsyncVectorEnv, so "
            f"`vectorization_mode` must be None or 'async', got {vectorization_mode!r}."
            " Use `gym.make_vec` for other modes."
        )
        raise ValueError(msg)
    vector_kwargs = {} if vector_kwargs is None else dict(vector_kwargs)
    wrappers = [] if wrappers is None else list(wrappers)
    given: object = id
    if isinstance(given, EnvSpec):
        env_spec = given
    elif isinstance(given, str):
        env_spec = _find_spec(given)
    else:
        msg = f"Invalid id type: {type(id)}. Expected `str` or `EnvSpec`"
        raise error.Error(msg)
    env_spec = copy.deepcopy(env_spec)
    env_spec_kwargs = env_spec.kwargs
    env_spec.kwargs = {}
    num_envs = env_spec_kwargs.pop("num_envs", num_envs)
    env_spec_kwargs.pop("vectorization_mode", None)
    vector_kwargs = env_spec_kwargs.pop("vector_kwargs", vector_kwargs)
    wrappers = env_spec_kwargs.pop("wrappers", wrappers)
    env_spec_kwargs.update(kwargs)
    if env_spec.entry_point is None:
        msg = (
            f"Cannot create vectorized environment for {env_spec.id} because it "
            "doesn't have an entry point defined."
        )
        raise error.Error(msg)

    factory = _SingleEnvFactory(env_spec, env_spec_kwargs, wrappers)
    env = AsyncVectorEnv([factory for _ in range(num_envs)], **vector_kwargs)

    spec = copy.deepcopy(env_spec)
    spec.kwargs = env_spec_kwargs.copy()
    if num_envs != 1:
        spec.kwargs["num_envs"] = num_envs
    spec.kwargs["vectorization_mode"] = "async"
    if vector_kwargs:
        spec.kwargs["vector_kwargs"] = vector_kwargs
    if wrappers:
        spec.kwargs["wrappers"] = wrappers
    env.unwrapped.spec = spec
    return env


class VectorEntryPoint:
    """A ``vector_entry_point`` that builds :class:`vecpool.AsyncVectorEnv`.

    Example:
        >>> import gymnasium as gym
        >>> import vecpool
        >>> gym.register(
        ...     "VecpoolCartPole-v1",
        ...     entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        ...     vector_entry_point=vecpool.VectorEntryPoint(
        ...         "gymnasium.envs.classic_control.cartpole:CartPoleEnv", num_workers=2
        ...     ),
        ...     max_episode_steps=500,
        ... )
        >>> envs = gym.make_vec("VecpoolCartPole-v1", num_envs=4)
        >>> type(envs).__module__, envs.num_envs
        ('vecpool.vector.async_env', 4)
        >>> envs.close()

    Args:
        entry_point: The single env's entry point: ``"module:Class"`` or a callable.
        **vector_kwargs: Keyword arguments of :class:`vecpool.AsyncVectorEnv`.
    """

    def __init__(
        self, entry_point: str | Callable[..., Env[Any, Any]], **vector_kwargs: Any
    ) -> None:
        """Store the single env's entry point and the vector env's options."""
        self.entry_point = entry_point
        self.vector_kwargs = vector_kwargs

    def __call__(self, num_envs: int, **env_kwargs: Any) -> AsyncVectorEnv:
        """Build ``num_envs`` copies of the env (``gym.make`` with its usual wrappers).

        Args:
            num_envs: Number of sub-environments.
            **env_kwargs: The spec's keyword arguments, including
                ``max_episode_steps`` when the spec has one.

        Returns:
            The vector env.
        """
        calling = _calling_spec()
        if calling is not None:
            # Keep everything the registration says (env checker, order enforcing,
            # autoreset, additional wrappers, id), as `gym.make(id)` would.
            spec = copy.deepcopy(calling)
            spec.kwargs = {}
            spec.entry_point = self.entry_point
            spec.vector_entry_point = None
        else:
            spec = EnvSpec(id="vecpool-entry-point-v0", entry_point=self.entry_point)
        factory = _SingleEnvFactory(spec, env_kwargs, [])
        kwargs = dict(self.vector_kwargs)
        kwargs.setdefault("autoreset_mode", AutoresetMode.NEXT_STEP)
        return AsyncVectorEnv([factory for _ in range(num_envs)], **kwargs)


def _calling_spec() -> EnvSpec | None:
    """The ``EnvSpec`` that ``gym.make_vec`` is building, found in its frame."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(10):
        if frame is None:
            return None
        candidate = frame.f_locals.get("env_spec")
        if isinstance(candidate, EnvSpec) and candidate.vector_entry_point is not None:
            return candidate
        frame = frame.f_back
    return None


def vector_entry_point(num_envs: int, **env_kwargs: Any) -> AsyncVectorEnv:
    """A string-registrable ``vector_entry_point``: ``"vecpool:vector_entry_point"``.

    ``gym.make_vec`` hands a vector entry point only ``num_envs`` and the env's
    keyword arguments, so this reads the env's own ``entry_point`` from the spec that
    ``gym.make_vec`` is building. Use :class:`VectorEntryPoint` to also pass vecpool
    options such as ``num_workers``.

    Example:
        >>> import gymnasium as gym
        >>> gym.register(
        ...     "VecpoolPendulum-v1",
        ...     entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
        ...     vector_entry_point="vecpool:vector_entry_point",
        ...     max_episode_steps=200,
        ... )
        >>> envs = gym.make_vec("VecpoolPendulum-v1", num_envs=2)
        >>> type(envs).__name__, envs.spec.id
        ('AsyncVectorEnv', 'VecpoolPendulum-v1')
        >>> envs.close()

    Args:
        num_envs: Number of sub-environments.
        **env_kwargs: The spec's keyword arguments.

    Returns:
        The vector env.

    Raises:
        TypeError: If not called by ``gym.make_vec`` for a registered spec.
    """
    spec = _calling_spec()
    if spec is None or spec.entry_point is None:
        msg = (
            "`vecpool.vector_entry_point` must be called by `gym.make_vec` for an env "
            "registered with both `entry_point=` and "
            "`vector_entry_point='vecpool:vector_entry_point'`. To call it "
            "yourself, use `vecpool.VectorEntryPoint(entry_point)(num_envs)` or "
            "`vecpool.make_vec`."
        )
        raise TypeError(msg)
    return VectorEntryPoint(spec.entry_point)(num_envs, **env_kwargs)
