"""The runner's metrics tailer: every ``train/metrics.jsonl`` row reaches the progress callback,
including rows written in the moment before training stops."""

from __future__ import annotations

import inspect
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from metatrain.jobs import runner as runner_module
from metatrain.jobs.bundle import make_bundle
from metatrain.specs import EvalInterface, TaskSpec, parse_job_toml

JOB_TOML = """family = "calc_chain"
[train]
model = "smollm2-135m"
max_steps = 2
rollouts_per_example = 2
batch_size = 2
max_tokens = 16
lr = 1e-5
"""


def rows(*steps: int) -> str:
    return "".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in steps)


def test_rows_written_before_stop_are_reported_by_the_final_read(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(rows(1, 2))
    stop = threading.Event()
    stop.set()  # training ended before the tailer's first poll
    events: list[tuple[str, dict[str, Any]]] = []
    runner_module._tail_metrics(metrics, stop, lambda e, d: events.append((e, d)), interval=0.01)
    assert events == [("step", {"step": 1, "reward": 0.1}), ("step", {"step": 2, "reward": 0.2})]


def test_half_written_and_garbage_lines(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    got: list[Any] = []

    def progress(event: str, data: dict[str, Any]) -> None:
        got.append(data["step"])

    metrics.write_text(rows(1) + '{"step": 2, "rew')  # row 2 being written
    seen = runner_module._emit_new_steps(metrics, 0, progress, final=False)
    assert got == [1] and seen == 1
    metrics.write_text(rows(1, 2) + "not json\n[1, 2]\n" + rows(3))
    seen = runner_module._emit_new_steps(metrics, seen, progress, final=False)
    assert got == [1, 2, 3]  # a bad line does not hold back the rows after it
    with metrics.open("a") as fh:
        fh.write('{"step": 4}')  # no newline: only the final read takes it
    assert runner_module._emit_new_steps(metrics, seen, progress, final=False) == seen
    runner_module._emit_new_steps(metrics, seen, progress, final=True)
    assert got == [1, 2, 3, 4]
    assert runner_module._emit_new_steps(tmp_path / "absent.jsonl", 0, progress, final=True) == 0


def test_run_job_reports_the_last_step_written_just_before_training_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training writes its last row and exits within the tailer's poll interval: the row still counts."""
    from metatrain.sandbox.runner import SandboxResult

    bundle = _bundle_with_fake_evals(tmp_path, monkeypatch)
    steps: list[int] = []
    first_seen = threading.Event()

    def progress(event: str, data: dict[str, Any]) -> None:
        if event == "step":
            steps.append(data["step"])
            first_seen.set()

    def fake_training(policy: Any, target: str, kwargs: dict[str, Any]) -> SandboxResult:
        metrics = Path(kwargs["out_dir"]) / "metrics.jsonl"
        metrics.write_text(rows(1))
        assert first_seen.wait(10), "the tailer never reported step 1"
        with metrics.open("a") as fh:
            fh.write(rows(2))  # the last step, then training returns at once
        summary = {"steps": 2, "train_seconds": 0.1, "history": [{"step": 1}, {"step": 2}]}
        return SandboxResult(True, summary, None, 0, "", "", 0.1, {})

    monkeypatch.setattr(runner_module, "run_sandboxed", fake_training)
    result = runner_module.run_job(bundle, tmp_path / "result", progress=progress)
    assert result.status == "succeeded" and result.train_steps == 2
    assert steps == [1, 2]


def _bundle_with_fake_evals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fast calc_chain job bundle; model preparation and both evals stubbed (score 0.25)."""
    import metatrain.models

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "env.py").write_text("def load_environment(**kw):\n    return None\n")
    (ws / "job.toml").write_text(JOB_TOML)
    fields: dict[str, Any] = {"family": "calc_chain", "version": "1.0.0", "budget": "fast", "eval_n": 8}
    fields["eval"] = EvalInterface.model_construct(final_answer_turn=False, max_tokens=64)
    spec = TaskSpec.model_construct(**fields)  # make_bundle reads only these fields
    signature = inspect.signature(runner_module.run_eval)

    def fake_eval(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out = signature.bind(*args, **kwargs).arguments["out"]
        report = {"score": 0.25, "n": 8, "ci95": [0.0, 0.5], "tool_calls_per_rollout": 1.0}
        out.write_text(json.dumps(report))
        return report

    monkeypatch.setattr(metatrain.models, "prepare_model", lambda name: tmp_path)
    monkeypatch.setattr(runner_module, "run_eval", fake_eval)
    return make_bundle(tmp_path / "bundle", ws, parse_job_toml(JOB_TOML), spec, "job-m", "run-m")


def test_a_job_killed_at_the_training_wall_says_which_wall_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two fast jobs at once on a two-core machine spent a 120 s wall loading their models."""
    from metatrain.sandbox.runner import SandboxResult

    bundle = _bundle_with_fake_evals(tmp_path, monkeypatch)
    walls: list[float] = []

    def killed(policy: Any, target: str, kwargs: dict[str, Any]) -> SandboxResult:
        walls.append(policy.wall_seconds)
        return SandboxResult(False, None, "timed out after 120s", None, "", "", 120.0, {}, timed_out=True)

    monkeypatch.setattr(runner_module, "run_sandboxed", killed)
    result = runner_module.run_job(bundle, tmp_path / "result", train_wall_seconds=120.0)
    assert walls == [120.0]
    assert result.status == "failed" and result.pre_score == 0.25
    assert result.error is not None
    assert result.error.startswith(
        "training failed: timed out after 120s (the training wall, --train-wall-seconds 120:"
    )
    assert "give it more" in result.error


@pytest.mark.parametrize("timeout", [True, False])
def test_a_failed_prime_rl_run_reads_like_a_trl_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timeout: bool
) -> None:
    """The prime-rl backend's outcome carries ``timed_out`` too: its wall gets the same hint, and
    any other failure none (before, reading the flag off its outcome raised AttributeError)."""
    from metatrain.training import primerl_backend as prl

    bundle = _bundle_with_fake_evals(tmp_path, monkeypatch)
    monkeypatch.setattr(prl, "resolve_model_ref", lambda model: "Qwen/Qwen3-0.6B")

    def train(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if timeout:
            raise prl.TrainingTimeout(f"prime-rl ran past the {kwargs['wall_seconds']:.0f}s wall budget")
        raise prl.PrimeRLRunError("`uv run rl` exited with code 1: CUDA out of memory")

    monkeypatch.setattr(prl, "train", train)
    result = runner_module.run_job(bundle, tmp_path / "result", train_wall_seconds=300.0, backend="prime-rl")
    assert result.status == "failed" and result.error is not None
    if timeout:
        assert result.error.startswith(
            "training failed: TrainingTimeout: prime-rl ran past the 300s wall budget "
            "(the training wall, --train-wall-seconds 300:"
        )
    else:
        assert (
            result.error
            == "training failed: PrimeRLRunError: `uv run rl` exited with code 1: CUDA out of memory"
        )


def test_graceful_stop_leaves_time_to_save_under_the_hard_wall() -> None:
    assert runner_module.graceful_stop_seconds(900.0) == 810.0
    assert runner_module.graceful_stop_seconds(600.0) == 540.0
    assert runner_module.graceful_stop_seconds(100.0) == 70.0
    assert runner_module.graceful_stop_seconds(3600.0) == 3480.0


@pytest.mark.parametrize(
    ("elapsed", "steps", "train_elapsed", "stop_after", "expected"),
    [
        (100.0, 1, 90.0, 540.0, False),  # next step ends near 190 s
        (460.0, 5, 450.0, 540.0, True),  # next step (90 s) would end at 550 s
        (449.0, 5, 450.0, 540.0, False),  # ... at 539 s: still fits
        (600.0, 0, 0.0, 540.0, True),  # past the deadline before any step
    ],
)
def test_training_stops_when_the_next_step_would_overrun(
    elapsed: float, steps: int, train_elapsed: float, stop_after: float, expected: bool
) -> None:
    from metatrain.training.trl_backend import out_of_time

    assert out_of_time(elapsed, steps, train_elapsed, stop_after) is expected


def test_a_nan_gradient_norm_fails_the_job_at_that_step(tmp_path: Path) -> None:
    """An H200 ledger job logged grad_norm NaN at step 1, then died of a CUDA assert while sampling."""
    from types import SimpleNamespace

    from metatrain.training.trl_backend import TrainingDiverged, _callbacks, _MetricsWriter

    writer = _MetricsWriter(tmp_path / "metrics.jsonl", max_steps=40)
    [metrics] = _callbacks(writer, 0.0, None)
    state, control = SimpleNamespace(global_step=1), SimpleNamespace()
    metrics.on_log(None, state, control, logs={"loss": 0.1, "grad_norm": 0.5, "reward": 0.2})
    with pytest.raises(TrainingDiverged, match=r"gradient norm nan at step 2"):
        metrics.on_log(
            None, SimpleNamespace(global_step=2), control, logs={"loss": 0.0, "grad_norm": float("nan")}
        )
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # the diverged step is still on record


def test_the_last_step_is_not_an_early_stop(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from metatrain.training.trl_backend import _callbacks, _MetricsWriter

    _, deadline = _callbacks(_MetricsWriter(tmp_path / "m.jsonl", 2), 0.0, stop_after=0.0)
    deadline.on_train_begin(None, None, None)
    control = SimpleNamespace(should_training_stop=False)
    deadline.on_step_end(None, SimpleNamespace(global_step=2, max_steps=2), control)
    assert not control.should_training_stop and not deadline.stopped
    deadline.on_step_end(None, SimpleNamespace(global_step=1, max_steps=2), control)
    assert control.should_training_stop and deadline.stopped
