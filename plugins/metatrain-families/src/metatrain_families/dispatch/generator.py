"""dispatch's example generator: a support-desk world, one list of ordered routing rules, and
several of the world's tickets to route by it.

Why the outcome cannot be guessed: the rules (and the SLA table) are drawn without looking at any
ticket, then each routed ticket's deciding facts are drawn conditioned on a target outcome chosen
uniformly and independently per ticket. So for every routed ticket the matching rule (or the
default) is uniform over the ``n_rules + 1`` outcomes, independent of the other tickets and of
anything the prompt says; a tool-free guess of the whole answer is right with probability
``(n_rules + 1) ** -n_route`` (1/64 on ``fast``, 1/125 on ``full``).
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import attrs

from metatrain.specs import Example
from metatrain_families.dispatch.rules import FIELDS, clause_holds, describe, route

CATEGORIES = ("billing", "login", "outage", "refund", "bug", "security")
CHANNELS = ("email", "phone", "chat")
TIERS = ("bronze", "silver", "gold", "platinum")
REGIONS = ("EU", "US", "APAC")
HOURS = (1, 2, 4, 8, 12, 24, 48, 72)
QUEUES = (
    "billing-desk",
    "tech-support",
    "escalations",
    "fraud-review",
    "onboarding",
    "enterprise-desk",
    "general",
    "refunds",
    "security-team",
    "outage-response",
    "vip-care",
    "retention",
)
VALUES: dict[str, tuple[str, ...]] = {
    "ticket.category": CATEGORIES,
    "ticket.severity": ("2", "3", "4"),
    "ticket.channel": CHANNELS,
    "customer.tier": TIERS,
    "customer.region": REGIONS,
    "sla.response_hours": tuple(str(h) for h in HOURS[:-1]),
}
"""The values a rule's clause may test ("at most 72 hours" would always hold, so it is left out)."""
FACTS: dict[str, tuple[Any, ...]] = {
    "ticket.category": CATEGORIES,
    "ticket.severity": (1, 2, 3, 4),
    "ticket.channel": CHANNELS,
    "customer.tier": TIERS,
    "customer.region": REGIONS,
}
"""The facts drawn per ticket (uniform, independent); the SLA's response hours follow the tier."""
MAX_RULE_DRAWS = 1000

