"""The replay pool records no transition that did not happen (issue 11 items 8, 12)."""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecpool
from vecpool.testing import ActionEchoEnv
from vecpool.testing.envs import CountingEnv
from vecpool.testing.faults import RaisingEnv


def test_no_transition_spans_a_failed_step(make_async):
    # env 1 raises in its 3rd step; env 0 took that step in the worker anyway
    fns = [ActionEchoEnv, functools.partial(ActionEchoEnv, raise_at=3)]
    envs = vecpool.ReplayPoolWrapper(make_async(fns, num_workers=1), pool_size=100)
    envs.reset(seed=0)
    for step in range(1, 7):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Gymnasium's worker-error log lines
                envs.step(np.full(2, float(step)))
        except ValueError:
            assert step == 3
    pool = envs.get_pool()
    # obs = [action, step in episode]: every kept row is exactly one step
    np.testing.assert_array_equal(pool.next_obs[:, 1] - pool.obs[:, 1], 1.0)
    np.testing.assert_array_equal(pool.next_obs[:, 0], pool.action)
    # steps 1-2 (from reset) and 5-6: the step after the failure has no
    # trustworthy predecessor, so 4 transitions per env
    assert envs.pool.lengths.tolist() == [4, 4]


def test_abort_episodes_neither_counts_nor_merges():
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(2), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)

    def add(done):
        pool.add(
            obs,
            np.zeros(2, np.int64),
            obs,
            np.ones(2),
            np.array(done),
            np.zeros(2, bool),
        )

    add([False, False])
    add([False, False])
    pool.abort_episodes([0])  # env 0's episode was cut: 2 steps lost to the stats
    add([True, True])
    stats = pool.episode_stats
    assert stats.count == 2
    # env 0's episode restarted at the abort: 1 step; env 1's: 3 steps
    assert stats.mean_length == 2.0
    assert len(pool) == 6  # the transitions themselves stay


@pytest.mark.parametrize(
    ("env_ids", "match"),
    [
        (np.array([0.0, 1.0]), "1-D array of ints"),
        (np.array([[0, 1]]), "1-D array of ints"),
        (np.array([0, 5]), re.escape("must lie in [0, 2)")),
        # named as given, not wrapped to a negative int64
        (np.array([0, 2**63], np.uint64), re.escape(f"got [0, {2**63}]")),
    ],
)
def test_add_refuses_bad_env_ids(env_ids, match):
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(3), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match=match):
        pool.add(
            obs,
            np.zeros(2, np.int64),
            obs,
            np.ones(2),
            np.zeros(2, bool),
            np.zeros(2, bool),
            env_ids=env_ids,
        )
    assert len(pool) == 0


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (np.array([0.5, 1.0]), "must hold integers"),
        (np.array([0, 3]), "outside the action space"),
        (np.array([-1, 0]), "outside the action space"),
    ],
)
def test_add_refuses_actions_outside_a_discrete_space(action, match):
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(3), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match=match):
        pool.add(obs, action, obs, np.ones(2), np.zeros(2, bool), np.zeros(2, bool))
    assert len(pool) == 0


_F = np.zeros(2, bool)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("terminated", np.array(["False", "False"]), "`terminated` must hold bools"),
        ("truncated", np.array([0.5, 0.0]), "`truncated` must hold bools"),
        ("terminated", np.array([2, 0]), "`terminated` must hold bools"),
        ("reward", np.array(["a", "b"]), "`reward` must hold numbers"),
        ("obs", np.array([[300], [7]]), "`obs` holds values that its dtype uint8"),
        ("next_obs", np.array([[0.7], [2.0]]), "`next_obs` holds values that"),
        ("next_obs", np.array([[-1], [2]]), "`next_obs` holds values that"),
    ],
    ids=["flag-strings", "flag-half", "flag-two", "reward-strings", "obs-300",
         "obs-fraction", "obs-negative"],
)  # fmt: skip
@pytest.mark.parametrize("routed", [False, True])  # the hot path and the general one
def test_add_refuses_values_its_stored_dtypes_would_change(field, value, match, routed):
    # cast as numpy casts them, the string "False" was stored True, 300 as 44 in a
    # uint8 observation, 0.7 as 0; a string reward failed with numpy's message
    pool = vecpool.ReplayPool(
        spaces.Box(0, 255, (1,), np.uint8), spaces.Discrete(3), 2, 20
    )
    fields: dict[str, Any] = {
        "obs": np.zeros((2, 1), np.uint8), "action": np.array([0, 1]),
        "next_obs": np.ones((2, 1), np.uint8), "reward": np.ones(2),
        "terminated": _F, "truncated": _F,
    }  # fmt: skip
    fields[field] = value
    ids = {"env_ids": np.array([0, 1])} if routed else {}
    with pytest.raises(ValueError, match=re.escape(match)):
        pool.add(**fields, **ids)
    assert len(pool) == 0
    # what survives the cast is taken: ints that fit, 0 and 1 for flags
    fields = {**fields, field: _lossless(field)}
    pool.add(**fields, **ids)
    assert len(pool) == 2


def _lossless(field: str) -> Any:
    if field in ("terminated", "truncated"):
        return np.array([1, 0])
    if field == "reward":
        return np.array([1, 2], np.int32)
    return np.array([[255], [0]], np.int64)


def test_lossless_integer_actions_are_accepted():
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(3), num_envs=2, pool_size=20
    )
    obs = np.zeros((2, 1), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pool.add(
            obs,
            np.array([2, 0], np.int32),
            obs,
            np.ones(2),
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    assert pool.get_pool().action.tolist() == [2, 0]


@pytest.mark.parametrize("num_envs", [2, 100])  # the list check and the numpy one
@pytest.mark.parametrize(
    ("space", "good", "bad"),
    [
        (spaces.Discrete(3), [0, 2], [-1, 0]),
        (spaces.Discrete(3), [0, 2], [3, 0]),
        (spaces.Discrete(3, start=-1), [-1, 1], [-2, 0]),
        (spaces.Discrete(3, start=-1), [-1, 1], [2, 0]),
        (spaces.MultiDiscrete([2, 3]), [[1, 2], [0, 0]], [[0, 3], [0, 0]]),
        (spaces.MultiDiscrete([2, 3]), [[1, 2], [0, 0]], [[-1, 0], [0, 0]]),
        (spaces.MultiBinary(2), [[1, 0], [0, 1]], [[2, 0], [0, 0]]),
        (spaces.Box(0, 5, (2,), np.int64), [[5, 0], [0, 0]], [[6, 0], [0, 0]]),
    ],
)
@pytest.mark.parametrize("dtype", [np.int8, np.int64])
def test_add_checks_the_range_of_every_integer_space(num_envs, space, good, bad, dtype):
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), space, num_envs=num_envs, pool_size=4 * num_envs
    )
    obs = np.zeros((num_envs, 1), np.float32)
    flags = np.zeros(num_envs, bool)

    def batch(rows):  # the two given rows, then copies of the first
        return np.array(rows + [rows[0]] * (num_envs - 2), dtype)

    pool.add(obs, batch(good), obs, np.ones(num_envs), flags, flags)
    with pytest.raises(ValueError, match="outside the action space"):
        pool.add(obs, batch(bad), obs, np.ones(num_envs), flags, flags)
    assert len(pool) == num_envs


def _true_transitions(
    make_env: Any, seed: int, actions: list[int]
) -> list[tuple[Any, ...]]:
    """One env's real transitions under ``NEXT_STEP`` autoreset, stepped alone.

    ``(step, obs, action, next_obs, reward, terminated, truncated)``; the step after
    an episode end only resets the env (no transition), as Gymnasium's autoreset
    does.
    """
    env = make_env()
    obs, _ = env.reset(seed=seed)
    ended, rows = False, []
    for step, action in enumerate(actions, 1):
        if ended:
            obs, _ = env.reset()
            ended = False
            continue
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rows.append((step, obs, action, next_obs, reward, terminated, truncated))
        obs, ended = next_obs, terminated or truncated
    env.close()
    return rows


