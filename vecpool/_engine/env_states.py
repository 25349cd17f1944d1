"""Env states for planning: ``get_states``, ``set_states`` and ``step_from``.

The envs' own ``get_state()``/``set_state(state)`` do the work inside the workers;
here the indices are checked and grouped by worker, one command goes to each worker
concerned, and the per-env results are put back in the order asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import Space
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from vecpool._engine.buffers import StepBuffers
from vecpool._engine.env_errors import raise_env_errors
from vecpool._engine.group import WorkerGroup
from vecpool._engine.guards import HELD
from vecpool._engine.infos import merge_infos
from vecpool._util.validation import check_int, is_int
from vecpool._wire.messages import Command, EnvState, Reply

__all__ = ["EnvStates", "refuse_ended_states"]

Groups = dict[int, tuple[list[int], list[int]]]
"""Worker index -> (positions in the request, local env indices)."""


def check_count(name: str, values: Sequence[Any], count: int) -> list[Any]:
    """``values`` as a list, if it holds ``count`` entries.

    Raises:
        ValueError: Naming the argument and both counts.
    """
    values = list(values)
    if len(values) != count:
        msg = f"`{name}` must hold one entry per index ({count}), got {len(values)}."
        raise ValueError(msg)
    return values


def refuse_ended_states(states: Sequence[Any]) -> None:
    """Refuse, for ``step_from``, a state whose next step would reset its env.

    Raises:
        ValueError: Naming the first such state and the fix.
    """
    for position, state in enumerate(states):
        if isinstance(state, EnvState) and state.autoreset_pending:
            msg = (
                f"`states[{position}]` was saved right after its episode ended: "
                "its next step resets the env (`autoreset_pending=True`), a "
                "step `step_from` does not take. Call `set_states(states)` then "
                "`step(actions)` to take that reset step, or leave ended states "
                "out of `step_from`."
            )
            raise ValueError(msg)


class EnvStates:
    """The env-state calls of one vector env.

    Args:
        group: The workers.
        buffers: The step buffers (for the batched action spaces).
        observation_space: Single observation space.
        owner: The vector env's class name, for error notes.
    """

    def __init__(
        self,
        group: WorkerGroup,
        buffers: StepBuffers,
        observation_space: Space[Any],
        owner: str,
    ) -> None:
        """Keep the parts the calls need."""
        self.group = group
        self.buffers = buffers
        self.observation_space = observation_space
        self.owner = owner
        self.num_envs = buffers.num_envs

    def group_indices(
        self, indices: Sequence[int] | None, *, distinct: bool = False
    ) -> tuple[list[int], Groups]:
        """Validate indices; group them by worker.

        Args:
            indices: Env indices, or ``None`` for all.
            distinct: Refuse an index given twice (a call that changes the envs:
                which of the two would win is not the caller's to guess).

        Raises:
            ValueError: If an index is not an int in range, or repeats.
        """
        order: list[Any] = (
            list(range(self.num_envs)) if indices is None else list(indices)
        )
        for index in order:
            if not is_int(index) or not 0 <= index < self.num_envs:
                msg = (
                    f"`indices` must hold ints in [0, {self.num_envs}), got {index!r}."
                )
                raise ValueError(msg)
        if distinct and len({int(index) for index in order}) != len(order):
            msg = (
                f"`indices` must not repeat an index, got {[int(i) for i in order]}: "
                "one state per env."
            )
            raise ValueError(msg)
        groups: Groups = {}
        for position, index in enumerate(order):
            worker = self.group.handle_of[int(index)]
            positions, local = groups.setdefault(worker, ([], []))
            positions.append(position)
            local.append(int(index) - self.group.handles[worker].env_indices.start)
        return order, groups

    def _call(
        self,
        what: str,
        groups: Groups,
        message: Callable[[list[int], list[int]], tuple[Command, Any]],
    ) -> dict[int, Reply | None]:
        with HELD:
            handles = self.group.send_all(
                what,
                lambda handle: handle.send(
                    *message(groups[handle.index][1], groups[handle.index][0])
                ),
                [self.group.handles[index] for index in groups],
            )
        try:
            self.group.wait(what, None, handles)
        except BaseException:
            self.group.drop_pending()  # their late replies will be dropped
            raise
        replies = {handle.index: handle.answer() for handle in handles}
        raise_env_errors(replies.values(), self.owner, log=False)
        return replies

    @staticmethod
    def _ungroup(
        order: list[int], groups: Groups, replies: dict[int, Reply | None]
    ) -> list[Any]:
        results: list[Any] = [None] * len(order)
        for worker, (positions, _) in groups.items():
            reply = replies[worker]
            values = reply.results if reply is not None and reply.results else []
            for position, value in zip(positions, values, strict=True):
                results[position] = value
        return results

    def get_states(self, indices: Sequence[int] | None) -> list[Any]:
        """See :meth:`vecpool.AsyncVectorEnv.get_states`."""
        order, groups = self.group_indices(indices)
        replies = self._call(
            "get_states", groups, lambda local, _: (Command.GET_STATES, local)
        )
        return self._ungroup(order, groups, replies)

    def set_states(self, states: Sequence[Any], indices: Sequence[int] | None) -> None:
        """See :meth:`vecpool.AsyncVectorEnv.set_states`."""
        order, groups = self.group_indices(indices, distinct=True)
        states = check_count("states", states, len(order))
        self._call(
            "set_states",
            groups,
            lambda local, positions: (
                Command.SET_STATES,
                (local, [states[p] for p in positions]),
            ),
        )

    def step_from(
        self,
        states: Sequence[Any],
        actions: Any,
        dt: int,
        indices: Sequence[int] | None,
    ) -> tuple[
        list[Any],
        Any,
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        """See :meth:`vecpool.AsyncVectorEnv.step_from`."""
        repeats = check_int("dt", dt, 1)
        # an index may repeat (children of one node on one env): each row sets
        # its own state first, in order, and the env is left at the last row's
        order, groups = self.group_indices(indices)
        if not order:
            msg = "`indices` is empty: `step_from` needs at least one env to step."
            raise ValueError(msg)
        states = check_count("states", states, len(order))
        refuse_ended_states(states)
        space = self.buffers.actions.batched_space(len(order))
        per_env = check_count("actions", list(iterate(space, actions)), len(order))
        replies = self._call(
            "step_from",
            groups,
            lambda local, positions: (
                Command.STEP_FROM,
                (
                    local,
                    [states[p] for p in positions],
                    [per_env[p] for p in positions],
                    repeats,
                ),
            ),
        )
        results = self._ungroup(order, groups, replies)
        infos = merge_infos(
            [(position, result[5]) for position, result in enumerate(results)],
            len(order),
        )
        out: Any = create_empty_array(self.observation_space, n=len(order))
        observations = concatenate(
            self.observation_space, [result[1] for result in results], out
        )
        return (
            [result[0] for result in results],
            observations,
            np.array([result[2] for result in results], dtype=np.float64),
            np.array([result[3] for result in results], dtype=np.bool_),
            np.array([result[4] for result in results], dtype=np.bool_),
            infos,
        )
