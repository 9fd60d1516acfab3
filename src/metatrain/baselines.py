"""Frozen baselines: each untrained allowed model's score on a family's hidden eval.

The file is versioned by family version and keyed by the hidden eval's hash; a stale file is an
error (``StaleBaselinesError``), never a silent fallback.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from metatrain.protocols import TaskFamily
from metatrain.specs import Example


class StaleBaselinesError(Exception):
    """Baselines are missing or were computed for another family version or eval set."""


class BaselineEntry(BaseModel):
    score: float
    n: int
    ci95: tuple[float, float]
    device: str
    seconds: float
    dtype: str | None = None
    """The weights' dtype while decoding; entries seeded before 2026-12-07 lack it and decoded in
    ``eval_dtype(budget, device)`` as it was then (bfloat16 for ``full`` on CUDA, else float32)."""
    command: str | None = None
    """The command that computed this entry (entries seeded before 2026-12-06 lack it; the file's
    ``command`` is then the last writer's, and docs/families.md lists the rest)."""
    created_at: datetime | None = None


class BudgetBaselines(BaseModel):
    eval_hash: str
    n: int
    models: dict[str, BaselineEntry] = Field(default_factory=dict)


class BaselinesFile(BaseModel):
    family: str
    version: str
    command: str
    """The last command that wrote to the file; each entry keeps its own."""
    created_at: datetime
    budgets: dict[str, BudgetBaselines] = Field(default_factory=dict)


def eval_hash(examples: list[Example]) -> str:
    """sha256 over the canonical JSON of the eval examples."""
    blob = json.dumps([e.model_dump() for e in examples], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def read_file(path: Path) -> BaselinesFile | None:
    return BaselinesFile.model_validate_json(path.read_text()) if path.exists() else None


def load_baselines(family: TaskFamily, budget: str, models: list[str] | None = None) -> BudgetBaselines:
    """The family's frozen baselines for ``budget``, checked against the current eval."""
    regen = f"metatrain seed-baselines --family {family.name} --budget {budget}"
    data = read_file(family.baselines_path())
    if data is None:
        raise StaleBaselinesError(f"no baselines file for {family.name}; run: {regen}")
    if data.version != family.version:
        raise StaleBaselinesError(
            f"baselines for {family.name} are for version {data.version}, the family is {family.version}; "
            f"run: {regen}"
        )
    entry = data.budgets.get(budget)
    if entry is None:
        raise StaleBaselinesError(f"no {budget!r} baselines for {family.name}; run: {regen}")
    current = eval_hash(family.hidden_eval(budget))
    if entry.eval_hash != current:
        raise StaleBaselinesError(
            f"{family.name} {budget} baselines were computed on another hidden eval "
            f"(hash {entry.eval_hash[:12]} != {current[:12]}); run: {regen}"
        )
    missing = [m for m in models or [] if m not in entry.models]
    if missing:
        raise StaleBaselinesError(f"{family.name} {budget} baselines lack models {missing}; run: {regen}")
    return entry


def best_pre(entry: BudgetBaselines, models: list[str]) -> float:
    """The best untrained score among the allowed models."""
    return max(entry.models[m].score for m in models)


@contextlib.contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` for the block."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_entry(
    path: Path,
    family: TaskFamily,
    budget: str,
    model: str,
    result: BaselineEntry,
    eval_hash_: str,
    command: str,
) -> BaselinesFile:
    """Insert or replace one model's baseline, atomically rewriting the file.

    Holds an exclusive lock on the file's folder, so seeding runs for several models in parallel
    (one ``--models`` each) do not lose each other's entries.
    """
    with _folder_locked(path.parent):
        data = read_file(path)
        if data is None or data.version != family.version:
            data = BaselinesFile(
                family=family.name,
                version=family.version,
                command=command,
                created_at=datetime.now().astimezone(),
            )
        budget_entry = data.budgets.get(budget)
        if budget_entry is None or budget_entry.eval_hash != eval_hash_:
            budget_entry = BudgetBaselines(eval_hash=eval_hash_, n=result.n)
        now = datetime.now().astimezone()
        budget_entry.models[model] = result.model_copy(update={"command": command, "created_at": now})
        data.budgets[budget] = budget_entry
        data.command = command
        data.created_at = now
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(data.model_dump_json(indent=2) + "\n")
        tmp.replace(path)
        return data
