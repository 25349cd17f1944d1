"""``vecpool bench pool``'s main-job rows (bench/main_job.py), on tiny sizes.

The loops run for real, a few hundred env steps each; the figures are checked for
their structure only, never against a speed.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from vecpool import cli
from vecpool.bench import main_job, pool_peers
from vecpool.bench import pool as pool_bench

pytestmark = pytest.mark.timeout(300)

TINY = 160  # env steps: 20 vector steps of 8 envs
HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None


def test_plan_runs_every_recording_loop_in_every_kind():
    runs = main_job.plan((32,))
    assert runs[:2] == [("vecpool", "steps"), ("sync", "steps")]
    for kind in ("job", "dqn-32"):
        assert [loop for loop, k in runs if k == kind] == list(main_job.RECORDING)
    assert len(runs) == len(set(runs)) == 2 + 2 * len(main_job.RECORDING)


@pytest.mark.parametrize(("loop", "kind"), main_job.plan((4,)))
def test_each_loop_runs_and_reports_its_span(loop, kind):
    if loop == "sync+sb3" and not HAS_SB3:
        pytest.skip("stable-baselines3 is not installed")
    figures = main_job.run_loop(loop, kind, env_steps=TINY)
    assert figures["env_steps"] == TINY
    assert figures["seconds"] > 0
    assert figures["cpu_seconds"] >= 0


def test_unknown_runs_are_refused():
    with pytest.raises(ValueError, match="Unknown main-job run 'vecpool' \\('job'\\)"):
        main_job.run_loop("vecpool", "job", env_steps=TINY)
    with pytest.raises(ValueError, match="Unknown main-job run 'collect'"):
        main_job.run_loop("collect", "steps", env_steps=TINY)


def test_a_fresh_process_gives_the_figures():
    figures = main_job.run_child("sync+wrapper", "dqn-4", env_steps=TINY)
    assert not isinstance(figures, str), figures
    assert figures["env_steps"] == TINY


def test_a_failing_process_gives_its_reason():
    why = main_job.run_child("no-such-loop", "job", env_steps=TINY)
    assert isinstance(why, str)
    assert why.startswith("its process exited 1: ValueError")


def test_the_report_without_sb3_skips_its_rows_with_a_note():
    report = main_job.run_main_job_benchmark(
        rounds=1, env_steps=TINY, batch_sizes=(4,), has_sb3=lambda: False
    )
    assert [(row.loop, row.kind) for row in report.rows] == main_job.plan((4,))
    for row in report.rows:
        if row.loop == main_job.BASELINE:
            assert row.steps_per_second is None
            assert row.notes == ("skipped: stable-baselines3 is not installed",)
            assert report.ratio(row) is None
        else:
            assert row.rounds == 1, row.notes
            assert row.steps_per_second is not None
            assert row.cpu_us_per_step is not None
    lines = main_job.format_main_job_report(report)
    assert "median of 1 rounds" in lines[0]
    assert any("skipped: stable-baselines3" in line for line in lines)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["ratios"] == [None] * len(report.rows)


def test_ratios_are_to_the_sb3_row_of_the_same_kind():
    rows = (
        main_job.MainJobRow("vecpool", "steps", 300.0, 1.0, 3),
        main_job.MainJobRow("sync+sb3", "job", 100.0, 1.0, 3),
        main_job.MainJobRow("collect", "job", 150.0, 1.0, 3),
        main_job.MainJobRow("sync+sb3", "dqn-32", 50.0, 1.0, 3),
        main_job.MainJobRow("collect", "dqn-32", 100.0, 1.0, 3),
    )
    report = main_job.MainJobReport(rows, env_steps=TINY, rounds=3)
    assert [report.ratio(row) for row in rows] == [3.0, 1.0, 1.5, 1.0, 2.0]


def test_bench_pool_quick_main_job_prints_the_rows(monkeypatch, capsys, tmp_path):
    report = main_job.MainJobReport(
        (main_job.MainJobRow("collect", "job", 100.0, 2.0, 3),), TINY, 3
    )
    calls = []

    def fake(**kwargs):
        calls.append(kwargs)
        return report

    monkeypatch.setattr(main_job, "run_main_job_benchmark", fake)
    monkeypatch.setattr(pool_peers, "installed_peers", lambda: ([], []))
    monkeypatch.setattr(pool_bench, "run_pool_benchmark", lambda **_: _pool_report())
    path = tmp_path / "pool.json"
    argv = ["bench", "pool", "--quick", "--main-job", "--quiet", "--json", str(path)]
    assert cli.main(argv) == 0
    assert "main job:" in capsys.readouterr().out
    (call,) = calls
    assert call["env_steps"] < main_job.ENV_STEPS  # --quick: a tiny run
    assert json.loads(path.read_text())["main_job"]["rows"][0]["loop"] == "collect"
    calls.clear()
    assert cli.main(["bench", "pool", "--quick", "--quiet"]) == 0
    assert not calls  # off with --quick unless asked


def test_main_job_flag_outside_bench_pool_is_refused(capsys):
    assert cli.main(["bench", "--main-job", "--quick"]) == 2
    assert "--main-job/--no-main-job belong to `vecpool bench pool`" in (
        capsys.readouterr().err
    )


def _pool_report() -> pool_bench.PoolBenchReport:
    return pool_bench.PoolBenchReport(
        add_per_second=1.0,
        sample_per_second=1.0,
        plain_steps_per_second=2.0,
        wrapped_steps_per_second=1.0,
        wrapper_cost=0.5,
        nbytes=10,
        raw_bytes=10,
        image_plain_nbytes=2,
        image_compact_nbytes=1,
        rounds=3,
    )
