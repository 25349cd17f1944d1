"""SumTree: find against a brute-force reference, lazy updates, rebuilds, sampling."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest

from vecpool.replay.sumtree import SumTree

SIZES = [1, 2, 3, 31, 32, 33, 1000, 4097]


class Binary(SumTree):
    BRANCHING = 2  # deep trees from small sizes: many levels, padding at each


class Ternary(SumTree):
    BRANCHING = 3  # a branching that is no power of two


TREES = [SumTree, Binary, Ternary]


def reference_find(priorities, targets):
    """The brute-force answer: the leaf whose interval [prefix, prefix + p) holds t."""
    return np.searchsorted(np.cumsum(priorities), targets, side="right")


def sparse_priorities(rng, size, *, integers):
    """Priorities with many zeros (about 60%), at least one positive."""
    if integers:  # small integers: every sum is exact, so boundaries are exact too
        values = rng.integers(1, 6, size).astype(np.float64)
    else:
        values = rng.random(size) * 10.0 ** rng.uniform(-3, 3, size)
    values[rng.random(size) < 0.6] = 0.0
    values[rng.integers(size)] = 1.0 + rng.integers(5)
    return values


def loaded(cls, priorities):
    tree = cls(priorities.size)
    tree.load(priorities)
    return tree


def tree_arrays(tree):
    # the tree's own arrays (private), to check that two trees are the same bits
    return [*tree._children, *tree._rows, np.array([tree._total])]


def assert_same_tree(a, b):
    for left, right in zip(tree_arrays(a), tree_arrays(b), strict=True):
        np.testing.assert_array_equal(left, right, strict=True)


# -- find against the reference ---------------------------------------------------


@pytest.mark.parametrize("cls", TREES)
@pytest.mark.parametrize("size", SIZES)
def test_find_matches_reference_exactly_at_every_boundary(cls, size):
    rng = np.random.default_rng(size)
    priorities = sparse_priorities(rng, size, integers=True)
    tree = loaded(cls, priorities)
    total = float(priorities.sum())
    assert tree.total == total
    prefixes = np.concatenate([[0.0], np.cumsum(priorities)])
    targets = np.concatenate(
        [
            prefixes[prefixes < total],  # each leaf's start
            prefixes[prefixes > 0] - 0.5,  # just inside each leaf's end
            np.nextafter(prefixes[prefixes > 0], 0.0),
            rng.random(500) * total,
        ]
    )
    found = tree.find(targets)
    assert found.dtype == np.int64
    np.testing.assert_array_equal(found, reference_find(priorities, targets))
    assert (priorities[found] > 0).all()


@pytest.mark.parametrize("cls", TREES)
@pytest.mark.parametrize("size", SIZES)
def test_find_matches_reference_on_random_floats(cls, size):
    rng = np.random.default_rng(1000 + size)
    priorities = sparse_priorities(rng, size, integers=False)
    tree = loaded(cls, priorities)
    assert tree.total == pytest.approx(priorities.sum(), rel=1e-12)
    targets = rng.random(2000) * min(tree.total, float(np.sum(priorities)))
    found = tree.find(targets)
    # a float target within rounding of a boundary may differ; random ones do not
    np.testing.assert_array_equal(found, reference_find(priorities, targets))
    assert (priorities[found] > 0).all()


def test_find_keeps_the_shape_of_targets():
    tree = SumTree(10)
    tree.set(np.arange(10), 1.0)
    targets = np.array([[0.5, 9.5], [3.0, 3.5], [7.25, 0.0]])
    found = tree.find(targets)
    assert found.shape == (3, 2)
    np.testing.assert_array_equal(found, [[0, 9], [3, 3], [7, 0]])
    assert tree.find(np.array([])).shape == (0,)
    assert tree.find(4.5).shape == ()


# -- zero leaves --------------------------------------------------------------------


@pytest.mark.parametrize("cls", TREES)
@pytest.mark.parametrize("size", SIZES)
def test_zero_leaves_are_never_returned_at_the_edges(cls, size):
    priorities = np.zeros(size)
    middle = size // 2
    priorities[middle] = 0.3  # zeros before and after it, and padding
    if size > 2:
        priorities[1] = 0.1
    tree = loaded(cls, priorities)
    total = tree.total
    last_positive = int(np.flatnonzero(priorities)[-1])
    first_positive = int(np.flatnonzero(priorities)[0])
    edges = np.array(
        [total, np.nextafter(total, np.inf), 2 * total, 1e300, np.inf, 1e308 * 10]
    )
    np.testing.assert_array_equal(tree.find(edges), last_positive)
    just_below = np.nextafter(total, 0.0)
    assert tree.find(np.array([just_below]))[0] == last_positive
    assert tree.find(np.array([0.0, -0.0]))[0] == first_positive
    assert (priorities[tree.find(np.linspace(0.0, total, 1001))] > 0).all()


@pytest.mark.parametrize("cls", TREES)
def test_rounding_edges_move_to_a_positive_leaf(cls, monkeypatch):
    # priorities spanning 16 orders of magnitude and targets a few ulps around
    # every prefix sum: rounding lands some walks on a zero leaf, and the guard
    # (a second, clamped walk) must move them to a positive one
    clamped = []
    walk = cls._walk

    def spy(self, offsets, *, clamp=False):
        clamped.append(clamp)
        return walk(self, offsets, clamp=clamp)

    monkeypatch.setattr(cls, "_walk", spy)
    for seed in range(60):
        rng = np.random.default_rng(seed)
        size = int(rng.integers(2, 300))
        priorities = 10.0 ** rng.uniform(-8, 8, size)
        priorities[rng.random(size) < 0.5] = 0.0
        priorities[rng.integers(size)] = 1.0
        tree = loaded(cls, priorities)
        ends = np.concatenate([[0.0], np.cumsum(priorities), [tree.total]])
        targets = np.concatenate(
            [ends, np.nextafter(ends, np.inf), np.nextafter(ends, -np.inf)]
        )
        found = tree.find(np.abs(targets))
        assert (priorities[found] > 0).all(), seed
        assert (priorities[tree.sample(500, rng)] > 0).all(), seed
    assert any(clamped)  # the guard did run (else this test checks nothing)


@pytest.mark.parametrize("cls", TREES)
def test_the_clamped_walk_agrees_inside_leaves(cls):
    rng = np.random.default_rng(7)
    priorities = sparse_priorities(rng, 333, integers=True)
    tree = loaded(cls, priorities)
    targets = rng.integers(0, int(tree.total), 3000) + 0.5  # never on an edge
    clamped = tree._walk(targets.copy(), clamp=True)
    np.testing.assert_array_equal(clamped, reference_find(priorities, targets))


# -- set: duplicates, laziness, the two flush paths -----------------------------------


def test_duplicate_indices_take_the_last_value():
    tree = SumTree(40)
    tree.set(np.array([3, 3, 20, 3, 20]), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    np.testing.assert_array_equal(tree.get(np.array([3, 20])), [4.0, 5.0])
    assert tree.total == 9.0
    tree.set(np.array([20, 20]), np.array([0.0, 0.5]))
    assert tree.total == 4.5
    np.testing.assert_array_equal(tree.find(np.array([3.9, 4.0, 4.4])), [3, 20, 20])


def test_a_scalar_value_sets_every_index_and_shapes_broadcast():
    tree = SumTree(6)
    tree.set(np.array([[0, 1], [4, 5]]), 2.0)
    tree.set(np.array([[1, 4]]), np.array([[0.5, 0.25]]))
    np.testing.assert_array_equal(tree.leaves, [2.0, 0.5, 0.0, 0.0, 0.25, 2.0])
    np.testing.assert_array_equal(tree.get(np.array([[1], [4]])), [[0.5], [0.25]])
    tree.set(np.array([], dtype=np.int64), np.array([]))
    tree.set([], 3.0)
    assert tree.total == 4.75


@pytest.mark.parametrize("cls", TREES)
def test_lazy_updates_then_find(cls):
    rng = np.random.default_rng(3)
    size = 4097
    mirror = sparse_priorities(rng, size, integers=True)
    tree = loaded(cls, mirror)
    for step in range(60):
        rows = rng.integers(0, size, 8)
        values = rng.integers(0, 4, 8).astype(np.float64)
        tree.set(rows, values)
        mirror[rows] = values
        np.testing.assert_array_equal(tree.get(rows), mirror[rows])  # before a flush
        if step % 7 == 0:  # several sets pile up between the reads
            assert tree.total == mirror.sum()
            targets = np.concatenate([np.cumsum(mirror)[:-1], [0.0]])
            targets = targets[targets < mirror.sum()]
            np.testing.assert_array_equal(
                tree.find(targets), reference_find(mirror, targets)
            )
    np.testing.assert_array_equal(tree.leaves, mirror)


@pytest.mark.parametrize("cls", TREES)
@pytest.mark.parametrize("size", [1, 33, 4097])
def test_rebuild_and_incremental_updates_give_the_same_tree(cls, size, monkeypatch):
    rng = np.random.default_rng(size)
    final = np.zeros(size)
    # a rebuild bar of `size` dirty leaves, so that small trees too take the
    # per-group path for chunks of up to half of them
    incremental = type("PerGroup", (cls,), {"REBUILD_FRACTION": 1})(size)
    monkeypatch.setattr(incremental, "_rebuild", None)  # only the per-group path
    chunk = max(1, size // 64)
    for _ in range(4 * size // chunk + 1):
        rows = rng.integers(0, size, chunk)
        values = rng.random(chunk) * 10.0 ** rng.uniform(-5, 5, chunk)
        values[rng.random(chunk) < 0.3] = 0.0
        incremental.set(rows, values)
        final[rows] = values
        assert incremental.total >= 0.0  # flush each chunk on its own
    rebuilt = cls(size)
    monkeypatch.setattr(rebuilt, "_update", None)  # only the whole-level path
    rebuilt.set(np.arange(size), final)  # more than size / 32 dirty: a rebuild
    assert incremental.total == rebuilt.total  # the same bits: no drift
    assert_same_tree(incremental, rebuilt)
    if rebuilt.total > 0:
        targets = np.linspace(0.0, rebuilt.total, 5001)
        np.testing.assert_array_equal(incremental.find(targets), rebuilt.find(targets))


def test_many_small_sets_switch_to_one_rebuild(monkeypatch):
    tree = SumTree(4096)
    calls = []
    monkeypatch.setattr(tree, "_update", lambda groups: calls.append(groups))
    for start in range(0, 4096, 8):
        tree.set(np.arange(start, start + 8), 1.0)
    assert tree.total == 4096.0
    assert calls == []  # 4096 dirty leaves > 4096 / 32: rebuilt, not per group
    monkeypatch.undo()
    tree.set(np.array([5, 6]), 0.0)
    assert tree.total == 4094.0


# -- leaves and load ---------------------------------------------------------------


def test_leaves_round_trip_through_load():
    rng = np.random.default_rng(11)
    priorities = sparse_priorities(rng, 1000, integers=False)
    source = loaded(SumTree, priorities)
    saved = source.leaves.copy()
    with pytest.raises(ValueError, match="read-only"):
        source.leaves[0] = 1.0
    copy = SumTree(1000)
    copy.set(np.arange(10), 5.0)  # pending updates are dropped by load
    copy.load(saved)
    assert_same_tree(source, copy)
    np.testing.assert_array_equal(copy.leaves, priorities)
    source.load(source.leaves)  # its own view, in place
    assert_same_tree(source, copy)


def test_a_copy_is_independent():
    tree = SumTree(100)
    tree.set(np.arange(100), 1.0)
    tree.set(np.array([7]), 3.0)  # pending when copied
    twin = copy.deepcopy(pickle.loads(pickle.dumps(tree)))
    twin.set(np.array([50]), 0.0)
    assert (tree.total, twin.total) == (102.0, 101.0)
    targets = np.arange(0.0, 101.0, 0.5)
    expected = reference_find(twin.leaves, targets)
    np.testing.assert_array_equal(twin.find(targets), expected)


# -- sampling -----------------------------------------------------------------------


# The chi-square critical value for 40 degrees of freedom at p = 0.001 (upper tail),
# from a standard chi-square table (e.g. NIST/SEMATECH e-Handbook of Statistical
# Methods, section 1.3.6.7.4); it equals scipy.stats.chi2.ppf(0.999, 40).
CHI2_CRITICAL_40_DF_P001 = 73.402


@pytest.mark.parametrize("cls", TREES)
@pytest.mark.parametrize("size", [41, 1000, 4097])
def test_sample_frequencies_follow_the_priorities(cls, size):
    rng = np.random.default_rng(2016)
    priorities = np.zeros(size)
    positive = rng.choice(size, 41, replace=False)  # 41 categories: 40 dof
    priorities[positive] = rng.uniform(0.5, 5.0, 41)
    tree = loaded(cls, priorities)
    draws = 200_000
    counts = np.bincount(tree.sample(draws, rng), minlength=size)
    assert counts.sum() == draws
    assert counts[priorities == 0].sum() == 0
    expected = draws * priorities[positive] / priorities.sum()
    statistic = float(np.sum((counts[positive] - expected) ** 2 / expected))
    assert statistic < CHI2_CRITICAL_40_DF_P001


def test_the_chi_square_check_can_fail():
    # the same statistic rejects draws from slightly wrong probabilities
    rng = np.random.default_rng(2016)
    priorities = rng.uniform(0.5, 5.0, 41)
    skewed = priorities.copy()
    skewed[0] *= 1.3
    counts = np.bincount(loaded(SumTree, skewed).sample(200_000, rng), minlength=41)
    expected = 200_000 * priorities / priorities.sum()
    assert np.sum((counts - expected) ** 2 / expected) > CHI2_CRITICAL_40_DF_P001


def test_sample_is_find_of_uniform_targets():
    rng = np.random.default_rng(5)
    tree = loaded(SumTree, sparse_priorities(rng, 4097, integers=False))
    drawn = tree.sample(1000, np.random.default_rng(9))
    targets = np.random.default_rng(9).random(1000) * tree.total
    np.testing.assert_array_equal(drawn, tree.find(targets))
    assert drawn.dtype == np.int64
    assert tree.sample(0, rng).shape == (0,)


def test_a_single_leaf():
    tree = SumTree(1)
    tree.set(np.array([0]), 0.5)
    np.testing.assert_array_equal(tree.sample(5, np.random.default_rng(0)), 0)
    np.testing.assert_array_equal(tree.find(np.array([0.0, 0.49, 0.5, 9.0])), 0)
    assert math.isclose(tree.total, 0.5)


# -- errors -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1.0, -1e-300, np.nan, np.inf, -np.inf])
def test_set_rejects_bad_priorities_and_changes_nothing(bad):
    tree = SumTree(8)
    tree.set(np.arange(8), 1.0)
    with pytest.raises(ValueError, match=r"`priorities` must be finite and >= 0"):
        tree.set(np.array([2, 3]), np.array([4.0, bad]))
    with pytest.raises(ValueError, match=r"np\.abs\(td_errors\)"):
        tree.set(np.array([2]), bad)
    assert tree.total == 8.0
    np.testing.assert_array_equal(tree.leaves, 1.0)


@pytest.mark.parametrize("bad", [-2.0, np.nan, np.inf])
def test_load_rejects_bad_leaves(bad):
    tree = SumTree(3)
    with pytest.raises(ValueError, match="`leaves` must be finite"):
        tree.load(np.array([1.0, bad, 1.0]))
    with pytest.raises(ValueError, match=r"`leaves` must have shape \(3,\)"):
        tree.load(np.ones(4))
    assert tree.total == 0.0


def test_sampling_an_empty_tree_fails():
    tree = SumTree(10)
    with pytest.raises(ValueError, match="every priority is 0"):
        tree.sample(4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="every priority is 0"):
        tree.find(np.array([0.0]))
    tree.set(np.array([3]), 2.0)
    tree.set(np.array([3]), 0.0)  # empty again
    with pytest.raises(ValueError, match=r"`total` is 0\.0"):
        tree.sample(1, np.random.default_rng(0))


def test_an_overflowing_total_fails():
    tree = SumTree(2)
    tree.set(np.array([0, 1]), 1.5e308)
    assert tree.total == np.inf
    with pytest.raises(ValueError, match="overflows float64"):
        tree.sample(1, np.random.default_rng(0))


@pytest.mark.parametrize("bad", [-0.5, np.nan])
def test_find_rejects_negative_and_nan_targets(bad):
    tree = SumTree(4)
    tree.set(np.arange(4), 1.0)
    with pytest.raises(ValueError, match=r"`targets` must be >= 0.*rng\.random"):
        tree.find(np.array([1.0, bad]))


def test_bad_indices_fail():
    tree = SumTree(5)  # padded to 16 leaves: 5..15 exist but must not be reachable
    for rows in ([5], [-1], [0, 16]):
        with pytest.raises(IndexError, match=r"`indices` must lie in \[0, 5\)"):
            tree.set(np.array(rows), 1.0)
        with pytest.raises(IndexError, match="negative indices do not wrap"):
            tree.get(np.array(rows))
    with pytest.raises(TypeError, match="`indices` must be integers"):
        tree.set(np.array([1.0]), 1.0)
    with pytest.raises(TypeError, match="`indices` must be integers"):
        tree.get(np.array([True, False]))
    with pytest.raises(ValueError, match="`values` of shape"):
        tree.set(np.array([0, 1, 2]), np.array([1.0, 2.0]))
    assert tree.total == 0.0


@pytest.mark.parametrize("size", [0, -3, 2.0, True, "8"])
def test_bad_size_fails(size):
    with pytest.raises(ValueError, match="`size` must be an integer >= 1"):
        SumTree(size)


def test_a_branching_below_two_fails():
    with pytest.raises(ValueError, match="`BRANCHING` must be an integer >= 2"):
        type("Unary", (SumTree,), {"BRANCHING": 1})(5)


@pytest.mark.parametrize("count", [-1, 1.5, None])
def test_bad_count_fails(count):
    tree = SumTree(2)
    tree.set(np.array([0]), 1.0)
    with pytest.raises(ValueError, match="`count` must be an integer >= 0"):
        tree.sample(count, np.random.default_rng(0))
