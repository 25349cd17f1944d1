"""Fault injection: envs that fail on purpose, and a killer of worker processes.

The envs raise, exit, crash once per marker file or send what cannot be pickled;
:class:`WorkerKiller` SIGKILLs workers of a running vector env.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool.testing.envs import CountingEnv, StepResult
from vecpool.testing.errors import DeliberateError, DeliberateErrorWithArgs

__all__ = [
    "CustomExceptionEnv",
    "ExitingEnv",
    "IncarnationEnv",
    "RaisingEnv",
    "UnpicklableInfoEnv",
    "WorkerKiller",
    "kill_worker",
    "kill_worker_later",
]


def kill_worker(env: Any, worker: int) -> None:
    """SIGKILL worker process ``worker`` of ``env`` and wait until it is dead.

    Dead before the next command, so a test of what follows is deterministic.

    Args:
        env: A vecpool ``AsyncVectorEnv`` (its ``processes``).
        worker: The worker's index.
    """
    process = env.processes[worker]
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10.0)


def kill_worker_later(env: Any, worker: int, delay: float) -> threading.Timer:
    """SIGKILL worker ``worker`` of ``env`` after ``delay`` seconds (a started timer).

    For a kill in the middle of a call: join the timer after the call.
    """
    timer = threading.Timer(delay, os.kill, (env.processes[worker].pid, signal.SIGKILL))
    timer.start()
    return timer


class RaisingEnv(CountingEnv):
    """A :class:`CountingEnv` that raises once, in its ``at``-th step or reset.

    The failing call raises from :meth:`explode`, so that name shows up in the
    remote traceback. Calls after the failing one succeed again, so a vector env
    that survives env exceptions can keep using it.

    Example:
        >>> env = RaisingEnv(raise_on="step", at=1)
        >>> _ = env.reset(seed=0)
        >>> env.step(0)
        Traceback (most recent call last):
        ...
        ValueError: RaisingEnv failed on purpose in step #1
    """

    def __init__(
        self,
        raise_on: str = "step",
        at: int = 1,
        exc_type: type[BaseException] = ValueError,
        **kwargs: Any,
    ) -> None:
        """Build the env.

        Args:
            raise_on: ``"step"`` or ``"reset"``.
            at: Raise in this call (1-based, counted over the env's lifetime).
            exc_type: Exception type; called with the message as only argument.
            **kwargs: Passed to :class:`CountingEnv`.

        Raises:
            ValueError: If ``raise_on`` is invalid.
        """
        if raise_on not in ("step", "reset"):
            msg = f"`raise_on` must be 'step' or 'reset', got {raise_on!r}."
            raise ValueError(msg)
        super().__init__(**kwargs)
        self.raise_on = raise_on
        self.at = at
        self.exc_type = exc_type

    @staticmethod
    def message_for(raise_on: str, at: int) -> str:
        """Return the message the env raises with for ``raise_on`` and ``at``."""
        return f"RaisingEnv failed on purpose in {raise_on} #{at}"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset, raising if this is reset number ``at``."""
        if self.raise_on == "reset" and self.resets_taken + 1 == self.at:
            self.resets_taken += 1
            self.explode(self.message_for("reset", self.at))
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> StepResult:
        """Step, raising if this is step number ``at``."""
        if self.raise_on == "step" and self.steps_taken + 1 == self.at:
            self.steps_taken += 1
            self.explode(self.message_for("step", self.at))
        return super().step(action)

    def explode(self, message: str = "explode was called") -> None:
        """Raise ``exc_type(message)``.

        Raises:
            Exception: Always, of type ``exc_type``.
        """
        raise self.exc_type(message)


class ExitingEnv(CountingEnv):
    """A :class:`CountingEnv` that calls ``os._exit`` in step ``at_step``.

    Only use it inside a worker process: it kills whatever process steps it.
    """

    def __init__(self, at_step: int = 1, code: int = 3, **kwargs: Any) -> None:
        """Build the env.

        Args:
            at_step: 1-based step (over the env's lifetime) that exits.
            code: Exit code passed to :func:`os._exit`.
            **kwargs: Passed to :class:`CountingEnv`.
        """
        super().__init__(**kwargs)
        self.at_step = at_step
        self.code = code

    def step(self, action: Any) -> StepResult:
        """Step, or exit the process in step ``at_step``."""
        if self.steps_taken + 1 == self.at_step:
            os._exit(self.code)
        return super().step(action)


class CustomExceptionEnv(CountingEnv):
    """A :class:`CountingEnv` raising :class:`DeliberateErrorWithArgs` in step ``at``.

    That exception cannot be rebuilt by ``pickle``, which exercises the fallback
    path of a vector env's error reporting.
    """

    MESSAGE: ClassVar[str] = "CustomExceptionEnv failed on purpose"

    def __init__(self, at: int = 1, **kwargs: Any) -> None:
        """Build the env.

        Args:
            at: 1-based step (over the env's lifetime) that raises.
            **kwargs: Passed to :class:`CountingEnv`.
        """
        super().__init__(**kwargs)
        self.at = at

    def step(self, action: Any) -> StepResult:
        """Step, raising :class:`DeliberateErrorWithArgs` in step ``at``.

        Raises:
            DeliberateErrorWithArgs: In step ``at``.
        """
        if self.steps_taken + 1 == self.at:
            self.steps_taken += 1
            raise DeliberateErrorWithArgs(self.MESSAGE, 7, "extra detail")
        return super().step(action)


class UnpicklableInfoEnv(CountingEnv):
    """A :class:`CountingEnv` with an unpicklable lock in the info of step ``at``.

    Locks cannot be pickled, so sending that info to another process fails.
    """

    def __init__(self, at: int = 1, **kwargs: Any) -> None:
        """Build the env.

        Args:
            at: 1-based step (over the env's lifetime) whose info holds the lock.
            **kwargs: Passed to :class:`CountingEnv`.
        """
        super().__init__(**kwargs)
        self.at = at

    def step(self, action: Any) -> StepResult:
        """Step; the info of step ``at`` holds an unpicklable lock."""
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps_taken == self.at:
            info = {**info, "lock": threading.Lock()}
        return obs, reward, terminated, truncated, info


class IncarnationEnv(gym.Env[npt.NDArray[np.int64], np.int64]):
    """Observations that say which env, which incarnation and which step they are.

    The observation is ``[index, pid, step]`` (int64): the env's index given at
    construction, the id of the process hosting it (a replaced worker is a new
    incarnation) and the step in the episode (0 after a reset). Episodes terminate
    after a length drawn from ``self.np_random`` in ``[min_len, max_len]``; the
    reward is the step reached plus half the action. The info is
    ``{"step": step}`` every third step.

    With ``crash_marker``, the env kills its process (``os._exit(code)``) in its
    ``crash_at``-th step unless that file exists, creating it first: it crashes
    once, whatever the incarnation. With ``fail_marker``, the constructor raises
    :class:`DeliberateError` when that file exists.

    Only use the crash options inside a worker process.
    """

    def __init__(
        self,
        index: int = 0,
        min_len: int = 3,
        max_len: int = 12,
        crash_marker: str | None = None,
        crash_at: int = 1,
        code: int = 3,
        fail_marker: str | None = None,
    ) -> None:
        """Build the env (see the class docstring for the arguments)."""
        if fail_marker is not None and os.path.exists(fail_marker):
            msg = f"{fail_marker} exists: this env refuses to be built again."
            raise DeliberateError(msg)
        self.index = index
        self.min_len, self.max_len = min_len, max_len
        self.crash_marker, self.crash_at, self.code = crash_marker, crash_at, code
        self.observation_space = spaces.Box(0, 2**40, shape=(3,), dtype=np.int64)
        self.action_space = spaces.Discrete(2)
        self.steps_taken = 0
        self.step_in_episode = 0
        self.length = max_len

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.int64], dict[str, Any]]:
        """Start an episode of a random length."""
        super().reset(seed=seed, options=options)
        self.step_in_episode = 0
        self.length = int(self.np_random.integers(self.min_len, self.max_len + 1))
        return self._observe(), {}

    def step(
        self, action: Any
    ) -> tuple[npt.NDArray[np.int64], SupportsFloat, bool, bool, dict[str, Any]]:
        """Advance one step (or crash, see the class docstring)."""
        self.steps_taken += 1
        marker = self.crash_marker
        if (
            marker is not None
            and self.steps_taken == self.crash_at
            and not os.path.exists(marker)
        ):
            with open(marker, "w"):
                pass
            os._exit(self.code)
        self.step_in_episode += 1
        step = self.step_in_episode
        info = {"step": step} if step % 3 == 0 else {}
        reward = step + 0.5 * int(action)
        return self._observe(), reward, step >= self.length, False, info

    def get_pid(self) -> int:
        """Return the id of the process hosting this env."""
        return os.getpid()

    def _observe(self) -> npt.NDArray[np.int64]:
        return np.array([self.index, os.getpid(), self.step_in_episode], np.int64)


