"""Random kills never give a row of another step, of another incarnation, or none.

Workers are SIGKILLed at random moments (:class:`vecpool.testing.WorkerKiller`)
under ``step``, under ``send``/``recv`` batches, with Dict observations, with
``max_concurrency=1``, between timeouts, and under the pool wrapper and the
sampler. :class:`Tracker` checks every row against the last row returned for its
env: a real step (same env, same incarnation, one step further), a reset step, or
the cut of a restart (truncated, reward 0, marked, the last observation seen).
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import signal
import time
import warnings
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import vecpool
from vecpool.testing import (
    IncarnationEnv,
    WorkerKiller,
)

PID = 1  # IncarnationEnv's observation: [env index, pid, step in episode]


# kills at the given pace, never waiting for the restarts to catch up
_killer = functools.partial(WorkerKiller, max_unanswered=10**9)

KILLS_EVERY = (0.3, 0.9)
"""Seconds between kills: a replacement starts through the fork server (a fresh
interpreter, never a fork of this process: issue 38) in 0.15-0.5 s on a 2-CPU
machine (under pytest it imports pytest again), and replacements start one at a
time, so faster kills than that would outrun the restarts (some kills still meet
a replacement as it starts)."""


class DictIncarnationEnv(IncarnationEnv):
    """IncarnationEnv with a Dict observation holding a Tuple and a Discrete."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_space = spaces.Dict(  # type: ignore[assignment]
            {
                "ids": spaces.Box(0, 2**40, shape=(3,), dtype=np.int64),
                "step": spaces.Discrete(100_000),
                "pair": spaces.Tuple(
                    (
                        spaces.Discrete(1_000),
                        spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
                    )
                ),
            }
        )

    def _observe(self) -> Any:
        ids = super()._observe()
        parity = np.full(2, ids[2] % 2, np.float32)
        return {"ids": ids, "step": int(ids[2]), "pair": (int(ids[0]), parity)}


class _DelayedEnv(IncarnationEnv):
    """IncarnationEnv whose steps take ``step_delay`` seconds (set by ``set_attr``)."""

    step_delay = 0.0

    def step(self, action: Any) -> Any:
        time.sleep(self.step_delay)
        return super().step(action)


def _fns(n: int, cls: Any = IncarnationEnv, **kwargs: Any) -> list[Any]:
    return [functools.partial(cls, index=i, **kwargs) for i in range(n)]


# -- the checks ---------------------------------------------------------------------


def _ids(obs: Any) -> np.ndarray:
    """The [index, pid, step] rows of a batch (Box or DictIncarnationEnv's Dict)."""
    if isinstance(obs, dict):
        ids = np.asarray(obs["ids"])
        # the other leaves agree with the ids: never a mix of two rows
        np.testing.assert_array_equal(np.asarray(obs["step"]), ids[:, 2])
        np.testing.assert_array_equal(np.asarray(obs["pair"][0]), ids[:, 0])
        np.testing.assert_array_equal(
            np.asarray(obs["pair"][1])[:, 0], (ids[:, 2] % 2).astype(np.float32)
        )
        return ids
    return np.asarray(obs)


def _row(obs: Any, i: int) -> Any:
    if isinstance(obs, dict):
        return {
            "ids": obs["ids"][i],
            "step": obs["step"][i],
            "pair": (obs["pair"][0][i], obs["pair"][1][i]),
        }
    return obs[i]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return (
            np.array_equal(a["ids"], b["ids"])
            and int(a["step"]) == int(b["step"])
            and int(a["pair"][0]) == int(b["pair"][0])
            and np.array_equal(a["pair"][1], b["pair"][1])
        )
    return bool(np.array_equal(a, b))


