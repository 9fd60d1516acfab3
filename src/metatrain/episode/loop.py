"""One episode: task spec -> agent turns -> validated job -> compute -> reward -> artifacts."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from metatrain.baselines import BudgetBaselines, best_pre, load_baselines
from metatrain.costs import Budget
from metatrain.costs.meter import Meter
from metatrain.episode.artifacts import RunDir, environment_versions, new_run_id
from metatrain.episode.instructions import INSTRUCTIONS_VERSION, system_instructions, task_markdown
from metatrain.episode.probe import validate_submission
from metatrain.episode.tools import AGENT_TOOL_SCHEMAS, AgentTools, ToolOutcome
from metatrain.episode.workspace import Workspace
from metatrain.jobs.bundle import make_bundle
from metatrain.plugins import PluginManager
from metatrain.protocols import Policy, PolicyContext, PolicyTurn, ProgressFn, RewardInputs
from metatrain.specs import (
    EpisodeResult,
    JobFile,
    JobResult,
    JobSummary,
    TaskSpec,
    ValidationSummary,
)

NUDGE = (
    "You did not call a tool. Keep working through the tools: write env.py and job.toml, then call "
    "submit_job."
)
STALL_NUDGE = (
    "Several turns have passed without writing a file or submitting. Write env.py and job.toml now "
    "(write_file), then call submit_job."
)
STALL_TURNS = 6
"""Turns with tool calls but no successful write/edit/submit before the stall nudge."""
MAX_ERRORS_SHOWN = 20
MAX_ERROR_CHARS = 6000
_PROGRESS_TOOLS = frozenset({"write_file", "edit_file", "submit_job"})


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
    base_url: str | None = None
    agent_max_tokens: int | None = None
    budget_usd: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    global_budget_usd: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    compute_price_per_hour: float | None = None


@attrs.frozen
class EpisodePolicyContext(PolicyContext):
    """The PolicyContext an episode passes: also the endpoint and output cap from the config."""

    base_url: str | None = None
    max_tokens: int | None = None
    device: str = "cpu"


@attrs.define
class _Submission:
    attempts: int = 0
    any_parseable: bool = False
    job: JobFile | None = None
    errors: list[list[str]] = attrs.Factory(list)


def _noop(event: str, data: dict[str, Any]) -> None:
    pass


@attrs.define
class _Episode:
    """The state one episode accumulates while the agent works."""

    config: EpisodeConfig
    spec: TaskSpec
    run: RunDir
    workspace: Workspace
    progress: ProgressFn
    meter: Meter
    sub: _Submission = attrs.Factory(_Submission)
    messages: list[dict[str, Any]] = attrs.Factory(list)
    turns: int = 0

    def submit(self) -> ToolOutcome:
        """The ``submit_job`` tool: probe, record, tell the agent."""
        sub = self.sub
        sub.attempts += 1
        self.progress("phase", {"name": "validation", "attempt": sub.attempts})
        outcome = validate_submission(self.workspace, self.spec, self.config.probe_wall_seconds)
        sub.any_parseable = sub.any_parseable or outcome.parseable
        report = outcome.report
        self.run.write_json(f"validation-{sub.attempts}.json", report.model_dump())
        self.progress(
            "validation",
            {"attempt": sub.attempts, "ok": report.ok, "errors": report.errors, "seconds": report.seconds},
        )
        if report.ok:
            sub.job = outcome.job
            return ToolOutcome(f"VALID (attempt {sub.attempts}). The job is queued for training.", True, True)
        sub.errors.append(report.errors)
        left = self.config.max_attempts - sub.attempts
        tail = f"{left} attempt(s) left." if left > 0 else "No attempts left; the episode ends."
        return ToolOutcome(f"INVALID (attempt {sub.attempts}):\n{_capped(report.errors)}\n{tail}", False)

    def say(self, record_type: str, message: dict[str, Any], **extra: Any) -> None:
        self.messages.append(message)
        self.run.log_turn({"type": record_type, **extra, **message})

    def agent_loop(self, policy: Policy, tools: AgentTools) -> None:
        """Turns until a valid submission, the attempt cap, the turn cap, a budget or too many idle turns."""
        config, sub = self.config, self.sub
        nudges = stalled = 0
        while self.turns < config.max_turns and sub.job is None and sub.attempts < config.max_attempts:
            turn = self.call(policy)
            if turn is None:
                return
            if not turn.tool_calls:
                if nudges >= config.max_nudges:
                    break
                nudges += 1
                self.say("nudge", {"role": "user", "content": NUDGE}, turn=self.turns)
                continue
            progressed = False
            for call in turn.tool_calls:
                out = tools.dispatch(call.name, call.arguments)
                msg = {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": out.content}
                self.say("tool_result", msg, turn=self.turns, ok=out.ok)
                progressed = (
                    progressed or (out.ok and call.name in _PROGRESS_TOOLS) or call.name == "submit_job"
                )
                if out.submitted or sub.attempts >= config.max_attempts:
                    break
            stalled = 0 if progressed else stalled + 1
            if stalled >= STALL_TURNS and sub.job is None:
                stalled = 0
                self.say("nudge", {"role": "user", "content": STALL_NUDGE}, turn=self.turns, reason="stall")

    def call(self, policy: Policy) -> PolicyTurn | None:
        """One metered model call, or None when the budget does not allow its worst case."""
        check = self.meter.precheck(policy, self.messages, AGENT_TOOL_SCHEMAS)
        if not check.ok:
            self.run.log_turn({"type": "budget_exhausted", "scope": check.scope, "note": check.note})
            self.progress("budget", {"scope": check.scope, "note": check.note})
            return None
        self.turns += 1
        try:
            turn = policy.next_turn(list(self.messages), AGENT_TOOL_SCHEMAS)
        except Exception as exc:
            self.run.log_turn(
                {"type": "policy_error", "turn": self.turns, "error": f"{type(exc).__name__}: {exc}"}
            )
            raise
        self.meter.agent_call(turn, self.config.agent, str(getattr(policy, "cost_note", "") or ""))
        assistant: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.tool_calls:
            assistant["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        self.say(
            "message",
            assistant,
            turn=self.turns,
            tokens_in=turn.tokens_in,
            tokens_out=turn.tokens_out,
            usd=turn.usd,
        )
        self.progress("turn", {"turn": self.turns, "tools": [c.name for c in turn.tool_calls]})
        return turn


def _capped(errors: list[str]) -> str:
    """Validation errors verbatim, at most MAX_ERRORS_SHOWN of them and MAX_ERROR_CHARS in all."""
    shown = "- " + "\n- ".join(errors[:MAX_ERRORS_SHOWN])
    more = len(errors) - MAX_ERRORS_SHOWN
    if len(shown) > MAX_ERROR_CHARS:
        shown = shown[:MAX_ERROR_CHARS] + " [...]"
    return shown + (f"\n({more} more errors not shown)" if more > 0 else "")


def _baseline_view(budget: str, baselines: BudgetBaselines, best: float) -> dict[str, Any]:
    """What ``get_baseline_scores`` shows the agent."""
    return {
        "budget": budget,
        "eval_n": baselines.n,
        "best_pre": best,
        "models": {m: {"score": e.score, "ci95": e.ci95, "n": e.n} for m, e in baselines.models.items()},
    }


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
        **(
            {} if config.compute_price_per_hour is None else {"price_per_hour": config.compute_price_per_hour}
        ),
    )
    agent_name, _, agent_arg = config.agent.partition(":")
    policy = pm.policy(agent_name).create(
        agent_arg or None,
        EpisodePolicyContext(
            family,
            spec,
            config.budget,
            config.seed,
            base_url=config.base_url,
            max_tokens=config.agent_max_tokens,
            device=config.device,
        ),
    )

    run_id = new_run_id(config.family)
    run = RunDir(config.runs_root / run_id)
    progress("phase", {"name": "workspace", "run_dir": str(run.path)})
    workspace = Workspace(run.workspace)
    workspace.write("TASK.md", task_markdown(spec))
    workspace.write("dev_examples.jsonl", "\n".join(e.model_dump_json() for e in spec.dev_examples) + "\n")
    view = _baseline_view(config.budget, baselines, best)
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
            "baselines": view,
            "versions": environment_versions(),
        },
    )
    meter = Meter(
        run_id,
        (run.path / "costs.jsonl", config.runs_root / "costs.jsonl"),
        Budget(config.budget_usd, config.global_budget_usd, config.runs_root / "costs.jsonl"),
    )
    ep = _Episode(config, spec, run, workspace, progress, meter)
    ep.say(
        "message", {"role": "system", "content": system_instructions(config.max_attempts, config.max_turns)}
    )
    ep.say(
        "message",
        {
            "role": "user",
            "content": f"Your task is in TASK.md. Family: {spec.family}, budget: {spec.budget}.",
        },
    )
    progress("phase", {"name": "agent", "agent": config.agent})
    ep.agent_loop(policy, AgentTools(workspace, view, ep.submit))

    sub = ep.sub
    job_result = _run_job(run, provider, spec, sub, run_id, progress)
    if job_result is not None:
        seconds = job_result.timing.total or job_result.train_seconds
        price = float(getattr(provider, "price_per_hour", 0.0) or 0.0)
        meter.compute(f"{config.provider}:{job_result.device}", seconds, price)
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
    result = EpisodeResult(
        run_id=run_id,
        family=spec.family,
        family_version=spec.version,
        budget=config.budget,
        agent=config.agent,
        provider=config.provider,
        model=sub.job.train.model if sub.job else None,
        validation=ValidationSummary(attempts=sub.attempts, valid=sub.job is not None, errors=sub.errors),
        job=_job_summary(job_result, best),
        reward=reward,
        cost=meter.summary,
        turns=ep.turns,
        wall_seconds=time.monotonic() - t0,
        run_dir=str(run.path),
    )
    run.write_json("result.json", json.loads(result.model_dump_json()))
    progress("done", {"result": result})
    return result


def _job_summary(job: JobResult | None, best: float) -> JobSummary:
    if job is None:
        return JobSummary(best_pre=best)
    return JobSummary(
        job_id=job.job_id,
        status=job.status,
        pre_score=job.pre_score,
        post_score=job.post_score,
        best_pre=best,
        uplift=None if job.post_score is None else job.post_score - best,
        train_seconds=job.train_seconds,
        eval_n=job.eval_n,
        train_steps=job.train_steps,
        stopped_at_deadline=bool(job.train_metrics.get("stopped_at_deadline", False)),
        diverged=job.train_metrics.get("diverged"),
        skipped_updates=int(job.train_metrics.get("skipped_updates", 0)),
        dropped_micro_batches=int(job.train_metrics.get("dropped_micro_batches", 0)),
        error=job.error,
    )


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
