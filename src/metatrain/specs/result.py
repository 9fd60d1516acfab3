"""What the runner writes back for a job (``result.json``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

JobStatus = Literal["succeeded", "failed", "died"]


class PhaseTiming(BaseModel):
    pre_eval: float = 0.0
    train: float = 0.0
    post_eval: float = 0.0
    total: float = 0.0


class JobResult(BaseModel):
    """Outcome of one job: pre/post hidden-eval scores and training summary.

    ``status``: ``succeeded`` (post score exists), ``failed`` (agent code raised during
    training), ``died`` (the worker or process died; retries exhausted).
    """

    job_id: str
    status: JobStatus
    model: str
    device: str
    pre_score: float | None = None
    post_score: float | None = None
    eval_n: int = 0
    train_steps: int = 0
    train_seconds: float = 0.0
    timing: PhaseTiming = Field(default_factory=PhaseTiming)
    train_metrics: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    attempts: int = 1
    started_at: datetime | None = None
    finished_at: datetime | None = None
