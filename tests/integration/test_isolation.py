"""Fixes found in review: per-env copies, stale replies, interrupts, dtypes, pickling.

Each test compares with what Gymnasium's own AsyncVectorEnv does (one pickled copy per
env, per message) or with the behaviour DESIGN.md promises, over each placement (the
``placement`` fixture of tests/conftest.py).
"""

from __future__ import annotations

import functools
import multiprocessing
import re
import signal
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import vecpool
from vecpool.errors import RemoteTraceback
from vecpool.testing import CountingEnv, SlowEnv, UnpicklableInfoEnv

pytestmark = pytest.mark.timeout(60)

STEPS_IN_STEP_ASYNC = (
    "needs a worker process: an env that steps in this process cannot be "
    "interrupted half-way (its step runs under the Ctrl-C guard)"
)


def _slow_fns(n):
    return [functools.partial(SlowEnv) for _ in range(n)]


def test_reset_options_are_a_separate_copy_per_env(make_placed, make_gym_async):
    """An env that mutates its `options` must not affect its neighbours."""
    ours = make_placed(_slow_fns(3))
    theirs = make_gym_async(_slow_fns(3))
    options = {"token": 7}
    ours.reset(seed=0, options=options)
    theirs.reset(seed=0, options=options)
    assert options == {"token": 7}
    assert (
        ours.get_attr("options_seen")
        == theirs.get_attr("options_seen")
        == (
            [7],
            [7],
            [7],
        )
    )


def test_set_attr_and_call_arguments_are_copied_per_env(make_placed, make_gym_async):
    shared = {}  # type: ignore[var-annotated]
    results = {}
    for name, factory in (("vecpool", make_placed), ("gymnasium", make_gym_async)):
        envs = factory(_slow_fns(2))
        envs.set_attr("config", shared)
        envs.call("remember", "key", [1])
        results[name] = envs.get_attr("config")
        assert envs.get_attr("config")[0] is not envs.get_attr("config")[1]
    assert results["vecpool"] == results["gymnasium"] == ({"key": [1]}, {"key": [1]})


# Not over placements: both envs in one worker, busy with the timed-out step.
def test_actions_after_a_timeout_reach_the_right_envs(make_async):
    """A worker still busy with a timed-out step must not read the next actions."""
    envs = make_async(_slow_fns(2), num_workers=1)
    envs.reset(seed=0)
    first = np.array([[0.6], [0.01]], dtype=np.float32)
    second = np.array([[0.02], [0.03]], dtype=np.float32)
    envs.step_async(first)
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.1)
    _, rewards, *_ = envs.step(second)  # worker is still sleeping in env 0's step
    np.testing.assert_allclose(rewards, second[:, 0], rtol=1e-6)
    received = envs.get_attr("actions_received")
    np.testing.assert_allclose(received[0], [0.6, 0.02], rtol=1e-6)
    np.testing.assert_allclose(received[1], [0.01, 0.03], rtol=1e-6)
    # and shared memory is used again once the stale reply is drained
    third = np.zeros((2, 1), dtype=np.float32)
    envs.step(third)
    assert [len(actions) for actions in envs.get_attr("actions_received")] == [3, 3]


# a hang guard, not a speed claim: waiting the 60 s CLOSE_GRACE out fails through
# the timeout
@pytest.mark.timeout(30)
@pytest.mark.needs_worker_process(reason=STEPS_IN_STEP_ASYNC)
def test_close_after_interrupt_in_step_wait_does_not_hang(make_placed, monkeypatch):
    monkeypatch.setattr(vecpool.vector.async_env, "CLOSE_GRACE", 60.0)
    envs = make_placed(_slow_fns(2))
    envs.reset(seed=0)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        envs.step_async(np.full((2, 1), 0.5, dtype=np.float32))
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            envs.step_wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    envs.close()
    assert all(not process.is_alive() for process in envs.processes)


@pytest.mark.needs_worker_process(reason=STEPS_IN_STEP_ASYNC)
def test_interrupted_step_leaves_env_usable(make_placed):
    envs = make_placed(_slow_fns(2))
    envs.reset(seed=0)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        envs.step_async(np.full((2, 1), 0.3, dtype=np.float32))
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            envs.step_wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    _, rewards, *_ = envs.step(np.full((2, 1), 0.01, dtype=np.float32))
    np.testing.assert_allclose(rewards, [0.01, 0.01], rtol=1e-6)


def test_mismatched_action_dtype_warns_once_and_stays_exact(make_placed, make_sync):
    fns = [functools.partial(gym.make, "Pendulum-v1") for _ in range(3)]
    ours = make_placed(fns)
    reference = make_sync(fns)
    ours.reset(seed=1)
    reference.reset(seed=1)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-2, 2, size=(5, 3, 1))  # float64 for a float32 Box
    with pytest.warns(vecpool.VecPoolWarning, match=re.escape("astype(np.float32)")):
        first = ours.step(actions[0])
    assert data_equivalence(first, reference.step(actions[0]), exact=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per dtype, not every step
        for batch in actions[1:]:
            assert data_equivalence(ours.step(batch), reference.step(batch), exact=True)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16])
