"""Stable-Baselines3: :class:`SB3VecEnv`, an SB3 VecEnv over any Gymnasium VectorEnv.

Stable-Baselines3 (SB3) drives its own ``VecEnv`` API: ``reset()`` returns only the
observations, ``step()`` returns ``(obs, rewards, dones, infos)`` with ``infos`` a
list of one dict per env, and a finished env is reset at once, its last observation
kept in ``infos[i]["terminal_observation"]``. :class:`SB3VecEnv` presents a
Gymnasium vector env (:class:`vecpool.AsyncVectorEnv`, Gymnasium's ``SyncVectorEnv``
or ``AsyncVectorEnv``, wrapped or not) that way, with the results of SB3's own
``DummyVecEnv`` over the same env fns, seeds and actions::

    import gymnasium as gym
    from gymnasium.vector import AutoresetMode
    from stable_baselines3 import PPO

    import vecpool
    from vecpool.integrations.sb3 import SB3VecEnv

    env_fns = [lambda: gym.make("CartPole-v1")] * 8
    venv = SB3VecEnv(
        vecpool.AsyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    )
    PPO("MlpPolicy", venv).learn(50_000)
    venv.close()

Autoreset modes (``vector_env.metadata["autoreset_mode"]``):

* ``SAME_STEP``: supported, and the fastest. The vector env already resets a
  finished env within the step; the final observation and info come from
  ``infos["final_obs"]`` and ``infos["final_info"]``, the reset info goes to
  :attr:`SB3VecEnv.reset_infos`.
* ``DISABLED``: supported. After a step in which some envs finished, those envs (and
  only those) are reset with ``reset(options={"reset_mask": dones})``, one more
  round trip for such steps.
* ``NEXT_STEP`` (Gymnasium's default): refused with a ``ValueError``. There the reset
  observation only arrives with the *following* step, a step that ignores that env's
  action and returns reward 0; SB3 would record a transition that never happened.
  A partial reset could cancel the pending reset in Gymnasium's and vecpool's own
  vector envs, but the ``VectorEnv`` contract does not promise it (Gymnasium's
  ``NormalizeObservation`` wrapper refuses partial resets; another vector env may
  reset every env), so the adapter does not guess: build the vector env with
  ``autoreset_mode=AutoresetMode.SAME_STEP`` instead.

Per-env calls (``env_method``, ``get_attr``, ``set_attr``, ``env_is_wrapped``):
over a ``SyncVectorEnv`` they reach the chosen sub-envs directly, as
``DummyVecEnv`` does. Other vector envs only offer calls on *every* sub-env
(``call``, ``get_attr``, ``set_attr``), so ``env_method(..., indices=...)`` runs the
method on every env and returns the chosen envs' results, ``set_attr(...,
indices=...)`` writes the other envs' current values back, and ``env_is_wrapped``
matches the wrapper's class name against each env's ``str()`` (Gymnasium wrappers
print ``<TimeLimit<OrderEnforcing<...>>>``).

Info keys that a *vector* wrapper adds at the top level of a ``SAME_STEP`` step for
an env that finished (Gymnasium's ``wrappers.vector.RecordEpisodeStatistics`` puts
``"episode"`` there) cannot be told apart from that env's reset info, so they land in
:attr:`SB3VecEnv.reset_infos`; record episode statistics per env (SB3's ``Monitor``,
Gymnasium's ``RecordEpisodeStatistics``) or with SB3's ``VecMonitor`` instead.

This module needs Stable-Baselines3: ``pip install "vecpool[sb3]"``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from vecpool.vector.async_env import AsyncVectorEnv

try:
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
except ImportError as error:  # pragma: no cover - depends on the environment
    msg = (
        "vecpool.integrations.sb3 needs Stable-Baselines3, which is not installed "
        f'({error}); install it with: pip install "vecpool[sb3]"'
    )
    raise ImportError(msg) from error

__all__ = ["SB3VecEnv"]

_SUPPORTED_MODES = (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)
_FINAL_KEYS = frozenset({"final_obs", "final_info", "_final_obs", "_final_info"})
_CLASS_NAME = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)")


def _from_env_fns(
    env_fns: Any, start_method: str | None, kwargs: dict[str, Any]
) -> VectorEnv[Any, Any, Any]:
    """A ``vecpool.AsyncVectorEnv`` over SB3's env fns, in ``SAME_STEP`` mode."""
    kwargs = {"autoreset_mode": AutoresetMode.SAME_STEP, **kwargs}
    if start_method is not None:
        if "context" in kwargs:
            msg = "Pass `start_method` or `context`, not both (they are one setting)."
            raise TypeError(msg)
        kwargs["context"] = start_method
    # vecpool's own checks name a wrong `env_fns` and the fix
    return AsyncVectorEnv(
        list(env_fns) if isinstance(env_fns, tuple) else env_fns, **kwargs
    )


