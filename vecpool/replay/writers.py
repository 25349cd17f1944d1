"""Writers of a replay pool: how added transitions reach the ring's rows.

:class:`HotWriter` is the fast path: one row per env in env order, written at each
sub-pool's free row with a handful of numpy calls (slice writes while every
sub-pool's free slot is the same, the aligned path), with the counting deferred.
:meth:`HotWriter.show` makes the rows added since the last read visible to
sampling (lengths, ends, priorities) in a few numpy calls whatever their number;
:meth:`HotWriter.sync` also settles the stretch marks and episodes of every step
since the last settle at once, before anything reads them and before a row could
be written twice. Where sub-pools are not at the same slot, small rows are staged
in step order (:class:`StagedSteps`) and written a run of steps at once, before
anything reads them (:meth:`HotWriter.flush`). It applies where the storage kind
allows it, without clearing or random routing. :class:`RoutedWriter` is the
general path: rows routed to sub-pools (by ``env_ids``, or at random), appended
one per sub-pool at a time and trimmed at once, in the documented order (append,
clearing, overflow; docs/replay-pool.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from vecpool.replay.episode_log import EpisodeLog
from vecpool.replay.layouts import ArrayLayout, Columns, ObservationLayout
from vecpool.replay.ring import SubPoolRing
from vecpool.replay.samplers import IndexSampler

__all__ = ["STAGE_BYTES", "STAGE_STEPS", "HotWriter", "RoutedWriter", "StagedSteps"]

Leaves = list[npt.NDArray[Any]]

STAGE_STEPS = 64
"""Vector steps :meth:`HotWriter.add_rows` stages before it writes them at once."""
STAGE_BYTES = 1 << 18
"""The most bytes the staged steps may take (fewer steps for larger rows; none
where fewer than 4 would fit: a large observation is cheaper written once)."""


def _stored(layout: ArrayLayout, columns: Columns) -> Leaves:
    """Every stored per-row array, in :class:`StagedSteps`' order."""
    return [
        *layout.obs,
        *layout.next_obs,
        *columns.action,
        columns.reward,
        columns.terminated,
        columns.truncated,
    ]


