"""ReplayPoolWrapper records the real transitions of any VectorEnv (DESIGN.md §5).

Each test drives the wrapper with pre-drawn actions and, in lockstep, a separate
``gymnasium.vector.SyncVectorEnv`` built from the same env fns and seeds. The
reference transitions are collected from that env with plain lists per env,
following each autoreset mode's rules, then windowed with a list model of §5, and
compared exactly with ``wrapper.get_pool()``. Every reset/step result of the
wrapper is compared with the reference env's too (it must pass them through).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import (
    batch_space,
    concatenate,
    create_empty_array,
    iterate,
)
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import vecpool
from vecpool.testing import (
    CountingEnv,
    MissionEnv,
    assert_same_data,
    make_env_fns,
)

pytestmark = pytest.mark.timeout(60)

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
NUM_ENVS = 3
STEPS = 60
SEED = 17

# name -> (pool_size, window_size, clearing_freq, clearing_size); 3 envs
CONFIGS = {
    "keep-all": (10_000, None, None, None),
    "windowed": (24, 5, 7, 2),  # capacity 8
    "overflow": (13, None, 4, 1),  # capacity 5, drop-oldest overflow and clearing
}


# ------------------------------------------------------------------- model


def _stack(space: spaces.Space[Any], items: list[Any]) -> Any:
    out = create_empty_array(space, len(items))
    if items:
        out = concatenate(space, items, out)  # type: ignore[arg-type]
    return out


def _rows(batched_space: spaces.Space[Any], batch: Any) -> list[Any]:
    return [copy.deepcopy(x) for x in iterate(batched_space, batch)]


class ModelPool:
    """One list per sub-pool; append, clearing, overflow exactly as in §5."""

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        num_envs: int,
        pool_size: int,
        window_size: int | None,
        clearing_freq: int | None,
        clearing_size: int | None,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.capacity = math.ceil(pool_size / num_envs)
        self.window_size = window_size
        self.clearing_freq = clearing_freq
        self.clearing_size = clearing_size
        self.subs: list[list[tuple[Any, ...]]] = [[] for _ in range(num_envs)]
        self.received = [0] * num_envs

    def add_row(self, j: int, row: tuple[Any, ...]) -> None:
        sub = self.subs[j]
        sub.append(row)
        if self.clearing_freq is not None:
            self.received[j] += 1
            if self.received[j] % self.clearing_freq == 0:
                del sub[: self.clearing_size]
        if len(sub) > self.capacity:
            if self.window_size is not None:
                del sub[: len(sub) - self.window_size]
            else:
                del sub[0]

    def get_pool(self) -> vecpool.Transitions:
        rows = [r for sub in self.subs for r in sub]
        return _transitions(self.observation_space, self.action_space, rows)


def _transitions(
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    rows: list[tuple[Any, ...]],
) -> vecpool.Transitions:
    return vecpool.Transitions(
        obs=_stack(observation_space, [r[0] for r in rows]),
        action=_stack(action_space, [r[1] for r in rows]),
        next_obs=_stack(observation_space, [r[2] for r in rows]),
        reward=np.array([r[3] for r in rows], dtype=np.float64),
        terminated=np.array([r[4] for r in rows], dtype=bool),
        truncated=np.array([r[5] for r in rows], dtype=bool),
    )


# ------------------------------------------------------------------- driving


def _without_time(result: Any, drop_episode: bool = False) -> Any:
    """Drop the wall-clock ``t`` of RecordEpisodeStatistics from a result's infos.

    With ``drop_episode``, drop its ``episode`` entries altogether: in DISABLED
    mode Gymnasium's SyncVectorEnv pops ``reset_mask`` from ``options``, so a
    RecordEpisodeStatistics above it sees a full reset and zeroes every env's
    counters, while vecpool leaves ``options`` alone (DESIGN.md §3). That
    difference is not the replay pool's business.
    """
    *head, infos = result
    infos = dict(infos)
    if drop_episode:
        infos.pop("episode", None)
        infos.pop("_episode", None)
    if "episode" in infos:
        infos["episode"] = {k: v for k, v in infos["episode"].items() if k != "t"}
    return (*head, infos)


def _actions(single_space: spaces.Space[Any], steps: int) -> list[Any]:
    space = batch_space(single_space, NUM_ENVS)
    space.seed(3)
    return [space.sample() for _ in range(steps)]


class Reference:
    """Steps the reference env and collects its real transitions per env."""

    def __init__(self, env: gym.vector.VectorEnv[Any, Any, Any], mode: Any) -> None:
        self.env = env
        self.mode = mode
        self.per_env: list[list[tuple[Any, ...]]] = [[] for _ in range(NUM_ENVS)]
        self.current: list[Any] = []
        self.pending = np.zeros(NUM_ENVS, dtype=bool)  # NEXT_STEP: resets next step
        self.order: list[tuple[int, tuple[Any, ...]]] = []  # (env, row) in add order

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**copy.deepcopy(kwargs))
        rows = _rows(self.env.observation_space, result[0])
        options = kwargs.get("options") or {}
        mask = options.get("reset_mask")
        if mask is None:
            self.current = rows
            self.pending[:] = False
        else:
            for i in np.flatnonzero(mask):
                self.current[i] = rows[i]
        return result

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        obs, reward, terminated, truncated, infos = result
        obs_rows = _rows(self.env.observation_space, obs)
        act_rows = _rows(self.env.action_space, action)
        for i in range(NUM_ENVS):
            if self.mode == AutoresetMode.NEXT_STEP and self.pending[i]:
                self.current[i] = obs_rows[i]  # the reset step: not a transition
                continue
            ended = bool(terminated[i] or truncated[i])
            if self.mode == AutoresetMode.SAME_STEP and ended:
                next_obs = copy.deepcopy(infos["final_obs"][i])
            else:
                next_obs = obs_rows[i]
            row = (
                self.current[i],
                act_rows[i],
                next_obs,
                float(reward[i]),
                bool(terminated[i]),
                bool(truncated[i]),
            )
            self.per_env[i].append(row)
            self.order.append((i, row))
            self.current[i] = obs_rows[i]
        if self.mode == AutoresetMode.NEXT_STEP:
            self.pending = np.logical_or(terminated, truncated)
        return result

    def model(self, config: str) -> ModelPool:
        pool_size, window_size, clearing_freq, clearing_size = CONFIGS[config]
        model = ModelPool(
            self.env.single_observation_space,
            self.env.single_action_space,
            NUM_ENVS,
            pool_size,
            window_size,
            clearing_freq,
            clearing_size,
        )
        for i, rows in enumerate(self.per_env):
            for row in rows:
                model.add_row(i, row)
        return model

    def all_rows(self) -> vecpool.Transitions:
        return _transitions(
            self.env.single_observation_space,
            self.env.single_action_space,
            [row for _, row in self.order],
        )

    def episodes(self) -> list[tuple[float, int]]:
        found = []
        for rows in self.per_env:
            ret, length = 0.0, 0
            for row in rows:
                ret += row[3]
                length += 1
                if row[4] or row[5]:
                    found.append((ret, length))
                    ret, length = 0.0, 0
        return found


def _drive(
    candidate: Any,
    reference: Reference,
    mode: Any,
    steps: int = STEPS,
    full_reset_at: tuple[int, ...] = (),
    mask_running_every: int = 0,
    drop_episode: bool = False,
    after_step: Any = None,
) -> None:
    """Step both in lockstep; compare every result; reset like a user would.

    ``after_step(t)``, if given, runs right after step ``t`` of both (before any
    reset that follows it).

    DISABLED: after each step, the envs that ended are reset with a ``reset_mask``
    (plus env 0 every ``mask_running_every`` steps even when it is running).
    ``full_reset_at``: steps after which both get a plain ``reset(seed=...)``.
    """

    def same(expected: Any, actual: Any, label: str) -> None:
        assert_same_data(
            _without_time(expected, drop_episode),
            _without_time(actual, drop_episode),
            label,
        )

    same(reference.reset(seed=SEED), candidate.reset(seed=SEED), "reset")
    actions = _actions(reference.env.single_action_space, steps)
    for t, action in enumerate(actions):
        expected = reference.step(action)
        actual = candidate.step(action)
        same(expected, actual, f"step {t}")
        if after_step is not None:
            after_step(t)
        if t in full_reset_at:
            expected = reference.reset(seed=SEED + 100 + t)
            actual = candidate.reset(seed=SEED + 100 + t)
            same(expected, actual, f"full reset {t}")
            continue
        if mode != AutoresetMode.DISABLED:
            continue
        mask = np.logical_or(expected[2], expected[3])
        if mask_running_every and t % mask_running_every == 0:
            mask[0] = True
        if mask.any():
            expected = reference.reset(options={"reset_mask": mask.copy()})
            actual = candidate.reset(options={"reset_mask": mask.copy()})
            same(expected, actual, f"masked reset {t}")


def _inner(
    kind: str,
    env_fns: Any,
    mode: Any,
    make_async: Any,
    make_sync: Any,
    make_gym_async: Any = None,
) -> Any:
    if kind == "gym-async":
        return make_gym_async(env_fns, autoreset_mode=mode)
    if kind == "vecpool-pipes":
        return make_async(
            env_fns, autoreset_mode=mode, num_workers=2, shared_memory=False
        )
    if kind == "sync":
        return make_sync(env_fns, autoreset_mode=mode)
    if kind == "vecpool":
        return make_async(env_fns, autoreset_mode=mode, num_workers=2)
    if kind == "vecpool-views":
        return make_async(env_fns, autoreset_mode=mode, num_workers=2, copy=False)
    raise AssertionError(kind)


def _wrapper(inner: Any, config: str, **kwargs: Any) -> vecpool.ReplayPoolWrapper:
    pool_size, window_size, clearing_freq, clearing_size = CONFIGS[config]
    return vecpool.ReplayPoolWrapper(
        inner,
        pool_size,
        window_size=window_size,
        clearing_freq=clearing_freq,
        clearing_size=clearing_size,
        **kwargs,
    )


def _env_fns(obs_kind: str) -> Any:
    return make_env_fns(
        NUM_ENVS, obs_kind=obs_kind, max_steps=6, terminate_prob=0.1, info_every=2
    )


def _mode_id(mode: Any) -> str:
    return str(mode.value)


# ------------------------------------------------------------------- tests


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "stats-wrapped"])
@pytest.mark.parametrize("inner_kind", ["sync", "vecpool"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_pool_matches_reference(
    mode, inner_kind, wrapped, obs_kind, config, make_async, make_sync
):
    env_fns = _env_fns(obs_kind)
    inner = _inner(inner_kind, env_fns, mode, make_async, make_sync)
    ref_env = make_sync(env_fns, autoreset_mode=mode)
    if wrapped:
        inner = RecordEpisodeStatistics(inner)
        ref_env = RecordEpisodeStatistics(ref_env)
    wrapper = _wrapper(inner, config)
    assert isinstance(wrapper, gym.vector.VectorWrapper)
    assert isinstance(wrapper.pool, vecpool.ReplayPool)
    assert wrapper.pool.num_envs == NUM_ENVS
    assert wrapper.pool.capacity == math.ceil(CONFIGS[config][0] / NUM_ENVS)
    reference = Reference(ref_env, mode)
    disabled = mode == AutoresetMode.DISABLED
    _drive(wrapper, reference, mode, drop_episode=wrapped and disabled)
    assert sum(len(r) for r in reference.per_env) > STEPS  # enough happened
    expected = reference.model(config)
    assert_same_data(expected.get_pool(), wrapper.get_pool(), "wrapper.get_pool()")
    assert_same_data(expected.get_pool(), wrapper.pool.get_pool(), "pool.get_pool()")
    np.testing.assert_array_equal(wrapper.pool.lengths, [len(s) for s in expected.subs])
    assert len(wrapper.pool) == sum(len(s) for s in expected.subs)
    episodes = reference.episodes()
    stats = wrapper.pool.episode_stats
    assert stats.count == len(episodes) > 0
    assert stats.mean_return == pytest.approx(np.mean([r for r, _ in episodes]))
    assert stats.mean_length == pytest.approx(np.mean([n for _, n in episodes]))
    if wrapped and not disabled:  # Gymnasium's own episode statistics agree
        assert stats.count == len(inner.return_queue)
        assert stats.mean_return == pytest.approx(np.mean(inner.return_queue))
        assert stats.mean_length == pytest.approx(np.mean(inner.length_queue))


@pytest.mark.parametrize("obs_kind", ["box", "dict"])
@pytest.mark.parametrize("inner_kind", ["sync", "vecpool"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_pool_matches_hand_loop_after_every_step(
    mode, inner_kind, obs_kind, make_async, make_sync
):
    """Issue 39: every transition is in the pool (and samplable) right after step().

    The reference is a plain hand loop over Gymnasium's SyncVectorEnv; the pool is
    compared with it after each step, so a write deferred past ``step`` (or a row
    recorded twice, or skipped) shows at the step where it happens.
    """
    env_fns = _env_fns(obs_kind)
    wrapper = _wrapper(
        _inner(inner_kind, env_fns, mode, make_async, make_sync), "keep-all"
    )
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    masked: Counter[bool] = Counter()

    def check(t: int) -> None:
        expected = reference.model("keep-all")
        count = sum(len(s) for s in expected.subs)
        assert len(wrapper.pool) == count, f"step {t}"
        assert_same_data(expected.get_pool(), wrapper.get_pool(), f"step {t}")
        stats = wrapper.pool.episode_stats
        assert stats.count == len(reference.episodes()), f"step {t}"
        if count:  # the newest rows are among those sample() draws from
            drawn = wrapper.pool.sample(4 * count)
            assert drawn.reward.shape == (4 * count,)
        masked[bool(reference.pending.any())] += 1

    _drive(wrapper, reference, mode, steps=40, after_step=check)
    if mode == AutoresetMode.NEXT_STEP:
        assert masked[True]  # both the masked adds ...
        assert masked[False]  # ... and the aligned ones ran
    wrapper.close()


@pytest.mark.parametrize("obs_kind", ["tuple", "discrete", "image"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_other_spaces(mode, obs_kind, make_sync):
    """Tuple, Discrete and image observations with Box actions."""
    env_fns = make_env_fns(
        NUM_ENVS, obs_kind=obs_kind, action_kind="box", max_steps=6, terminate_prob=0.1
    )
    wrapper = _wrapper(make_sync(env_fns, autoreset_mode=mode), "overflow")
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode)
    assert_same_data(
        reference.model("overflow").get_pool(), wrapper.get_pool(), "get_pool()"
    )


@pytest.mark.parametrize("inner_kind", ["gym-async", "vecpool-pipes"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_other_inner_envs(mode, inner_kind, make_async, make_sync, make_gym_async):
    """Gymnasium's AsyncVectorEnv, and vecpool without shared memory."""
    env_fns = _env_fns("dict")
    inner = _inner(inner_kind, env_fns, mode, make_async, make_sync, make_gym_async)
    wrapper = _wrapper(inner, "windowed")
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode)
    assert_same_data(
        reference.model("windowed").get_pool(), wrapper.get_pool(), "get_pool()"
    )


