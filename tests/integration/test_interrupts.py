"""Every Ctrl-C behaviour: a SIGINT at any point never yields wrong rows nor hangs.

Every observation of :class:`vecpool.testing.ActionEchoEnv` is ``[action, step]``,
so a row that belongs to another step (or to another thread's actions) shows at
once. Interrupts are real SIGINTs (the ``arm`` fixture), 20 µs to 3 ms into a run
of calls, so they land everywhere: between two workers' sends, right after a reply
was read, after every reply was gathered, inside the state change. Sent either by
the SIGALRM handler of an ``ITIMER_REAL`` timer (microsecond precision) or by a
timer thread; either way the SIGINT handler the engine installs is the one that
runs, exactly as with a Ctrl-C. The user's recovery is to go on: finish a pending
call with its ``*_wait(timeout=5)`` when told ``AlreadyPendingCallError``, then call
again; every later result must be the result of the actions sent. Against vecpool
0.1 these runs returned older steps' rows (sent 504, observed 501) or hung.

Also here: timeouts and a second thread (issue 11), a step cut between its halves,
an interrupted constructor, and ``vecpool collect`` stopped by Ctrl-C.
"""

from __future__ import annotations

import functools
import inspect
import math
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecpool
from vecpool import cli
from vecpool._engine.batches import Batches
from vecpool._engine.group import WorkerGroup
from vecpool._engine.handle import WorkerHandle
from vecpool._engine.in_process import InProcessHandle, _LocalChannel
from vecpool._engine.restart import Restarter
from vecpool._util import interrupts
from vecpool._wire.bell import BUFFER, COMMAND, LISTENING
from vecpool.errors import (
    AlreadyPendingCallError,
    ConcurrentUseError,
    ForcedInterrupt,
    NoAsyncCallError,
    OutOfStepError,
)
from vecpool.sampling import collect as collect_module
from vecpool.sampling.collect import collect
from vecpool.testing import ActionEchoEnv, assert_same_data, kill_worker

