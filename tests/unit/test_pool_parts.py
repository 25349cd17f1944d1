"""The pool's parts alone and composed (issue 39), and the data fixes of item 3."""

from __future__ import annotations

import copy
import functools
import pickle
import sys
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from vecpool import ReplayPool, ReplaySample
from vecpool.replay import layouts, samplers, writers
from vecpool.replay.episode_log import EpisodeLog
from vecpool.replay.layouts import make_layout
from vecpool.replay.readers import NStep, SequenceReader, read_rows
from vecpool.replay.ring import SubPoolRing
from vecpool.replay.samplers import Draw, PrioritizedSampler, UniformSampler
from vecpool.replay.settings import PoolSettings

BOX = spaces.Box(-np.inf, np.inf, (2,), np.float32)


class StratifiedSampler(UniformSampler):
    """One row from each of ``batch_size`` equal strata of the held rows.

    What a newcomer's sampler looks like: the :class:`IndexSampler` methods (here
    the uniform sampler's, but for ``draw``), drawing with the pool's generator.
    """

    def draw(self, batch_size: int) -> Draw:
        ring = self.ring
        total = int(ring.length.sum())
        if total == 0:
            msg = "Cannot sample from an empty ReplayPool: add transitions first."
            raise ValueError(msg)
        edges = np.arange(batch_size + 1) * total / batch_size
        flat = np.floor(edges[:-1] + self.rng.random(batch_size) * np.diff(edges))
        flat = np.minimum(flat.astype(np.int64), total - 1)
        env, offset = (part[flat] for part in ring.held())
        return env, offset, ring.row_of(env, offset)

    @classmethod
    def of(
        cls, ring: SubPoolRing, rng: np.random.Generator, settings: PoolSettings
    ) -> StratifiedSampler:
        return cls(ring, rng)


