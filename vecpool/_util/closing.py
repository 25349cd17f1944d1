"""Closing envs in this process without letting a hanging ``close()`` hang us.

A worker process whose env's ``close()`` hangs is terminated after the grace
``close(timeout=...)`` gives it (vecpool/vector/async_env.py). An env closed in the
parent (``num_workers=0``, or the throw-away env the constructor builds to read the
spaces) cannot be terminated: :func:`close_within` runs its ``close`` in a daemon
thread and stops waiting after the bound, with a warning naming it. The thread is
left behind (Python cannot stop it); it ends with the process.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable

from vecpool.errors import VecPoolWarning

__all__ = ["close_within"]


def close_within(close: Callable[[], None], seconds: float, what: str) -> bool:
    """Run ``close()``; give up waiting after ``seconds``.

    Exceptions ``close`` raises are swallowed, as a worker swallows its envs'.

    Args:
        close: The call (e.g. ``env.close``).
        seconds: How long to wait for it.
        what: What is being closed, for the warning (``"env 3"``).

    Returns:
        Whether it returned in time.
    """

    def run() -> None:
        with contextlib.suppress(Exception):  # closing anyway, as workers do
            close()

    thread = threading.Thread(target=run, name=f"vecpool close {what}", daemon=True)
    thread.start()
    thread.join(max(0.0, seconds))
    if not thread.is_alive():
        return True
    warnings.warn(
        f"The close() of {what} did not return within {seconds:g} s: it was left "
        "running in a daemon thread of this process, which no longer waits for "
        "it (its resources may stay open until the process exits).",
        VecPoolWarning,
        stacklevel=3,
    )
    return False
