"""vecpool: a fast, faithful drop-in for ``gymnasium.vector.AsyncVectorEnv``.

Swap ``gymnasium.vector.AsyncVectorEnv`` for :class:`vecpool.AsyncVectorEnv`: same
constructor, methods, errors and results, with several envs per worker process and
every per-step array in shared memory.
"""

from __future__ import annotations

import logging

from vecpool import errors
from vecpool.async_env import AsyncState, AsyncVectorEnv
from vecpool.classic import Pool
from vecpool.errors import VecPoolError, VecPoolWarning, WorkerCrashedError
from vecpool.make import VectorEntryPoint, make_vec, vector_entry_point
from vecpool.pool import EpisodeStats, ReplayPool, Transitions
from vecpool.sampler import EpisodeRecord, SampleBatch, Sampler
from vecpool.tune import TuneResult, autotune
from vecpool.worker import EnvState
from vecpool.wrappers import ReplayPoolWrapper

__version__ = "0.1.0"

__all__ = [
    "AsyncState",
    "AsyncVectorEnv",
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
    "errors",
    "make_vec",
    "vector_entry_point",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
