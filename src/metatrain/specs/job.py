"""The job file an agent writes (``job.toml``) and the bundle that carries it to compute."""

from __future__ import annotations

import tomllib
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Optimizer = Literal["adamw", "adamw_8bit", "sgd", "adafactor"]
Scheduler = Literal["constant", "linear", "cosine"]
Loss = Literal["grpo", "dr_grpo", "dapo", "bnpo"]
AdvantageScale = Literal["group", "batch", "none"]


class LoraTable(BaseModel):
    """LoRA adapter settings; omit the table for a full fine-tune (if the family allows it)."""

    model_config = ConfigDict(extra="forbid")
    rank: int = Field(8, ge=1)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class TrainingTable(BaseModel):
    """The stable, bounded training key set; maps onto TRL and prime-rl (training/table.py)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    max_steps: int = Field(ge=1)
    rollouts_per_example: int = Field(ge=2)
    batch_size: int = Field(ge=1, description="Prompts per step")
    max_tokens: int = Field(ge=8, description="Completion tokens per rollout (all turns)")
    temperature: float = Field(1.0, gt=0.0)
    lr: float = Field(gt=0.0)
    optimizer: Optimizer = "adamw"
    scheduler: Scheduler = "constant"
    warmup: int = Field(0, ge=0)
    loss: Loss = "grpo"
    advantage_scale: AdvantageScale | None = Field(
        None,
        description="Rewards minus the group mean, divided by the group's std ('group'), the batch's "
        "('batch') or nothing ('none'); unset: the backend's default (TRL 'group', prime-rl 'none')",
    )
    lora: LoraTable | None = Field(default_factory=lambda: LoraTable())


class JobFile(BaseModel):
    """``job.toml``: which environment module to train on, its arguments, and the training table."""

    model_config = ConfigDict(extra="forbid")
    family: str
    environment: str = Field("env.py", description="Workspace-relative path of the environment module")
    env_args: dict[str, Any] = Field(default_factory=dict)
    train: TrainingTable


def parse_job_toml(text: str) -> JobFile:
    """Parse job.toml text; raises ``tomllib.TOMLDecodeError`` or ``pydantic.ValidationError``."""
    return JobFile.model_validate(tomllib.loads(text))


class BundleManifest(BaseModel):
    """``bundle.json``: identifies a job bundle; the runner's input contract."""

    job_id: str
    run_id: str
    family: str
    family_version: str
    budget: str
    eval_n: int
    job: JobFile
    files: dict[str, str] = Field(description="bundle-relative path -> sha256")
    created_at: datetime
    metatrain_version: str
    final_answer_turn: bool = Field(
        False,
        description="The task's EvalInterface.final_answer_turn: training rollouts play the same final turn",
    )
    turn_max_tokens: int | None = Field(
        None,
        ge=1,
        description="The task's EvalInterface.max_tokens: each training turn is capped as the eval caps it",
    )
