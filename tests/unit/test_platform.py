"""Platforms: a clear refusal where the engine cannot run, a fallback where it can."""

from __future__ import annotations

import os
import re
import select
import time

import numpy as np
import pytest

import vecpool
from vecpool._wire.spin import spin_until_ready
from vecpool.testing import CountingEnv


def test_without_select_poll_the_constructor_says_what_to_use(
    monkeypatch, leak_checker
):
    monkeypatch.delattr(select, "poll")  # as on Windows
    with pytest.raises(RuntimeError, match=re.escape("needs select.poll")) as info:
        vecpool.AsyncVectorEnv([CountingEnv] * 2)
    assert "gymnasium.vector.AsyncVectorEnv" in str(info.value)
    leak_checker.assert_no_leaks()  # refused before any process or segment


def test_spinning_without_sched_yield_still_yields_and_finds_the_event(monkeypatch):
    monkeypatch.delattr(os, "sched_yield")  # as on macOS
    read, write = os.pipe()
    try:
        poller = select.poll()
        poller.register(read, select.POLLIN)
        zero_sleeps: list[float] = []
        real_sleep = time.sleep

        def counting_sleep(seconds: float) -> None:
            zero_sleeps.append(seconds)
            real_sleep(seconds)

        monkeypatch.setattr(time, "sleep", counting_sleep)
        assert spin_until_ready(poller, 0.01, spin_yield=True) == []
        assert zero_sleeps  # it yielded the CPU between polls (a zero sleep)
        assert set(zero_sleeps) == {0}
        os.write(write, b"x")
        assert spin_until_ready(poller, 0.01, spin_yield=True)
    finally:
        os.close(read)
        os.close(write)


def test_a_spinning_env_works_without_sched_yield(monkeypatch):
    monkeypatch.delattr(os, "sched_yield")
    # the parent spins too (and a forked worker inherits the missing function)
    env = vecpool.AsyncVectorEnv([CountingEnv] * 2, num_workers=1, wait_strategy="spin")
    try:
        env.reset(seed=0)
        for _ in range(20):
            assert env.step(np.zeros(2, np.int64))[0].shape[0] == 2
    finally:
        env.close()