TABLE_CATEGORIES = (
    *CATEGORIES,
    *("shipping", "invoice", "account", "api", "password", "upgrade", "cancel", "export", "import"),
    *("storage", "network", "email", "mobile", "privacy", "report", "search", "sync", "webhook"),
    *("latency", "quota"),
)
"""Ticket categories at the two-table levels: the table names ``n_rules`` of them, a ticket outside
it goes to the default team."""
TEAMS = (
    *("amber", "birch", "cedar", "dune", "elm", "fern", "grove", "heath", "iris", "jade", "kelp"),
    *("lark", "moss", "nile", "opal", "pine", "quartz", "reed", "sage", "teal", "umber", "vale"),
    *("willow", "yarrow", "zinc", "aspen", "basalt", "coral"),
)
"""Team names at the two-table levels: neutral words, so no name hints at a category (with names
such as ``refunds`` untrained Qwen2.5-Coder's right answers came from spelling: docs/families.md)."""
LANE_CHANNELS = ("email", "phone", "chat", "web")
LANES = ("north", "south", "east", "west", "upper", "lower")


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_tickets: int
    """Tickets (and their customers) in the world; all but ``n_route`` are distractors."""
    n_route: int
    """Tickets the prompt asks to route, all by the same rules; the answer lists their queues."""
    n_rules: int
    max_clauses: int
    use_sla: bool
    """Whether rules may test the SLA of the customer's tier (a third, dependent lookup)."""
    customer_rules: bool = True
    """Whether rules may test the customer's tier or region; without them (and without SLAs) one
    lookup per ticket decides its queue (a calibration level: ``metatrain calibrate dispatch``)."""
    guided: bool = False
    """Whether the prompt spells out the steps, ticket by ticket, before asking for the first call (a
    calibration level: untrained Qwen2.5-Coder repeated ``get_ticket`` for the first ticket)."""
    customer_ids: bool = True
    """Whether a ticket record shows its customer's id. Without it (a calibration level, rules on ticket
    facts only) no record holds an id to chase, and the guided reply step names no ticket id: with
    them, untrained Qwen2.5-Coder fetched the customer ids through ``get_ticket`` and answered the
    ticket ids (3 of 3 guided dev examples, CPU)."""
    lean_tools: bool = False
    """Whether ``get_ticket`` is the only tool offered, the one that rules on ticket facts need (a
    calibration level): with ``get_customer`` and ``get_sla`` beside it, untrained Qwen2.5-Coder
    looped on ``get_customer``; offered ``get_ticket`` alone it called no tool at all (12 draws,
    CPU; docs/families.md, calibration)."""

    category_rules: bool = False
    """Whether every rule tests the ticket's category alone (a calibration level, ticket facts only):
    the rules read as a table from category to queue. With rules on severity and channel beside it,
    untrained Qwen2.5-Coder fetched both tickets and then answered every queue the rules name
    (docs/families.md, calibration)."""

    two_tables: bool = False
    """Whether the example is one ticket routed by two short tables (a calibration level): its
    category names one of ``n_rules + 1`` teams (``n_rules`` categories and a default), its channel
    one of four lanes, and the answer is the code ``get_queue_code(team, lane)`` returns. Ignoring
    both tables, a policy whose every lookup is right scores 1 / (4 (n_rules + 1)): 1/24 at five
    rules, where one long table the model could not apply (twenty-second session)."""
    worked_example: bool = False
    """Whether the system prompt at a two-table level shows one worked example, with names and a code
    no example uses (on one H100 it took untrained Qwen2.5-Coder from 0.010 to 0.070 on the
    twenty-third session's probe)."""

    def __attrs_post_init__(self) -> None:
        if self.two_tables:
            self._check_tables()
            return
        if self.worked_example:
            raise ValueError("worked_example needs two_tables (the example shows the two tables' steps)")
        if not 1 <= self.n_route <= self.n_tickets:
            raise ValueError(f"need 1 <= n_route <= n_tickets, got {self.n_route} and {self.n_tickets}")
        if not 1 <= self.n_rules < len(QUEUES):
            raise ValueError(f"n_rules must be 1..{len(QUEUES) - 1}, got {self.n_rules}")
        if self.max_clauses < 1:
            raise ValueError(f"max_clauses must be at least 1, got {self.max_clauses}")
        if not self.customer_ids and (self.customer_rules or self.use_sla):
            raise ValueError("customer_ids=False needs rules on ticket facts only (no customer rules or SLA)")
        if self.lean_tools and self.customer_ids:
            raise ValueError("lean_tools needs customer_ids=False (rules on ticket facts only)")
        if self.category_rules and (self.customer_rules or self.use_sla):
            raise ValueError("category_rules needs rules on ticket facts only (no customer rules or SLA)")
        if self.category_rules and self.n_rules >= len(CATEGORIES):
            raise ValueError(
                f"category_rules needs n_rules < {len(CATEGORIES)} (one category a rule, and a default)"
            )

    def _check_tables(self) -> None:
        if (self.n_tickets, self.n_route) != (1, 1):
            raise ValueError("two_tables routes one ticket: n_tickets and n_route must be 1")
        if self.customer_rules or self.use_sla or self.customer_ids or self.guided or self.lean_tools:
            raise ValueError(
                "two_tables needs customer_rules, use_sla, customer_ids, guided and lean_tools off"
            )
        if not 1 <= self.n_rules <= len(TABLE_CATEGORIES) - 3 or self.n_rules + 1 > len(TEAMS):
            most = len(TABLE_CATEGORIES) - 3
            raise ValueError(f"two_tables needs 1 <= n_rules <= {most}, got {self.n_rules}")

    @property
    def lookups_per_ticket(self) -> int:
        """Records one routed ticket may need: the ticket, its customer and (with SLAs) the tier's SLA;
        at a two-table level the ticket and the queue's code."""
        if self.two_tables:
            return 2
        return 3 if self.use_sla else 2 if self.customer_rules else 1

    @property
    def max_lookups(self) -> int:
        """Tool calls a solver may need for the whole prompt."""
        return self.n_route * self.lookups_per_ticket


def rule_may_test(field: str, use_sla: bool, customer_rules: bool, category_rules: bool = False) -> bool:
    """Whether a rule may have a clause on ``field`` under these knobs."""
    if category_rules:
        return field == "ticket.category"
    kind = field.split(".")[0]
    return (kind != "sla" or use_sla) and (kind != "customer" or customer_rules)


def answer_template(n_route: int) -> str:
    """The answer's shape as the prompt shows it: ``QUEUE_1, QUEUE_2, QUEUE_3`` for three tickets."""
    return ", ".join(f"QUEUE_{i + 1}" for i in range(n_route))


