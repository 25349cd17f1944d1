"""What a restart does (``on_worker_crash="restart"``), one kill at a time.

Differential where it can be: the same seeds and actions through a vector env whose
worker is killed and through one left alone give equal rows for every env the crash
did not touch. The rows that mark the cut, the seeds of the replacement, the call
that meets the crash (step, reset, calls, state calls, ``send``/``recv`` batches),
the limits and arguments, replacements that cannot serve, permits
(``max_concurrency``), and what wrappers and ``evaluate`` make of the cut.

Random kills: test_restart_random_kills.py; timeouts, close and exit around a
restart: test_restart_timeouts.py; the consumers of the rows against a fake vector
env: test_restart_rows.py.
"""

from __future__ import annotations

import functools
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
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool._engine.restart import Restarter
from vecpool._util.seeding import derive_seed
from vecpool.testing import (
    CountingEnv,
    DeliberateError,
    IncarnationEnv,
    SlowEnv,
    kill_worker,
    kill_worker_later,
)

MODES = ["NextStep", "SameStep", "Disabled"]
PID = 1  # IncarnationEnv's observation: [env index, pid, step in episode]


def _fns(n: int, cls: Any = IncarnationEnv, **kwargs: Any) -> list[Any]:
    return [functools.partial(cls, index=i, **kwargs) for i in range(n)]


