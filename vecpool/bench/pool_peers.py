"""vecpool's ``ReplayPool`` beside other libraries' replay buffers (``bench pool``).

The libraries, each at its defaults and fed 8 envs the way its docs show for vector
envs:

* ``vecpool``: :class:`~vecpool.replay.pool.ReplayPool`, one ``add`` per vector step;
* ``sb3``: Stable-Baselines3's ``ReplayBuffer(n_envs=8)``, one ``add`` per step;
* ``cpprb``: cpprb's ``ReplayBuffer``, ``add(**kwargs)`` of 8 rows;
* ``tianshou``: Tianshou's ``VectorReplayBuffer(total, 8)``,
  ``add(Batch, buffer_ids=range(8))``;
* ``torchrl``: TorchRL's ``ReplayBuffer(storage=LazyTensorStorage(total))``,
  ``extend`` of an 8-row ``TensorDict``.

The work, with pre-drawn random data cycled (8 envs, one transition each per vector
step):

* ``cartpole``: ``(4,)`` float32 observations, ``Discrete(2)`` actions, float
  rewards, bool ``terminated``/``truncated``; capacity 400,000. Microseconds per
  vector step added, and per ``sample(256)``.
* ``atari``: ``(4, 84, 84)`` uint8 observations, 4-frame stacks built like
  Gymnasium's ``FrameStackObservation`` (from per-env frame sequences: each step's
  stack shifts by one frame, an episode ends every :attr:`PeerSizes.cycle` steps and
  the next starts from its first frame repeated); capacity 100,000. The same two
  times, and the bytes per transition: the storage the library allocated divided
  by its capacity. vecpool stores it with ``frame_stack=4`` where its
  ``ReplayPool`` takes that argument, else with ``store_next_obs=False`` (the
  table's last column says which). Extra rows: SB3 with
  ``optimize_memory_usage=True``, and cpprb with ``next_of``/``stack_compress`` (both
  assume consecutive rows of one env, so one buffer per env, channel-last frames).
* ``prioritized``: 1,000,000 filled ``cartpole`` rows with ``alpha=0.6``:
  microseconds per ``sample(256)`` with ``beta=0.4``, and per priority update of
  256 sampled rows (vecpool's ``alpha``, cpprb's and TorchRL's
  ``PrioritizedReplayBuffer``, Tianshou's ``PrioritizedVectorReplayBuffer``; SB3
  has none).

Method. Every buffer is filled to capacity before it is timed, so that ``add``
times a full ring (the steady state of training) and every library samples from as
many rows; where a library takes many rows in one call (cpprb, Tianshou, TorchRL)
the untimed fill uses that. Each library's container of one step (a Tianshou
``Batch``, a TorchRL ``TensorDict``, SB3's ``infos``) is built before the timing,
as its collector would hand it over. Each (round, library) runs in a fresh Python
process (``python -c``, the result one JSON line on standard output); rounds
interleave the libraries, and every figure is the median over the rounds. A
library that is not installed is skipped with a one-line note.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import importlib.util
import inspect
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._version import __version__
from vecpool.bench.fresh import run_fresh
from vecpool.bench.report import installed_version
from vecpool.replay.pool import ReplayPool

__all__ = [
    "FIGURES",
    "FULL_SIZES",
    "LIBRARIES",
    "QUICK_SIZES",
    "Library",
    "PeerReport",
    "PeerRow",
    "PeerSizes",
    "format_peer_report",
    "installed_peers",
    "run_peer_benchmark",
]

NUM_ENVS = 8
SAMPLE_SIZE = 256
STACK = 4
FRAME = (84, 84)
ALPHA, BETA = 0.6, 0.4
RESULT_PREFIX = "vecpool-pool-peers:"
"""Marks the result line among anything a library prints on standard output."""

FIGURES = (
    "cartpole_add_us",
    "cartpole_sample_us",
    "atari_add_us",
    "atari_sample_us",
    "atari_bytes_per_transition",
    "prioritized_sample_us",
    "prioritized_update_us",
)
"""The figures of a row, in the table's order."""

_CHUNK = 8  # calls between two reads of the clock
_PRIORITY_SETS = 16  # sampled index sets cycled by the priority update


@dataclass(frozen=True)
class Library:
    """A replay-buffer library of the comparison.

    Attributes:
        name: Its name in the table (``vecpool``, ``sb3``, ...).
        modules: Modules it needs; it is skipped when one is not installed.
        distributions: Distributions whose versions the table's header reports.
        install: What to install for it.
    """

    name: str
    modules: tuple[str, ...]
    distributions: tuple[str, ...]
    install: str


LIBRARIES: dict[str, Library] = {
    library.name: library
    for library in (
        Library("vecpool", ("vecpool",), ("vecpool",), "vecpool"),
        Library(
            "sb3",
            ("stable_baselines3", "torch"),
            ("stable-baselines3",),
            "stable-baselines3",
        ),
        Library("cpprb", ("cpprb",), ("cpprb",), "cpprb"),
        Library("tianshou", ("tianshou",), ("tianshou",), "tianshou"),
        Library(
            "torchrl",
            ("torchrl", "tensordict", "torch"),
            ("torchrl", "tensordict"),
            "torchrl tensordict",
        ),
    )
}
"""Every library of the comparison, vecpool first."""

PEERS = tuple(name for name in LIBRARIES if name != "vecpool")


@dataclass(frozen=True)
class PeerSizes:
    """Capacities and the amount of pre-drawn data.

    Attributes:
        cartpole_capacity: Transitions the ``cartpole`` buffers hold.
        atari_capacity: Transitions the ``atari`` buffers hold.
        prioritized_rows: Rows the prioritized buffers hold (filled).
        cycle: Pre-drawn vector steps, cycled; also the length of each ``atari``
            episode.
    """

    cartpole_capacity: int = 400_000
    atari_capacity: int = 100_000
    prioritized_rows: int = 1_000_000
    cycle: int = 512


FULL_SIZES = PeerSizes()
"""The sizes of the comparison."""
QUICK_SIZES = PeerSizes(
    cartpole_capacity=4_000, atari_capacity=1_000, prioritized_rows=10_000, cycle=32
)
"""Tiny sizes for ``--quick`` runs and tests."""


@dataclass(frozen=True)
class PeerRow:
    """One row of the table: a library (or a variant of one), its medians.

    Attributes:
        label: The row's name (a library, or a library and its variant).
        library: The library it measures.
        figures: Medians by name (see :data:`FIGURES`); ``None`` where the library
            cannot do it (see ``notes``); a name that is absent was not measured
            in this row.
        storage: How the row stores the ``atari`` observations.
        notes: Why a figure is missing, and anything else worth a line.
        rounds: Rounds that gave this row's figures.
    """

    label: str
    library: str
    figures: dict[str, float | None]
    storage: str = ""
    notes: tuple[str, ...] = ()
    rounds: int = 0


@dataclass(frozen=True)
class PeerReport:
    """The comparison's rows, with what was skipped and how it was run."""

    rows: tuple[PeerRow, ...]
    skipped: tuple[str, ...]
    versions: dict[str, str]
    rounds: int
    seconds: float
    sizes: PeerSizes = field(default_factory=PeerSizes)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return asdict(self)


# ------------------------------------------------------------------ the parent side


def installed_peers(
    names: Sequence[str] = PEERS,
    find: Callable[[str], object] = importlib.util.find_spec,
) -> tuple[list[str], list[str]]:
    """Split libraries into those installed and one-line notes for the others.

    Args:
        names: Library names (keys of :data:`LIBRARIES`).
        find: Finds a module by name (``None`` when it is not installed).

    Returns:
        The installed names, in order, and a skip note for each other one.

    Raises:
        ValueError: On an unknown library name.
    """
    present, notes = [], []
    for name in names:
        if name not in LIBRARIES:
            msg = f"unknown library {name!r}: choose from {', '.join(LIBRARIES)}"
            raise ValueError(msg)
        library = LIBRARIES[name]
        missing = [module for module in library.modules if not _found(find, module)]
        if missing:
            notes.append(
                f"skipped {name}: {', '.join(missing)} not installed "
                f"(pip install {library.install})"
            )
        else:
            present.append(name)
    return present, notes


def _found(find: Callable[[str], object], module: str) -> bool:
    try:
        return find(module) is not None
    except (ImportError, ValueError):  # a broken install counts as missing
        return False


def _versions(names: Sequence[str]) -> dict[str, str]:
    # vecpool's own from the package: a source checkout on PYTHONPATH has no
    # installed metadata (as bench/report.py's machine_info)
    versions = {"vecpool": __version__} if "vecpool" in names else {}
    wanted = [d for name in names for d in LIBRARIES[name].distributions]
    for distribution in [*wanted, "torch", "numpy"]:
        found = installed_version(distribution)
        if found is not None:
            versions.setdefault(distribution, found)
    return versions


def _run_child(
    name: str, seconds: float, seed: int, sizes: PeerSizes, timeout: float
) -> list[dict[str, Any]]:
    """Measure one library in a fresh process; its rows, or one row saying why not."""
    spec = {"library": name, "seconds": seconds, "seed": seed, "sizes": asdict(sizes)}
    result = run_fresh(__name__, spec, RESULT_PREFIX, timeout=timeout)
    if isinstance(result, str):
        return [_failed_row(name, result)]
    rows: list[dict[str, Any]] = result
    return rows


def _failed_row(name: str, why: str) -> dict[str, Any]:
    return {"label": name, "library": name, "figures": {}, "notes": [f"failed: {why}"]}


def run_peer_benchmark(
    libraries: Sequence[str] | None = None,
    *,
    seconds: float = 0.5,
    rounds: int = 3,
    seed: int = 0,
    sizes: PeerSizes = FULL_SIZES,
    progress: Callable[[str], None] | None = None,
    timeout: float = 900.0,
    find: Callable[[str], object] = importlib.util.find_spec,
) -> PeerReport:
    """Measure vecpool's pool and the installed peers (see the module docstring).

    Args:
        libraries: Library names (default: all of :data:`LIBRARIES`); those not
            installed are skipped with a note.
        seconds: Duration of one timed measurement.
        rounds: Interleaved rounds; each figure is the median over them.
        seed: Seed of the pre-drawn data.
        sizes: Capacities and data sizes.
        progress: Called with a line before each process starts.
        timeout: Seconds one process may take.
        find: Finds a module by name (tests pass a fake one).

    Returns:
        The report: a row per library and variant, vecpool first.
    """
    names, skipped = installed_peers(
        list(LIBRARIES) if libraries is None else libraries, find
    )
    per_round: list[list[dict[str, Any]]] = []
    for index in range(rounds):
        for name in names:
            if progress is not None:
                progress(f"[pool peers] round {index + 1}/{rounds}: {name}")
            per_round.append(_run_child(name, seconds, seed, sizes, timeout))
    return PeerReport(
        rows=_merge(per_round),
        skipped=tuple(skipped),
        versions=_versions(names),
        rounds=rounds,
        seconds=seconds,
        sizes=sizes,
    )


