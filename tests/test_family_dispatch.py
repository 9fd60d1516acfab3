"""dispatch: deterministic worlds and rules, several tickets routed per prompt, unguessable outcomes,
solvable through its tools, all-or-nothing scoring, and a reference job that mirrors the generator."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import re
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from family_helpers import (
    BUDGETS,
    assert_deterministic,
    assert_reference_job_within_bounds,
    assert_schemas_match,
    assert_split_sized_and_disjoint,
    load_env_module,
    probe_reference_job,
    write_reference_job,
)

from metatrain.conformance import check_family, failed
from metatrain.specs import Example
from metatrain_families.common import render_template
from metatrain_families.dispatch import DIFFICULTY, LEVELS, SYSTEM_PROMPT, TABLES_SYSTEM_PROMPT, Dispatch
from metatrain_families.dispatch.generator import LANES, TEAMS, Difficulty, generate_example
from metatrain_families.dispatch.tools import TOOLS

FAMILY = Dispatch()
EASIER = Difficulty(n_tickets=5, n_route=3, n_rules=2, max_clauses=1, use_sla=False)
"""An easier ``full`` setting other engineers may try: it must stay unguessable too."""
TICKETS_RE = re.compile(r"^Route support tickets ((?:T-\d+, )*T-\d+) to queues\.")
QUEUE_RE = re.compile(r"route it to ([\w-]+)\.$", re.MULTILINE)
GUESS_LIMIT = 0.05


def holds(clause: dict[str, str], facts: dict[str, dict[str, Any]]) -> bool:
    kind, key = clause["field"].split(".")
    value = facts[kind][key]
    if clause["op"] == "at_least":
        return int(value) >= int(clause["value"])
    if clause["op"] == "at_most":
        return int(value) <= int(clause["value"])
    return str(value) == clause["value"]


def prompt_tickets(prompt: str) -> list[str]:
    """The ticket ids to route, in order, read from the prompt alone."""
    m = TICKETS_RE.match(prompt)
    assert m, prompt
    return m.group(1).split(", ")


def solve(example: Example) -> tuple[str, int]:
    """Per ticket named in the prompt, fetch ticket, customer and SLA through the bound tools and
    apply the rules in order; the answer and the tool calls made."""
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    queues, calls = [], 0
    for ticket_id in prompt_tickets(example.prompt):
        ticket = json.loads(tools["get_ticket"](ticket_id=ticket_id))
        facts = {"ticket": ticket}
        calls += 1
        if "customer_id" in ticket:  # absent at the levels without customer ids
            facts["customer"] = json.loads(tools["get_customer"](customer_id=ticket["customer_id"]))
            facts["sla"] = json.loads(tools["get_sla"](tier=facts["customer"]["tier"]))
            calls += 2
        queue = next(
            (r["queue"] for r in example.info["rules"] if all(holds(c, facts) for c in r["clauses"])),
            example.info["default"],
        )
        queues.append(str(queue))
    return ", ".join(queues), calls


def test_registered_versioned_and_knobs() -> None:
    from metatrain.plugins import load_plugins

    family = load_plugins().task_family("dispatch")
    assert (family.name, family.version, family.held_out) == ("dispatch", "1.3.0", False)
    assert DIFFICULTY["fast"] == Difficulty(n_tickets=4, n_route=3, n_rules=3, max_clauses=1, use_sla=False)
    assert DIFFICULTY["full"] == Difficulty(n_tickets=5, n_route=3, n_rules=3, max_clauses=1, use_sla=False)
    with pytest.raises(ValueError, match="n_route"):
        Difficulty(n_tickets=2, n_route=3, n_rules=3, max_clauses=1, use_sla=False)
    for budget in BUDGETS:
        spec = FAMILY.task_spec(budget)
        assert "3 ticket ids" in spec.description and "QUEUE_1, QUEUE_2, QUEUE_3" in spec.description
        assert "split on commas" in spec.eval.answer_format
    assert "QUEUE_" not in SYSTEM_PROMPT and "inside <answer></answer> tags" in SYSTEM_PROMPT


@pytest.mark.parametrize("budget", BUDGETS)
def test_generator_is_deterministic_per_seed(budget: str) -> None:
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_eval_are_disjoint_and_sized(budget: str) -> None:
    spec, hidden = assert_split_sized_and_disjoint(FAMILY, budget)
    d = DIFFICULTY[budget]
    assert len({e.prompt for e in hidden}) == len(hidden)
    assert spec.eval.max_turns == d.n_route * d.lookups_per_ticket + 2 == d.max_lookups + 2
    assert spec.bounds.max_turns.max == d.max_lookups + 4
    assert 64 <= spec.eval.max_tokens <= 256


@pytest.mark.parametrize("budget", BUDGETS)
def test_each_prompt_routes_several_tickets_of_a_larger_world(budget: str) -> None:
    d = DIFFICULTY[budget]
    for ex in FAMILY.hidden_eval(budget):
        ids = prompt_tickets(ex.prompt)
        assert ids == ex.info["ticket_ids"] and len(set(ids)) == d.n_route
        assert len(ex.info["world"]["tickets"]) == d.n_tickets > d.n_route
        assert len(ex.info["rules"]) == d.n_rules
        assert all(1 <= len(r["clauses"]) <= d.max_clauses for r in ex.info["rules"])
        named = QUEUE_RE.findall(ex.prompt)
        assert named == [*(r["queue"] for r in ex.info["rules"]), ex.info["default"]]
        assert len(set(named)) == d.n_rules + 1
        assert ex.answer == ", ".join(ex.info["queues"]) and len(ex.info["lookups"]) == d.n_route
        assert "QUEUE_" not in ex.prompt, "a placeholder in the prompt is copied instead of answered"
        assert ex.prompt.endswith(f"inside <answer></answer> tags. Start now: call get_ticket for {ids[0]}.")


def test_the_matching_rule_is_spread_over_positions() -> None:
    hidden = FAMILY.hidden_eval("full")
    for pos in range(DIFFICULTY["full"].n_route):
        positions = Counter(e.info["matched_rules"][pos] for e in hidden)
        assert set(positions) == set(range(DIFFICULTY["full"].n_rules + 1))
        assert max(positions.values()) < 0.35 * len(hidden)
    for budget in BUDGETS:
        examples = FAMILY.hidden_eval(budget)
        clauses = [c for e in examples for r in e.info["rules"] for c in r["clauses"]]
        uses_sla = any(c["field"].startswith("sla.") for c in clauses)
        assert uses_sla == DIFFICULTY[budget].use_sla


def blind_guess_scores(d: Difficulty, n: int = 2000, seed: int = 11) -> dict[str, float]:
    """The best cheap tool-free strategies, fitted and scored on the same ``n`` examples (in-sample,
    so each is if anything over-estimated): (a) always the commonest whole answer, (b) per position
    the queue of the commonest matched-rule index, (c) per position a uniform pick among the queue
    names the prompt gives (its expected score, exactly). Also each position's largest deviation of
    a matched-rule frequency from uniform."""
    rng = random.Random(seed)
    examples = [generate_example(rng, d, f"g{i}") for i in range(n)]
    constant = Counter(e.answer for e in examples).most_common(1)[0][0]
    commonest = [
        Counter(e.info["matched_rules"][p] for e in examples).most_common(1)[0][0] for p in range(d.n_route)
    ]
    uniform, index_pick, deviation = 0.0, 0.0, 0.0
    for p in range(d.n_route):
        counts = Counter(e.info["matched_rules"][p] for e in examples)
        assert set(counts) == set(range(d.n_rules + 1))
        deviation = max(deviation, *(abs(c / n - 1 / (d.n_rules + 1)) for c in counts.values()))
    for ex in examples:
        named = QUEUE_RE.findall(ex.prompt)  # the rules' queues, then the default's
        index_pick += FAMILY.score(ex, f"<answer>{', '.join(named[i] for i in commonest)}</answer>")
        chance = 1.0
        for queue in ex.info["queues"]:
            chance *= named.count(queue) / len(named)
        uniform += chance
    return {
        "constant": sum(FAMILY.score(ex, f"<answer>{constant}</answer>") for ex in examples) / n,
        "commonest rule": index_pick / n,
        "uniform pick": uniform / n,
        "deviation": deviation,
    }


@pytest.mark.parametrize("budget", BUDGETS)
def test_blind_guesses_score_under_the_floor(budget: str) -> None:
    d = DIFFICULTY[budget]
    scores = blind_guess_scores(d)
    chance = (d.n_rules + 1) ** -d.n_route  # 1/64 fast, 1/125 full
    assert scores["constant"] < 0.02, scores
    assert scores["commonest rule"] < min(GUESS_LIMIT, 2 * chance), scores
    assert scores["uniform pick"] == pytest.approx(chance), scores
    assert scores["deviation"] < 0.03, scores


def test_an_easier_full_setting_stays_unguessable() -> None:
    scores = blind_guess_scores(EASIER)
    assert scores["constant"] < 0.02 and scores["uniform pick"] == pytest.approx(1 / 27), scores
    assert scores["commonest rule"] < GUESS_LIMIT and scores["deviation"] < 0.03, scores
    for ex in [generate_example(random.Random(s), EASIER, "x") for s in range(20)]:
        assert solve(ex)[0] == ex.answer


def test_the_kits_guess_floor_passes_on_both_budgets() -> None:
    assert not failed(check_family(FAMILY, ("fast", "full"), ("guess floor",)))


def test_scorer_is_all_or_nothing_after_splitting_and_stripping() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    queues = ex.info["queues"]
    assert FAMILY.score(ex, f"Rule 4 applies. <answer> {ex.answer} </answer>") == 1.0
    assert FAMILY.score(ex, f"<answer>{' ,'.join(queues)}</answer>") == 1.0
    assert FAMILY.score(ex, f"<answer>x</answer> then <answer>{',  '.join(queues)}</answer>") == 1.0
    other = next(q for q in ("general", "refunds", "vip-care") if q != queues[1])
    wrong = [
        ex.answer.upper(),
        ", ".join(queues[:2]),
        ", ".join([*queues, queues[0]]),
        ex.answer + ",",
        "; ".join(queues),
        " ".join(queues),
        ", ".join([queues[0], other, queues[2]]),
        f"'{ex.answer}'",
    ]
    for text in wrong:
        assert FAMILY.score(ex, f"<answer>{text}</answer>") == 0.0, text
    assert FAMILY.score(ex, ex.answer) == 0.0
    assert FAMILY.score(ex, f"<answer>{ex.answer}</answer> <answer>{queues[0]}</answer>") == 0.0


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
    first = ex.info["ticket_ids"][0]
    assert json.loads(tools["get_ticket"](ticket_id=f" {first.lower()} "))["id"] == first


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_and_dev_example_is_solvable_through_the_tools(budget: str) -> None:
    spec = FAMILY.task_spec(budget)
    d = DIFFICULTY[budget]
    for ex in [*FAMILY.hidden_eval(budget), *spec.dev_examples]:
        answer, calls = solve(ex)
        assert answer == ex.answer
        assert calls <= d.n_route * 3 and sum(map(len, ex.info["lookups"])) + 2 <= spec.eval.max_turns
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0


# ---- the reference job ----


def _env_module(tmp_path: Path, budget: str) -> ModuleType:
    return load_env_module(
        write_reference_job(FAMILY, budget, tmp_path / f"ws-{budget}"), f"dispatch_{budget}"
    )


def _rendered_env(tmp_path: Path, d: Difficulty, name: str) -> ModuleType:
    """The reference env rendered for knobs no budget uses."""
    text = render_template(
        FAMILY.templates,
        "reference_env.py.tmpl",
        system_prompt=repr(SYSTEM_PROMPT),
        max_turns=FAMILY.max_turns(d),
        **FAMILY.env_values(d),
    )
    (tmp_path / name).mkdir()
    (tmp_path / name / "env.py").write_text(text)
    return load_env_module(tmp_path / name, f"dispatch_{name}")


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_within_bounds(budget: str) -> None:
    assert_reference_job_within_bounds(FAMILY, budget, whole_job=True)


def _mirrors(env: ModuleType, d: Difficulty) -> None:
    for seed in range(30):
        row = env._example(random.Random(seed))
        ex = generate_example(random.Random(seed), d, "x")
        want = {k: ex.info[k] for k in ("world", "queues", "lookups")}
        assert (row["question"], row["answer"], row["info"]) == (ex.prompt, ex.answer, want)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_env_mirrors_the_generator(budget: str, tmp_path: Path) -> None:
    env = _env_module(tmp_path, budget)
    _mirrors(env, DIFFICULTY[budget])
    assert env.load_environment(num_examples=3).max_turns == FAMILY.task_spec(budget).eval.max_turns


def test_reference_env_mirrors_the_generator_at_easier_knobs(tmp_path: Path) -> None:
    _mirrors(_rendered_env(tmp_path, EASIER, "easier"), EASIER)


def _call(name: str, args: dict[str, Any], i: int) -> Any:
    from verifiers.types import AssistantMessage, ToolCall

    return AssistantMessage(
        content="", tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=json.dumps(args))]
    )


def _reply(text: str) -> Any:
    import verifiers as vf

    return vf.AssistantMessage(content=text)


def _check_rubric(module: ModuleType, env: Any, ex: Example) -> None:
    import verifiers as vf

    info = copy.deepcopy(ex.info)
    state = vf.State(input={"prompt": [], "answer": ex.answer, "info": info, "example_id": 0})

    def fetch(name: str, args: dict[str, Any]) -> list[Any]:
        call = _call(name, args, 0)
        return [call, *asyncio.run(env.env_response([call], state))]

    def scores(completion: list[Any]) -> tuple[float, float]:
        return module.correct_answer(completion, ex.answer), module.lookup_progress(completion, info)

    solved: list[Any] = []
    tickets_only: list[Any] = []
    for ticket_id in ex.info["ticket_ids"]:
        got = fetch("get_ticket", {"ticket_id": ticket_id})
        customer = fetch("get_customer", {"customer_id": json.loads(got[-1].content)["customer_id"]})
        solved += got + customer + fetch("get_sla", {"tier": json.loads(customer[-1].content)["tier"]})
        tickets_only += got
    assert info == ex.info
    queues = ex.info["queues"]
    right = _reply(f"<answer>{ex.answer}</answer>")
    assert scores([*solved, right]) == (1.0, 1.0)
    assert scores([*solved, _reply(ex.answer)]) == (0.0, 0.0)  # right queues, no <answer> block
    assert scores([right]) == (1.0, 0.0)  # a blind right guess earns only the answer
    other = next(q for q in ("general", "refunds", "vip-care") if q != queues[1])
    one_wrong = _reply(f"<answer>{queues[0]}, {other}, {queues[2]}</answer>")
    assert scores([*solved, one_wrong]) == (0.0, pytest.approx(2 / 3))
    ticket_only = sum([item["kind"] for item in items] == ["ticket"] for items in ex.info["lookups"])
    assert scores([*tickets_only, right]) == (1.0, pytest.approx(ticket_only / 3))
    everything = [
        m
        for t in ex.info["world"]["tickets"]
        for m in fetch("get_ticket", {"ticket_id": t["id"]})
        + fetch("get_customer", {"customer_id": t["customer_id"]})
    ] + [m for s in ex.info["world"]["slas"] for m in fetch("get_sla", {"tier": s["tier"]})]
    wrong = [next(q for q in ("general", "refunds", "vip-care", "retention") if q != x) for x in queues]
    assert scores([*everything, _reply(f"<answer>{', '.join(wrong)}</answer>")]) == (0.0, 0.0)
    assert scores([*everything, _reply("<answer>no idea</answer>")]) == (0.0, 0.0)


def test_reference_env_rubric_pays_right_queues_backed_by_fetched_records(tmp_path: Path) -> None:
    """Partial credit: per routed ticket, the right queue *and* every record its rules need fetched."""
    module = _env_module(tmp_path, "full")
    env = module.load_environment(num_examples=2)
    for ex in FAMILY.task_spec("full").dev_examples:
        _check_rubric(module, env, ex)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path)
    assert set(scores["lookup_progress"]) == {0.0}


TICKET_FACTS = Difficulty(
    n_tickets=5, n_route=2, n_rules=4, max_clauses=1, use_sla=False, customer_rules=False
)
"""A calibration level (``LEVELS``): rules on ticket facts only, so one lookup decides a ticket."""


def test_rules_on_ticket_facts_need_only_the_ticket_and_stay_unguessable(tmp_path: Path) -> None:
    examples = [generate_example(random.Random(s), TICKET_FACTS, "x") for s in range(200)]
    fields = {c["field"] for ex in examples for r in ex.info["rules"] for c in r["clauses"]}
    assert fields == {"ticket.category", "ticket.severity", "ticket.channel"}
    assert all(item["kind"] == "ticket" for ex in examples for items in ex.info["lookups"] for item in items)
    assert Dispatch().at_knobs("full", TICKET_FACTS).task_spec("full").eval.max_turns == 2 + 2
    for ex in examples[:20]:
        assert solve(ex)[0] == ex.answer
    outcomes = Counter(m for ex in examples for m in ex.info["matched_rules"])
    assert set(outcomes) == set(range(5)) and min(outcomes.values()) > 40  # uniform over 5 outcomes
    _mirrors(_rendered_env(tmp_path, TICKET_FACTS, "ticket_facts"), TICKET_FACTS)


def test_the_customer_rules_knob_leaves_the_shipped_draws_unchanged() -> None:
    for budget in BUDGETS:
        d = DIFFICULTY[budget]
        assert d.customer_rules
        explicit = Difficulty(
            d.n_tickets, d.n_route, d.n_rules, d.max_clauses, d.use_sla, customer_rules=True
        )
        for seed in range(5):
            a = generate_example(random.Random(seed), d, "x")
            assert a == generate_example(random.Random(seed), explicit, "x")


@pytest.mark.parametrize("label", [label for label in LEVELS["full"] if label.startswith("guided")])
def test_guided_levels_end_with_the_steps_and_stay_solvable(label: str, tmp_path: Path) -> None:
    d = LEVELS["full"][label]
    unguided = attrs.evolve(d, guided=False)
    for seed in range(20):
        ex = generate_example(random.Random(seed), d, "x")
        plain = generate_example(random.Random(seed), unguided, "x")
        assert (ex.answer, ex.info) == (plain.answer, plain.info)  # the same draw, another ending
        ids = ex.info["ticket_ids"]
        head, steps = ex.prompt.split("\nSteps:\n")
        assert plain.prompt.startswith(head + "\nLook up the facts")
        lines = steps.split("\n")
        assert lines.pop() == f"Start now: call get_ticket for {ids[0]}."
        assert len(lines) == len(ids) + 1
        for i, tid in enumerate(ids):
            assert lines[i].startswith(f"{i + 1}. Call get_ticket for {tid}")
            assert ("get_customer" in lines[i]) == d.customer_rules
        assert lines[-1].startswith(f"{len(ids) + 1}. Reply with the {len(ids)} queue names")
        assert prompt_tickets(ex.prompt) == ids
        assert solve(ex)[0] == ex.answer
    _mirrors(_rendered_env(tmp_path, d, "guided"), d)


@pytest.mark.parametrize("label", [lvl for lvl in LEVELS["full"] if lvl.endswith("without customer ids")])
def test_levels_without_customer_ids_show_no_id_to_chase(label: str, tmp_path: Path) -> None:
    d = LEVELS["full"][label]
    family = Dispatch().at_knobs("full", d)
    (get_ticket,) = (t for t in family.task_spec("full").eval.tools if t.name == "get_ticket")
    assert "customer_id" not in get_ticket.description
    with_ids = attrs.evolve(d, customer_ids=True)
    for seed in range(20):
        ex = generate_example(random.Random(seed), d, "x")
        plain = generate_example(random.Random(seed), with_ids, "x")
        assert ex.answer == plain.answer  # the same draw, less shown
        assert not any("customer_id" in t for t in ex.info["world"]["tickets"])
        tools = {fn.__name__: fn for fn in family.tools_for(ex)}
        for tid in ex.info["ticket_ids"]:
            assert "C-" not in tools["get_ticket"](ticket_id=tid)
        reply = ex.prompt.split("\n")[-2]
        assert "queue names the rules picked" in reply and "T-" not in reply
        assert solve(ex) == (ex.answer, len(ex.info["ticket_ids"]))
    with pytest.raises(TypeError, match=r"get_ticket\(\) missing"):
        family.tools_for(ex)[0]()
    env = _rendered_env(tmp_path, d, "no_ids")
    _mirrors(env, d)
    assert "customer_id" not in (env.get_ticket.__doc__ or "")
    with pytest.raises(ValueError, match="ticket facts only"):
        attrs.evolve(DIFFICULTY["full"], customer_ids=False)


def test_the_one_tool_level_offers_get_ticket_alone(tmp_path: Path) -> None:
    """Its eval tool interface, its examples' tools and its reference environment agree; a lean level
    whose rules could need a customer is refused."""
    d = LEVELS["full"]["guided, 2 tickets, 4 rules on ticket facts, tickets without customer ids, one tool"]
    family = Dispatch().at_knobs("full", d)
    assert [t.name for t in family.task_spec("full").eval.tools] == ["get_ticket"]
    for seed in range(20):
        ex = generate_example(random.Random(seed), d, "x")
        assert ex.info["world"]["tools"] == "lean"
        assert [fn.__name__ for fn in family.tools_for(ex)] == ["get_ticket"]
        assert "get_customer" not in ex.prompt and "get_sla" not in ex.prompt
        assert solve(ex) == (ex.answer, len(ex.info["ticket_ids"]))
    assert all("tools" not in ex.info["world"] for ex in FAMILY.task_spec("full").dev_examples)
    env = _rendered_env(tmp_path, d, "lean")
    _mirrors(env, d)
    assert [fn.__name__ for fn in env.TOOLS] == ["get_ticket"]
    with pytest.raises(ValueError, match="lean_tools needs customer_ids=False"):
        attrs.evolve(d, customer_ids=True, customer_rules=False)


@pytest.mark.parametrize("label", [lvl for lvl in LEVELS["full"] if "category rules" in lvl])
def test_category_rule_levels_read_as_a_table_and_stay_unguessable(label: str, tmp_path: Path) -> None:
    """Each rule tests the category alone, each outcome stays uniform, blind guesses stay under the
    floor, and the reference environment draws the same rules."""
    d = LEVELS["full"][label]
    assert d.category_rules and d.guided and not d.customer_ids
    examples = [generate_example(random.Random(s), d, "x") for s in range(300)]
    for ex in examples:
        clauses = [c for r in ex.info["rules"] for c in r["clauses"]]
        assert [c["field"] for c in clauses] == ["ticket.category"] * d.n_rules
        assert len({c["value"] for c in clauses}) == d.n_rules  # no rule shadowed by an earlier one
    for ex in examples[:20]:
        assert solve(ex) == (ex.answer, d.n_route)
    outcomes = Counter(m for ex in examples for m in ex.info["matched_rules"])
    expected = 300 * d.n_route / (d.n_rules + 1)
    assert set(outcomes) == set(range(d.n_rules + 1)) and min(outcomes.values()) > 0.7 * expected
    scores = blind_guess_scores(d)
    assert scores["uniform pick"] == pytest.approx((d.n_rules + 1) ** -d.n_route), scores
    assert max(scores["constant"], scores["commonest rule"]) < GUESS_LIMIT, scores
    _mirrors(_rendered_env(tmp_path, d, "category"), d)
    with pytest.raises(ValueError, match="category_rules needs rules on ticket facts only"):
        attrs.evolve(d, customer_rules=True, customer_ids=True)
    with pytest.raises(ValueError, match="category_rules needs n_rules < 6"):
        attrs.evolve(d, n_rules=6)


TABLE_LEVELS = [label for label in LEVELS["full"] if label.startswith("two tables")]
TABLE_ROW_RE = re.compile(r"^- (.+) -> (\w+)$", re.MULTILINE)


def solve_tables(example: Example, tools: dict[str, Any]) -> str:
    """Route the ticket from the prompt's two tables and the tools alone: fetch the ticket, look its
    category up in the team table (else the default row) and its channel in the lane table, fetch that
    queue's code."""
    team_part, lane_part = example.prompt.split("\nLane by the ticket's channel:\n")
    team_rows = dict(TABLE_ROW_RE.findall(team_part))
    lanes = dict(TABLE_ROW_RE.findall(lane_part))
    default = team_rows.pop("any other category")
    (ticket_id,) = re.findall(r"T-\d+", example.prompt.split("\n")[0])
    ticket = json.loads(tools["get_ticket"](ticket_id=ticket_id))
    team = team_rows.get(ticket["category"], default)
    return str(tools["get_queue_code"](team=team, lane=lanes[ticket["channel"]]))


