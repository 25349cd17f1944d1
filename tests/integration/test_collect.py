"""``vecpool collect`` and ``vecpool.sampling.collect.collect``, with real workers.

(Ctrl-C during a collection: test_interrupts.py, with every other Ctrl-C test.)
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import re
import shutil as shutil_module
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool import cli
from vecpool._util.placement import plan
from vecpool.sampling import collect as collect_module
from vecpool.sampling.collect import (
    CollectArgumentError,
    collect,
    format_bytes,
    load_policy,
    parse_autoreset_mode,
)
from vecpool.testing import assert_same_data
from vecpool.vector import arguments


def small_run(tmp_path, **kwargs):
    """A fast collection: 2 envs on 2 workers, seeded, saved to ``tmp_path``."""
    settings = {
        "num_envs": 2,
        "steps": 400,
        "pool_size": 1000,
        "out": tmp_path / "pool.npz",
        "num_workers": 2,
        "seed": 0,
        **kwargs,
    }
    return collect("CartPole-v1", **settings)


def run_cli(argv):
    """Run ``vecpool`` in-process; return (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


# ---------------------------------------------------------------- the Python API


def test_collect_writes_a_loadable_pool_matching_the_arguments(tmp_path):
    result = small_run(tmp_path, num_envs=4, steps=1001, pool_size=1000)
    assert result.vector_steps == 251  # ceil(1001 / 4): whole vector steps
    assert result.env_steps == result.planned_env_steps == 1004
    assert not result.interrupted
    assert result.path == tmp_path / "pool.npz"
    assert result.file_size == result.path.stat().st_size > 0

    pool = vecpool.ReplayPool.load(result.path)
    assert pool.num_envs == 4
    assert pool.pool_size == 1000
    assert pool.capacity == 250
    assert result.capacity == 1000
    assert len(pool) == result.kept == len(result.pool)
    assert pool.lengths.tolist() == result.pool.lengths.tolist()
    assert np.array_equal(pool.get_pool().obs, result.pool.get_pool().obs)
    assert result.num_workers == 2


def test_summary_figures_agree_with_the_pool(tmp_path):
    result = small_run(tmp_path, steps=2000, pool_size=4000)
    stats = vecpool.ReplayPool.load(result.path).episode_stats
    assert result.episodes == stats.count > 10
    assert result.mean_return == pytest.approx(stats.mean_return)
    assert result.mean_length == pytest.approx(stats.mean_length)
    # nothing was dropped: every recorded transition is in the pool
    assert result.transitions == result.kept == len(result.pool)
    assert len(result.episode_ends) == result.episodes
    assert list(result.episode_ends) == sorted(result.episode_ends)
    assert result.episode_ends[-1] <= result.env_steps
    # CartPole pays 1 per step: a return is its episode's length
    assert result.episode_returns == pytest.approx(result.episode_lengths)
    assert result.env_steps_per_second > 0

    lines = result.summary_lines()
    text = "\n".join(lines)
    assert f"{result.env_steps:,} env steps" in lines[0]
    assert "env-steps/s" in lines[0]
    assert f"{result.kept:,} kept / {result.capacity:,} capacity" in text
    assert f"episodes: {result.episodes:,} ended" in text
    # issue 32: each mean says what it covers (the progress line shows the last 100)
    recent = result.pool.recent_episode_stats(100)
    assert (
        f"mean return {stats.mean_return:.2f} over all, {recent.mean_return:.2f} "
        f"over the last {recent.count}; mean length {stats.mean_length:.1f} over all"
    ) in text
    # and what the env steps that are not transitions were (NEXT_STEP resets)
    skipped = result.env_steps - result.transitions
    assert skipped > 0
    assert (
        f"the other {skipped:,} env steps only reset an env whose episode had ended "
        "(NEXT_STEP autoreset): not transitions"
    ) in text
    assert f"wrote {result.path} ({format_bytes(result.file_size)})" in text
    assert "interrupted" not in text


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("next_step", AutoresetMode.NEXT_STEP),
        ("SameStep", AutoresetMode.SAME_STEP),
        (AutoresetMode.DISABLED, AutoresetMode.DISABLED),
    ],
)
def test_each_autoreset_mode_records_real_transitions(tmp_path, mode, expected):
    result = small_run(tmp_path, steps=1000, pool_size=1000, autoreset_mode=mode)
    assert result.autoreset_mode is expected
    pool = vecpool.ReplayPool.load(result.path)
    batch = pool.get_pool()
    assert result.episodes == pool.episode_stats.count > 5
    assert result.mean_return == pytest.approx(pool.episode_stats.mean_return)
    assert np.count_nonzero(batch.terminated | batch.truncated) == result.episodes
    if expected is AutoresetMode.NEXT_STEP:
        # the step after an episode ended only resets: an env step, no transition
        assert result.transitions == result.env_steps - result.episodes + (
            # an episode that ended on the very last step has no reset step yet
            sum(end == result.env_steps for end in result.episode_ends)
        )
    else:
        assert result.transitions == result.env_steps
    assert len(pool) == result.transitions
    # within a sub-pool, each transition starts where the previous one ended,
    # unless the previous one ended its episode
    for env in range(pool.num_envs):
        rows = slice(int(pool.lengths[:env].sum()), int(pool.lengths[: env + 1].sum()))
        obs, next_obs = batch.obs[rows], batch.next_obs[rows]
        ended = (batch.terminated | batch.truncated)[rows]
        continued = ~ended[:-1]
        assert np.array_equal(obs[1:][continued], next_obs[:-1][continued])
        assert not np.array_equal(obs[1:][~continued], next_obs[:-1][~continued])


