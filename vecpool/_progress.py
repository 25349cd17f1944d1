"""One progress display for every long job (bench, collect, the classic Pool)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Progress lines on standard error; one overwritten line on a terminal.

    Args:
        enabled: ``False`` makes every method a no-op (``--quiet``).
        stream: Where to write; default ``sys.stderr``.
    """

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        """Set up the display."""
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.overwrite = bool(isatty and isatty())
        self._pending = False
        self._started = time.perf_counter()
        self._drawn = 0.0

    def update(self, text: str, *, minor: bool = False) -> None:
        """Show ``text`` as the current activity.

        Args:
            text: What is running now.
            minor: Show it only on a terminal (where it overwrites the line), not
                as a line of its own in a log.
        """
        if not self.enabled or (minor and not self.overwrite):
            return
        if self.overwrite:
            self.stream.write("\r\x1b[K" + text)
            self._pending = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the overwritten line (before results are printed)."""
        if self.enabled and self._pending:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._pending = False

    def count(self, done: int, total: int, *, unit: str, extra: str = "") -> None:
        """Show ``done`` of ``total`` with the elapsed time and the rate.

        Redrawn at most ten times a second on a terminal; in a log, only the last
        count is written.

        Args:
            done: Units done so far.
            total: Units planned.
            unit: What is counted, e.g. ``"vector steps"``.
            extra: Appended after a comma, e.g. ``"1,200 transitions"``.
        """
        now = time.perf_counter()
        if done < total and now - self._drawn < 0.1:
            return
        self._drawn = now
        elapsed = now - self._started
        rate = done / max(elapsed, 1e-9)
        line = (
            f"{done:,}/{total:,} {unit} ({100 * done / max(total, 1):.0f}%), "
            f"{elapsed:.1f} s, {rate:,.0f} {unit}/s"
        )
        self.update(f"{line}, {extra}" if extra else line, minor=done < total)
        if done >= total and self._pending:  # keep the last count on screen
            self.stream.write("\n")
            self.stream.flush()
            self._pending = False
