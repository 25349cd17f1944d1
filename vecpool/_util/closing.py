"""Closing envs in this process without letting a hanging ``close()`` hang us.

A worker process whose env's ``close()`` hangs is terminated after the grace
``close(timeout=...)`` gives it (vecpool/vector/async_env.py). An env closed in the
parent (``num_workers=0``, or the throw-away env the constructor builds to read the
spaces) cannot be terminated: :func:`close_all_within` runs each ``close`` in a daemon
thread and stops waiting after the bound, with a warning naming it. The thread is
left behind (Python cannot stop it); it ends with the process.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable

from vecpool.errors import VecPoolWarning

__all__ = ["close_all_within"]


def close_all_within(
    closes: list[tuple[Callable[[], None], str]], seconds: float
) -> bool:
    """Run each ``close()`` in turn in one daemon thread; wait ``seconds`` in all.

    One thread, in order (as the caller would have closed them): an env that
    hangs delays the ones after it instead of leaving each to a thread of its
    own with no time left (a warning each, all closing at once).

    Returns:
        Whether every one returned in time.
    """
    if not closes:
        return True
    position = [0]

    def run() -> None:
        for index, (close, _) in enumerate(closes):
            position[0] = index
            # closing anyway, as workers do; a KeyboardInterrupt in this thread
            # is the env's own (Python delivers Ctrl-C to the main thread alone)
            with contextlib.suppress(Exception, KeyboardInterrupt):
                close()
        position[0] = len(closes)

    thread = threading.Thread(target=run, name="vecpool close", daemon=True)
    thread.start()
    seconds = max(0.0, seconds)
    thread.join(seconds)
    if not thread.is_alive():
        return True
    stuck = position[0]
    left = ", ".join(what for _, what in closes[stuck + 1 :])
    warnings.warn(
        f"The close() of {closes[stuck][1]} did not return within {seconds:g} s: "
        "it was left running in a daemon thread of this process, which no longer "
        "waits for it"
        + (f" (nor for {left}, closed after it)" if left else "")
        + " (its resources may stay open until the process exits).",
        VecPoolWarning,
        stacklevel=3,
    )
    return False
