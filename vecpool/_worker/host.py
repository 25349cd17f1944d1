"""Child side: the envs one worker hosts, and what each command does to them.

:func:`serve` runs one command (step with autoreset, reset, call, env states) on
the hosted envs, writing into the shared block and returning the reply's bytes. The
worker process (:mod:`vecpool._worker.loop`) and the in-process handle
(:mod:`vecpool._engine.in_process`) both call it. Imports only the wire layer
(:mod:`vecpool._wire`) and :mod:`vecpool._util.spaces`; the messages are described
in :mod:`vecpool._wire.messages`.
"""

from __future__ import annotations

import contextlib
import copy
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import Wrapper
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import TimeLimit

from vecpool._util.spaces import (
    is_foreign,
    leaves,
    make_extractor,
    make_reader,
    make_writer,
)
from vecpool._wire.info_columns import (
    INFO_ROW_BYTES,
    InfoSchema,
    write_schema,
)
from vecpool._wire.messages import (
    CUT_AGAIN,
    INFOS_IN_MEMORY,
    STEP,
    STEP_SOME,
    Command,
    EnvState,
    ObsTransport,
    Reply,
    WorkerConfig,
    encode,
    encode_safely,
)
from vecpool._wire.remote_errors import ErrorRecord, pack_error
from vecpool._wire.wide_infos import (
    ACCEPTANCE_BYTES,
    WideArea,
    WideOffer,
    accepted_serial,
)
from vecpool._worker.cuts import Cuts

__all__ = ["IN_PARENT", "IN_WORKER", "NONE_INFO", "Host", "open_host", "serve"]

NONE_INFO = (
    "'NoneType' object has no attribute 'items' (the env returned `info=None`; an "
    "info is a dict, `{}` for none)"
)
"""Gymnasium's ``SyncVectorEnv`` error for such an info (its ``_add_info``), said."""
IN_PARENT: tuple[type[BaseException], ...] = (Exception,)
"""What env code may raise and have reported as its error, in the parent's share:
a ``KeyboardInterrupt`` there is the user's Ctrl-C, and goes on up."""
IN_WORKER: tuple[type[BaseException], ...] = (KeyboardInterrupt, Exception)
"""The same in a worker process, as Gymnasium's worker: it ignores SIGINT
(vecpool/_worker/loop.py), so a ``KeyboardInterrupt`` there is the env's own."""


