"""``collect``'s random actions in blocks: the actions of ``sample()``, in order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from vecpool.sampling.random_actions import BLOCK, RandomActions
from vecpool.testing import assert_same_data

SPACES: dict[str, spaces.Space[Any]] = {
    "discrete-batch": batch_space(spaces.Discrete(2), 8),
    "discrete-start-batch": batch_space(spaces.Discrete(5, start=-2), 3),
    "multidiscrete-2d-int8": spaces.MultiDiscrete(
        np.array([[2, 3], [4, 5]]), dtype=np.int8, start=np.array([[0, 1], [-1, 2]])
    ),
    "box-batch": batch_space(spaces.Box(-1.0, 1.0, (2,), np.float32), 4),
    "multibinary": spaces.MultiBinary(5),
}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_the_actions_are_those_of_sample_in_order(name: str) -> None:
    space = SPACES[name]
    space.seed(7)
    expected = [space.sample() for _ in range(2 * BLOCK + 3)]  # over two blocks
    space.seed(7)
    draw = RandomActions(space)
    drawn = [draw() for _ in range(2 * BLOCK + 3)]
    for step, (want, got) in enumerate(zip(expected, drawn, strict=True)):
        assert space.contains(got), (step, got)
        assert_same_data(want, got, f"step {step}")


def test_exact_spaces_are_drawn_in_blocks_others_step_by_step() -> None:
    assert RandomActions(SPACES["discrete-batch"]).exact
    assert not RandomActions(SPACES["box-batch"]).exact
    space = SPACES["discrete-batch"]
    space.seed(0)
    draw = RandomActions(space)
    first = draw()
    state = space.np_random.bit_generator.state
    draw()  # from the block already drawn: the generator does not move
    assert space.np_random.bit_generator.state == state
    assert first.dtype == space.dtype
