"""What :func:`vecpool.check_vector_env` found: the check names and the report."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from vecpool.errors import VectorEnvCheckError

__all__ = [
    "CHECKS",
    "CheckFailure",
    "CheckReport",
    "VectorEnvCheckError",
    "resolve_skip",
]

CHECKS: dict[str, str] = {
    "spaces.single": "num_envs and the single_* spaces equal the reference's",
    "spaces.batched": "observation_space/action_space are "
    "batch_space(single_*, num_envs)",
    "spaces.observations": "every observation (and final_obs) is in its space, with "
    "the "
    "space's exact dtype and shape",
    "spaces.actions": "actions sampled from the reference's action_space are in "
    "env.action_space",
    "spaces.step_arrays": "rewards are a float array of shape (num_envs,); "
    "terminations/truncations bool arrays of shape (num_envs,)",
    "determinism.seed_int": "reset(seed=int) then steps give the reference's results",
    "determinism.seed_list": "reset(seed=[...]) mid-episode then steps give the "
    "reference's results",
    "determinism.seed_none": "reset(seed=None) then steps continue the seeded streams "
    "as the reference does",
    "determinism.reseed": "the same seed and actions a second time give the same "
    "results as the first time",
    "autoreset.metadata": 'metadata["autoreset_mode"] declares an AutoresetMode',
    "autoreset.next_step": "NEXT_STEP: the step after an episode ends resets that env "
    "(reward 0, not done, no final_obs), as the reference does",
    "autoreset.same_step": "SAME_STEP: an ending env is reset in the same step, with "
    "final_obs/final_info and their masks equal to the done flags",
    "autoreset.disabled": "DISABLED: step() does not reset an env on the step it "
    "ends, and reports no final_obs",
    "autoreset.reset_mask": 'reset(options={"reset_mask": mask}) resets exactly the '
    "masked envs and leaves the others as they were",
    "autoreset.after_manual_reset": "a manual reset() clears pending autoresets: the "
    "next step is a normal step for every env",
    "infos.masks": 'every info key k has a bool mask "_k" of shape (num_envs,)',
    "infos.values": "info values, dtypes and masks equal the reference's",
    "copy.observations": "with copy=True, returned observations (and rewards, flags, "
    "infos) are not changed by later calls",
    "api.options": "reset() leaves the caller's options dict as it was",
    "api.actions_not_mutated": "step() leaves the caller's actions as they were",
    "api.attributes": "set_attr/get_attr/call round-trip per-env values; a "
    "wrong-length "
    "set_attr raises ValueError",
    "api.wrong_action_count": "step() with num_envs +/- 1 actions raises ValueError",
    "api.usable_after_error": "after a rejected step(), reset(seed) and steps give "
    "the results of an instance that saw no error",
    "api.close": "close() returns, twice in a row, sets closed, and leaves no child "
    "process running",
    "api.use_after_close": "step()/reset() after close() raise",
}
"""Every check by name, with what it asserts (``skip`` takes these names or groups)."""


@dataclasses.dataclass
class CheckFailure:
    """One breach of one check (the first one found; later ones are only counted).

    Attributes:
        check: The check's name, a key of :data:`CHECKS`.
        message: What was wrong, in words.
        expected: What should have come back (text), or ``None``.
        got: What came back (text), or ``None``.
        step: How many ``step()`` calls the env under test had made, the breaching
            one included (so a breach on a reset names the steps before it).
        env_index: The sub-environment, where one is to blame.
        phase: The part of the trajectory (e.g. ``"seed_list"``), or ``"api"``.
        where: The path of the differing value, e.g. ``"observations[3]"``.
        more: How many further breaches of the same check were found.
    """

    check: str
    message: str
    expected: str | None = None
    got: str | None = None
    step: int | None = None
    env_index: int | None = None
    phase: str | None = None
    where: str | None = None
    more: int = 0

    def __str__(self) -> str:
        """The failure as a few indented lines."""
        place = []
        if self.env_index is not None:
            place.append(f"env {self.env_index}")
        if self.step is not None:
            place.append(f"step {self.step}")
        if self.phase is not None:
            place.append(f"phase {self.phase}")
        head = f"{self.check} ({', '.join(place)})" if place else self.check
        lines = [head, f"    {self.message}"]
        if self.where is not None:
            lines.append(f"    where:    {self.where}")
        if self.expected is not None:
            lines.append(f"    expected: {self.expected}")
        if self.got is not None:
            lines.append(f"    got:      {self.got}")
        if self.more:
            lines.append(f"    ({self.more} more breaches of this check not shown)")
        return "\n".join(lines)


@dataclasses.dataclass
class CheckReport:
    """The result of :func:`vecpool.check_vector_env`.

    Attributes:
        env: A short description of the env under test.
        failures: One entry per failed check, in the order found.
        errors: What stopped the check itself (the reference raised): the env
            under test was not fully checked, so the report is not ``ok``.
        warnings: Breaches the reference commits too (failures with ``strict``).
        passed: The checks that ran and held.
        skipped: Checks that did not run, with the reason.
        steps: ``step()`` calls made on the env under test.
        duration: Wall-clock seconds the check took.
    """

    env: str = ""
    failures: list[CheckFailure] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    warnings: list[CheckFailure] = dataclasses.field(default_factory=list)
    passed: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    steps: int = 0
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every check passed or was skipped, and none was cut short.

        Warnings do not count.
        """
        return not self.failures and not self.errors

    @property
    def failed(self) -> list[str]:
        """The names of the failed checks."""
        return [failure.check for failure in self.failures]

    def failure(self, check: str) -> CheckFailure | None:
        """The failure recorded for ``check``, or ``None``."""
        return next((item for item in self.failures if item.check == check), None)

    def raise_if_failed(self) -> CheckReport:
        """Raise if a check failed; return the report otherwise.

        Raises:
            VectorEnvCheckError: If a check failed or the check could not finish
                (an ``AssertionError``).
        """
        if not self.ok:
            raise VectorEnvCheckError(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready builtins (``ok`` included)."""
        return {"ok": self.ok, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        """The report as a JSON document."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        """The report as text: a summary line, failures, warnings, the rest."""
        verdict = "ok" if self.ok else f"FAILED ({len(self.failures)} checks)"
        if self.errors:
            verdict = (
                f"NOT FINISHED ({len(self.errors)} errors, "
                f"{len(self.failures)} failed checks)"
            )
        lines = [
            f"check_vector_env: {verdict}: {self.env}; {self.steps} steps in "
            f"{self.duration:.1f} s"
        ]
        lines.extend(f"ERROR {error}" for error in self.errors)
        lines.extend(f"FAIL {failure}" for failure in self.failures)
        lines.extend(f"WARN {warning}" for warning in self.warnings)
        if self.passed:
            lines.append(f"passed ({len(self.passed)}): {', '.join(self.passed)}")
        if self.skipped:
            lines.append(f"skipped ({len(self.skipped)}):")
            lines.extend(f"    {name}: {why}" for name, why in self.skipped.items())
        return "\n".join(lines)


def resolve_skip(skip: Iterable[str] | str | None) -> frozenset[str]:
    """Expand ``skip`` (check names or groups such as ``"api"``) into check names.

    Args:
        skip: Names from :data:`CHECKS`, or group prefixes (the part before the
            dot); ``None`` for none.

    Returns:
        The check names to skip.

    Raises:
        TypeError: If ``skip`` is a single string (pass a tuple of names) or not
            iterable.
        ValueError: If a name is neither a check nor a group.
    """
    if isinstance(skip, str):
        msg = (
            "`skip` must be a collection of check names, not a string: "
            f"use ({skip!r},)."
        )
        raise TypeError(msg)
    if skip is None:
        return frozenset()
    try:
        items = list(skip)
    except TypeError:
        msg = f"`skip` must be a collection of check names, got {skip!r}."
        raise TypeError(msg) from None
    names: set[str] = set()
    for item in items:
        matched = [
            name for name in CHECKS if name == item or name.startswith(f"{item}.")
        ]
        if not matched:
            groups = sorted({name.partition(".")[0] for name in CHECKS})
            msg = (
                f"`skip` names an unknown check {item!r}. Use a check name "
                f"({', '.join(CHECKS)}) or a group ({', '.join(groups)})."
            )
            raise ValueError(msg)
        names.update(matched)
    return frozenset(names)