@pytest.mark.parametrize("obs_kind", ["box", "dict"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_pool_with_shared_memory_views(mode, obs_kind, make_async, make_sync):
    """``copy=False``: the inner env's observations are overwritten in place."""
    env_fns = _env_fns(obs_kind)
    inner = _inner("vecpool-views", env_fns, mode, make_async, make_sync)
    wrapper = _wrapper(inner, "windowed")
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode)
    assert_same_data(
        reference.model("windowed").get_pool(), wrapper.get_pool(), "get_pool()"
    )


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_full_reset_mid_run(mode, make_sync):
    """A user ``reset()`` mid-run starts fresh episodes; NEXT_STEP skips nothing."""
    env_fns = _env_fns("box")
    wrapper = _wrapper(make_sync(env_fns, autoreset_mode=mode), "keep-all")
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode, full_reset_at=(9, 10, 25, 40))
    assert_same_data(
        reference.model("keep-all").get_pool(), wrapper.get_pool(), "get_pool()"
    )


def test_disabled_reset_of_running_env(make_async, make_sync):
    """DISABLED: a reset_mask may reset an env that did not end."""
    mode = AutoresetMode.DISABLED
    env_fns = _env_fns("dict")
    wrapper = _wrapper(
        _inner("vecpool", env_fns, mode, make_async, make_sync), "keep-all"
    )
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode, mask_running_every=4)
    assert_same_data(
        reference.model("keep-all").get_pool(), wrapper.get_pool(), "get_pool()"
    )


