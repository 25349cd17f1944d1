"""The exceptions the toy envs of :mod:`vecpool.testing` raise on purpose."""

from __future__ import annotations

__all__ = ["DeliberateError", "DeliberateErrorWithArgs"]


class DeliberateError(Exception):
    """A plain exception type raised on purpose by the toy environments."""


class DeliberateErrorWithArgs(Exception):
    """An exception whose ``__init__`` needs extra arguments.

    It deliberately does not define ``__reduce__``: ``pickle`` rebuilds exceptions
    as ``cls(*self.args)``, and ``self.args`` only holds the message, so unpickling
    fails with :class:`TypeError`. Vector envs must still report it sensibly.

    Attributes:
        code: An arbitrary error code.
        detail: Arbitrary extra text.
    """

    def __init__(self, message: str, code: int, detail: str) -> None:
        """Store the message and the extra fields."""
        super().__init__(message)
        self.code = code
        self.detail = detail
