"""The replay pool's settings: one object every way of making a pool maps onto.

:class:`~vecpool.ReplayPool`, :class:`~vecpool.ReplayPoolWrapper`, the classic
:class:`~vecpool.Pool` (which keeps the original names and ``random=True``) and
``vecpool collect`` (whose ``--random-routing`` is ``random``) each build one
:class:`PoolSettings`; the pool checks it once, here, with one set of messages.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings

import numpy as np

from vecpool._util.validation import check_int

__all__ = ["RECENT_EPISODES", "PoolSettings", "renamed_clearing_size"]

RECENT_EPISODES = 10_000
"""How many of the newest ended episodes :meth:`ReplayPool.recent_episode_stats`
can cover (their returns and lengths are kept, and saved with the pool)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PoolSettings:
    """How a replay pool keeps what it receives (docs/replay-pool.md).

    Example:
        >>> settings = PoolSettings(pool_size=10, window_size=4).checked(num_envs=2)
        >>> settings.capacity(num_envs=2), settings.window_size, settings.random
        (5, 4, False)
        >>> PoolSettings(pool_size=10, clearing_freq=5).checked(num_envs=2)
        Traceback (most recent call last):
        ...
        ValueError: `clearing_freq` and `clearing_size` go together: set both ...

    Attributes:
        pool_size: Total capacity (each of ``num_envs`` sub-pools holds
            :meth:`capacity`).
        window_size: See :class:`~vecpool.ReplayPool`, whose arguments these are.
        clearing_freq: See :class:`~vecpool.ReplayPool`.
        clearing_size: See :class:`~vecpool.ReplayPool` (the original ``Pool``'s
            ``window_size_``).
        random: See :class:`~vecpool.ReplayPool`.
        seed: See :class:`~vecpool.ReplayPool`.
        store_next_obs: See :class:`~vecpool.ReplayPool`.
        alpha: See :class:`~vecpool.ReplayPool` (prioritized replay; ``None``: off).
        frame_stack: See :class:`~vecpool.ReplayPool` (frames stored once;
            ``None``: off).
    """

    pool_size: int
    window_size: int | None = None
    clearing_freq: int | None = None
    clearing_size: int | None = None
    random: bool = False
    seed: int | None = None
    store_next_obs: bool = True
    alpha: float | None = None
    frame_stack: int | None = None

    def capacity(self, num_envs: int) -> int:
        """Transitions each of ``num_envs`` sub-pools holds."""
        return math.ceil(self.pool_size / num_envs)

    def checked(self, num_envs: int) -> PoolSettings:
        """These settings, checked for ``num_envs`` sub-pools (bools made bools).

        Raises:
            ValueError: On an invalid setting, named in the message.
        """
        random = _flag("random", self.random)  # first: the checks below read it
        store_next_obs = _flag("store_next_obs", self.store_next_obs)
        pool_size = check_int("pool_size", self.pool_size, 1)
        capacity = math.ceil(pool_size / num_envs)
        window_size = (
            None
            if self.window_size is None
            else check_int("window_size", self.window_size, 1, capacity)
        )
        if (self.clearing_freq is None) != (self.clearing_size is None):
            msg = (
                "`clearing_freq` and `clearing_size` go together: set both or "
                f"neither, got clearing_freq={self.clearing_freq!r}, "
                f"clearing_size={self.clearing_size!r}."
            )
            raise ValueError(msg)
        clearing_freq = (
            None
            if self.clearing_freq is None
            else check_int("clearing_freq", self.clearing_freq, 1)
        )
        clearing_size = (
            None
            if self.clearing_size is None
            else check_int("clearing_size", self.clearing_size, 1)
        )
        alpha: object = self.alpha
        if alpha is not None:
            if (
                isinstance(alpha, bool | np.bool_)
                or not isinstance(alpha, numbers.Real)
                or not math.isfinite(alpha)
                or alpha < 0
            ):
                msg = (
                    f"`alpha` must be a finite number >= 0 (the priority exponent; "
                    f"0.6 in Schaul et al. 2016), or None for uniform replay, got "
                    f"{alpha!r}."
                )
                raise ValueError(msg)
            alpha = float(alpha)
        frame_stack = (
            None
            if self.frame_stack is None
            else check_int("frame_stack", self.frame_stack, 1)
        )
        if frame_stack is not None and self.random:
            msg = (
                "`frame_stack` needs each env's rows in order, which `random=True` "
                "routing breaks: drop one of the two."
            )
            raise ValueError(msg)
        return dataclasses.replace(
            self,
            frame_stack=frame_stack,
            alpha=alpha,
            pool_size=pool_size,
            window_size=window_size,
            clearing_freq=clearing_freq,
            clearing_size=clearing_size,
            random=random,
            store_next_obs=store_next_obs,
        )


def _flag(name: str, value: object) -> bool:
    """``value`` as a bool, or a ValueError naming ``name`` (``"no"`` is truthy)."""
    if not isinstance(value, bool | np.bool_):
        msg = f"`{name}` must be True or False, got {value!r}."
        raise ValueError(msg)
    return bool(value)


def renamed_clearing_size(
    caller: str, clearing_size: int | None, window_size_: int | None
) -> int | None:
    """``clearing_size``, or the value of its deprecated name ``window_size_``.

    ``ReplayPool``, ``ReplayPoolWrapper`` and ``collect`` called it ``window_size_``
    (the original ``Pool``'s name, which :class:`~vecpool.Pool` keeps) until issue
    29; they still accept it, with a :class:`DeprecationWarning`. ``None`` is "not
    given" for both.

    Example:
        >>> renamed_clearing_size("ReplayPool", 5, None)
        5
        >>> renamed_clearing_size("ReplayPool", 5, 5)
        Traceback (most recent call last):
        ...
        TypeError: `ReplayPool` got both `clearing_size=5` and `window_size_=5`, ...

    Args:
        caller: The name the messages give the function or class called.
        clearing_size: The ``clearing_size`` argument.
        window_size_: The deprecated ``window_size_`` argument.

    Returns:
        The one of the two that was given, or ``None``.

    Raises:
        TypeError: If both were given.
    """
    if window_size_ is None:
        return clearing_size
    if clearing_size is not None:
        msg = (
            f"`{caller}` got both `clearing_size={clearing_size!r}` and "
            f"`window_size_={window_size_!r}`, the old name of the same setting: "
            "pass only `clearing_size`."
        )
        raise TypeError(msg)
    warnings.warn(
        f"`{caller}(window_size_=...)` is deprecated: the setting is now called "
        f"`clearing_size`; pass `clearing_size={window_size_!r}`.",
        DeprecationWarning,
        stacklevel=3,  # the caller of `caller`
    )
    return window_size_