def test_pool_options_are_forwarded(tmp_path):
    result = small_run(
        tmp_path,
        steps=600,
        pool_size=200,
        window_size=60,
        clearing_freq=50,
        clearing_size=10,
        random_routing=True,
        store_next_obs=False,
    )
    pool = vecpool.ReplayPool.load(result.path)
    assert (pool.pool_size, pool.capacity) == (200, 100)
    assert (pool.window_size, pool.clearing_freq, pool.clearing_size) == (60, 50, 10)
    assert pool.random
    assert not pool.store_next_obs
    assert result.kept == len(pool) < result.transitions
    assert pool.lengths.max() <= pool.capacity


def test_window_size__is_a_deprecated_name_of_clearing_size(tmp_path):
    # issue 29: checked before any worker starts (steps=0 stops the run there)
    with (
        pytest.warns(DeprecationWarning, match=re.escape("pass `clearing_size=10`")),
        pytest.raises(CollectArgumentError, match="`steps`"),
    ):
        small_run(tmp_path, steps=0, clearing_freq=50, window_size_=10)
    msg = "`collect` got both `clearing_size=10` and `window_size_=10`"
    with pytest.raises(TypeError, match=re.escape(msg)):
        small_run(tmp_path, clearing_freq=50, clearing_size=10, window_size_=10)


def test_out_none_writes_nothing(tmp_path):
    result = small_run(tmp_path, out=None, steps=20)
    assert result.path is None
    assert result.file_size is None
    assert list(tmp_path.iterdir()) == []
    assert all("wrote" not in line for line in result.summary_lines())


def test_seeded_runs_are_identical(tmp_path):
    first = small_run(tmp_path, out=None, steps=300)
    second = small_run(tmp_path, out=None, steps=300)
    assert first.episode_returns == second.episode_returns
    assert np.array_equal(first.pool.get_pool().action, second.pool.get_pool().action)


@pytest.fixture
def policy_module(tmp_path, monkeypatch):
    """An importable module ``collect_test_policy`` with ``push_left`` in it."""
    package = tmp_path / "policies"
    package.mkdir()
    (package / "collect_test_policy.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            calls = []

            def push_left(observations):
                calls.append(len(observations))
                return np.zeros(len(observations), dtype=np.int64)

            class Holder:
                policy = staticmethod(push_left)

            not_callable = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.delitem(sys.modules, "collect_test_policy", raising=False)
    return "collect_test_policy"


def test_policy_is_loaded_by_name(tmp_path, policy_module):
    result = small_run(tmp_path, steps=100, policy=f"{policy_module}:push_left")
    module = sys.modules[policy_module]
    assert module.calls == [2] * result.vector_steps
    assert np.all(result.pool.get_pool().action == 0)
    assert load_policy(f"{policy_module}:Holder.policy") is module.push_left


def test_policy_can_be_a_callable(tmp_path):
    result = small_run(
        tmp_path, steps=60, out=None, policy=lambda obs: np.ones(len(obs), np.int64)
    )
    assert np.all(result.pool.get_pool().action == 1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must look like 'module:callable'"),
        ("vecpool_no_such_module:policy", "Cannot import the policy module"),
        ("collect_test_policy:missing", "has no 'missing'"),
        ("collect_test_policy:not_callable", "is not callable"),
    ],
)
def test_bad_policies_are_argument_errors(policy_module, spec, message):
    with pytest.raises(CollectArgumentError, match=message):
        load_policy(spec)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clearing_freq": 10}, "`clearing_freq` and `clearing_size` go together"),
        ({"window_size": 10_000}, "`window_size` must be an integer between 1 and"),
        ({"steps": 0}, "`steps` must be an integer >= 1, got 0."),
        ({"autoreset_mode": "sometimes"}, "Unknown autoreset mode 'sometimes'"),
        ({"num_workers": 5}, "`num_workers` must be an integer between 0 and"),
    ],
)
def test_invalid_arguments_raise_argument_errors(tmp_path, kwargs, message):
    with pytest.raises(CollectArgumentError, match=message):
        small_run(tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_output_directory_is_checked_before_collecting(tmp_path):
    with pytest.raises(CollectArgumentError, match="does not exist"):
        small_run(tmp_path, out=tmp_path / "missing" / "pool.npz")
    with pytest.raises(CollectArgumentError, match="is a directory"):
        small_run(tmp_path, out=tmp_path)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("next_step", AutoresetMode.NEXT_STEP),
        ("NEXT_STEP", AutoresetMode.NEXT_STEP),
        ("NextStep", AutoresetMode.NEXT_STEP),
        ("same-step", AutoresetMode.SAME_STEP),
        ("Disabled", AutoresetMode.DISABLED),
        (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP),
    ],
)
def test_parse_autoreset_mode(text, mode):
    assert parse_autoreset_mode(text) is mode


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(5 * 2**20) == "5.0 MiB"
    assert format_bytes(3 * 2**40) == "3.0 TiB"


# ---------------------------------------------------------------------- progress


def test_progress_is_plain_lines_when_not_a_terminal(tmp_path):
    stream = io.StringIO()
    started = []  # type: ignore[var-annotated]
    result = small_run(tmp_path, steps=200, progress=stream, log=started.append)
    lines = stream.getvalue().splitlines()
    assert lines
    assert "\r" not in stream.getvalue()
    assert lines[-1].startswith("collect: 200/200 env steps (100%), ")
    assert f"{result.episodes:,} episodes, mean return" in lines[-1]
    assert "env-steps/s" in lines[-1]
    assert len(started) == 1
    assert started[0].startswith("collecting CartPole-v1: 200 env steps = 100 vector")


