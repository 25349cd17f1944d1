"""Rollout-level sampling on Ray actors (extra ``vecpool[ray]``).

:class:`RaySampler` spreads ``env_fns`` over Ray actors, each hosting a
:class:`vecpool.AsyncVectorEnv` (shared memory inside the node) and a
:class:`vecpool.Sampler`; the remote unit is a whole ``[T, b]`` rollout, never a
step (a per-step actor call costs milliseconds). Ray is imported only here.

Faults: actors run with ``max_restarts=-1`` and ``max_task_retries=0``, because a
retried call would re-run a restarted actor from its constructor's seeds and hand
back the batch already returned (duplicated data). A lost actor's rollout in flight
is dropped and counted (:attr:`RaySampler.lost_env_steps`), the episodes it cut are
aborted in the central pool, and the actor is reseeded from (seed, actor,
incarnation) before it is asked for data again. Every batch carries (incarnation,
sequence number) and is accepted once, in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from vecpool._engine.env_states import refuse_ended_states
from vecpool._util.seeding import derive_seed
from vecpool._util.slices import split
from vecpool._util.validation import check_int
from vecpool.errors import WorkerCrashedError
from vecpool.replay.pool import ReplayPool
from vecpool.sampling.sampler import EpisodeRecord, SampleBatch, Sampler
from vecpool.vector.async_env import AsyncVectorEnv

__all__ = ["FAILURE_POLICIES", "RaySampler"]

FAILURE_POLICIES = ("restart", "raise", "continue")
RESTART_TIMEOUT = 120.0
"""Seconds to wait for Ray to bring a lost actor back."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        msg = "RaySampler needs Ray: pip install 'vecpool[ray]'."
        raise ImportError(msg) from e
    return ray


def _is_factory(policy: Any) -> bool:
    """A policy factory takes no arguments; a policy takes the observations."""
    try:
        parameters = inspect.signature(policy).parameters.values()
    except (TypeError, ValueError):
        return False
    return not any(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in parameters
    )


def _resolve(policy: Any) -> Any:
    return policy() if policy is not None and _is_factory(policy) else policy


class RolloutActor:
    """What one Ray actor hosts: a vector env over its envs and a sampler.

    Not used directly: :class:`RaySampler` wraps it with ``ray.remote``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        policy: Any,
        batch_T: int,
        seed: int | None,
        env_kwargs: dict[str, Any],
        sampler_kwargs: dict[str, Any],
    ) -> None:
        """Build the vector env and the sampler (seeded with ``seed``)."""
        self.env_fns, self.env_kwargs = list(env_fns), dict(env_kwargs)
        self.batch_T, self.sampler_kwargs = batch_T, dict(sampler_kwargs)
        self.policy = _resolve(policy)
        self.incarnation = 0
        self.env = AsyncVectorEnv(self.env_fns, **self.env_kwargs)
        self.sampler = self._sampler(seed)

    def _sampler(self, seed: int | None) -> Sampler:
        return Sampler(
            self.env, self.policy, self.batch_T, seed=seed, **self.sampler_kwargs
        )

    def reseed(self, incarnation: int, seed: int | None) -> int:
        """Start a new incarnation: fresh envs, a sampler seeded with ``seed``."""
        self.incarnation = incarnation
        self.env.close(terminate=True)
        self.env = AsyncVectorEnv(self.env_fns, **self.env_kwargs)
        self.sampler = self._sampler(seed)
        return incarnation

    def sample(
        self, seq: int
    ) -> tuple[int, int, SampleBatch | None, list[Any], npt.NDArray[np.int64] | None]:
        """One rollout: ``(incarnation, seq, batch, episodes, resumed)``.

        The batch is ``None`` when the vector env lost a worker for good: the env
        is rebuilt and the partial batch discarded. ``resumed``: whether the envs
        were reset before the batch, and which began it in an episode begun
        unseen (:attr:`vecpool.Sampler.resumed`).
        """
        try:
            batch, episodes = self.sampler.obtain_samples()
        except WorkerCrashedError:
            self.reseed(self.incarnation, None)
            return self.incarnation, seq, None, [], None
        return self.incarnation, seq, batch, episodes, self.sampler.resumed

    def set_policy(self, policy: Any) -> None:
        """Use ``policy`` (or build it, for a factory) from now on."""
        self.policy = self.sampler.policy = _resolve(policy)

    def get_states(self) -> list[Any]:
        """:meth:`vecpool.AsyncVectorEnv.get_states` of every hosted env."""
        return self.env.get_states()

    def step_from(self, states: list[Any], actions: Any, dt: int) -> tuple[Any, ...]:
        """:meth:`vecpool.AsyncVectorEnv.step_from` on every hosted env."""
        return self.env.step_from(states, actions, dt)

    def evaluate(self, policy: Any, kwargs: dict[str, Any]) -> list[Any]:
        """:meth:`vecpool.Sampler.evaluate` on this actor's envs."""
        return self.sampler.evaluate(_resolve(policy), **kwargs)

    def pid(self) -> int:
        """The actor's process id (for tests and monitoring)."""
        import os

        return os.getpid()

    def node_id(self) -> str:
        """The Ray node hosting the actor (for tests and monitoring)."""
        return str(_ray().get_runtime_context().get_node_id())

    def close(self) -> None:
        """Close the vector env."""
        self.env.close()


