"""Shared fixtures: start methods, placements, auto-closing vector envs, leak checks.

Engine behaviour tests take ``placement`` (or ``make_placed``) and so run once per
entry of :data:`PLACEMENTS`; ``pytest --collect-only`` reports how many per placement.

Test modules cannot import each other under ``--import-mode=importlib``, so every
shared helper is a fixture here; every env lives in :mod:`vecpool.testing`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium as gym
import pytest

import vecpool

START_METHODS = [
    method
    for method in ("fork", "forkserver", "spawn")
    if method in multiprocessing.get_all_start_methods()
]

# `nox -s forkserver`: every vector env built without a `context` starts its
# workers the way Python 3.14 does on Linux by default (the env fns are pickled)
DEFAULT_START_METHOD = os.environ.get("VECPOOL_START_METHOD") or None
if DEFAULT_START_METHOD is not None:
    multiprocessing.set_start_method(DEFAULT_START_METHOD, force=True)
    # every worker imports vecpool (its entry point lives there): imported once, in
    # the forkserver, a 2-worker env starts in 0.2 s instead of 0.7 (2 CPUs)
    multiprocessing.set_forkserver_preload(["vecpool"])


@pytest.fixture(params=START_METHODS)
def start_method(request: pytest.FixtureRequest) -> str:
    """Each start method available on this OS."""
    return str(request.param)


def _close_quietly(
    env: vecpool.AsyncVectorEnv | gym.vector.AsyncVectorEnv[Any, Any],
) -> None:
    if getattr(env, "closed", True):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.close(terminate=True)


@pytest.fixture
def make_async() -> Iterator[Callable[..., vecpool.AsyncVectorEnv]]:
    """Factory building ``vecpool.AsyncVectorEnv(env_fns, **kwargs)``.

    Every env it builds is closed at teardown.
    """
    created: list[vecpool.AsyncVectorEnv] = []

    def factory(env_fns: Any, **kwargs: Any) -> vecpool.AsyncVectorEnv:
        env = vecpool.AsyncVectorEnv(env_fns, **kwargs)
        created.append(env)
        return env

    yield factory
    for env in created:
        _close_quietly(env)


# ---------------------------------------------------------------------- placements


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a vector env's envs run, and the constructor keywords that say so.

    ``isolated``: every env lives in a worker process, so a worker can be killed,
    segfault, time out or hang without taking the test process with it (a parent
    share of the envs is not isolated). ``all_here``: every env lives in the test
    process (nothing is pickled, no object is copied across a process).
    """

    id: str
    keywords: Callable[[int], dict[str, Any]]
    isolated: bool
    all_here: bool = False

    def kwargs(self, num_envs: int) -> dict[str, Any]:
        """The constructor keywords for ``num_envs`` envs."""
        return self.keywords(num_envs)

    def skip_unless_isolated(self, reason: str | None = None) -> None:
        """Skip the calling test unless every env runs in a worker process."""
        if not self.isolated:
            pytest.skip(reason or NEEDS_WORKER_REASON)


