"""The replay pool's settings: one object every way of making a pool maps onto.

:class:`~vecpool.ReplayPool`, :class:`~vecpool.ReplayPoolWrapper`, the classic
:class:`~vecpool.Pool` (which keeps the original names and ``random=True``) and
``vecpool collect`` (whose ``--random-routing`` is ``random``) each build one
:class:`PoolSettings`; the pool checks it once, here, with one set of messages.
"""

from __future__ import annotations

import dataclasses
import math

from vecpool._util.validation import check_int

__all__ = ["PoolSettings"]


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
        ValueError: `clearing_freq` and `window_size_` go together: set both ...

    Attributes:
        pool_size: Total capacity (each of ``num_envs`` sub-pools holds
            :meth:`capacity`).
        window_size: See :class:`~vecpool.ReplayPool`, whose arguments these are.
        clearing_freq: See :class:`~vecpool.ReplayPool`.
        window_size_: See :class:`~vecpool.ReplayPool`.
        random: See :class:`~vecpool.ReplayPool`.
        seed: See :class:`~vecpool.ReplayPool`.
        store_next_obs: See :class:`~vecpool.ReplayPool`.
    """

    pool_size: int
    window_size: int | None = None
    clearing_freq: int | None = None
    window_size_: int | None = None
    random: bool = False
    seed: int | None = None
    store_next_obs: bool = True

    def capacity(self, num_envs: int) -> int:
        """Transitions each of ``num_envs`` sub-pools holds."""
        return math.ceil(self.pool_size / num_envs)

    def checked(self, num_envs: int) -> PoolSettings:
        """These settings, checked for ``num_envs`` sub-pools (bools made bools).

        Raises:
            ValueError: On an invalid setting, named in the message.
        """
        pool_size = check_int("pool_size", self.pool_size, 1)
        capacity = math.ceil(pool_size / num_envs)
        window_size = (
            None
            if self.window_size is None
            else check_int("window_size", self.window_size, 1, capacity)
        )
        if (self.clearing_freq is None) != (self.window_size_ is None):
            msg = (
                "`clearing_freq` and `window_size_` go together: set both or neither, "
                f"got clearing_freq={self.clearing_freq!r}, "
                f"window_size_={self.window_size_!r}."
            )
            raise ValueError(msg)
        clearing_freq = (
            None
            if self.clearing_freq is None
            else check_int("clearing_freq", self.clearing_freq, 1)
        )
        window_size_ = (
            None
            if self.window_size_ is None
            else check_int("window_size_", self.window_size_, 1)
        )
        return dataclasses.replace(
            self,
            pool_size=pool_size,
            window_size=window_size,
            clearing_freq=clearing_freq,
            window_size_=window_size_,
            random=bool(self.random),
            store_next_obs=bool(self.store_next_obs),
        )
