"""A custom ``worker=``: vecpool.AsyncVectorEnv runs Gymnasium's own machinery.

Same env fns, seeds, actions and worker -> the same results and errors as
``gymnasium.vector.AsyncVectorEnv`` in every autoreset mode; vecpool's refusals,
messages and extra API stay; the env is still a ``vecpool.AsyncVectorEnv`` (issue 29).
"""

from __future__ import annotations

import functools
import gc
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import _async_worker

import vecpool
from vecpool.testing import (
    ActionEchoEnv,
    CountingEnv,
    ExitingEnv,
    MissionEnv,
    RaisingEnv,
    assert_same_data,
    assert_same_rollout,
    make_env_fns,
)

pytestmark = pytest.mark.timeout(60)


class _TextEnv(gym.Env[str, np.int64]):
    """Text observations that change every step."""

    observation_space = spaces.Text(5, charset="abc")
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.count = 0
        return "a", {}

    def step(self, action: Any) -> Any:
        self.count += 1
        return "ab"[self.count % 2] * (1 + self.count % 4), 0.0, False, False, {}


def _actions(env: Any, steps: int, seed: int = 0) -> list[Any]:
    space = env.action_space
    space.seed(seed)
    return [space.sample() for _ in range(steps)]


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda mode: mode.value)
@pytest.mark.parametrize("shared_memory", [True, False, "auto"])
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_same_results_as_gymnasium_with_the_same_worker(mode, shared_memory, obs_kind):
    fns = make_env_fns(3, obs_kind=obs_kind, max_steps=6, terminate_prob=0.2)
    reference = gym.vector.AsyncVectorEnv(
        fns,
        shared_memory=shared_memory is not False,
        worker=_async_worker,  # type: ignore[arg-type]  # Gymnasium's own annotation
        autoreset_mode=mode,
    )
    candidate = vecpool.AsyncVectorEnv(
        fns, shared_memory=shared_memory, worker=_async_worker, autoreset_mode=mode
    )
    try:
        ended = assert_same_rollout(
            reference, candidate, _actions(reference, 25), seed=7, reset_seeds=[3, None]
        )
        assert ended > 0
        assert_same_data(
            reference.get_attr("steps_taken"), candidate.get_attr("steps_taken")
        )
    finally:
        reference.close()
        candidate.close()


def test_same_errors_as_gymnasium(caplog_gym):
    fns = [functools.partial(RaisingEnv, raise_on="step", at=2)] * 2
    raised = []
    classes: list[Any] = [gym.vector.AsyncVectorEnv, vecpool.AsyncVectorEnv]
    for cls in classes:
        env = cls(fns, worker=_async_worker)
        try:
            env.reset(seed=0)
            env.step(np.zeros(2, np.int64))
            with pytest.raises(
                ValueError, match="failed on purpose in step #2"
            ) as info:
                env.step(np.zeros(2, np.int64))
            raised.append(info.value)
        finally:
            env.close(terminate=True)
    assert type(raised[0]) is type(raised[1])
    assert str(raised[0]) == str(raised[1])
    # vecpool's: the remote traceback chained, naming the env in its first line,
    # and a note naming it too (also on Python 3.10, which prints no notes)
    where = "raised in sub-environment [01] of AsyncVectorEnv"
    assert isinstance(raised[1].__cause__, vecpool.errors.RemoteTraceback)
    assert "in explode" in str(raised[1].__cause__)
    assert re.search(rf"^\({where}\)$", str(raised[1].__cause__), re.MULTILINE)
    assert re.fullmatch(where, getattr(raised[1], "__notes__", [""])[0])


@pytest.fixture
def caplog_gym(recwarn):
    return recwarn  # Gymnasium's logger.error warns; keep them out of the output


