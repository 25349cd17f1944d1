"""The parent's wait policy: when it spins, and when it tells the workers to.

:class:`SpinPolicy` decides how long the parent spins for replies (the
group's wait, vecpool/_engine/group.py) before it blocks, and, with
``wait_strategy="auto"``, whether the workers spin for their next command: its
:class:`GapTracker` measures the parent's own work between two step commands (the
time less its waits), and the verdict goes into a byte of the shared block
(:attr:`SpinPolicy.hint`) that the workers read after each reply. A parent busy
between steps (a policy) finds them blocked, so spinning never takes a core from it.

Its :class:`ThreadWatch` measures, on the same calls, whether that work runs on
several threads beside the workers (the advice on ``policy_threads``, issue 38).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vecpool._util.threads import has_warned, measured_advice, warn_once
from vecpool._wire.shared_memory import Layout, SharedBlock

__all__ = [
    "POLICY_THREADS",
    "SAMPLE_WEIGHT",
    "SPIN_BUDGET",
    "SPIN_MAX_WAIT",
    "WORKER_SPIN_MAX_GAP",
    "CrowdWatch",
    "GapTracker",
    "SpinPolicy",
    "ThreadWatch",
]

SPIN_BUDGET = 0.002
"""Seconds to poll before blocking."""
SPIN_MAX_WAIT = 0.00025
"""With ``"auto"``, the parent spins while replies come back within this."""
WORKER_SPIN_MAX_GAP = 0.00025
"""With ``"auto"``, workers spin while the parent sends the next command within this
(on average) after their reply; a parent that computes longer (a policy) finds them
blocked, so their spinning never takes its cores."""
SAMPLE_WEIGHT = 0.5
"""The share of one sampled gap in the averages (the one step path measures one step
in ``SpinPolicy.EVERY``): a policy between steps blocks the workers from the first
sample on, as 3 quick samples let them spin again."""
POLICY_THREADS = 1.3
"""The parent's CPU seconds per wall second above which its work between steps ran
on several threads for a good part of the loop (a loop without a policy: 1 at most)."""


@dataclass
class SpinPolicy:
    """How long the parent polls before blocking, adapted to the gap between steps.

    Spinning (poll + ``sched_yield``) skips the 50-150 microseconds it costs to wake
    a blocked process; it pays only while replies come back quickly and no more
    processes run than cores.

    Attributes:
        worker_spin: The workers' spin budget (0: they block).
        spin: The parent's current spin budget.
        spin_yield: Whether spinners yield the CPU between polls.
        adaptive: Whether :meth:`before_wait` adapts ``spin``, and
            :meth:`before_send` the workers' (``wait_strategy="auto"``).
        wait_ema: Seconds a wait takes, smoothed.
        hint: With ``adaptive`` workers that spin, the byte of the shared block
            they read after each reply (set by :meth:`share_hint`): 1 while they
            should spin for their next command, 0 while they should block (the
            parent computes between steps). ``None``: the workers spin whenever
            ``worker_spin`` says.
        gaps: The parent's own work between its step commands.
        crowd: With ``"auto"`` and spinning workers, the watch on the machine's
            load (:class:`CrowdWatch`).
        cores_free: Whether the parent and every worker have a CPU each: the
            workers may then spin through a policy that runs on one thread.
        watch: While it measures, the watch on the parent's threads
            (:class:`ThreadWatch`, set by :meth:`watch_threads`).
        advice: What the watch found, to say before the next step is sent
            (:meth:`advise`); ``None`` while there is nothing to say.
    """

    worker_spin: float
    spin: float
    spin_yield: bool = True
    adaptive: bool = False
    wait_ema: float = 0.0
    hint: Any = None
    gaps: GapTracker | None = None
    crowd: CrowdWatch | None = None
    cores_free: bool = False
    watch: ThreadWatch | None = None
    advice: str | None = None
    parent_spins: bool = True
    countdown: int = 2  # the first decision on the second step, then every EVERY
    measuring: bool = False

    EVERY = 16
    """The one step path decides every this many step commands (:meth:`sample`)."""

    def share_hint(self, block: SharedBlock, layout: Layout) -> bool:
        """Start writing the workers' hint into ``block``; whether they should read it.

        Only adaptive workers that spin need it (``wait_strategy="auto"``).

        Args:
            block: The vector env's shared block (which the workers map anyway).
            layout: Its layout (the ``spin_hint`` field).
        """
        if not (self.adaptive and self.worker_spin):
            return False
        if self.hint is None:
            self.hint = block.byte(layout.spin_hint)
            self.hint.value = 1
            self.gaps = GapTracker(WORKER_SPIN_MAX_GAP)
        return True

    def drop_hint(self) -> None:
        """Let go of the hint (on close): it keeps the shared block alive."""
        self.hint = None
        self.gaps = None

    def before_send(self, steps: int = 1) -> None:
        """A step command goes out: tell the workers whether to spin after it.

        The parent's own work since the last step command (a policy) decides: a
        long one keeps the workers blocked, never spinning on the cores that work
        needs. ``send`` batches call it for each command; the one step path, for
        one command in :data:`EVERY` (:meth:`sample`, ``steps`` commands counted).
        """
        watch = self.watch
        if watch is not None:  # every ThreadWatch.EVERY commands, it measures
            watch.countdown -= 1
            if not watch.countdown and watch.measured():
                self.watch = None
                self.advice = watch.advice
        if self.gaps is not None:
            # a sampled gap stands for its steps: a larger share of the averages
            quick = self.gaps.commanded(
                time.perf_counter(), 0.125 if steps == 1 else SAMPLE_WEIGHT
            )
            if self.cores_free:
                # a policy of one thread leaves the workers their cores: they may
                # spin through it, if it is shorter than their spin budget
                one = self.gaps.one_thread(time.process_time(), SPIN_BUDGET)
                quick = quick or one
            crowd = self.crowd
            crowded = crowd is not None and crowd.crowded(steps)
            self.hint.value = quick and not crowded

    def watch_threads(self, num_workers: int, cpus: int) -> None:
        """Measure whether a policy on several threads competes with the workers.

        Once per process (the advice is said once), and only beside workers.

        Args:
            num_workers: The vector env's worker processes.
            cpus: CPUs this process may run on.
        """
        if num_workers and not has_warned():
            self.watch = ThreadWatch(num_workers, cpus)

    def advise(self) -> None:
        """Say what the watch found (once per process), before a step is sent.

        Raises:
            VecPoolPerformanceWarning: Where warnings are errors; nothing was
                sent then, and the next step goes on (the advice is said once).
        """
        message, self.advice = self.advice, None
        if message is not None:
            warn_once(message)

    def sample(self) -> None:
        """The one step path's decisions, every :data:`EVERY` step commands.

        The step path counts :attr:`countdown` down itself (no call) and calls this
        at 1 and at 0: at 1 the next step is measured (its gap starts, and its wait
        counts: :attr:`measuring`); at 0 its gap is complete, and the decisions of
        :meth:`before_send` are made on it (the workers' hint, the one-thread
        rule, the crowd, the thread watch) and those of :meth:`before_wait` (the
        parent's spin budget). Between samples nothing is timed or decided.
        """
        if self.countdown == 1:
            if self.gaps is not None:
                self.gaps.start(time.perf_counter(), time.process_time())
            self.measuring = True
            return
        self.countdown = self.EVERY
        self.measuring = False
        watch = self.watch
        if watch is not None:  # it reads its clocks every ThreadWatch.EVERY steps
            watch.countdown -= self.EVERY - 1
            if watch.countdown <= 1:
                watch.countdown = 1
        self.before_send(steps=self.EVERY)
        if self.adaptive and self.worker_spin:
            crowd = self.crowd
            crowded = crowd is not None and crowd.is_crowded
            slow = self.wait_ema > SPIN_MAX_WAIT
            self.spin = 0.0 if slow or crowded or not self.parent_spins else SPIN_BUDGET

    @classmethod
    def from_strategy(
        cls,
        wait_strategy: str,
        num_workers: int,
        cpus: int,
        *,
        share: bool = False,
        batches: bool = False,
    ) -> SpinPolicy:
        """The policy for ``wait_strategy`` with ``num_workers`` on ``cpus`` cores.

        Nobody spins where the spinners would outnumber the cores: the workers
        spin while each has a core, and the parent too while it has one besides
        (or steps a share, which is placed so: vecpool/_util/placement.py);
        a spinner with a core of its own never yields it between looks (only
        ``wait_strategy="spin"`` with more spinners than cores does).

        Args:
            wait_strategy: ``"auto"``, ``"spin"`` or ``"block"``.
            num_workers: Worker processes.
            cpus: Cores (physical where known: vecpool/_util/topology.py).
            share: Whether the parent steps a share of the envs.
            batches: Whether ``send``/``recv`` batches are on (``batch_size``):
                then a worker is stepping while the parent works on another's
                batch, so with ``"auto"`` the workers spin only where they leave
                the parent a core of its own (8 CartPole envs, ``batch_size=4``,
                2 workers on 2 CPUs: 7,800-8,100 env-steps/s spinning,
                15,500-18,600 blocking).
        """
        spins = wait_strategy == "spin" or (
            wait_strategy == "auto"
            and (num_workers < cpus if batches else num_workers <= cpus)
        )
        budget = SPIN_BUDGET if spins else 0.0
        adaptive = wait_strategy == "auto"
        cores_free = num_workers + 1 <= cpus
        parent_spins = share or cores_free or wait_strategy == "spin"
        spinners = num_workers + (1 if parent_spins else 0)
        policy = cls(budget, budget, spinners > cpus, adaptive)
        policy.cores_free = cores_free
        policy.parent_spins = parent_spins
        if adaptive and not parent_spins:
            policy.spin = 0.0
        if adaptive and spins:
            # this process and its spinning workers are runnable by design; the
            # load counts the whole machine's runnable processes: where this process
            # may use fewer CPUs than it has (a container's quota, an affinity
            # mask), only a machine-wide crowd counts (better spin than never)
            host = max(os.cpu_count() or cpus, cpus)
            policy.crowd = CrowdWatch(max(host, num_workers + 1))
        return policy

    def before_wait(self) -> float:
        """The spin budget for the next wait (and start timing it)."""
        if self.adaptive and self.worker_spin:
            slow = self.wait_ema > SPIN_MAX_WAIT
            crowd = self.crowd
            crowded = crowd is not None and crowd.is_crowded
            self.spin = 0.0 if slow or crowded or not self.parent_spins else SPIN_BUDGET
            self._started = time.perf_counter()
        return self.spin

    def after_wait(self) -> None:
        """Fold the wait just finished into the averages."""
        if self.adaptive and self.worker_spin:
            now = time.perf_counter()
            waited = now - self._started
            self.wait_ema += 0.1 * (waited - self.wait_ema)
            if self.gaps is not None:
                self.gaps.waited(waited)
            self._started = now  # a wait around this one (a restart's) adds the rest

    def waited(self, seconds: float) -> None:
        """The parent spent ``seconds`` on other than its own work (its envs' steps)."""
        if self.gaps is not None:
            self.gaps.waited(seconds)

    _started: float = 0.0


class GapTracker:
    """The parent's own work between two step commands, smoothed.

    It tells the workers whether spinning for their next command can pay: spin
    while the parent sends its next command within ``max_gap`` of work (on
    average), block while it computes longer (a policy between steps), so spinning
    never takes the cores the parent computes with.

    The parent measures it itself: the time from one step command to the next, less
    the time it spent waiting for replies in between (:meth:`waited`). So a policy
    counts wherever it runs: between ``step_wait`` and the next ``step_async``,
    between ``step_async`` and ``step_wait``, or before a quick ``call``. A worker
    could only see its own gap, which holds its wake-up but none of the policy run
    before a wait, and a blocked worker would have to spin now and then to find out
    that the parent got quick again; here nothing spins to measure.

    Example:
        >>> tracker = GapTracker(max_gap=0.001)
        >>> tracker.commanded(now=0.0)  # no gap seen yet: spin
        True
        >>> now = 0.0
        >>> for _ in range(30):
        ...     tracker.waited(0.0001)  # the step's replies
        ...     now += 0.0101  # ... and 10 ms of policy
        ...     spins = tracker.commanded(now)
        >>> spins
        False
        >>> for _ in range(30):
        ...     tracker.waited(0.0001)
        ...     now += 0.0002  # quick again
        ...     spins = tracker.commanded(now)
        >>> spins
        True

    Args:
        max_gap: Spin while the smoothed work stays below this (seconds).
    """

    __slots__ = (
        "_cpu",
        "_last",
        "_waited",
        "_wall",
        "average",
        "long_average",
        "max_gap",
        "threads",
    )

    def __init__(self, max_gap: float) -> None:
        """Start with no gap seen (spinning)."""
        self.max_gap = max_gap
        self.average = 0.0
        self.long_average = 0.0  # the same, clipped much later (see one_thread)
        self.threads = 1.0  # this process's CPU seconds per second, smoothed
        self._last: float | None = None
        self._waited = 0.0
        self._cpu: float | None = None
        self._wall = 0.0

    def waited(self, seconds: float) -> None:
        """The parent waited ``seconds`` for replies (not its own work)."""
        self._waited += seconds

    def start(self, now: float, cpu: float) -> None:
        """A step command goes out at ``now`` whose gap alone the next one closes.

        The one step path measures one step's gap in every few
        (``SpinPolicy.sample``): this starts it (``cpu``: this process's CPU
        seconds then, for :meth:`one_thread`), :meth:`commanded` closes it.
        """
        self._last = now
        self._waited = 0.0
        self._cpu = cpu

    def commanded(self, now: float, weight: float = 0.125) -> bool:
        """A step command goes out at ``now``: fold the work since the last one in.

        A single long stretch of work (an evaluation, a checkpoint) is clipped to
        four times ``max_gap``, so spinning resumes within a few dozen quick steps.
        ``weight``: the new gap's share of the averages (the one step path, which
        measures one step in 16, gives each a larger one).

        Returns:
            Whether the workers should spin for the command after this one.
        """
        if self._last is not None:
            work = max(now - self._last - self._waited, 0.0)
            self.average += weight * (min(work, 4.0 * self.max_gap) - self.average)
            self.long_average += weight * (min(work, 0.01) - self.long_average)
            self._wall = now - self._last
        self._last = now
        self._waited = 0.0
        return self.average < self.max_gap

    def one_thread(self, cpu: float, budget: float) -> bool:
        """Whether the parent's work is one thread's and shorter than ``budget``.

        Called after :meth:`commanded` with this process's CPU time
        (``time.process_time()``, every thread): CPU seconds per second near 1
        mean one thread computes (a small torch or numpy policy), which leaves the
        other CPUs to the workers; near 2 or more, a multi-threaded policy (BLAS)
        that needs them. Work longer than ``budget`` (the workers' spin budget)
        would outlast their spinning anyway.

        Example:
            >>> tracker = GapTracker(max_gap=0.00025)
            >>> now = cpu = 0.0
            >>> for _ in range(30):
            ...     now += 0.001  # 1 ms of policy between commands ...
            ...     cpu += 0.001  # ... on one thread
            ...     quick = tracker.commanded(now)
            ...     spins = tracker.one_thread(cpu, 0.002) or quick
            >>> spins
            True
            >>> for _ in range(30):
            ...     now += 0.001
            ...     cpu += 0.002  # two threads busy: BLAS wants every core
            ...     quick = tracker.commanded(now)
            ...     spins = tracker.one_thread(cpu, 0.002) or quick
            >>> spins
            False
        """
        if self._cpu is not None and self._wall > 0.0:
            ratio = (cpu - self._cpu) / self._wall
            self.threads += 0.125 * (ratio - self.threads)
        self._cpu = cpu
        return self.threads < 1.3 and self.long_average < budget


class CrowdWatch:
    """Whether more processes want to run than there are CPUs (nobody spins then).

    Spinning pays only while each spinner has a CPU to itself: on a machine that
    other work keeps busy (a CI runner, other jobs, a second training run), a
    spinner takes the time slices the processes doing the work need, and a step
    can take 3-8x longer (docs/performance.md). Every :data:`EVERY` step commands
    the parent reads how many processes are runnable right now (the fourth field
    of ``/proc/loadavg``, which counts the spinners themselves, and this process),
    and smooths it; while the average exceeds the CPUs by half a process, the
    parent and the workers block instead of spinning, until it falls below the
    CPUs plus a quarter. Where ``/proc/loadavg`` cannot be read, it never says crowded.

    Args:
        cpus: The runnable processes that are not a crowd: the machine's CPUs
            (the load counts the whole machine), or more when this vector env's
            own spinners outnumber them.
        path: The file to read (a test points it elsewhere).
    """

    EVERY = 64
    """Step commands between two reads (a read costs a few microseconds)."""

    __slots__ = ("average", "count", "cpus", "is_crowded", "path")

    def __init__(self, cpus: int, path: str = "/proc/loadavg") -> None:
        """Start uncrowded."""
        self.cpus = cpus
        self.path = path
        self.count = 0
        self.average = 0.0
        self.is_crowded = False

    def crowded(self, steps: int = 1) -> bool:
        """Count ``steps`` step commands; every :data:`EVERY`, judge the load."""
        self.count += steps
        if self.count >= self.EVERY:
            self.count = 0
            runnable = self.runnable()
            if runnable is not None:
                self.average += 0.25 * (runnable - self.average)
                if self.is_crowded:
                    self.is_crowded = self.average > self.cpus + 0.25
                else:
                    self.is_crowded = self.average > self.cpus + 0.5
        return self.is_crowded

    def runnable(self) -> int | None:
        """Processes runnable now (``None``: cannot tell)."""
        try:
            with open(self.path, "rb") as loadavg:
                field = loadavg.read().split()[3]
            return int(field.split(b"/")[0])
        except (OSError, IndexError, ValueError):
            return None


class ThreadWatch:
    """Whether a policy on several threads in the parent competes with the workers.

    Every :data:`EVERY` step commands the parent reads its CPU time (every
    thread's, ``time.process_time``) and the clock; once a window spans
    :data:`WINDOW` seconds, its CPU seconds per wall second are the threads the
    parent ran on. A loop without a policy runs on one thread at most (the parent's
    own envs, its waits, sampling actions), however many threads numpy's BLAS pool
    holds idle; a policy on two threads for a third of the loop passes
    :data:`POLICY_THREADS`, so a short one does not. When :data:`CONFIRM` windows in
    a row pass it, :func:`vecpool._util.threads.measured_advice` checks that the
    parent's pools and the workers exceed the CPUs, and :attr:`advice` holds what to
    say; either way the watch is over.

    Example:
        >>> wall = cpu = 0.0
        >>> watch = ThreadWatch(1, 2, clock=lambda: wall, cpu_clock=lambda: cpu)
        >>> def loop(steps: int, threads: float) -> bool:
        ...     global wall, cpu
        ...     for _ in range(steps):
        ...         wall += 0.01  # a step and 10 ms of policy ...
        ...         cpu += 0.01 * threads  # ... on this many threads
        ...         watch.countdown -= 1
        ...         if not watch.countdown and watch.measured():
        ...             return True
        ...     return False
        >>> loop(2000, threads=1.0)  # the parent alone: never over
        False
        >>> round(watch.threads, 2)
        1.0
        >>> loop(2000, threads=2.5)  # a policy on several threads: the verdict
        True
        >>> round(watch.threads, 2)
        2.5

    Args:
        num_workers: The vector env's worker processes.
        cpus: CPUs this process may run on.
        clock: Wall seconds (a test passes its own).
        cpu_clock: This process's CPU seconds, every thread's.
    """

    EVERY = 64
    """Step commands between two reads of the clocks."""
    WINDOW = 0.25
    """Wall seconds a measurement spans at least."""
    CONFIRM = 2
    """Windows in a row above :data:`POLICY_THREADS` before the verdict."""

    __slots__ = (
        "_cpu",
        "_steps",
        "_wall",
        "above",
        "advice",
        "clock",
        "countdown",
        "cpu_clock",
        "cpus",
        "num_workers",
        "threads",
    )

    def __init__(
        self,
        num_workers: int,
        cpus: int,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        """Start with no window (the first read starts one)."""
        self.num_workers = num_workers
        self.cpus = cpus
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.countdown = self.EVERY  # the caller counts it down, once a command
        self.threads: float | None = None  # the last window's, once measured
        self.above = 0  # windows in a row above POLICY_THREADS
        self.advice: str | None = None
        self._wall: float | None = None
        self._cpu = 0.0
        self._steps = 0

    def measured(self) -> bool:
        """:data:`EVERY` more commands went out: read the clocks, judge a window.

        Returns:
            Whether the watch is over: :attr:`advice` says what to say, if anything.
        """
        self.countdown = self.EVERY
        wall, cpu = self.clock(), self.cpu_clock()
        if self._wall is None:
            self._wall, self._cpu = wall, cpu
            return False
        self._steps += self.EVERY
        elapsed = wall - self._wall
        if elapsed < self.WINDOW:
            return False  # the window goes on
        self.threads = (cpu - self._cpu) / elapsed
        steps, self._steps = self._steps, 0
        self._wall, self._cpu = wall, cpu
        if self.threads <= POLICY_THREADS:
            self.above = 0
            return False
        self.above += 1
        if self.above < self.CONFIRM:
            return False
        self.advice = measured_advice(self.num_workers, self.cpus, self.threads, steps)
        return True
