"""``vecpool collect``: the main job's command line (see docs/collecting.md)."""

# Printing results is this module's job, so the print rule is off for the whole file:
# ruff: noqa: T201

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Any

from vecpool._util.arguments import (
    Handler,
    Subparsers,
    add_import_argument,
    num_workers_arg,
    positive_int,
)
from vecpool._util.files import check_output_file
from vecpool._util.loading import import_modules, resolve_env_id
from vecpool._util.validation import require_matplotlib
from vecpool.sampling import collect

__all__ = ["add_collect_parser"]


def _collect(args: argparse.Namespace) -> int:
    """Run the ``collect`` command.

    Returns:
        0 on success, 130 if interrupted by Ctrl-C (what was collected is saved),
        2 on invalid arguments, a policy that cannot be loaded or a missing
        optional dependency, 1 when the env or the policy raised (what was
        collected is saved; the traceback is printed).
    """
    steps: int = args.steps
    pool_size: int | None = args.pool_size
    quiet = _QuietOnceStarted()
    try:
        if (args.clearing_freq is None) != (args.clearing_size is None):
            given, missing = (
                ("--clearing-freq", "--clearing-size")
                if args.clearing_size is None
                else ("--clearing-size", "--clearing-freq")
            )
            msg = (
                f"{given} needs {missing} too: `--clearing-freq F --clearing-size N` "
                "drops a sub-pool's N oldest transitions every F it receives (set "
                "both or neither)."
            )
            raise collect.CollectArgumentError(msg)
        if args.plot is not None:
            require_matplotlib()
            check_output_file(args.plot, "--plot", error=collect.CollectArgumentError)
        import_modules(
            args.imports, option="--import", error=collect.CollectArgumentError
        )
        resolve_env_id(args.env_id, what="ENV_ID", error=collect.CollectArgumentError)
        result = collect.collect(
            args.env_id,
            num_envs=args.num_envs,
            steps=steps,
            pool_size=pool_size,
            out=args.out,
            window_size=args.window_size,
            clearing_freq=args.clearing_freq,
            clearing_size=args.clearing_size,
            random_routing=args.random_routing,
            autoreset_mode=args.autoreset_mode,
            seed=args.seed,
            policy=args.policy,
            num_workers=args.num_workers,
            on_worker_crash=args.on_worker_crash,
            store_next_obs=args.store_next_obs,
            minari=args.minari,
            overlap=args.overlap,
            resume=args.resume,
            progress=not args.quiet,
            log=quiet.log,
        )
    except (collect.CollectArgumentError, collect.CollectSaveError) as error:
        quiet.restore()
        print(f"vecpool collect: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout's reader gone, or not: `vecpool.cli` tells
        raise
    except BaseException as error:
        if collect.stopped_collection(error):  # the env's or the policy's: saved
            return _stopped_by(error, quiet)
        if isinstance(error, KeyboardInterrupt):  # before stepping: nothing to save
            _ignore_ctrl_c()
            print("vecpool collect: interrupted before collecting", file=sys.stderr)
            return 130
        if isinstance(error, ImportError):  # a missing optional dependency
            quiet.restore()
            print(f"vecpool collect: error: {error}", file=sys.stderr)
            return 2
        raise
    if result.interrupted:
        _ignore_ctrl_c()  # saved; what is left is printing and exiting with 130
    else:
        quiet.restore()
    if args.plot is not None:  # written before anything is printed, which may fail
        collect.plot_collection(result, args.plot)
    print("\n".join(result.summary_lines()))
    if args.plot is not None:
        print(f"wrote {args.plot}")
    return 130 if result.interrupted else 0


def _stopped_by(error: BaseException, quiet: _QuietOnceStarted) -> int:
    """Show an error of the env or the policy that stopped ``collect``; exit 1.

    ``collect`` saved what it had and noted so on the error: the traceback shows
    the note on Python 3.11+, and on 3.10 (whose traceback prints no notes) the
    notes are printed after it.
    """
    quiet.restore()
    traceback.print_exception(type(error), error, error.__traceback__)
    if sys.version_info < (3, 11):
        for note in getattr(error, "__notes__", ()):
            print(note, file=sys.stderr)
    print(
        f"vecpool collect: stopped by {type(error).__name__}: {error}", file=sys.stderr
    )
    return 1


class _QuietOnceStarted:
    """SIGINT's handler around ``collect``: Python's, until collecting starts.

    ``collect`` stops on a Ctrl-C itself while it collects, saves, and then puts
    back the handler it found: this one. A Ctrl-C repeated in quick succession can
    reach Python just after that (CPython runs a handler between bytecodes, with
    the handler installed then), in ``collect``'s return or in a finalizer run
    there, where Python's handler would print a traceback. Once the "collecting"
    line is logged, this handler ignores it: what is left is returning, printing
    and exiting. Installed only over Python's own handler, in the main thread.
    """

    def __init__(self) -> None:
        self.started = False
        self.previous: Any = None
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self.previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.started:
            signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt

    def log(self, line: str) -> None:
        """Print one of ``collect``'s lines (its first: collecting has started)."""
        self.started = True
        print(line, flush=True)

    def restore(self) -> None:
        """Put back the handler found (a collection that was not interrupted)."""
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def _ignore_ctrl_c() -> None:
    """Let no later Ctrl-C turn a clean exit 130 into death by SIGINT.

    A Ctrl-C repeated in quick succession can reach Python only after the
    collection returned (CPython runs signal handlers in the main thread, between
    bytecodes); by then the collection is saved and the command is exiting.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def add_collect_parser(
    subparsers: Subparsers[argparse.ArgumentParser],
) -> None:
    """Register the ``collect`` command."""
    parser = subparsers.add_parser(
        "collect",
        help="step an env with a policy and save every transition to a replay pool",
        description=(
            "Step NUM_ENVS copies of ENV_ID in vecpool worker processes with random "
            "actions (or --policy), record every real transition in a "
            "vecpool.ReplayPool, and save it with ReplayPool.save (load it with "
            "vecpool.ReplayPool.load). --steps counts env steps, rounded up to whole "
            "vector steps of NUM_ENVS env steps. Ctrl-C stops cleanly: the workers "
            "are closed, what was collected is saved and the exit code is 130."
        ),
    )
    parser.add_argument(
        "env_id",
        nargs="?",
        default=collect.DEFAULT_ENV_ID,
        metavar="ENV_ID",
        help="an env id as gymnasium.make takes it: EnvId-v0, or PKG:EnvId-v0 to "
        "import PKG first (default: %(default)s)",
    )
    parser.add_argument(
        "--num-envs",
        type=positive_int,
        default=8,
        help="sub-environments, one sub-pool each (default: %(default)s)",
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=100_000,
        help="total env steps, rounded up to whole vector steps (default: %(default)s)",
    )
    parser.add_argument(
        "--pool-size",
        type=positive_int,
        default=None,
        help="total pool capacity, split evenly over the sub-pools (default: "
        "--steps, so nothing is dropped)",
    )
    parser.add_argument(
        "--window-size",
        type=positive_int,
        default=None,
        help="on overflow keep a sub-pool's newest WINDOW_SIZE transitions "
        "(default: drop the oldest one)",
    )
    parser.add_argument(
        "--clearing-freq",
        metavar="F",
        type=positive_int,
        default=None,
        help="every F transitions a sub-pool receives, drop its N oldest "
        "(--clearing-size N; set both or neither)",
    )
    parser.add_argument(
        "--clearing-size",
        "--window-size_",  # the original Pool's keyword, still accepted
        metavar="N",
        dest="clearing_size",
        type=positive_int,
        default=None,
        help="how many transitions --clearing-freq drops (--window-size_, after the "
        "original Pool's window_size_, is its old spelling)",
    )
    parser.add_argument(
        "--minari",
        metavar="DATASET_ID",
        default=None,
        help="also write the complete episodes as this Minari dataset, e.g. "
        "cartpole/random-v0 (needs vecpool[minari]; partial episodes are left out "
        "and counted)",
    )
    parser.add_argument(
        "--random-routing",
        action="store_true",
        help="route each transition to sub-pool j with probability ~ 1/(len_j + 1) "
        "instead of its env's sub-pool",
    )
    parser.add_argument(
        "--autoreset-mode",
        default="next_step",
        metavar="{next_step,same_step,disabled}",
        help="the vector env's autoreset mode; disabled resets ended envs with "
        "reset_mask (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seeds the resets, random actions and pool (default: unseeded)",
    )
    add_import_argument(parser, "ENV_ID")
    parser.add_argument(
        "--policy",
        metavar="MODULE:CALLABLE",
        default=None,
        help="policy(observations) -> actions, called once per vector step with "
        "every env's observations (with --overlap: once per batch; default: random "
        "actions)",
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="run the policy on batches of N // 2 envs while the others step; --steps "
        "is rounded up to whole chunks of 64 vector steps (pays when each policy call "
        "waits, e.g. on a GPU, about as long as a batch takes to step; "
        "docs/collecting.md)",
    )
    parser.add_argument(
        "--num-workers",
        type=num_workers_arg,
        default=None,
        help="worker processes; 0 steps the envs in this process "
        "(default: vecpool's own choice)",
    )
    parser.add_argument(
        "--on-worker-crash",
        choices=("raise", "restart"),
        default="raise",
        help="restart: replace a worker that dies and go on (its cut episodes are "
        "not recorded); raise (default): stop with the error",
    )
    parser.add_argument(
        "--store-next-obs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="store next_obs apart (--no-store-next-obs derives it from the next "
        "row, halving memory for image observations)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        default="pool.npz",
        help="where to save the pool, written atomically (default: %(default)s)",
    )
    parser.add_argument(
        "--resume",
        metavar="FILE",
        default=None,
        help="go on recording into the pool saved in FILE (an earlier --out; "
        "--out may name it again): it keeps its own settings, so no pool option "
        "may be given, and needs --num-envs equal to its sub-pools",
    )
    parser.add_argument(
        "--plot",
        metavar="PATH.png",
        help="draw the episode returns and the sub-pool fill (needs vecpool[plot])",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr"
    )
    handler: Handler = _collect
    parser.set_defaults(handler=handler)