def test_replay_wrapper_outside_other_wrappers(make_sync):
    """The replay wrapper can itself be wrapped (DISABLED: masks pass through)."""
    mode = AutoresetMode.DISABLED
    env_fns = _env_fns("box")
    replay = _wrapper(make_sync(env_fns, autoreset_mode=mode), "windowed")
    outer = RecordEpisodeStatistics(replay)
    reference = Reference(
        RecordEpisodeStatistics(make_sync(env_fns, autoreset_mode=mode)), mode
    )
    _drive(outer, reference, mode)
    assert_same_data(
        reference.model("windowed").get_pool(), replay.get_pool(), "get_pool()"
    )


@pytest.mark.parametrize("config", ["keep-all", "windowed"])
@pytest.mark.parametrize("obs_kind", ["image", "dict"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_store_next_obs_false_gives_identical_pools(mode, obs_kind, config, make_sync):
    env_fns = _env_fns(obs_kind)
    plain = _wrapper(make_sync(env_fns, autoreset_mode=mode), config)
    compact = _wrapper(
        make_sync(env_fns, autoreset_mode=mode), config, store_next_obs=False
    )
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    # The same user calls on all three, including resets no flag announces.
    disabled = mode == AutoresetMode.DISABLED
    plan = {"full_reset_at": (12, 30), "mask_running_every": 5 if disabled else 0}

    class Both:
        def reset(self, **kwargs: Any) -> Any:
            first = plain.reset(**copy.deepcopy(kwargs))
            second = compact.reset(**copy.deepcopy(kwargs))
            assert_same_data(first, second, "reset results")
            return second

        def step(self, action: Any) -> Any:
            first = plain.step(action)
            second = compact.step(action)
            assert_same_data(first, second, "step results")
            return second

    _drive(Both(), reference, mode, **plan)  # type: ignore[arg-type]
    expected = reference.model(config).get_pool()
    assert_same_data(expected, plain.get_pool(), "plain layout")
    assert_same_data(expected, compact.get_pool(), "store_next_obs=False")
    np.testing.assert_array_equal(plain.pool.lengths, compact.pool.lengths)


def _row_keys(transitions: vecpool.Transitions) -> list[tuple[bytes, ...]]:
    leaves: list[np.ndarray] = []

    def collect(x: Any) -> None:
        if isinstance(x, dict):
            for key in sorted(x):
                collect(x[key])
        elif isinstance(x, tuple):
            for value in x:
                collect(value)
        else:
            leaves.append(np.asarray(x))

    collect(tuple(transitions))
    n = len(transitions.reward)
    return [tuple(leaf[i].tobytes() for leaf in leaves) for i in range(n)]


@pytest.mark.parametrize("inner_kind", ["sync", "vecpool"])
@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_random_routing_keeps_every_transition(mode, inner_kind, make_async, make_sync):
    env_fns = _env_fns("dict")
    inner = _inner(inner_kind, env_fns, mode, make_async, make_sync)
    wrapper = _wrapper(inner, "keep-all", random=True, seed=5)
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode, steps=90)
    stored = wrapper.get_pool()
    total = len(reference.order)
    assert len(wrapper.pool) == total == int(wrapper.pool.lengths.sum())
    assert Counter(_row_keys(stored)) == Counter(_row_keys(reference.all_rows()))
    lengths = wrapper.pool.lengths
    assert lengths.max() - lengths.min() <= max(6, total // 5), lengths


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_random_routing_with_windowing(mode, make_sync):
    env_fns = _env_fns("box")
    wrapper = _wrapper(
        make_sync(env_fns, autoreset_mode=mode), "windowed", random=True, seed=1
    )
    reference = Reference(make_sync(env_fns, autoreset_mode=mode), mode)
    _drive(wrapper, reference, mode)
    stored = Counter(_row_keys(wrapper.get_pool()))
    assert stored, "nothing stored"
    assert not stored - Counter(_row_keys(reference.all_rows())), "unknown rows"
    assert (wrapper.pool.lengths <= wrapper.pool.capacity).all()
    assert len(wrapper.pool) == int(wrapper.pool.lengths.sum())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"pool_size": 0}, "pool_size"),
        ({"pool_size": 12, "window_size": 5}, "window_size"),  # capacity 4
        ({"pool_size": 12, "window_size": 0}, "window_size"),
        ({"pool_size": 12, "clearing_freq": 2}, "clearing_freq|clearing_size"),
        ({"pool_size": 12, "clearing_size": 2}, "clearing_freq|clearing_size"),
        ({"pool_size": 12, "clearing_freq": 0, "clearing_size": 2}, "clearing_freq"),
        (
            {"pool_size": 12, "clearing_freq": 2, "clearing_size": 0},
            re.escape("clearing_size"),
        ),
    ],
)
def test_invalid_arguments(kwargs, name, make_sync):
    env = make_sync(_env_fns("box"))
    kwargs = dict(kwargs)
    with pytest.raises(ValueError, match=name):
        vecpool.ReplayPoolWrapper(env, kwargs.pop("pool_size"), **kwargs)


