"""Conformance checks for task families, usable from the CLI and from pytest.

Each check returns a ``CheckResult``; none raises for a family defect (a crash inside a family
method is reported as a failed check with the exception).
"""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from metatrain.conformance.guessing import GUESS_FLOOR_LIMIT, GuessFloor, guess_floor, one_lookup_floor
from metatrain.protocols import TaskFamily
from metatrain.specs import Example, TaskSpec, parse_job_toml
from metatrain.training.table import bound_errors

BUDGETS = ("fast", "full")


@attrs.frozen
class CheckResult:
    name: str
    budget: str
    ok: bool
    detail: str = ""


def failed(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if not r.ok]


@contextmanager
def _secret(value: str) -> Iterator[None]:
    old = os.environ.get("METATRAIN_EVAL_SECRET")
    os.environ["METATRAIN_EVAL_SECRET"] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("METATRAIN_EVAL_SECRET", None)
        else:
            os.environ["METATRAIN_EVAL_SECRET"] = old


def _dump(examples: list[Example]) -> list[str]:
    return [e.model_dump_json() for e in examples]


def check_determinism(family: TaskFamily, budget: str) -> str | None:
    if _dump(family.hidden_eval(budget)) != _dump(family.hidden_eval(budget)):
        return "hidden_eval() differs between two calls"
    if family.task_spec(budget) != family.task_spec(budget):
        return "task_spec() differs between two calls"
    return None


def check_disjoint(family: TaskFamily, budget: str) -> str | None:
    spec = family.task_spec(budget)
    evals = family.hidden_eval(budget)
    if len(evals) != spec.eval_n:
        return f"hidden_eval() has {len(evals)} examples, the spec says eval_n={spec.eval_n}"
    eval_prompts = {e.prompt for e in evals}
    shared = [e.id for e in spec.dev_examples if e.prompt in eval_prompts]
    if shared:
        return f"dev examples also in the hidden eval: {shared}"
    if len({e.id for e in evals}) != len(evals):
        return "hidden-eval example ids are not unique"
    return None


def check_scorer(family: TaskFamily, budget: str) -> str | None:
    for ex in [*family.task_spec(budget).dev_examples, *family.hidden_eval(budget)[:20]]:
        right = family.score(ex, f"<answer>{ex.answer}</answer>")
        if right != 1.0:
            return f"{ex.id}: the reference answer scores {right}, not 1.0"
        # A trailing 7 changes every number (0 -> 07 = 7; n -> 10n+7) and every string.
        for wrong in (f"<answer>{ex.answer}7</answer>", "<answer></answer>", "no answer", ex.answer + " 1"):
            if family.score(ex, wrong) >= 1.0:
                return f"{ex.id}: the perturbed answer {wrong!r} scores 1.0"
    return None


def check_tools(family: TaskFamily, budget: str) -> str | None:
    from transformers.utils import get_json_schema

    spec = family.task_spec(budget)
    declared = {t.name: t for t in spec.eval.tools}
    for ex in [*spec.dev_examples, *family.hidden_eval(budget)[:3]]:
        tools = family.tools_for(ex)
        names = [getattr(t, "__name__", "?") for t in tools]
        if sorted(names) != sorted(declared):
            return (
                f"{ex.id}: tools_for() gives {sorted(names)}, the eval interface declares {sorted(declared)}"
            )
        for tool in tools:
            schema = get_json_schema(tool)["function"]
            want = declared[schema["name"]]
            if schema.get("parameters") != want.parameters:
                return f"tool {schema['name']}: implementation schema {schema.get('parameters')} != declared"
            if not want.description:
                return f"tool {schema['name']} has no description"
    return None


def _prompt_tokens(spec: TaskSpec, example: Example) -> tuple[int, str]:
    """Tokens of the rendered first eval turn, with the smallest prepared allowed model's tokenizer."""
    from metatrain.models import EMBEDDED_MODELS, load_tokenizer, model_status
    from metatrain.training.evaluation import eval_conversation, tool_schemas

    for key in spec.bounds.models:
        status = model_status(key) if key in EMBEDDED_MODELS else None
        if status is not None and status.prepared and status.path is not None:
            tok: Any = load_tokenizer(status.path)
            text = tok.apply_chat_template(
                eval_conversation(spec, example),
                tools=tool_schemas(spec),
                add_generation_prompt=True,
                tokenize=False,
            )
            return len(tok(text, add_special_tokens=False)["input_ids"]), key
    chars = (
        len(spec.eval.system_prompt)
        + len(example.prompt)
        + len(str([t.model_dump() for t in spec.eval.tools]))
    )
    return chars // 3 + 64, "estimate (chars/3): no allowed model is prepared"