class Host:
    """The envs of one worker and the views they read and write."""

    def __init__(
        self,
        config: WorkerConfig,
        envs: list[Any],
        caught: tuple[type[BaseException], ...] = IN_PARENT,
    ) -> None:
        self.config = config
        self.caught = caught  # what env code raises that is reported as its error
        self.envs = envs
        self.start = config.start
        self.indices = range(config.start, config.start + len(envs))
        block, layout = config.block, config.layout
        self.rewards = block.view(layout.rewards)
        self.terminations = block.view(layout.terminations)
        self.truncations = block.view(layout.truncations)
        self.read_action = (
            make_reader(config.action_space, [block.view(f) for f in layout.actions])
            if layout.actions
            else None
        )
        self.write_obs: Callable[[int, Any], None] | None = None
        self.obs_arrays: list[Any] = []  # per buffer, where the space is one array
        self.obs_writers: list[Callable[[int, Any], None]] = []
        transport = config.obs_transport
        if transport in (ObsTransport.NATIVE, ObsTransport.HYBRID):
            per_buffer = len(leaves(config.observation_space, skip_foreign=True))
            fields = layout.observations
            self.obs_writers = [
                make_writer(
                    config.observation_space,
                    [block.view(f) for f in fields[start : start + per_buffer]],
                )
                for start in range(0, len(fields), per_buffer)
            ]
            self.write_obs = self.obs_writers[0]
            if per_buffer == 1 and not is_foreign(config.observation_space):
                # one array leaf (a Box): the step writes it inline when the env
                # returns an array of exactly its row's shape and dtype
                self.obs_arrays = [block.view(field) for field in fields]
        # what every reply carries of each env's observation: all of it (PIPE), the
        # leaves that are not arrays (HYBRID), or nothing
        self.by_pipe = transport in (ObsTransport.PIPE, ObsTransport.HYBRID)
        self.extract: Callable[[Any], Any] | None = (
            make_extractor(config.observation_space)
            if transport is ObsTransport.HYBRID
            else None
        )
        # step infos in shared memory (see vecpool/_wire/info_columns.py)
        self.info_rows = block.view(layout.infos).data.cast("B")
        self.info_ids = block.view(layout.info_versions)
        self.info_schema_areas = block.view(layout.info_schemas)
        self.info_schemas: list[InfoSchema | None] = [None] * len(envs)
        self.info_schema_ids = [0] * len(envs)
        # what info_ids holds for each env: a replacement (on_worker_crash="restart")
        # starts from its predecessor's ids and rewrites each one as its env steps
        # (an env answered but not yet returned by `recv` keeps its info row)
        self.info_ids_now = [
            int(x) for x in self.info_ids[self.start : self.start + len(envs)]
        ]
        self.info_refused: list[Any] = [None] * len(envs)  # the keys last refused
        # infos too large for a row: an area of this worker's own, once accepted
        # (see vecpool/_wire/wide_infos.py)
        self.wide = WideArea(len(envs))
        self.last_obs: list[Any] = [None] * len(envs)
        self.autoreset = [False] * len(envs)
        self.mode = config.autoreset_mode
        self.permits = config.permits  # max_concurrency (vecpool/_wire/permits.py)
        if self.permits is not None:
            self.permits.open()
        # a replacement worker (on_worker_crash="restart"): its envs' cuts
        restart = config.restart
        self.cuts = None if restart is None else Cuts(restart)
        if restart is not None:
            self.last_obs = list(restart.last_obs)

    def _take_seed(self, local: int) -> int | None:
        """The first-reset seed of a replaced env (once), else ``None``."""
        return None if self.cuts is None else self.cuts.take_seed(local)

    # -- commands ------------------------------------------------------------------

    def step(
        self,
        actions: list[Any] | None,
        subset: Sequence[int] | None = None,
        buffer: int = 0,
    ) -> bytes:
        """Step every hosted env (or the local indices in ``subset``).

        ``actions`` (when given, i.e. not in shared memory) holds one action per
        stepped env, in order.
        """
        infos: list[tuple[int, dict[str, Any]]] = []
        errors: list[ErrorRecord] = []
        read_action = self.read_action
        write_obs = self.obs_writers[buffer] if self.obs_writers else self.write_obs
        # where the space is one array: a row of the right kind is written at once
        array: Any = self.obs_arrays[buffer] if self.obs_arrays else None
        shape, dtype = ((), None) if array is None else (array.shape[1:], array.dtype)
        ndarray = np.ndarray
        rewards, terminations, truncations = (
            self.rewards,
            self.terminations,
            self.truncations,
        )
        mode = self.mode
        next_step = mode is AutoresetMode.NEXT_STEP
        same_step = mode is AutoresetMode.SAME_STEP
        autoreset, last_obs, start = self.autoreset, self.last_obs, self.start
        # the infos it can go in shared memory: each env's own row, which the parent
        # reads before that env can be stepped again (a full step's reply; a `send`
        # batch's `recv`)
        info_ids = self.info_ids
        ids_now = self.info_ids_now
        columns = False
        cuts = self.cuts  # None but in a replacement worker
        permits = self.permits
        if permits is not None:  # max_concurrency
            permits.acquire(self.config.index)
        envs = self.envs
        try:
            for position, local in enumerate(
                range(len(envs)) if subset is None else subset
            ):
                index = start + local
                schema_id = 0  # this step's info in shared memory: none yet
                try:
                    marked = False
                    if cuts is not None and cuts.shows_row(local):
                        obs, reward, terminated, truncated, info = cuts.row(
                            local, envs[local], mode
                        )
                        marked = True  # pickled: the parent looks at this info
                    elif next_step and autoreset[local]:
                        seed = None
                        if cuts is not None:
                            cuts.open[local] = False
                            seed = cuts.take_seed(local)
                        obs, info = envs[local].reset(seed=seed)
                        reward, terminated, truncated = 0.0, False, False
                    else:
                        if cuts is not None:
                            cuts.open[local] = False
                        obs, reward, terminated, truncated, info = envs[local].step(
                            read_action(index)  # type: ignore[misc]
                            if actions is None
                            else actions[position]
                        )
                        if same_step and (terminated or truncated):
                            obs, info = _reset_same_step(envs[local], obs, info)
                    if next_step:
                        autoreset[local] = bool(terminated or truncated)
                    if (
                        type(obs) is ndarray
                        and obs.shape == shape
                        and obs.dtype is dtype
                    ):
                        array[index] = obs  # write_obs's check passed, written out
                    elif write_obs is not None:
                        write_obs(index, obs)
                    last_obs[local] = obs  # a reference: no copy
                    rewards[index] = reward
                    terminations[index] = terminated
                    truncations[index] = truncated
                    if info:
                        if not marked:
                            schema_id = self._put_info(local, index, info)
                        if schema_id:
                            columns = True
                        else:
                            infos.append((index, info))
                    elif info is None:
                        raise AttributeError(NONE_INFO)
                except self.caught as exc:  # reported to the parent
                    errors.append(pack_error(index, exc))
                    schema_id = 0
                # one write, and only when it changes (an older id must not show)
                if ids_now[local] != schema_id:
                    info_ids[index] = ids_now[local] = schema_id
        finally:
            if permits is not None:
                permits.release()
        if not infos and not errors and not self.by_pipe:  # _reply's hot path
            return INFOS_IN_MEMORY if columns else b""
        if infos and subset is None:  # pickled anyway: a wide area to offer?
            return self._reply(infos, errors, columns, self.wide.offer())
        return self._reply(infos, errors, columns)

    def take_tail(self, tail: bytes | memoryview) -> None:
        """Act on a step or reset command's tail.

        The tail holds the acceptance of a wide-info area (``b"w"`` and its
        serial) and/or :data:`CUT_AGAIN`, in that order.
        """
        if len(tail) >= ACCEPTANCE_BYTES:
            self.accept_wide(tail[:ACCEPTANCE_BYTES])
            tail = tail[ACCEPTANCE_BYTES:]
        if tail == CUT_AGAIN:
            self.cut_again()

    def cut_again(self) -> None:
        """Mark the cut again: the parent never returned the rows that marked it.

        The call that restarted this worker gave up before returning them; the
        next step returns each such env's cut row again, a reset marks its info
        (vecpool/_worker/cuts.py). Nothing happens in a worker that is not a
        replacement.
        """
        if self.cuts is not None:
            self.cuts.mark_again(self.last_obs)

    def accept_wide(self, tail: bytes | memoryview) -> None:
        """Switch to the wide-info area the parent accepted (a step command's tail)."""
        serial = accepted_serial(tail)
        if serial is None:
            return
        self.wide.accept(serial)
        if self.wide.rows is not None:  # wide infos refused before fit now
            self.info_refused = [None] * len(self.envs)

    def _write_info(
        self, schema: InfoSchema, info: dict[Any, Any], local: int, index: int
    ) -> bool:
        """Write ``info`` in its env's row (or wide row) if it has ``schema``."""
        if schema.wide:
            rows, stride = self.wide.rows, self.wide.stride
            if rows is None or schema.nbytes > stride:
                return False
            return schema.write(info, rows, local * stride)
        return schema.write(info, self.info_rows, index * INFO_ROW_BYTES)

    def _put_info(self, local: int, index: int, info: dict[Any, Any]) -> int:
        """Write a step's info into shared memory; return its schema id (0: pickled).

        The env's schema is learned again when the info no longer fits it; a new
        schema is pickled into the env's schema area under its id. An info whose
        keys were refused before is refused again at once (strings,
        nested dicts, ... would otherwise be examined on every step), and nothing
        here ever fails the step: what cannot go in a row goes pickled. (An info
        refused for its values is refused with the same keys later too: that only
        costs speed, never a wrong row.)
        """
        schema = self.info_schemas[local]
        try:
            if schema is not None and self._write_info(schema, info, local, index):
                return self.info_schema_ids[local]
            signature = tuple(info)  # its keys: refused again without a look
            if signature == self.info_refused[local]:
                return 0
            learned = InfoSchema.learn(info)
            if (
                learned is not None
                and learned.wide
                and not self.wide.want(learned.nbytes)
            ):
                learned = None  # pickled until the parent accepts a wide area
            if learned is not None and learned != schema:
                schema_id = write_schema(learned, self.info_schema_areas[index].data)
                if schema_id:
                    self.info_schemas[local] = learned
                    self.info_schema_ids[local] = schema_id
                else:
                    learned = None  # its schema does not fit the area
            if learned is not None and self._write_info(learned, info, local, index):
                return self.info_schema_ids[local]
            self.info_refused[local] = signature
        except Exception:  # noqa: BLE001 - e.g. a shape numpy cannot lay out
            pass
        return 0

    def reset(
        self,
        seeds: list[Any],
        options: dict[str, Any] | None,
        flags: list[bool],
        buffer: int = 0,
    ) -> bytes:
        infos: list[tuple[int, dict[str, Any]]] = []
        errors: list[ErrorRecord] = []
        last = max((local for local, flag in enumerate(flags) if flag), default=-1)
        write_obs = self.obs_writers[buffer] if self.obs_writers else self.write_obs
        permits = self.permits
        if permits is not None:  # max_concurrency
            permits.acquire(self.config.index)
        try:
            for local, env in enumerate(self.envs):
                index = self.start + local
                if not flags[local]:
                    # left out of a masked reset: its observation is unchanged, but
                    # it must appear in this call's buffer too (the env has not been
                    # touched since it returned this observation)
                    if write_obs is not None and self.last_obs[local] is not None:
                        write_obs(index, self.last_obs[local])
                    continue
                try:
                    # Gymnasium unpickles a separate copy of `options` for every env:
                    # copies for all but the last env, which gets the original.
                    env_options = options if local == last else copy.deepcopy(options)
                    seed = self._take_seed(local)
                    if seeds[local] is not None:
                        seed = seeds[local]
                    obs, info = env.reset(seed=seed, options=env_options)
                    self.autoreset[local] = False
                    if self.cuts is not None and self.cuts.reset(local):
                        info = {**info, "worker_restarted": True}
                    if write_obs is not None:
                        write_obs(index, obs)
                    self.last_obs[local] = obs  # a reference: no copy
                    if info:
                        infos.append((index, info))
                    elif info is None:
                        raise AttributeError(NONE_INFO)
                except self.caught as exc:  # reported to the parent
                    errors.append(pack_error(index, exc))
        finally:
            if permits is not None:
                permits.release()
        return self._reply(infos, errors)

    def _reply(
        self,
        infos: list[tuple[int, dict[str, Any]]],
        errors: list[ErrorRecord],
        columns: bool = False,
        wide_offer: WideOffer | None = None,
    ) -> bytes:
        """The answer to a step or reset: empty when there is nothing to say.

        ``columns``: some infos of this step are in shared memory; ``wide_offer``:
        an area for infos too large for a row (vecpool/_wire/wide_infos.py).
        """
        if not infos and not errors and not self.by_pipe:
            return INFOS_IN_MEMORY if columns else b""
        reply = Reply(
            infos=infos or None,
            observations=self._piped_observations() if self.by_pipe else None,
            errors=errors or None,
            columns=columns,
            wide_offer=wide_offer,
        )
        # pickled in this process too: what the user holds is a copy, as from
        # Gymnasium's AsyncVectorEnv (never the env's own objects)
        return encode_safely(reply, self.start)

    def _piped_observations(self) -> list[Any]:
        """Each hosted env's observation, or its leaves that are not arrays."""
        extract = self.extract
        if extract is None:
            return list(self.last_obs)
        return [None if obs is None else extract(obs) for obs in self.last_obs]

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        results: list[Any] = []
        errors: list[ErrorRecord] = []
        for local, env in enumerate(self.envs):
            try:
                # Every env gets its own copy, as with Gymnasium's per-env pipes.
                env_args, env_kwargs = (
                    (args, kwargs)
                    if local == len(self.envs) - 1
                    else copy.deepcopy((args, kwargs))
                )
                attr = env.get_wrapper_attr(name)
                results.append(
                    attr(*env_args, **env_kwargs) if callable(attr) else attr
                )
            except self.caught as exc:  # reported to the parent
                results.append(None)
                errors.append(pack_error(self.start + local, exc))
        return encode_safely(Reply(results=results, errors=errors or None), self.start)

    def set_attr(self, name: str, values: list[Any]) -> bytes:
        errors: list[ErrorRecord] = []
        for local, env in enumerate(self.envs):
            try:
                value = (
                    values[local]
                    if local == len(self.envs) - 1
                    else copy.deepcopy(values[local])
                )
                env.set_wrapper_attr(name, value)
            except self.caught as exc:  # reported to the parent
                errors.append(pack_error(self.start + local, exc))
        return encode(Reply(errors=errors)) if errors else b""

    def _state_methods(self, local: int) -> Any:
        env = self.envs[local].unwrapped
        if not (hasattr(env, "get_state") and hasattr(env, "set_state")):
            msg = (
                f"Sub-environment {self.start + local} ({type(env).__name__}) has no "
                "`get_state()`/`set_state(state)` methods: implement both on the env "
                "class (they are looked up on `env.unwrapped`) to use `get_states`, "
                "`set_states` and `step_from`."
            )
            raise AttributeError(msg)
        return env

    def _time_limits(self, local: int) -> list[Any]:
        """The ``TimeLimit`` wrappers around an env, outermost first."""
        limits = []
        env = self.envs[local]
        while isinstance(env, Wrapper):
            if isinstance(env, TimeLimit):
                limits.append(env)
            env = env.env
        return limits

    def _state_of(self, local: int, methods: Any) -> EnvState:
        """The env's :class:`EnvState`, its ``TimeLimit`` counts with it."""
        counts = tuple(limit._elapsed_steps for limit in self._time_limits(local))
        return EnvState(methods.get_state(), self.autoreset[local], counts)

    def get_states(self, locals_: list[int]) -> bytes:
        results: list[Any] = []
        errors: list[ErrorRecord] = []
        for local in locals_:
            try:
                results.append(self._state_of(local, self._state_methods(local)))
            except self.caught as exc:  # reported to the parent
                results.append(None)
                errors.append(pack_error(self.start + local, exc))
        return encode_safely(Reply(results=results, errors=errors or None), self.start)

    def set_states(self, locals_: list[int], states: list[Any]) -> bytes:
        errors: list[ErrorRecord] = []
        for local, state in zip(locals_, states, strict=True):
            try:
                self._restore(local, state)
            except self.caught as exc:  # reported to the parent
                errors.append(pack_error(self.start + local, exc))
        return encode(Reply(errors=errors)) if errors else b""

    def _restore(self, local: int, state: Any) -> Any:
        """Set an :class:`EnvState` (or a bare env state: then mid-episode)."""
        methods = self._state_methods(local)
        if self.cuts is not None:
            self.cuts.forget(local)  # the state given defines the env now
        if isinstance(state, EnvState):
            methods.set_state(state.state)
            self.autoreset[local] = bool(state.autoreset_pending)
            limits = self._time_limits(local)
            if len(limits) == len(state.elapsed_steps):  # else: another env's
                for limit, count in zip(limits, state.elapsed_steps, strict=True):
                    if count is not None:  # None: saved before the first reset
                        limit._elapsed_steps = count
        else:
            methods.set_state(state)
            self.autoreset[local] = False
        return methods

    def step_from(
        self, locals_: list[int], states: list[Any], actions: list[Any], dt: int
    ) -> bytes:
        """Set each state, apply its action ``dt`` times (stopping at an episode end).

        Rewards are summed over the repeats. An episode that ends is reset as the
        mode's step would: under ``NEXT_STEP`` by the env's next step (its state
        says so), under ``SAME_STEP`` at once (the observation returned is the new
        episode's, the final one is in the info, as ``step`` returns them), under
        ``DISABLED`` not at all.
        """
        results: list[Any] = []
        errors: list[ErrorRecord] = []
        for local, state, action in zip(locals_, states, actions, strict=True):
            try:
                env = self.envs[local]
                methods = self._restore(local, state)
                total = 0.0
                for _ in range(dt):
                    obs, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    if terminated or truncated:
                        break
                ended = bool(terminated or truncated)
                if ended and self.mode is AutoresetMode.SAME_STEP:
                    obs, info = _reset_same_step(env, obs, info)
                self.last_obs[local] = obs  # what a reset that leaves it out returns
                if self.mode is AutoresetMode.NEXT_STEP:
                    self.autoreset[local] = ended
                new_state = self._state_of(local, methods)
                results.append((new_state, obs, total, terminated, truncated, info))
            except self.caught as exc:  # reported to the parent
                results.append(None)
                errors.append(pack_error(self.start + local, exc))
        return encode_safely(Reply(results=results, errors=errors or None), self.start)

    def check_spaces(self) -> bytes:
        single_obs = self.config.observation_space
        single_action = self.config.action_space
        same_obs_mode = self.config.observation_mode == "same"
        results = [
            (
                single_obs == env.observation_space
                if same_obs_mode
                else is_space_dtype_shape_equiv(single_obs, env.observation_space),
                single_action == env.action_space,
            )
            for env in self.envs
        ]
        return encode(Reply(results=results))

    def close(self) -> None:
        for env in self.envs:
            with contextlib.suppress(*self.caught):  # an env's KeyboardInterrupt too
                env.close()
        self.envs = []
        self.wide.close()