def test_window_size__is_a_deprecated_name_of_clearing_size(make_sync):
    # issue 29: `clearing_size` was `window_size_` (the original Pool's name)
    env = make_sync(_env_fns("box"))
    with pytest.warns(
        DeprecationWarning,
        match=re.escape("`ReplayPoolWrapper(window_size_=...)` is deprecated"),
    ) as record:
        wrapper = vecpool.ReplayPoolWrapper(env, 12, clearing_freq=2, window_size_=1)
    assert record[0].filename == __file__  # points at the caller
    assert wrapper.pool.clearing_size == 1
    msg = "`ReplayPoolWrapper` got both `clearing_size=1` and `window_size_=1`"
    with pytest.raises(TypeError, match=re.escape(msg)):
        vecpool.ReplayPoolWrapper(
            env, 12, clearing_freq=2, clearing_size=1, window_size_=1
        )


def _cartpoles(mode: AutoresetMode, frame_stack: int | None = None) -> Any:
    def make() -> Any:
        env = gym.make("CartPole-v1")
        if frame_stack is None:
            return env
        return gym.wrappers.FrameStackObservation(env, frame_stack)

    return gym.vector.SyncVectorEnv([make] * 3, autoreset_mode=mode)


def _steps(envs: Any, seed: int, count: int) -> None:
    envs.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, (count, 3))
    for row in actions:
        envs.step(row)


