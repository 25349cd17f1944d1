"""Workers do not outlive their parent, even while an env hangs (issue 22, item 4).

The parent runs in a child interpreter: it starts a vector env whose envs hang in
``step`` (and fork a grandchild of their own), prints the pids, and SIGKILLs
itself. Every worker and grandchild must be gone within a bound (a watchdog, not a
speed claim).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

_PARENT = """
import os, signal, subprocess, sys, time
import gymnasium as gym
import numpy as np
import vecpool

class Hangs(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}
    def step(self, action):
        child = subprocess.Popen(["sleep", "3600"])
        os.write(1, f"grandchild {child.pid}\\n".encode())  # one write: no interleaving
        time.sleep(3600)

if __name__ == "__main__":
    placed = eval(sys.argv[2])  # the placement's keywords, as a dict literal
    env = vecpool.AsyncVectorEnv([Hangs] * 2, context=sys.argv[1], **placed)
    env.reset(seed=0)
    for process in env.processes:
        print("worker", process.pid, flush=True)
    env.step_async(np.zeros(2, np.int64))
    time.sleep(1.0)  # the envs are in their step now
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(
                line.startswith("State:") and "Z" in line.split()[1] for line in status
            )
    except OSError:
        return False


@pytest.mark.needs_worker_process(
    reason="needs a worker process: in-process, no process can outlive the parent"
)
@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_workers_and_their_children_die_with_the_parent(tmp_path, context, placement):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(_PARENT))
    done = subprocess.run(
        [sys.executable, str(script), context, repr(placement.kwargs(2))],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    found = re.findall(r"(worker|grandchild) (\d+)", done.stdout)
    pids = [int(pid) for _, pid in found]
    assert [kind for kind, _ in found].count("worker") == 2, done.stdout
    deadline = time.monotonic() + 20  # a watchdog on the check, not a speed claim
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:  # do not leave them behind, whatever happened
        os.kill(pid, signal.SIGKILL)
    assert left == [], done.stdout
