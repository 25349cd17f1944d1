"""Two loops in one process, their short chunks alternated: ratios a noisy VM keeps.

This project's 2-CPU VM changes speed by up to 2x within seconds, so whole runs
timed one after the other (even interleaved rounds in fresh processes) often
cannot separate two setups 10-20% apart. Here both setups live in one process and
take turns in chunks of about 60 ms, the order flipped every turn, so every speed
spell falls on both alike; the figures are totals over the run. Two comparisons:

* ``vs-sync WORKLOAD N POLICY``: ``gymnasium.vector.SyncVectorEnv`` against
  ``vecpool.AsyncVectorEnv`` at its defaults (issue 37's 2-core rows), with no
  policy, a 1 ms one-thread CPU policy (``cpu1ms``, a busy loop) or a 1 ms policy
  that waits without using the CPU (``gpu1ms``, a sleep) between steps. CPU per
  env-step counts this process and vecpool's worker processes.
* ``collect-shares 4,3,2``: ``vecpool collect``'s loop (send the next step, record
  the last into a ``ReplayPoolWrapper``'s pool, vecpool/sampling/collect.py) over 8
  CartPole envs with each share of envs in the parent (``--no-record``: the same
  loop without the recording).
* ``collect-writes SHARE``: issue 39's bound on moving the pool's row writes out of
  the parent. ``collect``'s loop twice, with the parent share ``SHARE``: recording
  as it does, and recording without writing the observation, next-observation and
  action rows (the ring, the episode log and the reward and flag columns kept), as
  if the workers wrote those rows. The second pool holds wrong rows: it must never
  be used for anything else.

* ``collect-stage SHARE``: issue 39's recording cost. ``collect``'s loop three
  times, with the parent share ``SHARE``: not recorded (vecpool alone), recorded,
  and recorded with each step's rows written at once (the pool's ``StagedSteps``
  off, vecpool/replay/writers.py).

* ``flat-probe N``: issue 37's measure of the step path's layers. Sync and the
  default ``vecpool.AsyncVectorEnv`` (N CartPole envs) beside a *probe*: the same
  kind of env stepped by a flat step written here (the actions and buffer placed,
  the worker's bell rung, the parent's share stepped by ``Host.step``, a spin on
  the bell, the buffers read), with none of the guarantees the layers carry, and
  the probe with the real pieces put back one at a time (the real ``send_step``,
  then ``wait_step``, then ``step_async``). The probe must never be used for
  anything else: it reads the engine's private state and checks nothing.

Usage::

    python tests/benchmarks/paired_chunks.py vs-sync cartpole 8 none --seconds 5
    python tests/benchmarks/paired_chunks.py collect-shares 4,3,2
    python tests/benchmarks/paired_chunks.py collect-writes 3
    python tests/benchmarks/paired_chunks.py collect-stage 3
    python tests/benchmarks/paired_chunks.py flat-probe 8

What a setup's idle worker does while the other takes its turn (it spins a moment,
then blocks) costs its first step of each turn a wake-up: about one step in a
chunk. docs/performance.md has this machine's figures. Not collected by pytest
(no ``test_`` prefix); no figure here is a pass/fail gate.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import vecpool
from vecpool._wire.bell import ANSWERED, BUFFER, COMMAND, LISTENING, fence
from vecpool._wire.bell import NUMBER_MASK as MASK
from vecpool.bench.agent import steal_counters, steal_share
from vecpool.bench.workloads import resolve_workload
from vecpool.vector.async_env import AsyncState

CHUNK_SECONDS = 0.06
"""About how long one turn takes (sized on the first setup)."""

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds of these processes so far (``/proc``; 0 for one gone)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _policy(kind: str) -> Callable[[], None]:
    """What runs between two steps."""

    def busy() -> None:
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass

    if kind == "cpu1ms":
        return busy
    if kind == "gpu1ms":
        return lambda: time.sleep(0.001)
    return lambda: None


def _alternate(
    turns: dict[str, Callable[[int], int]],
    pids: dict[str, list[int]],
    seconds: float,
) -> dict[str, tuple[float, float, int]]:
    """Run each setup's ``turn(steps)`` in turn for ``2 * seconds``.

    Returns:
        Per setup: wall seconds, CPU seconds (this process and ``pids``), env steps.
    """
    names = list(turns)
    first = turns[names[0]]
    started = time.perf_counter()
    steps = 0
    while time.perf_counter() - started < 5 * CHUNK_SECONDS:
        steps += 1
        first(1)
    chunk = max(5, round(steps / 5))
    for name in names:
        turns[name](chunk)  # warm: the workers spinning, caches filled
    totals = {name: [0.0, 0.0, 0] for name in names}
    stolen = steal_counters()
    started = time.perf_counter()
    flip = False
    while time.perf_counter() - started < len(names) * seconds:
        for name in reversed(names) if flip else names:
            wall, cpu, other = (
                time.perf_counter(),
                time.process_time(),
                _cpu_of(pids[name]),
            )
            env_steps = turns[name](chunk)
            totals[name][0] += time.perf_counter() - wall
            totals[name][1] += time.process_time() - cpu + _cpu_of(pids[name]) - other
            totals[name][2] += env_steps
        flip = not flip
    steal = steal_share(stolen, steal_counters())
    if steal is not None:  # other guests' load: a run slowed from outside
        print(f"  hypervisor steal during the chunks: {steal:.1%} of the CPU time")
    return {name: (w, c, int(s)) for name, (w, c, s) in totals.items()}


def _print(results: dict[str, tuple[float, float, int]], base: str) -> None:
    rate = {name: steps / wall for name, (wall, _, steps) in results.items()}
    cpu = {name: cpu / steps * 1e6 for name, (_, cpu, steps) in results.items()}
    for name in results:
        print(
            f"  {name:12s} {rate[name]:10,.0f} env-steps/s "
            f"{cpu[name]:7.1f} us CPU/env-step   "
            f"{rate[name] / rate[base]:.2f}x at {cpu[name] / cpu[base]:.2f}x CPU"
        )


def vs_sync(workload: str, num_envs: int, policy: str, seconds: float) -> None:
    """Sync against vecpool's default on ``workload``."""
    make = resolve_workload(workload).env_fn
    between = _policy(policy)
    envs: dict[str, Any] = {
        "sync": gym.vector.SyncVectorEnv([make] * num_envs),
        "vecpool": vecpool.AsyncVectorEnv([make] * num_envs),
    }
    print(f"{workload} n={num_envs} policy={policy}: {envs['vecpool']!r}")
    pids = {
        "sync": [],
        "vecpool": [p.pid for p in envs["vecpool"].processes if p.pid],
    }
    for env in envs.values():
        env.reset(seed=0)
        env.action_space.seed(0)

    def turn(env: Any) -> Callable[[int], int]:
        def run(steps: int) -> int:
            space = env.action_space
            for _ in range(steps):
                between()
                env.step(space.sample())
            return steps * num_envs

        return run

    try:
        results = _alternate({k: turn(e) for k, e in envs.items()}, pids, seconds)
    finally:
        for env in envs.values():
            env.close()
    _print(results, "sync")


