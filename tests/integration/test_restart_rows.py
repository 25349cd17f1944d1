"""Consumers of ``worker_restarted`` rows: the wrapper, the sampler and collect.

A fake vector env emits the rows of docs/reliability.md ("The rows that mark the
cut") at chosen steps, in every autoreset mode and in ``send``/``recv`` batches, and
keeps the ground truth: every real step it took and every episode that ended. Its
observation is ``[env, incarnation, step in episode]``, so a recorded transition
that spans a reset or a restart shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

import vecpool
import vecpool.sampling.collect
from vecpool.replay.episodes import complete_episodes
from vecpool.replay.pool import ReplayPool
from vecpool.sampling.sampler import EpisodeRecord, Sampler

MODES = list(AutoresetMode)
OBS_SPACE = spaces.Box(0, 10**6, shape=(3,), dtype=np.int64)
ACTION_SPACE = spaces.Discrete(2)
ENV, INCARNATION, STEP = 0, 1, 2  # the columns of an observation


class _Core:
    """The sub-environments of the fake, and the ground truth of what they did.

    Env ``i`` in incarnation ``c`` plays episodes of ``2 + (i + c + e) % 4`` steps
    (``e`` counts its episodes), terminated when ``i + e`` is even, else truncated;
    the reward of a step is the step reached plus a quarter of the action. Calls are
    counted per env (``step`` and ``recv`` rows, reset steps and cut rows
    included); ``cuts`` holds the ``(env, call)`` pairs whose row marks a worker
    restart, ``reset_cuts`` the ``(reset call, env)`` pairs of envs replaced during
    a reset (reset calls count from 1).
    """

    def __init__(
        self,
        num_envs: int,
        mode: AutoresetMode,
        cuts: Iterable[tuple[int, int]],
        reset_cuts: Iterable[tuple[int, int]],
    ) -> None:
        self.num_envs, self.mode = num_envs, mode
        self.cuts, self.reset_cuts = set(cuts), set(reset_cuts)
        self.incarnation = [0] * num_envs
        self.step_in_episode = [0] * num_envs
        self.episodes = [0] * num_envs
        self.pending = [True] * num_envs  # NEXT_STEP: reset step due; DISABLED: reset
        self.started = [False] * num_envs
        self.calls = [0] * num_envs
        self.resets = 0
        self.last = [self._observe(i) for i in range(num_envs)]
        self.running = [(0.0, 0)] * num_envs
        # the truth
        self.kinds: list[list[str]] = [[] for _ in range(num_envs)]  # per call
        self.real: list[list[tuple[Any, ...]]] = [[] for _ in range(num_envs)]
        self.finished: list[tuple[int, float, int]] = []  # (env, return, length)
        self.cut_episodes = 0

    def _observe(self, i: int) -> np.ndarray:
        return np.array([i, self.incarnation[i], self.step_in_episode[i]], np.int64)

    def _length(self, i: int) -> int:
        return 2 + (i + self.incarnation[i] + self.episodes[i]) % 4

    def _start(self, i: int) -> np.ndarray:
        self.step_in_episode[i] = 0
        self.running[i] = (0.0, 0)
        self.pending[i] = False
        self.started[i] = True
        return self._observe(i)

    def _replace(self, i: int) -> None:
        if self.running[i][1]:
            self.cut_episodes += 1
        self.incarnation[i] += 1
        self.episodes[i] = 0
        self.running[i] = (0.0, 0)

    def reset(self, mask: np.ndarray) -> tuple[np.ndarray, list[dict[str, Any]]]:
        self.resets += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(mask).tolist():
            if (self.resets, i) in self.reset_cuts:
                self._replace(i)
                infos[i] = {"worker_restarted": True}
            self.last[i] = self._start(i)
        return np.stack(self.last), infos

    def step(
        self, i: int, action: int
    ) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One call of env ``i``: its row ``(obs, reward, terminated, truncated,
        info)``."""
        assert self.started[i], f"env {i} stepped before its first reset"
        self.calls[i] += 1
        mode = self.mode
        if (i, self.calls[i]) in self.cuts:
            self.kinds[i].append("cut")
            old = self.last[i]
            self._replace(i)
            info: dict[str, Any] = {"worker_restarted": True}
            if mode is AutoresetMode.SAME_STEP:
                obs = self._start(i)
                info |= {"final_obs": old, "final_info": {}}
            else:  # the last observation; then a reset step or the user's reset
                obs, self.pending[i] = old, True
            self.last[i] = obs
            return obs, 0.0, False, True, info
        if self.pending[i]:
            assert mode is AutoresetMode.NEXT_STEP, f"env {i} stepped without reset"
            self.kinds[i].append("reset")
            self.last[i] = self._start(i)
            return self.last[i], 0.0, False, False, {}
        self.kinds[i].append("real")
        before = self.last[i]
        self.step_in_episode[i] += 1
        step = self.step_in_episode[i]
        reward = step + 0.25 * action
        ended = step >= self._length(i)
        terminated = ended and (i + self.episodes[i]) % 2 == 0
        truncated = ended and not terminated
        obs = self._observe(i)
        self.real[i].append((before, action, obs, reward, terminated, truncated))
        total, length = self.running[i]
        self.running[i] = (total + reward, length + 1)
        info = {}
        if ended:
            self.finished.append((i, *self.running[i]))
            self.episodes[i] += 1
            if mode is AutoresetMode.SAME_STEP:
                info = {"final_obs": obs, "final_info": {}}
                obs = self._start(i)
            else:
                self.pending[i] = True
        self.last[i] = obs
        return obs, reward, terminated, truncated, info