def _merge(results: Sequence[Sequence[Mapping[str, Any]]]) -> tuple[PeerRow, ...]:
    """Median of each row's figures over the rounds, rows in their first order."""
    order: list[str] = []
    seen: dict[str, list[Mapping[str, Any]]] = {}
    for rows in results:
        for row in rows:
            if row["label"] not in seen:
                order.append(row["label"])
                seen[row["label"]] = []
            seen[row["label"]].append(row)
    merged = []
    for label in order:
        rows = seen[label]
        figures: dict[str, float | None] = {}
        for name in FIGURES:
            values = [row["figures"][name] for row in rows if name in row["figures"]]
            if values:
                numbers = [v for v in values if v is not None]
                figures[name] = statistics.median(numbers) if numbers else None
        notes = list(dict.fromkeys(n for row in rows for n in row.get("notes", ())))
        merged.append(
            PeerRow(
                label=label,
                library=rows[0]["library"],
                figures=figures,
                storage=rows[-1].get("storage", ""),
                notes=tuple(notes),
                rounds=sum(1 for row in rows if row["figures"]),
            )
        )
    return tuple(merged)


# ------------------------------------------------------------------------ output

_COLUMNS = (
    ("cartpole_add_us", "cartpole", "add"),
    ("cartpole_sample_us", "cartpole", "sample"),
    ("atari_add_us", "atari", "add"),
    ("atari_sample_us", "atari", "sample"),
    ("atari_bytes_per_transition", "atari", "B/trans."),
    ("prioritized_sample_us", "prio.", "sample"),
    ("prioritized_update_us", "prio.", "update"),
)
_LABEL_WIDTH = 20
_WIDTH = 11


def _cell(row: PeerRow, name: str) -> str:
    if name not in row.figures:
        return "-"
    value = row.figures[name]
    if value is None:
        return "n/a"
    if name == "atari_bytes_per_transition":
        return f"{value:,.0f}"
    return f"{value:,.1f}" if value < 1_000 else f"{value:,.0f}"


def format_peer_report(report: PeerReport) -> list[str]:
    """The comparison as terminal lines: a header, the table, notes and skips.

    Args:
        report: What :func:`run_peer_benchmark` returned.

    Returns:
        Lines of text.
    """
    sizes = report.sizes
    versions = ", ".join(f"{k} {v}" for k, v in report.versions.items())
    lines = [
        f"replay buffers side by side: {NUM_ENVS} envs, one transition each per "
        f"vector step; median of {report.rounds} rounds of {report.seconds:g} s, "
        "each library in a fresh process",
        f"versions: {versions}",
        f"add: us per vector step ({NUM_ENVS} transitions); sample: us per "
        f"sample({SAMPLE_SIZE}); update: us per priority update of {SAMPLE_SIZE} "
        "rows; B/trans.: storage allocated / capacity",
        f"cartpole: (4,) float32 obs, capacity {sizes.cartpole_capacity:,}; atari: "
        f"(4, 84, 84) uint8 obs, capacity {sizes.atari_capacity:,}; prio.: "
        f"{sizes.prioritized_rows:,} rows, alpha {ALPHA}, beta {BETA}",
        "",
        " " * _LABEL_WIDTH + "".join(f"{work:>{_WIDTH}}" for _, work, _ in _COLUMNS),
        f"{'library':<{_LABEL_WIDTH}}"
        + "".join(f"{title:>{_WIDTH}}" for _, _, title in _COLUMNS)
        + "  atari storage",
    ]
    for row in report.rows:
        cells = "".join(f"{_cell(row, name):>{_WIDTH}}" for name, _, _ in _COLUMNS)
        lines.append(f"{row.label:<{_LABEL_WIDTH}}{cells}  {row.storage}".rstrip())
    notes = [f"  {row.label}: {note}" for row in report.rows for note in row.notes]
    notes += [f"  {note}" for note in report.skipped]
    if notes:
        lines += ["", "notes:", *notes]
    return lines


# ------------------------------------------------------------- the measuring process


class _Unavailable(Exception):
    """The library cannot do this part of the work (the table says n/a, and why)."""


def child_main(argv: Sequence[str]) -> int:
    """Entry point of a measuring process: print its rows as one JSON line.

    Args:
        argv: One argument, the JSON spec (library, seconds, seed, sizes).

    Returns:
        The exit status.
    """
    spec = json.loads(argv[0])
    sizes = PeerSizes(**spec["sizes"])
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # libraries' own prints
        rows = measure_library(spec["library"], spec["seconds"], spec["seed"], sizes)
    out.write(RESULT_PREFIX + json.dumps(rows) + "\n")
    out.flush()
    return 0


@dataclass
class _Row:
    """A row being measured (the JSON a process prints)."""

    label: str
    library: str
    figures: dict[str, float | None] = field(default_factory=dict)
    storage: str = ""
    notes: list[str] = field(default_factory=list)


