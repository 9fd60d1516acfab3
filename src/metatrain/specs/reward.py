"""The episode reward breakdown."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Outcome = Literal["no_submission", "never_valid", "job_died", "job_failed", "succeeded"]


class RewardBreakdown(BaseModel):
    """Total reward and its three weighted components, plus the inputs that produced them."""

    total: float
    validation: float
    job_quality: float
    train_speed: float
    weights: dict[str, float]
    outcome: Outcome
    attempts: int
    best_pre: float | None = None
    post: float | None = None
    uplift: float | None = None
    uplift_term: float | None = None
