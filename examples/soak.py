"""Soak: millions of CartPole steps through the ReplayPoolWrapper, leaks sampled.

Every ``--every`` env steps it prints the resident memory of the parent and of the
workers, the parent's open file descriptors and the number of ``/dev/shm`` entries;
at the end, the growth after the warm-up (the first sample). Then it creates and
closes ``--cycles`` vector envs and reports what is left over. Linux only (/proc).

With ``--kill-every K``, the vector env runs with ``on_worker_crash="restart"`` and
a random worker is SIGKILLed every ``K`` env steps: the samples then show whether
restarts leak, and the end line counts the restarts and the transitions recorded
against the steps taken.

Usage: ``python examples/soak.py --steps 2000000 --every 100000 --cycles 200``
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import warnings

import gymnasium as gym
import numpy as np

import vecpool


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _sample(envs: vecpool.ReplayPoolWrapper) -> tuple[int, int, int, int]:
    processes = getattr(envs.unwrapped, "processes", [])
    workers = [p.pid for p in processes if p.pid]
    return (
        _rss(os.getpid()),
        sum(_rss(pid) for pid in workers),
        len(os.listdir("/proc/self/fd")),
        len(os.listdir("/dev/shm")),
    )


def main() -> None:
    """Run the soak and print its samples."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--kill-every", type=int, default=0)
    args = parser.parse_args()
    n = args.num_envs
    restart = (
        {"on_worker_crash": "restart", "max_restarts": None} if args.kill_every else {}
    )
    warnings.simplefilter("ignore", vecpool.VecPoolWarning)  # one per restart
    envs = vecpool.ReplayPoolWrapper(
        vecpool.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * n, **restart),
        pool_size=100_000,
    )
    rng = np.random.default_rng(1)
    cut = reset_rows = 0  # rows that are no transition: cuts, NEXT_STEP resets
    ended = np.zeros(n, np.bool_)
    envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(1024, n))
    out = sys.stdout
    out.write("env steps   parent RSS   worker RSS   fds   /dev/shm\n")
    samples = []
    for step in range(args.steps // n):
        if args.kill_every and (step + 1) * n % args.kill_every == 0:
            processes = envs.unwrapped.processes  # type: ignore[attr-defined]
            os.kill(processes[rng.integers(len(processes))].pid, signal.SIGKILL)
        _, _, terminated, truncated, infos = envs.step(actions[step % 1024])
        marked = infos.get("worker_restarted", np.zeros(n, np.bool_))
        cut += int(marked.sum())
        reset_rows += int((ended & ~marked).sum())  # a cut row is counted once
        ended = terminated | truncated
        if (step + 1) * n % args.every == 0:
            sample = _sample(envs)
            samples.append(sample)
            parent, workers, fds, shm = sample
            mib = (parent / 2**20, workers / 2**20)
            out.write(
                f"{(step + 1) * n:>9,} {mib[0]:>10.1f} M {mib[1]:>10.1f} M"
                f" {fds:>5} {shm:>10}\n"
            )
    if args.kill_every:
        restarts = envs.unwrapped.restarts  # type: ignore[attr-defined]
        rows = args.steps // n * n
        out.write(
            f"restarts per worker {restarts}; rows cut {cut}; transitions added "
            f"{int(envs.pool.received.sum()):,}, real steps "
            f"{rows - cut - reset_rows:,} (of {rows:,} rows)\n"
        )
    envs.close()
    first, last = samples[0], samples[-1]
    grew = [b - a for a, b in zip(first, last, strict=True)]
    out.write(
        f"growth after the first sample: parent {grew[0] / 2**20:+.1f} MiB, "
        f"workers {grew[1] / 2**20:+.1f} MiB, fds {grew[2]:+d}, /dev/shm {grew[3]:+d}\n"
    )
    fds, shm = len(os.listdir("/proc/self/fd")), len(os.listdir("/dev/shm"))
    for _ in range(args.cycles):
        env = vecpool.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
        env.reset(seed=0)
        env.close()
    del env
    gc.collect()  # closed envs in reference cycles keep their sentinels until then
    children = [
        entry
        for entry in os.listdir("/proc")
        if entry.isdigit() and _parent(int(entry)) == os.getpid()
    ]
    fds = len(os.listdir("/proc/self/fd")) - fds
    shm = len(os.listdir("/dev/shm")) - shm
    out.write(
        f"{args.cycles} create/close cycles: fds {fds:+d}, /dev/shm {shm:+d}, "
        f"child processes left {len(children)}\n"
    )


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


if __name__ == "__main__":
    main()
