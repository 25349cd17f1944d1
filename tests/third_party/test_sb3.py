"""SB3VecEnv: Stable-Baselines3's VecEnv semantics over any Gymnasium VectorEnv.

The reference is SB3's own DummyVecEnv over the same env fns, seeds and actions.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

import vecpool
from vecpool.integrations.sb3 import SB3VecEnv
from vecpool.testing import make_env_fns

SAME, DISABLED, NEXT = (
    AutoresetMode.SAME_STEP,
    AutoresetMode.DISABLED,
    AutoresetMode.NEXT_STEP,
)


@pytest.fixture(autouse=True)
def _sb3_logs_in_tmp_path(tmp_path, monkeypatch):
    """``model.learn()`` makes an ``SB3-<time>`` folder in the temporary directory:
    the test's own, not the machine's ``/tmp``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def cartpole(max_episode_steps: int = 20) -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1", max_episode_steps=max_episode_steps)


def monitored_cartpole() -> gym.Env[Any, Any]:
    env: gym.Env[Any, Any] = Monitor(gym.make("CartPole-v1"))
    return env


def cartpole_fns(n: int) -> list[Any]:
    return [cartpole] * n


def vector(kind: str, fns: list[Any], mode: AutoresetMode) -> Any:
    if kind == "vecpool":
        return vecpool.AsyncVectorEnv(fns, num_workers=2, autoreset_mode=mode)
    if kind == "vecpool-in-process":
        return vecpool.AsyncVectorEnv(fns, num_workers=0, autoreset_mode=mode)
    if kind == "sync":
        return SyncVectorEnv(fns, autoreset_mode=mode)
    if kind == "gym-async":
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
    if kind == "wrapped":  # a VectorWrapper forwards neither call nor get_attr
        return gym.vector.VectorWrapper(
            vecpool.AsyncVectorEnv(fns, num_workers=0, autoreset_mode=mode)
        )
    raise AssertionError(kind)


@pytest.fixture
def closing():
    opened: list[Any] = []
    yield opened.append
    for env in opened:
        env.close()


def assert_same_value(actual: Any, expected: Any, label: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict), label
        assert sorted(actual) == sorted(expected), label
        for key in expected:
            assert_same_value(actual[key], expected[key], f"{label}[{key!r}]")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple), label
        assert len(actual) == len(expected), label
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_value(a, e, f"{label}[{i}]")
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=label)
        assert np.asarray(actual).dtype == np.asarray(expected).dtype, label


def assert_same_infos(
    actual: list[dict[str, Any]], expected: list[dict[str, Any]], label: str
):
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_same_value(a, e, f"{label} env {i}")
        if "TimeLimit.truncated" in e:
            assert type(a["TimeLimit.truncated"]) is bool


def rollout_against_dummy(
    ours: VecEnv, fns: list[Any], steps: int, seed: int = 7
) -> dict[str, int]:
    """Step ``ours`` and a DummyVecEnv in lockstep; return what happened."""
    reference = DummyVecEnv(fns)
    try:
        rng = np.random.default_rng(seed)
        ours.seed(seed)
        reference.seed(seed)
        assert_same_value(ours.reset(), reference.reset(), "reset obs")
        assert_same_infos(ours.reset_infos, reference.reset_infos, "reset infos")
        counts = {"dones": 0, "truncations": 0, "terminations": 0}
        for t in range(steps):
            space: Any = ours.action_space
            if isinstance(space, gym.spaces.Discrete):
                actions = rng.integers(0, int(space.n), len(fns))
            else:
                shape = (len(fns), *space.shape)
                actions = rng.uniform(space.low, space.high, shape).astype(space.dtype)
            obs, rewards, dones, infos = ours.step(actions)
            ref_obs, ref_rewards, ref_dones, ref_infos = reference.step(actions)
            assert_same_value(obs, ref_obs, f"obs at step {t}")
            assert_same_value(rewards, ref_rewards, f"rewards at step {t}")
            assert_same_value(dones, ref_dones, f"dones at step {t}")
            assert rewards.dtype == np.float32
            assert dones.dtype == np.bool_
            assert_same_infos(infos, ref_infos, f"infos at step {t}")
            assert_same_infos(ours.reset_infos, reference.reset_infos, f"resets {t}")
            for info in infos:
                if "terminal_observation" in info:
                    counts["dones"] += 1
                    truncated = info["TimeLimit.truncated"]
                    counts["truncations" if truncated else "terminations"] += 1
        return counts
    finally:
        reference.close()