@pytest.mark.parametrize("frame_stack", [None, 2])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_recording_into_a_loaded_pool_goes_on_as_one_run(tmp_path, mode, frame_stack):
    # a run checkpointed (pool.save), then resumed in a new process (a new env, the
    # pool loaded and passed as `pool=`) holds what one run through both holds:
    # the resumed run starts with a reset, as the one run does there
    def wrap(**kwargs: Any) -> vecpool.ReplayPoolWrapper:
        return vecpool.ReplayPoolWrapper(_cartpoles(mode, frame_stack), **kwargs)

    settings = {"pool_size": 60, "seed": 1, "alpha": 0.6, "frame_stack": frame_stack}
    whole = wrap(**settings)
    first = wrap(**settings)
    for envs in (whole, first):
        _steps(envs, 0, 45)  # round the 20-row sub-pools twice
    path = first.pool.save(tmp_path / "checkpoint.npz")
    first.close()
    resumed = wrap(pool=vecpool.ReplayPool.load(path))
    for envs in (whole, resumed):
        _steps(envs, 5, 30)
    assert resumed.pool.lengths.tolist() == whole.pool.lengths.tolist()
    assert_same_data(whole.pool.get_pool(), resumed.pool.get_pool(), "get_pool")
    assert whole.pool.episode_stats == resumed.pool.episode_stats
    assert_same_data(
        whole.pool.recent_episode_stats(50),
        resumed.pool.recent_episode_stats(50),
        "recent episodes",
    )
    draws: list[dict[str, Any]] = [
        {"beta": 0.4},
        {"n_step": 3, "gamma": 0.9, "beta": 0.4},
    ]
    for kwargs in draws:
        assert_same_data(
            whole.pool.sample(32, **kwargs), resumed.pool.sample(32, **kwargs), "draw"
        )
    whole.close()
    resumed.close()