def _filled(pool: ReplayPool, steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for step in range(steps):
        obs = np.stack([np.arange(pool.num_envs), np.full(pool.num_envs, step)], 1)
        pool.add(obs.astype(np.float32), rng.integers(0, 2, pool.num_envs),
                 obs.astype(np.float32) + 1, rng.normal(size=pool.num_envs),
                 rng.random(pool.num_envs) < 0.1,
                 np.zeros(pool.num_envs, bool))  # fmt: skip


def test_a_new_sampler_is_one_line_of_wiring(monkeypatch: pytest.MonkeyPatch) -> None:
    # the one line: the sampler under the name the pool draws by
    monkeypatch.setitem(samplers.SAMPLERS, "uniform", StratifiedSampler.of)
    pool = ReplayPool(BOX, spaces.Discrete(2), 3, 60, seed=1)
    assert isinstance(pool._sampler, StratifiedSampler)
    _filled(pool, 20)
    before = pool.generator_state
    batch = pool.sample(6)
    assert pool.generator_state != before  # the pool's one generator
    # one row from each sixth of the 60 held rows (get_pool order: env, then time)
    held = pool.get_pool()
    position = [
        int(np.flatnonzero((held.obs == row).all(axis=1))[0]) for row in batch.obs
    ]
    assert [p // 10 for p in position] == list(range(6))
    # every reader reads its draws
    assert isinstance(pool.sample(6, n_step=3, gamma=0.9), ReplaySample)
    assert pool.sample_sequences(6, 4).mask.shape == (6, 4)


def test_any_reader_reads_any_sampler() -> None:
    pool = ReplayPool(BOX, spaces.Discrete(2), 2, 40, seed=3, alpha=0.6)
    _filled(pool, 25)
    assert len(pool) == 40  # the deferred counting settled: the ring is current
    rng = np.random.default_rng(0)
    for sampler in (UniformSampler(pool._ring, rng), pool._sampler):
        env, offset, row = sampler.draw(16)
        assert isinstance(sampler, UniformSampler | PrioritizedSampler)
        one = read_rows(pool._stored, env, offset, row=row)
        window = NStep(1, 0.5).read(pool._stored, env, offset, row)
        for got, expected in zip(window[:6], one, strict=True):
            np.testing.assert_array_equal(got, expected)
        sequences = SequenceReader(1).read(pool._stored, env, offset)
        np.testing.assert_array_equal(sequences.obs[:, 0], one[0])


def test_the_ring_rule_matches_its_one_step_form() -> None:
    ring = SubPoolRing(1, 5, 1, 3, 4, 2)
    length, received = np.zeros(1, np.int64), np.zeros(1, np.int64)
    one = 0
    for _ in range(30):
        received += 1
        dropped, trim = ring.trimmed(length + 1, received)
        length = length + 1 - dropped - trim
        one = ring.length_after_one(one, int(received[0]))
        assert int(length[0]) == one


def test_the_episode_log_counts_a_run_as_steps_one_by_one() -> None:
    rng = np.random.default_rng(4)
    counts = np.array([4, 0, 3], np.int64)
    reward = rng.normal(size=7)
    done = np.array([0, 1, 0, 1, 1, 0, 1], bool)
    tick = np.array([0, 1, 2, 3, 0, 1, 2], np.int64)
    run, steps = EpisodeLog(3), EpisodeLog(3)
    run.close_run(np.arange(3), counts, reward, done, tick)
    env = np.repeat(np.arange(3), counts)
    for moment in range(4):
        at = np.flatnonzero(tick == moment)
        steps.record(env[at], reward[at], done[at])
    for mine, theirs in zip(
        run.state_dict().values(), steps.state_dict().values(), strict=True
    ):
        np.testing.assert_allclose(mine, theirs)


def test_a_frame_stacked_pool_takes_rewards_as_lists() -> None:
    """A list of rewards once led a frame-stacked pool to a path that failed."""
    space = spaces.Box(0, 255, (2, 3), np.uint8)
    pools = [ReplayPool(space, spaces.Discrete(2), 2, 8, frame_stack=2) for _ in "ab"]
    for step in range(6):
        frames = np.arange(step, step + 3).astype(np.uint8)
        obs = np.broadcast_to(frames[:2, None], (2, 2, 3)).copy()
        next_obs = np.broadcast_to(frames[1:, None], (2, 2, 3)).copy()
        flags = np.zeros(2, bool)
        pools[0].add(obs, np.zeros(2, np.int64), next_obs, [1.0, 2.0], flags, flags)
        pools[1].add(obs, np.zeros(2, np.int64), next_obs, np.array([1.0, 2.0]),
                     flags, flags)  # fmt: skip
    a, b = pools[0].get_pool(), pools[1].get_pool()
    for mine, theirs in zip(a, b, strict=True):
        np.testing.assert_array_equal(mine, theirs)


# -- item 3: what the last issue noticed and left -------------------------------


def test_recent_episodes_of_a_run_of_masked_adds_come_as_they_ended() -> None:
    pool = ReplayPool(BOX, spaces.Discrete(2), 2, 40)
    obs = np.zeros((2, 2), np.float32)
    action = np.zeros(2, np.int64)

    def add(reward: list[float], done: list[bool], valid: list[bool]) -> None:
        pool.add(obs, action, obs, np.array(reward), np.array(done),
                 np.zeros(2, bool), valid=np.array(valid))  # fmt: skip

    # vector step 0: env 1 ends an episode of return 5 (env 0 has no transition);
    # step 1: env 0 ends one of return 1. No read between: one deferred run.
    add([0.0, 5.0], [False, True], [False, True])
    add([1.0, 0.0], [True, False], [True, True])
    last = pool.recent_episode_stats(1)
    assert (last.count, last.mean_return) == (1, 1.0)  # the one that ended last
    assert pool.recent_episode_stats(2).mean_return == 3.0


def test_recent_episodes_of_one_add_repeating_an_env_come_in_row_order() -> None:
    # rows of one add(..., env_ids=...): env 0 ends three 1-step episodes, then
    # env 1 one; the log took them round by round (env 0, env 1, env 0, env 0)
    pool = ReplayPool(BOX, spaces.Discrete(2), 2, 100)
    obs = np.zeros((4, 2), np.float32)
    pool.add(obs, np.zeros(4, np.int64), obs, np.array([1.0, 2.0, 3.0, 40.0]),
             np.ones(4, bool), np.zeros(4, bool), env_ids=[0, 0, 0, 1])  # fmt: skip
    assert pool.recent_episode_stats(1).mean_return == 40.0
    assert pool.recent_episode_stats(2).mean_return == 21.5
    assert pool.episode_stats.count == 4
    # env 1 ends two episodes, then env 0 one: in rounds, env 1's second came last
    pool.add(obs[:3], np.zeros(3, np.int64), obs[:3], np.array([5.0, 6.0, 7.0]),
             np.ones(3, bool), np.zeros(3, bool), env_ids=[1, 1, 0])  # fmt: skip
    assert pool.recent_episode_stats(1).mean_return == 7.0
    assert pool.episode_stats.count == 7


@pytest.mark.parametrize("seed", range(4))
def test_recent_episodes_of_mixed_runs_come_as_they_ended(seed: int) -> None:
    """Aligned, masked and unmasked flat adds in one deferred run, no read between."""
    rng = np.random.default_rng(seed)
    pool = ReplayPool(BOX, spaces.Discrete(2), 3, 300)  # 100 slots: one long run
    obs, action = np.zeros((3, 2), np.float32), np.zeros(3, np.int64)
    returns, lengths, ended = np.zeros(3), np.zeros(3), []
    for step in range(60):
        reward = rng.normal(size=3).round(2)
        done = rng.random(3) < 0.25
        valid = None if step < 5 or rng.random() < 0.3 else rng.random(3) < 0.7
        pool.add(obs, action, obs, reward, done, np.zeros(3, bool), valid=valid)
        for env in range(3):  # the reference: step by step, env by env
            if valid is not None and not valid[env]:
                continue
            returns[env] += reward[env]
            lengths[env] += 1
            if done[env]:
                ended.append((returns[env], lengths[env]))
                returns[env], lengths[env] = 0.0, 0
    assert pool.recent_episode_stats(1).count == 1  # settles the run
    np.testing.assert_allclose(pool._log.recent_entries(), np.array(ended))


@pytest.mark.parametrize("kind", ["arrays", "apart", "frames"])
def test_each_storage_kind_alone_reads_back_what_it_was_given(kind: str) -> None:
    space = spaces.Box(0, 255, (2, 3), np.uint8)
    stack = 2 if kind == "frames" else None
    ring = SubPoolRing(2, 6, stack or 1, None, None, None)
    layout = make_layout(space, ring, kind != "apart", stack)
    frames = np.arange(40, dtype=np.uint8).reshape(-1, 1).repeat(3, 1)
    given: list[list[tuple[Any, Any]]] = [[], []]
    for step in range(5):
        obs = np.stack([frames[step : step + 2], frames[step + 10 : step + 12]])
        next_obs = np.stack(
            [frames[step + 1 : step + 3], frames[step + 11 : step + 13]]
        )
        if step == 2:
            next_obs[1] = 99  # an episode end: a next stack no row continues
        row = ring.base + ring.end * ring.num_envs
        layout.append(ring, ring.envs, row, [obs], [next_obs])
        ring.end += 1
        ring.length += 1
        for source in range(2):
            given[source].append((obs[source], next_obs[source]))
    twin = make_layout(space, ring, kind != "apart", stack)
    twin.load_state_dict(layout.state_dict(ring), None, ring.length == 0)
    env, offset = ring.held()
    row = ring.row_of(env, offset)
    newest = offset == ring.length[env] - 1
    for part in (layout, twin):
        (obs_read,), (next_read,) = part.read(env, row, row, newest)
        for index, (one, at) in enumerate(zip(env, offset, strict=True)):
            np.testing.assert_array_equal(obs_read[index], given[one][at][0])
            np.testing.assert_array_equal(next_read[index], given[one][at][1])


def _same_stats(mine: Any, theirs: Any) -> None:
    """Equal counts and lengths; returns equal up to the order of float sums (a run
    sums each episode's stretch of rewards at once, a step adds one reward)."""
    assert (mine.count, mine.mean_length) == (theirs.count, theirs.mean_length)
    assert mine.mean_return == pytest.approx(theirs.mean_return, rel=1e-12)


@pytest.mark.parametrize("routed", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("alpha", [None, 0.6])
def test_settling_every_step_holds_what_settling_a_run_holds(
    alpha: float | None, masked: bool, routed: bool
) -> None:
    """Reads between the adds change nothing a pool holds.

    A plain ``sample()``, ``len()`` or ``update_priorities`` only shows the rows
    added since the last read (``HotWriter.show``); ``episode_stats`` and an
    n-step draw settle the marks and episodes of the steps since the last settle
    (``HotWriter.sync``); a pool never read settles whole runs. All hold the same
    rows, marks and episodes.

    ``masked``: some steps leave some envs out (``valid``), as ``NEXT_STEP``'s reset
    rows do in the wrapper; ``routed``: some adds name their envs (``env_ids``),
    which leaves the hot path."""
    num_envs, steps = 4, 300
    rng = np.random.default_rng(7)
    settings: dict[str, Any] = {} if alpha is None else {"alpha": alpha}
    spaces_ = (spaces.Box(-10, 10, (3,), np.float32), spaces.Discrete(2))
    each = ReplayPool(*spaces_, num_envs, 200, seed=1, **settings)
    runs = ReplayPool(*spaces_, num_envs, 200, seed=1, **settings)
    for step in range(steps):
        obs = rng.normal(size=(num_envs, 3)).astype(np.float32)
        next_obs = rng.normal(size=(num_envs, 3)).astype(np.float32)
        action = rng.integers(0, 2, num_envs)
        reward = rng.normal(size=num_envs)
        terminated = rng.random(num_envs) < 0.05
        truncated = rng.random(num_envs) < 0.03
        valid = None
        if masked and rng.random() < 0.4:
            valid = rng.random(num_envs) < 0.7
        env_ids = None
        if routed and rng.random() < 0.1:
            env_ids, valid = np.flatnonzero(rng.random(num_envs) < 0.6), None
            obs, next_obs, action = obs[env_ids], next_obs[env_ids], action[env_ids]
            reward = reward[env_ids]
            terminated, truncated = terminated[env_ids], truncated[env_ids]
        for pool in (each, runs):
            pool.add(
                obs,
                action,
                next_obs,
                reward,
                terminated,
                truncated,
                env_ids,
                valid=valid,
            )
        read = rng.random()
        if read < 0.6:
            each.sample(4)  # shows the rows just added
        elif read < 0.7:
            _ = len(each)
        elif read < 0.8:
            _ = each.episode_stats  # settles the steps since the last settle
        elif read < 0.85:
            each.sample(4, n_step=3, gamma=0.9)  # settles too: windows read marks
        elif read < 0.9 and alpha is not None:
            batch = each.sample(4)
            each.update_priorities(batch.indices, np.ones(4))
            runs.update_priorities(batch.indices, np.ones(4))
        if step % 97 == 96:
            for k in (1, 5, 100):
                _same_stats(each.recent_episode_stats(k), runs.recent_episode_stats(k))
    _same_stats(each.episode_stats, runs.episode_stats)
    _same_state(each, runs)


def _same_state(mine: ReplayPool, theirs: ReplayPool) -> None:
    """Equal ``state_dict``s: rows, marks, episodes.

    Per-row arrays at the held rows only: a free slot may keep a row not held (one
    not ``valid``, written where the next would go) or an older one."""
    ring = mine._ring
    held = ring.row_of(*ring.held())
    ours, others = mine.state_dict(), theirs.state_dict()
    assert ours.keys() == others.keys()
    for key, value in ours.items():
        other = others[key]
        if np.ndim(value) and len(value) == ring.rows and key != "next_row":
            value, other = value[held], other[held]
        if key in ("episode_return", "episodes", "recent"):  # float sums
            np.testing.assert_allclose(value, other, rtol=1e-12)
        else:
            np.testing.assert_array_equal(value, other, err_msg=key)


@pytest.mark.parametrize(
    ("settings", "pool_size"),
    [
        ({}, 1000),
        ({}, 45),  # 9 a sub-pool: runs as long as they may be, wrapping
        ({"alpha": 0.6}, 250),
        ({"window_size": 5}, 60),
    ],
)
def test_staged_steps_hold_what_steps_written_one_by_one_hold(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], pool_size: int
) -> None:
    """The hot writer's staged steps (``StagedSteps``, written a run at once) leave
    the pool as writing each step at once does: rows, marks, episodes, samples.

    Masked steps (``NEXT_STEP``'s reset rows) put the sub-pools at different
    slots, where steps are staged; reads in between flush runs of any length."""

    num_envs = 5
    box = spaces.Box(-10, 10, (3,), np.float32)
    action_space = spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Box(-1, 1, (2,))})
    staged = ReplayPool(box, action_space, num_envs, pool_size, seed=3, **settings)
    monkeypatch.setattr(writers, "STAGE_BYTES", 0)  # no stage: each step written
    plain = ReplayPool(box, action_space, num_envs, pool_size, seed=3, **settings)
    assert staged._hot.stage is not None
    assert plain._hot.stage is None
    rng = np.random.default_rng(11)
    longest = 0  # the longest run staged
    for step in range(400):
        obs = rng.normal(size=(num_envs, 3)).astype(np.float32)
        action = {
            "a": rng.integers(0, 3, num_envs),
            "b": rng.uniform(-1, 1, (num_envs, 2)).astype(np.float32),
        }
        scalars = (
            rng.normal(size=num_envs),
            rng.random(num_envs) < 0.08,
            rng.random(num_envs) < 0.04,
        )
        valid = (rng.random(num_envs) < 0.7) if rng.random() < 0.3 else None
        for pool in (staged, plain):
            pool.add(obs, action, obs + 1, *scalars, valid=valid)
        longest = max(longest, staged._hot.stage.count)
        read = rng.random()
        if read < 0.05:
            for pool in (staged, plain):
                pool.abort_episodes([step % num_envs])
        elif read < 0.15:
            mine, theirs = staged.sample(6), plain.sample(6)
            for field in ("obs", "next_obs", "reward", "terminated"):
                np.testing.assert_array_equal(
                    getattr(mine, field), getattr(theirs, field)
                )
            np.testing.assert_array_equal(mine.action["b"], theirs.action["b"])
            if "alpha" in settings:
                values = rng.random(6) + 0.1
                np.testing.assert_array_equal(mine.indices, theirs.indices)
                staged.update_priorities(mine.indices, values)
                plain.update_priorities(theirs.indices, values)
        elif read < 0.2:
            _same_stats(staged.episode_stats, plain.episode_stats)
            np.testing.assert_array_equal(staged.lengths, plain.lengths)
    assert longest >= 8  # runs were staged, and flushed by the reads
    _same_stats(staged.episode_stats, plain.episode_stats)
    for k in (1, 7, 100):
        _same_stats(staged.recent_episode_stats(k), plain.recent_episode_stats(k))
    held, same = staged.get_pool(), plain.get_pool()
    for field in ("obs", "next_obs", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(held, field), getattr(same, field))
    for leaf in ("a", "b"):
        np.testing.assert_array_equal(held.action[leaf], same.action[leaf])
    _same_state(staged, plain)