@pytest.mark.parametrize("kind", ["vecpool", "sync", "gym-async", "wrapped"])
@pytest.mark.parametrize("mode", [SAME, DISABLED], ids=["same_step", "disabled"])
def test_cartpole_rollout_equals_dummy_vec_env(kind, mode, closing):
    fns = cartpole_fns(4)
    env = SB3VecEnv(vector(kind, fns, mode))
    closing(env)
    assert env.num_envs == 4
    assert env.observation_space == fns[0]().observation_space
    assert env.action_space == gym.spaces.Discrete(2)
    counts = rollout_against_dummy(env, fns, 200)
    # 20-step time limit: both kinds of episode end happen
    assert counts["truncations"] > 5
    assert counts["terminations"] > 5


@pytest.mark.parametrize("obs_kind", ["dict", "tuple", "box", "image", "discrete"])
@pytest.mark.parametrize("mode", [SAME, DISABLED], ids=["same_step", "disabled"])
def test_counting_env_rollout_with_infos_equals_dummy_vec_env(obs_kind, mode, closing):
    # step infos (ints and arrays) on some steps, reset infos on some resets
    fns = make_env_fns(3, obs_kind=obs_kind, max_steps=7, terminate_prob=0.1)
    env = SB3VecEnv(vector("vecpool-in-process", fns, mode))
    closing(env)
    counts = rollout_against_dummy(env, fns, 120)
    assert counts["truncations"] > 3
    assert counts["terminations"] > 3


def test_dict_observations_are_a_dict_of_batched_arrays(closing):
    fns = make_env_fns(2, obs_kind="dict")
    env = SB3VecEnv(vector("vecpool-in-process", fns, SAME))
    closing(env)
    assert isinstance(env.observation_space, gym.spaces.Dict)
    obs = env.reset()
    assert isinstance(obs, dict)
    assert sorted(obs) == ["count", "position"]
    assert obs["position"].shape == (2, 3)


def test_observations_are_copies_the_vector_env_cannot_overwrite(closing):
    fns = cartpole_fns(2)
    inner = vecpool.AsyncVectorEnv(fns, num_workers=0, autoreset_mode=SAME, copy=False)
    env = SB3VecEnv(inner)
    closing(env)
    first: Any = env.reset()
    kept = first.copy()
    env.step(np.zeros(2, dtype=np.int64))
    np.testing.assert_array_equal(first, kept)


@pytest.mark.parametrize("kind", ["vecpool", "sync"])
def test_next_step_mode_is_refused_with_the_fix(kind, closing):
    inner = vector(kind, cartpole_fns(2), NEXT)
    closing(inner)
    with pytest.raises(ValueError, match=r"autoreset_mode=AutoresetMode\.SAME_STEP"):
        SB3VecEnv(inner)


def test_an_undeclared_autoreset_mode_is_refused(closing):
    inner = SyncVectorEnv(cartpole_fns(2), autoreset_mode=SAME)
    closing(inner)
    del inner.metadata["autoreset_mode"]
    with pytest.raises(ValueError, match="declares no metadata"):
        SB3VecEnv(inner)


