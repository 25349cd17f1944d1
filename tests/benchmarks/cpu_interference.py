"""How much a second busy process slows this one: the ceiling of two-process speed.

Times short runs of raw CartPole steps in this process in pairs, one with a child
idle (asleep) and one with the child busy, the pair's order drawn at random; the
figure is the median over many pairs of busy / idle. Pairs, not whole runs: this
machine's CPUs change speed within a second, so only runs close in time compare.
What the child does while busy:

* ``sleep``: nothing (the control: about 1.00x);
* ``bell``: spins the way a vecpool worker watches its bell (a shared word read in
  a Python loop, its pipe polled every 16 looks, vecpool/_wire/bell.py);
* ``yield``: calls ``sched_yield`` in a loop (a spinner that yields);
* ``env``: steps CartPole too (what a worker does while the parent steps its share).

Where ``env`` slows this process by ``k``, two processes stepping at once make at
most ``2 / k`` the steps of one: no vector env on the machine beats that ratio to
Sync with CPU-bound envs. Usage::

    python tests/benchmarks/cpu_interference.py --pairs 60

docs/performance.md has this machine's figures. Not collected by pytest (no
``test_`` prefix); no figure here is a pass/fail gate.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import os
import random
import select
import statistics
import time
from typing import Any

import gymnasium as gym

KINDS = ("sleep", "bell", "yield", "env")


def _cartpole_us(steps: int) -> float:
    """Microseconds per raw CartPole step over ``steps`` steps."""
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    start = time.perf_counter()
    for i in range(steps):
        _, _, terminated, _, _ = env.step(i & 1)
        if terminated:
            env.reset()
    return (time.perf_counter() - start) / steps * 1e6


def _child(kind: str, busy: Any, stop: Any) -> None:
    """Sleep while ``busy`` is clear, do ``kind`` while it is set, until ``stop``."""
    word = (ctypes.c_uint32 * 8)()
    read, _ = os.pipe()
    poller = select.poll()
    poller.register(read, select.POLLIN)
    looks = 0
    while not stop.value:
        if not busy.value or kind == "sleep":
            time.sleep(0.001)
        elif kind == "bell":
            if word[0]:
                break
            looks += 1
            if looks % 16 == 0:
                poller.poll(0)
                time.perf_counter()
        elif kind == "yield":
            os.sched_yield()
        else:
            _cartpole_us(20)


def _pairs(kind: str, pairs: int, steps: int) -> list[float]:
    """``pairs`` ratios busy / idle of ``steps`` CartPole steps beside ``kind``."""
    context = multiprocessing.get_context("fork")
    busy, stop = context.Value("b", 0), context.Value("b", 0)
    child = context.Process(target=_child, args=(kind, busy, stop))
    child.start()
    draw = random.Random(kind)
    ratios = []
    try:
        for _ in range(pairs):
            times = {}
            for state in draw.sample([0, 1], 2):
                busy.value = state
                time.sleep(0.005)  # the child has switched
                times[state] = _cartpole_us(steps)
            ratios.append(times[1] / times[0])
    finally:
        stop.value = 1
        child.join()
    return ratios


def main() -> None:
    """Run the pairs of each kind and print their median ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--steps", type=int, default=2_000)
    args = parser.parse_args()
    print(f"{args.pairs} pairs of {args.steps:,} raw CartPole steps, child idle/busy")
    medians = {}
    for kind in KINDS:
        ratios = _pairs(kind, args.pairs, args.steps)
        medians[kind] = statistics.median(ratios)
        low, high = statistics.quantiles(ratios, n=4)[0::2]
        print(f"  beside a busy {kind:5s} {medians[kind]:.2f}x  (quartiles "
              f"{low:.2f}-{high:.2f})")  # fmt: skip
    print(f"two processes stepping at once: at most {2 / medians['env']:.2f}x one")


if __name__ == "__main__":
    main()
