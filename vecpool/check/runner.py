"""``check_vector_env``: run every check on a vector env and return a report."""

from __future__ import annotations

import copy
import multiprocessing
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from vecpool._util.validation import check_int
from vecpool.check.compare import describe, first_difference
from vecpool.check.lockstep import (
    ALL_INFOS,
    Lockstep,
    Op,
    Outcome,
    call_env,
)
from vecpool.check.orphans import Orphans
from vecpool.check.report import CHECKS, CheckFailure, CheckReport, resolve_skip
from vecpool.check.rules import space_batching_breach
from vecpool.errors import ReferenceFailedError

__all__ = ["DEFAULT_IGNORED_INFO_KEYS", "DEFAULT_NUM_STEPS", "check_vector_env"]

DEFAULT_IGNORED_INFO_KEYS: tuple[str, ...] = ("episode.t",)
"""Info values never compared: wall-clock time (``RecordEpisodeStatistics``)."""

DEFAULT_NUM_STEPS = 300
"""Steps of the main trajectory (the replay and the API checks add about a third)."""

UNTIL_DONE_FACTOR = 20
"""Without a known episode limit, the trajectory steps at most this many times
``num_steps`` waiting for episodes to end (see :data:`UNTIL_DONE_SECONDS`)."""

UNTIL_DONE_SECONDS = 120.0
"""Wall-clock bound of the steps that wait for episodes to end."""

CLOSE_TIMEOUT = 10.0
"""Seconds ``close()`` may take before the check calls it hung."""

_USABLE_STEPS = 5
_ATTRIBUTE = "vecpool_check_attribute"
_NEEDS_REFERENCE = (
    "spaces.single",
    "spaces.actions",
    "determinism.seed_int",
    "determinism.seed_list",
    "determinism.seed_none",
    "autoreset.after_manual_reset",
    "infos.values",
)
_MODE_CHECKS = {
    AutoresetMode.NEXT_STEP: (
        "autoreset.same_step",
        "autoreset.disabled",
        "autoreset.reset_mask",
    ),
    AutoresetMode.SAME_STEP: (
        "autoreset.next_step",
        "autoreset.disabled",
        "autoreset.reset_mask",
    ),
    AutoresetMode.DISABLED: ("autoreset.next_step", "autoreset.same_step"),
}

VectorEnvFactory = Callable[[], Any]


