"""The replay pool: preallocated per-env sub-pools of transitions (pure numpy).

Semantics: docs/replay-pool.md. Each of ``num_envs`` sub-pools is a ring of
``capacity = ceil(pool_size / num_envs)`` transitions (plus one spare slot, so a
sub-pool can hold the appended transition before the overflow rule trims it; with
``frame_stack=K``, ``K`` spare slots, vecpool/replay/frames.py). Every field is one
array per leaf of its space, one row per slot of every sub-pool; adding a vector
step is a handful of slice or fancy-indexed writes, whatever the number of envs.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import NATIVE_LEAVES, is_native, leaves, make_views
from vecpool._util.validation import check_int
from vecpool.replay import files as pool_files
from vecpool.replay.batches import EpisodeStats, ReplaySample, Sequences, Transitions
from vecpool.replay.files import COUNTERS, per_row
from vecpool.replay.frames import FrameStore
from vecpool.replay.minari import to_minari
from vecpool.replay.portable import leaf_paths
from vecpool.replay.settings import (
    RECENT_EPISODES,
    PoolSettings,
    renamed_clearing_size,
)
from vecpool.replay.storage import (
    check_strings,
    flatten_stored,
    fresh_objects,
    integer_bounds,
    is_storable,
    same_value,
    storage_leaves,
)
from vecpool.replay.sumtree import SumTree

__all__ = [
    "RECENT_EPISODES",
    "EpisodeStats",
    "ReplayPool",
    "ReplaySample",
    "Sequences",
    "Transitions",
]

_SMALL_BATCH = 64  # action batches up to this size are range-checked as lists


class ReplayPool:
    """Preallocated, windowed per-env sub-pools of transitions.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> pool = ReplayPool(spaces.Box(-1, 1, (2,)), spaces.Discrete(3), 2, 6)
        >>> pool.capacity
        3
        >>> for step in range(5):
        ...     obs = np.full((2, 2), step, dtype=np.float32)
        ...     pool.add(obs, np.array([0, 1]), obs + 1, np.ones(2),
        ...              np.zeros(2, bool), np.zeros(2, bool))
        >>> pool.lengths.tolist(), len(pool)
        ([3, 3], 6)
        >>> pool.get_pool().obs[:3, 0].tolist()  # sub-pool 0, oldest to newest
        [2.0, 3.0, 4.0]

    Args:
        observation_space: The single-env observation space.
        action_space: The single-env action space.
        num_envs: Number of sub-pools (one per env).
        pool_size: Total capacity; each sub-pool holds ``ceil(pool_size / num_envs)``.
        window_size: On overflow, keep only the most recent ``window_size``
            transitions of the sub-pool (``1..capacity``); ``None`` drops the oldest.
        clearing_freq: Every ``clearing_freq`` transitions a sub-pool receives ...
        clearing_size: ... drop its ``clearing_size`` oldest transitions (set
            both or neither).
        random: Route each transition to sub-pool ``j`` with probability
            proportional to ``1 / (len_j + 1)`` (balances the sub-pools, but breaks
            their per-env time order) instead of to its env's sub-pool.
        seed: Seed of the routing and sampling generator.
        store_next_obs: If ``False``, store each observation once and derive
            ``next_obs`` from the following row of the sub-pool wherever it equals
            it (the episode continued); other next observations (episode ends,
            partial resets) are kept apart. Halves memory for image observations;
            the contents are identical.
        alpha: Prioritized replay (proportional, Schaul et al. 2016): rows are
            drawn with probability ``p_i ** alpha / sum_j p_j ** alpha``; a new row
            gets the largest priority given so far (1 at first), and
            :meth:`update_priorities` sets them. ``None`` (the default): uniform.
        frame_stack: Observations are stacks of this many frames along axis 0
            (what ``gymnasium.wrappers.FrameStackObservation`` returns): store each
            frame once and rebuild ``obs`` and ``next_obs`` when read,
            bit-identical to what was added (vecpool/replay/frames.py). A 1M-row
            pool of ``(4, 84, 84)`` uint8 stacks takes 6.6 GiB instead of 56 GB.
            Needs a ``Box`` observation space whose first axis is ``frame_stack``;
            ``store_next_obs`` does not apply.
        window_size_: Deprecated name of ``clearing_size`` (the original
            ``Pool``'s); gives a :class:`DeprecationWarning`.

    Raises:
        ValueError: On an invalid argument (named in the message) or a space that
            cannot be stored.
        TypeError: If both ``clearing_size`` and ``window_size_`` are given.
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        num_envs: int,
        pool_size: int,
        window_size: int | None = None,
        clearing_freq: int | None = None,
        clearing_size: int | None = None,
        random: bool = False,
        seed: int | None = None,
        store_next_obs: bool = True,
        alpha: float | None = None,
        frame_stack: int | None = None,
        *,
        window_size_: int | None = None,
    ) -> None:
        """Validate the arguments and preallocate the storage."""
        clearing_size = renamed_clearing_size("ReplayPool", clearing_size, window_size_)
        self.num_envs = check_int("num_envs", num_envs, 1)
        settings = PoolSettings(
            pool_size,
            window_size,
            clearing_freq,
            clearing_size,
            random,
            seed,
            store_next_obs,
            alpha,
            frame_stack,
        ).checked(self.num_envs)
        self.settings = settings
        self.pool_size = settings.pool_size
        self.capacity = settings.capacity(self.num_envs)
        self.window_size = settings.window_size
        self.clearing_freq = settings.clearing_freq
        self.clearing_size = settings.clearing_size
        self.random = settings.random
        # a frame store derives next_obs its own way: the setting does not apply
        self.store_next_obs = (
            settings.store_next_obs or settings.frame_stack is not None
        )
        self.alpha = settings.alpha
        self.frame_stack = settings.frame_stack
        if not is_storable(observation_space):
            msg = (
                f"`observation_space` {observation_space} cannot be stored: an "
                "array space of its leaves has no fixed shape or dtype."
            )
            raise ValueError(msg)
        if not is_native(action_space):
            msg = (
                f"`action_space` {action_space} cannot be stored: a ReplayPool "
                "stores Box, Discrete, MultiDiscrete and MultiBinary actions and "
                "Dict/Tuple nests of them."
            )
            raise ValueError(msg)
        self.observation_space = observation_space
        self.action_space = action_space
        self._rng = np.random.default_rng(seed)
        # Slot k of sub-pool j is row k * num_envs + j of every array: sub-pools fill
        # at about the same pace, so one vector step writes neighbouring rows (cache
        # friendly), and a row is one flat index, the cheapest fancy index there is.
        # a frame-stacked ring keeps K - 1 more slots: the rows the oldest row's
        # stack is rebuilt from (vecpool/replay/frames.py)
        self._slots = self.capacity + (self.frame_stack or 1)
        rows = self.num_envs * self._slots
        self._base = np.arange(self.num_envs, dtype=np.int64)
        # every leaf of the observations: arrays, and Text as fixed-width unicode,
        # other leaves (Graph, Sequence, custom) as objects (storage_leaves)
        obs_leaves = storage_leaves(observation_space)
        self._frames = _frame_store(
            observation_space, self.frame_stack, self.num_envs, self._slots
        )
        self._obs_shapes = [shape for _, shape in obs_leaves]
        self._action_shapes = [shape for _, shape in leaves(action_space)]
        if self._frames is not None:
            obs_leaves = []  # the frame store holds the observations
        self._obs = [_empty((rows, *s), d) for d, s in obs_leaves]
        # Text leaves: what is added must fit their width (never stored cut short)
        paths = leaf_paths(observation_space)
        self._text_leaves = [
            (k, paths[k]) for k, (d, _) in enumerate(obs_leaves) if d.kind == "U"
        ]
        self._action = [np.zeros((rows, *s), d) for d, s in leaves(action_space)]
        self._reward = np.zeros(rows, np.float64)
        self._terminated = np.zeros(rows, np.bool_)
        self._truncated = np.zeros(rows, np.bool_)
        # `_starts[row]`: the row is not its env's episode's next step after the
        # sub-pool's previous row (an episode start, a reset, an abort, a restart):
        # what n-step windows and sequences stop at. `_fresh[env]`: the env's next
        # row will be one. Hot-path adds set both late, in `_settle`.
        self._starts = np.ones(rows, np.bool_)
        self._fresh = np.ones(self.num_envs, np.bool_)
        # priorities ** alpha, a leaf per row: 0 for every row not held
        self._tree = None if self.alpha is None else SumTree(rows)
        self._max_priority = 1.0
        if self.store_next_obs:
            self._next_obs = [_empty(array.shape, array.dtype) for array in self._obs]
        else:
            # next_obs of the newest row of each sub-pool, and of rows whose next
            # observation is not the following row's (kept in a growable store)
            self._tail = [_empty((self.num_envs, *s), d) for d, s in obs_leaves]
            self._own_next = np.full(rows, -1, np.int64)
            self._extra = [_empty((0, *s), d) for d, s in obs_leaves]
            self._free: list[int] = []
        # each sub-pool's rows are [end - length, end) modulo slots
        self._end = np.zeros(self.num_envs, np.int64)
        self._length = np.zeros(self.num_envs, np.int64)
        self._envs = np.arange(self.num_envs, dtype=np.int64)
        # The hot path writes at `_row` (= base + end), steps it with one lookup in
        # `_next_row`, and defers the counters: `_pending` adds await `_sync()`.
        self._row: npt.NDArray[Any] = self._base.copy()
        index = np.arange(rows, dtype=np.int64)
        following = (
            index % self.num_envs
            + ((index // self.num_envs + 1) % self._slots) * self.num_envs
        )
        self._next_row = following.astype(np.int32 if rows < 2**31 else np.int64)
        self._pending = 0
        self._pending_env = np.zeros(self.num_envs, np.int64)  # masked hot-path adds
        self._masked = False
        # hot-path adds since the last `_sync`: settled before a row could be
        # written twice (the ring's slots minus one)
        self._unsettled = 0
        self._settle_limit = max(1, self._slots - 1)
        self._ones = np.ones(self.num_envs, np.int64)
        # the flat hot path applies (plain layout, no clearing, env i -> sub-pool i)
        self._hot = (
            self.store_next_obs and self.clearing_freq is None and not self.random
        )
        # While every sub-pool's free slot is the same (`_slot`), one vector step is
        # a contiguous block of rows: the aligned path writes slices, and `_row`
        # is only brought up to date by `_sync` or when the alignment is left.
        self._aligned = self._hot
        self._slot = 0
        self._even = True  # every sub-pool holds as many rows (read while aligned)
        self._plain_shapes = (
            (
                (self.num_envs, *observation_space.shape),
                (self.num_envs, *action_space.shape),
                (self.num_envs,),
            )
            if isinstance(observation_space, NATIVE_LEAVES)
            and isinstance(action_space, NATIVE_LEAVES)
            and observation_space.shape is not None
            and action_space.shape is not None
            else None
        )
        self._action_bounds = integer_bounds(action_space)
        # a Discrete action space's bounds, checked inline on the aligned path
        self._discrete_bounds = (
            self._action_bounds[0]
            if isinstance(action_space, spaces.Discrete)
            and self.num_envs <= _SMALL_BATCH
            else None
        )
        self._received = np.zeros(self.num_envs, np.int64)
        self._episode_return = np.zeros(self.num_envs, np.float64)
        self._episode_length = np.zeros(self.num_envs, np.int64)
        self._episodes = np.zeros(3, np.float64)  # count, sum of returns, of lengths
        # the return and length of the last RECENT_EPISODES episodes that ended (a
        # ring, oldest overwritten), and how many were ever put in it
        self._recent = np.zeros((RECENT_EPISODES, 2), np.float64)
        self._recent_count = np.zeros(1, np.int64)

    # -- reading -----------------------------------------------------------------------

    @property
    def window_size_(self) -> int | None:
        """Deprecated name of :attr:`clearing_size` (a :class:`DeprecationWarning`)."""
        warnings.warn(
            "`ReplayPool.window_size_` is deprecated: the setting is now called "
            "`clearing_size`; read `pool.clearing_size`.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.clearing_size

    @property
    def lengths(self) -> npt.NDArray[np.int64]:
        """Number of transitions in each sub-pool (a copy)."""
        self._sync()
        return self._length.copy()

    @classmethod
    def from_settings(
        cls,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        num_envs: int,
        settings: PoolSettings,
    ) -> ReplayPool:
        """A pool of ``num_envs`` sub-pools kept as ``settings`` say.

        Raises:
            ValueError: As the constructor.
        """
        return cls(
            observation_space,
            action_space,
            num_envs,
            **{
                field.name: getattr(settings, field.name)
                for field in dataclasses.fields(settings)
            },
        )

    @property
    def received(self) -> npt.NDArray[np.int64]:
        """Transitions each sub-pool has received so far, kept or not (a copy)."""
        self._sync()
        return self._received.copy()

    def __len__(self) -> int:
        """Total number of stored transitions."""
        self._sync()
        return int(self._length.sum())

    def _sync(self) -> None:
        """Apply what the hot path deferred: counters, marks, episodes, priorities."""
        adds: Any = self._pending
        if self._masked:
            adds = adds + self._pending_env
            self._pending_env[:] = 0
            self._masked = False
        elif not adds:
            return
        self._pending = 0
        self._unsettled = 0
        if self._aligned:
            self._row = self._base + self._slot * self.num_envs
        end, length = self._end, self._length
        per_env = np.broadcast_to(np.asarray(adds, np.int64), (self.num_envs,))
        self._settle(self._envs, end, per_env)
        self._end = (self._row - self._base) // self.num_envs
        self._received += adds
        total = self._length + adds
        if self.window_size is None:
            self._length = np.minimum(total, self.capacity)
        else:
            # past capacity a sub-pool cycles through window_size..capacity
            period = self.capacity + 1 - self.window_size
            wrapped = self.window_size + (total - self.capacity - 1) % period
            self._length = np.where(total > self.capacity, wrapped, total)
        if self._tree is not None:
            self._reprioritize(self._envs, end, length, per_env, self._length)
        if self._hot:
            self._slot = int(self._end[0])
            self._aligned = bool(np.all(self._end == self._slot))
            self._even = bool(np.all(self._length == self._length[0]))

    def _settle(
        self,
        env_ids: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        adds: npt.NDArray[np.int64],
    ) -> None:
        """Mark and count the ``adds[i]`` rows the hot path wrote for ``env_ids[i]``.

        They lie at slots ``end[i], end[i] + 1, ...`` of their sub-pool (``end``:
        the free slot before them). Sets their ``_starts`` and the envs' ``_fresh``
        marks, and closes the episodes that ended in them (their returns and
        lengths, as :meth:`_record_episodes` does one step at a time).
        """
        total = int(adds.sum())
        if total == 0:
            return
        counts = adds
        env = np.repeat(env_ids, counts)
        block = np.cumsum(counts) - counts  # where each env's rows start
        first = np.repeat(block, counts)
        step = np.arange(total, dtype=np.int64) - first
        row = self._base[env] + (end[env] + step) % self._slots * self.num_envs
        done = self._terminated[row] | self._truncated[row]
        reward = self._reward[row]
        starts = np.empty(total, np.bool_)
        starts[1:] = done[:-1]
        has = counts > 0
        starts[block[has]] = self._fresh[env_ids[has]]
        self._starts[row] = starts
        last = (block + counts - 1)[has]
        self._fresh[env_ids[has]] = done[last]
        returns, lengths = self._episode_return, self._episode_length
        ends = np.flatnonzero(done)
        if ends.size == 0:
            np.add.at(returns, env, reward)
            np.add.at(lengths, env_ids, counts)
            return
        # each env's rows split at its episode ends: one sum a stretch (never a
        # difference of sums, which would mix envs' rewards: an inf, or 1e17 + 1)
        stop = block + counts
        position = np.searchsorted(env_ids, env[ends])  # each end's env, as index
        cut = ends + 1
        cut = cut[cut < stop[position]]
        begins = np.union1d(block[has], cut)
        sums = np.add.reduceat(reward, begins)
        stretch = np.searchsorted(begins, ends, side="right") - 1
        end_env = env[ends]
        again = np.zeros(ends.size, np.bool_)  # not the env's first end here
        again[1:] = end_env[1:] == end_env[:-1]
        carry = np.where(again, 0.0, returns[end_env])
        carried = np.where(again, 0, lengths[end_env])
        episode_returns = carry + sums[stretch]
        episode_lengths = carried + (ends + 1 - begins[stretch])
        self._episodes += (ends.size, episode_returns.sum(), episode_lengths.sum())
        order = np.lexsort((end_env, step[ends]))  # by row, then env
        self._remember(episode_returns[order], episode_lengths[order])
        # what is left after each env's last end, or added to what it had
        ended = np.zeros(env_ids.size, np.bool_)
        ended[position] = True
        last_row = np.maximum(stop - 1, 0)
        tail_stretch = np.searchsorted(begins, last_row, side="right") - 1
        closed = done[last_row]  # the env's last row ended an episode: no tail
        tail = np.where(has & ~closed, sums[tail_stretch], 0.0)
        tail_length = np.where(has & ~closed, stop - begins[tail_stretch], 0)
        returns[env_ids] = np.where(ended, 0.0, returns[env_ids]) + tail
        lengths[env_ids] = np.where(ended, 0, lengths[env_ids]) + tail_length

    def _reprioritize(
        self,
        env_ids: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        adds: npt.NDArray[np.int64],
        new_length: npt.NDArray[np.int64],
    ) -> None:
        """Priorities after ``adds`` rows went to the sub-pools ``env_ids``.

        Before, sub-pool ``i`` held slots ``[end - length, end)``; the adds wrote
        ``[end, end + adds)``; it now holds the last ``new_length`` of those. The
        rows it no longer holds get priority 0 (never drawn), the new rows it holds
        the largest priority given so far.
        """
        tree = self._tree
        if tree is None:
            return
        slots, n = self._slots, self.num_envs
        top = end + adds
        dropped = np.minimum(length + adds - new_length, slots)
        fresh_from = np.maximum(end, top - new_length)
        fresh = np.maximum(top - fresh_from, 0)

        def rows(
            begin: npt.NDArray[np.int64], count: npt.NDArray[np.int64]
        ) -> npt.NDArray[np.int64]:
            first = np.repeat(np.cumsum(count) - count, count)
            step = np.arange(first.size, dtype=np.int64) - first
            slot = (np.repeat(begin, count) + step) % slots
            picked: npt.NDArray[np.int64] = np.repeat(self._base[env_ids], count)
            return picked + slot * n

        if dropped.any():
            tree.set(rows(end - length, dropped), 0.0)
        if fresh.any():
            tree.set(
                rows(fresh_from, fresh), self._max_priority ** float(self.alpha or 0.0)
            )

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the stored transitions."""
        arrays = [*self._obs, *self._action, self._reward, self._terminated]
        arrays += [self._truncated, self._starts, self._next_row]
        if self._tree is not None:
            arrays += [self._tree.leaves]
        if self._frames is not None:
            return int(sum(array.nbytes for array in arrays)) + self._frames.nbytes
        if self.store_next_obs:
            arrays += self._next_obs
        else:
            arrays += [*self._tail, self._own_next, *self._extra]
        return int(sum(array.nbytes for array in arrays))

    def recent_episode_stats(self, k: int = 100) -> EpisodeStats:
        """Count, mean return and mean length of the last ``k`` episodes that ended.

        :attr:`episode_stats` covers every episode since the pool was made; this
        covers the newest ones (what a training log shows). Episodes that ended in
        the same vector step count in env order.

        Args:
            k: How many of the newest ended episodes (at most
                :data:`RECENT_EPISODES`).

        Returns:
            An :class:`EpisodeStats` over ``min(k, ended)`` episodes (``count`` 0
            and ``nan`` means if none ended).

        Raises:
            ValueError: If ``k`` is not between 1 and :data:`RECENT_EPISODES`.
        """
        k = check_int("k", k, 1, RECENT_EPISODES)
        self._sync()
        count = int(self._recent_count[0])
        taken = min(k, count)
        if not taken:
            return EpisodeStats(0, math.nan, math.nan)
        entries = self._recent_episodes()[-taken:]
        returns, lengths = entries[:, 0], entries[:, 1]
        return EpisodeStats(
            taken, math.fsum(returns.tolist()) / taken, float(lengths.mean())
        )

    @property
    def episode_stats(self) -> EpisodeStats:
        """Count, mean return and mean length of the episodes that ended."""
        self._sync()
        count, returns, lengths = self._episodes
        if not count:
            return EpisodeStats(0, math.nan, math.nan)
        return EpisodeStats(int(count), float(returns / count), float(lengths / count))

    def get_pool(self) -> Transitions:
        """Every stored transition: sub-pools in env order, each oldest to newest.

        Returns:
            A :class:`Transitions` of ``len(self)`` rows (fresh arrays).
        """
        return Transitions(*self._gather(*self._held()))

    def iter_pool(self, chunk_size: int = 65_536) -> Iterator[Transitions]:
        """Every stored transition, as :meth:`get_pool` orders them, in chunks.

        For pools whose whole copy would not fit in memory (a frame-stacked pool
        rebuilds every stack: ``2 * K`` frames a row). Each chunk takes what
        ``chunk_size`` rows of :meth:`get_pool` take; do not add to the pool while
        iterating.

        Args:
            chunk_size: Rows per chunk (the last may hold fewer).

        Yields:
            A :class:`Transitions` of at most ``chunk_size`` rows.

        Raises:
            ValueError: If ``chunk_size < 1``.
        """
        chunk_size = check_int("chunk_size", chunk_size, 1)
        env, offset = self._held()
        for first in range(0, env.size, chunk_size):
            part = slice(first, first + chunk_size)
            yield Transitions(*self._gather(env[part], offset[part]))

    def get_rows(self, env: int, start: int, stop: int) -> Transitions:
        """Transitions ``start:stop`` of sub-pool ``env`` (0: its oldest).

        Args:
            env: The sub-pool (env index).
            start: First offset.
            stop: One past the last offset (at most ``lengths[env]``).

        Returns:
            A :class:`Transitions` of ``stop - start`` rows.

        Raises:
            ValueError: If the range is not within the sub-pool.
        """
        self._sync()
        env = check_int("env", env, 0, self.num_envs - 1)
        held = int(self._length[env])
        start = check_int("start", start, 0, held)
        stop = check_int("stop", stop, start, held)
        offset = np.arange(start, stop, dtype=np.int64)
        return Transitions(*self._gather(np.full(offset.size, env, np.int64), offset))

    def sample(
        self,
        batch_size: int,
        n_step: int | None = None,
        gamma: float | None = None,
        beta: float | None = None,
    ) -> Any:
        """Draw ``batch_size`` transitions, with replacement.

        Uniformly, or by priority in a pool made with ``alpha``. With none of
        ``n_step``, ``beta`` and ``alpha``, a :class:`Transitions`; else a
        :class:`ReplaySample`, whose first six fields are the same.

        Args:
            batch_size: Number of transitions.
            n_step: Sum up to ``n_step`` rewards of the same env and episode
                (``reward = sum_k gamma**k r_k``); ``next_obs`` is the
                observation after the last step summed, ``terminated`` /
                ``truncated`` say whether the episode ended within them, and
                ``discount`` is ``gamma**k`` for the ``k`` steps summed. A window
                never crosses an episode end, a reset or restart, or the newest
                row of a sub-pool (there it sums the steps that exist).
            gamma: The discount (needed with ``n_step``).
            beta: Importance-weight exponent of prioritized replay (needs
                ``alpha``): ``weights = (N * P(i)) ** -beta``, divided by their
                maximum. Without it a prioritized pool's weights are ones.

        Returns:
            A :class:`Transitions` or a :class:`ReplaySample` of ``batch_size``
            rows.

        Raises:
            ValueError: If the pool is empty, on an invalid argument (named), or
                ``n_step`` with ``random=True`` routing (an env's rows are then
                not in order).
        """
        batch_size = check_int("batch_size", batch_size, 1)
        steps = None if n_step is None else check_int("n_step", n_step, 1)
        if steps is not None:
            self._check_ordered("n_step")
            if gamma is None:
                msg = (
                    "`n_step` needs `gamma`, the discount of the rewards summed: "
                    "pass e.g. `gamma=0.99`."
                )
                raise ValueError(msg)
            gamma = _check_unit("gamma", gamma)
        elif gamma is not None:
            msg = "`gamma` is used only with `n_step`: pass `n_step` too, or drop it."
            raise ValueError(msg)
        if beta is not None:
            if self._tree is None:
                msg = (
                    "`beta` weighs prioritized draws, and this pool samples "
                    "uniformly: make it with `ReplayPool(..., alpha=0.6)` (or "
                    "`ReplayPoolWrapper(..., alpha=0.6)`), or drop `beta`."
                )
                raise ValueError(msg)
            beta = _check_unit("beta", beta)
        env, offset, row = self._draw(batch_size)
        if steps is None and self._tree is None and beta is None:
            return Transitions(*self._gather(env, offset, row=row))
        batch = self._gather(env, offset, row=row)
        reward, terminated, truncated = batch[3], batch[4], batch[5]
        discount = np.ones(batch_size)
        if steps is not None and gamma is not None:
            last, reward, terminated, truncated, discount = self._n_step(
                env, offset, row, steps, gamma
            )
            obs_, action_, next_obs, *_ = self._gather(env, offset, last, row)
            batch = (obs_, action_, next_obs)
        weights = np.ones(batch_size)
        if beta is not None and self._tree is not None and beta > 0:
            probability = self._tree.get(row) / self._tree.total
            weights = (len(self) * probability) ** -beta
            weights /= weights.max()
        return ReplaySample(
            batch[0],
            batch[1],
            batch[2],
            reward,
            terminated,
            truncated,
            discount,
            self._ids(env, offset),
            weights,
        )

    def sample_sequences(self, batch_size: int, length: int) -> Sequences:
        """Draw ``batch_size`` sequences of ``length`` consecutive transitions.

        Each sequence starts at a row drawn uniformly and follows its env's
        sub-pool; ``mask`` is ``False`` from the first step that is not the same
        episode's next step (an episode end, a reset or restart, a window or
        clearing cut, past the newest row). For recurrent agents (R2D2-style).

        Args:
            batch_size: Number of sequences.
            length: Steps per sequence.

        Returns:
            A :class:`Sequences` whose fields are shaped ``[batch_size, length, ...]``.

        Raises:
            ValueError: If the pool is empty, on an invalid argument (named), or
                with ``random=True`` routing.
        """
        batch_size = check_int("batch_size", batch_size, 1)
        length = check_int("length", length, 1)
        self._check_ordered("sample_sequences")
        env, start, _ = self._uniform(batch_size)
        step = np.arange(length, dtype=np.int64)
        offset = start[:, None] + step  # [B, L]
        held = self._length[env][:, None]
        inside = offset < held
        offset = np.minimum(offset, held - 1)
        env_2d = np.broadcast_to(env[:, None], offset.shape)
        row = self._row_of(env_2d, offset)
        done = self._terminated[row] | self._truncated[row]
        follows = np.ones(offset.shape, np.bool_)
        follows[:, 1:] = inside[:, 1:] & ~self._starts[row[:, 1:]] & ~done[:, :-1]
        mask = np.logical_and.accumulate(follows, axis=1)
        obs, action, next_obs, reward, terminated, truncated = self._gather(
            env_2d.reshape(-1), offset.reshape(-1)
        )
        shape = (batch_size, length)

        def fold(batch: Any) -> Any:
            if isinstance(batch, dict):
                return {key: fold(value) for key, value in batch.items()}
            if isinstance(batch, tuple):
                return tuple(fold(value) for value in batch)
            return batch.reshape(*shape, *batch.shape[1:])

        return Sequences(
            fold(obs),
            fold(action),
            fold(next_obs),
            reward.reshape(shape),
            terminated.reshape(shape),
            truncated.reshape(shape),
            mask,
        )

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set the priorities of rows drawn by :meth:`sample` (pools with ``alpha``).

        A row is then drawn with probability ``priority ** alpha / sum``. Rows the
        pool no longer holds (evicted since they were drawn) are left out. New
        rows get the largest priority given so far.

        Args:
            indices: The ``indices`` field of a :class:`ReplaySample`.
            priorities: One finite number >= 0 per index (e.g. ``|TD error| +
                1e-6``; a row of priority 0 is never drawn).

        Raises:
            ValueError: If the pool is not prioritized, or on indices or priorities
                of the wrong shape or value.
        """
        tree = self._tree
        if tree is None:
            msg = (
                "`update_priorities` needs a prioritized pool: make it with "
                "`ReplayPool(..., alpha=0.6)` (or `ReplayPoolWrapper(..., "
                "alpha=0.6)`)."
            )
            raise ValueError(msg)
        rows = np.asarray(indices)
        values = np.asarray(priorities, np.float64)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            msg = (
                f"`indices` must be a 1-D array of ints (a sample's `indices`), got "
                f"shape {rows.shape}, dtype {rows.dtype}."
            )
            raise ValueError(msg)
        if values.shape != rows.shape:
            msg = (
                f"`priorities` must hold one value per index ({rows.size}), got "
                f"shape {values.shape}."
            )
            raise ValueError(msg)
        if values.size and not (np.isfinite(values).all() and values.min() >= 0):
            msg = (
                "`priorities` must be finite and >= 0 (e.g. `abs(td_error) + "
                f"1e-6`), got min {values.min()}, max {values.max()}."
            )
            raise ValueError(msg)
        self._sync()
        ids = rows.astype(np.int64)
        env = ids % self.num_envs
        serial = ids // self.num_envs
        received = self._received[env]
        if ids.size and (ids.min() < 0 or np.any(serial >= received)):
            msg = (
                "`indices` must be the `indices` of a sample drawn from this pool, "
                f"got values (min {ids.min()}, max {ids.max()}) it never gave out."
            )
            raise ValueError(msg)
        # a transition's id is its env and its serial number in its sub-pool: one
        # dropped since it was drawn is not held, even if its slot was reused
        offset = serial - (received - self._length[env])
        held = offset >= 0
        if values.size:
            self._max_priority = max(self._max_priority, float(values.max()))
        kept = values[held]
        powered = np.where(kept > 0, kept ** float(self.alpha or 0.0), 0.0)
        tree.set(self._row_of(env[held], offset[held]), powered)

    def _ids(
        self, env: npt.NDArray[np.int64], offset: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The ids of transitions: ``env + num_envs * serial``.

        ``serial`` counts the transitions its sub-pool received before it, so an id
        names one transition for good: it survives save/load (rows move, serials
        do not), and once the transition is dropped no other has it.
        """
        serial = self._received[env] - self._length[env] + offset
        ids: npt.NDArray[np.int64] = env + self.num_envs * serial
        return ids

    def _check_ordered(self, option: str) -> None:
        if self.random:
            msg = (
                f"`{option}` needs each env's rows in order, and this pool routes "
                "them at random (`random=True`): make the pool without `random`."
            )
            raise ValueError(msg)

    def _draw(
        self, batch_size: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Rows drawn uniformly or by priority: their sub-pools, offsets, rows."""
        if self._tree is None:
            return self._uniform(batch_size)
        self._sync()
        if not self._tree.total > 0:
            if not self._length.any():
                msg = "Cannot sample from an empty ReplayPool: add transitions first."
            else:
                msg = (
                    "Cannot sample by priority: every transition held has priority "
                    "0. Give some a positive one (`update_priorities(indices, "
                    "abs(td_error) + 1e-6)`)."
                )
            raise ValueError(msg)
        row = self._tree.sample(batch_size, self._rng)
        env = row % self.num_envs
        offset = (row // self.num_envs - self._end[env] + self._length[env]) % (
            self._slots
        )
        return env, offset, row

    def _uniform(
        self, batch_size: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Rows drawn uniformly from those held: their sub-pools, offsets, rows.

        Raises:
            ValueError: If the pool is empty.
        """
        self._sync()
        if self._aligned and self._even and self._length[0]:
            # every sub-pool holds `held` rows ending at one slot (what an aligned
            # pool of whole vector steps is): the general draw below, in 5 calls
            held = int(self._length[0])
            flat = self._rng.integers(0, held * self.num_envs, batch_size)
            env, offset = np.divmod(flat, held)
            slot = offset + (self._slot - held)
            slot %= self._slots
            slot *= self.num_envs
            slot += env
            return env, offset, slot
        total = int(self._length.sum())
        if total == 0:
            msg = "Cannot sample from an empty ReplayPool: add transitions first."
            raise ValueError(msg)
        flat = self._rng.integers(0, total, batch_size)
        length = self._length
        ends = np.cumsum(length)
        env = np.searchsorted(ends, flat, side="right")
        before = ends - length  # held rows of the sub-pools before each one
        offset = flat - before[env]
        # row = env + slot * n, slot = (oldest slot + offset) % slots, in 4 calls
        slot = flat + (self._end - length - before)[env]
        slot %= self._slots
        slot *= self.num_envs
        slot += env
        return env, offset, slot

    def _held(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Sub-pool and offset of every held row, in the order of :meth:`get_pool`."""
        self._sync()
        counts = self._length
        env = np.repeat(np.arange(self.num_envs, dtype=np.int64), counts)
        offset = np.arange(env.size, dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        return env, offset

    def _row_of(
        self, env: npt.NDArray[np.int64], offset: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The row of each sub-pool's ``offset``-th held transition (0: oldest)."""
        slot = (self._end[env] - self._length[env] + offset) % self._slots
        row: npt.NDArray[np.int64] = self._base[env] + slot * self.num_envs
        return row

    def _n_step(
        self,
        env: npt.NDArray[np.int64],
        offset: npt.NDArray[np.int64],
        row: npt.NDArray[np.int64],
        steps: int,
        gamma: float,
    ) -> tuple[npt.NDArray[Any], ...]:
        """The n-step window from each row: last offset, reward, ends, discount."""
        reward = self._reward[row].copy()
        terminated = self._terminated[row].copy()
        truncated = self._truncated[row].copy()
        going = ~(terminated | truncated)
        last = offset.copy()
        summed = np.ones(offset.shape, np.int64)
        held = self._length[env]
        for k in range(1, steps):
            ahead = offset + k
            going &= ahead < held
            if not going.any():
                break
            following = self._row_of(env, np.minimum(ahead, held - 1))
            going &= ~self._starts[following]
            picked = following[going]
            reward[going] += gamma**k * self._reward[picked]
            terminated[going] = self._terminated[picked]
            truncated[going] = self._truncated[picked]
            last[going] = ahead[going]
            summed += going
            going &= ~(terminated | truncated)
        discount = np.power(gamma, summed.astype(np.float64))
        return last, reward, terminated, truncated, discount

    def _gather(
        self,
        env: npt.NDArray[np.int64],
        offset: npt.NDArray[np.int64],
        next_offset: npt.NDArray[np.int64] | None = None,
        row: npt.NDArray[np.int64] | None = None,
    ) -> tuple[Any, ...]:
        """The six fields of the rows at ``offset`` of sub-pools ``env``.

        ``next_obs`` comes from the rows at ``next_offset`` (default: the same).
        ``row``: the rows at ``offset``, when the caller has them already.
        """
        if row is None:
            row = self._row_of(env, offset)
        obs = [np.take(array, row, axis=0) for array in self._obs]
        if next_offset is None:
            next_row, offset = row, offset
        else:
            next_row, offset = self._row_of(env, next_offset), next_offset
        if self._frames is not None:
            newest = offset == self._length[env] - 1
            if next_row is row:
                stacks, next_stacks = self._frames.pair(row, env, newest)
            else:
                stacks = self._frames.obs(row)
                next_stacks = self._frames.next_obs(next_row, env, newest)
            obs, next_obs = [stacks], [next_stacks]
        elif self.store_next_obs:
            next_obs = [np.take(array, next_row, axis=0) for array in self._next_obs]
        else:
            own = self._own_next[next_row]
            newest = offset == self._length[env] - 1
            following = self._next_row[next_row].astype(np.intp)
            kept = own >= 0
            next_obs = []
            for store, tail, extra in zip(
                self._obs, self._tail, self._extra, strict=True
            ):
                values = np.take(store, following, axis=0)
                values[newest] = tail[env[newest]]
                values[kept] = extra[own[kept]]
                next_obs.append(values)
        # object leaves: copies, never the pool's own objects
        return (
            make_views(self.observation_space, [fresh_objects(a) for a in obs]),
            make_views(
                self.action_space, [np.take(a, row, axis=0) for a in self._action]
            ),
            make_views(self.observation_space, [fresh_objects(a) for a in next_obs]),
            self._reward[row],
            self._terminated[row],
            self._truncated[row],
        )

    # -- writing -----------------------------------------------------------------------

    def add(
        self,
        obs: Any,
        action: Any,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        env_ids: Any = None,
        *,
        valid: Any = None,
    ) -> None:
        """Record one transition per env (one batched call per vector step).

        Args:
            obs: Observations, batched like Gymnasium batches the single space.
            action: Actions, batched likewise.
            next_obs: Next observations (for an env whose episode ended: its final
                observation).
            reward: Rewards.
            terminated: Termination flags.
            truncated: Truncation flags.
            env_ids: Source env of each row when not every env has a transition
                (default: one row per env, in env order).
            valid: Optional bool mask over the rows: rows that are not real
                transitions (e.g. ``NEXT_STEP`` reset steps, see
                :class:`vecpool.replay.boundaries.AutoresetTracker`) are skipped.

        Raises:
            ValueError: If a batch does not have one row per env (or per id), if
                ``env_ids`` are not 1-D integers in range, or if an action is not
                in the action space (a float for a discrete space, out of range).
        """
        shapes = self._plain_shapes
        if (
            self._aligned
            and env_ids is None
            and valid is None
            and shapes is not None
            and type(obs) is type(action) is type(next_obs) is np.ndarray
            and type(reward) is type(terminated) is type(truncated) is np.ndarray
            and obs.shape == next_obs.shape == shapes[0]
            and action.shape == shapes[1]
            and reward.shape == terminated.shape == truncated.shape == shapes[2]
        ):  # the hot case: every sub-pool at the same slot, one array per field
            bounds = self._discrete_bounds
            if bounds is None or action.dtype.kind not in "iu":
                self._check_actions([action])
            else:  # a Discrete action, inline: ~0.3 us (see `_check_actions`)
                values = action.tolist()
                if not (bounds[0] <= min(values) and max(values) < bounds[1]):
                    self._refuse_actions(action)
            self._add_aligned(obs, action, next_obs, reward, terminated, truncated)
            return
        if (
            env_ids is None
            and shapes is not None
            and type(obs) is np.ndarray
            and type(action) is np.ndarray
            and type(next_obs) is np.ndarray
        ):  # the common case: one array per field
            self.add_leaves(
                [obs], [action], [next_obs], reward, terminated, truncated, valid=valid
            )
            return
        count = self.num_envs if env_ids is None else self._check_env_ids(env_ids).size
        self.add_leaves(
            _leaves(self.observation_space, obs, count, "obs"),
            _leaves(self.action_space, action, count, "action"),
            _leaves(self.observation_space, next_obs, count, "next_obs"),
            reward,
            terminated,
            truncated,
            env_ids,
            valid=valid,
        )

    def add_leaves(
        self,
        obs: list[npt.NDArray[Any]],
        action: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        reward: Any,
        terminated: Any,
        truncated: Any,
        env_ids: Any = None,
        *,
        valid: Any = None,
    ) -> None:
        """:meth:`add` for batches already split into leaf arrays: the fast path.

        Leaves are in ``vecpool._util.spaces.leaves`` order, one array per leaf of
        the space, each with one row per env (or per id). The wrapper, the sampler
        and ``vecpool collect`` add through here; a plain Box/Discrete space with
        one row per env takes the unrolled path (about a dozen numpy calls).

        Args:
            obs: Observation leaves.
            action: Action leaves.
            next_obs: Next-observation leaves.
            reward: Rewards.
            terminated: Termination flags.
            truncated: Truncation flags.
            env_ids: Source env of each row (default: one row per env, in order).
            valid: Optional bool mask over the rows; rows not valid are skipped.

        Raises:
            ValueError: As :meth:`add`.
        """
        count = self.num_envs if env_ids is None else np.size(env_ids)
        for name, batch, leaf_shapes in (
            ("obs", obs, self._obs_shapes),
            ("action", action, self._action_shapes),
            ("next_obs", next_obs, self._obs_shapes),
        ):
            self._check_shapes(name, batch, leaf_shapes, count)
        self._check_actions(action)
        for k, path in self._text_leaves:
            for name, batch in (("obs", obs), ("next_obs", next_obs)):
                check_strings(np.asarray(batch[k]), self._obs[k].dtype, name + path)
        mask = None if valid is None else self._check_valid(valid, env_ids)
        if env_ids is None:
            shapes = self._plain_shapes
            if (  # the leaves' shapes are checked above: one array a field
                self._hot
                and shapes is not None
                and type(reward) is np.ndarray
                and type(terminated) is np.ndarray
                and type(truncated) is np.ndarray
                and reward.shape == terminated.shape == truncated.shape == shapes[2]
                and terminated.dtype == truncated.dtype == np.bool_
            ):
                if self._aligned and mask is None:
                    self._add_aligned(
                        obs[0], action[0], next_obs[0], reward, terminated, truncated
                    )
                    return
                self._add_arrays(
                    obs[0], action[0], next_obs[0], reward, terminated, truncated, mask
                )
                return
            self._add_leaves(
                None, obs, action, next_obs, reward, terminated, truncated, mask
            )
            return
        source = self._check_env_ids(env_ids)
        if source.size:
            self._add_leaves(
                source, obs, action, next_obs, reward, terminated, truncated, mask
            )

    def abort_episodes(self, env_ids: Any) -> None:
        """Abort the unfinished episode of each env in ``env_ids``.

        Its transitions stay in the pool, but the episode is not counted as
        finished (:meth:`episode_stats`) and the env's next transition starts a new
        episode instead of continuing it. For an episode cut short without an end
        (a crashed worker, an interrupted collection).

        Args:
            env_ids: Env indices (1-D ints in range).

        Raises:
            ValueError: If ``env_ids`` are not 1-D integers in range.
        """
        source = self._check_env_ids(env_ids)
        self._sync()
        self._episode_return[source] = 0.0
        self._episode_length[source] = 0
        self._fresh[source] = True

    @staticmethod
    def _check_shapes(
        name: str,
        batch: list[npt.NDArray[Any]],
        shapes: list[tuple[int, ...]],
        count: int,
    ) -> None:
        """Refuse leaves of the wrong shape, before anything is written."""
        if len(batch) != len(shapes):
            msg = f"`{name}` must hold {len(shapes)} leaves, got {len(batch)}."
            raise ValueError(msg)
        for leaf, shape in zip(batch, shapes, strict=True):
            if np.shape(leaf) != (count, *shape):
                msg = (
                    f"`{name}` must hold {count} rows of shape {shape} (one per env "
                    f"or id), got shape {np.shape(leaf)}."
                )
                raise ValueError(msg)

    def _check_env_ids(self, env_ids: Any) -> npt.NDArray[np.int64]:
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            msg = (
                f"`env_ids` must be a 1-D array of ints, got {env_ids!r} (shape "
                f"{ids.shape}, dtype {ids.dtype}): pass e.g. `np.array([0, 2])`."
            )
            raise ValueError(msg)
        source = ids.astype(np.int64, copy=False)
        if source.size and (source.min() < 0 or source.max() >= self.num_envs):
            msg = f"`env_ids` must lie in [0, {self.num_envs}), got {source.tolist()}."
            raise ValueError(msg)
        return source

    def _check_valid(self, valid: Any, env_ids: Any) -> npt.NDArray[np.bool_]:
        mask = np.asarray(valid)
        rows = self.num_envs if env_ids is None else np.size(env_ids)
        if mask.dtype != np.bool_ or mask.shape != (rows,):
            msg = (
                f"`valid` must be a bool array of shape ({rows},), got dtype "
                f"{mask.dtype} and shape {mask.shape}."
            )
            raise ValueError(msg)
        return mask

    def _check_actions(self, action: list[npt.NDArray[Any]]) -> None:
        """Refuse actions outside the action space (no silent casts).

        Per add, so cheap: a dtype-kind check, then the range. A small 1-D batch
        under a scalar range (Discrete: the hot case) is checked as a list, ~1 us
        for 8 envs where any numpy reduction costs 3-5 us in the add path.
        """
        for leaf, bounds in zip(action, self._action_bounds, strict=True):
            if bounds is None:
                continue  # a float Box: stored as given
            array = np.asarray(leaf)
            if array.dtype.kind not in "iub":
                self._refuse_actions(array)
            low, high = bounds
            if type(low) is int and array.ndim == 1 and array.size <= _SMALL_BATCH:
                values = array.tolist()
                if not values or (low <= min(values) and max(values) < high):
                    continue
            elif not (np.count_nonzero(array < low) or np.count_nonzero(array >= high)):
                continue
            self._refuse_actions(array)

    def _refuse_actions(self, array: npt.NDArray[Any]) -> NoReturn:
        if array.dtype.kind not in "iub":
            msg = (
                f"`action` must hold integers for the {self.action_space} action "
                f"space, got dtype {array.dtype}: pass e.g. `actions.astype(int)`."
            )
        else:
            msg = (
                f"`action` holds values outside the action space "
                f"{self.action_space}: got min {array.min()}, max {array.max()}."
            )
        raise ValueError(msg)

    def _add_leaves(
        self,
        source: npt.NDArray[np.int64] | None,
        obs: list[npt.NDArray[Any]],
        action: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        reward: Any,
        terminated: Any,
        truncated: Any,
        valid: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """:meth:`add` for rows already split into leaf arrays.

        ``source`` is ``None`` for one row per env, in env order (the hot path);
        then ``valid`` may mark the rows that are transitions (the others are
        skipped, e.g. ``NEXT_STEP`` reset steps).
        """
        n = self.num_envs
        count = n if source is None else source.size
        reward_arr = np.asarray(reward, dtype=np.float64).reshape(-1)
        terminated_arr = np.asarray(terminated, dtype=np.bool_).reshape(-1)
        truncated_arr = np.asarray(truncated, dtype=np.bool_).reshape(-1)
        if not (reward_arr.size == terminated_arr.size == truncated_arr.size == count):
            msg = (
                f"`reward`, `terminated` and `truncated` must hold {count} values each,"
                f" got {reward_arr.size}, {terminated_arr.size}, {truncated_arr.size}."
            )
            raise ValueError(msg)
        if source is None and self._hot:
            self._add_hot(
                obs, action, next_obs, reward_arr, terminated_arr, truncated_arr, valid
            )
            return
        self._sync()  # the episodes below continue those the hot path deferred
        self._aligned = False  # `_add_unique` moves sub-pools one by one
        rows = {"obs": obs, "action": action, "next_obs": next_obs}
        if valid is not None:
            keep = np.flatnonzero(valid)  # not the hot path: select the rows
            rows = {
                name: [leaf[keep] for leaf in leaves_] for name, leaves_ in rows.items()
            }
            reward_arr, terminated_arr = reward_arr[keep], terminated_arr[keep]
            truncated_arr = truncated_arr[keep]
            source = keep if source is None else source[keep]
            valid, count = None, keep.size
            if count == 0:
                return
        scalars = (reward_arr, terminated_arr, truncated_arr)
        done = terminated_arr | truncated_arr
        if source is None and not self.random:
            self._add_unique(self._envs, None, rows, scalars)
        else:
            dest = self._route(self._envs if source is None else source)
            if self.random or np.unique(dest).size != count:
                # several transitions for one sub-pool: apply them in rounds of
                # distinct sub-pools, keeping each sub-pool's order
                for chosen in _rounds(dest):
                    self._add_unique(dest[chosen], chosen, rows, scalars)
            else:
                self._add_unique(dest, None, rows, scalars)
        # the episodes once the rows are in: a row refused above counts nothing
        if source is not None and np.unique(source).size != source.size:
            # one env twice in a batch: its rows are consecutive steps, in order
            for rows_ in _rounds(source):
                self._record_episodes(source[rows_], reward_arr[rows_], done[rows_])
        else:
            self._record_episodes(source, reward_arr, done, valid)

    def _record_episodes(
        self,
        source: npt.NDArray[np.int64] | None,
        reward: npt.NDArray[np.float64],
        done: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        if source is None:
            if valid is None:
                self._episode_return += reward
                np.add(self._episode_length, 1, out=self._episode_length)
                ended: Any = done
            else:
                np.add(
                    self._episode_return, reward, out=self._episode_return, where=valid
                )
                self._episode_length += valid
                ended = done & valid
                done = ended
        else:
            np.add.at(self._episode_return, source, reward)
            np.add.at(self._episode_length, source, 1)
            ended = source[done]
        if np.count_nonzero(done):
            returns = self._episode_return[ended]
            lengths = self._episode_length[ended]
            self._episodes += (np.count_nonzero(done), returns.sum(), lengths.sum())
            self._remember(returns, lengths)
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0

    def _recent_episodes(self) -> npt.NDArray[np.float64]:
        """The ring's entries (return, length), oldest first."""
        count = int(self._recent_count[0])
        taken = min(count, RECENT_EPISODES)
        where = (count - taken + np.arange(taken)) % RECENT_EPISODES
        entries: npt.NDArray[np.float64] = self._recent[where]
        return entries

    def _remember(
        self, returns: npt.NDArray[np.float64], lengths: npt.NDArray[Any]
    ) -> None:
        """Put ended episodes (oldest first) in the ring of the recent ones."""
        count = int(self._recent_count[0])
        where = (count + np.arange(returns.size)) % RECENT_EPISODES
        self._recent[where, 0] = returns  # past the ring's size, the last win
        self._recent[where, 1] = lengths
        self._recent_count[0] = count + returns.size

    def _route(self, source: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Destination sub-pool of each transition."""
        if not self.random:
            return source
        # Sequential: each draw sees the lengths left by the previous transitions.
        self._sync()
        lengths = self._length.tolist()
        received = self._received.tolist()
        draws = self._rng.random(source.size).tolist()
        dest = np.empty(source.size, np.int64)
        for position, draw in enumerate(draws):
            weights = np.reciprocal(np.asarray(lengths, np.float64) + 1.0)
            cumulative = np.cumsum(weights)
            target = int(np.searchsorted(cumulative, draw * cumulative[-1], "right"))
            target = min(target, self.num_envs - 1)
            dest[position] = target
            length, received[target] = lengths[target] + 1, received[target] + 1
            if self.clearing_freq and received[target] % self.clearing_freq == 0:
                length -= min(self.clearing_size or 0, length)
            if length > self.capacity:
                length = self.window_size if self.window_size else length - 1
            lengths[target] = length
        return dest

    def _add_hot(
        self,
        obs: list[npt.NDArray[Any]],
        action: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """The hot path, flat: a dozen numpy calls for a whole vector step.

        One row per env, written at each sub-pool's free slot; plain layout, no
        clearing, no random routing. Rows not ``valid`` are written but not kept.
        """
        self._leave_alignment()
        # int32 row links (to keep the index small) widened once, not per write
        row = self._row.astype(np.intp)
        if self._frames is not None:
            self._write_frames(row, obs[0], next_obs[0], valid)
        for store, leaf in zip(self._obs, obs, strict=True):
            store[row] = leaf
        for store, leaf in zip(self._action, action, strict=True):
            store[row] = leaf
        for store, leaf in zip(self._next_obs, next_obs, strict=True):
            store[row] = leaf
        self._reward[row] = reward
        self._terminated[row] = terminated
        self._truncated[row] = truncated
        self._advance(row, valid)

    def _add_arrays(
        self,
        obs: npt.NDArray[Any],
        action: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """:meth:`_add_hot` for single-array spaces, unrolled."""
        self._leave_alignment()
        row = self._row.astype(np.intp)
        if self._frames is not None:
            self._write_frames(row, obs, next_obs, valid)
        else:
            self._obs[0][row] = obs
            self._next_obs[0][row] = next_obs
        self._action[0][row] = action
        self._reward[row] = reward
        self._terminated[row] = terminated
        self._truncated[row] = truncated
        self._advance(row, valid)

    def _add_aligned(
        self,
        obs: npt.NDArray[Any],
        action: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[Any],
        truncated: npt.NDArray[Any],
    ) -> None:
        """One row per env at the sub-pools' common free slot: six slice writes.

        Everything else (counters, episode marks and statistics, priorities) waits
        for :meth:`_sync`, which handles a whole run of steps in a few numpy calls.
        """
        slot = self._slot
        rows = slice(slot * self.num_envs, (slot + 1) * self.num_envs)
        if self._frames is not None:
            self._frames.write(self._envs, self._base + slot * self.num_envs, obs,
                               next_obs, every=True, block=rows)  # fmt: skip
        else:
            self._obs[0][rows] = obs
            self._next_obs[0][rows] = next_obs
        self._action[0][rows] = action
        self._reward[rows] = reward
        self._terminated[rows] = terminated
        self._truncated[rows] = truncated
        slot += 1
        self._slot = 0 if slot == self._slots else slot
        # aligned since the last `_sync`: every add since then came this way
        self._pending += 1
        if self._pending >= self._settle_limit:
            self._sync()

    def _write_frames(
        self,
        row: npt.NDArray[np.intp],
        obs: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """The hot paths' frame writes, of the rows kept only.

        A row not ``valid`` is no transition, and would move the frame store's
        chains on.
        """
        frames = self._frames
        assert frames is not None  # for mypy: the callers check
        if valid is None:
            frames.write(self._envs, row.astype(np.int64), obs, next_obs, every=True)
        elif np.count_nonzero(valid):
            frames.write(
                self._envs[valid], row[valid].astype(np.int64), obs[valid],
                next_obs[valid],
            )  # fmt: skip

    def _leave_alignment(self) -> None:
        """Bring ``_row`` up to date before a per-row write (see ``_aligned``)."""
        if self._aligned:
            self._row = self._base + self._slot * self.num_envs
            self._aligned = False
            self._unsettled = self._pending  # the aligned adds count too

    def _advance(
        self, row: npt.NDArray[np.intp], valid: npt.NDArray[np.bool_] | None
    ) -> None:
        """After the hot writes at ``row``: move on (the rest waits for `_sync`)."""
        if valid is None:
            self._row = self._next_row[row]
            self._pending += 1
        else:  # rows not valid stay at their sub-pool's free slot: not kept
            self._row = np.where(valid, self._next_row[row], row)
            np.add(self._pending_env, valid, out=self._pending_env)
            self._masked = True
        self._unsettled += 1
        if self._unsettled >= self._settle_limit:
            self._sync()

    def _add_unique(
        self,
        env: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64] | None,
        batch: dict[str, list[npt.NDArray[Any]]],
        scalars: tuple[npt.NDArray[Any], ...],
    ) -> None:
        """Append ``batch[rows]`` to the distinct sub-pools ``env``, then trim.

        ``rows=None`` means every row. The trimming is the documented order: periodic
        clearing, then the overflow rule.
        """

        def pick(leaf: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return leaf if rows is None else leaf[rows]

        self._sync()
        slots = self._slots
        end, length = self._end[env], self._length[env]
        start = (end - length) % slots
        base = self._base[env]
        if not self.store_next_obs:
            self._settle_tails(env, base, end, length, [pick(x) for x in batch["obs"]])
        row = base + end * self.num_envs
        if self._frames is not None:
            self._frames.write(
                env, row, pick(batch["obs"][0]), pick(batch["next_obs"][0])
            )
        else:
            for store, leaf in zip(self._obs, batch["obs"], strict=True):
                store[row] = pick(leaf)
        for store, leaf in zip(self._action, batch["action"], strict=True):
            store[row] = pick(leaf)
        if self._frames is not None:
            pass  # written above
        elif self.store_next_obs:
            for store, leaf in zip(self._next_obs, batch["next_obs"], strict=True):
                store[row] = pick(leaf)
        else:
            for tail, leaf in zip(self._tail, batch["next_obs"], strict=True):
                tail[env] = pick(leaf)
            self._own_next[row] = -1
        reward, terminated, truncated = scalars
        self._reward[row] = pick(reward)
        self._terminated[row] = pick(terminated)
        self._truncated[row] = pick(truncated)
        if self.random:  # a sub-pool's rows come from any env: none continues
            self._starts[row] = True
        else:
            self._starts[row] = self._fresh[env]
            self._fresh[env] = pick(terminated) | pick(truncated)

        old_length = length
        length = length + 1
        received = self._received[env] + 1
        self._received[env] = received
        dropped = np.zeros_like(length)
        if self.clearing_freq is not None and self.clearing_size is not None:
            hit = received % self.clearing_freq == 0
            dropped = np.where(hit, np.minimum(self.clearing_size, length), 0)
        length = length - dropped
        over = length > self.capacity
        if self.window_size is not None:
            trim = np.where(over, length - self.window_size, 0)
        else:
            trim = over.astype(np.int64)
        if not self.store_next_obs:
            self._release(base, start, dropped + trim)
        self._end[env] = (end + 1) % slots
        self._row[env] = base + (end + 1) % slots * self.num_envs
        self._length[env] = length - trim
        if self._tree is not None:
            self._reprioritize(
                env, end, old_length, np.ones_like(end), self._length[env]
            )

    def _settle_tails(
        self,
        env: npt.NDArray[np.int64],
        base: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        obs: list[npt.NDArray[Any]],
    ) -> None:
        """Keep the newest rows' next observations that the new rows do not repeat."""
        has_newest = length > 0
        same = has_newest.copy()
        for tail, leaf in zip(self._tail, obs, strict=True):
            if tail.dtype == object:  # the same object, or an equal string
                same &= [
                    same_value(a, b)
                    for a, b in zip(tail[env].tolist(), leaf.tolist(), strict=True)
                ]
                continue
            # bitwise, so -0.0 vs 0.0 or NaNs are never taken for one another
            flat_tail = np.ascontiguousarray(tail[env]).view(np.uint8)
            flat_leaf = np.ascontiguousarray(leaf, dtype=tail.dtype).view(np.uint8)
            same &= np.all(
                flat_tail.reshape(env.size, -1) == flat_leaf.reshape(env.size, -1),
                axis=1,
            )
        keep = np.flatnonzero(has_newest & ~same)
        if keep.size == 0:
            return
        index = self._allocate(keep.size)
        for extra, tail in zip(self._extra, self._tail, strict=True):
            extra[index] = tail[env[keep]]
        newest = base[keep] + (end[keep] - 1) % self._slots * self.num_envs
        self._own_next[newest] = index

    def _allocate(self, count: int) -> npt.NDArray[np.int64]:
        while len(self._free) < count:
            size = self._extra[0].shape[0] if self._extra else 0
            grown = max(16, size * 2)
            self._extra = [
                np.concatenate(
                    [extra, _empty((grown - size, *extra.shape[1:]), extra.dtype)]
                )
                for extra in self._extra
            ]
            self._free.extend(range(grown - 1, size - 1, -1))
        return np.array([self._free.pop() for _ in range(count)], np.int64)

    def _release(
        self,
        base: npt.NDArray[np.int64],
        start: npt.NDArray[np.int64],
        dropped: npt.NDArray[np.int64],
    ) -> None:
        """Free the kept next observations of the rows being dropped."""
        if not dropped.any():
            return
        first = np.repeat(np.cumsum(dropped) - dropped, dropped)
        step = np.arange(first.size) - first
        slot = (np.repeat(start, dropped) + step) % self._slots
        row = np.repeat(base, dropped) + slot * self.num_envs
        own = self._own_next[row]
        self._free.extend(own[own >= 0].tolist())
        self._own_next[row] = -1

    # -- persistence -------------------------------------------------------------------

    def filled_rows(
        self,
        length: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64] | None,
    ) -> npt.NDArray[np.int64]:
        """The rows of every sub-pool, oldest to newest, sub-pool after sub-pool.

        With ``end=None``, the rows a loaded pool puts them in: slots ``0..length-1``.
        """
        num_envs = self.num_envs
        env = np.repeat(np.arange(num_envs, dtype=np.int64), length)
        offset = np.arange(env.size, dtype=np.int64) - np.repeat(
            np.cumsum(length) - length, length
        )
        slot = (
            offset if end is None else (end[env] - length[env] + offset) % self._slots
        )
        rows: npt.NDArray[np.int64] = env + slot * num_envs
        return rows

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], *, compact: bool = False
    ) -> None:
        """Take every array of :meth:`state_dict` (as read from a pool file).

        The arrays must have the shapes and dtypes of this pool's own state (the
        file reader checks them). ``compact`` state (a saved file) holds each
        sub-pool's filled rows, oldest first: they go to slots ``0..length-1`` (the
        ring starts over; what the pool holds, returns and samples is unchanged).

        Args:
            state: The arrays, by name.
            compact: Whether the per-row arrays hold only the filled rows.
        """
        targets = self.filled_rows(state["length"], None) if compact else slice(None)
        for name in COUNTERS:
            if compact and per_row(name):
                getattr(self, f"_{name}")[targets] = state[name]
            else:
                setattr(self, f"_{name}", state[name])
        groups = ["obs", "action"]
        groups += ["next_obs"] if self.store_next_obs else ["tail", "extra"]
        for group in groups:
            arrays = getattr(self, f"_{group}")
            for index in range(len(arrays)):
                array = state[f"{group}_{index}"]
                if compact and per_row(f"{group}_{index}"):
                    arrays[index][targets] = array
                else:
                    arrays[index] = array
        if not self.store_next_obs:
            if compact:
                self._own_next[targets] = state["own_next"]
            else:
                self._own_next = state["own_next"]
            self._free = state["free"].tolist()
        recent = state["recent"]  # oldest first: back in the ring where they were
        count = int(self._recent_count[0])
        self._recent[
            (count - recent.shape[0] + np.arange(recent.shape[0])) % RECENT_EPISODES
        ] = recent
        if self._frames is not None:
            self._frames.load(
                state,
                targets if isinstance(targets, np.ndarray) else None,
                state["length"] == 0,
            )
        if self._tree is not None:
            self._max_priority = float(state["max_priority"][0])
            if compact:
                priority = np.zeros(self._starts.size, np.float64)
                priority[targets] = state["priority"]
            else:
                priority = state["priority"]
            self._tree.load(priority)
        self._row = self._base + state["end"] * self.num_envs
        self._pending, self._unsettled = 0, 0
        self._slot = int(self._end[0])
        self._aligned = self._hot and bool(np.all(self._end == self._slot))
        self._even = bool(np.all(self._length == self._length[0]))

    @property
    def generator_state(self) -> dict[str, Any]:
        """The state of the pool's random generator (``random`` routing, sampling)."""
        return dict(self._rng.bit_generator.state)

    @generator_state.setter
    def generator_state(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """Every array of the pool, by its name in a pool file (see files.py).

        Returns:
            The live arrays (not copies): counters, the per-row storage of each
            observation and action leaf, and the kept next observations.
        """
        self._sync()
        state: dict[str, npt.NDArray[Any]] = {
            "reward": self._reward,
            "terminated": self._terminated,
            "truncated": self._truncated,
            "end": self._end,
            "length": self._length,
            "received": self._received,
            "episode_return": self._episode_return,
            "episode_length": self._episode_length,
            "episodes": self._episodes,
            "starts": self._starts,
            "fresh": self._fresh,
            "recent": self._recent_episodes(),  # the ring's entries, oldest first
            "recent_count": self._recent_count,
        }
        if self._tree is not None:
            state["priority"] = self._tree.leaves
            state["max_priority"] = np.array([self._max_priority])
        if self._frames is not None:
            # a file holds no row before each sub-pool's oldest: keep those whole
            held = self._length > 0
            oldest = (self._end - self._length) % self._slots
            self._frames.anchor((self._base + oldest * self.num_envs)[held])
            state.update(self._frames.state())
        groups: dict[str, list[npt.NDArray[Any]]] = {
            "obs": self._obs,
            "action": self._action,
        }
        if self.store_next_obs:
            groups["next_obs"] = self._next_obs
        else:
            groups["tail"], groups["extra"] = self._tail, self._extra
            state["own_next"] = self._own_next
            state["free"] = np.asarray(self._free, np.int64)
        for name, arrays in groups.items():
            for index, array in enumerate(arrays):
                state[f"{name}_{index}"] = array
        return state

    def save(self, path: str | os.PathLike[str], *, compress: bool = False) -> Path:
        """Write the pool to ``path`` (an ``.npz`` archive), atomically.

        Only the transitions held are written (not the empty capacity), so a
        partly filled pool makes a small file; :meth:`load` rebuilds the same
        capacity. Written beside ``path``, synced, then renamed over it: ``path``
        is never a partial file, and a previous file there stays intact if the
        save fails. Temporary files left beside it by killed writers are removed.
        The file holds no pickle: spaces and settings are JSON.

        Args:
            path: Destination file (written as given; no suffix is added).
            compress: Deflate the arrays (smaller, slower; good for images).

        Returns:
            The path written.
        """
        return pool_files.write(self, path, compress=compress)

    def to_minari(self, dataset_id: str, **kwargs: Any) -> tuple[Any, int]:
        """Write the complete episodes as a Minari dataset (``vecpool[minari]``).

        See :func:`vecpool.replay.minari.to_minari` (same arguments).

        Returns:
            The ``MinariDataset`` and the number of partial episodes left out.
        """
        return to_minari(self, dataset_id, **kwargs)

    @classmethod
    def load(cls, path: str | os.PathLike[str], trusted: bool = False) -> ReplayPool:
        """Read a pool written by :meth:`save`, checking every field.

        Args:
            path: The file.
            trusted: Also load format-2 files (the first pool files), which keep
                the spaces as a pickle (unpickling a crafted file runs code): only
                for files you trust.

        Returns:
            A pool equal to the one saved, including its generator state.

        Raises:
            ValueError: If the file is truncated, corrupted, of another format or
                inconsistent (the message names the file and what is wrong).
        """
        pool: ReplayPool = pool_files.read(cls, path, trusted)
        return pool


def _frame_store(
    space: spaces.Space[Any], stack: int | None, num_envs: int, slots: int
) -> FrameStore | None:
    """The frame store of a ``frame_stack`` pool, or ``None``.

    Raises:
        ValueError: If ``space`` is no Box of ``stack`` frames along axis 0.
    """
    if stack is None:
        return None
    shape = space.shape if isinstance(space, spaces.Box) else None
    if shape is None or len(shape) == 0 or shape[0] != stack:
        msg = (
            f"`frame_stack={stack}` needs a Box observation space whose first axis "
            f"holds the {stack} frames (what `gymnasium.wrappers."
            f"FrameStackObservation(env, {stack})` makes), got {space}. For Dict "
            "observations, store the stacked leaf in a pool of its own, or drop "
            "`frame_stack`."
        )
        raise ValueError(msg)
    return FrameStore(num_envs, slots, stack, tuple(shape[1:]), np.dtype(space.dtype))


def _check_unit(name: str, value: Any) -> float:
    """``value`` as a float in ``[0, 1]``, or a ValueError naming ``name``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        number = math.nan
    else:
        number = float(value)
    if not 0.0 <= number <= 1.0:  # also refuses nan
        msg = f"`{name}` must be a number between 0 and 1, got {value!r}."
        raise ValueError(msg)
    return number


def _empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Fresh storage: zeros, or empty strings for an ``object`` leaf.

    A slot never written then reads as a string, which a pool file can hold.
    """
    if dtype.kind == "O":
        return np.full(shape, "", object)
    return np.zeros(shape, dtype)


def _rounds(targets: npt.NDArray[np.int64]) -> list[npt.NDArray[np.int64]]:
    """Positions split into rounds of distinct targets, each target's order kept."""
    occurrence = np.zeros(targets.size, np.int64)
    seen: dict[int, int] = {}
    for position, target in enumerate(targets.tolist()):
        occurrence[position] = seen.get(target, 0)
        seen[target] = occurrence[position] + 1
    return [np.flatnonzero(occurrence == r) for r in range(int(occurrence.max()) + 1)]


def _leaves(
    space: spaces.Space[Any], batch: Any, count: int, name: str
) -> list[npt.NDArray[Any]]:
    """The leaf arrays of a batch, each with ``count`` rows."""
    if (
        type(batch) is np.ndarray
        and isinstance(space, NATIVE_LEAVES)
        and batch.shape == (count, *(space.shape or ()))
    ):
        return [batch]  # the common case, without the generic walk
    return [np.asarray(leaf) for leaf in flatten_stored(space, batch, count, name)]
