"""An env's exception comes back as its own class, even when ``__init__`` needs
more than the message (issue 11, item 9): ``except MyEnvError`` must catch it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vecpool
from vecpool.testing import CountingEnv, DeliberateErrorWithArgs

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # Gymnasium's error log lines
]


class LockedError(Exception):
    """Its __str__ needs an attribute that cannot travel (a lock)."""

    def __init__(self, lock: Any, text: str) -> None:
        super().__init__(text)
        self.lock = lock

    def __str__(self) -> str:
        return f"{self.args[0]} (lock held: {self.lock.locked()})"


class _Raising(CountingEnv):
    error: str = "coded"

    def step(self, action: Any) -> Any:
        if self.error == "coded":
            # needs three arguments: it cannot be rebuilt from its message alone (an
            # importable class: a worker started by forkserver or spawn cannot
            # pickle a test module's class by reference, nor the parent import it)
            msg = "the simulator diverged"
            raise DeliberateErrorWithArgs(msg, 7, "E7")
        import threading

        raise LockedError(threading.Lock(), "stuck")


class _Locked(_Raising):
    error = "locked"


def test_an_exception_needing_init_arguments_keeps_its_class(placement):
    env = vecpool.AsyncVectorEnv([CountingEnv, _Raising], **placement.kwargs(2))
    try:
        env.reset(seed=0)
        with pytest.raises(DeliberateErrorWithArgs) as info:
            env.step(np.zeros(2, np.int64))
        error = info.value
        assert type(error) is DeliberateErrorWithArgs
        assert str(error) == "the simulator diverged"
        assert error.code == 7  # its attributes came along
        assert error.detail == "E7"
        assert "sub-environment 1" in "".join(getattr(error, "__notes__", []))
        # the remote traceback
        assert "DeliberateErrorWithArgs" in str(error.__cause__)
        # still usable afterwards, as after any env error
        assert env.get_attr("spec")[0] is None
    finally:
        env.close()


def test_an_exception_that_cannot_be_rebuilt_says_so_in_a_vecpool_error(placement):
    env = vecpool.AsyncVectorEnv([CountingEnv, _Locked], **placement.kwargs(2))
    try:
        env.reset(seed=0)
        with pytest.raises(vecpool.errors.VecPoolError, match="stuck") as info:
            env.step(np.zeros(2, np.int64))
        assert "LockedError" in str(info.value.__cause__)
    finally:
        env.close()
