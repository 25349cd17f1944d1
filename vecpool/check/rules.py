"""Checks that need no reference: spaces, step arrays, info masks, autoreset rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate

from vecpool.check.compare import Located, describe, first_difference

__all__ = [
    "Breach",
    "autoreset_breach",
    "info_mask_breach",
    "observation_breach",
    "space_batching_breach",
    "step_array_breach",
]


@dataclasses.dataclass(frozen=True)
class Breach(Located):
    """A rule broken by a single result.

    Attributes:
        message: What is wrong, in words.
        env_index: The sub-environment, where one is to blame.
        where: The path of the value, e.g. ``"infos['_x']"``.
        expected: The expected value, as text.
        got: The value found, as text.
    """

    message: str
    env_index: int | None = None
    where: str | None = None
    expected: str | None = None
    got: str | None = None


def space_batching_breach(env: Any) -> Breach | None:
    """Check ``observation_space``/``action_space`` against the single spaces."""
    for kind in ("observation", "action"):
        single = getattr(env, f"single_{kind}_space")
        batched = getattr(env, f"{kind}_space")
        try:
            expected = batch_space(single, env.num_envs)
        except Exception as error:  # noqa: BLE001 - a custom space need not batch
            return Breach(
                f"batch_space(single_{kind}_space, num_envs) raised {error!r}"
            )
        if expected != batched:
            return Breach(
                f"{kind}_space is not batch_space(single_{kind}_space, num_envs)",
                where=f"{kind}_space",
                expected=describe(expected),
                got=describe(batched),
            )
    return None


def _layout_breach(space: spaces.Space[Any], value: Any, where: str) -> Breach | None:
    """Check types, dtypes and shapes of ``value`` against ``space``, leaf by leaf."""
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            return Breach(
                "not a dict with the space's keys",
                where=where,
                expected=describe(sorted(space.spaces)),
                got=describe(sorted(value) if isinstance(value, dict) else type(value)),
            )
        for key, subspace in space.spaces.items():
            found = _layout_breach(subspace, value[key], f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(space, spaces.Tuple) and all(
        isinstance(
            sub, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict)
        )
        for sub in space.spaces
    ):
        if not isinstance(value, tuple) or len(value) != len(space.spaces):
            return Breach(
                f"not a tuple of {len(space.spaces)}",
                where=where,
                got=describe(type(value)),
            )
        for index, subspace in enumerate(space.spaces):
            found = _layout_breach(subspace, value[index], f"{where}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        if not isinstance(value, np.ndarray):
            return Breach("not a numpy array", where=where, got=describe(type(value)))
        if value.dtype != space.dtype:
            return Breach(
                "dtype differs from the space's",
                where=where,
                expected=str(space.dtype),
                got=str(value.dtype),
            )
        if value.shape != space.shape:
            return Breach(
                "shape differs from the space's",
                where=where,
                expected=str(space.shape),
                got=str(value.shape),
            )
    return None


def observation_breach(
    batched_space: spaces.Space[Any],
    single_space: spaces.Space[Any],
    observations: Any,
    where: str = "observations",
) -> Breach | None:
    """Check a batch of observations: layout, then ``contains`` (naming the env)."""
    found = _layout_breach(batched_space, observations, where)
    if found is not None:
        return found
    try:
        inside = batched_space.contains(observations)
    except Exception:  # noqa: BLE001 - a wrong type can make contains raise
        inside = False
    if inside:
        return None
    try:
        for index, row in enumerate(iterate(batched_space, observations)):
            if not single_space.contains(row):
                return Breach(
                    "observation is not in single_observation_space",
                    env_index=index,
                    where=f"{where}[{index}]",
                    got=describe(row),
                )
    except Exception as error:  # noqa: BLE001 - report rather than crash the check
        return Breach(
            f"observations could not be split per env: {error!r}", where=where
        )
    return Breach("observations are not in observation_space", where=where)


def final_observation_breach(
    single_space: spaces.Space[Any], infos: Any
) -> Breach | None:
    """Check each masked ``infos["final_obs"][i]`` against the single space."""
    final, mask = infos.get("final_obs"), infos.get("_final_obs")
    if final is None or mask is None:
        return None
    for index in np.flatnonzero(np.asarray(mask)):
        value = final[index]
        where = f"infos['final_obs'][{index}]"
        found = _layout_breach(single_space, value, where)
        if found is None and not single_space.contains(value):
            found = Breach(
                "final observation is not in single_observation_space",
                where=where,
                got=describe(value),
            )
        if found is not None:
            return dataclasses.replace(found, env_index=int(index))
    return None


def step_array_breach(
    rewards: Any, terminations: Any, truncations: Any, num_envs: int
) -> Breach | None:
    """Check the types, dtypes and shapes of a step's rewards and done flags."""
    for name, value, kinds in (
        ("rewards", rewards, "f"),
        ("terminations", terminations, "b"),
        ("truncations", truncations, "b"),
    ):
        expected = f"{'float' if kinds == 'f' else 'bool'} array of shape ({num_envs},)"
        if not isinstance(value, np.ndarray):
            return Breach(
                f"{name} is not a numpy array",
                where=name,
                expected=expected,
                got=describe(type(value)),
            )
        if value.shape != (num_envs,) or value.dtype.kind not in kinds:
            return Breach(
                f"{name} has the wrong shape or dtype",
                where=name,
                expected=expected,
                got=f"{value.dtype} array of shape {value.shape}",
            )
    return None


