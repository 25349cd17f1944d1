"""One progress display for every long job (bench, collect, the classic Pool).

On a terminal: one line, redrawn, never wider than the terminal; counts are drawn by
``tqdm``'s meter (bar, percentage, elapsed, ETA, rate). In a log (not a terminal):
plain lines, no carriage returns. ``enabled=False`` (``--quiet``) writes nothing.
Counts are env steps everywhere (one step of one sub-environment).
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

__all__ = ["Progress"]

UNIT = "env steps"
"""What every count of a long job counts: steps of single sub-environments."""


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns at a word boundary, with an ellipsis."""
    if len(text) <= width:
        return text
    cut = text[: max(1, width - 1)]
    space = cut.rfind(" ")
    if space > width // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;|") + "…"


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
        # a terminal draws at once; a log's first line comes after 30 s
        self._drawn = -float("inf") if self.overwrite else time.perf_counter()

    @property
    def pending(self) -> bool:
        """Whether a redrawn line is on screen, not yet ended by a newline."""
        return self._pending

    @property
    def width(self) -> int:
        """Columns available for the line (the terminal's, less one)."""
        return max(20, shutil.get_terminal_size((80, 24)).columns - 1)

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
            self._write("\r\x1b[K" + _fit(text, self.width))
            self._pending = True
        else:
            self._write(text + "\n")

    def clear(self) -> None:
        """Erase the overwritten line (before results are printed)."""
        if self.enabled and self._pending:
            self._write("\r\x1b[K")
            self._pending = False

    def _write(self, text: str) -> None:
        """Write and flush; a stream that breaks (its reader gone) ends the display.

        A long job must not stop because the pipe its progress went to closed
        (``vecpool collect ... 2>&1 | head``): it goes on without a display.
        """
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # BrokenPipeError; a closed file
            self.enabled = False

    def count(
        self,
        done: int,
        total: int,
        *,
        unit: str = UNIT,
        extra: str = "",
        elapsed: float | None = None,
    ) -> None:
        """Show ``done`` of ``total`` with the elapsed time, the rate and the ETA.

        On a terminal, ``tqdm``'s meter fitted to the width, redrawn at most ten
        times a second; in a log, a plain line at most every 30 seconds, and always
        the last count.

        Args:
            done: Units done so far.
            total: Units planned.
            unit: What is counted (env steps, unless a job counts something else).
            extra: Appended after a comma, e.g. ``"1,200 transitions"``.
            elapsed: Seconds the job has run (default: since this display began).
        """
        if not self.enabled:
            return
        now = time.perf_counter()
        every = 0.1 if self.overwrite else 30.0
        if done < total and now - self._drawn < every:
            return
        self._drawn = now
        elapsed = now - self._started if elapsed is None else elapsed
        if self.overwrite:
            from tqdm import tqdm  # the meter only: this class writes the line

            postfix = extra or None
            line = tqdm.format_meter(
                done,
                total,
                elapsed,
                ncols=self.width,
                unit=f" {unit}",
                unit_scale=total >= 10_000,  # 12.4k/20.0k, not 1.00/2.00
                postfix=postfix,
            )
        else:
            rate = done / max(elapsed, 1e-9)
            left = (total - done) / rate if rate > 0 and done < total else 0.0
            line = (
                f"{done:,}/{total:,} {unit} ({100 * done / max(total, 1):.0f}%), "
                f"{elapsed:.1f} s, {rate:,.0f} {unit}/s, ETA {left:.0f} s"
            )
            if extra:
                line += f", {extra}"
        self.update(line)
        if done >= total and self._pending:  # keep the last count on screen
            self._write("\n")
            self._pending = False
