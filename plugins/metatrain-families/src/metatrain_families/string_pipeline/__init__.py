"""string_pipeline: a chain of string transformations applied in order, each computed through a tool."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from metatrain.specs import Bounds, EvalInterface, Example, FloatRange, IntRange, TaskSpec
from metatrain_families.common import (
    baselines_file,
    bind_world,
    extract_answer,
    render_template,
    tool_schemas,
)
from metatrain_families.secret import eval_seed
from metatrain_families.string_pipeline.generator import Difficulty, generate_example
from metatrain_families.string_pipeline.tools import TOOLS

SYSTEM_PROMPT = (
    "You transform strings step by step. Apply every step with the provided tools, in the given "
    "order, feeding each tool's result into the next step. When you have the final string, reply "
    "with <answer>TEXT</answer>."
)
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
DIFFICULTY = {"fast": Difficulty(2, (6, 9)), "full": Difficulty(3, (8, 12))}
EVAL_N = {"fast": 48, "full": 200}
MAX_TOKENS = 96


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
        max_turns=IntRange(min=1, max=DIFFICULTY[budget].n_steps + 4),
        optimizers=["adamw", "sgd", "adafactor"],
        schedulers=["constant", "linear", "cosine"],
        losses=["grpo", "dr_grpo", "dapo", "bnpo"],
        full_finetune_allowed=not fast,
    )


@attrs.frozen
class StringPipeline:
    """The string_pipeline task family."""

    name: str = "string_pipeline"
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
                "Teach a small model to apply a pipeline of string transformations in order: a start "
                f"string of {d.length[0]}-{d.length[1]} lowercase letters, then {d.n_steps} steps drawn from "
                "reverse, uppercase, lowercase, replace one character with another, keep every k-th "
                "character (k = 2 or 3, starting with the first), rotate left by n, and remove repeated "
                "characters. Every step changes the string. The model must compute each step with the "
                "tools and give the final string as <answer>TEXT</answer>; scoring is exact, "
                "case-sensitive string match after stripping surrounding whitespace."
            ),
            budget=budget,
            held_out=self.held_out,
            eval=EvalInterface(
                tools=tool_schemas(TOOLS),
                system_prompt=SYSTEM_PROMPT,
                answer_format=(
                    "<answer>TEXT</answer> with TEXT the final string, exact and case-sensitive "
                    "(only surrounding whitespace is stripped; no quotes)"
                ),
                max_turns=d.n_steps + 2,
                max_tokens=MAX_TOKENS,
            ),
            bounds=_bounds(budget),
            dev_examples=dev,
            eval_n=EVAL_N[budget],
        )

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        return [bind_world(fn, copy.deepcopy(example.info["world"])) for fn in TOOLS]

    def hidden_eval(self, budget: str) -> list[Example]:
        d = DIFFICULTY[_check_budget(budget)]
        rng = random.Random(eval_seed(self.name, self.version, budget))
        return [generate_example(rng, d, f"{self.name}-eval-{i}") for i in range(EVAL_N[budget])]

    def score(self, example: Example, final_text: str) -> float:
        """Exact match of the last <answer> block, surrounding whitespace stripped."""
        got = extract_answer(final_text)
        return 1.0 if got is not None and got.strip() == example.answer else 0.0

    def reference_job(self, budget: str) -> dict[str, str]:
        d = DIFFICULTY[_check_budget(budget)]
        fast = budget == "fast"
        pkg = "metatrain_families.string_pipeline"
        env = render_template(
            pkg,
            "reference_env.py.tmpl",
            system_prompt=repr(SYSTEM_PROMPT),
            n_steps=d.n_steps,
            len_lo=d.length[0],
            len_hi=d.length[1],
            alphabet=d.alphabet,
            max_turns=d.n_steps + 2,
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
