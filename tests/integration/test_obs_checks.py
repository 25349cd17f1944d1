"""An observation of the wrong shape is refused, as SyncVectorEnv refuses it, never
broadcast into the batch (issue 11, item 11: a scalar gave [7, 7, 7], None gave NaN)."""

from __future__ import annotations

import functools
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecpool

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # Gymnasium's error log lines
]


class WrongObsEnv(gym.Env[Any, np.int64]):
    """Resets fine; its steps return ``value`` as the observation."""

    observation_space = spaces.Box(-10, 10, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, value: Any = 7) -> None:
        self.value = value

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> Any:
        return self.value, 0.0, False, False, {}


VALUES = [7, 2.5, None, [1.0, 2.0], np.zeros(4, np.float32), np.zeros((1, 3))]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_wrong_shaped_observation_is_a_value_error_like_sync(value, placement):
    fns = [functools.partial(WrongObsEnv, np.zeros(3, np.float32))]
    fns.append(functools.partial(WrongObsEnv, value))
    reference = gym.vector.SyncVectorEnv(fns)
    ours = vecpool.AsyncVectorEnv(fns, **placement.kwargs(len(fns)))
    try:
        for env in (reference, ours):
            env.reset(seed=0)
        with pytest.raises(ValueError):  # noqa: PT011 - Gymnasium's own text varies
            reference.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match=re.escape("not an observation")) as info:
            ours.step(np.zeros(2, np.int64))
        assert "(3,)" in str(info.value)
        assert "sub-environment 1" in "".join(getattr(info.value, "__notes__", []))
    finally:
        reference.close()
        ours.close()


def test_right_shapes_in_other_forms_still_pass(placement):
    # a list of the right length, and an array of another dtype, are observations
    fns = [functools.partial(WrongObsEnv, [1.0, 2.0, 3.0])]
    fns.append(functools.partial(WrongObsEnv, np.array([1, 2, 3], np.int64)))
    ours = vecpool.AsyncVectorEnv(fns, **placement.kwargs(len(fns)))
    reference = gym.vector.SyncVectorEnv(fns)
    try:
        ours.reset(seed=0)
        reference.reset(seed=0)
        np.testing.assert_array_equal(
            ours.step(np.zeros(2, np.int64))[0],
            reference.step(np.zeros(2, np.int64))[0],
        )
    finally:
        ours.close()
        reference.close()
