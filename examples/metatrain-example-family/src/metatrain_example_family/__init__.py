"""digit_sum: a minimal third-party task family for metatrain."""

from __future__ import annotations

import hashlib
import os
import random
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from metatrain import hookimpl
from metatrain.specs import Bounds, EvalInterface, Example, FloatRange, IntRange, TaskSpec, ToolSchema

SYSTEM_PROMPT = "Use the tools to split the number into digits and add them. Reply with <answer>N</answer>."
_SECRET = "digit-sum-example-secret"
EVAL_N = {"fast": 48, "full": 200}
DIGITS = {"fast": (3, 4), "full": (5, 7)}


def digits(n: int) -> list[int]:
    """Split a non-negative integer into its decimal digits.

    Args:
        n: The integer to split.

    Returns:
        Its digits, most significant first.
    """
    if int(n) < 0:
        raise ValueError("n must be non-negative")
    return [int(c) for c in str(int(n))]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum a + b.
    """
    return int(a) + int(b)


TOOLS = (digits, add)


def _seed(budget: str) -> int:
    secret = os.environ.get("METATRAIN_EVAL_SECRET") or _SECRET
    return int.from_bytes(hashlib.sha256(f"{secret}|digit_sum|{budget}".encode()).digest()[:8], "big")


def _example(rng: random.Random, budget: str, example_id: str) -> Example:
    lo, hi = DIGITS[budget]
    n = rng.randint(10 ** (lo - 1), 10**hi - 1)
    return Example(
        id=example_id,
        prompt=f"What is the sum of the digits of {n}?",
        answer=str(sum(digits(n))),
        info={"n": n},
    )


@attrs.frozen
class DigitSum:
    """Sum the digits of an integer through tools."""

    name: str = "digit_sum"
    version: str = "0.1.0"
    held_out: bool = False

    def task_spec(self, budget: str) -> TaskSpec:
        from transformers.utils import get_json_schema

        rng = random.Random(f"{self.name}|{self.version}|dev")
        lo, hi = DIGITS[budget]
        return TaskSpec(
            family=self.name,
            version=self.version,
            budget=budget,
            description=f"Teach a small model to sum the digits of a {lo}-{hi} digit integer with tools.",
            eval=EvalInterface(
                tools=[ToolSchema.model_validate(get_json_schema(t)["function"]) for t in TOOLS],
                system_prompt=SYSTEM_PROMPT,
                answer_format="<answer>N</answer>",
                max_turns=hi + 2,
                max_tokens=64,
            ),
            bounds=Bounds(
                models=["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"],
                max_steps=IntRange(min=1, max=50),
                rollouts_per_example=IntRange(min=2, max=16),
                batch_size=IntRange(min=1, max=16),
                max_tokens=IntRange(min=16, max=512),
                temperature=FloatRange(min=0.1, max=2.0),
                lr=FloatRange(min=1e-7, max=1e-3),
                warmup=IntRange(min=0, max=10),
                lora_rank=IntRange(min=1, max=64),
                dataset_size=IntRange(min=4, max=5000),
                max_turns=IntRange(min=1, max=10),
                optimizers=["adamw", "sgd"],
                schedulers=["constant", "linear", "cosine"],
                losses=["grpo", "dr_grpo"],
            ),
            dev_examples=[_example(rng, budget, f"dev-{i}") for i in range(5)],
            eval_n=EVAL_N[budget],
        )

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        return list(TOOLS)

    def hidden_eval(self, budget: str) -> list[Example]:
        rng = random.Random(_seed(budget))
        return [_example(rng, budget, f"eval-{i}") for i in range(EVAL_N[budget])]

    def score(self, example: Example, final_text: str) -> float:
        found = re.findall(r"<answer>\s*(-?\d+)\s*</answer>", final_text)
        return 1.0 if found and found[-1] == example.answer else 0.0

    def reference_job(self, budget: str) -> dict[str, str]:
        files = resources.files(__name__)
        lo, hi = DIGITS[budget]
        env = files.joinpath("reference_env.py.tmpl").read_text()
        env = (
            env.replace("$LO", str(lo)).replace("$HI", str(hi)).replace("$SYSTEM_PROMPT", repr(SYSTEM_PROMPT))
        )
        return {"env.py": env, "job.toml": files.joinpath("reference_job.toml.tmpl").read_text()}

    def baselines_path(self) -> Path:
        return Path(str(resources.files(__name__).joinpath("baselines.json")))


@hookimpl
def register_task_families(register: Callable[[Any], None]) -> None:
    register(DigitSum())
