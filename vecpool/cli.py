"""Command-line interface: ``python -m vecpool COMMAND`` (or the ``vecpool`` script)."""

# Printing results is this module's job, so the print rule is off for the whole file:
# ruff: noqa: T201

from __future__ import annotations

import argparse
import dataclasses
import functools
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from vecpool import bench
from vecpool._version import __version__
from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["build_parser", "main"]

DEMO_ENV_ID = "CartPole-v1"
DEMO_CHECK_STEPS = 20
"""How many leading steps the demo compares between vecpool and ``SyncVectorEnv``."""

Handler = Callable[[argparse.Namespace], int]


class _Trace(NamedTuple):
    """Everything one vector env returned on one step (or on reset)."""

    observations: npt.NDArray[Any]
    rewards: npt.NDArray[Any]
    terminations: npt.NDArray[Any]
    truncations: npt.NDArray[Any]


class _Run(NamedTuple):
    """Outcome of stepping one vector env through the demo's actions."""

    name: str
    seconds: float
    env_steps: int
    traces: list[_Trace]

    @property
    def env_steps_per_second(self) -> float:
        """Throughput in sub-environment steps per second."""
        return self.env_steps / self.seconds if self.seconds > 0 else float("inf")


def _workers(text: str) -> int:
    """Parse ``--num-workers``: an integer >= 0 (0 runs the envs in-process).

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer >= 0.
    """
    if text.strip() == "0":
        return 0
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        msg = f"expected an integer >= 0 (0: envs in this process), got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def _agent_ms(text: str) -> float:
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