def test_is_a_vecpool_and_a_gymnasium_async_vector_env(leak_checker):
    env = vecpool.AsyncVectorEnv(make_env_fns(2), worker=_async_worker)
    try:
        assert isinstance(env, vecpool.AsyncVectorEnv)
        assert gym.vector.AsyncVectorEnv in type(env).__mro__  # Gymnasium's machinery
        assert type(env).__name__ == "AsyncVectorEnv"
        # one process per env (Gymnasium's protocol), said as vecpool says it
        assert repr(env) == f"AsyncVectorEnv(num_envs=2, {env.placement.describe(2)})"
        assert "2 workers x 1 env" in repr(env)
        assert env.worker is _async_worker
        assert env.num_workers == 2
        assert env.batch_size is None
        assert env.on_worker_crash == "raise"
        assert env.restarts == (0, 0)
        assert env.pending_env_ids == []
        assert env.observation_transport == "shared"
        assert [process.name for process in env.processes] == [
            "Worker<AsyncVectorEnv>-0",
            "Worker<AsyncVectorEnv>-1",
        ]
    finally:
        env.close()
    with pytest.raises(
        gym.error.ClosedEnvironmentError,
        match=re.escape("Trying to operate on `AsyncVectorEnv`, after a call to"),
    ):
        env.step(np.zeros(2, np.int64))
    leak_checker.assert_no_leaks()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"num_workers": 1},
            "`num_workers=1` cannot be combined with a custom `worker`, which hosts "
            "one env per process: leave `num_workers` unset or set it to num_envs=2.",
        ),
        (
            {"batch_size": 1},
            "`batch_size` cannot be combined with a custom `worker`.",
        ),
        (
            {"on_worker_crash": "restart"},
            "`on_worker_crash='restart'` needs vecpool's own worker",
        ),
        ({"max_concurrency": 0}, "`max_concurrency` must be a positive or None"),
        ({"shared_memory": "yes"}, '`shared_memory` must be True, False or "auto"'),
        ({"wait_strategy": "fast"}, "`wait_strategy` must be one of"),
    ],
)
def test_vecpool_arguments_are_checked_first(kwargs, message, leak_checker):
    with pytest.raises(ValueError, match=re.escape(message)):
        vecpool.AsyncVectorEnv(make_env_fns(2), worker=_async_worker, **kwargs)
    leak_checker.assert_no_leaks()


def test_a_worker_with_the_wrong_signature_gets_gymnasiums_message():
    def worker(index: int) -> None:
        del index

    with pytest.raises(ValueError, match="A custom `worker` must accept 8 arguments"):
        vecpool.AsyncVectorEnv(make_env_fns(2), worker=worker)


@pytest.mark.parametrize("method", ["get_states", "set_states", "step_from", "send"])
def test_vecpool_only_methods_are_refused(method, make_async):
    env = make_async(make_env_fns(2), worker=_async_worker)
    env.reset(seed=0)
    args = {
        "get_states": (),
        "set_states": ([None, None],),
        "step_from": ([None, None], np.zeros(2, np.int64)),
        "send": (np.zeros(2, np.int64),),
    }[method]
    message = (
        "`send`/`recv` need asynchronous batches: create the vector env with "
        "`batch_size=k`."
        if method == "send"
        else f"`{method}` is not available with a custom `worker`."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        getattr(env, method)(*args)
    with pytest.raises(ValueError, match=re.escape("need asynchronous batches")):
        env.recv()
    env.step(np.zeros(2, np.int64))  # still usable


def test_auto_pickles_a_space_gymnasiums_shared_memory_cannot_hold(make_async):
    fns = [MissionEnv, MissionEnv]
    env = make_async(fns, worker=_async_worker)
    assert env.observation_transport == "pickled"
    sync = gym.vector.SyncVectorEnv(fns)
    try:
        assert_same_rollout(sync, env, _actions(sync, 8))
    finally:
        sync.close()
    with pytest.raises(ValueError, match=re.escape("shared_memory=True)` caused")):
        vecpool.AsyncVectorEnv(fns, shared_memory=True, worker=_async_worker)


def test_auto_pickles_text_which_gymnasiums_shared_memory_reads_once(make_async):
    # Gymnasium's shared memory decodes a Text leaf when it is created: every step
    # would return that placeholder ("aaaaa"), so "auto" pickles it
    env = make_async([_TextEnv] * 2, worker=_async_worker)
    assert env.observation_transport == "pickled"
    sync = gym.vector.SyncVectorEnv([_TextEnv] * 2)
    try:
        assert_same_rollout(sync, env, [np.zeros(2, np.int64)] * 4)
    finally:
        sync.close()


def test_reset_mask_leaves_the_callers_options_alone(make_async):
    env = make_async(
        make_env_fns(2), worker=_async_worker, autoreset_mode=AutoresetMode.DISABLED
    )
    env.reset(seed=0)
    options = {"reset_mask": np.array([True, False])}
    env.reset(options=options)
    assert list(options) == ["reset_mask"]


def test_a_wrong_number_of_actions_is_refused_before_anything_is_sent(make_async):
    env = make_async(make_env_fns(3), worker=_async_worker)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("one action per sub-environment")):
        env.step(np.zeros(2, np.int64))
    env.step(np.zeros(3, np.int64))  # nothing was half-sent