def check_vector_env(
    make_vector_env: VectorEnvFactory,
    *,
    reference: VectorEnvFactory | None = None,
    num_steps: int = DEFAULT_NUM_STEPS,
    seed: int = 0,
    skip: Iterable[str] | None = (),
    strict: bool = False,
    reset_options: dict[str, Any] | None = None,
    ignore_info_keys: Iterable[str] = DEFAULT_IGNORED_INFO_KEYS,
) -> CheckReport:
    """Check that a vector env behaves exactly as Gymnasium's vector API says.

    The env under test and a reference (``SyncVectorEnv`` over the same env fns) are
    stepped in lockstep with the same seeds and actions through four phases:
    ``reset(seed=int)`` then steps; on until an episode ends (and, but in SAME_STEP
    mode, one step past it, then on until another ends), then a manual
    ``reset(seed=[...])`` mid-episode; ``reset(seed=None)``; and the first phase
    again. Waiting for episodes to end is bounded by the env's
    ``spec.max_episode_steps`` (plus one) where it has one, else by
    :data:`UNTIL_DONE_FACTOR` times ``num_steps``, and by
    :data:`UNTIL_DONE_SECONDS`; so long episodes (HalfCheetah's 1,000 steps) reach
    the autoreset checks with the default ``num_steps``. In ``DISABLED`` mode ended
    envs are reset with a partial ``reset_mask``.
    Every result is checked against the spaces, the info-mask layout and the declared
    autoreset mode, and compared with the reference's; then ``set_attr``/``get_attr``/
    ``call``, a wrong action count, ``close()`` and use after close are tried. Every
    env the check creates is closed before it returns. See ``docs/checking.md``.

    Args:
        make_vector_env: Builds the vector env under test; called more than once,
            each time with the same sub-env fns.
        reference: Builds the same envs as a ``gymnasium.vector.SyncVectorEnv`` (or
            wrapped as the env under test is). Default: ``SyncVectorEnv(env.env_fns,
            autoreset_mode=env.metadata["autoreset_mode"])`` when the env has
            ``env_fns`` and is not a ``VectorWrapper``; otherwise the checks that
            need a reference are reported as skipped.
        num_steps: Steps of the main trajectory (at least 12).
        seed: Seeds the resets and the sampled actions.
        skip: Check names (see :data:`vecpool.check.CHECKS`) or groups such as
            ``"api"`` not to run.
        strict: Count breaches the reference commits too (Gymnasium's own
            ``SyncVectorEnv`` pops ``reset_mask`` out of the caller's options and
            works after ``close()``) as failures, not warnings.
        reset_options: Options passed to every ``reset`` (never ``reset_mask``).
        ignore_info_keys: Info keys whose values are not compared, dotted for nested
            dicts. Default: ``("episode.t",)``, the wall-clock time that Gymnasium's
            ``RecordEpisodeStatistics`` reports.

    Returns:
        The report; ``report.ok`` is ``False`` if a check failed, and
        ``report.raise_if_failed()`` raises then.

    Raises:
        TypeError: If ``make_vector_env`` or ``reference`` is not callable or does
            not return a ``gymnasium.vector.VectorEnv``, or an argument has the
            wrong type.
        ValueError: If ``num_steps`` is below 12, ``skip`` names an unknown check,
            or ``reset_options`` holds ``"reset_mask"``.
    """
    factories: tuple[tuple[str, object], ...] = (
        ("make_vector_env", make_vector_env),
        ("reference", reference),
    )
    for name, factory in factories:
        if factory is not None and not callable(factory):
            msg = (
                f"`{name}` must be a callable that builds a vector env, e.g. "
                f"`lambda: gym.make_vec('CartPole-v1', 4)`; got {factory!r}."
            )
            raise TypeError(msg)
    num_steps = check_int("num_steps", num_steps, 12)
    seed = check_int("seed", seed, 0)
    flag: object = strict
    if not isinstance(flag, bool):
        msg = f"`strict` must be True or False, got {flag!r}."
        raise TypeError(msg)
    options: object = reset_options
    if options is not None and not isinstance(options, dict):
        msg = f"`reset_options` must be a dict or None, got {type(options).__name__}."
        raise TypeError(msg)
    if reset_options and "reset_mask" in reset_options:
        msg = (
            "`reset_options` must not hold 'reset_mask': the check makes its own "
            "partial resets in DISABLED mode."
        )
        raise ValueError(msg)
    keys: object = ignore_info_keys
    if isinstance(keys, str) or not isinstance(keys, (tuple, list, set, frozenset)):
        msg = (
            "`ignore_info_keys` must be a tuple of info keys (dotted for nested "
            f'dicts, e.g. ("episode.t",)), got {keys!r}.'
        )
        raise TypeError(msg)
    ignored = tuple(keys)
    if not all(isinstance(key, str) and key for key in ignored):
        msg = f"`ignore_info_keys` must hold non-empty strings, got {ignored!r}."
        raise TypeError(msg)
    checker = _Checker(
        make_vector_env,
        reference,
        num_steps,
        seed,
        resolve_skip(skip),
        strict,
        dict(reset_options or {}),
    )
    checker.ignored_info = ignored
    if "infos.values" in checker.skip:  # no info compared, none stops a phase
        checker.ignored_info = ALL_INFOS
    return checker.run()


