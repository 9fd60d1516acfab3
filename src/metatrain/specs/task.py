"""Task specs: what an agent is asked to train, and the bounds its job must respect."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metatrain.specs.job import AdvantageScale


class IntRange(BaseModel):
    """Inclusive integer bounds."""

    model_config = ConfigDict(extra="forbid")
    min: int
    max: int

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        return self

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.min <= value <= self.max


class FloatRange(BaseModel):
    """Inclusive float bounds."""

    model_config = ConfigDict(extra="forbid")
    min: float
    max: float

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        return self

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int | float) and self.min <= float(value) <= self.max


class ToolSchema(BaseModel):
    """One tool of the eval tool interface, as an OpenAI-style function schema."""

    name: str
    description: str
    parameters: dict[str, Any]


class EvalInterface(BaseModel):
    """Exactly how the hidden eval talks to the trained model."""

    tools: list[ToolSchema]
    system_prompt: str
    answer_format: str = Field(description="How the final answer must be written, e.g. <answer>N</answer>")
    max_turns: int = Field(ge=1, description="Assistant turns per eval rollout (tool rounds + final answer)")
    max_tokens: int = Field(ge=8, description="Completion tokens per assistant turn at eval time")
    final_answer_turn: bool = Field(
        False,
        description=(
            "When the last turn follows a tool round, it is played without tools, after a user message "
            "asking for the final answer (metatrain.training.rollout.FINAL_ANSWER_PROMPT)"
        ),
    )


class Bounds(BaseModel):
    """Hard constraint bounds a job file must respect (checked by the validation probe)."""

    model_config = ConfigDict(extra="forbid")
    models: list[str] = Field(min_length=1)
    max_steps: IntRange
    rollouts_per_example: IntRange
    batch_size: IntRange
    max_tokens: IntRange
    temperature: FloatRange
    lr: FloatRange
    warmup: IntRange
    lora_rank: IntRange
    dataset_size: IntRange
    max_turns: IntRange
    optimizers: list[str]
    schedulers: list[str]
    losses: list[str]
    advantage_scales: list[str] = Field(default_factory=lambda: list(get_args(AdvantageScale)))
    full_finetune_allowed: bool = False


class Example(BaseModel):
    """One task instance: the user prompt, the reference answer, and its per-example world."""

    id: str
    prompt: str
    answer: str
    info: dict[str, Any] = Field(default_factory=dict)


class TaskSpec(BaseModel):
    """Everything the agent is shown about a task (never the hidden eval)."""

    family: str
    version: str
    description: str
    budget: str
    held_out: bool = False
    eval: EvalInterface
    bounds: Bounds
    dev_examples: list[Example]
    eval_n: int = Field(ge=1, description="Hidden-eval examples scored pre and post")