def test_progress_redraws_one_line_on_a_terminal(tmp_path):
    stream = FakeTerminal()
    small_run(tmp_path, steps=200, progress=stream)
    text = stream.getvalue()
    assert text.startswith("\r\x1b[K")
    assert text.endswith("\n")
    assert text.count("\n") == 1
    last = text.rsplit("\r\x1b[K", 1)[-1].rstrip("\n")
    # tqdm's meter: percentage, bar, count in env steps, elapsed<ETA, rate, extra
    assert re.match(r"100%\|█+\| 200/200 \[\d\d:\d\d<00:00, .* env steps/s", last)
    assert "episodes, return" in last
    assert len(last) <= 80  # fitted to the terminal (80 columns when not known)


def test_no_progress_by_default(tmp_path, capsys):
    small_run(tmp_path, steps=20)
    captured = capsys.readouterr()
    assert captured.out == captured.err == ""


# --------------------------------------------------------------------------- CLI


def test_cli_collects_and_prints_the_summary(tmp_path):
    out = tmp_path / "cartpole.npz"
    argv = ["collect", "--num-envs", "2", "--steps", "300", "--pool-size", "600"]
    code, stdout, stderr = run_cli(
        [*argv, "--seed", "1", "--num-workers", "1", "--out", str(out)]
    )
    assert code == 0, stderr
    pool = vecpool.ReplayPool.load(out)
    assert (pool.num_envs, pool.pool_size) == (2, 600)
    lines = stdout.splitlines()
    assert lines[0].startswith("collecting CartPole-v1: 300 env steps = 150 vector")
    assert "envs on 1 worker process, autoreset" in lines[0]
    assert lines[1].startswith("300 env steps (150 vector steps x 2 envs)")
    assert f"{len(pool):,} kept / 600 capacity" in stdout
    assert f"episodes: {pool.episode_stats.count:,} ended" in stdout
    assert f"wrote {out} (" in stdout
    assert "collect: 300/300 env steps (100%)" in stderr  # not a terminal: plain


def test_cli_defaults_pool_size_to_steps_and_quiet_silences_progress(tmp_path):
    out = tmp_path / "pool.npz"
    code, stdout, stderr = run_cli(
        ["collect", "--num-envs", "2", "--steps", "50", "--quiet", "--out", str(out)]
    )
    assert code == 0
    assert stderr == ""
    assert vecpool.ReplayPool.load(out).pool_size == 50
    assert "interrupted" not in stdout


def test_cli_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out, plot = tmp_path / "pool.npz", tmp_path / "collect.png"
    code, stdout, _ = run_cli(
        [
            *["collect", "--num-envs", "2", "--steps", "400", "--quiet"],
            *["--out", str(out), "--plot", str(plot)],
        ]
    )
    assert code == 0
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert stdout.splitlines()[-1] == f"wrote {plot}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--clearing-freq", "5"], "--clearing-freq needs --clearing-size too"),
        (["--window-size_", "5"], "--clearing-size needs --clearing-freq too"),
        (["--clearing-size", "5"], "--clearing-size needs --clearing-freq too"),
        (["--steps", "10", "--window-size", "50"], "`window_size` must be"),
        (["--policy", "vecpool_no_such_module:act"], "Cannot import the policy"),
        (["--autoreset-mode", "later"], "Unknown autoreset mode 'later'"),
        (["NoSuchEnv-v0"], "NoSuchEnv"),
        (["--seed", "-1"], "`seed` must be an integer >= 0 (--seed), got -1."),
        (["--steps", str(10**17), "--num-envs", "1"], "does not fit in memory"),
    ],
)
def test_cli_invalid_arguments_exit_with_2(tmp_path, argv, message):
    out = tmp_path / "pool.npz"
    code, stdout, stderr = run_cli(["collect", "--quiet", "--out", str(out), *argv])
    assert code == 2
    assert stderr.startswith("vecpool collect: error: ")
    assert message in stderr
    assert stdout == ""
    assert not out.exists()


def test_cli_a_plot_into_a_missing_folder_is_refused_before_collecting(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "pool.npz"
    plot = tmp_path / "no" / "such" / "plot.png"
    code, _, stderr = run_cli(
        ["collect", "--quiet", "--out", str(out), "--plot", str(plot)]
    )
    assert code == 2
    assert "--plot: the folder" in stderr
    assert not out.exists()  # refused before collecting: nothing written


def test_cli_rejects_non_positive_numbers(capsys):
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["collect", "--steps", "0"])
    assert excinfo.value.code == 2
    assert "expected an integer >= 1" in capsys.readouterr().err


def test_docstring_examples():
    module = importlib.import_module("vecpool.sampling.collect")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0


def test_policy_module_is_found_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "my_local_policy.py").write_text(
        "import numpy as np\n\ndef act(obs):\n    return np.zeros(len(obs), np.int64)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.delitem(sys.modules, "my_local_policy", raising=False)
    policy = load_policy("my_local_policy:act")
    assert policy(np.ones((3, 4))).tolist() == [0, 0, 0]


def test_a_missing_policy_module_names_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CollectArgumentError, match="current directory"):
        load_policy("vecpool_no_such_module_here:act")


def test_too_little_free_space_is_refused_before_collecting(tmp_path, monkeypatch):
    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(
        "vecpool.sampling.collect.shutil.disk_usage",
        lambda path: usage._replace(free=10_000),  # 10 kB free
    )
    runs = []  # the stepping loop: refused up front, it never starts
    monkeypatch.setattr(
        "vecpool.sampling.collect._step", lambda *args: runs.append(args)
    )
    out = tmp_path / "pool.npz"
    argv = ["collect", "CartPole-v1", "--steps", "20000", "--num-envs", "2"]
    code, _, err = run_cli([*argv, "--out", str(out), "--quiet"])
    assert code == 2
    assert "Not enough free space" in err
    assert "Traceback" not in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    assert runs == []


