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
TABLES = Difficulty(
    n_tickets=1,
    n_route=1,
    n_rules=5,
    max_clauses=1,
    use_sla=False,
    customer_rules=False,
    customer_ids=False,
    two_tables=True,
)
"""One ticket, two short tables (five categories and a default to six teams, four channels to four
lanes), answer the routed queue's code: blind 1/24 (``Difficulty.two_tables``)."""
TABLES_SYSTEM_PROMPT = (
    "You route support tickets with the provided tools. Fetch the ticket, pick its queue by the tables "
    "in the request, fetch that queue's code, and reply with the code inside <answer></answer> tags."
)
WORKED_EXAMPLE = (
    '\n\nWorked example (another ticket, other tables): get_ticket(ticket_id="T-1000") returned '
    '{"category": "bug", "channel": "chat", "id": "T-1000"}. The team table said bug -> oak and the lane '
    'table said chat -> up, so the next call was get_queue_code(team="oak", lane="up"). It returned '
    "Q-0000, and the reply was <answer>Q-0000</answer>."
)
"""Appended to the two-table system prompt with ``Difficulty.worked_example``; its team, lane and code
are none that an example draws (no 'oak' or 'up' in the name pools, no code under Q-1000)."""
TABLES_TURNS = 6
"""Tool rounds at the two-table levels: the two lookups, a round to correct a wrong name (answered
with the valid ones) and slack, as the twenty-third session's probe played them."""
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
        "two tables, one ticket": TABLES,
        "two tables, one ticket, worked example": attrs.evolve(TABLES, worked_example=True),
    }
}
"""Candidates for ``metatrain calibrate``, hardest first. Every embedded model scores 0 at the
current level (the calibration notes in docs/families.md); rules on ticket facts alone need one
lookup a ticket, and two tickets with four rules keep a blind guess near 1/25. Guided levels spell
out the steps, one per ticket, before the first call; without customer ids no ticket record holds an id
to chase; ``get_ticket`` alone (``Difficulty.lean_tools``); last, rules that each test the category
alone (``Difficulty.category_rules``), a table from category to queue; then one ticket routed by two
short tables to a queue whose code is the answer (``Difficulty.two_tables``), without and with a
worked example in the system prompt: a blind pick 1/24, and on the twenty-third session's probe
(its own draws, one H100) untrained Qwen2.5-Coder scored 0.010 and 0.070. These two have no
reference job yet."""
MAX_TOKENS = 192
"""Per turn; the final turn may walk three tickets through the rules before a three-queue answer."""


TABLES_ANSWER_FORMAT = (
    "<answer>Q-1234</answer>: the code get_queue_code returns for the ticket's team and lane. The last "
    "<answer> block, stripped of surrounding whitespace, must equal it exactly."
)


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

    def system_prompt_at(self, d: Difficulty) -> str:
        if not d.two_tables:
            return self.system_prompt
        return TABLES_SYSTEM_PROMPT + (WORKED_EXAMPLE if d.worked_example else "")

    def answer_format_at(self, d: Difficulty) -> str:
        return TABLES_ANSWER_FORMAT if d.two_tables else self.answer_format

    def describe(self, d: Difficulty) -> str:
        if d.two_tables:
            return (
                "Teach a small model to route one support ticket by two tables in the prompt: "
                f"{d.n_rules} categories (and a default for any other) to teams, four channels to lanes, "
                "all names drawn afresh per example. get_ticket gives the ticket's category and channel; "
                "get_queue_code(team, lane) gives the queue's code, which is the answer "
                "(<answer>Q-1234</answer>, exact). The team is uniform over the "
                f"{d.n_rules + 1} and the lane over the four, so ignoring the tables scores about "
                f"{1 / (4 * (d.n_rules + 1)):.3f}."
            )
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
        return tools_for(d.customer_ids, d.lean_tools, d.two_tables)

    def example_tools(self, example: Example) -> Sequence[Callable[..., Any]]:
        world = example.info["world"]
        tools = world.get("tools")
        return tools_for(world.get("customer_ids", True), tools == "lean", tools == "tables")

    def max_turns(self, d: Difficulty) -> int:
        return TABLES_TURNS if d.two_tables else d.max_lookups + 2

    def turn_cap(self, d: Difficulty) -> int:
        return self.max_turns(d) + 2

    def reference_job(self, budget: str) -> dict[str, str]:
        if self.knobs(budget).two_tables:
            raise ValueError(
                "dispatch's two-table levels are calibration candidates without a reference job yet "
                "(docs/families.md, twenty-third session)"
            )
        return super().reference_job(budget)

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
