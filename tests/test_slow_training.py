"""Real-model tests: a tiny TRL GRPO run in the sandbox, the hidden eval, and a full CPU episode."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from metatrain.integrity import training_policy
from metatrain.jobs.bundle import make_bundle
from metatrain.protocols import TaskFamily
from metatrain.sandbox import run_sandboxed
from metatrain.specs import TaskSpec, parse_job_toml

pytestmark = pytest.mark.slow
SECRET = "sk-or-v1-test-secret-that-must-not-leak-0123456789"


@pytest.fixture(scope="module")
def smollm2() -> Path:
    from metatrain.models import prepare_model

    return prepare_model("smollm2-135m")


def tiny_bundle(workspace: Path, spec: TaskSpec, tmp_path: Path, max_steps: int, batch_size: int) -> Path:
    """The reference job cut to GRPO steps of ``batch_size`` prompts x 2 rollouts x 24 tokens."""
    job_file = workspace / "job.toml"
    text = job_file.read_text()
    for old, new in (
        ("max_steps = 2", f"max_steps = {max_steps}"),
        ("batch_size = 2", f"batch_size = {batch_size}"),
        ("rollouts_per_example = 4", "rollouts_per_example = 2"),
        ("max_tokens = 96", "max_tokens = 24"),
    ):
        text = text.replace(old, new)
    job_file.write_text(text)
    return make_bundle(tmp_path / "bundle", workspace, parse_job_toml(text), spec, "j", "r")


def train_tiny(
    model: Path,
    workspace: Path,
    spec: TaskSpec,
    tmp_path: Path,
    max_steps: int = 1,
    stop_after_seconds: float | None = None,
    batch_size: int = 1,
) -> tuple[dict[str, object], Path]:
    """GRPO steps of 1 prompt x 2 rollouts x 24 tokens in the training sandbox."""
    bundle = tiny_bundle(workspace, spec, tmp_path, max_steps, batch_size)
    out = tmp_path / "out"
    out.mkdir()
    with tempfile.TemporaryDirectory() as scratch:
        res = run_sandboxed(
            training_policy(bundle, model, out, Path(scratch), wall_seconds=600, gpu=False),
            "metatrain.training.trl_backend:train_job",
            {
                "bundle_dir": str(bundle),
                "out_dir": str(out),
                "model_dir": str(model),
                "device": "cpu",
                "stop_after_seconds": stop_after_seconds,
            },
        )
    assert res.ok, res.error
    return res.value, out


def test_tiny_trl_grpo_run_on_cpu(
    smollm2: Path, reference_workspace: Path, fast_spec: TaskSpec, tmp_path: Path
) -> None:
    summary, out = train_tiny(smollm2, reference_workspace, fast_spec, tmp_path)
    assert summary["steps"] == 1 and summary["stopped_at_deadline"] is False
    assert summary["trainer_class"] == "FinalTurnGRPOTrainer"
    assert summary["final_answer_turn"] is fast_spec.eval.final_answer_turn
    assert summary["turn_max_tokens"] == min(24, fast_spec.eval.max_tokens)  # the eval's turn cap, in budget
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[0]["step"] == 1 and "reward" in rows[0]
    funcs = {k.split("/")[1] for k in rows[0] if k.startswith("rewards/") and k.endswith("/mean")}
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and {s["step"] for s in samples} == {1}
    for s in samples:  # what the model wrote, next to what it earned
        assert s["question"] and s["completion"][0]["role"] == "assistant"
        assert funcs and set(s["rewards"]) == funcs and isinstance(s["advantage"], float)
    # One prompt's two rollouts: advantages are both zero (equal rewards) or both non-zero.
    skipped = all(s["advantage"] == 0.0 for s in samples)
    assert rows[0]["update_skipped"] is skipped and summary["skipped_updates"] == ([1] if skipped else [])
    assert rows[0]["groups_with_signal"] == (0.0 if skipped else 1.0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "model", use_safetensors=True)
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
    if skipped:  # no update: the merged weights are the base model's
        base = AutoModelForCausalLM.from_pretrained(smollm2, use_safetensors=True).state_dict()
        assert all(torch.equal(t, base[k]) for k, t in model.state_dict().items())


def test_training_stops_at_its_deadline_and_still_saves(
    smollm2: Path, reference_workspace: Path, fast_spec: TaskSpec, tmp_path: Path
) -> None:
    """A job asking for 3 steps under a 1 s deadline ends after its first step, with a saved model.

    Two prompts per step: the step is two accumulated micro-batches (one prompt's rollouts each)."""
    summary, out = train_tiny(
        smollm2,
        reference_workspace,
        fast_spec,
        tmp_path,
        max_steps=3,
        stop_after_seconds=1.0,
        batch_size=2,
    )
    assert summary["steps"] == 1 and summary["stopped_at_deadline"] is True
    assert (out / "model" / "model.safetensors").exists()


def nan_gradients(monkeypatch: pytest.MonkeyPatch, at: Callable[[int], bool]) -> list[int]:
    """Every model loaded from here on gets a NaN gradient (its forward unchanged) in the n-th forward
    run with gradients on (1-based) wherever ``at(n)``; returns the growing list of those forwards.
    The hook sits on the final norm: TRL's fused head skips lm_head's forward."""
    from transformers import AutoModelForCausalLM

    grad_forwards: list[int] = []

    def hook(module: Any, args: Any, output: torch.Tensor) -> torch.Tensor | None:
        if not torch.is_grad_enabled():  # generation
            return None
        grad_forwards.append(1)
        return output + 0 * torch.sqrt(output - output) if at(len(grad_forwards)) else None  # backward 0/0

    load = AutoModelForCausalLM.from_pretrained

    def loaded(*args: Any, **kwargs: Any) -> Any:
        model = load(*args, **kwargs)
        model.model.norm.register_forward_hook(hook)
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", loaded)
    return grad_forwards


def test_a_micro_batch_with_a_nan_gradient_is_dropped_and_located(
    smollm2: Path,
    reference_workspace: Path,
    fast_spec: TaskSpec,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real TRL, in this process: micro-batch 2 of step 1 gets a finite loss and a NaN gradient (as
    the GPU runs did); it is dropped, its re-run under anomaly mode names the op, and training goes
    on with TRL's micro-batch counter in step (two steps, each updating)."""
    from metatrain.training.trl_backend import train_job

    grad_forwards = nan_gradients(monkeypatch, lambda n: n in (2, 3))  # micro-batch 2, then its re-run
    bundle = tiny_bundle(reference_workspace, fast_spec, tmp_path, max_steps=2, batch_size=2)
    out = tmp_path / "out"
    summary = train_job(str(bundle), str(out), str(smollm2), device="cpu")
    assert summary["steps"] == 2 and len(grad_forwards) == 5
    assert summary["dropped_micro_batches"] == [{"optimizer_step": 1, "micro_batch": 2}]
    (logged,) = [json.loads(line) for line in (out / "dropped_micro_batches.jsonl").read_text().splitlines()]
    assert logged["non_finite_params"] > 0 and logged["batch"]["completion_ids"]["shape"][0] == 2
    assert "SqrtBackward0" in logged["anomaly"]["error"]
    assert "torch.sqrt(output - output)" in logged["anomaly"]["forward_trace"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["micro_batches_dropped"] for r in rows] == [1, 0]
    assert all(math.isfinite(r["grad_norm"]) for r in rows)
    assert not (out / "diverged.json").exists() and summary["diverged"] is None


def test_a_run_of_nan_micro_batches_stops_training_and_keeps_the_last_finite_step(
    smollm2: Path,
    reference_workspace: Path,
    fast_spec: TaskSpec,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real TRL: every micro-batch after the first makes a NaN gradient. Step 1 updates from its
    first; the fourth NaN in a row (step 3) stops training before its update, and the job still
    returns, with the weights of step 2 saved for the post-eval and the stop named."""
    from transformers import AutoModelForCausalLM

    from metatrain.training.trl_backend import train_job

    nan_gradients(monkeypatch, lambda n: n > 1)
    bundle = tiny_bundle(reference_workspace, fast_spec, tmp_path, max_steps=3, batch_size=2)
    out = tmp_path / "out"
    summary = train_job(str(bundle), str(out), str(smollm2), device="cpu")
    assert summary["steps"] == 2
    assert (
        "4 micro-batches in a row" in summary["diverged"]
        and "stopped before the update" in summary["diverged"]
    )
    assert [d["optimizer_step"] for d in summary["dropped_micro_batches"]] == [1, 2, 2, 3]
    assert json.loads((out / "diverged.json").read_text())["optimizer_step"] == 3
    saved = AutoModelForCausalLM.from_pretrained(out / "model", use_safetensors=True)
    assert all(torch.isfinite(t).all() for t in saved.state_dict().values())


def test_hidden_eval_scores_the_base_model(smollm2: Path, calc_chain: TaskFamily) -> None:
    from metatrain.training.evaluation import evaluate

    report = evaluate(calc_chain, "fast", smollm2, limit=4, batch_size=4)
    assert report.n == 4 and 0.0 <= report.score <= 1.0
    assert report.ci95[0] <= report.score <= report.ci95[1]


@pytest.mark.timeout(2700)
def test_full_episode_from_the_cli(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    out = tmp_path / "episode.json"
    env = {**os.environ, "OPENROUTER_API_KEY": SECRET}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "metatrain.cli.app",
            "episode",
            "--family",
            "calc_chain",
            "--agent",
            "reference",
            "--provider",
            "local",
            "--budget",
            "fast",
            "--runs",
            str(runs),
            "--json",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for key in ("run_id", "family", "agent", "provider", "model", "wall_seconds", "run_dir"):
        assert key in result
    assert result["validation"] == {"attempts": 1, "valid": True, "errors": []}
    assert result["job"]["status"] == "succeeded"
    assert result["job"]["post_score"] is not None and result["job"]["eval_n"] == 48
    assert set(result["reward"]["weights"]) == {"validation", "job_quality", "train_speed"}
    cost = result["cost"]
    assert (cost["tokens_in"], cost["tokens_out"], cost["usd"]) == (0, 0, 0.0)
    assert cost["compute_usd"] == 0.0 and cost["compute_seconds"] > 0
    assert cost["budget_exhausted"] is False
    run_dir = Path(result["run_dir"])
    for rel in (
        "trajectory.jsonl",
        "manifest.json",
        "result.json",
        "workspace/env.py",
        "workspace/job.toml",
        "job/bundle/bundle.json",
        "job/result/result.json",
        "job/result/train/metrics.jsonl",
        "job/result/train/samples.jsonl",
        "job/result/pre_eval.json",
        "job/result/post_eval.json",
        "job/result/logs/train.stderr.log",
    ):
        assert (run_dir / rel).exists(), rel
    for path in [*run_dir.rglob("*"), *runs.rglob("*.json*")]:
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert SECRET.encode() not in path.read_bytes(), f"secret leaked into {path}"
    assert "reward" in proc.stdout and "run directory" in proc.stdout
    artifacts = os.environ.get("METATRAIN_TEST_ARTIFACTS")
    if artifacts:
        dest = Path(artifacts) / "episode-run"
        subprocess.run(["rm", "-rf", str(dest)], check=True)
        subprocess.run(["cp", "-r", str(run_dir), str(dest)], check=True)
        (Path(artifacts) / "episode_run_dir.txt").write_text(str(dest))


def test_tiny_trl_run_with_a_stateful_env(
    smollm2: Path, reference_workspace: Path, fast_spec: TaskSpec, tmp_path: Path
) -> None:
    from test_stateful_env import make_stateful

    make_stateful(reference_workspace)
    summary, _ = train_tiny(smollm2, reference_workspace, fast_spec, tmp_path)
    assert summary["steps"] == 1