def test_seed_applies_at_the_next_reset_only(closing):
    env = SB3VecEnv(vector("vecpool-in-process", cartpole_fns(3), SAME))
    closing(env)
    assert env.seed(11) == [11, 12, 13]
    first: Any = env.reset()
    env.seed(11)
    again: Any = env.reset()
    np.testing.assert_array_equal(again, first)
    # seeds are used once: the next reset draws on from the seeded generators
    later: Any = env.reset()
    assert not np.array_equal(later, first)
    reference = DummyVecEnv(cartpole_fns(3))
    reference.seed(11)
    np.testing.assert_array_equal(reference.reset(), first)
    reference.close()


def test_options_apply_at_the_next_reset(closing):
    env = SB3VecEnv(vector("vecpool-in-process", make_env_fns(2), SAME))
    closing(env)
    env.set_options({"b": 1, "a": 2})
    env.reset()
    assert [info["option_keys"] for info in env.reset_infos] == ["a,b", "a,b"]
    env.reset()
    assert all("option_keys" not in info for info in env.reset_infos)
    env.set_options([{"a": 1}, {"b": 1}])
    with pytest.raises(ValueError, match="one options dict"):
        env.reset()


@pytest.mark.parametrize("kind", ["vecpool", "sync", "wrapped"])
def test_attributes_and_methods_with_indices(kind, closing):
    fns = make_env_fns(3, max_steps=50)
    env = SB3VecEnv(vector(kind, fns, SAME))
    closing(env)
    reference = DummyVecEnv(fns)
    closing(reference)
    for venv in (env, reference):
        venv.seed(0)
        venv.reset()
        venv.set_attr("reward_scale", 3.0, indices=1)
        venv.set_attr("obs_bound", 5.0)
        venv.step(np.array([0, 1, 2]))
    for name in ("reward_scale", "obs_bound", "steps_taken", "render_mode"):
        assert env.get_attr(name) == reference.get_attr(name), name
    assert env.get_attr("reward_scale") == [1.0, 3.0, 1.0]
    assert env.get_attr("steps_taken", indices=[2, 0]) == [1, 1]
    assert env.get_attr("reward_scale", indices=1) == [3.0]
    assert env.env_method("get_wrapper_attr", "max_steps", indices=[0, 2]) == [50, 50]
    assert env.env_method("get_wrapper_attr", name="obs_kind") == ["box"] * 3
    assert env.has_attr("reward_scale")
    if kind == "sync":  # a worker that fails a call logs an error and stops
        assert not env.has_attr("no_such_attribute")
    obs, rewards, _, _ = env.step(np.array([2, 2, 2]))
    ref_obs, ref_rewards, _, _ = reference.step(np.array([2, 2, 2]))
    np.testing.assert_array_equal(rewards, ref_rewards)
    np.testing.assert_array_equal(obs, ref_obs)


def test_env_method_on_a_sync_vector_env_calls_only_the_chosen_envs(closing):
    env = SB3VecEnv(vector("sync", make_env_fns(3), SAME))
    closing(env)
    env.reset()
    env.env_method("reset", indices=[1])
    assert env.get_attr("resets_taken") == [1, 2, 1]


@pytest.mark.parametrize("kind", ["vecpool", "sync", "gym-async"])
def test_env_is_wrapped(kind, closing):
    fns = [monitored_cartpole, cartpole]
    env = SB3VecEnv(vector(kind, fns, SAME))
    closing(env)
    assert env.env_is_wrapped(Monitor) == [True, False]
    assert env.env_is_wrapped(Monitor, indices=[1]) == [False]
    assert env.env_is_wrapped(gym.wrappers.TimeLimit) == [True, True]
    assert env.env_is_wrapped(gym.wrappers.RecordVideo) == [False, False]


@pytest.mark.parametrize("kind", ["vecpool", "sync"])
def test_render_tiles_rgb_array_frames_like_dummy_vec_env(kind, closing):
    fns = make_env_fns(3, obs_kind="image", render_mode="rgb_array")
    env = SB3VecEnv(vector(kind, fns, SAME))
    closing(env)
    reference = DummyVecEnv(fns)
    closing(reference)
    for venv in (env, reference):
        venv.seed(1)
        venv.reset()
    assert env.render_mode == "rgb_array"
    assert env.metadata["render_modes"] == ["human", "rgb_array"]
    frame = env.render()
    assert isinstance(frame, np.ndarray)
    assert frame.ndim == 3
    np.testing.assert_array_equal(frame, reference.render())
    assert len(env.get_images()) == 3


