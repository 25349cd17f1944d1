"""vecpool.errors: hierarchy and pickle round trips (errors cross processes)."""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any, cast

import gymnasium.error
import numpy as np
import pytest

import vecpool.errors as errors
from vecpool._engine import env_errors
from vecpool._wire.messages import Reply
from vecpool._wire.remote_errors import pack_error

INSTANCES: dict[str, Any] = {
    "VecPoolError": errors.VecPoolError("base failure"),
    "ClosedEnvironmentError": errors.ClosedEnvironmentError("closed env"),
    "AlreadyPendingCallError": errors.AlreadyPendingCallError("pending call", "step"),
    "NoAsyncCallError": errors.NoAsyncCallError("no async call", "reset"),
    "CustomSpaceError": errors.CustomSpaceError("custom space"),
    "ConcurrentUseError": errors.ConcurrentUseError("called from two threads"),
    "WorkerCrashedError": errors.WorkerCrashedError(
        "Worker 1 (envs 2, 3) died with exit code -9", 1, (2, 3), -9
    ),
    "RemoteTraceback": errors.RemoteTraceback(
        'Traceback (most recent call last):\n  File "x.py", line 1, in explode\n'
    ),
    "VecPoolWarning": errors.VecPoolWarning("misuse"),
    "VecPoolPerformanceWarning": errors.VecPoolPerformanceWarning("advice"),
    "OutOfStepError": errors.OutOfStepError("worker 0 is out of step"),
    "ForcedInterrupt": errors.ForcedInterrupt(),
    "CollectArgumentError": errors.CollectArgumentError("--steps must be > 0"),
    "CollectSaveError": errors.CollectSaveError("disk full"),
    "VectorEnvCheckError": errors.VectorEnvCheckError("check report text"),
    "ReferenceFailedError": errors.ReferenceFailedError("the reference raised"),
}

ATTRIBUTES = {
    "AlreadyPendingCallError": ("name",),
    "NoAsyncCallError": ("name",),
    "WorkerCrashedError": ("worker", "env_indices", "exitcode"),
    "RemoteTraceback": ("traceback_text",),
    "VectorEnvCheckError": ("report",),
}

DROP_IN = {
    "ClosedEnvironmentError": gymnasium.error.ClosedEnvironmentError,
    "AlreadyPendingCallError": gymnasium.error.AlreadyPendingCallError,
    "NoAsyncCallError": gymnasium.error.NoAsyncCallError,
    "CustomSpaceError": gymnasium.error.CustomSpaceError,
}


def test_every_public_class_is_covered():
    public = {
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type)
        and issubclass(getattr(errors, name), BaseException)
    }
    assert public == set(INSTANCES)


@pytest.mark.parametrize("name", sorted(INSTANCES))
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_pickle_round_trip(name, protocol):
    original = INSTANCES[name]
    restored = pickle.loads(pickle.dumps(original, protocol=protocol))
    assert type(restored) is type(original)
    assert str(restored) == str(original)
    assert restored.args == original.args
    for attribute in ATTRIBUTES.get(name, ()):
        assert getattr(restored, attribute) == getattr(original, attribute), attribute


@pytest.mark.parametrize("name", sorted(DROP_IN))
def test_drop_in_errors_subclass_both_hierarchies(name):
    cls = getattr(errors, name)
    assert issubclass(cls, errors.VecPoolError)
    assert issubclass(cls, DROP_IN[name])
    with pytest.raises(DROP_IN[name]):
        raise INSTANCES[name]


def test_every_error_class_of_the_package_lives_in_errors():
    import ast
    from pathlib import Path

    package = Path(errors.__file__).parent

    def is_error(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.ClassDef)
            and not node.name.startswith("_")
            and any(
                getattr(base, "id", getattr(base, "attr", "")).endswith(
                    ("Error", "Exception", "Interrupt", "Warning")
                )
                for base in node.bases
            )
        )

    # (testing/errors.py holds the deliberate errors of the test envs)
    sources = [
        path for path in sorted(package.rglob("*.py")) if path.name != "errors.py"
    ]
    elsewhere = [
        f"{path.relative_to(package)}:{node.name}"  # type: ignore[attr-defined]
        for path in sources
        for node in ast.walk(ast.parse(path.read_text()))
        if is_error(node)
    ]
    # (a private class never leaves its module: files.py turns _BadFile into the
    # ValueError load() documents)
    assert elsewhere == []


def test_interrupts_and_drop_in_errors_are_caught_as_their_parents():
    assert issubclass(errors.ForcedInterrupt, KeyboardInterrupt)
    assert issubclass(errors.CollectArgumentError, ValueError)
    assert issubclass(errors.CollectSaveError, OSError)
    assert issubclass(errors.VectorEnvCheckError, AssertionError)