@pytest.mark.parametrize("ends_at", [3, 4, 5])  # before, in, after the failed step
def test_a_failed_step_then_a_masked_reset_records_only_real_transitions(
    ends_at, make_placed
):
    """Env 0 goes on through the step env 1 fails in (step 4); only env 1 is reset.

    Env 0's episode may end before, in or after that step, unseen by the wrapper
    when in it: its next step is then a reset step, never a transition. Every row
    the pool holds for env 0 is one of env 0's real transitions (stepped alone, the
    same seed and actions), and only two are missing: the failed step's, and the
    next step's (it starts from an observation no step returned to the wrapper:
    whether env 0 ended in the failed step is unknown). (Gymnasium's
    Sync is left out: a step that raises leaves its autoreset flags half-set, so
    its envs do not go on as they would alone.)
    """
    keep_going = functools.partial(CountingEnv, max_steps=ends_at, terminate_prob=0.0)
    fns = [keep_going, functools.partial(RaisingEnv, at=4, terminate_prob=0.0)]
    inner = make_placed(fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    envs = vecpool.ReplayPoolWrapper(inner, pool_size=100)
    envs.reset(seed=[7, 8])
    actions = [1, 2, 0, 1, 2, 2, 0, 1, 1, 2]
    for action in actions:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the worker's error log lines
                envs.step(np.array([action, 1]))
        except ValueError:
            envs.reset(options={"reset_mask": np.array([False, True])})
    truth = _true_transitions(keep_going, 7, actions)
    kept = _kept_steps(envs.pool, 0, truth)
    assert kept == [step for step, *_ in truth if step not in (4, 5)]


def _kept_steps(pool: vecpool.ReplayPool, env: int, truth: list[Any]) -> list[int]:
    """The step of each row ``pool`` holds for ``env``, as found in ``truth``."""
    held = pool.get_rows(env, 0, int(pool.lengths[env]))
    kept = []
    for row in range(len(held.reward)):
        matches = [
            step
            for step, obs, action, next_obs, reward, terminated, truncated in truth
            if np.array_equal(held.obs[row], obs)
            and held.action[row] == action
            and np.array_equal(held.next_obs[row], next_obs)
            and np.float32(held.reward[row]) == np.float32(reward)
            and (held.terminated[row], held.truncated[row]) == (terminated, truncated)
        ]
        assert matches, f"row {row} of env {env} is no transition of env {env}"
        kept.append(matches[0])
    return kept


def test_a_step_the_pool_refuses_then_a_masked_reset_records_only_real_transitions(
    make_placed,
):
    """Step 3 gives env 0 an action outside its space: the env takes it, the pool
    refuses the row. Env 1 ends in that step, unseen; only env 0 is reset."""
    ends = functools.partial(CountingEnv, max_steps=3, terminate_prob=0.0)
    fns = [functools.partial(CountingEnv, terminate_prob=0.0), ends]
    envs = vecpool.ReplayPoolWrapper(make_placed(fns), pool_size=100)
    envs.reset(seed=[7, 8])
    for step in range(1, 8):
        try:
            envs.step(np.array([7 if step == 3 else 1, 1]))
        except ValueError:
            assert step == 3
            envs.reset(options={"reset_mask": np.array([True, False])})
    truth = _true_transitions(ends, 8, [1] * 7)
    # step 3 was never recorded; step 4 starts from an observation no step
    # returned (env 1's terminal one: a reset step, no transition anyway)
    assert _kept_steps(envs.pool, 1, truth) == [1, 2, 5, 6, 7]


@pytest.mark.parametrize("saved", [False, True])  # saved and loaded while cut
@pytest.mark.parametrize("read_between", [False, True])  # run settles, step settles
def test_the_rest_of_a_cut_episode_is_not_counted_as_an_episode(
    read_between, saved, tmp_path
):
    """After ``abort_episodes(..., resumes=True)`` the env goes on with the episode
    whose start was lost: its end is no episode end; the next episode counts."""
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(2), num_envs=2, pool_size=40
    )
    obs = np.zeros((2, 1), np.float32)

    def add(done: list[bool]) -> None:
        pool.add(obs, np.zeros(2, np.int64), obs, np.ones(2), np.array(done),
                 np.zeros(2, bool))  # fmt: skip
        if read_between:
            pool.sample(1)

    add([False, False])
    pool.abort_episodes([0], resumes=True)  # env 0 goes on, a step lost
    add([False, False])
    if saved:
        pool.save(tmp_path / "cut.npz")
        pool = vecpool.ReplayPool.load(tmp_path / "cut.npz")
    add([True, True])  # env 0: the rest of the cut episode; env 1: 3 steps
    add([False, False])
    add([True, False])  # env 0: a whole episode of 2 steps
    stats = pool.episode_stats
    assert (stats.count, stats.mean_length) == (2, 2.5)
    assert pool._log.recent_entries()[:, 1].tolist() == [3.0, 2.0]
    assert len(pool) == 10  # the transitions themselves stay