def _step(env: vecpool.AsyncVectorEnv, actions: Any) -> tuple[Any, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        return env.step(actions)


# -- the rows that mark the cut -----------------------------------------------------


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
    kill_worker(env, 1)
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
    kill_worker(env, 0)
    obs2, _, _, truncated, _infos = _step(env, np.zeros(4, np.int64))
    np.testing.assert_array_equal(truncated[:2], [True, True])
    np.testing.assert_array_equal(obs2[:2], obs[:2])
    obs3, *_ = env.step(np.zeros(4, np.int64))
    assert (obs3[:2, PID] != obs[:2, PID]).all()


def test_a_replaced_env_starts_from_the_derived_seed(make_async):
    fns = [lambda: gym.make("CartPole-v1")] * 4
    env = make_async(fns, num_workers=2, on_worker_crash="restart")
    env.reset(seed=10)
    env.step(np.zeros(4, np.int64))
    kill_worker(env, 0)
    _step(env, np.zeros(4, np.int64))  # the cut
    obs, *_ = env.step(np.zeros(4, np.int64))  # NEXT_STEP: the new first obs
    for i in (0, 1):
        first, _ = gym.make("CartPole-v1").reset(seed=derive_seed(10 + i, 1))
        np.testing.assert_array_equal(obs[i], first)
    assert derive_seed(10, 1) != derive_seed(10, 2) != derive_seed(11, 1)


def test_a_masked_reset_leaves_the_restart_seeds_of_the_envs_left_out(make_async):
    # the seed a replacement derives from is the last one its env was given: a
    # masked reset gives none to the envs it leaves out (it recorded them anyway)
    fns = [lambda: gym.make("CartPole-v1")] * 4
    env = make_async(fns, num_workers=2, on_worker_crash="restart")
    env.reset(seed=10)
    env.reset(seed=50, options={"reset_mask": np.array([True, True, False, True])})
    env.step(np.zeros(4, np.int64))
    kill_worker(env, 1)
    _step(env, np.zeros(4, np.int64))  # the cut
    obs, *_ = env.step(np.zeros(4, np.int64))  # NEXT_STEP: the new first obs
    for i, given in ((2, 10 + 2), (3, 50 + 3)):
        first, _ = gym.make("CartPole-v1").reset(seed=derive_seed(given, 1))
        np.testing.assert_array_equal(obs[i], first)


def test_an_unseeded_env_restarts_unseeded(make_async):
    env = make_async(_fns(2), num_workers=2, on_worker_crash="restart")
    env.reset()
    kill_worker(env, 1)
    _step(env, np.zeros(2, np.int64))
    obs, *_ = env.step(np.zeros(2, np.int64))
    assert obs[1, 2] == 0  # reset, and no seed was derived from None


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
                kill_worker(env, 2)
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


# -- the call that meets the crash --------------------------------------------------


def test_a_crash_in_a_reset_resets_the_replacement_with_the_call_seeds(make_async):
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart")
    ref = make_async(_fns(4), num_workers=2)
    env.reset(seed=1)
    kill_worker(env, 0)
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


def test_a_replacement_dead_before_its_first_command_is_replaced_again(
    make_async, monkeypatch
):
    # found dead as the reset is sent (WorkerGroup.send_to); its replacement dies
    # before the command reaches it too: a second one takes the command
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart")
    ref = make_async(_fns(4), num_workers=2)
    env.reset(seed=1)
    old_pids = set(env.call("get_pid")[:2])
    replace = Restarter.replace
    replaced: list[int] = []

    def replace_then_kill_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        new = replace(self, *args, **kwargs)
        pid = new.process.pid
        assert pid is not None
        replaced.append(pid)
        if len(replaced) == 1:
            os.kill(pid, signal.SIGKILL)
            new.process.join(10.0)
        return new

    monkeypatch.setattr(Restarter, "replace", replace_then_kill_once)
    kill_worker(env, 0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", vecpool.VecPoolWarning)
        obs, infos = env.reset(seed=7)
    expected, _ = ref.reset(seed=7)
    assert len(replaced) == 2
    assert env.restarts == (2, 0)
    said = [str(w.message) for w in record if "restarted it" in str(w.message)]
    assert [("restart 1 of 3" in m, "restart 2 of 3" in m) for m in said] == [
        (True, False),
        (False, True),
    ]
    np.testing.assert_array_equal(infos["worker_restarted"], [True, True, False, False])
    columns = [0, 2]  # pids differ; index and step agree
    np.testing.assert_array_equal(obs[:, columns], expected[:, columns])
    pids = env.call("get_pid")
    assert pids[0] == pids[1] == replaced[1]
    assert not old_pids & {replaced[0], replaced[1]}
    a = np.ones(4, np.int64)
    stepped, reference = env.step(a)[0], ref.step(a)[0]
    np.testing.assert_array_equal(stepped[:, columns], reference[:, columns])


def test_a_kill_during_reset_reruns_it_with_the_call_seeds(make_async):
    kwargs = {"num_workers": 2}
    fns = [functools.partial(SlowEnv, reset_delay=0.4)] * 4
    env = make_async(fns, on_worker_crash="restart", **kwargs)
    ref = make_async([SlowEnv] * 4, **kwargs)
    env.reset(seed=1)
    for _ in range(3):
        env.step(np.zeros((4, 1), np.float32))
    timer = kill_worker_later(env, 1, 0.2)
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
    timer = kill_worker_later(env, 1, 0.2)
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
    env.call_async("sleep", 2.0)  # a busy worker, then killed
    time.sleep(0.3)
    kill_worker(env, 1)
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
    kill_worker(env, 0)
    with (
        pytest.warns(vecpool.VecPoolWarning),
        pytest.raises(vecpool.WorkerCrashedError, match="while running `call`"),
    ):
        env.call("get_pid")
    assert len(set(env.call("get_pid"))) == 2


class SlowStateEnv(CountingEnv):
    """CountingEnv whose state calls take ``delay`` seconds (a window to kill in)."""

    delay = 0.4

    def get_state(self) -> dict[str, Any]:
        time.sleep(self.delay)
        return super().get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        time.sleep(self.delay)
        super().set_state(state)


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
    timer = kill_worker_later(env, 0, 0.2)  # during the first env's state call
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


# -- send/recv batches --------------------------------------------------------------


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
    kill_worker(env, 1)  # hosts envs 2, 3
    kill_worker(env, 2)  # hosts envs 4, 5: found dead at the send below
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


@pytest.mark.parametrize("timed_out", [False, True])
def test_in_flight_batches_are_resent_to_the_replacement(make_async, timed_out):
    """Batches in flight on a killed worker come back cut; the others come back.

    ``timed_out``: a ``recv(timeout)`` gave up on them first (they stay pending).
    """
    env = make_async(
        [functools.partial(SlowEnv, step_delay=0.5 if timed_out else 0.3)] * 4,
        num_workers=2,
        batch_size=2 if timed_out else 1,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    if timed_out:
        env.send(np.zeros((4, 1), np.float32), np.arange(4))
        with pytest.raises(multiprocessing.TimeoutError):
            env.recv(timeout=0.1)
        assert env.pending_env_ids == [0, 1, 2, 3]  # still in flight
    else:
        env.send(np.zeros((2, 1), np.float32), [2, 3])
        env.send(np.zeros((2, 1), np.float32), [0, 1])
        time.sleep(0.1)
    kill_worker(env, 1)  # envs 2 and 3 in flight
    got = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        while env.pending_env_ids:
            _, rewards, _, truncated, infos = env.recv(timeout=10)  # a hang guard
            cut = infos.get("worker_restarted", np.zeros(len(rewards), bool))
            for row, index in enumerate(infos["env_id"].tolist()):
                got[index] = (bool(truncated[row]), bool(cut[row]), rewards[row])
    step = 0.5 if timed_out else 0.3
    assert got == {
        0: (False, False, pytest.approx(step)),
        1: (False, False, pytest.approx(step)),
        2: (True, True, 0.0),
        3: (True, True, 0.0),
    }
    assert env.restarts == (0, 1)


def test_a_worker_found_dead_at_send_still_answers_its_in_flight_batch(make_async):
    env = make_async(
        [functools.partial(SlowEnv, step_delay=0.3)] * 4,
        num_workers=2,
        batch_size=1,
        on_worker_crash="restart",
    )
    env.reset(seed=0)
    env.send(np.zeros((1, 1), np.float32), [2])  # in flight on worker 1 (0.3 s)
    time.sleep(0.05)
    kill_worker(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros((1, 1), np.float32), [3])  # finds worker 1 dead
        got = set()
        deadline = time.monotonic() + 30
        while env.pending_env_ids and time.monotonic() < deadline:
            # TimeoutError: lost (a hang guard, not a speed claim)
            _, _, _, truncated, infos = env.recv(timeout=10)
            got.update(infos["env_id"].tolist())
            assert truncated.all()
    assert got == {2, 3}


def _ready_not_returned(make_async, shared_memory):
    """Env 3 answered and waiting in ``ready`` when its worker is killed.

    Then env 2 is sent, which restarts worker 1; returns the env and that
    ``recv``'s rows (env 3's waiting row first, then env 2's cut).
    """
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
    kill_worker(env, 1)  # hosts envs 2, 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(1, np.int64), [2])  # restarts worker 1
        result = env.recv(timeout=10)  # a hang guard
    assert result[4]["env_id"].tolist() == [3, 2]
    return env, result


def test_the_cut_of_an_env_whose_row_waited_in_ready_is_its_last_obs(make_async):
    env, (obs, *_) = _ready_not_returned(make_async, shared_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        last3 = obs[0].copy()
        np.testing.assert_array_equal(last3[[0, 2]], [3, 1])  # its real step 1
        env.send(np.zeros(1, np.int64), [3])
        obs, _, _, truncated, infos = env.recv(timeout=10)  # a hang guard
    assert infos["worker_restarted"].tolist() == [True]
    assert truncated.tolist() == [True]
    np.testing.assert_array_equal(obs[0], last3)  # NEXT_STEP: the last obs seen


def test_the_cut_after_step_from_is_where_step_from_left_the_env(make_async):
    # NEXT_STEP: the cut row shows the env's last observation; after step_from,
    # the one step_from returned (it showed the one from before)
    fn = functools.partial(CountingEnv, max_steps=100, terminate_prob=0.0)
    env = make_async([fn] * 4, num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    _step(env, np.ones(4, np.int64))
    states = env.get_states(indices=[3, 2])
    _, moved, *_ = env.step_from(states, np.array([1, 2]), dt=3, indices=[3, 2])
    kill_worker(env, 1)
    obs, _, _, truncated, _ = _step(env, np.ones(4, np.int64))
    assert truncated.tolist() == [False, False, True, True]
    np.testing.assert_array_equal(obs[[3, 2]], moved)


def test_step_from_takes_indices_from_a_generator_under_restart(make_async):
    # the restart copy read `indices` again, after the call had used them up: the
    # envs moved, then a TypeError lost the results
    fn = functools.partial(CountingEnv, max_steps=100, terminate_prob=0.0)
    env = make_async([fn] * 4, num_workers=2, on_worker_crash="restart")
    env.reset(seed=0)
    states = env.get_states(indices=[3, 1])
    _, moved, *_ = env.step_from(
        states, np.array([1, 2]), dt=2, indices=(i for i in (3, 1))
    )
    again = env.step_from(states, np.array([1, 2]), dt=2, indices=[3, 1])[1]
    np.testing.assert_array_equal(moved, again)


def test_pipe_mode_a_ready_row_is_not_overwritten_by_a_replacement(make_async):
    _, (obs, rewards, _, truncated, _) = _ready_not_returned(
        make_async, shared_memory=False
    )
    assert truncated.tolist() == [False, True]
    assert rewards[0] == 1.0  # env 3's real first step ...
    np.testing.assert_array_equal(obs[0][[0, 2]], [3, 1])  # ... and its obs


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
    kill_worker(env, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vecpool.VecPoolWarning)
        env.send(np.zeros(1, np.int64), np.array([first]))  # replaced here
        _, _, _, truncated, infos = env.recv(timeout=10)
    assert infos["env_id"].tolist() == [other]
    assert not truncated[0]  # a real step, answered before the kill
    assert infos["_step_count"][0]
    assert infos["step_count"][0] == 1


# -- limits and arguments -----------------------------------------------------------


def test_past_max_restarts_a_crash_raises_as_before(make_async):
    env = make_async(_fns(4), num_workers=2, on_worker_crash="restart", max_restarts=1)
    env.reset(seed=0)
    kill_worker(env, 1)
    _step(env, np.zeros(4, np.int64))
    kill_worker(env, 1)
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
        kill_worker(env, 0)
        _step(env, np.zeros(2, np.int64))
    assert env.restarts == (5, 0)
    never = make_async(
        _fns(2), num_workers=2, on_worker_crash="restart", max_restarts=0
    )
    never.reset(seed=0)
    kill_worker(never, 0)
    with pytest.raises(vecpool.WorkerCrashedError):
        never.step(np.zeros(2, np.int64))


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
    kill_worker(env, 0)
    with pytest.raises(vecpool.WorkerCrashedError, match="call `close\\(\\)`"):
        env.step(np.zeros(2, np.int64))
    assert env.restarts == (0, 0)


# -- replacements that cannot serve -------------------------------------------------


def test_a_replacement_whose_constructor_raises_raises_that_error(make_async, tmp_path):
    marker = tmp_path / "no-more"
    env = make_async(
        _fns(2, fail_marker=str(marker)), num_workers=2, on_worker_crash="restart"
    )
    env.reset(seed=0)
    marker.touch()
    kill_worker(env, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's log lines of the env error
        with pytest.raises(DeliberateError, match="refuses to be built again"):
            env.step(np.zeros(2, np.int64))
    with pytest.raises(vecpool.WorkerCrashedError, match="could not start"):
        env.step(np.zeros(2, np.int64))


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
    kill_worker(env, 1)
    for _ in range(4):  # the crash step, and every step after it
        with pytest.raises(DeliberateError, match="cannot reset"):
            env.step(np.zeros(2, np.int64))


# (max_concurrency permits under restarts: tests/integration/test_permits.py)


# -- what wrappers and evaluate make of the cut -------------------------------------


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
                kill_worker(inner, {3: 0, 11: 1, 17: 0}[step])
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


def test_evaluate_never_counts_a_cut_episode(make_async):
    inner = make_async(
        _fns(4, min_len=20, max_len=20), num_workers=2, on_worker_crash="restart"
    )
    sampler = vecpool.Sampler(inner, None, batch_T=5, seed=0)
    sampler.obtain_samples()
    killed = {"done": False}

    def policy(obs):
        if not killed["done"] and obs[0, 2] == 5:  # 5 steps into the episodes
            kill_worker(inner, 1)
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