def test_the_free_space_check_counts_what_a_resumed_pool_holds(tmp_path, monkeypatch):
    # a resumed pool's file holds its old rows too (found by the review of
    # --resume: the check counted this run's steps only, and the save then failed)
    first = small_run(tmp_path, num_envs=2, steps=4000, pool_size=4000)
    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(  # room for the archive and 10 steps, not for 4,000 rows
        "vecpool.sampling.collect.shutil.disk_usage",
        lambda path: usage._replace(free=2**20 + 20_000),
    )
    started: list[str] = []  # refused before any worker starts (found by a tester)
    monkeypatch.setattr(collect_module, "make_vec", lambda *a, **k: started.append(a))
    out = tmp_path / "resumed.npz"
    argv = ["collect", "--num-envs", "2", "--steps", "10", "--resume", str(first.path)]
    code, _, err = run_cli([*argv, "--out", str(out), "--quiet"])
    assert code == 2, err
    assert "Not enough free space" in err
    assert not out.exists()
    assert not started


def test_a_failed_save_exits_2_with_nothing_half_written(tmp_path, monkeypatch):
    import errno

    def full_disk(self, path, *, compress=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vecpool.ReplayPool, "save", full_disk)
    out = tmp_path / "pool.npz"
    argv = ["collect", "CartPole-v1", "--steps", "200", "--num-envs", "2"]
    code, _, err = run_cli([*argv, "--out", str(out), "--quiet"])
    assert code == 2
    assert "No space left on device" in err
    assert "Nothing was written" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_failed_save_keeps_the_pool_for_the_caller(tmp_path, monkeypatch):
    import errno

    from vecpool.sampling.collect import CollectSaveError

    original = vecpool.ReplayPool.save
    monkeypatch.setattr(
        vecpool.ReplayPool,
        "save",
        lambda self, path, **kw: (_ for _ in ()).throw(OSError(errno.EROFS, "ro")),
    )
    with pytest.raises(CollectSaveError) as info:
        small_run(tmp_path)
    assert info.value.pool is not None
    assert len(vars(info.value)["pool"]) > 0
    monkeypatch.setattr(vecpool.ReplayPool, "save", original)
    saved = info.value.pool.save(tmp_path / "elsewhere.npz")  # nothing lost
    assert len(vecpool.ReplayPool.load(saved)) == len(vars(info.value)["pool"])


