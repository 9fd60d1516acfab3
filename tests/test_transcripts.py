"""``metatrain transcripts``: an untrained model played on a family's dev examples, as the eval plays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_tokenizer import save_tiny_model, tiny_tokenizer
from typer.testing import CliRunner

from metatrain.cli.app import app
from metatrain.cli.families import default_model
from metatrain.models import EMBEDDED_MODELS
from metatrain.plugins import load_plugins


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-chatml"), tiny_tokenizer("chatml"))


def test_transcripts_plays_dev_examples_and_writes_one_line_each(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    args = ["transcripts", "calc_chain", "--budget", "fast", "--model", str(tiny_dir), "--n", "2"]
    res = CliRunner().invoke(app, [*args, "--out", str(out), "--width", "80"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    spec = load_plugins().task_family("calc_chain").task_spec("fast")
    dev = spec.dev_examples[:2]
    assert [r["id"] for r in rows] == [ex.id for ex in dev]
    assert [r["answer"] for r in rows] == [ex.answer for ex in dev]
    for r, ex in zip(rows, dev, strict=True):
        assert r["messages"][:2] == [
            {"role": "system", "content": spec.eval.system_prompt},
            {"role": "user", "content": ex.prompt},
        ]
        assert r["messages"][2]["role"] == "assistant"
        assert r["score"] in (0.0, 1.0)
    shown = " ".join(res.output.split())  # the console wraps at its width
    assert f"answer {dev[0].answer!r}" in shown
    assert "(2 dev examples)" in shown


def test_transcripts_rejects_unknown_family_and_budget(tiny_dir: Path) -> None:
    res = CliRunner().invoke(app, ["transcripts", "no_such_family", "--model", str(tiny_dir)])
    assert res.exit_code == 2 and "no_such_family" in res.output
    res = CliRunner().invoke(app, ["transcripts", "calc_chain", "--budget", "huge", "--model", str(tiny_dir)])
    assert res.exit_code == 2 and "budget must be fast or full" in res.output


def test_default_model_is_the_best_baseline() -> None:
    family = load_plugins().task_family("calc_chain")
    assert default_model(family, "full") == "qwen2.5-coder-0.5b"  # 0.095 against 0.000 and 0.000
    fast = family.task_spec("fast").bounds.models  # every fast baseline is 0: the largest allowed model
    assert default_model(family, "fast") == max(fast, key=lambda k: EMBEDDED_MODELS[k].params)


def test_transcripts_plays_a_calibration_levels_dev_examples(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    label = "guided, no dependency, deploy"
    args = [
        "transcripts",
        "triage",
        "--model",
        str(tiny_dir),
        "--n",
        "1",
        "--level",
        label,
        "--out",
        str(out),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    family = load_plugins().task_family("triage")
    (ex,) = family.calibration_levels("full")[label].task_spec("full").dev_examples[:1]
    assert ex.prompt != family.task_spec("full").dev_examples[0].prompt
    assert (row["id"], row["answer"], row["messages"][1]["content"]) == (ex.id, ex.answer, ex.prompt)
    assert f"level {label!r}" in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["transcripts", "triage", "--model", str(tiny_dir), "--level", "nope"])
    assert res.exit_code == 2 and "triage has no level 'nope'" in " ".join(res.output.split())
