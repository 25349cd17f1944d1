"""Command-line arguments shared by the sub-commands (argparse types and options)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "Handler",
    "Subparsers",
    "add_import_argument",
    "agent_ms",
    "num_workers_arg",
    "positive_int",
    "positive_seconds",
    "seed_arg",
]

Handler = Callable[[argparse.Namespace], int]
"""What a sub-command runs: parsed arguments -> exit status."""

Subparsers = argparse._SubParsersAction  # the type ``add_subparsers`` returns


def num_workers_arg(text: str) -> int:
    """Parse ``--num-workers``: an integer >= 0 (0 runs the envs in-process).

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer >= 0.
    """
    return _int_at_least(text, 0, "an integer >= 0 (0: envs in this process)")


def agent_ms(text: str) -> float:
    """Parse ``--agent``: milliseconds between 0 and 1000.

    Raises:
        argparse.ArgumentTypeError: Otherwise.
    """
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1000.0:
        msg = f"expected milliseconds between 0 and 1000, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive_int(text: str) -> int:
    """Parse a command-line integer that must be at least 1.

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer >= 1.
    """
    return _int_at_least(text, 1, "an integer >= 1")


def positive_seconds(text: str) -> float:
    """Parse a duration: a finite number of seconds above 0.

    Raises:
        argparse.ArgumentTypeError: Otherwise (``nan`` and ``inf`` included).
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        msg = f"expected a finite number of seconds > 0, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def seed_arg(text: str) -> int:
    """Parse ``--seed``: an integer >= 0 (what Gymnasium's seeding takes).

    Raises:
        argparse.ArgumentTypeError: Otherwise.
    """
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, low: int, expected: str) -> int:
    """``text`` as an integer >= ``low``, or argparse's error saying ``expected``."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        msg = f"expected {expected}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def add_import_argument(parser: argparse.ArgumentParser, target: str) -> None:
    """Add ``--import PKG`` (repeatable): packages that register envs on import.

    Args:
        parser: The sub-command's parser.
        target: How the command names its env id (``"ENV_ID"``, ``"TARGET"``).
    """
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="PKG",
        help="import PKG first: a package that registers its envs on import "
        f"(repeatable; 'PKG:EnvId-v0' as {target} does the same)",
    )
