"""`vecpool demo`: vecpool against Gymnasium on CartPole, and which is fastest here."""

from __future__ import annotations

import re

import pytest

from vecpool.cli import main


def test_demo_compares_every_vector_env_and_names_the_fastest(capsys):
    assert main(["demo", "--num-envs", "2", "--steps", "40"]) == 0
    out = capsys.readouterr().out
    names = [
        "vecpool.AsyncVectorEnv",
        "vecpool.AsyncVectorEnv(num_workers=0)",
        "gymnasium.vector.AsyncVectorEnv",
        "gymnasium.vector.SyncVectorEnv",
    ]
    rates = {}
    for name in names:
        match = re.search(rf"^{re.escape(name)} +([\d,]+)", out, re.MULTILINE)
        assert match is not None, name
        rates[name] = int(match.group(1).replace(",", ""))
    fastest = re.search(r"^fastest here: (\S+)", out, re.MULTILINE)
    assert fastest is not None
    assert rates[fastest.group(1)] == max(rates.values())
    assert "results identical: yes" in out


def test_demo_with_num_workers_runs_no_extra_in_process_row(capsys):
    assert main(["demo", "--num-envs", "2", "--steps", "20", "--num-workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "AsyncVectorEnv(num_workers=0)" not in out
    assert "results identical: yes" in out


def test_the_program_is_called_vecpool(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("vecpool ")
    assert "python -m" not in out
    with pytest.raises(SystemExit):
        main(["collect", "--steps", "0"])
    assert (
        capsys.readouterr().err.splitlines()[-1].startswith("vecpool collect: error:")
    )
