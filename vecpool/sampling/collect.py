"""Collect a dataset: step a vector env with a policy and save its replay pool.

:func:`collect` is the Python side of ``vecpool collect``: it builds a
:class:`vecpool.AsyncVectorEnv` with :func:`vecpool.make_vec`, records every real
transition through a :class:`vecpool.ReplayPoolWrapper`, reports progress, stops
cleanly on Ctrl-C and writes the pool with :meth:`vecpool.ReplayPool.save`. With
``overlap=True`` the policy runs on one half of the envs while the other half steps
(``send``/``recv`` batches, through the alternating
:class:`vecpool.sampling.sampler.Sampler`, which records into the same pool).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode

from vecpool._util.files import check_output_file
from vecpool._util.interrupts import requeue_in_finalizer
from vecpool._util.loading import load_callable
from vecpool._util.notes import add_note
from vecpool._util.placement import RECORD_STEPS, plan
from vecpool._util.progress import Progress
from vecpool._util.spaces import copy_tree
from vecpool._util.topology import physical_cores
from vecpool._util.validation import check_int, require_matplotlib
from vecpool.errors import (
    CollectArgumentError,
    CollectSaveError,
    RemoteTraceback,
    VecPoolPerformanceWarning,
)
from vecpool.replay.minari import check_new_dataset, to_minari
from vecpool.replay.pool import ReplayPool
from vecpool.replay.settings import PoolSettings, renamed_clearing_size
from vecpool.replay.wrapper import ReplayPoolWrapper
from vecpool.sampling.random_actions import RandomActions
from vecpool.sampling.sampler import Sampler
from vecpool.vector.make import make_vec

__all__ = [
    "DEFAULT_ENV_ID",
    "CollectArgumentError",
    "CollectResult",
    "CollectSaveError",
    "collect",
    "format_bytes",
    "load_policy",
    "parse_autoreset_mode",
    "plot_collection",
    "stopped_collection",
]

logger = logging.getLogger(__name__)

DEFAULT_ENV_ID = "CartPole-v1"
RECENT_EPISODES = 100
"""How many of the latest episodes the progress display's mean return covers."""
OVERLAP_CHUNK = 64
"""With ``overlap=True``, vector steps per chunk: the envs run out of step within a
chunk and line up at its end, where progress, Ctrl-C and the episode ends are
counted."""
TERMINAL_REFRESH_SECONDS = 0.1
"""Shortest time between two redraws of the progress line on a terminal."""
LOG_LINE_SECONDS = 2.0
"""Shortest time between two progress lines when the output is not a terminal."""
LOG_LINE_MAX_SECONDS = 30.0
"""Longest time between two progress lines when the output is not a terminal."""
SETTLE_ENDS = 4096
"""Vector steps with episode ends the tracker notes at most before it takes the
pool's episodes (:meth:`_EpisodeTracker.settle`): its notes stay small however long
the run, with or without a progress display."""

Policy = Callable[[Any], Any]
"""``policy(observations) -> actions``, one call per vector step for the batch (with
``overlap=True``, one per batch of the envs that came back)."""