def test_a_pool_to_record_into_must_fit_the_env():
    envs = _cartpoles(AutoresetMode.NEXT_STEP)
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    other = vecpool.ReplayPool(box, envs.single_action_space, 3, 30)
    with pytest.raises(ValueError, match=r"`pool`.*observation space"):
        vecpool.ReplayPoolWrapper(envs, pool=other)
    fitting = vecpool.ReplayPool(
        envs.single_observation_space, envs.single_action_space, 2, 30
    )
    with pytest.raises(ValueError, match=r"`pool`.*2 sub-pools.*3 envs"):
        vecpool.ReplayPoolWrapper(envs, pool=fitting)
    pool = vecpool.ReplayPool(
        envs.single_observation_space, envs.single_action_space, 3, 30
    )
    with pytest.raises(ValueError, match=r"either `pool` or the pool's settings"):
        vecpool.ReplayPoolWrapper(envs, 30, pool=pool)
    with pytest.raises(TypeError, match="`pool_size`"):
        vecpool.ReplayPoolWrapper(envs)
    wrapped = vecpool.ReplayPoolWrapper(envs, pool=pool)
    assert wrapped.pool is pool
    wrapped.close()  # closes envs


class _TwoFields(gym.Env[dict[str, Any], Any]):
    """Observations {"pos": step count, "vel": -1}, fields in that order."""

    field = spaces.Box(-9.0, 9.0, (2,), np.float32)
    observation_space = spaces.Dict([("pos", field), ("vel", field)])
    action_space = spaces.Dict([("move", spaces.Discrete(2)), ("jump", field)])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> dict[str, Any]:
        return {
            "pos": np.full(2, self.t, np.float32),
            "vel": np.full(2, -1.0, np.float32),
        }

    def step(
        self, action: Any
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), 0.0, False, False, {}


