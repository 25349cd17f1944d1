"""The replay pool: preallocated per-env sub-pools of transitions (pure numpy).

Semantics: docs/replay-pool.md. Each of ``num_envs`` sub-pools is a ring of
``capacity = ceil(pool_size / num_envs)`` transitions (plus one spare slot, so a
sub-pool can hold the appended transition before the overflow rule trims it). Every
field is one array per leaf of its space, shaped ``(num_envs, capacity + 1, ...)``;
adding a vector step is a handful of fancy-indexed writes, whatever the number of
envs.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecpool._util.spaces import NATIVE_LEAVES, is_native, leaves, make_views
from vecpool._util.validation import check_int
from vecpool.replay import files as pool_files
from vecpool.replay.files import COUNTERS, per_row
from vecpool.replay.minari import to_minari
from vecpool.replay.portable import leaf_paths
from vecpool.replay.settings import PoolSettings, renamed_clearing_size
from vecpool.replay.storage import (
    check_strings,
    flatten_stored,
    fresh_objects,
    integer_bounds,
    is_storable,
    same_value,
    storage_leaves,
)

__all__ = ["EpisodeStats", "ReplayPool", "Transitions"]

_SMALL_BATCH = 64  # action batches up to this size are range-checked as lists


class Transitions(NamedTuple):
    """A batch of transitions; every field has the same leading dimension.

    Observations and actions are batched as Gymnasium batches their single spaces:
    arrays, or dicts / tuples of arrays for Dict / Tuple spaces.
    """

    obs: Any
    action: Any
    next_obs: Any
    reward: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]


class EpisodeStats(NamedTuple):
    """Statistics of the episodes that ended in the recorded transitions.

    Attributes:
        count: Number of episodes that ended (terminated or truncated).
        mean_return: Mean sum of recorded rewards per episode (``nan`` if none).
        mean_length: Mean number of recorded transitions per episode (``nan`` if
            none).
    """

    count: int  # type: ignore[assignment]  # shadows tuple.count, on purpose
    mean_return: float
    mean_length: float


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
        ).checked(self.num_envs)
        self.settings = settings
        self.pool_size = settings.pool_size
        self.capacity = settings.capacity(self.num_envs)
        self.window_size = settings.window_size
        self.clearing_freq = settings.clearing_freq
        self.clearing_size = settings.clearing_size
        self.random = settings.random
        self.store_next_obs = settings.store_next_obs
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
        self._slots = self.capacity + 1
        rows = self.num_envs * self._slots
        self._base = np.arange(self.num_envs, dtype=np.int64)
        # every leaf of the observations: arrays, and Text as fixed-width unicode,
        # other leaves (Graph, Sequence, custom) as objects (storage_leaves)
        obs_leaves = storage_leaves(observation_space)
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
        self._ones = np.ones(self.num_envs, np.int64)
        # the flat hot path applies (plain layout, no clearing, env i -> sub-pool i)
        self._hot = (
            self.store_next_obs and self.clearing_freq is None and not self.random
        )
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
        self._received = np.zeros(self.num_envs, np.int64)
        self._episode_return = np.zeros(self.num_envs, np.float64)
        self._episode_length = np.zeros(self.num_envs, np.int64)
        self._episodes = np.zeros(3, np.float64)  # count, sum of returns, of lengths

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
        """Apply the counters of the adds the hot path deferred."""
        adds: Any = self._pending
        if self._masked:
            adds = adds + self._pending_env
            self._pending_env[:] = 0
            self._masked = False
        elif not adds:
            return
        self._pending = 0
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

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the stored transitions."""
        arrays = [*self._obs, *self._action, self._reward, self._terminated]
        arrays += [self._truncated, self._next_row]
        if self.store_next_obs:
            arrays += self._next_obs
        else:
            arrays += [*self._tail, self._own_next, *self._extra]
        return int(sum(array.nbytes for array in arrays))

    @property
    def episode_stats(self) -> EpisodeStats:
        """Count, mean return and mean length of the episodes that ended."""
        count, returns, lengths = self._episodes
        if not count:
            return EpisodeStats(0, math.nan, math.nan)
        return EpisodeStats(int(count), float(returns / count), float(lengths / count))

    def get_pool(self) -> Transitions:
        """Every stored transition: sub-pools in env order, each oldest to newest.

        Returns:
            A :class:`Transitions` of ``len(self)`` rows (fresh arrays).
        """
        self._sync()
        counts = self._length
        env = np.repeat(np.arange(self.num_envs), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        offset = np.arange(env.size) - first
        return self._gather(env, offset)

    def sample(self, batch_size: int) -> Transitions:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        Args:
            batch_size: Number of transitions.

        Returns:
            A :class:`Transitions` of ``batch_size`` rows.

        Raises:
            ValueError: If the pool is empty or ``batch_size < 1``.
        """
        batch_size = check_int("batch_size", batch_size, 1)
        total = len(self)
        if total == 0:
            msg = "Cannot sample from an empty ReplayPool: add transitions first."
            raise ValueError(msg)
        flat = self._rng.integers(0, total, batch_size)  # len() synced the counters
        ends = np.cumsum(self._length)
        env = np.searchsorted(ends, flat, side="right")
        offset = flat - (ends[env] - self._length[env])
        return self._gather(env, offset)

    def _gather(
        self, env: npt.NDArray[np.int64], offset: npt.NDArray[np.int64]
    ) -> Transitions:
        slots = self._slots
        slot = (self._end[env] - self._length[env] + offset) % slots
        row = self._base[env] + slot * self.num_envs
        obs = [array[row] for array in self._obs]
        if self.store_next_obs:
            next_obs = [array[row] for array in self._next_obs]
        else:
            own = self._own_next[row]
            newest = offset == self._length[env] - 1
            following = self._base[env] + (slot + 1) % slots * self.num_envs
            kept = own >= 0
            next_obs = []
            for store, tail, extra in zip(
                self._obs, self._tail, self._extra, strict=True
            ):
                values = store[following]
                values[newest] = tail[env[newest]]
                values[kept] = extra[own[kept]]
                next_obs.append(values)
        return Transitions(  # object leaves: copies, never the pool's own objects
            make_views(self.observation_space, [fresh_objects(a) for a in obs]),
            make_views(self.action_space, [a[row] for a in self._action]),
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
        self._check_actions(action)
        for k, path in self._text_leaves:
            for name, batch in (("obs", obs), ("next_obs", next_obs)):
                check_strings(np.asarray(batch[k]), self._obs[k].dtype, name + path)
        mask = None if valid is None else self._check_valid(valid, env_ids)
        if env_ids is None:
            shapes = self._plain_shapes
            if (
                self._hot
                and shapes is not None
                and len(obs) == len(action) == len(next_obs) == 1
                and type(reward) is np.ndarray
                and type(terminated) is np.ndarray
                and type(truncated) is np.ndarray
                and obs[0].shape == next_obs[0].shape == shapes[0]
                and action[0].shape == shapes[1]
                and reward.shape == terminated.shape == truncated.shape == shapes[2]
                and terminated.dtype == truncated.dtype == np.bool_
            ):
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
        self._episode_return[source] = 0.0
        self._episode_length[source] = 0

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
        if source is not None and np.unique(source).size != source.size:
            # one env twice in a batch: its rows are consecutive steps, in order
            for rows_ in _rounds(source):
                self._record_episodes(source[rows_], reward_arr[rows_], done[rows_])
        else:
            self._record_episodes(source, reward_arr, done, valid)
        if source is None and not self.random:
            self._add_unique(self._envs, None, rows, scalars)
            return
        if source is None:
            source = self._envs
        dest = self._route(source)
        if self.random or np.unique(dest).size != count:
            # several transitions for one sub-pool: apply them in rounds of distinct
            # sub-pools, keeping each sub-pool's order (other sub-pools commute)
            for chosen in _rounds(dest):
                self._add_unique(dest[chosen], chosen, rows, scalars)
            return
        self._add_unique(dest, None, rows, scalars)

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
            self._episodes += (
                np.count_nonzero(done),
                self._episode_return[ended].sum(),
                self._episode_length[ended].sum(),
            )
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0

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
        # int32 row links (to keep the index small) widened once, not per write
        row = self._row.astype(np.intp)
        for store, leaf in zip(self._obs, obs, strict=True):
            store[row] = leaf
        for store, leaf in zip(self._action, action, strict=True):
            store[row] = leaf
        for store, leaf in zip(self._next_obs, next_obs, strict=True):
            store[row] = leaf
        self._reward[row] = reward
        self._terminated[row] = terminated
        self._truncated[row] = truncated
        self._advance(row, reward, terminated, truncated, valid)

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
        """:meth:`_add_hot` for single-array spaces, unrolled (the 1M/s path)."""
        row = self._row.astype(np.intp)
        self._obs[0][row] = obs
        self._action[0][row] = action
        self._next_obs[0][row] = next_obs
        self._reward[row] = reward
        self._terminated[row] = terminated
        self._truncated[row] = truncated
        self._advance(row, reward, terminated, truncated, valid)

    def _advance(
        self,
        row: npt.NDArray[np.intp],
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """After the hot writes at ``row``: move on, count, close ended episodes."""
        returns, lengths = self._episode_return, self._episode_length
        done = np.logical_or(terminated, truncated)
        if valid is None:
            self._row = self._next_row[row]
            self._pending += 1
            np.add(returns, reward, out=returns)
            np.add(lengths, self._ones, out=lengths)
        else:  # rows not valid stay at their sub-pool's free slot: not kept
            self._row = np.where(valid, self._next_row[row], row)
            np.add(self._pending_env, valid, out=self._pending_env)
            self._masked = True
            np.add(returns, reward, out=returns, where=valid)
            np.add(lengths, valid, out=lengths)
            np.logical_and(done, valid, out=done)
        if np.count_nonzero(done):
            self._end_episodes(done)

    def _end_episodes(self, ended: npt.NDArray[np.bool_]) -> None:
        index = np.flatnonzero(ended)
        returns, lengths = self._episode_return, self._episode_length
        episodes = self._episodes
        episodes[0] += index.size
        episodes[1] += returns[index].sum()
        episodes[2] += lengths[index].sum()
        returns[index] = 0.0
        lengths[index] = 0

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
        for store, leaf in zip(self._obs, batch["obs"], strict=True):
            store[row] = pick(leaf)
        for store, leaf in zip(self._action, batch["action"], strict=True):
            store[row] = pick(leaf)
        if self.store_next_obs:
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
            offset
            if end is None
            else (end[env] - length[env] + offset) % (self.capacity + 1)
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
        self._row = self._base + state["end"] * self.num_envs

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
        }
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
            trusted: Also load files of vecpool 0.1, which keep the spaces as a
                pickle (unpickling a crafted file runs code): only for files you
                trust.

        Returns:
            A pool equal to the one saved, including its generator state.

        Raises:
            ValueError: If the file is truncated, corrupted, of another format or
                inconsistent (the message names the file and what is wrong).
        """
        pool: ReplayPool = pool_files.read(cls, path, trusted)
        return pool


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
