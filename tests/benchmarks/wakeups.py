"""CPU per round trip of the ways one process can wake another (Linux).

A ping-pong between the parent and one child, ``--trips`` round trips per
mechanism, rounds interleaved; each side's CPU is read from
``/proc/<pid>/schedstat`` (nanoseconds). The mechanisms:

* ``pipe``: ``os.write``, then ``poll`` on the reply pipe and the child's sentinel
  (what vecpool's parent does), then ``os.read``;
* ``eventfd``: the same with two eventfds;
* ``semaphore``: ``release`` / blocking ``acquire`` of two POSIX semaphores (futex);
* ``semaphore-timed``: ``acquire(timeout=0.1)`` in a loop, the way a wait that must
  notice a dead child would use it.

Usage::

    python tests/benchmarks/wakeups.py --rounds 3

docs/performance.md has this machine's figures. Not collected by pytest (no
``test_`` prefix); no figure here is a pass/fail gate.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import time
from collections.abc import Callable
from typing import Any

MECHANISMS = ("pipe", "eventfd", "semaphore", "semaphore-timed")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat", "rb") as handle:
        return int(handle.read().split()[0]) / 1e9


def _child_pipe(read_fd: int, write_fd: int) -> None:
    while os.read(read_fd, 64):
        os.write(write_fd, b"x")


def _child_eventfd(read_fd: int, write_fd: int) -> None:
    while True:
        os.eventfd_read(read_fd)
        os.eventfd_write(write_fd, 1)


def _child_semaphore(ping: Any, pong: Any) -> None:
    while True:
        ping.acquire()
        pong.release()


def _start(mechanism: str) -> tuple[Any, Callable[[], None]]:
    """Start the child; return it and one round trip."""
    ctx = multiprocessing.get_context("fork")
    if mechanism == "pipe":
        ping_r, ping_w = os.pipe()
        pong_r, pong_w = os.pipe()
        child = ctx.Process(target=_child_pipe, args=(ping_r, pong_w), daemon=True)
        child.start()
        poller = select.poll()
        for fd in (pong_r, child.sentinel):
            poller.register(fd, select.POLLIN)

        def trip() -> None:
            os.write(ping_w, b"c")
            poller.poll()
            os.read(pong_r, 64)

        return child, trip
    if mechanism == "eventfd":
        ping, pong = os.eventfd(0), os.eventfd(0)
        child = ctx.Process(target=_child_eventfd, args=(ping, pong), daemon=True)
        child.start()
        poller = select.poll()
        for fd in (pong, child.sentinel):
            poller.register(fd, select.POLLIN)

        def trip_eventfd() -> None:
            os.eventfd_write(ping, 1)
            poller.poll()
            os.eventfd_read(pong)

        return child, trip_eventfd
    sem_ping, sem_pong = ctx.Semaphore(0), ctx.Semaphore(0)
    child = ctx.Process(target=_child_semaphore, args=(sem_ping, sem_pong), daemon=True)
    child.start()
    if mechanism == "semaphore":

        def trip_semaphore() -> None:
            sem_ping.release()
            sem_pong.acquire()

        return child, trip_semaphore

    def trip_timed() -> None:
        sem_ping.release()
        while not sem_pong.acquire(timeout=0.1):
            pass

    return child, trip_timed


def measure(mechanism: str, trips: int) -> tuple[float, float, float]:
    """Wall, parent CPU and child CPU microseconds per round trip."""
    child, trip = _start(mechanism)
    try:
        for _ in range(500):
            trip()
        parent, worker = _cpu_seconds(os.getpid()), _cpu_seconds(child.pid)
        started = time.perf_counter()
        for _ in range(trips):
            trip()
        wall = time.perf_counter() - started
        parent = _cpu_seconds(os.getpid()) - parent
        worker = _cpu_seconds(child.pid) - worker
    finally:
        child.kill()
        child.join()
    return 1e6 * wall / trips, 1e6 * parent / trips, 1e6 * worker / trips


def main() -> None:
    """Measure every mechanism, ``--rounds`` times, interleaved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trips", type=int, default=20_000)
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS))
    args = parser.parse_args()
    print("mechanism        round  wall us  parent us  child us  (per round trip)")
    for number in range(args.rounds):
        for mechanism in args.mechanisms:
            wall, parent, child = measure(mechanism, args.trips)
            print(
                f"{mechanism:16s} {number:5d} {wall:8.1f} {parent:10.1f} {child:9.1f}"
            )


if __name__ == "__main__":
    main()
