"""dispatch: route several support tickets by one list of ordered rules, from facts fetched through
dependent tool calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from metatrain.specs import Example
from metatrain_families.common import GeneratedFamily, extract_answer
from metatrain_families.dispatch.generator import QUEUES, Difficulty, answer_template, generate_example
from metatrain_families.dispatch.tools import TOOLS, tools_for

SYSTEM_PROMPT = (
    "You route support tickets. Each request lists several tickets and one list of routing rules. For "
    "each ticket, fetch the facts the rules need with the provided tools (the ticket first, then its "
    "customer, then the SLA of the customer's tier if a rule needs it) and apply the rules in order "
    "(the first match wins). Reply with one queue name per ticket, in the order the tickets are "
    "listed, separated by commas, inside <answer></answer> tags."
)
DIFFICULTY = {
    "fast": Difficulty(n_tickets=4, n_route=3, n_rules=3, max_clauses=1, use_sla=False),
    "full": Difficulty(n_tickets=5, n_route=3, n_rules=3, max_clauses=1, use_sla=False),
}
UNGUIDED = {
    "3 tickets, 3 rules": DIFFICULTY["full"],
    "3 tickets, 3 rules on ticket facts": attrs.evolve(DIFFICULTY["full"], customer_rules=False),
    "2 tickets, 4 rules": attrs.evolve(DIFFICULTY["full"], n_route=2, n_rules=4),
    "2 tickets, 4 rules on ticket facts": attrs.evolve(
        DIFFICULTY["full"], n_route=2, n_rules=4, customer_rules=False
    ),
}
LEVELS = {
    "full": {
        **UNGUIDED,
        **{f"guided, {label}": attrs.evolve(d, guided=True) for label, d in UNGUIDED.items()},
        **{
            f"guided, {label}, tickets without customer ids": attrs.evolve(d, guided=True, customer_ids=False)
            for label, d in UNGUIDED.items()
            if not d.customer_rules
        },
        "guided, 2 tickets, 4 rules on ticket facts, tickets without customer ids, one tool": attrs.evolve(
            UNGUIDED["2 tickets, 4 rules on ticket facts"], guided=True, customer_ids=False, lean_tools=True
        ),
        **{
            f"guided, {n} tickets, {rules} category rules, tickets without customer ids": attrs.evolve(
                DIFFICULTY["full"],
                n_route=n,
                n_rules=rules,
                customer_rules=False,
                guided=True,
                customer_ids=False,
                category_rules=True,
            )
            for n, rules in ((3, 3), (2, 5), (2, 4))
        },
    }
}
"""Candidates for ``metatrain calibrate``, hardest first. Every embedded model scores 0 at the
current level (the calibration notes in docs/families.md); rules on ticket facts alone need one
lookup a ticket, and two tickets with four rules keep a blind guess near 1/25. Guided levels spell
out the steps, one per ticket, before the first call; without customer ids no ticket record holds an id
to chase; ``get_ticket`` alone (``Difficulty.lean_tools``); last, rules that each test the category
alone (``Difficulty.category_rules``), a table from category to queue."""
MAX_TOKENS = 192
"""Per turn; the final turn may walk three tickets through the rules before a three-queue answer."""


def answer_queues(text: str) -> list[str]:
    """An answer's queues: split on commas, each part stripped of surrounding whitespace."""
    return [part.strip() for part in text.split(",")]


@attrs.frozen
class Dispatch(GeneratedFamily[Difficulty]):
    """The dispatch task family."""

    name: str = "dispatch"
    version: str = "1.3.0"
    held_out: bool = False

    difficulty = DIFFICULTY
    levels = LEVELS
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = (
        "<answer>QUEUE_1, QUEUE_2, ...</answer>: one queue per ticket to route, in the order the prompt "
        "lists the tickets, separated by commas. The last <answer> block is split on commas and each "
        "part stripped of surrounding whitespace; the list must equal the expected queues exactly "
        "(same length and order; queue names case-sensitive, as the rules write them). All or nothing."
    )
    max_tokens = MAX_TOKENS
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        customer = ", the customer's tier or region" if d.customer_rules else ""
        sla = ", or the SLA response hours of the customer's tier" if d.use_sla else ""
        steps = " The prompt spells out the steps, one per ticket." if d.guided else ""
        chain = (
            "get_ticket gives the customer id, get_customer the tier"
            if d.customer_ids
            else "get_ticket gives the ticket's facts; tickets show no customer id"
        ) + ("; get_ticket is the only tool" if d.lean_tools else "")
        return (
            f"Teach a small model to route support tickets to queues. Each prompt names {d.n_route} "
            f"ticket ids and lists {d.n_rules} routing rules checked in order (first match wins) plus a "
            "default; every ticket is routed by the same rules. Rules have up to "
            f"{d.max_clauses} condition(s) on the ticket's category, severity or channel{customer}"
            f"{sla}. Rules, queue names and the world ({d.n_tickets} tickets "
            "with their customers, and the SLAs) are generated afresh per example; the facts are "
            f"reachable only through the tools ({chain}), and for each ticket the matching rule is "
            "uniform over the rules and the default, "
            "independently of the other tickets, so guessing scores about "
            f"{(d.n_rules + 1) ** -d.n_route:.3f}. The model replies "
            f"<answer>{answer_template(d.n_route)}</answer> in the tickets' order; scoring is all or "
            "nothing: the last answer block split on commas, each part stripped, must equal the "
            f"expected list exactly. Queue names come from: {', '.join(QUEUES)}.{steps}"
        )

    def tools_at(self, d: Difficulty) -> Sequence[Callable[..., Any]]:
        return tools_for(d.customer_ids, d.lean_tools)

    def example_tools(self, example: Example) -> Sequence[Callable[..., Any]]:
        world = example.info["world"]
        return tools_for(world.get("customer_ids", True), world.get("tools") == "lean")

    def max_turns(self, d: Difficulty) -> int:
        return d.max_lookups + 2

    def turn_cap(self, d: Difficulty) -> int:
        return d.max_lookups + 4

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {
            "n_tickets": d.n_tickets,
            "n_route": d.n_route,
            "n_rules": d.n_rules,
            "max_clauses": d.max_clauses,
            "use_sla": d.use_sla,
            "customer_rules": d.customer_rules,
            "guided": d.guided,
            "customer_ids": d.customer_ids,
            "lean_tools": d.lean_tools,
            "category_rules": d.category_rules,
        }

    def score(self, example: Example, final_text: str) -> float:
        """All or nothing: the last <answer> block is split on commas and each part stripped of
        surrounding whitespace; that list must equal the expected queues (the example's answer,
        normalised the same way) exactly: same length, same order, queue names case-sensitive."""
        got = extract_answer(final_text)
        return 1.0 if got is not None and answer_queues(got) == answer_queues(example.answer) else 0.0
