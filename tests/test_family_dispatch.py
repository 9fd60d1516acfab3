"""dispatch: deterministic worlds and rules, solvable through its tools, exact scoring, a valid job."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

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
from metatrain_families.dispatch import DIFFICULTY, Dispatch
from metatrain_families.dispatch.generator import generate_example
from metatrain_families.dispatch.tools import TOOLS

FAMILY = Dispatch()


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
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_eval_are_disjoint_and_sized(budget: str) -> None:
    spec, hidden = assert_split_sized_and_disjoint(FAMILY, budget)
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
    assert_schemas_match(schemas, TOOLS)
    for schema in schemas:
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
    assert_reference_job_within_bounds(FAMILY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path)
    assert set(scores["lookup_progress"]) == {0.0}