def _positive_int(text: str) -> int:
    """Parse a command-line integer that must be at least 1.

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer >= 1.
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected an integer >= 1, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _run_vector_env(
    name: str,
    envs: gym.vector.VectorEnv[Any, Any, Any],
    actions: npt.NDArray[Any],
    seed: int,
    check_steps: int,
) -> _Run:
    """Reset ``envs`` with ``seed``, step it through ``actions`` and time the steps.

    The first ``check_steps`` results (after the reset's) are copied for comparison.
    The vector env is closed afterwards.
    """
    try:
        observations, _ = envs.reset(seed=seed)
        zeros = np.zeros(envs.num_envs)
        flags = np.zeros(envs.num_envs, dtype=np.bool_)
        traces = [_Trace(np.array(observations), zeros, flags, flags)]
        start = time.perf_counter()
        for step, action in enumerate(actions):
            observations, rewards, terminations, truncations, _ = envs.step(action)
            if step < check_steps:
                traces.append(
                    _Trace(
                        np.array(observations),
                        np.array(rewards),
                        np.array(terminations),
                        np.array(truncations),
                    )
                )
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    return _Run(name, seconds, actions.shape[0] * envs.num_envs, traces)


def _traces_equal(first: Sequence[_Trace], second: Sequence[_Trace]) -> bool:
    """Whether two runs returned bitwise-identical arrays at every compared step."""
    return len(first) == len(second) and all(
        np.array_equal(left, right)
        for first_trace, second_trace in zip(first, second, strict=True)
        for left, right in zip(first_trace, second_trace, strict=True)
    )


def _demo(args: argparse.Namespace) -> int:
    """Run the ``demo`` command: vecpool versus Gymnasium's vector envs on CartPole.

    Returns:
        0 if vecpool's results equal ``SyncVectorEnv``'s, else 1.
    """
    num_envs: int = args.num_envs
    steps: int = args.steps
    seed: int = args.seed
    check_steps = min(steps, DEMO_CHECK_STEPS)
    env_fns = [functools.partial(gym.make, DEMO_ENV_ID) for _ in range(num_envs)]

    # one pre-drawn action sequence, replayed through every vector env
    probe = gym.make(DEMO_ENV_ID)
    action_space = gym.vector.utils.batch_space(probe.action_space, num_envs)
    probe.close()
    action_space.seed(seed)
    actions = np.stack([action_space.sample() for _ in range(steps)])

    print(
        f"vecpool demo: {DEMO_ENV_ID}, {num_envs} envs x {steps} steps "
        f"= {num_envs * steps:,} env-steps, seed {seed}"
    )
    factories: list[tuple[str, Callable[[], gym.vector.VectorEnv[Any, Any, Any]]]] = [
        (
            "vecpool.AsyncVectorEnv",
            lambda: AsyncVectorEnv(
                env_fns, context=args.context, num_workers=args.num_workers
            ),
        ),
        (
            "gymnasium.vector.AsyncVectorEnv",
            lambda: gym.vector.AsyncVectorEnv(env_fns, context=args.context),
        ),
        ("gymnasium.vector.SyncVectorEnv", lambda: gym.vector.SyncVectorEnv(env_fns)),
    ]
    if args.num_workers is None:  # the in-process mode too, when it is not the first
        factories.insert(
            1,
            (
                "vecpool.AsyncVectorEnv(num_workers=0)",
                lambda: AsyncVectorEnv(env_fns, num_workers=0),
            ),
        )
    runs: list[_Run] = []
    for name, factory in factories:
        print(f"  running {name} ...", flush=True)
        runs.append(_run_vector_env(name, factory(), actions, seed, check_steps))

    ours, *others = runs
    print()
    print(f"{'vector env':<38}{'env-steps/s':>14}{'vecpool speed-up':>20}")
    print(f"{ours.name:<38}{ours.env_steps_per_second:>14,.0f}{'-':>20}")
    for run in others:
        ratio = ours.env_steps_per_second / run.env_steps_per_second
        print(f"{run.name:<38}{run.env_steps_per_second:>14,.0f}{ratio:>19.2f}x")
    fastest = max(runs, key=lambda run: run.env_steps_per_second)
    print(
        f"fastest here: {fastest.name} (one run, random actions, no policy; "
        "`vecpool bench tune --agent MS` measures your loop's way)"
    )
    print()

    identical = _traces_equal(ours.traces, runs[-1].traces)
    print(
        f"results identical: {'yes' if identical else 'no'} "
        f"(vecpool vs SyncVectorEnv: reset and first {check_steps} steps)"
    )
    return 0 if identical else 1


def _add_demo_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help=f"compare vecpool with Gymnasium's vector envs on {DEMO_ENV_ID}",
        description=(
            f"Step {DEMO_ENV_ID} with the same pre-drawn random actions through "
            "vecpool.AsyncVectorEnv, gymnasium.vector.AsyncVectorEnv and "
            "gymnasium.vector.SyncVectorEnv; print each one's env-steps per second "
            "and check that vecpool's results equal SyncVectorEnv's."
        ),
    )
    parser.add_argument(
        "--num-envs",
        type=_positive_int,
        default=8,
        help="sub-environments (default: %(default)s)",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=2000,
        help="vector steps per run (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="reset and action seed (default: %(default)s)",
    )
    parser.add_argument(
        "--num-workers",
        type=_workers,
        default=None,
        help="vecpool worker processes; 0 steps the envs in this process "
        "(default: vecpool's own choice)",
    )
    parser.add_argument(
        "--context",
        choices=multiprocessing.get_all_start_methods(),
        default=None,
        help="multiprocessing start method of both async envs (default: platform's)",
    )
    handler: Handler = _demo
    parser.set_defaults(handler=handler)


def _bench_settings(args: argparse.Namespace) -> bench.BenchSettings:
    """Build the benchmark settings from the ``bench`` command's arguments.

    Raises:
        ValueError: On an invalid combination (e.g. fewer than 3 rounds).
    """
    quick: bool = args.quick
    seconds: float | None = args.seconds
    memory: bool | None = args.memory
    return bench.BenchSettings(
        workloads=tuple(args.workloads),
        num_envs=tuple(args.num_envs),
        backends=tuple(args.backends),
        rounds=args.rounds,
        seed=args.seed,
        seconds=seconds
        if seconds is not None
        else (bench.QUICK_SECONDS if quick else bench.DEFAULT_SECONDS),
        steps=args.steps,
        warmup_seconds=(
            bench.QUICK_WARMUP_SECONDS if quick else bench.DEFAULT_WARMUP_SECONDS
        ),
        quick=quick,
        memory=(not quick) if memory is None else memory,
        agent_ms=args.agent,
    )


def _bench_tune(args: argparse.Namespace, settings: bench.BenchSettings) -> int:
    """Run ``bench --tune``: :func:`vecpool.bench.tune.autotune` per workload and size."""
    from vecpool.bench.tune import autotune

    machine = bench.machine_info()
    print("\n".join(machine.lines()))
    seconds = settings.seconds if args.seconds is not None or settings.quick else 0.5
    results = []
    for name in settings.workloads:
        workload = bench.resolve_workload(name)
        for num_envs in settings.num_envs:
            print()
            result = autotune(
                workload.env_fn,
                num_envs,
                seconds=seconds,
                rounds=settings.rounds,
                verbose=not args.quiet,
                seed=settings.seed,
                agent_ms=settings.agent_ms,
            )
            if args.quiet:
                print("\n".join(result.format_table()))
            results.append({"workload": workload.name, **result.to_dict()})
    if args.json is not None:
        bench.write_json(
            {
                "machine": dataclasses.asdict(machine),
                "settings": dataclasses.asdict(settings),
                "tune": results,
            },
            args.json,
        )
    return 0


def _bench_pool(args: argparse.Namespace) -> int:
    """Run ``bench --pool``: the replay pool's add/sample/wrapper/memory figures."""
    from vecpool.bench import pool as pool_bench

    machine = bench.machine_info()
    print("\n".join(machine.lines()))
    quick = bool(args.quick)
    rounds = max(bench.MIN_ROUNDS, args.rounds or bench.MIN_ROUNDS)
    seconds = args.seconds or (0.05 if quick else 0.5)
    report = pool_bench.run_pool_benchmark(
        seconds=seconds, rounds=rounds, seed=args.seed
    )
    print()
    print("\n".join(pool_bench.format_pool_report(report)))
    if args.json is not None:
        bench.write_json(
            {"machine": dataclasses.asdict(machine), "pool": report.to_dict()},
            args.json,
        )
        print(f"\nwrote {args.json}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    """Run the ``bench`` command.

    Returns:
        0 on success, 2 on invalid arguments or a missing optional dependency.
    """
    try:
        if args.tune and args.pool:
            msg = (
                "`tune` and `pool` are separate benchmarks: run `vecpool bench tune` "
                "and `vecpool bench pool` one after the other."
            )
            raise ValueError(msg)
        if args.plot is not None and (args.tune or args.pool):
            mode = "tune" if args.tune else "pool"
            msg = (
                f"--plot draws the backend comparison; `vecpool bench {mode}` makes "
                "no plot (use --json for its figures)."
            )
            raise ValueError(msg)
        settings = _bench_settings(args)
        for name in settings.workloads:
            bench.resolve_workload(name)
        if args.plot is not None:
            bench.require_matplotlib()
    except (ValueError, ImportError) as error:
        print(f"vecpool bench: error: {error}", file=sys.stderr)
        return 2
    if args.tune:
        return _bench_tune(args, settings)
    if args.pool:
        return _bench_pool(args)

    machine = bench.machine_info()
    print("\n".join(machine.lines()))

    def show(groups: list[bench.GroupResult]) -> None:
        print()
        print("\n".join(bench.format_group_table(groups)), flush=True)

    report = bench.run_benchmark(
        settings, progress=bench.Progress(enabled=not args.quiet), on_workload=show
    )
    if report.memory is not None:
        print()
        print("\n".join(bench.format_memory(report.memory)))
    if args.json is not None:
        bench.write_json(report.to_dict(), args.json)
        print(f"\nwrote {args.json}")
    if args.plot is not None:
        bench.write_plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _add_bench_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register the ``bench`` command."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark vecpool against Gymnasium's vector envs",
        usage="%(prog)s [tune | pool] [options]",
        description=(
            "`vecpool bench`: compare the backends. `vecpool bench tune`: run "
            "vecpool.autotune on each workload and size. `vecpool bench pool`: the "
            "replay pool's add/sample/wrapper/memory figures. "
            "Measure env-steps per second of each backend (a raw one-env loop, "
            "Gymnasium's SyncVectorEnv and AsyncVectorEnv, vecpool with default "
            "settings, vecpool async batches, and EnvPool if installed) on each "
            "workload and number of envs, with the same pre-drawn random actions. "
            "Rounds are interleaved; figures are medians, with their ratios to "
            "Gymnasium's AsyncVectorEnv and SyncVectorEnv and to the physical limit "
            "(the raw loop's figure times the available CPUs)."
        ),
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=list(bench.DEFAULT_WORKLOADS),
        metavar="WORKLOAD",
        help="cartpole, busy (a 200 us CPU-bound step), bigobs (84x84x4 uint8 "
        "observations), biginfo (a 1 MiB array in every info: the pipes), atari "
        "(ALE/Pong-v5 with AtariPreprocessing and 4 stacked frames; needs "
        "vecpool[bench]) or any registered Gymnasium env id "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--num-envs",
        nargs="+",
        type=_positive_int,
        default=list(bench.DEFAULT_NUM_ENVS),
        metavar="N",
        help="numbers of sub-environments (default: %(default)s)",
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=list(bench.BACKENDS),
        default=list(bench.BACKENDS),
        metavar="BACKEND",
        help="backends to run, from %(choices)s (default: all; envpool only where "
        "installed, on cartpole)",
    )
    parser.add_argument(
        "--rounds",
        type=_positive_int,
        default=bench.MIN_ROUNDS,
        help="interleaved rounds, at least 3 unless --quick (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="reset and action seed (default: 0)"
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--seconds",
        type=float,
        default=None,
        help=f"target seconds per backend run (default: {bench.DEFAULT_SECONDS}, "
        f"{bench.QUICK_SECONDS} with --quick; 0.5 with --tune)",
    )
    budget.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help="fixed vector steps per backend run instead of --seconds",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny run for tests and CI smoke checks (no memory measurement)",
    )
    parser.add_argument(
        "--memory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"measure the memory of {bench.MEMORY_NUM_ENVS} x "
        f"{bench.MEMORY_ENV_ID} (default: on, off with --quick)",
    )
    parser.add_argument(
        "--agent",
        type=_agent_ms,
        default=None,
        metavar="MS",
        help="agent in the loop: before every step, compute a numpy MLP policy on "
        "the observations, costing about MS milliseconds on n of them (BLAS "
        "threads, as torch uses); vecpool-batch runs it on each received batch. "
        "The raw loop stays the env alone (its own step cost)",
    )
    parser.add_argument(
        "--tune",
        action="store_true",
        help="run vecpool.autotune on each workload and num_envs instead of the "
        "comparison",
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="benchmark the replay pool instead: ReplayPool.add and sample "
        "throughput, the ReplayPoolWrapper's cost on vecpool's step, and memory "
        "(uses --rounds, --seconds (default 0.5), --seed and --json; no plot)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.add_argument(
        "--plot",
        metavar="PATH.png",
        help="plot env-steps/s against num_envs (needs vecpool[plot])",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr"
    )
    handler: Handler = _bench
    parser.set_defaults(handler=handler)


def _collect(args: argparse.Namespace) -> int:
    """Run the ``collect`` command.

    Returns:
        0 on success, 130 if interrupted by Ctrl-C (what was collected is saved),
        2 on invalid arguments, a policy that cannot be loaded or a missing
        optional dependency.
    """
    from vecpool.sampling import collect

    steps: int = args.steps
    pool_size: int | None = args.pool_size
    try:
        if args.plot is not None:
            bench.require_matplotlib()
        result = collect.collect(
            args.env_id,
            num_envs=args.num_envs,
            steps=steps,
            pool_size=steps if pool_size is None else pool_size,
            out=args.out,
            window_size=args.window_size,
            clearing_freq=args.clearing_freq,
            window_size_=args.window_size_,
            random_routing=args.random_routing,
            autoreset_mode=args.autoreset_mode,
            seed=args.seed,
            policy=args.policy,
            num_workers=args.num_workers,
            on_worker_crash=args.on_worker_crash,
            store_next_obs=args.store_next_obs,
            minari=args.minari,
            progress=not args.quiet,
            log=functools.partial(print, flush=True),
        )
    except (
        collect.CollectArgumentError,
        collect.CollectSaveError,
        ImportError,
    ) as error:
        print(f"vecpool collect: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before stepping began: nothing to save
        _ignore_ctrl_c()
        print("vecpool collect: interrupted before collecting", file=sys.stderr)
        return 130
    if result.interrupted:
        _ignore_ctrl_c()  # saved; what is left is printing and exiting with 130
    print("\n".join(result.summary_lines()))
    if args.plot is not None:
        collect.plot_collection(result, args.plot)
        print(f"wrote {args.plot}")
    return 130 if result.interrupted else 0


def _ignore_ctrl_c() -> None:
    """Let no later Ctrl-C turn a clean exit 130 into death by SIGINT.

    A Ctrl-C repeated in quick succession can reach Python only after the
    collection returned (CPython runs signal handlers in the main thread, between
    bytecodes); by then the collection is saved and the command is exiting.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _add_collect_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register the ``collect`` command."""
    from vecpool.sampling import collect

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
        help="a registered Gymnasium env id (default: %(default)s)",
    )
    parser.add_argument(
        "--num-envs",
        type=_positive_int,
        default=8,
        help="sub-environments, one sub-pool each (default: %(default)s)",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=100_000,
        help="total env steps, rounded up to whole vector steps (default: %(default)s)",
    )
    parser.add_argument(
        "--pool-size",
        type=_positive_int,
        default=None,
        help="total pool capacity, split evenly over the sub-pools (default: "
        "--steps, so nothing is dropped)",
    )
    parser.add_argument(
        "--window-size",
        type=_positive_int,
        default=None,
        help="on overflow keep a sub-pool's newest WINDOW_SIZE transitions "
        "(default: drop the oldest one)",
    )
    parser.add_argument(
        "--clearing-freq",
        type=_positive_int,
        default=None,
        help="every CLEARING_FREQ transitions a sub-pool receives, drop its "
        "--clearing-size oldest (set both or neither)",
    )
    parser.add_argument(
        "--clearing-size",
        "--window-size_",  # the original Pool's keyword, still accepted
        dest="window_size_",
        type=_positive_int,
        default=None,
        help="how many transitions --clearing-freq drops (the original Pool's "
        "window_size_)",
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
    parser.add_argument(
        "--policy",
        metavar="MODULE:CALLABLE",
        default=None,
        help="policy(observations) -> actions, called once per vector step "
        "(default: random actions)",
    )
    parser.add_argument(
        "--num-workers",
        type=_workers,
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
        "--plot",
        metavar="PATH.png",
        help="draw the episode returns and the sub-pool fill (needs vecpool[plot])",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr"
    )
    handler: Handler = _collect
    parser.set_defaults(handler=handler)


def _add_check_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register the ``check`` command (defined with the checker)."""
    from vecpool.check.command import add_check_parser

    add_check_parser(subparsers)


# Each entry adds one sub-command.
_COMMANDS: tuple[
    Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...
] = (_add_collect_parser, _add_demo_parser, _add_bench_parser, _add_check_parser)


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
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in _BENCH_MODES:
        argv = ["bench", f"--{argv[1]}", *argv[2:]]
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    return handler(args)


_BENCH_MODES = ("tune", "pool")
