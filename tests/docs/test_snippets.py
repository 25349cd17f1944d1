"""Run every Python code block of README.md and docs/*.md: documentation must work.

Each fenced block whose info string is ``python`` is one test, with the id
``file:line`` (the line of its opening fence). It runs in a fresh namespace, in a
temporary working directory, and must close every vector env it opens (checked
with the ``leak_checker`` fixture). Blocks of other languages (``console``,
``text``, ...) are not run; the docs have no ``pycon`` blocks.

An HTML comment on the line just before the fence changes that:

* ``<!-- snippet: skip (reason) -->``: the block is not runnable (a fragment, a
  GPU); the test is skipped with that reason.
* ``<!-- snippet: needs PACKAGE [PACKAGE ...] -->``: the block imports an optional
  module; the test is skipped when one is missing (``pytest.importorskip``).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import vecpool

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s*\((?P<reason>.+)\)$")
NEEDS = re.compile(r"^needs\s+(?P<modules>[\w.]+(?:[\s,]+[\w.]+)*)$")


@dataclass(frozen=True)
class Snippet:
    """One fenced ``python`` block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    source: str
    marker: str | None  # the body of a ``<!-- snippet: ... -->`` comment

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def _snippets(path: Path) -> tuple[list[Snippet], list[str]]:
    """The ``python`` blocks of ``path``, and the problems found with markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(ROOT).as_posix()
    snippets: list[Snippet] = []
    problems: list[str] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        previous = MARKER.match(lines[index - 1]) if index else None
        if previous and not (opening and opening["info"].split()[:1] == ["python"]):
            problems.append(f"{rel}:{index}: marker not followed by a python block")
        if not opening:
            index += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        info = opening["info"].strip()
        if info.split()[:1] == ["python"]:
            width = len(opening["indent"])
            # CommonMark: an indented fence's content loses up to that many spaces
            body = [
                text[min(width, len(text) - len(text.lstrip(" "))) :]
                for text in lines[index + 1 : end]
            ]
            marker = previous["body"] if previous else None
            if marker is not None and not (SKIP.match(marker) or NEEDS.match(marker)):
                problems.append(f"{rel}:{index}: unknown marker {marker!r}")
            snippets.append(Snippet(path, index + 1, "\n".join(body) + "\n", marker))
        index = end + 1
    return snippets, problems


MAIN_GUARD = re.compile(r"^if __name__ == [\"']__main__[\"']:", re.MULTILINE)

SNIPPETS: list[Snippet] = []
PROBLEMS: list[str] = []
for _path in DOC_FILES:
    _found, _problems = _snippets(_path)
    SNIPPETS += _found
    PROBLEMS += _problems


def test_markers_are_well_formed() -> None:
    assert PROBLEMS == []


def test_snippets_are_found() -> None:
    # a broken parser must not pass by running nothing
    assert len(SNIPPETS) >= 10
    assert any(snippet.path.name == "README.md" for snippet in SNIPPETS)


def _close_vector_envs(namespace: dict[str, Any]) -> None:
    """Close whatever vector env a failing snippet left open (cleanup, not a pass)."""
    for value in namespace.values():
        if isinstance(value, (gym.vector.VectorEnv, vecpool.Pool)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    closer: Any = value.close
                    closer(terminate=True)
                except TypeError:  # vecpool.Pool.close() takes no arguments
                    value.close()
                except Exception:  # noqa: BLE001  # best effort after a failure
                    pass


@pytest.mark.timeout(120)
@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet(
    snippet: Snippet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    leak_checker: Any,
) -> None:
    if snippet.marker is not None:
        skip = SKIP.match(snippet.marker)
        if skip:
            pytest.skip(skip["reason"])
        needs = NEEDS.match(snippet.marker)
        assert needs, snippet.marker
        for module in re.split(r"[\s,]+", needs["modules"]):
            # found, not imported: importing torchrl switches this whole test
            # process to the spawn start method (the snippet runs in its own)
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"could not import {module!r}: it is not installed")
    monkeypatch.chdir(tmp_path)
    if MAIN_GUARD.search(snippet.source) or snippet.marker is not None:
        # a script (`if __name__ == "__main__":`, e.g. for the spawn start method),
        # or one that needs a third-party library (torch, torchrl, SB3: what they
        # load or switch must not stay in this test process): in its own interpreter
        script = tmp_path / "snippet.py"
        script.write_text(snippet.source)
        result = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=110,
            check=False,
            # its temporary files (SB3's `SB3-<time>` log folders) in the test's own
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return
    code = compile(snippet.source, snippet.id, "exec")
    # a module name that is not importable: cloudpickle sends the snippet's
    # functions (env factories, lambdas) to the workers by value
    namespace: dict[str, Any] = {"__name__": "vecpool_doc_snippet"}
    registered = set(gym.registry)  # snippets may register env ids (MyEnv-v0)
    try:
        exec(code, namespace)
        # the snippet's own objects are still alive here: an env it did not close
        # still has its workers and shared memory
        leak_checker.assert_no_leaks()
    finally:
        _close_vector_envs(namespace)
        namespace.clear()
        for env_id in set(gym.registry) - registered:
            del gym.registry[env_id]
        gc.collect()
