"""EnvPool-style asynchronous batches: `send(actions, env_ids)` / `recv()`.

Every test runs over each placement (the ``placement`` fixture of tests/conftest.py).
"""

from __future__ import annotations

import functools
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

from vecpool.errors import AlreadyPendingCallError, NoAsyncCallError, VecPoolWarning
from vecpool.testing import ActionEchoEnv, CountingEnv, RaisingEnv, SlowEnv

pytestmark = pytest.mark.timeout(60)


def _row(infos, position):
    """One env's info out of a batched info dict (keys present for that row)."""
    row = {}
    for key, value in infos.items():
        if key.startswith("_") or key == "env_id":
            continue
        if not infos[f"_{key}"][position]:
            continue
        row[key] = _row(value, position) if isinstance(value, dict) else value[position]
    return row


def _take(batch, position):
    if isinstance(batch, dict):
        return {key: _take(value, position) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_take(value, position) for value in batch)
    return batch[position]


@pytest.mark.parametrize(
    "autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]
)
@pytest.mark.parametrize(("num_envs", "batch_size"), [(6, 3), (5, 2), (4, 1)])
@pytest.mark.parametrize(
    ("obs_kind", "shared_memory"), [("box", True), ("dict", True), ("dict", False)]
)
# a list of actions travels by pipe, one per env in the order of the ids
@pytest.mark.parametrize("actions_as", ["array", "list"])
def test_each_env_matches_its_own_synchronous_run(
    make_placed,
    actions_as,
    autoreset_mode,
    num_envs,
    batch_size,
    obs_kind,
    shared_memory,
):
    fn = functools.partial(
        CountingEnv, obs_kind=obs_kind, info_every=3, max_steps=9, terminate_prob=0.1
    )
    envs = make_placed(
        [fn] * num_envs,
        batch_size=batch_size,
        autoreset_mode=autoreset_mode,
        shared_memory=shared_memory,
    )
    rng = np.random.default_rng(num_envs)
    envs.reset(seed=10)
    history = {  # type: ignore[var-annotated]
        i: [] for i in range(num_envs)
    }  # (action, obs, reward, term, trunc, info)
    sent = {}  # type: ignore[var-annotated]
    first = rng.integers(0, 2, num_envs)
    envs.send(first, np.arange(num_envs))
    sent.update(enumerate(first.tolist()))
    # "first batch_size to finish" may starve a slow worker for a while on a loaded
    # machine: keep going (bounded) until every env has been returned a few times
    for round_ in range(5_000):
        if round_ >= 60 and all(len(steps) >= 3 for steps in history.values()):
            break
        obs, rewards, terminations, truncations, infos = envs.recv()
        ids = infos["env_id"]
        assert len(ids) == batch_size
        for position, index in enumerate(ids.tolist()):
            history[index].append(
                (
                    sent.pop(index),
                    _take(obs, position),
                    rewards[position],
                    terminations[position],
                    truncations[position],
                    _row(infos, position),
                )
            )
        actions = rng.integers(0, 2, len(ids))
        envs.send(actions.tolist() if actions_as == "list" else actions, ids)
        sent.update(zip(ids.tolist(), actions.tolist(), strict=True))
    assert all(history.values())
    for index, steps in history.items():
        single = gym.vector.SyncVectorEnv([fn], autoreset_mode=autoreset_mode)
        single.reset(seed=10 + index)
        for action, *result in steps:
            obs, reward, term, trunc, info = single.step(np.array([action]))
            expected = [_take(obs, 0), reward[0], term[0], trunc[0], _row(info, 0)]
            assert data_equivalence(result, expected, exact=True), index
        single.close()


def test_every_env_is_stepped_once_per_action_sent(make_placed):
    num_envs = 5
    envs = make_placed([functools.partial(SlowEnv)] * num_envs, batch_size=2)
    envs.reset(seed=0)
    rng = np.random.default_rng(1)
    expected = {i: [] for i in range(num_envs)}  # type: ignore[var-annotated]
    ids = np.arange(num_envs)
    for _ in range(40):
        # tiny, distinct delays: workers finish in varying order
        actions = rng.integers(1, 4, size=(len(ids), 1)).astype(np.float32) / 1000
        for index, action in zip(ids.tolist(), actions[:, 0].tolist(), strict=True):
            expected[index].append(action)
        envs.send(actions, ids)
        *_, infos = envs.recv()
        ids = infos["env_id"]
    while envs.pending_env_ids:
        envs.recv()
    received = envs.get_attr("actions_received")
    for index in range(num_envs):
        np.testing.assert_allclose(received[index], expected[index], rtol=1e-6)


