"""The doorbell: plain steps through shared memory to a worker that spins."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import select
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from vecpool._engine.group import WorkerGroup
from vecpool._engine.handle import WorkerHandle
from vecpool._engine.numbering import ReplyNumbers
from vecpool._engine.spinning import SpinPolicy
from vecpool._wire.bell import (
    ANSWERED,
    COLUMNS,
    COMMAND,
    LISTENING,
    PIPED,
    WAITING,
    wait_for_command,
)
from vecpool._wire.channel import Channel
from vecpool._wire.messages import COLUMNS_ONLY, WAKE
from vecpool.testing import assert_same_data


@pytest.fixture
def pipe():
    read, write = os.pipe()
    poller = select.poll()
    poller.register(read, select.POLLIN)
    yield Channel(read), Channel(write), poller
    os.close(read)
    os.close(write)


def _bell():
    return (ctypes.c_uint32 * 16)()


def test_a_rung_bell_is_taken_without_the_pipe(pipe):
    channel, _, poller = pipe
    bell = _bell()
    bell[COMMAND] = 7
    assert wait_for_command(bell, 6, channel, poller, 0.001, True) is True


def test_a_pipe_message_comes_first_when_nothing_rang(pipe):
    channel, sender, poller = pipe
    bell = _bell()
    sender.send(b"a command")
    assert wait_for_command(bell, 0, channel, poller, 0.001, True) is False
    assert bytes(channel.recv()) == b"a command"


def test_a_spinner_listens_then_says_so_before_it_blocks(pipe):
    channel, sender, poller = pipe
    bell = _bell()
    seen_listening = []

    def ring_later():
        deadline = time.monotonic() + 5
        while not bell[LISTENING] and time.monotonic() < deadline:
            time.sleep(0)
        seen_listening.append(bell[LISTENING])
        while bell[LISTENING] and time.monotonic() < deadline:
            time.sleep(0.0001)  # it gives up spinning: LISTENING back to 0
        seen_listening.append(bell[LISTENING])
        bell[COMMAND] = 1
        sender.send(b"")  # the wake a parent writes when LISTENING is 0

    thread = threading.Thread(target=ring_later)
    thread.start()
    if not wait_for_command(bell, 0, channel, poller, 0.005, True):
        # woken through the pipe: the worker's loop reads the wake, skips it and
        # looks again (vecpool/_worker/loop.py)
        assert bytes(channel.recv()) == b""
        assert wait_for_command(bell, 0, channel, poller, 0.005, True) is True
    else:  # it saw the number first: the wake is left in the pipe, skipped later
        assert bytes(channel.recv()) == b""
    thread.join()
    assert seen_listening == [1, 0]


@pytest.mark.timeout(30)
def test_a_lost_wake_costs_a_delay_never_a_hang(pipe):
    # rung while the worker blocks, and no wake written: it still finds the
    # command, looking at its bell every RECHECK_MS
    channel, _, poller = pipe
    bell = _bell()

    def ring() -> None:
        time.sleep(0.02)
        bell[COMMAND] = 3

    thread = threading.Thread(target=ring)
    thread.start()
    assert wait_for_command(bell, 2, channel, poller, 0.0, True) is True
    thread.join()


def _make():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("gap", [0.0, 0.004])
def test_rung_steps_match_sync_with_quick_and_slow_parents(gap, make_async, make_sync):
    # gap 0: the worker spins and takes every step from its bell; 4 ms: past the
    # spin budget, the worker blocks and each ring needs a wake through the pipe
    envs = make_async([_make] * 4, num_workers=1)
    sync = make_sync([_make] * 4)
    assert envs._group.remote[0].bell is not None
    rng = np.random.default_rng(0)
    assert_same_data(envs.reset(seed=3), sync.reset(seed=3))
    for _ in range(60):
        actions = rng.integers(0, 2, size=4)
        assert_same_data(envs.step(actions), sync.step(actions))
        if gap:
            time.sleep(gap)
    bell = envs._group.remote[0].bell
    assert bell[ANSWERED] == bell[COMMAND] == envs._group.remote[0].numbers.sent


def test_a_block_strategy_worker_has_no_bell(make_async):
    envs = make_async([_make] * 2, num_workers=1, wait_strategy="block")
    assert envs._group.remote[0].bell is None
    envs.reset(seed=0)
    envs.step(np.zeros(2, dtype=np.int64))


def test_restart_mode_rings_no_bell(make_async):
    # a replacement takes every command by pipe: no stale bell words to misread
    envs = make_async([_make] * 2, num_workers=1, on_worker_crash="restart")
    assert envs._group.remote[0].bell is None
    envs.reset(seed=0)
    envs.step(np.zeros(2, dtype=np.int64))


def test_close_lets_go_of_the_bells(make_async):
    envs = make_async([_make] * 2, num_workers=1)
    handle = envs._group.remote[0]
    assert handle.bell is not None
    envs.close()
    assert handle.bell is None  # a ctypes view keeps the shared block alive


class _RingingPoller:
    """A poller whose first poll rings the bell and writes the pipe meanwhile.

    What a preempted worker sees: between its look at the bell and its poll, the
    parent rang command 1, gave up on it (a timeout) and wrote command 2 by pipe.
    """

    def __init__(self, poller, bell, sender):
        self.poller, self.bell, self.sender = poller, bell, sender
        self.rang = False

    def poll(self, timeout=None):
        if not self.rang:
            self.rang = True
            self.bell[COMMAND] = 1
            self.sender.send(b"the next command")
        return self.poller.poll(timeout)


@pytest.mark.parametrize("spin", [0.001, 0.0])
def test_a_ring_comes_before_what_the_pipe_holds(pipe, spin):
    # the parent rings only a worker that has answered everything, so a rung
    # command is older than any piped one: serving the pipe first would step the
    # envs out of order and hand one call another's rows
    channel, sender, poller = pipe
    bell = _bell()
    ringing = _RingingPoller(poller, bell, sender)
    assert wait_for_command(bell, 0, channel, ringing, spin, True) is True  # type: ignore[arg-type]
    assert bytes(channel.recv()) == b"the next command"  # served next


def test_a_fence_leaves_nothing_held_for_a_cut_or_a_fork_to_keep():
    # a fence takes a fresh lock each time: a Ctrl-C right after a take, or a
    # child forked while another thread was inside a fence, leaves no lock held
    # that would make a later fence block, or no barrier at all (a shared lock
    # left held turned every later fence into a no-op)
    from vecpool._wire import bell

    taken = bell.FRESH_LOCK()
    assert taken.acquire(False)  # "cut" right after a take: never released
    assert bell.FRESH_LOCK() is not taken
    assert bell.FRESH_LOCK().acquire(False)  # the next fence still takes its lock
    done: list[bool] = []

    def fence_then_say() -> None:
        bell.fence()
        done.append(True)

    thread = threading.Thread(target=fence_then_say, daemon=True)
    thread.start()
    thread.join(5)
    assert done == [True]
    assert not any(
        isinstance(value, type(threading.Lock())) for value in vars(bell).values()
    )


class _SlowPollModule:
    """``select`` as the worker loop sees it, its ``poll()`` 0.3 s late to start."""

    POLLIN = select.POLLIN

    @staticmethod
    def poll():
        time.sleep(0.3)
        return select.poll()


class _StepAnytimeEnv(gym.Env):
    """Steps without a reset (a vector env accepts a first step before reset)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.full(2, float(action), np.float32), 1.0, False, False, {}


