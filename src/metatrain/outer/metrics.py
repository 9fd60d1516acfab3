"""Per-episode metrics, reported on the final transition so the cookbook averages them per step.

The cookbook's ``metrics.jsonl`` (one line per training step) carries them as ``env/all/<key>``
(``test/env/all/<key>`` for the holdout arm). Every key is present for every episode (zero-filled), so
a mean is a rate: ``env/all/valid`` is the validation rate, ``env/all/model/<m>`` the share of
episodes that chose model ``m``, ``env/all/config_key/<k>`` the share whose job.toml set key ``k``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metatrain.specs import EpisodeResult, RewardBreakdown
from metatrain.specs.job import TrainingTable
from metatrain.specs.reward import Outcome

OUTCOMES: tuple[Outcome, ...] = ("no_submission", "never_valid", "job_died", "job_failed", "succeeded")
TRAINING_KEYS: tuple[str, ...] = tuple(TrainingTable.model_fields)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL log (``metrics.jsonl``, ``episodes.jsonl``, prime-rl's saved rollouts):
    none if it does not exist yet, a line that does not parse (torn by a kill, even mid-character)
    skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def config_keys_used(run_dir: str | Path) -> set[str]:
    """Training-table keys the agent's final ``job.toml`` sets explicitly (empty if none parses)."""
    path = Path(run_dir) / "workspace" / "job.toml"
    try:
        train = tomllib.loads(path.read_text()).get("train", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return set()
    return {k for k in train if k in TRAINING_KEYS} if isinstance(train, dict) else set()


def episode_metrics(
    result: EpisodeResult | None, reward: RewardBreakdown, models: Iterable[str] = ()
) -> dict[str, float]:
    """Reward and components, validation, job success, model choice and config keys of one episode."""
    chosen = result.model if result is not None and result.validation.valid else None
    used = config_keys_used(result.run_dir) if result is not None else set()
    metrics: dict[str, float] = {
        "episode/reward": reward.total,
        "episode/validation": reward.validation,
        "episode/job_quality": reward.job_quality,
        "episode/train_speed": reward.train_speed,
        "valid": float(result is not None and result.validation.valid),
        "valid_first_try": float(
            result is not None and result.validation.valid and result.validation.attempts == 1
        ),
        "attempts": float(result.validation.attempts if result is not None else reward.attempts),
        "job_succeeded": float(result is not None and result.job.status == "succeeded"),
        "turns": float(result.turns if result is not None else 0),
        "model/none": float(chosen is None),
    }
    if result is not None and result.job.uplift is not None:
        metrics["episode/uplift"] = result.job.uplift
    for outcome in OUTCOMES:
        metrics[f"outcome/{outcome}"] = float(reward.outcome == outcome)
    for model in {*models, *([chosen] if chosen else [])}:
        metrics[f"model/{model}"] = float(model == chosen)
    for key in TRAINING_KEYS:
        metrics[f"config_key/{key}"] = float(key in used)
    return metrics
