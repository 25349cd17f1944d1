"""Minari datasets from a replay pool: :func:`to_minari`.

Only complete episodes are written (see
:func:`vecpool.replay.episodes.complete_episodes`): an offline-RL dataset of episodes
has no room for the head of a sub-pool whose older transitions were dropped, nor for the
episode still running at the tail. Observations and actions are stored losslessly (no
JPEG encoding of images).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from vecpool._util.spaces import is_native
from vecpool.replay.episodes import Episode, EpisodeScan, RecordedPool
from vecpool.replay.portable import portable
from vecpool.replay.storage import flatten_stored

__all__ = ["check_new_dataset", "to_minari"]

INSTALL = 'pip install "vecpool[minari]"'


def _minari() -> Any:
    try:
        return importlib.import_module("minari")
    except ImportError as error:
        msg = f"Exporting to Minari needs the minari package: {INSTALL}."
        raise ImportError(msg) from error


def check_new_dataset(dataset_id: str) -> None:
    """Check, before recording, that :func:`to_minari` can create ``dataset_id``.

    Minari refuses an id it holds already, and only once the export runs; a
    collection checks this first (vecpool/sampling/collect.py).

    Args:
        dataset_id: Minari's id, ``(namespace/)(env_name/)dataset_name(-vN)``.

    Raises:
        ImportError: Without the minari package (how to install it).
        ValueError: If ``dataset_id`` is not an id, or a local dataset has it.
    """
    _minari()
    parse = importlib.import_module("minari.dataset.minari_dataset").parse_dataset_id
    try:
        parse(dataset_id)
    except (TypeError, ValueError) as error:  # Minari's own message says little
        msg = (
            f"{dataset_id!r} is not a Minari dataset id: it is "
            "`(namespace/)(env_name/)dataset_name-vN`, e.g. 'cartpole/random-v0'."
        )
        raise ValueError(msg) from error
    path = importlib.import_module("minari.storage").get_dataset_path(dataset_id)
    if os.path.exists(path):
        msg = (
            f"A Minari dataset with ID {dataset_id} already exists ({path}): give "
            "another name or version, or delete it first."
        )
        raise ValueError(msg)


def _lists(batch: Any) -> Any:
    """A nested batch as Minari's episode buffers hold it: a list per leaf."""
    if isinstance(batch, dict):
        return {key: _lists(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_lists(value) for value in batch)
    array = np.asarray(batch)
    if array.dtype.kind in "UO":  # strings: Python's own, as Minari stores Text
        return array.tolist()
    return list(array)


def to_minari(
    pool: RecordedPool, dataset_id: str, *, env: Any = None, **kwargs: Any
) -> tuple[Any, int]:
    """Write the pool's complete episodes as the Minari dataset ``dataset_id``.

    Example:
        >>> # envs = vecpool.ReplayPoolWrapper(vecpool.AsyncVectorEnv(env_fns), 100_000)
        >>> # ... step ...
        >>> # dataset, skipped = to_minari(envs.pool, "cartpole/random-v0",
        >>> #                              env="CartPole-v1")
        >>> # minari.load_dataset("cartpole/random-v0").total_episodes

    Args:
        pool: The pool (``random=False``).
        dataset_id: Minari's id, ``(namespace/)(env_name/)dataset_name(-vN)``.
        env: The env (id, spec or instance) the data came from, recorded in the
            dataset; ``None`` records the pool's spaces only.
        **kwargs: Passed to ``minari.create_dataset_from_buffers`` (author,
            algorithm_name, description, ...).

    Returns:
        The ``MinariDataset`` and the number of partial episodes left out.

    Raises:
        ImportError: If minari is not installed.
        ValueError: If the pool holds no complete episode, or routes at random.
    """
    minari = _minari()
    episode_buffer = importlib.import_module("minari.data_collector").EpisodeBuffer

    scan = EpisodeScan(pool)
    episodes = iter(scan)
    # a native space: episodes go in batches of about `_BATCH_STEPS` steps, so the
    # export holds a batch, never the whole pool (a frame-stacked pool rebuilds its
    # stacks); an object leaf's width is read from every episode, so all at once
    streaming = is_native(pool.observation_space)
    batch = _next_batch(episodes, _BATCH_STEPS if streaming else None)
    if not batch:
        msg = (
            f"The pool holds no complete episode ({scan.partial} partial ones): "
            "collect until episodes end, with a pool large enough to keep them "
            "whole."
        )
        raise ValueError(msg)
    settings: dict[str, Any] = {
        "jpeg_encoding": False,
        "description": "Complete episodes exported from a vecpool.ReplayPool.",
        **kwargs,
    }
    if env is None:
        settings.setdefault("observation_space", _observation_space(pool, batch))
        settings.setdefault("action_space", pool.action_space)
    buffers = [_buffer(episode_buffer, i, e) for i, e in enumerate(batch)]
    dataset = minari.create_dataset_from_buffers(
        dataset_id, buffers, env=env, **settings
    )
    written = len(batch)
    while batch := _next_batch(episodes, _BATCH_STEPS):
        dataset.update_dataset_from_buffer(
            [_buffer(episode_buffer, written + i, e) for i, e in enumerate(batch)]
        )
        written += len(batch)
    return dataset, scan.partial


_BATCH_STEPS = 65_536
"""Steps of the episodes written to a Minari dataset at a time."""


def _next_batch(episodes: Iterator[Episode], steps: int | None) -> list[Episode]:
    """The next episodes, up to about ``steps`` steps (``None``: all of them)."""
    batch: list[Episode] = []
    total = 0
    for episode in episodes:
        batch.append(episode)
        total += len(episode)
        if steps is not None and total >= steps:
            break
    return batch


def _observation_space(pool: RecordedPool, episodes: list[Episode]) -> Any:
    """The pool's space, a custom string leaf as a ``Text`` Minari can describe.

    Raises:
        ValueError: If a leaf holds objects that are not strings (a Graph, ...),
            which a Minari dataset cannot describe (vecpool/replay/portable.py).
    """
    space = pool.observation_space
    leaves = [
        flatten_stored(space, e.observations, len(e.rewards) + 1, "observations")
        for e in episodes
    ]
    columns = [list(column) for column in zip(*leaves, strict=True)]
    return portable(space, columns, "a Minari dataset")[0]


def _buffer(cls: Any, index: int, episode: Episode) -> Any:
    return cls(
        id=index,
        observations=_lists(episode.observations),
        actions=_lists(episode.actions),
        rewards=episode.rewards.tolist(),
        terminations=episode.terminations.tolist(),
        truncations=episode.truncations.tolist(),
        infos={},
    )