def _without_row_writes(pool: Any) -> None:
    """Make ``pool``'s hot writer skip the observation, next-obs and action rows."""
    hot = pool._hot  # a probe: nothing else may use this pool

    def add_aligned(obs: Any, action: Any, next_obs: Any, *flags: Any) -> None:
        ring, columns = hot.ring, hot.columns
        first = ring.slot * ring.num_envs
        rows = slice(first, first + ring.num_envs)
        columns.reward[rows], columns.terminated[rows], columns.truncated[rows] = flags
        ring.slot = (ring.slot + 1) % ring.slots
        hot.pending += 1
        hot.unsettled += 1
        if hot.unsettled >= hot.settle_limit:
            hot.sync()

    def add_rows(obs: Any, action: Any, next_obs: Any, *rest: Any) -> None:
        *flags, valid = rest
        ring = hot.ring
        if ring.aligned:  # the ring's `row` brought up to date, as add_rows does
            ring.row = ring.base + ring.slot * ring.num_envs
            ring.aligned = False
        row = ring.row.astype(np.intp)
        columns = hot.columns
        columns.reward[row], columns.terminated[row], columns.truncated[row] = flags
        hot._advance(row, valid)

    hot.add_aligned, hot.add_rows = add_aligned, add_rows


def collect_shares(
    shares: list[int],
    record: bool,
    seconds: float,
    *,
    writes: bool = False,
    stage: bool = False,
) -> None:
    """``collect``'s loop with each parent share (8 CartPole envs, NEXT_STEP).

    With ``writes``: one share, recorded with and without the row writes. With
    ``stage``: one share, not recorded (vecpool alone), recorded, and recorded
    with each step's rows written at once (no ``StagedSteps``).
    """
    loops: dict[str, Any] = {}
    names = ["alone", "recorded", "unstaged"] if stage else []
    for index, share in enumerate(shares):
        env = vecpool.make_vec(
            "CartPole-v1",
            8,
            vector_kwargs={
                "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP,
                "parent_envs": share,
            },
        )
        wrapper = vecpool.ReplayPoolWrapper(env, 1_000_000, seed=0)
        wrapper.reset(seed=0)
        wrapper.action_space.seed(0)
        actions = wrapper.action_space.sample()
        name = f"share {share}"
        if writes and index:
            _without_row_writes(wrapper.pool)
            name = "no row writes"
        if stage:
            name = names[index]
            if name == "unstaged":
                wrapper.pool._hot.stage = None  # each step written at once
        loops[name] = [wrapper, env, (actions, env.step(actions))]
    print(f"collect's loop, 8 CartPole envs, {'recording' if record else 'no pool'}")

    def turn(name: str, loop: list[Any]) -> Callable[[int], int]:
        def run(steps: int) -> int:
            wrapper, env, pending = loop
            for _ in range(steps):
                actions, result = pending
                following = wrapper.action_space.sample()
                env.step_async(following)
                if record and name != "alone":
                    wrapper.record_step(actions, result)
                pending = (following, env.step_wait())
            loop[2] = pending
            return steps * 8

        return run

    pids = {
        name: [p.pid for p in loop[1].processes if p.pid]
        for name, loop in loops.items()
    }
    try:
        results = _alternate(
            {name: turn(name, loop) for name, loop in loops.items()}, pids, seconds
        )
    finally:
        for wrapper, _, _ in loops.values():
            wrapper.close()
    _print(results, next(iter(results)))


def _flat_step(envs: Any, *, real_send: bool, real_wait: bool) -> Callable[[Any], Any]:
    """A step of ``envs`` (1 worker with a bell, the parent's share) written flat."""
    buffers, group = envs._buffers, envs._group
    worker, local = group.handles
    host, bell = local.local_channel.host, worker.bell
    wake = bytes(4)  # an empty message: a blocked worker's wake

    def step(actions: Any) -> Any:
        per_env = buffers.actions.place(actions, shared=True)
        buffer = buffers.obs.choose()
        if real_send:
            group.send_step(buffers.obs.step_messages[buffer], per_env)
            number = worker.rung
        else:
            numbers = worker.numbers
            bell[BUFFER] = buffer
            fence()
            number = numbers.sent + 1
            bell[COMMAND] = number & MASK
            numbers.sent = number
            fence()
            if not bell[LISTENING]:
                os.write(worker.channel.fd, wake)
        if real_wait:
            group.wait_step()
        else:
            if real_send:
                local.step_here()
            else:
                host.step(None, None, buffer)
            while bell[ANSWERED] != number & MASK:
                pass
            worker.numbers.received = number
            worker.rung = 0
            worker.numbers.expected.clear()
        return (
            buffers.obs.read(),
            buffers.rewards.copy(),
            buffers.terminations.copy(),
            buffers.truncations.copy(),
            {},
        )

    return step