pytestmark = [
    pytest.mark.usefixtures("python_sigint_handler"),
    # "thread": pytest-timeout's default method owns SIGALRM, which these tests use
    pytest.mark.timeout(60, method="thread"),
    # a SIGINT that lands in a destructor is "ignored" (printed) by Python itself
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NUM_ENVS = 4


WAIT = 5.0  # seconds any recovery wait may take before the test calls it a hang
STARTS = [
    method
    for method in ("forkserver", "spawn")
    if method in multiprocessing.get_all_start_methods()
]


@pytest.fixture
def arm(request: pytest.FixtureRequest) -> Iterator[Callable[[float], None]]:
    """``arm(t)``: a SIGINT reaches the main thread ``t`` seconds later; ``arm(0)``
    calls it off (a SIGINT already sent lands before it returns).

    Parametrize it (``indirect``) with how the SIGINT is sent: ``"alarm"`` (the
    default), the SIGALRM handler of an ``ITIMER_REAL`` timer, or ``"thread"``, a
    timer thread calling ``os.kill``.
    """
    if getattr(request, "param", "alarm") == "thread":
        timers: list[threading.Timer] = []

        def arm_thread(delay: float) -> None:
            while timers:  # called off, or fired and done
                timer = timers.pop()
                timer.cancel()
                timer.join()
            if delay:
                timers.append(
                    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
                )
                timers[0].start()

        try:
            yield arm_thread
        finally:
            for timer in timers:
                timer.cancel()
        return

    def on_alarm(signum: int, frame: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        yield lambda delay: signal.setitimer(signal.ITIMER_REAL, delay)  # type: ignore[misc]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _interrupted(arm: Callable[[float], None], rng: random.Random, body) -> bool:
    """Run ``body`` with a SIGINT due 20 µs to 3 ms in; return whether it landed.

    Wrong rows are recorded by the body before it raises, so an ``AssertionError``
    overtaken by a late ``KeyboardInterrupt`` is not lost.
    """
    try:
        try:
            arm(rng.uniform(2e-5, 3e-3))
            body()
            time.sleep(0.004)  # a late signal lands here, outside the env
        finally:
            arm(0)
        _await_resends()
    except KeyboardInterrupt:
        return True
    return False


def _await_resends() -> None:
    """Let a SIGINT that came inside a finalizer, sent again a moment later
    (vecpool/_util/interrupts.py, 5 ms), land here rather than in the next call.

    On a loaded machine the resend came after the 4 ms above (CI, 11-29: a
    ``KeyboardInterrupt`` out of ``run.recover``). A raised interrupt cancels the
    resends, so this waits only while a run of them is under way (at most 1 s).
    """
    deadline = time.monotonic() + 1.0
    while interrupts._Resends.since and time.monotonic() < deadline:
        time.sleep(0.001)


def _expect(obs: Any, value: float, wrong: list[Any], steps: Any = None) -> None:
    ok = bool(np.all(obs[:, 0] == value))
    if steps is not None:
        ok = ok and bool(np.all(obs[:, 1] == steps))
    if not ok:
        wrong.append({"sent": value, "steps": steps, "got": obs.tolist()})
        pytest.fail(f"rows of another call: sent {value}, got {obs.tolist()}")


class _Run:
    """Action values never used before, and the rows that were wrong."""

    def __init__(self, envs: vecpool.AsyncVectorEnv) -> None:
        self.envs = envs
        self.value = 0.0
        self.sent = 0.0
        self.wrong: list[Any] = []
        self.checked = 0

    def raw_step(self) -> Any:
        """Step with a new value; ``sent`` is the value of the step now pending."""
        self.value += 1.0
        previous, self.sent = self.sent, self.value
        try:
            obs, *_, infos = self.envs.step(np.full(NUM_ENVS, self.value))
        except AlreadyPendingCallError:
            self.sent = previous  # the pending call is an older one
            raise
        if "action" in infos and not np.all(infos["action"] == self.value):
            self.wrong.append({"sent": self.value, "infos": infos["action"].tolist()})
            pytest.fail(f"infos of another call: sent {self.value}, got {infos}")
        return obs

    def step(self) -> Any:
        obs = self.raw_step()
        _expect(obs, self.value, self.wrong)
        self.checked += 1
        return obs

    def finish_pending(self) -> None:
        """What a user does on ``AlreadyPendingCallError``: collect the results."""
        for wait in (self.envs.step_wait, self.envs.reset_wait, self.envs.call_wait):
            try:
                result = wait(timeout=WAIT)
            except NoAsyncCallError:
                continue
            if wait == self.envs.step_wait:
                _expect(result[0], self.sent, self.wrong)
            elif wait == self.envs.reset_wait:
                _expect(result[0], -1.0, self.wrong, steps=0.0)
            return

    def recover(self, check: Callable[[], None]) -> None:
        for _ in range(3):
            try:
                check()
                return
            except AlreadyPendingCallError:
                self.finish_pending()
        pytest.fail("the vector env did not recover from an interrupt")


def _close_promptly(envs: vecpool.AsyncVectorEnv) -> None:
    with warnings.catch_warnings():  # Gymnasium's "close while a call is pending"
        warnings.simplefilter("ignore")
        envs.close()  # a hang fails through the module's timeout
    assert envs.closed
    assert not any(process.is_alive() for process in envs.processes)
    assert not set(envs.processes) & set(multiprocessing.active_children())


def _echo_envs(
    delay: float = 0.0, info: bool = False, **kwargs: Any
) -> vecpool.AsyncVectorEnv:
    return vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, delay, info)] * NUM_ENVS,
        num_workers=2,
        **kwargs,
    )


ALARM_OR_THREAD = pytest.mark.parametrize("arm", ["alarm", "thread"], indirect=True)
"""Each test under both ways of sending the SIGINT."""


@pytest.mark.parametrize(
    ("arm", "context", "shared_memory", "autoreset_mode", "info"),
    [
        pytest.param(
            "alarm",
            STARTS[-1],
            True,
            AutoresetMode.NEXT_STEP,
            False,
            id="spawn-shm-next",
        ),
        pytest.param(
            "alarm",
            STARTS[-1],
            False,
            AutoresetMode.SAME_STEP,
            False,
            id="spawn-pipe-same",
        ),
        pytest.param(
            "alarm",
            STARTS[0],
            True,
            AutoresetMode.DISABLED,
            False,
            id="fsrv-shm-disabled",
        ),
        pytest.param(
            "alarm",
            STARTS[0],
            False,
            AutoresetMode.NEXT_STEP,
            False,
            id="fsrv-pipe-next",
        ),
        *(
            pytest.param(
                "thread",
                STARTS[0],
                shm,
                AutoresetMode.NEXT_STEP,
                info,
                id=f"fsrv-{'shm' if shm else 'pipe'}-next-{'info-' * info}thread",
            )
            for shm in (True, False)
            for info in (False, True)
        ),
    ],
    indirect=["arm"],
)
def test_sigint_in_a_step_loop_never_returns_older_rows(
    arm, context, shared_memory, autoreset_mode, info
):
    envs = _echo_envs(
        info=info,
        context=context,
        shared_memory=shared_memory,
        autoreset_mode=autoreset_mode,
    )
    run, rng, landed = _Run(envs), random.Random(11), 0
    try:
        envs.reset(seed=0)

        def body() -> None:
            for _ in range(30):
                run.step()

        for _ in range(80):
            landed += _interrupted(arm, rng, body)
            run.recover(run.step)
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert landed >= 60  # the signals did land
    assert run.checked > 80


