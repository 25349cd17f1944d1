"""Picklable toy environments and conformance helpers for testing vector envs.

Everything here is importable by name, so ``spawn`` and ``forkserver`` workers can
rebuild the environments (classes defined inside test modules cannot be imported by
child processes when pytest runs with ``--import-mode=importlib``). Build env fns with
:func:`functools.partial` or :func:`make_env_fns`::

    >>> import functools
    >>> from vecpool.testing import CountingEnv, make_env_fns
    >>> env_fns = make_env_fns(3, obs_kind="dict", max_steps=10)
    >>> env = env_fns[0]()
    >>> obs, info = env.reset(seed=1)
    >>> sorted(obs)
    ['count', 'position']
    >>> fn = functools.partial(CountingEnv, obs_kind="image")
    >>> fn().observation_space.shape
    (8, 8, 3)

Every environment is deterministic given its seed and actions: all randomness comes
from ``self.np_random``. Two vector implementations fed the same env fns, seeds and
actions must therefore return identical results, which :func:`assert_same_rollout`
checks step by step.

The package, by concern (every name is also importable from here, as it was from
the single module it replaces):

* :mod:`vecpool.testing.envs`: the toy envs (:class:`CountingEnv`, ...) and
  :func:`make_env_fns`;
* :mod:`vecpool.testing.faults`: envs that fail on purpose and
  :class:`WorkerKiller`;
* :mod:`vecpool.testing.errors`: the exceptions they raise on purpose;
* :mod:`vecpool.testing.assertions`: exact comparisons of results and rollouts;
* :mod:`vecpool.testing.conformance`: :func:`assert_vector_env_conforms`; it and the
  broken vector envs of :mod:`vecpool.check.broken` load on first use, so a worker
  that imports a toy env never loads the checker;
* :mod:`vecpool.testing.plugin`: the pytest plugin; its ``vector_env_checker``
  fixture is also defined here whenever pytest is imported, so
  ``pytest_plugins = ["vecpool.testing"]`` registers it.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from vecpool.testing.assertions import (
    assert_same_data,
    assert_same_partial_reset,
    assert_same_rollout,
)
from vecpool.testing.envs import (
    ACTION_KINDS,
    OBS_KINDS,
    ActionEchoEnv,
    CountingEnv,
    InfoKindsEnv,
    MissionEnv,
    MissionSpace,
    MixedLeavesEnv,
    SlowEnv,
    StepResult,
    make_env_fns,
)
from vecpool.testing.errors import DeliberateError, DeliberateErrorWithArgs
from vecpool.testing.faults import (
    CustomExceptionEnv,
    ExitingEnv,
    IncarnationEnv,
    RaisingEnv,
    UnpicklableInfoEnv,
    WorkerKiller,
    kill_worker,
    kill_worker_later,
)

if TYPE_CHECKING:  # imported on first use by __getattr__ below
    from vecpool.check.broken import (
        BROKEN_ENVS,
        AliasingObservationsVectorEnv,
        MutatingOptionsVectorEnv,
        ShuffledObservationsVectorEnv,
        WrongAutoresetStepVectorEnv,
        WrongInfoMasksVectorEnv,
    )
    from vecpool.testing.conformance import assert_vector_env_conforms

if "pytest" in sys.modules:  # a pytest plugin when pytest runs: opt in with
    # `pytest_plugins = ["vecpool.testing"]` in a conftest.py
    from vecpool.testing.plugin import vector_env_checker as vector_env_checker

__all__ = [
    "ACTION_KINDS",
    "BROKEN_ENVS",
    "OBS_KINDS",
    "ActionEchoEnv",
    "AliasingObservationsVectorEnv",
    "CountingEnv",
    "CustomExceptionEnv",
    "DeliberateError",
    "DeliberateErrorWithArgs",
    "ExitingEnv",
    "IncarnationEnv",
    "InfoKindsEnv",
    "MissionEnv",
    "MissionSpace",
    "MixedLeavesEnv",
    "MutatingOptionsVectorEnv",
    "RaisingEnv",
    "ShuffledObservationsVectorEnv",
    "SlowEnv",
    "StepResult",
    "UnpicklableInfoEnv",
    "WorkerKiller",
    "WrongAutoresetStepVectorEnv",
    "WrongInfoMasksVectorEnv",
    "assert_same_data",
    "assert_same_partial_reset",
    "assert_same_rollout",
    "assert_vector_env_conforms",
    "kill_worker",
    "kill_worker_later",
    "make_env_fns",
]

_ON_FIRST_USE = {
    "assert_vector_env_conforms": "vecpool.testing.conformance",
    **dict.fromkeys(
        (
            "BROKEN_ENVS",
            "AliasingObservationsVectorEnv",
            "MutatingOptionsVectorEnv",
            "ShuffledObservationsVectorEnv",
            "WrongAutoresetStepVectorEnv",
            "WrongInfoMasksVectorEnv",
        ),
        "vecpool.check.broken",
    ),
}
"""The names that need the checker, and the module each comes from."""


def __getattr__(name: str) -> Any:
    """The names of :data:`_ON_FIRST_USE`, imported on first use.

    Worker processes import this package for its toy envs; they never load the
    checker.
    """
    module = _ON_FIRST_USE.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)
