"""``vecpool bench pool``'s comparison with other replay buffers (bench/pool_peers.py).

The harness runs for real, with tiny sizes and durations: vecpool alone, and one
peer where one is installed. No figure is checked against a speed.
"""

from __future__ import annotations

import importlib.util
import inspect
import json

import pytest

from vecpool import cli
from vecpool.bench import main_job, pool_peers
from vecpool.bench import pool as pool_bench
from vecpool.bench.pool_peers import (
    FIGURES,
    PeerReport,
    PeerRow,
    PeerSizes,
    format_peer_report,
    installed_peers,
    run_peer_benchmark,
)
from vecpool.replay.pool import ReplayPool

TINY = PeerSizes(
    cartpole_capacity=800, atari_capacity=160, prioritized_rows=800, cycle=8
)
POOL_ARGUMENTS = set(inspect.signature(ReplayPool).parameters)


def _installed(module):
    return importlib.util.find_spec(module) is not None


def _only(*present):
    """A module finder that sees only ``present``."""
    return lambda module: object() if module in present else None


def _figure(row: PeerRow, name: str) -> float:
    value = row.figures[name]
    assert value is not None, (name, row.notes)
    return value


def _row(report, label):
    (row,) = [row for row in report.rows if row.label == label]
    return row


def test_vecpool_alone_gives_every_figure_or_says_why_not():
    report = run_peer_benchmark(["vecpool"], seconds=0.01, rounds=1, sizes=TINY)
    assert [row.label for row in report.rows] == ["vecpool"]
    assert report.skipped == ()
    row = report.rows[0]
    assert row.rounds == 1
    assert set(row.figures) == set(FIGURES)
    for name in ("cartpole_add_us", "cartpole_sample_us", "atari_add_us"):
        assert _figure(row, name) > 0
    # at least a frame per transition; at most two stacks (obs, next obs) and change
    frame = 84 * 84
    assert frame <= _figure(row, "atari_bytes_per_transition") < 9 * frame
    if "frame_stack" in POOL_ARGUMENTS:
        assert row.storage == "frame_stack=4"
    else:
        assert row.storage == "store_next_obs=False"
        assert any("does not take frame_stack" in note for note in row.notes)
    if "alpha" in POOL_ARGUMENTS:
        assert row.figures["prioritized_sample_us"] is not None
        assert row.figures["prioritized_update_us"] is not None
    else:
        assert row.figures["prioritized_sample_us"] is None
        assert any("not implemented" in note for note in row.notes)
    assert not any("failed" in note for note in row.notes), row.notes
    assert report.versions["vecpool"]


PEER = next(
    (
        name
        for name in ("cpprb", "sb3", "tianshou", "torchrl")
        if installed_peers([name])[0]
    ),
    None,
)


@pytest.mark.skipif(PEER is None, reason="needs one peer installed")
def test_one_peer_beside_vecpool():
    assert PEER is not None
    report = run_peer_benchmark(["vecpool", PEER], seconds=0.01, rounds=2, sizes=TINY)
    labels = [row.label for row in report.rows]
    assert labels[:2] == ["vecpool", PEER]
    peer = _row(report, PEER)
    assert peer.rounds == 2
    assert not any("failed" in note for note in peer.notes), peer.notes
    assert _figure(peer, "cartpole_add_us") > 0
    assert _figure(peer, "atari_sample_us") > 0
    # two copies of each 4-frame stack (obs and next obs), as each peer stores them
    assert _figure(peer, "atari_bytes_per_transition") >= 2 * 4 * 84 * 84
    assert peer.storage
    version = pool_peers.LIBRARIES[PEER].distributions[0]
    assert version in report.versions
    table = "\n".join(format_peer_report(report))
    assert f"{version} {report.versions[version]}" in table


def test_a_missing_peer_is_skipped_with_a_note_and_never_run(monkeypatch):
    def no_process(*args, **kwargs):
        msg = "a missing peer must not be run"
        raise AssertionError(msg)

    monkeypatch.setattr(pool_peers, "_run_child", no_process)
    report = run_peer_benchmark(
        ["tianshou"], seconds=0.01, rounds=1, sizes=TINY, find=_only("numpy")
    )
    assert report.rows == ()
    assert report.skipped == (
        "skipped tianshou: tianshou not installed (pip install tianshou)",
    )
    lines = format_peer_report(report)
    assert (
        lines[-1] == "  skipped tianshou: tianshou not installed (pip install tianshou)"
    )


def test_installed_peers_names_each_missing_module():
    present, notes = installed_peers(
        ["vecpool", "sb3", "torchrl"], _only("vecpool", "torch", "torchrl")
    )
    assert present == ["vecpool"]
    assert notes == [
        "skipped sb3: stable_baselines3 not installed (pip install stable-baselines3)",
        "skipped torchrl: tensordict not installed (pip install torchrl tensordict)",
    ]
    with pytest.raises(ValueError, match="unknown library 'reverb'"):
        installed_peers(["reverb"])


def test_a_failing_process_becomes_a_note():
    (row,) = pool_peers._run_child("nope", 0.01, 0, TINY, timeout=120)
    assert row["label"] == "nope"
    assert row["figures"] == {}
    (note,) = row["notes"]
    assert note.startswith("failed: its process exited 1: KeyError")


def test_rounds_merge_into_medians_keeping_notes_once():
    def result(add, note):
        return [
            {
                "label": "x",
                "library": "x",
                "figures": {"cartpole_add_us": add, "prioritized_sample_us": None},
                "storage": "s",
                "notes": [note],
            }
        ]

    (row,) = pool_peers._merge([result(1.0, "a"), result(5.0, "a"), result(2.0, "b")])
    assert row.figures == {"cartpole_add_us": 2.0, "prioritized_sample_us": None}
    assert row.notes == ("a", "b")
    assert row.rounds == 3