@ALARM_OR_THREAD
def test_sigint_in_reset_always_starts_fresh_episodes(arm):
    envs = _echo_envs(context=STARTS[-1])
    run, rng, landed = _Run(envs), random.Random(12), 0

    def reset_then_step(seed: int) -> None:
        obs, _ = envs.reset(seed=seed)
        _expect(obs, -1.0, run.wrong, steps=0.0)
        obs = run.raw_step()
        _expect(obs, run.value, run.wrong, steps=1.0)  # the step right after reset
        run.checked += 1

    try:
        envs.reset(seed=0)
        for trial in range(100):

            def body(trial: int = trial) -> None:
                for k in range(6):
                    reset_then_step(10 * trial + k)
                    run.step()

            landed += _interrupted(arm, rng, body)
            seed = 1000 + trial
            run.recover(functools.partial(reset_then_step, seed))
            assert envs.np_random_seed == tuple(seed + i for i in range(NUM_ENVS))
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert landed >= 60


@ALARM_OR_THREAD
def test_sigint_in_call_get_attr_and_set_attr(arm):
    envs = _echo_envs(context=STARTS[-1], shared_memory=False)
    run, rng, landed = _Run(envs), random.Random(13), 0

    def set_step_and_read(base: float) -> None:
        envs.set_attr("steps", base)
        obs = run.raw_step()
        _expect(obs, run.value, run.wrong, steps=base + 1)
        run.checked += 1
        for got in (envs.get_attr("steps"), envs.call("get_wrapper_attr", "steps")):
            if got != (base + 1,) * NUM_ENVS:
                run.wrong.append({"call": base + 1, "got": got})
                pytest.fail(f"call results of another call: {got}")

    try:
        envs.reset(seed=0)
        for trial in range(120):
            base = 10.0 * trial
            landed += _interrupted(arm, rng, functools.partial(set_step_and_read, base))
            run.recover(functools.partial(set_step_and_read, base + 5))
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert landed >= 60


@ALARM_OR_THREAD
def test_sigint_in_send_and_recv_batches(arm):
    envs = _echo_envs(context=STARTS[-1], batch_size=2)
    rng, landed, wrong = random.Random(14), 0, []
    sent = dict.fromkeys(range(NUM_ENVS), -1.0)
    value = 0.0

    def drain() -> list[int]:
        seen = []
        while envs.pending_env_ids:
            obs, *_, infos = envs.recv(timeout=WAIT)
            for row, env_id in zip(obs, infos["env_id"], strict=True):
                if row[0] != sent[int(env_id)]:
                    wrong.append({"env": int(env_id), "sent": sent[int(env_id)]})
                    pytest.fail(f"env {env_id}: sent {sent[int(env_id)]}, got {row}")
            seen += infos["env_id"].tolist()
        return seen

    def round_trip() -> None:
        nonlocal value
        drain()
        value += 1.0
        sent.update(dict.fromkeys(range(NUM_ENVS), value))
        envs.send(np.full(NUM_ENVS, value), np.arange(NUM_ENVS))
        assert sorted(drain()) == list(range(NUM_ENVS))

    try:
        envs.reset(seed=0)
        for _ in range(120):
            landed += _interrupted(arm, rng, round_trip)
            for _ in range(3):
                try:
                    round_trip()
                    break
                except AlreadyPendingCallError:
                    drain()
            else:
                pytest.fail("send/recv did not recover from an interrupt")
    finally:
        _close_promptly(envs)
    assert wrong == []
    assert landed >= 60


