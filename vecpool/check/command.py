"""The ``vecpool check`` command: run :func:`check_vector_env` from the shell."""

# Printing the report is this module's job.
# ruff: noqa: T201

from __future__ import annotations

import argparse
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

from vecpool._util.arguments import Subparsers, add_import_argument
from vecpool._util.loading import import_modules, load_callable, resolve_env_id
from vecpool.check.report import CHECKS, resolve_skip
from vecpool.check.runner import DEFAULT_NUM_STEPS, check_vector_env
from vecpool.vector.make import make_vec

__all__ = ["add_check_parser"]

DEFAULT_TARGET = "CartPole-v1"
BACKENDS = ("vecpool", "async", "sync")
_FACTORY = re.compile(r"^[\w.]+:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
"""``module:callable`` (an env id such as ``ale_py:ALE/Pong-v5`` has ``/`` or ``-``)."""


def add_check_parser(
    subparsers: Subparsers[argparse.ArgumentParser],
) -> None:
    """Register the ``check`` command."""
    parser = subparsers.add_parser(
        "check",
        help="check that a vector env follows Gymnasium's vector API exactly",
        description=(
            "Run vecpool.check_vector_env on TARGET: a factory MODULE:CALLABLE that "
            "returns a vector env (called more than once), or an env id as "
            "gymnasium.make takes it (EnvId-v0, or PKG:EnvId-v0 to import PKG "
            "first), built with --backend. The env is stepped in lockstep with a "
            "SyncVectorEnv reference over the same env fns. Exit status: 0 if every "
            "check passed, 1 if one failed, 2 for a usage error."
        ),
    )
    parser.add_argument(
        "target",
        nargs="?",
        default=DEFAULT_TARGET,
        metavar="TARGET",
        help="MODULE:CALLABLE returning a vector env, or an env id (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--num-envs",
        type=int,
        default=8,
        help="for an env id: sub-environments (default: %(default)s)",
    )
    parser.add_argument(
        "--autoreset-mode",
        default="next_step",
        choices=("next_step", "same_step", "disabled"),
        help="for an env id: the autoreset mode (default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="vecpool",
        help="for an env id: vecpool.AsyncVectorEnv, gymnasium's AsyncVectorEnv or "
        "SyncVectorEnv (default: %(default)s)",
    )
    parser.add_argument(
        "--shared-memory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="for an env id with an async backend: the shared_memory argument "
        '(default: the backend\'s: "auto" for vecpool, True for gym-async)',
    )
    parser.add_argument(
        "--reference",
        metavar="MODULE:CALLABLE",
        default=None,
        help="builds the reference vector env (default: SyncVectorEnv over the env's "
        "env_fns)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_NUM_STEPS,
        help="steps of the main trajectory (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds resets and actions (default: %(default)s)",
    )
    add_import_argument(parser, "TARGET")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="CHECK",
        help="a check or group not to run (repeatable; see --list)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="breaches SyncVectorEnv commits too are failures, not warnings",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the checks and what each asserts, then exit",
    )
    handler: Callable[[argparse.Namespace], int] = _run
    parser.set_defaults(handler=handler)


def _run(args: argparse.Namespace) -> int:
    if args.list:
        width = max(map(len, CHECKS))
        for name, meaning in CHECKS.items():
            print(f"{name:<{width}}  {meaning}")
        return 0
    try:
        import_modules(args.imports, option="--import")
        skip = resolve_skip(args.skip)
        make_env = _factory(args)
        reference = None
        if args.reference is not None:
            reference = _load(args.reference, "reference factory", "--reference")
        if args.steps < 12:
            msg = f"--steps must be at least 12, got {args.steps}."
            raise ValueError(msg)
    except (ValueError, TypeError) as error:
        print(f"vecpool check: error: {error}", file=sys.stderr)
        return 2
    try:
        report = check_vector_env(
            make_env,
            reference=reference,
            num_steps=args.steps,
            seed=args.seed,
            skip=skip,
            strict=args.strict,
        )
    except (TypeError, ValueError) as error:  # an argument, or no vector env built
        print(f"vecpool check: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the factory's own, first call (runner.py)
        traceback.print_exc()
        print(
            f"vecpool check: error: the factory raised {type(error).__name__}: "
            f"{error} (no vector env to check)",
            file=sys.stderr,
        )
        return 2
    print(report.to_json() if args.json else report)
    return 0 if report.ok else 1


def _load(spec: str, what: str, option: str) -> Callable[..., Any]:
    return load_callable(spec, what=what, option=option)


def _factory(args: argparse.Namespace) -> Callable[[], Any]:
    """The vector env factory TARGET names.

    Raises:
        ValueError: If TARGET or an option is invalid.
    """
    if _FACTORY.match(args.target):
        given = [
            option
            for option, value, default in (
                ("--num-envs", args.num_envs, 8),
                ("--autoreset-mode", args.autoreset_mode, "next_step"),
                ("--backend", args.backend, "vecpool"),
                ("--[no-]shared-memory", args.shared_memory, None),
            )
            if value != default
        ]
        if given:
            print(
                f"vecpool check: note: {', '.join(given)} apply to env ids only; "
                f"{args.target} builds its own env",
                file=sys.stderr,
            )
        return _load(args.target, "vector env factory", "TARGET")
    if args.num_envs < 1:
        msg = f"--num-envs must be at least 1, got {args.num_envs}."
        raise ValueError(msg)
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    mode = AutoresetMode[args.autoreset_mode.upper()]
    resolve_env_id(args.target, what="TARGET")  # "module:EnvId-v0" imports module
    target, num_envs, backend = args.target, args.num_envs, args.backend
    vector_kwargs: dict[str, Any] = {"autoreset_mode": mode}
    if backend != "sync" and args.shared_memory is not None:
        vector_kwargs["shared_memory"] = args.shared_memory
    if backend == "vecpool":
        return lambda: make_vec(target, num_envs, vector_kwargs=vector_kwargs)
    return lambda: gym.make_vec(
        target, num_envs, vectorization_mode=backend, vector_kwargs=vector_kwargs
    )