class RaySampler:
    """:class:`vecpool.Sampler` over Ray actors: ``[T, B_total]`` rollouts.

    ``env_fns`` are split evenly and in order over ``num_actors`` actors; column
    ``b`` of a batch is global env ``b``. Each actor hosts a
    :class:`vecpool.AsyncVectorEnv` (``env_kwargs``; by default one worker per CPU
    of the actor's ``num_cpus`` with ``on_worker_crash="restart"``, or, with one
    CPU, the envs in the actor itself) and a :class:`vecpool.Sampler`; with ``seed``,
    the actor hosting envs ``a..`` seeds its sampler with ``seed + a``, so one
    actor gives exactly the batches of a local ``Sampler`` with the same seed.

    Args:
        env_fns: The env constructors (picklable by cloudpickle).
        policy: ``None`` (random actions), a picklable policy
            (``obs -> actions``), or a factory (no arguments) run on each actor.
        batch_T: Steps per env per :meth:`obtain_samples`.
        num_actors: Number of Ray actors.
        seed: Base seed (see above); ``None``: unseeded.
        actor_options: Passed to ``ray.remote(...).options`` (e.g. ``num_cpus``);
            ``max_restarts`` and ``max_task_retries`` are vecpool's.
        pool: A central :class:`vecpool.ReplayPool` (one sub-pool per global env)
            fed with every accepted real transition.
        on_actor_failure: ``"restart"`` (reseed the restarted actor, sample its
            envs again), ``"raise"``, or ``"continue"`` (its columns come back
            ``valid=False`` for this call).
        env_kwargs: Keyword arguments of each actor's ``AsyncVectorEnv``.
        **sampler_kwargs: Keyword arguments of each actor's ``Sampler``
            (``max_decorrelation_steps``, ``track_info_keys``, ...).

    Attributes:
        actors: The Ray actor handles, in env order.
        restarts: Restarts seen per actor.
        lost_env_steps: Env steps of rollouts lost with their actor.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        policy: Any,
        batch_T: int,
        *,
        num_actors: int,
        seed: int | None = None,
        actor_options: dict[str, Any] | None = None,
        pool: ReplayPool | None = None,
        on_actor_failure: str = "restart",
        env_kwargs: dict[str, Any] | None = None,
        **sampler_kwargs: Any,
    ) -> None:
        """Start the actors (they build their envs in the background)."""
        env_fns = list(env_fns)
        self.num_envs = len(env_fns)
        num_actors = check_int(
            "num_actors", num_actors, 1, self.num_envs, hint=" (<= the number of envs)"
        )
        self.batch_T = check_int("batch_T", batch_T, 1)
        if on_actor_failure not in FAILURE_POLICIES:
            msg = (
                f"`on_actor_failure` must be one of {FAILURE_POLICIES}, got "
                f"{on_actor_failure!r}."
            )
            raise ValueError(msg)
        if pool is not None and pool.num_envs != self.num_envs:
            msg = (
                f"`pool` has {pool.num_envs} sub-pools for {self.num_envs} envs: "
                f"create it with num_envs={self.num_envs}."
            )
            raise ValueError(msg)
        ray = _ray()
        self.seed, self.pool, self.on_actor_failure = seed, pool, on_actor_failure
        self.slices = split(self.num_envs, num_actors)
        options = {**(actor_options or {}), "max_restarts": -1, "max_task_retries": 0}
        remote = ray.remote(RolloutActor).options(**options)
        cpus = float(options.get("num_cpus", 1))
        self.actors = [
            remote.remote(
                [env_fns[i] for i in envs],
                policy,
                self.batch_T,
                None if seed is None else seed + envs.start,
                _env_kwargs(env_kwargs, cpus, len(envs)),
                sampler_kwargs,
            )
            for envs in self.slices
        ]
        self.incarnations = [0] * num_actors
        self.restarts = [0] * num_actors
        self.lost_env_steps = 0
        self._seq = [0] * num_actors
        self._inflight: dict[int, Any] = {}  # actor -> its rollout in flight
        self._closed = False

    # -- sampling ------------------------------------------------------------------

    def obtain_samples(self) -> tuple[SampleBatch, list[EpisodeRecord]]:
        """One ``[batch_T, num_envs]`` batch from every actor, columns in env order.

        Returns:
            The batch and the episodes that ended (``env_index`` global).

        Raises:
            ray.exceptions.RayActorError: With ``on_actor_failure="raise"``.
        """
        for k in range(len(self.actors)):
            self._request(k)  # every actor samples at once
        parts: dict[int, tuple[SampleBatch, list[EpisodeRecord]] | None] = {}
        for k in range(len(self.actors)):
            parts[k] = self._next_block(k)
        return self._assemble(parts)

    def iter_blocks(
        self, max_blocks: int | None = None
    ) -> Iterator[tuple[npt.NDArray[np.int64], SampleBatch, list[EpisodeRecord]]]:
        """Yield each actor's ``[T, b]`` rollout as soon as it is ready.

        Every actor always has one rollout in flight; the first to finish is
        yielded (``ray.wait``) and the actor asked for its next one, so a slow
        actor never holds up the others (the asynchronous counterpart of
        :meth:`obtain_samples`). Rollouts still in flight when the loop stops are
        kept for the next call, never dropped. Lost actors are handled as in
        :meth:`obtain_samples`; the central pool gets each block.

        Args:
            max_blocks: Stop after this many blocks; ``None``: never stop.

        Yields:
            ``(env_ids, batch, episodes)``: the block's global env ids (its
            columns), the batch, and its finished episodes (``env_index`` global).
        """
        ray = _ray()
        count = 0
        while max_blocks is None or count < max_blocks:
            for k in range(len(self.actors)):
                self._request(k)
            owner = {ref: k for k, ref in self._inflight.items()}
            (ready,), _ = ray.wait(list(owner), num_returns=1)
            k = owner[ready]
            part = self._next_block(k)
            if part is None:
                continue  # lost, with on_actor_failure="continue"
            batch, episodes = part
            envs = self.slices[k]
            ids = np.arange(envs.start, envs.stop, dtype=np.int64)
            if self.pool is not None:
                self._feed(batch, ids)
            count += 1
            yield ids, batch, self._globalize(k, episodes)

    def _request(self, k: int) -> Any:
        """Actor ``k``'s rollout in flight (asked for now if none is)."""
        ref = self._inflight.get(k)
        if ref is None:
            ref = self._inflight[k] = self.actors[k].sample.remote(self._seq[k])
        return ref

    def _next_block(self, k: int) -> tuple[SampleBatch, list[EpisodeRecord]] | None:
        """Actor ``k``'s next accepted rollout (``None``: lost, and "continue")."""
        ray = _ray()
        while True:
            ref = self._request(k)
            try:
                incarnation, seq, batch, episodes, resumed = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                del self._inflight[k]
                if self.on_actor_failure == "raise":
                    raise
                self._lost(k)
                if self.on_actor_failure == "continue":
                    return None
                continue
            del self._inflight[k]
            if incarnation != self.incarnations[k] or seq != self._seq[k]:
                continue  # stale: not this incarnation's next batch
            self._seq[k] += 1
            if batch is None:  # its vector env lost a worker for good: resample
                self.lost_env_steps += self.batch_T * len(self.slices[k])
                self._abort(k)
                continue
            if self.pool is not None and resumed is not None:
                # the actor reset its envs (its first block, after an evaluate):
                # their episodes in progress ended unfinished, and those its
                # decorrelation steps began are none of the pool's (it never saw
                # them begin); its blocks come after this
                self._abort(k)
                if resumed.size:
                    ids = np.asarray(resumed, np.int64) + self.slices[k].start
                    self.pool.abort_episodes(ids, resumes=True)
            return batch, episodes

    def _globalize(self, k: int, records: list[EpisodeRecord]) -> list[EpisodeRecord]:
        start = self.slices[k].start
        return [dataclasses.replace(r, env_index=start + r.env_index) for r in records]

    def get_states(self) -> list[Any]:
        """Every env's state (:meth:`vecpool.AsyncVectorEnv.get_states`), in order."""
        ray = _ray()
        parts = ray.get([actor.get_states.remote() for actor in self.actors])
        return [state for part in parts for state in part]

    def step_from(
        self, states: Sequence[Any], actions: Any, dt: int = 1
    ) -> tuple[list[Any], Any, Any, Any, Any, list[dict[str, Any]]]:
        """Planning on the actors: set states, apply actions ``dt`` times (plangym).

        The states travel in the call (one per env, global order); each actor runs
        :meth:`vecpool.AsyncVectorEnv.step_from` on its envs.

        Returns:
            ``(new_states, observations, rewards, terminations, truncations,
            infos)``, batched over all envs in order; ``infos`` holds one dict per
            actor (each batched over its envs).
        """
        ray = _ray()
        if len(states) != self.num_envs:
            msg = (
                f"`states` must hold one state per env ({self.num_envs}), got "
                f"{len(states)}."
            )
            raise ValueError(msg)
        refuse_ended_states(states)  # before any actor steps its envs
        refs = [
            actor.step_from.remote(
                list(states[envs.start : envs.stop]),
                _rows(actions, envs.start, envs.stop),
                dt,
            )
            for actor, envs in zip(self.actors, self.slices, strict=True)
        ]
        parts = ray.get(refs)
        new_states = [state for part in parts for state in part[0]]
        batched = [_concat([p[i] for p in parts], axis=0) for i in range(1, 5)]
        return (new_states, *batched, [p[5] for p in parts])

    def _lost(self, k: int) -> None:
        """Actor ``k`` died: count its rollout, reseed its next incarnation."""
        ray = _ray()
        self.restarts[k] += 1
        self.incarnations[k] += 1
        self.lost_env_steps += self.batch_T * len(self.slices[k])
        self._abort(k)
        base = None if self.seed is None else self.seed + self.slices[k].start
        seed = None if base is None else derive_seed(base, self.incarnations[k])
        deadline = time.monotonic() + RESTART_TIMEOUT
        while True:  # Ray restarts it (max_restarts=-1); wait until it answers
            try:
                ray.get(self.actors[k].reseed.remote(self.incarnations[k], seed))
                return
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _abort(self, k: int) -> None:
        if self.pool is not None:
            self.pool.abort_episodes(np.asarray(self.slices[k], np.int64))

    def _assemble(
        self, parts: dict[int, tuple[SampleBatch, list[EpisodeRecord]] | None]
    ) -> tuple[SampleBatch, list[EpisodeRecord]]:
        template = next((p[0] for p in parts.values() if p is not None), None)
        if template is None:
            msg = "Every actor was lost in this call (on_actor_failure='continue')."
            raise RuntimeError(msg)
        batches, episodes = [], []
        for k, envs in enumerate(self.slices):
            part = parts[k]
            if part is None:
                batches.append(_invalid_like(template, len(envs)))
                continue
            batch, records = part
            batches.append(batch)
            episodes += self._globalize(k, records)
        batch = SampleBatch(
            *(
                _concat([getattr(b, name) for b in batches])
                for name in SampleBatch._fields
            )
        )
        if self.pool is not None:
            self._feed(batch, np.arange(self.num_envs, dtype=np.int64))
        return batch, episodes

    def _feed(self, batch: SampleBatch, ids: npt.NDArray[np.int64]) -> None:
        """Add the batch's real transitions (columns ``ids``) to the central pool."""
        assert self.pool is not None
        cut = batch.truncated & ~batch.valid  # a worker or actor restart's rows
        for t in range(self.batch_T):
            if batch.valid[t].any():
                self.pool.add(
                    _row(batch.obs, t),
                    _row(batch.action, t),
                    _row(batch.next_obs, t),
                    batch.reward[t],
                    batch.terminated[t],
                    batch.truncated[t],
                    ids,
                    valid=batch.valid[t],
                )
            if cut[t].any():
                self.pool.abort_episodes(ids[cut[t]])

    # -- policy, evaluation, closing ---------------------------------------------------

    def set_policy(self, policy: Any) -> None:
        """Send ``policy`` (or a factory) to every actor, put once in Ray's store."""
        ray = _ray()
        ref = ray.put(policy)
        ray.get([actor.set_policy.remote(ref) for actor in self.actors])

    set_weights = set_policy

    def evaluate(self, policy: Any = None, **kwargs: Any) -> list[EpisodeRecord]:
        """:meth:`vecpool.Sampler.evaluate` on every actor; ``env_index`` global."""
        ray = _ray()
        results = ray.get([a.evaluate.remote(policy, kwargs) for a in self.actors])
        return [
            dataclasses.replace(r, env_index=envs.start + r.env_index)
            for envs, records in zip(self.slices, results, strict=True)
            for r in records
        ]

    def close(self) -> None:
        """Close every actor's envs and end the actors. Idempotent."""
        if self._closed:
            return
        self._closed = True
        ray = _ray()
        for actor in self.actors:
            with contextlib.suppress(Exception):  # ended below anyway
                ray.get(actor.close.remote(), timeout=30)
            ray.kill(actor, no_restart=True)