class WorkerKiller:
    """SIGKILLs a random worker of a vector env every ``low``-``high`` seconds.

    A context manager running a daemon thread, for crash tests of
    ``on_worker_crash="restart"``. At most ``max_unanswered`` kills wait for their
    restart at a time (for 1 s at most), so a loaded machine slows a test down
    instead of starving it; 2 still lets a replacement be killed as it starts.

    Attributes:
        kills: Workers killed so far.
    """

    def __init__(
        self,
        env: Any,
        low: float,
        high: float,
        *,
        seed: int = 0,
        max_unanswered: int = 2,
    ) -> None:
        """Kill a worker of ``env`` (a vecpool ``AsyncVectorEnv``) now and then."""
        self.env, self.low, self.high = env, low, high
        self.max_unanswered = max_unanswered
        self.stop = threading.Event()
        self.kills = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.rng = np.random.default_rng(seed)

    def __enter__(self) -> WorkerKiller:
        """Start killing."""
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop killing."""
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stop.wait(self.rng.uniform(self.low, self.high)):
            patience = time.monotonic() + 1.0
            while (
                self.kills - sum(self.env.restarts) >= self.max_unanswered
                and time.monotonic() < patience
                and not self.stop.is_set()
            ):
                time.sleep(0.005)
            processes = self.env.processes
            process = processes[self.rng.integers(len(processes))]
            if process.pid is not None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass
