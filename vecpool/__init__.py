"""vecpool: a fast, faithful drop-in for ``gymnasium.vector.AsyncVectorEnv``.

Swap ``gymnasium.vector.AsyncVectorEnv`` for :class:`vecpool.AsyncVectorEnv`: same
constructor, methods, errors and results, with several envs per worker process and
every per-step array in shared memory.

The names below are imported on first use (PEP 562), so a worker process, which
imports :mod:`vecpool.worker` and with it this package, loads none of the replay
pool, the sampler, the bench or the tuner.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from vecpool import errors
from vecpool.errors import (
    ConcurrentUseError,
    VecPoolError,
    VecPoolWarning,
    WorkerCrashedError,
)

if TYPE_CHECKING:
    from vecpool.async_env import AsyncState, AsyncVectorEnv
    from vecpool.check import CheckReport, check_vector_env
    from vecpool.classic import Pool
    from vecpool.make import VectorEntryPoint, make_vec, vector_entry_point
    from vecpool.pool import EpisodeStats, ReplayPool, Transitions
    from vecpool.protocol import EnvState
    from vecpool.sampler import EpisodeRecord, SampleBatch, Sampler
    from vecpool.tune import TuneResult, autotune
    from vecpool.wrappers import ReplayPoolWrapper

__version__ = "0.1.0"

_LAZY = {
    "AsyncState": "vecpool.async_env",
    "AsyncVectorEnv": "vecpool.async_env",
    "CheckReport": "vecpool.check",
    "EnvState": "vecpool.protocol",
    "EpisodeRecord": "vecpool.sampler",
    "EpisodeStats": "vecpool.pool",
    "Pool": "vecpool.classic",
    "ReplayPool": "vecpool.pool",
    "ReplayPoolWrapper": "vecpool.wrappers",
    "SampleBatch": "vecpool.sampler",
    "Sampler": "vecpool.sampler",
    "Transitions": "vecpool.pool",
    "TuneResult": "vecpool.tune",
    "VectorEntryPoint": "vecpool.make",
    "autotune": "vecpool.tune",
    "check_vector_env": "vecpool.check",
    "make_vec": "vecpool.make",
    "vector_entry_point": "vecpool.make",
}

__all__ = [
    "AsyncState",
    "AsyncVectorEnv",
    "CheckReport",
    "ConcurrentUseError",
    "EnvState",
    "EpisodeRecord",
    "EpisodeStats",
    "Pool",
    "ReplayPool",
    "ReplayPoolWrapper",
    "SampleBatch",
    "Sampler",
    "Transitions",
    "TuneResult",
    "VecPoolError",
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
        # a submodule, as `import vecpool; vecpool.pool` worked when this file
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
