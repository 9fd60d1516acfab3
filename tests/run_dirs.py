"""A finished episode's run folder as ``metatrain.analysis.uplift`` reads it (result, manifest, job)."""

from __future__ import annotations

import json
from pathlib import Path

from metatrain.specs import EpisodeResult


def write_run_dir(
    root: Path,
    post: float | None = 0.5,
    status: str = "succeeded",
    error: str | None = None,
    name: str = "run-1",
    agent: str = "reference",
    family: str = "ledger",
    diverged: str | None = None,
) -> Path:
    run = root / name
    (run / "job" / "result").mkdir(parents=True)
    result = EpisodeResult.model_validate(
        {
            "run_id": "run-1",
            "family": family,
            "family_version": "1.0.0",
            "budget": "fast",
            "agent": agent,
            "provider": "local",
            "model": "smollm2-135m",
            "validation": {"attempts": 1, "valid": True},
            "job": {
                "status": status,
                "error": error,
                "pre_score": 0.1,
                "post_score": post,
                "best_pre": 0.2,
                "eval_n": 48,
                "train_seconds": 61.0,
                "train_steps": 7,
                "stopped_at_deadline": True,
                "diverged": diverged,
            },
            "reward": {
                "total": 0.5,
                "validation": 1.0,
                "job_quality": 0.3,
                "train_speed": 1.0,
                "weights": {"validation": 0.35, "job_quality": 0.6, "train_speed": 0.05},
                "outcome": "succeeded",
                "attempts": 1,
            },
            "cost": {},
            "turns": 3,
            "wall_seconds": 100.0,
            "run_dir": str(run),
        }
    )
    (run / "result.json").write_text(result.model_dump_json())
    models = {
        "smollm2-135m": {"score": 0.1, "ci95": [0.05, 0.2], "n": 48},
        "gemma3-270m": {"score": 0.2, "ci95": [0.1, 0.35], "n": 48},
        "qwen2.5-coder-0.5b": {"score": 0.9, "ci95": [0.8, 0.95], "n": 48},  # in the file, not allowed
    }
    (run / "manifest.json").write_text(json.dumps({"baselines": {"models": models}}))
    job = {"device": "cpu", "train_metrics": {"post_ci95": [0.3, 0.7]}}
    (run / "job" / "result" / "result.json").write_text(json.dumps(job))
    return run
