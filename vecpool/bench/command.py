"""``vecpool bench`` (also ``bench tune``, ``bench pool``): the command line."""

# Printing results is this module's job, so the print rule is off for the whole file:
# ruff: noqa: T201

from __future__ import annotations

import argparse
import dataclasses
import sys

from vecpool import bench
from vecpool._util.arguments import (
    Handler,
    Subparsers,
    agent_ms,
    positive_int,
    positive_seconds,
    seed_arg,
)
from vecpool._util.files import check_output_file
from vecpool.bench import main_job, pool_peers
from vecpool.bench import pool as pool_bench
from vecpool.bench.tune import autotune

__all__ = ["BENCH_MODES", "add_bench_parser"]

BENCH_MODES = ("tune", "pool")
"""``vecpool bench MODE``: the other benchmarks, spelled as sub-commands."""
QUICK_MAIN_JOB_STEPS = 2_000
"""Env steps of each ``bench pool --quick --main-job`` run."""


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
        agent_latency_ms=args.agent_latency,
    )


def _bench_tune(args: argparse.Namespace, settings: bench.BenchSettings) -> int:
    """Run ``bench tune``: :func:`~vecpool.bench.tune.autotune` per workload, size."""
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
    """Run ``bench pool``: add/sample/wrapper/memory, peers and the main job."""
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
    installed, skipped = pool_peers.installed_peers()
    # default: the comparison where a peer is installed, except for --quick
    peers = (bool(installed) and not quick) if args.peers is None else args.peers
    data = {"machine": dataclasses.asdict(machine), "pool": report.to_dict()}
    if peers:
        progress = bench.Progress(enabled=not args.quiet)
        comparison = pool_peers.run_peer_benchmark(
            seconds=seconds,
            rounds=rounds,
            seed=args.seed,
            sizes=pool_peers.QUICK_SIZES if quick else pool_peers.FULL_SIZES,
            progress=progress.update,
        )
        progress.clear()
        print()
        print("\n".join(pool_peers.format_peer_report(comparison)))
        data["peers"] = comparison.to_dict()
    elif args.peers is None and not installed:
        print(f"\nno replay-buffer peer to compare with: {'; '.join(skipped)}")
    if not quick if args.main_job is None else args.main_job:
        progress = bench.Progress(enabled=not args.quiet)
        jobs = main_job.run_main_job_benchmark(
            rounds=rounds,
            env_steps=QUICK_MAIN_JOB_STEPS if quick else main_job.ENV_STEPS,
            seed=args.seed,
            progress=progress.update,
        )
        progress.clear()
        print()
        print("\n".join(main_job.format_main_job_report(jobs)))
        data["main_job"] = jobs.to_dict()
    if args.json is not None:
        bench.write_json(data, args.json)
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
        if args.peers is not None and not args.pool:
            msg = "--peers/--no-peers belong to `vecpool bench pool`."
            raise ValueError(msg)
        if args.main_job is not None and not args.pool:
            msg = "--main-job/--no-main-job belong to `vecpool bench pool`."
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
        for flag, target in (("--json", args.json), ("--plot", args.plot)):
            if target is not None:  # written at the end: checked before measuring
                check_output_file(target, flag)
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


def add_bench_parser(
    subparsers: Subparsers[argparse.ArgumentParser],
) -> None:
    """Register the ``bench`` command."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark vecpool against Gymnasium's vector envs",
        usage="%(prog)s [tune | pool] [options]",
        description=(
            "`vecpool bench`: compare the backends. `vecpool bench tune`: run "
            "vecpool.autotune on each workload and size. `vecpool bench pool`: the "
            "replay pool's add/sample/wrapper/memory figures, its peers and the main "
            "job. "
            "Measure env-steps per second of each backend (a raw one-env loop, "
            "Gymnasium's SyncVectorEnv and AsyncVectorEnv, vecpool with default "
            "settings, vecpool async batches, and the anchors EnvPool and PufferLib "
            "if installed) on each "
            "workload and number of envs, with the same pre-drawn random actions. "
            "Rounds are interleaved, each in a new seeded order; figures are "
            "medians, with their ratios to "
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
        "observations), infos (CartPole with ALE's lives and frame numbers in "
        "every info), biginfo (a 1 MiB array in every info), mission and "
        "mission-array (a MiniGrid-like Dict with a mission string, or its "
        "codes), atari "
        "(ALE/Pong-v5 with AtariPreprocessing and 4 stacked frames; needs "
        "vecpool[bench]), halfcheetah (HalfCheetah-v5) and mujoco (Hopper-v5; "
        "both need vecpool[mujoco]) or any registered Gymnasium env id "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--num-envs",
        nargs="+",
        type=positive_int,
        default=list(bench.DEFAULT_NUM_ENVS),
        metavar="N",
        help="numbers of sub-environments (default: %(default)s)",
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=list(bench.BACKENDS),
        default=[name for name, b in bench.BACKENDS.items() if b.by_default],
        metavar="BACKEND",
        help="backends to run, from %(choices)s (default: all but the -pt ones, "
        'which set policy_threads="auto", and pufferlib-1w/-2w; the anchors, '
        "envpool (its C++ CartPole and Pong, a thread per CPU) and "
        "pufferlib-model/-cores (as many workers as vecpool's default, one per "
        "physical core), only where installed)",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=bench.MIN_ROUNDS,
        help="interleaved rounds, at least 3 unless --quick (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=seed_arg, default=0, help="reset and action seed (default: 0)"
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--seconds",
        type=positive_seconds,
        default=None,
        help=f"target seconds per backend run (default: {bench.DEFAULT_SECONDS}, "
        f"{bench.QUICK_SECONDS} with --quick; 0.5 with `tune`)",
    )
    budget.add_argument(
        "--steps",
        type=positive_int,
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
        type=agent_ms,
        default=None,
        metavar="MS",
        help="agent in the loop: before every step, compute a numpy MLP policy on "
        "the observations, costing about MS milliseconds on n of them (BLAS "
        "threads, as torch uses); vecpool-batch runs it on each received batch. "
        "The raw loop stays the env alone (its own step cost)",
    )
    parser.add_argument(
        "--agent-latency",
        type=agent_ms,
        default=None,
        metavar="MS",
        help="a GPU-like agent in the loop instead: before every step (every "
        "received batch with vecpool-batch) the parent waits MS milliseconds "
        "without using the CPU, whatever the batch size",
    )
    # `vecpool bench tune` / `vecpool bench pool` (the one documented form) arrive
    # as these flags (vecpool/cli.py): hidden, so --help shows one way
    parser.add_argument("--tune", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pool", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="`bench pool` only: also measure the replay buffers of "
        "Stable-Baselines3, cpprb, Tianshou and TorchRL beside vecpool's "
        "ReplayPool, each at its defaults in a fresh process; a peer not "
        "installed is skipped with a note (default: on where any is installed, "
        "off with --quick)",
    )
    parser.add_argument(
        "--main-job",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="`bench pool` only: also time the replay pool in the main job (8 x "
        "CartPole-v1, 100,000 env steps, each loop in a fresh process): vecpool and "
        "Gymnasium's SyncVectorEnv alone, Sync with a hand-filled SB3 ReplayBuffer "
        "(where installed), Sync and `vecpool collect` with the ReplayPoolWrapper, "
        "each recording loop with save() at the end and with a sample() every "
        "vector step (default: on, off with --quick)",
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
