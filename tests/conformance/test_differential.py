"""Differential tests: vecpool.AsyncVectorEnv must match gymnasium's SyncVectorEnv.

Same env fns, seeds and actions -> bitwise-identical observations, rewards, flags and
infos, in every autoreset mode, with and without shared memory and copies, in every
placement (the ``placement`` fixture of tests/conftest.py) and for any grouping of
envs into worker processes.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
import warnings
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.vector import NormalizeObservation, RecordEpisodeStatistics

from vecpool.testing import (
    ACTION_KINDS,
    OBS_KINDS,
    CountingEnv,
    RaisingEnv,
    assert_same_data,
    assert_same_rollout,
    make_env_fns,
)

MODES = list(AutoresetMode)
# The placement decides where envs run; the sizes give it an even and an uneven split.
NUM_ENVS = [3, 4, 5]
# (num_envs, num_workers) for the worker-count test; None means the default grouping.
GROUPINGS: list[tuple[int, int | None]] = [
    (4, 1),
    (4, 4),
    (5, 2),
    (3, None),
]

# A hung worker must fail fast, not eat the global 120 s timeout; every test here
# runs under `nox -s forkserver` too (tests/conftest.py, start_methods)
pytestmark = [pytest.mark.timeout(30), pytest.mark.start_methods]


class Case(NamedTuple):
    mode: AutoresetMode
    shared_memory: bool
    obs_kind: str
    copy: bool
    num_envs: int
    action_kind: str

    @property
    def id(self) -> str:
        return (
            f"{self.mode.value}-shm{int(self.shared_memory)}-{self.obs_kind}-"
            f"copy{int(self.copy)}-{self.num_envs}envs-act_{self.action_kind}"
        )


def _pairwise_cases() -> list[Case]:
    """Every (mode, shared_memory, obs_kind, copy) combination, plus all pairs.

    The four axes most likely to interact (autoreset logic x buffer path x space
    layout x copying) are taken in full; env count and action kind are chosen
    greedily so that every pair of values of any two axes appears in some case.
    """
    axes: list[list[Any]] = [
        MODES,
        [True, False],
        list(OBS_KINDS),
        [True, False],
        NUM_ENVS,
        list(ACTION_KINDS),
    ]
    uncovered = {
        (i, a, j, b)
        for i, j in itertools.combinations(range(len(axes)), 2)
        for a in range(len(axes[i]))
        for b in range(len(axes[j]))
    }

    def pairs(indices: tuple[int, ...]) -> set[tuple[int, int, int, int]]:
        return {
            (i, indices[i], j, indices[j])
            for i, j in itertools.combinations(range(len(indices)), 2)
        }

    chosen: list[tuple[int, ...]] = []
    tails = list(itertools.product(*(range(len(axis)) for axis in axes[4:])))
    for head in itertools.product(*(range(len(axis)) for axis in axes[:4])):
        best = max(tails, key=lambda tail: len(pairs(head + tail) & uncovered))
        chosen.append(head + best)
        uncovered -= pairs(head + best)
    everything = list(itertools.product(*(range(len(axis)) for axis in axes)))
    while uncovered:
        best_full = max(everything, key=lambda full: len(pairs(full) & uncovered))
        chosen.append(best_full)
        uncovered -= pairs(best_full)
    return [
        Case(*(axis[index] for axis, index in zip(axes, indices, strict=True)))
        for indices in chosen
    ]


CASES = _pairwise_cases()


def _draw_actions(
    single_space: gym.Space[Any], num_envs: int, steps: int, seed: int
) -> list[Any]:
    space = batch_space(single_space, num_envs)
    space.seed(seed)
    return [space.sample() for _ in range(steps)]


def _leaves(obs: Any) -> list[np.ndarray]:
    if isinstance(obs, dict):
        return [leaf for value in obs.values() for leaf in _leaves(value)]
    if isinstance(obs, tuple):
        return [leaf for value in obs for leaf in _leaves(value)]
    return [obs]


def test_cases_cover_every_value_of_every_axis() -> None:
    for field in Case._fields:
        values = {repr(getattr(case, field)) for case in CASES}
        assert len(values) >= 2, field
    assert {case.mode for case in CASES} == set(MODES)
    assert {case.obs_kind for case in CASES} == set(OBS_KINDS)
    assert {case.num_envs for case in CASES} == set(NUM_ENVS)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_rollout_matches_sync(case: Case, make_placed, make_sync) -> None:
    num_envs = case.num_envs
    env_fns = make_env_fns(
        num_envs,
        obs_kind=case.obs_kind,
        action_kind=case.action_kind,
        max_steps=12,
        terminate_prob=0.08,
        info_every=3,
    )
    reference = make_sync(env_fns, copy=case.copy, autoreset_mode=case.mode)
    candidate = make_placed(
        env_fns,
        shared_memory=case.shared_memory,
        copy=case.copy,
        autoreset_mode=case.mode,
    )
    assert candidate.num_envs == num_envs
    assert candidate.single_observation_space == reference.single_observation_space
    assert candidate.observation_space == reference.observation_space
    assert candidate.single_action_space == reference.single_action_space
    assert candidate.action_space == reference.action_space

    actions = _draw_actions(reference.single_action_space, num_envs, steps=120, seed=7)
    ended = assert_same_rollout(
        reference, candidate, actions, seed=123, reset_seeds=[None, 1000, None]
    )
    # The rollout must exercise episode ends, or the autoreset paths went untested.
    assert ended >= num_envs
    assert_same_data(
        reference.get_attr("steps_taken"), candidate.get_attr("steps_taken"), "steps"
    )
    assert_same_data(
        reference.get_attr("resets_taken"), candidate.get_attr("resets_taken"), "resets"
    )


# Not over placements: the behaviour is the grouping of envs into worker processes
# (one worker for all, one env per worker, an uneven split, the default count).
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
@pytest.mark.parametrize(
    "grouping", GROUPINGS, ids=[f"{n}envs{w}w" for n, w in GROUPINGS]
)
def test_any_grouping_matches_sync(grouping, mode, make_async, make_sync) -> None:
    num_envs, num_workers = grouping
    env_fns = make_env_fns(
        num_envs, obs_kind="dict", max_steps=9, terminate_prob=0.08, info_every=3
    )
    reference = make_sync(env_fns, autoreset_mode=mode)
    kwargs = {} if num_workers is None else {"num_workers": num_workers}
    candidate = make_async(env_fns, autoreset_mode=mode, **kwargs)
    actions = _draw_actions(reference.single_action_space, num_envs, steps=60, seed=7)
    assert assert_same_rollout(reference, candidate, actions, seed=123) >= num_envs


@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_partial_reset_mask_matches_sync(mode, shared_memory, make_placed, make_sync):
    """reset(options={"reset_mask": m}) with random masks, also mid-episode."""
    num_envs = 5
    env_fns = make_env_fns(num_envs, obs_kind="dict", max_steps=6, terminate_prob=0.1)
    reference = make_sync(env_fns, autoreset_mode=mode)
    candidate = make_placed(env_fns, shared_memory=shared_memory, autoreset_mode=mode)
    actions = _draw_actions(reference.single_action_space, num_envs, steps=60, seed=3)
    rng = np.random.default_rng(5)
    assert_same_data(reference.reset(seed=9), candidate.reset(seed=9), "reset")
    for step_index, action in enumerate(actions):
        expected = reference.step(action)
        actual = candidate.step(action)
        assert_same_data(expected, actual, f"step {step_index}")
        done = expected[2] | expected[3]
        mask = rng.random(num_envs) < 0.3
        if mode == AutoresetMode.DISABLED:
            mask |= done
        if not mask.any():
            continue
        seed = int(rng.integers(1000)) if step_index % 2 else None
        options = {"reset_mask": mask.copy(), "tag": step_index}
        expected_reset = reference.reset(seed=seed, options=dict(options))
        candidate_options = dict(options)
        actual_reset = candidate.reset(seed=seed, options=candidate_options)
        assert_same_data(expected_reset, actual_reset, f"masked reset {step_index}")
        assert_same_data(options, candidate_options, "options after reset")


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_user_reset_clears_pending_next_step_autoreset(
    shared_memory, make_placed, make_sync
):
    """After every env ends, a user reset() must not be followed by an autoreset."""
    num_envs = 3
    env_fns = make_env_fns(num_envs, max_steps=3, terminate_prob=0.0)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns, shared_memory=shared_memory)
    action = np.full(num_envs, 2)
    assert_same_data(reference.reset(seed=1), candidate.reset(seed=1), "reset")
    for step_index in range(3):
        expected = reference.step(action)
        assert_same_data(expected, candidate.step(action), f"step {step_index}")
    assert expected[3].all(), "every env should be truncated (autoreset pending)"

    assert_same_data(reference.reset(seed=2), candidate.reset(seed=2), "user reset")
    expected = reference.step(action)
    actual = candidate.step(action)
    assert_same_data(expected, actual, "first step after the user reset")
    # A real step happened, not an autoreset: 4 steps in total per env.
    assert candidate.get_attr("steps_taken") == (4,) * num_envs
    assert candidate.get_attr("episode_steps") == (1,) * num_envs


def test_reset_seeds_and_np_random_match_sync(make_placed, make_sync):
    num_envs = 4
    # No reset infos: env 1 (seed=None) would add a random one.
    env_fns = make_env_fns(num_envs, reset_info=False)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns)
    seeds = [11, None, 13, 2**31]
    expected = reference.reset(seed=seeds)
    actual = candidate.reset(seed=seeds)
    assert_same_data(expected[1], actual[1], "reset infos")
    # seed=None envs draw fresh entropy; compare only seeded envs' observations.
    for index in (0, 2, 3):
        assert_same_data(expected[0][index], actual[0][index], f"obs of env {index}")
    assert_same_data(reference.reset(seed=5), candidate.reset(seed=5), "reset(seed=5)")
    assert candidate.np_random_seed == reference.np_random_seed == (5, 6, 7, 8)
    expected_states = [rng.bit_generator.state for rng in reference.np_random]
    actual_states = [rng.bit_generator.state for rng in candidate.np_random]
    assert_same_data(expected_states, actual_states, "np_random states")


def test_reset_seed_list_length_error_matches_gymnasium(make_placed, make_sync):
    env_fns = make_env_fns(3)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns)
    with pytest.raises(ValueError, match="length must match") as expected:
        reference.reset(seed=[1, 2])
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        candidate.reset(seed=[1, 2])
    # Still usable afterwards.
    assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seed": np.int64(5)},  # an int, but not a Python int
        {"seed": 5.0},
        {"seed": (s for s in range(3))},  # a generator has no length
        {"options": "reset_mask"},  # not a dict, holding the key
    ],
    ids=["np-int", "float", "generator", "options-str"],
)
def test_odd_reset_arguments_raise_as_gymnasium(kwargs, make_placed, make_gym_async):
    env_fns = make_env_fns(3)
    reference = make_gym_async(env_fns)
    candidate = make_placed(env_fns)
    for env in (reference, candidate):
        env.reset(seed=0)
    with pytest.raises(Exception) as expected:  # noqa: PT011 - compared below
        reference.reset(**kwargs)
    with pytest.raises(type(expected.value), match=re.escape(str(expected.value))):
        candidate.reset(**kwargs)
    candidate.reset(seed=0)  # still usable


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_an_info_of_none_is_refused_as_sync_refuses_it(make_placed, make_sync):
    # Sync fails in `_add_info` (Gymnasium's Async hangs): the same type, and a
    # message that says what the env returned
    env_fns = [_NoneInfoEnv] * 2
    with pytest.raises(AttributeError) as expected:
        make_sync(env_fns).reset(seed=0)
    with pytest.raises(AttributeError, match=re.escape(str(expected.value))):
        make_placed(env_fns).reset(seed=0)
    candidate = make_placed([functools.partial(_NoneInfoEnv, on="step")] * 2)
    candidate.reset(seed=0)
    with pytest.raises(AttributeError, match="returned `info=None`"):
        candidate.step(np.zeros(2, np.int64))


@pytest.mark.parametrize(
    ("mask", "exc_type"),
    [
        ([True, False, True], TypeError),  # not an array
        (np.array([True, False]), ValueError),  # wrong shape
        (np.array([1, 0, 1]), TypeError),  # wrong dtype
        (np.zeros(3, dtype=bool), ValueError),  # no True value
    ],
    ids=["list", "shape", "dtype", "all-false"],
)
def test_reset_mask_validation_matches_gymnasium(
    mask, exc_type, make_placed, make_sync
):
    env_fns = make_env_fns(3)
    reference = make_sync(env_fns, autoreset_mode=AutoresetMode.DISABLED)
    candidate = make_placed(env_fns, autoreset_mode=AutoresetMode.DISABLED)
    assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
    with pytest.raises(exc_type) as expected:
        reference.reset(options={"reset_mask": mask})
    options = {"reset_mask": mask}
    with pytest.raises(exc_type, match=re.escape(str(expected.value))):
        candidate.reset(options=options)
    assert options == {"reset_mask": mask}, "options dict was mutated"
    action = np.ones(3, dtype=np.int64)
    assert_same_data(reference.step(action), candidate.step(action), "step after")


def test_call_get_attr_set_attr_match_sync(make_placed, make_sync):
    num_envs = 5
    env_fns = make_env_fns(num_envs, obs_kind="tuple", max_steps=8)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns)
    assert_same_data(reference.reset(seed=4), candidate.reset(seed=4), "reset")
    actions = _draw_actions(reference.single_action_space, num_envs, steps=10, seed=1)
    for action in actions:
        assert_same_data(reference.step(action), candidate.step(action), "step")

    assert_same_data(
        reference.call("scaled", 1.5, factor=3.0),
        candidate.call("scaled", 1.5, factor=3.0),
        "call(scaled)",
    )
    steps_taken = candidate.get_attr("steps_taken")
    assert candidate.call("scaled", 2.0) == tuple(4.0 + steps for steps in steps_taken)
    assert_same_data(
        reference.get_attr("episode_steps"),
        candidate.get_attr("episode_steps"),
        "get_attr(episode_steps)",
    )
    assert_same_data(
        reference.call("get_state"), candidate.call("get_state"), "call(get_state)"
    )

    scales = [0.5, 1.0, 2.0, -1.0, 3.0]
    reference.set_attr("reward_scale", scales)
    candidate.set_attr("reward_scale", scales)
    assert candidate.get_attr("reward_scale") == tuple(scales)
    for action in actions:
        assert_same_data(reference.step(action), candidate.step(action), "scaled step")
    reference.set_attr("reward_scale", 4.0)
    candidate.set_attr("reward_scale", 4.0)
    assert candidate.get_attr("reward_scale") == (4.0,) * num_envs

    # Copy env 0's full state (RNG included) into every env: all must then agree.
    state = reference.call("get_state")[0]
    assert_same_data(reference.reset(seed=0), candidate.reset(seed=0), "reset")
    reference.call("set_state", state)
    candidate.call("set_state", state)
    constant = np.full(num_envs, 2)
    expected = reference.step(constant)
    actual = candidate.step(constant)
    assert_same_data(expected, actual, "step after set_state")
    assert len({float(reward) for reward in actual[1]}) == 1


def test_set_attr_wrong_length_error_matches_gymnasium(make_placed, make_sync):
    env_fns = make_env_fns(3)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns)
    with pytest.raises(ValueError, match="Values must be") as expected:
        reference.set_attr("reward_scale", [1.0, 2.0])
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        candidate.set_attr("reward_scale", [1.0, 2.0])
    assert candidate.get_attr("reward_scale") == (1.0, 1.0, 1.0)


def test_render_and_metadata_match_sync(make_placed, make_sync):
    env_fns = make_env_fns(3, obs_kind="image", render_mode="rgb_array")
    reference = make_sync(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    candidate = make_placed(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    assert candidate.render_mode == reference.render_mode == "rgb_array"
    assert candidate.metadata == reference.metadata
    assert candidate.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    reference.reset(seed=0)
    candidate.reset(seed=0)
    action = np.array([0, 1, 2])
    reference.step(action)
    candidate.step(action)
    assert_same_data(reference.render(), candidate.render(), "render()")


def test_autoreset_mode_given_as_string(make_placed, make_sync):
    env_fns = make_env_fns(2, max_steps=4)
    reference = make_sync(env_fns, autoreset_mode="SameStep")
    candidate = make_placed(env_fns, autoreset_mode="SameStep")
    assert candidate.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    actions = _draw_actions(reference.single_action_space, 2, steps=12, seed=0)
    assert assert_same_rollout(reference, candidate, actions, seed=3) > 0


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_copy_false_returns_the_same_buffer(
    obs_kind, shared_memory, make_placed, make_sync
):
    env_fns = make_env_fns(3, obs_kind=obs_kind)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns, shared_memory=shared_memory, copy=False)
    assert_same_data(reference.reset(seed=0)[0], candidate.reset(seed=0)[0], "reset")
    first, _ = candidate.reset(seed=0)
    reference.reset(seed=0)
    action = np.array([0, 1, 2])
    second = candidate.step(action)[0]
    reference.step(action)
    third = candidate.step(action)[0]
    expected_third = reference.step(action)[0]
    for leaf_a, leaf_b, leaf_c in zip(
        _leaves(first), _leaves(second), _leaves(third), strict=True
    ):
        assert np.shares_memory(leaf_a, leaf_b)
        assert np.shares_memory(leaf_b, leaf_c)
    assert_same_data(expected_third, third, "obs")
    # The object handed out at reset now shows the latest results.
    assert_same_data(expected_third, first, "reset obs after two steps")


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
@pytest.mark.parametrize("obs_kind", ["box", "dict", "tuple"])
def test_copy_true_results_are_independent(
    obs_kind, shared_memory, make_placed, make_sync
):
    env_fns = make_env_fns(3, obs_kind=obs_kind, max_steps=4)
    reference = make_sync(env_fns)
    candidate = make_placed(env_fns, shared_memory=shared_memory, copy=True)
    expected_reset = reference.reset(seed=0)
    actual_reset = candidate.reset(seed=0)
    assert_same_data(expected_reset, actual_reset, "reset")
    handed_out = [(actual_reset[0], copy.deepcopy(actual_reset[0]))]
    action = np.array([0, 1, 2])
    for step_index in range(8):
        expected = reference.step(action)
        actual = candidate.step(action)
        assert_same_data(expected, actual, f"step {step_index}")
        for obs, snapshot in handed_out:
            # Results handed out earlier were not overwritten by this step ...
            assert_same_data(snapshot, obs, f"earlier obs after step {step_index}")
            for old_leaf, new_leaf in zip(
                _leaves(obs), _leaves(actual[0]), strict=True
            ):
                assert not np.shares_memory(old_leaf, new_leaf)
        if step_index % 2:
            # ... and scribbling over them must not leak into the next step.
            for leaf in _leaves(actual[0]):
                leaf[...] = 0
        else:
            handed_out.append((actual[0], copy.deepcopy(actual[0])))


class _NoneInfoEnv(gym.Env[Any, Any]):
    """Returns ``info=None`` from ``reset`` or from ``step`` (``on``)."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, on: str = "reset") -> None:
        self.on = on

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, Any]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), None if self.on == "reset" else {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, Any]:
        return np.zeros(1, np.float32), 0.0, False, False, None


