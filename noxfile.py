"""nox sessions. They run in the project's .venv (``nox --no-venv``; ``make test`` does this)."""

from __future__ import annotations

import os
import sys

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests", "slow", "notebooks"]
ARTIFACTS = os.path.join(".nox-artifacts")
PY = sys.executable  # the .venv interpreter nox runs in: tools come from there, not from PATH


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the package, plugins, tests and scripts."""
    paths = ["src", "plugins", "tests", "noxfile.py", "examples", "benchmarks", "scripts"]
    session.run(PY, "-m", "ruff", "check", *paths)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the core package and the built-in plugins."""
    session.run(
        PY,
        "-m",
        "mypy",
        "src/metatrain",
        "plugins/metatrain-families/src",
        "plugins/metatrain-reward/src",
        "plugins/metatrain-runpod/src",
        "plugins/metatrain-tinker/src",
    )


@nox.session
def tests(session: nox.Session) -> None:
    """Fast tests (no model loading)."""
    session.run(PY, "-m", "pytest", "-q", "-m", "not slow and not e2e", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """Real-model tests: model preparation, a tiny TRL run, a full CPU episode (writes the run the
    notebooks session opens)."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    session.run(
        PY,
        "-m",
        "pytest",
        "-q",
        "-m",
        "slow",
        *session.posargs,
        env={"METATRAIN_TEST_ARTIFACTS": os.path.abspath(ARTIFACTS)},
    )


@nox.session
def e2e(session: nox.Session) -> None:
    """Real-model end-to-end runs too long for CI (``make test-e2e``): one job bundle through the local
    provider and the emulated Runpod fleet."""
    session.run(PY, "-m", "pytest", "-q", "-m", "e2e", *session.posargs)


@nox.session
def notebooks(session: nox.Session) -> None:
    """Execute notebooks/explore_episode.ipynb against the episode the slow session produced."""
    run_dir_file = os.path.join(ARTIFACTS, "episode_run_dir.txt")
    if not os.path.exists(run_dir_file):
        session.error(f"{run_dir_file} is missing: run the slow session first")
    with open(run_dir_file) as fh:
        run_dir = fh.read().strip()
    session.run(
        PY,
        "-m",
        "metatrain.analysis.notebook",
        "notebooks/explore_episode.ipynb",
        run_dir,
        os.path.join(ARTIFACTS, "explore_episode.executed.ipynb"),
    )
