"""The bench's anchors at their best: PufferLib's worker counts, EnvPool's threads."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys

import pytest

from vecpool import AsyncVectorEnv, bench
from vecpool._util import topology
from vecpool.bench import backends as backends_module
from vecpool.bench.backends import (
    BACKENDS,
    EnvPoolBackend,
    PufferLibBackend,
    PufferLibCoresBackend,
    PufferLibModelBackend,
    PufferLibTwoBackend,
    default_num_workers,
    fitting_workers,
)
from vecpool.testing import CountingEnv

_HAS_PUFFERLIB = importlib.util.find_spec("pufferlib") is not None
_HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
_HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def _env_fn():
    return CountingEnv()


def _fake_sysfs(root, cpus):
    """Write ``cpuN/topology/{physical_package_id,core_id}`` for each entry."""
    for cpu, (package, core) in cpus.items():
        folder = root / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "physical_package_id").write_text(f"{package}\n")
        (folder / "core_id").write_text(f"{core}\n")
    return root


# ---------------------------------------------------------------- physical cores


def test_hyperthreads_of_one_core_count_once(tmp_path):
    # 8 logical CPUs: 4 cores, each with two hyperthreads (cpu N and N + 4)
    root = _fake_sysfs(tmp_path, {cpu: (0, cpu % 4) for cpu in range(8)})
    assert topology.physical_cores(root=root, cpus=range(8), limit=8) == 4


def test_same_core_id_on_two_packages_is_two_cores(tmp_path):
    root = _fake_sysfs(tmp_path, {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)})
    assert topology.physical_cores(root=root, cpus=range(4), limit=4) == 4


def test_only_the_cpus_in_the_affinity_mask_count(tmp_path, monkeypatch):
    root = _fake_sysfs(tmp_path, {cpu: (0, cpu % 4) for cpu in range(8)})
    # cpus 1 and 5 are the two threads of core 1; cpu 2 is core 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1, 5, 2})
    assert topology.allowed_cpus() == [1, 2, 5]
    assert topology.physical_cores(root=root, limit=8) == 2


def test_physical_cores_are_capped_by_the_cpu_quota(tmp_path):
    root = _fake_sysfs(tmp_path, {cpu: (0, cpu) for cpu in range(8)})
    assert topology.physical_cores(root=root, cpus=range(8), limit=3) == 3


def test_without_a_topology_it_falls_back_to_the_available_cpus(tmp_path, monkeypatch):
    root = _fake_sysfs(tmp_path, {0: (0, 0)})  # cpu1 has no topology/ folder
    assert topology.physical_cores(root=root, cpus=[0, 1], limit=6) == 6
    monkeypatch.setattr(topology, "available_cpus", lambda: 5)
    assert topology.physical_cores(root=tmp_path / "missing", cpus=[0]) == 5


def test_physical_cores_of_this_machine_fit_its_cpus():
    assert 1 <= topology.physical_cores() <= bench.available_cpus()


# --------------------------------------------------------------- worker counts


@pytest.mark.parametrize(
    ("num_envs", "target", "expected"),
    [
        (8, 8, 8),
        (8, 16, 8),  # never more workers than envs
        (8, 3, 2),
        (12, 5, 4),
        (32, 6, 4),
        (7, 4, 1),  # a prime: one worker
        (6, 1, 1),
        (4, 0, None),  # nothing from 1 to 0
        (4, -1, None),
    ],
)
def test_fitting_workers_is_the_largest_divisor_not_above_the_target(
    num_envs, target, expected
):
    assert fitting_workers(num_envs, target) == expected


@pytest.mark.parametrize("num_envs", [1, 2, 3, 8])
def test_default_num_workers_is_what_vecpool_starts(num_envs):
    with contextlib.closing(AsyncVectorEnv([_env_fn] * num_envs)) as envs:
        assert default_num_workers(_env_fn, num_envs) == envs.num_workers


def test_default_num_workers_follows_vecpool_on_more_cpus(monkeypatch):
    arguments = importlib.import_module("vecpool.vector.arguments")
    monkeypatch.setattr(arguments, "physical_cores", lambda: 16)
    # whatever vecpool's placement does on 16 cores, its own check says it
    checked = arguments.check_arguments(
        [_env_fn] * 32,
        "auto",
        None,
        None,
        num_workers=None,
        wait_strategy="auto",
        batch_size=None,
        on_worker_crash="raise",
        max_restarts=3,
        policy_threads=None,
    )
    assert default_num_workers(_env_fn, 32) == checked.num_workers > 1


def test_model_label_names_the_count_that_ran(monkeypatch):
    monkeypatch.setattr(backends_module, "default_num_workers", lambda fn, n: 5)
    backend = PufferLibModelBackend()
    assert backend.skip_reason(_env_fn, 12) is None
    assert backend.num_workers(_env_fn, 12) == 4
    assert backend.label(_env_fn, 12) == "pufferlib-4w (model)"
    assert backend.label(_env_fn, 5) == "pufferlib-5w (model)"
    assert backend.label(_env_fn, 7) == "pufferlib-1w (model)"


def test_cores_label_names_the_count_that_ran(monkeypatch):
    monkeypatch.setattr(backends_module, "physical_cores", lambda: 8)
    backend = PufferLibCoresBackend()
    assert backend.label(_env_fn, 32) == "pufferlib-8w (cores)"
    assert backend.label(_env_fn, 12) == "pufferlib-6w (cores)"
    assert backend.label(_env_fn, 2) == "pufferlib-2w (cores)"


def test_fixed_counts_keep_their_names_and_say_what_ran():
    assert BACKENDS["pufferlib-1w"].label(_env_fn, 8) == "pufferlib-1w"
    assert BACKENDS["pufferlib-2w"].label(_env_fn, 8) == "pufferlib-2w"
    # 3 envs cannot be split over 2 workers: it runs 1, and says so
    assert PufferLibTwoBackend().label(_env_fn, 3) == "pufferlib-1w"
    assert PufferLibBackend().skip_reason(_env_fn, 3) is None


def test_by_default_the_anchors_run_at_their_best():
    defaults = {name for name, backend in BACKENDS.items() if backend.by_default}
    assert {"pufferlib-model", "pufferlib-cores", "envpool"} <= defaults
    assert not defaults & {"pufferlib-1w", "pufferlib-2w"}  # only when named


def test_envpool_label_states_its_threads(monkeypatch):
    monkeypatch.setattr(backends_module, "available_cpus", lambda: 8)
    backend = EnvPoolBackend()
    assert backend.num_threads() == 8
    assert backend.label(_env_fn, 32) == "envpool-8t (cpus)"


# -------------------------------------------------------------------- skipping


def test_no_valid_count_skips_with_a_reason(monkeypatch):
    monkeypatch.setattr(backends_module, "default_num_workers", lambda fn, n: 0)
    backend = PufferLibModelBackend()
    reason = backend.skip_reason(_env_fn, 4)
    assert reason == (
        "no valid worker count: PufferLib needs one that divides num_envs=4, from 1 "
        "to 0 (vecpool's default num_workers)"
    )
    with pytest.raises(ValueError, match=re.escape(f"`pufferlib-model`: {reason}.")):
        backend.make(_env_fn, 4, seed=0)


def _quick_group(*backends: str) -> bench.GroupResult:
    """One quick run of ``backends`` on 2 CartPole envs: its only group."""
    settings = bench.BenchSettings(
        workloads=("cartpole",),
        num_envs=(2,),
        backends=backends,
        rounds=1,
        steps=2,
        seconds=0.01,
        warmup_seconds=0.0,
        quick=True,
        memory=False,
    )
    report = bench.run_benchmark(settings, progress=bench.Progress(enabled=False))
    (group,) = report.groups
    return group


def test_the_runner_notes_a_skipped_anchor_and_runs_the_rest(monkeypatch):
    monkeypatch.setattr(backends_module, "default_num_workers", lambda fn, n: 0)
    # pufferlib need not be installed: the skip comes before anything is built
    monkeypatch.setattr(PufferLibModelBackend, "supports", lambda self, w: True)
    group = _quick_group("raw", "pufferlib-model")
    assert [result.backend for result in group.results] == ["raw"]
    reason = PufferLibModelBackend().skip_reason(_env_fn, 2)
    assert group.skipped == (("pufferlib-model", reason),)
    assert group.to_dict()["skipped"] == {"pufferlib-model": reason}
    assert f"       2  skipped pufferlib-model: {reason}" in bench.format_group_table(
        [group]
    )


@pytest.mark.parametrize(
    ("module", "backend"), [("envpool", "envpool"), ("pufferlib", "pufferlib-model")]
)
def test_an_anchor_that_fails_to_import_is_skipped_with_why(
    tmp_path, monkeypatch, module, backend
):
    # an installed package that raises on import (EnvPool's wheel without its data
    # files raised FileNotFoundError on a 16-core host and ended `vecpool bench`)
    package = tmp_path / module
    package.mkdir()
    (package / "__init__.py").write_text("raise FileNotFoundError('no roms')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [name for name in sys.modules if name.split(".")[0] == module]:
        monkeypatch.delitem(sys.modules, name)
    backends_module.import_failure.cache_clear()
    try:
        group = _quick_group("raw", "envpool", "pufferlib-model")
        ran = [result.backend for result in group.results]
        assert ran[0] == "raw"
        assert not any(name.startswith(module) for name in ran)
        reasons = dict(group.skipped)
        assert reasons[backend] == (
            f"{module} is installed but does not import: FileNotFoundError: no roms"
        )
        assert f"skipped {backend}: {module} is installed" in "\n".join(
            bench.format_group_table([group])
        )
    finally:
        backends_module.import_failure.cache_clear()


# ------------------------------------------------------------------ a real run


@pytest.mark.skipif(
    not (_HAS_PUFFERLIB and _HAS_ENVPOOL and _HAS_MATPLOTLIB),
    reason="needs pufferlib-core, envpool and matplotlib",
)
def test_quick_run_plots_the_anchors(tmp_path):
    plot = tmp_path / "anchors.png"
    settings = bench.BenchSettings(
        workloads=("cartpole",),
        num_envs=(1, 2),
        backends=("raw", "envpool", "pufferlib-model", "pufferlib-cores"),
        rounds=1,
        steps=4,
        seconds=0.01,
        warmup_seconds=0.0,
        quick=True,
        memory=False,
    )
    report = bench.run_benchmark(settings, progress=bench.Progress(enabled=False))
    assert [group.num_envs for group in report.groups] == [1, 2]
    for group in report.groups:
        labels = {result.backend: result.display_name for result in group.results}
        assert labels["envpool"] == f"envpool-{bench.available_cpus()}t (cpus)"
        assert re.fullmatch(r"pufferlib-[12]w \(model\)", labels["pufferlib-model"])
        assert re.fullmatch(r"pufferlib-[12]w \(cores\)", labels["pufferlib-cores"])
        assert all(result.median > 0 for result in group.results)
    bench.write_plot(report, plot)
    content = plot.read_bytes()
    assert content.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(content) > 1000
