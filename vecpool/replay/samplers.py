"""Index samplers of a replay pool: which held rows a batch is read from.

A sampler draws rows from the ring (vecpool/replay/ring.py) with the pool's one
random generator and returns, for each, its sub-pool, its offset there (0: oldest)
and its row; any reader (vecpool/replay/readers.py) reads any sampler's draw.
:class:`UniformSampler` draws every held row alike; :class:`PrioritizedSampler`
draws row ``i`` with probability ``p_i ** alpha / sum_j p_j ** alpha`` from a sum
tree (vecpool/replay/sumtree.py; Schaul et al. 2016).

:data:`SAMPLERS` names them; the pool takes the one :func:`sampler_name` names
for its settings. A new sampler is a class with the :class:`IndexSampler` methods
in a module of its own and its line in :data:`SAMPLERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from vecpool.replay.ring import SubPoolRing
from vecpool.replay.settings import PoolSettings
from vecpool.replay.sumtree import SumTree

__all__ = [
    "NOT_PRIORITIZED",
    "SAMPLERS",
    "Draw",
    "IndexSampler",
    "PrioritizedSampler",
    "UniformSampler",
    "sampler_name",
]

Draw = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]
"""Drawn rows: their sub-pools, their offsets there (0: the oldest), the rows."""

_EMPTY = "Cannot sample from an empty ReplayPool: add transitions first."
NOT_PRIORITIZED = (
    "`update_priorities` needs a prioritized pool: make it with "
    "`ReplayPool(..., alpha=0.6)` (or `ReplayPoolWrapper(..., alpha=0.6)`)."
)
"""The message of priorities given to a pool without them."""


class IndexSampler(Protocol):
    """What a pool draws its batches' rows with.

    ``weighs`` says whether it has priorities (``beta``, :meth:`update`).
    """

    weighs: bool

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        ...

    def draw(self, batch_size: int) -> Draw:
        """``batch_size`` held rows, with replacement (the ring is up to date).

        Raises:
            ValueError: If there is nothing to draw.
        """
        ...

    def added(
        self,
        env_ids: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        adds: npt.NDArray[np.int64] | int,
        new_length: npt.NDArray[np.int64],
    ) -> None:
        """Rows were added to sub-pools (and some dropped).

        ``adds[i]`` rows went to sub-pool ``env_ids[i]``, which held ``length[i]``
        rows ending at slot ``end[i]`` and now holds ``new_length[i]``.
        """
        ...

    def weights(self, row: npt.NDArray[np.int64], beta: float) -> npt.NDArray[Any]:
        """Importance weights of drawn rows (ones where there are no priorities)."""
        ...

    def update(self, ids: npt.NDArray[np.int64], priorities: npt.NDArray[Any]) -> None:
        """Set the priorities of the transitions ``ids`` (checked by the pool)."""
        ...

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """Its arrays, by their names in a pool file."""
        ...

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], targets: npt.NDArray[np.int64] | None
    ) -> None:
        """Take the arrays of :meth:`state_dict` (per-row ones to rows ``targets``)."""
        ...


class UniformSampler:
    """Every held row alike.

    Args:
        ring: The sub-pools.
        rng: The pool's random generator.
    """

    weighs = False
    nbytes = 0

    def __init__(self, ring: SubPoolRing, rng: np.random.Generator) -> None:
        """Draw from ``ring`` with ``rng``."""
        self.ring, self.rng = ring, rng

    @classmethod
    def of(
        cls,
        ring: SubPoolRing,
        rng: np.random.Generator,
        settings: PoolSettings,  # noqa: ARG003
    ) -> UniformSampler:
        """The sampler of a pool made with ``settings``."""
        return cls(ring, rng)

    def draw(self, batch_size: int) -> Draw:
        """Rows drawn uniformly from those held.

        Raises:
            ValueError: If the pool is empty.
        """
        ring = self.ring
        num_envs = ring.num_envs
        if ring.aligned and ring.even and ring.length[0]:
            # every sub-pool holds `held` rows ending at one slot (what an aligned
            # pool of whole vector steps is): the general draw below, in 5 calls
            held = int(ring.length[0])
            flat = self.rng.integers(0, held * num_envs, batch_size)
            env, offset = np.divmod(flat, held)
            slot = offset + (ring.slot - held)
            slot %= ring.slots
            slot *= num_envs
            slot += env
            return env, offset, slot
        length = ring.length
        ends = length.cumsum()  # held rows of the sub-pools up to each one
        total = int(ends[-1])
        if total == 0:
            raise ValueError(_EMPTY)
        flat = self.rng.integers(0, total, batch_size)
        env = ends.searchsorted(flat, side="right")
        offset = flat - (ends - length)[env]  # less the rows of the ones before
        # row = env + slot * n, slot = (oldest slot + offset) % slots, where the
        # oldest slot is end - length: in 4 calls
        slot = flat + (ring.end - ends)[env]
        slot %= ring.slots
        slot *= num_envs
        slot += env
        return env, offset, slot

    def added(
        self,
        env_ids: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        adds: npt.NDArray[np.int64] | int,
        new_length: npt.NDArray[np.int64],
    ) -> None:
        """Nothing to keep."""

    def weights(self, row: npt.NDArray[np.int64], beta: float) -> npt.NDArray[Any]:  # noqa: ARG002 - the protocol's signature
        """Ones."""
        return np.ones(row.size)

    def update(self, ids: npt.NDArray[np.int64], priorities: npt.NDArray[Any]) -> None:  # noqa: ARG002 - the protocol's signature
        """Refused: no priorities here.

        Raises:
            ValueError: Always.
        """
        raise ValueError(NOT_PRIORITIZED)

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """None."""
        return {}

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], targets: npt.NDArray[np.int64] | None
    ) -> None:
        """Nothing to take."""


class PrioritizedSampler:
    """Row ``i`` with probability ``p_i ** alpha / sum_j p_j ** alpha``.

    A new row gets the largest priority given so far (1 at first); a row the pool
    no longer holds has priority 0 (never drawn).

    Args:
        ring: The sub-pools.
        rng: The pool's random generator.
        alpha: The exponent.
    """

    weighs = True

    def __init__(
        self, ring: SubPoolRing, rng: np.random.Generator, alpha: float
    ) -> None:
        """Every row at priority 0."""
        self.ring, self.rng, self.alpha = ring, rng, alpha
        self.tree = SumTree(ring.rows)  # priorities ** alpha, a leaf per row
        self.max_priority = 1.0

    @classmethod
    def of(
        cls, ring: SubPoolRing, rng: np.random.Generator, settings: PoolSettings
    ) -> PrioritizedSampler:
        """The sampler of a pool made with ``settings``."""
        return cls(ring, rng, float(settings.alpha or 0.0))

    @property
    def nbytes(self) -> int:
        """Bytes allocated."""
        return int(self.tree.leaves.nbytes)

    def draw(self, batch_size: int) -> Draw:
        """Rows drawn by priority.

        Raises:
            ValueError: If the pool is empty or every row held has priority 0.
        """
        if not self.tree.total > 0:
            if not self.ring.length.any():
                msg = _EMPTY
            else:
                msg = (
                    "Cannot sample by priority: every transition held has priority "
                    "0. Give some a positive one (`update_priorities(indices, "
                    "abs(td_error) + 1e-6)`)."
                )
            raise ValueError(msg)
        row = self.tree.sample(batch_size, self.rng)
        env, offset = self.ring.offset_of(row)
        return env, offset, row

    def added(
        self,
        env_ids: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        adds: npt.NDArray[np.int64] | int,
        new_length: npt.NDArray[np.int64],
    ) -> None:
        """Priority 0 for the rows no longer held, the largest so far for new ones.

        Before, sub-pool ``i`` held slots ``[end - length, end)``; the adds wrote
        ``[end, end + adds)``; it now holds the last ``new_length`` of those.
        """
        ring = self.ring
        top = end + adds
        dropped = np.minimum(length + adds - new_length, ring.slots)
        fresh_from = np.maximum(end, top - new_length)
        fresh = np.maximum(top - fresh_from, 0)
        if dropped.any():
            self.tree.set(ring.rows_from(env_ids, end - length, dropped), 0.0)
        if fresh.any():
            self.tree.set(
                ring.rows_from(env_ids, fresh_from, fresh),
                self.max_priority**self.alpha,
            )

    def weights(self, row: npt.NDArray[np.int64], beta: float) -> npt.NDArray[Any]:
        """``(N * P(i)) ** -beta`` divided by their maximum (ones for ``beta=0``)."""
        if not beta > 0:
            return np.ones(row.size)
        probability = self.tree.get(row) / self.tree.total
        weights: npt.NDArray[Any] = (int(self.ring.length.sum()) * probability) ** -beta
        weights /= weights.max()
        return weights

    def update(self, ids: npt.NDArray[np.int64], priorities: npt.NDArray[Any]) -> None:
        """Set the priorities of the transitions ``ids`` still held.

        A transition's id is its env and its serial number in its sub-pool: one
        dropped since it was drawn is not held, even if its slot was reused.
        """
        ring = self.ring
        env = ids % ring.num_envs
        serial = ids // ring.num_envs
        offset = serial - (ring.received[env] - ring.length[env])
        held = offset >= 0
        kept = priorities[held]
        powered = np.where(kept > 0, kept**self.alpha, 0.0)
        self.tree.set(ring.row_of(env[held], offset[held]), powered)
        if priorities.size:  # after the set, which refuses what it cannot hold
            self.max_priority = max(self.max_priority, float(priorities.max()))

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """``priority`` (a leaf per row) and ``max_priority``."""
        return {
            "priority": self.tree.leaves,
            "max_priority": np.array([self.max_priority]),
        }

    def load_state_dict(
        self, state: dict[str, npt.NDArray[Any]], targets: npt.NDArray[np.int64] | None
    ) -> None:
        """Take the arrays of :meth:`state_dict`."""
        self.max_priority = float(state["max_priority"][0])
        if targets is None:
            priority = state["priority"]
        else:
            priority = np.zeros(self.ring.rows, np.float64)
            priority[targets] = state["priority"]
        self.tree.load(priority)


SamplerFactory = Callable[[SubPoolRing, np.random.Generator, PoolSettings], Any]

SAMPLERS: dict[str, SamplerFactory] = {
    "uniform": UniformSampler.of,
    "prioritized": PrioritizedSampler.of,
}
"""The samplers by name: a new one is a module and its line here."""


def sampler_name(settings: PoolSettings) -> str:
    """The name of the sampler a pool made with ``settings`` draws with."""
    return "uniform" if settings.alpha is None else "prioritized"
