"""RaySampler on a simulated multi-node cluster: a killed actor, a removed node.

``ray.cluster_utils.Cluster`` runs a 0-CPU head and three 1-CPU nodes on this
machine, with health checks every 500 ms (3 misses: node dead). Skipped when Ray is
absent; ``nox -s ray`` runs it.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import vecpool
from vecpool.testing import IncarnationEnv

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from vecpool.sampling.distributed import RaySampler  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]
PID = 1
HEALTH = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}


@pytest.fixture
def cluster() -> Iterator[Any]:
    made = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": HEALTH}
    )
    for _ in range(3):
        made.add_node(num_cpus=1)
    ray.init(address=made.address, log_to_driver=False)
    made.wait_for_nodes()
    yield made
    ray.shutdown()
    made.shutdown()


def _slow_policy(obs: Any) -> Any:
    time.sleep(0.002)
    return np.zeros(len(obs), np.int64)


def _sampler(pool: vecpool.ReplayPool) -> RaySampler:
    return RaySampler(
        [functools.partial(IncarnationEnv, index=i) for i in range(4)],
        _slow_policy,
        100,
        num_actors=2,
        seed=0,
        pool=pool,
        actor_options={"num_cpus": 1},
        env_kwargs={"num_workers": 1},
    )


def _pool() -> vecpool.ReplayPool:
    env = IncarnationEnv()
    return vecpool.ReplayPool(env.observation_space, env.action_space, 4, 4 * 5000)


def _check(pool: vecpool.ReplayPool, accepted: int) -> None:
    t = pool.get_pool()
    assert len(pool) == accepted  # none duplicated, none fabricated
    np.testing.assert_array_equal(t.next_obs[:, 0], t.obs[:, 0])
    np.testing.assert_array_equal(t.next_obs[:, PID], t.obs[:, PID])
    np.testing.assert_array_equal(t.next_obs[:, 2], t.obs[:, 2] + 1)
    assert pool.episode_stats.count == int(t.terminated.sum())


@pytest.mark.timeout(120)
def test_a_killed_actor_process_resumes(cluster):
    pool = _pool()
    sampler = _sampler(pool)
    try:
        accepted = int(sampler.obtain_samples()[0].valid.sum())
        pid = ray.get(sampler.actors[1].pid.remote())
        killer = threading.Timer(0.1, os.kill, (pid, signal.SIGKILL))
        killer.start()
        batch, _ = sampler.obtain_samples()  # a hang fails the test's timeout
        killer.join()
        accepted += int(batch.valid.sum())
        assert sampler.restarts == [0, 1]
        accepted += int(sampler.obtain_samples()[0].valid.sum())
        _check(pool, accepted)
    finally:
        sampler.close()


@pytest.mark.timeout(180)
def test_a_removed_node_resumes(cluster):
    pool = _pool()
    sampler = _sampler(pool)
    try:
        accepted = int(sampler.obtain_samples()[0].valid.sum())
        where = ray.get(sampler.actors[1].node_id.remote())
        (node,) = [n for n in cluster.list_all_nodes() if n.node_id == where]
        remover = threading.Timer(0.1, cluster.remove_node, (node,))
        remover.start()
        # a hang fails the test's timeout (detection alone takes 3 missed 500 ms
        # health checks)
        batch, _ = sampler.obtain_samples()
        remover.join()
        accepted += int(batch.valid.sum())
        assert sampler.restarts == [0, 1]
        assert ray.get(sampler.actors[1].node_id.remote()) != where
        accepted += int(sampler.obtain_samples()[0].valid.sum())
        _check(pool, accepted)
    finally:
        sampler.close()