def _step_for_3_s(envs: vecpool.AsyncVectorEnv, rng: random.Random) -> None:
    for _ in range(10):
        envs.step(np.full(NUM_ENVS, rng.random()))


def _arm_then_step_for_3_s(
    arm: Callable[[float], None],
    delay: float,
    envs: vecpool.AsyncVectorEnv,
    rng: random.Random,
) -> None:
    arm(delay)
    _step_for_3_s(envs, rng)


@pytest.mark.parametrize(
    ("arm", "context"),
    [
        *(pytest.param("alarm", context, id=context) for context in STARTS),
        pytest.param("thread", STARTS[0], id=f"{STARTS[0]}-thread"),
    ],
    indirect=["arm"],
)
def test_close_after_a_sigint_is_prompt_and_leaves_no_child(arm, context):
    rng = random.Random(15)
    for delay in (1e-4, 0.05, 0.4):
        envs = _echo_envs(0.3, context=context)
        try:
            envs.reset(seed=0)
            with pytest.raises(KeyboardInterrupt):  # armed inside: 0.1 ms lands here
                _arm_then_step_for_3_s(arm, delay, envs, rng)
        finally:
            arm(0)
            _close_promptly(envs)


@pytest.mark.parametrize("shared_memory", [True, False])
def test_step_wait_timeout_then_later_steps_are_right(shared_memory):
    envs = _echo_envs(0.05, context=STARTS[-1], shared_memory=shared_memory)
    run = _Run(envs)
    try:
        envs.reset(seed=0)
        for _ in range(8):
            run.value += 1.0
            run.sent = run.value
            envs.step_async(np.full(NUM_ENVS, run.value))
            with pytest.raises(multiprocessing.TimeoutError):
                envs.step_wait(timeout=0.001)
            run.recover(run.step)
            run.recover(run.step)
    finally:
        _close_promptly(envs)
    assert run.wrong == []
    assert run.checked == 16


