"""What a replay pool returns: batches of transitions, sequences, episode statistics.

Every batch is a ``NamedTuple`` whose first six fields are those of
:class:`Transitions` (``obs, action, next_obs, reward, terminated, truncated``), so
unpacking the first six works on all of them, and each has ``to_torch(device)``.
Observations and actions are batched as Gymnasium batches their single spaces:
arrays, or dicts / tuples of arrays for Dict / Tuple spaces.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "EndedEpisodes",
    "EpisodeStats",
    "ReplaySample",
    "Sequences",
    "Transitions",
]


def _tensors(value: Any, device: Any, torch: Any) -> Any:
    """``value`` (an array, or a dict / tuple nest of them) as tensors on ``device``."""
    if isinstance(value, dict):
        return {key: _tensors(item, device, torch) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_tensors(item, device, torch) for item in value)
    array = np.asarray(value)
    if array.dtype.kind in "OUS":
        msg = (
            f"`to_torch` cannot convert a {array.dtype} leaf (strings or objects) to "
            "a tensor: convert that field yourself."
        )
        raise TypeError(msg)
    if not array.flags.writeable:  # torch shares only writable memory: one copy
        array = np.array(array, order="C")
    tensor = torch.from_numpy(array)  # the batch's own memory: no copy on the CPU
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        # one copy into pinned memory, then an asynchronous transfer
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _to_torch(batch: tuple[Any, ...], device: Any) -> list[Any]:
    try:
        import torch
    except ImportError as exc:
        msg = (
            "`to_torch` needs PyTorch: `pip install 'vecpool[torch]'` (or install "
            "torch yourself)."
        )
        raise ImportError(msg) from exc
    target = torch.device(device)
    return [_tensors(field, target, torch) for field in batch]


class Transitions(NamedTuple):
    """A batch of transitions; every field has the same leading dimension.

    What :meth:`ReplayPool.sample` returns without ``n_step`` or ``beta``, and
    :meth:`ReplayPool.get_pool`.
    """

    obs: Any
    action: Any
    next_obs: Any
    reward: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]

    def to_torch(self, device: Any = "cpu") -> Transitions:
        """The same batch as torch tensors on ``device`` (``vecpool[torch]``).

        On the CPU the tensors share the batch's memory; for CUDA each field is
        copied once into pinned memory and transferred asynchronously.

        Raises:
            ImportError: If torch is not installed.
            TypeError: If a field holds strings or objects.
        """
        return Transitions(*_to_torch(self, device))


class ReplaySample(NamedTuple):
    """A batch drawn with ``n_step`` or prioritized replay (:meth:`ReplayPool.sample`).

    The first six fields are :class:`Transitions`'; with ``n_step=N`` the reward
    is the discounted sum of the ``k <= N`` rewards summed, ``next_obs`` the
    observation after the last of them and ``terminated`` / ``truncated`` whether
    the episode ended within them. The target of a Q-learner is then
    ``reward + discount * (1 - terminated) * V(next_obs)``.

    Attributes:
        discount: ``gamma ** k`` per row (ones for one-step sampling).
        indices: Ids of the transitions drawn (what
            :meth:`ReplayPool.update_priorities` takes): each names one
            transition for good, across save/load, and none once it is dropped.
        weights: Importance weights ``(N * P(i)) ** -beta`` divided by their
            maximum (ones without prioritized replay).
    """

    obs: Any
    action: Any
    next_obs: Any
    reward: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    discount: npt.NDArray[np.float64]
    indices: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float64]

    def to_torch(self, device: Any = "cpu") -> ReplaySample:
        """The same batch as torch tensors on ``device``.

        See :meth:`Transitions.to_torch`.

        Raises:
            ImportError: If torch is not installed.
            TypeError: If a field holds strings or objects.
        """
        return ReplaySample(*_to_torch(self, device))


class Sequences(NamedTuple):
    """Sequences of consecutive transitions (:meth:`ReplayPool.sample_sequences`).

    Every field is shaped ``[batch, length, ...]``, each sequence from one env's
    consecutive rows.

    Attributes:
        mask: ``[batch, length]`` bools: ``True`` while each step is the same
            episode's next step; ``False`` from the first that is not (an episode
            end, a window or clearing cut, a restart, the newest row). The fields
            of a masked step hold some row of the same sub-pool: zero them or
            ignore them through the mask.
    """

    obs: Any
    action: Any
    next_obs: Any
    reward: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    mask: npt.NDArray[np.bool_]

    def to_torch(self, device: Any = "cpu") -> Sequences:
        """The same batch as torch tensors on ``device``.

        See :meth:`Transitions.to_torch`.

        Raises:
            ImportError: If torch is not installed.
            TypeError: If a field holds strings or objects.
        """
        return Sequences(*_to_torch(self, device))


class EpisodeStats(NamedTuple):
    """Statistics of the episodes that ended in the recorded transitions.

    Attributes:
        count: Number of episodes that ended (terminated or truncated).
        mean_return: Mean sum of recorded rewards per episode (``nan`` if none).
        mean_length: Mean number of recorded transitions per episode (``nan`` if
            none).
    """

    count: int  # type: ignore[assignment]  # shadows tuple.count, on purpose
    mean_return: float
    mean_length: float


class EndedEpisodes(NamedTuple):
    """Episodes that ended, oldest first (a vector step's in env order).

    Attributes:
        returns: The return of each (float64).
        lengths: Its length in recorded transitions (int64).
        env_ids: The env it ran in (int64).
    """

    returns: npt.NDArray[np.float64]
    lengths: npt.NDArray[np.int64]
    env_ids: npt.NDArray[np.int64]