class _LogEnv(gym.Env[Any, Any]):
    """Puts a list it keeps appending to in every info, and in its reset info."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.log = ["reset"]
        return np.zeros(1, np.float32), {"log": self.log}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.log.append(f"step {action}")
        return np.zeros(1, np.float32), 0.0, False, False, {"log": self.log}


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.name)
def test_infos_handed_out_are_copies_as_gymnasium_async_gives(
    mode, make_placed, make_gym_async
):
    # an info holding the env's own object: Gymnasium's AsyncVectorEnv hands out
    # a copy (pickled), so later steps never change infos already returned; envs
    # stepped in this process handed out the object itself
    reference = make_gym_async([_LogEnv] * 3, autoreset_mode=mode)
    candidate = make_placed([_LogEnv] * 3, autoreset_mode=mode)
    held = [(reference.reset(seed=0)[1], candidate.reset(seed=0)[1])]
    for step in range(4):
        actions = np.full(3, step % 2)
        held.append((reference.step(actions)[4], candidate.step(actions)[4]))
    for k, (expected, actual) in enumerate(held):
        assert_same_data(expected, actual, f"infos of call {k}, held")


def test_env_error_log_lines_match_gymnasium(make_placed, make_gym_async):
    env_fns = [
        functools.partial(CountingEnv),
        functools.partial(RaisingEnv, raise_on="step", at=2),
        functools.partial(CountingEnv),
    ]
    action = np.array([1, 1, 1])
    outcomes = []
    for factory in (make_gym_async, make_placed):
        env = factory(env_fns)
        env.reset(seed=0)
        env.step(action)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with pytest.raises(
                ValueError, match=re.escape(RaisingEnv.message_for("step", 2))
            ):
                env.step(action)
        outcomes.append([str(warning.message) for warning in record])
    expected, actual = outcomes
    assert len(actual) == len(expected) == 3
    assert actual[0] == expected[0]
    assert "Received the following error from Worker-1 - Shutting it down" in actual[0]
    assert actual[2] == expected[2]
    assert "Raising the last exception back to the main process." in actual[2]
    for text in (expected[1], actual[1]):
        assert "explode" in text
        assert "ValueError: RaisingEnv failed on purpose in step #2" in text


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_observation_mode_different_matches_sync(shared_memory, make_placed, make_sync):
    env_fns = [
        functools.partial(CountingEnv, obs_bound=bound, max_steps=6)
        for bound in (0.5, 1.0, 2.0, 4.0)
    ]
    reference = make_sync(env_fns, observation_mode="different")
    candidate = make_placed(
        env_fns,
        shared_memory=shared_memory,
        observation_mode="different",
    )
    assert candidate.observation_space == reference.observation_space
    actions = _draw_actions(reference.single_action_space, 4, steps=40, seed=2)
    assert assert_same_rollout(reference, candidate, actions, seed=8) > 0


def test_observation_mode_same_rejects_different_bounds(make_sync, make_placed):
    env_fns = [functools.partial(CountingEnv, obs_bound=bound) for bound in (1.0, 2.0)]
    with pytest.raises(RuntimeError, match="observation_mode='same'"):
        make_sync(env_fns)
    with pytest.raises(RuntimeError, match=re.escape("observation_mode='same'")):
        make_placed(env_fns)


@pytest.mark.parametrize("copy_obs", [True, False], ids=["copy", "nocopy"])
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_same_step_final_obs_is_not_overwritten_later(
    obs_kind, shared_memory, copy_obs, make_placed
):
    env = make_placed(
        make_env_fns(3, obs_kind=obs_kind, max_steps=3, terminate_prob=0.0),
        shared_memory=shared_memory,
        copy=copy_obs,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    env.reset(seed=0)
    action = np.array([0, 1, 2])
    env.step(action)
    env.step(action)
    obs, _, _, truncations, infos = env.step(action)
    assert truncations.all()
    final_obs = infos["final_obs"]
    snapshot = copy.deepcopy(final_obs)
    # final_obs is the last obs of the episode, not the reset obs now in `obs`.
    for index in range(3):
        assert not data_equivalence(final_obs[index], _env_obs(obs, index))
    for _ in range(4):
        env.step(action)
    assert_same_data(snapshot, final_obs, "final_obs after later steps")


def _env_obs(obs: Any, index: int) -> Any:
    if isinstance(obs, dict):
        return {key: _env_obs(value, index) for key, value in obs.items()}
    return obs[index]


def _wrapped_rollout(env: Any, wrap: Any, disabled: bool) -> list[Any]:
    if wrap is not None:
        env = wrap(env)
    out: list[Any] = [env.reset(seed=7)]
    rng = np.random.default_rng(0)
    for _ in range(15):
        result = env.step(rng.integers(0, 3, 3))
        out.append(copy.deepcopy(result))
        ended = result[2] | result[3]
        if disabled and ended.any():
            out.append(copy.deepcopy(env.reset(options={"reset_mask": ended})))
    for _, *rest in out:
        info = rest[-1]
        if "episode" in info:
            info["episode"].pop("t")  # wall-clock time
    return out


# found by the review of the in-process mode (7d2d268): each path once differed
@pytest.mark.parametrize(
    ("obs_kind", "wrap", "kwargs"),
    [
        ("box", None, {"shared_memory": False}),
        ("box", None, {"copy": False}),
        ("tuple", None, {"shared_memory": False}),
        ("image", None, {"copy": False}),
        ("dict", None, {"autoreset_mode": AutoresetMode.SAME_STEP}),
        (
            "dict",
            None,
            {"autoreset_mode": AutoresetMode.DISABLED, "shared_memory": False},
        ),
        ("box", None, {"observation_mode": "different"}),
        ("box", RecordEpisodeStatistics, {}),
        ("box", NormalizeObservation, {}),
    ],
    ids=[
        "no-shm",
        "no-copy",
        "tuple-no-shm",
        "image-no-copy",
        "same-step",
        "disabled-mask",
        "obs-different",
        "record-stats",
        "normalize",
    ],
)
def test_wrapped_and_masked_rollouts_match_sync(
    obs_kind, wrap, kwargs, make_placed, make_sync
):
    fns = make_env_fns(
        3, obs_kind=obs_kind, max_steps=4, terminate_prob=0.2, info_every=2
    )
    disabled = kwargs.get("autoreset_mode") == AutoresetMode.DISABLED
    sync_kwargs = {
        key: value for key, value in kwargs.items() if key != "shared_memory"
    }
    expected = _wrapped_rollout(make_sync(fns, **sync_kwargs), wrap, disabled)
    actual = _wrapped_rollout(make_placed(fns, **kwargs), wrap, disabled)
    assert_same_data(expected, actual, "rollout")