class StagedSteps:
    """Hot steps kept in step order, for :meth:`HotWriter.flush` to write at once.

    Where sub-pools are not at the same slot (after the first episode end, in a
    ``NEXT_STEP`` loop), each step's rows lie apart and every field costs a
    scatter; staged, a step is a few slice writes and a run of steps one scatter
    a field. Each field is kept in the stored dtype, so its values are those the
    ring would have been given.

    Attributes:
        steps: How many steps it has room for.
        count: How many it holds now.
        leaves: How many observation leaves there are.
        arrays: One ``[steps, num_envs, ...]`` array a stored field: observation
            leaves, next-observation leaves, action leaves, reward, the flags.
        objects: Those of ``arrays`` that hold Python objects (cleared once
            written, so the stage keeps none alive).
        valid: Which rows are transitions, at the steps that came with a mask
            (the others' rows are all transitions and are not written).
        masked: The steps that came with a mask.
        places: Each step's place among its env's rows, when none came with a
            mask (``[steps, 1]``).
    """

    def __init__(
        self, layout: ArrayLayout, columns: Columns, num_envs: int, steps: int
    ) -> None:
        """Room for ``steps`` steps of ``num_envs`` rows."""
        self.steps, self.count, self.leaves = steps, 0, len(layout.obs)
        self.arrays = [
            np.empty((steps, num_envs, *a.shape[1:]), a.dtype)
            for a in _stored(layout, columns)
        ]
        self.objects = [a for a in self.arrays if a.dtype.kind == "O"]
        # one observation leaf and one action leaf: each field one array
        self.plain = self.leaves == 1 and len(self.arrays) == 6
        self.valid = np.ones((steps, num_envs), np.bool_)
        self.masked: list[int] = []
        self.places = np.arange(steps)[:, None]

    @classmethod
    def fit(
        cls, layout: ObservationLayout, columns: Columns, num_envs: int, limit: int
    ) -> StagedSteps | None:
        """A stage for rows of this size, or ``None`` where none pays.

        Only whole observations (:class:`~vecpool.replay.layouts.ArrayLayout`):
        frames and next observations kept apart depend on the rows before them.
        At most ``limit`` steps (the writer's settle limit) and
        :data:`STAGE_BYTES`; none where fewer than 4 steps fit.
        """
        if not isinstance(layout, ArrayLayout):
            return None
        step = sum(array[:1].nbytes for array in _stored(layout, columns)) * num_envs
        steps = min(STAGE_STEPS, limit, STAGE_BYTES // max(step, 1))
        return cls(layout, columns, num_envs, steps) if steps >= 4 else None

    def put(
        self,
        obs: Leaves,
        action: Leaves,
        next_obs: Leaves,
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """Keep one step's rows (``valid``: which are transitions; ``None``: all)."""
        arrays, step = self.arrays, self.count
        if self.plain:
            arrays[0][step] = obs[0]
            arrays[1][step] = next_obs[0]
            arrays[2][step] = action[0]
        else:
            for store, leaf in zip(arrays, [*obs, *next_obs, *action], strict=False):
                store[step] = leaf
        arrays[-3][step] = reward
        arrays[-2][step] = terminated
        arrays[-1][step] = truncated
        # the step and its mask counted in plain stores, no call between them
        # (Python raises a Ctrl-C only at a call or a backward jump)
        if valid is None:  # its row of `valid` is not read (see HotWriter.flush)
            self.count = step + 1
        else:
            self.valid[step] = valid
            self.masked, self.count = [*self.masked, step], step + 1

    def split(
        self, fields: Leaves
    ) -> tuple[Leaves, Leaves, Leaves, tuple[npt.NDArray[Any], ...]]:
        """``fields`` (one a stored field) as obs, next obs, action leaves, scalars."""
        leaves = self.leaves
        obs, next_obs = fields[:leaves], fields[leaves : 2 * leaves]
        return obs, next_obs, fields[2 * leaves : -3], tuple(fields[-3:])


class HotWriter:
    """The fast path, its counting deferred to :meth:`sync`.

    Args:
        ring: The sub-pools.
        layout: The observations' storage kind.
        columns: Actions, rewards and flags.
        log: The episode log.
        sampler: The index sampler (told of the rows added and dropped).
        enabled: Whether the hot path applies (the storage kind allows it, no
            clearing, no random routing).
    """

    stage: StagedSteps | None = None
    """The staged steps (``None``: each step written at once); a class default
    for a pool pickled before stages existed."""
    read: bool = False
    """Whether the pool was read (:meth:`show`) since the last add."""

    def __init__(
        self,
        ring: SubPoolRing,
        layout: ObservationLayout,
        columns: Columns,
        log: EpisodeLog,
        sampler: IndexSampler,
        enabled: bool,
    ) -> None:
        """Nothing deferred yet."""
        self.ring, self.layout, self.columns = ring, layout, columns
        self.log, self.sampler, self.enabled = log, sampler, enabled
        ring.aligned = enabled
        # what sampling sees lags the writes: the adds of every env, and the
        # masked ones per env, since the last `show`
        self.pending = 0
        self.pending_env = np.zeros(ring.num_envs, np.int64)
        self.masked = False
        # what the marks and the episode log lag: the vector steps since the last
        # `sync`, settled before a row could be written twice (the ring's slots
        # minus one), and each sub-pool's rows among them already shown
        self.unsettled = 0
        self.settle_limit = max(1, ring.slots - 1)
        self.shown = np.zeros(ring.num_envs, np.int64)
        # the masks of the run's masked adds, by their place in the run: which
        # vector step each row came at, so its episodes are logged as they ended
        self.masks: list[tuple[int, npt.NDArray[np.bool_]]] = []
        # add_rows' steps, kept in step order and written at once (`flush`)
        if enabled:
            self.stage = StagedSteps.fit(
                layout, columns, ring.num_envs, self.settle_limit
            )

    def add_aligned(
        self,
        obs: npt.NDArray[Any],
        action: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[Any],
        truncated: npt.NDArray[Any],
    ) -> None:
        """One row per env at the sub-pools' common free slot: six slice writes."""
        ring, columns = self.ring, self.columns
        slot, num_envs = ring.slot, ring.num_envs
        first = slot * num_envs
        rows = slice(first, first + num_envs)
        self.layout.write_block(rows, first, obs, next_obs)
        columns.action[0][rows] = action
        columns.reward[rows] = reward
        columns.terminated[rows] = terminated
        columns.truncated[rows] = truncated
        slot += 1
        ring.slot = 0 if slot == ring.slots else slot
        self.pending += 1
        self.unsettled += 1
        if self.unsettled >= self.settle_limit:
            self.sync()

    def add_rows(
        self,
        obs: Leaves,
        action: Leaves,
        next_obs: Leaves,
        reward: npt.NDArray[Any],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None,
    ) -> None:
        """One row per env at each sub-pool's free row (not ``valid``: not kept).

        Staged where the rows are small (:data:`STAGE_BYTES`) and the pool was not
        read since the last add: a step's rows are then a handful of slice
        writes, and :meth:`flush` writes a run of steps into the sub-pools at
        once, where each env's rows lie apart.
        """
        stage = self.stage
        # staged steps come first, also those an interrupted flush left
        if stage is not None and not stage.count and self.read:
            stage = None  # read after every add (DQN's loop): written at once
        if stage is not None and (
            stage.count == stage.steps
            or self.unsettled + stage.count >= self.settle_limit
        ):
            # full (or as many as may go unsettled): written before this step, so
            # the stage never holds more than that between two adds. The flush
            # may settle the run, which may align the sub-pools again: the ring
            # leaves alignment after it, so no later add is written aligned
            # before the steps staged
            self.flush()
        ring = self.ring
        if ring.aligned:  # the ring's `row` brought up to date: per-row writes
            ring.row = ring.base + ring.slot * ring.num_envs
            ring.aligned = False
        if stage is not None:
            stage.put(obs, action, next_obs, reward, terminated, truncated, valid)
            return
        self.read = False  # not staged: the flush of one step would cost more
        # than the step written at once
        # int32 row links (to keep the index small) widened once, not per write
        row = self.ring.row.astype(np.intp)
        self.layout.write_rows(row, obs, next_obs, valid)
        self.columns.write(row, action, reward, terminated, truncated)
        self._advance(row, valid)

    def flush(self) -> None:
        """Write the staged steps into the sub-pools, as :meth:`add_rows` would.

        Each env's rows go to its sub-pool's next free slots in step order; a
        row not ``valid`` goes to the free slot after them, as :meth:`add_rows`
        writes it at the free slot (not held). The counting is then deferred as
        for any add (:meth:`show`, :meth:`sync`). The steps stay staged until
        their rows are written and counted: an exception before (a Ctrl-C in a
        read or an add that flushes) loses none, and the next flush writes them
        again. (An add flushes a full stage before it stages its own step: one
        whose flush was cut short has added nothing.)
        """
        stage = self.stage
        if stage is None or not stage.count:
            return
        steps, masked = stage.count, stage.masked
        ring = self.ring
        num_envs, slots = ring.num_envs, ring.slots
        free = (ring.row - ring.base) // num_envs  # each sub-pool's free slot
        place: npt.NDArray[np.intp]
        if masked:  # the rows of the steps that came with a mask, the others all
            valid = np.ones((steps, num_envs), np.bool_)
            valid[masked] = stage.valid[masked]
            after = np.cumsum(valid, axis=0, dtype=np.intp)
            counts: Any = after[-1]
            # each row's place among its env's rows in the run (after - 1), and
            # for a row not valid, the free slot after them all
            place = np.where(valid, after - 1, counts)
        else:
            place = stage.places[:steps]
            counts = steps
        rows = (ring.base + (free + place) % slots * num_envs).ravel()
        # views made here, not kept: a pickled or copied pool keeps no views
        fields = [a[:steps].reshape(rows.size, *a.shape[2:]) for a in stage.arrays]
        obs, next_obs, action, scalars = stage.split(fields)
        self.layout.write_rows(rows, obs, next_obs, None)
        self.columns.write(rows, action, *scalars)
        # the counting: computed first (a Ctrl-C raised here leaves the steps
        # staged, to be written again), then taken in plain stores with no call
        # between them (Python raises a Ctrl-C only at a call or a backward jump)
        row = ring.base + (free + counts) % slots * num_envs
        pending, pending_env, masks = self.pending + steps, self.pending_env, []
        if masked:
            pending -= len(masked)
            pending_env = pending_env + valid[masked].sum(axis=0)
            run = self.unsettled
            masks = [(run + step, valid[step].copy()) for step in masked]
        stage.count, stage.masked, ring.row = 0, [], row
        self.pending, self.pending_env = pending, pending_env
        self.masks += masks  # in place, no call (an append is one)
        self.unsettled += steps
        if masked:
            self.masked = True
        for objects in stage.objects:  # no reference kept to what was flushed
            objects[:steps] = None
        if self.unsettled >= self.settle_limit:
            self.sync()

    def _advance(
        self, row: npt.NDArray[np.intp], valid: npt.NDArray[np.bool_] | None
    ) -> None:
        """After the writes at ``row``: move on (the rest waits for :meth:`sync`)."""
        ring = self.ring
        if valid is None:
            ring.row = ring.next_row[row]
            self.pending += 1
        else:  # rows not valid stay at their sub-pool's free slot: not kept
            # computed, then taken in plain stores with no call between them
            # (a Ctrl-C raised before loses the step whole, never half-counted)
            following = np.where(valid, ring.next_row[row], row)
            mask = [(self.unsettled, valid.copy())]
            ring.row, self.pending_env = following, self.pending_env + valid
            self.masks += mask  # in place, no call (an append is one)
            self.masked = True
        self.unsettled += 1
        if self.unsettled >= self.settle_limit:
            self.sync()

    def leave(self) -> None:
        """Settle, then stop the aligned shortcut (a routed add comes next)."""
        self.sync()
        self.ring.aligned = False

    def show(self) -> None:
        """Make the rows added so far visible to sampling: lengths, ends, priorities.

        What a plain ``sample()`` needs, a few numpy calls whatever the run; the
        marks and the episodes wait for :meth:`sync` (the DQN loop's case: a
        ``sample()`` after every step shows that step, and a run of steps is
        settled at once).
        """
        self.read = True
        if self.stage is not None and self.stage.count:
            self.flush()
        adds: Any = self.pending
        if self.masked:
            adds = adds + self.pending_env
        elif not adds:
            return
        ring = self.ring
        row = ring.base + ring.slot * ring.num_envs if ring.aligned else ring.row
        end, length = ring.end, ring.length
        # computed first (a Ctrl-C raised in a call here changes nothing), then
        # taken in plain stores with no call between them, as in `flush`
        new_end = (row - ring.base) // ring.num_envs
        new_length = ring.wrapped(length + adds)
        received, shown = ring.received + adds, self.shown + adds
        ring.row, ring.end, ring.length = row, new_end, new_length
        ring.received[:], self.shown[:] = received, shown
        self.pending, self.pending_env[:], self.masked = 0, 0, False
        self.sampler.added(ring.envs, end, length, adds, ring.length)
        if self.enabled:
            ring.slot = slot = int(ring.end[0])
            ring.aligned = aligned = not np.count_nonzero(ring.end != slot)
            ring.even = aligned and not np.count_nonzero(ring.length != ring.length[0])

    def sync(self) -> None:
        """Apply everything deferred: :meth:`show`, then the marks and episodes."""
        self.show()
        calls = self.unsettled  # vector steps in the run
        if not calls:
            return
        self.unsettled = 0
        ring, counts = self.ring, self.shown  # each sub-pool's rows in the run
        self._settle(ring.envs, (ring.end - counts) % ring.slots, counts, calls)
        self.masks.clear()
        counts[:] = 0

    def _settle(
        self,
        env_ids: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        calls: int,
    ) -> None:
        """Mark and count the ``counts[i]`` rows written for ``env_ids[i]``.

        They lie at slots ``end[i], end[i] + 1, ...`` of their sub-pool (``end``:
        the free slot before them), added in ``calls`` vector steps. Sets their
        stretch marks and the envs' fresh marks, and logs the episodes that ended
        in them, in the order they ended.
        """
        total = int(counts.sum())
        if total == 0:
            return
        ring, columns = self.ring, self.columns
        env = np.repeat(env_ids, counts)
        block = np.cumsum(counts) - counts  # where each env's rows start
        step = np.arange(total, dtype=np.int64) - np.repeat(block, counts)
        row = ring.base[env] + (end[env] + step) % ring.slots * ring.num_envs
        done = columns.terminated[row] | columns.truncated[row]
        starts = np.empty(total, np.bool_)
        starts[1:] = done[:-1]
        has = counts > 0
        first, written = block[has], env_ids[has]
        starts[first] = ring.fresh[written]
        ring.starts[row] = starts
        resumed = np.zeros(total, np.bool_)
        resumed[first] = ring.fresh[written] & ring.resuming[written]
        ring.resumed[row] = resumed
        ring.resuming[written] = False
        ring.fresh[written] = done[(block + counts - 1)[has]]
        self.log.close_run(
            env_ids, counts, columns.reward[row], done, self._ticks(step, calls)
        )

    def _ticks(self, step: npt.NDArray[np.int64], calls: int) -> npt.NDArray[Any]:
        """The vector step (in the run) of each row, env after env.

        Without masked adds, an env's ``k``-th row came at the ``k``-th step.
        """
        if not self.masks:
            return step
        came = np.ones((calls, self.ring.num_envs), np.bool_)
        places, masks = zip(*self.masks, strict=True)
        came[list(places)] = masks
        _, tick = np.nonzero(came.T)  # env after env, each in order
        return tick

    def loaded(self) -> None:
        """Start over after the ring was loaded: nothing deferred."""
        ring = self.ring
        self.pending, self.unsettled = 0, 0
        if self.stage is not None:
            self.stage.count = 0
            self.stage.masked.clear()
        self.masks.clear()
        self.masked = False
        self.pending_env[:] = 0
        self.shown[:] = 0
        ring.aligned = self.enabled and bool((ring.end == ring.slot).all())


class RoutedWriter:
    """The general path: rows routed to sub-pools, appended, trimmed.

    Args:
        ring: The sub-pools.
        layout: The observations' storage kind.
        columns: Actions, rewards and flags.
        sampler: The index sampler (told of the rows added and dropped).
        rng: The pool's random generator (``random`` routing).
        random: Route each row to sub-pool ``j`` with probability proportional to
            ``1 / (len_j + 1)`` instead of to its env's.
    """

    def __init__(
        self,
        ring: SubPoolRing,
        layout: ObservationLayout,
        columns: Columns,
        sampler: IndexSampler,
        rng: np.random.Generator,
        random: bool,
    ) -> None:
        """Write into these parts."""
        self.ring, self.layout, self.columns = ring, layout, columns
        self.sampler, self.rng, self.random = sampler, rng, random

    def add(
        self,
        source: npt.NDArray[np.int64] | None,
        rows: dict[str, Leaves],
        scalars: tuple[npt.NDArray[Any], ...],
    ) -> None:
        """Append the rows of envs ``source`` (``None``: one per env, in order)."""
        count = self.ring.num_envs if source is None else source.size
        if source is None and not self.random:
            self._append(self.ring.envs, None, rows, scalars)
            return
        dest = self.route(self.ring.envs if source is None else source)
        if self.random or np.unique(dest).size != count:
            # several transitions for one sub-pool: apply them in rounds of
            # distinct sub-pools, keeping each sub-pool's order
            for chosen in rounds(dest):
                self._append(dest[chosen], chosen, rows, scalars)
        else:
            self._append(dest, None, rows, scalars)

    def route(self, source: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Destination sub-pool of each transition."""
        if not self.random:
            return source
        # Sequential: each draw sees the lengths left by the previous transitions.
        ring = self.ring
        lengths = ring.length.tolist()
        received = ring.received.tolist()
        draws = self.rng.random(source.size).tolist()
        dest = np.empty(source.size, np.int64)
        for position, draw in enumerate(draws):
            weights = np.reciprocal(np.asarray(lengths, np.float64) + 1.0)
            cumulative = np.cumsum(weights)
            target = int(np.searchsorted(cumulative, draw * cumulative[-1], "right"))
            target = min(target, ring.num_envs - 1)
            dest[position] = target
            received[target] += 1
            lengths[target] = ring.length_after_one(lengths[target], received[target])
        return dest

    def _append(
        self,
        env: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64] | None,
        batch: dict[str, Leaves],
        scalars: tuple[npt.NDArray[Any], ...],
    ) -> None:
        """Append ``batch[rows]`` to the distinct sub-pools ``env``, then trim.

        ``rows=None`` means every row. The trimming is the documented order:
        periodic clearing, then the overflow rule.
        """

        def pick(leaf: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return leaf if rows is None else leaf[rows]

        ring = self.ring
        slots, num_envs = ring.slots, ring.num_envs
        end, length = ring.end[env], ring.length[env]
        base = ring.base[env]
        row = base + end * num_envs
        obs = [pick(leaf) for leaf in batch["obs"]]
        next_obs = [pick(leaf) for leaf in batch["next_obs"]]
        self.layout.append(ring, env, row, obs, next_obs)
        reward, terminated, truncated = (pick(values) for values in scalars)
        action = [pick(leaf) for leaf in batch["action"]]
        self.columns.write(row, action, reward, terminated, truncated)
        if self.random:  # a sub-pool's rows come from any env: none continues
            ring.starts[row] = True
            ring.resumed[row] = False
        else:
            ring.starts[row] = ring.fresh[env]
            ring.resumed[row] = ring.fresh[env] & ring.resuming[env]
            ring.resuming[env] = False
            ring.fresh[env] = terminated | truncated
        received = ring.received[env] + 1
        ring.received[env] = received
        dropped, trim = ring.trimmed(length + 1, received)
        gone = dropped + trim
        if gone.any():
            self.layout.dropped(ring.rows_from(env, end - length, gone))
        ring.end[env] = (end + 1) % slots
        ring.row[env] = base + (end + 1) % slots * num_envs
        ring.length[env] = length + 1 - gone
        self.sampler.added(env, end, length, np.ones_like(end), ring.length[env])


def rounds(targets: npt.NDArray[np.int64]) -> list[npt.NDArray[np.int64]]:
    """Positions split into rounds of distinct targets, each target's order kept."""
    occurrence = np.zeros(targets.size, np.int64)
    seen: dict[int, int] = {}
    for position, target in enumerate(targets.tolist()):
        occurrence[position] = seen.get(target, 0)
        seen[target] = occurrence[position] + 1
    return [np.flatnonzero(occurrence == r) for r in range(int(occurrence.max()) + 1)]
