"""Drive the env under test and its reference in lockstep, checking each result."""

from __future__ import annotations

import copy
import dataclasses
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import iterate

from vecpool.check.compare import Difference, describe, first_difference, without_keys
from vecpool.check.rules import (
    Breach,
    autoreset_breach,
    final_observation_breach,
    info_mask_breach,
    observation_breach,
    step_array_breach,
)
from vecpool.errors import ReferenceFailedError

__all__ = ["ALL_INFOS", "Lockstep", "Op", "Outcome", "call_env", "mode_check_name"]

_KEEP_OBSERVATIONS = 4
"""How many returned observation batches the copy check watches at once."""

_RESULT_NAMES = ("observations", "rewards", "terminations", "truncations", "infos")
ALL_INFOS: tuple[str, ...] = ("\x00every info",)
"""``ignored_info`` that leaves infos out of the comparison altogether."""

Flags = np.ndarray[Any, np.dtype[np.bool_]]


def mode_check_name(mode: AutoresetMode) -> str:
    """The ``autoreset.*`` check of ``mode`` (e.g. ``"autoreset.next_step"``)."""
    return f"autoreset.{mode.name.lower()}"


@dataclasses.dataclass(frozen=True)
class Op:
    """One call on both envs: ``reset(seed, options)`` or ``step(actions)``.

    Attributes:
        kind: ``"reset"`` or ``"step"``.
        seed: The reset's ``seed`` argument.
        mask: The reset's ``reset_mask`` (a partial reset), or ``None``.
        actions: The step's actions.
        manual: Whether the reset is a manual mid-episode reset of every env.
        extension: Whether the call is beyond ``VectorEnv``'s base signature (a list
            of seeds): an error there is a warning unless the check is strict.
    """

    kind: str
    seed: Any = None
    mask: Flags | None = None
    actions: Any = None
    manual: bool = False
    extension: bool = False

    def label(self) -> str:
        """The call as text."""
        if self.kind == "step":
            return "step(actions)"
        if self.mask is not None:
            return f"reset(options={{'reset_mask': {describe(self.mask)}}})"
        return f"reset(seed={self.seed!r})"


@dataclasses.dataclass
class Outcome:
    """What one env returned for one op, or the exception it raised.

    A step's 5-tuple or a reset's 2-tuple is in ``values``.
    """

    values: tuple[Any, ...] = ()
    error: BaseException | None = None
    trace: str = ""

    @property
    def observations(self) -> Any:
        """The returned observations."""
        return self.values[0]

    @property
    def infos(self) -> Any:
        """The returned infos."""
        return self.values[-1]

    def comparable(self, ignored: tuple[str, ...]) -> tuple[Any, ...]:
        """The values with the ``ignored`` info keys left out."""
        if not self.values:
            return self.values
        return (*self.values[:-1], without_keys(self.values[-1], ignored))

    def difference(
        self, other: Outcome, ignored: tuple[str, ...], num_envs: int
    ) -> Difference | None:
        """The first difference of ``other`` from this outcome, or ``None``.

        The ``ignored`` info keys are left out of the comparison.
        """
        names = {5: _RESULT_NAMES, 2: _RESULT_NAMES[::4]}.get(
            len(self.values), tuple(f"results[{i}]" for i in range(len(self.values)))
        )
        if len(self.values) != len(other.values):
            return Difference(
                "results", "length", str(len(self.values)), str(len(other.values)), None
            )
        pairs = zip(
            names, self.comparable(ignored), other.comparable(ignored), strict=True
        )
        for name, left, right in pairs:
            if name == "infos" and ignored is ALL_INFOS:
                break
            found = first_difference(left, right, name, num_envs)
            if found is not None:
                return found
        return None

    def done(self, num_envs: int) -> Flags:
        """Which envs ended on this op (all ``False`` for a reset)."""
        if len(self.values) != 5:
            return np.zeros(num_envs, dtype=np.bool_)
        done: Flags = np.logical_or(
            np.asarray(self.values[2]), np.asarray(self.values[3])
        )
        return done