class Tracker:
    """Checks each env's rows against the last row returned for it."""

    def __init__(self, mode: str, first_obs: Any, num_envs: int) -> None:
        self.mode = mode
        self.prev = [_row(first_obs, i) for i in range(num_envs)]
        self.ended = np.zeros(num_envs, np.bool_)
        self.cuts = 0

    def check(self, ids: list[int], actions: dict[int, int], result: Any) -> None:
        obs, rewards, terminated, truncated, infos = result
        table = _ids(obs)
        cut = infos.get("worker_restarted", np.zeros(len(ids), np.bool_))
        for row, i in enumerate(ids):
            prev = self.prev[i]
            prev_ids = _ids_row(prev)
            now = _row(obs, row)
            if cut[row]:
                self.cuts += 1
                assert truncated[row], f"env {i}: a cut row not truncated"
                assert not terminated[row]
                assert rewards[row] == 0.0
                if self.mode == "SameStep":
                    final = infos["final_obs"][row]
                    assert _same(_row_of_item(final), prev), f"env {i}: final_obs"
                    assert table[row, 2] == 0
                    assert table[row, PID] != prev_ids[PID]
                else:
                    assert _same(now, prev), (
                        f"env {i}: the cut row's obs {table[row]} is not the last "
                        f"obs returned {prev_ids}"
                    )
            elif self.mode == "NextStep" and self.ended[i]:  # the reset step
                assert table[row, 0] == i
                assert table[row, 2] == 0, f"env {i}: not a reset step"
                assert rewards[row] == 0.0
                assert not terminated[row]
                assert not truncated[row]
            else:
                after = table[row]
                if self.mode == "SameStep" and (terminated[row] or truncated[row]):
                    after = _ids_row(_row_of_item(infos["final_obs"][row]))
                    assert table[row, 2] == 0
                assert after[0] == i, f"row of env {after[0]} returned as env {i}"
                assert after[PID] == prev_ids[PID], f"env {i}: another incarnation"
                assert after[2] == prev_ids[2] + 1, (
                    f"env {i}: a row of another step: {after} after {prev_ids}"
                )
                assert rewards[row] == after[2] + 0.5 * actions[i]
            self.prev[i] = _copy(now)
            self.ended[i] = bool(terminated[row] or truncated[row])

    def reset(self, obs: Any, mask: Any) -> None:
        """The user reset the envs of ``mask`` (``Disabled`` mode) and got ``obs``."""
        table = _ids(obs)
        for i in range(len(mask)):
            if mask[i]:
                assert table[i, 2] == 0, f"env {i}: not reset"
                self.ended[i] = False
            else:  # untouched
                assert _same(_row(obs, i), self.prev[i]), f"env {i}: changed"
            self.prev[i] = _copy(_row(obs, i))


def _ids_row(row: Any) -> np.ndarray:
    return np.asarray(row["ids"] if isinstance(row, dict) else row)


def _row_of_item(item: Any) -> Any:
    if isinstance(item, dict):
        return {
            "ids": np.asarray(item["ids"]),
            "step": item["step"],
            "pair": (item["pair"][0], np.asarray(item["pair"][1])),
        }
    return np.asarray(item)


def _copy(row: Any) -> Any:
    if isinstance(row, dict):
        return {
            "ids": np.array(row["ids"]),
            "step": int(row["step"]),
            "pair": (int(row["pair"][0]), np.array(row["pair"][1])),
        }
    return np.array(row)


# -- step under random kills --------------------------------------------------------


