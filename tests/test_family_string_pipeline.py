"""string_pipeline: deterministic, solvable through its tools, exact scoring, a valid reference job."""

from __future__ import annotations

import inspect
import random
from pathlib import Path

import pytest

from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.specs import Example, parse_job_toml
from metatrain.training.table import bound_errors
from metatrain_families.string_pipeline import DIFFICULTY, StringPipeline
from metatrain_families.string_pipeline.generator import generate_example
from metatrain_families.string_pipeline.tools import TOOLS

FAMILY = StringPipeline()
BUDGETS = ["fast", "full"]


def solve(example: Example) -> str:
    """Run the example's steps through its bound tools, in order."""
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    text = example.info["world"]["input"]
    for step, expected in zip(example.info["world"]["steps"], example.info["intermediates"], strict=True):
        text = tools[step["tool"]](text=text, **step["args"])
        assert text == expected
    return str(text)


@pytest.mark.parametrize("budget", BUDGETS)
def test_generator_is_deterministic_per_seed(budget: str) -> None:
    d = DIFFICULTY[budget]
    a = [generate_example(random.Random(7), d, "x") for _ in range(3)]
    b = [generate_example(random.Random(7), d, "x") for _ in range(3)]
    assert a == b
    assert generate_example(random.Random(8), d, "x") != a[0]
    assert FAMILY.hidden_eval(budget) == FAMILY.hidden_eval(budget)
    assert FAMILY.task_spec(budget).dev_examples == FAMILY.task_spec(budget).dev_examples


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_eval_are_disjoint_and_sized(budget: str) -> None:
    spec = FAMILY.task_spec(budget)
    hidden = FAMILY.hidden_eval(budget)
    assert len(spec.dev_examples) == 5 and len(hidden) == spec.eval_n == {"fast": 48, "full": 200}[budget]
    assert not {e.prompt for e in spec.dev_examples} & {e.prompt for e in hidden}
    assert len({e.prompt for e in hidden}) == len(hidden)
    assert spec.eval.max_turns == DIFFICULTY[budget].n_steps + 2
    assert 64 <= spec.eval.max_tokens <= 128


def test_scorer_is_exact_after_stripping() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    assert FAMILY.score(ex, f"done <answer>  {ex.answer}\n</answer>") == 1.0
    assert FAMILY.score(ex, f"<answer>x</answer> then <answer>{ex.answer}</answer>") == 1.0
    for wrong in [ex.answer + "a", ex.answer[1:], ex.answer.swapcase(), f'"{ex.answer}"']:
        assert FAMILY.score(ex, f"<answer>{wrong}</answer>") == 0.0
    assert FAMILY.score(ex, ex.answer) == 0.0


def test_tool_schemas_match_the_implementations() -> None:
    schemas = FAMILY.task_spec("fast").eval.tools
    assert [s.name for s in schemas] == [fn.__name__ for fn in TOOLS]
    for schema, fn in zip(schemas, TOOLS, strict=True):
        params = [p for p in inspect.signature(fn).parameters if p != "world"]
        assert list(schema.parameters["properties"]) == params
        assert sorted(schema.parameters["required"]) == sorted(params)
        assert schema.description


def test_tools_raise_helpful_value_errors() -> None:
    tools = {fn.__name__: fn for fn in TOOLS}
    with pytest.raises(ValueError, match="single characters"):
        tools["replace_char"]("abc", "ab", "x")
    with pytest.raises(ValueError, match="integer"):
        tools["every_kth"]("abc", "two")
    assert tools["rotate_left"]("abcde", "2") == "cdeab"


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_and_dev_example_is_solvable_through_the_tools(budget: str) -> None:
    for ex in [*FAMILY.hidden_eval(budget), *FAMILY.task_spec(budget).dev_examples]:
        answer = solve(ex)
        assert answer == ex.answer
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_within_bounds(budget: str) -> None:
    files = FAMILY.reference_job(budget)
    job = parse_job_toml(files["job.toml"])
    assert job.family == FAMILY.name
    assert bound_errors(job.train, FAMILY.task_spec(budget).bounds) == []


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    for name, text in FAMILY.reference_job(budget).items():
        (tmp_path / name).write_text(text)
    outcome = validate_submission(Workspace(tmp_path), FAMILY.task_spec(budget))
    assert outcome.report.ok, outcome.report.errors
    scores = outcome.report.checks["rubric_scores"]
    assert set(scores["correct_answer"][0::2]) == {1.0}
    assert set(scores["correct_answer"][1::2]) == {0.0}
    assert set(scores["intermediate_progress"]) == {0.0}
