"""Every wait strategy gives Gymnasium's results; bad values are refused up front."""

from __future__ import annotations

import functools
import multiprocessing
import re
import time

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool._util.validation import available_cpus
from vecpool._worker.loop import wait_counts
from vecpool.testing import CountingEnv, SlowEnv

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("wait_strategy", ["auto", "spin", "block"])
@pytest.mark.parametrize("num_workers", [1, 2, 5])
def test_strategies_match_sync(make_async, make_sync, wait_strategy, num_workers):
    fns = [functools.partial(CountingEnv, obs_kind="dict", info_every=3)] * 5
    ours = make_async(
        fns,
        num_workers=num_workers,
        wait_strategy=wait_strategy,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    reference = make_sync(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    assert ours.wait_strategy == wait_strategy
    assert data_equivalence(ours.reset(seed=4), reference.reset(seed=4), exact=True)
    actions = np.random.default_rng(4).integers(0, 2, size=(150, 5))
    for batch in actions:
        assert data_equivalence(ours.step(batch), reference.step(batch), exact=True)


@pytest.mark.parametrize("wait_strategy", ["spin", "block"])
def test_timeouts_hold_while_spinning(make_async, wait_strategy):
    envs = make_async(
        [functools.partial(SlowEnv)] * 2, num_workers=2, wait_strategy=wait_strategy
    )
    envs.reset(seed=0)
    envs.step_async(np.full((2, 1), 0.5, dtype=np.float32))
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.05)
    _, rewards, *_ = envs.step(np.full((2, 1), 0.01, dtype=np.float32))
    np.testing.assert_allclose(rewards, [0.01, 0.01], rtol=1e-6)


def test_invalid_wait_strategy_is_refused():
    with pytest.raises(ValueError, match=re.escape("`wait_strategy` must be one of")):
        vecpool.AsyncVectorEnv([CountingEnv], wait_strategy="busy")


def _wait_counts(env: vecpool.AsyncVectorEnv) -> dict[str, int]:
    """The workers' :class:`~vecpool._worker.loop.WaitCounts`, summed.

    Each test env here has a worker of its own, so each env's answer is its
    worker's. The call is a command too: it counts once per worker.
    """
    counts = env.call("wait_counts")
    return {
        key: sum(count[key] for count in counts) for key in ("spinning", "blocking")
    }


def _counted(env, loop, times):
    """How the workers waited for the commands of ``times`` rounds of ``loop``.

    The commands counted: the rounds' and the closing count call.
    """
    env.set_attr("wait_counts", wait_counts)  # pickled by name: run in the workers
    before = _wait_counts(env)
    for _ in range(times):
        loop(env)
    after = _wait_counts(env)
    return {key: after[key] - before[key] for key in before}


def _step_then_sleep(env):
    env.step(np.zeros(2, np.int64))
    time.sleep(0.006)  # the parent's own work


@pytest.mark.skipif(available_cpus() < 2, reason="auto spins only with a core each")
def test_auto_workers_block_while_the_parent_computes(make_async):
    """A policy between steps (here 6 ms of sleep) must not find the workers spinning.

    With ``"spin"`` each worker spins (up to its 2 ms budget) for every command;
    with ``"auto"`` it reads the parent's long gaps in the hint and blocks after a
    few steps. Counted by the workers, per command, not timed.
    """
    counts = {}
    for strategy in ("spin", "auto"):
        env = make_async([CountingEnv] * 2, num_workers=2, wait_strategy=strategy)
        env.reset(seed=0)
        counts[strategy] = _counted(env, _step_then_sleep, 80)
        env.close()
    # 2 workers x (80 steps + the closing count call)
    assert counts["spin"] == {"spinning": 162, "blocking": 0}, counts
    # auto: the hint says spin until the parent's smoothed gap passes 0.25 ms
    # (3 steps of 6 ms: the gap is clipped to 1 ms, averaged by 1/8), then block;
    # without the gap rule auto spins as "spin" does
    assert 0 < counts["auto"]["spinning"] <= 2 * 5, counts
    assert counts["auto"]["blocking"] >= 162 - 2 * 5, counts
    assert sum(counts["auto"].values()) == 162, counts


def _step_then_compute(env, actions):
    env.step(actions)
    time.sleep(0.006)


def _compute_inside_the_step(env, actions):
    env.step_async(actions)
    time.sleep(0.006)  # overlapped with the envs' step
    env.step_wait()


def _compute_before_a_call(env, actions):
    env.step(actions)
    time.sleep(0.006)
    env.get_attr("max_steps")  # a quick call between the policy and the next step


def _send_compute_recv(env, actions):
    env.send(actions[:1], [0])
    time.sleep(0.006)
    env.recv()


@pytest.mark.skipif(available_cpus() < 2, reason="auto spins only with a core each")
@pytest.mark.parametrize(
    "loop",
    [
        _step_then_compute,
        _compute_inside_the_step,
        _compute_before_a_call,
        _send_compute_recv,
    ],
)
def test_auto_workers_block_wherever_the_parent_computes(make_async, loop):
    """The parent's work counts wherever it runs: after, inside, before a call.

    Its own time between two step commands, less its waits, decides; measuring from
    the end of its last wait missed a policy run between ``step_async`` and
    ``step_wait`` or before a quick ``get_attr``, and the workers spun through it
    (0.18-0.33 s of CPU here). Counted by the workers: after ten rounds the hint
    says block, and every command of the next 80 rounds finds them blocked.
    """
    # batches: one worker, as "auto" workers spin with batches only where they
    # leave the parent a core (vecpool/_engine/spinning.py)
    batches = loop is _send_compute_recv
    env = make_async(
        [CountingEnv] * 2,
        num_workers=1 if batches else 2,
        wait_strategy="auto",
        batch_size=1 if batches else None,
    )
    env.reset(seed=0)
    actions = np.zeros(2, np.int64)
    for _ in range(10):
        loop(env, actions)
    counts = _counted(env, functools.partial(loop, actions=actions), 80)
    assert counts["spinning"] == 0, counts
    assert counts["blocking"] >= 80, counts  # at least a command a round
    assert env.unwrapped._group.spin.hint.value == 0


def _step_then_compute_on_one_thread(env):
    env.step(np.zeros(2, np.int64))
    end = time.perf_counter() + 0.0005  # half a millisecond of one-thread policy
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(available_cpus() < 2, reason="needs a core for the worker")
def test_auto_worker_with_a_core_of_its_own_spins_through_a_one_thread_policy(
    make_async, tmp_path
):
    """One worker beside the parent on 2+ CPUs: a policy on one thread takes no core
    from it, so it keeps spinning (no wake-up per step); counted, not timed.

    The machine's load reads as quiet: on a busy one (the suite's other process on
    2 CPUs) the crowd rule rightly makes the worker block, which is not the rule
    tested here.
    """
    env = make_async(
        [CountingEnv] * 2, num_workers=1, parent_envs=0, wait_strategy="auto"
    )
    quiet = tmp_path / "loadavg"
    quiet.write_text("0.00 0.00 0.00 1/100 1\n")
    crowd = env.unwrapped._group.spin.crowd
    assert crowd is not None  # auto with a spinning worker watches the load
    crowd.path = str(quiet)
    env.reset(seed=0)
    counts = _counted(env, _step_then_compute_on_one_thread, 80)
    env.close()
    assert counts["spinning"] > counts["blocking"], counts