class SB3VecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` over a Gymnasium ``VectorEnv``.

    ``observation_space`` and ``action_space`` are the vector env's *single* spaces
    (SB3's convention); observations are batched as Gymnasium batches them (an array,
    or a dict / tuple of arrays for ``Dict`` / ``Tuple`` spaces), which is SB3's layout
    too. Seeds set with :meth:`seed` and options set with ``set_options`` apply at the
    next :meth:`reset`, and :attr:`reset_infos` holds each env's latest reset info.

    It also takes what SB3's ``make_vec_env(..., vec_env_cls=SB3VecEnv)`` passes,
    as ``SubprocVecEnv`` does: a list of env fns (and ``vec_env_kwargs``), from which
    it builds a ``vecpool.AsyncVectorEnv`` in ``SAME_STEP`` mode::

        from stable_baselines3.common.env_util import make_vec_env
        env = make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=SB3VecEnv,
                           vec_env_kwargs={"start_method": "forkserver"})

    Args:
        vector_env: The vector env, in ``SAME_STEP`` or ``DISABLED`` autoreset mode,
            or a list of functions that each create an env. :class:`SB3VecEnv` owns
            it from now on: :meth:`close` closes it.
        start_method: With env fns: the ``multiprocessing`` start method
            (``SubprocVecEnv``'s argument; ``None``: vecpool's default).
        **vector_env_kwargs: With env fns: more ``vecpool.AsyncVectorEnv``
            arguments (``num_workers``, ``max_concurrency``, ...).

    Raises:
        ValueError: If the vector env's autoreset mode is ``NEXT_STEP`` (Gymnasium's
            default) or undeclared; the message names the fix.
        TypeError: If ``start_method`` or other arguments come with a ready
            vector env (they apply to one built here).
    """

    def __init__(
        self,
        vector_env: VectorEnv[Any, Any, Any]
        | Sequence[Callable[[], gym.Env[Any, Any]]],
        start_method: str | None = None,
        **vector_env_kwargs: Any,
    ) -> None:
        """Wrap ``vector_env`` (or build one from env fns); see the class docstring."""
        if not isinstance(vector_env, VectorEnv):
            vector_env = _from_env_fns(vector_env, start_method, vector_env_kwargs)
        elif start_method is not None or vector_env_kwargs:
            given = ["start_method"] if start_method is not None else []
            given += list(vector_env_kwargs)
            msg = (
                f"SB3VecEnv got {', '.join(given)} with a ready vector env: those "
                "arguments build the vector env from a list of env fns (as "
                "make_vec_env passes them). Give them to the vector env you create "
                "instead."
            )
            raise TypeError(msg)
        self.autoreset_mode = _autoreset_mode(vector_env)
        self.vector_env = vector_env
        unwrapped = vector_env.unwrapped
        # gymnasium's VectorWrapper forwards neither `call` nor `get_attr`/`set_attr`
        self._calls: Any = vector_env if hasattr(vector_env, "call") else unwrapped
        self._sub_envs: list[gym.Env[Any, Any]] | None = (
            list(unwrapped.envs) if isinstance(unwrapped, SyncVectorEnv) else None
        )
        self._async_step = callable(getattr(vector_env, "step_async", None)) and (
            callable(getattr(vector_env, "step_wait", None))
        )
        self._actions: Any = None
        super().__init__(
            vector_env.num_envs,
            vector_env.single_observation_space,
            vector_env.single_action_space,
        )

    # -- reset / step ---------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Reset every env, with the seeds and options set since the last reset.

        Returns:
            The batched first observations; the reset infos go to
            :attr:`reset_infos`.

        Raises:
            ValueError: If ``set_options`` gave different options to different envs
                (a vector env's ``reset`` takes one options dict for all).
        """
        seeds: list[int | None] = list(self._seeds)
        options = self._shared_options()
        # Gymnasium's vector envs take one seed per env (VectorEnv's stub says int)
        seed: Any = None if all(seed is None for seed in seeds) else seeds
        obs, infos = self.vector_env.reset(seed=seed, options=options)
        self.reset_infos = _unbatch_infos(infos, self.num_envs)
        # seeds and options are used once, as in SB3's own VecEnvs
        self._reset_seeds()
        self._reset_options()
        result: VecEnvObs = _copy_batch(obs)
        return result

    def step_async(self, actions: np.ndarray) -> None:
        """Start a step with one action per env (the batched action space's layout).

        Args:
            actions: The actions, e.g. shape ``(num_envs,)`` for a ``Discrete``
                action space.
        """
        if self._async_step:
            self.vector_env.step_async(actions)  # type: ignore[attr-defined]
        else:
            self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Finish the step started by :meth:`step_async`, resetting finished envs.

        Returns:
            ``(obs, rewards, dones, infos)``: rewards as float32, ``dones`` as bool
            (terminated or truncated), and one info dict per env. For an env that
            finished, ``obs[i]`` is its reset observation,
            ``infos[i]["terminal_observation"]`` its last one, and
            :attr:`reset_infos` ``[i]`` its reset info. Every info carries
            ``"TimeLimit.truncated"`` (truncated and not terminated).

        Raises:
            RuntimeError: If a ``SAME_STEP`` vector env ends an episode without
                ``infos["final_obs"]``.
        """
        if self._async_step:
            result = self.vector_env.step_wait()  # type: ignore[attr-defined]
        else:
            actions, self._actions = self._actions, None
            result = self.vector_env.step(actions)
        obs, rewards, terminations, truncations, infos = result
        terminated = np.asarray(terminations, dtype=np.bool_)
        truncated = np.asarray(truncations, dtype=np.bool_)
        dones = terminated | truncated
        batch = _copy_batch(obs)
        done_envs: list[int] = np.flatnonzero(dones).tolist()
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            step_infos, terminal = self._same_step_ends(infos, done_envs)
        else:
            step_infos, terminal = self._reset_ended(batch, infos, dones, done_envs)
        for i, info in enumerate(step_infos):
            info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        for i, final_obs in zip(done_envs, terminal, strict=True):
            step_infos[i]["terminal_observation"] = final_obs
        return (
            batch,
            np.array(rewards, dtype=np.float32),
            dones,
            step_infos,
        )

    def _same_step_ends(
        self, infos: dict[str, Any], done_envs: list[int]
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """Split a ``SAME_STEP`` step's infos into step infos and reset infos."""
        top = _unbatch_infos(infos, self.num_envs, skip=_FINAL_KEYS)
        if not done_envs:
            return top, []
        final_obs = infos.get("final_obs")
        if final_obs is None:
            msg = (
                f"{type(self.vector_env).__name__} declares autoreset_mode SAME_STEP "
                "but ended an episode without infos['final_obs']"
            )
            raise RuntimeError(msg)
        final_info = infos.get("final_info")
        finals = _unbatch_infos(
            final_info if isinstance(final_info, dict) else {}, self.num_envs
        )
        terminal = []
        for i in done_envs:
            # the top level holds the reset's info; the ended step's is final_info
            self.reset_infos[i] = top[i]
            top[i] = finals[i]
            terminal.append(_copy_single(final_obs[i]))
        return top, terminal

    def _reset_ended(
        self,
        batch: Any,
        infos: dict[str, Any],
        dones: np.ndarray,
        done_envs: list[int],
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """``DISABLED`` mode: reset the envs that ended, writing into ``batch``."""
        step_infos = _unbatch_infos(infos, self.num_envs)
        if not done_envs:
            return step_infos, []
        terminal = [_row(batch, i) for i in done_envs]
        reset_obs, reset_info = self.vector_env.reset(
            options={"reset_mask": dones.copy()}
        )
        _write_rows(batch, reset_obs, dones)
        resets = _unbatch_infos(reset_info, self.num_envs)
        for i in done_envs:
            self.reset_infos[i] = resets[i]
        return step_infos, terminal

    def _shared_options(self) -> dict[str, Any] | None:
        """The one options dict every env's next reset gets (``None`` when empty)."""
        first = self._options[0]
        for options in self._options[1:]:
            if not _equal(options, first):
                msg = (
                    "SB3VecEnv passes one options dict to every env's reset (a vector "
                    "env's reset takes one), but set_options gave envs different "
                    "options; pass a single dict to set_options"
                )
                raise ValueError(msg)
        return dict(first) if first else None

    # -- calls and attributes ---------------------------------------------------------

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Read an attribute of some (default: all) envs, through their wrappers.

        Args:
            attr_name: The attribute's name.
            indices: An env index, a sequence of them, or ``None`` for all.

        Returns:
            One value per chosen env.
        """
        chosen = self._indices(indices)
        if self._sub_envs is not None:
            return [self._sub_envs[i].get_wrapper_attr(attr_name) for i in chosen]
        values = self._calls.get_attr(attr_name)
        return [values[i] for i in chosen]

    def set_attr(
        self, attr_name: str, value: Any, indices: VecEnvIndices = None
    ) -> None:
        """Set an attribute of some (default: all) envs.

        Over a ``SyncVectorEnv`` the attribute is set on each chosen env's outermost
        wrapper, as ``DummyVecEnv`` does; other vector envs set it with their own
        ``set_attr`` (Gymnasium's: through the wrappers, where it is defined), and
        for a subset of envs give the others their current values back.

        Args:
            attr_name: The attribute's name.
            value: The value, the same for every chosen env.
            indices: An env index, a sequence of them, or ``None`` for all.
        """
        chosen = self._indices(indices)
        if self._sub_envs is not None:
            for i in chosen:
                setattr(self._sub_envs[i], attr_name, value)
            return
        if set(chosen) == set(range(self.num_envs)):
            values = [value] * self.num_envs
        else:
            values = list(self._calls.get_attr(attr_name))
            for i in chosen:
                values[i] = value
        self._calls.set_attr(attr_name, values)

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Call a method of some (default: all) envs, through their wrappers.

        Over a vector env other than ``SyncVectorEnv`` the method runs on *every*
        env (the ``VectorEnv`` API calls all of them) and the chosen envs' results
        are returned, so a method with side effects acts on all envs there.

        Args:
            method_name: The method's name.
            *method_args: Its positional arguments.
            indices: An env index, a sequence of them, or ``None`` for all.
            **method_kwargs: Its keyword arguments.

        Returns:
            One result per chosen env.
        """
        chosen = self._indices(indices)
        if self._sub_envs is not None:
            return [
                self._sub_envs[i].get_wrapper_attr(method_name)(
                    *method_args, **method_kwargs
                )
                for i in chosen
            ]
        calls = self._calls
        if hasattr(calls, "call_async") and hasattr(calls, "call_wait"):
            # their `name` is positional-only: a keyword argument `name` gets through
            calls.call_async(method_name, *method_args, **method_kwargs)
            results = calls.call_wait()
        else:
            results = calls.call(method_name, *method_args, **method_kwargs)
        return [results[i] for i in chosen]

    def env_is_wrapped(
        self,
        wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]],
        indices: VecEnvIndices = None,
    ) -> list[bool]:
        """Whether each chosen env is wrapped with ``wrapper_class``.

        Exact (``isinstance`` along the wrapper chain) over a ``SyncVectorEnv``;
        elsewhere the class name is looked for in each env's ``str()``, which
        Gymnasium wrappers build from their class names (a subclass of
        ``wrapper_class`` is not recognized there, nor a wrapper with its own
        ``__str__``).

        Args:
            wrapper_class: The wrapper class, e.g. SB3's ``Monitor``.
            indices: An env index, a sequence of them, or ``None`` for all.

        Returns:
            One bool per chosen env.
        """
        chosen = self._indices(indices)
        if self._sub_envs is not None:
            return [is_wrapped(self._sub_envs[i], wrapper_class) for i in chosen]
        names = self._calls.call("__str__")
        return [wrapper_class.__name__ in _CLASS_NAME.findall(names[i]) for i in chosen]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's frame (``render_mode="rgb_array"`` only), for SB3's ``render``.

        Returns:
            One RGB array per env, or ``None`` per env (with a warning, as in SB3's
            own VecEnvs) when the envs do not render ``rgb_array`` frames.
        """
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it "
                "is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        frames: Any = self.vector_env.render()
        if frames is None:
            return [None] * self.num_envs
        return list(frames)

    def close(self) -> None:
        """Close the vector env (and with it every env)."""
        self.vector_env.close()

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        chosen: list[int] = list(self._get_indices(indices))
        return chosen


def _autoreset_mode(vector_env: VectorEnv[Any, Any, Any]) -> AutoresetMode:
    """The vector env's autoreset mode, if :class:`SB3VecEnv` can present it."""
    name = type(vector_env).__name__
    value = vector_env.metadata.get("autoreset_mode")
    if value is None:
        found = (
            "declares no metadata['autoreset_mode'] (Gymnasium then assumes NEXT_STEP)"
        )
    else:
        try:
            mode = value if isinstance(value, AutoresetMode) else AutoresetMode(value)
        except ValueError:
            mode = None
        if mode in _SUPPORTED_MODES:
            assert mode is not None  # for mypy
            return mode
        found = (
            f"has an unknown autoreset_mode {value!r}"
            if mode is None
            else f"is in autoreset mode {mode.name}"
        )
    msg = (
        f"SB3VecEnv needs a vector env in autoreset mode SAME_STEP or DISABLED; {name} "
        f"{found}. Build it with autoreset_mode=AutoresetMode.SAME_STEP (from "
        "gymnasium.vector import AutoresetMode), e.g. vecpool.AsyncVectorEnv(env_fns, "
        "autoreset_mode=AutoresetMode.SAME_STEP) or gym.make_vec(env_id, n, "
        "vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP}). In NEXT_STEP mode "
        "an env's reset observation only comes with the next step, which ignores its "
        "action: SB3 would learn from a transition that never happened."
    )
    raise ValueError(msg)


def _unbatch_infos(
    infos: dict[str, Any], num_envs: int, skip: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Split a Gymnasium vector info dict into one info dict per env.

    A key ``k`` with a mask ``_k`` gives env ``i`` the value ``infos[k][i]`` where
    the mask is set (a nested dict is split the same way); a key without a mask is
    split only if it is an array with one row per env.
    """
    per_env: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key in skip:
            continue
        mask = infos.get(f"_{key}")
        if mask is None:
            if key.startswith("_") and key[1:] in infos:
                continue  # the mask of another key
            if isinstance(value, np.ndarray) and value.ndim and len(value) == num_envs:
                for i in range(num_envs):
                    per_env[i][key] = _element(value, i)
            continue
        if isinstance(value, dict):
            nested = _unbatch_infos(value, num_envs)
            for i in np.flatnonzero(mask).tolist():
                per_env[i][key] = nested[i]
        else:
            for i in np.flatnonzero(mask).tolist():
                per_env[i][key] = _element(value, i)
    return per_env


def _element(values: Any, i: int) -> Any:
    """Row ``i`` of a batched info value, copied if it is an array."""
    item = values[i]
    return item.copy() if isinstance(item, np.ndarray) else item


def _copy_batch(obs: Any) -> Any:
    """A copy of batched observations that the vector env cannot overwrite."""
    if isinstance(obs, dict):
        return {key: _copy_batch(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_copy_batch(value) for value in obs)
    return np.array(obs)


def _copy_single(obs: Any) -> Any:
    """A copy of one env's observation (arrays copied, the rest as is)."""
    if isinstance(obs, dict):
        return {key: _copy_single(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_copy_single(value) for value in obs)
    return obs.copy() if isinstance(obs, np.ndarray) else obs


def _row(batch: Any, i: int) -> Any:
    """Env ``i``'s observation out of batched observations (a copy)."""
    if isinstance(batch, dict):
        return {key: _row(value, i) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_row(value, i) for value in batch)
    return _element(batch, i)


def _write_rows(batch: Any, source: Any, mask: np.ndarray) -> None:
    """Copy the rows ``mask`` selects from batched ``source`` into ``batch``."""
    if isinstance(batch, dict):
        for key, value in batch.items():
            _write_rows(value, source[key], mask)
    elif isinstance(batch, tuple):
        for value, part in zip(batch, source, strict=True):
            _write_rows(value, part, mask)
    else:
        batch[mask] = np.asarray(source)[mask]


def _equal(left: dict[str, Any], right: dict[str, Any]) -> bool:
    """``left == right``, and ``False`` where comparing is ambiguous (arrays)."""
    try:
        return bool(left == right)
    except (ValueError, TypeError):
        return False
