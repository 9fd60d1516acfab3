"""ledger: stateful account bookkeeping through tools; the answer depends on the state they built."""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from metatrain.specs import Bounds, EvalInterface, Example, FloatRange, IntRange, TaskSpec
from metatrain_families.common import (
    baselines_file,
    bind_world,
    extract_answer,
    normalise_int,
    render_template,
    tool_schemas,
)
from metatrain_families.ledger.generator import NAMES, QUESTIONS, RULE, Difficulty, generate_example
from metatrain_families.ledger.tools import TOOLS
from metatrain_families.secret import eval_seed

SYSTEM_PROMPT = (
    "You are a bank clerk. Carry out every instruction with the provided tools, one at a time and in "
    "order; opening balances are known only to the tools. When done, reply with <answer>...</answer>."
)
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
DIFFICULTY = {
    "fast": Difficulty(2, 2, (20, 100), (5, 60), refuse_p=0.3, open_p=0.0, questions=("balance",)),
    "full": Difficulty(
        2, 4, (20, 150), (5, 120), refuse_p=0.35, open_p=0.5, questions=("balance", "richest", "refused")
    ),
}
EVAL_N = {"fast": 48, "full": 200}


def normalise_name(text: str | None) -> str | None:
    """An account-name answer; ignores case, outer spaces and quotes, a final '.', an 'account ' prefix."""
    if text is None:
        return None
    cleaned = text.strip().strip("'\"`.").strip().lower()
    return re.sub(r"^account\s+", "", cleaned) or None


def _max_turns(d: Difficulty) -> int:
    return d.needed_calls + 2


def _bounds(budget: str, max_turns: int) -> Bounds:
    fast = budget == "fast"
    return Bounds(
        models=MODELS,
        max_steps=IntRange(min=1, max=8 if fast else 200),
        rollouts_per_example=IntRange(min=2, max=8 if fast else 16),
        batch_size=IntRange(min=1, max=8 if fast else 64),
        max_tokens=IntRange(min=16, max=256 if fast else 1024),
        temperature=FloatRange(min=0.1, max=2.0),
        lr=FloatRange(min=1e-7, max=1e-3),
        warmup=IntRange(min=0, max=10 if fast else 50),
        lora_rank=IntRange(min=1, max=64),
        dataset_size=IntRange(min=4, max=2000 if fast else 20000),
        max_turns=IntRange(min=1, max=max_turns + 4),
        optimizers=["adamw", "sgd", "adafactor"],
        schedulers=["constant", "linear", "cosine"],
        losses=["grpo", "dr_grpo", "dapo", "bnpo"],
        full_finetune_allowed=not fast,
    )


def _describe(d: Difficulty) -> str:
    kinds = {
        "balance": "the final balance of one account",
        "richest": "which account holds the most at the end",
        "refused": "how many instructions were refused",
    }
    opening = " Some prompts first open a new (empty) account." if d.open_p > 0 else ""
    return (
        "Teach a small model to keep a bank ledger through stateful tools (open_account, deposit, withdraw, "
        f"transfer, balance). Each example has {d.n_existing} existing accounts whose opening balances "
        f"({list(d.balance)}) are hidden in the example's world and known only to the tools, and "
        f"{d.n_steps} instructions (amounts in {list(d.amount)}) to carry out in order.{opening} {RULE} "
        f"The question asks {' or '.join(kinds[k] for k in d.questions)}. Tools share one fresh copy of "
        "the example's world per rollout (info['world']); the answer is <answer>N</answer> for numbers "
        "(exact integer match) or <answer>NAME</answer> for an account (case-insensitive). Account names "
        f"come from {list(NAMES)}; question wordings: {list(QUESTIONS[k] for k in d.questions)}."
    )


@attrs.frozen
class Ledger:
    """The ledger task family."""

    name: str = "ledger"
    version: str = "1.0.0"
    held_out: bool = False

    def task_spec(self, budget: str) -> TaskSpec:
        d = DIFFICULTY[_check_budget(budget)]
        rng = random.Random(f"{self.name}|{self.version}|dev")
        dev = [generate_example(rng, d, f"{self.name}-dev-{i}") for i in range(5)]
        return TaskSpec(
            family=self.name,
            version=self.version,
            description=_describe(d),
            budget=budget,
            held_out=self.held_out,
            eval=EvalInterface(
                tools=tool_schemas(TOOLS),
                system_prompt=SYSTEM_PROMPT,
                answer_format=(
                    "<answer>N</answer> with N an integer (commas and a leading + are tolerated), or "
                    "<answer>NAME</answer> with an account name (case-insensitive) when the question asks "
                    "for an account"
                ),
                max_turns=_max_turns(d),
                max_tokens=96,
            ),
            bounds=_bounds(budget, _max_turns(d)),
            dev_examples=dev,
            eval_n=EVAL_N[budget],
        )

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        world = copy.deepcopy(example.info["world"])
        return [bind_world(fn, world) for fn in TOOLS]

    def hidden_eval(self, budget: str) -> list[Example]:
        d = DIFFICULTY[_check_budget(budget)]
        rng = random.Random(eval_seed(self.name, self.version, budget))
        return [generate_example(rng, d, f"{self.name}-eval-{i}") for i in range(EVAL_N[budget])]

    def score(self, example: Example, final_text: str) -> float:
        got = extract_answer(final_text)
        want = normalise_int(example.answer)
        if want is None:
            return 1.0 if normalise_name(got) == normalise_name(example.answer) else 0.0
        return 1.0 if normalise_int(got) == want else 0.0

    def reference_job(self, budget: str) -> dict[str, str]:
        d = DIFFICULTY[_check_budget(budget)]
        fast = budget == "fast"
        pkg = "metatrain_families.ledger"
        env = render_template(
            pkg,
            "reference_env.py.tmpl",
            system_prompt=repr(SYSTEM_PROMPT),
            names=repr(NAMES),
            rule=repr(RULE),
            questions=repr(QUESTIONS),
            n_existing=d.n_existing,
            n_steps=d.n_steps,
            balance=repr(d.balance),
            amount=repr(d.amount),
            refuse_p=d.refuse_p,
            open_p=d.open_p,
            kinds=repr(d.questions),
            max_turns=_max_turns(d),
        )
        job = render_template(
            pkg,
            "reference_job.toml.tmpl",
            model="smollm2-135m" if fast else "qwen2.5-coder-0.5b",
            num_examples=64 if fast else 2000,
            max_steps=2 if fast else 40,
            rollouts=4 if fast else 8,
            batch_size=2 if fast else 8,
            max_tokens=96 if fast else 256,
            lr="5e-5",
            rank=8 if fast else 16,
            alpha=16 if fast else 32,
        )
        return {"env.py": env, "job.toml": job}

    def baselines_path(self) -> Path:
        return baselines_file(self.name)


def _check_budget(budget: str) -> str:
    if budget not in DIFFICULTY:
        raise ValueError(f"unknown budget {budget!r}; choose one of {sorted(DIFFICULTY)}")
    return budget
