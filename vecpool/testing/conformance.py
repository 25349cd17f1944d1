"""The conformance checker as an assertion (it loads :mod:`vecpool.check`).

:mod:`vecpool.testing` imports this module on first use of its names, so a worker
that imports the toy envs never loads the checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium.vector import VectorEnv

from vecpool.check import CheckReport, check_vector_env

__all__ = ["assert_vector_env_conforms"]


def assert_vector_env_conforms(
    make_vector_env: Callable[[], VectorEnv[Any, Any, Any]], **kwargs: Any
) -> CheckReport:
    """Run :func:`vecpool.check_vector_env` and raise if any check failed.

    Args:
        make_vector_env: Builds the vector env under test (called more than once).
        **kwargs: Passed on (``reference``, ``num_steps``, ``seed``, ``skip``,
            ``strict``, ``reset_options``, ``ignore_info_keys``).

    Returns:
        The :class:`vecpool.check.CheckReport`, when every check passed.

    Raises:
        vecpool.check.VectorEnvCheckError: An ``AssertionError`` holding the report.
    """
    report: CheckReport = check_vector_env(make_vector_env, **kwargs)
    return report.raise_if_failed()