def measure_library(
    name: str, seconds: float, seed: int, sizes: PeerSizes
) -> list[dict[str, Any]]:
    """Measure one library in this process (what each fresh process runs).

    Args:
        name: A key of :data:`LIBRARIES`.
        seconds: Duration of one timed measurement.
        seed: Seed of the pre-drawn data.
        sizes: Capacities and data sizes.

    Returns:
        The library's rows as JSON-ready dicts.
    """
    adapter = _ADAPTERS[name]
    main = _Row(name, name)
    extras: list[_Row] = []
    cartpole = _cartpole_data(sizes.cycle, seed)
    _measure(main, "cartpole", lambda: adapter.cartpole(cartpole, sizes, seconds))
    _measure(main, "prioritized", lambda: adapter.prioritized(cartpole, sizes, seconds))
    atari = _atari_data(sizes.cycle, seed)
    _measure(main, "atari", lambda: adapter.atari(atari, sizes, seconds, main))
    for label, variant in adapter.atari_variants:
        row = _Row(f"{name} {label}", name)
        _measure(row, "atari", functools.partial(variant, atari, sizes, seconds, row))
        extras.append(row)
    return [asdict(row) for row in (main, *extras)]


def _measure(row: _Row, work: str, run: Callable[[], dict[str, float]]) -> None:
    """Run one workload into ``row``: its figures, or n/a and a note saying why."""
    names = [name for name in FIGURES if name.startswith(work)]
    try:
        row.figures.update(run())
    except _Unavailable as error:
        row.figures.update(dict.fromkeys(names))
        row.notes.append(f"{work}: n/a ({error})")
    except Exception as error:  # noqa: BLE001  (one failure must not hide the rest)
        row.figures.update(dict.fromkeys(names))
        first = str(error).strip().splitlines()[:1] or [""]
        row.notes.append(f"{work}: failed: {type(error).__name__}: {first[0]}")
    finally:
        gc.collect()  # give the buffer's memory back before the next one


# ----------------------------------------------------------------- pre-drawn data

_Data = dict[str, npt.NDArray[Any]]  # fields with leading (cycle, NUM_ENVS)


def _cartpole_data(cycle: int, seed: int) -> _Data:
    """CartPole-like steps: random obs, next obs, actions, rewards and flags."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (cycle, NUM_ENVS, 4)).astype(np.float32)
    terminated = rng.random((cycle, NUM_ENVS)) < 0.05
    return {
        "obs": obs,
        "action": rng.integers(0, 2, (cycle, NUM_ENVS)),
        "next_obs": obs + np.float32(0.01),
        "reward": np.ones((cycle, NUM_ENVS)),
        "terminated": terminated,
        "truncated": np.zeros((cycle, NUM_ENVS), np.bool_),
    }


def _atari_data(cycle: int, seed: int) -> _Data:
    """Atari-like steps: 4-frame stacks of per-env frame sequences.

    Each env plays one episode of ``cycle`` steps over and over, started at a
    different step per env: its first stack is its first frame four times (as
    ``FrameStackObservation`` pads on reset), each next stack drops the oldest frame
    and appends a new one, and its last step ends it (``terminated``). So the data
    stay consistent across the cycle's wrap.
    """
    rng = np.random.default_rng(seed + 1)
    frames = rng.integers(0, 256, (NUM_ENVS, cycle + 1, *FRAME), dtype=np.uint8)
    steps = np.arange(cycle)[:, None]
    starts = (np.arange(NUM_ENVS) * cycle) // NUM_ENVS
    position = (steps - starts[None, :]) % cycle  # (cycle, envs): step in episode
    lag = np.arange(STACK) - (STACK - 1)  # -3, -2, -1, 0
    envs = np.arange(NUM_ENVS)[None, :, None]
    obs = frames[envs, np.maximum(position[..., None] + lag, 0)]
    next_obs = frames[envs, np.maximum(position[..., None] + 1 + lag, 0)]
    return {
        "obs": obs,
        "action": rng.integers(0, 6, (cycle, NUM_ENVS)),
        "next_obs": next_obs,
        "reward": (rng.random((cycle, NUM_ENVS)) < 0.02).astype(np.float64),
        "terminated": position == cycle - 1,
        "truncated": np.zeros((cycle, NUM_ENVS), np.bool_),
    }


def _flat(data: _Data) -> _Data:
    """The fields with the step and env axes merged (views: the data are contiguous)."""
    return {key: value.reshape(-1, *value.shape[2:]) for key, value in data.items()}


def _done(data: _Data) -> npt.NDArray[np.bool_]:
    return np.logical_or(data["terminated"], data["truncated"])


# ------------------------------------------------------------------------ timing


def _per_call_us(
    call: Callable[[int], object], seconds: float, cycle: int, start: int = 0
) -> float:
    """Microseconds per ``call(i)``, ``i`` cycling from ``start``, over ``seconds``.

    One chunk of calls runs untimed first (warm-up); then chunks run until
    ``seconds`` have passed (at least one).
    """
    step = start
    for _ in range(_CHUNK):
        call(step % cycle)
        step += 1
    calls, began = 0, time.perf_counter()
    deadline = began + seconds
    while True:
        for _ in range(_CHUNK):
            call(step % cycle)
            step += 1
        calls += _CHUNK
        now = time.perf_counter()
        if now >= deadline:
            return (now - began) / calls * 1e6


@dataclass
class _Buffer:
    """One library's buffer, as the timing sees it.

    Attributes:
        add: Adds pre-drawn vector step ``i`` (all 8 envs).
        sample: Draws ``SAMPLE_SIZE`` transitions.
        bytes_per_transition: Allocated storage over capacity.
        fill: Adds ``count`` transitions in as few calls as the library allows
            (untimed); ``None``: one ``add`` per vector step.
    """

    add: Callable[[int], object]
    sample: Callable[[], object]
    bytes_per_transition: Callable[[], float]
    fill: Callable[[int], object] | None = None


def _time_buffer(
    buffer: _Buffer, capacity: int, cycle: int, seconds: float, work: str
) -> dict[str, float]:
    """Fill to capacity, then time adds (a full ring) and samples."""
    steps = math.ceil(capacity / NUM_ENVS)
    if buffer.fill is not None:
        buffer.fill(capacity)
    else:
        for step in range(steps):
            buffer.add(step % cycle)
    figures = {
        f"{work}_add_us": _per_call_us(buffer.add, seconds, cycle, steps),
        f"{work}_sample_us": _per_call_us(lambda _: buffer.sample(), seconds, 1),
    }
    if work == "atari":
        figures["atari_bytes_per_transition"] = buffer.bytes_per_transition()
    return figures


@dataclass
class _Prioritized:
    """One library's prioritized buffer, as the timing sees it.

    Attributes:
        fill: Adds ``count`` rows (untimed).
        sample: Draws ``SAMPLE_SIZE`` rows with ``beta``; returns their indices.
        update: Sets the priorities of rows given by sampled indices.
    """

    fill: Callable[[int], object]
    sample: Callable[[], Any]
    update: Callable[[Any, npt.NDArray[np.float64]], object]


def _time_prioritized(
    buffer: _Prioritized, rows: int, seconds: float, seed: int = 0
) -> dict[str, float]:
    buffer.fill(rows)
    rng = np.random.default_rng(seed + 2)
    indices = [buffer.sample() for _ in range(_PRIORITY_SETS)]
    priorities = [rng.random(SAMPLE_SIZE) + 0.01 for _ in range(_PRIORITY_SETS)]
    return {
        "prioritized_sample_us": _per_call_us(lambda _: buffer.sample(), seconds, 1),
        "prioritized_update_us": _per_call_us(
            lambda i: buffer.update(indices[i], priorities[i]), seconds, _PRIORITY_SETS
        ),
    }


def _chunks(total: int, size: int) -> list[tuple[int, int]]:
    """``(start, count)`` pieces of ``total`` rows, each at most ``size``."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


