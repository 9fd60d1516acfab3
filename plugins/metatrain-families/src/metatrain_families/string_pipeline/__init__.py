"""string_pipeline: a chain of string transformations applied in order, each computed through a tool."""

from __future__ import annotations

import attrs

from metatrain.specs import Example
from metatrain_families.common import GeneratedFamily, extract_answer
from metatrain_families.string_pipeline.generator import Difficulty, generate_example
from metatrain_families.string_pipeline.tools import TOOLS

SYSTEM_PROMPT = (
    "You transform strings step by step. Apply every step with the provided tools, in the given "
    "order, feeding each tool's result into the next step. When you have the final string, reply "
    "with <answer>TEXT</answer>."
)
DIFFICULTY = {"fast": Difficulty(2, (6, 9)), "full": Difficulty(2, (8, 12))}
LEVELS = {
    "full": {
        "3 steps, 6-9 characters": Difficulty(3, (6, 9)),
        "2 steps, 8-12 characters": DIFFICULTY["full"],
        "2 steps, 6-9 characters": DIFFICULTY["fast"],
    }
}
"""Candidates for ``metatrain calibrate``, hardest first (the 2026-12-03 sweep's levels)."""
MAX_TOKENS = 96


@attrs.frozen
class StringPipeline(GeneratedFamily[Difficulty]):
    """The string_pipeline task family."""

    name: str = "string_pipeline"
    version: str = "1.2.0"
    held_out: bool = False

    difficulty = DIFFICULTY
    levels = LEVELS
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = (
        "<answer>TEXT</answer> with TEXT the final string, exact and case-sensitive "
        "(only surrounding whitespace is stripped; no quotes)"
    )
    max_tokens = MAX_TOKENS
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        return (
            "Teach a small model to apply a pipeline of string transformations in order: a start "
            f"string of {d.length[0]}-{d.length[1]} lowercase letters, then {d.n_steps} steps drawn from "
            "reverse, uppercase, lowercase, replace one character with another, keep every k-th "
            "character (k = 2 or 3, starting with the first), rotate left by n, and remove repeated "
            "characters. Every step changes the string, and the final string is never the start "
            "string nor any part of the prompt text (such pipelines are redrawn). The model must "
            "compute each step with the tools and give the final string as <answer>TEXT</answer>; "
            "scoring is exact, case-sensitive string match after stripping surrounding whitespace."
        )

    def max_turns(self, d: Difficulty) -> int:
        return d.n_steps + 2

    def turn_cap(self, d: Difficulty) -> int:
        return d.n_steps + 4

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {"n_steps": d.n_steps, "len_lo": d.length[0], "len_hi": d.length[1], "alphabet": d.alphabet}

    def score(self, example: Example, final_text: str) -> float:
        """Exact match of the last <answer> block, surrounding whitespace stripped."""
        got = extract_answer(final_text)
        return 1.0 if got is not None and got.strip() == example.answer else 0.0
