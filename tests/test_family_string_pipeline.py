"""string_pipeline: deterministic, solvable through its tools, exact scoring, a valid reference job."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from family_helpers import (
    BUDGETS,
    assert_deterministic,
    assert_reference_job_within_bounds,
    assert_schemas_match,
    assert_split_sized_and_disjoint,
    load_env_module,
    probe_reference_job,
    write_reference_job,
)

from metatrain.conformance import check_family, failed
from metatrain.specs import Example
from metatrain_families.string_pipeline import DIFFICULTY, StringPipeline
from metatrain_families.string_pipeline.generator import Difficulty, generate_example
from metatrain_families.string_pipeline.tools import TOOLS

FAMILY = StringPipeline()


def solve(example: Example) -> str:
    """Run the example's steps through its bound tools, in order."""
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    text = example.info["world"]["input"]
    for step, expected in zip(example.info["world"]["steps"], example.info["intermediates"], strict=True):
        text = tools[step["tool"]](text=text, **step["args"])
        assert text == expected
    return str(text)


@pytest.mark.parametrize("budget", BUDGETS)
def test_generator_is_deterministic_per_seed(budget: str) -> None:
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_eval_are_disjoint_and_sized(budget: str) -> None:
    spec, hidden = assert_split_sized_and_disjoint(FAMILY, budget)
    assert len({e.prompt for e in hidden}) == len(hidden)
    assert spec.eval.max_turns == DIFFICULTY[budget].n_steps + 2
    assert 64 <= spec.eval.max_tokens <= 128


def test_scorer_is_exact_after_stripping() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    assert FAMILY.score(ex, f"done <answer>  {ex.answer}\n</answer>") == 1.0
    assert FAMILY.score(ex, f"<answer>x</answer> then <answer>{ex.answer}</answer>") == 1.0
    for wrong in [ex.answer + "a", ex.answer[1:], ex.answer.swapcase(), f'"{ex.answer}"']:
        assert FAMILY.score(ex, f"<answer>{wrong}</answer>") == 0.0
    assert FAMILY.score(ex, ex.answer) == 0.0


def test_tool_schemas_match_the_implementations() -> None:
    schemas = FAMILY.task_spec("fast").eval.tools
    assert_schemas_match(schemas, TOOLS)


def test_tools_raise_helpful_value_errors() -> None:
    tools: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in TOOLS}
    with pytest.raises(ValueError, match="single characters"):
        tools["replace_char"]("abc", "ab", "x")
    with pytest.raises(ValueError, match="integer"):
        tools["every_kth"]("abc", "two")
    assert tools["rotate_left"]("abcde", "2") == "cdeab"


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_and_dev_example_is_solvable_through_the_tools(budget: str) -> None:
    for ex in [*FAMILY.hidden_eval(budget), *FAMILY.task_spec(budget).dev_examples]:
        answer = solve(ex)
        assert answer == ex.answer
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_within_bounds(budget: str) -> None:
    assert_reference_job_within_bounds(FAMILY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path)
    assert set(scores["intermediate_progress"]) == {0.0}


def assert_not_readable_from_the_prompt(start: str, prompt: str, answer: str) -> None:
    assert answer != start, prompt
    assert answer not in prompt, (answer, prompt)


@pytest.mark.parametrize("budget", BUDGETS)
def test_no_answer_is_the_start_string_or_part_of_the_prompt(budget: str) -> None:
    """Identity pipelines ("reverse it; then reverse it", uppercase then lowercase) and answers that
    occur in the prompt are redrawn: answering a word of the prompt never scores."""
    examples = [*FAMILY.hidden_eval(budget), *FAMILY.task_spec(budget).dev_examples]
    rng = random.Random(7)
    examples += [generate_example(rng, DIFFICULTY[budget], f"x{i}") for i in range(500)]
    tight = random.Random(8)  # short strings over two letters: identities are common, all redrawn
    examples += [generate_example(tight, Difficulty(2, (3, 4), alphabet=2), f"t{i}") for i in range(300)]
    for ex in examples:
        assert_not_readable_from_the_prompt(ex.info["world"]["input"], ex.prompt, ex.answer)
        assert ex.info["intermediates"][-1] == ex.answer


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_env_mirrors_the_generator(budget: str, tmp_path: Path) -> None:
    env = load_env_module(write_reference_job(FAMILY, budget, tmp_path), f"string_pipeline_env_{budget}")
    for seed in range(40):
        row = env._example(random.Random(seed))
        ex = generate_example(random.Random(seed), DIFFICULTY[budget], "x")
        assert (row["question"], row["answer"]) == (ex.prompt, ex.answer)
        assert row["info"]["intermediates"] == ex.info["intermediates"]
        assert_not_readable_from_the_prompt(ex.info["world"]["input"], row["question"], row["answer"])


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_tool_free_guess_stays_under_the_guess_floor(budget: str) -> None:
    assert not failed(check_family(FAMILY, (budget,), ("guess floor",)))
