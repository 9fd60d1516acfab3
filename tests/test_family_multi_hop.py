"""multi_hop: deterministic worlds, solvable through its tools, exact scoring, a valid reference job."""

from __future__ import annotations

import inspect
import json
import random
from pathlib import Path

import pytest

from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.specs import Example, parse_job_toml
from metatrain.training.table import bound_errors
from metatrain_families.multi_hop import DIFFICULTY, MultiHop
from metatrain_families.multi_hop.generator import generate_example
from metatrain_families.multi_hop.tools import TOOLS

FAMILY = MultiHop()
BUDGETS = ["fast", "full"]
RELATION_TOOL = {"manager": "get_manager", "best_friend": "get_best_friend"}


def solve(example: Example) -> tuple[str, int]:
    """Follow the query's relations through the bound tools; returns the answer and the calls made."""
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    query = example.info["query"]
    person = query["start"]
    for rel, expected in zip(query["relations"], example.info["chain"], strict=True):
        person = tools[RELATION_TOOL[rel]](name=person)
        assert person == expected
    calls = len(query["relations"])
    if query["attribute"] == "city":
        return tools["get_city"](name=person), calls + 1
    if query["attribute"] == "job":
        return json.loads(tools["lookup_person"](name=person))["job"], calls + 1
    return person, calls


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
    dev_keys = {(e.prompt, json.dumps(e.info["world"])) for e in spec.dev_examples}
    assert not dev_keys & {(e.prompt, json.dumps(e.info["world"])) for e in hidden}
    assert len({json.dumps(e.info["world"]) for e in hidden}) == len(hidden)
    assert 64 <= spec.eval.max_tokens <= 128


def test_worlds_are_json_and_answers_vary() -> None:
    hidden = FAMILY.hidden_eval("full")
    for ex in hidden:
        assert json.loads(json.dumps(ex.info["world"])) == ex.info["world"]
    assert {ex.info["query"]["attribute"] for ex in hidden} == {"name", "city", "job"}
    assert len({ex.answer for ex in hidden}) > 20


def test_scorer_is_case_insensitive_exact() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    assert FAMILY.score(ex, f"<answer> {ex.answer.upper()} </answer>") == 1.0
    assert FAMILY.score(ex, f"<answer>{ex.answer.lower()}</answer>") == 1.0
    for wrong in [ex.answer + "s", ex.answer[1:], f"{ex.answer}.", "Nobody"]:
        assert FAMILY.score(ex, f"<answer>{wrong}</answer>") == 0.0
    assert FAMILY.score(ex, ex.answer) == 0.0


def test_tool_schemas_match_the_implementations() -> None:
    schemas = FAMILY.task_spec("fast").eval.tools
    assert [s.name for s in schemas] == [fn.__name__ for fn in TOOLS]
    for schema, fn in zip(schemas, TOOLS, strict=True):
        params = [p for p in inspect.signature(fn).parameters if p != "world"]
        assert params == ["name"]
        assert schema.parameters["properties"] == {
            "name": {"type": "string", "description": schema.parameters["properties"]["name"]["description"]}
        }
        assert schema.parameters["required"] == ["name"]


def test_unknown_names_raise_helpful_value_errors() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(ex)}
    someone = ex.info["world"]["people"][0]["name"]
    with pytest.raises(ValueError, match=f"no person named 'Nobody'.*{someone}"):
        tools["get_city"](name="Nobody")
    assert tools["get_manager"](name=f"  {someone.upper()} ") == ex.info["world"]["people"][0]["manager"]


def test_tools_do_not_share_or_mutate_the_example_world() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    before = json.dumps(ex.info["world"])
    for fn in FAMILY.tools_for(ex):
        fn(name=ex.info["world"]["people"][0]["name"])
    assert json.dumps(ex.info["world"]) == before


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_and_dev_example_is_solvable_through_the_tools(budget: str) -> None:
    spec = FAMILY.task_spec(budget)
    for ex in [*FAMILY.hidden_eval(budget), *spec.dev_examples]:
        answer, calls = solve(ex)
        assert answer == ex.answer
        assert calls + 2 <= spec.eval.max_turns
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_within_bounds(budget: str) -> None:
    job = parse_job_toml(FAMILY.reference_job(budget)["job.toml"])
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
    assert set(scores["hop_progress"]) == {0.0}
