"""Hidden-eval seeds. They never reach agent-written code: the sandbox cannot read this package.

``METATRAIN_EVAL_SECRET`` replaces the project's secret (then re-run ``metatrain seed-baselines``:
baselines are keyed by the eval's hash, and stale ones are refused).
"""

from __future__ import annotations

import hashlib
import os

_PROJECT_SECRET = "metatrain-hidden-eval-2026-12:7f3c9e1b5a2d48c6"


def eval_seed(family: str, version: str, budget: str) -> int:
    """A 63-bit seed for one family/version/budget hidden eval."""
    secret = os.environ.get("METATRAIN_EVAL_SECRET") or _PROJECT_SECRET
    digest = hashlib.sha256(f"{secret}|{family}|{version}|{budget}|eval".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
