"""The agent-in-the-loop bench: a policy between steps, CPU per env-step (issue 9)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecpool
from vecpool.bench.agent import (
    LatencyPolicy,
    Policy,
    agent_runner,
    cpu_seconds,
    env_pids,
    obs_size,
)
from vecpool.bench.workloads import ActionPlan
from vecpool.cli import main
from vecpool.testing import CountingEnv, MissionEnv

pytestmark = pytest.mark.timeout(120)


class _CountingPolicy:
    """Stands in for a Policy: records the batch size of every call."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    def __call__(self, obs: Any) -> float:
        self.rows.append(len(obs))
        return 0.0


def test_the_vector_loop_runs_the_policy_on_every_observation_batch():
    env = vecpool.AsyncVectorEnv([CountingEnv] * 3, num_workers=1)
    try:
        env.reset(seed=0)
        policy = _CountingPolicy()
        run = agent_runner(policy)  # type: ignore[arg-type]
        plan = ActionPlan(env.single_action_space, 3, 16, seed=0)
        first = run(env, plan, 5)
        second = run(env, plan, 7)
    finally:
        env.close()
    assert (first.env_steps, second.env_steps) == (15, 21)
    # the first run of an env starts with no observation yet; later runs carry it
    assert policy.rows == [3] * (4 + 7)


def test_the_batch_loop_runs_the_policy_on_each_received_batch():
    env = vecpool.AsyncVectorEnv([CountingEnv] * 4, num_workers=2, batch_size=2)
    try:
        env.reset(seed=0)
        policy = _CountingPolicy()
        run = agent_runner(policy, batches=True)  # type: ignore[arg-type]
        plan = ActionPlan(env.single_action_space, 4, 16, seed=0)
        measurement = run(env, plan, 5)
    finally:
        env.close()
    assert measurement.env_steps >= 20
    assert set(policy.rows) == {2}  # never the whole batch of 4: the other half steps
    # every received batch but the last was followed by a policy call
    assert len(policy.rows) == measurement.env_steps // 2 - 1


def test_policy_reads_every_observation_kind():
    space = spaces.Dict(
        {"a": spaces.Box(0, 1, (2, 3)), "b": spaces.Tuple((spaces.Discrete(4),))}
    )
    batch = gym.vector.utils.batch_space(space, 5)
    batch.seed(0)
    policy = Policy(obs_size(space), 5, milliseconds=0.05)
    assert obs_size(space) == 2 * 3 + 1  # a Discrete is one value
    first = float(policy(batch.sample()))
    assert np.isfinite(first)
    assert policy.total == pytest.approx(first)  # consumed: it cannot be skipped


def test_policy_skips_the_leaves_that_are_not_numbers():
    # a MiniGrid-like observation: the policy reads the image and the direction;
    # the mission string is not a number and must not break it (nor count)
    space = MissionEnv().observation_space
    assert isinstance(space, spaces.Dict)
    arrays: dict[str, spaces.Space[Any]] = {
        k: v for k, v in space.items() if isinstance(v, (spaces.Box, spaces.Discrete))
    }
    assert 0 < len(arrays) < len(space)
    size = obs_size(space)
    assert size == obs_size(spaces.Dict(arrays))
    batch = gym.vector.utils.batch_space(space, 3)
    batch.seed(0)
    policy = Policy(size, 3, milliseconds=0.05)
    assert np.isfinite(float(policy(batch.sample())))


def test_bench_agent_mode_runs_a_workload_with_a_string_leaf(capsys):
    argv = ["bench", "--quick", "--workloads", "mission", "--num-envs", "2"]
    argv += ["--backends", "gym-sync", "vecpool", "--agent", "0.05", "--no-memory"]
    assert main([*argv, "--quiet"]) == 0
    assert "agent in the loop" in capsys.readouterr().out


