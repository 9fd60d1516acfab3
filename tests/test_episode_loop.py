"""The episode loop's agent-side outcomes, with scripted policies (no training needed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from metatrain.episode.loop import NUDGE, EpisodeConfig, run_episode
from metatrain.hookspecs import hookimpl
from metatrain.plugins import PluginManager, load_plugins
from metatrain.protocols import PolicyContext, PolicyTurn, TaskFamily, ToolCall


@attrs.define
class ScriptedPolicy:
    """Replays fixed turns; each entry is (content, [(tool, args_json), ...])."""

    turns: list[tuple[str, list[tuple[str, str]]]]
    name: str = "scripted"
    seen: list[list[dict[str, Any]]] = attrs.Factory(list)

    def next_turn(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> PolicyTurn:
        self.seen.append(list(messages))
        content, calls = self.turns.pop(0) if self.turns else ("nothing more to say", [])
        return PolicyTurn(
            content=content,
            tool_calls=tuple(ToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(calls)),
            tokens_in=100,
            tokens_out=10,
            usd=0.001,
            model="scripted",
        )


@attrs.frozen
class Factory:
    policy: ScriptedPolicy
    name: str = "scripted"
    description: str = "test policy"

    def create(self, arg: str | None, context: PolicyContext) -> ScriptedPolicy:
        return self.policy


def manager(policy: ScriptedPolicy) -> PluginManager:
    pm = load_plugins()

    class P:
        @hookimpl
        def register_policies(self, register):  # type: ignore[no-untyped-def]
            register(Factory(policy))

    pm.register(P(), name="scripted-test")
    return pm


def config(tmp_path: Path, **kw: Any) -> EpisodeConfig:
    return EpisodeConfig(family="calc_chain", agent="scripted", runs_root=tmp_path / "runs", **kw)


def test_no_parseable_submission_scores_minus_point_one(tmp_path: Path) -> None:
    policy = ScriptedPolicy(
        [("I will think about it.", []), ("Still thinking.", []), ("ok", [("list_files", "{}")])]
    )
    result = run_episode(config(tmp_path, max_turns=6, max_nudges=2), manager(policy))
    assert result.reward.total == -0.1 and result.reward.outcome == "no_submission"
    assert result.validation.attempts == 0 and result.job.status == "not_run"
    assert result.cost.tokens_in == 100 * result.turns and result.cost.usd == pytest.approx(
        0.001 * result.turns
    )
    assert any(m.get("content") == NUDGE for m in policy.seen[-1])
    traj = [json.loads(line) for line in (Path(result.run_dir) / "trajectory.jsonl").read_text().splitlines()]
    assert [t["type"] for t in traj].count("nudge") == 2


def test_capped_invalid_submissions_score_zero(tmp_path: Path, calc_chain: TaskFamily) -> None:
    job = calc_chain.reference_job("fast")["job.toml"].replace("max_steps = 2", "max_steps = 500")
    write = json.dumps({"path": "job.toml", "content": job})
    policy = ScriptedPolicy([("write", [("write_file", write)])] + [("try", [("submit_job", "{}")])] * 5)
    result = run_episode(config(tmp_path, max_attempts=2), manager(policy))
    assert result.validation.attempts == 2 and not result.validation.valid
    assert result.reward.total == 0.0 and result.reward.outcome == "never_valid"
    assert any("train.max_steps = 500 is outside the allowed range" in e for e in result.validation.errors[0])
    traj = [json.loads(line) for line in (Path(result.run_dir) / "trajectory.jsonl").read_text().splitlines()]
    assert "No attempts left" in [t for t in traj if t["type"] == "tool_result"][-1]["content"]


def test_job_files_that_do_not_match_the_schema_are_not_parseable(tmp_path: Path) -> None:
    bad_job = json.dumps({"path": "job.toml", "content": 'family = "calc_chain"\n[train]\nmodel = "x"\n'})
    policy = ScriptedPolicy([("write", [("write_file", bad_job)]), ("try", [("submit_job", "{}")])])
    result = run_episode(config(tmp_path, max_attempts=1), manager(policy))
    assert result.reward.total == -0.1 and result.reward.outcome == "no_submission"
    assert any("train.max_steps: Field required" in e for e in result.validation.errors[0])


def test_missing_job_file_is_not_parseable(tmp_path: Path) -> None:
    policy = ScriptedPolicy([("submit", [("submit_job", "{}")])])
    result = run_episode(config(tmp_path, max_attempts=1), manager(policy))
    assert result.reward.outcome == "no_submission" and result.validation.attempts == 1


def test_agent_tool_errors_are_returned_not_raised(tmp_path: Path) -> None:
    policy = ScriptedPolicy(
        [("bad", [("read_file", '{"path": "/etc/passwd"}'), ("nope", "{}"), ("write_file", "{not json")])]
    )
    result = run_episode(config(tmp_path, max_turns=1), manager(policy))
    traj = [json.loads(line) for line in (Path(result.run_dir) / "trajectory.jsonl").read_text().splitlines()]
    tool_msgs = [t for t in traj if t["type"] == "tool_result"]
    assert [t["ok"] for t in tool_msgs] == [False, False, False]
    assert "absolute" in tool_msgs[0]["content"] and "unknown tool" in tool_msgs[1]["content"]
    assert "not valid JSON" in tool_msgs[2]["content"]
    manifest = json.loads((Path(result.run_dir) / "manifest.json").read_text())
    assert manifest["family"]["name"] == "calc_chain" and manifest["versions"]["trl"] == "1.16.0"
    assert (Path(result.run_dir) / "workspace" / "TASK.md").exists()


def test_a_failed_jobs_error_and_an_early_stop_reach_the_result_and_summary() -> None:
    from rich.console import Console

    from metatrain.cli.display import summary_table
    from metatrain.episode.loop import _job_summary
    from metatrain.specs import JobResult
    from metatrain.specs.episode import EpisodeResult, ValidationSummary

    failed = JobResult(
        job_id="j",
        status="failed",
        model="qwen2.5-coder-0.5b",
        device="cuda",
        pre_score=0.15,
        error="training failed: OutOfMemoryError: CUDA out of memory.\nTraceback ...",
    )
    summary = _job_summary(failed, 0.15)
    assert summary.error is not None and summary.error.startswith("training failed: OutOfMemoryError")
    stopped = JobResult(
        job_id="k",
        status="succeeded",
        model="m",
        device="cuda",
        post_score=0.2,
        train_steps=14,
        train_metrics={"stopped_at_deadline": True},
    )
    assert _job_summary(stopped, 0.1).stopped_at_deadline is True
    quiet = stopped.model_copy(update={"train_metrics": {"stopped_at_deadline": True, "skipped_updates": 3}})
    assert _job_summary(quiet, 0.1).skipped_updates == 3 and _job_summary(stopped, 0.1).skipped_updates == 0
    nan = stopped.model_copy(update={"train_metrics": {"dropped_micro_batches": 2}})
    assert (
        _job_summary(nan, 0.1).dropped_micro_batches == 2
        and _job_summary(stopped, 0.1).dropped_micro_batches == 0
    )
    halted = stopped.model_copy(
        update={"train_metrics": {"dropped_micro_batches": 4, "diverged": "training diverged: ..."}}
    )
    assert _job_summary(halted, 0.1).diverged == "training diverged: ..."
    assert _job_summary(stopped, 0.1).diverged is None

    from metatrain.protocols import RewardInputs
    from metatrain.specs.episode import CostSummary
    from metatrain_reward import DefaultReward

    reward = DefaultReward().compute(
        RewardInputs(
            any_parseable=True,
            attempts=1,
            valid=True,
            job_status="failed",
            post=None,
            best_pre=0.15,
            train_seconds=10.0,
            budget="full",
        )
    )
    for job, expected in (
        (summary, "failed: training failed: OutOfMemoryError: CUDA out of memory."),
        (_job_summary(stopped, 0.1), "14 steps, stopped before the wall)"),
        (
            _job_summary(quiet, 0.1),
            "14 steps, 3 without reward signal (no update), stopped before the wall)",
        ),
        (_job_summary(nan, 0.1), "14 steps, 2 micro-batches dropped for a non-finite gradient)"),
        (
            _job_summary(halted, 0.1),
            "14 steps, 4 micro-batches dropped for a non-finite gradient, stopped on a non-finite "
            "gradient before its update)",
        ),
    ):
        result = EpisodeResult(
            run_id="r",
            family="calc_chain",
            family_version="1.0.0",
            budget="full",
            agent="reference",
            provider="local",
            model="qwen2.5-coder-0.5b",
            validation=ValidationSummary(attempts=1, valid=True, errors=[]),
            job=job,
            reward=reward,
            cost=CostSummary(),
            turns=6,
            wall_seconds=1.0,
            run_dir="runs/r",
        )
        console = Console(width=200, record=True)
        console.print(summary_table(result))
        text = console.export_text()
        assert expected in text and "Traceback" not in text