@pytest.mark.parametrize("shared_memory", [True, False])
def test_two_threads_get_a_clear_error_never_other_rows(shared_memory):
    envs = _echo_envs(0.0005, context=STARTS[-1], shared_memory=shared_memory)
    refused: list[str] = []
    wrong: list[Any] = []

    def loop(base: float) -> None:
        for step in range(150):
            value = base + step
            try:
                obs, *_ = envs.step(np.full(NUM_ENVS, value))
            except ConcurrentUseError as error:
                refused.append(str(error))
                continue
            except AlreadyPendingCallError:
                continue  # the other thread's step_async went first
            if not np.all(obs[:, 0] == value):
                wrong.append((value, obs[:, 0].tolist()))

    envs.reset(seed=0)
    threads = [threading.Thread(target=loop, args=(b,)) for b in (1e3, 1e6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(40)
        assert not any(thread.is_alive() for thread in threads), "a thread hung"
        assert wrong == [], "a thread got rows of the other thread's step"
        assert refused, "concurrent use of one vector env was never reported"
        assert all("A vector env is not thread-safe" in msg for msg in refused)
        # the env still works for one thread afterwards
        run = _Run(envs)
        run.recover(run.step)
        assert run.wrong == []
    finally:
        _close_promptly(envs)


def test_a_step_cut_between_its_halves_says_how_to_recover(monkeypatch):
    # issue 22, item 8: a Ctrl-C inside step() after the actions went out left a
    # pending step the user never called `step_async` for
    import gymnasium as gym

    import vecpool.vector.async_env as async_env

    env = vecpool.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
    try:
        env.reset(seed=0)

        def interrupted(self, timeout):
            raise KeyboardInterrupt

        with monkeypatch.context() as patch:
            patch.setattr(async_env, "_RAW_STEP_WAIT", interrupted)
            with pytest.raises(KeyboardInterrupt):
                env.step(np.zeros(2, np.int64))
        with pytest.raises(AlreadyPendingCallError) as raised:
            env.step(np.zeros(2, np.int64))
        message = str(raised.value)
        # Gymnasium's sentence first (its suite matches it), then the way out
        gymnasiums = "Calling `step_async` while waiting for a pending call to `step`"
        assert message.startswith(gymnasiums)
        assert "call `step_wait()`" in message
        env.step_wait()
        env.step(np.zeros(2, np.int64))  # back to normal
        env.step_async(np.zeros(2, np.int64))
        with pytest.raises(AlreadyPendingCallError) as again:
            env.step_async(np.zeros(2, np.int64))
        assert "interrupted" not in str(again.value)  # not a step() cut this time
        env.step_wait()
    finally:
        env.close()


# -- a constructor


def test_an_in_process_constructor_interrupted_keeps_the_interrupt():
    calls = [0]

    def make():
        calls[0] += 1
        if calls[0] == 2:  # the first call builds the throw-away env
            raise KeyboardInterrupt
        import gymnasium as gym

        return gym.make("CartPole-v1")

    with pytest.raises(KeyboardInterrupt):
        vecpool.AsyncVectorEnv([make, make], num_workers=0)


# -- vecpool collect --------------------------------------------------------------


ON_LINUX_PROC = Path("/proc/self/stat").exists()
NEEDS_PROC = pytest.mark.skipif(
    not ON_LINUX_PROC, reason="reads the process tree from /proc"
)
COLLECT_TIMEOUT = pytest.mark.timeout(120, method="thread")  # a whole CLI run


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _descendants(pid: int) -> set[int]:
    children, found, todo = _children(), set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _endless_collect(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    """``vecpool collect`` of a billion steps into ``tmp_path / "pool.npz"``."""
    command = [sys.executable, "-m", "vecpool", "collect", "--num-envs", "4"]
    command += ["--steps", "1000000000", "--pool-size", "4000", *extra]
    command += ["--out", str(tmp_path / "pool.npz")]
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@NEEDS_PROC
@COLLECT_TIMEOUT
@pytest.mark.parametrize("extra", [(), ("--overlap",)], ids=["plain", "overlap"])
def test_ctrl_c_saves_what_was_collected_and_exits_130(tmp_path, extra):
    out = tmp_path / "pool.npz"
    process = _endless_collect(tmp_path, *extra)
    try:
        assert process.stdout is not None
        first_line = process.stdout.readline()  # printed once the workers are up
        assert first_line.startswith("collecting CartPole-v1"), first_line
        time.sleep(1.0)  # collecting now
        workers = _descendants(process.pid)
        assert workers, "no worker processes found"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted after" in stdout
    pool = vecpool.ReplayPool.load(out)
    assert len(pool) > 0
    assert pool.num_envs == 4
    assert not list(tmp_path.glob(".pool.npz.*"))  # no temporary file left
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _alive(pid)]
    assert math.isfinite(pool.episode_stats.mean_return)


@NEEDS_PROC
@COLLECT_TIMEOUT
@pytest.mark.parametrize("signals", [2, 5])
@pytest.mark.parametrize("extra", [(), ("--overlap",)], ids=["plain", "overlap"])
def test_repeated_ctrl_c_still_exits_130_without_a_traceback(tmp_path, signals, extra):
    process = _endless_collect(tmp_path, *extra)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("collecting CartPole-v1")
        time.sleep(0.5)
        for _ in range(signals):
            process.send_signal(signal.SIGINT)
            time.sleep(0.02)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr  # never -2 (death by SIGINT)
    assert "Traceback" not in stderr
    assert "interrupted" in stdout + stderr
    assert not list(tmp_path.glob(".pool.npz.*"))  # no temporary file left


@pytest.mark.parametrize("interrupted", [True, False])
def test_a_ctrl_c_just_after_collect_returns_is_not_raised(
    monkeypatch, capsys, interrupted
):
    # `collect` stops on its own Ctrl-C, saves, and puts back the SIGINT handler
    # it found; a repeated Ctrl-C can reach Python just after that (a tripped
    # signal runs the handler installed then). The command's handler ignores it
    # once collecting has started: no KeyboardInterrupt, no traceback (before
    # 11-29 it raised in `collect`'s return or in a finalizer: the storm test
    # above failed in 2 of 22 runs of its 4 cases, in CI once)
    summary = ["done"]

    def fake_collect(*args: Any, **kwargs: Any) -> Any:
        kwargs["log"]("collecting CartPole-v1: (a fake)")
        os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode
        return types.SimpleNamespace(
            interrupted=interrupted, summary_lines=lambda: summary
        )

    monkeypatch.setattr(collect_module, "collect", fake_collect)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = cli.main(["collect", "CartPole-v1", "--steps", "8", "--quiet"])
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == (130 if interrupted else 0)
    assert capsys.readouterr().out.splitlines()[-1] == "done"  # the summary
    # interrupted: Ctrl-C ignored from then on; else Python's handler is back
    assert after is (signal.SIG_IGN if interrupted else signal.default_int_handler)


@COLLECT_TIMEOUT
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_a_second_ctrl_c_inside_a_chunk_reports_what_the_pool_holds(tmp_path, mode):
    # the sampler writes each batch into the pool as it comes back: the figures must
    # count those rows too when a second Ctrl-C stops in the middle of a chunk
    calls = [0]

    def policy(obs: np.ndarray) -> np.ndarray:
        calls[0] += 1
        if calls[0] == 150:
            signal.raise_signal(signal.SIGINT)  # first: stop at the chunk's end
            signal.raise_signal(signal.SIGINT)  # second: at once
        return (obs[:, 1] > 0).astype(np.int64)  # CartPole: short episodes

    result = collect(
        "CartPole-v1",
        num_workers=2,
        seed=0,
        num_envs=4,
        steps=4 * 256,
        pool_size=4 * 1000,
        out=None,
        policy=policy,
        autoreset_mode=mode,
        overlap=True,
    )
    assert result.interrupted
    assert result.vector_steps % 64 != 0  # stopped inside a chunk
    assert result.transitions == len(result.pool) > 0
    assert result.transitions <= result.env_steps
    assert result.episodes == result.pool.episode_stats.count
    assert sum(result.episode_lengths) <= result.transitions


@pytest.mark.parametrize("where", ["send", "share"])
def test_an_error_inside_the_step_paths_held_section_leaves_no_ctrl_c_pending(
    monkeypatch, where
):
    # the one step path holds Ctrl-C back with an inline depth counter; a Ctrl-C
    # deferred inside a section that an exception leaves must go with it, not
    # come out of a later, unrelated call (it once escaped a test run this way)
    from vecpool._engine import guards, in_process

    envs = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, 0.0, False)] * NUM_ENVS,
        num_workers=1,
        parent_envs=1,
    )
    try:
        envs.reset(seed=0)

        def boom(*args: Any, **kwargs: Any) -> None:
            guards.HOLD["pending"] = 1  # a Ctrl-C came inside the section ...
            msg = "boom"
            raise RuntimeError(msg)  # ... which an error then left

        if where == "send":
            monkeypatch.setattr(envs._group, "send_step", boom)
            with pytest.raises(RuntimeError, match="boom"):
                envs.step_async(np.zeros(NUM_ENVS))
        else:
            monkeypatch.setattr(in_process.InProcessHandle, "step_here", boom)
            envs.step_async(np.zeros(NUM_ENVS))
            with pytest.raises(RuntimeError, match="boom"):
                envs.step_wait()
        assert guards.HOLD["depth"] == 0
        assert guards.HOLD["pending"] == 0
    finally:
        guards.HOLD["pending"] = 0
        monkeypatch.undo()
        _close_promptly(envs)