def test_collect_with_restart_survives_a_dead_worker_and_records_only_real_steps(
    tmp_path,
):
    import warnings

    import gymnasium as gym
    import numpy as np

    import vecpool
    import vecpool.sampling.collect

    marker = tmp_path / "crashed"
    env_id = "VecpoolTestIncarnation-v0"
    gym.register(
        env_id,
        entry_point="vecpool.testing:IncarnationEnv",
        kwargs={"crash_marker": str(marker), "crash_at": 15},
    )
    settings: dict[str, Any] = {
        "num_envs": 4,
        "steps": 400,
        "pool_size": 400,
        "out": None,
        "seed": 0,
        "num_workers": 2,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", vecpool.VecPoolWarning)
            result = vecpool.sampling.collect.collect(
                env_id, **settings, on_worker_crash="restart"
            )
        assert marker.exists()  # a worker died on the way
        t = result.pool.get_pool()
        np.testing.assert_array_equal(t.next_obs[:, 1], t.obs[:, 1])  # one process
        np.testing.assert_array_equal(t.next_obs[:, 2], t.obs[:, 2] + 1)
        assert result.episodes == result.pool.episode_stats.count
        marker.unlink()
        with pytest.raises(vecpool.WorkerCrashedError):  # "raise", the default
            vecpool.sampling.collect.collect(env_id, **settings)
    finally:
        del gym.registry[env_id]


def test_cli_takes_an_env_id_as_gym_make_does(tmp_path, monkeypatch):
    (tmp_path / "regcollect.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            if "RegcollectPole-v0" not in gym.registry:
                gym.register(
                    "RegcollectPole-v0",
                    entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                )
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "regcollect", raising=False)
    base = ["collect", "--num-envs", "2", "--steps", "20", "--quiet"]
    code, _, stderr = run_cli([*base, "RegcollectPole-v0"])
    assert code == 2
    assert "--import package" in stderr  # the way out
    code, _, stderr = run_cli(
        [*base, "regcollect:RegcollectPole-v0", "--out", str(tmp_path / "a.npz")]
    )
    assert code == 0, stderr
    monkeypatch.delitem(sys.modules, "regcollect")
    code, _, stderr = run_cli(
        [
            *base,
            "RegcollectPole-v0",
            "--import",
            "regcollect",
            "--out",
            str(tmp_path / "b.npz"),
        ]
    )
    assert code == 0, stderr
    assert vecpool.ReplayPool.load(tmp_path / "b.npz").num_envs == 2
    code, _, stderr = run_cli([*base, "--import", "no_such_pkg_here"])
    assert code == 2
    assert "--import no_such_pkg_here: cannot import" in stderr


def test_the_plot_line_covers_every_episode_of_a_short_run():
    # issue 23, item 4: with fewer than 100 episodes the moving average was one
    # point (no line); the trailing mean has one point per episode
    from vecpool.sampling.collect import trailing_mean

    returns = np.arange(1.0, 11.0)  # 10 episodes
    means = trailing_mean(returns, 100)
    assert means.shape == (10,)
    np.testing.assert_allclose(means, np.cumsum(returns) / np.arange(1, 11))
    np.testing.assert_allclose(trailing_mean(returns, 3)[2:], [2, 3, 4, 5, 6, 7, 8, 9])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--clearing-freq", "10"], "--clearing-freq needs --clearing-size too"),
        (["--clearing-size", "3"], "--clearing-size needs --clearing-freq too"),
    ],
)
def test_a_clearing_flag_alone_names_the_other_flag(flags, message, capsys):
    # issue 23, item 3: the message named Python's `window_size_`, not the flag
    from vecpool.cli import main

    assert main(["collect", "--steps", "100", "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "window_size_" not in err


# ----------------------------------------------------------------------- overlap


def _lean_policy(obs: np.ndarray) -> np.ndarray:
    """CartPole: push by the cart's velocity (short episodes; each row on its own)."""
    return (obs[:, 1] > 0).astype(np.int64)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_overlap_records_what_the_plain_loop_records(tmp_path, mode):
    # each env's trajectory depends on its own seed and observations only, so the
    # overlapped loop (halves out of step) must fill every sub-pool exactly as the
    # plain loop does
    runs = {}
    for overlap in (False, True):
        runs[overlap] = small_run(
            tmp_path,
            num_envs=4,
            steps=4 * 128,
            pool_size=4 * 128,
            out=None,
            seed=3,
            policy=_lean_policy,
            autoreset_mode=mode,
            overlap=overlap,
        )
    plain, overlapped = runs[False], runs[True]
    assert overlapped.env_steps == plain.env_steps == 4 * 128
    assert overlapped.transitions == plain.transitions == len(plain.pool)
    assert plain.episodes > 4
    assert sorted(overlapped.episode_returns) == sorted(plain.episode_returns)
    assert sorted(overlapped.episode_lengths) == sorted(plain.episode_lengths)
    assert np.array_equal(overlapped.pool.lengths, plain.pool.lengths)
    expected, got = plain.pool.get_pool(), overlapped.pool.get_pool()
    for field in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        assert np.array_equal(getattr(got, field), getattr(expected, field)), field
    assert overlapped.pool.episode_stats == plain.pool.episode_stats


def _jittery_policy(obs: np.ndarray) -> np.ndarray:
    """CartPole: an action that changes with every observation (a digit of it)."""
    actions: np.ndarray = (np.abs(obs[:, 2]) * 1e4).astype(np.int64) % 2
    return actions


def _in_turn(
    mode: str,
    policy: Any,
    *,
    num_envs: int,
    vector_steps: int,
    seed: int,
    pool: vecpool.ReplayPool | None = None,
):
    """The loop ``collect`` runs ahead of: step, then record, in turn."""
    autoreset = parse_autoreset_mode(mode)
    env = vecpool.make_vec(
        "CartPole-v1",
        num_envs,
        vector_kwargs={"autoreset_mode": autoreset, "num_workers": 2},
    )
    if pool is None:
        envs = vecpool.ReplayPoolWrapper(env, num_envs * vector_steps)
    else:
        envs = vecpool.ReplayPoolWrapper(env, pool=pool)
    try:
        obs, _ = envs.reset(seed=seed)
        envs.action_space.seed(seed)
        for _ in range(vector_steps):
            actions = envs.action_space.sample() if policy is None else policy(obs)
            obs, _, terminated, truncated, _ = envs.step(actions)
            ended = terminated | truncated
            if autoreset is AutoresetMode.DISABLED and ended.any():
                obs, _ = envs.reset(options={"reset_mask": ended})
    finally:
        envs.close()
    return envs.pool


def _scaling_policy(obs: np.ndarray) -> np.ndarray:
    """:func:`_jittery_policy` after preprocessing its input in place."""
    obs *= 0.5  # e.g. torch.from_numpy(obs).mul_(0.5): shares obs's memory
    return _jittery_policy(obs * 2.0)


@pytest.mark.parametrize("policy", [None, _jittery_policy, _scaling_policy])
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_collect_holds_what_stepping_and_recording_in_turn_holds(
    tmp_path, mode, policy
):
    # collect sends each step before it records the one before (the pool writes
    # while the workers step): the pool must hold what the plain loop's holds,
    # row for row, marks and episodes included; a policy that changes its input
    # in place (after the plain loop recorded it) changes nothing recorded
    num_envs, vector_steps = 4, 150
    result = small_run(
        tmp_path,
        num_envs=num_envs,
        steps=num_envs * vector_steps,
        pool_size=num_envs * vector_steps,
        out=None,
        seed=3,
        policy=policy,
        autoreset_mode=mode,
    )
    expected = _in_turn(
        mode, policy, num_envs=num_envs, vector_steps=vector_steps, seed=3
    )
    assert result.vector_steps == vector_steps
    assert expected.episode_stats.count > 4
    got, want = result.pool.state_dict(), expected.state_dict()
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert result.pool.episode_stats == expected.episode_stats


def _raising_at_step_10(
    error: type[BaseException], policy: Callable[[np.ndarray], np.ndarray]
) -> Callable[[np.ndarray], np.ndarray]:
    """``policy``, raising ``error("stop here")`` on its 10th call (9 steps taken)."""
    calls = []

    def raising(obs: np.ndarray) -> np.ndarray:
        calls.append(len(obs))
        if len(calls) == 10:
            msg = "stop here"
            raise error(msg)
        return policy(obs)

    return raising


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_step_taken_is_recorded_when_the_next_ones_policy_raises(tmp_path, error):
    # the policy runs after a step is taken and before it is recorded (collect
    # sends the next step first): a second Ctrl-C there, or any error, must not
    # lose the step taken
    recorded = []
    policy = _raising_at_step_10(error, lambda obs: np.zeros(len(obs), np.int64))

    original = vecpool.ReplayPoolWrapper.record_step

    def record_step(self, actions, result):
        original(self, actions, result)
        recorded.append(len(self.pool))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vecpool.ReplayPoolWrapper, "record_step", record_step)
        if error is KeyboardInterrupt:  # a second Ctrl-C: what was taken is saved
            result = small_run(tmp_path, out=None, policy=policy, steps=2 * 20)
            assert result.interrupted
            assert result.vector_steps == 9
            assert len(result.pool) == result.transitions == recorded[-1]
        else:
            with pytest.raises(RuntimeError, match="stop here"):
                small_run(tmp_path, out=None, policy=policy, steps=2 * 20)
    assert len(recorded) == 9


def test_an_error_of_the_policy_saves_what_was_collected_then_raises(tmp_path):
    # as after Ctrl-C, the steps taken before an env's or the policy's error are
    # saved (they were lost: nothing was written); the error itself comes back
    policy = _raising_at_step_10(RuntimeError, _jittery_policy)

    path = tmp_path / "pool.npz"
    with pytest.raises(RuntimeError, match="stop here") as info:
        small_run(tmp_path, out=path, policy=policy, steps=2 * 20, seed=5)
    assert str(path) in vars(info.value)["__notes__"][-1]  # what was saved, and where
    assert len(vars(info.value)["pool"]) == len(vecpool.ReplayPool.load(path))
    saved = vecpool.ReplayPool.load(path)
    expected = _in_turn(
        "next_step", _jittery_policy, num_envs=2, vector_steps=9, seed=5
    )
    assert len(saved) == len(expected) > 0
    got, want = saved.get_pool(), expected.get_pool()
    for name, got_rows, want_rows in zip(want._fields, got, want, strict=True):
        np.testing.assert_array_equal(got_rows, want_rows, err_msg=name)


def test_an_error_before_anything_was_recorded_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "pool.npz"
    small_run(tmp_path, out=path, steps=40)
    before = path.read_bytes()

    def policy(obs: np.ndarray) -> np.ndarray:
        msg = "wrong from the start"
        raise RuntimeError(msg)

    with pytest.raises(RuntimeError, match="wrong from the start") as info:
        small_run(tmp_path, out=path, policy=policy, steps=40)
    assert "nothing was written" in vars(info.value)["__notes__"][-1]
    assert path.read_bytes() == before  # not replaced by an empty pool


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
def test_a_worker_envs_own_keyboard_interrupt_stops_collect_as_its_error(
    tmp_path, monkeypatch
):
    # it comes back with its type (and a remote traceback): not a second Ctrl-C,
    # which would end the run quietly as "interrupted"
    (tmp_path / "kbienv.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            from gymnasium.envs.classic_control import CartPoleEnv

            class KbiPole(CartPoleEnv):
                steps = 0

                def step(self, action):
                    self.steps += 1
                    if self.steps == 7:
                        raise KeyboardInterrupt("the env's own")
                    return super().step(action)

            if "KbiPole-v0" not in gym.registry:
                gym.register("KbiPole-v0", entry_point=KbiPole)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kbienv", raising=False)
    path = tmp_path / "pool.npz"
    with pytest.raises(KeyboardInterrupt) as info:
        collect(
            "kbienv:KbiPole-v0",
            num_envs=2,
            steps=40,
            pool_size=40,
            num_workers=2,
            out=path,
            seed=0,
        )
    assert str(info.value) == "the env's own"
    assert isinstance(info.value.__cause__, vecpool.errors.RemoteTraceback)
    assert len(vecpool.ReplayPool.load(path)) > 0


@pytest.mark.parametrize(
    ("raising", "stopped_by"),
    [
        ("raise ZeroDivisionError('policy broke')", "ZeroDivisionError: policy broke"),
        # an ImportError while collecting is not a missing optional dependency
        ("import vecpool_no_such_module_here", "ModuleNotFoundError: No module"),
    ],
    ids=["error", "import-error"],
)
def test_cli_a_policy_error_exits_1_with_the_traceback_and_the_file_saved(
    tmp_path, monkeypatch, raising, stopped_by
):
    (tmp_path / "failing_policy.py").write_text(
        "import numpy as np\n"
        "calls = []\n"
        "def act(obs):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 5:\n"
        f"        {raising}\n"
        "    return np.zeros(len(obs), np.int64)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "failing_policy", raising=False)
    out = tmp_path / "kept.npz"
    code, _, err = run_cli(
        ["collect", "CartPole-v1", "--num-envs", "2", "--steps", "40", "--quiet",
         "--policy", "failing_policy:act", "--out", str(out), "--num-workers", "1"]
    )  # fmt: skip
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert f"vecpool collect: stopped by {stopped_by}" in err
    assert str(out) in err  # what was saved, and where
    assert len(vecpool.ReplayPool.load(out)) > 0


def test_overlap_calls_the_policy_with_batches_of_at_most_half_of_the_envs():
    rows: list[int] = []

    def policy(obs: np.ndarray) -> np.ndarray:
        rows.append(len(obs))
        return np.zeros(len(obs), np.int64)

    result = collect(
        "CartPole-v1",
        num_envs=6,
        steps=6 * 64,
        pool_size=600,
        out=None,
        num_workers=2,
        seed=0,
        policy=policy,
        overlap=True,
    )
    assert result.env_steps == 6 * 64
    # the envs that came back, in groups of at most batch_size (never all six)
    assert max(rows) == 3
    assert sum(rows) == result.env_steps


def test_overlap_rounds_the_steps_up_to_whole_chunks():
    short = collect(
        "CartPole-v1",
        num_envs=2,
        steps=100,
        pool_size=200,
        out=None,
        seed=0,
        overlap=True,
    )
    assert (short.planned_env_steps, short.env_steps) == (100, 100)  # one chunk
    long = collect(
        "CartPole-v1",
        num_envs=2,
        steps=300,
        pool_size=400,
        out=None,
        seed=0,
        overlap=True,
    )
    assert (long.planned_env_steps, long.env_steps) == (384, 384)  # 3 chunks of 64
    assert set(long.episode_ends) <= {128, 256, 384}  # counted at chunk ends


def test_overlap_needs_two_envs():
    with pytest.raises(CollectArgumentError, match=r"num_envs` >= 2, got 1"):
        collect(
            "CartPole-v1", num_envs=1, steps=10, pool_size=10, out=None, overlap=True
        )


def test_cli_overlap_says_so(tmp_path):
    argv = ["collect", "--num-envs", "4", "--steps", "256", "--overlap", "--quiet"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "p.npz")])
    assert code == 0, err
    assert "overlapped (batches of 2 envs)" in out
    assert len(vecpool.ReplayPool.load(tmp_path / "p.npz")) > 0


def test_the_default_pool_holds_every_overlapped_step(tmp_path):
    # --steps is rounded up to whole chunks: the default pool must grow with it
    argv = ["collect", "--num-envs", "2", "--steps", "300", "--overlap", "--quiet"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "p.npz"), "--seed", "0"])
    assert code == 0, err
    assert "600 env steps" not in out
    assert "384 env steps" in out
    # nothing dropped (NEXT_STEP: the reset steps are not transitions)
    assert re.search(r"transitions: ([\d,]+) recorded, \1 kept / 384 capacity", out)


