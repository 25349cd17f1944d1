"""The one progress display: plain lines in a log, one redrawn line on a terminal."""

from __future__ import annotations

import io

from vecpool._progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_only_the_final_count_as_a_plain_line():
    stream = io.StringIO()
    display = Progress(stream=stream)
    for done in range(1, 101):
        display.count(done, 100, unit="vector steps", extra="7 transitions")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("100/100 vector steps (100%), ")
    assert lines[0].endswith("vector steps/s, 7 transitions")
    assert "\r" not in stream.getvalue()


def test_a_terminal_line_is_redrawn_and_kept_at_the_end():
    stream = _Terminal()
    display = Progress(stream=stream)
    display.count(1, 2, unit="steps")
    display.count(2, 2, unit="steps")
    text = stream.getvalue()
    assert text.startswith("\r\x1b[K1/2 steps (50%)")
    assert text.endswith("\n")


def test_quiet_writes_nothing():
    stream = _Terminal()
    display = Progress(enabled=False, stream=stream)
    display.update("running")
    display.count(2, 2, unit="steps")
    display.clear()
    assert stream.getvalue() == ""
