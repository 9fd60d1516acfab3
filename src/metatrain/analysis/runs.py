"""Read a run directory into DataFrames; plot its training curve and reward breakdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pandas as pd

from metatrain.specs import EpisodeResult


@attrs.frozen
class RunData:
    """One episode's artifacts, loaded."""

    path: Path
    result: EpisodeResult
    manifest: dict[str, Any]
    trajectory: pd.DataFrame
    metrics: pd.DataFrame
    validations: list[dict[str, Any]]

    def workspace_files(self) -> dict[str, str]:
        ws = self.path / "workspace"
        return {str(p.relative_to(ws)): p.read_text() for p in sorted(ws.rglob("*")) if p.is_file()}


def _jsonl(path: Path) -> pd.DataFrame:
    if not path.exists():
        return pd.DataFrame()
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def load_run(path: Path | str) -> RunData:
    """Load ``runs/<run_id>/``: result, manifest, trajectory, training metrics, validation reports."""
    p = Path(path)
    return RunData(
        path=p,
        result=EpisodeResult.model_validate_json((p / "result.json").read_text()),
        manifest=json.loads((p / "manifest.json").read_text()),
        trajectory=_jsonl(p / "trajectory.jsonl"),
        metrics=_jsonl(p / "job" / "result" / "train" / "metrics.jsonl"),
        validations=[json.loads(v.read_text()) for v in sorted(p.glob("validation-*.json"))],
    )


def runs_table(root: Path | str = "runs") -> pd.DataFrame:
    """One row per finished episode under ``root``."""
    rows = []
    for result in sorted(Path(root).glob("*/result.json")):
        r = EpisodeResult.model_validate_json(result.read_text())
        rows.append(
            {
                "run_id": r.run_id,
                "family": r.family,
                "agent": r.agent,
                "model": r.model,
                "reward": r.reward.total,
                "outcome": r.reward.outcome,
                "attempts": r.validation.attempts,
                "pre": r.job.pre_score,
                "post": r.job.post_score,
                "best_pre": r.job.best_pre,
                "train_seconds": r.job.train_seconds,
                "usd": r.cost.usd,
            }
        )
    return pd.DataFrame(rows)


def reward_parts(metrics: pd.DataFrame) -> list[str]:
    """The rubric functions logged per step (``rewards/<name>/mean`` columns), by name."""
    return sorted(
        c.split("/")[1] for c in metrics.columns if c.startswith("rewards/") and c.endswith("/mean")
    )


def skipped_steps(metrics: pd.DataFrame) -> list[int]:
    """The steps that made no optimizer update (every advantage zero), from ``update_skipped``."""
    if metrics.empty or "update_skipped" not in metrics:
        return []
    flags = metrics["update_skipped"].fillna(False).astype(bool)
    return [int(s) for s in metrics.loc[flags, "step"]]


def plot_training(metrics: pd.DataFrame, ax: Any = None) -> Any:
    """Mean GRPO reward per training step (with its std band where logged), and each rubric
    function's mean (unweighted, dashed): partial credit rising while the answer reward stays flat
    is how a gamed rubric looks. Steps that made no update (``update_skipped``: no reward signal)
    are shaded grey; the share of prompt groups with any signal (``groups_with_signal``) is dotted."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    if metrics.empty or "reward" not in metrics:
        ax.text(0.5, 0.5, "no training metrics", ha="center", va="center")
        return ax
    ax.plot(metrics["step"], metrics["reward"], marker="o", label="mean reward")
    if "reward_std" in metrics:
        ax.fill_between(
            metrics["step"],
            metrics["reward"] - metrics["reward_std"],
            metrics["reward"] + metrics["reward_std"],
            alpha=0.2,
            label="± std",
        )
    for name in reward_parts(metrics):
        ax.plot(metrics["step"], metrics[f"rewards/{name}/mean"], linestyle="--", label=name)
    if "groups_with_signal" in metrics:
        ax.plot(
            metrics["step"],
            metrics["groups_with_signal"],
            linestyle=":",
            color="grey",
            label="groups with signal",
        )
    for i, step in enumerate(skipped_steps(metrics)):
        ax.axvspan(step - 0.5, step + 0.5, color="grey", alpha=0.15, label="no update" if i == 0 else None)
    ax.set_xlabel("training step")
    ax.set_ylabel("reward")
    ax.set_title("inner GRPO training")
    ax.legend()
    return ax


def plot_reward_breakdown(result: EpisodeResult, ax: Any = None) -> Any:
    """Weighted contribution of each reward component."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(5, 3))[1]
    r = result.reward
    parts = {
        "validation": r.validation * r.weights["validation"],
        "job quality": r.job_quality * r.weights["job_quality"],
        "train speed": r.train_speed * r.weights["train_speed"],
    }
    ax.bar(list(parts), list(parts.values()), color=["#4c72b0", "#55a868", "#c44e52"])
    ax.axhline(r.total, color="black", linestyle="--", label=f"total {r.total:.3f}")
    ax.set_ylabel("weighted contribution")
    ax.legend()
    return ax
