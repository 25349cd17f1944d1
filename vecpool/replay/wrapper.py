"""Vector wrappers that connect envs to the replay pool."""

from __future__ import annotations

import warnings
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from vecpool._util.spaces import NATIVE_LEAVES, make_writer
from vecpool.errors import VecPoolWarning
from vecpool.replay.boundaries import AutoresetTracker, restarted_rows
from vecpool.replay.pool import ReplayPool, Transitions
from vecpool.replay.portable import leaf_paths, records
from vecpool.replay.settings import PoolSettings, renamed_clearing_size
from vecpool.replay.storage import flatten_stored, put_value, storage_leaves

__all__ = ["ReplayPoolWrapper", "restarted_rows"]


if TYPE_CHECKING:
    _VectorWrapper = VectorWrapper[Any, Any, Any, Any, Any]
else:  # Gymnasium < 1.3 has no type parameters on VectorWrapper
    _VectorWrapper = VectorWrapper


class ReplayPoolWrapper(_VectorWrapper):
    """Record every real transition of a vector env into a :class:`ReplayPool`.

    Works on any Gymnasium ``VectorEnv`` (vecpool's, Gymnasium's Sync/Async, wrapped)
    and returns every ``reset`` and ``step`` result unchanged. Which steps are
    transitions follows ``env.metadata["autoreset_mode"]``:

    * ``NEXT_STEP``: the step after an episode ended only resets that env; it is
      not a transition and is not recorded.
    * ``SAME_STEP``: the ``next_obs`` of an env that ended is
      ``infos["final_obs"][i]``, not the reset observation returned.
    * ``DISABLED``: every step is a transition; ``reset(options={"reset_mask": m})``
      refreshes only the masked envs' current observation.

    A row marked ``infos["worker_restarted"]`` (a worker died and its envs were
    replaced, ``on_worker_crash="restart"``, docs/reliability.md) is no transition
    in any mode: nothing is recorded for it and the env's episode in progress is
    aborted in the pool (:meth:`ReplayPool.abort_episodes`: not counted as
    finished, not merged with the next one). Recording then resumes as after any
    episode end: ``NEXT_STEP`` skips the reset step that follows, ``SAME_STEP``
    starts from the new env's first observation (the row's ``obs``; its
    ``final_obs`` is the old one, not a transition), ``DISABLED`` waits for the
    masked reset. A reset aborts the episodes of the envs it resets, whether
    it reports them ``worker_restarted`` or not.

    ``terminated`` and ``truncated`` are stored separately.

    Attributes:
        pool: The :class:`ReplayPool` the transitions go to.
        autoreset_mode: The wrapped env's autoreset mode, as read at construction.

    Example:
        >>> import gymnasium as gym, vecpool
        >>> envs = vecpool.ReplayPoolWrapper(
        ...     gym.make_vec("CartPole-v1", num_envs=2), pool_size=100
        ... )
        >>> _ = envs.reset(seed=0)
        >>> _ = envs.action_space.seed(0)
        >>> for _ in range(10):
        ...     _ = envs.step(envs.action_space.sample())
        >>> len(envs.pool), envs.pool.lengths.tolist()
        (20, [10, 10])
        >>> envs.close()

    To go on recording into a pool saved earlier (a checkpoint), pass it as
    ``pool`` instead of the settings: ``ReplayPoolWrapper(envs,
    pool=ReplayPool.load(path))``. The pool's episodes in progress are aborted
    (never counted, never continued): recording goes on as into a new pool, and
    after a full ``reset`` the pool holds what one run through both would have
    held had it reset there.

    Args:
        env: The vector env to record.
        pool_size: Total capacity; each sub-pool holds ``ceil(pool_size / num_envs)``.
        window_size: See :class:`ReplayPool`.
        clearing_freq: See :class:`ReplayPool`.
        clearing_size: See :class:`ReplayPool`.
        random: See :class:`ReplayPool`.
        seed: Seed of the pool's routing and sampling generator.
        store_next_obs: See :class:`ReplayPool`.
        alpha: Prioritized replay; see :class:`ReplayPool`.
        frame_stack: Store each frame of stacked observations once; see
            :class:`ReplayPool`.
        window_size_: Deprecated name of ``clearing_size``; gives a
            :class:`DeprecationWarning`.
        pool: A pool to record into (e.g. :meth:`ReplayPool.load`'s), in place
            of the settings above: one sub-pool per env, the env's spaces.

    Raises:
        ValueError: As :class:`ReplayPool`; if ``pool`` does not fit ``env``,
            comes with pool settings, or is recorded into by another wrapper that
            is still open.
        TypeError: If neither ``pool_size`` nor ``pool`` is given, or both
            ``clearing_size`` and ``window_size_``; if ``pool`` is not a
            :class:`ReplayPool`.
    """

    def __init__(
        self,
        env: VectorEnv[Any, Any, Any],
        pool_size: int | None = None,
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
        pool: ReplayPool | None = None,
    ) -> None:
        """Wrap ``env`` and preallocate its pool (or take ``pool``)."""
        clearing_size = renamed_clearing_size(
            "ReplayPoolWrapper", clearing_size, window_size_
        )
        tuning = (window_size, clearing_freq, clearing_size, random, seed)
        storage = (store_next_obs, alpha, frame_stack)
        if pool is not None:
            given = pool_size is not None or tuning != (None, None, None, False, None)
            _check_fits(pool, env, given or storage != (True, None, None))
            _check_free(pool)
        elif pool_size is None:
            msg = (
                "ReplayPoolWrapper needs `pool_size` (the pool's capacity), or "
                "`pool=`: a ReplayPool to record into, e.g. ReplayPool.load(path)."
            )
            raise TypeError(msg)
        else:
            pool = ReplayPool.from_settings(
                env.single_observation_space,
                env.single_action_space,
                env.num_envs,
                PoolSettings(pool_size, *tuning, *storage),
            )
        self.pool = pool
        # nothing is known of the envs yet: a given pool's episodes in progress
        # were another env's, and an env stepped before any reset goes on with an
        # episode whose start is not recorded (not counted, not exported); a
        # reset starts each env's next episode as in a new pool
        pool.abort_episodes(np.arange(pool.num_envs), resumes=True)
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode")
        if mode is None:
            warnings.warn(
                f"{env} has no `metadata['autoreset_mode']`; recording as NEXT_STEP.",
                VecPoolWarning,
                stacklevel=2,
            )
            mode = AutoresetMode.NEXT_STEP
        self.autoreset_mode = AutoresetMode(mode)
        space = env.single_observation_space
        n = env.num_envs
        self._obs = [
            np.zeros((n, *shape), dtype) for dtype, shape in storage_leaves(space)
        ]
        self._next = [np.zeros_like(array) for array in self._obs]
        self._write_next = make_writer(space, self._next, store=put_value)
        # the envs whose current observation is known (none before the first
        # reset, none after a step that failed: each becomes known again when it
        # is reset or has stepped), and whether all are: one bool per step
        self._known = np.zeros(n, np.bool_)
        self._all_known = False
        self._done = np.zeros(n, np.bool_)  # the last step's ended envs
        # what record_step found of the last step: (the rows that are transitions,
        # None: all; the rows a worker restart cut, None: none; the envs whose
        # episode ended; how many): vecpool collect counts episodes from it
        self.last_step: tuple[
            npt.NDArray[np.bool_] | None,
            npt.NDArray[np.bool_] | None,
            npt.NDArray[np.bool_],
            int,
        ] = (None, None, self._done, 0)
        self._boundaries = AutoresetTracker(n, self.autoreset_mode)
        single_action = env.single_action_space
        self._obs_shape = (
            (n, *space.shape)
            if isinstance(space, NATIVE_LEAVES) and space.shape is not None
            else None
        )
        self._action_shape = (
            (n, *single_action.shape)
            if isinstance(single_action, NATIVE_LEAVES)
            and single_action.shape is not None
            else None
        )
        _RECORDERS[pool] = weakref.ref(self)  # last: a failed start takes no pool

    def close(self, **kwargs: Any) -> None:
        """Close the env; the pool may then be wrapped again (``pool=``)."""
        try:
            self.env.close(**kwargs)
        finally:
            owner = _RECORDERS.get(self.pool)
            if owner is not None and owner() is self:
                del _RECORDERS[self.pool]

    def get_pool(self) -> Transitions:
        """Every recorded transition (see :meth:`ReplayPool.get_pool`)."""
        return self.pool.get_pool()

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env and take its observations as the envs' current ones.

        The episodes in progress of the envs reset (every env, or those of
        ``options["reset_mask"]``; also those the reset reports
        ``worker_restarted``, always among them) are aborted in the pool: never
        counted as finished, never merged with the next ones.
        """
        mask = None if options is None else options.get("reset_mask")
        try:
            obs, infos = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        except BaseException:  # some envs may be reset, unseen: those asked to be
            asked = None if mask is None else np.asarray(mask)
            if asked is not None and asked.shape != (self.num_envs,):
                asked = None  # a mask the env refused: all, never a second error
            self._forget(None if asked is None else asked.astype(np.bool_))
            raise
        current = self._split(obs)
        if mask is not None:
            mask = np.asarray(mask, np.bool_)
        # the episodes in progress of the envs reset (replaced in the reset or not,
        # docs/reliability.md) are over, unfinished
        self.pool.abort_episodes(
            np.arange(self.num_envs) if mask is None else np.flatnonzero(mask)
        )
        if mask is None:
            for store, leaf in zip(self._obs, current, strict=True):
                store[...] = leaf
            self._boundaries.after_reset()
            self._known[:] = True
        else:
            # the others go on: after a failed step, those the wrapper did not see
            # stay unknown (they may have ended in it, unseen: a reset step next)
            for store, leaf in zip(self._obs, current, strict=True):
                store[mask] = leaf[mask]
            self._boundaries.after_reset(mask)
            self._known[mask] = True
        self._all_known = bool(self._known.all())
        return obs, infos

    def step(
        self, actions: Any
    ) -> tuple[
        Any, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], dict[str, Any]
    ]:
        """Step the env and record the step's real transitions.

        If the inner step raises (an env error, a Ctrl-C), no transition links the
        observations from before it to those after it: the envs may have moved on
        without the wrapper seeing their results. Recording resumes with the next
        step's observations, and the episodes in progress are aborted in the pool
        (their returns miss a step).
        """
        try:
            result = self.env.step(actions)
        except BaseException:
            self._forget()
            raise
        self.record_step(actions, result)
        return result

    def record_step(self, actions: Any, result: tuple[Any, ...]) -> None:
        """Record the transitions of a step already taken on the inner env.

        :meth:`step` is ``self.env.step`` followed by this; callers that must not
        be interrupted half-way through recording (e.g. on Ctrl-C) call the two
        halves themselves.

        The common step (one array per field, no env ended, no restarted worker)
        costs one ``ReplayPool.add_leaves`` call and a few numpy calls on 1-D bool
        arrays, none allocated per step; the final observations, the masks and the
        restart marks are read only where ``infos`` or the flags say they exist.

        Args:
            actions: The actions of the step.
            result: What ``self.env.step(actions)`` returned.
        """
        obs, rewards, terminations, truncations, infos = result
        done = self._done
        ended = 0
        try:
            np.logical_or(terminations, truncations, out=done)
            ended = int(np.count_nonzero(done))
            current = self._split(obs)
            cut = restarted_rows(infos)
            valid = self._boundaries.valid()  # NEXT_STEP reset rows are skipped
            if cut is not None:  # and the rows of a restarted worker: no transition
                valid = ~cut if valid is None else valid & ~cut
            if not self._all_known:  # the first step from an unknown observation
                valid = self._known.copy() if valid is None else valid & self._known
            self.last_step = (valid, cut, done, ended)
            if valid is None or self._all_known or valid.any():
                self._record(
                    actions,
                    current,
                    rewards,
                    terminations,
                    truncations,
                    infos,
                    valid,
                    ended=ended,
                )
        except BaseException:
            # the envs moved on, but this step could not be recorded (a value the
            # pool refuses, a Ctrl-C): as after a failed step, nothing links the
            # observations before it to those after it
            ended = np.logical_or(terminations, truncations)
            self._forget()
            if self.autoreset_mode is AutoresetMode.NEXT_STEP:
                # the episodes that ended here are over, and the next step only
                # resets those envs: their next episodes count. (SAME_STEP's began
                # in this step, unseen; DISABLED's begin at the reset that follows.)
                self.pool.abort_episodes(np.flatnonzero(ended))
            self._boundaries.after_step(ended)
            raise
        if cut is not None:  # the crash cut these episodes: never finished
            self.pool.abort_episodes(np.flatnonzero(cut))
        if len(current) == 1:
            self._obs[0][...] = current[0]
        else:
            for store, leaf in zip(self._obs, current, strict=True):
                store[...] = leaf
        if not self._all_known:
            unseen = done & ~self._known  # a cut episode's end, not recorded:
            if unseen.any():  # the next episode counts
                self.pool.abort_episodes(np.flatnonzero(unseen))
            self._known[:] = True
            self._all_known = True
        self._boundaries.after_step(done, count=ended)

    def _forget(self, mask: npt.NDArray[np.bool_] | None = None) -> None:
        """The envs moved on unseen (a step or reset failed): none is known.

        ``mask``: only these envs (those a failed masked reset may have reset).
        No transition links the observations from before to those after: each
        env's recording resumes from the observation its next reset or step
        returns. Their episodes in progress are aborted in the pool, and so is
        what is left of them where the envs go on (``resumes``: never counted
        as episodes); a reset that follows starts the next ones.
        """
        if mask is None:
            self._known[:] = False
            self.pool.abort_episodes(np.arange(self.num_envs), resumes=True)
        else:  # only these (a masked reset that failed)
            self._known[mask] = False
            self.pool.abort_episodes(np.flatnonzero(mask), resumes=True)
        self._all_known = bool(self._known.all())

    def _record(
        self,
        actions: Any,
        current: list[npt.NDArray[Any]],
        rewards: Any,
        terminations: Any,
        truncations: Any,
        infos: dict[str, Any],
        valid: npt.NDArray[np.bool_] | None,
        *,
        ended: int,
    ) -> None:
        """Add the step's transitions.

        ``valid``: the rows that are transitions (``None``: all); ``ended``: how
        many envs' episodes ended.
        """
        next_obs = current
        if ended and self.autoreset_mode is AutoresetMode.SAME_STEP:
            for store, leaf in zip(self._next, current, strict=True):
                store[...] = leaf
            final_obs = infos["final_obs"]
            for index in np.flatnonzero(self._done).tolist():
                self._write_next(index, final_obs[index])
            next_obs = self._next
        if (
            len(next_obs) == 1
            and type(actions) is np.ndarray
            and actions.shape == self._action_shape
        ):  # one array a field: ReplayPool.add checks and writes it as it is
            self.pool.add(
                self._obs[0],
                actions,
                next_obs[0],
                rewards,
                terminations,
                truncations,
                valid=valid,
            )
            return
        self.pool.add_leaves(
            self._obs,
            self._split_actions(actions),
            next_obs,
            rewards,
            terminations,
            truncations,
            valid=valid,
        )

    def _split(self, batch: Any) -> list[npt.NDArray[Any]]:
        if type(batch) is np.ndarray and batch.shape == self._obs_shape:
            return [batch]
        space, n = self.single_observation_space, self.num_envs
        return [np.asarray(leaf) for leaf in flatten_stored(space, batch, n, "obs")]

    def _split_actions(self, actions: Any) -> list[npt.NDArray[Any]]:
        if type(actions) is np.ndarray and actions.shape == self._action_shape:
            return [actions]
        space, n = self.single_action_space, self.num_envs
        return [
            np.asarray(leaf) for leaf in flatten_stored(space, actions, n, "actions")
        ]


_RECORDERS: weakref.WeakKeyDictionary[ReplayPool, weakref.ref[ReplayPoolWrapper]] = (
    weakref.WeakKeyDictionary()
)
"""The wrapper recording into each pool (a pool has one source per sub-pool)."""


def _check_free(pool: ReplayPool) -> None:
    """Refuse a ``pool`` another open wrapper records into.

    Raises:
        ValueError: Naming ``pool`` and the fix.
    """
    owner = _RECORDERS.get(pool)
    other = None if owner is None else owner()
    if other is not None and not other.closed:
        msg = (
            "`pool` is recorded into by another ReplayPoolWrapper, which is still "
            "open: its sub-pools would take two envs' steps as one stretch. Close "
            "that wrapper first, or record into a pool of your own."
        )
        raise ValueError(msg)


def _check_fits(
    pool: object, env: VectorEnv[Any, Any, Any], settings_given: bool
) -> None:
    """Refuse a ``pool`` to record into that does not fit ``env``.

    Raises:
        TypeError: If ``pool`` is not a :class:`ReplayPool`.
        ValueError: Naming ``pool`` and what differs (or the settings given too).
    """
    if not isinstance(pool, ReplayPool):
        msg = (
            f"`pool` must be a ReplayPool, got {type(pool).__name__}: pass "
            "ReplayPool.load(path) to record into a saved pool."
        )
        raise TypeError(msg)
    if settings_given:
        msg = (
            "ReplayPoolWrapper takes either `pool` or the pool's settings "
            "(`pool_size`, `window_size`, ...), not both: a pool keeps its own."
        )
        raise ValueError(msg)
    for name, ours, theirs, fits in (
        (
            "observation space",
            pool.observation_space,
            env.single_observation_space,
            records(pool.observation_space, env.single_observation_space),
        ),
        (
            "action space",
            pool.action_space,
            env.single_action_space,
            pool.action_space == env.single_action_space
            and leaf_paths(pool.action_space) == leaf_paths(env.single_action_space),
        ),
    ):
        if not fits:
            msg = (
                f"`pool` has the {name} {ours}, but the env's is {theirs}: pass a "
                "pool made (or saved) for this env."
            )
            raise ValueError(msg)
    if pool.num_envs != env.num_envs:
        msg = (
            f"`pool` has {pool.num_envs} sub-pools, but the env has {env.num_envs} "
            "envs (one sub-pool each): pass a pool made (or saved) for this env."
        )
        raise ValueError(msg)
