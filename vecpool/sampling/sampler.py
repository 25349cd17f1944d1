"""Batch sampling: run a policy over a vector env into ``[T, B]`` arrays (rlpyt style).

:class:`Sampler` steps any Gymnasium ``VectorEnv`` (vecpool's, Gymnasium's
``SyncVectorEnv`` / ``AsyncVectorEnv``, wrapped or not) with a policy for ``batch_T``
steps per call and returns preallocated arrays with leading dims ``[batch_T,
num_envs]``, the records of the episodes that ended, and (optionally) every real
transition added to a :class:`~vecpool.ReplayPool`. Semantics: docs/sampling.md and
``docs/sampling.md``.
"""

from __future__ import annotations

import copy as copy_module
import dataclasses
import enum
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from vecpool._util.spaces import is_native, leaves, make_views
from vecpool._util.validation import check_int
from vecpool.errors import VecPoolWarning
from vecpool.replay.boundaries import AutoresetTracker, restarted_rows
from vecpool.replay.pool import ReplayPool
from vecpool.replay.storage import (
    flatten_stored,
    fresh_objects,
    is_storable,
    put_value,
    storage_leaves,
)

__all__ = [
    "BatchedEnv",
    "EpisodeRecord",
    "Policy",
    "SampleBatch",
    "Sampler",
    "sends_batches",
]

Policy = Callable[[Any], Any]
"""A policy: observation batch -> action batch, or -> ``(actions, agent_info)``."""

_RESERVED_KEYS = ("return", "return_", "length", "env_index", "info")


class BatchedEnv(Protocol):
    """The capability the alternating sampler needs: EnvPool-style ``send``/``recv``.

    :class:`vecpool.AsyncVectorEnv` created with ``batch_size=k`` has it. Only the
    env's own class counts (see :func:`sends_batches`): a wrapper that forwards
    attributes would let ``send``/``recv`` bypass what it wraps.
    """

    batch_size: int | None

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start stepping the envs ``env_ids`` with ``actions``."""
        ...

    def recv(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The first ``batch_size`` envs to finish, with ``infos["env_id"]``."""
        ...


def sends_batches(env: Any) -> bool:
    """Whether ``env`` itself offers ``send``/``recv`` batches (a ``batch_size``)."""
    kind = type(env)
    return (
        callable(getattr(kind, "send", None))
        and callable(getattr(kind, "recv", None))
        and isinstance(getattr(env, "batch_size", None), int)
    )


class _Draw(enum.IntEnum):
    """What random actions are drawn for (each purpose has its own generator)."""

    SAMPLING = 0
    """Sampling batches and decorrelation steps."""
    EVALUATION = 1
    """:meth:`Sampler.evaluate` without a policy."""