def test_worker_crashed_error_attributes():
    error = INSTANCES["WorkerCrashedError"]
    assert isinstance(error, errors.WorkerCrashedError)
    assert isinstance(error, errors.VecPoolError)
    assert (error.worker, tuple(error.env_indices), error.exitcode) == (1, (2, 3), -9)
    assert str(error) == "Worker 1 (envs 2, 3) died with exit code -9"
    unknown = errors.WorkerCrashedError("gone", 0, (0,), None)
    assert pickle.loads(pickle.dumps(unknown)).exitcode is None


def test_remote_traceback_shows_the_remote_text():
    text = INSTANCES["RemoteTraceback"].traceback_text
    assert text in str(INSTANCES["RemoteTraceback"])
    assert "explode" in str(pickle.loads(pickle.dumps(INSTANCES["RemoteTraceback"])))


def test_env_fns_mistakes_name_the_fix():
    # issue 23: Gymnasium says "'TimeLimit' object is not callable" and "object of
    # type 'function' has no len()"; same types, messages that say what to pass
    import multiprocessing

    import gymnasium as gym

    import vecpool

    before = set(multiprocessing.active_children())
    env: Any = gym.make("CartPole-v1")
    with pytest.raises(
        TypeError, match=r"`env_fns\[0\]` is a TimeLimit, not a function"
    ):
        vecpool.AsyncVectorEnv([env, env])
    env.close()
    with pytest.raises(TypeError, match="got a single function: wrap it in a list"):
        vecpool.AsyncVectorEnv(lambda: gym.make("CartPole-v1"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got an int: pass a list of functions"):
        vecpool.AsyncVectorEnv(3)  # type: ignore[arg-type]
    # issue 32: one env instance was told "wrap it in a list", which only led to
    # the error above; now the message says what the list holds
    env = gym.make("CartPole-v1")
    with pytest.raises(
        TypeError,
        match=r"got a TimeLimit env instance: pass a list of functions that create "
        r"envs \(each worker builds its own\), not an env\.",
    ):
        vecpool.AsyncVectorEnv(env)
    env.close()
    assert set(multiprocessing.active_children()) == before


def test_a_scalar_action_says_one_action_per_env(make_placed: Any) -> None:
    # issue 32: Gymnasium's "Unable to iterate over the following elements: 0"
    # (its type and text kept) now says what to pass; over every placement
    import gymnasium as gym

    envs = make_placed([lambda: gym.make("CartPole-v1")] * 2)
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError) as info:
            envs.step(0)
        text = str(info.value)
        assert text.startswith("Unable to iterate over the following elements: 0.")
        assert (
            "`actions` must hold one action per sub-environment (num_envs=2), e.g. "
            "`envs.action_space.sample()` (shape (2,)), not one env's action: got 0."
        ) in text
        # nothing was sent: the env still steps
        envs.step(envs.action_space.sample())
    finally:
        envs.close()


_WHERE = {  # 8 envs: where each placement steps them
    "processes": "envs 0-3 in worker process 0; envs 4-7 in worker process 1",
    "in_process": "envs 0-7 in the parent process",
    "parent_share": "envs 0-3 in worker process 0; envs 4-7 in the parent process",
}


def test_a_raising_step_says_which_envs_and_processes_and_that_all_stay_usable(
    make_placed: Any, placement: Any
) -> None:
    # issue 32: Gymnasium's log lines (kept word for word: its suite counts them)
    # said "Worker-0" .. "Worker-7 - Shutting it down" for 8 envs in 2 processes,
    # with nothing shut down; the exception's note says what happened
    import warnings

    import gymnasium as gym

    envs = make_placed([lambda: gym.make("CartPole-v1")] * 8)
    try:
        envs.reset(seed=0)
        with warnings.catch_warnings(record=True) as logged:
            warnings.simplefilter("always")
            with pytest.raises(AssertionError) as info:
                envs.step(np.full(8, 2))
        lines = [str(w.message) for w in logged]
        assert sum("Shutting it down" in line for line in lines) == 8
        notes = getattr(info.value, "__notes__", [])
        assert notes[0] == "raised in sub-environment 7 of AsyncVectorEnv"
        assert notes[1] == (
            "vecpool: the log lines above name sub-environment i 'Worker-i', as "
            "Gymnasium (one env a worker) does; 8 sub-environments raised: "
            f"{_WHERE[placement.id]}. Nothing was shut down: every env and worker "
            "process stays usable (reset the envs that raised, or all, and go on)."
        )
        envs.step(np.zeros(8, np.int64))  # true: it steps on
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("mask", "text"),
    [
        ([True, False], "must be a numpy array, got <class 'list'>"),
        (np.ones(3, bool), "must have shape `(2,)`, got (3,)"),
        (np.ones(2, np.int64), "must have `dtype=np.bool_`, got int64"),
        (
            np.zeros(2, bool),
            "must contain a boolean array, got reset_mask=[False False]",
        ),
    ],
)
def test_reset_mask_errors_follow_gymnasium_before_1_4(
    mask: Any, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 32: Gymnasium 1.1 to 1.3 assert these, with their own texts (their
    # suite's test_partial_reset_failure expects AssertionError); 1.4 raises
    # TypeError / ValueError. vecpool follows the installed version.
    from vecpool._util import validation

    monkeypatch.setattr(validation, "ASSERTED_RESET_MASK", True)
    with pytest.raises(AssertionError) as info:
        validation.check_reset_mask(mask, 2)
    assert str(info.value) == f"`options['reset_mask': mask]` {text}"
    monkeypatch.setattr(validation, "ASSERTED_RESET_MASK", False)
    with pytest.raises((TypeError, ValueError)) as new:
        validation.check_reset_mask(mask, 2)
    assert str(new.value).startswith("`options['reset_mask']` must")


@pytest.mark.parametrize("python", [(3, 10, 13), None], ids=["py3.10", "this"])
def test_an_env_error_keeps_its_message_and_says_where_on_every_python(
    monkeypatch: pytest.MonkeyPatch,
    recwarn: pytest.WarningsRecorder,  # Gymnasium's log lines warn
    python: tuple[int, ...] | None,
) -> None:
    # Python 3.10 has no add_note: vecpool appended its second note to the
    # message there, so `str(error)` was no longer Gymnasium's (with the notes
    # missing, 71 tests failed on 3.10)
    if python is not None:  # the 3.10 branch, on whatever Python runs this
        fake = types.SimpleNamespace(version_info=python)
        monkeypatch.setattr(env_errors, "sys", fake)
    message = "the simulator diverged"
    worker = types.SimpleNamespace(env_indices=range(2, 4), runs_here=False, index=1)
    with pytest.raises(ValueError, match=message) as info:
        env_errors.raise_env_errors(
            [_reply(ValueError(message), 3)],
            "AsyncVectorEnv",
            handles=[cast("Any", worker)],
        )
    where = "raised in sub-environment 3 of AsyncVectorEnv"
    truth = (
        "vecpool: the log lines above name sub-environment i 'Worker-i', as "
        "Gymnasium (one env a worker) does; 1 sub-environment raised: env 3 in "
        "worker process 1. Nothing was shut down: every env and worker process "
        "stays usable (reset the envs that raised, or all, and go on)."
    )
    assert str(info.value) == message  # the env's, as in Gymnasium
    assert getattr(info.value, "__notes__", None) == [where, truth]
    cause = info.value.__cause__
    assert isinstance(cause, errors.RemoteTraceback)
    # where 3.10 prints no notes, the remote traceback says them
    old_python = tuple(python or sys.version_info) < (3, 11)
    heading = f"({where})\n{truth}" if old_python else f"({where})"
    assert f"{heading}\nTraceback (most recent call last)" in str(cause)


def _reply(error: Exception, env_index: int) -> Reply:
    """A worker's reply reporting ``error``, raised by env ``env_index``."""
    try:
        raise error
    except Exception as exc:  # noqa: BLE001 - packed, as a worker does
        return Reply(errors=[pack_error(env_index, exc)])


class _FrozenError(Exception):
    """An exception whose attributes cannot be set (a frozen dataclass's way)."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(name)


@pytest.mark.parametrize(
    ("kind", "earlier"),
    [
        (_FrozenError, None),
        (ValueError, ["the env's own note"]),
        (ValueError, "a string"),
    ],
)
def test_the_notes_reach_an_exception_that_refuses_attributes(
    kind: type[Exception], earlier: Any
) -> None:
    # add_note sets `__notes__` through __setattr__: a frozen exception raised
    # AttributeError in its place; a `__notes__` that is not a list, TypeError.
    # (A frozen exception's own notes do not cross the pipe: unpickling sets
    # attributes, so it is rebuilt from its class and message.)
    error = kind("frozen")
    if earlier is not None:
        error.__dict__["__notes__"] = earlier
    with pytest.raises(kind, match="frozen") as info:
        env_errors.raise_env_errors([_reply(error, 0)], "AsyncVectorEnv", log=False)
    kept = [] if earlier is None else [earlier] if isinstance(earlier, str) else earlier
    where = "raised in sub-environment 0 of AsyncVectorEnv"
    assert info.value.__dict__["__notes__"] == [*kept, where]