def _env_kwargs(
    given: dict[str, Any] | None, cpus: float, count: int
) -> dict[str, Any]:
    """An actor's ``AsyncVectorEnv`` arguments: its CPUs decide ``num_workers``.

    With one CPU (Ray's default) the envs run in the actor itself
    (``num_workers=0``): a worker process would only share that CPU, and a crash
    takes the actor down, which Ray restarts. With more, one worker per CPU, and a
    dead worker is replaced (``on_worker_crash="restart"``).
    """
    kwargs = dict(given or {})
    workers = kwargs.setdefault("num_workers", min(count, int(cpus)) if cpus > 1 else 0)
    if workers:
        kwargs.setdefault("on_worker_crash", "restart")
    return kwargs


def _concat(items: list[Any], axis: int = 1) -> Any:
    first = items[0]
    if isinstance(first, dict):
        return {key: _concat([item[key] for item in items], axis) for key in first}
    if isinstance(first, tuple):
        return tuple(_concat(list(group), axis) for group in zip(*items, strict=True))
    return np.concatenate(items, axis=axis)


def _rows(tree: Any, start: int, stop: int) -> Any:
    if isinstance(tree, dict):
        return {key: _rows(value, start, stop) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_rows(value, start, stop) for value in tree)
    return np.asarray(tree)[start:stop]


def _row(tree: Any, t: int) -> Any:
    if isinstance(tree, dict):
        return {key: _row(value, t) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_row(value, t) for value in tree)
    return tree[t]


def _invalid_like(template: SampleBatch, count: int) -> SampleBatch:
    """Zero columns, ``valid=False``, shaped like ``template``'s, ``count`` wide."""

    def zeros(tree: Any) -> Any:
        if isinstance(tree, dict):
            return {key: zeros(value) for key, value in tree.items()}
        if isinstance(tree, tuple):
            return tuple(zeros(value) for value in tree)
        array: npt.NDArray[Any] = tree
        return np.zeros((array.shape[0], count, *array.shape[2:]), array.dtype)

    return SampleBatch(*(zeros(getattr(template, n)) for n in SampleBatch._fields))
