"""Validation reports and episode results (``result.json`` of a run)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from metatrain.specs.reward import RewardBreakdown


class ValidationReport(BaseModel):
    """What the validation probe found for one submission."""

    ok: bool
    errors: list[str] = Field(default_factory=list)
    checks: dict[str, Any] = Field(default_factory=dict)
    seconds: float = 0.0


class ValidationSummary(BaseModel):
    attempts: int
    valid: bool
    errors: list[list[str]] = Field(default_factory=list)


class JobSummary(BaseModel):
    job_id: str | None = None
    status: str = "not_run"
    pre_score: float | None = None
    post_score: float | None = None
    best_pre: float | None = None
    uplift: float | None = None
    train_seconds: float = 0.0
    eval_n: int = 0
    train_steps: int = 0
    stopped_at_deadline: bool = False
    diverged: str | None = Field(
        None,
        description="Why training stopped before an update from a non-finite gradient; the post-eval "
        "scores the last finite step's weights",
    )
    skipped_updates: int = Field(0, description="Training steps without a non-zero advantage (no update)")
    dropped_micro_batches: int = Field(
        0, description="Micro-batches left out of their step's update for a non-finite gradient"
    )
    error: str | None = None


class CostSummary(BaseModel):
    """What an episode spent: ``usd`` is agent (model-call) USD; ``total_usd`` adds compute."""

    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    compute_usd: float = 0.0
    total_usd: float = 0.0
    calls: int = 0
    compute_seconds: float = 0.0
    budget_usd: float | None = None
    global_budget_usd: float | None = None
    budget_exhausted: bool = False
    stop: str | None = Field(None, description='"budget_exhausted" when a budget ended the agent loop')
    notes: list[str] = Field(default_factory=list)


class EpisodeResult(BaseModel):
    """Everything an episode produced, written to ``runs/<run_id>/result.json``."""

    run_id: str
    family: str
    family_version: str
    budget: str
    agent: str
    provider: str
    model: str | None
    validation: ValidationSummary
    job: JobSummary
    reward: RewardBreakdown
    cost: CostSummary
    turns: int
    wall_seconds: float
    run_dir: str