def test_render_without_rgb_array_warns_like_dummy_vec_env(closing):
    env = SB3VecEnv(vector("vecpool-in-process", make_env_fns(2), SAME))
    closing(env)
    assert env.render_mode is None
    with pytest.warns(UserWarning, match="no `render_mode`"):
        assert env.render() is None
    with pytest.warns(UserWarning, match="assumes it is `rgb_array`"):
        assert env.get_images() == [None, None]


def test_close_closes_the_vector_env():
    inner = vecpool.AsyncVectorEnv(cartpole_fns(2), num_workers=1, autoreset_mode=SAME)
    env = SB3VecEnv(inner)
    env.reset()
    env.close()
    assert inner.closed


def test_step_async_then_step_wait(closing):
    env = SB3VecEnv(vector("vecpool", cartpole_fns(2), SAME))
    closing(env)
    env.reset()
    env.step_async(np.array([0, 1]))
    obs: Any
    obs, rewards, _, infos = env.step_wait()
    assert obs.shape == (2, 4)
    assert list(rewards) == [1.0, 1.0]
    assert len(infos) == 2


@pytest.mark.parametrize("policy", ["MlpPolicy", "MultiInputPolicy"])
def test_ppo_learns_a_few_steps(policy, closing):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    if policy == "MlpPolicy":
        fns = cartpole_fns(4)
    else:
        fns = make_env_fns(4, obs_kind="dict", action_kind="box")
    env = SB3VecEnv(vector("vecpool", fns, SAME))
    closing(env)
    model = PPO(
        policy, env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu"
    )
    model.learn(256)
    assert model.num_timesteps >= 256


