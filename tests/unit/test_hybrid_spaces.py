"""The space helpers of hybrid observations (vecpool/_util/spaces.py).

A hybrid space's array leaves are laid out in shared memory and its other leaves
travel pickled; ``make_nester`` must put both back exactly where Gymnasium's
batching puts them, at any depth, for Dict and Tuple roots alike.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from vecpool._util.spaces import (
    foreign_leaves,
    is_hybrid,
    is_native,
    leaves,
    make_extractor,
    make_nester,
    make_views,
)
from vecpool.testing import assert_same_data

BOX = spaces.Box(0, 1, (2,), np.float32)
TEXT = spaces.Text(5)
SPACES = {
    "flat-dict": spaces.Dict({"a": BOX, "t": TEXT, "d": spaces.Discrete(3)}),
    "flat-tuple": spaces.Tuple((TEXT, BOX, spaces.Sequence(spaces.Discrete(2)))),
    "deep": spaces.Tuple(
        (
            spaces.Dict({"x": spaces.Tuple((TEXT, BOX)), "y": spaces.Discrete(4)}),
            spaces.Graph(BOX, None),
            spaces.Dict({"z": spaces.Dict({"w": TEXT, "v": BOX})}),
        )
    ),
}
N = 3


@pytest.mark.parametrize("name", sorted(SPACES))
def test_leaves_split_and_nest_back_as_gymnasium_batches(name):
    space = SPACES[name]
    assert is_hybrid(space)
    assert not is_native(space)
    space.seed(0)
    samples = [space.sample() for _ in range(N)]
    empty: Any = create_empty_array(space, N)
    expected = concatenate(space, samples, empty)
    arrays = [
        np.zeros((N, *shape), dtype)
        for dtype, shape in leaves(space, skip_foreign=True)
    ]
    # the arrays the worker would have written, read from Gymnasium's batch
    written = iter(arrays)
    batched = batch_space(space, N)

    def fill(sub, batch, sub_batched):
        if isinstance(sub, spaces.Dict):
            for key in sub.spaces:
                fill(sub.spaces[key], batch[key], sub_batched.spaces[key])
        elif isinstance(sub, spaces.Tuple):
            for item, value, item_batched in zip(
                sub.spaces, batch, sub_batched.spaces, strict=True
            ):
                fill(item, value, item_batched)
        elif isinstance(sub, (spaces.Box, spaces.Discrete)):
            next(written)[...] = batch

    fill(space, expected, batched)
    extract = make_extractor(space)
    per_env = [extract(sample) for sample in samples]
    foreign = [
        tuple(values[k] for values in per_env)
        for k in range(len(foreign_leaves(space)))
    ]
    nested = make_nester(space)(arrays, foreign)
    assert_same_data(expected, nested, "make_nester")
    assert_same_data(expected, make_views(space, arrays, foreign), "make_views")


def test_spaces_with_no_array_leaf_or_no_other_leaf_are_not_hybrid():
    assert not is_hybrid(spaces.Dict({"t": TEXT}))
    assert not is_hybrid(spaces.Dict({"a": BOX}))
    assert not is_hybrid(TEXT)
    assert not is_hybrid(spaces.Sequence(BOX))


def test_flatten_batch_refuses_a_leaf_that_is_not_an_array_unless_told_how():
    from vecpool._util.spaces import flatten_batch
    from vecpool.replay.storage import flatten_stored

    space = SPACES["flat-dict"]
    batch = {"a": np.zeros((2, 2), np.float32), "t": ("ab", "c"), "d": np.zeros(2)}
    with pytest.raises(ValueError, match=re.escape("`obs['t']` is a batch of Text")):
        flatten_batch(space, batch, 2, "obs")
    stored = flatten_stored(space, batch, 2, "obs")
    assert isinstance(space, spaces.Dict)
    assert list(space.spaces) == ["a", "d", "t"]  # Gymnasium sorts the keys
    assert stored[2].dtype.kind == "U"
    assert stored[2].tolist() == ["ab", "c"]
