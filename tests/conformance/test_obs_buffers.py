"""copy=True hands out rotating shared buffers: results must never alias.

vecpool avoids copying observations by handing out views of a buffer that nothing
holds any more; these tests hold observations in every pattern a user might and
check that each one keeps the values of its own step (compared with SyncVectorEnv).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

from vecpool.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


def _copy(batch):
    if isinstance(batch, dict):
        return {key: _copy(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_copy(value) for value in batch)
    return np.array(batch, copy=True)


@pytest.mark.parametrize("obs_kind", ["image", "dict", "tuple"])
@pytest.mark.parametrize("held", [0, 1, 2, 5, 40])
def test_held_observations_keep_their_values(make_placed, make_sync, obs_kind, held):
    fns = [functools.partial(CountingEnv, obs_kind=obs_kind, max_steps=12)] * 4
    ours, reference = make_placed(fns), make_sync(fns)
    obs, _ = ours.reset(seed=3)
    expected, _ = reference.reset(seed=3)
    kept = [(obs, _copy(expected))]
    actions = np.random.default_rng(3).integers(0, 2, size=(60, 4))
    for batch in actions:
        obs, *_ = ours.step(batch)
        expected, *_ = reference.step(batch)
        kept.append((obs, _copy(expected)))
        kept = kept[-held:] if held else []
        for mine, theirs in kept:  # nothing handed out earlier was overwritten
            assert data_equivalence(mine, theirs, exact=True)


def test_slices_of_observations_are_respected(make_placed, make_sync):
    """A slice keeps the buffer under it alive just like the whole array."""
    fns = [functools.partial(CountingEnv, obs_kind="image")] * 3
    ours, reference = make_placed(fns), make_sync(fns)
    ours.reset(seed=0)
    reference.reset(seed=0)
    rows = []
    for step in range(10):
        obs, *_ = ours.step(np.full(3, step % 2))
        expected, *_ = reference.step(np.full(3, step % 2))
        rows.append((obs[1], expected[1].copy()))  # keep only a view of one row
        del obs
    for mine, theirs in rows:
        np.testing.assert_array_equal(mine, theirs)


def test_masked_reset_carries_unreset_observations(make_placed, make_sync):
    fns = [functools.partial(CountingEnv, obs_kind="dict")] * 4
    kwargs = {"autoreset_mode": AutoresetMode.DISABLED}
    ours, reference = make_placed(fns, **kwargs), make_sync(fns, **kwargs)
    ours.reset(seed=1)
    reference.reset(seed=1)
    held = []
    for step in range(40):
        result = ours.step(np.full(4, step % 2))
        assert data_equivalence(
            result, reference.step(np.full(4, step % 2)), exact=True
        )
        held.append(result[0])  # keep buffers busy for a while
        mask = result[2] | result[3]
        if step % 5 == 4:
            mask = mask | np.array([True, False, step % 2 == 0, False])
        if mask.any():
            mine = ours.reset(options={"reset_mask": mask})
            theirs = reference.reset(options={"reset_mask": mask})
            assert data_equivalence(mine, theirs, exact=True)
        if step % 7 == 6:
            held.clear()


def test_masked_reset_keeps_the_envs_real_observations(make_placed, make_gym_async):
    """Editing returned observations in place never leaks into later results."""
    fns = [functools.partial(CountingEnv, obs_kind="box")] * 3
    kwargs = {"autoreset_mode": AutoresetMode.DISABLED}
    ours, theirs = make_placed(fns, **kwargs), make_gym_async(fns, **kwargs)
    for envs in (ours, theirs):
        envs.reset(seed=2)
    mine = ours.step(np.zeros(3, dtype=np.int64))[0]
    reference = theirs.step(np.zeros(3, dtype=np.int64))[0]
    mine -= 100.0  # e.g. normalisation done in place by the user
    reference -= 100.0
    mask = np.array([True, False, False])
    assert data_equivalence(
        ours.reset(options={"reset_mask": mask}),
        theirs.reset(options={"reset_mask": mask}),
        exact=True,
    )
