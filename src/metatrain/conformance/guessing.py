"""How well a policy that never calls a tool scores: the floor a family's eval must stay under.

A guesser is fitted on one draw of the family's examples (the hidden eval under another secret:
the same distribution, other examples) and scored on the real hidden eval with the family's own
scorer. Two kinds of guesser, both cheap for GRPO to find: always the draw's most common answer,
and a pick among the prompt's words that follow the one or two words the answers most often follow
(uniform, first or last). An H200 run found dispatch's 0.20 floor (a pick among the five queues
its rules name) within 20 GRPO steps, with no tool call and no uplift on the task itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

import attrs

from metatrain.protocols import TaskFamily
from metatrain.specs import Example

GUESS_FLOOR_LIMIT = 0.05
"""A tool-free guess must score below the low end of the calibration band (0.05–0.8)."""

CONTEXT_WORDS = (1, 2)
CONTEXTS_TRIED = 3
"""Contexts tried per length, the commonest first."""
_WORD = re.compile(r"-?\w[\w\-]*\w|-?\w")

Picker = Callable[[list[str]], list[str]]


@attrs.frozen
class GuessFloor:
    """The best guesser's mean score on the eval, and what it does."""

    score: float
    policy: str


def prompt_words(prompt: str) -> list[str]:
    """Words (letters, digits, inner hyphens; a leading minus) in prompt order."""
    return _WORD.findall(prompt)


def _context(words: list[str], i: int, n: int) -> tuple[str, ...]:
    return tuple(w.lower() for w in words[max(0, i - n) : i])


def _after(context: tuple[str, ...]) -> Picker:
    def candidates(words: list[str]) -> list[str]:
        out: list[str] = []
        for i, w in enumerate(words):
            if _context(words, i, len(context)) == context and w not in out:
                out.append(w)
        return out

    return candidates


def _only(pick: Picker, index: int) -> Picker:
    """``pick``'s candidate at ``index`` alone (none when it has none)."""

    def one(words: list[str]) -> list[str]:
        candidates = pick(words)
        return [candidates[index]] if candidates else []

    return one


def _pickers(family: TaskFamily, train: Sequence[Example]) -> list[tuple[str, Picker]]:
    """The guessers fitted on ``train``: constant answer, and picks after the commonest contexts."""
    constant = Counter(ex.answer for ex in train).most_common(1)[0][0]
    contexts = {n: Counter[tuple[str, ...]]() for n in CONTEXT_WORDS}
    for ex in train:
        words = prompt_words(ex.prompt)
        right = [i for i, w in enumerate(words) if family.score(ex, f"<answer>{w}</answer>") >= 1.0]
        for n, counts in contexts.items():
            counts.update({_context(words, i, n) for i in right})
    tried = [c for counts in contexts.values() for c, _ in counts.most_common(CONTEXTS_TRIED)]
    pickers: list[tuple[str, Picker]] = [(f"always {constant!r}", lambda words: [constant])]
    for context in tried:
        after = _after(context)
        said = " ".join(context) or "the start"
        pickers += [
            (f"a uniform pick among the prompt's words after {said!r}", after),
            (f"the first word after {said!r}", _only(after, 0)),
            (f"the last word after {said!r}", _only(after, -1)),
        ]
    return pickers


def _mean_score(
    family: TaskFamily, examples: Sequence[Example], words: Sequence[list[str]], pick: Picker
) -> float:
    """Expected score of answering a uniform draw from ``pick``'s candidates (0 with none);
    ``words`` holds each example's prompt words."""
    total = 0.0
    for ex, prompt in zip(examples, words, strict=True):
        candidates = pick(prompt)
        if candidates:
            scores = [family.score(ex, f"<answer>{w}</answer>") for w in candidates]
            total += sum(scores) / len(scores)
    return total / len(examples)


def guess_floor(family: TaskFamily, train: Sequence[Example], evals: Sequence[Example]) -> GuessFloor:
    """The best tool-free guesser fitted on ``train``, scored on ``evals``."""
    if not train or not evals:
        raise ValueError("guess_floor needs examples to fit on and to score")
    words = [prompt_words(ex.prompt) for ex in evals]
    scored = [
        GuessFloor(_mean_score(family, evals, words, pick), policy)
        for policy, pick in _pickers(family, train)
    ]
    return max(scored, key=lambda g: g.score)
