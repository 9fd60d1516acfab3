"""The validation probe: parse and bound-check the job file, then check the environment in a sandbox."""

from __future__ import annotations

import tempfile
import time
import tomllib
from pathlib import Path

import attrs
from pydantic import ValidationError

from metatrain.episode.workspace import Workspace, WorkspaceError
from metatrain.integrity import probe_policy
from metatrain.sandbox import run_sandboxed
from metatrain.specs import JobFile, TaskSpec, ValidationReport, parse_job_toml
from metatrain.training.table import bound_errors

JOB_FILE = "job.toml"


@attrs.frozen
class ProbeOutcome:
    report: ValidationReport
    parseable: bool
    job: JobFile | None


def _pydantic_errors(exc: ValidationError) -> list[str]:
    return [f"job.toml: {'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()]


def parse_job(workspace: Workspace) -> tuple[JobFile | None, list[str]]:
    """Read and parse ``job.toml``; returns the job or the reasons it does not parse."""
    try:
        text = workspace.read(JOB_FILE)
    except WorkspaceError as exc:
        return None, [f"cannot read {JOB_FILE}: {exc}"]
    try:
        return parse_job_toml(text), []
    except tomllib.TOMLDecodeError as exc:
        return None, [f"job.toml is not valid TOML: {exc}"]
    except ValidationError as exc:
        return None, _pydantic_errors(exc)


def validate_submission(workspace: Workspace, spec: TaskSpec, wall_seconds: float = 180.0) -> ProbeOutcome:
    """Run every check; each failure is a specific message for the agent."""
    t0 = time.monotonic()
    job, errors = parse_job(workspace)
    if job is None:
        return ProbeOutcome(
            ValidationReport(ok=False, errors=errors, seconds=time.monotonic() - t0), False, None
        )
    if job.family != spec.family:
        errors.append(f"job.toml: family = {job.family!r}, but this task is {spec.family!r}")
    try:
        workspace.resolve(job.environment)
    except WorkspaceError as exc:
        errors.append(f"job.toml: environment: {exc}")
    errors += bound_errors(job.train, spec.bounds)
    if errors:
        return ProbeOutcome(
            ValidationReport(ok=False, errors=errors, seconds=time.monotonic() - t0), True, job
        )
    with tempfile.TemporaryDirectory(prefix="metatrain-probe-") as scratch:
        result = run_sandboxed(
            probe_policy(workspace.root, Path(scratch), wall_seconds),
            "metatrain.episode.probe_checks:check_environment",
            {
                "workspace": str(workspace.root),
                "job_json": job.model_dump_json(),
                "spec_json": spec.model_dump_json(),
            },
        )
    checks: dict[str, object] = {
        "isolation": result.isolation,
        "sandbox_seconds": round(result.wall_seconds, 2),
    }
    if not result.ok:
        errors.append(f"the environment could not be checked: {result.error}")
    else:
        errors += list(result.value["errors"])
        facts = result.value["facts"]
        checks.update(facts)
        if not errors:
            errors += bound_errors(job.train, spec.bounds, facts.get("dataset_size"), facts.get("max_turns"))
    report = ValidationReport(ok=not errors, errors=errors, checks=checks, seconds=time.monotonic() - t0)
    return ProbeOutcome(report, True, job)