def flat_probe(num_envs: int, seconds: float) -> None:
    """Sync, vecpool's default and the flat probe with the real pieces put back."""

    def make() -> Any:
        return gym.make("CartPole-v1")

    def place() -> Any:  # the default placement on 2 CPUs: 1 worker + a share
        fns = [make] * num_envs
        return vecpool.AsyncVectorEnv(fns, num_workers=1, parent_envs=num_envs // 2)

    envs: dict[str, Any] = {"sync": gym.vector.SyncVectorEnv([make] * num_envs)}
    envs.update((name, place()) for name in (
        "vecpool", "flat", "+send_step", "+wait_step", "+step_async"
    ))  # fmt: skip
    print(f"CartPole-v1 n={num_envs}: {envs['vecpool']!r}")
    for env in envs.values():
        env.reset(seed=0)
        env.action_space.seed(0)
    with_async = envs["+step_async"]

    def step_async_then_wait(actions: Any) -> Any:
        with_async.step_async(actions)
        with_async._group.wait_step()
        with_async._state = AsyncState.DEFAULT
        buffers = with_async._buffers
        return buffers.obs.read(), buffers.rewards.copy()

    steps: dict[str, Callable[[Any], Any]] = {
        "sync": envs["sync"].step,
        "vecpool": envs["vecpool"].step,
        "flat": _flat_step(envs["flat"], real_send=False, real_wait=False),
        "+send_step": _flat_step(envs["+send_step"], real_send=True, real_wait=False),
        "+wait_step": _flat_step(envs["+wait_step"], real_send=True, real_wait=True),
        "+step_async": step_async_then_wait,
    }

    def turn(name: str) -> Callable[[int], int]:
        space, step = envs[name].action_space, steps[name]

        def run(count: int) -> int:
            for _ in range(count):
                step(space.sample())
            return count * num_envs

        return run

    pids = {
        name: [p.pid for p in getattr(env, "processes", []) if p.pid]
        for name, env in envs.items()
    }
    try:
        results = _alternate({name: turn(name) for name in envs}, pids, seconds)
    finally:
        for name, env in envs.items():
            # the probes stepped behind their groups' backs: end their workers
            env.close(**({} if name in ("sync", "vecpool") else {"terminate": True}))
    _print(results, "sync")


def main() -> None:
    """Parse the command line and run one comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    pair = sub.add_parser("vs-sync", help="Sync against vecpool's default")
    pair.add_argument("workload", help="a `vecpool bench` workload, e.g. cartpole")
    pair.add_argument("num_envs", type=int)
    pair.add_argument("policy", choices=["none", "cpu1ms", "gpu1ms"])
    share = sub.add_parser("collect-shares", help="collect's loop, parent shares")
    share.add_argument("shares", help="comma-separated, e.g. 4,3,2")
    share.add_argument("--no-record", action="store_true")
    writes = sub.add_parser("collect-writes", help="collect's loop, no row writes")
    writes.add_argument("share", type=int, help="the parent's share, e.g. 3")
    staged = sub.add_parser("collect-stage", help="collect's loop, staged or not")
    staged.add_argument("share", type=int, help="the parent's share, e.g. 3")
    probe = sub.add_parser("flat-probe", help="the step path against a flat step")
    probe.add_argument("num_envs", type=int)
    for each in (pair, share, writes, staged, probe):
        each.add_argument("--seconds", type=float, default=6.0, help="per setup")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.what == "vs-sync":
        vs_sync(args.workload, args.num_envs, args.policy, args.seconds)
    elif args.what == "flat-probe":
        flat_probe(args.num_envs, args.seconds)
    elif args.what == "collect-writes":
        collect_shares([args.share] * 2, True, args.seconds, writes=True)
    elif args.what == "collect-stage":
        collect_shares([args.share] * 3, True, args.seconds, stage=True)
    else:
        shares = [int(part) for part in args.shares.split(",")]
        collect_shares(shares, not args.no_record, args.seconds)


if __name__ == "__main__":
    main()