# ---------------------------------------------------------------------- adapters

_Figures = dict[str, float]
_Variant = Callable[[_Data, PeerSizes, float, _Row], _Figures]


@dataclass
class _Adapter:
    """How one library runs the three workloads (and its extra ``atari`` rows)."""

    cartpole: Callable[[_Data, PeerSizes, float], _Figures]
    prioritized: Callable[[_Data, PeerSizes, float], _Figures]
    atari: _Variant
    atari_variants: tuple[tuple[str, _Variant], ...] = ()


def _spaces(data: _Data) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    obs = data["obs"]
    if obs.dtype == np.uint8:
        box: spaces.Space[Any] = spaces.Box(0, 255, obs.shape[2:], np.uint8)
    else:
        box = spaces.Box(-np.inf, np.inf, obs.shape[2:], obs.dtype.type)
    return box, spaces.Discrete(int(data["action"].max()) + 1)


# vecpool -------------------------------------------------------------------------


def _pool_arguments() -> set[str]:
    return set(inspect.signature(ReplayPool).parameters)


def _vecpool_buffer(pool: ReplayPool, data: _Data) -> _Buffer:
    obs, action, next_obs, reward, terminated, truncated = (
        data[k] for k in _VECPOOL_ORDER
    )

    def add(i: int) -> None:  # the arguments spelled out, as the other adapters do
        pool.add(obs[i], action[i], next_obs[i], reward[i], terminated[i], truncated[i])

    return _Buffer(
        add,
        lambda: pool.sample(SAMPLE_SIZE),
        lambda: pool.nbytes / (pool.capacity * pool.num_envs),
    )


_VECPOOL_ORDER = ("obs", "action", "next_obs", "reward", "terminated", "truncated")


