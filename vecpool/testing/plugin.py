"""The pytest plugin of :mod:`vecpool.testing`: the ``vector_env_checker`` fixture.

:mod:`vecpool.testing` re-exports the fixture whenever pytest is imported, so
``pytest_plugins = ["vecpool.testing"]`` (or ``-p vecpool.testing``) registers it;
``-p vecpool.testing.plugin`` does too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from vecpool.check import check_vector_env

__all__ = ["vector_env_checker"]


@pytest.fixture
def vector_env_checker() -> Callable[..., Any]:
    """A fixture that runs :func:`vecpool.check_vector_env` in a test.

    ``vector_env_checker(make_vector_env, **kwargs)`` fails the test with the
    report's text if any check failed, and returns the report.
    """

    def check(make_vector_env: Callable[[], Any], **kwargs: Any) -> Any:
        report = check_vector_env(make_vector_env, **kwargs)
        if not report.ok:
            pytest.fail(str(report), pytrace=False)
        return report

    return check