def test_batches_refuse_bad_use(make_placed):
    plain = make_placed([CountingEnv] * 2)
    with pytest.raises(
        ValueError, match=re.escape("create the vector env with `batch_size=k`")
    ):
        plain.send(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match=re.escape("`batch_size` must be an integer")):
        make_placed([CountingEnv] * 2, batch_size=3)

    envs = make_placed([CountingEnv] * 4, batch_size=2)
    envs.reset(seed=0)
    with pytest.raises(NoAsyncCallError, match=re.escape("without any env in flight")):
        envs.recv()
    with pytest.raises(ValueError, match=re.escape("must not repeat an id")):
        envs.send(np.zeros(2, dtype=np.int64), [1, 1])
    with pytest.raises(ValueError, match=re.escape("must lie in [0, 4)")):
        envs.send(np.zeros(1, dtype=np.int64), [4])
    # an id past int64 is named as given, not wrapped by a cast to int64
    with pytest.raises(ValueError, match=re.escape(f"got [{2**63}]")):
        envs.send(np.zeros(1, dtype=np.int64), [2**63])
    with pytest.raises(ValueError, match=re.escape("one action per id")):
        envs.send(np.zeros(3, dtype=np.int64), [0, 1])
    envs.send(np.zeros(2, dtype=np.int64), [0, 3])
    with pytest.raises(ValueError, match=re.escape("envs [3] are still in flight")):
        envs.send(np.zeros(1, dtype=np.int64), [3])
    with pytest.raises(AlreadyPendingCallError, match=re.escape("`recv` them first")):
        envs.step(np.zeros(4, dtype=np.int64))
    *_, infos = envs.recv()
    assert sorted(infos["env_id"].tolist()) == [0, 3]
    envs.step(np.zeros(4, dtype=np.int64))  # usable again


def test_close_with_envs_in_flight(make_placed, leak_checker):
    envs = make_placed([functools.partial(SlowEnv)] * 4, batch_size=2)
    envs.reset(seed=0)
    envs.send(np.full((4, 1), 0.2, dtype=np.float32), np.arange(4))
    envs.close()
    leak_checker.assert_no_leaks()


def test_recv_returns_the_rest_when_fewer_are_in_flight(make_placed):
    envs = make_placed([CountingEnv] * 4, batch_size=3)
    envs.reset(seed=0)
    envs.send(np.zeros(2, dtype=np.int64), [1, 2])
    obs, rewards, *_, infos = envs.recv()
    assert sorted(infos["env_id"].tolist()) == [1, 2]
    assert obs.shape[0] == rewards.shape[0] == 2


def test_finished_but_unreturned_envs_cannot_be_sent(make_placed):
    envs = make_placed([CountingEnv] * 4, batch_size=2)
    envs.reset(seed=0)
    envs.send(np.zeros(4, dtype=np.int64), np.arange(4))
    *_, infos = envs.recv()
    returned = set(infos["env_id"].tolist())
    batches = envs._batches
    while batches.flying:  # let the other worker's envs finish too
        batches._wait(None, batches._busy(), None)
    waiting = sorted(set(range(4)) - returned)
    with pytest.raises(ValueError, match=re.escape("has not returned them yet")):
        envs.send(np.zeros(2, dtype=np.int64), waiting)
    with pytest.raises(
        AlreadyPendingCallError, match=re.escape("waiting to be returned")
    ):
        envs.step(np.zeros(4, dtype=np.int64))
    *_, infos = envs.recv()
    assert sorted(infos["env_id"].tolist()) == waiting


def test_an_env_error_in_a_batch_keeps_the_other_envs(make_placed):
    fns = [functools.partial(RaisingEnv, raise_on="step", at=1)]
    fns += [functools.partial(CountingEnv)] * 3  # type: ignore[list-item, arg-type]
    envs = make_placed(fns, batch_size=4)
    envs.reset(seed=0)
    envs.send(np.zeros(4, dtype=np.int64), np.arange(4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's error log lines
        with pytest.raises(ValueError, match="step"):
            envs.recv()
    # env 1 shares env 0's worker (or the parent): it stepped fine and must come back
    returned = []
    while envs.pending_env_ids:
        *_, infos = envs.recv()
        returned += infos["env_id"].tolist()
    assert sorted(returned) == [1, 2, 3]


def test_a_batch_never_takes_the_answer_of_an_earlier_plain_call(make_placed):
    # the failed step's answer (env 3's error) stays with its worker until that
    # worker's next call; a batch on the other worker must not pick it up
    fns = [ActionEchoEnv] * 3 + [functools.partial(ActionEchoEnv, raise_at=1)]
    envs = make_placed(fns, batch_size=1)
    envs.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's worker-error log lines
        with pytest.raises(ValueError, match="on purpose"):
            envs.step(np.zeros(4))
    envs.send(np.array([7.0]), [0])
    obs, *_, infos = envs.recv(timeout=10)
    assert infos["env_id"].tolist() == [0]
    assert obs[0, 0] == 7.0
    assert envs.pending_env_ids == []
    envs.send(np.array([8.0]), [2])
    obs, *_, infos = envs.recv(timeout=10)
    assert infos["env_id"].tolist() == [2]
    assert obs[0, 0] == 8.0


class _OwnEnvId(gym.Wrapper):
    """An env whose info has its own ``env_id`` key."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "env_id": "mine"}


def test_an_envs_own_env_id_info_key_is_replaced_with_a_warning(make_placed):
    # recv reserves infos["env_id"] for the rows' ids: an env's own values under
    # that key were replaced silently (and its `_env_id` mask left beside the ids)
    make = functools.partial(_wrapped_counting, _OwnEnvId)
    envs = make_placed([make] * 4, batch_size=2)
    envs.reset(seed=0)
    envs.send(np.zeros(4, np.int64), np.arange(4))
    with pytest.warns(VecPoolWarning, match="reserves for the ids"):
        *_, first = envs.recv()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per vector env
        *_, second = envs.recv()
    for infos in (first, second):
        assert infos["env_id"].dtype == np.int64
        assert "_env_id" not in infos
    assert sorted(first["env_id"].tolist() + second["env_id"].tolist()) == [0, 1, 2, 3]


def _wrapped_counting(wrapper):
    return wrapper(CountingEnv())
