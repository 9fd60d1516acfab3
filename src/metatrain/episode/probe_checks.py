"""The validation probe's checks that import agent code. Runs only inside the sandbox."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from metatrain.specs import JobFile, TaskSpec
from metatrain.training.environment import (
    EnvironmentError_,
    call_reward,
    load_job_environment,
    to_vf_messages,
    user_reward_funcs,
    visible_tools,
)

MAX_ERRORS = 12


def _tool_errors(env: Any, spec: TaskSpec) -> list[str]:
    """The environment's tools must match the eval tool interface (names, parameters, types)."""
    from transformers.utils import get_json_schema

    errors: list[str] = []
    expected = {t.name: t for t in spec.eval.tools}
    got: dict[str, dict[str, Any]] = {}
    for tool in visible_tools(env):
        name = getattr(tool, "__name__", repr(tool))
        try:
            got[name] = get_json_schema(tool)["function"]
        except Exception as exc:
            errors.append(
                f"tool {name}: cannot build its schema ({exc}); give it type hints and a Google-style "
                "docstring with an Args: section"
            )
    for name in sorted(set(expected) - set(got)):
        errors.append(f"the environment lacks eval tool {name!r}")
    for name in sorted(set(got) - set(expected)):
        errors.append(f"tool {name!r} is not part of the eval tool interface {sorted(expected)}")
    for name in sorted(set(expected) & set(got)):
        want = expected[name].parameters
        have = got[name].get("parameters", {})
        want_props = {k: v.get("type") for k, v in want.get("properties", {}).items()}
        have_props = {k: v.get("type") for k, v in have.get("properties", {}).items()}
        if want_props != have_props:
            errors.append(
                f"tool {name!r} parameters {have_props} differ from the eval interface's {want_props}"
            )
        if sorted(want.get("required", [])) != sorted(have.get("required", [])):
            errors.append(
                f"tool {name!r} required parameters {have.get('required', [])} differ from "
                f"{want.get('required', [])}"
            )
    return errors


def _dataset_errors(dataset: Any) -> list[str]:
    errors: list[str] = []
    if len(dataset) == 0:
        return ["the dataset is empty"]
    cols = set(dataset.column_names)
    for col in ("prompt", "answer"):
        if col not in cols:
            errors.append(f"dataset rows need a {col!r} column (have {sorted(cols)})")
    if errors:
        return errors
    for i in range(min(len(dataset), 16)):
        row = dataset[i]
        prompt = row["prompt"]
        if (
            not isinstance(prompt, list)
            or not prompt
            or not all(
                isinstance(m, dict)
                and m.get("role") in {"system", "user", "assistant"}
                and isinstance(m.get("content"), str)
                for m in prompt
            )
        ):
            errors.append(f"dataset row {i}: prompt must be a non-empty list of chat messages")
        elif prompt[-1]["role"] != "user":
            errors.append(f"dataset row {i}: the prompt must end with a user message")
        if not isinstance(row["answer"], str) or not row["answer"].strip():
            errors.append(f"dataset row {i}: answer must be a non-empty string")
        if len(errors) >= 4:
            break
    return errors


def _rubric_cases(spec: TaskSpec, dataset: Any) -> list[tuple[str, dict[str, Any]]]:
    """Rollout-shaped inputs: dev examples and a few dataset rows, each with a right and a wrong answer."""
    cases: list[tuple[str, dict[str, Any]]] = []
    sources = [(ex.id, ex.prompt, ex.answer, ex.info) for ex in spec.dev_examples]
    for i in range(min(2, len(dataset))):
        row = dataset[i]
        sources.append(
            (f"dataset row {i}", row["prompt"][-1]["content"], row["answer"], row.get("info") or {})
        )
    tool = spec.eval.tools[0].name if spec.eval.tools else None
    for label, prompt, answer, info in sources:
        prompt_msgs = [
            {"role": "system", "content": spec.eval.system_prompt},
            {"role": "user", "content": prompt},
        ]
        right = [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]
        wrong: list[dict[str, Any]] = []
        if tool:
            wrong.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": {}}}],
                }
            )
            wrong.append({"role": "tool", "content": '{"error": "missing arguments"}'})
        wrong.append({"role": "assistant", "content": "I am not sure."})
        for kind, completion in (("right answer", right), ("wrong answer", wrong)):
            cases.append(
                (
                    f"{label} ({kind})",
                    {"prompt": prompt_msgs, "completion": completion, "answer": answer, "info": info},
                )
            )
    return cases


def check_environment(workspace: str, job_json: str, spec_json: str) -> dict[str, Any]:
    """Import the agent's env, then check tools, dataset and rubric. Returns errors and facts."""
    spec = TaskSpec.model_validate_json(spec_json)
    job = JobFile.model_validate_json(job_json)
    facts: dict[str, Any] = {}
    try:
        env = load_job_environment(Path(workspace), job)
    except EnvironmentError_ as exc:
        return {"errors": [str(exc)], "facts": facts}
    except Exception as exc:
        tb = traceback.format_exc(limit=-3)
        return {
            "errors": [f"loading the environment raised {type(exc).__name__}: {exc}\n{tb}"],
            "facts": facts,
        }
    errors = _tool_errors(env, spec)
    facts["max_turns"] = int(getattr(env, "max_turns", 0))
    try:
        dataset = env.get_dataset()
    except Exception as exc:
        return {"errors": [*errors, f"env.get_dataset() raised {type(exc).__name__}: {exc}"], "facts": facts}
    facts["dataset_size"] = len(dataset)
    errors += _dataset_errors(dataset)
    funcs = user_reward_funcs(env)
    facts["rubric"] = [[getattr(f, "__name__", "?"), w] for f, w in funcs]
    if not funcs:
        errors.append("the rubric has no reward function with a non-zero weight")
    if errors:
        return {"errors": errors[:MAX_ERRORS], "facts": facts}
    parser = getattr(env, "parser", None)
    scores: dict[str, list[float]] = {}
    for label, case in _rubric_cases(spec, dataset):
        msgs = {"prompt": to_vf_messages(case["prompt"]), "completion": to_vf_messages(case["completion"])}
        for func, _ in funcs:
            name = getattr(func, "__name__", "reward")
            try:
                value = call_reward(
                    func,
                    **msgs,
                    answer=case["answer"],
                    info=case["info"],
                    task="default",
                    state={**case, **msgs},
                    parser=parser,
                )
                scores.setdefault(name, []).append(value)
            except Exception as exc:
                errors.append(f"rubric function {name} raised {type(exc).__name__}: {exc} on {label}")
        if len(errors) >= MAX_ERRORS:
            break
    facts["rubric_scores"] = scores
    return {"errors": errors[:MAX_ERRORS], "facts": facts}
