"""The one progress display: plain lines in a log, one redrawn line on a terminal."""

from __future__ import annotations

import io
import os

import pytest

from vecpool._util.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_only_the_final_count_as_a_plain_line():
    stream = io.StringIO()
    display = Progress(stream=stream)
    for done in range(1, 101):
        display.count(done, 100, extra="7 transitions")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1  # a short job: no 30-second line before the last
    assert lines[0].startswith("100/100 env steps (100%), ")
    assert "env steps/s, ETA 0 s" in lines[0]
    assert lines[0].endswith(", 7 transitions")
    assert "\r" not in stream.getvalue()


def test_a_log_line_comes_every_30_seconds_with_an_eta(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("vecpool._util.progress.time.perf_counter", lambda: clock[0])
    stream = io.StringIO()
    display = Progress(stream=stream)
    for done in range(1, 11):
        clock[0] += 10.0  # 10 s per unit: 100 s planned
        display.count(done, 10)
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [
        "3/10",
        "6/10",
        "9/10",
        "10/10",
    ]
    assert lines[0].endswith("ETA 70 s")


def test_a_terminal_line_is_tqdm_meter_redrawn_and_kept_at_the_end(monkeypatch):
    monkeypatch.setattr(
        "shutil.get_terminal_size", lambda *a: os.terminal_size((60, 24))
    )
    stream = _Terminal()
    display = Progress(stream=stream)
    display.count(1, 2, unit="steps", extra="3 transitions")
    display.count(2, 2, unit="steps", extra="3 transitions")
    text = stream.getvalue()
    draws = text.split("\r\x1b[K")[1:]
    assert draws[0].startswith(" 50%|")
    assert "1/2 [" in draws[0]
    assert draws[-1].startswith("100%|")
    assert "steps/s, 3 transitions]" in draws[-1]
    assert all(len(draw.rstrip("\n")) <= 59 for draw in draws)  # width - 1
    assert text.endswith("\n")


def test_a_long_activity_is_cut_at_a_word_to_the_terminal(monkeypatch):
    monkeypatch.setattr(
        "shutil.get_terminal_size", lambda *a: os.terminal_size((40, 24))
    )
    stream = _Terminal()
    Progress(stream=stream).update("[cartpole n=8] round 2/3: vecpool-inproc warm-up")
    shown = stream.getvalue().split("\r\x1b[K")[-1]
    assert len(shown) <= 39
    assert shown.endswith("…")
    assert shown[:-1] == "[cartpole n=8] round 2/3: vecpool"[: len(shown) - 1]


def test_quiet_writes_nothing():
    stream = _Terminal()
    display = Progress(enabled=False, stream=stream)
    display.update("running")
    display.count(2, 2, unit="steps")
    display.clear()
    assert stream.getvalue() == ""


class _ClosedPipe(io.StringIO):
    """A stream whose reader went away: every write is a broken pipe."""

    def __init__(self, isatty: bool) -> None:
        super().__init__()
        self._isatty = isatty

    def isatty(self) -> bool:
        return self._isatty

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "log"])
def test_a_stream_that_breaks_ends_the_display_not_the_job(terminal):
    # `vecpool collect ... 2>&1 | head -2`: the job goes on without a display
    progress = Progress(stream=_ClosedPipe(terminal))
    progress.update("working")
    assert not progress.enabled
    progress.count(10, 10)  # nothing written, nothing raised
    progress.clear()