def info_mask_breach(
    infos: Any, num_envs: int, where: str = "infos", *, nested: bool = False
) -> Breach | None:
    """Check that every info key ``k`` has a bool mask ``_k`` of one row per env.

    In a nested dict masks are optional (Gymnasium's ``RecordEpisodeStatistics``
    reports ``episode`` without them), but those present must be well formed.
    """
    if not isinstance(infos, dict):
        return Breach("infos is not a dict", where=where, got=describe(type(infos)))
    for key, value in infos.items():
        path = f"{where}[{key!r}]"
        if isinstance(key, str) and key.startswith("_") and key[1:] in infos:
            if (
                not isinstance(value, np.ndarray)
                or value.dtype != np.bool_
                or value.shape != (num_envs,)
            ):
                got = (
                    f"{value.dtype} array of shape {value.shape}"
                    if isinstance(value, np.ndarray)
                    else describe(type(value))
                )
                return Breach(
                    "info mask is not a bool array of shape (num_envs,)",
                    where=path,
                    expected=f"bool array of shape ({num_envs},)",
                    got=got,
                )
            continue
        if f"_{key}" not in infos and not nested:
            return Breach(
                f"info key {key!r} has no mask {'_' + str(key)!r}", where=path
            )
        if isinstance(value, dict):
            found = info_mask_breach(value, num_envs, path, nested=True)
            if found is not None:
                return found
        elif not isinstance(value, np.ndarray) or value.shape[:1] != (num_envs,):
            return Breach(
                "info value is not an array with one row per env",
                where=path,
                got=describe(value),
            )
    return None


def autoreset_breach(
    mode: AutoresetMode,
    previous_done: np.ndarray[Any, np.dtype[np.bool_]],
    rewards: Any,
    terminations: Any,
    truncations: Any,
    infos: Any,
) -> Breach | None:
    """Check one step's results against the rules of the declared autoreset mode.

    Args:
        mode: The env's declared ``metadata["autoreset_mode"]``.
        previous_done: Which envs ended on the previous step (and were not reset).
        rewards: The step's rewards.
        terminations: The step's terminations.
        truncations: The step's truncations.
        infos: The step's infos.

    Returns:
        The first rule broken, or ``None``.
    """
    done = np.logical_or(terminations, truncations)
    if mode is AutoresetMode.NEXT_STEP:
        for index in np.flatnonzero(previous_done):
            if rewards[index] != 0 or done[index]:
                return Breach(
                    "the step after an episode end must be its reset step: reward 0, "
                    "not terminated, not truncated",
                    env_index=int(index),
                    where=f"step results[{index}]",
                    expected="reward 0.0, terminated False, truncated False",
                    got=f"reward {rewards[index]!r}, terminated "
                    f"{bool(terminations[index])}, "
                    f"truncated {bool(truncations[index])}",
                )
    if mode is not AutoresetMode.SAME_STEP:
        for key in ("final_obs", "final_info"):
            if key in infos:
                mask = np.asarray(infos.get(f"_{key}", done))
                return Breach(
                    f"infos has {key!r}, which only SAME_STEP mode reports",
                    env_index=int(np.argmax(mask)) if mask.any() else None,
                    where=f"infos[{key!r}]",
                )
        return None
    for key in ("final_obs", "final_info"):
        mask = infos.get(f"_{key}")
        if not done.any() and key not in infos:
            continue
        if key not in infos or mask is None:
            return Breach(
                f"an env ended but infos has no {key!r} with its mask",
                env_index=int(np.argmax(done)),
                where=f"infos[{key!r}]",
            )
        found = first_difference(done, np.asarray(mask), f"infos['_{key}']", len(done))
        if found is not None:
            return Breach(
                f"infos['_{key}'] differs from terminations | truncations",
                **found.fields(),
            )
    return None