def test_a_failed_step_does_not_count_the_rest_of_an_episode_as_one(make_placed):
    """Env 1 fails in step 3; env 0 goes on to its end at step 6 (truncated)."""
    fns = [
        functools.partial(CountingEnv, max_steps=6, terminate_prob=0.0),
        functools.partial(RaisingEnv, at=3, terminate_prob=0.0, max_steps=50),
    ]
    envs = vecpool.ReplayPoolWrapper(make_placed(fns), pool_size=100)
    envs.reset(seed=0)
    for step in range(1, 12):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the env error's log line
                envs.step(np.array([1, 1]))
        except ValueError:
            assert step == 3
    # env 0's first episode lost step 3 (and step 4 is not recorded): not counted;
    # its second one (steps 8-13) has not ended; env 1's has not either
    assert envs.pool.episode_stats.count == 0


class _Walk(gym.vector.VectorEnv[Any, Any, Any]):
    """Env ``i`` is truncated every ``lengths[i]`` steps; obs = episode * 100 + step.

    ``fail`` makes the next step raise after the envs moved on, ``fail_reset`` the
    next reset raise after resetting; in ``NEXT_STEP`` or ``SAME_STEP`` autoreset.
    """

    def __init__(
        self,
        lengths: list[int],
        mode: gym.vector.AutoresetMode = gym.vector.AutoresetMode.NEXT_STEP,
    ) -> None:
        self.num_envs, self.lengths, self.mode = len(lengths), np.array(lengths), mode
        self.metadata = {"autoreset_mode": mode}
        self.single_observation_space = spaces.Box(-1e9, 1e9, (1,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(
            self.single_action_space, self.num_envs
        )
        self.t = np.zeros(self.num_envs, np.int64)
        self.episode = np.zeros(self.num_envs, np.int64)
        self.pending = np.zeros(self.num_envs, np.bool_)
        self.fail = self.fail_reset = False

    def _obs(self) -> Any:
        return (self.episode * 100 + self.t).astype(np.float32)[:, None]

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        mask = np.ones(self.num_envs, np.bool_)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
        self.episode[mask] += 1
        self.t[mask] = 0
        self.pending[mask] = False
        if self.fail_reset:
            self.fail_reset = False
            msg = "the reset failed after resetting"
            raise RuntimeError(msg)
        return self._obs(), {}

    def step(self, actions: Any) -> Any:
        reward = np.ones(self.num_envs)
        truncated = np.zeros(self.num_envs, np.bool_)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            if self.pending[i]:
                self.episode[i] += 1
                self.t[i], self.pending[i], reward[i] = 0, False, 0.0
                continue
            self.t[i] += 1
            truncated[i] = self.t[i] >= self.lengths[i]
        obs = self._obs()
        if self.mode is gym.vector.AutoresetMode.SAME_STEP and truncated.any():
            infos = {"final_obs": obs.copy(), "_final_obs": truncated.copy()}
            self.episode[truncated] += 1
            self.t[truncated] = 0
            obs = self._obs()
        elif self.mode is gym.vector.AutoresetMode.NEXT_STEP:
            self.pending = truncated.copy()
        if self.fail:
            self.fail = False
            msg = "the step failed after the envs moved on"
            raise RuntimeError(msg)
        return obs, reward, np.zeros(self.num_envs, np.bool_), truncated, infos


def _env0_rows(envs: vecpool.ReplayPoolWrapper) -> list[tuple[int, int]]:
    rows = envs.pool.get_rows(0, 0, int(envs.pool.lengths[0]))
    return [
        (int(o[0]), int(n[0])) for o, n in zip(rows.obs, rows.next_obs, strict=True)
    ]


@pytest.mark.parametrize(
    ("mode", "steps"),
    [(gym.vector.AutoresetMode.NEXT_STEP, 8), (gym.vector.AutoresetMode.SAME_STEP, 7)],
)
def test_an_episode_that_ends_in_the_step_after_a_failure_leaves_the_next_counted(
    mode, steps
):
    """Env 0 ends (unrecorded) in the step after the failed one: its cut episode
    is over there, and its next episode, held whole, counts."""
    inner = _Walk([3, 100], mode)
    envs = vecpool.ReplayPoolWrapper(inner, pool_size=200)
    envs.reset()
    for step in range(1, steps + 1):
        inner.fail = step == 2
        with contextlib.suppress(RuntimeError):
            envs.step(np.zeros(2, np.int64))
    assert {(200, 201), (201, 202), (202, 203)} <= set(_env0_rows(envs))
    assert envs.pool.episode_stats.count == 1


@pytest.mark.parametrize(
    ("mode", "steps", "rows", "count"),
    [
        # step 3 is env 0's reset step: its next episode (steps 4-5) is whole
        (
            gym.vector.AutoresetMode.NEXT_STEP,
            5,
            [(100, 101), (200, 201), (201, 202)],
            1,
        ),
        # env 0's next episode began in step 2, unseen: its step 3 is lost
        (gym.vector.AutoresetMode.SAME_STEP, 4, [(100, 101), (201, 202)], 0),
    ],
)
def test_an_episode_that_ends_in_a_refused_step(mode, steps, rows, count):
    """Env 0 ends in step 2, whose rows the pool refuses (env 1's action): its
    next episode counts only where the wrapper saw it whole."""
    envs = vecpool.ReplayPoolWrapper(_Walk([2, 100], mode), pool_size=200)
    envs.reset()
    for step in range(1, steps + 1):
        with contextlib.suppress(ValueError):
            envs.step(np.array([0, 7 if step == 2 else 0]))
    assert _env0_rows(envs) == rows
    assert envs.pool.episode_stats.count == count


def test_a_reset_that_raises_links_no_observation_across_it():
    """A masked reset of env 0 raises after resetting it: the next step of env 0
    starts from an observation the wrapper never saw."""
    inner = _Walk([100, 100])
    envs = vecpool.ReplayPoolWrapper(inner, pool_size=200)
    envs.reset()
    envs.step(np.zeros(2, np.int64))
    envs.step(np.zeros(2, np.int64))
    inner.fail_reset = True
    with pytest.raises(RuntimeError):
        envs.reset(options={"reset_mask": np.array([True, False])})
    envs.step(np.zeros(2, np.int64))
    envs.step(np.zeros(2, np.int64))
    assert _env0_rows(envs) == [(100, 101), (101, 102), (201, 202)]
    assert envs.pool.lengths.tolist() == [3, 4]  # env 1 was not reset: known


def test_loading_drops_a_masked_add_not_yet_settled():
    def make() -> vecpool.ReplayPool:
        return vecpool.ReplayPool(
            spaces.Box(-1, 1, (1,)), spaces.Discrete(2), num_envs=2, pool_size=20
        )

    source, target = make(), make()
    obs, action = np.zeros((2, 1), np.float32), np.zeros(2, np.int64)
    flags = np.zeros(2, np.bool_)
    source.add(obs, action, obs, np.ones(2), flags, flags)
    target.add(
        obs, action, obs, np.ones(2), flags, flags, valid=np.array([True, False])
    )
    target.load_state_dict({k: np.copy(v) for k, v in source.state_dict().items()})
    target.add(obs, action, obs, np.ones(2), flags, flags)
    assert target.lengths.tolist() == [2, 2]


def test_a_reset_refused_for_its_mask_raises_the_env_s_own_error(make_placed):
    """The wrapper's bookkeeping after a failed reset never hides its error."""
    envs = vecpool.ReplayPoolWrapper(make_placed([ActionEchoEnv] * 2), pool_size=20)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.array([True, False, True])})
    envs.step(np.zeros(2))
    envs.step(np.zeros(2))
    assert envs.pool.lengths.tolist() == [1, 1]  # forgotten: one step not linked


