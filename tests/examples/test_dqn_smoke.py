"""Smoke test of ``examples/dqn.py``: a tiny training budget and a grad check.

The full runs (300k steps, documented in ``docs/dqn.md``) are too slow for CI; here
the script only has to run end to end on a few thousand steps with finite losses,
evaluate its greedy policy, update the pool's priorities, and its hand-written
backward pass has to agree with finite differences.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import vecpool

TINY = [
    "--total-steps",
    "3000",
    "--num-envs",
    "4",
    "--learning-starts",
    "1000",
    "--batch-size",
    "32",
    "--eval-every",
    "1000",
    "--eval-episodes",
    "2",
    "--seed",
    "3",
]


@pytest.fixture(scope="module")
def dqn(load_example: Callable[[str], ModuleType]) -> ModuleType:
    """The example script, imported as a module (its ``__main__`` block not run)."""
    return load_example("dqn")


def test_gradient_check(dqn: ModuleType) -> None:
    assert dqn.gradient_check(seed=0) < 1e-5
    assert dqn.gradient_check(seed=1) < 1e-5


def test_tiny_training_run(
    dqn: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    leak_checker: Any,
) -> None:
    out = tmp_path / "run.json"
    result = dqn.main([*TINY, "--save-json", str(out)])
    curve = result["curve"]
    # evaluations at the start, every 1000 env steps and at the end
    assert [row["env_steps"] for row in curve] == [0, 1000, 2000, 3000]
    assert result["env_steps"] == 3000
    for row in curve:
        assert len(row) == len(curve[0])
        assert 1 <= row["greedy_return"] <= 500, row
        assert row["greedy_min"] <= row["greedy_return"]
    # one gradient step per vector step (4 env steps) from step 1000 on
    assert result["gradient_steps"] == (3000 - 1000) // 4 + 1
    assert curve[-1]["gradient_steps"] == result["gradient_steps"]
    for row in curve[1:]:
        for key in ("loss", "q_mean", "weight_min", "sps"):
            assert math.isfinite(row[key]), (key, row)
        assert row["loss"] >= 0
        assert 0 < row["weight_min"] <= 1
    # epsilon decays linearly over 10% of the steps, beta anneals to 1
    assert curve[0]["epsilon"] == 1.0
    assert curve[-1]["epsilon"] == pytest.approx(0.05)
    assert curve[-1]["beta"] == pytest.approx(1.0)
    # short random-ish episodes: some finished during training
    assert result["episodes"]
    assert result["final_greedy_return"] == curve[-1]["greedy_return"]
    # (compared as JSON text: the first row's loss is NaN, and NaN != NaN)
    assert json.dumps(json.loads(out.read_text())["curve"]) == json.dumps(curve)

    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split(",")
    assert header[:3] == ["env_steps", "greedy_return", "greedy_min"]
    assert len(lines) == 1 + len(curve) + 1  # header, one line per evaluation, summary
    assert all(len(line.split(",")) == len(header) for line in lines[1:-1])
    assert lines[-1].startswith("seed 3: final greedy return")
    leak_checker.assert_no_leaks()  # the script closed its env


def test_priorities_are_updated(dqn: ModuleType) -> None:
    args = dqn.parse_args([*TINY, "--quiet"])
    envs = dqn.make_envs(args)
    try:
        result = dqn.train(args, envs)
        pool = envs.pool
        assert pool.alpha == 0.6
        # every env step but the reset steps after episode ends (NEXT_STEP autoreset)
        episodes = result["episodes"]
        assert 3000 - len(episodes) <= len(pool) <= 3000 - len(episodes) + 4
        stats = pool.episode_stats
        assert stats.count == len(episodes)
        assert stats.mean_return == pytest.approx(np.mean([r for _, r in episodes]))
        # new rows get the largest priority so far: without update_priorities
        # every held row would have the same one
        held = pool.state_dict()["priority"]
        held = held[held > 0]
        assert held.size == len(pool)
        assert np.unique(held).size > 100
        batch = pool.sample(512, n_step=3, gamma=0.99, beta=1.0)
        assert batch.weights.max() == 1.0
        assert batch.weights.min() < 0.9
        assert np.unique(batch.weights).size > 10
    finally:
        envs.close()


def test_td_targets(dqn: ModuleType) -> None:
    # linear "networks" (one layer): Q(s) = s @ w0 + b0, with 2-d observations
    online = {"w0": np.array([[1.0, 0.0], [0.0, 1.0]]), "b0": np.zeros(2)}
    target = {"w0": np.array([[10.0, 0.0], [0.0, 20.0]]), "b0": np.zeros(2)}
    next_obs = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    batch = vecpool.ReplaySample(
        obs=np.zeros((4, 2)),
        action=np.zeros(4, np.int64),
        next_obs=next_obs,
        reward=np.array([1.0, 2.0, 3.0, 4.0]),
        terminated=np.array([False, True, False, False]),
        truncated=np.array([False, False, True, False]),
        discount=np.array([0.5, 0.5, 0.25, 0.125]),
        indices=np.arange(4),
        weights=np.ones(4),
    )
    # the online network's greedy next action is action 0 for rows 0-2, 1 for row
    # 3; the target network's own greedy action is the same here
    expected = [1.0 + 0.5 * 10.0, 2.0, 3.0 + 0.25 * 10.0, 4.0 + 0.125 * 20.0]
    for double in (False, True):
        np.testing.assert_allclose(
            dqn.td_targets(online, target, batch, double=double), expected
        )
    # where the two networks disagree, double DQN evaluates the online's choice
    disagree = {"w0": np.array([[0.0, 1.0], [1.0, 0.0]]), "b0": np.zeros(2)}
    np.testing.assert_allclose(
        dqn.td_targets(disagree, target, batch, double=True),
        [1.0, 2.0, 3.0, 4.0 + 0.125 * 0.0],
    )
    np.testing.assert_allclose(
        dqn.td_targets(disagree, target, batch, double=False), expected
    )


def test_huber_loss_weights(dqn: ModuleType) -> None:
    params = {"w0": np.zeros((1, 2)), "b0": np.zeros(2)}
    obs = np.ones((3, 1))
    actions = np.array([0, 1, 0])
    targets = np.array([0.5, -3.0, 0.0])
    weights = np.array([1.0, 0.5, 0.25])
    loss, grads, td = dqn.dqn_loss_and_grad(params, obs, actions, targets, weights)
    np.testing.assert_allclose(td, [-0.5, 3.0, 0.0])
    # huber(0.5) = 0.125, huber(3) = 2.5 (delta 1)
    assert loss == pytest.approx((0.125 + 0.5 * 2.5 + 0.0) / 3)
    np.testing.assert_allclose(grads["b0"], [-0.5 / 3, 0.5 / 3])


def test_linear_schedule(dqn: ModuleType) -> None:
    assert dqn.linear_schedule(1.0, 0.05, 100, 0) == 1.0
    assert dqn.linear_schedule(1.0, 0.0, 100, 25) == pytest.approx(0.75)
    assert dqn.linear_schedule(0.4, 1.0, 100, 500) == 1.0
    assert dqn.linear_schedule(1.0, 0.05, 0, 0) == 0.05


def test_plot_from_saved_runs(dqn: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = {
        "args": {
            "seed": 1,
            "env_id": "CartPole-v1",
            "threshold": 400.0,
            "eval_episodes": 20,
        },
        "curve": [
            {"env_steps": 0, "greedy_return": 9.0},
            {"env_steps": 10, "greedy_return": 420.0},
        ],
    }
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run))
    png = tmp_path / "curve.png"
    dqn.main(["--plot-from", str(saved), str(saved), "--curve", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
