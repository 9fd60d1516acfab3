"""string_pipeline's example generator: a start string and a chain of non-trivial transformations."""

from __future__ import annotations

import random
from typing import Any

import attrs

from metatrain.specs import Example
from metatrain_families.string_pipeline.tools import TOOLS

TOOL_MAP = {fn.__name__: fn for fn in TOOLS}
LETTERS = "abcdefghijklmnopqrstuvwxyz"
REPLACEMENTS = LETTERS + "0123456789"


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_steps: int
    length: tuple[int, int]
    alphabet: int = 12
    """How many distinct letters one example's start string draws from (fewer: more repeats)."""


def describe(tool: str, args: dict[str, Any]) -> str:
    """The English instruction for one step."""
    if tool == "reverse":
        return "reverse it"
    if tool == "uppercase":
        return "convert it to uppercase"
    if tool == "lowercase":
        return "convert it to lowercase"
    if tool == "replace_char":
        return f'replace every "{args["old"]}" with "{args["new"]}"'
    if tool == "every_kth":
        nth = {2: "2nd", 3: "3rd"}.get(args["k"], f"{args['k']}th")
        return f"keep every {nth} character, starting with the first"
    if tool == "rotate_left":
        return f"rotate it left by {args['n']} character{'s' if args['n'] != 1 else ''}"
    if tool == "dedupe":
        return "remove repeated characters, keeping the first occurrence of each"
    raise ValueError(f"unknown step {tool!r}")


def _step(rng: random.Random, text: str) -> tuple[str, dict[str, Any]]:
    """A random step that changes ``text`` and keeps it at least 3 characters long."""
    while True:
        tool = rng.choice(sorted(TOOL_MAP))
        args: dict[str, Any] = {}
        if tool == "replace_char":
            old = rng.choice(sorted(set(text)))
            args = {"old": old, "new": rng.choice([c for c in REPLACEMENTS if c not in text])}
        elif tool == "every_kth":
            args = {"k": rng.choice([2, 3])}
        elif tool == "rotate_left":
            args = {"n": rng.randint(1, len(text) - 1)}
        out = TOOL_MAP[tool](text, **args)
        if out != text and len(out) >= 3:
            return tool, args


def _prompt(start: str, steps: list[dict[str, Any]]) -> str:
    instructions = "; then ".join(describe(s["tool"], s["args"]) for s in steps)
    return (
        f'Start with the string "{start}". In order: {instructions}. '
        "Use the tools for each step and reply with the final string as <answer>TEXT</answer>."
    )


def generate_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """One pipeline: the start string, its steps and every intermediate string.

    A pipeline whose final string could be read off the prompt is redrawn, start string included,
    from the same ``rng``: one that ends on its start string (say "reverse it; then reverse it", or
    uppercase then lowercase) or whose final string occurs anywhere in the prompt text (a
    case-sensitive substring check, so it also catches words of the instructions such as "TEXT").
    Answering a word of the prompt therefore never scores.
    """
    while True:
        letters = rng.sample(LETTERS, d.alphabet)
        text = "".join(rng.choice(letters) for _ in range(rng.randint(*d.length)))
        start = text
        steps: list[dict[str, Any]] = []
        intermediates: list[str] = []
        for _ in range(d.n_steps):
            tool, args = _step(rng, text)
            text = TOOL_MAP[tool](text, **args)
            steps.append({"tool": tool, "args": args})
            intermediates.append(text)
        prompt = _prompt(start, steps)
        if text != start and text not in prompt:
            break
    return Example(
        id=example_id,
        prompt=prompt,
        answer=text,
        info={"world": {"input": start, "steps": steps}, "intermediates": intermediates},
    )