class SampleBatch(NamedTuple):
    """One batch of samples; every array has leading dims ``[batch_T, num_envs]``.

    Row ``t`` of column ``b`` holds what env ``b`` did at its ``t``-th step of the
    call: the observation the policy saw, the action, the reward, the true next
    observation (the final observation for an env whose episode ended, never a reset
    observation), and the flags. Observations and actions of Dict / Tuple spaces are
    dicts / tuples of arrays, nested as Gymnasium batches them.

    Attributes:
        obs: Observations the policy acted on.
        action: Actions taken.
        reward: Rewards, ``float64``.
        next_obs: True next observations.
        terminated: Termination flags.
        truncated: Truncation flags.
        valid: ``False`` on rows that are not real transitions: the reset step after
            an episode end in ``NEXT_STEP`` mode, the rows of an env waiting for
            the batch end in ``wait_reset`` mode, and the rows marked
            ``infos["worker_restarted"]`` (a worker restart cut the episode).
        agent_info: The policy's ``agent_info`` arrays, each ``[batch_T, num_envs,
            ...]``; empty when the policy returns none.
    """

    obs: Any
    action: Any
    reward: npt.NDArray[np.float64]
    next_obs: Any
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    valid: npt.NDArray[np.bool_]
    agent_info: dict[str, npt.NDArray[Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """Statistics of one finished episode.

    Attributes:
        return_: Sum of the episode's rewards (``"return"`` in :meth:`_asdict`).
        length: Number of steps (transitions) in the episode.
        env_index: Index of the sub-environment that ran it.
        info: The values of the sampler's ``track_info_keys`` at the episode's
            last step (``None`` for a key that step's info did not have).
    """

    return_: float
    length: int
    env_index: int
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def _asdict(self) -> dict[str, Any]:
        """Return ``{"return", "length", "env_index"}`` plus the tracked info keys."""
        return {
            "return": self.return_,
            "length": self.length,
            "env_index": self.env_index,
            **self.info,
        }


def _autoreset_mode(env: VectorEnv[Any, Any, Any], name: str) -> AutoresetMode:
    mode = env.metadata.get("autoreset_mode")
    if mode is None:
        warnings.warn(
            f"`{name}` ({env}) has no `metadata['autoreset_mode']`; sampling it as "
            "NEXT_STEP.",
            VecPoolWarning,
            stacklevel=3,
        )
        return AutoresetMode.NEXT_STEP
    return AutoresetMode(mode)


def _single_leaves(space: spaces.Space[Any], value: Any) -> list[Any]:
    """The leaves of one env's value (not batched), in :func:`leaves` order."""
    if isinstance(space, spaces.Dict):
        return [
            leaf
            for key, sub in space.spaces.items()
            for leaf in _single_leaves(sub, value[key])
        ]
    if isinstance(space, spaces.Tuple):
        return [
            leaf
            for sub, item in zip(space.spaces, value, strict=True)
            for leaf in _single_leaves(sub, item)
        ]
    return [value]


def _info_value(infos: dict[str, Any], key: str, position: int) -> Any:
    """Row ``position`` of a vector info entry (``None`` where its mask is unset)."""
    if key not in infos:
        return None
    mask = infos.get(f"_{key}")
    if mask is not None and not mask[position]:
        return None
    value = infos[key]
    if isinstance(value, dict):
        return {
            sub: _info_value(value, sub, position)
            for sub in value
            if not (sub.startswith("_") and sub[1:] in value)
        }
    return value[position]


class Sampler:
    """Sample ``[batch_T, num_envs]`` batches from a vector env with a policy.

    Each :meth:`obtain_samples` call steps every env ``batch_T`` times and returns a
    :class:`SampleBatch` plus an :class:`EpisodeRecord` for each episode that ended
    during the call; the next call continues where this one stopped. It works on any
    Gymnasium ``VectorEnv`` in each autoreset mode, read from
    ``env.metadata["autoreset_mode"]``:

    * ``NEXT_STEP``: the step after an episode end only resets that env; its row is
      ``valid=False``.
    * ``SAME_STEP``: every row is valid; ``next_obs`` of an env that ended is
      ``infos["final_obs"][i]``.
    * ``DISABLED``: every row is valid; the sampler resets envs that ended with
      ``reset(options={"reset_mask": mask})`` before their next step.

    A row marked ``infos["worker_restarted"]`` (its worker died and the env was
    replaced, ``on_worker_crash="restart"``, docs/reliability.md) is
    ``valid=False`` in every mode and in ``send``/``recv`` batches: it is no
    transition, nothing of it goes to ``pool``, and the env's episode in progress
    is aborted (no :class:`EpisodeRecord`, :meth:`ReplayPool.abort_episodes`,
    never merged with the next one). Sampling then goes on as after any episode
    end (a ``NEXT_STEP`` reset row, a ``DISABLED`` masked reset, waiting for the
    batch end with ``wait_reset``). :meth:`reset` aborts the pool episodes in
    progress too.

    On a :class:`vecpool.AsyncVectorEnv` created with ``batch_size=k`` (not
    wrapped), sampling alternates :meth:`~vecpool.AsyncVectorEnv.recv` and
    :meth:`~vecpool.AsyncVectorEnv.send`: the policy computes actions for the
    ``k`` envs that just finished while the others step (rlpyt's alternating
    sampler), and each row lands in its env's column (``infos["env_id"]``). The
    policy is then called with the observations of those ``k`` envs only.

    Example:
        >>> import functools, gymnasium as gym, numpy as np
        >>> from vecpool.sampling.sampler import Sampler
        >>> from vecpool.testing import CountingEnv
        >>> envs = gym.vector.SyncVectorEnv(
        ...     [functools.partial(CountingEnv, max_steps=3, terminate_prob=0.0)] * 2
        ... )
        >>> sampler = Sampler(envs, None, batch_T=5, seed=0)
        >>> batch, episodes = sampler.obtain_samples()
        >>> batch.obs.shape, batch.action.shape, batch.reward.dtype
        ((5, 2, 3), (5, 2), dtype('float64'))
        >>> batch.valid[:, 0].tolist()  # NEXT_STEP: row 3 only resets env 0
        [True, True, True, False, True]
        >>> [(e.env_index, e.length) for e in episodes]
        [(0, 3), (1, 3)]
        >>> envs.close()

    Args:
        env: The vector env to sample from. The sampler resets it (with ``seed``) on
            the first :meth:`obtain_samples` and never closes it.
        policy: ``obs_batch -> actions`` or ``obs_batch -> (actions, agent_info)``
            with ``agent_info`` a dict of arrays with one row per observation.
            ``None`` samples random actions from ``env.action_space`` (a copy seeded
            with ``seed``). A result that is a ``tuple`` of two whose second item
            is a ``dict`` is read as ``(actions, agent_info)`` (for a ``Tuple``
            action space of two whose second space is a ``Dict``, the actions must
            then be wrapped: return ``(actions, agent_info)``).
        batch_T: Steps per env per :meth:`obtain_samples` call.
        max_decorrelation_steps: At the start, env ``i`` ends up ``n_i`` random
            steps into its run, ``n_i`` drawn uniformly from ``0..max`` (see
            :attr:`decorrelation_steps`). A lockstep vector env steps every env
            ``max`` times, resetting env ``i`` before its last ``n_i`` steps.
        wait_reset: Envs whose episode ended are not reset until the batch ends;
            their remaining rows are ``valid=False``. Needs ``DISABLED`` mode. On
            a ``vecpool.AsyncVectorEnv`` with ``batch_size`` the waiting envs are
            not stepped at all; a lockstep vector env must step every env, so a
            waiting env is reset at once, stepped out of sight (nothing recorded)
            and reset again at the batch end.
        pool: A :class:`~vecpool.ReplayPool` (with one sub-pool per env) that every
            real transition is also added to.
        eval_env: The vector env :meth:`evaluate` runs on; default: ``env``.
        seed: Seeds the first reset (env ``i`` gets ``seed + i``), the random
            policy and the decorrelation draws. The first reset of ``eval_env``
            gets ``seed + num_envs``.
        track_info_keys: Info keys copied into each :class:`EpisodeRecord` from the
            infos of the episode's last step: ``infos["final_info"]`` first (where
            ``SAME_STEP`` puts that step's own info), then ``infos`` (where
            wrappers such as ``RecordEpisodeStatistics`` add theirs). Dict values
            come out as dicts of that env's entries.
        copy: If ``True``, :meth:`obtain_samples` returns fresh arrays; if
            ``False``, it returns the sampler's own buffers, which the next call
            overwrites.

    Raises:
        ValueError: On an invalid argument, named in the message.
        TypeError: If ``policy`` is neither callable nor ``None``.
    """

    env: VectorEnv[Any, Any, Any]
    policy: Policy | None
    batch_T: int
    num_envs: int
    max_decorrelation_steps: int
    wait_reset: bool
    pool: ReplayPool | None
    eval_env: VectorEnv[Any, Any, Any] | None
    seed: int | None
    track_info_keys: tuple[str, ...]
    copy: bool
    autoreset_mode: AutoresetMode
    decorrelation_steps: npt.NDArray[np.int64] | None
    resumed: npt.NDArray[np.int64] | None
    """Whether the envs were reset (:meth:`reset`) before the last
    :meth:`obtain_samples` batch: ``None`` if that batch went on from the one
    before; else the envs that began it in an episode begun unseen, in the
    decorrelation steps. A pool fed from the batches then ends the episodes in
    progress (``pool.abort_episodes(all_envs)``) and counts none of those
    (``pool.abort_episodes(resumed, resumes=True)``), before the batch's rows, as
    ``pool=`` does."""

    def __init__(
        self,
        env: VectorEnv[Any, Any, Any],
        policy: Policy | None,
        batch_T: int,
        *,
        max_decorrelation_steps: int = 0,
        wait_reset: bool = False,
        pool: ReplayPool | None = None,
        eval_env: VectorEnv[Any, Any, Any] | None = None,
        seed: int | None = None,
        track_info_keys: Sequence[str] = (),
        copy: bool = True,
    ) -> None:
        """Validate the arguments and preallocate the batch buffers."""
        given: object = policy  # checked at run time, whatever the annotations say
        if given is not None and not callable(given):
            msg = (
                "`policy` must be a callable (obs_batch -> actions) or None for random "
                f"actions, got {type(given).__name__}."
            )
            raise TypeError(msg)
        self.batch_T = check_int("batch_T", batch_T, 1)
        self.max_decorrelation_steps = check_int(
            "max_decorrelation_steps", max_decorrelation_steps, 0
        )
        if seed is not None:
            seed = check_int("seed", seed, 0)
        if isinstance(track_info_keys, str):
            msg = (
                "`track_info_keys` must be a sequence of keys, got the string "
                f"{track_info_keys!r}; write ({track_info_keys!r},)."
            )
            raise ValueError(msg)
        keys: tuple[object, ...] = tuple(track_info_keys)
        for key in keys:
            if not isinstance(key, str) or key in _RESERVED_KEYS:
                msg = (
                    "`track_info_keys` must hold strings other than "
                    f"{_RESERVED_KEYS}, got {key!r}."
                )
                raise ValueError(msg)
        self.env = env
        self.policy = policy
        self.num_envs = int(env.num_envs)
        self.wait_reset = bool(wait_reset)
        self.seed = seed
        self.track_info_keys = tuple(str(key) for key in keys)
        self.copy = bool(copy)
        self.autoreset_mode = _autoreset_mode(env, "env")
        if self.wait_reset and self.autoreset_mode is not AutoresetMode.DISABLED:
            msg = (
                "`wait_reset=True` needs an env in DISABLED autoreset mode, got "
                f"{self.autoreset_mode.name}: create the env with "
                "autoreset_mode=AutoresetMode.DISABLED."
            )
            raise ValueError(msg)
        if not is_storable(env.single_observation_space):
            msg = (
                f"The env's single observation space {env.single_observation_space} "
                "cannot be batched into arrays: an array space of its leaves has no "
                "fixed shape or dtype."
            )
            raise ValueError(msg)
        if not is_native(env.single_action_space):
            msg = (
                f"The env's single action space {env.single_action_space} cannot be "
                "batched into arrays: a Sampler supports Box, Discrete, "
                "MultiDiscrete and MultiBinary actions and Dict/Tuple nests of them."
            )
            raise ValueError(msg)
        if pool is not None and pool.num_envs != self.num_envs:
            msg = (
                f"`pool` has {pool.num_envs} sub-pools but the env has "
                f"{self.num_envs} sub-environments: create the ReplayPool with "
                f"num_envs={self.num_envs}."
            )
            raise ValueError(msg)
        self.pool = pool
        if eval_env is env:
            eval_env = None
        if eval_env is not None:
            _autoreset_mode(eval_env, "eval_env")
            if eval_env.single_action_space != env.single_action_space:
                msg = (
                    f"`eval_env`'s single action space {eval_env.single_action_space} "
                    f"differs from the env's {env.single_action_space}."
                )
                raise ValueError(msg)
        self.eval_env = eval_env
        self.decorrelation_steps = None
        self.resumed = None
        self._resumed_next: npt.NDArray[np.int64] | None = None  # since the last reset

        self._obs_space: spaces.Space[Any] = env.single_observation_space
        self._action_space: spaces.Space[Any] = env.single_action_space
        self._alternate = sends_batches(env)
        # a batch of Tuple(X, Dict) actions looks like (actions, agent_info)
        action_space = self._action_space
        self._ambiguous_output = (
            isinstance(action_space, spaces.Tuple)
            and len(action_space.spaces) == 2
            and isinstance(action_space.spaces[1], spaces.Dict)
        )
        self._rng = np.random.default_rng(seed)
        self._random_spaces: dict[tuple[int, int], spaces.Space[Any]] = {}

        steps, count = self.batch_T, self.num_envs
        # observations: Text leaves as fixed-width unicode, other leaves that are
        # not arrays (Graph, custom spaces) as objects (storage_leaves)
        obs_leaves = storage_leaves(self._obs_space)
        action_leaves = leaves(self._action_space)
        # the batch buffers, [T, B, ...] per leaf
        self._obs = [np.zeros((steps, count, *s), d) for d, s in obs_leaves]
        self._next_obs = [np.zeros((steps, count, *s), d) for d, s in obs_leaves]
        self._action = [np.zeros((steps, count, *s), d) for d, s in action_leaves]
        self._reward = np.zeros((steps, count), np.float64)
        self._terminated = np.zeros((steps, count), np.bool_)
        self._truncated = np.zeros((steps, count), np.bool_)
        self._valid = np.zeros((steps, count), np.bool_)
        self._agent_info: dict[str, npt.NDArray[Any]] = {}
        # per-env state, [B, ...]
        self._current = [np.zeros((count, *s), d) for d, s in obs_leaves]
        self._frozen = [np.zeros((count, *s), d) for d, s in obs_leaves]
        self._sent_action = [np.zeros((count, *s), d) for d, s in action_leaves]
        self._sent_info: dict[str, npt.NDArray[Any]] = {}
        self._info_keys: tuple[str, ...] | None = None
        self._boundaries = AutoresetTracker(count, self.autoreset_mode)
        self._needs_reset = np.zeros(count, np.bool_)  # DISABLED: ended, not reset
        self._parked = np.zeros(count, np.bool_)  # wait_reset: ended this batch
        self._episode_return = np.zeros(count, np.float64)
        self._episode_length = np.zeros(count, np.int64)
        self._env_obs: Any = None  # the env's latest observation batch
        self._last_actions: Any = None  # what the last `_act` handed to the env
        self._started = False
        self._seeded = False
        self._eval_seeded = False

    # -- public API --------------------------------------------------------------------

    def reset(self) -> None:
        """Start afresh: reset every env, then take the decorrelation steps.

        :meth:`obtain_samples` calls it on first use and after :meth:`evaluate` ran
        on the sampler's own env. Only the first reset is seeded (with ``seed``);
        later ones continue the envs' random streams.
        """
        self._started = False
        seed = self.seed if not self._seeded else None
        obs, _ = self.env.reset(seed=seed)
        self._seeded = True
        self._env_obs = obs
        for store, leaf in zip(
            self._current, self._split_obs(obs, self.num_envs), strict=True
        ):
            store[...] = leaf
        self._boundaries.after_reset()
        self._needs_reset[:] = False
        self._parked[:] = False
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        if self.pool is not None:  # the episodes in progress are over, unfinished
            self.pool.abort_episodes(np.arange(self.num_envs))
        self._decorrelate()
        resumed = self._resumed_next = np.flatnonzero(self._episode_length)
        if self.pool is not None and resumed.size:
            # into episodes whose first steps the pool never saw: not its episodes
            self.pool.abort_episodes(resumed, resumes=True)
        self._started = True

    def obtain_samples(self) -> tuple[SampleBatch, list[EpisodeRecord]]:
        """Step every env ``batch_T`` times with the policy.

        Returns:
            The :class:`SampleBatch` (fresh arrays when ``copy=True``, else the
            sampler's buffers, overwritten by the next call) and one
            :class:`EpisodeRecord` per episode that ended during the call, in the
            order they ended (env index order within a step).

        Raises:
            ValueError: If the policy's output does not fit the action space or its
                ``agent_info`` changes keys or row count.
        """
        if not self._started:
            self.reset()
        self.resumed, self._resumed_next = self._resumed_next, None
        episodes: list[EpisodeRecord] = []
        try:
            if self._alternate:
                self._sample_alternating(episodes)
            else:
                self._sample_lockstep(episodes)
            if self.wait_reset and self._parked.any():
                mask = self._parked.copy()
                self._parked[:] = False
                self._reset_masked(mask)
        except Exception:
            self._started = False  # the next call starts from fresh resets
            raise
        return self._batch(), episodes

    def evaluate(
        self,
        policy: Policy | None = None,
        *,
        max_steps: int | None = None,
        max_episodes: int | None = None,
    ) -> list[EpisodeRecord]:
        """Run complete episodes and return their records.

        Runs on ``eval_env`` when one was given, else on the sampler's own env, after
        which the next :meth:`obtain_samples` starts from fresh resets (and new
        decorrelation steps). Every env is reset first; episodes still running when a
        bound is hit are dropped, never counted.

        Args:
            policy: The policy to evaluate; default: the sampler's (random actions
                when that is ``None``). Its ``agent_info`` is ignored.
            max_steps: Stop after this many vector steps (each steps every
                sub-environment once, so at most ``max_steps * num_envs`` env
                steps).
            max_episodes: Stop once this many episodes finished; exactly that many
                are returned (the first to finish; env index order within a step).

        Returns:
            The records of the finished episodes, in the order they finished.

        Raises:
            ValueError: If neither bound is given or a bound is not an int >= 1.
        """
        if max_steps is None and max_episodes is None:
            msg = "`evaluate` needs a bound: pass `max_steps`, `max_episodes` or both."
            raise ValueError(msg)
        if max_steps is not None:
            max_steps = check_int("max_steps", max_steps, 1)
        if max_episodes is not None:
            max_episodes = check_int("max_episodes", max_episodes, 1)
        policy = self.policy if policy is None else policy
        if self.eval_env is None:
            env = self.env
            self._started = False
            seed = self.seed if not self._seeded else None
            self._seeded = True
            mode = self.autoreset_mode
        else:
            env = self.eval_env
            seed = (
                self.seed + self.num_envs
                if self.seed is not None and not self._eval_seeded
                else None
            )
            self._eval_seeded = True
            mode = _autoreset_mode(env, "eval_env")
        count = int(env.num_envs)
        obs, _ = env.reset(seed=seed)
        returns = np.zeros(count, np.float64)
        lengths = np.zeros(count, np.int64)
        pending_reset = np.zeros(count, np.bool_)  # DISABLED: ended, not reset
        boundaries = AutoresetTracker(count, mode)
        records: list[EpisodeRecord] = []
        steps = 0
        while max_steps is None or steps < max_steps:
            if mode is AutoresetMode.DISABLED and pending_reset.any():
                obs, _ = env.reset(options={"reset_mask": pending_reset.copy()})
                pending_reset[:] = False
            if policy is None:
                actions = self._random_actions(count, _Draw.EVALUATION, env)
            else:
                actions, _ = self._split_output(policy(obs))
            obs, rewards, terminations, truncations, infos = env.step(actions)
            steps += 1
            rewards = np.asarray(rewards, dtype=np.float64)
            ended = np.logical_or(terminations, truncations)
            valid = boundaries.valid()
            if valid is None:
                valid = np.ones(count, np.bool_)
            cut = restarted_rows(infos)
            if cut is not None:  # a replaced worker's episodes are dropped, not done
                valid = valid & ~cut
                returns[cut] = 0.0
                lengths[cut] = 0
            returns[valid] += rewards[valid]
            lengths[valid] += 1
            for index in np.flatnonzero(ended & valid).tolist():
                records.append(
                    self._episode(index, index, float(returns[index]), lengths, infos)
                )
                returns[index] = 0.0
                lengths[index] = 0
                if max_episodes is not None and len(records) == max_episodes:
                    return records
            boundaries.after_step(ended)
            if mode is AutoresetMode.DISABLED:
                pending_reset = ended
        return records

    # -- starting ----------------------------------------------------------------------

    def _decorrelate(self) -> None:
        """Leave env ``i`` ``n_i`` random steps into its run, ``n_i`` in ``0..max``.

        A vector env steps all its envs together, so all take ``max`` random steps
        and env ``i`` is reset (masked) before step ``max - n_i``: its last ``n_i``
        steps count. Episodes that end meanwhile are not reported.
        """
        most = self.max_decorrelation_steps
        draws = self._rng.integers(0, most + 1, size=self.num_envs, dtype=np.int64)
        self.decorrelation_steps = draws
        if most == 0:
            return
        restart_at = most - draws
        for step in range(most + 1):
            mask = restart_at == step if step > 0 else np.zeros(self.num_envs, bool)
            if self.autoreset_mode is AutoresetMode.DISABLED:
                mask = mask | self._needs_reset
            if mask.any():
                self._reset_masked(mask)
            if step == most:
                break
            actions = self._random_actions(self.num_envs, _Draw.SAMPLING, self.env)
            obs, rewards, terminations, truncations, _ = self.env.step(actions)
            rewards = np.asarray(rewards, dtype=np.float64)
            ended = np.logical_or(terminations, truncations)
            valid = self._boundaries.valid()
            if valid is None:
                valid = np.ones(self.num_envs, np.bool_)
            self._episode_return[valid] += rewards[valid]
            self._episode_length[valid] += 1
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0
            self._note_ends(np.arange(self.num_envs), ended)
            self._env_obs = obs
            for store, leaf in zip(
                self._current, self._split_obs(obs, self.num_envs), strict=True
            ):
                store[...] = leaf

    def _reset_masked(self, mask: npt.NDArray[np.bool_]) -> None:
        """Reset the masked envs; adopt their observations unless they are parked."""
        obs, _ = self.env.reset(options={"reset_mask": mask.copy()})
        self._env_obs = obs
        adopt = mask & ~self._parked
        if adopt.any():
            for store, leaf in zip(
                self._current, self._split_obs(obs, self.num_envs), strict=True
            ):
                store[adopt] = np.asarray(leaf)[adopt]
        self._needs_reset[mask] = False
        self._boundaries.after_reset(mask)
        self._episode_return[adopt] = 0.0
        self._episode_length[adopt] = 0

    def _note_ends(
        self, cols: npt.NDArray[np.int64], ended: npt.NDArray[np.bool_]
    ) -> None:
        """Update the autoreset bookkeeping of ``cols`` after a step."""
        self._boundaries.after_step(ended, cols)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._needs_reset[cols] = ended

    # -- sampling ----------------------------------------------------------------------

    def _sample_lockstep(self, episodes: list[EpisodeRecord]) -> None:
        """Sample with ``env.step`` (every env steps in every row)."""
        count = self.num_envs
        everyone = np.arange(count, dtype=np.int64)
        for row in range(self.batch_T):
            if self._parked.all():  # wait_reset: nobody left to step this batch
                self._fill_parked(everyone, row, self.batch_T)
                break
            if self._needs_reset.any():
                self._reset_masked(self._needs_reset.copy())
            self._act(self._env_obs, everyone)
            obs, rewards, terminations, truncations, infos = self.env.step(
                self._last_actions
            )
            parked = self._parked.copy()
            active = np.flatnonzero(~parked)
            result = self._split_obs(obs, count)
            self._record(
                np.full(active.size, row, np.int64),
                active,
                active,
                result,
                np.asarray(rewards, dtype=np.float64),
                np.asarray(terminations, dtype=np.bool_),
                np.asarray(truncations, dtype=np.bool_),
                infos,
                episodes,
            )
            if parked.any():
                # parked envs (wait_reset) were stepped only because a vector env
                # steps everyone: their results are discarded
                hidden = np.flatnonzero(parked)
                ended = np.logical_or(terminations, truncations)[hidden]
                self._needs_reset[hidden] = ended
                self._fill_parked(hidden, row, row + 1)
            self._env_obs = obs

    def _sample_alternating(self, episodes: list[EpisodeRecord]) -> None:
        """Sample with ``send``/``recv`` on a vecpool env with ``batch_size``."""
        env: BatchedEnv = self.env  # type: ignore[assignment]  # sends_batches(env)
        assert env.batch_size is not None
        group = env.batch_size
        steps = self.batch_T
        row = np.zeros(self.num_envs, np.int64)
        in_flight = np.zeros(self.num_envs, np.bool_)
        try:
            self._dispatch(env, group, row, in_flight)
            while in_flight.any():
                obs, rewards, terminations, truncations, infos = env.recv()
                ids = np.asarray(infos["env_id"], dtype=np.int64)
                in_flight[ids] = False
                rows = row[ids]
                ended = np.logical_or(terminations, truncations)
                self._record(
                    rows,
                    ids,
                    np.arange(ids.size, dtype=np.int64),
                    self._split_obs(obs, ids.size),
                    np.asarray(rewards, dtype=np.float64),
                    np.asarray(terminations, dtype=np.bool_),
                    np.asarray(truncations, dtype=np.bool_),
                    infos,
                    episodes,
                )
                row[ids] += 1
                if self.wait_reset:
                    for index in ids[ended].tolist():
                        self._fill_parked(np.array([index]), int(row[index]), steps)
                        row[index] = steps
                self._dispatch(env, group, row, in_flight)
        except Exception:
            # leave nothing in flight, so the env can be reset (best effort: the
            # env may be what failed). Each `recv` returns a batch or raises one
            # env's error (which takes that env off the env's pending list), so
            # as many tries as envs in flight drain it, errors and all
            for _ in range(int(np.count_nonzero(in_flight))):
                pending = getattr(env, "pending_env_ids", None)
                if not (in_flight.any() if pending is None else pending):
                    break
                try:
                    *_, infos = env.recv()
                except Exception:  # noqa: BLE001 - the first error is re-raised
                    continue
                in_flight[np.asarray(infos["env_id"])] = False
            raise
        assert (row == steps).all()

    def _dispatch(
        self,
        env: BatchedEnv,
        group: int,
        row: npt.NDArray[np.int64],
        in_flight: npt.NDArray[np.bool_],
    ) -> None:
        """Send every idle env that still owes rows, ``group`` envs per policy call.

        In DISABLED mode (without ``wait_reset``), an env that ended must be reset
        first, and ``reset`` needs every env back: idle envs wait until nothing is
        in flight, then the ended ones are reset together.
        """
        ended = self._needs_reset & ~self._parked
        if ended.any():
            if in_flight.any():
                return
            self._reset_masked(ended)
        ready = np.flatnonzero(~in_flight & (row < self.batch_T))
        for start in range(0, ready.size, group):
            ids = ready[start : start + group]
            obs = make_views(self._obs_space, [store[ids] for store in self._current])
            self._act(obs, ids)
            env.send(self._last_actions, ids)
            in_flight[ids] = True

    def _act(self, obs: Any, ids: npt.NDArray[np.int64]) -> None:
        """Ask the policy for the actions of envs ``ids``; remember what was sent."""
        count = ids.size
        if self.policy is None:
            actions = self._random_actions(count, _Draw.SAMPLING, self.env)
            info = None
        else:
            actions, info = self._split_output(self.policy(obs))
        for store, leaf in zip(
            self._sent_action,
            flatten_stored(self._action_space, actions, count, "actions"),
            strict=True,
        ):
            store[ids] = leaf
        self._store_info(info, ids)
        self._last_actions = actions

    def _split_output(self, output: Any) -> tuple[Any, dict[str, Any] | None]:
        if (
            isinstance(output, tuple)
            and len(output) == 2
            and isinstance(output[1], dict)
            and not (
                self._ambiguous_output
                and not (isinstance(output[0], tuple) and len(output[0]) == 2)
            )
        ):
            return output[0], output[1]
        return output, None

    def _store_info(
        self, info: dict[str, Any] | None, ids: npt.NDArray[np.int64]
    ) -> None:
        """Keep the policy's ``agent_info`` rows for ``ids`` until their step ends."""
        keys = None if info is None else tuple(info)
        expected = self._info_keys
        if expected is None:
            if info is None:
                return
            expected = self._info_keys = tuple(info)
            for key, value in info.items():
                array = np.asarray(value)
                self._check_info_rows(key, array, ids.size)
                tail = array.shape[1:]
                self._sent_info[key] = np.zeros((self.num_envs, *tail), array.dtype)
                self._agent_info[key] = np.zeros(
                    (self.batch_T, self.num_envs, *tail), array.dtype
                )
        if info is None or set(info) != set(expected):
            msg = (
                f"The policy returned agent_info keys {keys}, but earlier "
                f"{expected}: return the same keys on every call."
            )
            raise ValueError(msg)
        for key, value in info.items():
            array = np.asarray(value)
            self._check_info_rows(key, array, ids.size)
            self._sent_info[key][ids] = array

    @staticmethod
    def _check_info_rows(key: str, array: npt.NDArray[Any], count: int) -> None:
        if array.ndim == 0 or array.shape[0] != count:
            msg = (
                f"`agent_info[{key!r}]` must have one row per observation ({count}), "
                f"got shape {array.shape}."
            )
            raise ValueError(msg)

    def _random_actions(
        self, count: int, purpose: _Draw, env: VectorEnv[Any, Any, Any]
    ) -> Any:
        """Random actions for ``count`` envs from a seeded copy of the action space.

        Each ``purpose`` draws from its own generator; for the full batch, the
        sampling copy of ``env.action_space`` is seeded with ``seed`` exactly as
        ``env.action_space.seed(seed)`` would be.
        """
        key = (purpose, count)
        space = self._random_spaces.get(key)
        if space is None:
            if count == env.num_envs:
                space = copy_module.deepcopy(env.action_space)
            else:
                space = batch_space(env.single_action_space, count)
            if self.seed is None:
                space.seed(None)
            elif purpose is _Draw.SAMPLING and count == self.num_envs:
                space.seed(self.seed)
            else:
                sequence = np.random.SeedSequence([self.seed, int(purpose), count])
                space.seed(int(sequence.generate_state(1)[0]))
            self._random_spaces[key] = space
        return space.sample()

    # -- recording ---------------------------------------------------------------------

    def _record(
        self,
        rows: npt.NDArray[np.int64],
        cols: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
        result: list[npt.NDArray[Any]],
        rewards: npt.NDArray[np.float64],
        terminations: npt.NDArray[np.bool_],
        truncations: npt.NDArray[np.bool_],
        infos: dict[str, Any],
        episodes: list[EpisodeRecord],
    ) -> None:
        """Write the step results of envs ``cols`` (result rows ``positions``).

        Row ``rows[j]`` of column ``cols[j]`` receives result row ``positions[j]``;
        then the episode counters, the pool and the per-env state are updated.
        """
        rewards = rewards[positions]
        terminated = terminations[positions]
        truncated = truncations[positions]
        ended = terminated | truncated
        valid = self._boundaries.valid(cols)
        if valid is None:
            valid = np.ones(cols.size, np.bool_)
        cut = restarted_rows(infos)
        if cut is not None:  # a replaced worker's rows: no transition, episode cut
            cut = cut[positions]
            valid = valid & ~cut
        for buffer, store in zip(self._obs, self._current, strict=True):
            buffer[rows, cols] = store[cols]
        for buffer, store in zip(self._action, self._sent_action, strict=True):
            buffer[rows, cols] = store[cols]
        for buffer, leaf in zip(self._next_obs, result, strict=True):
            buffer[rows, cols] = np.asarray(leaf)[positions]
        if self.autoreset_mode is AutoresetMode.SAME_STEP and ended.any():
            final_obs = infos["final_obs"]
            for j in np.flatnonzero(ended).tolist():
                values = _single_leaves(self._obs_space, final_obs[positions[j]])
                for buffer, value in zip(self._next_obs, values, strict=True):
                    put_value(buffer, (rows[j], cols[j]), value, "final_obs")
        self._reward[rows, cols] = rewards
        self._terminated[rows, cols] = terminated
        self._truncated[rows, cols] = truncated
        self._valid[rows, cols] = valid
        for key, buffer in self._agent_info.items():
            buffer[rows, cols] = self._sent_info[key][cols]

        if self.pool is not None and valid.any():
            keep = np.flatnonzero(valid)
            at = (rows[keep], cols[keep])
            self.pool.add_leaves(
                [buffer[at] for buffer in self._obs],
                [buffer[at] for buffer in self._action],
                [buffer[at] for buffer in self._next_obs],
                rewards[keep],
                terminated[keep],
                truncated[keep],
                env_ids=cols[keep],
            )

        counted = cols[valid]
        self._episode_return[counted] += rewards[valid]
        self._episode_length[counted] += 1
        for j in np.flatnonzero(ended & valid).tolist():
            col = int(cols[j])
            episodes.append(
                self._episode(
                    col,
                    int(positions[j]),
                    float(self._episode_return[col]),
                    self._episode_length,
                    infos,
                )
            )
            self._episode_return[col] = 0.0
            self._episode_length[col] = 0
        if self.wait_reset and ended.any():  # a cut episode waits too
            for j in np.flatnonzero(ended).tolist():
                col = int(cols[j])
                self._parked[col] = True
                for frozen, buffer in zip(self._frozen, self._next_obs, strict=True):
                    frozen[col] = buffer[rows[j], col]
        if cut is not None and cut.any():
            aborted = cols[cut]
            self._episode_return[aborted] = 0.0
            self._episode_length[aborted] = 0
            if self.pool is not None:
                self.pool.abort_episodes(aborted)

        for store, leaf in zip(self._current, result, strict=True):
            store[cols] = np.asarray(leaf)[positions]
        self._note_ends(cols, ended)

    def _episode(
        self,
        index: int,
        position: int,
        episode_return: float,
        lengths: npt.NDArray[np.int64],
        infos: dict[str, Any],
    ) -> EpisodeRecord:
        info: dict[str, Any] = {}
        if self.track_info_keys:
            final, mask = infos.get("final_info"), infos.get("_final_info")
            if not (isinstance(final, dict) and (mask is None or mask[position])):
                final = {}
            for key in self.track_info_keys:
                # SAME_STEP: the ended step's own info is `final_info`; wrappers
                # (e.g. RecordEpisodeStatistics) add theirs to the step's infos
                value = _info_value(final, key, position)
                info[key] = (
                    _info_value(infos, key, position) if value is None else value
                )
        return EpisodeRecord(episode_return, int(lengths[index]), index, info)

    def _fill_parked(self, cols: npt.NDArray[np.int64], start: int, stop: int) -> None:
        """Fill rows ``start..stop-1`` of parked envs ``cols`` as invalid padding.

        Observation and next observation repeat the env's final observation;
        action, reward, flags and agent_info are zeros.
        """
        if start >= stop:
            return
        span = slice(start, stop)
        for col in cols.tolist():
            for buffers in (self._obs, self._next_obs):
                for buffer, frozen in zip(buffers, self._frozen, strict=True):
                    if buffer.dtype.kind == "O":  # one object per row, never spread
                        for row in range(start, stop):
                            buffer[row, col] = frozen[col]
                    else:
                        buffer[span, col] = frozen[col]
            for buffer in self._action:
                buffer[span, col] = 0
            self._reward[span, col] = 0.0
            self._terminated[span, col] = False
            self._truncated[span, col] = False
            self._valid[span, col] = False
            for buffer in self._agent_info.values():
                buffer[span, col] = 0

    def _split_obs(self, obs: Any, count: int) -> list[npt.NDArray[Any]]:
        return [
            np.asarray(leaf)
            for leaf in flatten_stored(self._obs_space, obs, count, "observations")
        ]

    def _batch(self) -> SampleBatch:
        def out(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
            if not self.copy:
                return array
            # object leaves: fresh values too, not the buffers' own objects
            return fresh_objects(array) if array.dtype.kind == "O" else array.copy()

        return SampleBatch(
            obs=make_views(self._obs_space, [out(b) for b in self._obs]),
            action=make_views(self._action_space, [out(b) for b in self._action]),
            reward=out(self._reward),
            next_obs=make_views(self._obs_space, [out(b) for b in self._next_obs]),
            terminated=out(self._terminated),
            truncated=out(self._truncated),
            valid=out(self._valid),
            agent_info={key: out(b) for key, b in self._agent_info.items()},
        )
