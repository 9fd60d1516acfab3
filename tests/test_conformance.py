"""The family conformance kit passes real families and catches broken ones."""

from __future__ import annotations

import random
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from metatrain.conformance import check_family, failed
from metatrain.plugins import load_plugins
from metatrain.protocols import TaskFamily
from metatrain.specs import Example
from metatrain_families.calc_chain import DIFFICULTY, CalcChain, generate_example
from metatrain_families.common import GeneratedFamily
from metatrain_families.triage import TEAMS_LEVEL

FAST = ("fast",)
CHEAP = ("determinism", "disjoint splits", "scorer", "tool schemas", "token budget", "eval secrecy")


def problems(family: TaskFamily) -> dict[str, str]:
    return {r.name: r.detail for r in failed(check_family(family, FAST, CHEAP))}


def test_calc_chain_conforms_through_the_pytest_plugin(
    assert_family_conforms: Callable[..., None], calc_chain: TaskFamily
) -> None:
    assert_family_conforms(calc_chain, budgets=FAST)


@attrs.frozen
class PublicSeedEval(CalcChain):
    def hidden_eval(self, budget: str) -> list[Example]:
        rng = random.Random(0)
        return [generate_example(rng, DIFFICULTY[budget], f"e{i}") for i in range(48)]


@attrs.frozen
class GenerousScorer(CalcChain):
    def score(self, example: Example, final_text: str) -> float:
        return 1.0


@attrs.frozen
class LeakyDev(CalcChain):
    def hidden_eval(self, budget: str) -> list[Example]:
        dev = self.task_spec(budget).dev_examples
        return [*dev, *super().hidden_eval(budget)[len(dev) :]]


@attrs.frozen
class WrongTools(CalcChain):
    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        def add(a: str, b: str) -> str:
            """Concatenate.

            Args:
                a: first
                b: second
            """
            return a + b

        return [add, *super().tools_for(example)[1:]]


@attrs.frozen
class Unstable(CalcChain):
    def hidden_eval(self, budget: str) -> list[Example]:
        examples = super().hidden_eval(budget)
        random.shuffle(examples)
        return examples


@pytest.mark.parametrize(
    ("family", "check", "message"),
    [
        (PublicSeedEval(), "eval secrecy", "does not depend on the eval secret"),
        (GenerousScorer(), "scorer", "perturbed answer"),
        (LeakyDev(), "disjoint splits", "dev examples also in the hidden eval"),
        (WrongTools(), "tool schemas", "tool add"),
        (Unstable(), "determinism", "hidden_eval() differs"),
    ],
)
def test_broken_families_are_caught(family: TaskFamily, check: str, message: str) -> None:
    found = problems(family)
    assert check in found and message in found[check], found


def test_a_family_that_crashes_is_reported_not_raised() -> None:
    @attrs.frozen
    class Crashing(CalcChain):
        def hidden_eval(self, budget: str) -> list[Example]:
            raise RuntimeError("generator bug")

    found = problems(Crashing())
    assert "generator bug" in found["determinism"]


@attrs.frozen
class TinyPromptSpace(CalcChain):
    """Eight distinct prompts (worlds still differ): the five dev prompts are bound to recur in 48
    eval draws, and at least three prompts stay free for the eval, whatever the seed."""

    @staticmethod
    def generate(rng: random.Random, d: Any, example_id: str) -> Example:
        ex = generate_example(rng, d, example_id)
        return ex.model_copy(update={"prompt": f"Puzzle {rng.randrange(8)}: compute the chain."})


@attrs.frozen
class OnePrompt(CalcChain):
    @staticmethod
    def generate(rng: random.Random, d: Any, example_id: str) -> Example:
        return generate_example(rng, d, example_id).model_copy(update={"prompt": "Compute the chain."})