@pytest.mark.parametrize("label", TABLE_LEVELS)
def test_two_table_levels_are_solvable_from_the_prompt_and_a_blind_pick_stays_under_the_floor(
    label: str,
) -> None:
    d = LEVELS["full"][label]
    family = Dispatch().at_knobs("full", d)
    spec = family.task_spec("full")
    assert [t.name for t in spec.eval.tools] == ["get_ticket", "get_queue_code"]
    assert_schemas_match(spec.eval.tools, family.tools_at(d))
    assert spec.eval.max_turns == 6 and spec.bounds.max_turns.max == 8
    assert "Q-1234" in spec.eval.answer_format and "0.042" in spec.description
    examples = [generate_example(random.Random(s), d, "x") for s in range(2400)]
    for ex in examples[:50]:
        tools = {fn.__name__: fn for fn in family.tools_for(ex)}
        assert solve_tables(ex, tools) == ex.answer
        assert family.score(ex, f"I routed it. <answer> {ex.answer} </answer>") == 1.0
        assert family.score(ex, f"<answer>{ex.info['team']}/{ex.info['lane']}</answer>") == 0.0
    # Ignoring the tables, the best a policy can do is a fixed (team row, lane row) of the prompt.
    by_rows: Counter[tuple[int, int]] = Counter()
    for ex in examples:
        rows = TABLE_ROW_RE.findall(ex.prompt)
        team_rows = [t for c, t in rows[: d.n_rules + 1]]
        lane_rows = [lane for c, lane in rows[d.n_rules + 1 :]]
        by_rows[team_rows.index(ex.info["team"]), lane_rows.index(ex.info["lane"])] += 1
    outcomes = 4 * (d.n_rules + 1)
    assert len(by_rows) == outcomes and 1 / outcomes < GUESS_LIMIT
    expected = len(examples) / outcomes  # uniform by construction: each cell near it (3.5 sigma)
    assert all(0.65 * expected < n < 1.35 * expected for n in by_rows.values()), by_rows.most_common(3)
    assert len({ex.answer for ex in examples}) > 1500  # codes drawn per example: no constant answer


