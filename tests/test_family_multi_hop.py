"""multi_hop: deterministic worlds, solvable through its tools, exact scoring, a valid reference job."""

from __future__ import annotations

import json
import random
import re
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

from metatrain.specs import Example
from metatrain_families.multi_hop import DIFFICULTY, MultiHop
from metatrain_families.multi_hop.generator import generate_example, one_lookup_away
from metatrain_families.multi_hop.tools import TOOLS

FAMILY = MultiHop()
RELATION_TOOL = {"manager": "get_manager", "best_friend": "get_best_friend"}


def solve(example: Example) -> tuple[str, int]:
    """Follow the query's relations through the bound tools; returns the answer and the calls made."""
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    query = example.info["query"]
    person = query["start"]
    for rel, expected in zip(query["relations"], example.info["chain"], strict=True):
        person = tools[RELATION_TOOL[rel]](name=person)
        assert person == expected
    calls = len(query["relations"])
    if query["attribute"] == "city":
        return tools["get_city"](name=person), calls + 1
    if query["attribute"] == "job":
        return json.loads(tools["lookup_person"](name=person))["job"], calls + 1
    return person, calls


@pytest.mark.parametrize("budget", BUDGETS)
def test_generator_is_deterministic_per_seed(budget: str) -> None:
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_eval_are_disjoint_and_sized(budget: str) -> None:
    spec, hidden = assert_split_sized_and_disjoint(
        FAMILY, budget, key=lambda e: (e.prompt, json.dumps(e.info["world"]))
    )
    assert len({json.dumps(e.info["world"]) for e in hidden}) == len(hidden)
    assert 64 <= spec.eval.max_tokens <= 128


@pytest.mark.parametrize(("budget", "asked"), [("fast", {"name", "city"}), ("full", {"name"})])
def test_worlds_are_json_and_answers_vary(budget: str, asked: set[str]) -> None:
    hidden = FAMILY.hidden_eval(budget)
    for ex in hidden:
        assert json.loads(json.dumps(ex.info["world"])) == ex.info["world"]
    assert {ex.info["query"]["attribute"] for ex in hidden} == set(DIFFICULTY[budget].attributes) == asked
    assert len({ex.answer for ex in hidden}) > 20


def test_scorer_is_case_insensitive_exact() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    assert FAMILY.score(ex, f"<answer> {ex.answer.upper()} </answer>") == 1.0
    assert FAMILY.score(ex, f"<answer>{ex.answer.lower()}</answer>") == 1.0
    for wrong in [ex.answer + "s", ex.answer[1:], f"{ex.answer}.", "Nobody"]:
        assert FAMILY.score(ex, f"<answer>{wrong}</answer>") == 0.0
    assert FAMILY.score(ex, ex.answer) == 0.0


def test_tool_schemas_match_the_implementations() -> None:
    schemas = FAMILY.task_spec("fast").eval.tools
    assert_schemas_match(schemas, TOOLS)
    for schema in schemas:
        assert schema.parameters["properties"] == {
            "name": {"type": "string", "description": schema.parameters["properties"]["name"]["description"]}
        }
        assert schema.parameters["required"] == ["name"]


def test_unknown_names_raise_helpful_value_errors() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(ex)}
    someone = ex.info["world"]["people"][0]["name"]
    with pytest.raises(ValueError, match=f"no person named 'Nobody'.*{someone}"):
        tools["get_city"](name="Nobody")
    assert tools["get_manager"](name=f"  {someone.upper()} ") == ex.info["world"]["people"][0]["manager"]


def test_tools_do_not_share_or_mutate_the_example_world() -> None:
    ex = FAMILY.task_spec("fast").dev_examples[0]
    before = json.dumps(ex.info["world"])
    for fn in FAMILY.tools_for(ex):
        fn(name=ex.info["world"]["people"][0]["name"])
    assert json.dumps(ex.info["world"]) == before


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_and_dev_example_is_solvable_through_the_tools(budget: str) -> None:
    spec = FAMILY.task_spec(budget)
    for ex in [*FAMILY.hidden_eval(budget), *spec.dev_examples]:
        answer, calls = solve(ex)
        assert answer == ex.answer
        assert calls + 2 <= spec.eval.max_turns
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_within_bounds(budget: str) -> None:
    assert_reference_job_within_bounds(FAMILY, budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path)
    assert set(scores["hop_progress"]) == {0.0}


@pytest.fixture(scope="module")
def reference_env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The ``full`` reference job's env.py, imported."""
    workspace = write_reference_job(FAMILY, "full", tmp_path_factory.mktemp("job"))
    return load_env_module(workspace, "multi_hop_env")


