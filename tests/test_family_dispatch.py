"""dispatch: deterministic worlds and rules, solvable through its tools, exact scoring, a valid job."""

from __future__ import annotations

import inspect
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.specs import Example, parse_job_toml
from metatrain.training.table import bound_errors
from metatrain_families.dispatch import DIFFICULTY, Dispatch
from metatrain_families.dispatch.generator import generate_example
from metatrain_families.dispatch.tools import TOOLS

FAMILY = Dispatch()
BUDGETS = ["fast", "full"]


def holds(clause: dict[str, str], facts: dict[str, dict[str, Any]]) -> bool:
    kind, key = clause["field"].split(".")
    value = facts[kind][key]
    if clause["op"] == "at_least":
        return int(value) >= int(clause["value"])
    if clause["op"] == "at_most":
        return int(value) <= int(clause["value"])
    return str(value) == clause["value"]


def solve(example: Example) -> str:
    """Fetch ticket, customer and SLA through the bound tools, then apply the rules in order."""
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    ticket = json.loads(tools["get_ticket"](ticket_id=example.info["ticket_id"]))
    customer = json.loads(tools["get_customer"](customer_id=ticket["customer_id"]))
    sla = json.loads(tools["get_sla"](tier=customer["tier"]))
    facts = {"ticket": ticket, "customer": customer, "sla": sla}
    for rule in example.info["rules"]:
        if all(holds(c, facts) for c in rule["clauses"]):
            return str(rule["queue"])
    return str(example.info["default"])


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
    assert spec.eval.max_turns == DIFFICULTY[budget].max_lookups + 2
    assert 64 <= spec.eval.max_tokens <= 128


def test_the_matching_rule_is_spread_over_positions() -> None:
    hidden = FAMILY.hidden_eval("full")
    positions = Counter(e.info["matched_rule"] for e in hidden)
    assert set(positions) == set(range(DIFFICULTY["full"].n_rules + 1))
    assert max(positions.values()) < 0.35 * len(hidden)
    assert any(item["kind"] == "sla" for e in hidden for item in e.info["lookups"])
    fast = FAMILY.hidden_eval("fast")
    assert not any(c["field"].startswith("sla.") for e in fast for r in e.info["rules"] for c in r["clauses"])


def test_scorer_is_exact_after_stripping() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    assert FAMILY.score(ex, f"Rule 4 applies. <answer> {ex.answer} </answer>") == 1.0
    for wrong in [ex.answer.upper(), ex.answer + "s", "general-queue", f"'{ex.answer}'"]:
        assert FAMILY.score(ex, f"<answer>{wrong}</answer>") == 0.0
    assert FAMILY.score(ex, ex.answer) == 0.0


def test_tool_schemas_match_the_implementations() -> None:
    schemas = FAMILY.task_spec("full").eval.tools
    assert [s.name for s in schemas] == ["get_ticket", "get_customer", "get_sla"]
    for schema, fn in zip(schemas, TOOLS, strict=True):
        params = [p for p in inspect.signature(fn).parameters if p != "world"]
        assert list(schema.parameters["properties"]) == params
        assert schema.parameters["required"] == params
        assert all(p["type"] == "string" for p in schema.parameters["properties"].values())


def test_unknown_ids_raise_helpful_value_errors() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(ex)}
    with pytest.raises(ValueError, match="no ticket id 'T-0'; known ticket ids: T-"):
        tools["get_ticket"](ticket_id="T-0")
    with pytest.raises(ValueError, match="known tiers: bronze, silver, gold, platinum"):
        tools["get_sla"](tier="diamond")
    assert (
        json.loads(tools["get_ticket"](ticket_id=f" {ex.info['ticket_id'].lower()} "))["id"]
        == ex.info["ticket_id"]
    )


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_and_dev_example_is_solvable_through_the_tools(budget: str) -> None:
    spec = FAMILY.task_spec(budget)
    for ex in [*FAMILY.hidden_eval(budget), *spec.dev_examples]:
        answer = solve(ex)
        assert answer == ex.answer
        assert len(ex.info["lookups"]) + 2 <= spec.eval.max_turns
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
    assert set(scores["lookup_progress"]) == {0.0}