def check_token_budget(family: TaskFamily, budget: str) -> str | None:
    from metatrain.models import EMBEDDED_MODELS

    spec = family.task_spec(budget)
    limits = [EMBEDDED_MODELS[m].context_length for m in spec.bounds.models if m in EMBEDDED_MODELS]
    context = min(limits) if limits else 2048
    longest = max(family.hidden_eval(budget), key=lambda e: len(e.prompt))
    tokens, how = _prompt_tokens(spec, longest)
    need = tokens + spec.eval.max_turns * (spec.eval.max_tokens + 64)
    if need > context:
        return (
            f"longest eval prompt is {tokens} tokens ({how}); with {spec.eval.max_turns} turns of "
            f"{spec.eval.max_tokens} tokens it needs {need} > context {context}"
        )
    return None


def check_secret(family: TaskFamily, budget: str) -> str | None:
    spec_text = family.task_spec(budget).model_dump_json()
    reference = "\n".join(family.reference_job(budget).values())
    evals = family.hidden_eval(budget)
    leaked = [e.id for e in evals if e.prompt in spec_text or e.prompt in reference]
    if leaked:
        return f"hidden-eval prompts appear in the task spec or reference job: {leaked[:5]}"
    with _secret("conformance-a"):
        a = _dump(family.hidden_eval(budget))
    with _secret("conformance-b"):
        b = _dump(family.hidden_eval(budget))
    if a == b:
        return "the hidden eval does not depend on the eval secret (it could be regenerated from public code)"
    return None


def check_reference_job(family: TaskFamily, budget: str) -> str | None:
    from metatrain.episode.probe import validate_submission
    from metatrain.episode.workspace import Workspace

    spec = family.task_spec(budget)
    files = family.reference_job(budget)
    errors = bound_errors(parse_job_toml(files["job.toml"]).train, spec.bounds)
    if errors:
        return "; ".join(errors)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "workspace")
        for name, text in files.items():
            ws.write(name, text)
        outcome = validate_submission(ws, spec)
    return None if outcome.report.ok else "; ".join(outcome.report.errors)


Guesser = Callable[[TaskFamily, list[Example], list[Example]], GuessFloor]


def _fitted_elsewhere(guesser: Guesser, family: TaskFamily, budget: str) -> GuessFloor:
    """``guesser`` fitted on a draw under another secret, scored on the hidden eval."""
    with _secret("conformance-guesser"):
        train = family.hidden_eval(budget)
    return guesser(family, train, family.hidden_eval(budget))


def measure_guess_floor(family: TaskFamily, budget: str) -> GuessFloor:
    """The best tool-free guesser's score on the hidden eval."""
    return _fitted_elsewhere(guess_floor, family, budget)


def measure_one_lookup_floor(family: TaskFamily, budget: str) -> GuessFloor:
    """The best one-call guesser's score on the hidden eval."""
    return _fitted_elsewhere(one_lookup_floor, family, budget)


def _over_the_limit(floor: GuessFloor, found: str, fix: str) -> str | None:
    """The problem when ``floor`` reaches the limit: ``found`` takes the score as ``{score}``."""
    if floor.score < GUESS_FLOOR_LIMIT:
        return None
    return f"{found.format(score=f'{floor.score:.3f}')} (limit {GUESS_FLOOR_LIMIT}): {floor.policy}; {fix}"


def check_guess_floor(family: TaskFamily, budget: str) -> str | None:
    return _over_the_limit(
        measure_guess_floor(family, budget),
        "a tool-free guess scores {score} on the hidden eval",
        "make the answer depend on what only the tools return",
    )


def check_one_lookup_floor(family: TaskFamily, budget: str) -> str | None:
    return _over_the_limit(
        measure_one_lookup_floor(family, budget),
        "one tool call answers {score} of the hidden eval",
        "make the answer need the task's whole chain of lookups",
    )


CHECKS: dict[str, Callable[[TaskFamily, str], str | None]] = {
    "determinism": check_determinism,
    "disjoint splits": check_disjoint,
    "scorer": check_scorer,
    "tool schemas": check_tools,
    "token budget": check_token_budget,
    "eval secrecy": check_secret,
    "guess floor": check_guess_floor,
    "one-lookup floor": check_one_lookup_floor,
    "reference job validates": check_reference_job,
}


def check_family(
    family: TaskFamily, budgets: tuple[str, ...] = BUDGETS, only: tuple[str, ...] | None = None
) -> list[CheckResult]:
    """Run every check (or ``only`` those named) for each budget."""
    results = []
    for budget in budgets:
        for name, check in CHECKS.items():
            if only and name not in only:
                continue
            try:
                problem = check(family, budget)
            except Exception as exc:
                problem = f"raised {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
            results.append(CheckResult(name, budget, problem is None, problem or ""))
    return results