def _report():
    full: dict[str, float | None] = dict.fromkeys(FIGURES, 12.345)
    full["atari_bytes_per_transition"] = 7_100.4
    full["atari_sample_us"] = 2_345.6
    return PeerReport(
        rows=(
            PeerRow("vecpool", "vecpool", full, "frame_stack=4"),
            PeerRow(
                "sb3",
                "sb3",
                {**full, "prioritized_sample_us": None, "prioritized_update_us": None},
                "obs + next_obs",
                ("prioritized: n/a (no prioritized buffer)",),
            ),
            PeerRow(
                "sb3 optimize_memory",
                "sb3",
                {"atari_add_us": 3.0, "atari_sample_us": 4.0},
                "optimize_memory_usage=True",
            ),
        ),
        skipped=("skipped cpprb: cpprb not installed (pip install cpprb)",),
        versions={"vecpool": "0.1.0", "stable-baselines3": "2.9.2"},
        rounds=3,
        seconds=1.0,
    )


def test_the_table_has_a_row_per_library_and_the_versions_in_its_header():
    lines = format_peer_report(_report())
    text = "\n".join(lines)
    assert "median of 3 rounds of 1 s" in lines[0]
    assert lines[1] == "versions: vecpool 0.1.0, stable-baselines3 2.9.2"
    assert "capacity 400,000" in text
    assert "capacity 100,000" in text
    assert "1,000,000 rows" in text
    header = next(i for i, line in enumerate(lines) if line.startswith("library"))
    rows = lines[header + 1 : header + 4]
    assert rows[0].split() == [
        "vecpool", "12.3", "12.3", "12.3", "2,346", "7,100", "12.3", "12.3",
        "frame_stack=4",
    ]  # fmt: skip
    assert rows[1].split()[6:] == ["n/a", "n/a", "obs", "+", "next_obs"]
    assert rows[2].split() == [
        "sb3", "optimize_memory", "-", "-", "3.0", "4.0", "-", "-", "-",
        "optimize_memory_usage=True",
    ]  # fmt: skip
    # the columns line up: each figure ends where its titles end
    for column in range(len(FIGURES)):
        end = 20 + 11 * (column + 1) - 1
        for line in lines[header - 1 : header + 4]:
            assert line[end] != " ", (column, line)
            assert line[end + 1 : end + 2] in {"", " "}, (column, line)
    assert lines[-3:] == [
        "notes:",
        "  sb3: prioritized: n/a (no prioritized buffer)",
        "  skipped cpprb: cpprb not installed (pip install cpprb)",
    ]


def test_the_report_is_json_ready():
    data = json.loads(json.dumps(_report().to_dict(), allow_nan=False))
    assert data["rows"][1]["figures"]["prioritized_sample_us"] is None
    assert data["sizes"]["atari_capacity"] == 100_000


POOL_REPORT = pool_bench.PoolBenchReport(
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


MAIN_JOB = main_job.MainJobReport(rows=(), env_steps=16, rounds=3)


@pytest.fixture
def canned(monkeypatch):
    """``bench pool`` with both benchmarks replaced by canned reports."""
    calls = []

    def peers(**kwargs):
        calls.append(kwargs)
        return _report()

    monkeypatch.setattr(pool_bench, "run_pool_benchmark", lambda **_: POOL_REPORT)
    monkeypatch.setattr(main_job, "run_main_job_benchmark", lambda **_: MAIN_JOB)
    monkeypatch.setattr(pool_peers, "run_peer_benchmark", peers)
    monkeypatch.setattr(pool_peers, "installed_peers", lambda: (["sb3"], []))
    return calls


def test_bench_pool_peers_prints_the_table_and_writes_json(canned, capsys, tmp_path):
    path = tmp_path / "pool.json"
    argv = ["bench", "pool", "--peers", "--rounds", "4", "--seconds", "0.5"]
    assert cli.main([*argv, "--quiet", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "replay pool:" in out  # the existing figures stay
    assert "replay buffers side by side" in out
    assert "sb3 optimize_memory" in out
    (call,) = canned
    assert call["rounds"] == 4
    assert call["seconds"] == 0.5
    assert call["sizes"] == pool_peers.FULL_SIZES
    data = json.loads(path.read_text())
    assert data["peers"]["rows"][0]["label"] == "vecpool"
    assert data["pool"]["rounds"] == 3


@pytest.mark.parametrize(
    ("flags", "runs"),
    [
        ([], True),
        (["--quick"], False),
        (["--no-peers"], False),
        (["--quick", "--peers"], True),
    ],
)
def test_bench_pool_runs_the_peers_by_default_unless_quick(canned, capsys, flags, runs):
    assert cli.main(["bench", "pool", "--quiet", *flags]) == 0
    assert bool(canned) is runs
    assert ("replay buffers side by side" in capsys.readouterr().out) is runs
    if runs and "--quick" in flags:
        assert canned[0]["sizes"] == pool_peers.QUICK_SIZES


def test_no_peer_installed_says_so_in_one_line(canned, monkeypatch, capsys):
    note = (
        "skipped sb3: stable_baselines3 not installed (pip install stable-baselines3)"
    )
    monkeypatch.setattr(pool_peers, "installed_peers", lambda: ([], [note]))
    assert cli.main(["bench", "pool", "--quiet"]) == 0
    assert not canned
    assert f"no replay-buffer peer to compare with: {note}" in capsys.readouterr().out


def test_peers_flag_outside_bench_pool_is_refused(capsys):
    assert cli.main(["bench", "--peers", "--quick"]) == 2
    assert (
        "--peers/--no-peers belong to `vecpool bench pool`" in capsys.readouterr().err
    )
