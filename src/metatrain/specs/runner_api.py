"""The runner service's HTTP bodies (docs/gpu-runner-spec.md): health, job status, progress events."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

RunnerJobState = Literal["queued", "running", "succeeded", "failed", "died"]
"""``queued`` → ``running`` → one of the three ``JobResult`` statuses."""

TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "died"})

EVAL_SECRET_HEADER = "X-Metatrain-Eval-Secret"
"""Request header (PUT only) carrying the hidden-eval secret; the runner keeps it in memory only."""

NEXT_OFFSET_HEADER = "X-Metatrain-Next-Offset"
"""Response header of ``GET /jobs/{id}/logs``: the offset to ask for next."""

LOG_SIZE_HEADER = "X-Metatrain-Log-Size"
"""Response header of ``GET /jobs/{id}/logs``: the log's size in bytes when it was read."""


class RunnerHealth(BaseModel):
    """``GET /health`` (no authentication)."""

    status: Literal["ok"] = "ok"
    version: str = Field(description="metatrain version of the runner")
    versions: dict[str, str] = Field(
        default_factory=dict,
        description="Installed versions the runner knows: metatrain, verifiers, trl, transformers, torch, "
        "and prime-rl (the commit of its checkout); a name is absent when not installed or not known",
    )
    device: str
    busy: bool
    job_id: str | None = Field(None, description="The queued or running job, if any")


class ProgressEvent(BaseModel):
    """One event from the runner's progress callback, numbered from 0 per job."""

    seq: int = Field(ge=0)
    event: str = Field(description="phase, eval or step")
    data: dict[str, Any] = Field(default_factory=dict)
    at: datetime


class RunnerJobStatus(BaseModel):
    """``GET /jobs/{id}`` and the reply to ``PUT /jobs/{id}``; also ``state.json`` in the work dir."""

    job_id: str
    state: RunnerJobState
    phase: str | None = Field(None, description="Last phase event: prepare_model, pre_eval, train, post_eval")
    bundle_sha256: str = Field(description="sha256 of the bundle's canonical manifest (the idempotency key)")
    events: list[ProgressEvent] = Field(
        default_factory=list, description="Progress events with seq >= the request's `since`, newest last"
    )
    events_total: int = Field(0, ge=0, description="Events emitted so far; the next event's seq")
    error: str | None = None
    submitted_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES
