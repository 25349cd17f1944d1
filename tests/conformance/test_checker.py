"""vecpool.check_vector_env: passes correct vector envs, catches every broken one.

The checker is itself tested differentially: each deliberately broken env of
``vecpool.testing`` is a ``SyncVectorEnv`` with one defect, and the same envs without
the defect pass. Gymnasium's own ``AsyncVectorEnv`` is checked as found: correct
except for two real bugs, which must be reported precisely.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import re
import subprocess
import sys
import textwrap
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import vecpool
from vecpool.check import CHECKS, CheckReport, VectorEnvCheckError, check_vector_env
from vecpool.check.compare import first_difference
from vecpool.check.rules import autoreset_breach, info_mask_breach
from vecpool.cli import main
from vecpool.testing import (
    BROKEN_ENVS,
    OBS_KINDS,
    AliasingObservationsVectorEnv,
    CountingEnv,
    ShuffledObservationsVectorEnv,
    WrongAutoresetStepVectorEnv,
    WrongInfoMasksVectorEnv,
    assert_vector_env_conforms,
    make_env_fns,
)

MODES = list(AutoresetMode)
STEPS = 90  # enough for several episode ends of CountingEnv and CartPole
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def cartpole_fns(num_envs: int = 4) -> list[Any]:
    return [functools.partial(gym.make, "CartPole-v1") for _ in range(num_envs)]


def counting_fns(num_envs: int = 4, **kwargs: Any) -> list[Any]:
    return make_env_fns(num_envs, obs_kind=kwargs.pop("obs_kind", "dict"), **kwargs)


def no_children_left() -> None:
    deadline = time.monotonic() + 10  # a hang guard, not a speed claim
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []


# ---- correct envs pass ------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_sync_vector_env_passes_with_warnings_only_where_it_breaks_the_rules(mode):
    report = check_vector_env(
        lambda: SyncVectorEnv(counting_fns(), autoreset_mode=mode), num_steps=STEPS
    )
    assert report.ok, report
    warned = {warning.check for warning in report.warnings}
    # SyncVectorEnv pops reset_mask out of the caller's options and runs after close()
    expected = {"api.use_after_close"}
    if mode is AutoresetMode.DISABLED:
        expected.add("api.options")
    assert warned == expected, report
    strict = check_vector_env(
        lambda: SyncVectorEnv(counting_fns(), autoreset_mode=mode),
        num_steps=STEPS,
        strict=True,
    )
    assert set(strict.failed) == expected, strict


VECPOOL_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "in_process": {"num_workers": 0},
    "one_worker": {"num_workers": 1},
    "no_shared_memory": {"shared_memory": False},
    "no_copy": {"copy": False},
}


@pytest.mark.parametrize("variant", VECPOOL_VARIANTS)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_vecpool_passes_every_check_in_every_mode(mode, variant, leak_checker):
    kwargs = VECPOOL_VARIANTS[variant]
    report = check_vector_env(
        lambda: vecpool.AsyncVectorEnv(counting_fns(), autoreset_mode=mode, **kwargs),
        num_steps=STEPS,
        strict=True,
    )
    assert report.ok, report
    assert report.warnings == []
    assert set(report.passed) | set(report.skipped) == set(CHECKS)
    must_pass = {
        "determinism.seed_int",
        "determinism.seed_list",
        "determinism.seed_none",
        "determinism.reseed",
        "autoreset.after_manual_reset",
        f"autoreset.{mode.name.lower()}",
        "infos.masks",
        "infos.values",
        "api.options",
        "api.attributes",
        "api.wrong_action_count",
        "api.usable_after_error",
        "api.close",
        "api.use_after_close",
    }
    if mode is AutoresetMode.DISABLED:
        must_pass.add("autoreset.reset_mask")
    if variant != "no_copy":
        must_pass.add("copy.observations")
    else:
        assert "env.copy is False" in report.skipped["copy.observations"]
    assert must_pass <= set(report.passed), report
    leak_checker.assert_no_leaks()


@pytest.mark.parametrize("obs_kind", OBS_KINDS)
def test_vecpool_passes_for_every_observation_kind(obs_kind):
    report = check_vector_env(
        lambda: vecpool.AsyncVectorEnv(
            counting_fns(3, obs_kind=obs_kind, action_kind="box"),
            autoreset_mode=AutoresetMode.SAME_STEP,
        ),
        num_steps=STEPS,
        strict=True,
    )
    assert report.ok, report
    assert "spaces.observations" in report.passed


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_gymnasium_async_is_correct_except_after_a_rejected_step(mode):
    report = check_vector_env(
        lambda: gym.vector.AsyncVectorEnv(cartpole_fns(), autoreset_mode=mode),
        num_steps=STEPS,
    )
    assert report.failed == ["api.usable_after_error"], report
    failure = report.failures[0]
    # step_async sends the commands before zip(strict=True) finds the wrong count,
    # so the next reset() reads step replies
    assert "raised ValueError" in failure.message
    skipped = check_vector_env(
        lambda: gym.vector.AsyncVectorEnv(cartpole_fns(), autoreset_mode=mode),
        num_steps=STEPS,
        skip=("api.usable_after_error",),
    )
    assert skipped.ok, skipped
    no_children_left()


# ---- Gymnasium's stale autoreset flag ---------------------------------------------
def test_gymnasium_async_without_shared_memory_keeps_a_stale_autoreset_flag():
    report = check_vector_env(
        lambda: gym.vector.AsyncVectorEnv(cartpole_fns(8), shared_memory=False),
        skip=("api.usable_after_error",),
    )
    assert report.failed == ["autoreset.after_manual_reset"], report
    failure = report.failures[0]
    assert failure.phase == "seed_list"
    assert "stale autoreset flag survived reset()" in failure.message
    assert failure.where == f"observations[{failure.env_index}]"
    # the env named really had ended on the step before the manual reset: replay the
    # checker's actions through SyncVectorEnv and look at that step's flags
    reference = SyncVectorEnv(cartpole_fns(8))
    space = reference.action_space
    space.seed(0)
    reference.reset(seed=0)
    done = np.zeros(8, dtype=bool)
    assert failure.step is not None
    for _ in range(failure.step - 1):
        _, _, terminations, truncations, _ = reference.step(space.sample())
        done = terminations | truncations
    reference.close()
    assert done[failure.env_index]
    with_shared_memory = check_vector_env(
        lambda: gym.vector.AsyncVectorEnv(cartpole_fns(8), shared_memory=True),
        skip=("api.usable_after_error",),
    )
    assert with_shared_memory.ok, with_shared_memory
    no_children_left()


@pytest.mark.parametrize(
    "mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=lambda m: m.name
)
def test_gymnasium_async_without_shared_memory_is_right_in_other_modes(mode):
    report = check_vector_env(
        lambda: gym.vector.AsyncVectorEnv(
            counting_fns(), shared_memory=False, autoreset_mode=mode
        ),
        num_steps=STEPS,
        skip=("api.usable_after_error",),
    )
    assert report.ok, report


# ---- broken envs are caught -------------------------------------------------------
@pytest.mark.parametrize("broken", BROKEN_ENVS, ids=lambda cls: cls.__name__)
def test_every_broken_env_is_caught_first_by_its_check(broken):
    expected = BROKEN_ENVS[broken]
    report = check_vector_env(lambda: broken(counting_fns()), num_steps=STEPS)
    assert not report.ok
    assert report.failures[0].check == expected, report
    # the rows stay swapped in every phase; each other defect shows once
    also = ["determinism.seed_list"] if broken is ShuffledObservationsVectorEnv else []
    assert report.failed == [expected, *also], report


def test_the_broken_envs_without_their_defect_pass():
    assert check_vector_env(lambda: SyncVectorEnv(counting_fns()), num_steps=STEPS).ok


class IgnoresResetMask(SyncVectorEnv):
    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        options = {k: v for k, v in (options or {}).items() if k != "reset_mask"}
        return super().reset(seed=seed, options=options)  # resets every env


class DeclaresSameStep(SyncVectorEnv):
    def __init__(self, env_fns: Any) -> None:
        super().__init__(env_fns, autoreset_mode=AutoresetMode.NEXT_STEP)
        self.metadata = {**self.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}


class FreshSeedOnNone(SyncVectorEnv):
    draws = np.random.default_rng()

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        if seed is None:
            seed = int(self.draws.integers(1 << 30))  # fresh entropy, no stream
        return super().reset(seed=seed, options=options)


class ZeroesActions(SyncVectorEnv):
    def step(self, actions: Any) -> Any:
        result = super().step(actions)
        actions[...] = 0
        return result


class Float64Observations(SyncVectorEnv):
    def step(self, actions: Any) -> Any:
        observations, *rest = super().step(actions)
        return (observations.astype(np.float64), *rest)


class Int8Terminations(SyncVectorEnv):
    def step(self, actions: Any) -> Any:
        observations, rewards, terminations, *rest = super().step(actions)
        return (observations, rewards, terminations.astype(np.int8), *rest)


class SetsTheWholeList(SyncVectorEnv):
    def set_attr(self, name: str, values: Any) -> None:
        for env in self.envs:
            setattr(env, name, values)


class StringAutoresetMode(SyncVectorEnv):
    def __init__(self, env_fns: Any) -> None:
        super().__init__(env_fns)
        self.metadata = {**self.metadata, "autoreset_mode": "NextStep"}


class RewardCountsResets(SyncVectorEnv):
    resets = 0

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        self.resets += 1
        return super().reset(seed=seed, options=options)

    def step(self, actions: Any) -> Any:
        observations, rewards, *rest = super().step(actions)
        return (observations, rewards + (self.resets > 4), *rest)


@pytest.mark.parametrize(
    ("make", "failed"),
    [
        (
            lambda: IgnoresResetMask(
                counting_fns(), autoreset_mode=AutoresetMode.DISABLED
            ),
            ["autoreset.reset_mask"],
        ),
        (lambda: DeclaresSameStep(counting_fns()), ["autoreset.same_step"]),
        (lambda: FreshSeedOnNone(counting_fns()), ["determinism.seed_none"]),
        (
            lambda: ZeroesActions(counting_fns(action_kind="box")),
            ["api.actions_not_mutated"],
        ),
        (
            lambda: Float64Observations(cartpole_fns()),
            ["spaces.observations", "determinism.seed_int", "determinism.seed_list"],
        ),
        (
            lambda: Int8Terminations(counting_fns()),
            ["spaces.step_arrays", "determinism.seed_int", "determinism.seed_list"],
        ),
        (lambda: SetsTheWholeList(counting_fns()), ["api.attributes"]),
        (lambda: StringAutoresetMode(cartpole_fns()), ["autoreset.metadata"]),
        (
            # a fresh instance differs from the used one too: see docs' Limits
            lambda: RewardCountsResets(cartpole_fns()),
            ["determinism.reseed", "api.usable_after_error"],
        ),
    ],
    ids=[
        "reset_mask_ignored",
        "same_step_declared_next_step_done",
        "seed_none_reseeds",
        "actions_zeroed",
        "float64_observations",
        "int8_flags",
        "set_attr_whole_list",
        "mode_as_string",
        "state_survives_reset",
    ],
)
def test_each_kind_of_breach_fails_exactly_its_checks(make, failed):
    report = check_vector_env(make, num_steps=STEPS)
    assert report.failed == failed, report


def test_shuffled_observations_name_the_env_and_the_step():
    report = check_vector_env(
        lambda: ShuffledObservationsVectorEnv(counting_fns(), at=7), num_steps=STEPS
    )
    failure = report.failure("determinism.seed_int")
    assert failure is not None
    assert (failure.env_index, failure.step, failure.phase) == (0, 7, "seed_int")
    assert failure.where is not None
    assert failure.where.startswith("observations[")


def test_aliased_observations_name_the_call_that_overwrote_them():
    report = check_vector_env(
        lambda: AliasingObservationsVectorEnv(cartpole_fns()), num_steps=STEPS
    )
    failure = report.failure("copy.observations")
    assert failure is not None
    assert "reset(seed=0) at step 0 were changed in place" in failure.message
    assert failure.step == 1


def test_a_wrong_autoreset_step_names_the_env_that_ended():
    report = check_vector_env(
        lambda: WrongAutoresetStepVectorEnv(cartpole_fns()), num_steps=STEPS
    )
    failure = report.failure("autoreset.next_step")
    assert failure is not None
    reference = SyncVectorEnv(cartpole_fns())
    space = reference.action_space
    space.seed(0)
    reference.reset(seed=0)
    assert failure.step is not None
    for _ in range(failure.step):
        _, _, terminations, truncations, _ = reference.step(space.sample())
    reference.close()
    assert np.flatnonzero(terminations | truncations)[0] == failure.env_index


@pytest.mark.parametrize("defect", ["missing", "int"])
def test_malformed_info_masks_are_caught_without_a_reference(defect):
    class Wrapped(gym.vector.VectorWrapper):
        pass  # hides env_fns' meaning: no reference can be derived

    report = check_vector_env(
        lambda: Wrapped(WrongInfoMasksVectorEnv(counting_fns(), defect=defect)),
        num_steps=STEPS,
    )
    assert report.failed == ["infos.masks"], report
    assert "no reference" in report.skipped["infos.values"]


# ---- references ------------------------------------------------------------------
def test_a_wrapped_env_needs_an_explicit_reference():
    def wrapped() -> Any:
        return RecordEpisodeStatistics(vecpool.AsyncVectorEnv(cartpole_fns()))

    derived = check_vector_env(wrapped, num_steps=STEPS)
    assert derived.ok, derived
    assert "pass reference=" in derived.skipped["determinism.seed_int"]
    assert "determinism.reseed" in derived.passed  # self-checks still run
    explicit = check_vector_env(
        wrapped,
        reference=lambda: RecordEpisodeStatistics(SyncVectorEnv(cartpole_fns())),
        num_steps=STEPS,
    )
    assert explicit.ok, explicit
    assert "determinism.seed_int" in explicit.passed
    assert "infos.values" in explicit.passed


def test_a_reference_over_other_envs_is_reported_not_compared():
    report = check_vector_env(
        lambda: SyncVectorEnv(cartpole_fns()),
        reference=lambda: SyncVectorEnv(counting_fns()),
        num_steps=STEPS,
    )
    assert report.failed == ["spaces.single"]
    assert "differs from the reference" in report.skipped["determinism.seed_int"]


def test_reset_options_reach_every_reset():
    for mode in MODES:
        report = check_vector_env(
            functools.partial(SyncVectorEnv, [NeedsOptionEnv] * 3, autoreset_mode=mode),
            reset_options={"difficulty": 2},
            num_steps=STEPS,
        )
        assert report.ok, report
        assert "api.wrong_action_count" in report.passed
    without = check_vector_env(
        lambda: SyncVectorEnv([NeedsOptionEnv] * 3), num_steps=STEPS
    )
    assert not without.ok  # both envs refuse a reset without the option
    assert "AssertionError" in without.errors[0]


def test_a_native_vector_env_without_env_fns_is_checked_without_a_reference():
    # Gymnasium's own CartPoleVectorEnv: no env_fns, no list seeds, no set_attr
    report = check_vector_env(
        lambda: gym.make_vec("CartPole-v1", 4, vectorization_mode="vector_entry_point"),
        num_steps=STEPS,
    )
    # it raises AssertionError for a wrong action count and leaves `closed` False
    assert report.failed == ["api.wrong_action_count", "api.close"], report
    warned = [warning.check for warning in report.warnings]
    assert warned == ["determinism.seed_list", "api.use_after_close"], report
    assert "only promises seed: int | None" in report.warnings[0].message
    assert "(the reference did not)" not in report.warnings[0].message
    assert "no env_fns" in report.skipped["determinism.seed_int"]
    assert "determinism.reseed" in report.passed


class TextEnv(gym.Env[str, int]):
    """Text observations: batched as a tuple of per-env strings."""

    observation_space = gym.spaces.Text(5)
    action_space: Any = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.count = 0
        return f"r{self.np_random.integers(100)}", {}

    def step(self, action: int) -> Any:
        self.count += 1
        ended = bool(self.np_random.random() < 0.2)
        return f"s{self.count}", 1.0, ended, False, {}


def test_a_space_batched_as_a_tuple_of_rows_passes_partial_resets():
    report = check_vector_env(
        lambda: SyncVectorEnv([TextEnv] * 3, autoreset_mode=AutoresetMode.DISABLED),
        num_steps=STEPS,
    )
    assert report.ok, report
    assert "autoreset.reset_mask" in report.passed


class ClockInfoEnv(TextEnv):
    def step(self, action: int) -> Any:
        *result, _ = super().step(action)
        return (*result, {"wall": time.perf_counter()})


def test_skipped_or_ignored_infos_do_not_cut_the_trajectory():
    options: list[dict[str, Any]] = [
        {"skip": ("infos.values",)},
        {"ignore_info_keys": ("wall",)},
    ]
    for kwargs in options:
        report = check_vector_env(lambda: SyncVectorEnv([ClockInfoEnv] * 2), **kwargs)
        assert report.ok, report
        assert report.steps > 300  # every phase ran to its end
        assert "determinism.reseed" in report.passed
    report = check_vector_env(lambda: SyncVectorEnv([ClockInfoEnv] * 2))
    assert report.failed[0] == "infos.values"


class AliasedRewardsVectorEnv(SyncVectorEnv):
    def step(self, actions: Any) -> Any:
        _, rewards, *rest = super().step(actions)
        self._rewards_out = getattr(self, "_rewards_out", rewards)
        self._rewards_out[:] = rewards  # the same array every step
        return (self._observations.copy(), self._rewards_out, *rest)


def test_aliased_rewards_break_copy_semantics_too():
    report = check_vector_env(
        lambda: AliasedRewardsVectorEnv(cartpole_fns()), num_steps=STEPS
    )
    failure = report.failure("copy.observations")
    assert failure is not None, report
    assert failure.message.startswith("the rewards returned by step(actions)")


class LeakyVectorEnv(vecpool.AsyncVectorEnv):
    def close(self, **kwargs: Any) -> None:
        self.closed = True  # the workers are left running

    def __del__(self) -> None:
        pass


def test_workers_left_running_by_close_are_reported_and_stopped():
    report = check_vector_env(
        lambda: LeakyVectorEnv(counting_fns(2), num_workers=1), num_steps=12
    )
    failure = report.failure("api.close")
    assert failure is not None, report
    # one worker per instance the check built; vecpool's finaliser may have
    # stopped the second one's already, when that instance was collected
    assert re.search(r"left [12] child processes running", failure.message)
    no_children_left()


class _SleeperEnv(gym.Env):
    """Starts a ``sleep`` in its own session: no process group kill reaches it."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        import os

        # forked and exec'd (no Popen object to complain when it is collected)
        if os.fork() == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", "60"])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, True, {}


