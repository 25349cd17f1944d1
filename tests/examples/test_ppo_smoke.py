"""Smoke test of ``examples/ppo_cartpole.py``: a tiny training budget and a grad check.

The full run (200k steps, documented in ``docs/ppo.md``) is too slow for CI; here
the script only has to run end to end on a couple of updates, log finite losses,
and its hand-written backward pass has to agree with finite differences.
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


@pytest.fixture(scope="module")
def ppo(load_example: Callable[[str], ModuleType]) -> ModuleType:
    """The example script, imported as a module (its ``__main__`` block not run)."""
    return load_example("ppo_cartpole")


def test_gradient_check(ppo: ModuleType) -> None:
    assert ppo.gradient_check(seed=0) < 1e-5
    assert ppo.gradient_check(seed=1) < 1e-5


def test_tiny_training_run(
    ppo: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    leak_checker: Any,
) -> None:
    out = tmp_path / "curve.json"
    result = ppo.main(
        [
            "--total-timesteps",
            "2048",
            "--num-envs",
            "2",
            "--num-steps",
            "128",
            "--eval-episodes",
            "2",
            "--seed",
            "3",
            "--save-json",
            str(out),
        ]
    )
    curve = result["curve"]
    assert len(curve) == 2048 // (2 * 128)
    assert curve[-1]["global_step"] == 2048
    for row in curve:
        for key in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac"):
            assert math.isfinite(row[key]), (key, row)
    # random-ish CartPole episodes are short: some must have finished
    assert result["episodes"]
    assert math.isfinite(result["final_avg_return"])
    assert len(result["eval_returns"]) == 2
    assert all(1 <= r <= 500 for r in result["eval_returns"])
    assert json.loads(out.read_text())["curve"] == curve

    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split(",")
    assert header[:3] == ["update", "global_step", "avg_return"]
    assert len(lines) == 1 + len(curve) + 1  # header, one line per update, summary
    assert all(len(line.split(",")) == len(header) for line in lines[1:-1])
    leak_checker.assert_no_leaks()  # the script closed its env


def test_alternating_sampler(ppo: ModuleType) -> None:
    """With ``--env-batch-size`` the Sampler alternates send/recv on the env."""
    result = ppo.main(
        [
            "--total-timesteps",
            "512",
            "--num-envs",
            "4",
            "--num-steps",
            "64",
            "--env-batch-size",
            "2",
            "--eval-episodes",
            "0",
            "--quiet",
        ]
    )
    assert len(result["curve"]) == 2
    assert np.isfinite(result["curve"][-1]["v_loss"])


def test_gae_bootstraps_truncation_not_termination(ppo: ModuleType) -> None:
    # one env, 4 rows: step 0 truncated, row 1 the (invalid) reset step,
    # step 2 terminated, row 3 continues (bootstraps from next_values)
    rewards = np.array([[1.0], [0.0], [1.0], [1.0]])
    values = np.array([[0.5], [9.0], [0.25], [0.75]])
    next_values = np.array([[2.0], [9.0], [7.0], [3.0]])
    terminated = np.array([[False], [False], [True], [False]])
    truncated = np.array([[True], [False], [False], [False]])
    valid = np.array([[True], [False], [True], [True]])
    adv = ppo.compute_gae(
        rewards, values, next_values, terminated, truncated, valid, 0.5, 1.0
    )
    np.testing.assert_allclose(
        adv[:, 0],
        [1.0 + 0.5 * 2.0 - 0.5, 0.0, 1.0 - 0.25, 1.0 + 0.5 * 3.0 - 0.75],
    )


def test_plot_from_saved_runs(ppo: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = {
        "args": {"seed": 1, "env_id": "CartPole-v1", "threshold": 400.0, "window": 2},
        "curve": [{"global_step": 10, "avg_return": 20.0}],
        "episodes": [[5, 18.0], [10, 22.0]],
    }
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run))
    png = tmp_path / "curve.png"
    ppo.main(["--plot-from", str(saved), str(saved), "--curve", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