def test_reference_hop_credit_pays_a_walk_along_the_path_not_a_scan(reference_env: Any) -> None:
    """Only a walk along the whole path earns credit, most of all one that stops at its end: on an H200
    a job whose credit took the path's people in any order among other results learned to look up
    10-15 relations a rollout (hop credit 0.91), one whose credit ignored steps past the path's end
    learned to walk on (5 lookups a rollout, hop credit 0.99, answers right 0.17), one that paid
    nothing past the end gave the untrained model, which walks on, almost no reward, and one that
    paid a short walk learned on an H100 to answer after one lookup (docs/families.md)."""
    env = reference_env
    row = next(r for seed in range(50) if len((r := env._example(random.Random(seed)))["info"]["chain"]) > 1)
    info, chain = row["info"], row["info"]["chain"]
    names = [p["name"] for p in info["world"]["people"]]
    others = [n for n in names if n not in chain]

    def credit(*returned: str) -> float:
        completion = [{"role": "tool", "content": text} for text in returned]
        return float(env._hop_progress(completion, info))

    profile = json.dumps({"age": 30, "job": "baker", "name": chain[0]})
    assert credit(*chain) == 1.0
    assert credit(profile, chain[0], "Lisbon", *chain[1:]) == 1.0  # profiles and cities are not hops
    assert credit(*chain[:-1]) == credit(chain[0]) == 0.0  # stopping short: nothing
    assert credit(others[0], *chain) == 0.0  # a wrong first hop: nothing
    assert credit(chain[0], others[0], *chain[1:]) == 0.0  # a wrong hop midway
    n = len(chain)
    assert credit(*chain, others[0]) == pytest.approx(n / (n + 1))  # walking on past the path's end
    assert credit(*chain, others[0], others[1]) == pytest.approx(n / (n + 2))  # the further, the less
    assert credit(*chain, chain[-1]) == pytest.approx(n / (n + 1))  # a repeat after the end
    assert credit(chain[0], chain[0], *chain[1:]) == (0.0 if n > 1 else 0.5)  # a repeat on the path
    assert credit(*others, *chain) == 0.0  # every relation looked up
    assert credit(*chain, *others) < 0.5 * credit(*chain)  # ... or the path, then a scan


def test_reference_hop_credit_needs_a_real_answer_not_the_placeholder(reference_env: Any) -> None:
    """Untrained Qwen2.5-Coder walks the path and then copies the prompt's ``<answer>ANSWER</answer>``
    (on CPU, greedy: 0 of 8 one-hop training questions right, hop credit 0.875): that earns nothing."""
    env = reference_env
    row = env._example(random.Random(7))
    walk = [{"role": "tool", "content": name} for name in row["info"]["chain"]]

    def credit(reply: str) -> float:
        return float(env.hop_progress([*walk, {"role": "assistant", "content": reply}], row["info"]))

    assert "<answer>ANSWER</answer>" in row["question"]
    assert credit("<answer>ANSWER</answer>") == credit("<answer>  </answer>") == 0.0
    assert credit("<answer>somebody</answer>") == 0.0
    assert credit(f"<answer>{row['answer']}</answer>") == 1.0
    # the right kind of answer, right or wrong, opens the gate
    assert credit("<answer>lisbon</answer>") == credit("<answer>Keiko</answer>") == 1.0


@pytest.mark.parametrize("budget", ["fast", "full"])
def test_no_answer_past_one_hop_is_one_lookup_from_the_start(budget: str, reference_env: Any) -> None:
    """In 1.3.0's ``fast`` eval one lookup on the prompt's name answered 0.062: the eval and the
    reference job's training set both redraw such questions, so neither teaches nor rewards it."""
    hidden = FAMILY.hidden_eval(budget)
    assert all(len(ex.info["chain"]) == DIFFICULTY[budget].hops > 1 for ex in hidden)
    for ex in hidden:
        start = {p["name"]: p for p in ex.info["world"]["people"]}[ex.info["query"]["start"]]
        assert ex.answer.casefold() not in one_lookup_away(start)
    rows = [reference_env._example(random.Random(seed)) for seed in range(300)]
    longer = [row for row in rows if len(row["info"]["chain"]) > 1]
    assert len(longer) > 100
    for row in longer:
        start_name = re.search(r" of (\w+)\?", row["question"])
        assert start_name, row["question"]
        start = {p["name"]: p for p in row["info"]["world"]["people"]}[start_name.group(1)]
        assert row["answer"].casefold() not in one_lookup_away(start)


def test_reference_env_min_hops_trains_nearer_the_eval(reference_env: Any) -> None:
    """The training set asks the eval's path length by default; ``env_args.min_hops`` mixes shorter
    questions back in; out of range it is refused with the allowed range named, before any dataset
    is built."""
    hops = DIFFICULTY["full"].hops

    def path_lengths(**env_args: Any) -> set[int]:
        dataset = reference_env.load_environment(num_examples=40, seed=3, **env_args).dataset
        return {len(info["chain"]) for info in map(reference_env._info, dataset["info"])}

    assert path_lengths() == {hops}
    assert path_lengths(min_hops=1) == set(range(1, hops + 1))
    for bad in (0, hops + 1, "2", True):
        with pytest.raises(ValueError, match=f"min_hops must be a whole number from 1 to {hops}"):
            reference_env.load_environment(num_examples=4, min_hops=bad)


def test_reference_env_phrases_training_questions_as_the_eval_does(reference_env: Any) -> None:
    """``full`` is guided: each training question lists its lookups in order, worded as the eval's
    generator words them (``steps``), and following them from the start reaches the answer."""
    from metatrain_families.multi_hop.generator import RELATIONS, steps

    assert DIFFICULTY["full"].guided and not DIFFICULTY["fast"].guided
    by_phrase = {v: k for k, v in RELATIONS.items()}
    for seed in range(20):
        row = reference_env._example(random.Random(seed), 1)
        question, people = row["question"], {p["name"]: p for p in row["info"]["world"]["people"]}
        lookups = r"First find the (.+?) of (\w+)\.((?: Then find the .+? of that person\.)*)"
        match = re.search(lookups, question)
        assert match is not None, question
        first, start, rest = match.groups()
        path = [by_phrase[first], *(by_phrase[p] for p in re.findall(r"Then find the (.+?) of that", rest))]
        assert steps(path, start, "name") in question
        walked, person = [], start
        for rel in path:
            person = people[person][rel]
            walked.append(person)
        assert walked == row["info"]["chain"] and person == row["answer"]
        assert question.endswith("reply with the final answer as <answer>ANSWER</answer>.")
