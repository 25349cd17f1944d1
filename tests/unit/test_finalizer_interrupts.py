"""A Ctrl-C that lands in a finalizer is raised just after it, not printed and lost.

The garbage collector runs ``__del__`` methods and weak-reference callbacks in the
middle of any line; Python drops an exception raised there ("Exception ignored
in ..."). ``vecpool collect``'s second Ctrl-C once landed in ``WeakSet._remove``:
the run printed a traceback, and a Ctrl-C meant to cut a hung step would have done
nothing. Each test sends the signal from inside a finalizer, so the handler runs
there, and checks that the finalizer finished, that nothing was dropped, and that
the interrupt came out right after.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from vecpool._engine import guards
from vecpool._util import interrupts
from vecpool._util.interrupts import in_finalizer
from vecpool.errors import ForcedInterrupt
from vecpool.sampling.collect import _StopOnSigint


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BaseException]]:
    """Python's own SIGINT handler in place, and the exceptions Python drops."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")
    seen: list[BaseException] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda hook_args: seen.append(hook_args.exc_value)
    )
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


class _SignalsWhenCollected:
    """Sends SIGINT from its ``__del__``, then notes that the ``__del__`` ended."""

    def __init__(self, ended: list[str]) -> None:
        self.ended = ended

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)  # the handler runs here, in __del__
        self.ended.append("__del__")


def _collect_one_with_del(ended: list[str]) -> None:
    item = _SignalsWhenCollected(ended)
    del item  # __del__ runs now
    time.sleep(5)  # cut by the signal sent again once __del__ returned


def _collect_one_with_finalize(ended: list[str]) -> None:
    def callback() -> None:
        signal.raise_signal(signal.SIGINT)  # called from weakref.finalize.__call__
        ended.append("finalize")

    class Plain:
        pass

    item = Plain()
    weakref.finalize(item, callback)
    del item
    time.sleep(5)


def _collect_one_from_a_weakset(ended: list[str]) -> None:
    class Plain:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)
            ended.append("weakset")

    members: weakref.WeakSet[Plain] = weakref.WeakSet()
    item = Plain()
    members.add(item)
    del item
    time.sleep(5)


COLLECTIONS = [_collect_one_with_del, _collect_one_with_finalize]


@pytest.mark.parametrize("collect_one", [*COLLECTIONS, _collect_one_from_a_weakset])
def test_collects_second_ctrl_c_inside_a_finalizer_is_raised_after_it(
    dropped: list[BaseException], collect_one: Callable[[list[str]], None]
) -> None:
    ended: list[str] = []
    with _StopOnSigint() as stop:
        signal.raise_signal(signal.SIGINT)  # first: stop after the step
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            collect_one(ended)
    assert ended  # the finalizer ran to its end
    assert dropped == []


def test_collects_second_ctrl_c_while_deferring_is_still_ignored(
    dropped: list[BaseException],
) -> None:
    ended: list[str] = []
    with _StopOnSigint() as stop:
        signal.raise_signal(signal.SIGINT)
        stop.deferring = True  # closing and saving: must finish
        item = _SignalsWhenCollected(ended)
        del item
        signal.raise_signal(signal.SIGINT)
    assert ended == ["__del__"]
    assert dropped == []


@pytest.fixture
def engine_handler(dropped: list[BaseException]) -> Iterator[None]:
    """The engine's deferring SIGINT handler, as while a vector env is open."""
    assert guards.install()
    try:
        yield
    finally:
        guards.uninstall()
        guards.HOLD["depth"] = 0
        guards.HOLD["pending"] = 0


@pytest.mark.parametrize("collect_one", COLLECTIONS)
@pytest.mark.usefixtures("engine_handler")
def test_engine_ctrl_c_outside_a_section_inside_a_finalizer_is_raised_after_it(
    dropped: list[BaseException], collect_one: Callable[[list[str]], None]
) -> None:
    ended: list[str] = []
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        collect_one(ended)
    assert ended
    assert dropped == []


