"""The suite passes on any supported Python, CPU count and start method (issue 38).

What a 3.12 run on 16 CPUs found, kept from coming back: ``~`` on a Python bool
(a ``DeprecationWarning`` from 3.12, an error later, an error under this suite's
``filterwarnings = error``); the start method Python 3.14 makes Linux's default,
which ``nox -s forkserver`` runs the engine tests under; and the versions the
package metadata and the README claim, which must be the ones CI runs.
(The crowd tests' CPU count is faked in tests/unit/test_gap_tracker.py.)
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vecpool.testing import CountingEnv

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("vecpool", "tests", "examples")


def _is_python_bool(node: ast.expr) -> bool:
    """Whether ``node`` is a Python bool whatever its operands (not a numpy mask)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.Not)
    if isinstance(node, ast.IfExp):  # `mask if cond else False`: sometimes a bool
        return _is_python_bool(node.body) or _is_python_bool(node.orelse)
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "bool"
    return False


def bool_inversions(source: str) -> list[int]:
    """Lines where ``~`` is applied to a Python bool (``-1`` or ``-2``, not ``not``)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.Invert)
        and _is_python_bool(node.operand)
    )


def test_the_bool_inversion_scan_finds_what_it_should():
    found = bool_inversions(
        "a = ~True\n"
        "b = ~(mask if mode else False)\n"
        "c = ~(not x)\n"
        "d = ~mask\n"  # a numpy mask: fine
        "e = ~(x == 1)\n"  # an array comparison: fine
    )
    assert found == [1, 2, 3]


def scan_tree(scan: Callable[[str], list[Any]]) -> dict[str, list[Any]]:
    """What ``scan`` finds in each Python file of the sources, by file."""
    return {
        str(path.relative_to(REPO)): found
        for folder in SOURCES
        for path in sorted((REPO / folder).rglob("*.py"))
        if (found := scan(path.read_text(encoding="utf-8")))
    }


def test_no_tilde_on_a_python_bool():
    # tests/integration/test_restart_random_kills.py had one: on 3.12 every run
    # of it raised the DeprecationWarning as an error
    found = scan_tree(bool_inversions)
    assert found == {}, f"`~` on a Python bool (use `not`, or a numpy mask): {found}"


# what the oldest supported Python (requires-python >= 3.10) lacks: names added in
# 3.11-3.13 to the modules below, and modules new in 3.11 (mypy, which checks the
# code as 3.10, finds the rest; CI runs the tests, not mypy)
NEWER_NAMES = {
    "typing": {
        "LiteralString", "Never", "NotRequired", "ReadOnly", "Required", "Self",
        "TypeAliasType", "TypeIs", "TypeVarTuple", "Unpack", "assert_never",
        "assert_type", "clear_overloads", "dataclass_transform", "get_overloads",
        "override", "reveal_type",
    },
    "enum": {"ReprEnum", "StrEnum", "EnumCheck", "global_enum", "verify"},
    "datetime": {"UTC"},
    "asyncio": {"Runner", "TaskGroup", "timeout"},
    "itertools": {"batched"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "operator": {"call"},
}  # fmt: skip
NEWER_MODULES = {"tomllib", "wsgiref.types"}


def _skipped_on_3_10(test: ast.expr) -> tuple[bool, bool]:
    """Whether an ``if``'s body, and its ``else``, never run on Python 3.10."""
    text = ast.unparse(test)
    if text in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
        return True, False
    if text.startswith("sys.version_info >= (3, 1") and text != (
        "sys.version_info >= (3, 10)"
    ):
        return True, False
    if text.startswith("sys.version_info < (3, 1") and text != (
        "sys.version_info < (3, 10)"
    ):
        return False, True
    return False, False


def newer_imports(source: str) -> list[tuple[int, str]]:
    """What the oldest Python lacks, where it would run there.

    Code under ``if TYPE_CHECKING:`` or ``if sys.version_info >= (3, 11):`` (the
    ``else`` of ``< (3, 11)``) never runs on 3.10; syntax newer than 3.10
    (``except*``, ``type`` statements) fails the parse.
    """
    tree = ast.parse(source, feature_version=(3, 10))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            body, orelse = _skipped_on_3_10(node.test)
            for part, skip in ((node.body, body), (node.orelse, orelse)):
                if skip:
                    skipped.update(id(n) for stmt in part for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module in NEWER_NAMES:
            newer = NEWER_NAMES[node.module]
            found += [
                (node.lineno, f"{node.module}.{alias.name}")
                for alias in node.names
                if alias.name in newer
            ]
        elif (  # typing.Self, enum.StrEnum, ... used through the module
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.attr in NEWER_NAMES.get(node.value.id, ())
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
            )
            found += [(node.lineno, name) for name in names if name in NEWER_MODULES]
    return sorted(found)


def test_the_newer_import_scan_finds_what_it_should():
    found = newer_imports(
        "from typing import Any, Self\n"
        "import tomllib\n"
        "if TYPE_CHECKING:\n"
        "    from typing import Self\n"
        "else:\n"
        "    from typing import Never\n"  # runs on 3.10
        "if sys.version_info >= (3, 11):\n"
        "    import tomllib\n"
        "if sys.version_info >= (3, 9):\n"
        "    from enum import StrEnum\n"  # runs on 3.10
        "if sys.version_info < (3, 11):\n"
        "    from typing_extensions import Self\n"
        "else:\n"
        "    from typing import Self\n"
        "stamp = datetime.UTC\n"
    )
    assert found == [
        (1, "typing.Self"),
        (2, "tomllib"),
        (6, "typing.Never"),
        (10, "enum.StrEnum"),
        (15, "datetime.UTC"),
    ]
    with pytest.raises(SyntaxError):  # 3.11 syntax: never runs on 3.10
        newer_imports("try:\n    pass\nexcept* ValueError:\n    pass\n")


def test_nothing_used_at_run_time_that_python_3_10_lacks():
    # vecpool.AsyncVectorEnv imported `typing.Self` (3.11+): on 3.10, which
    # requires-python admits, `import vecpool.vector` failed
    found = scan_tree(newer_imports)
    assert found == {}, f"not in Python 3.10 (guard it): {found}"


@pytest.mark.start_methods
def test_workers_start_with_the_default_start_method(make_async):
    # `nox -s forkserver` sets VECPOOL_START_METHOD: the workers of a vector env
    # built without `context` must then really start that way
    expected = os.environ.get("VECPOOL_START_METHOD") or None
    envs = make_async([CountingEnv] * 2, num_workers=1, parent_envs=0)
    started = {process._start_method for process in envs.processes}
    assert started == {expected or multiprocessing.get_start_method()}


def _classifier_versions() -> set[str]:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib: 3.10
    return set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text))


def test_the_classifiers_list_the_versions_the_readme_says_the_suite_ran_on():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Supported and tested", 1)[1].split("\n#", 1)[0]
    section = " ".join(section.split())  # one line: the sentence may wrap anywhere
    versions = r"((?:3\.\d+(?:, | and )?)+)"
    ci = re.search(rf"CI runs it on Python {versions}", section)
    also = re.search(rf"also passed on Python {versions}", section)
    assert ci is not None, "README.md: say which Pythons CI runs"
    assert also is not None, "README.md: say which other Pythons the suite passed on"
    ran = set(re.findall(r"3\.\d+", f"{ci.group(1)} {also.group(1)}"))
    assert ran == _classifier_versions()
    assert "forkserver" in section  # and which start methods