def test_a_wrong_action_shape_is_refused_with_vecpools_message(make_async):
    env = make_async(make_env_fns(2, action_kind="box"), worker=_async_worker)
    env.reset(seed=0)
    message = "`actions[0]` has shape (3,), which does not fit the single action"
    with pytest.raises(ValueError, match=re.escape(message)):
        env.step(np.zeros((2, 3), np.float32))
    env.step(np.zeros((2, 2), np.float32))


def test_calling_a_protocol_command_is_refused_and_the_env_goes_on(make_async):
    env = make_async(make_env_fns(2), worker=_async_worker)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("use `reset` directly instead")):
        env.call("reset")
    env.step(np.zeros(2, np.int64))


def test_after_a_timeout_a_step_returns_its_own_rows(make_async):
    import multiprocessing

    env = make_async(
        [functools.partial(ActionEchoEnv, delay=0.2)] * 2, worker=_async_worker
    )
    env.reset(seed=0)
    env.step_async(np.array([1.0, 1.0]))
    with pytest.raises(multiprocessing.TimeoutError):
        env.step_wait(timeout=0.01)
    obs = env.step(np.array([2.0, 3.0]))[0]
    assert obs.tolist() == [[2.0, 2.0], [3.0, 2.0]]  # not step 1's [1.0, 1.0]


def test_a_dead_worker_raises_and_close_returns(leak_checker, caplog_gym):
    env = vecpool.AsyncVectorEnv(
        [CountingEnv, functools.partial(ExitingEnv, at_step=1)], worker=_async_worker
    )
    env.reset(seed=0)
    with pytest.raises(EOFError):  # Gymnasium's, from the closed pipe
        env.step(np.zeros(2, np.int64))
    env.close()  # Gymnasium's would wait for ever for the live worker's reply
    leak_checker.assert_no_leaks()


def test_a_subclass_keeps_its_overrides():
    steps = []

    class Counting(vecpool.AsyncVectorEnv):
        def step_async(self, actions: Any) -> None:
            steps.append(actions)
            super().step_async(actions)

    env = Counting(make_env_fns(2), worker=_async_worker)
    try:
        assert isinstance(env, Counting)
        assert type(env).__name__ == "Counting"
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        assert len(steps) == 1
    finally:
        env.close()


def test_garbage_collection_releases_everything(leak_checker):
    env = vecpool.AsyncVectorEnv(
        make_env_fns(2, obs_kind="image"), worker=_async_worker
    )
    env.reset(seed=0)
    del env
    gc.collect()
    leak_checker.assert_no_leaks()


def test_vecpools_tools_work_on_it():
    def make() -> vecpool.AsyncVectorEnv:
        return vecpool.AsyncVectorEnv(
            make_env_fns(2, max_steps=5), worker=_async_worker
        )

    report = vecpool.check_vector_env(make, num_steps=40, seed=0)
    assert report.ok, report.failure
    env = vecpool.ReplayPoolWrapper(make(), pool_size=64)
    try:
        env.reset(seed=0)
        for _ in range(10):
            env.step(np.zeros(2, np.int64))
        assert len(env.get_pool().reward) > 0
    finally:
        env.close()
    vector_env = make()
    try:
        sampler = vecpool.Sampler(vector_env, None, batch_T=4, seed=0)
        batch, _ = sampler.obtain_samples()
        assert batch.reward.shape == (4, 2)
    finally:
        vector_env.close()