def _vecpool_cartpole(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    pool = ReplayPool(*_spaces(data), NUM_ENVS, sizes.cartpole_capacity, seed=0)
    buffer = _vecpool_buffer(pool, data)
    return _time_buffer(
        buffer, sizes.cartpole_capacity, sizes.cycle, seconds, "cartpole"
    )


def _vecpool_atari(
    data: _Data, sizes: PeerSizes, seconds: float, row: _Row
) -> _Figures:
    if "frame_stack" in _pool_arguments():
        options: dict[str, Any] = {"frame_stack": STACK}
        row.storage = f"frame_stack={STACK}"
    else:
        options = {"store_next_obs": False}
        row.storage = "store_next_obs=False"
        row.notes.append(
            "atari: stored with store_next_obs=False: this ReplayPool does not take "
            "frame_stack yet"
        )
    pool = ReplayPool(*_spaces(data), NUM_ENVS, sizes.atari_capacity, seed=0, **options)
    buffer = _vecpool_buffer(pool, data)
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _vecpool_prioritized(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    if "alpha" not in _pool_arguments():
        msg = "not implemented: this ReplayPool does not take alpha yet"
        raise _Unavailable(msg)
    options: dict[str, Any] = {"alpha": ALPHA}  # the contract of the replay issue
    pool: Any = ReplayPool(
        *_spaces(data), NUM_ENVS, sizes.prioritized_rows, seed=0, **options
    )
    buffer = _vecpool_buffer(pool, data)

    def fill(count: int) -> None:
        for step in range(math.ceil(count / NUM_ENVS)):
            buffer.add(step % sizes.cycle)

    def sample() -> Any:
        return pool.sample(SAMPLE_SIZE, beta=BETA).indices

    def update(indices: Any, priorities: npt.NDArray[np.float64]) -> None:
        pool.update_priorities(indices, priorities)

    return _time_prioritized(
        _Prioritized(fill, sample, update), sizes.prioritized_rows, seconds
    )


_VECPOOL = _Adapter(_vecpool_cartpole, _vecpool_prioritized, _vecpool_atari)


# Stable-Baselines3 ----------------------------------------------------------------


def _sb3_buffer(data: _Data, capacity: int, **options: Any) -> _Buffer:
    buffers = importlib.import_module("stable_baselines3.common.buffers")
    rb = buffers.ReplayBuffer(capacity, *_spaces(data), n_envs=NUM_ENVS, **options)
    done = _done(data)
    # what SB3's VecEnv hands over: a truncation is a time limit, not a termination
    infos = [
        [
            {"TimeLimit.truncated": bool(cut and not end)}
            for cut, end in zip(*step, strict=True)
        ]
        for step in zip(data["truncated"], data["terminated"], strict=True)
    ]
    obs, action, next_obs, reward = (
        data[k] for k in ("obs", "action", "next_obs", "reward")
    )

    def add(i: int) -> None:
        rb.add(obs[i], next_obs[i], action[i], reward[i], done[i], infos[i])

    def nbytes() -> float:
        names = ("observations", "next_observations", "actions", "rewards", "dones")
        arrays = [getattr(rb, n) for n in (*names, "timeouts") if hasattr(rb, n)]
        return sum(int(a.nbytes) for a in arrays) / int(rb.buffer_size * rb.n_envs)

    return _Buffer(add, lambda: rb.sample(SAMPLE_SIZE), nbytes)


def _sb3_cartpole(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    buffer = _sb3_buffer(data, sizes.cartpole_capacity)
    return _time_buffer(
        buffer, sizes.cartpole_capacity, sizes.cycle, seconds, "cartpole"
    )


def _sb3_atari(data: _Data, sizes: PeerSizes, seconds: float, row: _Row) -> _Figures:
    row.storage = "obs + next_obs"
    buffer = _sb3_buffer(data, sizes.atari_capacity)
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _sb3_atari_compact(
    data: _Data, sizes: PeerSizes, seconds: float, row: _Row
) -> _Figures:
    row.storage = "optimize_memory_usage=True"
    buffer = _sb3_buffer(
        data,
        sizes.atari_capacity,
        optimize_memory_usage=True,
        handle_timeout_termination=False,  # SB3 refuses both together
    )
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _sb3_prioritized(_data: _Data, _sizes: PeerSizes, _seconds: float) -> _Figures:
    msg = "Stable-Baselines3 has no prioritized replay buffer"
    raise _Unavailable(msg)


_SB3 = _Adapter(
    _sb3_cartpole,
    _sb3_prioritized,
    _sb3_atari,
    (("optimize_memory", _sb3_atari_compact),),
)


# cpprb ---------------------------------------------------------------------------


def _cpprb_env_dict(data: _Data) -> dict[str, dict[str, Any]]:
    obs = data["obs"]
    shape = {"shape": obs.shape[2:], "dtype": obs.dtype}
    flag = {"dtype": np.bool_}
    return {
        "obs": shape,
        "act": {"dtype": np.int64},
        "rew": {},  # cpprb's default dtype, float32
        "next_obs": dict(shape),
        "terminated": flag,
        "truncated": dict(flag),
    }


_CPPRB_NAMES = {
    "obs": "obs",
    "act": "action",
    "rew": "reward",
    "next_obs": "next_obs",
    "terminated": "terminated",
    "truncated": "truncated",
}


def _cpprb_row_bytes(env_dict: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of one row as cpprb allocates it (``np.zeros((size, *shape), dtype)``)."""
    total = 0
    for defs in env_dict.values():
        shape = np.atleast_1d(defs.get("shape", 1))
        total += int(np.prod(shape)) * np.dtype(defs.get("dtype", np.float32)).itemsize
    return total


def _cpprb_buffer(
    data: _Data, capacity: int, cycle: int, prioritized: bool
) -> tuple[Any, _Buffer]:
    cpprb = importlib.import_module("cpprb")
    env_dict = _cpprb_env_dict(data)
    if prioritized:
        rb = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=ALPHA)
    else:
        rb = cpprb.ReplayBuffer(capacity, env_dict)
    steps = [{k: data[v][i] for k, v in _CPPRB_NAMES.items()} for i in range(cycle)]
    flat = {k: _flat(data)[v] for k, v in _CPPRB_NAMES.items()}

    def fill(count: int) -> None:
        for start, size in _chunks(count, len(flat["obs"])):
            del start
            rb.add(**{k: v[:size] for k, v in flat.items()})

    buffer = _Buffer(
        lambda i: rb.add(**steps[i]),
        lambda: rb.sample(SAMPLE_SIZE),
        lambda: float(_cpprb_row_bytes(env_dict)),
        fill,
    )
    return rb, buffer


def _cpprb_cartpole(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    _, buffer = _cpprb_buffer(data, sizes.cartpole_capacity, sizes.cycle, False)
    return _time_buffer(
        buffer, sizes.cartpole_capacity, sizes.cycle, seconds, "cartpole"
    )


def _cpprb_atari(data: _Data, sizes: PeerSizes, seconds: float, row: _Row) -> _Figures:
    row.storage = "obs + next_obs"
    _, buffer = _cpprb_buffer(data, sizes.atari_capacity, sizes.cycle, False)
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _cpprb_atari_compact(
    data: _Data, sizes: PeerSizes, seconds: float, row: _Row
) -> _Figures:
    """The cpprb row with ``next_of`` and ``stack_compress``: a buffer per env.

    Both assume that consecutive rows are consecutive steps of one env, and
    ``stack_compress`` that the stack is the last axis; so each env gets a buffer
    of ``capacity / 8`` with channel-last stacks, an add per env per step, and
    ``on_episode_end`` after an env's episode ends. ``sample(256)`` draws each
    buffer's share at random and concatenates.
    """
    row.storage = "next_of+stack_compress, a buffer per env, HWC"
    cpprb = importlib.import_module("cpprb")
    size = math.ceil(sizes.atari_capacity / NUM_ENVS)
    obs = np.ascontiguousarray(np.moveaxis(data["obs"], 2, -1))
    next_obs = np.ascontiguousarray(np.moveaxis(data["next_obs"], 2, -1))
    env_dict: dict[str, dict[str, Any]] = {
        "obs": {"shape": obs.shape[2:], "dtype": np.uint8},
        "act": {"dtype": np.int64},
        "rew": {},
        "terminated": {"dtype": np.bool_},
        "truncated": {"dtype": np.bool_},
    }
    rbs = [
        cpprb.ReplayBuffer(size, env_dict, next_of="obs", stack_compress="obs")
        for _ in range(NUM_ENVS)
    ]
    action, reward = data["action"], data["reward"]
    terminated, truncated, done = data["terminated"], data["truncated"], _done(data)
    rng = np.random.default_rng(0)

    def add(i: int) -> None:
        for env, rb in enumerate(rbs):
            rb.add(
                obs=obs[i, env],
                act=action[i, env],
                rew=reward[i, env],
                next_obs=next_obs[i, env],
                terminated=terminated[i, env],
                truncated=truncated[i, env],
            )
            if done[i, env]:
                rb.on_episode_end()

    def sample() -> dict[str, Any]:
        counts = np.bincount(rng.integers(0, NUM_ENVS, SAMPLE_SIZE), minlength=NUM_ENVS)
        parts = [rb.sample(int(n)) for rb, n in zip(rbs, counts, strict=True) if n]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def nbytes() -> float:
        # cpprb's layout: a stack_compress field keeps size + stack - 1 frames;
        # next_of keeps one more observation; other fields size rows
        frames = (size + obs.shape[-1] - 1) * int(np.prod(obs.shape[2:-1]))
        others = {k: v for k, v in env_dict.items() if k != "obs"}
        per_buffer = frames + obs[0, 0].nbytes + size * _cpprb_row_bytes(others)
        return float(per_buffer / size)

    buffer = _Buffer(add, sample, nbytes)
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _cpprb_prioritized(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    rb, buffer = _cpprb_buffer(data, sizes.prioritized_rows, sizes.cycle, True)
    assert buffer.fill is not None

    def sample() -> Any:
        return rb.sample(SAMPLE_SIZE, beta=BETA)["indexes"]

    return _time_prioritized(
        _Prioritized(buffer.fill, sample, rb.update_priorities),
        sizes.prioritized_rows,
        seconds,
    )


_CPPRB = _Adapter(
    _cpprb_cartpole,
    _cpprb_prioritized,
    _cpprb_atari,
    (("compressed", _cpprb_atari_compact),),
)


# Tianshou ------------------------------------------------------------------------


def _tianshou_buffer(data: _Data, rb: Any, cycle: int) -> _Buffer:
    batch_type = importlib.import_module("tianshou.data").Batch

    def batch(fields: _Data, index: Any) -> Any:
        return batch_type(
            obs=fields["obs"][index],
            act=fields["action"][index],
            rew=fields["reward"][index],
            terminated=fields["terminated"][index],
            truncated=fields["truncated"][index],
            obs_next=fields["next_obs"][index],
        )

    steps = [batch(data, i) for i in range(cycle)]
    flat = _flat(data)
    ids = np.arange(NUM_ENVS)
    # one call for many steps: buffer ids repeat, step by step, each env's rows in order
    per_env = min(cycle, rb.maxsize // NUM_ENVS)
    every = np.tile(ids, per_env)

    def fill(count: int) -> None:
        for start, size in _chunks(count, per_env * NUM_ENVS):
            del start
            rb.add(batch(flat, slice(0, size)), buffer_ids=every[:size])

    def nbytes() -> float:
        meta = rb._meta  # Tianshou keeps every field in this Batch
        arrays = [v for v in vars(meta).values() if isinstance(v, np.ndarray)]
        return sum(int(a.nbytes) for a in arrays) / int(rb.maxsize)

    return _Buffer(
        lambda i: rb.add(steps[i], buffer_ids=ids),
        lambda: rb.sample(SAMPLE_SIZE),
        nbytes,
        fill,
    )


def _tianshou_cartpole(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    tianshou = importlib.import_module("tianshou.data")
    rb = tianshou.VectorReplayBuffer(sizes.cartpole_capacity, NUM_ENVS)
    buffer = _tianshou_buffer(data, rb, sizes.cycle)
    return _time_buffer(
        buffer, sizes.cartpole_capacity, sizes.cycle, seconds, "cartpole"
    )


def _tianshou_atari(
    data: _Data, sizes: PeerSizes, seconds: float, row: _Row
) -> _Figures:
    row.storage = "obs + obs_next"
    tianshou = importlib.import_module("tianshou.data")
    rb = tianshou.VectorReplayBuffer(sizes.atari_capacity, NUM_ENVS)
    buffer = _tianshou_buffer(data, rb, sizes.cycle)
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _tianshou_prioritized(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    tianshou = importlib.import_module("tianshou.data")
    rb = tianshou.PrioritizedVectorReplayBuffer(
        sizes.prioritized_rows, NUM_ENVS, alpha=ALPHA, beta=BETA
    )
    buffer = _tianshou_buffer(data, rb, sizes.cycle)
    assert buffer.fill is not None

    def sample() -> Any:
        _, indices = rb.sample(SAMPLE_SIZE)
        return indices

    return _time_prioritized(
        _Prioritized(buffer.fill, sample, rb.update_weight),
        sizes.prioritized_rows,
        seconds,
    )


_TIANSHOU = _Adapter(_tianshou_cartpole, _tianshou_prioritized, _tianshou_atari)


# TorchRL -------------------------------------------------------------------------


def _torchrl_steps(data: _Data, cycle: int) -> tuple[Any, list[Any]]:
    """All the rows as one TensorDict, and each step's 8 rows (views of it)."""
    torch = importlib.import_module("torch")
    tensordict = importlib.import_module("tensordict")
    flat = {k: torch.from_numpy(v) for k, v in _flat(data).items()}
    done = torch.logical_or(flat["terminated"], flat["truncated"])
    rows = tensordict.TensorDict(
        {
            "observation": flat["obs"],
            "action": flat["action"],
            "next": {
                "observation": flat["next_obs"],
                "reward": flat["reward"],
                "terminated": flat["terminated"],
                "truncated": flat["truncated"],
                "done": done,
            },
        },
        batch_size=[cycle * NUM_ENVS],
    )
    return rows, [rows[i * NUM_ENVS : (i + 1) * NUM_ENVS] for i in range(cycle)]


def _torchrl_buffer(rb: Any, rows: Any, steps: list[Any]) -> _Buffer:
    def fill(count: int) -> None:
        for start, size in _chunks(count, len(rows)):
            del start
            rb.extend(rows[:size])

    def nbytes() -> float:
        storage = rb._storage  # the storage the buffer allocated
        tensors = storage._storage.values(True, True)
        total = sum(int(t.numel()) * int(t.element_size()) for t in tensors)
        return total / int(storage.max_size)

    return _Buffer(
        lambda i: rb.extend(steps[i]), lambda: rb.sample(SAMPLE_SIZE), nbytes, fill
    )


def _torchrl_uniform(data: _Data, capacity: int, cycle: int) -> _Buffer:
    torchrl = importlib.import_module("torchrl.data")
    rb = torchrl.ReplayBuffer(storage=torchrl.LazyTensorStorage(capacity))
    return _torchrl_buffer(rb, *_torchrl_steps(data, cycle))


def _torchrl_cartpole(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    buffer = _torchrl_uniform(data, sizes.cartpole_capacity, sizes.cycle)
    return _time_buffer(
        buffer, sizes.cartpole_capacity, sizes.cycle, seconds, "cartpole"
    )


def _torchrl_atari(
    data: _Data, sizes: PeerSizes, seconds: float, row: _Row
) -> _Figures:
    row.storage = "observation + next observation"
    buffer = _torchrl_uniform(data, sizes.atari_capacity, sizes.cycle)
    return _time_buffer(buffer, sizes.atari_capacity, sizes.cycle, seconds, "atari")


def _torchrl_prioritized(data: _Data, sizes: PeerSizes, seconds: float) -> _Figures:
    torch = importlib.import_module("torch")
    try:  # its segment trees live in TorchRL's C++ extension
        importlib.import_module("torchrl._torchrl")
    except ImportError as error:
        why = "undefined symbol" if "undefined symbol" in str(error) else "ImportError"
        msg = (
            f"TorchRL's C++ extension, which holds its segment trees, does not load "
            f"with torch {torch.__version__}: {why}"
        )
        raise _Unavailable(msg) from error
    torchrl = importlib.import_module("torchrl.data")
    rb = torchrl.PrioritizedReplayBuffer(
        alpha=ALPHA,
        beta=BETA,
        storage=torchrl.LazyTensorStorage(sizes.prioritized_rows),
    )
    buffer = _torchrl_buffer(rb, *_torchrl_steps(data, sizes.cycle))
    assert buffer.fill is not None

    def sample() -> Any:
        return rb.sample(SAMPLE_SIZE)["index"]

    def update(indices: Any, priorities: npt.NDArray[np.float64]) -> None:
        rb.update_priority(indices, torch.from_numpy(priorities))

    return _time_prioritized(
        _Prioritized(buffer.fill, sample, update), sizes.prioritized_rows, seconds
    )


_TORCHRL = _Adapter(_torchrl_cartpole, _torchrl_prioritized, _torchrl_atari)


_ADAPTERS: dict[str, _Adapter] = {
    "vecpool": _VECPOOL,
    "sb3": _SB3,
    "cpprb": _CPPRB,
    "tianshou": _TIANSHOU,
    "torchrl": _TORCHRL,
}