def test_hidden_eval_skips_draws_that_repeat_a_dev_prompt() -> None:
    family = TinyPromptSpace()
    dev = {e.prompt for e in family.task_spec("fast").dev_examples}
    evals = family.hidden_eval("fast")
    assert len(evals) == 48 and dev and not dev & {e.prompt for e in evals}
    assert [e.id for e in evals] == [f"calc_chain-eval-{i}" for i in range(48)]
    assert len({e.model_dump_json() for e in evals}) == 48  # same prompt, different worlds
    assert "disjoint splits" not in problems(family) and "eval secrecy" not in problems(family)
    with pytest.raises(RuntimeError, match="too few eval prompts differ from the dev prompts"):
        OnePrompt().hidden_eval("fast")


PARTIAL_CREDIT = {
    "calc_chain": "intermediate_progress",
    "multi_hop": "hop_progress",
    "string_pipeline": "intermediate_progress",
    "ledger": "correct_steps",
    "dispatch": "lookup_progress",
    "triage": "culprit_seen",
}


@pytest.mark.parametrize(("name", "func"), sorted(PARTIAL_CREDIT.items()))
def test_reference_partial_credit_needs_an_answer(name: str, func: str, tmp_path: Path) -> None:
    """A rollout that never answers earns no partial credit: on an H200, calc_chain's, ledger's and
    multi_hop's jobs converged on correct tool calls without answers both when such rollouts earned
    the credit in full and when they earned half of it (docs/families.md)."""
    from family_helpers import load_env_module, write_reference_job

    family = load_plugins().task_family(name)
    module = load_env_module(write_reference_job(family, "full", tmp_path), name)
    full = 0.8
    setattr(module, f"_{func}", lambda completion, info: full)

    def credit(reply: str) -> float:
        return float(getattr(module, func)([{"role": "assistant", "content": reply}], {}))

    right = family.task_spec("full").dev_examples[0].answer
    wrong = family.task_spec("full").dev_examples[1].answer
    assert credit(f"<answer>{right}</answer>") == credit(f"<answer> {wrong} </answer>") == full
    assert credit("still working") == 0.0
    assert credit("<answer>\n\n</answer> still working") == 0.0  # what multi_hop's job learned
    assert credit("<answer>!?</answer>") == 0.0


@attrs.frozen
class AnswerInPrompt(CalcChain):
    """The answer is printed in the prompt among four decoys, always after the same words."""

    @staticmethod
    def generate(rng: random.Random, d: Any, example_id: str) -> Example:
        ex = generate_example(rng, d, example_id)
        options = [ex.answer, *(str(rng.randrange(10_000, 99_999)) for _ in range(4))]
        rng.shuffle(options)
        listed = ", ".join(f"maybe {o}" for o in options)
        return ex.model_copy(update={"prompt": f"{ex.prompt} Candidates: {listed}."})


@attrs.frozen
class FewAnswers(CalcChain):
    """Half of all answers are 0."""

    @staticmethod
    def generate(rng: random.Random, d: Any, example_id: str) -> Example:
        ex = generate_example(rng, d, example_id)
        return ex.model_copy(update={"answer": "0"}) if rng.random() < 0.5 else ex


def test_guess_floor_finds_answers_a_tool_free_policy_can_pick() -> None:
    from metatrain.conformance.guessing import guess_floor

    listed = AnswerInPrompt()
    floor = guess_floor(listed, listed.dev_examples("full"), listed.hidden_eval("full"))
    assert floor.score == pytest.approx(0.2, abs=0.01) and "uniform pick" in floor.policy, floor
    assert "'maybe'" in floor.policy, floor
    found = {r.name: r.detail for r in failed(check_family(FewAnswers(), FAST, ("guess floor",)))}
    scored = re.search(r"a tool-free guess scores ([0-9.]+) on the hidden eval", found["guess floor"])
    assert scored and 0.35 < float(scored[1]) < 0.65 and "always '0'" in found["guess floor"]
    assert not failed(check_family(CalcChain(), ("fast", "full"), ("guess floor",)))


def test_built_in_families_guess_floors_are_under_the_limit() -> None:
    """dispatch, ledger, string_pipeline and multi_hop were guessable before their current versions
    (docs/families.md, guess floors); each fix is pinned here."""
    pm = load_plugins()
    names = ("calc_chain", "multi_hop", "string_pipeline", "ledger", "dispatch", "triage")
    results = [
        (n, r) for n in names for r in check_family(pm.task_family(n), ("fast", "full"), ("guess floor",))
    ]
    assert len(results) == 12
    assert [(n, r.budget, r.detail) for n, r in results if not r.ok] == []