def _share(num_envs: int) -> dict[str, Any]:
    if num_envs < 2:  # nothing left for a worker: the one env in the parent
        return {"num_workers": 0, "parent_envs": num_envs}
    return {"num_workers": 1, "parent_envs": num_envs // 2}


NEEDS_WORKER_REASON = (
    "needs a worker process: an in-process env cannot be killed separately"
)

# Every engine behaviour test runs over each of these (SB3's VEC_ENV_CLASSES habit);
# a new placement is one line here.
PLACEMENTS = [
    # several envs per worker and more than one worker wherever num_envs allows
    Placement("processes", lambda n: {"num_workers": min(2, n)}, isolated=True),
    Placement(
        "in_process", lambda n: {"num_workers": 0}, isolated=False, all_here=True
    ),
    # the parent steps half the envs (the last ones) while one worker steps the rest
    Placement("parent_share", lambda n: _share(n), isolated=False),
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_worker_process(reason=None): skipped for a placement without worker "
        "processes (the test kills, crashes or times out a worker); needs the "
        "placement fixture",
    )
    config.addinivalue_line(
        "markers",
        "start_methods: an engine behaviour (over the placement fixture) or a "
        "differential test; `nox -s forkserver` runs these under Python 3.14's "
        "default start method (added to every test that takes `placement`)",
    )


@pytest.fixture(params=PLACEMENTS, ids=[placement.id for placement in PLACEMENTS])
def placement(request: pytest.FixtureRequest) -> Placement:
    """Each placement; a ``needs_worker_process`` test skips where none is isolated.

    ``@pytest.mark.needs_worker_process(reason=...)`` names a reason other than
    :data:`NEEDS_WORKER_REASON` (e.g. that an in-process wait cannot time out).
    """
    chosen: Placement = request.param
    marker = request.node.get_closest_marker("needs_worker_process")
    if marker is not None:
        chosen.skip_unless_isolated(marker.kwargs.get("reason"))
    return chosen


@pytest.fixture
def make_placed(
    placement: Placement, make_async: Callable[..., vecpool.AsyncVectorEnv]
) -> Callable[..., vecpool.AsyncVectorEnv]:
    """Factory like ``make_async`` whose envs run where ``placement`` says.

    The placement owns the keywords it sets (``num_workers`` today); a test that
    passes one of them is about worker counts and should call ``make_async``.
    """

    def factory(env_fns: Any, **kwargs: Any) -> vecpool.AsyncVectorEnv:
        env_fns = list(env_fns)
        placed = placement.kwargs(len(env_fns))
        clash = sorted(set(placed) & set(kwargs))
        if clash:
            msg = f"the placement sets {clash}; use make_async for worker counts"
            raise TypeError(msg)
        return make_async(env_fns, **placed, **kwargs)

    return factory


def _pickle_test_modules_by_value(items: list[pytest.Item]) -> None:
    """Let a worker started from a fresh interpreter unpickle what a test defines.

    Under ``forkserver`` or ``spawn``, and for every restart's replacement
    (``on_worker_crash="restart"`` starts them through the forkserver whatever the
    start method), the env fns are pickled, and cloudpickle
    pickles a function or class of an importable module by reference; a test
    module is importable only in this process (``--import-mode=importlib``), so a
    worker would fail with ``No module named 'tests'``. By value, as cloudpickle
    pickles a user's ``__main__`` script, a test's own env class works there too.
    """
    modules = {item.module for item in items if isinstance(item, pytest.Function)}
    for module in modules:
        if module is not None and module.__name__ in sys.modules:
            cloudpickle.register_pickle_by_value(module)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _pickle_test_modules_by_value(items)  # restarts pickle them under fork too
    for item in items:
        if "placement" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.start_methods)
        if item.get_closest_marker("needs_worker_process") is None:
            continue
        if "placement" not in getattr(item, "fixturenames", ()):
            msg = f"{item.nodeid}: needs_worker_process without the placement fixture"
            raise pytest.UsageError(msg)


def pytest_report_collectionfinish(
    config: pytest.Config, items: list[pytest.Item]
) -> str | None:
    """With ``--collect-only``: how many tests run under each placement."""
    if not config.option.collectonly:
        return None
    counts = dict.fromkeys((placement.id for placement in PLACEMENTS), 0)
    for item in items:
        callspec = getattr(item, "callspec", None)
        value = None if callspec is None else callspec.params.get("placement")
        if isinstance(value, Placement):  # not a test's own `placement` parameter
            counts[value.id] += 1
    return "placement: " + ", ".join(f"{key} {value}" for key, value in counts.items())


@pytest.fixture
def make_sync() -> Iterator[Callable[..., gym.vector.SyncVectorEnv[Any, Any]]]:
    """Factory building ``gymnasium.vector.SyncVectorEnv``; closes at teardown."""
    created: list[gym.vector.SyncVectorEnv[Any, Any]] = []

    def factory(env_fns: Any, **kwargs: Any) -> gym.vector.SyncVectorEnv[Any, Any]:
        env = gym.vector.SyncVectorEnv(env_fns, **kwargs)
        created.append(env)
        return env

    yield factory
    for env in created:
        env.close()


@pytest.fixture
def make_gym_async() -> Iterator[Callable[..., gym.vector.AsyncVectorEnv[Any, Any]]]:
    """Factory building ``gymnasium.vector.AsyncVectorEnv``; closes at teardown."""
    created: list[gym.vector.AsyncVectorEnv[Any, Any]] = []

    def factory(env_fns: Any, **kwargs: Any) -> gym.vector.AsyncVectorEnv[Any, Any]:
        env = gym.vector.AsyncVectorEnv(env_fns, **kwargs)
        created.append(env)
        return env

    yield factory
    for env in created:
        _close_quietly(env)


# --------------------------------------------------------------------------- leaks


