"""Episode boundaries: which rows of a vector step are real transitions.

Under ``NEXT_STEP`` autoreset the step after an env's episode ended only resets that
env, so its row is no transition (DESIGN §5); in every mode, a row marked
``infos["worker_restarted"]`` is none either (docs/reliability.md). The replay-pool
wrapper, the sampler and ``vecpool collect`` all ask :class:`AutoresetTracker` and
:func:`restarted_rows`, the one place that knows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode

__all__ = ["AutoresetTracker", "restarted_rows"]


def restarted_rows(infos: dict[str, Any]) -> npt.NDArray[np.bool_] | None:
    """The rows of a result marked ``infos["worker_restarted"]``, or ``None``.

    Such a row is no transition: its env's worker died and the env was replaced
    (``on_worker_crash="restart"``, docs/reliability.md). Its reward is 0, it is
    ``truncated``, and the episode it cut must be aborted, never counted as
    finished nor merged with the next one. The rows are those of the result: one
    per env for ``step``/``reset``, one per returned env for ``recv``. One dict
    lookup when no row is marked (the per-step cost).

    Example:
        >>> import numpy as np
        >>> restarted_rows({}) is None
        True
        >>> restarted_rows({
        ...     "worker_restarted": np.array([False, True, True]),
        ...     "_worker_restarted": np.array([False, True, False]),
        ... }).tolist()
        [False, True, False]
    """
    if "worker_restarted" not in infos:
        return None
    marked = np.asarray(infos["worker_restarted"], np.bool_)
    mask = infos.get("_worker_restarted")
    return marked if mask is None else marked & np.asarray(mask, np.bool_)


class AutoresetTracker:
    """Which rows of each vector step are real transitions, per autoreset mode.

    Under ``NEXT_STEP`` the step after an env's episode ended only resets that env:
    its row is not a transition (DESIGN §5). Under ``SAME_STEP`` and ``DISABLED``
    every row is one. The replay-pool wrapper, the sampler and ``vecpool collect``
    all ask this one class.

    Example:
        >>> import numpy as np
        >>> from gymnasium.vector import AutoresetMode
        >>> tracker = AutoresetTracker(3, AutoresetMode.NEXT_STEP)
        >>> tracker.valid() is None  # every row is a transition
        True
        >>> tracker.after_step(np.array([False, True, False]))
        >>> tracker.valid().tolist()  # env 1 only resets on the next step
        [True, False, True]

    Attributes:
        mode: The autoreset mode.
        resetting: ``NEXT_STEP``: the envs whose next step only resets them.
    """

    def __init__(self, num_envs: int, mode: AutoresetMode) -> None:
        """Track ``num_envs`` envs in autoreset ``mode``."""
        self.mode = mode
        self._next_step = mode is AutoresetMode.NEXT_STEP
        self.resetting = np.zeros(num_envs, np.bool_)
        self._any = False  # whether any env is resetting: valid() without numpy

    def valid(
        self, cols: npt.NDArray[np.int64] | None = None
    ) -> npt.NDArray[np.bool_] | None:
        """The rows of this step that are transitions, or ``None`` when all are.

        Args:
            cols: The envs of the rows (default: every env, in order).
        """
        if not self._any:  # the common step: no env resets, no numpy call
            return None
        resetting = self.resetting if cols is None else self.resetting[cols]
        # count_nonzero, not any(): no ufunc reduction on the per-step path
        return ~resetting if np.count_nonzero(resetting) else None

    def after_step(
        self,
        ended: Any,
        cols: npt.NDArray[np.int64] | None = None,
        *,
        count: int | None = None,
    ) -> None:
        """Note which envs' episodes ended (terminated or truncated) in a step.

        Args:
            ended: One flag per env (per ``cols`` entry).
            cols: The envs of the flags (default: every env, in order).
            count: ``np.count_nonzero(ended)`` where the caller has it (with
                ``cols=None`` only), saving a numpy call.
        """
        if self._next_step:
            if cols is None:
                if count is None or count or self._any:  # else: all False already
                    self.resetting[:] = ended
                if count is None:
                    count = int(np.count_nonzero(self.resetting))
                self._any = count > 0
            else:
                self.resetting[cols] = ended
                self._any = bool(np.count_nonzero(self.resetting))

    def after_reset(self, mask: Any = None) -> None:
        """A reset (of the envs in ``mask``, default all) clears pending autoresets."""
        if mask is None:
            self.resetting[:] = False
        else:
            self.resetting[np.asarray(mask, np.bool_)] = False
        self._any = bool(np.count_nonzero(self.resetting))
