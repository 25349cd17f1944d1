"""Loading ``module:callable`` targets named on a command line (policies, factories)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["load_callable"]


def load_callable(
    spec: str, *, what: str, option: str, error: type[ValueError] = ValueError
) -> Callable[..., Any]:
    """Import the callable named ``"module:attr"`` (or ``"module:obj.attr"``).

    The current directory is searched first, as ``python -m`` does.

    Args:
        spec: ``"package.module:function"``.
        what: What the callable is, for messages (``"policy"``).
        option: The command-line option that named it, for messages.
        error: The ``ValueError`` subclass raised (``vecpool collect`` passes its
            ``CollectArgumentError``); errors the module raises itself propagate.

    Returns:
        The callable.

    Raises:
        ValueError: ``error``, if ``spec`` is malformed, the module cannot be
            imported, the attribute is missing or it is not callable (the message
            says which, naming ``option``).
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        msg = f"{option} must look like 'module:callable', got {spec!r}."
        raise error(msg)
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)  # `--policy mymod:act` finds ./mymod.py, as python -m
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        msg = (
            f"Cannot import the {what} module {module_name!r} of {spec!r}: {exc}. "
            f"It is looked up in the current directory ({here}) and on sys.path: "
            "run from the directory holding it, or set PYTHONPATH."
        )
        raise error(msg) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            msg = f"Cannot load the {what} {spec!r}: {target!r} has no {part!r}."
            raise error(msg) from exc
    if not callable(target):
        msg = f"The {what} {spec!r} is not callable: {target!r}."
        raise error(msg)
    loaded: Callable[..., Any] = target
    return loaded
