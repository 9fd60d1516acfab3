"""calc_chain: chained integer arithmetic where each step feeds the next, computed through tools."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from metatrain.specs import Bounds, EvalInterface, Example, FloatRange, IntRange, TaskSpec
from metatrain_families.calc_chain.tools import TOOLS
from metatrain_families.common import (
    baselines_file,
    extract_answer,
    normalise_int,
    render_template,
    tool_schemas,
)
from metatrain_families.secret import eval_seed

SYSTEM_PROMPT = (
    "You are a careful calculator. Compute every arithmetic step with the provided tools, feeding "
    "each result into the next step. When you have the final value, reply with <answer>N</answer>."
)
OPS = {"add": "add", "subtract": "subtract", "multiply": "multiply by"}
WORDS = {"add": "add {n}", "subtract": "subtract {n}", "multiply": "multiply by {n}"}
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_ops: int
    start: tuple[int, int]
    operand: tuple[int, int]
    multiply_weight: float = 1.0


DIFFICULTY = {"fast": Difficulty(2, (2, 30), (2, 12)), "full": Difficulty(3, (2, 60), (2, 20))}
EVAL_N = {"fast": 48, "full": 200}


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


def _bounds(budget: str) -> Bounds:
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
        max_turns=IntRange(min=1, max=6),
        optimizers=["adamw", "sgd", "adafactor"],
        schedulers=["constant", "linear", "cosine"],
        losses=["grpo", "dr_grpo", "dapo", "bnpo"],
        full_finetune_allowed=not fast,
    )


@attrs.frozen
class CalcChain:
    """The calc_chain task family."""

    name: str = "calc_chain"
    version: str = "1.0.0"
    held_out: bool = False

    def task_spec(self, budget: str) -> TaskSpec:
        d = DIFFICULTY[_check_budget(budget)]
        rng = random.Random(f"{self.name}|{self.version}|dev")
        dev = [generate_example(rng, d, f"{self.name}-dev-{i}") for i in range(5)]
        return TaskSpec(
            family=self.name,
            version=self.version,
            description=(
                "Teach a small model to compute chained integer arithmetic: a start value followed by "
                f"{d.n_ops} operations (add, subtract, multiply by), each applied to the previous result. "
                f"Start values are in {list(d.start)}, operands in {list(d.operand)}. The model must call "
                "the tools for the steps and give the final value as <answer>N</answer>; the answer is "
                "scored by exact integer match."
            ),
            budget=budget,
            held_out=self.held_out,
            eval=EvalInterface(
                tools=tool_schemas(TOOLS),
                system_prompt=SYSTEM_PROMPT,
                answer_format="<answer>N</answer> with N an integer (commas and a leading + are tolerated)",
                max_turns=d.n_ops + 2,
                max_tokens=64,
            ),
            bounds=_bounds(budget),
            dev_examples=dev,
            eval_n=EVAL_N[budget],
        )

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        return list(TOOLS)

    def hidden_eval(self, budget: str) -> list[Example]:
        d = DIFFICULTY[_check_budget(budget)]
        rng = random.Random(eval_seed(self.name, self.version, budget))
        return [generate_example(rng, d, f"{self.name}-eval-{i}") for i in range(EVAL_N[budget])]

    def score(self, example: Example, final_text: str) -> float:
        got = normalise_int(extract_answer(final_text))
        return 1.0 if got is not None and got == int(example.answer) else 0.0

    def reference_job(self, budget: str) -> dict[str, str]:
        d = DIFFICULTY[_check_budget(budget)]
        fast = budget == "fast"
        pkg = "metatrain_families.calc_chain"
        env = render_template(
            pkg,
            "reference_env.py.tmpl",
            system_prompt=repr(SYSTEM_PROMPT),
            n_ops=d.n_ops,
            start_lo=d.start[0],
            start_hi=d.start[1],
            operand_lo=d.operand[0],
            operand_hi=d.operand[1],
            max_turns=d.n_ops + 2,
        )
        job = render_template(
            pkg,
            "reference_job.toml.tmpl",
            model="smollm2-135m" if fast else "qwen2.5-coder-0.5b",
            num_examples=64 if fast else 2000,
            max_steps=2 if fast else 40,
            rollouts=4 if fast else 8,
            batch_size=2 if fast else 8,
            max_tokens=96 if fast else 192,
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