@pytest.mark.parametrize("collect_one", COLLECTIONS)
@pytest.mark.usefixtures("engine_handler")
def test_engine_second_ctrl_c_in_a_section_inside_a_finalizer_still_forces(
    dropped: list[BaseException], collect_one: Callable[[list[str]], None]
) -> None:
    ended: list[str] = []

    def section() -> None:
        with guards.HELD:
            signal.raise_signal(signal.SIGINT)  # first: held
            assert guards.HOLD["pending"] == 1
            collect_one(ended)  # second, in a finalizer: forces after it

    with pytest.raises(ForcedInterrupt):
        section()
    assert guards.HOLD["pending"] == 0
    assert ended
    assert dropped == []


def test_a_plain_frame_is_not_a_finalizer() -> None:
    frame = sys._getframe()
    assert not in_finalizer(frame)
    assert not in_finalizer(None)

    found: list[bool] = []

    class Probe:
        def __del__(self) -> None:
            found.append(in_finalizer(sys._getframe()))

    probe = Probe()
    del probe
    assert found == [True]


def test_a_frame_of_weaksets_module_counts_as_a_finalizer() -> None:
    # WeakSet._remove, where CI's Ctrl-C landed, runs in _weakrefset.py; any of
    # that module's frames is told apart the same way (here __contains__'s)
    seen: list[bool] = []

    class Member:
        def __hash__(self) -> int:
            seen.append(in_finalizer(sys._getframe()))
            return 0

    members: weakref.WeakSet[Member] = weakref.WeakSet()
    assert Member() not in members  # hashes the member inside WeakSet.__contains__
    assert seen == [True]


@pytest.mark.usefixtures("engine_handler")
def test_a_finalizer_that_hangs_is_still_cut_by_ctrl_c(
    dropped: list[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    # resent while the finalizer runs, up to GIVE_UP_SECONDS: then raised in it, as
    # Python would, which ends the hang (and Python drops the exception there)
    monkeypatch.setattr(interrupts, "GIVE_UP_SECONDS", 0.05)
    ended: list[str] = []

    class Hangs:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)
            threading.Event().wait(20)  # a hang: each resend breaks into it
            ended.append("waited")

    item = Hangs()
    del item
    assert ended == []  # cut short
    assert [type(error) for error in dropped] == [KeyboardInterrupt]


@pytest.mark.usefixtures("engine_handler")
def test_two_presses_make_one_interrupt_when_the_section_ends_first(
    dropped: list[BaseException],
) -> None:
    # the second press, resent from a finalizer, stood for the Ctrl-C that the
    # section's end raises: it must not come again after it
    ended: list[str] = []

    def section() -> None:
        with guards.HELD:
            signal.raise_signal(signal.SIGINT)  # held
            item = _SignalsWhenCollected(ended)
            del item  # the second, in a finalizer: resent in RESEND_SECONDS

    with pytest.raises(KeyboardInterrupt):
        section()  # the section ends first: its end raises
    time.sleep(20 * interrupts.RESEND_SECONDS)  # where a stale resend would land
    assert ended == ["__del__"]
    assert dropped == []


@pytest.mark.usefixtures("engine_handler")
def test_a_section_that_ends_inside_a_finalizer_raises_after_it(
    dropped: list[BaseException],
) -> None:
    ended: list[str] = []

    class HoldsInside:
        def __del__(self) -> None:
            with guards.HELD:  # e.g. a close() called from __del__
                signal.raise_signal(signal.SIGINT)  # held: raised at the end
            ended.append("__del__")

    def collect_one() -> None:
        item = HoldsInside()
        del item
        time.sleep(5)  # cut by the signal sent again once __del__ returned

    with pytest.raises(KeyboardInterrupt):
        collect_one()
    assert ended == ["__del__"]
    assert dropped == []
