"""TorchRL's GymWrapper over vecpool: the mode it needs, the same data as over Sync.

Importing torchrl sets multiprocessing's start method to ``spawn`` for the whole
process, so each check runs in its own interpreter (the rest of the suite keeps its
start method).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

if importlib.util.find_spec("torchrl") is None:
    pytest.skip("torchrl is not installed", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)


def _run(code: str, tmp_path) -> str:
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(code))
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_rollout_over_vecpool_equals_one_over_sync(tmp_path):
    out = _run(
        """
        import functools
        import gymnasium as gym
        import torch
        from gymnasium.vector import AutoresetMode
        from torchrl.envs.libs.gym import GymWrapper
        from vecpool.integrations.torchrl import make_env

        def rollout(env):
            env.set_seed(3)
            torch.manual_seed(3)
            return env.rollout(60, break_when_any_done=False)

        if __name__ == "__main__":
            fns = [functools.partial(gym.make, "CartPole-v1")] * 4
            ours = make_env(fns, num_workers=2)
            theirs = GymWrapper(
                gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
            )
            a, b = rollout(ours), rollout(theirs)
            assert a.batch_size == b.batch_size == torch.Size([4, 60])
            for key in ("observation", ("next", "observation"), ("next", "reward"),
                        ("next", "terminated"), ("next", "truncated"), "action"):
                assert torch.equal(a[key], b[key]), key
            assert a["next", "done"].any()  # episodes ended and were reset
            ours.close()
            theirs.close()
            print("equal")
        """,
        tmp_path,
    )
    assert "equal" in out


def test_next_step_is_refused_with_the_fix(tmp_path):
    out = _run(
        """
        import functools
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode
        from vecpool.integrations.torchrl import make_env

        if __name__ == "__main__":
            fns = [functools.partial(gym.make, "CartPole-v1")] * 2
            try:
                make_env(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
            except ValueError as error:
                assert "autoreset_mode=AutoresetMode.DISABLED" in str(error)
                print("refused")
            env = make_env(fns, autoreset_mode=AutoresetMode.SAME_STEP)
            assert env.rollout(5).batch_size[0] == 2
            env.close()
        """,
        tmp_path,
    )
    assert "refused" in out
