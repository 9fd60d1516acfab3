"""ledger: stateful account bookkeeping through tools; the answer depends on the state they built."""

from __future__ import annotations

import attrs

from metatrain.specs import Example
from metatrain_families.common import GeneratedFamily, extract_answer, normalise_int
from metatrain_families.ledger.generator import CLOSING, NAMES, QUESTIONS, RULE, Difficulty, generate_example
from metatrain_families.ledger.tools import TOOLS

SYSTEM_PROMPT = (
    "You are a bank clerk. Carry out every instruction with the provided tools, one at a time and in "
    "order; opening balances are known only to the tools. When done, reply with the answer inside "
    "<answer></answer> tags."
)
DIFFICULTY = {
    "fast": Difficulty(2, 2, (20, 100), (5, 60), refuse_p=0.3, open_p=0.0, questions=("balance",)),
    "full": Difficulty(2, 2, (20, 150), (5, 120), refuse_p=0.35, open_p=0.0, questions=("balance", "total")),
}
LEVELS = {
    "full": {
        "4 instructions, new accounts, balance/total": Difficulty(
            2, 4, (20, 150), (5, 120), refuse_p=0.35, open_p=0.3, questions=("balance", "total")
        ),
        "3 instructions, balance/total": Difficulty(
            2, 3, (20, 150), (5, 120), refuse_p=0.35, open_p=0.0, questions=("balance", "total")
        ),
        "2 instructions, balance/total": DIFFICULTY["full"],
        "2 instructions, balance": DIFFICULTY["fast"],
    }
}
"""Candidates for ``metatrain calibrate``, hardest first."""


def _max_turns(d: Difficulty) -> int:
    return d.needed_calls + 2


def _describe(d: Difficulty) -> str:
    kinds = {
        "balance": "the final balance of one account",
        "total": "the total balance across all accounts at the end (a newly opened one included)",
    }
    opening = " Some prompts first open a new (empty) account." if d.open_p > 0 else ""
    return (
        "Teach a small model to keep a bank ledger through stateful tools (open_account, deposit, withdraw, "
        f"transfer, balance). Each example has {d.n_existing} existing accounts whose opening balances "
        f"({list(d.balance)}) are hidden in the example's world and known only to the tools, and "
        f"{d.n_steps} instructions (amounts in {list(d.amount)}) to carry out in order.{opening} {RULE} "
        f"The question asks {' or '.join(kinds[k] for k in d.questions)}. Tools share one fresh copy of "
        "the example's world per rollout (info['world']); every answer is an integer that needs the "
        "hidden balances, given as <answer>N</answer> (exact integer match). Account names "
        f"come from {list(NAMES)}; question wordings: {list(QUESTIONS[k] for k in d.questions)}."
    )


@attrs.frozen
class Ledger(GeneratedFamily[Difficulty]):
    """The ledger task family."""

    name: str = "ledger"
    version: str = "1.3.0"
    held_out: bool = False

    difficulty = DIFFICULTY
    levels = LEVELS
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = "<answer>N</answer> with N an integer (commas and a leading + are tolerated)"
    max_tokens = 96
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        return _describe(d)

    def max_turns(self, d: Difficulty) -> int:
        return _max_turns(d)

    def turn_cap(self, d: Difficulty) -> int:
        return _max_turns(d) + 4

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {
            "names": repr(NAMES),
            "rule": repr(RULE),
            "questions": repr(QUESTIONS),
            "closing": repr(CLOSING),
            "n_existing": d.n_existing,
            "n_steps": d.n_steps,
            "balance": repr(d.balance),
            "amount": repr(d.amount),
            "refuse_p": d.refuse_p,
            "open_p": d.open_p,
            "kinds": repr(d.questions),
        }

    def score(self, example: Example, final_text: str) -> float:
        """Exact integer match of the last <answer> block (commas, a leading + and spaces tolerated)."""
        want = normalise_int(example.answer)
        return 1.0 if want is not None and normalise_int(extract_answer(final_text)) == want else 0.0