def _reset_same_step(env: Any, obs: Any, info: dict[str, Any]) -> tuple[Any, Any]:
    """``SAME_STEP``'s autoreset of an env whose episode just ended.

    Returns:
        The new episode's observation, and the info Gymnasium returns then: the
        reset's, with the ended step's as ``final_info`` and ``final_obs``.
    """
    reset_obs, reset_info = env.reset()
    return reset_obs, {"final_info": info, "final_obs": obs, **reset_info}


def _run_command(host: Host, data: bytes | memoryview) -> tuple[bytes, bool]:
    """Run one pickled command; return the reply and whether to keep going."""
    command, payload = pickle.loads(data)
    if command is Command.STEP:
        actions, subset, buffer, *tail = payload
        if tail and tail[0]:  # see Host.take_tail
            host.take_tail(tail[0])
        return host.step(actions, subset, buffer), True
    if command is Command.RESET:
        seeds, options, flags, buffer, *tail = payload
        if tail and tail[0]:
            host.take_tail(tail[0])
        return host.reset(seeds, options, flags, buffer), True
    if command is Command.CALL:
        name, args, kwargs = payload
        return host.call(name, args, kwargs), True
    if command is Command.SET_ATTR:
        name, values = payload
        return host.set_attr(name, values), True
    if command is Command.GET_STATES:
        return host.get_states(payload), True
    if command is Command.SET_STATES:
        locals_, states = payload
        return host.set_states(locals_, states), True
    if command is Command.STEP_FROM:
        locals_, states, actions, dt = payload
        return host.step_from(locals_, states, actions, dt), True
    if command is Command.CLOSE:
        host.close()
        return b"", False
    msg = f"Received unknown command `{command}`."
    raise RuntimeError(msg)


def open_host(
    config: WorkerConfig,
    envs: list[Any],
    caught: tuple[type[BaseException], ...] = IN_PARENT,
) -> tuple[Host | None, bytes]:
    """Create the envs of ``config`` (appended to ``envs``) and their host.

    Args:
        config: The worker configuration.
        envs: Filled with the envs as they are created (the caller closes them).
        caught: What env code may raise and have reported as its error
            (:data:`IN_WORKER` in a worker process).

    Returns:
        The host (``None`` if a constructor raised) and the first reply: the
        start-up space check, or the constructor's error.
    """
    for local, env_fn in enumerate(config.env_fns()):
        try:
            envs.append(env_fn())
        except caught as exc:  # reported to the parent
            return None, encode(Reply(errors=[pack_error(config.start + local, exc)]))
    host = Host(config, envs, caught)
    return host, host.check_spaces()


def serve(host: Host, data: bytes | memoryview) -> tuple[bytes, bool]:
    """Run one command; return the reply and whether to keep serving.

    Args:
        host: The envs.
        data: The command as the parent framed it (a short step message or a
            pickled :class:`~vecpool._wire.messages.Command`).

    Returns:
        The reply bytes (an error reply if the command itself failed) and
        ``False`` after ``CLOSE``.
    """
    try:
        if data[:1] == STEP:  # b"s" + the observation buffer's index
            if len(data) > 2:  # + a tail (see Host.take_tail)
                host.take_tail(data[2:])
            return host.step(None, None, data[1] if len(data) > 1 else 0), True
        if data[:1] == STEP_SOME:
            subset = np.frombuffer(data, np.uint16, offset=1).tolist()
            return host.step(None, subset), True
        return _run_command(host, data)
    except host.caught as exc:  # protocol errors go back too
        return encode(Reply(errors=[pack_error(host.start, exc)])), True