@pytest.mark.timeout(60)
def test_a_step_rung_right_after_start_up_is_served(make_async, monkeypatch):
    # the worker reads what its bell holds before its start-up reply: a step rung
    # at once (while the worker still sets up its wait) is served, not skipped
    import vecpool._worker.loop as loop

    monkeypatch.setattr(loop, "select", _SlowPollModule)  # forked workers inherit it
    envs = make_async(
        [_StepAnytimeEnv] * 2, num_workers=1, parent_envs=0, context="fork"
    )
    assert envs._group.remote[0].bell is not None
    envs.step_async(np.ones(2, dtype=np.int64))
    obs, *_ = envs.step_wait(timeout=10)  # a skipped ring would time out here
    assert obs.tolist() == [[1.0, 1.0], [1.0, 1.0]]


# ------------------------------------------------ answers on the bell alone (issue 37)


class _FakeProcess:
    """What a handle reads of its process (nothing runs)."""

    sentinel = -1
    exitcode = None


def _handle(pipe_ends):
    """A handle whose "worker" is this test: its bell, and the pipe's far end."""
    parent_end, worker_end = pipe_ends
    handle = WorkerHandle(0, range(2), _FakeProcess(), parent_end)  # type: ignore[arg-type]
    handle.numbers = ReplyNumbers()  # started and answered: nothing awaited
    handle.bell = _bell()
    handle.bell[LISTENING] = 1  # it spins: the ring needs no wake
    return handle, Channel(worker_end.fileno())


@pytest.fixture
def connection():
    parent_end, worker_end = multiprocessing.Pipe()
    yield parent_end, worker_end
    parent_end.close()
    worker_end.close()


def _ring(handle, message):
    """Send a step the way the one step path does (it rings when it can)."""
    group = WorkerGroup(SpinPolicy(worker_spin=1e-3, spin=0.0))
    group.handles.append(handle)  # as WorkerGroup.add, without its env map
    group.remote.append(handle)
    group.send_step(message, None)
    return handle.numbers.expected[-1]