@pytest.mark.parametrize("with_policy", [False, True])
def test_the_cpu_sharing_advice_only_with_a_policy(monkeypatch, with_policy):
    # measured while stepping (issue 38): random actions never warn; a policy on
    # several threads (faked: the parent's CPU clock runs 2.5x the wall's) warns
    import time
    import warnings

    from vecpool._engine.spinning import ThreadWatch
    from vecpool._util import threads

    monkeypatch.setattr(threads, "_warned", False)
    monkeypatch.setattr(
        threads, "parent_pools", lambda: threads.ThreadPools((("openblas", 64),))
    )
    monkeypatch.setattr(ThreadWatch, "WINDOW", 0.0)  # a window every 64 steps
    if with_policy:
        init = ThreadWatch.__init__

        def multi_threaded(self, num_workers, cpus, **_):
            init(self, num_workers, cpus, cpu_clock=lambda: 2.5 * time.perf_counter())

        monkeypatch.setattr(ThreadWatch, "__init__", multi_threaded)
    policy = (lambda obs: np.zeros(len(obs), np.int64)) if with_policy else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collect(
            "CartPole-v1",
            num_envs=2,
            steps=600,  # 300 vector steps: 4 windows
            pool_size=None,
            num_workers=2,
            policy=policy,
            out=None,
        )
    advice = [w for w in caught if w.category is vecpool.VecPoolPerformanceWarning]
    assert len(advice) == (1 if with_policy else 0)
    if with_policy:
        assert "2.5 threads on average" in str(advice[0].message)


