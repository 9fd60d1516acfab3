"""The outer-loop run configuration (``config.json`` of an outer run): pydantic, with the original's defaults.

The original trained Qwen3.6-35B-A3B on Tinker with LoRA rank 8, learning rate 4e-5, group size 8,
about 40 inner jobs per batch (5 groups), async off-policy with at most 2 steps of staleness, and the
unclipped importance-sampling loss. ``OuterConfig`` keeps those values as defaults; the ``local``
trainer overrides ``agent_model`` with an embedded model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TINKER_AGENT_MODEL = "Qwen/Qwen3.6-35B-A3B"
TINKER_RENDERER = "qwen3_5_disable_thinking"
LOCAL_AGENT_MODEL = "qwen2.5-coder-0.5b"
HOLDOUT_FAMILY = "triage"
InnerMode = Literal["real", "validation-only"]
LossFn = Literal["importance_sampling", "ppo"]


class EpisodeSettings(BaseModel):
    """How each outer episode runs its inner loop (shared by every env of a run)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    budget: str = "fast"
    provider: str = "local"
    device: str = "cpu"
    reward: str = "default"
    inner: InnerMode = Field(
        "real",
        description="real: the provider trains and scores the job; validation-only: see docs/outer-rl.md",
    )
    max_turns: int = Field(12, ge=1)
    max_attempts: int = Field(3, ge=1)
    max_nudges: int = Field(2, ge=0)
    turn_timeout_s: float = Field(
        3600.0, gt=0, description="Longest wait for the episode's next prompt or its end (inner job included)"
    )
    probe_wall_seconds: float = Field(180.0, gt=0)
    train_wall_seconds: float | None = None


class OuterConfig(BaseModel):
    """Everything one outer RL run needs; written to ``LOG_DIR/outer-config.json``."""

    model_config = ConfigDict(extra="forbid")
    trainer: Literal["local", "tinker"] = "tinker"
    log_dir: Path
    families: list[str] = Field(default_factory=lambda: ["calc_chain"])
    holdout_family: str | None = HOLDOUT_FAMILY
    holdout_every: int = Field(
        10, ge=0, description="Evaluate the policy on the holdout every K steps (0: off)"
    )
    holdout_groups: int = Field(1, ge=1)
    agent_model: str = TINKER_AGENT_MODEL
    renderer: str | None = Field(
        TINKER_RENDERER, description="Cookbook renderer name; None renders with the model's chat template"
    )
    lora_rank: int = Field(8, ge=1)
    learning_rate: float = Field(4e-5, gt=0)
    group_size: int = Field(8, ge=2)
    groups_per_batch: int = Field(5, ge=1)
    steps: int = Field(54, ge=1)
    max_steps_off_policy: int = Field(2, ge=0)
    loss_fn: LossFn = "importance_sampling"
    max_tokens: int = Field(4096, ge=16, description="Sampled tokens per agent turn")
    temperature: float = Field(1.0, gt=0)
    save_every: int = Field(1, ge=1)
    load_checkpoint_path: str | None = Field(None, description="Warm start: weights of an earlier run")
    seed: int = 0
    episode: EpisodeSettings = Field(default_factory=EpisodeSettings)

    @field_validator("families")
    @classmethod
    def _some_families(cls, value: list[str]) -> list[str]:
        if not value or any(not f.strip() for f in value):
            raise ValueError("families must name at least one training family")
        return [f.strip() for f in value]

    @model_validator(mode="after")
    def _holdout_not_trained(self) -> OuterConfig:
        if self.holdout_family is not None and self.holdout_family in self.families:
            raise ValueError(
                f"family {self.holdout_family!r} is the held-out family: it is evaluated, never trained on"
            )
        return self

    @property
    def episodes_dir(self) -> Path:
        return self.log_dir / "episodes"


def load_or_write_config(config: OuterConfig, resume: bool) -> OuterConfig:
    """On resume, the stored config wins (a different one is refused); otherwise it is written."""
    path = config.log_dir / "outer-config.json"
    if resume and path.is_file():
        stored = OuterConfig.model_validate_json(path.read_text())
        if stored.model_dump(exclude={"steps"}) != config.model_dump(exclude={"steps"}):
            raise ValueError(
                f"--resume: {path} holds a different configuration; resume with the same options "
                "(only --steps may change) or use a new --log-dir"
            )
        return stored.model_copy(update={"steps": config.steps})
    if path.is_file() and not resume:
        raise ValueError(f"{config.log_dir} already holds a run: pass --resume or use a new --log-dir")
    config.log_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(config.model_dump_json(indent=2) + "\n")
    return config
