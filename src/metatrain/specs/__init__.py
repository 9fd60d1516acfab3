"""Pydantic models for everything that crosses a file or process boundary."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from metatrain.specs.cost import CostRecord
from metatrain.specs.episode import (
    CostSummary,
    EpisodeResult,
    JobSummary,
    ValidationReport,
    ValidationSummary,
)
from metatrain.specs.job import BundleManifest, JobFile, LoraTable, TrainingTable, parse_job_toml
from metatrain.specs.result import JobResult, PhaseTiming
from metatrain.specs.reward import RewardBreakdown
from metatrain.specs.runner_api import ProgressEvent, RunnerHealth, RunnerJobState, RunnerJobStatus
from metatrain.specs.task import Bounds, EvalInterface, Example, FloatRange, IntRange, TaskSpec, ToolSchema

SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "task_spec": TaskSpec,
    "job_file": JobFile,
    "bundle_manifest": BundleManifest,
    "job_result": JobResult,
    "reward_breakdown": RewardBreakdown,
    "episode_result": EpisodeResult,
    "cost_record": CostRecord,
    "validation_report": ValidationReport,
    "runner_health": RunnerHealth,
    "runner_job_status": RunnerJobStatus,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema of every boundary model, keyed by a short name."""
    return {name: model.model_json_schema() for name, model in SCHEMA_MODELS.items()}


__all__ = [
    "SCHEMA_MODELS",
    "Bounds",
    "BundleManifest",
    "CostRecord",
    "CostSummary",
    "EpisodeResult",
    "EvalInterface",
    "Example",
    "FloatRange",
    "IntRange",
    "JobFile",
    "JobResult",
    "JobSummary",
    "LoraTable",
    "PhaseTiming",
    "ProgressEvent",
    "RewardBreakdown",
    "RunnerHealth",
    "RunnerJobState",
    "RunnerJobStatus",
    "TaskSpec",
    "ToolSchema",
    "TrainingTable",
    "ValidationReport",
    "ValidationSummary",
    "json_schemas",
    "parse_job_toml",
]
