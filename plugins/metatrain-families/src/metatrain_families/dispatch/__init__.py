"""dispatch: route a support ticket by ordered rules, from facts fetched through dependent tool calls."""

from __future__ import annotations

import attrs

from metatrain.specs import Example
from metatrain_families.common import GeneratedFamily, extract_answer
from metatrain_families.dispatch.generator import QUEUES, Difficulty, generate_example
from metatrain_families.dispatch.tools import TOOLS

SYSTEM_PROMPT = (
    "You route support tickets. Fetch the facts the routing rules need with the provided tools (the "
    "ticket first, then its customer, then the SLA of the customer's tier if a rule needs it), apply "
    "the rules in order, and reply with the queue name as <answer>QUEUE</answer>."
)
DIFFICULTY = {
    "fast": Difficulty(n_tickets=3, n_rules=3, max_clauses=1, use_sla=False),
    "full": Difficulty(n_tickets=4, n_rules=4, max_clauses=2, use_sla=True),
}
MAX_TOKENS = 128


@attrs.frozen
class Dispatch(GeneratedFamily[Difficulty]):
    """The dispatch task family."""

    name: str = "dispatch"
    version: str = "1.1.0"
    held_out: bool = False

    difficulty = DIFFICULTY
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = (
        "<answer>QUEUE</answer> with QUEUE a queue name exactly as the rules write it "
        "(case-sensitive; surrounding whitespace stripped)"
    )
    max_tokens = MAX_TOKENS
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        sla = ", or the SLA response hours of the customer's tier" if d.use_sla else ""
        return (
            "Teach a small model to route a support ticket to a queue. Each prompt names a ticket id "
            f"and lists {d.n_rules} routing rules checked in order (first match wins) plus a default. "
            f"Rules have up to {d.max_clauses} condition(s) on the ticket's category, severity or "
            f"channel, the customer's tier or region{sla}. Rules, queue names and the world (tickets, "
            "customers, SLAs) are generated afresh per example; the facts are reachable only through "
            "the tools (get_ticket gives the customer id, get_customer the tier). The model replies "
            "<answer>QUEUE</answer>; scoring is exact match after stripping surrounding whitespace. "
            f"Queue names come from: {', '.join(QUEUES)}."
        )

    def max_turns(self, d: Difficulty) -> int:
        return d.max_lookups + 2

    def turn_cap(self, d: Difficulty) -> int:
        return d.max_lookups + 4

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {
            "n_tickets": d.n_tickets,
            "n_rules": d.n_rules,
            "max_clauses": d.max_clauses,
            "use_sla": d.use_sla,
        }

    def score(self, example: Example, final_text: str) -> float:
        """Exact match of the last <answer> block, surrounding whitespace stripped."""
        got = extract_answer(final_text)
        return 1.0 if got is not None and got.strip() == example.answer else 0.0
