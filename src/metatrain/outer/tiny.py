"""The ``validation-only`` inner setting: seconds per episode, for outer-loop runs and tests.

Everything up to the job is real: the agent works in its workspace, ``submit_job`` runs the sandboxed
validation probe, retries are capped. The job is then *not trained*: this provider answers with the
chosen base model's frozen baseline on the family's hidden eval as both pre and post score (status
``succeeded``, 0 training seconds). Under the default reward scheme an episode therefore earns

    0.35 · validation  +  0.60 · (0.25 · baseline(model) + 0.75 · clip((baseline(model) − best_pre) / 0.2))
    +  0.05 · 1

so the signal the outer loop can learn from is: submit a valid job early, and pick the strongest
allowed base model. What it cannot learn here is anything about *training* quality (rubric design,
hyperparameters): the job-quality term is a proxy with zero uplift at best. docs/outer-rl.md says
when to use which setting.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from metatrain.baselines import load_baselines
from metatrain.protocols import ProgressFn, TaskFamily
from metatrain.specs import JobResult
from metatrain.specs.job import BundleManifest

VALIDATION_ONLY_PROVIDER = "outer-validation-only"


@attrs.define
class ValidationOnlyProvider:
    """A ``ComputeProvider`` that scores a job by its base model's frozen baseline, without training."""

    family_lookup: Callable[[str], TaskFamily]
    name: str = VALIDATION_ONLY_PROVIDER
    device: str = "none"
    price_per_hour: float = 0.0
    bundles: dict[str, Path] = attrs.Factory(dict)

    def configure(self, **options: Any) -> ValidationOnlyProvider:
        return ValidationOnlyProvider(self.family_lookup)

    def submit(self, bundle_dir: Path, job_id: str) -> str:
        self.bundles[job_id] = Path(bundle_dir)
        return job_id

    def wait(self, job_id: str, progress: ProgressFn | None = None) -> JobResult:
        if job_id not in self.bundles:
            raise KeyError(f"job {job_id} was never submitted to {self.name}")
        manifest = BundleManifest.model_validate(
            json.loads((self.bundles[job_id] / "bundle.json").read_text())
        )
        family = self.family_lookup(manifest.family)
        model = manifest.job.train.model
        baselines = load_baselines(family, manifest.budget, [model])
        score = baselines.models[model].score
        if progress is not None:
            progress("phase", {"name": "validation-only", "model": model, "proxy_post": score})
        return JobResult(
            job_id=job_id,
            status="succeeded",
            model=model,
            device=self.device,
            pre_score=score,
            post_score=score,
            eval_n=baselines.n,
            train_steps=0,
            train_seconds=0.0,
        )