def _sleepers() -> set[int]:
    import pathlib

    found = set()
    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == b"sleep\x0060\x00":
                found.add(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("backend", ["vecpool", "gym-async"])
def test_processes_envs_leave_behind_are_reported_and_ended(backend):
    # issue 22, item 3: the check said "ok" while `sleep`s the envs had started
    # ran on, reparented to init
    before = _sleepers()
    make: Any
    if backend == "vecpool":
        make = lambda: vecpool.AsyncVectorEnv([_SleeperEnv] * 2, num_workers=2)  # noqa: E731
    else:
        make = lambda: gym.vector.AsyncVectorEnv([_SleeperEnv] * 2)  # noqa: E731
    report = check_vector_env(make, num_steps=12)
    failure = report.failure("api.close")
    assert failure is not None, report
    assert "the envs left" in failure.message
    assert "sleep 60 (pid" in failure.message
    assert _sleepers() - before == set()  # ended, and reaped: no zombie either


def test_the_check_leaves_the_users_own_processes_alone():
    # found by a review: new children of processes that were running before the
    # check were counted as the envs' and terminated
    loop = subprocess.Popen(["sh", "-c", "while true; do sleep 0.05; done"])
    try:
        report = check_vector_env(
            lambda: vecpool.AsyncVectorEnv([_SleeperEnvFree] * 2, num_workers=2),
            num_steps=12,
        )
        assert report.ok, report
        assert loop.poll() is None  # still looping, its sleeps untouched
    finally:
        loop.kill()
        loop.wait()


class _SleeperEnvFree(gym.Env):
    """Starts and ends its own helper in close() (a zombie until reaped)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.child = subprocess.Popen(["sleep", "60"])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, True, {}

    def close(self):
        self.child.kill()
        self.child.wait()


class FailingInfo:
    pass


class UnbatchableInfoEnv(TextEnv):
    def step(self, action: int) -> Any:
        *result, _ = super().step(action)
        return (*result, {"odd": FailingInfo()} if self.count == 3 else {})


def test_a_reference_that_raises_leaves_the_report_not_ok():
    def broken_reference() -> Any:
        env: Any = SyncVectorEnv([TextEnv] * 2)
        env.step = lambda actions: 1 / 0
        return env

    report = check_vector_env(
        lambda: SyncVectorEnv([TextEnv] * 2), reference=broken_reference
    )
    assert not report.ok
    assert "ZeroDivisionError" in report.errors[0]
    assert str(report).startswith("check_vector_env: NOT FINISHED")
    with pytest.raises(VectorEnvCheckError):
        report.raise_if_failed()


def test_popping_reset_mask_without_a_reference_is_only_a_warning():
    def wrapped() -> Any:
        env = SyncVectorEnv(cartpole_fns(), autoreset_mode=AutoresetMode.DISABLED)
        return RecordEpisodeStatistics(env)

    report = check_vector_env(wrapped, num_steps=STEPS)
    assert report.ok, report
    warning = next(item for item in report.warnings if item.check == "api.options")
    assert "popped reset_mask, as Gymnasium's SyncVectorEnv does" in warning.message


# ---- arguments, report, cleanup ---------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_steps": 5}, ValueError, "num_steps"),
        ({"seed": -1}, ValueError, "seed"),
        ({"ignore_info_keys": None}, TypeError, "ignore_info_keys"),
        ({"ignore_info_keys": "episode"}, TypeError, "ignore_info_keys"),
        ({"ignore_info_keys": (1,)}, TypeError, "non-empty strings"),
        ({"strict": "yes"}, TypeError, "strict"),
        ({"skip": 3}, TypeError, "skip"),
        ({"skip": "api"}, TypeError, r"use \('api',\)"),
        ({"skip": ("nope",)}, ValueError, "unknown check 'nope'.*determinism.seed_int"),
        ({"reset_options": {"reset_mask": None}}, ValueError, "reset_mask"),
        ({"reset_options": [1]}, TypeError, "reset_options"),
        ({"reference": 3}, TypeError, "`reference` must be a callable"),
    ],
)
def test_bad_arguments_raise_before_any_env_is_built(kwargs, error, match):
    built = []
    with pytest.raises(error, match=match):
        check_vector_env(lambda: built.append(1), **kwargs)
    assert built == []


def test_a_factory_must_return_a_vector_env():
    with pytest.raises(TypeError, match=r"must return a gymnasium\.vector\.VectorEnv"):
        check_vector_env(lambda: gym.make("CartPole-v1"))


def test_skipping_a_group_skips_each_of_its_checks():
    report = check_vector_env(lambda: SyncVectorEnv(cartpole_fns()), skip=("api",))
    api_checks = [name for name in CHECKS if name.startswith("api.")]
    assert all(report.skipped[name] == "skipped by request" for name in api_checks)
    assert report.warnings == []


def test_the_report_reads_serialises_and_raises():
    report = check_vector_env(
        lambda: ShuffledObservationsVectorEnv(cartpole_fns()), num_steps=STEPS
    )
    text = str(report)
    assert text.startswith("check_vector_env: FAILED")
    assert "FAIL determinism.seed_int (env 0, step 5, phase seed_int)" in text
    data = json.loads(report.to_json())
    assert data["ok"] is False
    assert data["failures"][0]["check"] == "determinism.seed_int"
    with pytest.raises(AssertionError) as raised:
        report.raise_if_failed()
    assert isinstance(raised.value, VectorEnvCheckError)
    assert raised.value.report is report
    with pytest.raises(VectorEnvCheckError):
        assert_vector_env_conforms(
            lambda: ShuffledObservationsVectorEnv(cartpole_fns())
        )
    assert isinstance(
        assert_vector_env_conforms(lambda: SyncVectorEnv(cartpole_fns())), CheckReport
    )


class SlowCloseVectorEnv(SyncVectorEnv):
    def close(self, **kwargs: Any) -> None:
        time.sleep(30)
        super().close(**kwargs)


# two instances, each given up on once after 0.5 s: waiting for their two closes
# (2 x 30 s) exceeds the timeout
@pytest.mark.timeout(45)
def test_a_close_that_hangs_is_reported_not_waited_on(monkeypatch):
    monkeypatch.setattr("vecpool.check.runner.CLOSE_TIMEOUT", 0.5)
    report = check_vector_env(lambda: SlowCloseVectorEnv(cartpole_fns(2)), num_steps=12)
    failure = report.failure("api.close")
    assert failure is not None, report
    assert "close() did not return within 0 s" in failure.message


def test_gymnasium_async_after_a_short_step_is_closed_without_leftovers(monkeypatch):
    monkeypatch.setattr("vecpool.check.runner.CLOSE_TIMEOUT", 1.0)
    report = check_vector_env(lambda: gym.vector.AsyncVectorEnv(cartpole_fns(2)))
    assert "api.usable_after_error" in report.failed
    no_children_left()


class ListInfosVectorEnv(SyncVectorEnv):
    def step(self, actions: Any) -> Any:
        *result, _ = super().step(actions)
        return (*result, [{} for _ in range(self.num_envs)])  # SB3-style infos


def test_infos_that_are_not_a_dict_are_reported_not_raised():
    report = check_vector_env(
        lambda: ListInfosVectorEnv(cartpole_fns()), num_steps=STEPS
    )
    assert report.failed[0] == "infos.masks", report
    failure = report.failures[0]
    assert "infos is not a dict" in failure.message


def test_a_factory_that_fails_on_its_second_call_keeps_the_report():
    calls = []

    def make() -> Any:
        calls.append(1)
        if len(calls) > 1:
            message = "second build fails"
            raise RuntimeError(message)
        return SyncVectorEnv(cartpole_fns())

    report = check_vector_env(make, num_steps=STEPS)
    assert not report.ok
    assert "RuntimeError: second build fails" in report.errors[0]
    assert "determinism.reseed" in report.passed  # the trajectory's findings stay
    env = SyncVectorEnv(cartpole_fns())
    same = check_vector_env(lambda: env, num_steps=STEPS)
    assert (
        "ValueError: `make_vector_env` returned the same instance twice"
        in (same.errors[0])
    )


class SeedListMutatingVectorEnv(SyncVectorEnv):
    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        if isinstance(seed, list):
            seed[:] = [7 if item is None else item for item in seed]  # in place
        return super().reset(seed=seed, options=options)


def test_a_seed_list_changed_in_place_cannot_reach_the_reference():
    report = check_vector_env(
        lambda: SeedListMutatingVectorEnv(cartpole_fns()), num_steps=STEPS
    )
    failure = report.failure("determinism.seed_list")
    assert failure is not None, report
    assert failure.env_index == 1  # the None entry


class NeedsOptionEnv(TextEnv):
    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        # every reset the check makes passes options (autoresets pass none)
        assert options is None or options.get("difficulty") == 2, options
        return super().reset(seed=seed, options=options)


# ---- building blocks --------------------------------------------------------------
def test_first_difference_names_the_env_row_through_dicts_and_object_arrays():
    expected = {
        "a": np.zeros((3, 2)),
        "b": np.array([None, np.ones(2), None], dtype=object),
    }
    got = {"a": np.zeros((3, 2)), "b": np.array([None, np.ones(2), None], dtype=object)}
    assert first_difference(expected, got, "obs", 3) is None
    got["b"][1] = np.array([1.0, 2.0])
    found = first_difference(expected, got, "obs", 3)
    assert found is not None
    assert (found.where, found.env_index) == ("obs['b'][1][1]", 1)
    nan = np.array([np.nan, 1.0])
    assert first_difference(nan, nan.copy(), "x", 2) is None
    found = first_difference(nan, nan.astype(np.float32), "x", 2)
    assert found is not None
    assert found.kind == "dtype"


def test_the_rules_flag_masks_and_autoreset_steps():
    good = {"x": np.zeros(2), "_x": np.array([True, False])}
    assert info_mask_breach(good, 2) is None
    breach = info_mask_breach({"x": np.zeros(2)}, 2)
    assert breach is not None
    assert "no mask" in breach.message
    previous = np.array([False, True])
    breach = autoreset_breach(
        AutoresetMode.NEXT_STEP,
        previous,
        np.array([1.0, 0.5]),
        np.zeros(2, dtype=bool),
        np.zeros(2, dtype=bool),
        {},
    )
    assert breach is not None
    assert breach.env_index == 1


# ---- pytest fixture and command line ----------------------------------------------
def test_the_pytest_fixture_passes_and_fails_tests(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["vecpool.testing"]\n')
    (tmp_path / "test_envs.py").write_text(
        textwrap.dedent(
            """
            import functools
            import gymnasium as gym
            from gymnasium.vector import SyncVectorEnv
            from vecpool.testing import MutatingOptionsVectorEnv

            FNS = [functools.partial(gym.make, "CartPole-v1") for _ in range(2)]

            def test_sync(vector_env_checker):
                report = vector_env_checker(lambda: SyncVectorEnv(FNS), num_steps=60)
                assert report.ok

            def test_broken(vector_env_checker):
                vector_env_checker(lambda: MutatingOptionsVectorEnv(FNS), num_steps=60)
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    assert "FAIL api.options" in result.stdout


def test_cli_lists_checks_and_checks_env_ids(capsys):
    assert main(["check", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in CHECKS)
    assert main(["check", "CartPole-v1", "--num-envs", "4", "--steps", "60"]) == 0
    assert "check_vector_env: ok" in capsys.readouterr().out
    code = main(
        [
            "check",
            "CartPole-v1",
            "--backend",
            "sync",
            "--steps",
            "60",
            "--strict",
            "--json",
        ]
    )
    assert code == 1
    data = json.loads(capsys.readouterr().out)
    assert [failure["check"] for failure in data["failures"]] == ["api.use_after_close"]


def test_cli_checks_a_factory_and_rejects_bad_targets(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_vector_envs.py").write_text(
        textwrap.dedent(
            """
            import functools
            import gymnasium as gym
            from vecpool.testing import ShuffledObservationsVectorEnv

            def broken():
                fns = [functools.partial(gym.make, "CartPole-v1") for _ in range(2)]
                return ShuffledObservationsVectorEnv(fns)

            def single():
                return gym.make("CartPole-v1")

            def raises():
                raise RuntimeError("factory broke")
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_vector_envs", raising=False)
    assert main(["check", "my_vector_envs:broken", "--steps", "30"]) == 1
    assert "FAIL determinism.seed_int" in capsys.readouterr().out
    assert main(["check", "NoSuchEnv-v0"]) == 2
    err = capsys.readouterr().err
    assert "'NoSuchEnv-v0' is not a registered env id" in err
    assert "--import package" in err  # the way out
    assert main(["check", "my_vector_envs:missing"]) == 2
    capsys.readouterr()
    assert main(["check", "my_vector_envs:single"]) == 2  # not a vector env
    assert "must return a gymnasium.vector.VectorEnv" in capsys.readouterr().err
    assert main(["check", "--skip", "nope"]) == 2
    # a factory that raises built no env to check: an error (2), not a failed
    # check (1), with its traceback above one line that says so
    capsys.readouterr()
    assert main(["check", "my_vector_envs:raises", "--steps", "30"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.rstrip().endswith(
        "vecpool check: error: the factory raised RuntimeError: factory broke "
        "(no vector env to check)"
    )


# long episodes: once "not reached: raise num_steps" at the default num_steps
_LONG_ID = "VecpoolLongEpisodes-v0"
if _LONG_ID not in gym.registry:
    gym.register(
        _LONG_ID,
        entry_point="vecpool.testing:CountingEnv",
        max_episode_steps=400,
        kwargs={"max_steps": 10**6, "terminate_prob": 0.0},
    )


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
@pytest.mark.parametrize("spec", [True, False], ids=["spec", "no-spec"])
def test_long_episodes_reach_the_autoreset_checks_by_default(mode, spec):
    fns: list[Any]
    if spec:  # the cap comes from spec.max_episode_steps
        fns = [functools.partial(gym.make, _LONG_ID)] * 2
    else:  # from num_steps
        fns = [functools.partial(CountingEnv, max_steps=400, terminate_prob=0.0)] * 2
    report = check_vector_env(
        lambda: vecpool.AsyncVectorEnv(fns, autoreset_mode=mode, num_workers=1)
    )
    assert report.ok, report
    must_pass = {"autoreset.after_manual_reset", f"autoreset.{mode.name.lower()}"}
    if mode is AutoresetMode.DISABLED:
        must_pass.add("autoreset.reset_mask")
    assert must_pass <= set(report.passed), report.skipped


def _registering_package(tmp_path, monkeypatch, name):
    """A package in the current directory that registers an env when imported."""
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            import gymnasium as gym
            if "{name.title()}Pole-v0" not in gym.registry:
                gym.register(
                    "{name.title()}Pole-v0",
                    entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                    max_episode_steps=40,
                )
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, name, raising=False)
    return f"{name.title()}Pole-v0"


def test_check_takes_an_env_id_as_gym_make_does(tmp_path, monkeypatch, capsys):
    env_id = _registering_package(tmp_path, monkeypatch, "regcheck")
    # a plain id of a package nobody imported: not found, and the message says how
    assert main(["check", env_id, "--steps", "30"]) == 2
    assert "--import package" in capsys.readouterr().err
    # module:EnvId imports the module first, as gym.make does
    assert (
        main(["check", f"regcheck:{env_id}", "--steps", "30", "--num-envs", "2"]) == 0
    )
    capsys.readouterr()
    monkeypatch.delitem(sys.modules, "regcheck")
    assert (
        main(
            [
                "check",
                env_id,
                "--import",
                "regcheck",
                "--steps",
                "30",
                "--num-envs",
                "2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["check", "--import", "no_such_pkg_here", "CartPole-v1"]) == 2
    assert "--import no_such_pkg_here: cannot import" in capsys.readouterr().err
