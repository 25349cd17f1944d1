"""The episode log of a replay pool: returns and lengths of the episodes that ended.

Per env, the return and length of its episode in progress; over the pool's life, the
count and sums of those that ended; and a ring of the last :data:`RECENT_EPISODES`
that ended, in the order they ended (a vector step's in env order). Episodes are
counted as transitions are added (one vector step at a time, or a run of deferred
steps at once: :meth:`EpisodeLog.close_run`), whatever the pool later drops. On
request (:meth:`EpisodeLog.keep_history`), every episode that ends is also kept,
with its env, until taken (:meth:`EpisodeLog.take_history`): ``vecpool collect``
reports its episodes from there, not from a second count of its own.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from vecpool.replay.batches import EndedEpisodes, EpisodeStats
from vecpool.replay.settings import RECENT_EPISODES

__all__ = ["CUT", "Ended", "EpisodeLog"]

Ended = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int64]]
"""Episodes set aside by :meth:`EpisodeLog.record`: batch rows, returns, lengths."""

CUT = -(2**40)
"""The running length of an episode whose start was lost (:meth:`EpisodeLog.cut`):
it stays below ``CUT // 2`` as steps add to it, so its end is told apart from an
episode's end by the sum of the ended lengths the log takes anyway (a million
cut ends in one sum still fit in int64), and a pool file keeps it with the
lengths, no other field needed."""


class EpisodeLog:
    """Returns and lengths of episodes, in progress and ended.

    Args:
        num_envs: Number of envs.
    """

    episode_return: npt.NDArray[np.float64]
    episode_length: npt.NDArray[np.int64]
    episodes: npt.NDArray[np.float64]
    recent: npt.NDArray[np.float64]
    recent_count: npt.NDArray[np.int64]

    def __init__(self, num_envs: int) -> None:
        """No episode yet."""
        self.episode_return = np.zeros(num_envs, np.float64)
        self.episode_length = np.zeros(num_envs, np.int64)
        self.episodes = np.zeros(3, np.float64)  # count, sum of returns, of lengths
        # the return and length of the last RECENT_EPISODES episodes that ended (a
        # ring, oldest overwritten), and how many were ever put in it
        self.recent = np.zeros((RECENT_EPISODES, 2), np.float64)
        self.recent_count = np.zeros(1, np.int64)
        # every episode ended since the last take (returns, lengths, envs), once
        # asked for (not part of the pool's state: never saved)
        self.history: list[Ended] | None = None

    def keep_history(self) -> None:
        """From now on keep every episode that ends, for :meth:`take_history`."""
        if self.history is None:
            self.history = []

    def take_history(self) -> EndedEpisodes:
        """The episodes kept since the last take, oldest first; then none."""
        kept = self.history or []
        if self.history is not None:
            self.history = []
        if not kept:
            return EndedEpisodes(
                np.zeros(0, np.float64), np.zeros(0, np.int64), np.zeros(0, np.int64)
            )
        envs, returns, lengths = (
            np.concatenate(part) for part in zip(*kept, strict=True)
        )
        return EndedEpisodes(  # already of these dtypes: no copies
            np.asarray(returns, np.float64),
            np.asarray(lengths, np.int64),
            np.asarray(envs, np.int64),
        )

    def record(
        self,
        source: npt.NDArray[np.int64] | None,
        reward: npt.NDArray[np.float64],
        done: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_] | None = None,
        *,
        remember: bool = True,
    ) -> Ended | None:
        """Count one step of the envs ``source`` (``None``: every env, in order).

        With ``remember=False`` (a batch counted in several calls, one env in it
        twice) the episodes that end are returned instead of put in the ring of
        recent ones, as ``(their rows in this call, returns, lengths)``, for
        :meth:`remember_in_order`.
        """
        if source is None:
            if valid is None:
                self.episode_return += reward
                np.add(self.episode_length, 1, out=self.episode_length)
                ended: Any = done
            else:
                np.add(
                    self.episode_return, reward, out=self.episode_return, where=valid
                )
                self.episode_length += valid
                ended = done & valid
                done = ended
        else:
            np.add.at(self.episode_return, source, reward)
            np.add.at(self.episode_length, source, 1)
            ended = source[done]
        if np.count_nonzero(done):
            returns = self.episode_return[ended]
            lengths = self.episode_length[ended]
            total = lengths.sum()
            whole = None
            if total < 0:  # the end of a cut episode among them: no episode
                whole = lengths >= 0
                returns, lengths = returns[whole], lengths[whole]
                total = lengths.sum()
            self.episodes += (lengths.size, returns.sum(), total)
            self.episode_return[ended] = 0.0
            self.episode_length[ended] = 0
            if not remember:
                rows = np.flatnonzero(done)
                return (rows if whole is None else rows[whole]), returns, lengths
            envs = None
            if self.history is not None:  # the envs of the episodes
                envs = np.flatnonzero(ended) if source is None else ended
                envs = envs if whole is None else envs[whole]
            self._remember(returns, lengths, envs)
        return None

    def remember_in_order(
        self, ended: list[Ended], source: npt.NDArray[np.int64]
    ) -> None:
        """Put the episodes :meth:`record` set aside in the recent ring, by row.

        ``source``: the env of each row of the batch.
        """
        if not ended:
            return
        rows = np.concatenate([rows for rows, _, _ in ended])
        order = np.argsort(rows)
        self._remember(
            np.concatenate([returns for _, returns, _ in ended])[order],
            np.concatenate([lengths for _, _, lengths in ended])[order],
            source[rows[order]],
        )

    def close_run(
        self,
        env_ids: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        reward: npt.NDArray[np.float64],
        done: npt.NDArray[np.bool_],
        tick: npt.NDArray[np.int64],
    ) -> None:
        """Count a run of deferred steps: ``counts[i]`` rows of env ``env_ids[i]``.

        ``reward`` and ``done`` are the rows, env after env, each env's in order;
        ``tick`` is the vector step (within the run) each row was added at: the
        episodes that end are logged in that order, a step's in env order.
        """
        returns, lengths = self.episode_return, self.episode_length
        env = np.repeat(env_ids, counts)
        ends = np.flatnonzero(done)
        if ends.size == 0:
            np.add.at(returns, env, reward)
            np.add.at(lengths, env_ids, counts)
            return
        # each env's rows split at its episode ends: one sum a stretch (never a
        # difference of sums, which would mix envs' rewards: an inf, or 1e17 + 1)
        has = counts > 0
        block = np.cumsum(counts) - counts  # where each env's rows start
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
        ticks = tick[ends]
        total = episode_lengths.sum()
        if total < 0:  # the end of a cut episode among them: no episode
            whole = episode_lengths >= 0
            episode_returns = episode_returns[whole]
            episode_lengths = episode_lengths[whole]
            end_env, ticks = end_env[whole], ticks[whole]
            total = episode_lengths.sum()
        self.episodes += (episode_lengths.size, episode_returns.sum(), total)
        order = np.lexsort((end_env, ticks))  # by vector step, then env
        self._remember(episode_returns[order], episode_lengths[order], end_env[order])
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

    def abort(self, env_ids: npt.NDArray[np.int64]) -> None:
        """Forget the episodes in progress of ``env_ids`` (never counted as ended)."""
        self.episode_return[env_ids] = 0.0
        self.episode_length[env_ids] = 0

    def cut(self, env_ids: npt.NDArray[np.int64]) -> None:
        """The episodes of ``env_ids`` go on without their start (a step was lost).

        Never counted as ended: not when they end, and not before. The envs' next
        episodes count.
        """
        self.episode_return[env_ids] = 0.0
        self.episode_length[env_ids] = CUT

    def stats(self) -> EpisodeStats:
        """Count, mean return and mean length of every episode that ended."""
        count, returns, lengths = self.episodes
        if not count:
            return EpisodeStats(0, math.nan, math.nan)
        return EpisodeStats(int(count), float(returns / count), float(lengths / count))

    def recent_stats(self, k: int) -> EpisodeStats:
        """Count, mean return and mean length of the last ``k`` that ended."""
        taken = min(k, int(self.recent_count[0]))
        if not taken:
            return EpisodeStats(0, math.nan, math.nan)
        entries = self.recent_entries()[-taken:]
        returns, lengths = entries[:, 0], entries[:, 1]
        return EpisodeStats(
            taken, math.fsum(returns.tolist()) / taken, float(lengths.mean())
        )

    def recent_entries(self) -> npt.NDArray[np.float64]:
        """The ring's entries (return, length), oldest first."""
        count = int(self.recent_count[0])
        taken = min(count, RECENT_EPISODES)
        where = (count - taken + np.arange(taken)) % RECENT_EPISODES
        entries: npt.NDArray[np.float64] = self.recent[where]
        return entries

    def _remember(
        self,
        returns: npt.NDArray[np.float64],
        lengths: npt.NDArray[Any],
        envs: npt.NDArray[np.int64] | None,
    ) -> None:
        """Put ended episodes (oldest first) in the ring of the recent ones.

        ``envs``: their envs (needed only while the history is kept). Every caller
        hands arrays of its own (made by indexing), so the history keeps them as
        they are.
        """
        if self.history is not None and envs is not None:
            self.history.append((envs, returns, lengths))
        count = int(self.recent_count[0])
        where = (count + np.arange(returns.size)) % RECENT_EPISODES
        self.recent[where, 0] = returns  # past the ring's size, the last win
        self.recent[where, 1] = lengths
        self.recent_count[0] = count + returns.size

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        """Its arrays, by their names in a pool file (``recent``: oldest first)."""
        return {
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
            "episodes": self.episodes,
            "recent": self.recent_entries(),
            "recent_count": self.recent_count,
        }

    def load_state_dict(self, state: dict[str, npt.NDArray[Any]]) -> None:
        """Take the arrays of :meth:`state_dict`."""
        self.episode_return = state["episode_return"]
        self.episode_length = state["episode_length"]
        self.episodes = state["episodes"]
        self.recent_count = state["recent_count"]
        recent = state["recent"]  # oldest first: back in the ring where they were
        count = int(self.recent_count[0])
        self.recent[
            (count - recent.shape[0] + np.arange(recent.shape[0])) % RECENT_EPISODES
        ] = recent
