"""Fault tests of worker restart (``on_worker_crash="restart"``).

Kills at awkward moments: random SIGKILLs under ``send``/``recv`` batches, in pipe
mode and with Dict observations, during reset, the env-state calls and close, with
timeouts, with ``max_concurrency=1``, under Gymnasium wrappers, at garbage
collection and interpreter exit; and a deterministic replay of the same crashes.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` reproduce a known bug: each
one passes once the bug is fixed (then remove the mark).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool.testing import (
    CountingEnv,
    DeliberateError,
    IncarnationEnv,
    SlowEnv,
    WorkerKiller,
)

PID = 1  # IncarnationEnv's observation: [env index, pid, step in episode]
# kills at the given pace, never waiting for the restarts to catch up
_killer = functools.partial(WorkerKiller, max_unanswered=10**9)


# ----------------------------------------------------------------------- helpers


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


class SlowStateEnv(CountingEnv):
    """CountingEnv whose state calls take ``delay`` seconds (a window to kill in)."""

    delay = 0.4

    def get_state(self) -> dict[str, Any]:
        time.sleep(self.delay)
        return super().get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        time.sleep(self.delay)
        super().set_state(state)


class SlowCloseEnv(IncarnationEnv):
    """IncarnationEnv whose ``close`` takes 0.5 s."""

    def close(self) -> None:
        time.sleep(0.5)


class BuildGate(IncarnationEnv):
    """IncarnationEnv whose constructor sleeps (``slow``), dies (``die``) or then
    raises (``refuse``) once the marker file exists; its steps take ``step_delay``
    seconds."""

    def __init__(
        self,
        marker: str = "",
        slow: float = 0.0,
        die: bool = False,
        step_delay: float = 0.0,
        refuse: bool = False,
        **kwargs: Any,
    ) -> None:
        if marker and os.path.exists(marker):
            if die:
                os._exit(7)
            time.sleep(slow)
            if refuse:
                msg = "this constructor refuses in the replacement"
                raise RuntimeError(msg)
        super().__init__(**kwargs)
        self.step_delay = step_delay

    def step(self, action: Any) -> Any:
        time.sleep(self.step_delay)
        return super().step(action)


def _fns(n: int, cls: Any = IncarnationEnv, **kwargs: Any) -> list[Any]:
    return [functools.partial(cls, index=i, **kwargs) for i in range(n)]


def _kill(env: vecpool.AsyncVectorEnv, worker: int) -> None:
    process = env.processes[worker]
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10.0)


def _step_times_out_while_worker_1_restarts(
    env: vecpool.AsyncVectorEnv, timeout: float
) -> None:
    """Kill worker 1 in a step whose ``step_wait(timeout)`` then gives up."""
    env.step_async(np.zeros(4, np.int64))
    time.sleep(0.05)
    _kill(env, 1)
    with pytest.raises(multiprocessing.TimeoutError):
        env.step_wait(timeout=timeout)


def _kill_later(env: vecpool.AsyncVectorEnv, worker: int, delay: float) -> Any:
    pid = env.processes[worker].pid
    timer = threading.Timer(delay, os.kill, (pid, signal.SIGKILL))
    timer.start()
    return timer


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
        done, deadline = 0, time.monotonic() + 10
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


# ------------------------------------------------- 1, 2: send/recv under random kills


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
        env, mode, rounds=800, every=(0.01, 0.04), kills=8
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
        env, "NextStep", rounds=1500, every=(0.005, 0.03), kills=10
    )
    assert killer.kills >= 10
    assert tracker.cuts >= 4


def test_a_worker_found_dead_at_send_still_answers_its_in_flight_batch(make_async):
    env = make_async(
        _fns(4, BuildGate, step_delay=0.3),
        num_workers=2,
        batch_size=1,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    env.send(np.zeros(1, np.int64), [2])  # in flight on worker 1 (0.3 s)
    time.sleep(0.05)
    _kill(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(1, np.int64), [3])  # finds worker 1 dead
        got = set()
        deadline = time.monotonic() + 30
        while env.pending_env_ids and time.monotonic() < deadline:
            # TimeoutError: lost (a hang guard, not a speed claim)
            _, _, _, truncated, infos = env.recv(timeout=10)
            got.update(infos["env_id"].tolist())
            assert truncated.all()
    assert got == {2, 3}


def _ready_not_returned(make_async, shared_memory):
    """Env 3 answered and waiting in ``ready`` when its worker is killed."""
    env = make_async(
        _fns(4, min_len=50, max_len=50),
        num_workers=2,
        batch_size=2,
        shared_memory=shared_memory,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    for i in (0, 2, 3):  # one batch each
        env.send(np.zeros(1, np.int64), [i])
    time.sleep(0.3)  # all three answered: recv absorbs them, returns two
    *_, infos = env.recv(timeout=10)  # a hang guard
    assert infos["env_id"].tolist() == [0, 2]
    assert env.pending_env_ids == [3]
    _kill(env, 1)  # hosts envs 2, 3
    return env


def test_the_cut_of_an_env_whose_row_waited_in_ready_is_its_last_obs(make_async):
    env = _ready_not_returned(make_async, shared_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(1, np.int64), [2])  # restarts worker 1
        obs, _, _, _, infos = env.recv(timeout=10)  # a hang guard
        assert infos["env_id"].tolist() == [3, 2]
        last3 = obs[0].copy()
        np.testing.assert_array_equal(last3[[0, 2]], [3, 1])  # its real step 1
        env.send(np.zeros(1, np.int64), [3])
        obs, _, _, truncated, infos = env.recv(timeout=10)  # a hang guard
    assert infos["worker_restarted"].tolist() == [True]
    assert truncated.tolist() == [True]
    np.testing.assert_array_equal(obs[0], last3)  # NEXT_STEP: the last obs seen


def test_pipe_mode_a_ready_row_is_not_overwritten_by_a_replacement(make_async):
    env = _ready_not_returned(make_async, shared_memory=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(1, np.int64), [2])  # restarts worker 1
        obs, rewards, _, truncated, infos = env.recv(timeout=10)  # a hang guard
    assert infos["env_id"].tolist() == [3, 2]
    assert truncated.tolist() == [False, True]
    assert rewards[0] == 1.0  # env 3's real first step ...
    np.testing.assert_array_equal(obs[0][[0, 2]], [3, 1])  # ... and its obs


# -------------------------------------------------- 2: Dict obs, step mode, kills


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
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=1)
    tracker = Tracker(mode, obs, 4)
    with (
        warnings.catch_warnings(),
        _killer(env, 0.01, 0.04) as killer,
    ):
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        step, deadline = 0, time.monotonic() + 10
        while step < 300 or (killer.kills < 8 and time.monotonic() < deadline):
            step += 1
            actions = rng.integers(0, 2, 4)
            env.step_async(actions)
            result = env.step_wait(timeout=10)
            tracker.check(list(range(4)), dict(enumerate(actions.tolist())), result)
    assert killer.kills >= 8
    assert tracker.cuts >= 4


# ------------------------------------------------------ 3: reset, state calls, close


def test_a_kill_during_reset_reruns_it_with_the_call_seeds(make_async):
    kwargs = {"num_workers": 2}
    fns = [functools.partial(SlowEnv, reset_delay=0.4)] * 4
    env = make_async(fns, on_worker_crash="restart", **kwargs)
    ref = make_async([SlowEnv] * 4, **kwargs)
    env.reset(seed=1)
    for _ in range(3):
        env.step(np.zeros((4, 1), np.float32))
    timer = _kill_later(env, 1, 0.2)
    with pytest.warns(vecpool.VecPoolWarning, match="while running `reset`"):
        obs, infos = env.reset(seed=[5, 6, 7, 8])
    timer.join()
    expected, _ = ref.reset(seed=[5, 6, 7, 8])
    np.testing.assert_array_equal(obs, expected)
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    assert env.restarts == (0, 1)
    obs, _, _, truncated, infos = env.step(np.zeros((4, 1), np.float32))
    assert "worker_restarted" not in infos  # the reset was the cut
    assert not truncated.any()
    np.testing.assert_array_equal(obs, ref.step(np.zeros((4, 1), np.float32))[0])


def test_a_kill_during_a_masked_reset_cuts_the_unmasked_env_at_its_next_step(
    make_async,
):
    fns = [functools.partial(SlowEnv, reset_delay=0.4)] * 4
    env = make_async(fns, num_workers=2, on_worker_crash="restart")
    env.reset(seed=1)
    last, *_ = env.step(np.zeros((4, 1), np.float32))
    mask = np.array([False, False, True, False])
    timer = _kill_later(env, 1, 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        obs, infos = env.reset(seed=9, options={"reset_mask": mask})
    timer.join()
    assert env.restarts == (0, 1)
    assert infos["worker_restarted"].tolist() == [False, False, True, False]
    assert obs[2, 0] == 0  # reset
    np.testing.assert_array_equal(obs[[0, 1, 3]], last[[0, 1, 3]])  # untouched
    obs2, rewards, _, truncated, infos = env.step(np.zeros((4, 1), np.float32))
    # env 3 was not reset: its new incarnation marks the cut now
    assert infos["worker_restarted"].tolist() == [False, False, False, True]
    assert truncated.tolist() == [False, False, False, True]
    assert rewards[3] == 0.0
    np.testing.assert_array_equal(obs2[3], last[3])
    assert obs2[2, 0] == 1  # env 2 steps on from its reset


@pytest.mark.parametrize("method", ["get_states", "set_states", "step_from"])
def test_a_kill_during_a_state_call_raises_and_the_env_stays_usable(make_async, method):
    env = make_async([SlowStateEnv] * 4, num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    states = env.get_states()  # (each state call takes SlowStateEnv.delay s)
    last, *_ = env.step(np.ones(4, np.int64))
    run = {
        "get_states": env.get_states,
        "set_states": functools.partial(env.set_states, states),
        "step_from": functools.partial(env.step_from, states, np.ones(4, np.int64)),
    }[method]
    timer = _kill_later(env, 0, 0.2)  # during the first env's state call
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", vecpool.VecPoolWarning)
        with pytest.raises(vecpool.WorkerCrashedError, match=f"result of `{method}`"):
            run()
    assert [f"while running `{method}`" in str(w.message) for w in record] == [True]
    timer.join()
    assert env.restarts == (1, 0)
    assert len(env.get_states([1, 2])) == 2  # usable
    obs, rewards, _, truncated, infos = env.step(np.ones(4, np.int64))
    assert infos["worker_restarted"].tolist() == [True, True, False, False]
    assert truncated[:2].all()
    np.testing.assert_array_equal(rewards[:2], [0.0, 0.0])
    np.testing.assert_array_equal(obs[:2], last[:2])


@pytest.mark.timeout(60)  # a hang guard: a close() that waited out CLOSE_GRACE
def test_a_kill_during_close_returns_promptly_and_leaks_nothing(
    leak_checker, monkeypatch
):
    # a long CLOSE_GRACE: a close() that ignored its timeout would far exceed the
    # test's timeout (by name: `vecpool.vector.async_env` loads on first use)
    monkeypatch.setattr("vecpool.vector.async_env.CLOSE_GRACE", 120.0)
    env = vecpool.AsyncVectorEnv(
        _fns(4, SlowCloseEnv), num_workers=2, on_worker_crash="restart"
    )
    env.reset(seed=0)
    _kill(env, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.step(np.zeros(4, np.int64))  # restart 1
    timer = _kill_later(env, 1, 0.2)  # while its envs close (0.5 s each)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.close(timeout=3)
    timer.join()
    assert env.closed
    assert not any(process.is_alive() for process in env.processes)
    assert env.restarts == (1, 0)  # close never restarts
    leak_checker.assert_no_leaks()


@pytest.mark.timeout(60)  # a hang guard: a close() that waited out CLOSE_GRACE
def test_close_with_a_pending_step_and_a_dead_worker_leaks_nothing(
    leak_checker, monkeypatch
):
    # a long CLOSE_GRACE: a close() that ignored its timeout would far exceed the
    # test's timeout (by name: `vecpool.vector.async_env` loads on first use)
    monkeypatch.setattr("vecpool.vector.async_env.CLOSE_GRACE", 120.0)
    env = vecpool.AsyncVectorEnv(
        _fns(4, BuildGate, step_delay=0.3), num_workers=2, on_worker_crash="restart"
    )
    env.reset(seed=0)
    env.step_async(np.zeros(4, np.int64))
    time.sleep(0.05)
    _kill(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.close(timeout=2)
    assert env.closed
    assert not any(process.is_alive() for process in env.processes)
    leak_checker.assert_no_leaks()


def _slow_rebuild_env(make_async, tmp_path, slow):
    marker = str(tmp_path / "slow")
    env = make_async(
        _fns(4, BuildGate, marker=marker, slow=slow, step_delay=0.3),
        num_workers=2,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    Path(marker).touch()  # replacements now take `slow` s per env to build
    env.step_async(np.zeros(4, np.int64))
    time.sleep(0.05)
    _kill(env, 1)
    return env


@pytest.mark.timeout(30)  # a hang guard: waiting for the replacement takes 60 s
def test_close_is_prompt_when_the_replacement_builds_slowly(make_async, tmp_path):
    # a replacement would take 2 x 30 s to build: waiting for it far exceeds the
    # test's timeout
    env = _slow_rebuild_env(make_async, tmp_path, slow=30.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.close(timeout=0.5)
    assert env.closed
    assert not any(process.is_alive() for process in env.processes)


# ------------------------------------------------------------------ 4: timeouts


@pytest.mark.timeout(30)  # a hang guard: waiting for the replacement takes 60 s
def test_step_wait_timeout_holds_while_a_replacement_builds(make_async, tmp_path):
    # issue 22, item 6 (was a strict xfail): the start-up wait had no deadline
    # the replacement takes 2 x 30 s to build: waiting for it exceeds the test's
    # timeout (the close at teardown gives up on it, as the test above shows)
    env = _slow_rebuild_env(make_async, tmp_path, slow=30.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.5)


def test_the_call_after_a_timed_out_start_finishes_the_restart(make_async, tmp_path):
    # the replacement takes 2 x 1 s to build: the first step_wait gives up on it,
    # the next step waits for its start-up reply, then shows the cut rows
    env = _slow_rebuild_env(make_async, tmp_path, slow=1.0)
    last = env.observations.copy()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", vecpool.VecPoolWarning)
        with pytest.raises(multiprocessing.TimeoutError, match="`step_wait`"):
            env.step_wait(timeout=0.2)
        assert record == []  # not restarted yet: its envs are still being built
        env.step_async(np.ones(4, np.int64))
        obs, _, _, truncated, infos = env.step_wait(timeout=60)
    assert [str(w.message) for w in record if "restarted it" in str(w.message)]
    assert len(record) == 1
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    assert truncated[2:].all()
    np.testing.assert_array_equal(obs[2:], last[2:])  # the last obs returned
    obs, _, _, _, infos = env.step(np.ones(4, np.int64))
    assert "worker_restarted" not in infos
    np.testing.assert_array_equal(obs[2:, 2], [0, 0])  # NEXT_STEP: its reset step


@pytest.mark.parametrize("then", ["reset", "close"])
def test_a_reset_or_close_after_a_timed_out_start(then, make_async, tmp_path):
    env = _slow_rebuild_env(make_async, tmp_path, slow=1.0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", vecpool.VecPoolWarning)
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.2)
        if then == "close":
            env.close(timeout=30)
            assert env.closed
            return
        obs, infos = env.reset(seed=5)
    assert len([w for w in record if "restarted it" in str(w.message)]) == 1
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    np.testing.assert_array_equal(obs[:, 2], [0, 0, 0, 0])
    env.step(np.ones(4, np.int64))


def test_recv_after_a_timed_out_start_collects_the_owed_batches(make_async, tmp_path):
    # found by a review: the old worker's `send` batches were never re-sent to a
    # replacement whose start timed out, so a later recv() waited for ever
    marker = str(tmp_path / "slow")
    env = make_async(
        _fns(4, BuildGate, marker=marker, slow=0.5, step_delay=0.2),
        num_workers=2,
        batch_size=4,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    Path(marker).touch()
    env.send(np.zeros(4, np.int64))
    time.sleep(0.05)
    _kill(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        with pytest.raises(multiprocessing.TimeoutError):
            env.recv(timeout=0.1)
        *_, truncated, infos = env.recv(timeout=60)  # a hang guard
    order = np.argsort(infos["env_id"])
    assert infos["env_id"][order].tolist() == [0, 1, 2, 3]
    assert infos["worker_restarted"][order].tolist() == [False, False, True, True]
    assert truncated[order].tolist() == [False, False, True, True]


def test_cut_rows_read_by_a_call_that_gives_up_are_shown_again(make_async, tmp_path):
    # found by a review: the call after a timed-out start read the replacement's
    # cut rows, then timed out on a slow healthy worker; the next step showed the
    # new incarnation's rows unmarked
    marker = str(tmp_path / "slow")
    env = make_async(
        _fns(4, BuildGate, marker=marker, slow=0.25, min_len=50, max_len=50),
        num_workers=2,
        on_worker_crash="restart",
    )
    last, _ = env.reset(seed=0)
    env.set_attr("step_delay", [1.0, 1.0, 0.1, 0.1])  # worker 0 is slow
    Path(marker).touch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        _step_times_out_while_worker_1_restarts(env, 0.2)
        env.step_async(np.zeros(4, np.int64))
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.8)  # its cut rows came; worker 0's did not
        env.step_async(np.zeros(4, np.int64))
        obs, _, _, truncated, infos = env.step_wait(timeout=60)
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    assert truncated.tolist() == [False, False, True, True]
    np.testing.assert_array_equal(obs[2:], last[2:])  # the last obs returned


def test_a_timed_out_step_is_not_resent_so_batches_show_the_cut(make_async, tmp_path):
    # found by a review of the fix above: re-sending the step that timed out used
    # up the replacement's cut row, and the `recv` after it returned the new
    # incarnation's rows unmarked
    marker = str(tmp_path / "slow")
    env = make_async(
        _fns(
            4,
            BuildGate,
            marker=marker,
            slow=0.5,
            step_delay=0.1,
            min_len=50,
            max_len=50,
        ),
        num_workers=2,
        batch_size=4,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    Path(marker).touch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        _step_times_out_while_worker_1_restarts(env, 0.1)
        env.send(np.zeros(4, np.int64), np.arange(4))
        *_, truncated, infos = env.recv(timeout=60)
    order = np.argsort(infos["env_id"])
    assert infos["worker_restarted"][order].tolist() == [False, False, True, True]
    assert truncated[order].tolist() == [False, False, True, True]


@pytest.mark.parametrize("max_restarts", [1, 3])
def test_a_constructor_error_after_a_timed_out_start_is_raised(
    max_restarts, make_async, tmp_path
):
    # found by a review: with no restart left, the replacement's exit (after its
    # constructor raised) came out as "died with exit code 0"
    marker = str(tmp_path / "slow")
    env = make_async(
        _fns(4, BuildGate, marker=marker, slow=0.5, refuse=True, step_delay=0.1),
        num_workers=2,
        on_worker_crash="restart",
        max_restarts=max_restarts,
    )
    env.reset(seed=0)
    Path(marker).touch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the restart's and Gymnasium's logs
        _step_times_out_while_worker_1_restarts(env, 0.1)
        env.step_async(np.zeros(4, np.int64))
        with pytest.raises(RuntimeError, match="refuses in the replacement"):
            env.step_wait(timeout=60)
        with pytest.raises(vecpool.errors.WorkerCrashedError, match="could not start"):
            env.step(np.zeros(4, np.int64))


def test_a_kill_after_a_step_timeout_cuts_from_the_last_returned_obs(make_async):
    env = make_async(
        _fns(4, BuildGate, min_len=50, max_len=50),
        num_workers=2,
        on_worker_crash="restart",
    )
    last, _ = env.reset(seed=0)
    env.set_attr("step_delay", [0.0, 0.0, 1.0, 1.0])
    env.step_async(np.zeros(4, np.int64))
    with pytest.raises(multiprocessing.TimeoutError):
        env.step_wait(timeout=0.2)
    _kill(env, 1)  # the abandoned step never answers
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", vecpool.VecPoolWarning)
        env.step_async(np.ones(4, np.int64))
        obs, _, _, _, infos = env.step_wait(timeout=10)
    assert len(record) == 1
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    np.testing.assert_array_equal(obs[2:], last[2:])  # the last obs *returned*
    # envs 0, 1: the abandoned step happened, then this one
    np.testing.assert_array_equal(obs[:2, 2], [2, 2])
    obs, *_ = env.step(np.ones(4, np.int64))
    np.testing.assert_array_equal(obs[:, 2], [3, 3, 0, 0])


def _timed_out_restart(make_async, mode):
    """Kill worker 1 in a step whose step_wait(timeout) then times out."""
    fns = [
        functools.partial(
            BuildGate, index=i, step_delay=0.6 if i < 2 else 0.1, min_len=50, max_len=50
        )
        for i in range(4)
    ]
    env = make_async(fns, num_workers=2, on_worker_crash="restart", autoreset_mode=mode)
    last, _ = env.reset(seed=0)
    env.step_async(np.zeros(4, np.int64))
    _kill(env, 1)  # in its 0.1 s step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        with pytest.raises(multiprocessing.TimeoutError):
            env.step_wait(timeout=0.3)  # worker 0 is slow; worker 1 restarted
    assert env.restarts == (0, 1)
    time.sleep(0.5)
    return env, last


def _marks(infos):
    return infos.get("worker_restarted", np.zeros(4, bool)).tolist()


# was a strict xfail: the replacement's marked rows answered the given-up step and
# were dropped, and the next step showed the new incarnation unmarked
def test_a_timeout_after_a_restart_still_marks_the_cut(make_async):
    env, last = _timed_out_restart(make_async, AutoresetMode.NEXT_STEP)
    obs, _, terminated, truncated, infos = env.step(np.zeros(4, np.int64))
    # the cut row, as an untimed restart shows it: the last observations seen
    assert _marks(infos) == [False, False, True, True]
    np.testing.assert_array_equal(obs[2:], last[2:])
    assert truncated[2:].all()
    assert not terminated[2:].any()
    # then the autoreset row: the new incarnation, unmarked
    obs, _, _, truncated, infos = env.step(np.zeros(4, np.int64))
    assert (obs[2:, PID] != last[2:, PID]).all()
    assert _marks(infos) == [False] * 4
    assert not truncated[2:].any()


def test_a_timeout_after_a_restart_still_marks_the_cut_same_step(make_async):
    env, last = _timed_out_restart(make_async, AutoresetMode.SAME_STEP)
    obs, _, _, truncated, infos = env.step(np.zeros(4, np.int64))
    assert _marks(infos) == [False, False, True, True]
    assert truncated[2:].all()
    assert (obs[2:, PID] != last[2:, PID]).all()  # reset in the same step
    for i in (2, 3):
        np.testing.assert_array_equal(infos["final_obs"][i], last[i])


def test_a_reset_after_a_timed_out_restart_marks_the_cut(make_async):
    env, last = _timed_out_restart(make_async, AutoresetMode.NEXT_STEP)
    obs, infos = env.reset(seed=1)
    assert _marks(infos) == [False, False, True, True]
    assert (obs[2:, PID] != last[2:, PID]).all()
    _, _, _, truncated, infos = env.step(np.zeros(4, np.int64))
    assert _marks(infos) == [False] * 4  # shown once
    assert not truncated.any()


def test_a_kill_after_a_recv_timeout_resends_the_in_flight_batches(make_async):
    env = make_async(
        [functools.partial(SlowEnv, step_delay=0.5)] * 4,
        num_workers=2,
        batch_size=2,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    env.send(np.zeros((4, 1), np.float32), np.arange(4))
    with pytest.raises(multiprocessing.TimeoutError):
        env.recv(timeout=0.1)
    assert env.pending_env_ids == [0, 1, 2, 3]  # still in flight
    _kill(env, 1)
    got = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        while env.pending_env_ids:
            _, rewards, _, truncated, infos = env.recv(timeout=10)  # a hang guard
            cut = infos.get("worker_restarted", np.zeros(len(rewards), bool))
            for row, index in enumerate(infos["env_id"].tolist()):
                got[index] = (bool(truncated[row]), bool(cut[row]), rewards[row])
    assert got == {
        0: (False, False, 0.5),
        1: (False, False, 0.5),
        2: (True, True, 0.0),
        3: (True, True, 0.0),
    }
    assert env.restarts == (0, 1)


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
        _fns(4, BuildGate, min_len=1000, max_len=1000),
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
            if rng.random() < 0.4:
                _kill(env, int(rng.integers(0, 2)))
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


# ------------------------------------------------------------- 5: max_concurrency


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
    rng = np.random.default_rng(5)
    obs, _ = env.reset(seed=5)
    tracker = Tracker("NextStep", obs, 6)
    with (
        warnings.catch_warnings(),
        _killer(env, 0.003, 0.02, seed=5) as killer,
    ):
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        step, deadline = 0, time.monotonic() + 10
        while step < 800 or (killer.kills < 15 and time.monotonic() < deadline):
            step += 1
            actions = rng.integers(0, 2, 6)
            env.step_async(actions)
            result = env.step_wait(timeout=10)  # a lost permit: TimeoutError
            tracker.check(list(range(6)), dict(enumerate(actions.tolist())), result)
    assert killer.kills >= 15


class _IntervalEnv(gym.Env):
    """Each step sleeps 20 ms and reports when it ran (a system-wide clock)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        start = time.monotonic()
        time.sleep(0.02)
        return 0, 0.0, False, False, {"start": start, "end": time.monotonic()}


@pytest.mark.parametrize("limit", [1, 2])
def test_max_concurrency_is_never_exceeded(limit, make_async):
    env = make_async([_IntervalEnv] * 4, num_workers=4, max_concurrency=limit)
    assert env._group.handles  # four workers, each stepping its one env
    env.reset(seed=0)
    intervals = []
    for _ in range(5):
        *_, infos = env.step(np.zeros(4, np.int64))
        intervals += list(zip(infos["start"], infos["end"], strict=True))
    # at no moment do more than `limit` steps run
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals]
    )
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert 1 <= peak <= limit


def test_a_permit_held_by_an_abandoned_dead_worker_comes_back(make_async):
    env = make_async(
        [SlowEnv] * 4,
        num_workers=2,
        batch_size=2,
        max_concurrency=1,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    actions = np.zeros((4, 1), np.float32)
    actions[2:] = 1.0  # worker 1 steps 2 s holding the only permit
    env.step_async(actions)
    with pytest.raises(multiprocessing.TimeoutError):
        env.step_wait(timeout=0.3)
    _kill(env, 1)
    env.send(np.zeros((2, 1), np.float32), [0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        _, _, _, _, infos = env.recv(timeout=10)  # a hang guard
    assert sorted(infos["env_id"].tolist()) == [0, 1]


# ---------------------------------------------------------------- 6: wrappers


def test_gymnasium_wrappers_survive_restarts(make_async):
    inner = make_async(
        _fns(4, min_len=5, max_len=5), num_workers=2, on_worker_crash="restart"
    )
    env = gym.wrappers.vector.NormalizeObservation(
        gym.wrappers.vector.RecordEpisodeStatistics(inner)
    )
    env.reset(seed=0)
    cuts = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        for step in range(30):
            if step in (3, 11, 17):
                _kill(inner, {3: 0, 11: 1, 17: 0}[step])
            obs, _, _, truncated, infos = env.step(np.ones(4, np.int64))
            assert obs.shape == (4, 3)
            assert np.isfinite(obs).all()
            if "worker_restarted" in infos:
                cut = infos["worker_restarted"]
                cuts += int(cut.sum())
                assert truncated[cut].all()
                # the cut ends the episode for the statistics wrapper too
                assert infos["_episode"][cut].all()
    assert cuts == 6
    assert inner.restarts == (2, 1)
    stats = env.env  # RecordEpisodeStatistics
    lengths = list(stats.length_queue)  # type: ignore[attr-defined]
    assert len(lengths) >= 6
    # never an episode merged across a cut. (Steps 11 and 17 are reset steps: a
    # cut there is recorded as a 0-step episode, since the cut row is truncated.)
    assert all(0 <= length <= 5 for length in lengths), lengths


# ----------------------------------------------------- 7: garbage collection, exit


def test_garbage_collection_after_restarts_leaks_nothing(leak_checker):
    import gc

    env = vecpool.AsyncVectorEnv(_fns(4), num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        for worker in (0, 1, 1):
            _kill(env, worker)
            env.step(np.zeros(4, np.int64))
        env.step_async(np.zeros(4, np.int64))  # pending, and then a dead worker
        _kill(env, 0)
        del env
        gc.collect()
    leak_checker.assert_no_leaks()


def test_interpreter_exit_after_restarts_leaves_no_process_or_segment(tmp_path):
    script = textwrap.dedent(
        """
        import functools, json, os, signal, sys, warnings
        import numpy as np
        import vecpool
        from vecpool.testing import IncarnationEnv
        warnings.simplefilter("ignore")
        fns = [functools.partial(IncarnationEnv, index=i) for i in range(4)]
        env = vecpool.AsyncVectorEnv(fns, num_workers=2, on_worker_crash="restart")
        env.reset(seed=0)
        pids = [p.pid for p in env.processes]
        for worker in (0, 1):
            p = env.processes[worker]
            os.kill(p.pid, signal.SIGKILL)
            p.join(10)
            env.step(np.zeros(4, np.int64))
        pids += [p.pid for p in env.processes]
        env.step_async(np.zeros(4, np.int64))
        print(json.dumps(pids), flush=True)
        # no close, a pending step: the interpreter exits
        """
    )
    shm_before = set(os.listdir("/dev/shm"))
    done = subprocess.run(  # a hang raises subprocess.TimeoutExpired
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pids = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(set(pids)) == 4  # two originals, two replacements
    deadline = time.monotonic() + 10  # a hang guard, not a speed claim
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        time.sleep(0.05)
    assert alive == [], "worker processes outlived the interpreter"
    assert set(os.listdir("/dev/shm")) - shm_before == set()


# ----------------------------------------------------- 8: deterministic replay


def _replay(make_async, tmp_path: Path, name: str, mode: str) -> list[Any]:
    folder = tmp_path / name
    folder.mkdir()
    fns = [
        functools.partial(
            IncarnationEnv,
            index=i,
            crash_marker=str(folder / f"crash{i}") if i in (1, 4) else None,
            crash_at={1: 7, 4: 13}.get(i, 1),
        )
        for i in range(6)
    ]
    env = make_async(fns, num_workers=3, autoreset_mode=mode, on_worker_crash="restart")
    rng = np.random.default_rng(11)
    rows: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        obs, infos = env.reset(seed=21)
        rows.append((obs[:, [0, 2]], sorted(infos)))
        for step in range(40):
            if step == 20:  # and a kill at a fixed point
                _kill(env, 2)
            obs, rewards, terminated, truncated, infos = env.step(rng.integers(0, 2, 6))
            cut = infos.get("worker_restarted", np.zeros(6, np.bool_))
            rows.append(
                (
                    obs[:, [0, 2]],
                    rewards,
                    terminated,
                    truncated,
                    cut,
                    sorted(k for k in infos if not k.startswith("_")),
                )
            )
            if mode == "Disabled" and (terminated | truncated).any():
                obs, _ = env.reset(options={"reset_mask": terminated | truncated})
                rows.append(obs[:, [0, 2]])
    assert env.restarts == (1, 0, 2)
    return rows


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_the_same_crashes_replay_the_same_rows(make_async, tmp_path, mode):
    first = _replay(make_async, tmp_path, "a", mode)
    second = _replay(make_async, tmp_path, "b", mode)
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]:
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y
    assert any(row[4].any() for row in first if isinstance(row, tuple) and len(row) > 2)


# ---------------------------------------------------------- startup deaths


@pytest.mark.timeout(30)  # a hang guard: replacements that die are not waited for
@pytest.mark.parametrize("max_restarts", [2, None])
def test_a_replacement_that_always_dies_raises_promptly_and_leaks_nothing(
    tmp_path, leak_checker, max_restarts
):
    marker = str(tmp_path / "die")
    env = vecpool.AsyncVectorEnv(
        _fns(4, BuildGate, marker=marker, die=True),
        num_workers=2,
        on_worker_crash="restart",
        max_restarts=max_restarts,
    )
    try:
        env.reset(seed=0)
        Path(marker).touch()
        _kill(env, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", vecpool.VecPoolWarning)
            with pytest.raises(vecpool.WorkerCrashedError, match="exit code 7"):
                env.step(np.zeros(4, np.int64))
        with pytest.raises(vecpool.WorkerCrashedError, match="unusable"):
            env.step(np.zeros(4, np.int64))
        assert env.restarts[0] == 0
        assert env.restarts[1] == (2 if max_restarts == 2 else 11)
    finally:
        env.close()
    leak_checker.assert_no_leaks()


# ------------------------------------------------ close from another thread


def test_close_from_another_thread_never_restarts_workers(leak_checker):
    env = vecpool.AsyncVectorEnv(
        [functools.partial(SlowEnv, step_delay=1.0)] * 4,
        num_workers=2,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    errors: list[BaseException] = []

    def stepper() -> None:
        try:
            env.step(np.zeros((4, 1), np.float32))
        except BaseException as error:  # noqa: BLE001 - inspected below
            errors.append(error)

    thread = threading.Thread(target=stepper)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        thread.start()
        time.sleep(0.3)
        env.close(timeout=0.2)
        thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert env.restarts == (0, 0), "workers restarted after close"
    leak_checker.assert_no_leaks()


class _ResetFailsWhenRebuilt(IncarnationEnv):
    """IncarnationEnv 1's reset raises in every incarnation after the first.

    (Env 0 is also built once in the parent, for the spaces: it never raises.)
    """

    def __init__(self, marker: str, index: int = 0) -> None:
        super().__init__(index=index, min_len=50, max_len=50)
        self.rebuilt = index == 1 and os.path.exists(marker)
        with open(marker, "a"):
            pass

    def reset(self, *, seed=None, options=None):
        if self.rebuilt:
            msg = "this incarnation cannot reset"
            raise DeliberateError(msg)
        return super().reset(seed=seed, options=options)


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_a_replacement_that_cannot_reset_raises_until_reset(make_async, tmp_path):
    # was: the crash step raised, then later steps returned the never-reset
    # replacement's rows, unmarked (SAME_STEP)
    fns = [
        functools.partial(_ResetFailsWhenRebuilt, str(tmp_path / f"built{i}"), i)
        for i in range(2)
    ]
    env = make_async(
        fns,
        num_workers=2,
        on_worker_crash="restart",
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    env.reset(seed=0)
    env.step(np.zeros(2, np.int64))
    _kill(env, 1)
    for _ in range(4):  # the crash step, and every step after it
        with pytest.raises(DeliberateError, match="cannot reset"):
            env.step(np.zeros(2, np.int64))


# found by a review of the batch info rows: the replacement zeroed its envs' info
# ids, so an env answered before the kill and not yet returned by recv lost its info
def test_an_answered_env_keeps_its_info_when_its_worker_is_replaced(make_async):
    fns = [
        functools.partial(CountingEnv, info_every=1, max_steps=100, terminate_prob=0.0)
    ] * 4
    env = make_async(fns, num_workers=2, batch_size=1, on_worker_crash="restart")
    env.reset(seed=0)
    env.send(np.zeros(2, np.int64), np.array([0, 1]))  # commands [0] and [1]
    time.sleep(0.5)  # both answered
    first = int(env.recv(timeout=10)[4]["env_id"][0])
    other = 1 - first
    _kill(env, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(1, np.int64), np.array([first]))  # replaced here
        _, _, _, truncated, infos = env.recv(timeout=10)
    assert infos["env_id"].tolist() == [other]
    assert not truncated[0]  # a real step, answered before the kill
    assert infos["_step_count"][0]
    assert infos["step_count"][0] == 1
