"""triage: on-call incident triage; correlate services, incidents and deploys to name the culprit."""

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
    render_template,
    tool_schemas,
)
from metatrain_families.secret import eval_seed
from metatrain_families.triage.generator import (
    ASK,
    CHANGES,
    SERVICES,
    SYMPTOMS,
    TEAMS,
    Difficulty,
    generate_example,
    rule,
)
from metatrain_families.triage.tools import TOOLS

SYSTEM_PROMPT = (
    "You are the on-call engineer. Investigate with the provided tools, one call at a time: incidents, "
    "services and their dependencies, deploys. When you know the answer, reply with <answer>...</answer>."
)
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
DIFFICULTY = {
    "fast": Difficulty(n_deps=1, n_other=2, earlier=(1, 2), rollback_p=0.0, questions=("deploy",)),
    "full": Difficulty(n_deps=2, n_other=3, earlier=(1, 2), rollback_p=0.5, questions=("deploy", "team")),
}
EVAL_N = {"fast": 48, "full": 200}


def normalise_label(text: str | None) -> str | None:
    """A deploy-id or team answer; ignores case, outer spaces and quotes, a final '.', a 'team' word."""
    if text is None:
        return None
    cleaned = text.strip().strip("'\"`.").strip().lower()
    return re.sub(r"^team\s+|\s+team$", "", cleaned) or None


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
    asks = {"deploy": "the culprit deploy's id", "team": "the team to page (owner of the culprit's service)"}
    decoys = " Some deploys were rolled back." if d.rollback_p > 0 else ""
    return (
        "Teach a small model on-call incident triage through read-only tools (list_incidents, get_service, "
        "list_deploys, get_deploy). Each example's world (info['world']) has "
        f"{1 + d.n_deps + d.n_other} services (the alerting one depends directly on {d.n_deps}), a few "
        "incidents (one open on the alerting service, older resolved ones, others elsewhere) and a day of "
        f"deploys, with decoys after the incident, on unrelated services and on indirect dependencies."
        f"{decoys} The prompt names the alerting service and states the rule: {rule(d)} "
        f"The model answers {' or '.join(asks[k] for k in d.questions)}, scored by exact match after "
        "normalisation (case, surrounding spaces/quotes, a 'team' word). Service names come from "
        f"{list(SERVICES)}, teams from {list(TEAMS)}, deploy ids look like dep-1a2b, times are HH:MM; "
        f"symptoms {list(SYMPTOMS)}, changes {list(CHANGES)}."
    )


@attrs.frozen
class Triage:
    """The triage task family (held out: the generalisation probe)."""

    name: str = "triage"
    version: str = "1.0.0"
    held_out: bool = True

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
                    "<answer>DEPLOY_ID</answer> (e.g. dep-1a2b) or <answer>TEAM</answer>, as the question "
                    "asks; case-insensitive"
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
        got = normalise_label(extract_answer(final_text))
        return 1.0 if got is not None and got == normalise_label(example.answer) else 0.0

    def reference_job(self, budget: str) -> dict[str, str]:
        d = DIFFICULTY[_check_budget(budget)]
        fast = budget == "fast"
        pkg = "metatrain_families.triage"
        env = render_template(
            pkg,
            "reference_env.py.tmpl",
            system_prompt=repr(SYSTEM_PROMPT),
            services=repr(SERVICES),
            teams=repr(TEAMS),
            symptoms=repr(SYMPTOMS),
            changes=repr(CHANGES),
            ask=repr(ASK),
            rule=repr(rule(d)),
            n_deps=d.n_deps,
            n_other=d.n_other,
            earlier=repr(d.earlier),
            rollback_p=d.rollback_p,
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