def test_steps_are_staged_only_while_nothing_reads_the_pool() -> None:
    """A pool read after every add (DQN's loop) writes each step at once: a flush
    of one step would cost more. One not read stages its steps until a read."""
    pool = ReplayPool(BOX, spaces.Discrete(2), 3, 300)
    stage = pool._hot.stage
    assert stage is not None

    def add(valid: Any = None) -> None:
        obs = np.zeros((3, 2), np.float32)
        zeros = np.zeros(3, bool)
        pool.add(obs, np.zeros(3, np.int64), obs, np.ones(3), zeros, zeros, valid=valid)

    add(np.array([True, False, True]))  # the sub-pools now lie at different slots
    add()
    add()
    assert stage.count == 3  # not read: staged
    assert len(pool) == 8  # a read shows them all
    assert stage.count == 0
    add()  # read since the last add: written at once
    assert stage.count == 0
    add()  # not read since: staged again
    assert stage.count == 1
    assert len(pool) == 14


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copied_pool_with_staged_steps_goes_on_as_the_original(how: str) -> None:
    """A pool pickled or copied while steps are staged goes on alike: its stage
    keeps no view of its arrays (a copy would write one and flush the other)."""

    pool = ReplayPool(BOX, spaces.Discrete(2), 3, 300)
    zeros = np.zeros(3, bool)

    def add(target: ReplayPool, value: float, valid: Any = None) -> None:
        obs = np.full((3, 2), value, np.float32)
        target.add(
            obs, np.ones(3, np.int64), obs, np.ones(3), zeros, zeros, valid=valid
        )

    add(pool, 0.0, np.array([True, False, True]))
    _ = len(pool)
    add(pool, 1.0)
    add(pool, 2.0)
    assert pool._hot.stage is not None
    assert pool._hot.stage.count == 1  # the second add was staged
    twin = pickle.loads(pickle.dumps(pool)) if how == "pickle" else copy.deepcopy(pool)
    for target in (pool, twin):
        for value in (3.0, 4.0, 5.0):
            add(target, value)
    mine, theirs = pool.get_pool(), twin.get_pool()
    np.testing.assert_array_equal(theirs.obs, mine.obs)
    np.testing.assert_array_equal(theirs.next_obs, mine.next_obs)
    assert sorted(set(mine.obs[:, 0].tolist())) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _twins(monkeypatch: pytest.MonkeyPatch, **settings: Any) -> list[ReplayPool]:
    """A pool that stages steps and one that writes each at once, alike else."""

    staged = ReplayPool(BOX, spaces.Discrete(2), 3, 600, seed=0, **settings)
    with monkeypatch.context() as patch:
        patch.setattr(writers, "STAGE_BYTES", 0)
        plain = ReplayPool(BOX, spaces.Discrete(2), 3, 600, seed=0, **settings)
    return [staged, plain]


