"""Worker restart (``on_worker_crash="restart"``): the rows that mark the cut.

Differential where it can be: the same seeds and actions through a vector env whose
worker is killed and through one left alone give equal rows for every env the crash
did not touch.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecpool
from vecpool._util.seeding import derive_seed
from vecpool.testing import DeliberateError, IncarnationEnv, SlowEnv, WorkerKiller

MODES = ["NextStep", "SameStep", "Disabled"]
PID = 1  # the column of IncarnationEnv's observation holding the hosting process


def _fns(n: int, **kwargs: Any) -> list[Any]:
    return [functools.partial(IncarnationEnv, index=i, **kwargs) for i in range(n)]


def _kill(env: vecpool.AsyncVectorEnv, worker: int) -> None:
    process = env.processes[worker]
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10.0)  # dead before the next command: a deterministic test


def _step(env: vecpool.AsyncVectorEnv, actions: Any) -> tuple[Any, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        return env.step(actions)


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_worker_gives_marked_rows_and_leaves_the_others_alone(
    make_async, mode
):
    kwargs = {"num_workers": 2, "autoreset_mode": mode}
    env = make_async(
        _fns(4, min_len=50, max_len=60), on_worker_crash="restart", **kwargs
    )
    ref = make_async(_fns(4, min_len=50, max_len=60), **kwargs)
    actions = np.array([1, 0, 1, 0])
    obs, _ = env.reset(seed=3)
    ref.reset(seed=3)
    for _ in range(4):
        last = obs
        obs, *_ = env.step(actions)
        ref.step(actions)
    last = obs
    old_pid = int(last[2, PID])
    _kill(env, 1)
    with pytest.warns(vecpool.VecPoolWarning) as record:
        obs, rewards, terminated, truncated, infos = env.step(actions)
    expected = ref.step(actions)
    (warning,) = [w for w in record if "restarted it" in str(w.message)]
    assert str(warning.message).startswith(
        "Worker 1 (hosting envs 2-3) died with exit code -9 (SIGKILL) while running "
        "`step`; restarted it (restart 1 of 3)."
    )
    assert env.restarts == (0, 1)
    # untouched envs: exactly what the reference gives
    # pids differ between the two runs; env index and episode step agree
    np.testing.assert_array_equal(expected[0][:2][:, [0, 2]], obs[:2][:, [0, 2]])
    np.testing.assert_array_equal(expected[1][:2], rewards[:2])
    # the cut: truncated, reward 0, marked, in every mode
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    np.testing.assert_array_equal(terminated, [False] * 4)
    np.testing.assert_array_equal(rewards[2:], [0.0, 0.0])
    np.testing.assert_array_equal(infos["worker_restarted"], [False, False, True, True])
    np.testing.assert_array_equal(
        infos["_worker_restarted"], [False, False, True, True]
    )
    if mode == "SameStep":
        # the new env's first observation; final_obs is the last one seen
        assert (obs[2:, PID] != old_pid).all()
        assert (obs[2:, 2] == 0).all()
        np.testing.assert_array_equal(np.stack(infos["final_obs"][2:]), last[2:])
        np.testing.assert_array_equal(infos["_final_info"][2:], [True, True])
    else:
        np.testing.assert_array_equal(obs[2:], last[2:])
    if mode == "Disabled":
        obs, infos = env.reset(options={"reset_mask": truncated})
        assert (obs[2:, 2] == 0).all()
    obs, rewards, terminated, truncated, infos = env.step(actions)
    new_pid = env.call("get_pid")[2]
    assert new_pid != old_pid
    assert "worker_restarted" not in infos
    if mode == "NextStep":  # the reset step of any episode end
        np.testing.assert_array_equal(obs[2:, 2], [0, 0])
        np.testing.assert_array_equal(rewards[2:], [0.0, 0.0])
    else:
        np.testing.assert_array_equal(obs[2:, 2], [1, 1])
    np.testing.assert_array_equal(obs[2:, PID], [new_pid, new_pid])


def test_a_replaced_env_starts_from_the_derived_seed(make_async):
    fns = [lambda: gym.make("CartPole-v1")] * 4
    env = make_async(fns, num_workers=2, on_worker_crash="restart")
    env.reset(seed=10)
    env.step(np.zeros(4, np.int64))
    _kill(env, 0)
    _step(env, np.zeros(4, np.int64))  # the cut
    obs, *_ = env.step(np.zeros(4, np.int64))  # NEXT_STEP: the new first obs
    for i in (0, 1):
        first, _ = gym.make("CartPole-v1").reset(seed=derive_seed(10 + i, 1))
        np.testing.assert_array_equal(obs[i], first)
    assert derive_seed(10, 1) != derive_seed(10, 2) != derive_seed(11, 1)


def test_an_unseeded_env_restarts_unseeded(make_async):
    env = make_async(_fns(2), num_workers=2, on_worker_crash="restart")
    env.reset()
    _kill(env, 1)
    _step(env, np.zeros(2, np.int64))
    obs, *_ = env.step(np.zeros(2, np.int64))
    assert obs[1, 2] == 0  # reset, and no seed was derived from None


def test_a_crash_in_a_reset_resets_the_replacement_with_the_call_seeds(make_async):
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart")
    ref = make_async(_fns(4), num_workers=2)
    env.reset(seed=1)
    _kill(env, 0)
    with pytest.warns(vecpool.VecPoolWarning, match="while running `reset`"):
        obs, infos = env.reset(seed=7)
    expected, _ = ref.reset(seed=7)
    np.testing.assert_array_equal(infos["worker_restarted"], [True, True, False, False])
    columns = [0, 2]  # pids differ; index and step agree
    np.testing.assert_array_equal(obs[:, columns], expected[:, columns])
    # and it steps on like the reference (same episode lengths: same seeds)
    for _ in range(15):
        a = np.ones(4, np.int64)
        obs, _rewards, terminated, _truncated, _ = env.step(a)
        e_obs, _e_rewards, e_terminated, _e_truncated, _ = ref.step(a)
        np.testing.assert_array_equal(obs[:, columns], e_obs[:, columns])
        np.testing.assert_array_equal(terminated, e_terminated)


def test_a_crash_inside_a_running_step_is_restarted(make_async, tmp_path):
    marker = str(tmp_path / "crashed")
    fns = _fns(4)
    fns[0] = functools.partial(IncarnationEnv, index=0, crash_marker=marker, crash_at=3)
    env = make_async(fns, num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    for _ in range(2):
        env.step(np.zeros(4, np.int64))
    with pytest.warns(
        vecpool.VecPoolWarning, match=r"exit code 3 while running `step`"
    ):
        _, _rewards, _, truncated, infos = env.step(np.zeros(4, np.int64))
    assert Path(marker).exists()
    # env 0 crashed its worker: envs 0 and 1 are cut, 2 and 3 stepped
    np.testing.assert_array_equal(infos["worker_restarted"], [True, True, False, False])
    np.testing.assert_array_equal(truncated, [True, True, False, False])
    assert env.restarts == (1, 0)


@pytest.mark.parametrize("method", ["call", "get_attr", "set_attr"])
def test_a_call_during_a_crash_raises_and_the_env_stays_usable(make_async, method):
    env = make_async([SlowEnv] * 4, num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    if method == "call":
        env.call_async("sleep", 2.0)
    elif method == "get_attr":
        env.call_async("sleep", 2.0)  # a busy worker, then killed
    else:
        env.call_async("sleep", 2.0)
    time.sleep(0.3)
    _kill(env, 1)
    with (
        pytest.warns(vecpool.VecPoolWarning),
        pytest.raises(vecpool.WorkerCrashedError, match="result of `call` is lost"),
    ):
        env.call_wait()
    # usable: calls work, the cut shows at the next step
    if method == "set_attr":
        env.set_attr("step_delay", 0.0)
        assert env.get_attr("step_delay") == (0.0,) * 4
    else:
        assert len(set(env.call("get_pid"))) == 2
    _, _, _, truncated, infos = env.step(np.zeros((4, 1), np.float32))
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    assert infos["worker_restarted"].tolist() == [False, False, True, True]


def test_a_worker_found_dead_at_a_call_raises_after_the_restart(make_async):
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    _kill(env, 0)
    with (
        pytest.warns(vecpool.VecPoolWarning),
        pytest.raises(vecpool.WorkerCrashedError, match="while running `call`"),
    ):
        env.call("get_pid")
    assert len(set(env.call("get_pid"))) == 2


def test_past_max_restarts_a_crash_raises_as_before(make_async):
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart", max_restarts=1)
    env.reset(seed=0)
    _kill(env, 1)
    _step(env, np.zeros(4, np.int64))
    _kill(env, 1)
    with pytest.raises(vecpool.WorkerCrashedError, match=r"Worker 1 .* died"):
        env.step(np.zeros(4, np.int64))
    with pytest.raises(vecpool.WorkerCrashedError, match="unusable"):
        env.step(np.zeros(4, np.int64))
    assert env.restarts == (0, 1)


def test_max_restarts_none_is_unlimited_and_zero_never_restarts(make_async):
    env = make_async(
        _fns(2), num_workers=2, on_worker_crash="restart", max_restarts=None
    )
    env.reset(seed=0)
    for _ in range(5):
        _kill(env, 0)
        _step(env, np.zeros(2, np.int64))
    assert env.restarts == (5, 0)
    never = make_async(
        _fns(2), num_workers=2, on_worker_crash="restart", max_restarts=0
    )
    never.reset(seed=0)
    _kill(never, 0)
    with pytest.raises(vecpool.WorkerCrashedError):
        never.step(np.zeros(2, np.int64))


def test_a_replacement_whose_constructor_raises_raises_that_error(make_async, tmp_path):
    marker = tmp_path / "no-more"
    env = make_async(
        _fns(2, fail_marker=str(marker)), num_workers=2, on_worker_crash="restart"
    )
    env.reset(seed=0)
    marker.touch()
    _kill(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's log lines of the env error
        with pytest.raises(DeliberateError, match="refuses to be built again"):
            env.step(np.zeros(2, np.int64))
    with pytest.raises(vecpool.WorkerCrashedError, match="could not start"):
        env.step(np.zeros(2, np.int64))


def test_send_recv_batches_survive_a_crash(make_async):
    env = make_async(
        _fns(6, min_len=40, max_len=50),
        num_workers=3,
        batch_size=2,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    env.send(np.zeros(4, np.int64), [0, 1, 2, 3])  # envs 4, 5 (worker 2) idle
    rows: dict[int, Any] = {}
    while env.pending_env_ids:
        batch = env.recv()
        for row, index in enumerate(batch[4]["env_id"].tolist()):
            rows[index] = (batch[3][row], batch[4].get("worker_restarted"))
    _kill(env, 1)  # hosts envs 2, 3
    _kill(env, 2)  # hosts envs 4, 5: found dead at the send below
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(6, np.int64), np.arange(6))
        cut = set()
        while env.pending_env_ids:
            _obs, rewards, _terminated, truncated, infos = env.recv()
            for row, index in enumerate(infos["env_id"].tolist()):
                if "worker_restarted" in infos and infos["worker_restarted"][row]:
                    assert truncated[row]
                    assert rewards[row] == 0.0
                    cut.add(index)
                else:
                    assert not truncated[row]
    assert cut == {2, 3, 4, 5}
    assert env.restarts == (0, 1, 1)


def test_send_recv_in_flight_batches_are_resent(make_async):
    env = make_async(
        [functools.partial(SlowEnv, step_delay=0.3)] * 4,
        num_workers=2,
        batch_size=1,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    env.send(np.zeros((2, 1), np.float32), [2, 3])
    env.send(np.zeros((2, 1), np.float32), [0, 1])
    time.sleep(0.1)
    _kill(env, 1)  # envs 2 and 3 in flight
    got = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        while env.pending_env_ids:
            _, _, _, truncated, infos = env.recv(timeout=10)
            (index,) = infos["env_id"].tolist()
            got[index] = bool(truncated[0])
    assert got == {0: False, 1: False, 2: True, 3: True}


@pytest.mark.parametrize("shared_memory", [True, False])
def test_restart_under_every_start_method(make_async, start_method, shared_memory):
    env = make_async(
        _fns(4),
        num_workers=2,
        context=start_method,
        shared_memory=shared_memory,
        on_worker_crash="restart",
    )
    obs, _ = env.reset(seed=0)
    _kill(env, 0)
    obs2, _, _, truncated, _infos = _step(env, np.zeros(4, np.int64))
    np.testing.assert_array_equal(truncated[:2], [True, True])
    np.testing.assert_array_equal(obs2[:2], obs[:2])
    obs3, *_ = env.step(np.zeros(4, np.int64))
    assert (obs3[:2, PID] != obs[:2, PID]).all()


def test_a_worker_dying_with_the_semaphore_does_not_starve_the_others(
    make_async, tmp_path
):
    marker = str(tmp_path / "crashed")
    env = make_async(
        _fns(2, crash_marker=marker, crash_at=2),
        num_workers=2,
        max_concurrency=1,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    env.step(np.zeros(2, np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.step_async(np.zeros(2, np.int64))
        env.step_wait(timeout=20)  # one worker died holding the only permit
    for _ in range(3):  # the permit came back: no step waits for ever
        env.step_async(np.zeros(2, np.int64))
        env.step_wait(timeout=20)


def test_restart_releases_every_process_and_segment(leak_checker):
    env = vecpool.AsyncVectorEnv(_fns(4), num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    for worker in (0, 1, 0):
        _kill(env, worker)
        _step(env, np.zeros(4, np.int64))
    env.close()
    leak_checker.assert_no_leaks()


def test_bad_restart_arguments_are_refused_before_any_worker_starts():
    with pytest.raises(ValueError, match="`on_worker_crash` must be 'raise'"):
        vecpool.AsyncVectorEnv(_fns(2), on_worker_crash="retry")
    with pytest.raises(ValueError, match="`max_restarts` must be an integer >= 0"):
        vecpool.AsyncVectorEnv(_fns(2), on_worker_crash="restart", max_restarts=-1)
    with pytest.raises(ValueError, match="needs vecpool's own worker"):
        vecpool.AsyncVectorEnv(
            _fns(2),
            on_worker_crash="restart",
            worker=gym.vector.async_vector_env._async_worker,
        )
    with pytest.raises(ValueError, match="needs worker processes"):
        vecpool.AsyncVectorEnv(_fns(2), on_worker_crash="restart", num_workers=0)
    assert multiprocessing.active_children() == []


def test_raise_stays_the_default(make_async):
    env = make_async(_fns(2), num_workers=2)
    assert env.on_worker_crash == "raise"
    env.reset(seed=0)
    _kill(env, 0)
    with pytest.raises(vecpool.WorkerCrashedError, match="call `close\\(\\)`"):
        env.step(np.zeros(2, np.int64))
    assert env.restarts == (0, 0)


def _check_rows(mode, prev, ended, actions, result):
    """Check one step's rows against the rows before it; return the new ``ended``."""
    obs, rewards, terminated, truncated, infos = result
    cut = infos.get("worker_restarted", np.zeros(len(obs), np.bool_))
    for i in range(len(obs)):
        if cut[i]:
            assert truncated[i]
            assert not terminated[i]
            assert rewards[i] == 0.0
            if mode == "SameStep":
                np.testing.assert_array_equal(infos["final_obs"][i], prev[i])
                assert obs[i, 2] == 0
                assert obs[i, PID] != prev[i, PID]
            else:
                np.testing.assert_array_equal(obs[i], prev[i])
            continue
        if mode == "NextStep" and ended[i]:  # the reset step
            assert obs[i, 2] == 0
            assert rewards[i] == 0.0
            assert not terminated[i]
            assert not truncated[i]
            continue
        after = obs[i]
        if mode == "SameStep" and (terminated[i] or truncated[i]):
            after = infos["final_obs"][i]
            assert obs[i, 2] == 0
        # a real step: same env, same incarnation, one step further
        assert after[0] == i
        assert after[PID] == prev[i, PID], f"env {i}: a row of another incarnation"
        assert after[2] == prev[i, 2] + 1, (
            f"env {i}: a row of another step: {after} after {prev[i]}; {infos}"
        )
        assert rewards[i] == after[2] + 0.5 * actions[i]
    return np.logical_or(terminated, truncated)


