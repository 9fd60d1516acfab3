"""The ledger family: generator, scorer, stateful tools, hidden-eval solvability, reference job."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
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
from metatrain.plugins import load_plugins
from metatrain.protocols import TaskFamily
from metatrain.specs import Example
from metatrain.training.environment import to_vf_messages
from metatrain_families.common import tool_schemas
from metatrain_families.ledger import DIFFICULTY, Ledger
from metatrain_families.ledger.generator import QUESTIONS, generate_example
from metatrain_families.ledger.tools import TOOLS

FAMILY = Ledger()
STEP_RES = [
    (re.compile(r"^\d+\. Open a new account named (\w+)\.$"), "open_account", ("account",)),
    (re.compile(r"^\d+\. Deposit (\d+) into (\w+)\.$"), "deposit", ("amount", "account")),
    (re.compile(r"^\d+\. Withdraw (\d+) from (\w+)\.$"), "withdraw", ("amount", "account")),
    (
        re.compile(r"^\d+\. Transfer (\d+) from (\w+) to (\w+)\.$"),
        "transfer",
        ("amount", "from_account", "to_account"),
    ),
]


def parse_prompt(prompt: str) -> tuple[list[str], list[tuple[str, dict[str, Any]]], str]:
    """Accounts on file, the instructions as tool calls, and the question line: read from the prompt alone."""
    existing = re.search(r"Accounts on file: ([\w, ]+) \(", prompt)
    assert existing
    calls: list[tuple[str, dict[str, Any]]] = []
    for line in prompt.splitlines():
        for pattern, op, keys in STEP_RES:
            m = pattern.match(line)
            if m:
                args = dict(zip(keys, m.groups(), strict=True))
                if "amount" in args:
                    args["amount"] = int(args["amount"])
                calls.append((op, args))
    question = next(line for line in prompt.splitlines() if line.startswith("Question: "))
    return existing.group(1).split(", "), calls, question


def step_args(step: dict[str, Any]) -> dict[str, Any]:
    """The tool arguments that carry out one recorded instruction."""
    if step["op"] == "transfer":
        return {"from_account": step["account"], "to_account": step["to"], "amount": step["amount"]}
    if step["op"] == "open_account":
        return {"account": step["account"]}
    return {"account": step["account"], "amount": step["amount"]}


def final_balances(info: dict[str, Any]) -> dict[str, int]:
    """Every account's balance once the recorded instructions ran on the example's world."""
    world = copy.deepcopy(info["world"])
    tools = {fn.__name__: fn for fn in TOOLS}
    for step in info["steps"]:
        if not step["refused"]:
            tools[step["op"]](world, **step_args(step))
    return {r["name"]: r["balance"] for r in world["accounts"]}


def reads_for(prompt: str) -> list[str]:
    """The accounts whose final balance the question needs read: all of them for a total."""
    accounts, calls, question = parse_prompt(prompt)
    if "total balance across all accounts" in question:
        return accounts + [args["account"] for op, args in calls if op == "open_account"]
    m = re.search(r"final balance of (\w+)\?", question)
    assert m, question
    return [m.group(1)]


def solve(family: Ledger, example: Example) -> tuple[str, int]:
    """Answer an example as a competent tool user would (prompt and tools only); also the calls it made."""
    tools: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in family.tools_for(example)}
    _, calls, question = parse_prompt(example.prompt)
    for op, args in calls:
        try:
            tools[op](**args)
        except ValueError as exc:
            assert "refused" in str(exc)
    held = [tools["balance"](account=name) for name in reads_for(example.prompt)]
    answer = sum(held) if "total balance" in question else held[0]
    return str(answer), len(calls) + len(held)


def test_registered_and_shaped() -> None:
    family = load_plugins().task_family("ledger")
    assert isinstance(family, TaskFamily)
    assert (family.name, family.version, family.held_out) == ("ledger", "1.3.0", False)
    assert family.baselines_path().name == "ledger.json"
    with pytest.raises(ValueError):
        family.task_spec("huge")


@pytest.mark.parametrize("budget", BUDGETS)
def test_generator_is_deterministic_per_seed(budget: str) -> None:
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget, whole_spec=True)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_hidden_eval_are_disjoint(budget: str) -> None:
    _, hidden = assert_split_sized_and_disjoint(FAMILY, budget)
    assert len({e.id for e in hidden}) == len(hidden)
    assert len({e.prompt for e in hidden}) > 0.95 * len(hidden)


@pytest.mark.parametrize("budget", BUDGETS)
def test_scorer_is_exact(budget: str) -> None:
    for ex in FAMILY.task_spec(budget).dev_examples + FAMILY.hidden_eval(budget)[:40]:
        assert ex.answer.lstrip("-").isdigit()
        assert FAMILY.score(ex, f"Done. <answer>{ex.answer}</answer>") == 1.0
        assert FAMILY.score(ex, f"{ex.answer}") == 0.0
        assert FAMILY.score(ex, f"<answer> +{int(ex.answer):,} </answer>") == 1.0
        assert FAMILY.score(ex, f"<answer>{int(ex.answer) + 1}</answer>") == 0.0
        assert FAMILY.score(ex, "<answer>nobody</answer>") == 0.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_question_needs_the_hidden_balances(budget: str) -> None:
    """Full asks one account's final balance or the total across all accounts (a new one included);
    the "richest" (a name listed in the prompt) and "refused" (a small count) questions are gone."""
    examples = FAMILY.hidden_eval(budget) + FAMILY.task_spec(budget).dev_examples
    kinds = {ex.info["question"]["kind"] for ex in examples}
    assert kinds == set(DIFFICULTY[budget].questions)
    assert kinds == ({"balance"} if budget == "fast" else {"balance", "total"})
    assert set(QUESTIONS) == {"balance", "total"}
    for ex in examples:
        held = final_balances(ex.info)
        if ex.info["question"]["kind"] == "total":
            assert ex.answer == str(sum(held.values()))
            assert "total balance across all accounts" in parse_prompt(ex.prompt)[2]
        else:
            assert ex.answer == str(held[ex.info["question"]["account"]])


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_tool_free_guess_stays_under_the_guess_floor(budget: str) -> None:
    problems = failed(check_family(FAMILY, (budget,), ("guess floor",)))
    assert not problems, problems


def test_tool_schemas_match_the_implementations() -> None:
    spec = FAMILY.task_spec("fast")
    assert spec.eval.tools == tool_schemas(TOOLS)
    assert_schemas_match(spec.eval.tools, FAMILY.tools_for(spec.dev_examples[0]))


def test_tools_share_state_within_a_rollout_and_never_across() -> None:
    example = FAMILY.task_spec("full").dev_examples[0]
    before = copy.deepcopy(example.info)
    first = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    second = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    name = example.info["world"]["accounts"][0]["name"]
    start = first["balance"](account=name)
    assert first["deposit"](account=name, amount=1000) == start + 1000
    assert first["balance"](account=name) == start + 1000
    assert second["balance"](account=name) == start
    first["open_account"](account="zed")
    with pytest.raises(ValueError, match="no account named 'zed'"):
        second["balance"](account="zed")
    assert example.info == before


def test_tool_errors_are_helpful() -> None:
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(FAMILY.task_spec("fast").dev_examples[0])}
    name = FAMILY.task_spec("fast").dev_examples[0].info["world"]["accounts"][0]["name"]
    held = tools["balance"](account=name)
    with pytest.raises(ValueError, match=r"refused.*overdraw"):
        tools["withdraw"](account=name, amount=held + 1)
    assert tools["balance"](account=name) == held
    with pytest.raises(ValueError, match="positive whole number"):
        tools["deposit"](account=name, amount=-5)
    with pytest.raises(ValueError, match="already exists"):
        tools["open_account"](account=name.upper())
    assert tools["deposit"](account=f" {name.upper()} ", amount="5") == held + 5


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_eval_example_is_solvable_with_the_tools(budget: str) -> None:
    most = 0
    for ex in FAMILY.hidden_eval(budget) + FAMILY.task_spec(budget).dev_examples:
        answer, calls = solve(FAMILY, ex)
        assert answer == ex.answer, ex.prompt
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0
        most = max(most, calls)
    assert most + 2 == FAMILY.task_spec(budget).eval.max_turns


# ---- the reference job ----


def _workspace(tmp_path: Path, budget: str) -> Path:
    return write_reference_job(FAMILY, budget, tmp_path / f"ws-{budget}")


def _load_env_module(ws: Path) -> ModuleType:
    return load_env_module(ws, f"ledger_env_{ws.name}")


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_and_is_within_bounds(budget: str, tmp_path: Path) -> None:
    job = assert_reference_job_within_bounds(FAMILY, budget, whole_job=True)
    assert job.train.model == ("smollm2-135m" if budget == "fast" else "qwen2.5-coder-0.5b")


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_env_mirrors_the_generator(budget: str, tmp_path: Path) -> None:
    env = _load_env_module(_workspace(tmp_path, budget))
    for seed in range(30):
        row = env._example(random.Random(seed))
        ex = generate_example(random.Random(seed), DIFFICULTY[budget], "x")
        assert (row["question"], row["answer"], row["info"]) == (ex.prompt, ex.answer, ex.info)


def _assistant_call(name: str, args: dict[str, Any], i: int) -> Any:
    from verifiers.types import AssistantMessage, ToolCall

    return AssistantMessage(
        content="", tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=json.dumps(args))]
    )


def test_reference_env_rollout_state_and_rubric(tmp_path: Path) -> None:
    import verifiers as vf

    module = _load_env_module(_workspace(tmp_path, "full"))
    env = module.load_environment(num_examples=4)
    spec = FAMILY.task_spec("full")
    for ex in spec.dev_examples:
        info = copy.deepcopy(ex.info)
        state = vf.State(input={"prompt": [], "answer": ex.answer, "info": info, "example_id": 0})
        other = vf.State(input={"prompt": [], "answer": ex.answer, "info": info, "example_id": 1})
        completion: list[Any] = []
        for i, (op, args) in enumerate(parse_prompt(ex.prompt)[1]):
            call = _assistant_call(op, args, i)
            completion.append(call)
            completion += asyncio.run(env.env_response([call], state))
        steps_only, n = list(completion), len(ex.info["steps"])
        reads = reads_for(ex.prompt) if ex.info["question"]["kind"] == "total" else []
        for j, account in enumerate(reads):  # a total's reads of every final balance earn credit too
            call = _assistant_call("balance", {"account": account}, 50 + j)
            completion.append(call)
            completion += asyncio.run(env.env_response([call], state))
        read_msgs = completion[len(steps_only) :]
        name = info["world"]["accounts"][0]["name"]
        probe_call = _assistant_call("balance", {"account": name}, 99)
        fresh = asyncio.run(env.env_response([probe_call], other))
        assert fresh[0].content == str(info["world"]["accounts"][0]["balance"])
        assert info == ex.info
        assert module.correct_steps(completion, info) == 0.0  # all steps right, never answered: no credit
        assert module._correct_steps(completion, info) == 1.0  # the credit it would earn answered
        assert module._correct_steps(steps_only, info) == pytest.approx(n / (n + len(reads)))
        if reads:  # reads before the instructions are done, repeated or wrong ones earn nothing
            only_steps = module._correct_steps(steps_only, info)
            assert module._correct_steps(read_msgs + steps_only, info) == only_steps
            repeated = steps_only + read_msgs[:2] * len(reads)
            assert module._correct_steps(repeated, info) == pytest.approx((n + 1) / (n + len(reads)))
            wrong = read_msgs[3].model_copy(update={"content": str(int(read_msgs[3].content) + 1)})
            one_right = [*steps_only, *read_msgs[:2], read_msgs[2], wrong]  # reads[1] comes back wrong
            assert module._correct_steps(one_right, info) == pytest.approx((n + 1) / (n + len(reads)))
        completion.append(vf.AssistantMessage(content=f"<answer>{ex.answer}</answer>"))
        assert module.correct_answer(completion, ex.answer) == 1.0
        assert module.correct_steps(completion, info) == 1.0
        spam = [_assistant_call("balance", {"account": name}, 1), *fresh] * 4
        assert module.correct_steps(spam, info) == 0.0
        assert (
            module.correct_answer(to_vf_messages([{"role": "assistant", "content": "no idea"}]), ex.answer)
            == 0
        )


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path / f"ws-{budget}")
    assert not any(scores["correct_steps"])
