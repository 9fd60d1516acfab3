"""multi_hop: chained relation lookups over a fresh persona world per example, through tools."""

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
from metatrain_families.multi_hop.generator import Difficulty, generate_example
from metatrain_families.multi_hop.tools import TOOLS
from metatrain_families.secret import eval_seed

SYSTEM_PROMPT = (
    "You answer questions about people by looking facts up with the provided tools. Follow the "
    "relations one at a time, feeding each name a tool returns into the next lookup. When you know "
    "the answer, reply with <answer>ANSWER</answer>."
)
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
DIFFICULTY = {
    "fast": Difficulty(n_people=8, hops=2, attributes=("name", "city")),
    "full": Difficulty(n_people=12, hops=3, attributes=("name", "city", "job")),
}
EVAL_N = {"fast": 48, "full": 200}
MAX_TOKENS = 64


def max_turns(d: Difficulty) -> int:
    """Tool rounds needed in the worst case (hops + one attribute lookup) plus two."""
    return d.hops + 1 + 2


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
        max_turns=IntRange(min=1, max=max_turns(DIFFICULTY[budget]) + 2),
        optimizers=["adamw", "sgd", "adafactor"],
        schedulers=["constant", "linear", "cosine"],
        losses=["grpo", "dr_grpo", "dapo", "bnpo"],
        full_finetune_allowed=not fast,
    )


@attrs.frozen
class MultiHop:
    """The multi_hop task family."""

    name: str = "multi_hop"
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
                f"Teach a small model to answer multi-hop questions over a small world of {d.n_people} "
                "people that is generated afresh for every example (names, managers, best friends, "
                f"cities and jobs all change). Each question follows {d.hops} relations (manager, best "
                f"friend) from a named person and asks for the last person's {', '.join(d.attributes)}, "
                'e.g. "In which city does the manager of the best friend of Alice live?". The facts '
                "are reachable only through the tools, one lookup per hop. The model gives "
                "<answer>ANSWER</answer>; scoring is case-insensitive exact match after stripping "
                "surrounding whitespace."
            ),
            budget=budget,
            held_out=self.held_out,
            eval=EvalInterface(
                tools=tool_schemas(TOOLS),
                system_prompt=SYSTEM_PROMPT,
                answer_format=(
                    "<answer>ANSWER</answer> with ANSWER a person's name, a city or a job exactly as the "
                    "tools return it (case-insensitive; surrounding whitespace stripped)"
                ),
                max_turns=max_turns(d),
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
        """Case-insensitive exact match of the last <answer> block, surrounding whitespace stripped."""
        got = extract_answer(final_text)
        return 1.0 if got is not None and got.strip().casefold() == example.answer.casefold() else 0.0

    def reference_job(self, budget: str) -> dict[str, str]:
        d = DIFFICULTY[_check_budget(budget)]
        fast = budget == "fast"
        pkg = "metatrain_families.multi_hop"
        env = render_template(
            pkg,
            "reference_env.py.tmpl",
            system_prompt=repr(SYSTEM_PROMPT),
            n_people=d.n_people,
            hops=d.hops,
            attributes=repr(list(d.attributes)),
            max_turns=max_turns(d),
        )
        job = render_template(
            pkg,
            "reference_job.toml.tmpl",
            model="smollm2-135m" if fast else "qwen2.5-coder-0.5b",
            num_examples=64 if fast else 2000,
            max_steps=2 if fast else 40,
            rollouts=4 if fast else 8,
            batch_size=2 if fast else 8,
            max_tokens=96 if fast else 224,
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
