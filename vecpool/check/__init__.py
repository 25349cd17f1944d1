"""A conformance checker for any Gymnasium vector env: :func:`check_vector_env`.

It steps the env under test and a ``SyncVectorEnv`` reference in lockstep with the
same seeds and actions, checks every result against the rules of Gymnasium's vector
API (spaces, info masks, the declared autoreset mode, copy semantics, argument
handling, ``close()``) and returns a :class:`CheckReport`. See ``docs/checking.md``.
"""

from __future__ import annotations

from vecpool.check.report import CHECKS, CheckFailure, CheckReport, VectorEnvCheckError
from vecpool.check.runner import DEFAULT_NUM_STEPS, check_vector_env

__all__ = [
    "CHECKS",
    "DEFAULT_NUM_STEPS",
    "CheckFailure",
    "CheckReport",
    "VectorEnvCheckError",
    "check_vector_env",
]
