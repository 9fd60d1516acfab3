"""What a runner reports in ``/health`` as ``versions``: the packages that make pods replicas.

``prime-rl`` is a commit, not a distribution: read from the checkout at ``METATRAIN_PRIME_RL_DIR``
(the pod bootstrap's clone), else taken from ``METATRAIN_PRIME_RL_COMMIT`` (which the bootstrap
exports); absent when neither is set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("metatrain", "verifiers", "trl", "transformers", "torch")
PRIME_RL = "prime-rl"
PRIME_RL_DIR_ENV = "METATRAIN_PRIME_RL_DIR"
PRIME_RL_COMMIT_ENV = "METATRAIN_PRIME_RL_COMMIT"
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def git_head(repo: Path) -> str | None:
    """The commit checked out in ``repo``, read from its ``.git`` files; None if unreadable."""
    git_dir = repo / ".git"
    try:
        if git_dir.is_file():  # a worktree or submodule: "gitdir: <path>"
            pointer = git_dir.read_text().strip().removeprefix("gitdir:").strip()
            git_dir = (repo / pointer).resolve()
        head = (git_dir / "HEAD").read_text().strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head if _FULL_SHA.match(head) else None
    ref = head.removeprefix("ref:").strip()
    try:
        sha = (git_dir / ref).read_text().strip()
        return sha if _FULL_SHA.match(sha) else None
    except OSError:
        pass
    try:
        packed = (git_dir / "packed-refs").read_text().splitlines()
    except OSError:
        return None
    for line in packed:
        sha, _, name = line.partition(" ")
        if name == ref and _FULL_SHA.match(sha):
            return sha
    return None


def prime_rl_commit(environ: Mapping[str, str]) -> str | None:
    """The prime-rl commit this machine runs: its checkout's HEAD, else the bootstrap's exported pin."""
    directory = environ.get(PRIME_RL_DIR_ENV)
    if directory:
        head = git_head(Path(directory))
        if head is not None:
            return head
    commit = environ.get(PRIME_RL_COMMIT_ENV, "").strip().lower()
    return commit if _SHA.match(commit) else None


def runner_versions(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Installed versions of ``PACKAGES`` and the prime-rl commit, leaving out what is not there."""
    import metatrain

    found: dict[str, str] = {"metatrain": metatrain.__version__}
    for name in PACKAGES[1:]:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    commit = prime_rl_commit(os.environ if environ is None else environ)
    if commit is not None:
        found[PRIME_RL] = commit
    return found


def version_matches(name: str, pinned: str, reported: str) -> bool:
    """Does ``reported`` satisfy the pin? prime-rl: one commit is a prefix (≥7 hex) of the other;
    packages: equal, or equal once a local build tag (``+cu128``) is dropped from the report."""
    if name == PRIME_RL:
        short, long = sorted((pinned.lower(), reported.lower()), key=len)
        return len(short) >= 7 and long.startswith(short)
    return reported == pinned or ("+" not in pinned and reported.split("+", 1)[0] == pinned)


def mismatches(pins: Mapping[str, str], reported: Mapping[str, str]) -> list[str]:
    """One line per pin the report does not satisfy, e.g. ``verifiers 0.1.14 (pinned 0.2.1)``."""
    out = []
    for name, pinned in pins.items():
        got = reported.get(name)
        if got is None:
            out.append(f"{name} not reported (pinned {pinned})")
        elif not version_matches(name, pinned, got):
            out.append(f"{name} {got} (pinned {pinned})")
    return out