def _answer_on_the_bell(handle, number, piped=0):
    handle.bell[PIPED] = piped
    handle.bell[ANSWERED] = number


def test_an_answer_on_the_bell_alone_is_counted_without_the_pipe(connection):
    handle, _ = _handle(connection)
    number = _ring(handle, b"s\x00")
    handle.numbers.expect(number)
    assert handle.bell[COMMAND] == number == handle.rung
    assert not handle.settle()  # not answered yet: nothing taken
    assert handle.numbers.received == 0
    _answer_on_the_bell(handle, number, COLUMNS)
    assert not handle.settle()  # taken from the bell: nothing to read
    assert handle.rung == 0
    assert handle.numbers.received == number
    assert handle.answer() is COLUMNS_ONLY  # "infos in their rows"
    assert not handle.channel.buffer
    assert not handle.conn.poll()
    handle.rung = number  # as if a Ctrl-C cut the first look after its count
    assert not handle.settle()  # a second look counts nothing more
    assert handle.numbers.received == number
    assert handle.rung == 0


def test_a_given_up_answer_on_the_bell_comes_before_the_next_pipe_reply(connection):
    handle, worker = _handle(connection)
    first = _ring(handle, b"s\x00")
    handle.numbers.expect(first)
    handle.numbers.give_up()  # e.g. a Ctrl-C: the call gave up on it
    # the next command goes by pipe: the worker may still be busy with the first
    second = _ring(handle, b"s\x01")
    handle.numbers.expect(second)
    assert second == first + 1
    assert worker.recv() == b"s\x01"  # by pipe, not rung
    # the worker answers the first on its bell alone, then the second by pipe
    _answer_on_the_bell(handle, first)
    worker.send(b"")
    assert handle.receive() is True  # the pipe's reply is the second's
    assert handle.numbers.received == second
    assert handle.numbers.answers[0][0] == second
    assert handle.rung == 0


def test_a_wake_left_in_the_pipe_is_never_taken_for_a_reply(connection):
    handle, worker = _handle(connection)
    number = _ring(handle, b"s\x00")
    handle.numbers.expect(number)
    worker.send(WAKE)  # an earlier answer's wake, read late
    assert handle.receive() is False
    assert handle.rung == number  # still awaited, on the bell
    assert handle.numbers.received == 0
    _answer_on_the_bell(handle, number)
    assert not handle.settle()
    assert handle.numbers.received == number
    assert handle.answer() is None


def test_a_piped_answer_to_a_rung_command_is_read_from_the_pipe(connection):
    handle, worker = _handle(connection)
    number = _ring(handle, b"s\x00")
    handle.numbers.expect(number)
    worker.send(b"")  # its reply, in the pipe ...
    _answer_on_the_bell(handle, number, piped=1)  # ... and so the bell says
    assert handle.settle() is True  # read it: nothing taken from the bell
    assert handle.numbers.received == 0
    assert handle.receive() is True
    assert handle.numbers.received == number
    assert handle.rung == 0


@pytest.mark.parametrize("also_waiting", [False, True], ids=["alone", "beside_one"])
def test_a_bell_answered_after_the_last_look_is_looked_at_again_not_blocked_on(
    connection, also_waiting
):
    # the wait looked (not answered), then the worker answered on its bell alone,
    # with WAITING still down, so it writes no wake: blocking now would never end
    handle, _ = _handle(connection)
    number = _ring(handle, b"s\x00")
    handles = [handle]
    if also_waiting:  # a second rung worker, still stepping
        other, _ = _handle((connection[1], connection[0]))
        _ring(other, b"s\x00")
        handles.append(other)
    _answer_on_the_bell(handle, number)
    poller = select.poll()
    poller.register(handle.conn.fileno(), select.POLLIN)
    deadline = time.monotonic() + 2.0
    assert WorkerGroup._block(handles, (poller, {}), deadline) is None  # look again
    assert all(h.bell[WAITING] == 0 for h in handles)


def test_a_bell_answered_with_its_reply_in_the_pipe_is_polled_not_looked_at_again(
    connection,
):
    # its answer is the reply in the pipe: the block returns that reply's event
    # (kept in the channel's buffer), never "look again" forever
    handle, worker = _handle(connection)
    number = _ring(handle, b"s\x00")
    worker.send(b"")  # its reply ...
    _answer_on_the_bell(handle, number, piped=1)  # ... and so the bell says
    poller = select.poll()
    poller.register(handle.conn.fileno(), select.POLLIN)
    watched = {handle.conn.fileno(): (handle, False)}
    events = WorkerGroup._block([handle], (poller, watched), time.monotonic() + 2.0)
    assert events == [(handle.conn.fileno(), select.POLLIN)]
    assert handle.receive() is True  # the reply, from the bytes the block kept
    assert handle.numbers.received == number