def call_env(env: Any, op: Op, options: dict[str, Any] | None) -> Outcome:
    """Run ``op`` on ``env``; an exception is captured with its traceback."""
    try:
        if op.kind == "step":
            return Outcome(tuple(env.step(op.actions)))
        return Outcome(tuple(env.reset(seed=op.seed, options=options)))
    except Exception as error:  # noqa: BLE001 - the env's error is a finding, not ours
        return Outcome(error=error, trace=traceback.format_exc())


Recorder = Callable[..., None]


class Lockstep:
    """Step the env under test and (if there is one) the reference with the same ops.

    Every result of the env under test goes through the rules of
    :mod:`vecpool.check.rules`, its copy semantics and argument mutation are watched,
    and it is compared with the reference's result. Decisions (when to reset with a
    mask, when an episode ended) follow the reference, or the env itself without one.

    Args:
        env: The vector env under test.
        reference: The reference vector env, or ``None``.
        mode: The env's declared autoreset mode.
        fail: ``fail(check, message, *, warning=False, **where)`` records a breach.
        ran: ``ran(check)`` records that a check was exercised.
        reset_options: Options merged into every reset.
        check_copy: Whether to check that returned observations are never changed.
        ignored_info: Dotted info keys left out of every comparison.
    """

    def __init__(
        self,
        env: Any,
        reference: Any | None,
        mode: AutoresetMode,
        fail: Recorder,
        ran: Callable[[str], None],
        reset_options: dict[str, Any],
        *,
        check_copy: bool,
        ignored_info: tuple[str, ...] = (),
    ) -> None:
        """Start with no pending autoresets."""
        self.env = env
        self.reference = reference
        self.mode = mode
        self.num_envs: int = env.num_envs
        self._fail = fail
        self._ran = ran
        self._reset_options = reset_options
        self._check_copy = check_copy
        self.ignored_info = ignored_info
        self.steps = 0
        self.previous_done: Flags = np.zeros(self.num_envs, dtype=np.bool_)
        self._pending_at_manual: Flags | None = None
        self._partial_mask: Flags | None = None
        self._last_observations: Any = None
        self._watched: list[tuple[str, Any, Any]] = []
        self.diverged = False
        """Whether a result differed from the reference's (or the env raised)."""

    # ---- running ops --------------------------------------------------------------
    def run(self, phase: str, op: Op) -> Outcome | None:
        """Run ``op`` on both envs and check the result.

        Returns:
            The env under test's outcome, or ``None`` if it diverged or raised (the
            phase should stop: later results would all differ).

        Raises:
            ReferenceFailedError: If the reference raised.
        """
        options = self._options(op)
        caller_options = copy.deepcopy(options)
        actions = copy.deepcopy(op.actions)
        got = call_env(
            self.env,
            dataclasses.replace(op, actions=actions, seed=copy.deepcopy(op.seed)),
            options,
        )
        expected = None
        reference_options = None
        if self.reference is not None:
            reference_options = copy.deepcopy(caller_options)
            expected = call_env(
                self.reference,
                dataclasses.replace(
                    op, actions=copy.deepcopy(op.actions), seed=copy.deepcopy(op.seed)
                ),
                reference_options,
            )
            if expected.error is not None:
                msg = (
                    f"the reference raised {expected.error!r} on {op.label()} in phase "
                    f"{phase}:\n{expected.trace}"
                )
                raise ReferenceFailedError(msg)
        if op.kind == "step":
            self.steps += 1
        if got.error is not None:
            name = self._blame(phase, op, None, None)
            self._pending_at_manual = self._partial_mask = None
            note = "" if expected is None else " (the reference did not)"
            if op.extension:
                note += (
                    "; VectorEnv.reset only promises seed: int | None, but "
                    "SyncVectorEnv and AsyncVectorEnv take a list of seeds, one per env"
                )
            self._fail(
                name,
                f"{op.label()} raised {type(got.error).__name__}: {got.error}{note}",
                warning=op.extension,
                step=self.steps,
                phase=phase,
                got=got.trace.strip().splitlines()[-1],
            )
            self.diverged = True
            return None
        self._check_arguments(
            phase, op, options, caller_options, reference_options, actions
        )
        self._check_rules(phase, op, got)
        if self._check_copy:
            self._check_watched(phase, op, got)
        diverged = False
        if expected is not None:
            diverged = self._compare(phase, op, expected, got)
            self.diverged = self.diverged or diverged
        driver = expected if expected is not None else got
        self._advance(op, driver, got)
        return None if diverged else got

    def _options(self, op: Op) -> dict[str, Any] | None:
        if op.kind == "step":
            return None
        options = dict(self._reset_options)
        if op.mask is not None:
            options["reset_mask"] = op.mask.copy()
        return options

    def _advance(self, op: Op, driver: Outcome, got: Outcome) -> None:
        """Update the pending-autoreset book-keeping after ``op``."""
        self._partial_mask = None
        if op.kind == "reset":
            if op.mask is not None:
                self._partial_mask = op.mask
                self.previous_done = self.previous_done & ~op.mask
            else:
                if op.manual:
                    self._pending_at_manual = self.previous_done.copy()
                self.previous_done = np.zeros(self.num_envs, dtype=np.bool_)
        else:
            pending = self._pending_at_manual
            if self.reference is not None and pending is not None and pending.any():
                self._ran("autoreset.after_manual_reset")
            self._pending_at_manual = None
            ended_now = driver.done(self.num_envs).any()
            if self.previous_done.any() or (
                ended_now and self.mode is not AutoresetMode.NEXT_STEP
            ):
                self._ran(mode_check_name(self.mode))
            self.previous_done = driver.done(self.num_envs)
        self._last_observations = copy.deepcopy(got.observations)

    # ---- checks -------------------------------------------------------------------
    def _record(self, name: str, phase: str, message: str, **where: Any) -> None:
        self._fail(name, message, step=self.steps, phase=phase, **where)

    def _record_breach(self, name: str, phase: str, breach: Breach) -> None:
        self._record(
            name,
            phase,
            breach.message,
            **breach.fields(),
        )

    def _check_arguments(
        self,
        phase: str,
        op: Op,
        options: dict[str, Any] | None,
        caller_options: dict[str, Any] | None,
        reference_options: dict[str, Any] | None,
        actions: Any,
    ) -> None:
        """The caller's options and actions must come back unchanged."""
        if op.kind == "step":
            self._ran("api.actions_not_mutated")
            found = first_difference(op.actions, actions, "actions", self.num_envs)
            if found is not None:
                self._record(
                    "api.actions_not_mutated",
                    phase,
                    "step() changed the caller's actions",
                    **found.fields(),
                )
            return
        self._ran("api.options")
        found = first_difference(caller_options, options, "options", self.num_envs)
        if found is None:
            return
        # the reference received an equal dict: did it do the same to it?
        same_as_reference = reference_options is not None and (
            first_difference(reference_options, options, "options", self.num_envs)
            is None
        )
        # Gymnasium's SyncVectorEnv pops reset_mask; without a reference to show
        # it, that one removal is still only what Gymnasium itself does
        popped_mask_only = (
            reference_options is None
            and caller_options is not None
            and options is not None
            and first_difference(
                {k: v for k, v in caller_options.items() if k != "reset_mask"},
                options,
                "options",
                self.num_envs,
            )
            is None
        )
        note = ""
        if same_as_reference:
            note = " (the reference, SyncVectorEnv, does the same)"
        elif popped_mask_only:
            note = " (it popped reset_mask, as Gymnasium's SyncVectorEnv does)"
        self._fail(
            "api.options",
            f"{op.label()} changed the caller's options dict{note}",
            warning=same_as_reference or popped_mask_only,
            step=self.steps,
            phase=phase,
            where=found.where,
            expected=found.expected,
            got=found.got,
        )

    def _check_rules(self, phase: str, op: Op, got: Outcome) -> None:
        """The rules every result must follow, reference or not."""
        env = self.env
        self._ran("spaces.observations")
        breach = observation_breach(
            env.observation_space, env.single_observation_space, got.observations
        )
        infos_is_dict = isinstance(got.infos, dict)
        if breach is None and op.kind == "step" and infos_is_dict:
            breach = final_observation_breach(env.single_observation_space, got.infos)
        if breach is not None:
            self._record_breach("spaces.observations", phase, breach)
        if not isinstance(got.infos, dict) or got.infos:
            self._ran("infos.masks")
        breach = info_mask_breach(got.infos, self.num_envs)
        if breach is not None:
            self._record_breach("infos.masks", phase, breach)
        if not infos_is_dict:
            return  # the rules below read the infos; infos.masks reported it
        if op.kind == "reset":
            if op.mask is not None:
                self._check_partial_reset(phase, op.mask, got)
            return
        if len(got.values) != 5:
            self._record(
                "spaces.step_arrays",
                phase,
                f"step() returned {len(got.values)} values, not 5",
            )
            return
        self._ran("spaces.step_arrays")
        _, rewards, terminations, truncations, infos = got.values
        breach = step_array_breach(rewards, terminations, truncations, self.num_envs)
        if breach is not None:
            self._record_breach("spaces.step_arrays", phase, breach)
            return
        breach = autoreset_breach(
            self.mode, self.previous_done, rewards, terminations, truncations, infos
        )
        if breach is not None:
            self._record_breach(mode_check_name(self.mode), phase, breach)

    def _check_partial_reset(self, phase: str, mask: Flags, got: Outcome) -> None:
        """Envs outside ``reset_mask`` keep their observation and get no info."""
        self._ran("autoreset.reset_mask")
        if self._last_observations is not None and not mask.all():
            space = self.env.observation_space
            try:  # per-env items, whatever the space (a Text space batches to a tuple)
                before = list(iterate(space, self._last_observations))
                after = list(iterate(space, got.observations))
            except Exception:  # noqa: BLE001 - spaces.observations reports the layout
                before = after = []
            for index in np.flatnonzero(~mask)[: len(before)]:
                found = first_difference(
                    before[index], after[index], f"observations of env {index}", 1, 0
                )
                if found is not None:
                    self._record(
                        "autoreset.reset_mask",
                        phase,
                        "an env outside reset_mask changed its observation in a "
                        "partial reset",
                        env_index=int(index),
                        where=found.where,
                        expected=found.expected,
                        got=found.got,
                    )
                    return
        for key, value in got.infos.items():
            if (
                isinstance(key, str)
                and key.startswith("_")
                and key[1:] in got.infos
                and isinstance(value, np.ndarray)
                and value.shape == mask.shape
                and bool(np.any(value & ~mask))
            ):
                index = int(np.argmax(value & ~mask))
                self._record(
                    "autoreset.reset_mask",
                    phase,
                    f"infos[{key!r}] marks an env outside reset_mask",
                    env_index=index,
                    where=f"infos[{key!r}]",
                    expected=describe(value & mask),
                    got=describe(value),
                )
                return

    def _check_watched(self, phase: str, op: Op, got: Outcome) -> None:
        """Results returned earlier (with ``copy=True``) must be unchanged.

        The observations above all, and the rewards, flags and infos too.
        """
        self._ran("copy.observations")
        for label, returned, snapshot in list(self._watched):
            found = Outcome(snapshot).difference(Outcome(returned), (), self.num_envs)
            if found is not None:
                self._record(
                    "copy.observations",
                    phase,
                    f"the {found.where.partition('[')[0]} returned by {label} were "
                    f"changed in place by a later call ({op.label()}, step "
                    f"{self.steps}) although env.copy is True",
                    **found.fields(),
                )
                self._watched.remove((label, returned, snapshot))
        label = f"{op.label()} at step {self.steps}"
        self._watched.append((label, got.values, copy.deepcopy(got.values)))
        del self._watched[:-_KEEP_OBSERVATIONS]

    def _compare(self, phase: str, op: Op, expected: Outcome, got: Outcome) -> bool:
        """Compare with the reference; record the first difference under its check."""
        self._ran(f"determinism.{phase}")
        if len(expected.values) != len(got.values):
            self._record(
                f"determinism.{phase}",
                phase,
                f"{op.label()} returned {len(got.values)} values, the reference "
                f"{len(expected.values)}",
            )
            return True
        self._ran("infos.values")
        found = expected.difference(got, self.ignored_info, self.num_envs)
        if found is None:
            return False
        name, message = self._explain(phase, op, found, expected, got)
        self._record(
            name,
            phase,
            message,
            **found.fields(),
        )
        return True

    def _blame(self, phase: str, op: Op, index: int | None, where: str | None) -> str:
        """The check a difference (at env ``index``, path ``where``) belongs to."""
        autoreset = mode_check_name(self.mode)
        if op.kind == "reset":
            return (
                "autoreset.reset_mask"
                if op.mask is not None
                else f"determinism.{phase}"
            )
        if where is not None and where.startswith(
            (
                "infos['final_obs']",
                "infos['_final_obs']",
                "infos['final_info']",
                "infos['_final_info']",
            )
        ):
            return autoreset
        if index is not None:
            pending = self._pending_at_manual
            if pending is not None and pending[index]:
                return "autoreset.after_manual_reset"
            if self.previous_done[index]:
                return autoreset
            if self._partial_mask is not None and self._partial_mask[index]:
                return "autoreset.reset_mask"
        return f"determinism.{phase}"

    def _explain(
        self, phase: str, op: Op, found: Difference, expected: Outcome, got: Outcome
    ) -> tuple[str, str]:
        index = found.env_index
        name = self._blame(phase, op, index, found.where)
        ended = expected.done(self.num_envs)
        if index is None and name == mode_check_name(self.mode) and ended.any():
            index = int(np.argmax(ended))  # a final_obs/final_info difference
        ended_now = index is not None and op.kind == "step" and bool(ended[index])
        if name == f"determinism.{phase}" and ended_now:
            name = mode_check_name(self.mode)
        if name == f"determinism.{phase}" and found.where.startswith("infos"):
            name = "infos.values"
        mode = self.mode.name
        if name == "autoreset.after_manual_reset":
            stale = ""
            if len(got.values) == 5 and index is not None and got.values[1][index] == 0:
                stale = (
                    " The env under test returned reward 0 there: it reset the env "
                    "again, so a stale autoreset flag survived reset()."
                )
            message = (
                f"env {index} had ended on the step before a manual reset(); that "
                "reset must clear its pending autoreset, so this step is a normal "
                "step from the "
                f"new reset state, as the reference's.{stale}"
            )
        elif name == "autoreset.reset_mask":
            message = f"after {op.label()} the results differ from the reference's"
            if index is not None:
                message += f" for env {index}"
        elif name == mode_check_name(self.mode):
            when = "on this step" if ended_now else "on the previous step"
            message = (
                f"env {index} ended {when}; the results differ from the "
                f"reference's in {mode} mode"
                if index is not None
                else f"the results differ from the reference's in {mode} mode"
            )
        elif name == "infos.values":
            message = "infos differ from the reference's for the same seeds and actions"
        else:
            message = (
                f"{op.label()} gave results that differ from the reference's for "
                "the same seeds and actions"
            )
        return name, message