@attrs.frozen
class Peekable(CalcChain):
    """calc_chain plus ``peek(word)``: given the chain's start number it returns the answer (one lookup
    answers everything); any other word is rejected. ``peek`` also counts its calls in the world it
    shares with the other tools, and reports the answer only on a first call: a guesser whose calls
    shared state would see the count, not the answer."""

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        tools = super().tools_for(example)
        start = re.findall(r"-?\d+", example.prompt)[0]
        calls = {"n": 0}

        def peek(word: str) -> dict[str, Any]:
            """Peek at the answer."""
            if word != start:
                raise ValueError(f"not the start: {word!r}")
            calls["n"] += 1
            return {"calls": calls["n"], "answer": example.answer if calls["n"] == 1 else "spent"}

        return [*tools, peek]


def test_one_lookup_floor_finds_a_planted_lookup_and_calls_on_fresh_tools() -> None:
    from metatrain.conformance.guessing import _lookups, one_lookup_floor

    peekable = Peekable()
    floor = one_lookup_floor(peekable, peekable.dev_examples("full"), peekable.hidden_eval("full"))
    assert floor.score == 1.0, floor
    example = peekable.dev_examples("full")[0]
    seen = _lookups(peekable, example)
    assert seen[("peek", 0, "calls")] == seen[("peek", -1, "calls")] == "1"  # each call on fresh tools
    assert seen[("peek", -1, "answer")] == example.answer
    assert floor.policy == "call peek with the first prompt word it accepts and answer its 'answer'"
    plain = one_lookup_floor(CalcChain(), CalcChain().dev_examples("full"), CalcChain().hidden_eval("full"))
    assert plain.score == 0.0


def test_no_built_in_family_is_answered_by_one_tool_call_and_the_floor_finds_one_that_was() -> None:
    """Triage 1.5.0 (deploys shipped by their service's owner) was answered 0.225 of its hidden eval by
    the alerting service's owner; multi_hop 1.3.0's ``fast`` 0.062 by X's manager or best friend."""
    pm = load_plugins()
    names = ("calc_chain", "multi_hop", "string_pipeline", "ledger", "dispatch", "triage")
    results = [
        (n, r)
        for n in names
        for r in check_family(pm.task_family(n), ("fast", "full"), ("one-lookup floor",))
    ]
    assert len(results) == 12
    assert not [(n, r.budget, r.detail) for n, r in results if not r.ok]
    triage = pm.task_family("triage")
    assert isinstance(triage, GeneratedFamily)
    teams_level = triage.calibration_levels("full")[TEAMS_LEVEL]  # 1.6.0's full, team questions
    owners_ship = triage.at_knobs("full", attrs.evolve(teams_level.knobs("full"), shipper="owner"))
    (result,) = check_family(owners_ship, ("full",), ("one-lookup floor",))
    assert not result.ok
    detail = str(result.detail)
    assert re.search(r"one tool call answers 0\.2[0-9]+ of the hidden eval", detail), detail
    assert "call get_service with the first prompt word it accepts and answer its 'team'" in detail


@pytest.mark.parametrize("name", sorted(PARTIAL_CREDIT))
def test_full_reference_rollouts_may_run_as_long_as_eval_rollouts(name: str) -> None:
    """The table's ``max_tokens`` caps a whole rollout; the eval gives it to every turn. On an H200 a
    calc_chain job with 192 tokens cut 41% of its rollouts short and none was right (docs/families.md)."""
    family = load_plugins().task_family(name)
    spec = family.task_spec("full")
    job = tomllib.loads(family.reference_job("full")["job.toml"])
    eval_rollout = spec.eval.max_turns * spec.eval.max_tokens
    assert job["train"]["max_tokens"] >= min(spec.bounds.max_tokens.max, eval_rollout)
    assert job["train"]["max_tokens"] <= spec.bounds.max_tokens.max
