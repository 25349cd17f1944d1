"""A reply the parent cannot unpickle raises, and later calls get their own rows.

Found in review of the layout refactoring: decoding a reply before counting it
shifted every later reply of that worker by one (hangs, and with ``send``/``recv``
rows of another env). The reply is now counted first (``ReplyNumbers.absorb``).
"""

from __future__ import annotations

import operator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces


class Undecodable:
    """Pickles fine; unpickling divides by zero (in the parent, which reads it)."""

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        return (operator.truediv, (1, 0))


class BadInfoEnv(gym.Env[np.ndarray, np.int64]):
    """Observation ``100 * index + t``; env 0's info at ``bad_at`` is undecodable."""

    observation_space = spaces.Box(-1e6, 1e6, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int, bad_at: int = 2) -> None:
        self.index, self.bad_at, self.t = index, bad_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info: dict[str, Any] = {"who": self.index, "t": self.t}
        if self.index == 0 and self.t == self.bad_at:
            info["bad"] = Undecodable()
        obs = np.full(1, 100 * self.index + self.t, np.float32)
        return obs, float(self.index), False, False, info


def _fns(count: int, bad_at: int = 2) -> list[Any]:
    return [lambda i=i: BadInfoEnv(i, bad_at) for i in range(count)]


def test_steps_after_an_undecodable_reply_return_their_own_rows(make_placed):
    env = make_placed(_fns(2))
    env.reset(seed=0)
    actions = np.zeros(2, np.int64)
    obs, *_ = env.step(actions)
    np.testing.assert_array_equal(obs.ravel(), [1, 101])
    with pytest.raises(ZeroDivisionError):
        env.step(actions)
    for t in (3, 4, 5):
        env.step_async(actions)
        obs, rewards, _, _, infos = env.step_wait(timeout=10)  # a hang guard
        np.testing.assert_array_equal(obs.ravel(), [t, 100 + t])
        np.testing.assert_array_equal(infos["t"], [t, t])
        np.testing.assert_array_equal(rewards, [0.0, 1.0])


# Not over placements: both envs' replies come from one worker (the shifted
# numbering of that worker's replies put env 0's id on env 1's row).
def test_steps_after_an_undecodable_reply_in_a_shared_worker(make_async):
    env = make_async(_fns(2), num_workers=1)
    env.reset(seed=0)
    actions = np.zeros(2, np.int64)
    env.step(actions)
    with pytest.raises(ZeroDivisionError):
        env.step(actions)
    for t in (3, 4, 5):
        env.step_async(actions)
        obs, _, _, _, infos = env.step_wait(timeout=10)  # a hang guard
        np.testing.assert_array_equal(obs.ravel(), [t, 100 + t])
        np.testing.assert_array_equal(infos["t"], [t, t])


def test_recv_after_an_undecodable_reply_pairs_each_env_with_its_row(make_placed):
    env = make_placed(_fns(2, bad_at=1), batch_size=1)
    env.reset(seed=0)
    env.send(np.zeros(1, np.int64), [0])
    env.send(np.zeros(1, np.int64), [1])
    received: list[tuple[int, float, int]] = []
    errors = 0
    while len(received) < 1 or errors < 1:
        try:
            obs, _, _, _, infos = env.recv(timeout=10)  # a hang guard
        except ZeroDivisionError:
            errors += 1
            continue
        (env_id,) = infos["env_id"].tolist()
        received.append((env_id, float(obs[0, 0]), int(infos["who"][0])))
    # env 0's row was lost with its reply; env 1 comes back with its own row and
    # info, never env 0's id on env 1's reply
    assert received == [(1, 101.0, 1)]
    assert errors == 1
    # env 0 left flight with its lost row: it can be sent again, and every env comes
    # back with its own row (env 0 stepped twice: t=2)
    env.send(np.zeros(2, np.int64), [0, 1])
    rows = set()
    for _ in range(2):
        obs, _, _, _, infos = env.recv(timeout=10)  # a hang guard
        (env_id,) = infos["env_id"].tolist()
        rows.add((env_id, float(obs[0, 0]), int(infos["who"][0])))
    assert rows == {(0, 2.0, 0), (1, 102.0, 1)}
    env.reset(seed=0)  # nothing left in flight to wait for


def test_reply_numbers_release_the_batch_of_an_undecodable_reply():
    from vecpool._engine.numbering import ReplyNumbers

    def explode(raw):
        raise ZeroDivisionError(raw)

    numbers = ReplyNumbers()
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [0, 1])
    numbers.expect_batch(numbers.sent_one(), [2])
    with pytest.raises(ZeroDivisionError):
        numbers.absorb("bad", explode)
    assert numbers.lost_batches == [[0, 1]]
    assert numbers.absorb("fine") is True
    assert numbers.pop_batch() == ([2], "fine")