def _batch_infos(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Batch per-row infos as Gymnasium does (arrays plus ``_key`` masks)."""
    count, out = len(rows), dict[str, Any]()
    for position, info in enumerate(rows):
        for key, value in info.items():
            if isinstance(value, dict):  # final_info: this fake's infos are empty
                out.setdefault(key, {})
            else:
                if key not in out:
                    array = np.asarray(value)
                    out[key] = np.zeros((count, *array.shape), array.dtype)
                out[key][position] = value
            out.setdefault(f"_{key}", np.zeros(count, np.bool_))[position] = True
    return out


def _reset_mask(num_envs: int, options: dict[str, Any] | None) -> np.ndarray:
    mask = None if options is None else options.get("reset_mask")
    return np.ones(num_envs, np.bool_) if mask is None else np.asarray(mask, np.bool_)


def _rows(core: _Core, ids: list[int], actions: list[int]) -> tuple[Any, ...]:
    rows = [core.step(i, a) for i, a in zip(ids, actions, strict=True)]
    obs, rewards, terminations, truncations, infos = zip(*rows, strict=True)
    return (
        np.stack(obs),
        np.array(rewards, np.float64),
        np.array(terminations, np.bool_),
        np.array(truncations, np.bool_),
        _batch_infos(list(infos)),
    )


class RestartRowsEnv(VectorEnv[Any, Any, Any]):
    """A lockstep vector env whose rows mark worker restarts at chosen calls."""

    def __init__(
        self,
        num_envs: int,
        mode: AutoresetMode,
        cuts: Iterable[tuple[int, int]] = (),
        reset_cuts: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.num_envs = num_envs
        self.num_workers = 1  # read by collect
        self.core = _Core(num_envs, mode, cuts, reset_cuts)
        self.metadata = {"autoreset_mode": mode}
        self.single_observation_space = OBS_SPACE
        self.single_action_space = ACTION_SPACE
        self.observation_space = batch_space(OBS_SPACE, num_envs)
        self.action_space = batch_space(ACTION_SPACE, num_envs)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        obs, infos = self.core.reset(_reset_mask(self.num_envs, options))
        return obs, _batch_infos(infos)

    def step(self, actions: Any) -> tuple[Any, ...]:
        return _rows(
            self.core, list(range(self.num_envs)), np.asarray(actions).tolist()
        )

    def close_extras(self, **kwargs: Any) -> None:
        pass


class BatchedRestartRowsEnv(vecpool.AsyncVectorEnv):
    """The same envs behind ``send``/``recv`` (no processes: ``__init__`` is ours).

    ``recv`` returns up to ``batch_size`` of the envs in flight, picked at random.
    """

    def __init__(  # no workers: the base class's __init__ is not called
        self,
        num_envs: int,
        mode: AutoresetMode,
        batch_size: int,
        cuts: Iterable[tuple[int, int]] = (),
        seed: int = 0,
    ) -> None:
        self.num_envs, self.batch_size = num_envs, batch_size
        self.core = _Core(num_envs, mode, cuts, ())
        self.metadata = {"autoreset_mode": mode}
        self.single_observation_space = OBS_SPACE
        self.single_action_space = ACTION_SPACE
        self.observation_space = batch_space(OBS_SPACE, num_envs)
        self.action_space = batch_space(ACTION_SPACE, num_envs)
        self.flight: dict[int, int] = {}
        self.rng = np.random.default_rng(seed)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        assert not self.flight, "reset with envs in flight"
        obs, infos = self.core.reset(_reset_mask(self.num_envs, options))
        return obs, _batch_infos(infos)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        for i, action in zip(
            np.asarray(env_ids).tolist(), np.asarray(actions).tolist(), strict=True
        ):
            assert i not in self.flight
            self.flight[i] = action

    def recv(self, timeout: float | None = None) -> Any:
        ready = list(self.flight)
        self.rng.shuffle(ready)
        ids = ready[: self.batch_size]
        result = _rows(self.core, ids, [self.flight.pop(i) for i in ids])
        result[4]["env_id"] = np.array(ids, np.int64)
        return result

    def close_extras(self, timeout: float | None = None, terminate: bool = False):
        pass


def _cuts(
    num_envs: int, calls: int, seed: int, rate: float = 0.1
) -> set[tuple[int, int]]:
    """Random cuts, plus a cut at the first call and two cuts in a row."""
    draws = np.random.default_rng(seed).random((num_envs, calls)) < rate
    cuts = {(int(i), int(k) + 1) for i, k in zip(*np.nonzero(draws), strict=True)}
    return cuts | {(0, 1), (1, 5), (1, 6)}


# -- checks --------------------------------------------------------------------------


def _check_transition(obs, action, next_obs, reward, terminated, truncated):
    assert next_obs[ENV] == obs[ENV]
    assert next_obs[INCARNATION] == obs[INCARNATION], "a transition spans a restart"
    assert next_obs[STEP] == obs[STEP] + 1, "a transition spans a reset"
    assert reward == next_obs[STEP] + 0.25 * action
    assert not (terminated and truncated)


def _check_pool(pool: ReplayPool, core: _Core) -> None:
    """The pool holds exactly the real steps, in order, and their episodes."""
    assert len(pool) == sum(len(real) for real in core.real)
    everything = pool.get_pool()
    start = 0
    for i, length in enumerate(pool.lengths.tolist()):
        rows = range(start, start + length)
        start += length
        got = [
            (
                everything.obs[r].tolist(),
                int(everything.action[r]),
                everything.next_obs[r].tolist(),
                float(everything.reward[r]),
                bool(everything.terminated[r]),
                bool(everything.truncated[r]),
            )
            for r in rows
        ]
        for transition in got:
            _check_transition(*transition)
        want = [
            (o.tolist(), a, n.tolist(), r, te, tr)
            for o, a, n, r, te, tr in core.real[i]
        ]
        assert got == want
    stats = pool.episode_stats
    assert stats.count == len(core.finished)
    if core.finished:
        returns = [total for _, total, _ in core.finished]
        lengths = [length for _, _, length in core.finished]
        assert stats.mean_return == pytest.approx(np.mean(returns))
        assert stats.mean_length == pytest.approx(np.mean(lengths))
    episodes, _ = complete_episodes(pool)
    assert len(episodes) == len(core.finished)
    for episode in episodes:
        assert len(set(episode.observations[:, INCARNATION].tolist())) == 1
        assert episode.observations[:, STEP].tolist() == list(range(len(episode) + 1))


# -- the wrapper ----------------------------------------------------------------------


def _drive_wrapper(envs: vecpool.ReplayPoolWrapper, steps: int, rng) -> None:
    disabled = envs.autoreset_mode is AutoresetMode.DISABLED
    for _ in range(steps):
        actions = rng.integers(0, 2, envs.num_envs)
        _, _, terminations, truncations, _ = envs.step(actions)
        ended = terminations | truncations
        if disabled and ended.any():
            envs.reset(options={"reset_mask": ended})


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_the_wrapper_records_only_real_steps(mode, seed):
    env = RestartRowsEnv(4, mode, _cuts(4, 200, seed))
    envs = vecpool.ReplayPoolWrapper(env, pool_size=10_000)
    envs.reset(seed=seed)
    _drive_wrapper(envs, 200, np.random.default_rng(seed))
    assert env.core.cut_episodes > 10  # the cuts did cut episodes
    _check_pool(envs.pool, env.core)


@pytest.mark.parametrize("mode", MODES)
def test_a_reset_aborts_the_episodes_in_progress(mode):
    """A full reset mid-episode (one env replaced in it) merges no episodes."""
    every_reset = {(r, r % 3) for r in range(2, 1000)}  # the first reset excepted
    env = RestartRowsEnv(3, mode, _cuts(3, 120, 7), reset_cuts=every_reset)
    envs = vecpool.ReplayPoolWrapper(env, pool_size=10_000)
    rng = np.random.default_rng(7)
    envs.reset(seed=0)
    for _ in range(3):
        _drive_wrapper(envs, 40, rng)
        _, infos = envs.reset()
        assert infos["worker_restarted"].sum() == 1
    _check_pool(envs.pool, env.core)


def test_a_masked_reset_that_replaces_an_env_aborts_its_episode():
    env = RestartRowsEnv(3, AutoresetMode.DISABLED, reset_cuts={(2, 0)})
    envs = vecpool.ReplayPoolWrapper(env, pool_size=100)
    envs.reset(seed=0)
    envs.step(np.zeros(3, np.int64))  # every env one step into its episode
    _, infos = envs.reset(options={"reset_mask": np.array([True, False, False])})
    assert infos["worker_restarted"].tolist() == [True, False, False]
    for _ in range(6):
        _, _, terminations, truncations, _ = envs.step(np.ones(3, np.int64))
        ended = terminations | truncations
        if ended.any():
            envs.reset(options={"reset_mask": ended})
    _check_pool(envs.pool, env.core)


@pytest.mark.parametrize("mode", MODES)
def test_a_cut_row_is_recorded_as_nothing(mode):
    """Row by row: the cut row adds nothing and aborts the episode."""
    env = RestartRowsEnv(2, mode, cuts={(1, 2)})
    envs = vecpool.ReplayPoolWrapper(env, pool_size=100)
    envs.reset(seed=0)
    envs.step(np.zeros(2, np.int64))
    obs, rewards, terminations, truncations, infos = envs.step(np.zeros(2, np.int64))
    assert infos["worker_restarted"].tolist() == [False, True]
    assert infos["_worker_restarted"].tolist() == [False, True]
    assert (rewards[1], terminations[1], truncations[1]) == (0.0, False, True)
    assert envs.pool.lengths.tolist() == [2, 1]
    if mode is AutoresetMode.SAME_STEP:
        assert obs[1].tolist() == [1, 1, 0]  # the new env's first observation
        assert infos["final_obs"][1].tolist() == [1, 0, 1]
    else:
        assert obs[1].tolist() == [1, 0, 1]  # the last observation
    _check_pool(envs.pool, env.core)


# -- the sampler ----------------------------------------------------------------------


def _check_batch_row(batch, t: int, b: int) -> None:
    """Row ``t`` of column ``b`` of a sample batch is one real step."""
    _check_transition(
        batch.obs[t, b],
        batch.action[t, b],
        batch.next_obs[t, b],
        batch.reward[t, b],
        batch.terminated[t, b],
        batch.truncated[t, b],
    )


def _check_batch(batch, kinds: list[list[str]], first_call: list[int]) -> None:
    """``valid`` is exactly the real rows; every valid row is one real step."""
    steps, count = batch.valid.shape
    for b in range(count):
        calls = kinds[b][first_call[b] : first_call[b] + steps]
        assert batch.valid[:, b].tolist() == [kind == "real" for kind in calls]
        for t in range(steps):
            if calls[t] == "cut":
                assert batch.truncated[t, b]
                assert batch.reward[t, b] == 0.0
            if batch.valid[t, b]:
                _check_batch_row(batch, t, b)


def _run_sampler(sampler: Sampler, core: _Core, calls: int) -> list[EpisodeRecord]:
    records = []
    while min(core.calls) < calls:
        first_call = list(core.calls)
        batch, episodes = sampler.obtain_samples()
        _check_batch(batch, core.kinds, first_call)
        records += episodes
    return records


def _check_records(records: list[EpisodeRecord], core: _Core) -> None:
    for i in range(core.num_envs):
        got = [(r.return_, r.length) for r in records if r.env_index == i]
        want = [(total, length) for env, total, length in core.finished if env == i]
        assert got == want  # sums of quarters: exact


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_the_sampler_marks_cut_rows_invalid(mode, seed):
    env = RestartRowsEnv(4, mode, _cuts(4, 200, seed))
    pool = ReplayPool(OBS_SPACE, ACTION_SPACE, 4, 10_000)
    sampler = Sampler(env, None, batch_T=7, pool=pool, seed=seed)
    records = _run_sampler(sampler, env.core, 200)
    assert env.core.cut_episodes > 10
    _check_records(records, env.core)
    _check_pool(pool, env.core)


@pytest.mark.parametrize("mode", MODES)
def test_a_sampler_reset_aborts_the_pool_episodes_in_progress(mode):
    every_reset = {(r, r % 3) for r in range(2, 1000)}
    env = RestartRowsEnv(3, mode, _cuts(3, 100, 8), reset_cuts=every_reset)
    pool = ReplayPool(OBS_SPACE, ACTION_SPACE, 3, 10_000)
    sampler = Sampler(env, None, batch_T=9, pool=pool, seed=8)
    records: list[EpisodeRecord] = []
    for _ in range(10):
        records += _run_sampler(sampler, env.core, min(env.core.calls) + 1)
        sampler.reset()  # mid-episode, one env replaced in it
    _check_records(records, env.core)
    _check_pool(pool, env.core)


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("mode", MODES)
def test_the_sampler_marks_cut_rows_invalid_in_send_recv_batches(mode, batch_size):
    env = BatchedRestartRowsEnv(5, mode, batch_size, _cuts(5, 150, 3), seed=3)
    pool = ReplayPool(OBS_SPACE, ACTION_SPACE, 5, 10_000)
    sampler = Sampler(env, None, batch_T=6, pool=pool, seed=3)
    assert sampler._alternate  # the send/recv path
    records = _run_sampler(sampler, env.core, 150)
    assert env.core.cut_episodes > 10
    _check_records(records, env.core)
    _check_pool(pool, env.core)


@pytest.mark.parametrize("batched", [False, True])
def test_wait_reset_parks_a_cut_env_like_an_ended_one(batched):
    mode = AutoresetMode.DISABLED
    cuts = _cuts(4, 100, 5, rate=0.15)
    env: VectorEnv[Any, Any, Any] = (
        BatchedRestartRowsEnv(4, mode, 2, cuts)
        if batched
        else RestartRowsEnv(4, mode, cuts)
    )
    sampler = Sampler(env, None, batch_T=8, wait_reset=True, seed=5)
    core = env.core  # type: ignore[attr-defined]
    while min(core.calls) < 100:
        batch, _ = sampler.obtain_samples()
        for b in range(4):
            column = batch.terminated[:, b] | batch.truncated[:, b]
            ends = np.flatnonzero(column)
            if ends.size:  # after its first end, an env waits for the batch end
                assert ends.size == 1
                assert not batch.valid[ends[0] + 1 :, b].any()
                waiting = batch.obs[ends[0] + 1 :, b]
                assert (waiting == batch.next_obs[ends[0], b]).all()
            for t in np.flatnonzero(batch.valid[:, b]).tolist():
                _check_batch_row(batch, t, b)
    assert core.cut_episodes > 5


@pytest.mark.parametrize("mode", MODES)
def test_evaluate_drops_cut_episodes(mode):
    env = RestartRowsEnv(3, mode, _cuts(3, 150, 11))
    sampler = Sampler(env, None, batch_T=5, seed=11)
    records = sampler.evaluate(max_steps=150)
    assert env.core.cut_episodes > 5
    _check_records(records, env.core)


# -- collect --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_collect_counts_neither_the_rows_nor_the_cut_episodes(mode, monkeypatch):
    made: list[RestartRowsEnv] = []

    def make_vec(env_id, num_envs, vector_kwargs):
        env = RestartRowsEnv(
            num_envs, vector_kwargs["autoreset_mode"], _cuts(3, 200, 4)
        )
        made.append(env)
        return env

    monkeypatch.setattr(vecpool.sampling.collect, "make_vec", make_vec)
    result = vecpool.sampling.collect.collect(
        "Fake-v0",
        num_envs=3,
        steps=600,
        pool_size=10_000,
        out=None,
        autoreset_mode=mode,
        seed=0,
    )
    core = made[0].core
    assert core.cut_episodes > 10
    assert result.transitions == sum(len(real) for real in core.real)
    assert list(result.episode_returns) == [total for _, total, _ in core.finished]
    assert list(result.episode_lengths) == [n for _, _, n in core.finished]
    assert result.episodes == result.pool.episode_stats.count
    _check_pool(result.pool, core)


def test_the_fake_rejects_a_step_without_reset():
    """The fake catches a consumer that steps an ended DISABLED env."""
    env = RestartRowsEnv(1, AutoresetMode.DISABLED, cuts={(0, 1)})
    env.reset()
    env.step(np.zeros(1, np.int64))
    with pytest.raises(AssertionError, match="without reset"):
        env.step(np.zeros(1, np.int64))
