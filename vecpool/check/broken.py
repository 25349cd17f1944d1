"""Deliberately broken vector envs: each breaks one rule, for testing checkers.

Each is a :class:`gymnasium.vector.SyncVectorEnv` with one defect, so it keeps
``env_fns`` and the reference is derived as usual. :func:`vecpool.check_vector_env`
must flag each under the check named in :data:`BROKEN_ENVS`, and nothing else.
They are re-exported from :mod:`vecpool.testing`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

__all__ = [
    "BROKEN_ENVS",
    "AliasingObservationsVectorEnv",
    "MutatingOptionsVectorEnv",
    "ShuffledObservationsVectorEnv",
    "WrongAutoresetStepVectorEnv",
    "WrongInfoMasksVectorEnv",
]


class ShuffledObservationsVectorEnv(SyncVectorEnv):
    """Returns env 1's observation as env 0's (and back) from step ``at`` after a reset.

    Silent wrong data: every value is valid, only the rows belong to another env.
    """

    def __init__(self, env_fns: Any, *, at: int = 5, **kwargs: Any) -> None:
        """Build the envs; swap rows 0 and 1 from step ``at`` on."""
        super().__init__(env_fns, **kwargs)
        self._at = at
        self._steps = 0

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset; the rows are swapped again from the ``at``-th step on."""
        self._steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, actions: Any) -> Any:
        """Step, then swap observation rows 0 and 1."""
        observations, *rest = super().step(actions)
        self._steps += 1
        if self._steps >= self._at and self.num_envs > 1:
            observations = _swap_rows(observations)
        return (observations, *rest)


def _swap_rows(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _swap_rows(value) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_swap_rows(value) for value in tree)
    swapped = np.array(tree, copy=True)
    swapped[[0, 1]] = swapped[[1, 0]]
    return swapped


class AliasingObservationsVectorEnv(SyncVectorEnv):
    """Claims ``copy=True`` but returns its buffer, which the next step overwrites."""

    @property
    def copy(self) -> bool:
        """What the env claims: ``True``, except inside its own calls."""
        return not getattr(self, "_returning_buffer", False)

    @copy.setter
    def copy(self, value: bool) -> None:
        del value  # SyncVectorEnv.__init__ sets it; the claim stays True

    def step(self, actions: Any) -> Any:
        """Step, returning the internal observation buffer."""
        self._returning_buffer = True
        try:
            return super().step(actions)
        finally:
            self._returning_buffer = False

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset, returning the internal observation buffer."""
        self._returning_buffer = True
        try:
            return super().reset(seed=seed, options=options)
        finally:
            self._returning_buffer = False


class WrongAutoresetStepVectorEnv(SyncVectorEnv):
    """Declares NEXT_STEP but resets an ended env in the same step (SAME_STEP)."""

    def __init__(self, env_fns: Any, **kwargs: Any) -> None:
        """Build the envs in SAME_STEP mode, then declare NEXT_STEP."""
        kwargs.pop("autoreset_mode", None)
        super().__init__(env_fns, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
        self.metadata = {**self.metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}


class MutatingOptionsVectorEnv(SyncVectorEnv):
    """Writes a key into the caller's ``options`` dict on every reset."""

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset, leaving a mark in ``options``."""
        result = super().reset(
            seed=seed, options=None if options is None else dict(options)
        )
        if options is not None:
            options["seen_by_env"] = True
        return result


class WrongInfoMasksVectorEnv(SyncVectorEnv):
    """Reports wrong info masks.

    ``defect="all_true"`` marks every info key present for every env (caught by
    comparing with the reference: ``infos.values``); ``"missing"`` drops the masks
    and ``"int"`` makes them ``int8`` (both caught without a reference:
    ``infos.masks``).
    """

    DEFECTS: tuple[str, ...] = ("all_true", "missing", "int")

    def __init__(
        self, env_fns: Any, *, defect: str = "all_true", **kwargs: Any
    ) -> None:
        """Build the envs; ``defect`` is one of :attr:`DEFECTS`.

        Raises:
            ValueError: If ``defect`` is unknown.
        """
        if defect not in self.DEFECTS:
            msg = f"`defect` must be one of {self.DEFECTS}, got {defect!r}."
            raise ValueError(msg)
        super().__init__(env_fns, **kwargs)
        self.defect = defect

    def step(self, actions: Any) -> Any:
        """Step, then break the masks."""
        *rest, infos = super().step(actions)
        return (*rest, _break_masks(infos, self.defect))

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset, then break the masks."""
        observations, infos = super().reset(seed=seed, options=options)
        return observations, _break_masks(infos, self.defect)


def _break_masks(infos: dict[str, Any], defect: str) -> dict[str, Any]:
    broken: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_") and key[1:] in infos:
            if defect == "all_true":
                broken[key] = np.ones_like(value)
            elif defect == "int":
                broken[key] = value.astype(np.int8)
        elif isinstance(value, dict):
            broken[key] = _break_masks(value, defect)
        else:
            broken[key] = value
    return broken


BROKEN_ENVS: dict[type[SyncVectorEnv], str] = {
    ShuffledObservationsVectorEnv: "determinism.seed_int",
    AliasingObservationsVectorEnv: "copy.observations",
    WrongAutoresetStepVectorEnv: "autoreset.next_step",
    MutatingOptionsVectorEnv: "api.options",
    WrongInfoMasksVectorEnv: "infos.values",
}
"""Each broken env and the check that must catch it (its first failure)."""