class _Checker:
    """One run of :func:`check_vector_env`: the envs, the findings, the phases."""

    def __init__(
        self,
        make_vector_env: VectorEnvFactory,
        reference: VectorEnvFactory | None,
        num_steps: int,
        seed: int,
        skip: frozenset[str],
        strict: bool,
        reset_options: dict[str, Any],
    ) -> None:
        self.make_vector_env = make_vector_env
        self.make_reference = reference
        self.num_steps = num_steps
        self.seed = seed
        self.skip = skip
        self.strict = strict
        self.reset_options = reset_options
        self.ignored_info: tuple[str, ...] = DEFAULT_IGNORED_INFO_KEYS
        self.report = CheckReport()
        self.failures: dict[str, CheckFailure] = {}
        self.warnings: dict[str, CheckFailure] = {}
        self.exercised: set[str] = set()
        self.not_run: dict[str, str] = {}
        self.mode = AutoresetMode.NEXT_STEP
        self.opened: list[Any] = []
        self.hung: set[int] = set()

    def _close(self, env: Any) -> str | None:
        """Close ``env`` with a timeout; an env whose close() hung is not retried."""
        if id(env) in self.hung:
            return None
        problem = close_with_timeout(env)
        if problem is not None and "did not return" in problem:
            self.hung.add(id(env))
        return problem

    # ---- findings -----------------------------------------------------------------
    def fail(
        self, check: str, message: str, *, warning: bool = False, **where: Any
    ) -> None:
        if check in self.skip:
            return
        self.exercised.add(check)
        found = self.warnings if warning and not self.strict else self.failures
        if check in found:
            found[check].more += 1
        else:
            found[check] = CheckFailure(check, message, **where)

    def ran(self, check: str) -> None:
        self.exercised.add(check)

    def skip_reason(self, checks: Iterable[str], reason: str) -> None:
        for check in checks:
            self.not_run.setdefault(check, reason)

    # ---- the run ------------------------------------------------------------------
    def run(self) -> CheckReport:
        start = time.perf_counter()
        children = set(multiprocessing.active_children())
        # processes the envs start and leave running once their workers are gone
        # are reparented here for the check (vecpool/check/orphans.py)
        with Orphans() as orphans:
            try:
                self._run()
            except Exception as error:
                if not self.opened:
                    raise  # the factory failed on its first call: no env, no report
                self.report.errors.append(
                    f"the check stopped: {type(error).__name__}: {error}\n"
                    + traceback.format_exc()
                )
                self.skip_reason(CHECKS, "not reached: the check stopped (see errors)")
            finally:
                for env in reversed(self.opened):
                    self._close(env)  # idempotent: most are closed already
                left = _stop_new_children(children)
                strays = orphans.collect()
                self.report.duration = time.perf_counter() - start
        if left:
            self.fail(
                "api.close",
                f"close() returned but left {len(left)} child processes running "
                f"({', '.join(left)}); the check terminated them",
                phase="api",
            )
        if strays:
            shown = ", ".join(strays[:5]) + (", ..." if len(strays) > 5 else "")
            self.fail(
                "api.close",
                f"close() returned but the envs left {len(strays)} processes they "
                f"started running ({shown}); the check ended them. End what an env "
                "starts in its close(), or start it in the worker's process group.",
                phase="api",
            )
        return self._finish()

    def _make(self, factory: VectorEnvFactory, name: str) -> Any:
        env = factory()
        if not isinstance(env, VectorEnv):
            if hasattr(env, "close"):
                self._close(env)
            msg = (
                f"`{name}` must return a gymnasium.vector.VectorEnv, got "
                f"{type(env).__name__}."
            )
            raise TypeError(msg)
        self.opened.append(env)
        return env

    def _run(self) -> None:
        env = self._make(self.make_vector_env, "make_vector_env")
        self.mode = self._declared_mode(env)
        self.skip_reason(_MODE_CHECKS[self.mode], f"the env declares {self.mode.name}")
        # Gymnasium's VectorWrapper does not forward `copy`: ask the base env
        copy_flag = getattr(env, "copy", getattr(env.unwrapped, "copy", None))
        self.report.env = (
            f"{type(env).__name__}(num_envs={env.num_envs}, "
            f"autoreset_mode={self.mode.name}, copy={copy_flag})"
        )
        make_reference = self.make_reference or self._derive_reference(env)
        reference = None
        if make_reference is not None:
            reference = self._make(make_reference, "reference")
            reference = reference if self._check_single_spaces(env, reference) else None
        self._check_spaces(env, reference)
        if copy_flag is not True:
            self.skip_reason(
                ["copy.observations"], f"env.copy is {copy_flag!r}, not True"
            )
        lockstep = Lockstep(
            env,
            reference,
            self.mode,
            self.fail,
            self.ran,
            self.reset_options,
            check_copy=copy_flag is True,
            ignored_info=self.ignored_info,
        )
        try:
            self._trajectory(lockstep)
        except ReferenceFailedError as error:
            self.report.errors.append(str(error))
            self.skip_reason(CHECKS, "not reached: the reference raised (see errors)")
        self.report.steps = lockstep.steps
        self._check_attributes(env, reference)
        self._check_action_count(env)
        self._check_close(env, reference)

    def _declared_mode(self, env: Any) -> AutoresetMode:
        self.ran("autoreset.metadata")
        declared = getattr(env, "metadata", {}).get("autoreset_mode")
        if isinstance(declared, AutoresetMode):
            return declared
        message = (
            'metadata["autoreset_mode"] is missing: Gymnasium\'s wrappers read it; '
            "NEXT_STEP is assumed"
        )
        mode = AutoresetMode.NEXT_STEP
        if declared is not None:
            try:
                mode = AutoresetMode(declared)
                message = (
                    f'metadata["autoreset_mode"] is {declared!r}, not an '
                    f"AutoresetMode: Gymnasium's wrappers compare it with "
                    f"AutoresetMode.{mode.name}, which fails"
                )
            except ValueError:
                message = (
                    f'metadata["autoreset_mode"] is {declared!r}, not an '
                    "AutoresetMode; NEXT_STEP is assumed"
                )
        self.fail(
            "autoreset.metadata",
            message,
            phase="setup",
            expected="an AutoresetMode",
            got=describe(declared),
        )
        return mode

    def _derive_reference(self, env: Any) -> VectorEnvFactory | None:
        reason = None
        env_fns = getattr(env, "env_fns", None)
        if isinstance(env, VectorWrapper):
            reason = (
                f"the env is wrapped ({type(env).__name__}); pass reference= "
                "building the same wrappers around SyncVectorEnv"
            )
        elif env_fns is None:
            reason = (
                "the env has no env_fns; pass reference= building the same "
                "envs as a SyncVectorEnv"
            )
        if reason is not None:
            self.skip_reason(_NEEDS_REFERENCE, f"no reference: {reason}")
            return None
        mode = self.mode
        fns: list[Callable[[], Any]] = list(env_fns or ())
        return lambda: SyncVectorEnv(fns, autoreset_mode=mode)

    # ---- spaces -------------------------------------------------------------------
    def _check_single_spaces(self, env: Any, reference: Any) -> bool:
        self.ran("spaces.single")
        for name in ("num_envs", "single_observation_space", "single_action_space"):
            left, right = getattr(reference, name), getattr(env, name)
            if left != right:
                self.fail(
                    "spaces.single",
                    f"{name} differs from the reference's",
                    phase="setup",
                    expected=describe(left),
                    got=describe(right),
                )
                self.skip_reason(
                    _NEEDS_REFERENCE,
                    f"not compared: {name} differs from the reference's",
                )
                return False
        return True

    def _check_spaces(self, env: Any, reference: Any | None) -> None:
        self.ran("spaces.batched")
        breach = space_batching_breach(env)
        if breach is not None:
            self.fail(
                "spaces.batched",
                breach.message,
                phase="setup",
                **breach.fields(),
            )
        if reference is None:
            return  # in _NEEDS_REFERENCE: a space against itself proves nothing
        self.ran("spaces.actions")
        space = copy.deepcopy(reference.action_space)
        space.seed(self.seed)
        for _ in range(3):
            actions = space.sample()
            if not env.action_space.contains(actions):
                self.fail(
                    "spaces.actions",
                    "an action batch sampled from the reference's action_space is "
                    "not in env.action_space",
                    phase="setup",
                    got=describe(actions),
                )
                return

    # ---- the trajectory -----------------------------------------------------------
    def _trajectory(self, lockstep: Lockstep) -> None:
        driver = lockstep.env if lockstep.reference is None else lockstep.reference
        space = copy.deepcopy(driver.action_space)
        space.seed(self.seed)
        third = self.num_steps // 3
        num_envs = lockstep.num_envs

        episode = _episode_limit(lockstep)
        wait_cap = (
            episode + 1 if episode is not None else UNTIL_DONE_FACTOR * self.num_steps
        )
        deadline = time.monotonic() + UNTIL_DONE_SECONDS

        def steps(
            phase: str,
            count: int,
            *,
            until_done: bool = False,
            log: list[tuple[Op, Outcome]] | None = None,
        ) -> bool:
            for _ in range(count):
                if until_done and time.monotonic() > deadline:
                    return True
                if (
                    lockstep.mode is AutoresetMode.DISABLED
                    and lockstep.previous_done.any()
                ):
                    op = Op("reset", mask=lockstep.previous_done.copy())
                    if not run(phase, op, log):
                        return False
                if not run(phase, Op("step", actions=space.sample()), log):
                    return False
                if until_done and lockstep.previous_done.any():
                    return True
            return True

        def run(phase: str, op: Op, log: list[tuple[Op, Outcome]] | None) -> bool:
            outcome = lockstep.run(phase, op)
            if outcome is not None and log is not None:
                log.append((op, Outcome(copy.deepcopy(outcome.values))))
            return outcome is not None

        first: list[tuple[Op, Outcome]] = []
        complete = run("seed_int", Op("reset", seed=self.seed), first) and steps(
            "seed_int", third, log=first
        )
        if complete:  # on until an episode ends (not replayed)
            waited = max(third, wait_cap)
            steps("seed_int", waited, until_done=True)
            if (
                lockstep.previous_done.any()
                and lockstep.mode is not AutoresetMode.SAME_STEP
            ):
                # the step after an end is what NEXT_STEP and DISABLED (its partial
                # reset) check; then another end, for the manual reset's check
                steps("seed_int", 1) and steps(
                    "seed_int", max(third, wait_cap), until_done=True
                )
        if not lockstep.previous_done.any():
            limit = "" if episode is None else f" (its episodes last up to {episode})"
            self.skip_reason(
                ["autoreset.after_manual_reset"],
                f"not reached: no episode ended in {third + max(third, wait_cap)} "
                f"steps{limit}, nor within {UNTIL_DONE_SECONDS:.0f} s; raise "
                "num_steps",
            )
        seeds: list[int | None] = [
            self.seed + 1000 + index for index in range(num_envs)
        ]
        if num_envs > 1 and not lockstep.diverged:  # else env 1's stream differs
            seeds[1] = None  # a None entry keeps that env's stream going
        if run("seed_list", Op("reset", seed=seeds, manual=True, extension=True), None):
            steps("seed_list", third)
        # a seeded start first, so an earlier divergence cannot leak into seed_none
        if (
            run("seed_int", Op("reset", seed=self.seed + 2000), None)
            and steps("seed_int", max(third // 4, 1))
            and run("seed_none", Op("reset", seed=None), None)
        ):
            steps("seed_none", max(third // 2, 1))
        if complete:
            self._replay(lockstep, first)
        else:
            self.skip_reason(
                ["determinism.reseed"],
                "not reached: phase seed_int stopped at a failure",
            )
        for check in (
            "autoreset.next_step",
            "autoreset.same_step",
            "autoreset.disabled",
            "autoreset.reset_mask",
        ):
            self.skip_reason(
                [check], "not reached: no step followed an episode end; raise num_steps"
            )
        self.skip_reason(["infos.masks"], "not reached: every infos dict was empty")

    def _replay(self, lockstep: Lockstep, first: list[tuple[Op, Outcome]]) -> None:
        """Run phase ``seed_int`` again: the same results as the first time."""
        self.ran("determinism.reseed")
        for index, (op, recorded) in enumerate(first):
            outcome = lockstep.run("reseed", op)
            if outcome is None:
                return
            found = recorded.difference(outcome, self.ignored_info, lockstep.num_envs)
            if found is not None:
                self.fail(
                    "determinism.reseed",
                    f"{op.label()} ({index} calls after "
                    f"reset(seed={self.seed})) differs from the first run with the "
                    "same "
                    "seed and actions",
                    step=lockstep.steps,
                    phase="reseed",
                    **found.fields(),
                )
                return

    # ---- API ----------------------------------------------------------------------
    def _check_attributes(self, env: Any, reference: Any | None) -> None:
        missing = [
            name
            for name in ("set_attr", "get_attr", "call")
            if not callable(getattr(env, name, None))
        ]
        if missing:  # not in VectorEnv's API: Gymnasium's VectorWrapper lacks them
            self.skip_reason(["api.attributes"], f"the env has no {', '.join(missing)}")
            return
        self.ran("api.attributes")
        values = [f"value-{index}" for index in range(env.num_envs)]
        try:
            env.set_attr(_ATTRIBUTE, values)
            expected: Any = tuple(values)
            if reference is not None:
                reference.set_attr(_ATTRIBUTE, values)
                expected = reference.get_attr(_ATTRIBUTE)
            for call, got in (
                (f"get_attr({_ATTRIBUTE!r})", env.get_attr(_ATTRIBUTE)),
                (f"call({_ATTRIBUTE!r})", env.call(_ATTRIBUTE)),
            ):
                found = first_difference(expected, got, call, env.num_envs)
                if found is not None:
                    self.fail(
                        "api.attributes",
                        f"{call} after set_attr with a list of per-env values",
                        phase="api",
                        **found.fields(),
                    )
                    return
            env.set_attr(_ATTRIBUTE, "shared")
            got = env.get_attr(_ATTRIBUTE)
            if got != ("shared",) * env.num_envs:
                self.fail(
                    "api.attributes",
                    "get_attr after set_attr with one value",
                    phase="api",
                    expected=describe(("shared",) * env.num_envs),
                    got=describe(got),
                )
                return
        except Exception as error:  # noqa: BLE001 - a finding about the env
            self.fail(
                "api.attributes",
                f"raised {error!r}",
                phase="api",
                got=traceback.format_exc().strip().splitlines()[-1],
            )
            return
        try:
            env.set_attr(_ATTRIBUTE, values[:-1])
        except ValueError:
            pass
        except Exception as error:  # noqa: BLE001
            self.fail(
                "api.attributes",
                "set_attr with num_envs - 1 values raised "
                f"{type(error).__name__}, not ValueError",
                phase="api",
                got=repr(error),
            )
        else:
            self.fail(
                "api.attributes",
                "set_attr with num_envs - 1 values did not raise ValueError",
                phase="api",
            )

    def _check_action_count(self, tested: Any) -> None:
        """A wrong number of actions raises ValueError; then the env still works.

        "Still works" means: a second instance that rejected the wrong step gives
        the same ``reset(seed)`` and steps as ``tested``, which never saw one.
        """
        env = self._make(self.make_vector_env, "make_vector_env")
        if env is tested:
            msg = (
                "`make_vector_env` returned the same instance twice: it must build a "
                "new vector env on every call (e.g. `lambda: SyncVectorEnv(fns)`, not "
                "`lambda: env`)."
            )
            raise ValueError(msg)
        num_envs = env.num_envs
        outcome = call_env(env, Op("reset", seed=self.seed), dict(self.reset_options))
        rejected = outcome.error is None
        if not rejected:
            self.skip_reason(
                ["api.wrong_action_count", "api.usable_after_error"],
                f"not reached: a second instance's reset raised {outcome.error!r}",
            )
        for count in (num_envs + 1, num_envs - 1):
            if count < 1 or not rejected:
                continue
            self.ran("api.wrong_action_count")
            space = batch_space(env.single_action_space, count)
            space.seed(self.seed)
            outcome = call_env(env, Op("step", actions=space.sample()), None)
            if not isinstance(outcome.error, ValueError):
                rejected = False
                got = (
                    "no error"
                    if outcome.error is None
                    else f"{type(outcome.error).__name__}: {outcome.error}"
                )
                self.fail(
                    "api.wrong_action_count",
                    f"step() with {count} actions for {num_envs} envs must raise "
                    "ValueError",
                    phase="api",
                    expected="ValueError",
                    got=got,
                )
        try:
            if rejected:
                problem = self._same_after_error(env, tested)
                if problem is not None:
                    self.fail("api.usable_after_error", problem, phase="api")
            else:
                self.skip_reason(
                    ["api.usable_after_error"],
                    "not reached: the wrong action count was not rejected",
                )
        finally:
            problem = self._close(env)
            self.opened.remove(env)
            if problem is not None:
                # part of the same story when the env already broke after the
                # error; a close() problem of its own otherwise
                broken = (
                    "api.usable_after_error" in self.failures
                    or "api.usable_after_error" in self.skip
                )
                self.fail(
                    "api.usable_after_error" if broken else "api.close",
                    f"after a rejected step(), {problem}",
                    phase="api",
                )

    def _same_after_error(self, env: Any, tested: Any) -> str | None:
        """Run reset(seed) and a few steps on both; describe the first difference."""
        space = copy.deepcopy(tested.action_space)
        space.seed(self.seed)
        ops = [Op("reset", seed=self.seed + 7)]
        done = None
        for index in range(_USABLE_STEPS + 1):
            if index:
                ops = [Op("step", actions=space.sample())]
                if (
                    self.mode is AutoresetMode.DISABLED
                    and done is not None
                    and done.any()
                ):
                    ops.insert(0, Op("reset", mask=done))
            for op in ops:
                options = None if op.kind == "step" else dict(self.reset_options)
                if options is not None and op.mask is not None:
                    options["reset_mask"] = op.mask.copy()
                expected = call_env(tested, copy.deepcopy(op), copy.deepcopy(options))
                got = call_env(env, copy.deepcopy(op), options)
                if expected.error is not None:  # the env fails anyway: not this check
                    self.skip_reason(
                        ["api.usable_after_error"],
                        f"not reached: the env under test raised {expected.error!r} "
                        "on its own",
                    )
                    return None
                if got.error is not None:
                    return (
                        f"after step() rejected a wrong action count, {op.label()} "
                        f"raised {type(got.error).__name__}: {got.error}"
                    )
                found = expected.difference(got, self.ignored_info, env.num_envs)
                if found is not None:
                    return (
                        f"after step() rejected a wrong action count, {op.label()} "
                        f"differs from a fresh env's at {found.where}: expected "
                        f"{found.expected}, got {found.got}"
                    )
                done = expected.done(env.num_envs)
        self.ran("api.usable_after_error")
        return None

    def _check_close(self, env: Any, reference: Any | None) -> None:
        # from a fresh reset, so a step after close() meets no ended env (which
        # SyncVectorEnv in DISABLED mode would refuse for that reason alone)
        for vector_env in (env, reference):
            if vector_env is not None:
                call_env(
                    vector_env, Op("reset", seed=self.seed), dict(self.reset_options)
                )
        self.ran("api.close")
        for attempt in ("first", "second"):
            problem = self._close(env)
            if problem is not None:
                self.fail("api.close", f"the {attempt} close(): {problem}", phase="api")
                return
        if getattr(env, "closed", True) is not True:
            self.fail(
                "api.close",
                "env.closed is not True after close()",
                phase="api",
                expected="True",
                got=describe(getattr(env, "closed", None)),
            )
        self.ran("api.use_after_close")
        if reference is not None:
            self._close(reference)
        space = copy.deepcopy(env.action_space)
        for op in (Op("step", actions=space.sample()), Op("reset", seed=self.seed)):
            outcome = call_env(env, op, None)
            if outcome.error is not None:
                continue
            if reference is None:  # nothing to compare with: not a hard failure
                warn, note = True, " (no reference to compare with)"
            else:
                warn = call_env(reference, op, None).error is None
                note = " (so does the reference, SyncVectorEnv)" if warn else ""
            self.fail(
                "api.use_after_close",
                f"{op.label()} after close() returned instead of raising{note}",
                warning=warn,
                phase="api",
                expected="an error, e.g. gymnasium.error.ClosedEnvironmentError",
                got="a result",
            )
            return

    # ---- the report ---------------------------------------------------------------
    def _finish(self) -> CheckReport:
        report = self.report
        report.failures = list(self.failures.values())
        report.warnings = list(self.warnings.values())
        warned = set(self.warnings)
        for check in CHECKS:
            if check in self.skip:
                report.skipped[check] = "skipped by request"
            elif check in self.failures or check in warned:
                continue
            elif check in self.exercised:
                report.passed.append(check)
            else:
                report.skipped[check] = self.not_run.get(check, "not reached")
        return report


def close_with_timeout(env: Any, timeout: float | None = None) -> str | None:
    """Close ``env`` in a helper thread, so a hung ``close()`` cannot hang the check.

    If ``close()`` raises or has not returned after ``timeout`` seconds, the env's
    worker processes (Gymnasium's ``processes`` attribute) are terminated, which
    unblocks it.

    Returns:
        ``None`` if ``close()`` returned, otherwise what went wrong, as text.
    """
    timeout = CLOSE_TIMEOUT if timeout is None else timeout
    errors: list[BaseException] = []

    def close() -> None:
        try:
            env.close()
        except BaseException as error:  # noqa: BLE001 - reported to the caller
            errors.append(error)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium warns when closing mid-call
        thread = threading.Thread(target=close, name="vecpool-check-close", daemon=True)
        thread.start()
        thread.join(timeout)
        hung = thread.is_alive()
        if hung or errors:  # no process may outlive the check
            base = getattr(env, "unwrapped", env)
            processes = list(getattr(base, "processes", ()))
            for process in processes:
                if process.is_alive():
                    process.terminate()
            if processes:  # their end unblocks a close() waiting on them
                thread.join(5.0)
            for process in processes:
                process.join(1.0)  # reaped: no zombie
            if processes and getattr(base, "closed", True) is False:
                base.closed = True  # or its __del__ tries close() again, and fails
    if hung:
        return f"close() did not return within {timeout:.0f} s"
    if errors:
        return f"close() raised {errors[0]!r}"
    return None


def _stop_new_children(
    before: set[multiprocessing.process.BaseProcess], grace: float = 3.0
) -> list[str]:
    """Terminate child processes started since ``before`` that are still running.

    Returns:
        ``"name (pid N)"`` for each one that had not exited within ``grace`` s.
    """
    deadline = time.monotonic() + grace
    left = [child for child in multiprocessing.active_children() if child not in before]
    for child in left:
        child.join(max(deadline - time.monotonic(), 0.0))
    running = [child for child in left if child.is_alive()]
    for child in running:
        child.terminate()
        child.join(1.0)
    return [f"{child.name} (pid {child.pid})" for child in running]


def _episode_limit(lockstep: Lockstep) -> int | None:
    """The sub-envs' ``spec.max_episode_steps``, where one is known."""
    for vector_env in (lockstep.reference, lockstep.env):
        if vector_env is None:
            continue
        candidates = [getattr(vector_env, "spec", None)]
        envs = getattr(getattr(vector_env, "unwrapped", vector_env), "envs", None)
        if envs:
            candidates.append(getattr(envs[0], "spec", None))
        for spec in candidates:
            limit = getattr(spec, "max_episode_steps", None)
            if isinstance(limit, int) and limit > 0:
                return limit
    return None
