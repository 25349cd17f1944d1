"""Issue 37's counts: vecpool calls and instructions per vector step, and code lines.

* ``calls``: Python function calls into vecpool's own files per vector step
  (``sys.setprofile`` ``call`` events whose code lies in the package), over 200
  steps of 8 CartPole envs with empty infos, after 50 steps of warm-up, for every
  env in one worker and for the parent stepping half. The functions called are
  listed with their calls per step. Then the bytecode instructions the parent
  executes in the package per vector step (``sys.settrace`` ``opcode`` events),
  by function: the work of the step path's layers, which a call count misses
  (``host.py:step`` is the parent's share of env steps, the same work a worker
  does for its own).
* ``lines``: code lines of the engine (``vecpool/_engine``, ``_wire``,
  ``_worker``, ``vector``, ``_util``): lines holding a token of code, so neither
  blank lines, comments nor docstrings (those of modules, classes and functions)
  count, per module and in all.

Usage::

    python tests/benchmarks/engine_measures.py calls
    python tests/benchmarks/engine_measures.py lines [--per-module]

Not collected by pytest (no ``test_`` prefix); no figure here is a pass/fail gate.
"""

# A command-line script: what it prints is its result.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import ast
import collections
import io
import sys
import tokenize
from pathlib import Path
from types import FrameType
from typing import Any

import gymnasium as gym
import numpy as np

import vecpool

PACKAGE = Path(vecpool.__file__).parent
ENGINE = ("_engine", "_wire", "_worker", "vector", "_util")
SKIPPED_TOKENS = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """Lines holding a code token, docstrings not counted."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(
            node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
                and first.end_lineno is not None
            ):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in SKIPPED_TOKENS:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def count_lines(per_module: bool) -> None:
    """Print the engine's code lines, by package (and module)."""
    total = 0
    for package in ENGINE:
        subtotal = 0
        for path in sorted((PACKAGE / package).glob("*.py")):
            count = code_lines(path.read_text(encoding="utf-8"))
            subtotal += count
            if per_module:
                print(f"  {count:6,} {package}/{path.name}")
        print(f"{subtotal:6,} {package}")
        total += subtotal
    print(f"{total:6,} engine code lines")


def _per_step(envs: Any, steps: int, what: str) -> collections.Counter[str]:
    """``what`` (``"calls"`` or ``"instructions"``) in vecpool's files over ``steps``.

    Calls are ``sys.setprofile`` call events, instructions ``sys.settrace`` opcode
    events, both counted by function, in code that lies in the package.
    """
    actions = np.zeros(envs.num_envs, dtype=np.int64)
    counted: collections.Counter[str] = collections.Counter()
    root = str(PACKAGE)

    def count(frame: FrameType) -> None:
        code = frame.f_code
        counted[f"{Path(code.co_filename).relative_to(PACKAGE)}:{code.co_name}"] += 1

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            count(frame)

    def local(frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "opcode":
            count(frame)
        return local

    def trace(frame: FrameType, _event: str, _arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(root):
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return local

    install, hook = (
        (sys.setprofile, profile) if what == "calls" else (sys.settrace, trace)
    )
    install(hook)
    try:
        for _ in range(steps):
            envs.step(actions)
    finally:
        install(None)
    return counted


def count_calls(steps: int = 200) -> None:
    """Print vecpool's calls per vector step, every env in a worker, then half."""
    for placement in ({"num_workers": 1, "parent_envs": 0}, {"parent_envs": 4}):
        envs = vecpool.AsyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(8)],
            **placement,  # type: ignore[arg-type]
        )
        try:
            envs.reset(seed=0)
            _per_step(envs, 50, "calls")  # warm-up: the spin policy's first samples
            calls = _per_step(envs, steps, "calls")
            print(f"{envs!r}: {sum(calls.values()) / steps:.2f} calls per vector step")
            for name, count in calls.most_common():
                print(f"  {count / steps:6.2f} {name}")
            executed = _per_step(envs, steps, "instructions")
            total = sum(executed.values()) / steps
            print(f"{total:.0f} instructions per vector step in the parent")
            for name, count in executed.most_common():
                print(f"  {count / steps:7.1f} {name}")
        finally:
            envs.close()


def main() -> None:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("calls", help="vecpool calls and instructions per vector step")
    lines = sub.add_parser("lines", help="the engine's code lines")
    lines.add_argument("--per-module", action="store_true")
    args = parser.parse_args()
    if args.what == "calls":
        count_calls()
    else:
        count_lines(args.per_module)


if __name__ == "__main__":
    main()
