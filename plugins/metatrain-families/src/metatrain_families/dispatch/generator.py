"""dispatch's example generator: a support-desk world, ordered routing rules, and one ticket to route."""

from __future__ import annotations

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
    "sla.response_hours": tuple(str(h) for h in HOURS),
}


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_tickets: int
    """Tickets (and their customers) in the world; all but one are distractors."""
    n_rules: int
    max_clauses: int
    use_sla: bool
    """Whether rules may test the SLA of the customer's tier (a third, dependent lookup)."""

    @property
    def max_lookups(self) -> int:
        return 3 if self.use_sla else 2


def make_world(rng: random.Random, n_tickets: int) -> dict[str, Any]:
    """Tickets, one customer per ticket, and an SLA per tier (response hours drawn per world)."""
    tickets, customers = [], []
    ticket_ids = rng.sample(range(1000, 10000), n_tickets)
    customer_ids = rng.sample(range(100, 1000), n_tickets)
    for tid, cid in zip(ticket_ids, customer_ids, strict=True):
        customers.append({"id": f"C-{cid}", "tier": rng.choice(TIERS), "region": rng.choice(REGIONS)})
        tickets.append(
            {
                "id": f"T-{tid}",
                "customer_id": f"C-{cid}",
                "category": rng.choice(CATEGORIES),
                "severity": rng.randint(1, 4),
                "channel": rng.choice(CHANNELS),
            }
        )
    slas = [{"tier": t, "response_hours": rng.choice(HOURS)} for t in TIERS]
    return {"tickets": tickets, "customers": customers, "slas": slas}


def _clause(rng: random.Random, field: str, facts: dict[str, Any], holds: bool) -> dict[str, str] | None:
    op = FIELDS[field][0]
    options = [
        v for v in VALUES[field] if clause_holds({"field": field, "op": op, "value": v}, facts) == holds
    ]
    return {"field": field, "op": op, "value": rng.choice(options)} if options else None


def _rule(
    rng: random.Random, d: Difficulty, facts: dict[str, Any], holds: bool, queue: str
) -> dict[str, Any]:
    """A rule that matches the facts exactly when ``holds``."""
    fields = [f for f in FIELDS if d.use_sla or not f.startswith("sla.")]
    while True:
        chosen = rng.sample(fields, rng.randint(1, d.max_clauses))
        false_at = rng.randrange(len(chosen))
        clauses = [
            _clause(rng, f, facts, True if holds else (i != false_at and rng.random() < 0.5))
            for i, f in enumerate(chosen)
        ]
        if all(c is not None for c in clauses):
            return {"clauses": clauses, "queue": queue}


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
    """One routing question; the matching rule's position is uniform over the rules and the default."""
    world = make_world(rng, d.n_tickets)
    ticket = rng.choice(world["tickets"])
    customer = next(c for c in world["customers"] if c["id"] == ticket["customer_id"])
    sla = next(s for s in world["slas"] if s["tier"] == customer["tier"])
    facts = {"ticket": ticket, "customer": customer, "sla": sla}
    queues = rng.sample(QUEUES, d.n_rules + 1)
    target = rng.randint(0, d.n_rules)
    rules = [
        _rule(rng, d, facts, i == target or (i > target and rng.random() < 0.5), queues[i])
        for i in range(d.n_rules)
    ]
    default = queues[-1]
    answer, matched = route(rules, default, facts)
    if matched != target:
        raise RuntimeError(f"rule {matched} matched, wanted {target}")
    lines = [f"{i + 1}. {describe(r)}" for i, r in enumerate(rules)]
    lines.append(f"{len(rules) + 1}. Otherwise, route it to {default}.")
    prompt = (
        f"Route support ticket {ticket['id']} to a queue. Rules, checked in order (the first rule that "
        "matches wins):\n" + "\n".join(lines) + "\nLook up the facts you need with the tools and reply "
        "with the queue name as <answer>QUEUE</answer>."
    )
    return Example(
        id=example_id,
        prompt=prompt,
        answer=answer,
        info={
            "world": world,
            "ticket_id": ticket["id"],
            "rules": rules,
            "default": default,
            "matched_rule": matched,
            "lookups": _lookups(rules[: matched + 1], facts),
        },
    )