class _RingCutBell:
    """A bell whose write (or read) of one word a second Ctrl-C cuts."""

    def __init__(self, bell: Any, word: int, on_read: bool) -> None:
        self.bell, self.word, self.on_read = bell, word, on_read

    def __getitem__(self, word: int) -> int:
        if self.on_read and word == self.word:
            raise ForcedInterrupt
        return int(self.bell[word])

    def __setitem__(self, word: int, value: int) -> None:
        if not self.on_read and word == self.word:
            raise ForcedInterrupt
        self.bell[word] = value


@pytest.mark.parametrize(
    ("word", "on_read"),
    [(BUFFER, False), (COMMAND, False), (LISTENING, True)],
    ids=["buffer", "command", "listening"],
)
def test_a_second_ctrl_c_while_a_step_rings_is_out_of_step(word, on_read):
    # the step path writes every worker's buffer, rings every bell, counts the
    # commands, then wakes the blocked workers: a second Ctrl-C anywhere in there
    # leaves a worker rung but not counted (or counted, not rung, or a step run
    # that the caller never hears of), so the next call must refuse with the way
    # out, never return the rows of another step as this one's
    envs = vecpool.AsyncVectorEnv(
        [functools.partial(ActionEchoEnv, 0.0, False)] * NUM_ENVS,
        num_workers=2,
        parent_envs=0,
        wait_strategy="spin",
    )
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(NUM_ENVS))
        (first, second) = envs._group.handles
        assert first.bell is not None  # the steps are rung
        assert second.bell is not None
        real = second.bell
        second.bell = _RingCutBell(real, word, on_read)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.ones(NUM_ENVS))
        second.bell = real
        with pytest.raises(OutOfStepError, match=r"call `close\(\)`"):
            envs.step(np.full(NUM_ENVS, 2.0))
    finally:
        _close_promptly(envs)


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's error log lines
@pytest.mark.parametrize("info", [False, True])
@pytest.mark.parametrize("wait_strategy", ["spin", "block"])
def test_a_step_waited_for_again_returns_its_errors_and_infos(
    make_placed, info, wait_strategy
):
    # a step_wait interrupted after the answers were taken (the step says "call
    # step_wait()"): the second step_wait must read those answers again, never
    # return the rows without the step's infos or its env's exception; "spin":
    # workers rung on their bells, "block": replies read from the pipes
    fns = [functools.partial(ActionEchoEnv, 0.0, info, None if info else 2)] * NUM_ENVS
    envs = make_placed(fns, wait_strategy=wait_strategy)
    sync = gym.vector.SyncVectorEnv(fns)
    try:
        assert_same_data(sync.reset(seed=0), envs.reset(seed=0), "reset")
        assert_same_data(
            sync.step(np.zeros(NUM_ENVS)), envs.step(np.zeros(NUM_ENVS)), "step"
        )
        envs.step_async(np.ones(NUM_ENVS))
        envs._group.wait_step()  # the first half of an interrupted step_wait
        if info:
            assert_same_data(sync.step(np.ones(NUM_ENVS)), envs.step_wait(), "again")
        else:
            with pytest.raises(ValueError, match="on purpose"):
                envs.step_wait()
    finally:
        sync.close()
        _close_promptly(envs)


