"""Notes on an exception (PEP 678), on every Python this package supports."""

from __future__ import annotations

__all__ = ["add_note"]


def add_note(error: BaseException, text: str) -> None:
    """Append ``text`` to ``error.__notes__``, as ``add_note`` would.

    Written to the instance's ``__dict__``: it works on Python 3.10 (which has no
    ``add_note`` and whose traceback does not print notes: readers print them
    themselves) and on an exception whose ``__setattr__`` refuses, such as a
    frozen dataclass. Notes that are not a list (a string, say) are kept, as one.

    Example:
        >>> error = ValueError("bad")
        >>> add_note(error, "while reading x")
        >>> error.__notes__
        ['while reading x']
    """
    earlier = error.__dict__.get("__notes__")
    if earlier is None:
        earlier = []
    elif isinstance(earlier, str) or not isinstance(earlier, (list, tuple)):
        earlier = [str(earlier)]  # add_note would raise: kept, as one note
    error.__dict__["__notes__"] = [*earlier, text]