def _stressed_run(env, mode, steps, killer, kills, seed=0, seconds=60.0):
    """Step at least ``steps`` times, and on until ``kills`` kills (``seconds`` at
    most); check every row. Returns the :class:`Tracker`."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    tracker = Tracker(mode, obs, env.num_envs)
    step, deadline = 0, time.monotonic() + seconds
    while step < steps or (killer.kills < kills and time.monotonic() < deadline):
        step += 1
        actions = rng.integers(0, 2, env.num_envs)
        env.step_async(actions)
        result = env.step_wait(timeout=10)  # a hang (a lost permit): TimeoutError
        tracker.check(list(range(env.num_envs)), actions, result)
        if mode == "Disabled" and tracker.ended.any():  # the user resets what ended
            mask = tracker.ended.copy()
            tracker.reset(env.reset(options={"reset_mask": mask})[0], mask)
    return tracker


STRESS_CASES = pytest.mark.parametrize(
    ("context", "mode", "steps", "every"),
    [
        ("fork", "NextStep", 5000, KILLS_EVERY),
        ("fork", "SameStep", 2000, KILLS_EVERY),
        ("fork", "Disabled", 2000, KILLS_EVERY),
        ("spawn", "NextStep", 400, (0.5, 1.5)),
    ],
)
"""Steps at least, and a random worker killed every ``every`` seconds."""


def _stressed_env(make_async, context, mode):
    return make_async(
        _fns(6),
        num_workers=3,
        context=context,
        autoreset_mode=mode,
        on_worker_crash="restart",
        max_restarts=None,
    )


@STRESS_CASES
def test_random_kills_never_give_a_row_of_another_step(
    make_async, context, mode, steps, every
):
    env = _stressed_env(make_async, context, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        with WorkerKiller(env, *every) as killer:
            _stressed_run(env, mode, steps, killer, kills=8)
    assert killer.kills >= 8
    assert sum(env.restarts) >= 5


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_dict_observations_under_random_kills(make_async, shared_memory, mode):
    env = make_async(
        _fns(4, DictIncarnationEnv),
        num_workers=2,
        autoreset_mode=mode,
        shared_memory=shared_memory,
        on_worker_crash="restart",
        max_restarts=None,
    )
    with (
        warnings.catch_warnings(),
        _killer(env, *KILLS_EVERY) as killer,
    ):
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        tracker = _stressed_run(env, mode, 300, killer, kills=8, seed=1, seconds=30)
    assert killer.kills >= 8
    assert tracker.cuts >= 4


def test_max_concurrency_one_under_random_kills_never_hangs(make_async):
    # issue 22, item 6 (was a non-strict xfail, a known limit): a worker killed
    # between taking its permit and marking it held lost the permit; permits are
    # now locks the kernel releases on death (vecpool/_wire/permits.py)
    env = make_async(
        _fns(6),
        num_workers=3,
        max_concurrency=1,
        on_worker_crash="restart",
        max_restarts=None,
    )
    with (
        warnings.catch_warnings(),
        _killer(env, *KILLS_EVERY, seed=5) as killer,
    ):
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        _stressed_run(env, "NextStep", 800, killer, kills=15, seed=5, seconds=30)
    assert killer.kills >= 15


def _set_attr(env: vecpool.AsyncVectorEnv, name: str, values: list[Any]) -> None:
    """``set_attr``, once more if a worker killed after its last answer is found
    dead at its send (the contract: it raises, after the restart)."""
    try:
        env.set_attr(name, values)
    except vecpool.WorkerCrashedError as error:
        if "is lost: call it again" not in str(error):
            raise
        env.set_attr(name, values)


def test_timeouts_and_kills_interleaved_never_give_a_stale_row(make_async):
    env = make_async(
        _fns(4, _DelayedEnv, min_len=1000, max_len=1000),
        num_workers=2,
        on_worker_crash="restart",
        max_restarts=None,
    )
    rng = np.random.default_rng(3)
    obs, _ = env.reset(seed=0)
    tracker = Tracker("NextStep", obs, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        for _ in range(40):
            slow = rng.integers(0, 2, 4).astype(bool)
            _set_attr(env, "step_delay", [0.05 if s else 0.0 for s in slow])
            actions = rng.integers(0, 2, 4)
            env.step_async(actions)
            if rng.random() < 0.4:  # a kill now, waited for
                process = env.processes[int(rng.integers(0, 2))]
                os.kill(process.pid, signal.SIGKILL)
                process.join(10.0)
            try:
                result = env.step_wait(timeout=0.02 if rng.random() < 0.4 else 10)
            except multiprocessing.TimeoutError:
                # given up: envs may have stepped; the tracker only knows the rows
                # returned, so restart its knowledge from a full reset
                obs, _ = env.reset(seed=int(rng.integers(100)))
                tracker = Tracker("NextStep", obs, 4)
                continue
            tracker.check(list(range(4)), dict(enumerate(actions.tolist())), result)
    assert sum(env.restarts) >= 5


# -- send/recv batches under random kills -------------------------------------------


def _batches_under_kills(
    env: vecpool.AsyncVectorEnv,
    mode: str,
    rounds: int,
    every: tuple[float, float],
    kills: int,
    seed: int = 0,
) -> tuple[Tracker, WorkerKiller, int]:
    """Keep every env in flight through ``send``/``recv`` while workers die."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    tracker = Tracker(mode, obs, env.num_envs)
    actions = {i: int(rng.integers(0, 2)) for i in range(env.num_envs)}
    ids = np.arange(env.num_envs)
    env.send(np.array([actions[int(i)] for i in ids]), ids)
    warned = 0
    with (
        warnings.catch_warnings(record=True) as record,
        _killer(env, *every) as k,
    ):
        warnings.simplefilter("always", vecpool.VecPoolWarning)
        done, deadline = 0, time.monotonic() + 30
        while done < rounds or (k.kills < kills and time.monotonic() < deadline):
            done += 1
            result = env.recv(timeout=10)  # a hang guard
            got = result[4]["env_id"].tolist()
            assert env.batch_size is not None
            assert 1 <= len(got) <= env.batch_size
            tracker.check(got, actions, result)
            # never an env lost: all but the ones just returned are still pending
            assert env.pending_env_ids == sorted(set(range(env.num_envs)) - set(got))
            for i in got:
                actions[i] = int(rng.integers(0, 2))
            env.send(np.array([actions[i] for i in got]), got)
        while env.pending_env_ids:  # drain
            result = env.recv(timeout=10)  # a hang guard
            tracker.check(result[4]["env_id"].tolist(), actions, result)
        warned = sum("restarted it" in str(w.message) for w in record)
    return tracker, k, warned


