"""multi_hop: deterministic worlds, solvable through its tools, exact scoring, a valid reference job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from family_helpers import (
    BUDGETS,
    assert_deterministic,
    assert_reference_job_within_bounds,
    assert_schemas_match,
    assert_split_sized_and_disjoint,
    probe_reference_job,
)

from metatrain.specs import Example
from metatrain_families.multi_hop import DIFFICULTY, MultiHop
from metatrain_families.multi_hop.generator import generate_example
from metatrain_families.multi_hop.tools import TOOLS

FAMILY = MultiHop()
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
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_eval_are_disjoint_and_sized(budget: str) -> None:
    spec, hidden = assert_split_sized_and_disjoint(
        FAMILY, budget, key=lambda e: (e.prompt, json.dumps(e.info["world"]))
    )
    assert len({json.dumps(e.info["world"]) for e in hidden}) == len(hidden)
    assert 64 <= spec.eval.max_tokens <= 128


def test_worlds_are_json_and_answers_vary() -> None:
    hidden = FAMILY.hidden_eval("full")
    for ex in hidden:
        assert json.loads(json.dumps(ex.info["world"])) == ex.info["world"]
    assert (
        {ex.info["query"]["attribute"] for ex in hidden}
        == set(DIFFICULTY["full"].attributes)
        == {"name", "city"}
    )
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
    assert_schemas_match(schemas, TOOLS)
    for schema in schemas:
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
    assert_reference_job_within_bounds(FAMILY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path)
    assert set(scores["hop_progress"]) == {0.0}