def test_two_table_tools_name_the_valid_teams_and_lanes_but_no_code() -> None:
    d = LEVELS["full"]["two tables, one ticket, worked example"]
    family = Dispatch().at_knobs("full", d)
    ex = family.hidden_eval("full")[0]
    tools = {fn.__name__: fn for fn in family.tools_for(ex)}
    ticket = json.loads(tools["get_ticket"](ticket_id=ex.info["ticket_ids"][0]))
    assert set(ticket) == {"id", "category", "channel"}
    with pytest.raises(ValueError, match=r"no queue '.+/.+': teams are .+; lanes are .+\. Take them") as err:
        tools["get_queue_code"](team=ticket["category"], lane=ticket["channel"])
    assert ex.info["team"] in str(err.value) and "Q-" not in str(err.value)
    assert tools["get_queue_code"](team=f" {ex.info['team'].upper()} ", lane=ex.info["lane"]) == ex.answer
    prompt = family.task_spec("full").eval.system_prompt
    assert prompt.startswith(TABLES_SYSTEM_PROMPT) and "Worked example" in prompt
    assert "oak" not in TEAMS and "up" not in LANES  # the example's names are none an example draws
    plain = Dispatch().at_knobs("full", LEVELS["full"]["two tables, one ticket"])
    assert plain.task_spec("full").eval.system_prompt == TABLES_SYSTEM_PROMPT
    assert plain.hidden_eval("full") == family.hidden_eval("full")  # the same draws: a paired comparison
    with pytest.raises(ValueError, match="calibration candidates without a reference job"):
        family.reference_job("full")
    with pytest.raises(ValueError, match="two_tables routes one ticket"):
        attrs.evolve(d, n_route=2, n_tickets=2)
    with pytest.raises(ValueError, match="worked_example needs two_tables"):
        attrs.evolve(DIFFICULTY["full"], worked_example=True)
    assert Dispatch().task_spec("full").eval.system_prompt == SYSTEM_PROMPT  # the shipped level untouched