def _forced_at(code: Any, marker: str) -> Callable[[], None]:
    """Raise a second Ctrl-C (``ForcedInterrupt``) once, at ``marker``'s line.

    The line of ``code``'s source that holds ``marker``; a line trace raises it
    there, as the deferring handler does when a second SIGINT lands on that line
    (the first one is held back). Returns the function that takes the trace off.
    """
    source, first = inspect.getsourcelines(code)
    line = first + next(i for i, text in enumerate(source) if marker in text)
    armed = [True]
    previous = sys.gettrace()

    def local(frame: Any, event: str, _arg: Any) -> Any:
        if armed[0] and event == "line" and frame.f_lineno == line:
            armed[0] = False
            raise ForcedInterrupt
        return local

    def trace(frame: Any, _event: str, _arg: Any) -> Any:
        return local if frame.f_code is code else None

    sys.settrace(trace)
    return lambda: sys.settrace(previous)


@pytest.mark.parametrize(
    ("where", "marker", "placement"),
    [
        ("write", "return self.numbers.sent_one()", "worker"),
        ("receive", "if data == WAKE", "worker"),
        ("step_here", "host = self.local_channel.host", "here"),
        ("step_here", "numbers = self.numbers", "here"),
        ("run_queued", "if not self.running:", "here"),
        ("block", "channel.buffer += chunk", "bell"),
    ],
    ids=[
        "write-before-its-count",
        "receive-before-its-count",
        "share-before-its-step",
        "share-before-its-answer",
        "queued-before-its-reply",
        "blocked-read-before-it-is-kept",
    ],
)
def test_a_second_ctrl_c_between_a_transfer_and_its_count_never_gives_wrong_rows(
    where, marker, placement
):
    # a second Ctrl-C (it raises at once) right after a command went out or a
    # reply came in, before the parent counted it, or in the parent's own share
    # between its step and its answer: the next call must refuse with the way out,
    # never return another step's rows (found: rows of step 3 as step 4's) or
    # wait forever for an answer that was lost
    codes = {
        "write": WorkerHandle.write,
        "receive": WorkerHandle.receive,
        "step_here": InProcessHandle.step_here,
        "run_queued": _LocalChannel.run_queued,
        "block": WorkerGroup._block,
    }
    placements: dict[str, dict[str, Any]] = {
        "worker": {"num_workers": 1, "parent_envs": 0, "wait_strategy": "block"},
        "here": {"num_workers": 0},
        "bell": {"num_workers": 1, "parent_envs": 0, "wait_strategy": "spin"},
    }
    kwargs = placements[placement]
    # "bell": the parent blocks on a rung worker (a 50 ms step) whose second step
    # raises, so its answer, an error, comes by pipe and the blocked wait reads it
    env_fn = (
        functools.partial(ActionEchoEnv, 0.05, False, 2)
        if placement == "bell"
        else ActionEchoEnv
    )
    envs = vecpool.AsyncVectorEnv([env_fn] * 2, **kwargs)
    try:
        envs.reset(seed=0)
        envs.step(np.array([1.0, 1.5]))
        # a reset runs through the queue here
        call = (
            functools.partial(envs.reset, seed=0)
            if where == "run_queued"
            else (functools.partial(envs.step, np.array([2.0, 2.5])))
        )
        untrace = _forced_at(codes[where].__code__, marker)
        try:
            with pytest.raises(ForcedInterrupt):
                call()
        finally:
            untrace()

        def step_again() -> None:
            envs.step_async(np.array([3.0, 3.5]))
            envs.step_wait(timeout=WAIT)

        for _ in range(2):
            with pytest.raises(
                (OutOfStepError, vecpool.errors.WorkerCrashedError),
                match=r"call `close\(\)`",
            ):
                step_again()
    finally:
        _close_promptly(envs)


