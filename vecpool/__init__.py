"""vecpool: a fast, faithful drop-in for ``gymnasium.vector.AsyncVectorEnv``.

Swap ``gymnasium.vector.AsyncVectorEnv`` for :class:`vecpool.AsyncVectorEnv`: same
constructor, methods, errors and results, with several envs per worker process and
every per-step array in shared memory.

The names below are imported on first use (PEP 562), so a worker process, which
imports :mod:`vecpool._worker.host` and with it this package, loads none of the replay
pool, the sampler, the bench or the tuner.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from vecpool import errors
from vecpool._version import __version__
from vecpool.errors import (
    ConcurrentUseError,
    VecPoolError,
    VecPoolPerformanceWarning,
    VecPoolWarning,
    WorkerCrashedError,
)

if TYPE_CHECKING:
    from vecpool._wire.messages import EnvState
    from vecpool.bench.tune import TuneResult, autotune
    from vecpool.check import CheckReport, check_vector_env
    from vecpool.replay.batches import (
        EndedEpisodes,
        EpisodeStats,
        ReplaySample,
        Sequences,
        Transitions,
    )
    from vecpool.replay.classic import Pool
    from vecpool.replay.pool import ReplayPool
    from vecpool.replay.settings import PoolSettings
    from vecpool.replay.wrapper import ReplayPoolWrapper
    from vecpool.sampling.sampler import EpisodeRecord, SampleBatch, Sampler
    from vecpool.vector.async_env import AsyncState, AsyncVectorEnv
    from vecpool.vector.make import VectorEntryPoint, make_vec, vector_entry_point


_LAZY = {
    "AsyncState": "vecpool.vector.async_env",
    "AsyncVectorEnv": "vecpool.vector.async_env",
    "CheckReport": "vecpool.check",
    "EndedEpisodes": "vecpool.replay.batches",
    "EnvState": "vecpool._wire.messages",
    "EpisodeRecord": "vecpool.sampling.sampler",
    "EpisodeStats": "vecpool.replay.batches",
    "Pool": "vecpool.replay.classic",
    "PoolSettings": "vecpool.replay.settings",
    "ReplayPool": "vecpool.replay.pool",
    "ReplayPoolWrapper": "vecpool.replay.wrapper",
    "ReplaySample": "vecpool.replay.batches",
    "SampleBatch": "vecpool.sampling.sampler",
    "Sampler": "vecpool.sampling.sampler",
    "Sequences": "vecpool.replay.batches",
    "Transitions": "vecpool.replay.batches",
    "TuneResult": "vecpool.bench.tune",
    "VectorEntryPoint": "vecpool.vector.make",
    "autotune": "vecpool.bench.tune",
    "check_vector_env": "vecpool.check",
    "make_vec": "vecpool.vector.make",
    "vector_entry_point": "vecpool.vector.make",
}

__all__ = [
    "AsyncState",
    "AsyncVectorEnv",
    "CheckReport",
    "ConcurrentUseError",
    "EndedEpisodes",
    "EnvState",
    "EpisodeRecord",
    "EpisodeStats",
    "Pool",
    "PoolSettings",
    "ReplayPool",
    "ReplayPoolWrapper",
    "ReplaySample",
    "SampleBatch",
    "Sampler",
    "Sequences",
    "Transitions",
    "TuneResult",
    "VecPoolError",
    "VecPoolPerformanceWarning",
    "VecPoolWarning",
    "VectorEntryPoint",
    "WorkerCrashedError",
    "__version__",
    "autotune",
    "check_vector_env",
    "errors",
    "make_vec",
    "vector_entry_point",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        # a submodule, as `import vecpool; vecpool.replay.pool` worked when this file
        # imported everything
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
        msg = f"module 'vecpool' has no attribute {name!r}"
        raise AttributeError(msg) from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    """Every public name, imported or not."""
    return sorted({*globals(), *__all__})


logging.getLogger(__name__).addHandler(logging.NullHandler())