def closing(d: Difficulty, ids: list[str]) -> str:
    """The prompt's last part: the answer's shape and the first call, or with ``guided`` the steps
    before that call (ending on a call, not on the answer, is what made untrained Qwen2.5-Coder call
    tools rather than copy an answer template: docs/families.md)."""
    if not d.guided:
        return (
            f"Look up the facts you need with the tools. When every ticket is routed, reply with the "
            f"{len(ids)} queue names, comma-separated in the order the tickets are listed, inside "
            f"<answer></answer> tags. Start now: call get_ticket for {ids[0]}."
        )
    fetch = ""
    if d.customer_rules or d.use_sla:
        fetch += ", then get_customer for its customer_id if a rule tests the customer"
    if d.use_sla:
        fetch += ", then get_sla for the customer's tier if a rule tests the SLA"
    todo = [f"Call get_ticket for {tid}{fetch}; pick {tid}'s queue by the rules." for tid in ids]
    todo.append(
        f"Reply with the {len(ids)} queue names, comma-separated in the order {', '.join(ids)}, inside "
        "<answer></answer> tags."
        if d.customer_ids
        else f"Reply with the {len(ids)} queue names the rules picked, comma-separated in the order of the "
        "steps above, inside <answer></answer> tags."
    )
    steps = "\n".join(f"{i}. {line}" for i, line in enumerate(todo, 1))
    return f"Steps:\n{steps}\nStart now: call get_ticket for {ids[0]}."


def _rule(rng: random.Random, d: Difficulty, queue: str) -> dict[str, Any]:
    """A rule drawn without looking at any ticket: 1..max_clauses clauses on distinct fields."""
    fields = [f for f in FIELDS if rule_may_test(f, d.use_sla, d.customer_rules, d.category_rules)]
    chosen = rng.sample(fields, rng.randint(1, min(d.max_clauses, len(fields))))
    clauses = [{"field": f, "op": FIELDS[f][0], "value": rng.choice(VALUES[f])} for f in chosen]
    return {"clauses": clauses, "queue": queue}


SPACE = list(itertools.product(*FACTS.values()))
"""Every combination of the drawn facts, in ``FACTS`` order; a set of them is a bit mask over it."""
MASKS = {
    (field, value): sum(1 << i for i, combo in enumerate(SPACE) if combo[pos] == value)
    for pos, (field, values) in enumerate(FACTS.items())
    for value in values
}
"""(field, value) -> the combinations with that value."""


def _clause_mask(clause: dict[str, str], hours: dict[str, int]) -> int:
    """The combinations for which a clause holds (an SLA clause through the tier's hours)."""
    if clause["field"] == "sla.response_hours":
        tiers = [t for t in TIERS if clause_holds(clause, {"sla": {"response_hours": hours[t]}})]
        return sum(MASKS["customer.tier", t] for t in tiers)
    kind, key = clause["field"].split(".")
    values = [v for v in FACTS[clause["field"]] if clause_holds(clause, {kind: {key: v}})]
    return sum(MASKS[clause["field"], v] for v in values)


def first_matches(rules: list[dict[str, Any]], hours: dict[str, int]) -> list[int]:
    """Per outcome (each rule, then the default), the combinations whose first match it is."""
    left = (1 << len(SPACE)) - 1
    groups = []
    for rule in rules:
        mask = left
        for clause in rule["clauses"]:
            mask &= _clause_mask(clause, hours)
        groups.append(mask)
        left &= ~mask
    return [*groups, left]


def members(mask: int) -> list[int]:
    """The positions in ``SPACE`` of a mask's combinations, in order."""
    return [k for k, bit in enumerate(bin(mask)[:1:-1]) if bit == "1"]


def _lookups(rules: list[dict[str, Any]], facts: dict[str, Any]) -> list[dict[str, str]]:
    """The records a solver must fetch: the ticket, and whatever the rules up to the match test."""
    kinds = {c["field"].split(".")[0] for r in rules for c in r["clauses"]}
    needed = ["ticket"]
    if kinds & {"customer", "sla"}:
        needed.append("customer")
    if "sla" in kinds:
        needed.append("sla")
    return [{"kind": k, "record": json.dumps(facts[k], sort_keys=True)} for k in needed]