def _add_to(pools: list[ReplayPool], value: float, valid: Any = None) -> None:
    obs = np.full((3, 2), value, np.float32)
    zeros = np.zeros(3, bool)
    for pool in pools:
        pool.add(obs, np.ones(3, np.int64), obs, np.ones(3), zeros, zeros, valid=valid)


def _same_pools(mine: ReplayPool, theirs: ReplayPool) -> None:
    held, same = mine.get_pool(), theirs.get_pool()
    np.testing.assert_array_equal(held.obs, same.obs)
    np.testing.assert_array_equal(held.next_obs, same.next_obs)
    _same_state(mine, theirs)


def test_a_pool_pickled_before_stages_existed_loads_and_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool pickled by the code before this one (its writer had no ``stage``
    nor ``read``) loads and goes on, writing each step at once."""

    pools = _twins(monkeypatch)
    _add_to(pools, 0.0, np.array([True, False, True]))
    _ = [len(pool) for pool in pools]
    old = pools[1]
    del old._hot.stage, old._hot.read  # as the old code pickled it
    loaded = pickle.loads(pickle.dumps(old))
    assert "stage" not in vars(loaded._hot)
    for pool in (loaded, pools[0]):
        for value in (1.0, 2.0, 3.0):
            _add_to([pool], value)
    _same_pools(pools[0], loaded)


def test_a_longer_stage_than_the_default_writes_what_it_staged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``STAGE_STEPS`` is read when a stage is made: a longer one works."""

    monkeypatch.setattr(writers, "STAGE_STEPS", 100)
    pools = _twins(monkeypatch)
    assert pools[0]._hot.stage is not None
    assert pools[0]._hot.stage.steps == 100
    _add_to(pools, 0.0, np.array([True, False, True]))
    _ = len(pools[0])  # a read: the next add is written at once
    for value in range(1, 90):
        _add_to(pools, float(value))
    assert pools[0]._hot.stage.count == 88  # a run with no mask in it
    _same_pools(*pools)


