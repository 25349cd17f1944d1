"""The engine's layout stays as docs/architecture.md draws it (issue 8)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import vecpool

PACKAGE = Path(vecpool.__file__).resolve().parent
HEAVY = ("vecpool.bench", "vecpool.sampling", "vecpool.replay")


def _loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys; {statement}; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('vecpool')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def test_a_worker_imports_none_of_the_heavy_modules():
    loaded = _loaded_after("import vecpool._worker.loop")
    assert "vecpool._worker.loop" in loaded  # the probe itself worked
    heavy = sorted(m for m in loaded if m.startswith(HEAVY))
    assert heavy == []
    # the child side never needs the parent's engine either
    assert not loaded & {
        "vecpool.vector.async_env",
        "vecpool._engine.group",
        "vecpool._engine.buffers",
    }


def test_public_names_still_import_from_the_package():
    loaded = _loaded_after("from vecpool import AsyncVectorEnv, ReplayPool, Sampler")
    assert {
        "vecpool.vector.async_env",
        "vecpool.replay.pool",
        "vecpool.sampling.sampler",
    } <= loaded
    for name in vecpool.__all__:
        assert getattr(vecpool, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        vecpool.nope  # noqa: B018


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: path.name
)
def test_no_module_is_over_a_thousand_lines(path):
    assert len(path.read_text().splitlines()) <= 1000


def test_the_async_env_class_body_is_under_900_lines():
    tree = ast.parse((PACKAGE / "vector" / "async_env.py").read_text())
    (node,) = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "AsyncVectorEnv"
    ]
    assert node.end_lineno is not None
    assert node.end_lineno - node.lineno + 1 < 900


def test_only_the_worker_group_waits_on_workers():
    # the one wait loop: no other parent-side module polls pipes or sentinels
    for name in (
        "vector/async_env.py",
        "_engine/batches.py",
        "_engine/buffers.py",
        "_engine/env_states.py",
    ):
        source = (PACKAGE / name).read_text()
        assert not re.search(r"\.poll\(|select\.|connection\.wait", source), name


def test_no_module_reaches_into_the_replay_pool():
    private = re.compile(r"\bpool\._[a-z]")
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in {"pool.py", "files.py"} and path.parent.name == "replay":
            continue  # the pool and its own persistence
        assert not private.search(path.read_text()), path.name