@pytest.mark.parametrize("read_between", [False, True])
def test_many_cut_episodes_ending_together_are_none_counted(read_between):
    """The cut mark is found from the sum of the ended lengths: many at once too."""
    num_envs = 64
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,)), spaces.Discrete(2), num_envs=num_envs, pool_size=640
    )
    obs = np.zeros((num_envs, 1), np.float32)
    flags = np.zeros(num_envs, np.bool_)
    pool.abort_episodes(np.arange(num_envs), resumes=True)
    for done in (False, True, False, True):
        pool.add(obs, np.zeros(num_envs, np.int64), obs, np.ones(num_envs),
                 np.full(num_envs, done), flags)  # fmt: skip
        if read_between:
            pool.sample(1)
    stats = pool.episode_stats  # the first ends close cut episodes; the next count
    assert (stats.count, stats.mean_length) == (num_envs, 2.0)


@pytest.mark.parametrize(
    ("space", "given"),
    [
        (spaces.Box(-1, 1, (1,), np.float32), np.array([[0.25], [-1.0]], np.float64)),
        (spaces.Box(0, 255, (1,), np.uint8), np.array([[True], [False]])),
        (spaces.Box(0, 255, (1,), np.uint8), np.array([[255], [0]], np.int64)),
        (spaces.MultiBinary(1), np.array([[1], [0]], np.int64)),
    ],
    ids=["float64-into-float32", "bool-into-uint8", "int64-into-uint8", "multibinary"],
)
def test_add_takes_what_its_stored_dtypes_keep(space, given):
    pool = vecpool.ReplayPool(space, spaces.Discrete(3), 2, 20)
    pool.add(given, np.array([0, 1]), given, np.ones(2, np.float32), _F, _F)
    stored = pool.get_pool().obs
    np.testing.assert_array_equal(stored, given.astype(stored.dtype))
    np.testing.assert_array_equal(stored.astype(given.dtype), given)


def test_float_observations_of_another_width_keep_the_hot_path(monkeypatch):
    # the cast checks must not send a float64 batch into a float32 pool, the
    # common user loop, down the checked path (it cost 2-4x per add)
    pool = vecpool.ReplayPool(
        spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(3), 2, 20
    )

    def checked(*args: Any) -> None:
        msg = "the checked path"
        raise AssertionError(msg)

    monkeypatch.setattr(pool, "_add_checked", checked)
    for dtype in (np.float32, np.float64):
        obs = np.zeros((2, 1), dtype)
        pool.add(obs, np.array([0, 1]), obs, np.ones(2), _F, _F)
    assert len(pool) == 4