def test_cpu_seconds_reads_proc_and_sums_several(tmp_path, monkeypatch):
    import io

    from vecpool.bench import agent

    # a fake /proc: pid 7 has two threads (schedstat, in ns), pid 8 one; its stat
    # (utime 150, stime 50 clock ticks) is the fallback without schedstat
    files = {
        "/proc/7/task/7/schedstat": b"1500000000 9 9\n",
        "/proc/7/task/70/schedstat": b"500000000 9 9\n",
        "/proc/8/task/8/schedstat": b"250000000 9 9\n",
        "/proc/7/stat": b"7 (a (b) c) S " + b"0 " * 10 + b"150 50 0 0\n",
    }
    tasks = {"/proc/7/task": ["7", "70"], "/proc/8/task": ["8"]}

    def fake_open(path, mode="r", *args, **kwargs):
        if path not in files:
            raise FileNotFoundError(path)
        return io.BytesIO(files[path])

    def fake_listdir(path):
        if path not in tasks:
            raise FileNotFoundError(path)
        return tasks[path]

    monkeypatch.setattr(agent, "open", fake_open, raising=False)
    monkeypatch.setattr(os, "listdir", fake_listdir)
    assert cpu_seconds([7]) == pytest.approx(2.0)  # both threads
    assert cpu_seconds([7, 8]) == pytest.approx(2.25)
    assert cpu_seconds([7, 7]) == pytest.approx(4.0)
    del tasks["/proc/7/task"]  # no schedstat: user + system ticks
    assert cpu_seconds([7]) == pytest.approx(200 / agent._CLOCK_TICKS)
    assert cpu_seconds([9]) is None  # no such process


def test_cpu_seconds_of_this_process_is_a_number_or_none():
    seconds = cpu_seconds([os.getpid()])
    assert seconds is None or isinstance(seconds, float)
    assert cpu_seconds([2**22 + 12345]) is None  # no such process


def test_env_pids_of_each_kind_of_vector_env():
    fns = [CountingEnv] * 2
    ours = vecpool.AsyncVectorEnv(fns, num_workers=2)
    local = vecpool.AsyncVectorEnv(fns, num_workers=0)
    sync = gym.vector.SyncVectorEnv(fns)
    try:
        assert env_pids(ours) == [p.pid for p in ours.processes]
        assert len(env_pids(ours)) == 2
        assert env_pids(local) == []
        assert env_pids(sync) == []
    finally:
        for env in (ours, local, sync):
            env.close()


def test_bench_agent_mode_reports_policy_cpu_and_the_fastest(tmp_path, capsys):
    path = tmp_path / "agent.json"
    argv = ["bench", "--quick", "--workloads", "cartpole", "--num-envs", "4"]
    argv += ["--agent", "0.05", "--json", str(path), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "agent in the loop: a policy forward of" in out
    assert "fastest here:" in out
    (group,) = json.loads(path.read_text())["results"]
    assert group["policy_seconds"] > 0
    backends = group["backends"]
    assert group["fastest"] in backends
    assert group["fastest"] != "raw"
    for name in ("vecpool", "vecpool-batch", "gym-async"):
        # measured (/proc counts in clock ticks: a --quick run may read 0)
        assert backends[name]["worker_cpu_per_step"] >= 0, name
    for name in ("raw", "gym-sync", "vecpool-inproc"):
        assert backends[name]["worker_cpu_per_step"] is None, name
    for figures in backends.values():
        assert figures["parent_cpu_per_step"] > 0


@pytest.mark.parametrize("value", ["-1", "5000", "fast"])
def test_bad_agent_value_is_refused(value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--quick", "--agent", value])
    assert info.value.code == 2
    assert "agent" in capsys.readouterr().err


def test_a_gpu_like_policy_waits_without_using_the_cpu(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # a wait, not a computation
    policy = LatencyPolicy(20.0)
    policy(np.zeros((4, 4), np.float32))
    assert slept == [0.02]
    assert policy.waits
    assert not Policy(obs_size=4, num_envs=2, milliseconds=0.01).waits


def test_bench_agent_latency_mode_reports_a_gpu_like_policy(tmp_path, capsys):
    path = tmp_path / "latency.json"
    argv = ["bench", "--quick", "--workloads", "cartpole", "--num-envs", "4"]
    argv += ["--backends", "gym-sync", "vecpool", "vecpool-batch"]
    argv += ["--agent-latency", "0.2", "--json", str(path), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "agent in the loop, GPU-like: the parent waits 0.20 ms" in out
    (group,) = json.loads(path.read_text())["results"]
    assert group["policy_seconds"] == pytest.approx(0.0002)
    assert group["policy_waits"] is True


def test_one_agent_at_a_time(capsys):
    assert main(["bench", "--quick", "--agent", "1", "--agent-latency", "1"]) == 2
    assert "not both" in capsys.readouterr().err
