"""dispatch's routing rules: their fields, how they read in English, and how they are evaluated."""

from __future__ import annotations

from typing import Any

FIELDS: dict[str, tuple[str, str]] = {
    "ticket.category": ("is", "the ticket's category is {v}"),
    "ticket.severity": ("at_least", "the ticket's severity is at least {v}"),
    "ticket.channel": ("is", "the ticket came in by {v}"),
    "customer.tier": ("is", "the customer's tier is {v}"),
    "customer.region": ("is", "the customer's region is {v}"),
    "sla.response_hours": ("at_most", "the SLA response time of the customer's tier is at most {v} hours"),
}
"""field -> (operator, English template). Values are stored as strings."""


def clause_holds(clause: dict[str, str], facts: dict[str, dict[str, Any]]) -> bool:
    kind, key = clause["field"].split(".")
    fact = facts[kind][key]
    if clause["op"] == "at_least":
        return int(fact) >= int(clause["value"])
    if clause["op"] == "at_most":
        return int(fact) <= int(clause["value"])
    return str(fact) == clause["value"]


def route(rules: list[dict[str, Any]], default: str, facts: dict[str, dict[str, Any]]) -> tuple[str, int]:
    """The queue of the first rule whose clauses all hold, and its index (len(rules) for the default)."""
    for i, rule in enumerate(rules):
        if all(clause_holds(c, facts) for c in rule["clauses"]):
            return str(rule["queue"]), i
    return default, len(rules)


def describe(rule: dict[str, Any]) -> str:
    conditions = " and ".join(FIELDS[c["field"]][1].format(v=c["value"]) for c in rule["clauses"])
    return f"If {conditions}, route it to {rule['queue']}."