@pytest.mark.parametrize(
    "marker",
    ['infos["env_id"] = ids', "buffers.obs.take(rows)"],
    ids=["while-choosing", "while-copying"],
)
def test_a_recv_cut_by_ctrl_c_returns_its_batch_the_next_time(marker):
    # a Ctrl-C in `recv` once it had the batch (choosing it, or copying its rows
    # out): the next `recv` returns that batch, whose envs stay pending meanwhile;
    # found: they had left `pending_env_ids` and no later `recv` returned them
    envs = vecpool.AsyncVectorEnv(
        [ActionEchoEnv] * 4, num_workers=1, parent_envs=0, batch_size=2
    )
    try:
        envs.reset(seed=0)
        envs.send(np.array([1.0, 2.0]), np.array([2, 3]))
        code = Batches._choose if marker.startswith("infos") else Batches.recv
        untrace = _forced_at(code.__code__, marker)
        try:
            with pytest.raises(ForcedInterrupt):
                envs.recv()
        finally:
            untrace()
        assert envs.pending_env_ids == [2, 3]
        with pytest.raises(ValueError, match="recv"):
            envs.send(np.array([9.0]), np.array([3]))  # its rows are not out yet
        obs, _, _, _, infos = envs.recv(timeout=WAIT)
        assert infos["env_id"].tolist() == [2, 3]
        np.testing.assert_array_equal(obs, [[1.0, 1.0], [2.0, 1.0]])
        assert envs.pending_env_ids == []
        envs.send(np.array([3.0, 4.0]), np.array([2, 3]))
        obs, _, _, _, infos = envs.recv(timeout=WAIT)
        np.testing.assert_array_equal(obs, [[3.0, 2.0], [4.0, 2.0]])
    finally:
        _close_promptly(envs)


def test_a_ctrl_c_while_a_replacement_starts_in_recv_loses_no_batch():
    # a Ctrl-C while `recv` waits for a replacement to start: the batch in flight
    # on the dead worker goes to the replacement all the same, and comes back
    # marked; found: its envs stayed pending for good (every recv timed out, step
    # and reset refused)
    envs = vecpool.AsyncVectorEnv(
        [ActionEchoEnv] * 4,
        num_workers=2,
        batch_size=4,
        on_worker_crash="restart",
    )
    try:
        envs.reset(seed=0)
        # stopped first, so that its batch is still in flight when it dies (on one
        # CPU it could answer between the send and the kill: no restart in recv)
        pid = envs.processes[1].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        envs.send(np.array([1.0, 2.0, 3.0, 4.0]), np.arange(4))
        kill_worker(envs, 1)
        untrace = _forced_at(Restarter.replace.__code__, 'group.wait("restart"')
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the restart warning
                with pytest.raises(ForcedInterrupt):
                    envs.recv()
        finally:
            untrace()
        rows: dict[int, Any] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while envs.pending_env_ids:
                obs, _, _, truncated, infos = envs.recv(timeout=WAIT)
                for row, index in enumerate(infos["env_id"].tolist()):
                    rows[index] = (obs[row].tolist(), bool(truncated[row]))
        assert rows[0] == ([1.0, 1.0], False)
        assert rows[1] == ([2.0, 1.0], False)
        assert rows[2][1]  # cut by the crash: truncated
        assert rows[3][1]
        envs.step(np.zeros(4))  # usable again
    finally:
        _close_promptly(envs)