def test_a_pool_whose_dict_keys_come_in_another_order_is_refused():
    # equal spaces to Gymnasium, but each leaf would be stored under the other's
    # name: silent wrong data (found by a tester)
    envs = gym.vector.SyncVectorEnv([_TwoFields])
    field, action = _TwoFields.field, _TwoFields.action_space
    swapped = spaces.Dict([("vel", field), ("pos", field)])
    assert swapped == envs.single_observation_space  # Gymnasium: the same space
    pool = vecpool.ReplayPool(swapped, action, 1, 10)
    with pytest.raises(ValueError, match=r"`pool`.*observation space"):
        vecpool.ReplayPoolWrapper(envs, pool=pool)
    reordered = spaces.Dict([("jump", field), ("move", spaces.Discrete(2))])
    pool = vecpool.ReplayPool(envs.single_observation_space, reordered, 1, 10)
    with pytest.raises(ValueError, match=r"`pool`.*action space"):
        vecpool.ReplayPoolWrapper(envs, pool=pool)
    # the same order records each field under its own name
    pool = vecpool.ReplayPool(envs.single_observation_space, action, 1, 10)
    wrapped = vecpool.ReplayPoolWrapper(envs, pool=pool)
    wrapped.reset(seed=0)
    for _ in range(3):
        wrapped.step(wrapped.action_space.sample())
    stored = pool.get_pool().obs
    np.testing.assert_array_equal(stored["pos"][:, 0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(stored["vel"][:, 0], [-1.0, -1.0, -1.0])
    wrapped.close()


def test_a_pool_an_open_wrapper_records_into_is_refused():
    first = vecpool.ReplayPoolWrapper(_cartpoles(AutoresetMode.NEXT_STEP), 30)
    with pytest.raises(ValueError, match=r"`pool` is recorded into by another"):
        vecpool.ReplayPoolWrapper(_cartpoles(AutoresetMode.NEXT_STEP), pool=first.pool)
    first.close()
    second = vecpool.ReplayPoolWrapper(
        _cartpoles(AutoresetMode.NEXT_STEP), pool=first.pool
    )
    assert second.pool is first.pool
    with pytest.raises(TypeError, match=r"`pool` must be a ReplayPool.*load"):
        vecpool.ReplayPoolWrapper(second, pool="pool.npz")  # type: ignore[arg-type]
    # closing the wrapper frees the pool, whatever the env's own `closed` says
    second.env.close = lambda **kwargs: None  # type: ignore[method-assign]
    second.close()
    assert not second.closed
    third = vecpool.ReplayPoolWrapper(
        _cartpoles(AutoresetMode.NEXT_STEP), pool=first.pool
    )
    # a wrapper that failed to start takes no pool (found by a review)
    third.close()
    broken = _cartpoles(AutoresetMode.NEXT_STEP)
    broken.metadata = {**broken.metadata, "autoreset_mode": "bogus"}
    with pytest.raises(ValueError, match="bogus"):
        vecpool.ReplayPoolWrapper(broken, pool=first.pool)
    broken.close()
    fourth = vecpool.ReplayPoolWrapper(
        _cartpoles(AutoresetMode.NEXT_STEP), pool=first.pool
    )
    fourth.close()


@pytest.mark.parametrize("how", ["env reset before wrapping", "first reset masked"])
def test_a_given_pool_starts_new_episodes_without_a_full_reset(tmp_path, how):
    # a checkpoint's episodes in progress can never go on (the env is a new one):
    # recording into the loaded pool starts as recording into a new pool does,
    # however the env was reset (found by the review of `pool=`)
    make = functools.partial(CountingEnv, max_steps=9, terminate_prob=0.0)
    first = vecpool.ReplayPoolWrapper(gym.vector.SyncVectorEnv([make] * 2), 100)
    first.reset(seed=0)
    for _ in range(5):  # mid-episode: both envs' episodes are in progress
        first.step(np.array([1, 1]))
    path = first.pool.save(tmp_path / "checkpoint.npz")
    first.close()

    def run(**pool: Any) -> vecpool.ReplayPool:
        env = gym.vector.SyncVectorEnv([make] * 2)
        if how == "env reset before wrapping":
            env.reset(seed=1)
            envs = vecpool.ReplayPoolWrapper(env, **pool)
        else:
            envs = vecpool.ReplayPoolWrapper(env, **pool)
            env.reset(seed=1)  # reset behind the wrapper, which resets env 0 only
            envs.reset(options={"reset_mask": np.array([True, False])})
        for _ in range(25):  # past the first whole episode of each env
            envs.step(np.array([1, 1]))
        envs.close()
        return envs.pool

    resumed = run(pool=vecpool.ReplayPool.load(path))
    fresh = run(pool_size=100)
    saved = vecpool.ReplayPool.load(path)
    for env in range(2):  # the new rows are the fresh pool's, marks and all
        held = int(saved.lengths[env])
        new = resumed.get_rows(env, held, int(resumed.lengths[env]))
        assert_same_data(fresh.get_rows(env, 0, int(fresh.lengths[env])), new, "rows")
    count = fresh.episode_stats.count
    assert resumed.episode_stats.count == saved.episode_stats.count + count > 0
    assert resumed.recent_episode_stats(count) == fresh.recent_episode_stats(count)
    # the stretch marks (n-step windows and sequences stop at them) of the new
    # rows are the fresh pool's: none links a new row to the checkpoint's
    marks = [_marks(pool) for pool in (resumed, fresh)]
    for env in range(2):
        held = int(saved.lengths[env])
        assert marks[0][env][held:].tolist() == marks[1][env].tolist()
        assert marks[0][env][held]  # the first new row starts a stretch


@pytest.mark.parametrize("before", [0, 3])
def test_an_episode_whose_start_was_not_recorded_is_not_counted(before):
    # an env reset (and stepped) before it was wrapped: its first step from an
    # unseen observation is no transition, and the rest of that episode is no
    # episode either (found by a tester: it was counted, one step short)
    make = functools.partial(CountingEnv, max_steps=6, terminate_prob=0.0)
    env = gym.vector.SyncVectorEnv([make])
    env.reset(seed=0)
    for _ in range(before):
        env.step(np.array([1]))
    envs = vecpool.ReplayPoolWrapper(env, 100)
    for _ in range(20):  # the cut episode, then whole ones of 6 steps
        envs.step(np.array([1]))
    stats = envs.pool.episode_stats
    whole = envs.pool.recent_episode_stats(100)
    assert stats.count == whole.count >= 1
    assert stats.mean_length == 6.0  # no shorter fragment among them
    envs.close()


def _marks(pool: vecpool.ReplayPool) -> list[np.ndarray]:
    """Each sub-pool's stretch marks, oldest row first."""
    state = pool.state_dict()
    rows = pool.filled_rows(state["length"], state["end"])
    return np.split(state["starts"][rows], np.cumsum(state["length"])[:-1])


class _LongMissionEnv(MissionEnv):
    """A MissionEnv whose missions are longer than any MissionEnv's."""

    def _observe(self, action: int = 0) -> dict[str, Any]:
        obs = super()._observe(action)
        obs["mission"] = "go to the " + "very " * 12 + "far ball"
        return obs


def test_a_pool_saved_from_a_custom_string_space_records_that_env_again(tmp_path):
    # a MiniGrid-style mission space is saved as Text (vecpool/replay/portable.py):
    # the loaded pool must still take that env's observations (found by review)
    first = vecpool.ReplayPoolWrapper(
        gym.vector.SyncVectorEnv([MissionEnv] * 2), 100, seed=0
    )
    first.reset(seed=0)
    first.action_space.seed(0)
    for _ in range(10):
        first.step(first.action_space.sample())
    path = first.pool.save(tmp_path / "mission.npz")
    first.close()
    loaded = vecpool.ReplayPool.load(path)
    stored = loaded.observation_space
    assert isinstance(stored, spaces.Dict)
    assert isinstance(stored["mission"], spaces.Text)
    again = vecpool.ReplayPoolWrapper(
        gym.vector.SyncVectorEnv([MissionEnv] * 2), pool=loaded
    )
    again.reset(seed=1)
    again.action_space.seed(1)
    held = len(loaded)
    for _ in range(10):
        again.step(again.action_space.sample())
    assert len(again.pool) > held
    missions = again.pool.get_rows(0, 0, int(again.pool.lengths[0])).obs["mission"]
    assert all(isinstance(m, str) and m for m in missions.tolist())
    again.close()
    # a mission longer than any the file held cannot be stored: the error says
    # where the Text's length came from and what to do (found by a tester)
    longer = vecpool.ReplayPoolWrapper(
        gym.vector.SyncVectorEnv([_LongMissionEnv] * 2), pool=loaded
    )
    longer.reset(seed=2)
    with pytest.raises(ValueError, match=r"longest string it held.*new pool"):
        longer.step(longer.action_space.sample())
    longer.close()
    box = spaces.Dict({"mission": spaces.Box(0, 1, (2,)), "image": spaces.Discrete(2)})
    assert not vecpool.replay.portable.records(box, MissionEnv().observation_space)
