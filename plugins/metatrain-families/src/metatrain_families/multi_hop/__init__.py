"""multi_hop: chained relation lookups over a fresh persona world per example, through tools."""

from __future__ import annotations

import attrs

from metatrain.specs import Example
from metatrain_families.common import GeneratedFamily, extract_answer
from metatrain_families.multi_hop.generator import Difficulty, generate_example
from metatrain_families.multi_hop.tools import TOOLS

SYSTEM_PROMPT = (
    "You answer questions about people by looking facts up with the provided tools. Follow the "
    "relations one at a time, feeding each name a tool returns into the next lookup. When you know "
    "the answer, reply with <answer>ANSWER</answer>."
)
DIFFICULTY = {
    "fast": Difficulty(n_people=8, hops=2, attributes=("name", "city")),
    "full": Difficulty(n_people=8, hops=2, attributes=("name",), guided=True),
}
"""Since 1.6.0 ``full`` lists the two lookups in its prompt: untrained Qwen2.5-Coder-0.5B scored
0.150 [0.107, 0.206] on its hidden eval on one H100 (n=200, bfloat16), where 1.5.0's unguided
questions scored 0.045, under the band's 0.05 edge (docs/families.md)."""
LEVELS = {
    "full": {
        "10 people, 3 hops, name/city": Difficulty(n_people=10, hops=3, attributes=("name", "city")),
        "10 people, 2 hops, name/city/job": Difficulty(
            n_people=10, hops=2, attributes=("name", "city", "job")
        ),
        "10 people, 2 hops, name/city": Difficulty(n_people=10, hops=2, attributes=("name", "city")),
        "8 people, 2 hops, name/city": DIFFICULTY["fast"],
        "8 people, 2 hops, name": Difficulty(n_people=8, hops=2, attributes=("name",)),
        "guided, 8 people, 2 hops, name": DIFFICULTY["full"],
    }
}
"""Candidates for ``metatrain calibrate``, hardest first: the 2026-12-03 sweep's three levels, since
1.4.0 (where untrained Qwen2.5-Coder-0.5B scored 0.035 on ``full``) two more two-hop ones, and since
1.5.0 (0.045) that level with the lookups listed in the prompt (``full`` since 1.6.0)."""
MAX_TOKENS = 64


def max_turns(d: Difficulty) -> int:
    """Tool rounds needed in the worst case (hops + one attribute lookup) plus two."""
    return d.hops + 1 + 2


@attrs.frozen
class MultiHop(GeneratedFamily[Difficulty]):
    """The multi_hop task family."""

    name: str = "multi_hop"
    version: str = "1.6.0"
    held_out: bool = False

    difficulty = DIFFICULTY
    levels = LEVELS
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = (
        "<answer>ANSWER</answer> with ANSWER a person's name, a city or a job exactly as the "
        "tools return it (case-insensitive; surrounding whitespace stripped)"
    )
    max_tokens = MAX_TOKENS
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        return (
            f"Teach a small model to answer multi-hop questions over a small world of {d.n_people} "
            "people that is generated afresh for every example (names, managers, best friends, "
            f"cities and jobs all change). Each question follows {d.hops} relations (manager, best "
            f"friend) from a named person and asks for the last person's {', '.join(d.attributes)}, "
            'e.g. "In which city does the manager of the best friend of Alice live?"'
            + (
                ', followed by the lookups in order ("First find the best friend of Alice. Then '
                'find the manager of that person. Then find the city of that person.")'
                if d.guided
                else ""
            )
            + ". The facts are reachable only through the tools, one lookup per hop. The model gives "
            "<answer>ANSWER</answer>; scoring is case-insensitive exact match after stripping "
            "surrounding whitespace."
        )

    def max_turns(self, d: Difficulty) -> int:
        return max_turns(d)

    def turn_cap(self, d: Difficulty) -> int:
        return max_turns(d) + 2

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {
            "n_people": d.n_people,
            "hops": d.hops,
            "attributes": repr(list(d.attributes)),
            "guided": repr(d.guided),
        }

    def score(self, example: Example, final_text: str) -> float:
        """Case-insensitive exact match of the last <answer> block, surrounding whitespace stripped."""
        got = extract_answer(final_text)
        return 1.0 if got is not None and got.strip().casefold() == example.answer.casefold() else 0.0
