# /// script
# requires-python = ">=3.10"
# dependencies = ["nox>=2025.2.9"]
# ///
"""Nox sessions for vecpool; `nox --list` shows them (CONTRIBUTING.md explains each)."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"  # nox.project.dependency_groups
nox.options.default_venv_backend = "uv|virtualenv"  # virtualenv when uv is missing

ROOT = Path(__file__).resolve().parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
PYTHON_SOURCES = [
    "vecpool",
    "tests",
    "examples",
    "noxfile.py",
    "docs/conf.py",
    "docs/figures",
]
PEER_RUNNER = ROOT / "tests" / "peer" / "run.py"

# Every session reuses the interpreter that runs nox (`python=None`): CI has
# a single python3. Pick another with e.g. `nox -s tests --force-python 3.12`.
PYTHON = None

GYM_TESTS_HELP = """\
Gymnasium's own tests/ are not in its PyPI release, so `peer` needs a copy of its repo:
  git clone --bare https://github.com/Farama-Foundation/Gymnasium.git /tmp/gym.git
  GYM_GIT_DIR=/tmp/gym.git nox -s peer
or point GYM_TESTS_SRC at a Gymnasium checkout (the directory containing tests/)"""


def install_project(session: nox.Session, *extra: str) -> None:
    """Install vecpool itself (a real wheel install, never editable) plus ``extra``."""
    # uv may reuse a cached build of an unchanged version number; pip always rebuilds
    # a local directory.
    reinstall = (
        ["--reinstall-package", "vecpool"] if session.venv_backend == "uv" else []
    )
    session.install(*reinstall, ".", *extra)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite against an installed (non-editable) vecpool."""
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "test"))
    # the `pytest` script (not `python -m pytest`) keeps the checkout off sys.path
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON, default=False)
def forkserver(session: nox.Session) -> None:
    """Run the engine behaviours and the differential tests under ``forkserver``.

    Python 3.14 makes ``forkserver`` Linux's default start method: a vector env
    built without ``context`` then pickles its env fns to the forkserver, which
    starts each worker from a fresh interpreter. ``VECPOOL_START_METHOD`` makes it
    the default in tests/conftest.py for the tests marked ``start_methods``: every
    test over the ``placement`` fixture, and tests/conformance/test_differential.py.
    """
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run(
        "pytest",
        "-m",
        "start_methods",
        *session.posargs,
        env={"VECPOOL_START_METHOD": "forkserver"},
    )


# torch is pinned (a CPU wheel; torchrl needs a matching torch and tensordict)
INTEGRATIONS = [
    "torch==2.13.0",
    "torchrl==0.14.1",
    "tensordict>=0.14.3,<0.15",
    "minigrid",  # tests/third_party/test_minigrid.py
]


@nox.session(python=PYTHON, default=False)
def integrations(session: nox.Session) -> None:
    """Run tests/third_party with Stable-Baselines3, TorchRL, Minari and MiniGrid.

    The default ``tests`` session skips those tests cleanly where the libraries are
    absent; this one installs them (the ``sb3`` and ``minari`` extras, torch pinned)
    and runs them, the slow SB3 learning test included.
    """
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "test"))
    session.install(".[sb3,minari]", *INTEGRATIONS)
    session.run(
        "pytest", "tests/third_party", "-p", "no:cacheprovider", *session.posargs
    )


# each extra alone in a fresh venv, and the path a user takes with it: pytest
# arguments, or a `vecpool` command line (run in the session's temporary directory)
EXTRAS: dict[str, list[str]] = {
    "plot": ["vecpool", "collect", "CartPole-v1", "--steps", "2000", "--quiet",
             "--out", "pool.npz", "--plot", "collect.png"],
    "bench": ["pytest", "tests/unit/test_bench_atari.py"],
    "mujoco": ["vecpool", "bench", "--quick", "--no-memory", "--quiet",
               "--workloads", "halfcheetah", "--num-envs", "2",
               "--backends", "raw", "vecpool"],
    "sb3": ["pytest", "tests/third_party/test_sb3.py", "-k",
            "make_vec_env or ppo_learns or rollout_equals"],
    "minari": ["pytest", "tests/third_party/test_minari.py"],
    "ray": ["pytest", "tests/distributed/test_ray.py"],
    "torch": ["pytest", "tests/third_party/test_torch_batches.py"],
}  # fmt: skip
PINNED = {  # where torch comes in
    "sb3": ["torch==2.13.0"],
    "ray": ["torch==2.13.0"],
    "torch": ["torch==2.13.0"],
}


@nox.session(python=PYTHON, default=False)
@nox.parametrize("extra", list(EXTRAS))
def extras(session: nox.Session, extra: str) -> None:
    """Install one extra alone (``vecpool[EXTRA]``, no test group) and run its path.

    ``nox -s extras`` runs them all; ``nox -s "extras(extra='minari')"`` one. It
    shows that each extra installs everything its feature needs.
    """
    command = EXTRAS[extra]
    tools = ["pytest>=8", "pytest-timeout"] if command[0] == "pytest" else []
    install_project(session, f".[{extra}]", *PINNED.get(extra, []), *tools)
    if command[0] == "pytest":
        session.run(*command, "-p", "no:cacheprovider", *session.posargs)
    else:
        tmp = session.create_tmp()
        with session.chdir(tmp):
            session.run(*command, *session.posargs)


@nox.session(python=PYTHON, default=False)
def ray(session: nox.Session) -> None:
    """Run the Ray tests (``tests/distributed``) with the ``ray`` extra installed.

    RLlib and torch (pinned) come too, for the zero-code ``gym.make_vec`` check.
    The default ``tests`` session stays Ray-free: those tests skip there.
    """
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "test"))
    session.install(".[ray]", "ray[rllib]", "torch==2.13.0")
    session.run(
        "pytest", "tests/distributed", "-p", "no:cacheprovider", *session.posargs
    )