def _helper_pids() -> set[int]:
    """Long-lived multiprocessing helpers that are not leaks (forkserver, tracker)."""
    pids: set[int] = set()
    forkserver_pid = getattr(
        multiprocessing.forkserver._forkserver, "_forkserver_pid", None
    )
    if forkserver_pid:
        pids.add(forkserver_pid)
    tracker_pid = getattr(
        multiprocessing.resource_tracker._resource_tracker, "_pid", None
    )
    if tracker_pid:
        pids.add(tracker_pid)
    return pids


def _process_table() -> dict[int, tuple[int, str]]:
    """Map pid -> (ppid, state) for every process, read from ``/proc/*/stat``."""
    table: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process vanished while we listed
            continue
        # "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
        fields = text[text.rindex(")") + 2 :].split()
        table[int(stat.parent.name)] = (int(fields[1]), fields[0])
    return table


def child_pids() -> dict[int, str]:
    """Descendants of this process (pid -> state, ``Z`` for zombies).

    Processes started through the forkserver are its children, so the walk goes
    through the whole tree; the forkserver and resource tracker themselves are
    long-lived helpers and are left out.
    """
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, str] = {}
    stack = [os.getpid()]
    while stack:
        for pid in children.get(stack.pop(), []):
            found[pid] = table[pid][1]
            stack.append(pid)
    for helper in _helper_pids():
        found.pop(helper, None)
    return found


def shm_files() -> set[str]:
    """Names in ``/dev/shm`` (POSIX shared memory and semaphores)."""
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def live_elsewhere(names: set[str]) -> set[str]:
    """Those of ``names`` (in ``/dev/shm``) that another process tree maps now.

    Under ``pytest -n`` the other test processes create semaphores and segments
    of their own while this one runs (a ``multiprocessing`` queue under spawn
    holds three ``sem.mp-*``): mapped by a process outside this one and its
    descendants, and by none of those, such a name is not this test's leak. A
    leaked name is mapped by nobody, or by this tree.
    """
    # by inode: glibc's sem_open maps a temporary name, then links it to the real one
    inodes: dict[int, str] = {}
    for name in names:
        with contextlib.suppress(OSError):
            inodes[os.stat(f"/dev/shm/{name}").st_ino] = name
    ours = {os.getpid(), *child_pids()}
    mappers: dict[str, set[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            path = f"/proc/{entry}/maps"
            with open(path, encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and "/dev/shm/" in fields[5]:
                        mapped = inodes.get(int(fields[4]))
                        if mapped is not None:
                            mappers.setdefault(mapped, set()).add(int(entry))
        except OSError:  # gone, or not ours to read
            continue
    return {name for name, pids in mappers.items() if not pids & ours}


class LeakChecker:
    """Snapshot of child processes and ``/dev/shm``; assert nothing new remains."""

    def __init__(self) -> None:
        self.pids_before = set(child_pids())
        self.active_before = {p.pid for p in multiprocessing.active_children()}
        self.shm_before = shm_files()

    def new_children(self) -> dict[int, str]:
        return {
            pid: state
            for pid, state in child_pids().items()
            if pid not in self.pids_before
        }

    def assert_no_leaks(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` s for new processes and shm files to go away."""
        deadline = time.monotonic() + timeout
        while True:
            # /proc first: `active_children()` reaps zombies and would hide them.
            leaked = self.new_children()
            new_shm = shm_files() - self.shm_before
            if new_shm:
                new_shm -= live_elsewhere(new_shm)
            if not leaked and not new_shm:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert leaked == {}, f"leaked child processes (pid -> state): {leaked}"
        active = {p.pid for p in multiprocessing.active_children()} - self.active_before
        assert active == set(), f"multiprocessing.active_children() leaked: {active}"
        assert new_shm == set(), f"leaked /dev/shm entries: {sorted(new_shm)}"


@pytest.fixture
def leak_checker() -> LeakChecker:
    """A :class:`LeakChecker` snapshot taken before the test body."""
    gc.collect()
    if not sys.platform.startswith("linux"):
        pytest.skip("leak checks read /proc and /dev/shm (Linux only)")
    return LeakChecker()


@pytest.fixture
def python_sigint_handler() -> Iterator[None]:
    """Python's own Ctrl-C handler for a SIGINT test, whatever ran before it.

    Skips where a SIGINT cannot reach the test: outside the main thread (Python runs
    signal handlers there only) and in pytest-xdist workers (they take a SIGINT as
    the end of the session). A runner (coverage, a plugin) or an earlier test may
    leave another handler installed; these tests are about what a user's Ctrl-C does.
    """
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT tests need the main thread")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("SIGINT tests need a plain pytest run (not pytest-xdist)")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