_AUTORESET_NAMES = {
    "nextstep": AutoresetMode.NEXT_STEP,
    "samestep": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


@dataclasses.dataclass(frozen=True, slots=True)
class CollectResult:
    """What :func:`collect` did: the figures of its summary, and the pool itself.

    Attributes:
        env_id: The environment id.
        num_envs: Number of sub-environments (and of sub-pools).
        num_workers: Number of worker processes.
        autoreset_mode: The vector env's autoreset mode.
        planned_env_steps: Env steps asked for, rounded up to whole vector steps
            (with ``overlap=True``, to whole chunks of :data:`OVERLAP_CHUNK`).
        vector_steps: Vector steps taken (fewer than planned if interrupted).
        transitions: Real transitions recorded (``NEXT_STEP``'s reset-only steps are
            env steps but not transitions).
        kept: Transitions in the pool at the end (``len(pool)``).
        capacity: Total capacity of the pool (``num_envs * pool.capacity``).
        episode_ends: For each episode that ended, the env steps taken when it
            ended (the end of its vector step), in order.
        episode_returns: The return of each of those episodes.
        episode_lengths: The length of each of those episodes, in transitions.
        seconds: Time spent stepping (env-steps/s is measured over it).
        wall_seconds: Time of the whole call: workers, stepping, closing, saving.
        path: The file written, or ``None`` if ``out=None``.
        file_size: Its size in bytes, or ``None``.
        interrupted: Whether Ctrl-C (``SIGINT``) stopped the collection early.
        pool: The pool (as saved).
        minari: ``(dataset_id, complete episodes written, partial ones left out)``
            when a Minari dataset was written.
    """

    env_id: str
    num_envs: int
    num_workers: int
    autoreset_mode: AutoresetMode
    planned_env_steps: int
    vector_steps: int
    transitions: int
    kept: int
    capacity: int
    episode_ends: tuple[int, ...]
    episode_returns: tuple[float, ...]
    episode_lengths: tuple[int, ...]
    seconds: float
    wall_seconds: float
    path: Path | None
    file_size: int | None
    interrupted: bool
    pool: ReplayPool = dataclasses.field(repr=False, compare=False)
    minari: tuple[str, int, int] | None = None

    @property
    def env_steps(self) -> int:
        """Env steps taken: ``vector_steps * num_envs``."""
        return self.vector_steps * self.num_envs

    @property
    def episodes(self) -> int:
        """Number of episodes that ended."""
        return len(self.episode_returns)

    @property
    def mean_return(self) -> float:
        """Mean return of the episodes that ended (``nan`` if none)."""
        return _mean(self.episode_returns)

    @property
    def mean_length(self) -> float:
        """Mean length in transitions of the episodes that ended (``nan`` if none)."""
        return _mean(self.episode_lengths)

    @property
    def env_steps_per_second(self) -> float:
        """Throughput while stepping, in env steps per second."""
        return self.env_steps / self.seconds if self.seconds > 0 else math.nan

    def summary_lines(self) -> list[str]:
        """The summary that ``vecpool collect`` prints.

        Returns:
            Lines without trailing newlines.
        """
        done = f"{self.env_steps:,} env steps"
        if self.interrupted:
            done = f"interrupted after {done} of {self.planned_env_steps:,}"
        lines = [
            f"{done} ({self.vector_steps:,} vector steps x {self.num_envs} envs) "
            f"in {self.seconds:.1f} s: {self.env_steps_per_second:,.0f} env-steps/s",
            f"transitions: {self.transitions:,} recorded, {self.kept:,} kept "
            f"/ {self.capacity:,} capacity "
            f"({self.num_envs} sub-pools x {self.pool.capacity:,})",
        ]
        skipped = self.env_steps - self.transitions
        if skipped > 0:
            why = (
                "only reset an env whose episode had ended (NEXT_STEP autoreset)"
                if self.autoreset_mode is AutoresetMode.NEXT_STEP
                else "were cut by a worker restart"
            )
            lines.append(f"  the other {skipped:,} env steps {why}: not transitions")
        recent = self.episode_returns[-RECENT_EPISODES:]
        lines.append(
            f"episodes: {self.episodes:,} ended; mean return {self.mean_return:.2f} "
            f"over all, {_mean(recent):.2f} over the last {len(recent):,}; mean "
            f"length {self.mean_length:.1f} over all"
        )
        if self.path is not None and self.file_size is not None:
            lines.append(f"wrote {self.path} ({format_bytes(self.file_size)})")
        if self.minari is not None:
            dataset_id, written, partial = self.minari
            lines.append(
                f"wrote Minari dataset {dataset_id}: {written:,} complete episodes "
                f"({partial:,} partial ones left out)"
            )
        lines.append(f"wall time {self.wall_seconds:.1f} s")
        return lines


def _stopped(
    failure: BaseException,
    pool: ReplayPool,
    tracker: _EpisodeTracker,
    num_envs: int,
    kept: str,
) -> BaseException:
    """``failure``, with a note on what the collection it stopped kept.

    Its cause stays its own (an env's remote traceback); the pool is its
    ``pool`` attribute where the exception takes one (as
    :class:`CollectSaveError`'s).
    """
    add_note(
        failure,
        f"vecpool collect: stopped by this after {tracker.vector_steps * num_envs:,} "
        f"env steps, then closed the envs itself; {tracker.transitions:,} "
        f"transitions recorded before it (the exception's `pool`): {kept}",
    )
    failure.__dict__["pool"] = pool  # also on one whose __setattr__ refuses
    return failure


def stopped_collection(error: BaseException) -> bool:
    """Whether ``error`` stopped a :func:`collect` that then saved what it had.

    The env's or the policy's error, re-raised with the pool (:func:`_stopped`),
    as opposed to one before collecting began (an argument, an import).
    """
    return isinstance(error.__dict__.get("pool"), ReplayPool) and not isinstance(
        error, CollectSaveError
    )


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def format_bytes(size: int) -> str:
    """Format a byte count for people: ``format_bytes(1536) == "1.5 KiB"``.

    Args:
        size: Number of bytes.

    Returns:
        The size in B, KiB, MiB, GiB or TiB.
    """
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def parse_autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    """Read an autoreset mode given as the enum, its value or its name.

    Case, ``_`` and ``-`` are ignored: ``"next_step"``, ``"NEXT_STEP"``,
    ``"NextStep"`` and ``"next-step"`` all mean ``AutoresetMode.NEXT_STEP``.

    Args:
        mode: The mode.

    Returns:
        The ``gymnasium.vector.AutoresetMode``.

    Raises:
        CollectArgumentError: If ``mode`` names no mode.
    """
    if isinstance(mode, AutoresetMode):
        return mode
    key = str(mode).lower().replace("_", "").replace("-", "")
    if key not in _AUTORESET_NAMES:
        msg = (
            f"Unknown autoreset mode {mode!r}: use next_step, same_step or disabled "
            "(or an AutoresetMode)."
        )
        raise CollectArgumentError(msg)
    return _AUTORESET_NAMES[key]


def load_policy(spec: str) -> Policy:
    """Import the policy named ``"module:callable"`` (``"module:obj.attr"`` works too).

    The callable is used as is: ``policy(observations) -> actions`` for the whole
    batch, once per vector step (with ``overlap=True``, once per batch of envs).

    Args:
        spec: ``"package.module:function"``.

    Returns:
        The callable.

    Raises:
        CollectArgumentError: If ``spec`` is malformed, the module cannot be
            imported, the attribute is missing or it is not callable.
    """
    policy: Policy = load_callable(
        spec, what="policy", option="--policy", error=CollectArgumentError
    )
    return policy


def _describe_policy(policy: Policy | str | None) -> str:
    if policy is None:
        return "random actions"
    if isinstance(policy, str):
        return f"policy {policy}"
    module = getattr(policy, "__module__", None)
    name = getattr(policy, "__qualname__", None)
    return f"policy {module}:{name}" if module and name else f"policy {policy!r}"


def _check_space(path: Path | None, pool: ReplayPool, env_steps: int) -> None:
    """Fail before collecting if the file cannot fit on its disk.

    The file holds at most ``min(held + env_steps, capacity)`` transitions (a
    save writes only the filled rows; ``held``: what a resumed pool holds
    already), plus a little for the archive.
    """
    if path is None:
        return
    rows = pool.num_envs * (pool.capacity + 1)
    per_transition = pool.nbytes / max(rows, 1)
    held = len(pool) + env_steps
    needed = int(per_transition * min(held, pool.num_envs * pool.capacity))
    needed += 2**20
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return  # cannot tell: the save reports a failure clearly anyway
    if free < needed:
        msg = (
            f"Not enough free space for {str(path)!r}: the pool may need about "
            f"{format_bytes(needed)}, and {str(path.parent)!r} has "
            f"{format_bytes(free)} free. Free some space, write elsewhere (--out), or "
            "collect fewer steps."
        )
        raise CollectArgumentError(msg)


def _resumed(
    path: str | os.PathLike[str], num_envs: int, settings: dict[str, bool]
) -> ReplayPool:
    """The pool saved in ``path`` that a collection goes on recording into.

    Args:
        path: The pool file (``ReplayPool.save``'s).
        num_envs: The collection's envs (one sub-pool each).
        settings: Each pool setting's name (and option), and whether it was given.

    Raises:
        CollectArgumentError: If pool settings were given too (the pool keeps its
            own), the file does not load, or its sub-pools are not one per env.
    """
    given = [name for name, was_given in settings.items() if was_given]
    if given:
        msg = (
            f"`resume` goes on recording into the saved pool, which keeps its own "
            f"settings: leave out {', '.join(given)}."
        )
        raise CollectArgumentError(msg)
    try:
        pool = ReplayPool.load(path)
    except (OSError, ValueError) as error:
        msg = f"Cannot resume from {str(path)!r}: {error}"
        raise CollectArgumentError(msg) from error
    if pool.num_envs != num_envs:
        msg = (
            f"The pool in {str(path)!r} has {pool.num_envs} sub-pools (one per env): "
            f"collect with num_envs={pool.num_envs} (--num-envs {pool.num_envs}) to "
            "go on recording into it."
        )
        raise CollectArgumentError(msg)
    return pool


def _check_minari(dataset_id: str, random_routing: bool) -> None:
    """Refuse a Minari export that could only fail after the collection.

    Raises:
        CollectArgumentError: With random routing, or for a dataset id that
            exists already.
        ImportError: Without the minari package.
    """
    if random_routing:
        msg = (
            "`minari` (--minari) exports each env's episodes, and `random_routing` "
            "(--random-routing) mixes the envs' transitions in every sub-pool: "
            "drop one of the two."
        )
        raise CollectArgumentError(msg)
    try:
        check_new_dataset(dataset_id)
    except ValueError as error:
        msg = f"`minari` (--minari): {error}"
        raise CollectArgumentError(msg) from error


class _EpisodeTracker:
    """What a collection did so far: its vector steps, transitions and episodes.

    The pool counts every episode as it records it (vecpool/replay/episode_log.py),
    so the tracker counts none itself: it takes them from the pool
    (``ReplayPool.take_ended_episodes``, in :meth:`settle`) and notes only *when*
    each ended. In the plain loop those are the vector steps where a real
    transition ended an episode, with their envs, which must match the pool's
    episodes one for one (an error otherwise, never a silent mismatch); with
    ``overlap=True`` it is the end of the chunk. Not transitions: ``NEXT_STEP``'s
    reset steps, and the rows marked ``infos["worker_restarted"]``, whose cut
    episode the pool drops.
    """

    def __init__(self, pool: ReplayPool) -> None:
        self.pool = pool
        self.num_envs = pool.num_envs
        pool.keep_episode_history()
        pool.take_ended_episodes()  # from here on (a pool resumed from a file)
        self.received = int(pool.received.sum())  # before this collection
        self.vector_steps = 0
        self.started: float | None = None  # when stepping began
        self.ends: list[int] = []
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.chunk_rows = np.zeros(self.num_envs, np.int64)  # overlap=True only
        self.chunked = False  # overlap=True: the episodes are taken at chunk ends
        # the plain loop's episode ends not yet matched with the pool's episodes
        self.end_steps: list[int] = []
        self.end_envs: list[npt.NDArray[np.int64]] = []

    @property
    def transitions(self) -> int:
        """Real transitions this collection added to the pool."""
        return int(self.pool.received.sum()) - self.received

    def record(
        self,
        step: tuple[
            npt.NDArray[np.bool_] | None, npt.NDArray[np.bool_] | None, Any, int
        ],
    ) -> npt.NDArray[np.bool_] | None:
        """Count one vector step; return the mask of envs that need a reset, if any.

        ``step`` is what the wrapper found of it (``ReplayPoolWrapper.last_step``:
        the rows that are transitions, those a worker restart cut, the envs whose
        episode ended, how many), so the boundaries are judged once.
        """
        valid, _cut, done, ended_count = step  # `valid` leaves the cut rows out
        self.vector_steps += 1
        if not ended_count:
            return None
        ended = np.flatnonzero(done if valid is None else done & valid)
        if ended.size:
            self.end_steps.append(self.vector_steps)
            self.end_envs.append(ended)
            if len(self.end_steps) >= SETTLE_ENDS:  # a long run without progress
                self.settle()
        done_copy: npt.NDArray[np.bool_] = np.array(done, np.bool_)
        return done_copy

    def settle(self, at: int | None = None) -> None:
        """Take the pool's episodes ended since the last call, with their ends.

        Args:
            at: The vector steps all of them count as ended at (a chunk's end);
                ``None``: those noted by :meth:`record`.

        Raises:
            RuntimeError: If the pool's episodes are not those :meth:`record`
                saw end (a bug: the figures would belong to other episodes).
        """
        if at is None and self.chunked:  # wait for the chunk's end
            return
        ended = self.pool.take_ended_episodes()
        if at is not None:
            steps = np.full(ended.env_ids.size, at, np.int64)
        else:
            sizes = [envs.size for envs in self.end_envs]
            seen = np.concatenate(self.end_envs) if sizes else ended.env_ids[:0]
            if not np.array_equal(seen, ended.env_ids):
                msg = (
                    f"vecpool collect: the pool logged episodes of envs "
                    f"{ended.env_ids.tolist()[:20]}, the loop saw episodes of envs "
                    f"{seen.tolist()[:20]} end: please report this bug."
                )
                raise RuntimeError(msg)
            steps = np.repeat(np.asarray(self.end_steps, np.int64), sizes)
            self.end_steps.clear()
            self.end_envs.clear()
        self.ends.extend((steps * self.num_envs).tolist())
        self.episode_returns.extend(ended.returns.tolist())
        self.episode_lengths.extend(ended.lengths.tolist())

    def end_chunk(self, vector_steps: int | None = None) -> None:
        """A chunk of ``overlap=True`` ended: its episodes end at its end.

        Args:
            vector_steps: Its vector steps; ``None`` (a chunk cut short by Ctrl-C):
                the most rows one env recorded in it.
        """
        if vector_steps is None:
            vector_steps = int(self.chunk_rows.max())
        self.vector_steps += vector_steps
        self.chunk_rows[:] = 0
        self.settle(at=self.vector_steps)

    def stepping_seconds(self) -> float:
        """Seconds since stepping began (0 if it has not)."""
        return 0.0 if self.started is None else time.perf_counter() - self.started

    def recent_mean_return(self) -> float:
        return _mean(self.episode_returns[-RECENT_EPISODES:])


class _CollectProgress:
    """Progress of a collection: a redrawn line on a terminal, else plain lines.

    Plain lines come every 10% of the run (at most one per 2 s, at least one per
    30 s) and at the end.
    """

    def __init__(self, stream: TextIO | None, total_steps: int, num_envs: int) -> None:
        self.display = Progress(enabled=stream is not None, stream=stream)
        self.total = total_steps
        self.num_envs = num_envs
        self.shown = time.perf_counter()
        self.shown_tenth = 0

    def update(self, tracker: _EpisodeTracker) -> None:
        if not self.display.enabled:
            return
        vector_steps = tracker.vector_steps
        now = time.perf_counter()
        since = now - self.shown
        if self.display.overwrite:
            if since < TERMINAL_REFRESH_SECONDS and vector_steps < self.total:
                return
        else:
            tenth = 10 * vector_steps // self.total
            due = tenth > self.shown_tenth and since >= LOG_LINE_SECONDS
            if not (due or since >= LOG_LINE_MAX_SECONDS or vector_steps == self.total):
                return
            self.shown_tenth = tenth
        self.shown = now
        tracker.settle()
        if self.display.overwrite:  # tqdm's meter, fitted to the terminal
            self.display.count(
                vector_steps * self.num_envs,
                self.total * self.num_envs,
                extra=f"{len(tracker.episode_returns):,} episodes, return "
                f"{tracker.recent_mean_return():.1f}",
                elapsed=tracker.stepping_seconds(),
            )
        else:
            self.display.update(self._text(tracker))

    def _text(self, tracker: _EpisodeTracker) -> str:
        env_steps = tracker.vector_steps * self.num_envs
        total = self.total * self.num_envs
        fraction = tracker.vector_steps / self.total
        seconds = tracker.stepping_seconds()
        rate = env_steps / max(seconds, 1e-9)
        episodes = len(tracker.episode_returns)
        mean_return = tracker.recent_mean_return()
        return (
            f"collect: {env_steps:,}/{total:,} env steps ({fraction:.0%}), "
            f"{rate:,.0f} env-steps/s, {episodes:,} episodes, mean return "
            f"{mean_return:.2f} (last {RECENT_EPISODES}), {seconds:.1f} s"
        )

    def close(self) -> None:
        if self.display.enabled and self.display.overwrite and self.display.pending:
            self.display.stream.write("\n")  # keep the last line on screen
            self.display.stream.flush()


class _StopOnSigint:
    """Turn the first ``SIGINT`` into a request to stop after the current step.

    A second ``SIGINT`` raises ``KeyboardInterrupt`` at once (a step that hangs),
    unless :attr:`deferring` (while closing and saving, which must finish); one
    that lands in a finalizer is raised as that returns
    (:mod:`vecpool._util.interrupts`). Only the
    main thread can set signal handlers; elsewhere this does nothing, and Ctrl-C
    raises ``KeyboardInterrupt`` as usual.
    """

    def __init__(self) -> None:
        self.requested = False
        self.deferring = False
        self.notice: str | None = None  # said on the first Ctrl-C, if set
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and not self.deferring:
            if requeue_in_finalizer(signum, frame):
                return  # raised just after the finalizer, where it can be caught
            raise KeyboardInterrupt
        if not self.requested and self.notice is not None:
            sys.stderr.write(f"\n{self.notice}\n")
            sys.stderr.flush()
        self.requested = True

    def __enter__(self) -> _StopOnSigint:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # nohup, &
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._installed:
            previous = self._previous
            signal.signal(
                signal.SIGINT,
                signal.default_int_handler if previous is None else previous,
            )


def _start(
    env_id: str,
    num_envs: int,
    vector_kwargs: dict[str, Any],
    settings: PoolSettings | ReplayPool,
    origin: str | os.PathLike[str] | None = None,
) -> tuple[ReplayPoolWrapper, int]:
    """Start the workers and wrap them with a new pool (or the pool given).

    Args:
        env_id: The env id.
        num_envs: Sub-environments.
        vector_kwargs: ``AsyncVectorEnv`` options.
        settings: A new pool's settings, or the pool to record into.
        origin: The file the pool given was loaded from (for the message).

    Returns:
        The wrapped vector env and its number of worker processes.

    Raises:
        CollectArgumentError: On an unknown env id, an invalid pool argument or a
            pool given that does not fit the env.
    """
    try:
        vector_env = make_vec(env_id, num_envs, vector_kwargs=vector_kwargs)
    except (gym.error.Error, ValueError) as error:
        raise CollectArgumentError(str(error)) from error
    try:
        if isinstance(settings, ReplayPool):
            wrapper = ReplayPoolWrapper(vector_env, pool=settings)
        else:
            wrapper = ReplayPoolWrapper(vector_env, **dataclasses.asdict(settings))
    except MemoryError as error:  # numpy's: the pool's arrays do not fit
        vector_env.close()
        msg = (
            f"The pool does not fit in memory ({error}): lower `pool_size` "
            "(--pool-size) or `steps` (--steps)."
        )
        raise CollectArgumentError(msg) from error
    except ValueError as error:
        vector_env.close()
        msg = str(error)
        if origin is not None:
            msg = f"Cannot resume from {str(origin)!r} with {env_id}: {msg}"
        raise CollectArgumentError(msg) from error
    return wrapper, vector_env.num_workers


def _step(
    envs: ReplayPoolWrapper,
    planned: int,
    seed: int | None,
    policy: Policy | None,
    tracker: _EpisodeTracker,
    display: _CollectProgress,
    stop: _StopOnSigint,
) -> None:
    """Reset, then step until ``planned`` vector steps or a stop request.

    The next step is sent before the last one is recorded, so the pool writes
    while the workers step (the policy needs only the observations, and gets a
    copy of them: one that changes them in place changes nothing recorded): the
    same rows as stepping and recording in turn. Not where a reset must come
    between (``DISABLED``, an episode ended) or where the env cannot be sent a
    step. A step taken is recorded even when the policy or sending the next step
    raises (a second Ctrl-C there included).
    """
    obs, _ = envs.reset(seed=seed)
    if seed is not None:
        envs.action_space.seed(seed)
    disabled = envs.autoreset_mode is AutoresetMode.DISABLED
    inner: Any = envs.env
    ahead = callable(getattr(inner, "step_async", None)) and callable(
        getattr(inner, "step_wait", None)
    )
    tracker.started = time.perf_counter()

    random_actions = RandomActions(envs.action_space)  # sample()'s, in blocks

    def act(obs: Any) -> Any:
        return random_actions() if policy is None else policy(obs)

    going = planned > 0 and not stop.requested
    actions = act(obs) if going else None
    sent = False  # whether the step of `actions` is sent and not yet taken
    while going:
        # a second Ctrl-C may cut the step short ...
        result = inner.step_wait() if sent else inner.step(actions)
        sent = False
        following = None
        try:
            if (
                ahead
                and tracker.vector_steps + 1 < planned
                and not stop.requested
                and not (disabled and np.any(result[2] | result[3]))
            ):
                following = act(result[0] if policy is None else copy_tree(result[0]))
                inner.step_async(following)
                sent = True
        finally:  # the step taken is recorded, whatever stopped the next one
            stop.deferring = True  # ... but never the recording into the pool
            try:  # nor between the pool's count of the step and the tracker's
                envs.record_step(actions, result)
                ended = tracker.record(envs.last_step)
            finally:
                stop.deferring = False
        display.update(tracker)
        going = sent or (tracker.vector_steps < planned and not stop.requested)
        if going and not sent:
            obs = result[0]
            if ended is not None and disabled:
                obs, _ = envs.reset(options={"reset_mask": ended})
            following = act(obs)
        actions = following


class _RecordingPool:
    """The pool the :class:`Sampler` records into with ``overlap=True``.

    It counts each env's rows of the chunk as they land (a chunk cut short ends at
    the most rows an env took), and a second Ctrl-C cannot cut a write in half.
    """

    def __init__(
        self, pool: ReplayPool, tracker: _EpisodeTracker, stop: _StopOnSigint
    ) -> None:
        self._pool = pool
        self._tracker = tracker
        self._stop = stop
        self.num_envs = pool.num_envs

    def add_leaves(
        self,
        obs: Any,
        action: Any,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        env_ids: Any = None,
    ) -> None:
        self._stop.deferring = True
        try:
            self._pool.add_leaves(
                obs, action, next_obs, reward, terminated, truncated, env_ids
            )
            self._tracker.chunk_rows[np.asarray(env_ids, np.int64)] += 1
        finally:
            self._stop.deferring = False

    def abort_episodes(self, env_ids: Any) -> None:
        self._stop.deferring = True
        try:
            self._pool.abort_episodes(env_ids)
        finally:
            self._stop.deferring = False


def _overlap(
    envs: ReplayPoolWrapper,
    planned: int,
    seed: int | None,
    policy: Policy | None,
    tracker: _EpisodeTracker,
    display: _CollectProgress,
    stop: _StopOnSigint,
) -> None:
    """:func:`_step` with the policy on one half while the other half steps.

    The :class:`Sampler` alternates ``send``/``recv`` batches of the inner env
    (created with ``batch_size``) and records every real transition into the
    wrapper's pool; ``planned`` is a whole number of chunks of ``OVERLAP_CHUNK``
    vector steps (or fewer).
    """
    chunk = min(OVERLAP_CHUNK, planned)
    pool: Any = _RecordingPool(envs.pool, tracker, stop)
    # copy=False: only the pool keeps the rows (no [T, B] copies of every frame)
    sampler = Sampler(envs.env, policy, batch_T=chunk, pool=pool, seed=seed, copy=False)
    stop.notice = (
        f"vecpool collect: stopping at the end of this chunk of {chunk} vector steps "
        "(Ctrl-C again to stop at once)"
    )
    tracker.started = time.perf_counter()
    tracker.chunked = True
    try:
        while tracker.vector_steps < planned and not stop.requested:
            sampler.obtain_samples()
            tracker.end_chunk(chunk)
            display.update(tracker)
    except BaseException:
        tracker.end_chunk()  # a chunk cut short: what the pool took of it
        raise


def collect(
    env_id: str = DEFAULT_ENV_ID,
    *,
    num_envs: int,
    steps: int,
    pool_size: int | None,
    out: str | os.PathLike[str] | None,
    window_size: int | None = None,
    clearing_freq: int | None = None,
    clearing_size: int | None = None,
    random_routing: bool = False,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    seed: int | None = None,
    policy: Policy | str | None = None,
    num_workers: int | None = None,
    on_worker_crash: str = "raise",
    store_next_obs: bool = True,
    progress: bool | TextIO = False,
    log: Callable[[str], None] | None = None,
    minari: str | None = None,
    overlap: bool = False,
    window_size_: int | None = None,
    resume: str | os.PathLike[str] | None = None,
) -> CollectResult:
    """Step ``num_envs`` copies of ``env_id`` and save every transition to a pool.

    ``steps`` counts **env steps** (like RL libraries' ``total_timesteps``), rounded
    up to whole vector steps: ``ceil(steps / num_envs)`` vector steps of
    ``num_envs`` env steps each. Under ``NEXT_STEP`` autoreset, the step after an
    episode ends only resets that env: it is an env step but not a transition. Under
    ``DISABLED``, the envs whose episode ended are reset with
    ``reset(options={"reset_mask": ...})`` after each step.

    Ctrl-C (``SIGINT``, in the main thread) stops after the current step: the
    workers are closed, what was collected is saved and the result has
    ``interrupted=True``. A second Ctrl-C stops a step that hangs.

    Example:
        >>> import vecpool.sampling.collect
        >>> result = vecpool.sampling.collect.collect(
        ...     "CartPole-v1", num_envs=2, steps=100, pool_size=100, out=None, seed=0
        ... )
        >>> result.env_steps, result.kept <= result.capacity == 100
        (100, True)
        >>> result.episodes == result.pool.episode_stats.count
        True

    Args:
        env_id: A registered Gymnasium env id.
        num_envs: Number of sub-environments (and of sub-pools).
        steps: Env steps to take in total (rounded up to whole vector steps).
        pool_size: Total capacity of the pool; each sub-pool holds
            ``ceil(pool_size / num_envs)``. ``None``: the env steps planned (after
            the rounding), so nothing is dropped.
        out: File to write the pool to (``.npz``, atomically, with
            :meth:`ReplayPool.save`); ``None`` writes nothing.
        window_size: See :class:`vecpool.ReplayPool`.
        clearing_freq: See :class:`vecpool.ReplayPool` (set with ``clearing_size``).
        clearing_size: See :class:`vecpool.ReplayPool` (set with ``clearing_freq``).
        random_routing: The pool's ``random`` option: route transitions to
            sub-pools with probability ``~ 1/(len + 1)``.
        autoreset_mode: ``next_step``, ``same_step`` or ``disabled`` (any case, or
            the enum or its value).
        seed: Seeds the resets, the random actions and the pool's generator.
        policy: ``policy(observations) -> actions`` for the batch, or its
            ``"module:callable"`` name; ``None`` samples random actions.
        num_workers: Worker processes (default: vecpool's choice).
        on_worker_crash: ``"restart"`` replaces a dead worker and goes on (its
            envs' cut episodes are not recorded; docs/reliability.md); ``"raise"``
            stops the collection with the error.
        store_next_obs: See :class:`vecpool.ReplayPool`.
        progress: ``True`` shows progress on standard error, a stream shows it
            there: a redrawn line on a terminal, plain lines otherwise.
        log: Receives the start line; default: this module's logger (INFO).
        minari: Also write the complete episodes as this Minari dataset id
            (``pip install "vecpool[minari]"``; see
            :func:`vecpool.replay.minari.to_minari`).
        overlap: Step some envs while the policy computes the others' actions
            (``send``/``recv`` batches of ``num_envs // 2``; the policy is called
            with one batch's observations at a time, two or three times per vector
            step). With random actions or ``random_routing``, a seeded run is not
            reproducible then: the batches come back in the order the envs finish.
            It pays when each policy call waits (an accelerator, a remote server)
            about as long as a batch takes to step; with a CPU policy on few
            cores, or cheap envs, the plain loop is faster (docs/collecting.md).
            The envs run out of
            step within chunks of :data:`OVERLAP_CHUNK` vector steps: the steps are
            rounded up to whole chunks, Ctrl-C stops at the end of a chunk, and
            ``episode_ends`` are the ends of the chunks. Needs ``num_envs >= 2``.
        window_size_: Deprecated name of ``clearing_size``; gives a
            :class:`DeprecationWarning`.
        resume: A pool file (``ReplayPool.save``'s, e.g. an earlier ``out``) to go
            on recording into, in place of a new pool: it keeps its settings and
            generator (so no pool setting may be given), it needs one sub-pool per
            env, and the collection starts with a reset, which aborts its
            episodes in progress. ``out`` may name the same file.

    Returns:
        The figures of the collection and the pool (``transitions`` and the
        episode figures count this collection's; ``kept``, what the pool holds).

    Raises:
        CollectArgumentError: On an invalid argument or combination (the message
            says which), an unknown env id, or a policy that cannot be loaded.
        TypeError: If both ``clearing_size`` and ``window_size_`` are given.
    """
    clearing_size = renamed_clearing_size("collect", clearing_size, window_size_)
    wall_start = time.perf_counter()
    mode = parse_autoreset_mode(autoreset_mode)
    num_envs = check_int("num_envs", num_envs, 1, error=CollectArgumentError)
    steps = check_int("steps", steps, 1, error=CollectArgumentError)
    if pool_size is not None:
        pool_size = check_int("pool_size", pool_size, 1, error=CollectArgumentError)
    if seed is not None:
        seed = check_int("seed", seed, 0, hint=" (--seed)", error=CollectArgumentError)
    if minari is not None:  # what the export at the end would refuse, refused now
        _check_minari(minari, random_routing)
    policy_fn = load_policy(policy) if isinstance(policy, str) else policy
    path = (
        None
        if out is None
        else check_output_file(out, "`out` (--out)", error=CollectArgumentError)
    )
    planned = math.ceil(steps / num_envs)
    vector_kwargs: dict[str, Any] = {
        "autoreset_mode": mode,
        "num_workers": num_workers,
        "on_worker_crash": on_worker_crash,
    }
    if overlap:
        if num_envs < 2:
            msg = (
                f"`overlap=True` steps one half of the envs while the policy runs on "
                f"the other: it needs `num_envs` >= 2, got {num_envs}."
            )
            raise CollectArgumentError(msg)
        vector_kwargs["batch_size"] = num_envs // 2
        chunk = min(OVERLAP_CHUNK, planned)
        planned = math.ceil(planned / chunk) * chunk
    elif num_workers is None and on_worker_crash != "restart":
        # the default placement, counting the parent's recording of every step,
        # which it does while the workers step (see _step)
        vector_kwargs["parent_envs"] = plan(
            num_envs, physical_cores(), parent_work=RECORD_STEPS
        ).parent_envs
    source: PoolSettings | ReplayPool  # a new pool's settings, or the pool
    if resume is not None:
        source = _resumed(
            resume,
            num_envs,
            {
                "pool_size (--pool-size)": pool_size is not None,
                "window_size (--window-size)": window_size is not None,
                "clearing_freq (--clearing-freq)": clearing_freq is not None,
                "clearing_size (--clearing-size)": clearing_size is not None,
                "random_routing (--random-routing)": random_routing,
                "store_next_obs=False (--no-store-next-obs)": not store_next_obs,
            },
        )
        _check_space(path, source, planned * num_envs)  # before any worker starts
    else:
        source = PoolSettings(
            planned * num_envs if pool_size is None else pool_size,
            window_size,
            clearing_freq,
            clearing_size,
            random=random_routing,
            seed=seed,
            store_next_obs=store_next_obs,
        )
    stream: TextIO | None
    if progress is True:
        stream = sys.stderr
    elif progress is False:
        stream = None
    else:
        stream = progress
    say = log if log is not None else logger.info

    with _StopOnSigint() as stop, warnings.catch_warnings():  # no unguarded window
        if policy_fn is None:  # random actions: no policy to compete with the workers
            warnings.filterwarnings("ignore", category=VecPoolPerformanceWarning)
        envs, num_workers = _start(env_id, num_envs, vector_kwargs, source, resume)
        pool = envs.pool
        held = "" if resume is None else f", resumed from {resume} ({len(pool):,} held)"
        try:
            if resume is None:  # a new pool: its size is known once it is built
                _check_space(path, pool, planned * num_envs)
        except CollectArgumentError:
            envs.close()
            raise
        tracker = _EpisodeTracker(pool)
        display: _CollectProgress | None = None
        hard_stop = False
        failure: BaseException | None = None  # the env's or the policy's, re-raised
        halves = f" overlapped (batches of {num_envs // 2} envs)" if overlap else ""
        share = int(getattr(envs.env, "parent_envs", 0))
        where = f"on {num_workers} worker process{'' if num_workers == 1 else 'es'}"
        if share and num_workers:  # parent_envs="auto" on 2 CPUs, say
            where += f" and this process ({share} env{'' if share == 1 else 's'} here)"
        elif share:
            where = "in this process"
        placement = getattr(envs.env, "placement", None)
        # the cost model's choice, in its own words (vecpool/_util/placement.py)
        placed = "" if placement is None else f"; {placement.describe(num_envs)}"
        try:
            say(
                f"collecting {env_id}: {planned * num_envs:,} env steps = {planned:,} "
                f"vector steps x {num_envs} envs {where}, autoreset "
                f"{mode.value}, "
                f"{_describe_policy(policy)}{halves}, "
                f"{'unseeded' if seed is None else f'seed {seed}'}; pool of "
                f"{num_envs * pool.capacity:,} transitions "
                f"({num_envs} sub-pools x {pool.capacity:,}){held}{placed}"
            )
            display = _CollectProgress(stream, planned, num_envs)
            run = _overlap if overlap else _step
            run(envs, planned, seed, policy_fn, tracker, display, stop)
        except KeyboardInterrupt as error:
            if isinstance(error.__cause__, RemoteTraceback):  # a worker env's own
                failure = error
            else:  # a second Ctrl-C: the step was cut short
                hard_stop = True
        except Exception as error:  # noqa: BLE001 - re-raised once what came is saved
            failure = error
        finally:
            seconds = tracker.stepping_seconds()
            stop.deferring = True  # closing and saving must finish
            if display is not None:
                display.close()
            # a step cut short leaves a call pending: end the workers at once
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                envs.close(terminate=hard_stop)
        vector_steps = tracker.vector_steps
        interrupted = hard_stop or (stop.requested and vector_steps < planned)
        file_size: int | None = None
        # an error before anything was recorded leaves a previous file as it was
        if path is not None and (failure is None or tracker.transitions):
            try:
                path = pool.save(path)
            except OSError as error:  # a full disk, a directory gone read-only
                msg = (
                    f"Cannot write {str(path)!r}: {error}. Nothing was written (a "
                    "previous file there is unchanged)."
                )
                unsaved = CollectSaveError(msg)
                unsaved.pool = pool
                if failure is not None:  # what stopped the collection comes first
                    # its own cause kept (an env's remote traceback), the save's
                    # error its context
                    raise _stopped(failure, pool, tracker, num_envs, msg)  # noqa: B904
                raise unsaved from error
            file_size = path.stat().st_size
        if failure is not None:  # what was collected is saved: now the error
            if file_size is None:
                kept = "nothing was written" if path else "no `out` to save them to"
            else:
                kept = f"saved to {str(path)!r}"
            raise _stopped(failure, pool, tracker, num_envs, kept)
        tracker.settle()  # after the file: a mismatch there is a bug, not lost work
        exported = None
        if minari is not None:  # `PKG:EnvId-v0`: the id alone (the module is in)
            dataset, left_out = to_minari(pool, minari, env=env_id.rpartition(":")[2])
            exported = (minari, int(dataset.total_episodes), left_out)
    return CollectResult(
        env_id=env_id,
        num_envs=num_envs,
        num_workers=num_workers,
        autoreset_mode=mode,
        planned_env_steps=planned * num_envs,
        vector_steps=vector_steps,
        transitions=tracker.transitions,
        kept=len(pool),
        capacity=num_envs * pool.capacity,
        episode_ends=tuple(tracker.ends),
        episode_returns=tuple(tracker.episode_returns),
        episode_lengths=tuple(tracker.episode_lengths),
        seconds=seconds,
        wall_seconds=time.perf_counter() - wall_start,
        path=path,
        file_size=file_size,
        interrupted=interrupted,
        pool=pool,
        minari=exported,
    )


def trailing_mean(values: npt.NDArray[np.float64], window: int) -> npt.NDArray[Any]:
    """The mean of each value and up to ``window - 1`` before it (one per value).

    The first ``window - 1`` points average everything so far, so a short run
    still draws a line (a plain moving average would give one point or none).

    Example:
        >>> trailing_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist()
        [1.0, 2.0, 4.0, 6.0]
    """
    sums = np.cumsum(np.concatenate([[0.0], values]))
    stop = np.arange(1, values.size + 1)
    start = np.maximum(stop - window, 0)
    means: npt.NDArray[Any] = (sums[stop] - sums[start]) / (stop - start)
    return means


def plot_collection(result: CollectResult, path: str | os.PathLike[str]) -> None:
    """Draw the episode returns over env steps and the fill of each sub-pool.

    Panel 1: each episode's return at the env step it ended (dots) and their
    trailing mean over :data:`RECENT_EPISODES` episodes (:func:`trailing_mean`).
    Panel 2: transitions in each sub-pool against the sub-pool capacity. Uses
    matplotlib's object-oriented API (no pyplot, no global backend).

    Args:
        result: What :func:`collect` returned.
        path: Output image (PNG).

    Raises:
        ImportError: If matplotlib is missing (install ``vecpool[plot]``).
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11.0, 4.2), layout="constrained")
    returns_ax, fill_ax = figure.subplots(1, 2, width_ratios=(2, 1))
    ends = np.asarray(result.episode_ends, np.float64)
    returns = np.asarray(result.episode_returns, np.float64)
    if returns.size:
        returns_ax.scatter(ends, returns, s=4, alpha=0.3, label="episode return")
        returns_ax.plot(
            ends,
            trailing_mean(returns, RECENT_EPISODES),
            color="C1",
            label=f"mean of the last {RECENT_EPISODES} (or all so far)",
        )
        returns_ax.legend(fontsize="small")
    else:
        returns_ax.text(0.5, 0.5, "no episode ended", ha="center", va="center")
    returns_ax.set_xlabel("env steps")
    returns_ax.set_ylabel("episode return")
    returns_ax.set_title(f"{result.env_id}: {result.episodes:,} episodes")
    returns_ax.grid(visible=True, alpha=0.3)

    lengths = result.pool.lengths
    fill_ax.bar(np.arange(lengths.size), lengths, color="C2")
    fill_ax.axhline(
        result.pool.capacity,
        color="k",
        linestyle="--",
        linewidth=1,
        label=f"capacity {result.pool.capacity:,}",
    )
    fill_ax.set_ylim(0, result.pool.capacity * 1.15)
    fill_ax.legend(fontsize="small", loc="upper right")
    fill_ax.set_xlabel("sub-pool (env)")
    fill_ax.set_ylabel("transitions")
    fill_ax.set_title(f"sub-pool fill: {result.kept:,} / {result.capacity:,}")
    title = f"vecpool collect: {result.env_steps:,} env steps"
    if result.interrupted:
        title += " (interrupted)"
    figure.suptitle(title, fontsize="medium")
    figure.savefig(path, dpi=120)