def _stressed_run(env, mode, steps, killer, kills, seed=0):
    """Step at least ``steps`` times, and on until ``kills`` kills (60 s at most)."""
    rng = np.random.default_rng(seed)
    prev, _ = env.reset(seed=seed)
    ended = np.zeros(env.num_envs, np.bool_)
    step, deadline = 0, time.monotonic() + 60
    while step < steps or (killer.kills < kills and time.monotonic() < deadline):
        step += 1
        actions = rng.integers(0, 2, env.num_envs)
        result = env.step(actions)
        ended = _check_rows(mode, prev, ended, actions, result)
        prev = result[0]
        if mode == "Disabled" and ended.any():  # the user resets what ended
            obs, _ = env.reset(options={"reset_mask": ended})
            assert (obs[ended, 2] == 0).all()
            np.testing.assert_array_equal(obs[~ended], prev[~ended])
            prev, ended = obs, np.zeros(env.num_envs, np.bool_)


STRESS_CASES = pytest.mark.parametrize(
    ("context", "mode", "steps", "every"),
    [
        ("fork", "NextStep", 5000, (0.005, 0.03)),
        ("fork", "SameStep", 2000, (0.005, 0.03)),
        ("fork", "Disabled", 2000, (0.005, 0.03)),
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
                real += int((~cut & ~(ended if mode == "NextStep" else False)).sum())
                ended = terminated | truncated
                if mode == "Disabled" and ended.any():
                    envs.reset(options={"reset_mask": ended})
                    ended = np.zeros(6, np.bool_)
    assert killer.kills >= 8
    _check_pool(envs.pool, real)


@pytest.mark.parametrize(
    ("context", "every"), [("fork", (0.005, 0.03)), ("spawn", (0.5, 1.5))]
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


def test_evaluate_never_counts_a_cut_episode(make_async):
    inner = make_async(
        _fns(4, min_len=20, max_len=20), num_workers=2, on_worker_crash="restart"
    )
    sampler = vecpool.Sampler(inner, None, batch_T=5, seed=0)
    sampler.obtain_samples()
    killed = {"done": False}

    def policy(obs):
        if not killed["done"] and obs[0, 2] == 5:  # 5 steps into the episodes
            _kill(inner, 1)
            killed["done"] = True
        return np.zeros(len(obs), np.int64)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        records = sampler.evaluate(policy, max_steps=25)
    assert killed["done"]
    # envs 0, 1 finish their 20 steps; envs 2, 3 were cut at step 6: no record
    # until their new episodes end (after step 27)
    assert sorted(r.env_index for r in records) == [0, 1]
    assert all(r.length == 20 for r in records)
