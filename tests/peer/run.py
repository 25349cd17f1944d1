"""Run Gymnasium's own vector tests against ``vecpool.AsyncVectorEnv``.

Usage (``nox -s peer`` calls this in its own venv)::

    GYM_GIT_DIR=/path/to/Gymnasium.git python tests/peer/run.py [pytest args...]

Gymnasium's ``tests/`` tree is not in its PyPI release, so it comes from one of:

``GYM_TESTS_SRC``
    a directory that contains Gymnasium's ``tests/`` (e.g. a checkout);
``GYM_GIT_DIR``
    a Gymnasium git dir; ``tests/`` is exported at ``GYM_REF`` if set, else at the
    tag ``v<installed gymnasium version>``, else at the commit "Update to
    v<version>", else at HEAD.

Only ``tests/`` is copied (into a temporary directory), so the *installed* gymnasium is
the one under test. ``swap_plugin.py`` (next to this file, loaded with ``-p``) rebinds
``gymnasium.vector.AsyncVectorEnv`` to ours. Other settings: ``GYM_TEST_PATHS``
(space-separated, relative to the temp root), ``INCLUDE_SYNC=1``, ``PER_TEST_TIMEOUT``
(default 300 s), ``TOTAL_TIMEOUT`` (default 3600 s), ``KEEP=1`` (keep the temp dir).

The last line printed is ``N passed, M failed`` (M counts failures and errors); the exit
status is pytest's.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent
DEFAULT_TEST_PATHS = [
    "tests/vector/test_async_vector_env.py",
    "tests/vector/test_autoreset_mode.py",
    "tests/vector/test_observation_mode.py",
    "tests/vector/test_vector_env.py",
    "tests/vector/test_vector_env_info.py",
    "tests/envs/registration/test_make_vec.py",
]
# Gymnasium's own [tool.pytest.ini_options] filter
PYTEST_INI = """\
[pytest]
filterwarnings =
    ignore::DeprecationWarning:gymnasium.*:
"""
SUMMARY_WORDS = re.compile(r"\b(passed|failed|errors?|no tests ran)\b")
SUMMARY_COUNT = re.compile(
    r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)"
)


class PeerSetupError(Exception):
    """The peer run can't start: no tests source, a bad ref, a missing tool."""


def _git(git_dir: str, *args: str) -> str:
    result = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else ""


def resolve_ref(git_dir: str, version: str) -> str:
    """The Gymnasium ref whose ``tests/`` match the installed ``version``."""
    explicit = os.environ.get("GYM_REF")
    if explicit:
        return explicit
    if _git(git_dir, "rev-parse", "-q", "--verify", f"refs/tags/v{version}"):
        return f"v{version}"
    release_commit = _git(
        git_dir,
        "log",
        "--format=%H",
        "-1",
        f"--grep=^Update to v\\?{re.escape(version)}\\b",
        "HEAD",
    )
    return release_commit or "HEAD"


def export_tests(root: Path, version: str) -> str:
    """Put Gymnasium's ``tests/`` under ``root``; return where they came from."""
    source = os.environ.get("GYM_TESTS_SRC")
    if source:
        tests = Path(source).expanduser() / "tests"
        if not tests.is_dir():
            message = f"GYM_TESTS_SRC={source}: no tests/ directory there"
            raise PeerSetupError(message)
        shutil.copytree(tests, root / "tests")
        return source
    git_dir = os.environ.get("GYM_GIT_DIR")
    if not git_dir:
        message = (
            "set GYM_GIT_DIR (a Gymnasium git dir) or GYM_TESTS_SRC "
            "(a directory containing Gymnasium's tests/)"
        )
        raise PeerSetupError(message)
    ref = resolve_ref(git_dir, version)
    # archive only tests/: whole-tree archives can fail on absent LFS blobs
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", ref, "tests"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        stderr = archive.stderr.decode(errors="replace").strip()
        message = f"`git archive {ref} tests` in {git_dir} failed: {stderr}"
        raise PeerSetupError(message)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12
            tar.extractall(root, filter="data")
        else:  # pragma: no cover - old patch releases
            tar.extractall(root)  # our own git export of tests/
    short = _git(git_dir, "rev-parse", "--short", f"{ref}^{{commit}}")
    return f"{git_dir} @ {short} ({ref})"


def run_pytest(root: Path, source: str, extra: list[str]) -> tuple[int, str]:
    """Run pytest in ``root`` with the swap plugin, echoing and returning its output."""
    paths = os.environ.get("GYM_TEST_PATHS", " ".join(DEFAULT_TEST_PATHS)).split()
    timeout_args = []
    if importlib.util.find_spec("pytest_timeout") is not None:
        timeout_args = [f"--timeout={os.environ.get('PER_TEST_TIMEOUT', '300')}"]
    pythonpath = os.pathsep.join(
        part for part in (str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")) if part
    )
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "PYGAME_HIDE_SUPPORT_PROMPT": "1",
        "VECPOOL_PEER_SOURCE": source,
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "swap_plugin",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        *timeout_args,
        *paths,
        *extra,
    ]
    output: list[str] = []
    with subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as process:
        watchdog = threading.Timer(
            float(os.environ.get("TOTAL_TIMEOUT", "3600")), process.kill
        )
        watchdog.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                output.append(line)
        finally:
            watchdog.cancel()
    return process.returncode, "".join(output)


def summarize(output: str) -> tuple[int, int]:
    """``(passed, failed + errors)`` from pytest's last summary line."""
    summaries = [
        line
        for line in output.splitlines()
        if SUMMARY_WORDS.search(line) and " in " in line
    ]
    counts: dict[str, int] = {}
    if summaries:
        for number, word in SUMMARY_COUNT.findall(summaries[-1]):
            counts["error" if word.startswith("error") else word] = int(number)
    return counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0)


def main(argv: list[str]) -> int:
    """Export the tests, run them with vecpool swapped in, print the counts."""
    version = importlib.metadata.version("gymnasium")
    work = Path(tempfile.mkdtemp(prefix="vecpool-peer-"))
    try:
        root = work / "root"
        root.mkdir()
        try:
            source = export_tests(root, version)
        except PeerSetupError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        (root / "pytest.ini").write_text(PYTEST_INI)
        print(f"gymnasium {version} | tests from {source} | python {sys.executable}")
        returncode, output = run_pytest(root, source, argv)
    finally:
        if os.environ.get("KEEP") == "1":
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    passed, failed = summarize(output)
    if returncode != 0 and passed + failed == 0:
        print(f"note: pytest exited with {returncode} and ran nothing (see above)")
    print(f"{passed} passed, {failed} failed")
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