SHORT_RUN = ["collect", "CartPole-v1", "--num-envs", "4", "--steps", "40", "--quiet"]


@pytest.fixture
def cores(monkeypatch):
    """Fake the machine's physical cores, for collect and the vector env alike."""

    def fake(count: int) -> None:
        monkeypatch.setattr(collect_module, "physical_cores", lambda: count)
        monkeypatch.setattr(arguments, "physical_cores", lambda: count)

    return fake


def test_the_header_says_where_the_envs_step(tmp_path, cores):
    # on 2 cores: one worker process and a share in this process, which records
    # each step while the worker steps, so its share is smaller than half
    # (vecpool/_util/placement.py, RECORD_STEPS)
    cores(2)
    out = str(tmp_path / "share.npz")
    code, stdout, stderr = run_cli([*SHORT_RUN, "--pool-size", "40", "--out", out])
    assert code == 0, stderr
    first = stdout.splitlines()[0]
    assert "4 envs on 1 worker process and this process (1 env here)" in first
    assert first.endswith("1 worker x 3 envs + 1 in this process (2 cores)")
    argv = [*SHORT_RUN, "--pool-size", "40", "--num-workers", "0", "--out", out]
    code, stdout, stderr = run_cli(argv)
    assert code == 0, stderr
    assert "4 envs in this process," in stdout.splitlines()[0]
    # a placement asked for, or isolation (restart), is not changed
    argv = [*SHORT_RUN, "--pool-size", "40", "--num-workers", "1", "--out", out]
    code, stdout, stderr = run_cli(argv)
    assert code == 0, stderr
    assert stdout.splitlines()[0].endswith("1 worker x 4 envs (2 cores)")
    cores(16)  # many cores: no share, as without recording
    code, stdout, stderr = run_cli([*SHORT_RUN, "--pool-size", "40", "--out", out])
    assert code == 0, stderr
    assert stdout.splitlines()[0].endswith(plan(4, 16).describe(4))


@pytest.mark.parametrize("mode", ["next_step", "disabled"])
def test_collect_goes_on_recording_into_a_saved_pool(tmp_path, mode):
    # `--resume FILE`: a second collection records into the pool the first one
    # saved, as a hand loop over that pool loaded would (starting with a reset)
    num_envs = 4
    first = small_run(
        tmp_path,
        num_envs=num_envs,
        steps=num_envs * 90,
        pool_size=num_envs * 50,  # full: the second run goes round the ring
        out=tmp_path / "first.npz",
        seed=3,
        autoreset_mode=mode,
    )
    checkpoint = tmp_path / "checkpoint.npz"
    checkpoint.write_bytes(first.path.read_bytes())
    resumed = small_run(
        tmp_path,
        num_envs=num_envs,
        steps=num_envs * 70,
        pool_size=None,
        out=tmp_path / "first.npz",  # the same file, written over
        seed=5,
        autoreset_mode=mode,
        resume=first.path,
    )
    expected = _in_turn(
        mode,
        None,
        num_envs=num_envs,
        vector_steps=70,
        seed=5,
        pool=vecpool.ReplayPool.load(checkpoint),
    )
    got, want = resumed.pool.state_dict(), expected.state_dict()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert resumed.pool.episode_stats == expected.episode_stats
    assert resumed.transitions <= num_envs * 70  # this run's
    assert resumed.kept == len(expected) == num_envs * 50  # the pool's, full
    saved = vecpool.ReplayPool.load(tmp_path / "first.npz")
    assert_same_data(saved.get_pool(), expected.get_pool(), "the file written")