@pytest.mark.parametrize(
    ("mode", "shared_memory", "cls"),
    [
        ("NextStep", True, IncarnationEnv),
        ("NextStep", False, DictIncarnationEnv),
        ("SameStep", True, DictIncarnationEnv),
        ("SameStep", False, IncarnationEnv),
    ],
)
def test_batches_under_random_kills_one_env_per_worker(
    make_async, mode, shared_memory, cls
):
    env = make_async(
        _fns(4, cls),
        num_workers=4,
        batch_size=2,
        autoreset_mode=mode,
        shared_memory=shared_memory,
        on_worker_crash="restart",
        max_restarts=None,
    )
    tracker, killer, warned = _batches_under_kills(
        env, mode, rounds=800, every=KILLS_EVERY, kills=8
    )
    assert killer.kills >= 8
    assert tracker.cuts >= 4
    assert sum(env.restarts) >= 4
    assert warned == sum(env.restarts), "one VecPoolWarning per restart"


@pytest.mark.parametrize("shared_memory", [True, False])
def test_batches_under_random_kills_several_envs_per_worker(make_async, shared_memory):
    env = make_async(
        _fns(6),
        num_workers=2,
        batch_size=2,
        shared_memory=shared_memory,
        on_worker_crash="restart",
        max_restarts=None,
    )
    tracker, killer, _ = _batches_under_kills(
        env, "NextStep", rounds=1500, every=KILLS_EVERY, kills=10
    )
    assert killer.kills >= 10
    assert tracker.cuts >= 4


# -- the pool wrapper and the sampler under random kills ----------------------------


POOL_ROWS = 400_000
"""Rows of each stress run's sub-pools; a run stops stepping before it fills one."""


def _check_pool(pool, real_rows):
    """Every pooled transition is one real step of one env in one incarnation."""
    t = pool.get_pool()
    obs, nxt = t.obs, t.next_obs
    assert int(pool.received.sum()) == real_rows
    # the checks below (episode counts) need every row kept: the runs stop stepping
    # before a sub-pool is full (POOL_ROWS), however fast the machine steps
    assert len(pool) == real_rows
    np.testing.assert_array_equal(nxt[:, 0], obs[:, 0])
    np.testing.assert_array_equal(nxt[:, PID], obs[:, PID])  # never across a cut
    np.testing.assert_array_equal(nxt[:, 2], obs[:, 2] + 1)
    # consecutive transitions of an env continue the episode, or start a new one:
    # after its end, or (a cut) in a new incarnation; never merged across a cut
    for env_index in np.unique(obs[:, 0]).tolist():
        rows = np.flatnonzero(obs[:, 0] == env_index)
        for before, after in itertools.pairwise(rows):
            if t.terminated[before]:
                assert obs[after, 2] == 0
            elif not np.array_equal(obs[after], nxt[before]):
                assert obs[after, 2] == 0, "an episode spans a gap"
                assert obs[after, PID] != obs[before, PID], "a merged episode"
    # cut episodes are aborted, not finished: only terminations end episodes here
    assert pool.episode_stats.count == int(t.terminated.sum())


@STRESS_CASES
def test_the_wrapper_records_only_real_steps_under_random_kills(
    make_async, context, mode, steps, every
):
    inner = _stressed_env(make_async, context, mode)
    envs = vecpool.ReplayPoolWrapper(inner, pool_size=6 * POOL_ROWS)
    rng = np.random.default_rng(0)
    real = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        envs.reset(seed=0)
        ended = np.zeros(6, np.bool_)
        with WorkerKiller(inner, *every) as killer:
            step, deadline = 0, time.monotonic() + 60
            while (
                step < steps or (killer.kills < 8 and time.monotonic() < deadline)
            ) and step < POOL_ROWS - 1:
                step += 1
                _, _, terminated, truncated, infos = envs.step(rng.integers(0, 2, 6))
                cut = infos.get("worker_restarted", np.zeros(6, np.bool_))
                # NextStep: the step after an end is the reset, no transition
                # (a numpy mask: `~` on a Python bool is deprecated from 3.12)
                reset_rows = ended if mode == "NextStep" else np.zeros(6, np.bool_)
                real += int((~cut & ~reset_rows).sum())
                ended = terminated | truncated
                if mode == "Disabled" and ended.any():
                    envs.reset(options={"reset_mask": ended})
                    ended = np.zeros(6, np.bool_)
    assert killer.kills >= 8
    _check_pool(envs.pool, real)


@pytest.mark.parametrize(
    ("context", "every"), [("fork", KILLS_EVERY), ("spawn", (0.5, 1.5))]
)
def test_the_sampler_marks_cut_rows_invalid_under_random_kills(
    make_async, context, every
):
    inner = make_async(
        _fns(6),
        num_workers=3,
        context=context,
        on_worker_crash="restart",
        max_restarts=None,
    )
    pool = vecpool.ReplayPool(
        inner.single_observation_space, inner.single_action_space, 6, 6 * POOL_ROWS
    )
    sampler = vecpool.Sampler(inner, None, batch_T=50, pool=pool, seed=0)
    valid_rows = cut_rows = finished = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        with WorkerKiller(inner, *every) as killer:
            calls, deadline = 0, time.monotonic() + 60
            # 5,000 steps, and on until 8 kills
            while (
                calls < 100 or (killer.kills < 8 and time.monotonic() < deadline)
            ) and calls * 50 < POOL_ROWS - 50:
                calls += 1
                batch, episodes = sampler.obtain_samples()
                valid_rows += int(batch.valid.sum())
                finished += len(episodes)
                # a cut row: truncated, reward 0, invalid
                cut = batch.truncated & ~batch.valid
                cut_rows += int(cut.sum())
                assert (batch.reward[cut] == 0.0).all()
                rows = batch.valid
                np.testing.assert_array_equal(
                    batch.next_obs[rows][:, PID], batch.obs[rows][:, PID]
                )
                np.testing.assert_array_equal(
                    batch.next_obs[rows][:, 2], batch.obs[rows][:, 2] + 1
                )
                for episode in episodes:  # never a cut episode, never a merged one
                    assert 3 <= episode.length <= 12
    assert killer.kills >= 8
    assert cut_rows >= 8
    _check_pool(pool, valid_rows)
    assert finished == pool.episode_stats.count