def test_after_an_env_error_calls_say_the_worker_was_shut_down(
    leak_checker, caplog_gym
):
    env = vecpool.AsyncVectorEnv(
        [CountingEnv, functools.partial(RaisingEnv, raise_on="reset", at=1)],
        worker=_async_worker,
    )
    with pytest.raises(ValueError, match="failed on purpose"):
        env.reset(seed=0)
    message = "Worker 1 (hosting env 1) was shut down after its env raised"
    with pytest.raises(vecpool.WorkerCrashedError, match=re.escape(message)):
        env.step(np.zeros(2, np.int64))  # Gymnasium's: an AttributeError
    with pytest.raises(vecpool.WorkerCrashedError, match=re.escape(message)):
        env.get_attr("steps_taken")
    env.close()
    leak_checker.assert_no_leaks()


def test_a_failed_start_leaks_nothing(leak_checker):
    fns = [
        functools.partial(CountingEnv, obs_kind="box"),
        functools.partial(CountingEnv, obs_kind="discrete"),
    ]
    with pytest.raises(RuntimeError, match="observation spaces are not equivalent"):
        vecpool.AsyncVectorEnv(fns, worker=_async_worker, shared_memory=False)
    leak_checker.assert_no_leaks()


def _run(script: str) -> str:
    import subprocess
    import sys
    import textwrap

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_forked_child_leaves_the_parents_workers_alone():
    stdout = _run(
        """
        import os, sys
        import numpy as np, vecpool
        from gymnasium.vector.async_vector_env import _async_worker
        from vecpool.testing import make_env_fns
        env = vecpool.AsyncVectorEnv(make_env_fns(2), worker=_async_worker)
        env.reset(seed=0)
        pid = os.fork()
        if pid == 0:
            env.close()  # in the child: the workers are the parent's
            sys.exit(0)
        os.waitpid(pid, 0)
        env.step(np.zeros(2, np.int64))
        env.close()
        print("parent ok")
        """
    )
    assert "parent ok" in stdout


def test_non_daemonic_workers_do_not_hold_up_interpreter_exit():
    stdout = _run(
        """
        import numpy as np, vecpool
        from gymnasium.vector.async_vector_env import _async_worker
        from vecpool.testing import make_env_fns
        fns = make_env_fns(2)
        env = vecpool.AsyncVectorEnv(fns, daemon=False, worker=_async_worker)
        env.reset(seed=0)
        print("exiting")
        """
    )
    assert "exiting" in stdout


def test_the_signature_is_still_gymnasiums_plus_keyword_options():
    import inspect

    ours = list(inspect.signature(vecpool.AsyncVectorEnv).parameters)
    gymnasiums = list(inspect.signature(gym.vector.AsyncVectorEnv).parameters)
    assert ours[: len(gymnasiums)] == gymnasiums
    assert ours[len(gymnasiums)] == "num_workers"


class _Exiting:
    """A process that has closed its descriptors but whose exit is not reaped yet."""

    def __init__(self, sentinel: int) -> None:
        self.sentinel = sentinel

    def is_alive(self) -> bool:
        return True  # waitpid has no status for it yet


def test_a_worker_whose_descriptors_closed_counts_as_ended():
    # its pipe already gives EOF; close() must not then wait on the live workers
    import os

    from vecpool.vector.gymnasium_worker import _ended

    read, write = os.pipe()
    try:
        assert not _ended(_Exiting(read))  # still running: its sentinel is quiet
        os.close(write)
        write = -1
        assert _ended(_Exiting(read))  # ended, whatever is_alive() says
    finally:
        os.close(read)
        if write != -1:
            os.close(write)