def _add_cut_short(monkeypatch: pytest.MonkeyPatch, pool: ReplayPool) -> None:
    """An add to ``pool`` whose first row write raises a Ctrl-C (once): it writes a
    full stage first, so it adds nothing (its twin never sees it either)."""
    write = layouts.ArrayLayout.write_rows

    def interrupted(*args: Any) -> None:
        monkeypatch.setattr(layouts.ArrayLayout, "write_rows", write)  # once
        raise KeyboardInterrupt

    monkeypatch.setattr(layouts.ArrayLayout, "write_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _add_to([pool], -1.0)


def test_an_add_after_a_full_stage_failed_to_flush_writes_it_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full stage is written by the next add, before its own step; where that
    write is cut short (a Ctrl-C), the add stages nothing, the stage stays full,
    and the add after it writes the stage first, never past its room nor past
    the steps that may go unsettled."""

    pools = _twins(monkeypatch)
    _add_to(pools, 0.0, np.array([True, False, True]))
    _ = [len(pool) for pool in pools]  # a read: the next add is written at once
    _add_to(pools, 0.5)
    stage = pools[0]._hot.stage
    assert stage is not None
    for value in range(1, stage.steps + 1):  # the last add fills the stage
        _add_to(pools, float(value))
    assert stage.count == stage.steps  # full: written by the next add
    _add_cut_short(monkeypatch, pools[0])
    assert stage.count == stage.steps  # still full, not written
    for value in range(stage.steps + 1, stage.steps + 4):
        _add_to(pools, float(value))
    assert stage.count == 3
    _same_pools(*pools)


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut_short"])
def test_steps_staged_after_a_flush_that_aligns_the_sub_pools_keep_their_order(
    monkeypatch: pytest.MonkeyPatch, cut: bool
) -> None:
    """An add that finds the stage full writes it first; that write may settle
    the run and bring every sub-pool to one slot again. The add's own step is
    staged after it, so the next add must not take the aligned path (it would
    write its rows before the staged ones). Also where the first such write was
    cut short by a Ctrl-C (the code before 11-29's second change wrote the later
    adds first there: wrong rows)."""

    def twins() -> list[ReplayPool]:  # sub-pools of 10 slots: a stage of 9
        staged = ReplayPool(BOX, spaces.Discrete(2), 3, 30, seed=0)
        with monkeypatch.context() as patch:
            patch.setattr(writers, "STAGE_BYTES", 0)
            plain = ReplayPool(BOX, spaces.Discrete(2), 3, 30, seed=0)
        return [staged, plain]

    pools = twins()
    _add_to(pools, 0.0, np.array([True, False, True]))  # env 1 one row behind
    _add_to(pools, 1.0, np.array([False, True, False]))  # caught up: one slot
    stage = pools[0]._hot.stage
    assert stage is not None
    value = 2.0
    while stage.count < stage.steps:  # full: written by the next add
        _add_to(pools, value)
        value += 1
    if cut:
        _add_cut_short(monkeypatch, pools[0])
        assert stage.count == stage.steps
    for _ in range(3):  # the first writes the stage, which aligns the ring
        _add_to(pools, value)
        value += 1
    _same_pools(*pools)


def test_a_staged_step_of_no_observation_leaf_and_three_action_leaves() -> None:
    """Six stored fields need not be one observation leaf and one action leaf:
    here none and three (a review found the stage's one-leaf writes took them
    for it and raised IndexError)."""

    actions = spaces.Tuple([spaces.Discrete(5)] * 3)
    pool = ReplayPool(spaces.Dict({}), actions, 2, 40, seed=0)
    flags, valid = np.zeros(2, bool), np.array([True, False])
    for step in ([1, 3, 0], [2, 4, 1]):  # env 1's rows not valid: staged, masked
        action = tuple(np.full(2, value) for value in step)
        pool.add({}, action, {}, np.ones(2), flags, flags, valid=valid)
    held = pool.get_pool()
    np.testing.assert_array_equal(np.stack(held.action, axis=1), [[1, 3, 0], [2, 4, 1]])


class _Interrupt(BaseException):
    """Raised where a Ctrl-C could be: at a call, its entry or its return."""


def _interrupted(action: Any, at: int) -> bool:
    """Run ``action()`` raising :class:`_Interrupt` at its ``at``-th call event.

    Python raises a pending signal's exception only at such points (a call, a
    function's entry, a backward jump), so this walks every place a Ctrl-C can
    land in ``action``, one per ``at``. Returns whether it was interrupted."""
    events, live = [0], [False]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if live[0]:
            events[0] += 1
            if events[0] == at:
                live[0] = False
                raise _Interrupt

    sys.setprofile(profile)
    try:
        live[0] = True
        action()
        live[0] = False
    except _Interrupt:
        return True
    finally:
        live[0] = False
        sys.setprofile(None)
    return False


def _filled_twins(monkeypatch: pytest.MonkeyPatch) -> list[ReplayPool]:
    """Twins (staged, at once) with steps staged in the first, masks among them."""
    pools = _twins(monkeypatch)
    rng = np.random.default_rng(5)
    _add_to(pools, 0.0, np.array([True, False, True]))
    for value in range(1, 9):
        _add_to(pools, float(value), (rng.random(3) < 0.7) if value % 3 else None)
    assert pools[0]._hot.stage is not None
    assert pools[0]._hot.stage.count == 9
    return pools


def test_a_ctrl_c_anywhere_in_a_read_that_flushes_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At every point a Ctrl-C can land in the read that writes the staged steps,
    the next read finds the pool as the twin that never staged holds it."""
    at = 0
    while True:
        at += 1
        pools = _filled_twins(monkeypatch)
        if not _interrupted(functools.partial(len, pools[0]), at):
            break
        _add_to(pools, 99.0)
        _same_pools(*pools)
    assert at > 20  # the read was interrupted at every one of its points


def test_a_ctrl_c_anywhere_in_an_add_keeps_it_whole_or_not_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At every point a Ctrl-C can land in an add (staged, with a mask, filling
    the stage so that it flushes, or written at once after a read), the pool
    holds the step whole or not at all, never half-counted."""
    for read_first in (False, True):
        at = 0
        while True:
            at += 1
            pools = _filled_twins(monkeypatch)
            if read_first:
                _ = [len(pool) for pool in pools]  # the next add is written at once
            without = pools[1]
            staged, with_it = pools[0], copy.deepcopy(without)
            valid = np.array([False, True, True])
            _add_to([with_it], 50.0, valid)
            add = functools.partial(_add_to, [staged], 50.0, valid)
            if not _interrupted(add, at):
                break
            _ = len(staged)
            twin = with_it if len(staged) == len(with_it) else without
            _same_pools(staged, twin)
        assert at > 10
