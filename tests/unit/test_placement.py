"""The default placement's cost model (vecpool/_util/placement.py) on fake machines.

Every choice is checked against the rules it must keep, on CPU counts from 1 to 64,
with and without SMT: never more spinners than cores, every env placed, workers
evenly loaded, the parent's share only on 2 cores, and the measured 16-core
choices (8 workers x 2 envs for CartPole n=16, not 16 workers).
"""

from __future__ import annotations

import math

import pytest

from vecpool._util import topology
from vecpool._util.placement import RECORD_STEPS, Placement, plan
from vecpool.testing import CountingEnv
from vecpool.vector import arguments

CORES = [1, 2, 4, 8, 16, 64]
NUM_ENVS = [1, 2, 3, 8, 16, 32, 64, 256]


def _check(num_envs, **overrides):
    values = {
        "num_workers": None,
        "wait_strategy": "auto",
        "batch_size": None,
        "on_worker_crash": "raise",
        "max_restarts": 3,
        "policy_threads": None,
        **overrides,
    }
    max_concurrency = values.pop("max_concurrency", None)
    return arguments.check_arguments(
        [CountingEnv] * num_envs, "auto", None, max_concurrency, **values
    )


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize("num_envs", NUM_ENVS)
def test_the_choice_keeps_the_rules(cores, num_envs):
    placed = plan(num_envs, cores)
    hosted = num_envs - placed.parent_envs
    assert 1 <= placed.num_workers <= hosted  # every worker hosts an env
    # never more spinners than cores: the parent spins only while it has a core
    spinners = placed.num_workers + 1
    assert spinners <= cores or placed.num_workers <= max(1, cores)
    if placed.parent_envs:
        assert cores == 2  # the share pays on 2 cores only
        assert placed.num_workers + 1 <= cores
        # the parent and the worker step about as many envs each
        assert abs(placed.parent_envs - hosted / placed.num_workers) <= 1
    else:
        assert cores != 2 or num_envs == 1
    assert placed.cores == cores


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize("num_envs", NUM_ENVS)
def test_no_fewer_workers_would_host_as_few_envs_each(cores, num_envs):
    placed = plan(num_envs, cores, share=False)
    per_worker = math.ceil(num_envs / placed.num_workers)
    if placed.num_workers > 1:  # one worker less must load some worker more
        assert math.ceil(num_envs / (placed.num_workers - 1)) > per_worker


def test_the_measured_16_core_choices():
    # CartPole n=16 on 16 cores (11-27): 16 x 1 with a spinning parent 1.4-1.6x
    # Sync at 10x its CPU; 8 x 2 2.9x; 15 workers 1.7x
    assert plan(16, 16) == Placement(num_workers=8, parent_envs=0, cores=16)
    assert plan(64, 16).num_workers == 13  # 5 envs each; the parent keeps a core
    assert plan(8, 64).num_workers == 8  # cheap or not, one env each fits


def test_two_cores_keep_the_parents_share():
    assert plan(8, 2) == Placement(num_workers=1, parent_envs=4, cores=2)
    assert plan(32, 2) == Placement(num_workers=1, parent_envs=16, cores=2)
    assert plan(3, 2) == Placement(num_workers=1, parent_envs=1, cores=2)
    assert plan(1, 2) == Placement(num_workers=1, parent_envs=0, cores=2)
    # every env in workers (isolation asked): two workers, the parent blocks
    assert plan(8, 2, share=False) == Placement(num_workers=2, parent_envs=0, cores=2)


@pytest.mark.parametrize("cores", CORES)
@pytest.mark.parametrize("num_envs", NUM_ENVS)
def test_a_parent_that_records_steps_a_smaller_share(cores, num_envs):
    # vecpool collect records each step while the workers step: the model counts
    # that work (m), so the parent keeps fewer envs, and on more cores none
    alone, recording = (
        plan(num_envs, cores),
        plan(num_envs, cores, parent_work=RECORD_STEPS),
    )
    assert recording.parent_envs <= alone.parent_envs
    assert recording.num_workers + 1 <= max(2, cores) or recording.parent_envs == 0
    if cores != 2:
        assert recording == alone
    elif num_envs >= 8:
        assert 0 < recording.parent_envs < alone.parent_envs
        assert recording.num_workers == 1


def test_the_measured_share_of_a_recording_parent():
    # 8 CartPole envs on 2 cores, collect (11-28): shares of 2 and 3 ran 1.3-1.4x
    # the share of 4; the model takes 3 (the larger of two near-equal costs)
    assert plan(8, 2, parent_work=RECORD_STEPS) == Placement(1, 3, 2)
    assert plan(8, 2, parent_work=0.0) == plan(8, 2)


def test_one_core_has_one_worker_and_no_share():
    assert plan(8, 1) == Placement(num_workers=1, parent_envs=0, cores=1)


def test_max_concurrency_caps_the_workers():
    assert plan(64, 16, max_workers=4).num_workers == 4


@pytest.mark.parametrize(
    ("logical", "physical", "num_envs", "workers", "share"),
    [
        (2, 2, 8, 1, 4),  # this machine's kind: 2 cores, the parent's share
        (4, 2, 8, 1, 4),  # 2 cores with 2 hyperthreads each: still a 2-core plan
        (16, 16, 16, 8, 0),
        (32, 16, 16, 8, 0),  # SMT siblings would share a core: 16, not 32
        (16, 8, 64, 7, 0),
        (64, 64, 64, 16, 0),
    ],
)
def test_the_constructor_places_by_physical_cores(
    monkeypatch, tmp_path, logical, physical, num_envs, workers, share
):
    # a fake sysfs: logical CPU i is a hyperthread of core i % physical
    for cpu in range(logical):
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "physical_package_id").write_text("0\n")
        (folder / "core_id").write_text(f"{cpu % physical}\n")
    monkeypatch.setattr(topology, "SYSFS_CPUS", tmp_path)
    monkeypatch.setattr(topology, "allowed_cpus", lambda: list(range(logical)))
    monkeypatch.setattr(topology, "available_cpus", lambda: logical)
    monkeypatch.setattr(
        arguments,
        "physical_cores",
        lambda: topology.physical_cores(root=tmp_path),
    )
    checked = _check(num_envs)
    assert (checked.num_workers, checked.parent_envs) == (workers, share)
    # isolation asked: every env in a worker, the workers on the cores
    isolated = _check(num_envs, on_worker_crash="restart")
    assert isolated.parent_envs == 0
    assert isolated.num_workers == plan(num_envs, physical, share=False).num_workers


def test_describe_says_where_the_envs_step():
    assert plan(8, 2).describe(8) == "1 worker x 4 envs + 4 in this process (2 cores)"
    assert plan(16, 16).describe(16) == "8 workers x 2 envs (16 cores)"
    assert plan(64, 16).describe(64) == "13 workers x 4-5 envs (16 cores)"
    assert Placement(0, 8, 2).describe(8) == "all 8 envs in this process (2 cores)"
