"""A job's ``result.json``: the ``JobResult`` a runner leaves in its result directory (docs/runner.md)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from metatrain.specs import BundleManifest, JobResult


def result_fields(manifest: BundleManifest, device: str) -> dict[str, Any]:
    """The ``JobResult`` fields every outcome of ``manifest``'s job shares: job id, model, device, eval_n."""
    return {
        "job_id": manifest.job_id,
        "model": manifest.job.train.model,
        "device": device,
        "eval_n": manifest.eval_n,
    }


def finish_job(result_dir: Path, fields: Mapping[str, Any]) -> JobResult:
    """``fields`` as a ``JobResult`` finished now, written to ``result_dir/result.json`` and returned."""
    result = JobResult.model_validate({**fields, "finished_at": datetime.now().astimezone()})
    (result_dir / "result.json").write_text(result.model_dump_json(indent=2))
    return result
