"""Training rollouts kept in ``samples.jsonl``: which ones, and what each row holds."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

from metatrain.training.samples import append_samples, pick, sample_rows


def test_pick_spreads_over_the_batch_and_adds_the_best() -> None:
    assert pick(64, 4) == [0, 16, 32, 48]
    assert pick(64, 4, best=37) == [0, 16, 32, 37, 48]
    assert pick(64, 4, best=16) == [0, 16, 32, 48]
    assert pick(3, 4) == [0, 1, 2]
    assert pick(0, 4, best=0) == [] and pick(8, 0) == []


def _logs(n: int) -> dict[str, object]:
    """TRL's ``_logs`` layout: deques aligned by rollout index, rewards per function."""
    return {
        "prompt": deque(
            [[{"role": "system", "content": "sys"}, {"role": "user", "content": f"q{i}"}] for i in range(n)]
        ),
        "completion": deque([[{"role": "assistant", "content": f"<answer>{i}</answer>"}] for i in range(n)]),
        "rewards": {"correct_answer": deque([float(i == 5) for i in range(n)]), "steps": deque([0.5] * n)},
        "advantages": deque([2.0 if i == 5 else -0.1 for i in range(n)]),
    }


def test_rows_carry_question_completion_rewards_and_advantage(tmp_path: Path) -> None:
    rows = sample_rows(3, _logs(16), k=2)
    assert [r["index"] for r in rows] == [0, 5, 8]  # two spread out, and the most reinforced one
    best = rows[1]
    assert best["step"] == 3 and best["question"] == "q5"
    assert best["completion"] == [{"role": "assistant", "content": "<answer>5</answer>"}]
    assert best["rewards"] == {"correct_answer": 1.0, "steps": 0.5} and best["advantage"] == 2.0
    path = tmp_path / "samples.jsonl"
    append_samples(path, rows)
    append_samples(path, sample_rows(4, _logs(16), k=1))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["step"], r["index"]) for r in lines] == [(3, 0), (3, 5), (3, 8), (4, 0), (4, 5)]


def test_string_prompts_and_empty_logs() -> None:
    logs = {"prompt": ["plain question"], "completion": ["plain answer"], "rewards": {}, "advantages": []}
    assert sample_rows(1, logs) == [
        {
            "step": 1,
            "index": 0,
            "question": "plain question",
            "completion": "plain answer",
            "rewards": {},
            "advantage": None,
        }
    ]
    assert sample_rows(1, {}) == []


def _write_run(tmp_path: Path) -> Path:
    """An episode run folder whose job kept two steps of samples (the layout the runner writes)."""
    run = tmp_path / "run"
    train = run / "job" / "result" / "train"
    train.mkdir(parents=True)
    walk = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_manager", "arguments": {"name": "Ivan"}}}
            ],
        },
        {"role": "tool", "name": "get_manager", "content": "Olga"},
        {"role": "assistant", "content": "<answer>Olga</answer>"},
    ]
    logs = {
        "prompt": [[{"role": "user", "content": "Who is the manager of Ivan?"}]],
        "completion": [walk],
        "rewards": {"correct_answer": [1.0], "hop_progress": [1.0]},
        "advantages": [1.5],
    }
    append_samples(train / "samples.jsonl", sample_rows(1, logs))
    append_samples(train / "samples.jsonl", sample_rows(2, {**logs, "rewards": {"correct_answer": [0.0]}}))
    return run


def test_samples_command_shows_the_last_step_or_the_one_asked(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from metatrain.cli.app import app

    run = _write_run(tmp_path)
    last = CliRunner().invoke(app, ["samples", str(run)], env={"COLUMNS": "200"})
    assert last.exit_code == 0, last.output
    assert "step 2" in last.output and "step 1" not in last.output
    assert "correct_answer 0.00" in last.output and "advantage +1.50" in last.output
    assert "Who is the manager of Ivan?" in last.output
    assert '→ get_manager({"name": "Ivan"})' in last.output and "<answer>Olga</answer>" in last.output
    first = CliRunner().invoke(
        app, ["samples", str(run / "job" / "result"), "--step", "1"], env={"COLUMNS": "200"}
    )
    assert "step 1" in first.output and "hop_progress 1.00" in first.output and "step 2" not in first.output
    every = CliRunner().invoke(app, ["samples", str(run), "--step", "0"], env={"COLUMNS": "200"})
    assert "step 1" in every.output and "step 2" in every.output
    path = run / "job" / "result" / "train" / "samples.jsonl"
    logs = {"prompt": ["q"], "completion": ["a"], "rewards": {"hop_progress": [None]}, "advantages": [None]}
    append_samples(path, sample_rows(3, logs))  # a score prime-rl did not record for this rollout
    missing = CliRunner().invoke(app, ["samples", str(run)], env={"COLUMNS": "200"})
    assert missing.exit_code == 0 and "hop_progress None" in missing.output


def test_samples_command_names_what_is_missing_or_broken(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from metatrain.cli.app import app

    missing = CliRunner().invoke(app, ["samples", str(tmp_path)], env={"COLUMNS": "300"})
    assert missing.exit_code == 2 and "no samples.jsonl under" in missing.output
    run = _write_run(tmp_path)
    absent = CliRunner().invoke(app, ["samples", str(run), "--step", "9"], env={"COLUMNS": "200"})
    assert absent.exit_code == 2 and "no samples for step 9; kept steps: 1..2" in absent.output
    path = run / "job" / "result" / "train" / "samples.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    broken = CliRunner().invoke(app, ["samples", str(run)], env={"COLUMNS": "300"})
    assert broken.exit_code == 2 and "samples.jsonl:3: not a JSON line" in broken.output


def test_filtered_rollouts_without_an_advantage_are_never_the_best() -> None:
    logs = {
        "prompt": ["a", "b", "c"],
        "completion": ["x", "y", "z"],
        "rewards": {"correct_answer": [0.0, 1.0, 0.0]},
        "advantages": [None, 0.5, None],  # prime-rl leaves filtered rollouts without one
    }
    assert [r["index"] for r in sample_rows(1, logs, k=1)] == [0, 1]
    assert sample_rows(1, {**logs, "advantages": [None, None, None]}, k=1)[0]["advantage"] is None
