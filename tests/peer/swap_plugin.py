"""pytest plugin that runs Gymnasium's vector tests against ``vecpool.AsyncVectorEnv``.

Loaded by ``tests/peer/run.py`` with ``-p swap_plugin``. Importing it rebinds
``gymnasium.vector.AsyncVectorEnv`` before any test module is collected: the tests do
``from gymnasium.vector import AsyncVectorEnv``, and ``gymnasium.make_vec(...,
vectorization_mode="async")`` looks the name up at call time, so both paths reach ours.
After collection it fails the run if a test module still holds Gymnasium's class, and
it deselects parametrizations that only exercise ``SyncVectorEnv`` (set
``INCLUDE_SYNC=1`` to keep them).

Not a test module (no ``test_`` prefix, no conftest): the default ``pytest`` run of our
own suite never collects it.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import gymnasium
import gymnasium.vector
import pytest
from gymnasium.envs.registration import VectorizeMode

import vecpool
from vecpool._util import threads

ORIGINAL_ASYNC = gymnasium.vector.AsyncVectorEnv
ORIGINAL_SYNC = gymnasium.vector.SyncVectorEnv
PLACEMENT = os.environ.get("VECPOOL_PEER_PLACEMENT", "defaults")
"""Where the envs run, wherever a test leaves the placement to the defaults:
``defaults`` (vecpool's: on a 2-CPU machine the parent steps half of them),
``workers`` (``parent_envs=0``: every env in a worker process) or ``parent_share``
(the parent steps half of them and one worker the rest, on any machine)."""


class AsyncVectorEnv(vecpool.AsyncVectorEnv):
    """vecpool's class with the parent stepping half the envs (``parent_share``).

    Named as Gymnasium's class, whose messages the tests match.
    """

    def __init__(self, env_fns: Any, *args: Any, **kwargs: Any) -> None:
        """Add ``parent_envs`` and ``num_workers=1`` unless a custom worker runs."""
        worker = kwargs.get("worker", args[4] if len(args) > 4 else None)
        if worker is None and len(env_fns) >= 2:
            kwargs.setdefault("parent_envs", len(env_fns) // 2)
            kwargs.setdefault("num_workers", 1)
        super().__init__(env_fns, *args, **kwargs)


class WorkersAsyncVectorEnv(vecpool.AsyncVectorEnv):
    """vecpool's class with every env in a worker process (``workers``)."""

    def __init__(self, env_fns: Any, *args: Any, **kwargs: Any) -> None:
        """Add ``parent_envs=0`` unless a custom worker runs (it has no share)."""
        worker = kwargs.get("worker", args[4] if len(args) > 4 else None)
        if worker is None:
            kwargs.setdefault("parent_envs", 0)
        super().__init__(env_fns, *args, **kwargs)


WorkersAsyncVectorEnv.__name__ = WorkersAsyncVectorEnv.__qualname__ = "AsyncVectorEnv"
PLACEMENTS: dict[str, type[Any]] = {
    "defaults": vecpool.AsyncVectorEnv,
    "workers": WorkersAsyncVectorEnv,
    "parent_share": AsyncVectorEnv,
}
if PLACEMENT not in PLACEMENTS:
    message = f"VECPOOL_PEER_PLACEMENT={PLACEMENT!r}: {'|'.join(PLACEMENTS)}"
    raise ValueError(message)
REPLACEMENT: type[Any] = PLACEMENTS[PLACEMENT]

gymnasium.vector.AsyncVectorEnv = REPLACEMENT  # type: ignore[misc]
# the machine-dependent advice (vecpool.VecPoolPerformanceWarning) is not what
# Gymnasium's tests count: never given in this run
threads._warned = True


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which gymnasium, which class and which tests this run uses."""
    return [
        f"gymnasium {gymnasium.__version__} from {os.path.dirname(gymnasium.__file__)}",
        f"AsyncVectorEnv under test: {REPLACEMENT.__module__}."
        f"{REPLACEMENT.__qualname__} (vecpool {vecpool.__version__}), "
        f"placement {PLACEMENT}",
        f"tests from: {os.environ.get('VECPOOL_PEER_SOURCE', '?')}",
    ]


def _is_sync_only(value: object) -> bool:
    """Whether a parametrize value selects Gymnasium's SyncVectorEnv."""
    if value is ORIGINAL_SYNC or value is VectorizeMode.SYNC:
        return True
    if isinstance(value, functools.partial) and value.func is ORIGINAL_SYNC:
        return True
    return isinstance(value, str) and value == "sync"


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Deselect the Sync-only parametrizations (they don't exercise vecpool)."""
    if os.environ.get("INCLUDE_SYNC") == "1":
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params: dict[str, object] = callspec.params if callspec is not None else {}
        sync_only = any(_is_sync_only(value) for value in params.values())
        (drop if sync_only else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail loudly if a collected test module kept Gymnasium's own class."""
    stale = sorted(
        name
        for name, module in list(sys.modules.items())
        if name.startswith("tests.")
        and getattr(module, "AsyncVectorEnv", None) is ORIGINAL_ASYNC
    )
    if stale:
        message = f"test modules still bound to gymnasium's AsyncVectorEnv: {stale}"
        raise pytest.UsageError(message)