def test_importing_the_package_does_not_import_sb3():
    code = (
        "import sys, vecpool.integrations; "
        "assert 'stable_baselines3' not in sys.modules; "
        "assert 'vecpool.integrations.sb3' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_sb3_says_which_extra_to_install():
    code = (
        "import sys; sys.modules['stable_baselines3'] = None\n"
        "try:\n"
        "    import vecpool.integrations.sb3\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert 'pip install "vecpool[sb3]"' in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ppo_solves_cartpole_through_vecpool(closing):
    """PPO (rl-zoo's CartPole settings) over 8 vecpool envs: return >= 150 in 50k."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    fns = [monitored_cartpole] * 8
    env = SB3VecEnv(vecpool.AsyncVectorEnv(fns, num_workers=2, autoreset_mode=SAME))
    closing(env)
    eval_env = SB3VecEnv(
        vecpool.AsyncVectorEnv(fns[:4], num_workers=1, autoreset_mode=SAME)
    )
    closing(eval_env)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        seed=0,
        device="cpu",
    )
    start = time.perf_counter()
    model.learn(50_000)
    seconds = time.perf_counter() - start
    assert model.ep_info_buffer is not None
    train_return = float(np.mean([info["r"] for info in model.ep_info_buffer]))
    mean_return, std_return = evaluate_policy(model, eval_env, n_eval_episodes=20)
    assert isinstance(mean_return, float)
    print(  # noqa: T201 - the figure the docs quote
        f"PPO CartPole-v1, 8 vecpool envs: {model.num_timesteps} steps in "
        f"{seconds:.1f} s; mean return {mean_return:.1f} +- {std_return:.1f} "
        f"(evaluation, 20 episodes), {train_return:.1f} (last 100 training episodes)"
    )
    assert mean_return >= 150


def test_vec_env_is_an_sb3_vec_env(closing):
    env = SB3VecEnv(vector("vecpool-in-process", cartpole_fns(2), SAME))
    closing(env)
    assert isinstance(env, VecEnv)
    assert env.unwrapped is env
    assert env.autoreset_mode is SAME


# ------------------------------------------------------- SB3's make_vec_env


def _make_vec_env(vec_env_cls: Any, n_envs: int = 4, **kwargs: Any) -> VecEnv:
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(
        "CartPole-v1", n_envs=n_envs, seed=3, vec_env_cls=vec_env_cls, **kwargs
    )


@pytest.mark.parametrize(
    "vec_env_kwargs",
    [None, {"start_method": "forkserver"}, {"num_workers": 0}],
    ids=["default", "forkserver", "in-process"],
)
def test_make_vec_env_with_sb3_vec_env_steps_as_dummy_vec_env(vec_env_kwargs, closing):
    # issue 23, item 1: SB3's convention raised "'list' object has no attribute
    # 'metadata'"
    ours = _make_vec_env(SB3VecEnv, vec_env_kwargs=vec_env_kwargs)
    closing(ours)
    assert isinstance(ours, SB3VecEnv)  # make_vec_env is typed as a plain VecEnv
    assert isinstance(ours.vector_env, vecpool.AsyncVectorEnv)
    assert ours.vector_env.metadata["autoreset_mode"] is SAME
    reference = _make_vec_env(DummyVecEnv)
    closing(reference)
    rng = np.random.default_rng(0)
    assert_same_value(ours.reset(), reference.reset(), "reset obs")
    for t in range(300):
        actions = rng.integers(0, 2, 4)
        got, expected = ours.step(actions), reference.step(actions)
        for name, a, b in zip(("obs", "rewards", "dones"), got, expected, strict=False):
            assert_same_value(a, b, f"{name} at step {t}")
        assert_same_infos(_timeless(got[3]), _timeless(expected[3]), f"infos {t}")


def _timeless(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Infos without Monitor's wall-clock ``episode['t']``."""
    return [
        {**info, "episode": {k: v for k, v in info["episode"].items() if k != "t"}}
        if "episode" in info
        else info
        for info in infos
    ]


@pytest.mark.filterwarnings(
    "ignore:The environment is already wrapped with a `Monitor`"
)
def test_sb3_wrappers_stack_on_make_vec_env_output(closing):
    from stable_baselines3.common.vec_env import VecFrameStack, VecMonitor, VecNormalize

    def stacked(cls: Any) -> VecEnv:
        env = VecFrameStack(VecNormalize(VecMonitor(_make_vec_env(cls))), n_stack=2)
        closing(env)
        return env

    ours, reference = stacked(SB3VecEnv), stacked(DummyVecEnv)
    rng = np.random.default_rng(1)
    np.testing.assert_array_equal(ours.reset(), reference.reset())
    for t in range(200):
        actions = rng.integers(0, 2, 4)
        got, expected = ours.step(actions), reference.step(actions)
        for name, a, b in zip(("obs", "rewards", "dones"), got, expected, strict=False):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} at step {t}")
        for a, b in zip(_timeless(got[3]), _timeless(expected[3]), strict=True):
            assert a.get("episode") == b.get("episode")


def test_ppo_on_make_vec_env_learns_as_with_dummy_vec_env(closing):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    weights = []
    for cls in (SB3VecEnv, DummyVecEnv):
        env = _make_vec_env(cls)
        closing(env)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=64,
            batch_size=64,
            n_epochs=2,
            seed=0,
            device="cpu",
        )
        model.learn(512)
        weights.append([p.detach().clone() for p in model.policy.parameters()])
    for ours, reference in zip(*weights, strict=True):
        assert torch.equal(ours, reference)  # the same data, so the same updates


def test_arguments_with_a_ready_vector_env_are_refused(closing):
    env = vecpool.AsyncVectorEnv(cartpole_fns(2), autoreset_mode=SAME)
    closing(env)
    with pytest.raises(TypeError, match="start_method, num_workers with a ready"):
        SB3VecEnv(env, start_method="spawn", num_workers=1)