def test_lossless_integer_actions_take_the_fast_path(make_placed, make_sync, dtype):
    """JAX's int32 (or uint8) actions for a Discrete space: no pipe, no warning.

    The values reach each env unchanged; Gymnasium hands the env the array's own
    scalar type, vecpool the action space's (np.int64): equal as actions.
    """
    fns = [functools.partial(CountingEnv) for _ in range(3)]
    ours, reference = make_placed(fns), make_sync(fns)
    ours.reset(seed=3)
    reference.reset(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "travel pickled" warning
        for step in range(30):
            actions = np.array([step % 2, (step + 1) % 2, 1]).astype(dtype)
            assert data_equivalence(
                ours.step(actions), reference.step(actions), exact=True
            )
        # and through `send` batches' shared path too
        batched = make_placed(fns, batch_size=3)
        batched.reset(seed=3)
        batched.send(np.array([1, 0, 1], dtype), np.arange(3))
        assert batched.recv()[4]["env_id"].size == 3
    # the hot path itself takes them (the pipe path would have warned above)
    assert ours._buffers.actions.place(np.zeros(3, dtype)) is None


def test_bool_actions_reach_the_env_as_bools_as_in_gymnasium(make_placed, make_sync):
    # Gymnasium's Discrete refuses np.True_ (CartPole asserts it); written into the
    # int64 actions they passed as ints, and the env stepped where Sync raises
    fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    ours, reference = make_placed(fns), make_sync(fns)
    ours.reset(seed=4)
    reference.reset(seed=4)
    actions = np.array([True, True])  # each env's error reads the same
    with pytest.raises(AssertionError, match="invalid") as expected:
        reference.step(actions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pickled path's, Gymnasium's log lines
        with pytest.raises(AssertionError, match=re.escape(str(expected.value))):
            ours.step(actions)


def test_lossy_integer_actions_still_travel_as_given(make_placed, make_sync):
    fns = [functools.partial(CountingEnv)] * 2
    ours, reference = make_placed(fns), make_sync(fns)
    ours.reset(seed=4)
    reference.reset(seed=4)
    actions = np.ones(2, np.uint64)  # uint64 -> int64 could overflow: not lossless
    with pytest.warns(vecpool.VecPoolWarning, match="travel pickled"):
        result = ours.step(actions)
    assert data_equivalence(result, reference.step(actions), exact=True)


def test_list_actions_reach_envs_like_gymnasium(make_placed, make_sync):
    fns = [functools.partial(CountingEnv) for _ in range(3)]
    ours, reference = make_placed(fns), make_sync(fns)
    ours.reset(seed=2)
    reference.reset(seed=2)
    for step in range(20):
        actions = [step % 2, (step + 1) % 2, 1]
        assert data_equivalence(ours.step(actions), reference.step(actions), exact=True)


def _logged(action):
    """Run ``action``; return (the exception it raised, the warning texts)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            action()
        except Exception as error:  # noqa: BLE001 - returned to the test
            return error, [str(warning.message) for warning in caught]
    pytest.fail("expected an exception")
    return None  # type: ignore[unreachable]


def test_unpicklable_call_result_is_reported_and_worker_survives(make_placed):
    envs = make_placed([functools.partial(SlowEnv) for _ in range(2)])
    envs.reset(seed=0)
    error, logged = _logged(lambda: envs.call("make_lock"))
    assert isinstance(error, TypeError)
    assert "pickle" in str(error)
    assert any("Worker-0" in text for text in logged)
    assert any("Worker-1" in text for text in logged)
    assert envs.call("sleep", 0.0) == (0.0, 0.0)


def test_env_exception_names_the_env_index(make_placed):
    fns = [functools.partial(CountingEnv) for _ in range(2)]
    fns.append(functools.partial(UnpicklableInfoEnv, at=1))  # type: ignore[arg-type]
    envs = make_placed(fns)
    envs.reset(seed=0)
    error, logged = _logged(lambda: envs.step(np.ones(3, dtype=np.int64)))
    assert isinstance(error, TypeError)
    assert any("Worker-2" in text for text in logged)
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "sub-environment 2" in str(error.__cause__)
    # the worker and its other env are alive: the vector env keeps working
    envs.reset(seed=1)
    envs.step(np.zeros(3, dtype=np.int64))


def test_make_vec_vectorization_mode(placement):
    envs = vecpool.make_vec(
        "CartPole-v1",
        2,
        vectorization_mode="async",
        vector_kwargs=placement.kwargs(2),
    )
    envs.close()
    with pytest.raises(ValueError, match=re.escape("must be None or 'async'")):
        vecpool.make_vec("CartPole-v1", 2, vectorization_mode="sync")


# Not over placements: the string entry point takes no vector keywords (see
# tests/integration/test_make_vec.py), so it always builds the default.
def test_vector_entry_point_keeps_the_registered_spec():
    env_id = "VecpoolTestNoChecker-v0"
    gym.register(
        env_id,
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        vector_entry_point="vecpool:vector_entry_point",
        disable_env_checker=True,
        max_episode_steps=30,
    )
    try:
        envs = gym.make_vec(env_id, num_envs=2)
        try:
            specs = envs.get_attr("spec")  # type: ignore[attr-defined]
            assert all(spec.id == env_id for spec in specs)
            assert all(spec.disable_env_checker for spec in specs)
            assert all(spec.max_episode_steps == 30 for spec in specs)
        finally:
            envs.close()
    finally:
        del gym.registry[env_id]


def test_close_releases_the_shared_block(placement, make_placed):
    import gc
    import weakref

    envs = make_placed([functools.partial(CountingEnv) for _ in range(2)])
    envs.reset(seed=0)
    block = weakref.ref(envs._buffers.block.raw)
    envs.close()
    gc.collect()
    assert block() is None
