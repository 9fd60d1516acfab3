"""One episode: task spec -> agent turns -> validated job -> compute -> reward -> artifacts."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from metatrain.baselines import best_pre, load_baselines
from metatrain.costs import append_cost
from metatrain.episode.artifacts import RunDir, environment_versions, new_run_id
from metatrain.episode.instructions import INSTRUCTIONS_VERSION, system_instructions, task_markdown
from metatrain.episode.probe import validate_submission
from metatrain.episode.tools import AGENT_TOOL_SCHEMAS, AgentTools, ToolOutcome
from metatrain.episode.workspace import Workspace
from metatrain.jobs.bundle import make_bundle
from metatrain.plugins import PluginManager
from metatrain.protocols import PolicyContext, ProgressFn, RewardInputs
from metatrain.specs import (
    CostRecord,
    CostSummary,
    EpisodeResult,
    JobFile,
    JobResult,
    JobSummary,
    ValidationSummary,
)

NUDGE = (
    "You did not call a tool. Keep working through the tools: write env.py and job.toml, then call "
    "submit_job."
)


@attrs.frozen
class EpisodeConfig:
    """Everything that defines an episode run."""

    family: str
    agent: str = "reference"
    provider: str = "local"
    budget: str = "fast"
    device: str = "cpu"
    runs_root: Path = Path("runs")
    reward: str = "default"
    max_turns: int = attrs.field(default=30, validator=attrs.validators.ge(1))
    max_attempts: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    max_nudges: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    probe_wall_seconds: float = 180.0
    train_wall_seconds: float | None = None
    seed: int = 0


@attrs.define
class _Submission:
    attempts: int = 0
    any_parseable: bool = False
    job: JobFile | None = None
    errors: list[list[str]] = attrs.Factory(list)


def _noop(event: str, data: dict[str, Any]) -> None:
    pass


def run_episode(
    config: EpisodeConfig, pm: PluginManager, progress: ProgressFn | None = None
) -> EpisodeResult:
    """Run one episode end to end and write its run directory."""
    progress = progress or _noop
    t0 = time.monotonic()
    family = pm.task_family(config.family)
    spec = family.task_spec(config.budget)
    baselines = load_baselines(family, config.budget, spec.bounds.models)
    best = best_pre(baselines, spec.bounds.models)
    scheme = pm.reward_scheme(config.reward)
    provider = pm.compute_provider(config.provider).configure(
        device=config.device,
        queue_root=config.runs_root / "queue",
        train_wall_seconds=config.train_wall_seconds,
    )
    agent_name, _, agent_arg = config.agent.partition(":")
    policy = pm.policy(agent_name).create(
        agent_arg or None, PolicyContext(family, spec, config.budget, config.seed)
    )

    run_id = new_run_id(config.family)
    run = RunDir(config.runs_root / run_id)
    progress("phase", {"name": "workspace", "run_dir": str(run.path)})
    workspace = Workspace(run.workspace)
    workspace.write("TASK.md", task_markdown(spec))
    workspace.write("dev_examples.jsonl", "\n".join(e.model_dump_json() for e in spec.dev_examples) + "\n")
    baseline_view = {
        "budget": config.budget,
        "eval_n": baselines.n,
        "best_pre": best,
        "models": {m: {"score": e.score, "ci95": e.ci95, "n": e.n} for m, e in baselines.models.items()},
    }
    run.write_json(
        "manifest.json",
        {
            "run_id": run_id,
            "created_at": datetime.now().astimezone(),
            "config": attrs.asdict(config),
            "family": {"name": family.name, "version": family.version, "held_out": family.held_out},
            "instructions_version": INSTRUCTIONS_VERSION,
            "eval_hash": baselines.eval_hash,
            "spec_sha256": _sha(spec.model_dump_json()),
            "baselines": baseline_view,
            "versions": environment_versions(),
        },
    )
    sub = _Submission()

    def submit() -> ToolOutcome:
        sub.attempts += 1
        progress("phase", {"name": "validation", "attempt": sub.attempts})
        outcome = validate_submission(workspace, spec, config.probe_wall_seconds)
        sub.any_parseable = sub.any_parseable or outcome.parseable
        report = outcome.report
        run.write_json(f"validation-{sub.attempts}.json", report.model_dump())
        progress(
            "validation",
            {"attempt": sub.attempts, "ok": report.ok, "errors": report.errors, "seconds": report.seconds},
        )
        if report.ok:
            sub.job = outcome.job
            return ToolOutcome(f"VALID (attempt {sub.attempts}). The job is queued for training.", True, True)
        sub.errors.append(report.errors)
        left = config.max_attempts - sub.attempts
        tail = f"{left} attempt(s) left." if left > 0 else "No attempts left; the episode ends."
        return ToolOutcome(
            f"INVALID (attempt {sub.attempts}):\n- " + "\n- ".join(report.errors) + f"\n{tail}", False
        )

    tools = AgentTools(workspace, baseline_view, submit)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_instructions(config.max_attempts)},
        {
            "role": "user",
            "content": f"Your task is in TASK.md. Family: {spec.family}, budget: {spec.budget}.",
        },
    ]
    for m in messages:
        run.log_turn({"type": "message", **m})
    cost = CostSummary()
    nudges = turns = 0
    progress("phase", {"name": "agent", "agent": config.agent})
    while turns < config.max_turns and sub.job is None and sub.attempts < config.max_attempts:
        turns += 1
        turn = policy.next_turn(list(messages), AGENT_TOOL_SCHEMAS)
        cost.tokens_in += turn.tokens_in
        cost.tokens_out += turn.tokens_out
        cost.usd += turn.usd
        assistant: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.tool_calls:
            assistant["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        messages.append(assistant)
        run.log_turn(
            {
                "type": "message",
                "turn": turns,
                "tokens_in": turn.tokens_in,
                "tokens_out": turn.tokens_out,
                "usd": turn.usd,
                **assistant,
            }
        )
        progress("turn", {"turn": turns, "tools": [c.name for c in turn.tool_calls]})
        if not turn.tool_calls:
            if nudges >= config.max_nudges:
                break
            nudges += 1
            messages.append({"role": "user", "content": NUDGE})
            run.log_turn({"type": "nudge", "turn": turns, "role": "user", "content": NUDGE})
            continue
        for call in turn.tool_calls:
            out = tools.dispatch(call.name, call.arguments)
            msg = {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": out.content}
            messages.append(msg)
            run.log_turn({"type": "tool_result", "turn": turns, "ok": out.ok, **msg})
            if out.submitted or sub.attempts >= config.max_attempts:
                break
    agent_cost = CostRecord(
        ts=datetime.now().astimezone(),
        run_id=run_id,
        kind="agent",
        model=config.agent,
        tokens_in=cost.tokens_in,
        tokens_out=cost.tokens_out,
        usd=cost.usd,
    )
    for ledger in (run.path / "costs.jsonl", config.runs_root / "costs.jsonl"):
        append_cost(ledger, agent_cost)
    job_result = _run_job(run, provider, spec, sub, run_id, progress)
    reward = scheme.compute(
        RewardInputs(
            any_parseable=sub.any_parseable,
            attempts=sub.attempts,
            valid=sub.job is not None,
            job_status=job_result.status if job_result else None,
            post=job_result.post_score if job_result else None,
            best_pre=best,
            train_seconds=job_result.train_seconds if job_result else 0.0,
            budget=config.budget,
        )
    )
    job_summary = JobSummary(best_pre=best)
    if job_result is not None:
        job_summary = JobSummary(
            job_id=job_result.job_id,
            status=job_result.status,
            pre_score=job_result.pre_score,
            post_score=job_result.post_score,
            best_pre=best,
            uplift=None if job_result.post_score is None else job_result.post_score - best,
            train_seconds=job_result.train_seconds,
            eval_n=job_result.eval_n,
            train_steps=job_result.train_steps,
        )
    result = EpisodeResult(
        run_id=run_id,
        family=spec.family,
        family_version=spec.version,
        budget=config.budget,
        agent=config.agent,
        provider=config.provider,
        model=sub.job.train.model if sub.job else None,
        validation=ValidationSummary(attempts=sub.attempts, valid=sub.job is not None, errors=sub.errors),
        job=job_summary,
        reward=reward,
        cost=cost,
        turns=turns,
        wall_seconds=time.monotonic() - t0,
        run_dir=str(run.path),
    )
    run.write_json("result.json", json.loads(result.model_dump_json()))
    progress("done", {"result": result})
    return result


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _run_job(
    run: RunDir, provider: Any, spec: Any, sub: _Submission, run_id: str, progress: ProgressFn
) -> JobResult | None:
    if sub.job is None:
        return None
    job_id = f"{run_id}-job"
    bundle = make_bundle(run.path / "job" / "bundle", run.workspace, sub.job, spec, job_id, run_id)
    progress("phase", {"name": "queue", "job_id": job_id})
    provider.submit(bundle, job_id)
    result: JobResult = provider.wait(job_id, progress)
    result_dir = getattr(provider, "result_dir", None)
    if result_dir is not None:
        _link_results(result_dir(job_id), run.path / "job" / "result")
    return result


def _link_results(src: Path, dest: Path) -> None:
    """Copy the runner's outputs (minus model weights) into the run directory."""
    import shutil

    if src.exists():
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("model", "trl"), dirs_exist_ok=True)
