"""The replay pool: preallocated per-env sub-pools of transitions (pure numpy).

Semantics: docs/replay-pool.md. :class:`ReplayPool` is a facade over parts that
are read and tested alone, each saving and loading its own state (as TorchRL's
``ReplayBuffer`` is a storage, a sampler and a writer):

* the ring of per-env sub-pools: slots, windows, clearing, where episodes
  continue (vecpool/replay/ring.py);
* the storage kind, chosen once at construction: arrays, next observations kept
  apart, frames stored once (vecpool/replay/layouts.py,
  vecpool/replay/frames.py), and the columns every kind shares;
* the writers: the hot (aligned) path and the routed path
  (vecpool/replay/writers.py), behind the checks of what is added
  (vecpool/replay/inputs.py);
* the index samplers, uniform and prioritized (vecpool/replay/samplers.py), and
  the readers, one step, n-step and sequences (vecpool/replay/readers.py): any
  reader reads any sampler's draw; all draw from the pool's one generator;
* the episode log (vecpool/replay/episode_log.py).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import is_native
from vecpool._util.validation import check_int
from vecpool.replay import files as pool_files
from vecpool.replay.batches import (
    EndedEpisodes,
    EpisodeStats,
    ReplaySample,
    Sequences,
    Transitions,
)
from vecpool.replay.episode_log import CUT, Ended, EpisodeLog
from vecpool.replay.inputs import AddChecks, check_scalars, split_leaves
from vecpool.replay.layouts import Columns, make_layout
from vecpool.replay.minari import to_minari
from vecpool.replay.readers import NStep, SequenceReader, Stored, read_rows
from vecpool.replay.ring import SubPoolRing
from vecpool.replay.samplers import NOT_PRIORITIZED, SAMPLERS, sampler_name
from vecpool.replay.settings import (
    RECENT_EPISODES,
    PoolSettings,
    renamed_clearing_size,
)
from vecpool.replay.storage import is_storable, storage_leaves
from vecpool.replay.writers import HotWriter, RoutedWriter, rounds

__all__ = [
    "RECENT_EPISODES",
    "EpisodeStats",
    "ReplayPool",
    "ReplaySample",
    "Sequences",
    "Transitions",
]


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
        _check_spaces(observation_space, action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self._rng = np.random.default_rng(seed)
        # a frame-stacked ring keeps K - 1 more slots: the rows the oldest row's
        # stack is rebuilt from (vecpool/replay/frames.py)
        ring = SubPoolRing(
            self.num_envs,
            self.capacity,
            self.frame_stack or 1,
            self.window_size,
            self.clearing_freq,
            self.clearing_size,
        )
        layout = make_layout(
            observation_space, ring, self.store_next_obs, self.frame_stack
        )
        columns = Columns(action_space, ring.rows)
        self._ring, self._log = ring, EpisodeLog(self.num_envs)
        self._stored = Stored(ring, layout, columns, observation_space, action_space)
        self._sampler = SAMPLERS[sampler_name(settings)](ring, self._rng, settings)
        # sequences start at rows drawn uniformly, whatever the pool's sampler
        self._sequence_starts = (
            self._sampler
            if sampler_name(settings) == "uniform"
            else SAMPLERS["uniform"](ring, self._rng, settings)
        )
        self._checks = AddChecks(observation_space, action_space, self.num_envs)
        # read on every add: kept here, one attribute away
        self._plain_shapes = self._checks.plain_shapes
        self._discrete_bounds = self._checks.discrete_bounds
        self._obs_dtype = _plain_dtype(self._checks)
        hot = layout.hot and self.clearing_freq is None and not self.random
        self._hot = HotWriter(ring, layout, columns, self._log, self._sampler, hot)
        self._routed = RoutedWriter(
            ring, layout, columns, self._sampler, self._rng, self.random
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; a pool pickled before the checks of casts gets their dtypes."""
        self.__dict__.update(state)
        checks = self._checks
        if not hasattr(checks, "obs_dtypes"):
            leaves = storage_leaves(self.observation_space)
            checks.obs_dtypes = [dtype for dtype, _ in leaves]
        self._obs_dtype = _plain_dtype(checks)

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
        self._hot.show()
        lengths: npt.NDArray[np.int64] = self._ring.length.copy()
        return lengths

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
        self._hot.show()
        received: npt.NDArray[np.int64] = self._ring.received.copy()
        return received

    def __len__(self) -> int:
        """Total number of stored transitions."""
        self._hot.show()
        return int(self._ring.length.sum())

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the stored transitions."""
        ring, stored = self._ring, self._stored
        parts = stored.layout.nbytes + stored.columns.nbytes + self._sampler.nbytes
        return int(parts + ring.starts.nbytes + ring.next_row.nbytes)

    def recent_episode_stats(self, k: int = 100) -> EpisodeStats:
        """Count, mean return and mean length of the last ``k`` episodes that ended.

        :attr:`episode_stats` covers every episode since the pool was made; this
        covers the newest ones (what a training log shows). Episodes that ended in
        the same vector step count in env order; those that ended in one
        ``add(..., env_ids=...)``, in the order of its rows.

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
        self._hot.sync()
        return self._log.recent_stats(k)

    @property
    def episode_stats(self) -> EpisodeStats:
        """Count, mean return and mean length of the episodes that ended."""
        self._hot.sync()
        return self._log.stats()

    def keep_episode_history(self) -> None:
        """Keep every episode that ends from now on, for :meth:`take_ended_episodes`.

        For a loop that reports each episode (``vecpool collect``, a training
        loop's logger): the pool counts them anyway, so nothing is counted twice.
        The history is not part of the pool's state (never saved or loaded).
        """
        self._log.keep_history()

    def take_ended_episodes(self) -> EndedEpisodes:
        """The episodes that ended since the last take, oldest first.

        Empty unless :meth:`keep_episode_history` was called. The episodes of a
        vector step come in env order; those :meth:`abort_episodes` cut, or whose
        start was not recorded, are not among them (as in :attr:`episode_stats`).

        Example:
            >>> import numpy as np
            >>> from gymnasium import spaces
            >>> pool = ReplayPool(spaces.Discrete(3), spaces.Discrete(2), 2, 10)
            >>> pool.keep_episode_history()
            >>> for done in ([False, True], [True, False]):
            ...     pool.add(np.zeros(2, int), np.zeros(2, int), np.zeros(2, int),
            ...              np.ones(2), np.array(done), np.zeros(2, bool))
            >>> ended = pool.take_ended_episodes()
            >>> ended.env_ids.tolist(), ended.lengths.tolist(), ended.returns.tolist()
            ([1, 0], [1, 2], [1.0, 2.0])
            >>> pool.take_ended_episodes().env_ids.size  # taken: none left
            0

        Returns:
            An :class:`EndedEpisodes` (returns, lengths, env ids).
        """
        self._hot.sync()
        return self._log.take_history()

    def get_pool(self) -> Transitions:
        """Every stored transition: sub-pools in env order, each oldest to newest.

        Returns:
            A :class:`Transitions` of ``len(self)`` rows (fresh arrays).
        """
        return Transitions(*read_rows(self._stored, *self._held()))

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
            yield Transitions(*read_rows(self._stored, env[part], offset[part]))

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
        self._hot.show()
        return Transitions(*read_rows(self._stored, *self._span(env, start, stop)))

    def stretch_starts(self, env: int, start: int, stop: int) -> npt.NDArray[np.bool_]:
        """Whether each of transitions ``start:stop`` of sub-pool ``env`` starts one.

        A stretch of transitions starts at the sub-pool's oldest, after an episode
        end, and at the first transition after a reset, an abort or a worker
        restart: n-step windows and sequences never cross one, and the episode
        export (:func:`vecpool.replay.episodes.complete_episodes`) splits there.

        Args:
            env: The sub-pool (env index).
            start: First offset (0: its oldest).
            stop: One past the last offset (at most ``lengths[env]``).

        Returns:
            One bool per transition.

        Raises:
            ValueError: If the range is not within the sub-pool.
        """
        marks = self.episode_starts(env, start, stop)
        if start == 0 and marks.size:  # the oldest, whatever came before it
            marks[0] = True
        return marks

    def episode_starts(self, env: int, start: int, stop: int) -> npt.NDArray[np.bool_]:
        """Whether each of those transitions follows an episode end or a cut.

        :meth:`stretch_starts` without its mark on the sub-pool's oldest for being
        the oldest: once older transitions were dropped, the oldest is marked only
        where the one dropped before it ended an episode, or a reset, an abort or a
        restart came between them, so that an episode beginning there is exported
        whole (:func:`vecpool.replay.episodes.complete_episodes`). A pool loaded
        from a file of a format before 5 does not know it for a sub-pool that
        dropped transitions (its oldest is not marked). Arguments, return value
        and errors: as :meth:`stretch_starts`.
        """
        return self._row_marks("starts", env, start, stop)

    def resumed_starts(self, env: int, start: int, stop: int) -> npt.NDArray[np.bool_]:
        """Whether each of those transitions starts a stretch that begins no episode.

        Such a stretch goes on with an episode whose start was not recorded: after
        :meth:`abort_episodes` with ``resumes=True`` (a ``ReplayPoolWrapper`` step
        that raised, an env first seen in the middle of an episode). The rest of
        that episode is not counted (:attr:`episode_stats`) nor exported
        (:func:`vecpool.replay.episodes.complete_episodes`). Arguments, return
        value and errors: as :meth:`stretch_starts`.
        """
        return self._row_marks("resumed", env, start, stop)

    def _row_marks(
        self, name: str, env: int, start: int, stop: int
    ) -> npt.NDArray[np.bool_]:
        """The ring's per-row marks ``name`` of transitions ``start:stop`` (a copy)."""
        self._hot.sync()  # settles the marks of the rows added since
        rows = self._ring.row_of(*self._span(env, start, stop))
        marks: npt.NDArray[np.bool_] = getattr(self._ring, name)[rows]
        return marks

    def _span(
        self, env: int, start: int, stop: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Env and offset of each transition ``start:stop`` of sub-pool ``env``.

        Raises:
            ValueError: If the range is not within the sub-pool.
        """
        env = check_int("env", env, 0, self.num_envs - 1)
        held = int(self._ring.length[env])
        start = check_int("start", start, 0, held)
        stop = check_int("stop", stop, start, held)
        offset = np.arange(start, stop, dtype=np.int64)
        return np.full(offset.size, env, np.int64), offset

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
        if type(batch_size) is not int or batch_size < 1:
            batch_size = check_int("batch_size", batch_size, 1)
        reader = self._n_step_reader(n_step, gamma)
        if beta is not None:
            if not self._sampler.weighs:
                msg = (
                    "`beta` weighs prioritized draws, and this pool samples "
                    "uniformly: make it with `ReplayPool(..., alpha=0.6)` (or "
                    "`ReplayPoolWrapper(..., alpha=0.6)`), or drop `beta`."
                )
                raise ValueError(msg)
            beta = _check_unit("beta", beta)
        if reader is None:
            self._hot.show()  # a plain draw reads no marks
        else:
            self._hot.sync()  # n-step windows stop at the marks
        env, offset, row = self._sampler.draw(batch_size)
        if reader is None and not self._sampler.weighs and beta is None:
            return Transitions(*read_rows(self._stored, env, offset, row=row))
        if reader is None:
            fields = (
                *read_rows(self._stored, env, offset, row=row),
                np.ones(batch_size),
            )
        else:
            fields = reader.read(self._stored, env, offset, row)
        weights = (
            np.ones(batch_size) if beta is None else self._sampler.weights(row, beta)
        )
        obs, action, next_obs, reward, terminated, truncated, discount = fields
        return ReplaySample(
            obs,
            action,
            next_obs,
            reward,
            terminated,
            truncated,
            discount,
            self._ids(env, offset),
            weights,
        )

    def _n_step_reader(self, n_step: int | None, gamma: float | None) -> NStep | None:
        """The n-step reader ``n_step`` and ``gamma`` ask for (checked), if any."""
        if n_step is None:
            if gamma is not None:
                msg = (
                    "`gamma` is used only with `n_step`: pass `n_step` too, or drop it."
                )
                raise ValueError(msg)
            return None
        steps = check_int("n_step", n_step, 1)
        self._check_ordered("n_step")
        if gamma is None:
            msg = (
                "`n_step` needs `gamma`, the discount of the rewards summed: "
                "pass e.g. `gamma=0.99`."
            )
            raise ValueError(msg)
        return NStep(steps, _check_unit("gamma", gamma))

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
        self._hot.sync()
        env, start, _ = self._sequence_starts.draw(batch_size)
        return SequenceReader(length).read(self._stored, env, start)

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
        if not self._sampler.weighs:
            raise ValueError(NOT_PRIORITIZED)
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
        # every row may come to hold the largest priority ** alpha (new rows get
        # it): their sum, the sum tree's total, must stay a finite float
        alpha, size = self.alpha or 0.0, self._ring.rows
        with np.errstate(over="ignore"):
            top = np.power(values.max(), alpha) if values.size else 0.0
            total = top * size
        if not np.isfinite(total):
            msg = (
                f"`priorities` ** alpha overflows: the largest, {values.max()}, to "
                f"the power alpha={alpha}, over the pool's {size:,} rows, is not a "
                "finite float. Pass smaller priorities (e.g. clip them)."
            )
            raise ValueError(msg)
        self._hot.show()
        ids = rows.astype(np.int64)
        received = self._ring.received[ids % self.num_envs]
        if ids.size and (ids.min() < 0 or np.any(ids // self.num_envs >= received)):
            msg = (
                "`indices` must be the `indices` of a sample drawn from this pool, "
                f"got values (min {ids.min()}, max {ids.max()}) it never gave out."
            )
            raise ValueError(msg)
        self._sampler.update(ids, values)

    def _ids(
        self, env: npt.NDArray[np.int64], offset: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The ids of transitions: ``env + num_envs * serial``.

        ``serial`` counts the transitions its sub-pool received before it, so an id
        names one transition for good: it survives save/load (rows move, serials
        do not), and once the transition is dropped no other has it.
        """
        ring = self._ring
        serial = ring.received[env] - ring.length[env] + offset
        ids: npt.NDArray[np.int64] = env + self.num_envs * serial
        return ids

    def _check_ordered(self, option: str) -> None:
        if self.random:
            msg = (
                f"`{option}` needs each env's rows in order, and this pool routes "
                "them at random (`random=True`): make the pool without `random`."
            )
            raise ValueError(msg)

    def _held(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Sub-pool and offset of every held row, in the order of :meth:`get_pool`."""
        self._hot.show()
        return self._ring.held()

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
        if env_ids is None and self._add_plain(
            obs, action, next_obs, reward, terminated, truncated, valid
        ):
            return
        shapes = self._plain_shapes
        if (
            env_ids is None
            and shapes is not None
            and type(obs) is np.ndarray
            and type(action) is np.ndarray
            and type(next_obs) is np.ndarray
        ):  # one array per field, not the plain path's: the checks of any leaves
            self._add_checked(
                [obs], [action], [next_obs], reward, terminated, truncated, None, valid
            )
            return
        count = (
            self.num_envs
            if env_ids is None
            else self._checks.check_env_ids(env_ids).size
        )
        self.add_leaves(
            split_leaves(self.observation_space, obs, count, "obs"),
            split_leaves(self.action_space, action, count, "action"),
            split_leaves(self.observation_space, next_obs, count, "next_obs"),
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
        if (
            env_ids is None
            and len(obs) == len(action) == len(next_obs) == 1
            and self._add_plain(
                obs[0], action[0], next_obs[0], reward, terminated, truncated, valid
            )
        ):
            return
        self._add_checked(
            obs, action, next_obs, reward, terminated, truncated, env_ids, valid
        )

    def _add_checked(
        self,
        obs: list[npt.NDArray[Any]],
        action: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        reward: Any,
        terminated: Any,
        truncated: Any,
        env_ids: Any,
        valid: Any,
    ) -> None:
        """:meth:`add_leaves` for leaves that are not one plain array a field."""
        count = self.num_envs if env_ids is None else np.size(env_ids)
        checks = self._checks
        checks.check_leaves(obs, action, next_obs, count)
        mask = None if valid is None else checks.check_valid(valid, env_ids)
        if env_ids is not None:
            source = checks.check_env_ids(env_ids)
            if source.size:
                self._add_rows(
                    source, obs, action, next_obs, reward, terminated, truncated, mask
                )
            return
        self._add_rows(None, obs, action, next_obs, reward, terminated, truncated, mask)

    def _add_plain(
        self,
        obs: Any,
        action: Any,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        valid: Any,
    ) -> bool:
        """Add a step of one array a field, one row per env; whether it was one.

        The hot path of :meth:`add` and :meth:`add_leaves` (the wrapper's): its
        checks are those of the general path for such a step, inline. A step of
        any other kind is left to the caller (``False``), nothing done.

        Raises:
            ValueError: As :meth:`add`, for an action outside the action space
                or a bad ``valid``.
        """
        shapes = self._plain_shapes
        if not (
            shapes is not None
            and self._hot.enabled
            and type(obs) is type(action) is type(next_obs) is np.ndarray
            and type(reward) is type(terminated) is type(truncated) is np.ndarray
            and obs.shape == next_obs.shape == shapes[0]
            and (
                obs.dtype == next_obs.dtype == self._obs_dtype
                or self._checks.takes_as_is(obs.dtype, next_obs.dtype)
            )
            and reward.dtype.kind in "biuf"
            and action.shape == shapes[1]
            and reward.shape == terminated.shape == truncated.shape == shapes[2]
            and terminated.dtype == truncated.dtype == np.bool_
        ):
            return False
        bounds = self._discrete_bounds
        if bounds is None or action.dtype.kind not in "iu":
            self._checks.check_actions([action])
        else:  # a Discrete action, inline (see `AddChecks.check_actions`)
            values = action.tolist()
            if not (bounds[0] <= min(values) and max(values) < bounds[1]):
                self._checks.refuse_actions(action)
        if valid is not None:
            valid = self._checks.check_valid(valid, None)
        elif self._ring.aligned:  # every sub-pool at the same slot: slice writes
            self._hot.add_aligned(obs, action, next_obs, reward, terminated, truncated)
            return True
        self._hot.add_rows(
            [obs], [action], [next_obs], reward, terminated, truncated, valid
        )
        return True

    def abort_episodes(self, env_ids: Any, *, resumes: bool = False) -> None:
        """Abort the unfinished episode of each env in ``env_ids``.

        Its transitions stay in the pool, but the episode is not counted as
        finished (:meth:`episode_stats`) and the env's next transition starts a new
        episode instead of continuing it. For an episode cut short without an end
        (a crashed worker, an interrupted collection).

        Args:
            env_ids: Env indices (1-D ints in range).
            resumes: The envs go on with the episode, some of its steps lost (a
                step that failed): the rest of it is not counted as an episode
                either, when it ends; the envs' next episodes are. Default: the
                episode ends here (the env is reset or replaced).

        Raises:
            ValueError: If ``env_ids`` are not 1-D integers in range.
        """
        source = self._checks.check_env_ids(env_ids)
        self._hot.sync()
        if resumes:
            self._log.cut(source)
        else:
            self._log.abort(source)
        self._ring.fresh[source] = True
        self._ring.resuming[source] = resumes

    def _add_rows(
        self,
        source: npt.NDArray[np.int64] | None,
        obs: list[npt.NDArray[Any]],
        action: list[npt.NDArray[Any]],
        next_obs: list[npt.NDArray[Any]],
        reward: Any,
        terminated: Any,
        truncated: Any,
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """Rows already split into leaf arrays, to the writer that takes them.

        ``source`` is ``None`` for one row per env, in env order (the hot path
        where it applies); ``valid`` marks the rows that are transitions (the
        others are skipped, e.g. ``NEXT_STEP`` reset steps).
        """
        count = self.num_envs if source is None else source.size
        scalars = check_scalars(reward, terminated, truncated, count)
        if source is None and self._hot.enabled:
            self._hot.add_rows(obs, action, next_obs, *scalars, valid)
            return
        self._hot.leave()  # the episodes below continue those the hot path deferred
        rows = {"obs": obs, "action": action, "next_obs": next_obs}
        if valid is not None:
            keep = np.flatnonzero(valid)  # not the hot path: select the rows
            rows = {name: [leaf[keep] for leaf in part] for name, part in rows.items()}
            scalars = (scalars[0][keep], scalars[1][keep], scalars[2][keep])
            source = keep if source is None else source[keep]
            if keep.size == 0:
                return
        self._routed.add(source, rows, scalars)
        # the episodes once the rows are in: a row refused above counts nothing
        reward_arr, done = scalars[0], scalars[1] | scalars[2]
        if source is not None and np.unique(source).size != source.size:
            # one env twice in a batch: its rows are consecutive steps, in order,
            # counted in rounds of distinct envs; the episodes that end are put in
            # the recent ring in the order of their rows
            ended: list[Ended] = []
            for chosen in rounds(source):
                got = self._log.record(
                    source[chosen], reward_arr[chosen], done[chosen], remember=False
                )
                if got is not None:  # rows of this round -> rows of the batch
                    ended.append((chosen[got[0]], got[1], got[2]))
            self._log.remember_in_order(ended, source)
        else:
            self._log.record(source, reward_arr, done)

    # -- persistence -------------------------------------------------------------------

    def filled_rows(
        self,
        length: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """The rows of every sub-pool, oldest to newest, sub-pool after sub-pool."""
        return self._ring.filled_rows(length, end)

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], *, compact: bool = False
    ) -> None:
        """Take every array of :meth:`state_dict` (another pool's, or a file's).

        The arrays must have the names, shapes and dtypes of this pool's own
        state, and counters in range: checked first, nothing taken otherwise.
        They are copied: the pool they came from (whose :meth:`state_dict` holds
        its live arrays) goes on without changing this one. ``compact`` state
        (read from a pool file, which the file reader checked, taken as it is;
        not checked again here) holds each
        sub-pool's filled rows, oldest first: they go back to the slots that
        ``end`` says they held (the reader gives ``end = length`` for a file that
        has none: slots ``0..length-1``).

        Args:
            state: The arrays, by name.
            compact: Whether the per-row arrays hold only the filled rows.

        Raises:
            ValueError: If ``state`` does not fit this pool (an array's name,
                dtype or shape, or counters out of range; nothing is changed).
        """
        if compact:
            targets = self._ring.filled_rows(state["length"], state["end"])
        else:
            pool_files.check_state(self, state)
            targets = None
            state = {name: np.array(array) for name, array in state.items()}
        self._stored.columns.load_state_dict(state, targets)
        self._ring.load_state_dict(state, targets)
        self._log.load_state_dict(state)
        self._stored.layout.load_state_dict(state, targets, state["length"] == 0)
        self._sampler.load_state_dict(state, targets)
        if "resuming" not in state:  # from before format 7
            self._mark_cuts_in_progress()
        self._hot.loaded()

    def _mark_cuts_in_progress(self) -> None:
        """Mark the stretches of episodes going on without their start (the log's).

        State from before format 7 has no such marks; the episode log still knows
        each env whose episode in progress was cut (``CUT``): its next row, or the
        stretch its rows since the cut began, goes on with it. (A cut episode that
        already ended cannot be told from a whole one there.)
        """
        ring = self._ring
        cut = self._log.episode_length < CUT // 2
        ring.resuming = ring.fresh & cut
        for env in np.flatnonzero(cut & ~ring.fresh & (ring.length > 0)).tolist():
            length = int(ring.length[env])
            rows = ring.row_of(*self._span(env, 0, length))
            begun = np.flatnonzero(ring.starts[rows])
            if begun.size:  # else the cut lies before the oldest row kept
                ring.resumed[rows[begun[-1]]] = True

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
        self._hot.sync()
        return {
            **self._stored.columns.state_dict(),
            **self._ring.state_dict(),
            **self._log.state_dict(),
            **self._sampler.state_dict(),
            **self._stored.layout.state_dict(self._ring),
        }

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
            A pool equal to the one saved, including its generator state and
            each row's slot: the same transitions, statistics, priorities and
            draws, uniform or prioritized. (A file of format 3 to 5 has no
            slots: its rows go to each sub-pool's first slots, and a
            prioritized pool's draws then differ from the saved pool's.)

        Raises:
            ValueError: If the file is truncated, corrupted, of another format or
                inconsistent (the message names the file and what is wrong).
        """
        pool: ReplayPool = pool_files.read(cls, path, trusted)
        return pool


def _plain_dtype(checks: AddChecks) -> np.dtype[Any] | None:
    """The stored dtype of a one-leaf observation (the hot path's), else ``None``."""
    dtypes = checks.obs_dtypes
    return dtypes[0] if len(dtypes) == 1 else None


_NOT_A_SPACE = (
    "`{0}_space` must be a gymnasium space (e.g. the env's `single_{0}_space`), "
    "got {1}."
)


def _check_spaces(observation_space: object, action_space: object) -> None:
    """Refuse spaces a pool cannot store."""
    if not isinstance(observation_space, spaces.Space):
        raise ValueError(_NOT_A_SPACE.format("observation", type(observation_space)))
    if not isinstance(action_space, spaces.Space):
        raise ValueError(_NOT_A_SPACE.format("action", type(action_space)))
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