def generate_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """``n_route`` tickets routed by one rule list; each one's matching rule is uniform over the
    rules and the default, independently of the other tickets."""
    if d.two_tables:
        return generate_tables_example(rng, d, example_id)
    ticket_ids = rng.sample(range(1000, 10000), d.n_tickets)
    customer_ids = rng.sample(range(100, 1000), d.n_tickets)
    slas: list[dict[str, Any]] = [{"tier": t, "response_hours": rng.choice(HOURS)} for t in TIERS]
    hours = {str(s["tier"]): int(s["response_hours"]) for s in slas}
    queues = rng.sample(QUEUES, d.n_rules + 1)
    default = queues[-1]
    for _ in range(MAX_RULE_DRAWS):
        rules = [_rule(rng, d, q) for q in queues[:-1]]
        groups = first_matches(rules, hours)
        if all(groups):  # every rule and the default can be the first match
            break
    else:
        raise RuntimeError(f"no rule list in {MAX_RULE_DRAWS} draws lets every rule match first")
    routed = rng.sample(range(d.n_tickets), d.n_route)
    targets = [rng.randint(0, d.n_rules) for _ in routed]
    drawn = [rng.choice(SPACE) for _ in range(d.n_tickets)]
    for i, target in zip(routed, targets, strict=True):
        drawn[i] = SPACE[rng.choice(members(groups[target]))]
    tickets, customers = [], []
    for tid, cid, combo in zip(ticket_ids, customer_ids, drawn, strict=True):
        v = dict(zip(FACTS, combo, strict=True))
        customers.append({"id": f"C-{cid}", "tier": v["customer.tier"], "region": v["customer.region"]})
        tickets.append(
            {
                "id": f"T-{tid}",
                "customer_id": f"C-{cid}",
                "category": v["ticket.category"],
                "severity": v["ticket.severity"],
                "channel": v["ticket.channel"],
            }
        )
        if not d.customer_ids:
            del tickets[-1]["customer_id"]
    world: dict[str, Any] = {"tickets": tickets, "customers": customers, "slas": slas}
    if not d.customer_ids:
        world["customer_ids"] = False
    if d.lean_tools:
        world["tools"] = "lean"
    answers, matches, lookups = [], [], []
    for i, target in zip(routed, targets, strict=True):
        sla = next(s for s in slas if s["tier"] == customers[i]["tier"])
        facts = {"ticket": tickets[i], "customer": customers[i], "sla": sla}
        queue, matched = route(rules, default, facts)
        if matched != target:
            raise RuntimeError(f"rule {matched} matched, wanted {target}")
        answers.append(queue)
        matches.append(matched)
        lookups.append(_lookups(rules[: matched + 1], facts))
    ids = [tickets[i]["id"] for i in routed]
    lines = [f"{i + 1}. {describe(r)}" for i, r in enumerate(rules)]
    lines.append(f"{len(rules) + 1}. Otherwise, route it to {default}.")
    prompt = (
        f"Route support tickets {', '.join(ids)} to queues. Rules, checked in order for each ticket (the "
        "first rule that matches wins):\n" + "\n".join(lines) + "\n" + closing(d, ids)
    )
    return Example(
        id=example_id,
        prompt=prompt,
        answer=", ".join(answers),
        info={
            "world": world,
            "ticket_ids": ids,
            "rules": rules,
            "default": default,
            "queues": answers,
            "matched_rules": matches,
            "lookups": lookups,
        },
    )


def generate_tables_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """One ticket and two tables drawn per example: ``n_rules`` categories to teams (a default team
    for the rest) and the four channels to lanes. The ticket's team is uniform over the ``n_rules + 1``
    teams and its channel over the four, independently, so a pick that ignores the tables is right
    1 time in 4 (n_rules + 1); every (team, lane) queue has its own code, drawn per example."""
    ticket_id = f"T-{rng.randrange(1000, 10000)}"
    teams = rng.sample(TEAMS, d.n_rules + 1)
    categories = rng.sample(TABLE_CATEGORIES, d.n_rules + 3)
    rule_categories, other_categories = categories[: d.n_rules], categories[d.n_rules :]
    target = rng.randint(0, d.n_rules)
    category = rule_categories[target] if target < d.n_rules else rng.choice(other_categories)
    channel = rng.choice(LANE_CHANNELS)
    lane_of = dict(zip(LANE_CHANNELS, rng.sample(LANES, len(LANE_CHANNELS)), strict=True))
    pairs = list(itertools.product(teams, lane_of.values()))
    numbers = rng.sample(range(1000, 10000), len(pairs))
    codes = {f"{team}/{lane}": f"Q-{n}" for (team, lane), n in zip(pairs, numbers, strict=True)}
    team, lane = teams[target], lane_of[channel]
    listed = list(LANE_CHANNELS)
    rng.shuffle(listed)
    team_rows = [f"- {c} -> {t}" for c, t in zip(rule_categories, teams, strict=False)]
    team_rows.append(f"- any other category -> {teams[-1]}")
    lane_rows = [f"- {c} -> {lane_of[c]}" for c in listed]
    prompt = (
        f"Route support ticket {ticket_id}.\nTeam by the ticket's category:\n"
        + "\n".join(team_rows)
        + "\nLane by the ticket's channel:\n"
        + "\n".join(lane_rows)
        + "\nCall get_ticket, pick the team and the lane from the tables, then call get_queue_code with "
        "them. Reply with the queue code (Q- and four digits, not a team's or lane's name) inside "
        f"<answer></answer> tags. Start now: call get_ticket for {ticket_id}."
    )
    ticket = {"id": ticket_id, "category": category, "channel": channel}
    world = {"tickets": [ticket], "codes": codes, "tools": "tables"}
    answer = codes[f"{team}/{lane}"]
    return Example(
        id=example_id,
        prompt=prompt,
        answer=answer,
        info={
            "world": world,
            "ticket_ids": [ticket_id],
            "team": team,
            "lane": lane,
            "default": teams[-1],
            "matched_rules": [target],
            "queues": [answer],
        },
    )