def test_resume_refuses_pool_settings_a_bad_file_and_other_envs(tmp_path):
    first = small_run(tmp_path, num_envs=2, steps=40, pool_size=40)
    code, _, err = run_cli(
        ["collect", "--resume", str(first.path), "--num-envs", "2", "--pool-size",
         "10", "--window-size", "4", "--out", str(tmp_path / "x.npz")]
    )  # fmt: skip
    assert code == 2
    assert "leave out pool_size (--pool-size), window_size (--window-size)" in err
    code, _, err = run_cli(
        ["collect", "--resume", str(first.path), "--num-envs", "3", "--out",
         str(tmp_path / "x.npz")]
    )  # fmt: skip
    assert code == 2
    assert "has 2 sub-pools" in err
    assert "--num-envs 2" in err
    missing = tmp_path / "missing.npz"
    code, _, err = run_cli(["collect", "--resume", str(missing), "--num-envs", "2"])
    assert code == 2
    assert f"Cannot resume from {str(missing)!r}" in err
    code, _, err = run_cli(
        ["collect", "Pendulum-v1", "--resume", str(first.path), "--num-envs", "2",
         "--out", str(tmp_path / "x.npz")]
    )  # fmt: skip
    assert code == 2
    assert f"Cannot resume from {str(first.path)!r} with Pendulum-v1" in err
    assert "`pool` has the observation space" in err
    assert not (tmp_path / "x.npz").exists()


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    # `vecpool collect ... | head -1`: the summary goes to a closed pipe. The pool
    # is saved first; then no traceback, and the exit code a shell gives a
    # command cut off by SIGPIPE (141)
    out = tmp_path / "pool.npz"
    # long enough (about a second) that the reader has closed its end by the
    # time the summary comes
    command = [sys.executable, "-m", "vecpool", "collect", "--num-envs", "2",
               "--steps", "20000", "--quiet", "--out", str(out)]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(b"collecting CartPole-v1")
        process.stdout.close()  # the reader stops: later prints hit a closed pipe
        _, err = process.communicate(timeout=120)
    assert process.returncode == 141, err.decode()
    assert b"Traceback" not in err
    assert vecpool.ReplayPool.load(out).lengths.sum() > 0


def test_a_broken_pipe_of_the_users_own_code_is_raised(tmp_path, monkeypatch):
    # only a stdout whose reader is gone ends the command quietly (141): a policy
    # whose connection to its server broke is an error to report, not a reader
    # that stopped (found by the review of the quiet ending)
    (tmp_path / "server_policy.py").write_text(
        "def act(obs):\n    raise BrokenPipeError(32, 'the policy server went away')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["collect", "--num-envs", "2", "--steps", "40", "--quiet", "--policy",
            "server_policy:act", "--out", str(tmp_path / "pool.npz")]  # fmt: skip
    with pytest.raises(BrokenPipeError, match="the policy server went away"):
        run_cli(argv)


COUNTING_ID = "VecpoolCollectCounting-v0"


def _episodes_by_hand(mode: AutoresetMode, num_envs: int, vector_steps: int, seed: int):
    """Each episode's end (env steps), return and length, from Gymnasium's Sync."""
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make(COUNTING_ID) for _ in range(num_envs)], autoreset_mode=mode
    )
    env.reset(seed=seed)
    env.action_space.seed(seed)
    returns, lengths = np.zeros(num_envs), np.zeros(num_envs, np.int64)
    resetting = np.zeros(num_envs, np.bool_)
    ends: list[int] = []
    episode_returns: list[float] = []
    episode_lengths: list[int] = []
    for step in range(1, vector_steps + 1):
        _, rewards, terminations, truncations, _ = env.step(env.action_space.sample())
        done = terminations | truncations
        for index in range(num_envs):
            if resetting[index]:  # NEXT_STEP's reset step: no transition
                continue
            returns[index] += rewards[index]
            lengths[index] += 1
            if done[index]:
                ends.append(step * num_envs)
                episode_returns.append(float(returns[index]))
                episode_lengths.append(int(lengths[index]))
                returns[index], lengths[index] = 0.0, 0
        resetting = done & (mode is AutoresetMode.NEXT_STEP)
        if mode is AutoresetMode.DISABLED and done.any():
            env.reset(options={"reset_mask": done})
    env.close()
    return ends, episode_returns, episode_lengths


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_the_episodes_reported_are_those_of_gymnasiums_loop(mode):
    """Ends, returns and lengths, env by env, as a Sync loop on the same actions
    sees them (the figures come from the pool's own count of the episodes)."""
    if COUNTING_ID not in gym.registry:
        gym.register(
            COUNTING_ID,
            entry_point="vecpool.testing.envs:CountingEnv",
            kwargs={"max_steps": 12, "terminate_prob": 0.1},
        )
    result = collect(
        COUNTING_ID,
        num_envs=4,
        steps=4 * 150,
        pool_size=None,
        out=None,
        seed=5,
        autoreset_mode=mode,
    )
    ends, returns, lengths = _episodes_by_hand(mode, 4, 150, 5)
    assert len(ends) > 20  # episodes of several lengths and envs
    assert list(result.episode_ends) == ends
    assert list(result.episode_lengths) == lengths
    assert list(result.episode_returns) == pytest.approx(returns, rel=1e-12)
    assert result.episodes == result.pool.episode_stats.count


def test_episodes_taken_from_the_pool_during_the_run_are_the_same(monkeypatch):
    """The tracker takes the pool's episodes every few ends (a long run without a
    progress display keeps little): the figures do not change."""
    monkeypatch.setattr(collect_module, "SETTLE_ENDS", 3)
    test_the_episodes_reported_are_those_of_gymnasiums_loop(AutoresetMode.NEXT_STEP)
