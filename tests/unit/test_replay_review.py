"""Review tests for the off-policy ReplayPool features (n-step, PER, frame_stack).

Differential checks: a ``frame_stack`` pool against a plain pool fed the same
transitions, and the lazy aligned hot path against the eager ``env_ids`` path and
the masked leaves path, under random interleavings of adds (with ``valid`` masks,
one env several times in a batch), aborts, samples, priority updates, statistics
and save/load. The last section holds the bugs the review found, each test failing
before its fix.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from gymnasium import spaces

from vecpool import ReplayPool
from vecpool.replay.frames import FrameLayout

# -- helpers ---------------------------------------------------------------------------


def _same_bytes(a: Any, b: Any) -> bool:
    """Exact equality, NaN and -0.0 included (arrays compared as bytes)."""
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, tuple):
        return len(a) == len(b) and all(
            _same_bytes(x, y) for x, y in zip(a, b, strict=True)
        )
    return bool(a == b)


def _stacks(
    seed: int, stack: int, frame_shape: tuple[int, ...], dtype: Any
) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any], bool]]:
    """One env's transitions ``(obs, next_obs, done)`` of stacked frames.

    Episodes start padded (with the first frame or zeros); now and then a
    ``next_obs`` is not the stack shifted by one, or the next ``obs`` jumps.
    Float frames hold NaN, -0.0 and 0.0.
    """
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind

    def frame() -> npt.NDArray[Any]:
        value = rng.integers(0, 3, frame_shape).astype(dtype)
        if kind == "f" and value.size:
            value.flat[0] = [np.nan, -0.0, 0.0, 1.0][rng.integers(4)]
        elif kind == "f":
            value = np.asarray([np.nan, -0.0, 0.0, 1.0][rng.integers(4)], dtype)
        return value

    while True:
        first = frame()
        pad = first if rng.random() < 0.5 else np.zeros(frame_shape, dtype)
        current = np.stack([pad] * (stack - 1) + [first])
        while True:
            following = np.concatenate([current[1:], frame()[None]])
            if rng.random() < 0.05:
                following = np.stack([frame() for _ in range(stack)])
            done = bool(rng.random() < 0.1)
            yield current, following, done
            if done:
                break
            if rng.random() < 0.05:
                current = np.stack([frame() for _ in range(stack)])
            else:
                current = following


def _frames_vs_plain(
    seed: int,
    *,
    stack: int = 3,
    frame_shape: tuple[int, ...] = (3,),
    dtype: Any = np.uint8,
    num_envs: int = 3,
    pool_size: int = 12,
    steps: int = 90,
    saves: bool = True,
    tmp: Path,
    **settings: Any,
) -> None:
    """Feed a frame pool and a plain pool the same random operations; compare."""
    rng = np.random.default_rng(seed)
    space = spaces.Box(0, 255, (stack, *frame_shape), dtype)

    def make(**extra: Any) -> ReplayPool:
        return ReplayPool(
            space, spaces.Discrete(3), num_envs, pool_size, seed=seed, **settings,
            **extra,
        )  # fmt: skip

    frames, plain = make(frame_stack=stack), make()
    streams = [
        _stacks(seed * 100 + env, stack, frame_shape, dtype) for env in range(num_envs)
    ]
    for step in range(steps):
        draw = rng.random()
        if draw < 0.05:
            cut = rng.choice(num_envs, rng.integers(1, num_envs + 1), replace=False)
            frames.abort_episodes(cut)
            plain.abort_episodes(cut)
            continue
        if draw < 0.1:
            if saves:
                frames = ReplayPool.load(frames.save(tmp / "frames.npz"))
                plain = ReplayPool.load(plain.save(tmp / "plain.npz"))
            continue
        if draw < 0.2:
            if len(plain) and "alpha" not in settings:  # rows differ: not PER
                want = plain.sample(16, n_step=3, gamma=0.5)._asdict()
                got = frames.sample(16, n_step=3, gamma=0.5)._asdict()
                del want["indices"], got["indices"]  # the frame ring has more slots
                for name, value in want.items():
                    assert _same_bytes(value, got[name]), (name, step)
                assert _same_bytes(
                    tuple(plain.sample_sequences(4, 5)),
                    tuple(frames.sample_sequences(4, 5)),
                ), step
            continue
        env_ids = (
            None
            if draw < 0.6
            else rng.integers(0, num_envs, rng.integers(0, 2 * num_envs + 1))
        )
        ids = np.arange(num_envs) if env_ids is None else env_ids
        rows = [next(streams[env]) for env in ids.tolist()]
        empty = np.zeros((0, *space.shape), dtype)
        obs = np.stack([row[0] for row in rows]) if rows else empty
        next_obs = np.stack([row[1] for row in rows]) if rows else empty
        done = np.array([row[2] for row in rows], bool)
        valid = (rng.random(ids.size) < 0.7) if rng.random() < 0.3 else None
        args = (obs, rng.integers(0, 3, ids.size), next_obs, rng.normal(size=ids.size))
        flags = (
            done & (rng.random(ids.size) < 0.7),
            done & (rng.random(ids.size) < 0.5),
        )
        for pool in (frames, plain):
            pool.add(*args, *flags, env_ids, valid=valid)
        assert frames.lengths.tolist() == plain.lengths.tolist(), step
        assert _same_bytes(tuple(plain.get_pool()), tuple(frames.get_pool())), step
    chunks = list(frames.iter_pool(5))
    if chunks:
        joined = tuple(
            np.concatenate([getattr(c, f) for c in chunks]) for f in chunks[0]._fields
        )
        assert _same_bytes(tuple(plain.get_pool()), joined)


def _hot_vs_eager(
    seed: int,
    *,
    num_envs: int = 3,
    pool_size: int = 9,
    steps: int = 120,
    tmp: Path,
    **settings: Any,
) -> None:
    """Aligned ``add`` vs ``env_ids=arange(n)`` vs masked ``add_leaves``: alike."""
    rng = np.random.default_rng(seed)

    def make() -> ReplayPool:
        return ReplayPool(
            spaces.Box(-np.inf, np.inf, (2,), np.float64), spaces.Discrete(3),
            num_envs, pool_size, seed=seed, **settings,
        )  # fmt: skip

    pools = [make(), make(), make()]
    serial = 0
    n = num_envs
    for step in range(steps):
        draw = rng.random()
        if draw < 0.75:
            obs = np.stack([np.arange(n), serial + np.arange(n)], 1).astype(np.float64)
            serial += n
            valid = (rng.random(n) < 0.7) if rng.random() < 0.2 else None
            args = (obs, rng.integers(0, 3, n), obs + 0.5, rng.normal(size=n))
            flags = (rng.random(n) < 0.1, rng.random(n) < 0.05)
            pools[0].add(*args, *flags, valid=valid)
            pools[1].add(*args, *flags, env_ids=np.arange(n), valid=valid)
            every = np.ones(n, bool) if valid is None else valid
            pools[2].add_leaves(
                [obs], [args[1]], [obs + 0.5], args[3], *flags, valid=every
            )
        elif draw < 0.8:
            cut = rng.choice(n, rng.integers(1, n + 1), replace=False)
            for pool in pools:
                pool.abort_episodes(cut)
        elif draw < 0.83:
            pools = [
                ReplayPool.load(pool.save(tmp / f"{i}.npz"))
                for i, pool in enumerate(pools)
            ]
        elif draw < 0.9 and len(pools[0]):
            options: dict[str, Any] = {"n_step": int(rng.integers(1, 6)), "gamma": 0.7}
            if "alpha" in settings:
                options["beta"] = 0.5
            batches = [pool.sample(16, **options) for pool in pools]
            for batch in batches[1:]:
                for name in ("obs", "next_obs", "action", "terminated", "truncated"):
                    np.testing.assert_array_equal(
                        getattr(batches[0], name), getattr(batch, name), err_msg=name
                    )
                np.testing.assert_array_equal(batches[0].indices, batch.indices)
                np.testing.assert_array_equal(batches[0].discount, batch.discount)
                np.testing.assert_allclose(batches[0].reward, batch.reward, rtol=1e-12)
                np.testing.assert_allclose(
                    batches[0].weights, batch.weights, rtol=1e-12
                )
            if "alpha" in settings:
                priorities = rng.random(16) * 3
                for pool in pools:
                    pool.update_priorities(batches[0].indices, priorities)
            sequences = [tuple(pool.sample_sequences(5, 4)) for pool in pools]
            assert all(_same_bytes(sequences[0], other) for other in sequences[1:])
        else:
            stats = [pool.episode_stats for pool in pools]
            for other in stats[1:]:
                assert other.count == stats[0].count
                np.testing.assert_allclose(
                    [other.mean_return, other.mean_length],
                    [stats[0].mean_return, stats[0].mean_length],
                    rtol=1e-9,
                )
        lengths = [pool.lengths.tolist() for pool in pools]
        assert lengths[0] == lengths[1] == lengths[2], step
        assert all(
            _same_bytes(tuple(pools[0].get_pool()), tuple(pool.get_pool()))
            for pool in pools[1:]
        ), step
        states = [pool.state_dict() for pool in pools]
        held = pools[0].filled_rows(states[0]["length"], states[0]["end"])
        for state in states[1:]:
            for name in ("fresh", "received", "end", "episode_length"):
                np.testing.assert_array_equal(states[0][name], state[name], name)
            np.testing.assert_array_equal(
                states[0]["starts"][held], state["starts"][held]
            )
            np.testing.assert_allclose(
                states[0]["episode_return"], state["episode_return"], atol=1e-9
            )
            if "priority" in state:
                np.testing.assert_array_equal(states[0]["priority"], state["priority"])


def _tiny(num_envs: int = 1, pool_size: int = 4, **settings: Any) -> ReplayPool:
    return ReplayPool(
        spaces.Box(-np.inf, np.inf, (1,), np.float64), spaces.Discrete(2),
        num_envs, pool_size, seed=0, **settings,
    )  # fmt: skip


def _add_one(
    pool: ReplayPool, value: float, *, reward: float = 1.0, done: bool = False
) -> None:
    """One row per env, ``obs = value + env``."""
    n = pool.num_envs
    obs = (value + np.arange(n, dtype=np.float64))[:, None]
    pool.add(
        obs, np.zeros(n, np.int64), obs, np.full(n, reward), np.full(n, done),
        np.zeros(n, bool),
    )  # fmt: skip


def _rewrite(path: Path, target: Path, **changes: Any) -> Path:
    """A copy of the pool file ``path`` with some members replaced."""
    with np.load(path, allow_pickle=False) as data:
        members = {name: data[name] for name in data.files}
    for name, change in changes.items():
        members[name] = change(members[name]) if callable(change) else change
    np.savez(target, **members)
    assert zipfile.is_zipfile(target)
    return target


def _frame_pool(stack: int = 2, **settings: Any) -> ReplayPool:
    space = spaces.Box(0, 255, (stack,), np.uint8)
    return ReplayPool(space, spaces.Discrete(2), 1, 8, frame_stack=stack, **settings)


def _add_stack(
    pool: ReplayPool, obs: list[int], next_obs: list[int], action: Any = None
) -> None:
    pool.add(
        np.array([obs], np.uint8),
        np.zeros(1, np.int64) if action is None else action,
        np.array([next_obs], np.uint8),
        np.ones(1),
        np.zeros(1, bool),
        np.zeros(1, bool),
    )


# -- differential: frame_stack vs plain ------------------------------------------------

_FRAME_CASES = [
    pytest.param({}, id="default"),
    pytest.param({"window_size": 2}, id="window2"),
    pytest.param({"clearing_freq": 5, "clearing_size": 3}, id="clearing"),
    pytest.param({"pool_size": 2}, id="pool_size<num_envs"),
    pytest.param({"num_envs": 1, "pool_size": 1}, id="capacity1"),
    pytest.param({"stack": 1}, id="stack1"),
    pytest.param({"alpha": 0.6, "window_size": 3}, id="per+window"),
    pytest.param(
        {"stack": 4, "frame_shape": (2,), "dtype": np.float32}, id="float32-8B-nan"
    ),
    pytest.param({"stack": 2, "frame_shape": (), "dtype": np.float64}, id="scalar"),
    pytest.param({"stack": 5, "frame_shape": (1,), "pool_size": 3}, id="stack5-1B"),
    # every sub-pool emptied every other add (no save: see the xfail below)
    pytest.param(
        {"clearing_freq": 2, "clearing_size": 9, "saves": False}, id="clear-all"
    ),
]


@pytest.mark.parametrize("case", _FRAME_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frame_pool_reads_back_what_a_plain_pool_holds(
    case: dict[str, Any], seed: int, tmp_path: Path
) -> None:
    _frames_vs_plain(seed, tmp=tmp_path, **case)


def test_frame_pool_casts_like_a_plain_pool() -> None:
    # float64 stacks into a uint8 pool: both store the same cast values
    space = spaces.Box(0, 255, (3, 2), np.uint8)
    frames = ReplayPool(space, spaces.Discrete(2), 2, 6, frame_stack=3)
    plain = ReplayPool(space, spaces.Discrete(2), 2, 6)
    rng = np.random.default_rng(0)
    for _ in range(8):
        obs = rng.integers(0, 5, (2, 3, 2)).astype(np.float64)
        for pool in (frames, plain):
            pool.add(obs, np.zeros(2, np.int64), obs + 1, np.ones(2),
                     np.zeros(2, bool), np.zeros(2, bool))  # fmt: skip
    assert _same_bytes(tuple(plain.get_pool()), tuple(frames.get_pool()))


# -- differential: lazy aligned path vs eager paths ------------------------------------

_HOT_CASES = [
    pytest.param({}, id="default"),
    pytest.param({"window_size": 1}, id="window1"),
    pytest.param({"alpha": 0.6}, id="per"),
    pytest.param({"alpha": 0.6, "window_size": 2}, id="per+window"),
    pytest.param({"num_envs": 1, "pool_size": 1}, id="capacity1"),
    pytest.param({"num_envs": 4, "pool_size": 2}, id="pool_size<num_envs"),
    pytest.param({"num_envs": 2, "pool_size": 1, "alpha": 0.5}, id="per-capacity1"),
    pytest.param({"store_next_obs": False}, id="next-obs-once"),
    pytest.param(
        {"clearing_freq": 2, "clearing_size": 1, "alpha": 1.0}, id="per+clearing"
    ),
]


@pytest.mark.parametrize("case", _HOT_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lazy_and_eager_adds_agree(
    case: dict[str, Any], seed: int, tmp_path: Path
) -> None:
    _hot_vs_eager(seed, tmp=tmp_path, **case)


def test_more_adds_than_the_ring_holds_between_reads() -> None:
    # 3 envs, capacity 2 (3 slots): 50 aligned adds without any read in between
    fast, slow = _tiny(3, 6), _tiny(3, 6)
    rng = np.random.default_rng(4)
    for step in range(50):
        obs = (step * 3 + np.arange(3.0))[:, None]
        args = (obs, np.zeros(3, np.int64), obs, rng.normal(size=3))
        flags = (rng.random(3) < 0.3, np.zeros(3, bool))
        fast.add(*args, *flags)
        slow.add(*args, *flags, env_ids=np.arange(3))
    assert _same_bytes(tuple(fast.get_pool()), tuple(slow.get_pool()))
    assert fast.get_pool().obs[:, 0].tolist() == [144, 147, 145, 148, 146, 149]
    assert fast.episode_stats.count == slow.episode_stats.count
    assert fast.episode_stats.mean_return == pytest.approx(
        slow.episode_stats.mean_return, rel=1e-12
    )


# -- prioritized replay ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_prioritized_draws_only_held_rows(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    n, size = int(rng.integers(1, 4)), int(rng.integers(1, 10))
    settings: dict[str, Any] = {"alpha": float(rng.choice([0.3, 1.0]))}
    if seed % 2:
        settings["window_size"] = int(rng.integers(1, -(-size // n) + 1))
    if seed % 3 == 0:
        settings.update(clearing_freq=int(rng.integers(1, 5)), clearing_size=2)
    pool = _tiny(n, size, **settings)
    for step in range(150):
        draw = rng.random()
        if draw < 0.5:
            valid = (rng.random(n) < 0.6) if rng.random() < 0.3 else None
            obs = np.full((n, 1), float(step))
            pool.add(obs, np.zeros(n, np.int64), obs, np.ones(n),
                     rng.random(n) < 0.2, np.zeros(n, bool), valid=valid)  # fmt: skip
        elif draw < 0.7:
            ids = rng.integers(0, n, rng.integers(1, 2 * n + 1))
            obs = np.full((ids.size, 1), float(step))
            pool.add(obs, np.zeros(ids.size, np.int64), obs, np.ones(ids.size),
                     rng.random(ids.size) < 0.2, np.zeros(ids.size, bool),
                     env_ids=ids)  # fmt: skip
        elif draw < 0.75:
            pool = ReplayPool.load(pool.save(tmp_path / "per.npz"))
        elif len(pool):
            batch = pool.sample(8, beta=0.4)
            # duplicates in one update: the last value of a row wins
            pool.update_priorities(
                np.concatenate([batch.indices, batch.indices]),
                np.concatenate([np.full(8, 50.0), rng.random(8) + 0.01]),
            )
        state = pool.state_dict()
        held = set(pool.filled_rows(state["length"], state["end"]).tolist())
        assert set(np.flatnonzero(state["priority"] > 0).tolist()) == held, step
        assert state["max_priority"][0] >= 1.0


def test_update_priorities_duplicates_take_the_last_value() -> None:
    pool = _tiny(1, 4, alpha=1.0)
    for value in range(4):
        _add_one(pool, value)
    row = pool.sample(1).indices
    pool.update_priorities(np.repeat(row, 3), np.array([7.0, 9.0, 2.0]))
    state = pool.state_dict()
    assert state["priority"][row[0]] == 2.0
    assert state["max_priority"][0] == 9.0  # the largest given, drawn or not
    _add_one(pool, 10.0)  # a new row gets the largest priority given so far
    state = pool.state_dict()
    newest = pool.filled_rows(state["length"], state["end"])[-1]
    assert state["priority"][newest] == 9.0
    pool.update_priorities([], [])  # nothing to do, no error


def test_prioritized_weights_and_n_step_on_capacity_one() -> None:
    pool = _tiny(2, 2, alpha=0.6)
    for value in range(5):
        _add_one(pool, 10.0 * value, reward=value, done=value == 3)
    batch = pool.sample(64, n_step=10**6, gamma=0.9, beta=1.0)  # n_step >> capacity
    assert batch.discount.tolist() == [0.9] * 64  # one row held: one step summed
    assert batch.weights.tolist() == [1.0] * 64
    assert set(batch.obs[:, 0].tolist()) == {40.0, 41.0}
    assert batch.reward.tolist() == [4.0] * 64


# -- n-step windows and sequences at the edges -----------------------------------------


def test_sequences_longer_than_the_capacity_are_masked() -> None:
    pool = _tiny(2, 6)  # capacity 3
    for value in range(7):
        _add_one(pool, 10.0 * value, done=value == 5)
    seq = pool.sample_sequences(40, 9)
    assert seq.obs.shape == (40, 9, 1)
    for mask, obs in zip(seq.mask, seq.obs[:, :, 0], strict=True):
        start = int(obs[0]) // 10
        # held: values 4, 5, 6; value 5 ends its episode
        expected = {4: [True, True], 5: [True], 6: [True]}[start]
        assert mask.tolist() == expected + [False] * (9 - len(expected))


def test_n_step_stops_at_an_abort_between_aligned_adds() -> None:
    pool = _tiny(2, 20)
    _add_one(pool, 0.0, reward=1.0)
    _add_one(pool, 10.0, reward=2.0)
    pool.abort_episodes([0])
    _add_one(pool, 20.0, reward=4.0)
    sums: dict[float, float] = {}
    for _ in range(20):
        batch = pool.sample(64, n_step=3, gamma=1.0)
        sums.update(zip(batch.obs[:, 0].tolist(), batch.reward.tolist(), strict=True))
    assert sums == {0.0: 3.0, 10.0: 2.0, 20.0: 4.0, 1.0: 7.0, 11.0: 6.0, 21.0: 4.0}


def test_clearing_every_add_keeps_nothing_but_counts_episodes() -> None:
    pool = _tiny(2, 4, clearing_freq=1, clearing_size=1)
    for value in range(5):
        _add_one(pool, value, done=value % 2 == 1)
    assert len(pool) == 0
    assert pool.episode_stats.count == 4
    with pytest.raises(ValueError, match="empty ReplayPool"):
        pool.sample(1, n_step=2, gamma=0.9)
    with pytest.raises(ValueError, match="empty ReplayPool"):
        pool.sample_sequences(1, 2)


def test_to_torch_shares_cpu_memory() -> None:
    torch = pytest.importorskip("torch")
    pool = _tiny(2, 8, alpha=0.6)
    for value in range(4):
        _add_one(pool, value)
    batch = pool.sample(5, n_step=2, gamma=0.5, beta=0.4)
    tensors = batch.to_torch()
    assert type(tensors) is type(batch)
    assert tensors.indices.dtype == torch.int64
    batch.reward[0] = 123.0
    assert float(tensors.reward[0]) == 123.0  # the same memory
    seq = pool.sample_sequences(3, 4).to_torch()
    assert seq.mask.dtype == torch.bool
    assert tuple(seq.obs.shape) == (3, 4, 1)


# -- forged format-5 files -------------------------------------------------------------


def _saved_frame_pool(tmp_path: Path) -> Path:
    space = spaces.Box(0, 255, (3, 2), np.uint8)
    pool = ReplayPool(space, spaces.Discrete(2), 2, 8, alpha=0.6, frame_stack=3)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 200, (2, 12, 2), dtype=np.uint8)
    for t in range(7):
        obs, next_obs = frames[:, t : t + 3], frames[:, t + 1 : t + 4]
        pool.add(obs, np.zeros(2, np.int64), next_obs, np.ones(2),
                 np.zeros(2, bool), np.zeros(2, bool))  # fmt: skip
    return pool.save(tmp_path / "pool.npz")


@pytest.mark.parametrize(
    ("member", "change", "needle"),
    [
        (
            "own_obs",
            lambda a: np.where(a < 0, -2, a),
            "`own_obs` member is out of range",
        ),
        ("own_obs", lambda a: np.where(a >= 0, 10**6, a), "`own_obs` member is out"),
        ("own_next_frame", lambda a: a - 3, "`own_next_frame` member is out"),
        ("priority", lambda a: np.where(np.arange(a.size) == 0, np.nan, a), "priority"),
        ("priority", lambda a: -a - 1, "`priority` member is out of range"),
        ("max_priority", lambda a: np.array([1.0, 2.0]), "`max_priority` member has"),
        ("max_priority", lambda a: np.array([np.inf]), "`max_priority` member is out"),
        ("starts", lambda a: a[:-1], "`starts` member has shape"),
        ("starts", lambda a: a.astype(np.int64), "`starts` member is int64"),
        ("fresh", lambda a: np.ones(5, bool), "`fresh` member has shape"),
        ("frames", lambda a: a[:, :1], "`frames` member has shape"),
        ("wholes", lambda a: a[:, :2], "`wholes` member has shape"),
        ("wholes_free", lambda a: np.concatenate([a, [0]]), "`wholes_free`"),  # used
        ("last_obs", lambda a: a.astype(np.float32), "`last_obs` member is float32"),
    ],
)
def test_forged_format_5_members_are_refused(
    member: str, change: Any, needle: str, tmp_path: Path
) -> None:
    path = _saved_frame_pool(tmp_path)
    ReplayPool.load(path)  # the file as written loads
    forged = _rewrite(path, tmp_path / "forged.npz", **{member: change})
    with pytest.raises(ValueError, match=re.escape(needle)):
        ReplayPool.load(forged)


# -- found by the review, fixed (each failed before its fix) -----------------------


def test_frame_pool_with_an_emptied_sub_pool_survives_save_and_load(
    tmp_path: Path,
) -> None:
    stack = 3
    space = spaces.Box(0, 255, (stack, 2), np.uint8)

    def transition(t: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        def at(i: int) -> npt.NDArray[Any]:
            return np.stack(
                [np.full(2, max(0, i - stack + 1 + j)) for j in range(stack)]
            )

        return at(t)[None].astype(np.uint8), at(t + 1)[None].astype(np.uint8)

    pools = []
    extras: list[dict[str, Any]] = [{"frame_stack": stack}, {}]
    for extra in extras:
        pool = ReplayPool(space, spaces.Discrete(2), 1, 8, clearing_freq=3,
                          clearing_size=3, **extra)  # fmt: skip
        for t in range(3):  # the third add clears the sub-pool: it holds nothing
            obs, next_obs = transition(t)
            pool.add(obs, np.zeros(1, np.int64), next_obs, np.ones(1),
                     np.zeros(1, bool), np.zeros(1, bool))  # fmt: skip
        assert len(pool) == 0
        pool = ReplayPool.load(pool.save(tmp_path / f"{len(extra)}.npz"))
        obs, next_obs = transition(3)
        pool.add(obs, np.zeros(1, np.int64), next_obs, np.ones(1),
                 np.zeros(1, bool), np.zeros(1, bool))  # fmt: skip
        pools.append(pool)
    assert pools[1].get_pool().obs.tolist() == [[[1, 1], [2, 2], [3, 3]]]
    assert _same_bytes(tuple(pools[1].get_pool()), tuple(pools[0].get_pool()))


def test_frame_pool_retry_after_a_refused_add() -> None:
    frames, plain = (
        _frame_pool(),
        ReplayPool(spaces.Box(0, 255, (2,), np.uint8), spaces.Discrete(2), 1, 8),
    )
    for pool in (frames, plain):
        _add_stack(pool, [1, 2], [2, 3])
        with pytest.raises(ValueError, match="shape"):
            _add_stack(pool, [2, 3], [3, 4], action=np.zeros(2, np.int64))
        _add_stack(pool, [2, 3], [3, 4])  # the retry, right this time
    assert plain.get_pool().next_obs.tolist() == [[2, 3], [3, 4]]
    assert frames.get_pool().next_obs.tolist() == [[2, 3], [3, 4]]


def test_a_refused_add_counts_no_episode() -> None:
    pool = _tiny(1, 8, clearing_freq=100, clearing_size=1)
    obs = np.zeros((1, 1))
    flags = (np.ones(1), np.ones(1, bool), np.zeros(1, bool))
    with pytest.raises(ValueError, match="shape"):
        pool.add(obs, np.zeros(2, np.int64), obs, *flags)
    pool.add(obs, np.zeros(1, np.int64), obs, *flags)
    assert pool.episode_stats.count == 1


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_lazy_episode_returns_do_not_mix_envs_inf() -> None:
    stats = []
    for env_ids in (None, np.arange(2)):
        pool = _tiny(2, 20)
        for rewards, ends in (
            ([np.inf, 1.0], [False, True]),
            ([0.0, 0.0], [False] * 2),
        ):
            pool.add(np.zeros((2, 1)), np.zeros(2, np.int64), np.zeros((2, 1)),
                     np.array(rewards), np.array(ends), np.zeros(2, bool),
                     env_ids)  # fmt: skip
        pool.abort_episodes([0])
        stats.append(pool.episode_stats)
    assert stats[1] == (1, 1.0, 1.0)
    assert stats[0] == stats[1]


def test_lazy_episode_returns_do_not_mix_envs_precision() -> None:
    stats = []
    for env_ids in (None, np.arange(2)):
        pool = _tiny(2, 20)
        for step in range(2):
            pool.add(np.zeros((2, 1)), np.zeros(2, np.int64), np.zeros((2, 1)),
                     np.array([1e17, 1.0]), np.array([False, step == 1]),
                     np.zeros(2, bool), env_ids)  # fmt: skip
        stats.append(pool.episode_stats)
    assert stats[1] == (1, 2.0, 2.0)
    assert stats[0] == stats[1]


def test_update_priorities_skips_rows_overwritten_since_drawn() -> None:
    pool = _tiny(1, 3, alpha=1.0)
    for value in range(3):
        _add_one(pool, value)
    drawn = pool.sample(1)
    for value in range(3, 7):  # every row drawn before is gone
        _add_one(pool, value)
    pool.update_priorities(drawn.indices, [1000.0])
    state = pool.state_dict()
    held = pool.filled_rows(state["length"], state["end"])
    assert state["priority"][held].tolist() == [1.0, 1.0, 1.0]


def test_frame_store_does_not_leak_across_save_and_load(tmp_path: Path) -> None:
    stack = 4
    space = spaces.Box(0, 255, (stack, 2), np.uint8)
    pool = ReplayPool(space, spaces.Discrete(2), 1, 8, window_size=2, frame_stack=stack)
    rng = np.random.default_rng(0)

    def leaked(pool: ReplayPool) -> int:
        layout = pool._stored.layout
        assert isinstance(layout, FrameLayout)
        store = layout.store
        owned = np.concatenate([store.own_obs, store.own_next_whole])
        used = np.unique(owned[owned >= 0]).size
        return int(store.wholes.items.shape[0] - len(store.wholes.free) - used)

    for _ in range(3):
        for _ in range(30):  # every stack a jump: each kept whole
            obs = rng.integers(0, 255, (1, stack, 2), dtype=np.uint8)
            pool.add(obs, np.zeros(1, np.int64), obs, np.ones(1),
                     np.zeros(1, bool), np.zeros(1, bool))  # fmt: skip
        assert leaked(pool) == 0
        pool = ReplayPool.load(pool.save(tmp_path / "pool.npz"))
        assert leaked(pool) == 0


def test_forged_file_with_a_loose_oldest_stack_is_refused(tmp_path: Path) -> None:
    path = _saved_frame_pool(tmp_path)

    def loosen(own: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        own = own.copy()
        own[0] = -1  # sub-pool 0's oldest row
        return own

    forged = _rewrite(path, tmp_path / "forged.npz", own_obs=loosen)
    with pytest.raises(ValueError, match="own_obs"):
        ReplayPool.load(forged)


def test_forged_max_priority_zero_is_refused(tmp_path: Path) -> None:
    forged = _rewrite(
        _saved_frame_pool(tmp_path), tmp_path / "forged.npz", max_priority=np.zeros(1)
    )
    with pytest.raises(ValueError, match="max_priority"):
        ReplayPool.load(forged)


def test_alpha_zero_never_draws_a_priority_zero_row() -> None:
    pool = _tiny(1, 3, alpha=0.0)
    for value in range(3):
        _add_one(pool, value)
    state = pool.state_dict()
    rows = pool.filled_rows(state["length"], state["end"])
    pool.update_priorities(rows[:2], [0.0, 0.0])
    assert set(pool.sample(200).obs[:, 0].tolist()) == {2.0}
