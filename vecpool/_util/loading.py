"""Loading what a command line names: callables, modules, env ids.

``module:callable`` targets (policies, factories), modules to import first, and env
ids as ``gymnasium.make`` takes them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym

__all__ = ["import_modules", "load_callable", "resolve_env_id"]


def import_modules(
    names: list[str] | None, *, option: str, error: type[ValueError] = ValueError
) -> None:
    """Import each module of ``names`` (a package that registers envs on import).

    Raises:
        ValueError: ``error``, naming ``option`` and the module, if one cannot be
            imported.
    """
    for name in names or []:
        _on_path()
        try:
            importlib.import_module(name)
        except ImportError as exc:
            msg = (
                f"{option} {name}: cannot import {name!r}: {exc}. Install it (pip "
                "install ...) or check the name."
            )
            raise error(msg) from exc


def resolve_env_id(
    env_id: str, *, what: str, error: type[ValueError] = ValueError
) -> Any:
    """The ``EnvSpec`` of ``env_id``, in any form ``gymnasium.make`` takes.

    ``"module:EnvId-v0"`` imports ``module`` first (it registers its envs), as
    ``gymnasium.make`` does; a plain id must be registered already (import its
    package with ``--import PKG``).

    Args:
        env_id: ``"EnvId-v0"``, ``"namespace/EnvId-v0"`` or ``"module:EnvId-v0"``.
        what: How the command line names it, for messages (``"ENV_ID"``).
        error: The ``ValueError`` subclass raised.

    Returns:
        The spec (``gymnasium.envs.registration.EnvSpec``).

    Raises:
        ValueError: ``error``, if the module cannot be imported or the id is not
            registered; the message says how to fix it.
    """
    module, colon, name = env_id.partition(":")
    if colon:
        _on_path()
        try:
            importlib.import_module(module)
        except ImportError as exc:
            msg = f"{what} {env_id!r}: cannot import {module!r}: {exc}."
            raise error(msg) from exc
    else:
        name = env_id
    try:
        return gym.spec(name)
    except gym.error.Error as exc:
        hint = (
            ""
            if colon
            else (
                " If a package registers it on import, name it as 'package:"
                f"{name}' or pass --import package."
            )
        )
        reason = str(exc).rstrip(".")
        msg = f"{what} {env_id!r} is not a registered env id: {reason}.{hint}"
        raise error(msg) from exc


def _on_path() -> None:
    """The current directory first on ``sys.path``, as ``python -m`` has it."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


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
