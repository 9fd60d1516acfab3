"""How well a policy that never calls a tool scores: the floor a family's eval must stay under.

A guesser is fitted on one draw of the family's examples (the hidden eval under another secret:
the same distribution, other examples) and scored on the real hidden eval with the family's own
scorer. Two kinds of guesser, both cheap for GRPO to find: always the draw's most common answer,
and a pick among the prompt's words that follow the one or two words the answers most often follow
(uniform, first or last). An H200 run found dispatch's 0.20 floor (a pick among the five queues
its rules name) within 20 GRPO steps, with no tool call and no uplift on the task itself.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

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


ONE_LOOKUP_TRIED = 5
"""Lookups (tool, which prompt word, which result field) scored on the eval, the best-fitting first."""

Lookup = tuple[str, int, str]
"""A one-lookup guesser: the tool, which prompt word it is called with (0 the first the tool accepts,
-1 the last) and the path of the result field answered (``team``, ``[0].id``)."""


def _leaves(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, text) for each scalar in a tool result, lists indexed as ``[i]``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    elif value is not None:
        yield path, str(value)


def _one_argument_tools(family: TaskFamily, example: Example) -> list[tuple[str, str]]:
    """(tool name, parameter) for the example's tools that need exactly one argument."""
    out = []
    for fn in family.tools_for(example):
        required = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        if len(required) == 1:
            out.append((fn.__name__, required[0]))
    return out


def _first_accepted(family: TaskFamily, example: Example, name: str, param: str, words: list[str]) -> object:
    """The result of the first call of tool ``name`` that accepts one of ``words`` (fresh tools; a
    word the tool rejects, by raising, is not a candidate), or None."""
    tool = {fn.__name__: fn for fn in family.tools_for(example)}[name]
    for word in words:
        try:
            return tool(**{param: word})
        except Exception:  # a rejected word is simply not a candidate
            continue
    return None


def _lookups(family: TaskFamily, example: Example) -> dict[Lookup, str]:
    """The one-call lookups on ``example``: each one-argument tool called with the first and with the
    last prompt word it accepts, each on fresh tools (one call's state never reaches another)."""
    found: dict[Lookup, str] = {}
    words = list(dict.fromkeys(prompt_words(example.prompt)))
    for name, param in _one_argument_tools(family, example):
        for index, order in ((0, words), (-1, words[::-1])):
            result = _first_accepted(family, example, name, param, order)
            for path, text in _leaves(result):
                found[(name, index, path)] = text
    return found


def _describe_lookup(lookup: Lookup) -> str:
    name, index, path = lookup
    which = "first" if index == 0 else "last"
    field = f"its {path!r}" if path else "its result"
    return f"call {name} with the {which} prompt word it accepts and answer {field}"


def one_lookup_floor(family: TaskFamily, train: Sequence[Example], evals: Sequence[Example]) -> GuessFloor:
    """The best guesser that makes one tool call and answers one field of its result, fitted on
    ``train`` and scored on ``evals``: a shortcut past the task that GRPO finds as readily as a
    tool-free guess (triage 1.5.0's team questions, answered with the alerting service's owner)."""
    if not train or not evals:
        raise ValueError("one_lookup_floor needs examples to fit on and to score")
    fitted: dict[Lookup, float] = {}
    for ex in train:
        for lookup, text in _lookups(family, ex).items():
            fitted[lookup] = fitted.get(lookup, 0.0) + family.score(ex, f"<answer>{text}</answer>")
    if not fitted:
        return GuessFloor(0.0, "no one-argument tool accepts a word of the prompt")
    tried = sorted(fitted, key=lambda lookup: -fitted[lookup])[:ONE_LOOKUP_TRIED]
    totals = dict.fromkeys(tried, 0.0)
    for ex in evals:
        answers = _lookups(family, ex)
        for lookup in tried:
            if lookup in answers:
                totals[lookup] += family.score(ex, f"<answer>{answers[lookup]}</answer>")
    best, total = max(totals.items(), key=lambda kv: kv[1])
    return GuessFloor(total / len(evals), _describe_lookup(best))