@nox.session(python=PYTHON, default=False)
def coverage(session: nox.Session) -> None:
    """Run the test suite under coverage, worker processes included, and report.

    Settings live in pyproject.toml's ``[tool.coverage.*]``; positional arguments go
    to pytest.
    """
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "coverage"))
    session.run("coverage", "erase")
    # `coverage run -m pytest` would put the checkout on sys.path; the installed
    # `pytest` script keeps it off, so the installed vecpool is measured
    pytest_script = shutil.which("pytest", path=session.bin)
    if pytest_script is None:
        session.error(f"no pytest script in {session.bin}")
    try:
        session.run("coverage", "run", pytest_script, *session.posargs)
    except nox.command.CommandFailed:
        failed = True  # report what was measured, then fail the session
    else:
        failed = False
    session.run("coverage", "combine")
    session.run("coverage", "report")
    if failed:
        session.error("the test suite failed under coverage (the report is above)")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Check lint rules and formatting with ruff."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", *PYTHON_SOURCES)
    session.run("ruff", "format", "--check", *PYTHON_SOURCES)


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """Type-check the package and the tests with ``mypy --strict``.

    The tests get a lighter override (no ``disallow_untyped_defs``); see
    ``[tool.mypy]`` in pyproject.toml.
    """
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "typecheck"))
    session.run("mypy", "--strict", "vecpool", "tests", *session.posargs)


@nox.session(python=PYTHON, default=False)
def docs(session: nox.Session) -> None:
    """Build the HTML docs, failing on any warning or broken reference.

    Set ``VECPOOL_DOCS_INTERSPHINX=1`` to link to Python/NumPy/Gymnasium docs (needs
    internet access).
    """
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "docs"))
    out = ROOT / "docs" / "_build" / "html"
    shutil.rmtree(out, ignore_errors=True)
    session.run(
        "sphinx-build", "-n", "-W", "--keep-going", "-b", "html", "docs", str(out)
    )


@nox.session(python=PYTHON, default=False)
def peer(session: nox.Session) -> None:
    """Run Gymnasium's own ``tests/vector`` suite with vecpool swapped in.

    Needs ``GYM_GIT_DIR`` (a Gymnasium git dir) or ``GYM_TESTS_SRC`` (a checkout);
    the runner is ``tests/peer/run.py`` (its docstring lists the other settings).
    Positional arguments go to pytest, e.g. ``nox -s peer -- -k reset``.
    """
    if not (os.environ.get("GYM_GIT_DIR") or os.environ.get("GYM_TESTS_SRC")):
        session.skip("neither GYM_GIT_DIR nor GYM_TESTS_SRC is set.\n" + GYM_TESTS_HELP)
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "test"))
    # vecpool's defaults (on 2 CPUs: the parent's share), every env in a worker
    # (parent_envs=0), and the parent stepping half the envs beside one worker
    for placement in ("defaults", "workers", "parent_share"):
        session.run(
            "python",
            str(PEER_RUNNER),
            *session.posargs,
            env={"VECPOOL_PEER_PLACEMENT": placement},
        )


# every minor version pyproject.toml accepts (gymnasium>=1.1), newest patch each
GYMNASIUM_VERSIONS = ["1.1.1", "1.2.3", "1.3.0", "1.4.0"]


@nox.session(python=PYTHON, default=False)
@nox.parametrize("gymnasium", GYMNASIUM_VERSIONS)
def peer_versions(session: nox.Session, gymnasium: str) -> None:
    """Gymnasium's own vector suite at each supported Gymnasium, vecpool swapped in.

    ``nox -s peer_versions`` runs 1.1, 1.2, 1.3 and 1.4 (vecpool's defaults; the
    runner exports the suite at the installed version's tag); ``nox -s peer`` runs
    the newest over three placements. Needs ``GYM_GIT_DIR`` like ``peer``.
    """
    if not (os.environ.get("GYM_GIT_DIR") or os.environ.get("GYM_TESTS_SRC")):
        session.skip("neither GYM_GIT_DIR nor GYM_TESTS_SRC is set.\n" + GYM_TESTS_HELP)
    install_project(session, *nox.project.dependency_groups(PYPROJECT, "test"))
    session.install(f"gymnasium=={gymnasium}")
    session.run(
        "python",
        str(PEER_RUNNER),
        *session.posargs,
        env={"VECPOOL_PEER_PLACEMENT": "defaults"},
    )


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Run ``python -m vecpool bench`` with the positional arguments."""
    install_project(session)
    session.install("matplotlib")  # the `plot` extra, for `--plot`
    session.run("python", "-m", "vecpool", "bench", *session.posargs)


@nox.session(python=PYTHON, default=False)
def build(session: nox.Session) -> None:
    """Build the sdist and wheel, check their metadata and the wheel's contents."""
    session.install("build", "twine")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))
    artifacts = sorted(str(path) for path in dist.iterdir())
    session.run("twine", "check", "--strict", *artifacts)

    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    if "vecpool/py.typed" not in names:
        session.error(f"{wheel.name} does not contain vecpool/py.typed")
    strays = [
        name
        for name in names
        if not name.startswith("vecpool/")
        and not (name.startswith("vecpool-") and ".dist-info/" in name)
    ]
    if strays:
        session.error(f"{wheel.name} contains files outside vecpool/: {strays}")
    session.log(f"{wheel.name}: {len(names)} files, vecpool/py.typed present")


if __name__ == "__main__":
    nox.main()
