"""calc_chain: chained integer arithmetic where each step feeds the next, computed through tools."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs

from metatrain.specs import Example
from metatrain_families.calc_chain.tools import TOOLS
from metatrain_families.common import GeneratedFamily, extract_answer, normalise_int

SYSTEM_PROMPT = (
    "You are a careful calculator. Compute every arithmetic step with the provided tools, feeding "
    "each result into the next step. When you have the final value, reply with <answer>N</answer>."
)
OPS = {"add": "add", "subtract": "subtract", "multiply": "multiply by"}
WORDS = {"add": "add {n}", "subtract": "subtract {n}", "multiply": "multiply by {n}"}


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_ops: int
    start: tuple[int, int]
    operand: tuple[int, int]
    multiply_weight: float = 1.0


DIFFICULTY = {"fast": Difficulty(2, (2, 30), (2, 12)), "full": Difficulty(2, (2, 60), (2, 20))}
LEVELS = {
    "full": {
        "3 ops, start <= 30, operands <= 12": Difficulty(3, (2, 30), (2, 12)),
        "2 ops, start <= 60, operands <= 20": DIFFICULTY["full"],
        "2 ops, start <= 30, operands <= 12": DIFFICULTY["fast"],
    }
}
"""Candidates for ``metatrain calibrate``, hardest first (the 2026-12-03 sweep's levels)."""


def generate_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """One chain: a start value and ``n_ops`` operations, with every intermediate value."""
    value = rng.randint(*d.start)
    start = value
    steps: list[list[Any]] = []
    intermediates: list[int] = []
    for _ in range(d.n_ops):
        op = rng.choices(["add", "subtract", "multiply"], weights=[1.0, 1.0, d.multiply_weight])[0]
        n = rng.randint(*d.operand)
        value = {"add": value + n, "subtract": value - n, "multiply": value * n}[op]
        steps.append([op, n])
        intermediates.append(value)
    instructions = "; then ".join(WORDS[op].format(n=n) for op, n in steps)
    prompt = (
        f"Start with {start}. In order: {instructions}. "
        "Use the tools for each step and reply with the final number as <answer>N</answer>."
    )
    return Example(
        id=example_id,
        prompt=prompt,
        answer=str(value),
        info={"start": start, "steps": steps, "intermediates": intermediates},
    )


@attrs.frozen
class CalcChain(GeneratedFamily[Difficulty]):
    """The calc_chain task family."""

    name: str = "calc_chain"
    version: str = "1.2.0"
    held_out: bool = False

    difficulty = DIFFICULTY
    levels = LEVELS
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = "<answer>N</answer> with N an integer (commas and a leading + are tolerated)"
    max_tokens = 64
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        return (
            "Teach a small model to compute chained integer arithmetic: a start value followed by "
            f"{d.n_ops} operations (add, subtract, multiply by), each applied to the previous result. "
            f"Start values are in {list(d.start)}, operands in {list(d.operand)}. The model must call "
            "the tools for the steps and give the final value as <answer>N</answer>; the answer is "
            "scored by exact integer match."
        )

    def max_turns(self, d: Difficulty) -> int:
        return d.n_ops + 2

    def turn_cap(self, d: Difficulty) -> int:
        return 6

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {
            "n_ops": d.n_ops,
            "start_lo": d.start[0],
            "start_hi": d.start[1],
            "operand_lo": d.operand[0],
            "operand_hi": d.operand[1],
        }

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        return list(TOOLS)

    def score(self, example: Example, final_text: str) -> float:
        got = normalise_int(extract_answer(final_text))
        return 1.0 if got is not None and got == int(example.answer) else 0.0
