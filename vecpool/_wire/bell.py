"""The doorbell: a step command through shared memory, for a worker that spins.

A worker that has a CPU to itself and spins for its next command (see
vecpool/_engine/spinning.py) watches a cache line of the shared block, its *bell*,
rather than polling its pipe: the parent rings it for a plain step (the actions
are in shared memory already) by writing the command's number into it, which
costs no system call on either side, where a pipe costs a ``write``, a ``poll`` and
a ``read``. Every other command, and every reply, still travels by the pipe, in
order; the worker also sets a word of the bell once a bell command's reply is in
the pipe, so the parent sees that it can read it without a ``poll``.

The words of a bell (``uint32``; :meth:`SharedBlock.words`):

* :data:`COMMAND`: the number of the last command rung (parent);
* :data:`BUFFER`: the observation buffer that step writes (parent, before it);
* :data:`ANSWERED`: the number of the last rung command the worker answered
  (worker, after the step's rows are in shared memory);
* :data:`PIPED`: 1 when that answer also has a reply in the pipe (infos, an error,
  a pickled leaf); 0 when there is nothing more to say, :data:`COLUMNS` when the
  step's infos are all in their shared rows (vecpool/_wire/info_columns.py): then
  nothing is written to the pipe, and the parent takes the answer from the bell
  alone (worker, before :data:`ANSWERED`);
* :data:`LISTENING`: 1 from the moment the worker starts watching the bell until
  it gives up spinning (also while it serves what it found: it looks at the bell
  again before it blocks); 0 while it blocks on its pipe (worker).

* :data:`WAITING`: 1 while the parent blocks on the pipes with this worker's rung
  command unanswered (parent): a worker that answers on the bell alone then also
  writes a :data:`~vecpool._wire.messages.WAKE` (not a reply) to its pipe. Each
  side fences between its write and its read of the other's word, so the parent
  either sees the answer before it blocks or gets the wake.

A blocked worker does not see the bell: the parent rings, then reads
:data:`LISTENING`, and if it is 0 writes an empty message to the pipe (a *wake*,
never a command). The worker clears :data:`LISTENING`, then looks at the bell
once more before it blocks. Each side puts a full memory fence (:func:`fence`)
between its write and its read, so at least one of them sees the other's: the
worker takes the command, or gets the wake (or both: a wake whose command was
taken is skipped). A blocked worker also looks at its bell every
:data:`RECHECK_MS`, so even a lost wake costs a delay, never a hang.

The parent rings only a worker that has answered every command sent before
(nothing is in its pipe), so bell and pipe commands never overtake each other; a
worker serves a rung command before anything in its pipe, so a reply in the pipe
while a rung command is unanswered on the bell is that command's (its answer was
piped), and a rung command answered on the bell alone comes before every reply in
the pipe (vecpool/_engine/handle.py ``WorkerHandle.settle``).
"""

from __future__ import annotations

import _thread
import os
import select
import time
from typing import Any

from vecpool._wire.channel import Channel
from vecpool._wire.spin import sleep_zero

__all__ = [
    "ANSWERED",
    "BUFFER",
    "COLUMNS",
    "COMMAND",
    "FRESH_LOCK",
    "LISTENING",
    "PIPED",
    "RECHECK_MS",
    "WAITING",
    "fence",
    "wait_for_command",
]

COMMAND, BUFFER, ANSWERED, LISTENING, PIPED, WAITING = 0, 1, 2, 3, 4, 5
"""The words of a bell (see the module docstring)."""

COLUMNS = 2
""":data:`PIPED`'s value for an answer whose infos are all in shared rows."""

NUMBER_MASK = 0xFFFFFFFF
"""Command numbers as a bell holds them (32 bits; they wrap)."""

RECHECK_MS = 50
"""A blocked worker looks at its bell this often (milliseconds)."""

POLL_EVERY = 16
"""A spinning worker polls its pipe (a system call) once per this many looks."""

FRESH_LOCK = _thread.allocate_lock
"""Makes the lock each :func:`fence` tries once; the step path calls
``FRESH_LOCK().acquire(False)`` inline (no Python call)."""


def fence() -> None:
    """A full memory barrier: an atomic read-modify-write of a fresh lock.

    Trying to take a lock is an atomic compare-and-swap, which orders every load and
    store around it on x86 (a ``lock``-prefixed instruction); on weaker memory
    models (ARM) it is at least an acquire, and a store it lets pass costs a delay
    (a blocked worker looks at its bell every :data:`RECHECK_MS`), never a hang.
    The lock is new each time and never released, so nothing is left held: not by
    a Ctrl-C between a take and its release (which would turn every later fence
    into no barrier at all), nor in a child forked while another thread was inside.
    """
    FRESH_LOCK().acquire(False)


def wait_for_command(
    bell: Any,
    seen: int,
    channel: Channel,
    poller: select.poll,
    spin: float,
    spin_yield: bool,
) -> bool:
    """Wait until the bell rings past ``seen`` (``True``) or the pipe has data.

    Spins for up to ``spin`` seconds (0: not at all) watching the bell, and the
    pipe every :data:`POLL_EVERY` looks, then blocks on the pipe, looking at
    the bell every :data:`RECHECK_MS`.

    Args:
        bell: The worker's bell (a ``ctypes`` array of ``uint32``).
        seen: The number of the last rung command it took.
        channel: Its pipe's channel (a message may be buffered already).
        poller: A poll object over its pipe.
        spin: Seconds to spin first.
        spin_yield: Whether to yield the CPU between looks.

    Returns:
        ``True`` when a command was rung (its number is ``bell[COMMAND]``);
        ``False`` when the pipe has a message or its end (the caller reads it).
    """
    if bell[COMMAND] != seen:
        fence()  # the actions written before the ring are seen after it
        return True
    if channel.has_message():
        return False
    if spin > 0.0:
        # LISTENING stays 1 while the worker serves what it found: it looks at the
        # bell again before it ever blocks
        bell[LISTENING] = 1
        deadline = time.perf_counter() + spin
        give = getattr(os, "sched_yield", sleep_zero) if spin_yield else None
        looks = 0
        while True:
            if bell[COMMAND] != seen:
                fence()
                return True
            looks += 1
            if looks % POLL_EVERY == 0:
                if poller.poll(0):
                    break  # the bell first: a ring precedes any piped command
                if time.perf_counter() >= deadline:
                    break
            if give is not None:
                give()
    if bell[LISTENING]:
        bell[LISTENING] = 0
        fence()  # the parent then either sees 0 (and wakes us) or rang before
    if bell[COMMAND] != seen:
        fence()
        return True
    while not poller.poll(RECHECK_MS):
        if bell[COMMAND] != seen:
            fence()
            return True
    if bell[COMMAND] != seen:  # rung before what the pipe holds came (bell first)
        fence()
        return True
    return False
