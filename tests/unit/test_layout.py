"""The package's layers import only downward, with no cycle (docs/architecture.md).

An AST scan of every ``import`` in ``vecpool/``: at module level, inside functions
and under ``TYPE_CHECKING`` alike. Size is not checked: a module holds one concern,
whatever its length.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import vecpool

PACKAGE = Path(vecpool.__file__).resolve().parent  # installed, or the checkout
ROOT = PACKAGE.parent  # what module names are relative to
REPO = Path(__file__).resolve().parents[2]  # the checkout (docs/ is not installed)

# lowest first; a module may import its own layer and those below it
LAYERS: list[tuple[str, ...]] = [
    ("vecpool.errors", "vecpool._version"),
    ("vecpool._util",),
    ("vecpool._wire",),
    ("vecpool._worker",),
    ("vecpool._engine",),
    ("vecpool.vector",),
    ("vecpool.replay",),
    ("vecpool.sampling",),
    ("vecpool.bench", "vecpool.check", "vecpool.integrations"),
    ("vecpool.testing",),
    ("vecpool.cli", "vecpool.__main__"),
]
CHILD_SIDE = ("vecpool.errors", "vecpool._version", "vecpool._util", "vecpool._wire")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The module of the repository an imported dotted name lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, source: str | None = None) -> set[str]:
    """Every vecpool module ``module`` imports, wherever the import statement is."""
    path = MODULES[module]
    tree = ast.parse(source if source is not None else path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # `from package import submodule` imports the submodule; a name
            # defined in a module imports that module
            names = [
                f"{origin}.{alias.name}"
                if f"{origin}.{alias.name}" in MODULES
                else origin
                for alias in node.names
            ]
        for name in names:
            target = _resolve(name) if name.startswith("vecpool") else None
            if target is not None and target != module:
                found.add(target)
    return found


def layer_of(module: str) -> int:
    for level, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    msg = f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)"
    raise AssertionError(msg)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    # (the package's own __init__, its lazy public names, sits above every layer)
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        if module != "vecpool"
        for target in sorted(targets)
        if target == "vecpool" or layer_of(target) > layer_of(module)
    ]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        if module != "vecpool":
            layer_of(module)


def test_layers_import_only_downward():
    assert upward_imports(GRAPH) == []


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_the_scan_sees_imports_inside_functions_and_type_checking():
    # the checks above can fail: a lower module reaching up is caught wherever
    # its import statement hides
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from vecpool.vector.async_env import AsyncVectorEnv\n"
        "def late():\n"
        "    from vecpool.replay import pool\n"
    )
    targets = imports_of("vecpool._engine.group", source)
    assert {"vecpool.vector.async_env", "vecpool.replay.pool"} <= targets
    graph = {**GRAPH, "vecpool._engine.group": targets}
    assert "vecpool._engine.group -> vecpool.replay.pool" in upward_imports(graph)
    cyclic = {**GRAPH, "vecpool._util.spaces": {"vecpool._util.validation"}}
    cyclic["vecpool._util.validation"] = {"vecpool._util.spaces"}
    assert ["vecpool._util.spaces", "vecpool._util.validation"] in cycles(cyclic)


def _loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys; {statement}; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('vecpool')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def test_a_worker_process_loads_only_the_child_side():
    loaded = _loaded_after("import vecpool._worker.loop")
    assert "vecpool._worker.loop" in loaded  # the probe itself worked
    others = sorted(
        module
        for module in loaded - {"vecpool"}
        if not module.startswith(("vecpool._worker", *CHILD_SIDE))
    )
    assert others == []


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


def test_only_the_worker_group_waits_on_workers():
    # the one wait loop: no other parent-side module polls pipes or sentinels
    for path in sorted((PACKAGE / "_engine").glob("*.py")):
        if path.name == "group.py":
            continue
        source = path.read_text()
        # a handle may ask whether a reply is ready (`poll()`); only the group
        # builds poll sets and blocks on them
        assert not re.search(r"select\.poll|connection\.wait|poller\.", source), (
            path.name
        )
    vector = (PACKAGE / "vector" / "async_env.py").read_text()
    assert not re.search(r"\.poll\(|select\.|connection\.wait", vector)


def test_no_module_reaches_into_the_replay_pool():
    private = re.compile(r"\bpool\._[a-z]")
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "replay" / "pool.py":
            continue
        assert not private.search(path.read_text()), path.name


def test_sources_cite_only_files_in_the_repository():
    cited = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:md|py|toml))\b")
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in cited.findall(path.read_text()):
            if "/" not in name and not name.endswith(".md"):
                continue  # a bare module file name, e.g. in a comment
            bases = (REPO, REPO / "vecpool", PACKAGE, path.parent)
            if not any((base / name).exists() for base in bases):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []
