"""Faults of the in-process mode (``num_workers=0``; review of 7d2d268).

Each case runs against the process engine (``num_workers=1``) on the same inputs:
results, error types and messages must match, except what having no process makes
inherent (no isolation, no timeout). The first tests once exposed bugs (now fixed).
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import NormalizeObservation, RecordEpisodeStatistics

import vecpool
from vecpool.errors import VecPoolError
from vecpool.testing import CountingEnv, RaisingEnv, assert_same_data, make_env_fns

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # Gymnasium's error log lines
]

MODES = [1, 0]  # the process engine, then in-process


class _InterruptedStep(CountingEnv):
    """Raises ``KeyboardInterrupt`` itself (not a signal) in its second step."""

    def step(self, action: Any) -> Any:
        if self.steps_taken == 1:
            self.steps_taken += 1
            raise KeyboardInterrupt
        return super().step(action)


class _ExitingStep(CountingEnv):
    """Raises ``SystemExit`` (``sys.exit`` in env code) in its second step."""

    def step(self, action: Any) -> Any:
        if self.steps_taken == 1:
            self.steps_taken += 1
            raise SystemExit(5)
        return super().step(action)


class _Tracked(CountingEnv):
    """Records its instances and their closes (visible: they live here)."""

    built: list[_Tracked] = []  # noqa: RUF012 - a registry for the test

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closes = 0
        type(self).built.append(self)

    def close(self) -> None:
        self.closes += 1
        super().close()


class _CloseRaises(CountingEnv):
    def close(self) -> None:
        msg = "close failed"
        raise RuntimeError(msg)


class _SlowStep(CountingEnv):
    def step(self, action: Any) -> Any:
        time.sleep(0.3)
        return super().step(action)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, np.int64)


def _outcome(call: Any) -> tuple[str, str]:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - compared between the modes
        return type(exc).__name__, str(exc)
    return "ok", ""


# -- bugs ------------------------------------------------------------------------------


def test_a_keyboard_interrupt_from_env_step_is_then_named_clearly():
    env = vecpool.AsyncVectorEnv([CountingEnv, _InterruptedStep], num_workers=0)
    try:
        env.reset(seed=0)
        env.step(_zeros(2))
        with pytest.raises(KeyboardInterrupt):
            env.step(_zeros(2))
        with pytest.raises(VecPoolError) as info:  # refused: no wrong rows (good)
            env.step(_zeros(2))
        assert "second Ctrl-C" not in str(info.value)
        assert "pipe" not in str(info.value)
        assert "stopped half-way" in str(info.value)
        assert "KeyboardInterrupt" in str(info.value)
    finally:
        env.close()


def test_a_system_exit_from_env_step_leaves_no_half_done_step():
    env = vecpool.AsyncVectorEnv(
        [lambda: CountingEnv(max_steps=2, terminate_prob=0.0), _ExitingStep],
        num_workers=0,
    )
    try:
        env.reset(seed=0)
        env.step(_zeros(2))
        with pytest.raises(SystemExit):
            env.step(_zeros(2))  # env 0 truncated in it; nobody saw that
        # process mode: WorkerCrashedError from here on; in-process: the next step
        # returns env 0's autoreset row (reward 0, flags False), its episode end lost
        with pytest.raises(VecPoolError, match=r"stopped half-way.*SystemExit"):
            env.step(_zeros(2))
    finally:
        env.close()


# -- verified behaviour ----------------------------------------------------------------


def test_a_keyboard_interrupt_from_env_step_never_returns_rows_and_closes():
    _Tracked.built = []

    class Interrupted(_Tracked, _InterruptedStep):
        pass

    env = vecpool.AsyncVectorEnv([_Tracked, Interrupted], num_workers=0)
    env.reset(seed=0)
    env.step(_zeros(2))
    with pytest.raises(KeyboardInterrupt):
        env.step(_zeros(2))
    for call in (
        lambda: env.step(_zeros(2)),
        lambda: env.reset(seed=1),
        lambda: env.get_attr("steps_taken"),
    ):
        with pytest.raises(VecPoolError):
            call()
    env.close()
    env.close()
    assert [e.closes >= 1 for e in _Tracked.built] == [True] * len(_Tracked.built)
    assert len(_Tracked.built) == 3  # the dummy env for the spaces, then two


def test_use_after_close_raises_as_the_process_engine_does():
    outcomes = []
    for num_workers in MODES:
        env = vecpool.AsyncVectorEnv([CountingEnv] * 2, num_workers=num_workers)
        env.reset(seed=0)
        env.close()
        calls = [
            lambda env=env: env.step(_zeros(2)),
            lambda env=env: env.step_async(_zeros(2)),
            lambda env=env: env.step_wait(),
            lambda env=env: env.reset(),
            lambda env=env: env.call("get_pid"),
            lambda env=env: env.get_attr("steps_taken"),
            lambda env=env: env.set_attr("x", 1),
            lambda env=env: env.render(),
            lambda env=env: env.close(),
        ]
        outcomes.append([_outcome(call) for call in calls])
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][0][0] == "ClosedEnvironmentError"


def test_misuse_errors_match_the_process_engine():
    outcomes = []
    for num_workers in MODES:
        env = vecpool.AsyncVectorEnv(
            make_env_fns(2, max_steps=9), num_workers=num_workers
        )
        try:
            env.reset(seed=0)
            calls = [
                lambda env=env: env.step_wait(),
                lambda env=env: env.reset_wait(),
                lambda env=env: env.call_wait(),
                lambda env=env: env.step(_zeros(3)),
                lambda env=env: env.call("nope"),
                lambda env=env: env.get_attr("nope"),
                lambda env=env: env.call("explode"),
                lambda env=env: env.call("make_lock"),
                lambda env=env: env.step_async(_zeros(2)),
                lambda env=env: env.step_async(_zeros(2)),
                lambda env=env: env.step_wait(timeout=10),
                lambda env=env: env.call("scaled", 2.0),
                lambda env=env: env.np_random_seed,
            ]
            outcomes.append([_outcome(call) for call in calls])
        finally:
            env.close()
    assert outcomes[0] == outcomes[1]


def test_an_env_error_close_errors_and_closing_twice():
    for num_workers in MODES:
        env = vecpool.AsyncVectorEnv(
            [CountingEnv, lambda: RaisingEnv(raise_on="step", at=1), _CloseRaises],
            num_workers=num_workers,
        )
        env.reset(seed=0)
        with pytest.raises(ValueError, match="RaisingEnv") as info:
            env.step(_zeros(3))
        assert "sub-environment 1" in "".join(getattr(info.value, "__notes__", []))
        env.close()  # an env raising in close() does not stop close()
        env.close()


def test_a_constructor_error_closes_the_envs_already_built():
    _Tracked.built = []
    calls = {"n": 0}

    def third_breaks() -> gym.Env[Any, Any]:
        calls["n"] += 1
        if calls["n"] == 4:  # the dummy env, envs 0 and 1, then env 2
            msg = "constructor failed"
            raise RuntimeError(msg)
        return _Tracked()

    with pytest.raises(RuntimeError, match="constructor failed") as info:
        vecpool.AsyncVectorEnv([third_breaks] * 3, num_workers=0)
    assert "sub-environment 2" in "".join(getattr(info.value, "__notes__", []))
    assert len(_Tracked.built) == 3
    assert all(env.closes == 1 for env in _Tracked.built)


def test_a_second_thread_gets_concurrent_use_error():
    env = vecpool.AsyncVectorEnv([_SlowStep] * 2, num_workers=0)
    try:
        env.reset(seed=0)
        errors: list[str] = []

        def other() -> None:
            time.sleep(0.1)
            errors.append(_outcome(lambda: env.step(_zeros(2)))[0])

        thread = threading.Thread(target=other)
        thread.start()
        env.step(_zeros(2))
        thread.join()
        assert errors == ["ConcurrentUseError"]
    finally:
        env.close()


def _rollout(num_workers: int, obs_kind: str, wrap: Any, **kwargs: Any) -> list[Any]:
    fns = make_env_fns(
        3, obs_kind=obs_kind, max_steps=4, terminate_prob=0.2, info_every=2
    )
    env = vecpool.AsyncVectorEnv(fns, num_workers=num_workers, **kwargs)
    if wrap is not None:
        env = wrap(env)
    try:
        out: list[Any] = [env.reset(seed=7)]
        rng = np.random.default_rng(0)
        disabled = kwargs.get("autoreset_mode") == AutoresetMode.DISABLED
        for _ in range(15):
            result = env.step(rng.integers(0, 3, 3))
            out.append(copy.deepcopy(result))
            ended = result[2] | result[3]
            if disabled and ended.any():
                out.append(copy.deepcopy(env.reset(options={"reset_mask": ended})))
        for _, *rest in out:
            info = rest[-1]
            if "episode" in info:
                info["episode"].pop("t")  # wall-clock time
        return out
    finally:
        env.close()


@pytest.mark.parametrize(
    ("obs_kind", "wrap", "kwargs"),
    [
        ("box", None, {"shared_memory": False}),
        ("box", None, {"copy": False}),
        ("tuple", None, {"shared_memory": False}),
        ("image", None, {"copy": False}),
        ("dict", None, {"autoreset_mode": AutoresetMode.SAME_STEP}),
        (
            "dict",
            None,
            {"autoreset_mode": AutoresetMode.DISABLED, "shared_memory": False},
        ),
        ("box", None, {"observation_mode": "different"}),
        ("box", RecordEpisodeStatistics, {}),
        ("box", NormalizeObservation, {}),
    ],
    ids=[
        "no-shm",
        "no-copy",
        "tuple-no-shm",
        "image-no-copy",
        "same-step",
        "disabled-mask",
        "obs-different",
        "record-stats",
        "normalize",
    ],
)
def test_rollouts_match_the_process_engine(obs_kind, wrap, kwargs):
    processes = _rollout(1, obs_kind, wrap, **kwargs)
    local = _rollout(0, obs_kind, wrap, **kwargs)
    assert_same_data(processes, local, "num_workers=1 vs 0")


def test_sampler_step_from_and_render_match_the_process_engine():
    results = []
    for num_workers in MODES:
        fns = make_env_fns(3, max_steps=6, terminate_prob=0.2, render_mode="rgb_array")
        env = vecpool.AsyncVectorEnv(fns, num_workers=num_workers)
        try:
            sampler = vecpool.Sampler(
                env,
                lambda obs: np.zeros(len(obs), np.int64),
                batch_T=5,
                seed=0,
                max_decorrelation_steps=3,
            )
            batch = sampler.obtain_samples()
            env.reset(seed=3)
            moved = env.step_from(env.get_states(), np.array([0, 1, 2]), dt=3)
            results.append((batch, moved[1:], env.render()))
        finally:
            env.close()
    assert_same_data(results[0], results[1], "num_workers=1 vs 0")


def test_a_batch_send_interrupted_in_process_is_refused_after():
    env = vecpool.AsyncVectorEnv(
        [CountingEnv, CountingEnv, _InterruptedStep, CountingEnv],
        num_workers=0,
        batch_size=2,
    )
    try:
        env.reset(seed=0)
        env.send(_zeros(4))
        seen = [env.recv()[4]["env_id"], env.recv()[4]["env_id"]]
        assert sorted(np.concatenate(seen).tolist()) == [0, 1, 2, 3]
        with pytest.raises(KeyboardInterrupt):
            env.send(_zeros(4))
        # the send's commands hold batch_size // workers envs each: the command
        # before the interrupted one completed, and its rows may come back first
        with pytest.raises(VecPoolError):  # noqa: PT012 - at most one recv returns
            for _ in range(2):
                ids = env.recv()[4]["env_id"]
                assert sorted(ids.tolist()) == [0, 1]
    finally:
        env.close()
