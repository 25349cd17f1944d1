"""Command-line interface: ``python -m vecpool COMMAND`` (or the ``vecpool`` script).

It only dispatches: each sub-command's parser and runner live with its feature
(``vecpool/sampling/command.py``, ``vecpool/bench/demo.py``,
``vecpool/bench/command.py``, ``vecpool/check/command.py``).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import warnings
from collections.abc import Callable

from vecpool._util.arguments import Handler, Subparsers
from vecpool._version import __version__
from vecpool.bench.command import BENCH_MODES, add_bench_parser
from vecpool.bench.demo import add_demo_parser
from vecpool.check.command import add_check_parser
from vecpool.errors import VecPoolPerformanceWarning
from vecpool.sampling.command import add_collect_parser

__all__ = ["build_parser", "main"]

# Each entry adds one sub-command.
_COMMANDS: tuple[Callable[[Subparsers[argparse.ArgumentParser]], None], ...] = (
    add_collect_parser,
    add_demo_parser,
    add_bench_parser,
    add_check_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """Build the ``vecpool`` argument parser with one sub-parser per command.

    Returns:
        The top-level parser; parsed arguments carry the command's ``handler``.
    """
    parser = argparse.ArgumentParser(
        prog="vecpool",
        description="vecpool: a fast, faithful drop-in for "
        "gymnasium.vector.AsyncVectorEnv.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    subparsers = parser.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND"
    )
    for add_command in _COMMANDS:
        add_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        The process exit code.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # `vecpool bench tune` / `vecpool bench pool`: the two other benchmarks, spelled
    # as subcommands (the flags --tune and --pool still work)
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in BENCH_MODES:
        argv = ["bench", f"--{argv[1]}", *argv[2:]]
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    with warnings.catch_warnings():
        if argv and argv[0] != "collect":
            # bench, demo and check measure or check settings themselves: the
            # advice on the parent's threads is for training loops (and `collect
            # --policy`, which decides itself)
            warnings.filterwarnings("ignore", category=VecPoolPerformanceWarning)
        try:
            return handler(args)
        except BrokenPipeError:
            if not _reader_gone():  # another pipe broke (an env's, a policy's)
                raise
            # `vecpool collect ... | head -1`: its reader stopped, so do we, quietly.
            # Python flushes stdout again at exit: point it at nothing first
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 141  # 128 + SIGPIPE, as a shell reports a command cut off


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reading end is closed.

    The write end of such a pipe polls as an error (``POLLERR``); any other stdout
    (a file, a terminal, a ``StringIO``, a platform without ``poll``) is not.
    """
    poll = getattr(select, "poll", None)
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation
        return False
    if poll is None:
        return False
    poller = poll()
    poller.register(fd, select.POLLOUT)
    return any(event & select.POLLERR for _, event in poller.poll(0))
