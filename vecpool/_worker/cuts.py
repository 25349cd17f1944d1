"""A replacement worker's cuts: the rows that mark where its envs started over.

Only a replacement (``on_worker_crash="restart"``) has a :class:`Cuts`; a worker's
first incarnation has none, and its step loop reads no restart state. Every env of
a replacement starts *marked*: its first step returns the row that marks the cut
(the observation the parent last returned, reward 0, ``truncated``,
``infos["worker_restarted"]``; in ``SAME_STEP`` the env's first reset with that
observation as ``final_obs``), and its first reset reports ``worker_restarted``.
A row that marked the cut stays *open* until the env steps, resets or is set to a
state: if the parent never returned it (the call gave up), ``CUT_AGAIN`` marks the
open envs again (:meth:`Cuts.mark_again`). See docs/reliability.md.
"""

from __future__ import annotations

from typing import Any

from gymnasium.vector import AutoresetMode

from vecpool._wire.messages import RestartStart

__all__ = ["Cuts"]


class Cuts:
    """The cut of each env of a replacement worker.

    Attributes:
        marked: Per env: its next step returns the row that marks the cut.
        open: Per env: its latest row marked the cut (nothing since).
        obs: Per env: the observation the parent last returned before the crash
            (``None``: none; such an env has no cut row to show).
        seeds: Per env: the seed of its first reset when the call gives none.
        start_seeds: The seeds not yet used (each is used once).
    """

    def __init__(self, start: RestartStart) -> None:
        """Every env marked, starting from ``start``."""
        count = len(start.last_obs)
        self.marked = [True] * count
        self.open = [False] * count
        self.obs = list(start.last_obs)
        self.seeds = list(start.seeds)
        self.start_seeds = list(start.seeds)

    def shows_row(self, local: int) -> bool:
        """Whether env ``local``'s next step returns the row that marks its cut."""
        return self.marked[local] and self.obs[local] is not None

    def row(
        self, local: int, env: Any, mode: AutoresetMode
    ) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The step result that marks env ``local``'s cut (see the module).

        In SAME_STEP the cut row holds the env's first reset: if that raises, the
        env stays marked, so every later step tries it again (and raises) rather
        than step a never-reset env and return its rows unmarked.
        """
        last = self.obs[local]
        info: dict[str, Any] = {"worker_restarted": True}
        if mode is AutoresetMode.SAME_STEP:
            obs, reset_info = env.reset(seed=self.start_seeds[local])
            self.start_seeds[local] = None  # used (kept for a retry if it raised)
            info = {"final_info": {}, "final_obs": last, **reset_info, **info}
            self._shown(local)
            return obs, 0.0, False, True, info
        self._shown(local)
        return last, 0.0, False, True, info

    def take_seed(self, local: int) -> int | None:
        """The first-reset seed of env ``local`` (once), else ``None``."""
        seed = self.start_seeds[local]
        self.start_seeds[local] = None
        return seed

    def reset(self, local: int) -> bool:
        """Env ``local`` was reset; return whether its info reports the cut."""
        self.open[local] = False
        if self.marked[local]:
            self._shown(local)
            return True
        return False

    def forget(self, local: int) -> None:
        """Env ``local`` was set to a state, which defines it now: no cut."""
        self.marked[local] = self.open[local] = False

    def mark_again(self, last_obs: list[Any]) -> None:
        """``CUT_AGAIN``: mark the open envs again (their rows were never returned).

        Args:
            last_obs: The worker's last observation of each env, set back to what
                the parent last returned (a masked reset shows it).
        """
        for local, shown in enumerate(self.open):
            if shown:
                self.marked[local] = True
                self.open[local] = False
                last_obs[local] = self.obs[local]
                self.start_seeds[local] = self.seeds[local]

    def _shown(self, local: int) -> None:
        self.marked[local] = False
        self.open[local] = True
